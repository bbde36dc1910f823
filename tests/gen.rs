//! The synthetic root generator: determinism; clean roots in the runtime's dialect whose files
//! round-trip (transcripts parse without a problem, states and archives re-render to their
//! bytes) and whose states a rebuild from history reproduces; `--corrupt` roots that carry
//! every SPEC 9 damage.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;

use normafs::audit::CATALOGUE;
use normafs::format::archive;
use normafs::format::loader::Transcript;
use normafs::format::memory;
use normafs::format::state::{parse_state, State, StateLoadError};
use normafs::format::transcript::{parse_line, Content, Record};
use normafs::gen::{generate, GenError, GenOptions, GenReport};
use normafs::noa::compress::Placement;
use normafs::noa::{rebuild, views};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn opts(sessions: usize, messages: usize, seed: u64) -> GenOptions {
    GenOptions {
        sessions,
        messages,
        seed,
        max_result_bytes: 20_000,
        ..GenOptions::default()
    }
}

fn gen(root: &Path, o: &GenOptions) -> GenReport {
    generate(root, o, &mut |_, _| {}).expect("generate")
}

/// Every file (relative path -> SHA-256) and every directory (-> `None`) under `dir`.
fn snapshot(dir: &Path) -> BTreeMap<String, Option<(u64, Vec<u8>)>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Option<(u64, Vec<u8>)>>) {
        for e in std::fs::read_dir(dir).expect("read_dir") {
            let p = e.expect("entry").path();
            let rel = p
                .strip_prefix(base)
                .expect("prefix")
                .to_string_lossy()
                .into_owned();
            if p.is_dir() {
                out.insert(rel, None);
                walk(base, &p, out);
            } else {
                let bytes = std::fs::read(&p).expect("read");
                out.insert(
                    rel,
                    Some((bytes.len() as u64, Sha256::digest(&bytes).to_vec())),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Parse a transcript strictly: every line must be a record, the file must end in a newline.
fn records(path: &Path) -> Vec<Record> {
    let bytes = std::fs::read(path).expect("transcript");
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "{} does not end with a newline",
        path.display()
    );
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(i, l)| parse_line(l).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1)))
        .collect()
}

/// Go's `time.RFC3339Nano` in UTC: seconds, then a fraction without trailing zeros, then `Z`.
fn is_go_time(s: &str) -> bool {
    let Some(body) = s.strip_suffix('Z') else {
        return false;
    };
    let (secs, frac) = match body.split_once('.') {
        Some((a, f)) => (a, Some(f)),
        None => (body, None),
    };
    let shape_ok = secs.len() == 19
        && chrono::NaiveDateTime::parse_from_str(secs, "%Y-%m-%dT%H:%M:%S").is_ok();
    let frac_ok = frac.is_none_or(|f| {
        !f.is_empty() && f.len() <= 9 && f.bytes().all(|b| b.is_ascii_digit()) && !f.ends_with('0')
    });
    shape_ok && frac_ok
}

fn nanos(ts: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(ts)
        .expect("rfc3339")
        .timestamp_nanos_opt()
        .expect("in range")
}

/// The runtime's record: keys in its struct's order, each present as SPEC 2.1 says.
fn check_line_keys(line: &[u8], at: &str) {
    let v: Value = serde_json::from_slice(line).expect("json");
    let keys: Vec<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let order = [
        "uuid",
        "parent_uuid",
        "session_id",
        "agent_id",
        "is_sidechain",
        "timestamp",
        "type",
        "message",
        "usage",
    ];
    let mut last = 0;
    for k in &keys {
        let i = order
            .iter()
            .position(|o| o == k)
            .unwrap_or_else(|| panic!("{at}: unexpected key {k}"));
        assert!(i >= last, "{at}: key {k} out of order in {keys:?}");
        last = i;
    }
    assert_eq!(v["type"], "message", "{at}");
    let role = v["message"]["role"].as_str().expect("role");
    if role == "assistant" {
        let u = v["usage"].as_object().expect("usage on an assistant turn");
        let names: Vec<&str> = u.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens"
            ],
            "{at}"
        );
    } else {
        assert!(v.get("usage").is_none(), "{at}: usage on a {role} record");
    }
}

