//! The synthetic root generator: determinism, clean roots that parse and rebuild to the very
//! state written, and `--corrupt` roots that carry every SPEC 9 damage.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use normafs::format::memory;
use normafs::format::state::{parse_state, State, StateLoadError};
use normafs::format::transcript::{parse_line, Content, Record};
use normafs::gen::{generate, GenError, GenOptions, GenReport};
use normafs::noa::{replay, Msg};

use normafs::audit::CATALOGUE;

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

/// Every file (relative path -> bytes) and every directory (-> `None`) under `dir`.
fn snapshot(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
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
                out.insert(rel, Some(std::fs::read(&p).expect("read")));
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

fn msgs(records: &[Record]) -> Vec<Msg<'_>> {
    records
        .iter()
        .filter_map(|r| {
            r.as_message().map(|m| Msg {
                raw_id: &r.uuid,
                message: m,
                timestamp: r.timestamp.as_deref(),
            })
        })
        .collect()
}

/// The checks a user of a clean transcript expects: chained records of one writer, increasing
/// time, usage only on assistant turns, every tool call answered, and a finished last turn.
fn check_transcript(path: &Path, sid: &str, agent: Option<&str>) -> Vec<Record> {
    let recs = records(path);
    let mut prev: Option<&Record> = None;
    let mut uses: HashSet<String> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    let mut uuids = HashSet::new();
    for r in &recs {
        let at = format!("{} record {}", path.display(), r.uuid);
        assert!(uuids.insert(r.uuid.clone()), "{at}: duplicate uuid");
        assert_eq!(r.uuid.len(), 32, "{at}");
        assert_eq!(
            r.parent_uuid.as_deref(),
            prev.map(|p| p.uuid.as_str()),
            "{at}"
        );
        assert_eq!(r.session_id.as_deref(), Some(sid), "{at}");
        assert_eq!(r.agent_id.as_deref(), agent, "{at}");
        assert_eq!(r.is_sidechain, agent.map(|_| true), "{at}");
        let ts = replay::parse_time(r.timestamp.as_deref().expect("timestamp")).expect("rfc3339");
        if let Some(p) = prev {
            let pt = replay::parse_time(p.timestamp.as_deref().expect("ts")).expect("rfc3339");
            assert!(ts > pt, "{at}: time does not increase");
        }
        match r.as_message() {
            Some(m) => {
                let usage = r.usage().map(|u| u.total()).unwrap_or(0);
                if m.role == "assistant" {
                    assert!(usage > 0, "{at}: assistant turn without usage");
                } else {
                    assert!(r.usage.is_none(), "{at}: usage on a {} record", m.role);
                }
                for c in &m.content {
                    match c {
                        Content::ToolUse(u) => {
                            assert_eq!(m.role, "assistant", "{at}");
                            uses.insert(u.id.clone());
                        }
                        Content::ToolResult(res) => {
                            assert!(uses.contains(&res.tool_use_id), "{at}: orphan result");
                            assert!(answered.insert(res.tool_use_id.clone()), "{at}");
                        }
                        _ => {}
                    }
                }
            }
            None => assert_eq!(r.kind, "boundary", "{at}"),
        }
        prev = Some(r);
    }
    let unanswered: Vec<_> = uses.difference(&answered).collect();
    assert!(
        unanswered.is_empty(),
        "{}: unanswered {unanswered:?}",
        path.display()
    );
    recs
}

/// A clean session: its transcript, sidechains, state and archives are consistent, and a
/// rebuild from the transcript's Compress calls gives back exactly the state written.
fn check_clean_session(root: &Path, sid: &str, o: &GenOptions) {
    let recs = check_transcript(&root.join(format!("transcripts/{sid}.jsonl")), sid, None);
    let ms = msgs(&recs);
    assert_eq!(ms.len(), o.messages, "{sid}: message count");
    if let Some(last) = ms.last() {
        assert!(
            last.message.role == "assistant" || o.messages % 2 == 1 && o.messages < 3,
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
            assert!(msgs(&side).len() >= 4, "{}", p.display());
        }
    }

    let cfg = &o.config;
    let archive_root = root.join("noa").join(sid);
    let archive_root_s = archive_root.to_str().expect("utf8");
    let mut events = replay::transcript_calls(&ms, cfg);
    replay::order(&mut events);
    let rebuilt = replay::replay(&ms, &events, cfg, sid, archive_root_s);
    assert!(rebuilt.skipped.is_empty(), "{sid}: {:?}", rebuilt.skipped);

    let state_path = archive_root.join("state.json");
    if !state_path.exists() {
        assert!(
            rebuilt.state.blocks.is_empty(),
            "{sid}: blocks but no state.json"
        );
        assert!(!archive_root.exists(), "{sid}: a noa dir without state");
        return;
    }
    let written = parse_state(&std::fs::read(&state_path).expect("state")).expect("parse_state");
    assert_eq!(written.session_id, sid);
    assert!(
        !written.blocks.is_empty(),
        "{sid}: a state.json without blocks"
    );
    for b in &written.blocks {
        let p = archive_root.join(&b.archive_rel);
        assert!(p.is_file(), "{sid}: missing archive {}", p.display());
        assert_eq!(b.archive_path, p.to_str().expect("utf8"));
    }
    assert_eq!(rebuilt.state.blocks.len(), written.blocks.len(), "{sid}");
    for (r, w) in rebuilt.state.blocks.iter().zip(&written.blocks) {
        let key = |b: &normafs::format::state::Block| {
            (
                b.block_id.name(),
                b.tier,
                b.start_ref.clone(),
                b.end_ref.clone(),
                b.effective_message_ids.clone(),
                b.compressed_tokens,
                b.created_at.clone(),
                b.compress_call_id.clone(),
                b.summary.clone(),
                b.topic.clone(),
                b.active,
            )
        };
        assert_eq!(key(r), key(w), "{sid}: block {}", w.block_id);
    }
    // Beyond the blocks: refs, frozen tokens, stats and the next id are the core's too.
    assert_eq!(rebuilt.state, written, "{sid}: rebuilt state differs");
}

