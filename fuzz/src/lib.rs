//! The properties every normafs parser must keep on hostile input, shared by the cargo-fuzz
//! targets (`fuzz/fuzz_targets/*.rs`, one per function here) and the proptest cases of
//! `tests/hostile.rs`, which includes this file as a module.
//!
//! Each function takes raw bytes, must never panic, hang or allocate without bound, and panics
//! (an `assert!`) when a property does not hold: that is a crash for libFuzzer and a failure for
//! proptest. The `*_split` forms take their inputs separately for proptest; the byte forms decode
//! them from the fuzzer's bytes.

use std::time::{Duration, SystemTime};

use normafs::format::loader::{Parser, Transcript};
use normafs::format::transcript::parse_line;
use normafs::format::{archive, memory, state};
use normafs::noa::compress;
use normafs::store::ctl::{self, Command, Scope};
use normafs::store::journal;

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

/// The transcript the state property runs the core on: messages `u1`…`u8` (a hostile state
/// can name them), with a Compress call and its result.
pub const CORE_TRANSCRIPT: &str = concat!(
    r#"{"uuid":"u1","type":"message","timestamp":"2026-11-30T10:00:01Z","message":{"role":"user","content":[{"type":"text","text":"first question about the build, long enough to count"}]}}"#,
    "\n",
    r#"{"uuid":"u2","parent_uuid":"u1","type":"message","timestamp":"2026-11-30T10:00:02Z","message":{"role":"assistant","content":[{"type":"text","text":"an answer with some words in it"},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"build.rs"}}]}}"#,
    "\n",
    r#"{"uuid":"u3","parent_uuid":"u2","type":"message","timestamp":"2026-11-30T10:00:03Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"fn main() {}"}]}}"#,
    "\n",
    r#"{"uuid":"u4","parent_uuid":"u3","type":"message","timestamp":"2026-11-30T10:00:04Z","message":{"role":"assistant","content":[{"type":"text","text":"the file is empty; more words here"}]}}"#,
    "\n",
    r#"{"uuid":"u5","parent_uuid":"u4","type":"message","timestamp":"2026-11-30T10:00:05Z","message":{"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"Compress","input":{"ranges":[{"start":"m0001","end":"m0003","summary":"the build question and the file read"}]}}]}}"#,
    "\n",
    r#"{"uuid":"u6","parent_uuid":"u5","type":"message","timestamp":"2026-11-30T10:00:06Z","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"ok"}]}}"#,
    "\n",
    r#"{"uuid":"u7","parent_uuid":"u6","type":"message","timestamp":"2026-11-30T10:00:07Z","message":{"role":"user","content":[{"type":"text","text":"thanks, next the tests please"}]}}"#,
    "\n",
    r#"{"uuid":"u8","parent_uuid":"u7","type":"message","timestamp":"2026-11-30T10:00:08Z","message":{"role":"assistant","content":[{"type":"text","text":"running the tests now"}]}}"#,
    "\n",
);

/// `parse_state` never panics; a parsed state written the way normafs writes it
/// (`to_pretty`) parses back to an equal state; and the core never panics on it (see
/// [`core_on_state`]).
pub fn state(data: &[u8]) {
    if let Ok(s) = state::parse_state(data) {
        let text = s.to_pretty();
        let back = state::parse_state(text.as_bytes());
        assert_eq!(back.as_ref().ok(), Some(&s), "{text}");
        core_on_state(&s);
    }
}