/// A transcript as the runtime writes it: chained records of one writer in time order, no
/// problem for the loader, every tool call answered by an array of text blocks, and the file's
/// modification time at its last record.
fn check_transcript(path: &Path, sid: &str, agent: Option<&str>) -> Vec<Record> {
    let bytes = std::fs::read(path).expect("transcript");
    let problems = Transcript::parse(&bytes, Some(sid)).problems();
    assert!(problems.is_empty(), "{}: {problems:?}", path.display());
    for (i, l) in bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        check_line_keys(l, &format!("{}:{}", path.display(), i + 1));
    }
    let recs = records(path);
    let mut prev: Option<&Record> = None;
    let mut uses: HashSet<String> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    for r in &recs {
        let at = format!("{} record {}", path.display(), r.uuid);
        assert_eq!(r.uuid.len(), 32, "{at}");
        assert!(
            r.uuid
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "{at}"
        );
        assert_eq!(
            r.parent_uuid.as_deref(),
            prev.map(|p| p.uuid.as_str()),
            "{at}"
        );
        assert_eq!(r.session_id.as_deref(), Some(sid), "{at}");
        assert_eq!(r.agent_id.as_deref(), agent, "{at}");
        assert_eq!(r.is_sidechain, agent.map(|_| true), "{at}");
        let ts = r.timestamp.as_deref().expect("timestamp");
        assert!(is_go_time(ts), "{at}: {ts}");
        if let Some(p) = prev {
            assert!(
                nanos(ts) > nanos(p.timestamp.as_deref().expect("ts")),
                "{at}: time does not increase"
            );
        }
        let m = r.as_message().expect("a message record");
        for c in &m.content {
            match c {
                Content::ToolUse(u) => {
                    assert_eq!(m.role, "assistant", "{at}");
                    assert!(
                        u.name
                            .chars()
                            .next()
                            .is_some_and(|c| c.is_ascii_uppercase()),
                        "{at}"
                    );
                    uses.insert(u.id.clone());
                }
                Content::ToolResult(res) => {
                    assert_eq!(m.role, "user", "{at}");
                    assert!(
                        matches!(
                            res.content,
                            Some(normafs::format::transcript::ToolResultContent::Items(_))
                        ),
                        "{at}: a result's content is an array"
                    );
                    answered.insert(res.tool_use_id.clone());
                }
                Content::Thinking(t) => {
                    assert!(t.signature.as_ref().is_some_and(|s| !s.is_empty()), "{at}")
                }
                Content::CompactBoundary(_) => assert_eq!(m.content.len(), 1, "{at}"),
                Content::Text(_) => {}
                Content::Other(v) => panic!("{at}: an unknown block {v}"),
            }
        }
        prev = Some(r);
    }
    assert_eq!(uses, answered, "{}: calls and results", path.display());
    if let Some(last) = recs.last() {
        let mtime: chrono::DateTime<chrono::Utc> = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .expect("mtime")
            .into();
        assert_eq!(
            mtime.timestamp_nanos_opt(),
            Some(nanos(last.timestamp.as_deref().expect("ts"))),
            "{}: mtime",
            path.display()
        );
    }
    recs
}

/// A block's archive as the runtime wrote it: its frontmatter names the block, its entries
/// are as many as the frontmatter says, and it has no normafs keys.
fn check_archive(sid: &str, text: &str, b: &normafs::format::state::Block) {
    let p = archive::parse(text).unwrap_or_else(|e| panic!("{sid} {}: {e}", b.block_id));
    let f = &p.frontmatter;
    assert_eq!(f.block, b.block_id, "{sid}");
    assert_eq!(f.tier, Some(b.tier), "{sid}");
    assert_eq!(
        f.range,
        Some((b.start_ref.clone(), b.end_ref.clone())),
        "{sid}"
    );
    assert_eq!(f.session.as_deref(), Some(sid));
    assert_eq!(f.original_tokens, Some(b.compressed_tokens), "{sid}");
    assert_eq!(f.call, None, "{sid}: the runtime writes no call key");
    assert_eq!(
        p.body_sha256_ok, None,
        "{sid}: the runtime writes no body_sha256"
    );
    if b.direct_block_ids.is_empty() {
        assert_eq!(f.consumed_blocks, None, "{sid}");
    } else {
        // In view order, which need not be the order of `directBlockIds`.
        let listed: BTreeSet<&String> = f.consumed_blocks.iter().flatten().collect();
        let absorbed: BTreeSet<&String> = b.direct_block_ids.iter().collect();
        assert_eq!(listed, absorbed, "{sid}");
    }
    assert_eq!(
        p.summary.as_deref().map(str::trim),
        Some(b.summary.trim()),
        "{sid}"
    );
}

