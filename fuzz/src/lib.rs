//! The properties every normafs parser must keep on hostile input, shared by the cargo-fuzz
//! targets (`fuzz/fuzz_targets/*.rs`, one per function here) and the proptest cases of
//! `tests/hostile.rs`, which includes this file as a module.
//!
//! Each function takes raw bytes, must never panic, hang or allocate without bound, and panics
//! (an `assert!`) when a property does not hold: that is a crash for libFuzzer and a failure for
//! proptest. The `*_split` forms take their inputs separately for proptest; the byte forms decode
//! them from the fuzzer's bytes.

use std::time::{Duration, SystemTime};

use normafs::config::NoaConfig;
use normafs::format::loader::{Parser, Transcript};
use normafs::format::transcript::parse_line;
use normafs::format::{archive, memory, state};
use normafs::noa::views::{self as view, Projection};
use normafs::noa::{args, assemble, compress, protect, rebuild, refs, render};
use normafs::store::ctl::{self, Command, Scope};
use normafs::store::{journal, session};

/// Split fuzzer bytes into a header of `n` bytes (`n` = the first byte modulo `max + 1`) and
/// the rest.
fn header(data: &[u8], max: usize) -> (&[u8], &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return (&[], &[]);
    };
    let n = usize::from(first) % (max + 1);
    rest.split_at(n.min(rest.len()))
}

/// Fuzz input: a header of chunk lengths (1..=256 each, cycled) and the transcript bytes.
pub fn transcript(data: &[u8]) {
    let (lens, file) = header(data, 8);
    let mut cuts = Vec::new();
    let mut at = 0usize;
    for &l in lens
        .iter()
        .cycle()
        .take(if lens.is_empty() { 0 } else { 64 })
    {
        at += usize::from(l) + 1;
        if at >= file.len() {
            break;
        }
        cuts.push(at);
    }
    transcript_split(file, &cuts);
}

/// `Transcript::parse` + `problems()` never panic; the problems are located inside the file and
/// sorted; feeding the same bytes in chunks cut at `cuts` (sorted offsets, any value) gives the
/// same transcript as one feed; every parsed record re-serializes to a line that parses back to
/// an equal record.
pub fn transcript_split(file: &[u8], cuts: &[usize]) {
    let whole = Transcript::parse(file, Some("s"));
    let problems = whole.problems();
    let lines = file.split(|&b| b == b'\n').count() as u64;
    let mut last = 0;
    for p in &problems {
        assert!(
            p.line >= 1 && p.line <= lines,
            "line {} of {lines}: {p:?}",
            p.line
        );
        assert!(p.offset <= file.len() as u64, "{p:?}");
        assert!(p.line >= last, "problems out of order: {problems:?}");
        last = p.line;
    }
    for l in &whole.records {
        assert!(l.offset < file.len() as u64 && l.line >= 1 && l.line <= lines);
        let line = l.record.to_line();
        assert!(!line.contains('\n'), "to_line is not one line: {line:?}");
        let back = parse_line(line.as_bytes());
        assert_eq!(back.as_ref().ok(), Some(&l.record), "{line}");
    }

    let mut parser = Parser::new(Some("s"));
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&file.len())) {
        let cut = cut.clamp(from, file.len());
        parser.feed(file.get(from..cut).unwrap_or_default());
        from = cut;
        assert_eq!(parser.fed_len(), from as u64);
    }
    let t = parser.transcript();
    assert_eq!(t.records, whole.records);
    assert_eq!(t.messages, whole.messages);
    assert_eq!(t.usage, whole.usage);
    assert_eq!(t.problems(), problems);
    let after_last_newline = file
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i as u64 + 1);
    assert_eq!(parser.committed_len(), after_last_newline);
}