/// The view, `view.md`, the status, a compress of the first refs and of the state's own refs
/// (strict and replayed), and a journal roll-forward, against [`CORE_TRANSCRIPT`] and a state
/// that may be hostile: none panics, and every archive a compress would write stays in its
/// tier directory (`tier<N>/<one file name>`).
pub fn core_on_state(s: &state::State) {
    let t = Transcript::parse(CORE_TRANSCRIPT.as_bytes(), Some("s"));
    let msgs = normafs::store::session::msgs(&t);
    let cfg = normafs::config::NoaConfig {
        protect_recent_messages: 1,
        protect_recent_tokens: 0,
        min_summary_chars: 1,
        ..Default::default()
    };
    let view = normafs::noa::view::project(&msgs, s, &cfg);
    let _ = view.to_jsonl();
    let _ = view.to_markdown();
    let usage = normafs::format::transcript::Usage::default();
    let inputs = normafs::noa::status::StatusInputs {
        session: "s",
        usage: &usage,
        subagents: &[],
        problems: (0, 0, 0),
        state_error: None,
    };
    let _ = normafs::noa::status::status(&view, &cfg, &inputs);
    let mut refs: Vec<String> = vec!["m0001".into(), "m0004".into()];
    refs.extend(s.message_refs.by_raw.values().take(4).cloned());
    refs.extend(s.blocks.iter().take(2).map(|b| b.start_ref.clone()));
    for start in &refs {
        for end in &refs {
            let input = serde_json::json!({"ranges": [
                {"start": start, "end": end, "summary": "s"}
            ]});
            let Ok(batch) = compress::parse_batch(&input) else {
                continue;
            };
            for strict in [true, false] {
                let ctx = compress::Ctx {
                    msgs: &msgs,
                    state: s,
                    cfg: &cfg,
                    strict,
                    call_id: "ctl-x",
                    now: "2026-11-30T12:00:00Z",
                    session: "s",
                    archive_root: "/r/noa/s",
                };
                let Ok(planned) = compress::plan(&ctx, &batch) else {
                    continue;
                };
                for p in &planned.blocks {
                    let rel = &p.block.archive_rel;
                    let parts: Vec<&str> = rel.split('/').collect();
                    assert!(
                        parts.len() == 2
                            && parts.iter().all(|p| !p.is_empty() && *p != "..")
                            && !rel.contains('\0'),
                        "archive {rel:?} leaves its tier directory"
                    );
                    assert!(archive::parse(&p.archive).is_ok());
                }
            }
            let ev = normafs::noa::replay::Event {
                source: normafs::noa::replay::Source::Journal,
                at: "2026-11-30T12:00:00Z".into(),
                call_id: "ctl-y".into(),
                input,
            };
            let mut st = s.clone();
            let _ = normafs::noa::replay::apply(&mut st, &msgs, &ev, &cfg, "s", "/r/noa/s");
        }
    }
}

/// `archive::parse` never panics, and whatever parses renders to an archive that parses again
/// with a matching `body_sha256`. An archive that read cleanly (no warning, no `\r`) comes back
/// as the same document, its rendered body reads without a warning, and rendering it again
/// gives the same bytes. (A damaged archive is read as best as possible and a `\r` inside a
/// header value or heading is written as a space, documented limits of the text form: for
/// those only the first part holds.)
pub fn archive(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(parsed) = archive::parse(text) else {
        return;
    };
    let rendered = archive::render(&parsed.doc);
    let back = archive::parse(&rendered);
    let Ok(back) = back else {
        panic!("render of a parsed archive does not parse: {back:?}\n{rendered}");
    };
    assert_eq!(back.sha_ok, Some(true), "{rendered}");
    if !parsed.warnings.is_empty() || text.contains('\r') {
        return;
    }
    // `render` writes the hash of the body it writes, whatever the doc held.
    let unhashed = |d: &archive::ArchiveDoc| {
        let mut d = d.clone();
        d.front.body_sha256 = None;
        d
    };
    assert_eq!(unhashed(&back.doc), unhashed(&parsed.doc), "{rendered}");
    // The frontmatter may warn again (a bad value of a known optional key is kept as an unknown
    // key and written back as it was); the body normafs wrote must not.
    let body_line = rendered
        .lines()
        .skip(1)
        .position(|l| l == "---")
        .map_or(0, |i| i + 3);
    assert!(
        back.warnings.iter().all(|w| w.line < body_line),
        "{:?}\n{rendered}",
        back.warnings
    );
    assert_eq!(archive::render(&back.doc), rendered);
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
    match c {
        Command::Compress(v) => format!("compress {v}"),
        Command::Rebuild => "rebuild".into(),
        Command::Help => "help".into(),
        Command::ReindexMemory => "reindex-memory".into(),
    }
}

/// Fuzz input: the command line (lossy UTF-8).
pub fn ctl(data: &[u8]) {
    ctl_line(&String::from_utf8_lossy(data));
}

/// `ctl::parse` never panics, in either scope; an accepted command written back as one line
/// parses to the same command; a compress command's input either parses as a batch or is
/// refused with an error.
pub fn ctl_line(line: &str) {
    for scope in [Scope::Session("s".into()), Scope::Root] {
        let Ok(cmd) = ctl::parse(line, &scope) else {
            continue;
        };
        let again = command_line(&cmd);
        assert!(!again.contains('\n'), "{again:?}");
        assert_eq!(ctl::parse(&again, &scope).as_ref(), Ok(&cmd), "{again:?}");
        if let Command::Compress(v) = &cmd {
            assert!(matches!(scope, Scope::Session(_)));
            if let Ok(batch) = compress::parse_batch(v) {
                assert!(!batch.ranges.is_empty());
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