/// A clean session: its files are consistent, and a rebuild from the transcript's Compress
/// calls gives back exactly the state and archives written.
fn check_clean_session(root: &Path, sid: &str, o: &GenOptions) -> Option<State> {
    let tpath = root.join(format!("transcripts/{sid}.jsonl"));
    let recs = check_transcript(&tpath, sid, None);
    assert_eq!(recs.len(), o.messages, "{sid}: message count");
    if let Some(last) = recs.last().and_then(|r| r.as_message()) {
        assert!(
            last.role == "assistant" || o.messages < 2,
            "{sid}: the last turn is not an answer"
        );
    }
    let side_dir = root.join(format!("transcripts/{sid}/subagents"));
    if side_dir.exists() {
        for e in std::fs::read_dir(&side_dir).expect("subagents") {
            let p = e.expect("entry").path();
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            let aid = name
                .strip_prefix("agent-")
                .and_then(|n| n.strip_suffix(".jsonl"))
                .expect("agent-<aid>.jsonl");
            let side = check_transcript(&p, sid, Some(aid));
            assert!(side.len() >= 4, "{}", p.display());
        }
    }

    let cfg = &o.config;
    let archive_root = root.join("noa").join(sid);
    let archive_root_s = archive_root.to_str().expect("utf8").to_string();
    let bytes = std::fs::read(&tpath).expect("transcript");
    let t = Transcript::parse(&bytes, Some(sid));
    let p = views::Projection::new(t.iter_messages().map(|(_, m)| m).collect());
    let place = Placement::new(&archive_root_s, sid, "2027-01-01T00:00:00Z", 1_798_761_600);
    let r = rebuild::Replay::new(&p, cfg, &place, &[], &views::runtime_path).rebuild();
    for why in &r.skipped {
        assert!(
            why.ends_with("its result reports no block"),
            "{sid}: a call that does not replay: {why}"
        );
    }

    let state_path = archive_root.join("state.json");
    if !state_path.exists() {
        assert!(
            r.state.blocks().is_empty(),
            "{sid}: blocks but no state.json"
        );
        assert!(!archive_root.exists(), "{sid}: a noa dir without state");
        return None;
    }
    let text = std::fs::read_to_string(&state_path).expect("state");
    let written = parse_state(text.as_bytes()).expect("parse_state");
    assert_eq!(written.to_json(), text, "{sid}: state.json round-trips");
    assert_eq!(written.session_id, sid);
    assert!(written.unknown_keys().is_empty());
    assert!(
        !written.blocks().is_empty(),
        "{sid}: a state.json without blocks"
    );
    let mut files: BTreeSet<String> = BTreeSet::new();
    for e in walk_files(&archive_root) {
        files.insert(e);
    }
    files.remove("state.json");
    for b in written.blocks() {
        let p = archive_root.join(&b.archive_rel);
        assert_eq!(b.archive_path, p.to_str().expect("utf8"), "{sid}");
        let text = std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{sid}: archive {}: {e}", p.display()));
        check_archive(sid, &text, b);
        assert!(files.remove(&b.archive_rel), "{sid}: {}", b.archive_rel);
    }
    assert!(files.is_empty(), "{sid}: files no block names: {files:?}");

    // The rebuild: the same state but for `createdAt` (a rebuild stamps its own time) ...
    let norm = |s: &State| {
        let mut s = s.clone();
        for b in s.blocks.iter_mut().flatten() {
            b.created_at = 0;
        }
        s.to_json()
    };
    assert_eq!(norm(&r.state), norm(&written), "{sid}: the rebuilt state");
    // ... and the same archives but for `created`.
    for a in &r.archives {
        let b = written
            .blocks()
            .iter()
            .find(|b| b.block_id == a.block_id)
            .expect("block");
        let on_disk = std::fs::read_to_string(archive_root.join(&b.archive_rel)).expect("read");
        let created = archive::parse(&on_disk)
            .expect("parse")
            .frontmatter
            .created
            .expect("created");
        let mut plain = a.clone();
        plain.call = None;
        plain.with_body_sha256 = false;
        plain.created = created;
        assert_eq!(
            archive::render(&plain, archive::Labels::Chinese),
            on_disk,
            "{sid}: the rebuilt archive of {}",
            a.block_id
        );
    }
    Some(written)
}