/// The transcript the state property runs the core on, in the runtime's record shape: a
/// question, a Read call and its result, an answer with thinking, a Compress call and its
/// panel, and a follow-up. Its content ids are what a hostile state has to name (see
/// [`core_ids`]).
pub const CORE_TRANSCRIPT: &str = concat!(
    r#"{"uuid":"00000000000000000000000000000001","session_id":"s","timestamp":"2026-11-30T10:00:01Z","type":"message","message":{"role":"user","content":[{"type":"text","text":"first question about the build, long enough to count"}]}}"#,
    "\n",
    r#"{"uuid":"00000000000000000000000000000002","parent_uuid":"00000000000000000000000000000001","session_id":"s","timestamp":"2026-11-30T10:00:02Z","type":"message","message":{"role":"assistant","content":[{"type":"text","text":"an answer with some words in it"},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"build.rs"}}]}}"#,
    "\n",
    r#"{"uuid":"00000000000000000000000000000003","parent_uuid":"00000000000000000000000000000002","session_id":"s","timestamp":"2026-11-30T10:00:03Z","type":"message","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"fn main() {}"}]}]}}"#,
    "\n",
    r#"{"uuid":"00000000000000000000000000000004","parent_uuid":"00000000000000000000000000000003","session_id":"s","timestamp":"2026-11-30T10:00:04Z","type":"message","message":{"role":"assistant","content":[{"type":"thinking","thinking":"the file is empty","signature":"c2ln"},{"type":"text","text":"the file is empty; more words here"}]}}"#,
    "\n",
    r#"{"uuid":"00000000000000000000000000000005","parent_uuid":"00000000000000000000000000000004","session_id":"s","timestamp":"2026-11-30T10:00:05Z","type":"message","message":{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"Compress","input":{"content":[{"startId":"m00001","endId":"m00003","summary":"the build question and the file read"}]}}]}}"#,
    "\n",
    r#"{"uuid":"00000000000000000000000000000006","parent_uuid":"00000000000000000000000000000005","session_id":"s","timestamp":"2026-11-30T10:00:06Z","type":"message","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"text","text":"▣ noa | 40 → 20 tokens (~20 reclaimed)\n  b1(T1)=m00001–m00003 → /r/noa/s/tier1/b1_m00001-m00003.md"}]}]}}"#,
    "\n",
    r#"{"uuid":"00000000000000000000000000000007","parent_uuid":"00000000000000000000000000000006","session_id":"s","timestamp":"2026-11-30T10:00:07Z","type":"message","message":{"role":"user","content":[{"type":"text","text":"thanks, next the tests please"}]}}"#,
    "\n",
    r#"{"uuid":"00000000000000000000000000000008","parent_uuid":"00000000000000000000000000000007","session_id":"s","timestamp":"2026-11-30T10:00:08Z","type":"message","message":{"role":"assistant","content":[{"type":"text","text":"running the tests now"}]}}"#,
    "\n",
);

/// The content ids of [`CORE_TRANSCRIPT`], in projection order.
pub fn core_ids() -> Vec<String> {
    let t = Transcript::parse(CORE_TRANSCRIPT.as_bytes(), Some("s"));
    let p = Projection::new(session::messages(&t));
    p.cores.iter().map(|c| c.id.to_string()).collect()
}

/// `parse_state` never panics; a parsed state written as normafs writes it (`to_json`, the
/// runtime's bytes) parses back to an equal state and is written again as the same bytes;
/// and the core never panics on it (see [`core_on_state`]).
pub fn state(data: &[u8]) {
    if let Ok(s) = state::parse_state(data) {
        let text = s.to_json();
        let back = state::parse_state(text.as_bytes());
        assert_eq!(back.as_ref().ok(), Some(&s), "{text}");
        if let Ok(b) = &back {
            assert_eq!(b.to_json(), text);
        }
        core_on_state(&s);
    }
}