fn check_memory(root: &Path, o: &GenOptions) {
    let dir = root.join("memory");
    let scan = memory::scan(&dir);
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    assert_eq!(scan.memories.len(), o.memories);
    assert_eq!(memory::check(&scan), vec![], "clean memories have findings");
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
fn a_clean_root_parses_and_rebuilds_to_the_state_written() {
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
    assert!(report.blocks > 0, "{report:?}");
    assert!(report.subagents > 0, "{report:?}");
    let on_disk: u64 = snapshot(&root)
        .values()
        .flatten()
        .map(|b| b.len() as u64)
        .sum();
    assert_eq!(report.bytes, on_disk);
    let line = report.summary();
    assert!(
        line.starts_with("wrote 8 sessions (1288 messages,"),
        "{line}"
    );

    let sids: Vec<String> = (1..=8).map(|i| format!("s3-{i:04}")).collect();
    assert_eq!(report.clean_sessions, sids);
    for sid in &sids {
        check_clean_session(&root, sid, &o);
    }
    check_memory(&root, &o);

    // The content has what the runtime writes: thinking with signatures, errors, plain-string
    // results, boundaries, non-ASCII text and Markdown.
    let all: String = sids
        .iter()
        .map(|s| std::fs::read_to_string(root.join(format!("transcripts/{s}.jsonl"))).expect("t"))
        .collect();
    for needle in [
        "\"signature\":",
        "\"is_error\":true",
        "\"type\":\"boundary\"",
        "\"active_skills\":",
        "\"name\":\"Compress\"",
        "\"content\":\"",
        "```",
    ] {
        assert!(all.contains(needle), "no {needle} in the transcripts");
    }
    assert!(all.contains("\"type\":\"compact_boundary\"") || all.contains("\"type\":\"skill\""));
    assert!(
        all.chars().any(|c| ('\u{ac00}'..='\u{d7a3}').contains(&c)),
        "no Korean"
    );
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
        check_clean_session(&root, sid, &o);
        let p = root.join(format!("noa/{sid}/state.json"));
        if let Ok(bytes) = std::fs::read(p) {
            let st: State = parse_state(&bytes).expect("state");
            tiers.extend(st.blocks.iter().map(|b| b.tier));
        }
    }
    assert!(tiers.contains(&2), "no consolidation in {tiers:?}");
    assert!(
        report.refused_calls + report.compress_calls >= 20,
        "{report:?}"
    );
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

    // Damaged sessions are extra: the clean ones stay clean.
    for sid in &report.clean_sessions {
        check_clean_session(&root, sid, &o);
    }
    assert_eq!(report.sessions, 2 + report.corrupt_sessions.len());
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
    let max = st.blocks.iter().filter_map(|b| b.block_id.number()).max();
    assert_eq!(Some(st.next_block_id), max);
    let st = load("state.stats").expect("state");
    let sum: u64 = st.blocks.iter().map(|b| b.compressed_tokens).sum();
    assert_ne!(st.stats.tokens_compressed, sum);
    let st = load("state.ref-map").expect("state");
    let inverse = st
        .message_refs
        .by_ref
        .iter()
        .all(|(r, raw)| st.message_refs.by_raw.get(raw) == Some(r));
    assert!(!inverse);

    // Damaged states say what their damage says, checked against their own transcript.
    let session_of = |code: &str| -> (State, Vec<Record>, std::path::PathBuf) {
        let p = path_of(code);
        let sid = p
            .parent()
            .and_then(|d| d.file_name())
            .expect("sid")
            .to_string_lossy()
            .into_owned();
        // A journal damage is reported at ctl.jsonl, beside the state.
        let st = parse_state(&std::fs::read(p.with_file_name("state.json")).expect("state"))
            .expect("state");
        let recs = records(&root.join(format!("transcripts/{sid}.jsonl")));
        (st, recs, root.join("noa").join(sid))
    };
    let uuids =
        |recs: &[Record]| -> HashSet<String> { recs.iter().map(|r| r.uuid.clone()).collect() };
    let live_cover = |st: &State| -> Vec<String> {
        st.blocks
            .iter()
            .filter(|b| b.active)
            .flat_map(|b| b.effective_message_ids.clone())
            .collect()
    };

    let (st, recs, _) = session_of("state.dangling-ref");
    assert!(st
        .message_refs
        .by_raw
        .keys()
        .any(|raw| !uuids(&recs).contains(raw)));
    let (st, _, _) = session_of("state.block-range");
    assert!(st.blocks.iter().any(|b| b.start_ref > b.end_ref));
    let (st, _, _) = session_of("state.unknown-block");
    assert!(st
        .blocks
        .iter()
        .flat_map(|b| &b.direct_block_ids)
        .any(|id| st.block(id).is_none()));
    for code in ["state.overlap", "state.consumed-active"] {
        let (st, _, _) = session_of(code);
        let cover = live_cover(&st);
        let distinct: HashSet<_> = cover.iter().collect();
        assert!(
            distinct.len() < cover.len(),
            "{code}: no message covered twice"
        );
    }
    let (st, recs, _) = session_of("state.dead-block");
    let ids = uuids(&recs);
    assert!(st
        .blocks
        .iter()
        .any(|b| b.active && b.effective_message_ids.iter().any(|id| !ids.contains(id))));
    let (st, recs, _) = session_of("state.unreplayable");
    let ms = msgs(&recs);
    let calls: HashSet<String> = replay::transcript_calls(&ms, &o.config)
        .into_iter()
        .map(|e| e.call_id)
        .collect();
    assert!(st
        .blocks
        .iter()
        .any(|b| !calls.contains(&b.compress_call_id)));
    let (st, _, dir) = session_of("state.behind-journal");
    let journal = std::fs::read_to_string(dir.join("ctl.jsonl")).expect("journal");
    let entry: serde_json::Value = serde_json::from_str(journal.trim_end()).expect("json line");
    let call = entry["callId"].as_str().expect("callId");
    assert!(call.starts_with("ctl-"));
    assert!(st.blocks.iter().all(|b| b.compress_call_id != call));
    for b in entry["blocks"].as_array().expect("blocks") {
        let rel = b["archiveRel"].as_str().expect("archiveRel");
        assert!(dir.join(rel).is_file(), "the journal batch's archive {rel}");
    }

    let archive_of = |code: &str| {
        let d = report.damages.iter().find(|d| d.code == code).expect(code);
        let (sid, rel) = d
            .path
            .strip_prefix("noa/")
            .and_then(|p| p.split_once('/'))
            .expect("noa/<sid>/<rel>");
        let st =
            parse_state(&std::fs::read(root.join(format!("noa/{sid}/state.json"))).expect("s"))
                .expect("state");
        (st, rel.to_string())
    };
    let (st, rel) = archive_of("archive.missing");
    assert!(st.blocks.iter().any(|b| b.archive_rel == rel));
    let (st, rel) = archive_of("archive.moved");
    let b = st
        .blocks
        .iter()
        .find(|b| b.archive_rel == rel)
        .expect("block");
    assert!(!b.archive_path.starts_with(root.to_str().expect("utf8")));
    assert!(b.archive_path.ends_with(&rel));
    for code in ["archive.orphan", "archive.temp-debris"] {
        let (st, rel) = archive_of(code);
        assert!(st.blocks.iter().all(|b| b.archive_rel != rel), "{code}");
    }
    let mismatch = std::fs::read_to_string(path_of("archive.mismatch")).expect("archive");
    let (st, rel) = archive_of("archive.mismatch");
    let b = st
        .blocks
        .iter()
        .find(|b| b.archive_rel == rel)
        .expect("block");
    let range = mismatch
        .lines()
        .find_map(|l| l.strip_prefix("range: "))
        .expect("a range line");
    assert_ne!(range, format!("{}-{}", b.start_ref, b.end_ref));
    let corrupt = std::fs::read_to_string(path_of("archive.corrupt")).expect("archive");
    assert!(!corrupt.starts_with("---\n") || corrupt.contains("body_sha256:"));

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
    for m in [0, 1, 2, 3, 4, 5] {
        let root = tmp.path().join(format!("r{m}"));
        let o = opts(2, m, 9);
        let report = gen(&root, &o);
        for sid in &report.clean_sessions {
            check_clean_session(&root, sid, &o);
        }
    }
}