/// Files under `dir`, relative to it.
fn walk_files(dir: &Path) -> Vec<String> {
    snapshot(dir)
        .into_iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k)
        .collect()
}

/// Clean memories: the runtime's bytes, one Unicode-only name in `.md` (the only finding, a
/// hazard the runtime makes itself), and the index it writes.
fn check_memory(root: &Path, o: &GenOptions) {
    let dir = root.join("memory");
    let scan = memory::scan(&dir);
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    assert_eq!(scan.memories.len(), o.memories);
    for m in &scan.memories {
        let text = std::fs::read_to_string(dir.join(&m.file_name)).expect("read");
        assert_eq!(
            memory::render(m),
            text,
            "{}: the runtime's bytes",
            m.file_name
        );
    }
    let found: Vec<(String, String)> = memory::check(&scan)
        .into_iter()
        .map(|p| (p.kind.code().to_string(), p.file_name))
        .collect();
    if o.memories >= 4 {
        assert_eq!(
            found,
            [("memory.empty-slug".to_string(), ".md".to_string())]
        );
    } else {
        assert!(found.is_empty(), "{found:?}");
    }
    let index = std::fs::read_to_string(dir.join("MEMORY.md")).expect("MEMORY.md");
    assert_eq!(index, memory::render_index(&scan.memories));
    let types: BTreeSet<_> = scan
        .memories
        .iter()
        .filter_map(|m| m.kind.clone())
        .collect();
    if o.memories >= 4 {
        assert_eq!(types.len(), 4, "{types:?}");
    }
}

#[test]
fn same_options_give_byte_identical_trees() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    let o = GenOptions {
        corrupt: true,
        ..opts(3, 90, 7)
    };
    let first_report = gen(&root, &o);
    let first = snapshot(&root);
    std::fs::remove_dir_all(&root).expect("rm");
    let second_report = gen(&root, &o);
    let second = snapshot(&root);
    assert_eq!(first_report, second_report);
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        second.keys().collect::<Vec<_>>()
    );
    for (k, v) in &first {
        assert!(second.get(k) == Some(v), "{k} differs between runs");
    }

    let other = tmp.path().join("other");
    gen(&other, &opts(3, 90, 8));
    let a = std::fs::read(root.join("transcripts/s7-0001.jsonl")).expect("a");
    let b = std::fs::read(other.join("transcripts/s8-0001.jsonl")).expect("b");
    assert_ne!(a, b, "another seed gives the same transcript");
}