/// The view, `view.md`, the materialized history, `status.json`, raw ranges, Compress batches
/// over the first refs, the state's own refs and its blocks (as ctl runs them), a rebuild with
/// one of them as a journal batch, and inheritance, against [`CORE_TRANSCRIPT`] and a state
/// that may be hostile: none panics, and every archive a batch would write stays in its tier
/// directory (`tier<N>/<one file name>`) and reads back.
pub fn core_on_state(s: &state::State) {
    let t = Transcript::parse(CORE_TRANSCRIPT.as_bytes(), Some("s"));
    let p = Projection::new(session::messages(&t));
    let cfg = NoaConfig {
        window: 200,
        protect_recent_messages: 1,
        protect_recent_tokens: 0,
        min_summary_chars: 1,
        min_range_chars: 0,
        ..Default::default()
    };
    let path = &view::runtime_path;
    let _ = view::Files::new(&p, s, &cfg, "s", path).view().to_jsonl();
    let _ = view::Files::new(&p, s, &cfg, "s", path)
        .materialized()
        .to_jsonl();
    let turn = view::turn(&p, s, &cfg, path);
    let shown = assemble::assemble(&turn, &p.msgs, s, true);
    let _ = render::markdown(&shown, &turn, s, &cfg, "s", &render::Places::Relative);
    let mount = render::Places::Mount {
        mnt: std::path::Path::new("/mnt"),
        archive: path,
    };
    let _ = render::markdown(&shown, &turn, s, &cfg, "s", &mount);
    let usage = normafs::format::transcript::Usage::default();
    let inputs = render::StatusInputs {
        session: "s",
        usage: &usage,
        subagents: &[],
        problems: (0, 0, 0),
        state_error: None,
        idle_seconds: None,
        inherited_from: None,
        settings: cfg.describe(),
        window_assumed: None,
    };
    let _ = render::status(&turn, s, &cfg, &inputs);
    let _ = turn.ledger(s, &shown.tagged).to_json();
    let (slots, _) = refs::assign(&p.cores, s, |c| protect::is_hard(c, &cfg));
    for (a, b) in [(1, 3), (3, 1), (1, 99_999), (0, u32::MAX)] {
        let _ = render::raw_range(&p, &slots, a, b);
    }
    let mut ends: Vec<String> = vec!["m00001".into(), "m00004".into(), "b1".into()];
    ends.extend(s.message_refs.by_raw.values().take(4).cloned());
    ends.extend(s.blocks().iter().take(2).map(|b| b.start_ref.clone()));
    ends.extend(s.blocks().iter().take(2).map(|b| b.block_id.clone()));
    let place = compress::Placement::new("/r/noa/s", "s", "2026-11-30T12:00:00Z", 1_796_040_000);
    let mut journal = Vec::new();
    for start in &ends {
        for end in &ends {
            let input = serde_json::json!({"content": [
                {"startId": start, "endId": end, "summary": "the range, summarized"}
            ]})
            .to_string();
            let parsed = args::parse(&input);
            let applied = rebuild::ctl_apply(&p, s, &cfg, &parsed.ranges, "ctl-x", &place, path);
            let _ = compress::panel(&applied, turn.measure);
            for (b, a) in applied.created.iter().zip(&applied.archives) {
                let rel = &b.archive_rel;
                let parts: Vec<&str> = rel.split('/').collect();
                assert!(
                    parts.len() == 2
                        && parts
                            .iter()
                            .all(|p| !p.is_empty() && *p != ".." && *p != ".")
                        && !rel.contains('\0'),
                    "archive {rel:?} leaves its tier directory"
                );
                let text = archive::render(a, archive::Labels::Chinese);
                assert!(archive::parse(&text).is_ok(), "{text}");
            }
            if applied.whole() && journal.is_empty() {
                journal.push(rebuild::JournalBatch {
                    prefix: p.cores.len(),
                    input,
                    call: "ctl-x".into(),
                });
            }
        }
    }
    let _ = rebuild::Replay::new(&p, &cfg, &place, &journal, path).rebuild();
    let _ = render::inherit(
        state::State::initial("child"),
        "child",
        &["s".into()],
        &|_| Some(s.clone()),
    );
}

/// Fuzz input: the text of an archive (lossy UTF-8), then, after a `0xFF` byte, entries for
/// a round trip ([`archive_round_trip`]).
pub fn archive(data: &[u8]) {
    let (text, rest) = match data.iter().position(|&b| b == 0xFF) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    archive_text(&String::from_utf8_lossy(text));
    let mut parts = rest.split(|&b| b == 0xFE);
    let summary = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let entries: Vec<(u8, String)> = parts
        .map(|p| match p.split_first() {
            Some((&k, body)) => (k, String::from_utf8_lossy(body).into_owned()),
            None => (0, String::new()),
        })
        .collect();
    archive_round_trip(&summary, &entries);
}

/// `archive::parse` never panics; what it reads is located inside the text: headings in
/// increasing lines within the file; a verdict on `body_sha256` exactly when the key is
/// there.
pub fn archive_text(text: &str) {
    let Ok(p) = archive::parse(text) else {
        return;
    };
    let lines = text.split('\n').count();
    let mut last = 0;
    for h in &p.headings {
        assert!(h.line > last && h.line <= lines, "{h:?} of {lines} lines");
        assert!(h.level == 2 || h.level == 3, "{h:?}");
        last = h.line;
    }
    assert_eq!(
        p.body_sha256_ok.is_some(),
        p.frontmatter.body_sha256.is_some()
    );
}

/// An archive rendered from entries (`kind` picks text, thinking, tool_use, tool_result or
/// an absorbed block; any body) reads back: its frontmatter, its body hash, one heading per
/// entry with the entry's ref, kind and tool, its summary. Text and thinking bodies are
/// written unfenced, so a line in them shaped exactly like a heading would read as one (a
/// documented limit of the format): `·` is kept out of those bodies.
pub fn archive_round_trip(summary: &str, entries: &[(u8, String)]) {
    let plain = |s: &str| s.replace('·', ".");
    let mut out = Vec::new();
    for (i, (k, body)) in entries.iter().take(64).enumerate() {
        let reference = (k & 0x80 == 0).then(|| format!("m{:05}", i + 1));
        let message = |role: &str, kind, tool: &str, text: String| {
            archive::Entry::Message(archive::MessageEntry {
                reference: reference.clone(),
                role: role.to_string(),
                kind,
                tool: tool.to_string(),
                text,
            })
        };
        out.push(match k % 5 {
            0 => message("user", archive::MessageKind::Text, "", plain(body)),
            1 => message("assistant", archive::MessageKind::Thinking, "", plain(body)),
            2 => message(
                "assistant",
                archive::MessageKind::ToolUse,
                "Bash",
                body.clone(),
            ),
            3 => message("tool", archive::MessageKind::ToolResult, "", body.clone()),
            _ => archive::Entry::Block(archive::BlockEntry {
                block_id: format!("b{}", i + 1),
                tier: 1,
                start_ref: "m00001".into(),
                end_ref: "m00002".into(),
                topic: String::new(),
                summary: plain(body),
                archive_rel: format!("tier1/b{}_m00001-m00002.md", i + 1),
                archive_path: String::new(),
            }),
        });
    }
    let absorbed = out.iter().any(|e| matches!(e, archive::Entry::Block(_)));
    let a = archive::Archive {
        block_id: "b99".into(),
        tier: if absorbed { 2 } else { 1 },
        session: "s".into(),
        created: "2026-11-30T12:00:00Z".into(),
        start_ref: "m00001".into(),
        end_ref: format!("m{:05}", out.len().max(1)),
        topic: "a topic".into(),
        summary: plain(summary),
        original_tokens: 7,
        entries: out,
        call: Some("ctl-1".into()),
        with_body_sha256: true,
    };
    let text = archive::render(&a, archive::Labels::Chinese);
    let p = archive::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(p.body_sha256_ok, Some(true), "{text}");
    let f = &p.frontmatter;
    assert_eq!(f.block, "b99");
    assert_eq!(f.tier, Some(a.tier));
    assert_eq!(f.range, Some((a.start_ref.clone(), a.end_ref.clone())));
    assert_eq!(f.call.as_deref(), Some("ctl-1"));
    assert_eq!(p.headings.len(), a.entries.len(), "{text}");
    for (h, e) in p.headings.iter().zip(&a.entries) {
        match (e, &h.kind) {
            (
                archive::Entry::Message(m),
                archive::HeadingKind::Message {
                    reference, kind, ..
                },
            ) => {
                assert_eq!(reference, &m.reference, "{text}");
                assert_eq!(*kind, m.kind, "{text}");
            }
            (archive::Entry::Block(b), archive::HeadingKind::Block { block_id, .. }) => {
                assert_eq!(block_id, &b.block_id, "{text}");
            }
            _ => panic!("entry and heading differ: {e:?} {h:?}\n{text}"),
        }
    }
    let trimmed = a.summary.trim();
    if !trimmed.contains('\r') {
        assert_eq!(
            p.summary.as_deref(),
            (!trimmed.is_empty()).then_some(trimmed),
            "{text}"
        );
    }
}

/// Fuzz input: a header holding the file name (`<header>.md`, lossy UTF-8), then the file.
pub fn memory(data: &[u8]) {
    let (name, file) = header(data, 16);
    let name = format!("{}.md", String::from_utf8_lossy(name));
    memory_split(&name, &String::from_utf8_lossy(file));
}