#[test]
fn a_clean_root_round_trips_and_rebuilds_to_the_state_written() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    let o = opts(8, 161, 3);
    let mut calls = Vec::new();
    let report = generate(&root, &o, &mut |d, t| calls.push((d, t))).expect("generate");
    assert_eq!(calls.first(), Some(&(0, 8)));
    assert_eq!(calls.last(), Some(&(8, 8)));
    assert_eq!(calls.len(), 9);

    assert_eq!(report.sessions, 8);
    assert_eq!(report.messages, 8 * 161);
    assert!(report.damages.is_empty());
    assert!(report.compress_calls > 0, "{report:?}");
    assert!(report.refused_calls > 0, "{report:?}");
    assert!(report.blocks > 0, "{report:?}");
    assert!(report.subagents > 0, "{report:?}");
    let on_disk: u64 = snapshot(&root)
        .values()
        .flatten()
        .map(|(len, _)| *len)
        .sum();
    assert_eq!(report.bytes, on_disk);
    let line = report.summary();
    assert!(
        line.starts_with("wrote 8 sessions (1288 messages,"),
        "{line}"
    );

    let sids: Vec<String> = (1..=8).map(|i| format!("s3-{i:04}")).collect();
    assert_eq!(report.clean_sessions, sids);
    let mut blocks = 0;
    for sid in &sids {
        if let Some(st) = check_clean_session(&root, sid, &o) {
            blocks += st.blocks().len();
        }
    }
    assert_eq!(blocks, report.blocks);
    check_memory(&root, &o);

    // The content has what the runtime writes: signed thinking, tool errors, refused
    // Compress calls and their panels, a compaction marker, non-ASCII text and Markdown.
    let all: String = sids
        .iter()
        .map(|s| std::fs::read_to_string(root.join(format!("transcripts/{s}.jsonl"))).expect("t"))
        .collect();
    for needle in [
        "\"signature\":",
        "\"is_error\":true",
        "\"name\":\"Compress\",\"input\":{\"content\":[{\"startId\":\"m",
        "\"text\":\"▣ noa | 0 blocks created",
        "(T1)=m",
        "\"type\":\"compact_boundary\",\"input\":{\"pre_tokens\":",
        "\"name\":\"LS\"",
        "```",
    ] {
        assert!(all.contains(needle), "no {needle} in the transcripts");
    }
    assert!(
        all.chars().any(|c| ('\u{ac00}'..='\u{d7a3}').contains(&c)),
        "no Korean"
    );
}

#[test]
fn a_compaction_marker_comes_before_every_compress_call_and_its_tail_is_recorded_twice() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    let o = opts(4, 200, 21);
    gen(&root, &o);
    // Session 4 of every root holds the marker.
    let sid = "s15-0004";
    let recs = check_transcript(&root.join(format!("transcripts/{sid}.jsonl")), sid, None);
    let marker = recs
        .iter()
        .position(|r| {
            r.as_message()
                .is_some_and(|m| matches!(m.content.first(), Some(Content::CompactBoundary(_))))
        })
        .expect("a marker");
    let first_call = recs.iter().position(|r| {
        r.as_message().is_some_and(|m| {
            m.content
                .iter()
                .any(|c| matches!(c, Content::ToolUse(u) if u.name == "Compress"))
        })
    });
    if let Some(c) = first_call {
        assert!(c > marker, "a Compress call before the marker");
    }
    // The kept tail: the records right after the marker repeat those right before it.
    let before = recs[..marker]
        .last()
        .and_then(|r| r.as_message())
        .expect("a message before");
    let tail: Vec<_> = recs[marker + 1..]
        .iter()
        .filter_map(|r| r.as_message())
        .collect();
    assert!(
        tail.iter().any(|m| m.content == before.content),
        "the last message before the marker is recorded again after it"
    );
    check_clean_session(&root, sid, &o);
}

#[test]
fn a_long_session_consolidates_into_higher_tiers_and_still_rebuilds() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    let o = GenOptions {
        max_result_bytes: 3_000,
        memories: 0,
        subagents: false,
        ..opts(2, 2400, 11)
    };
    let report = gen(&root, &o);
    let mut tiers = BTreeSet::new();
    for sid in &report.clean_sessions {
        if let Some(st) = check_clean_session(&root, sid, &o) {
            tiers.extend(st.blocks().iter().map(|b| b.tier));
        }
    }
    assert!(tiers.contains(&2), "no consolidation in {tiers:?}");
    assert!(
        report.refused_calls + report.compress_calls >= 10,
        "{report:?}"
    );
}

#[test]
fn ctl_rebuild_of_a_generated_session_gives_back_its_files() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    let report = gen(&root, &opts(3, 200, 4));
    let sid = report
        .clean_sessions
        .iter()
        .find(|s| root.join(format!("noa/{s}/state.json")).exists())
        .expect("a compressed session");
    let dir = root.join("noa").join(sid);
    let before = snapshot(&dir);
    // Not live: the transcript's time is its last record's, long ago.
    let out = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(["ctl"])
        .arg(&root)
        .args([sid.as_str(), "rebuild"])
        .output()
        .expect("normafs ctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = snapshot(&dir);
    let changed: Vec<&String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k) && !k.ends_with(".normafs.lock"))
        .collect();
    assert!(changed.is_empty(), "rebuild changed {changed:?}");
}