/// `memory::parse` never panics; a memory rendered and parsed again is well-formed and keeps
/// its name, description, type, content (as the runtime reads them back) and writable extra
/// keys; rendering is stable from the second round on; the index line is a single line unless
/// the file name is not.
pub fn memory_split(file_name: &str, text: &str) {
    let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    let m = memory::parse(file_name, text, mtime);
    let rendered = memory::render(&m);
    let back = memory::parse(file_name, &rendered, mtime);
    assert_eq!(back.irregularities, vec![], "{rendered:?}");
    // Header values are single lines: line breaks inside them become spaces when written.
    let flat = |s: &str| {
        s.replace("\r\n", " ")
            .replace(['\r', '\n'], " ")
            .trim()
            .to_string()
    };
    let name = Some(flat(&m.name))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| back.stem().to_string());
    assert_eq!(back.name, name, "{rendered:?}");
    assert_eq!(back.description, flat(&m.description), "{rendered:?}");
    assert_eq!(
        back.kind,
        m.kind.as_deref().map(flat).filter(|k| !k.is_empty()),
        "{rendered:?}"
    );
    let content = format!("{}\n", m.content.trim_end_matches('\n'));
    assert_eq!(
        back.content,
        content.trim_start_matches(['\r', '\n']),
        "{rendered:?}"
    );
    let extra: Vec<(String, String)> = m
        .extra
        .iter()
        .filter(|(k, _)| !k.starts_with("---"))
        .map(|(k, v)| (k.clone(), flat(v)))
        .collect();
    assert_eq!(back.extra, extra, "{rendered:?}");
    // Values are written as they are and read back trimmed (as the runtime does), so the
    // rendering is stable from the second round on.
    let again = memory::render(&back);
    assert_eq!(
        memory::render(&memory::parse(file_name, &again, mtime)),
        again
    );
    // A name read from the frontmatter is one line; one taken from the file stem is the stem,
    // line breaks included, as the runtime writes it.
    assert!(
        !memory::index_line(&back).contains('\n') || file_name.contains('\n'),
        "{rendered:?}"
    );
    let _ = memory::slug(&m.name);
    let scan = memory::MemoryScan {
        memories: vec![m, back],
        problems: Vec::new(),
    };
    let _ = memory::check(&scan);
    let _ = memory::render_index(&scan.memories);
}

/// The line a command is written as, for the round trip.
pub fn command_line(c: &Command) -> String {
    let bang = |forced: bool| if forced { "!" } else { "" };
    match c {
        Command::Compress(v, forced) => format!("compress{} {v}", bang(*forced)),
        Command::Rebuild(forced) => format!("rebuild{}", bang(*forced)),
        Command::Help => "help".into(),
        Command::ReindexMemory => "reindex-memory".into(),
    }
}

/// Fuzz input: command lines (lossy UTF-8; a write is split at newlines, as ctl splits it).
pub fn ctl(data: &[u8]) {
    for line in String::from_utf8_lossy(data).split('\n') {
        ctl_line(line);
    }
}

/// `ctl::parse` never panics, in either scope; an accepted command written back as one line
/// parses to the same command; a compress command's input is read as the runtime reads a
/// Compress input (never panics): ranges, or an error that says why.
pub fn ctl_line(line: &str) {
    for scope in [Scope::Session("s".into()), Scope::Root] {
        let Ok(cmd) = ctl::parse(line, &scope) else {
            continue;
        };
        let again = command_line(&cmd);
        assert!(!again.contains('\n'), "{again:?}");
        assert_eq!(ctl::parse(&again, &scope).as_ref(), Ok(&cmd), "{again:?}");
        if let Command::Compress(v, _) = &cmd {
            assert!(matches!(scope, Scope::Session(_)));
            let parsed = args::parse(v);
            if parsed.ranges.is_empty() && !parsed.ok {
                assert!(!parsed.error_message().is_empty(), "{v}");
            }
        }
    }
}

/// `journal::parse` never panics; entries and malformed lines have increasing line numbers; a
/// torn tail starts at a line start; the entries written back as lines read back equal.
pub fn journal(data: &[u8]) {
    let read = journal::parse(data);
    let mut numbers: Vec<u64> = read.entries.iter().map(|(n, _)| *n).collect();
    numbers.extend(read.malformed.iter().map(|(n, _)| *n));
    numbers.sort_unstable();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    if let Some(off) = read.torn_tail {
        let off = usize::try_from(off).unwrap_or(usize::MAX);
        assert!(off < data.len(), "torn tail at {off} of {}", data.len());
        assert!(off == 0 || data.get(off - 1) == Some(&b'\n'));
        assert!(!data[off..].contains(&b'\n'));
    }
    let mut again = Vec::new();
    for (_, e) in &read.entries {
        let line = serde_json::to_vec(e).unwrap_or_default();
        assert!(!line.contains(&b'\n'));
        again.extend_from_slice(&line);
        again.push(b'\n');
    }
    let back = journal::parse(&again);
    let entries: Vec<_> = back.entries.into_iter().map(|(_, e)| e).collect();
    let want: Vec<_> = read.entries.iter().map(|(_, e)| e.clone()).collect();
    assert_eq!(entries, want);
    assert!(back.malformed.is_empty() && back.torn_tail.is_none());
}