#[test]
fn corrupt_roots_carry_every_catalogue_damage() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    let o = GenOptions {
        corrupt: true,
        ..opts(2, 120, 5)
    };
    let report = gen(&root, &o);
    let codes: BTreeSet<&str> = report.damages.iter().map(|d| d.code).collect();
    let expected: BTreeSet<&str> = CATALOGUE.into_iter().collect();
    assert_eq!(codes, expected);

    // `gen --help` says how many sessions `--corrupt` adds, and the summary line names both.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(["gen", "--help"])
        .output()
        .expect("gen --help");
    let help = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let n = report.corrupt_sessions.len();
    assert!(
        help.contains(&format!(
            "({n}, after the --sessions clean ones: `--sessions 5 --corrupt` writes {})",
            5 + n
        )),
        "{help}"
    );
    assert!(
        report
            .summary()
            .contains(&format!("2 clean sessions and {n} damaged ones")),
        "{}",
        report.summary()
    );

    // Damaged sessions are extra: the clean ones stay clean.
    for sid in &report.clean_sessions {
        check_clean_session(&root, sid, &o);
    }
    assert_eq!(
        report.sessions,
        report.clean_sessions.len() + report.corrupt_sessions.len()
    );
    for d in &report.damages {
        let p = root.join(&d.path);
        let absent = matches!(d.code, "archive.missing" | "state.missing");
        assert_eq!(p.exists(), !absent, "{d:?}");
        if let Some(sid) = d
            .path
            .strip_prefix("transcripts/")
            .and_then(|p| p.strip_suffix(".jsonl"))
        {
            if d.code != "root.bad-name" {
                assert!(report.corrupt_sessions.iter().any(|s| s == sid), "{d:?}");
            }
        }
    }
    let path_of = |code: &str| {
        let d = report.damages.iter().find(|d| d.code == code).expect(code);
        root.join(&d.path)
    };

    // Transcript damages are visible to the line parser.
    let malformed = std::fs::read(path_of("transcript.malformed-line")).expect("read");
    let lines: Vec<&[u8]> = malformed
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let bad: Vec<usize> = (0..lines.len())
        .filter(|&i| parse_line(lines[i]).is_err())
        .collect();
    assert_eq!(bad.len(), 1);
    assert!(
        bad[0] + 1 < lines.len(),
        "the malformed line is the last one"
    );
    let torn = std::fs::read(path_of("transcript.torn-tail")).expect("read");
    assert!(!torn.ends_with(b"\n"));
    let last = torn.rsplit(|&b| b == b'\n').next().expect("last");
    assert!(parse_line(last).is_err());
    let long = std::fs::read(path_of("transcript.line-too-long")).expect("read");
    assert!(long
        .split(|&b| b == b'\n')
        .any(|l| l.len() > normafs::format::loader::MAX_LINE));

    // State load failures.
    let load = |code: &str| parse_state(&std::fs::read(path_of(code)).expect("read"));
    assert!(matches!(
        load("state.malformed"),
        Err(StateLoadError::Malformed(_))
    ));
    assert!(matches!(
        load("state.version"),
        Err(StateLoadError::Version(_))
    ));
    let st = load("state.next-block-id").expect("state");
    let max = st
        .blocks()
        .iter()
        .filter_map(|b| normafs::noa::refs::parse_block_id(&b.block_id))
        .max();
    assert_eq!(Some(st.next_block_id), max.map(i64::from));
    let st = load("state.stats").expect("state");
    let sum: i64 = st.blocks().iter().map(|b| b.compressed_tokens).sum();
    assert_ne!(st.stats.tokens_compressed, sum);
    let st = load("state.ref-map").expect("state");
    let inverse = st
        .message_refs
        .by_ref
        .iter()
        .all(|(r, raw)| st.message_refs.by_raw.get(raw) == Some(r));
    assert!(!inverse);
    let st = load("state.overlap").expect("state");
    let cover: Vec<&String> = st
        .blocks()
        .iter()
        .filter(|b| b.active)
        .flat_map(|b| &b.effective_message_ids)
        .collect();
    let distinct: HashSet<_> = cover.iter().collect();
    assert!(distinct.len() < cover.len(), "no message covered twice");

    // The journal damages: a committed batch beside a state that lacks it, one that has it.
    let behind = path_of("state.behind-journal");
    let journal = std::fs::read_to_string(&behind).expect("journal");
    let entry: Value = serde_json::from_str(journal.trim_end()).expect("json line");
    let call = entry["callId"].as_str().expect("callId");
    assert!(call.starts_with("ctl-"));
    let st = parse_state(&std::fs::read(behind.with_file_name("state.json")).expect("state"))
        .expect("state");
    assert!(st.blocks().iter().all(|b| b.compress_call_id != call));
    for b in entry["blocks"].as_array().expect("blocks") {
        let rel = b["archiveRel"].as_str().expect("archiveRel");
        let text = std::fs::read_to_string(behind.with_file_name(rel)).expect("archive");
        let p = archive::parse(&text).expect("parse");
        assert_eq!(
            p.frontmatter.call.as_deref(),
            Some(call),
            "normafs's own keys"
        );
        assert_eq!(p.body_sha256_ok, Some(true));
    }
    let st = load("state.runtime-unaware").expect("state");
    assert!(st
        .blocks()
        .iter()
        .any(|b| b.compress_call_id.starts_with("ctl-")));

    // The fork keeps its parent's archive paths.
    let st = load("state.inherited").expect("state");
    let sid = path_of("state.inherited")
        .parent()
        .and_then(|d| d.file_name())
        .expect("sid")
        .to_string_lossy()
        .into_owned();
    assert!(st
        .blocks()
        .iter()
        .any(|b| !b.archive_path.contains(&format!("/{sid}/"))));
    assert!(st
        .blocks()
        .iter()
        .any(|b| b.archive_path.contains(&format!("/{sid}/"))));

    let mismatch = std::fs::read_to_string(path_of("archive.mismatch")).expect("archive");
    assert!(archive::parse(&mismatch).is_ok());
    let corrupt = std::fs::read_to_string(path_of("archive.corrupt")).expect("archive");
    assert!(archive::parse(&corrupt).is_err());
    let cut = std::fs::read_to_string(path_of("archive.truncated")).expect("archive");
    assert!(cut.contains(normafs::noa::pipeline::TRUNCATION_MARKER));

    // Memory damages are what the memory checker reports.
    let scan = memory::scan(&root.join("memory"));
    let found: BTreeSet<(String, String)> = memory::check(&scan)
        .into_iter()
        .map(|p| (p.kind.code().to_string(), format!("memory/{}", p.file_name)))
        .collect();
    let listed: BTreeSet<(String, String)> = report
        .damages
        .iter()
        .filter(|d| d.code.starts_with("memory.") && d.code != "memory.index-stale")
        .map(|d| (d.code.to_string(), d.path.clone()))
        .collect();
    assert_eq!(found, listed);
    let on_disk = std::fs::read_to_string(root.join("memory/MEMORY.md")).expect("index");
    assert!(!memory::index_matches(
        &on_disk,
        &memory::render_index(&scan.memories)
    ));
}

#[test]
fn the_root_must_be_empty_or_new() {
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(tmp.path().join("x"), b"x").expect("write");
    let err = generate(tmp.path(), &opts(1, 10, 1), &mut |_, _| {}).expect_err("not empty");
    assert!(matches!(err, GenError::NotEmpty(_)), "{err}");
    let file = tmp.path().join("x");
    let err = generate(&file, &opts(1, 10, 1), &mut |_, _| {}).expect_err("a file");
    assert!(matches!(err, GenError::NotADirectory(_)), "{err}");

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let report = gen(&empty, &opts(1, 3, 1));
    assert_eq!(report.messages, 3);
}

#[test]
fn tiny_sessions_are_still_well_formed() {
    let tmp = tempfile::tempdir().expect("tmp");
    for m in [0, 1, 2, 3, 4, 5, 30] {
        let root = tmp.path().join(format!("r{m}"));
        let o = opts(2, m, 9);
        let report = gen(&root, &o);
        for sid in &report.clean_sessions {
            check_clean_session(&root, sid, &o);
        }
    }
}
