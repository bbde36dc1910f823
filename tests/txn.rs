//! The ctl transactions on disk: compress, recovery, rebuild — atomic, durable, lossless.

mod common;

use chrono::{TimeZone, Utc};
use common::{example_root, snapshot, text_of, write_session, Session};
use normafs::audit::{self, PathStyle};
use normafs::config::{Config, NoaConfig};
use normafs::format::state::parse_state;
use normafs::store::ctl::{CtlErrorKind, Runner, Scope};
use normafs::store::failpoint::{self, Action};
use normafs::store::root::{discover, RootPaths};
use normafs::store::session;
use normafs::store::txn::{self, TxnError};
use serde_json::{json, Value};

const SUMMARY: &str = "The user asked questions and got long answers about the build.";

fn cfg() -> NoaConfig {
    NoaConfig {
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        ..NoaConfig::default()
    }
}

/// [`cfg`] as the settings of every session.
fn config() -> Config {
    Config {
        noa: cfg(),
        ..Config::default()
    }
}

fn now() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0)
        .single()
        .expect("time")
}

fn chat_root(n: usize) -> (tempfile::TempDir, RootPaths) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Session::new("s1");
    for i in 0..n {
        if i % 2 == 0 {
            s.user(&format!("question {i} {}", text_of(30, 'q')));
        } else {
            s.assistant(&format!("answer {i} {}", text_of(30, 'a')));
        }
    }
    write_session(dir.path(), &s);
    let paths = RootPaths::from_root(dir.path());
    (dir, paths)
}

fn input(ranges: &[(&str, &str)]) -> Value {
    json!({"ranges": ranges.iter().map(|(s, e)| json!({"start": s, "end": e, "topic": "t", "summary": SUMMARY})).collect::<Vec<_>>()})
}

fn audit_codes(paths: &RootPaths) -> Vec<String> {
    let d = discover(paths).expect("discover");
    let a = audit::audit_root(paths, &d, &config(), PathStyle::Root, &mut |_, _| {});
    a.findings
        .iter()
        .filter(|f| f.severity != audit::Severity::Info)
        .map(|f| format!("{} {}", f.code, f.path))
        .collect()
}

#[test]
fn compress_writes_archive_journal_and_state() {
    let (_d, paths) = chat_root(10);
    let out = txn::compress(&paths, "s1", &input(&[("m0001", "m0004")]), &cfg(), now())
        .expect("compress");
    assert!(
        out.message
            .starts_with("compressed m0001..m0004 into b1 (tier 1)"),
        "{}",
        out.message
    );
    let st = parse_state(&std::fs::read(paths.state_path("s1")).expect("state")).expect("parse");
    assert_eq!(st.blocks.len(), 1);
    let b = &st.blocks[0];
    assert!(b.compress_call_id.starts_with("ctl-"));
    let arch =
        std::fs::read_to_string(paths.archive_root("s1").join(&b.archive_rel)).expect("archive");
    assert!(arch.contains(&format!("call: {}", b.compress_call_id)));
    assert!(
        arch.contains("## m0001 · user · 2026-11-30T10:00:01.000000001Z"),
        "{arch}"
    );
    let journal = std::fs::read_to_string(paths.journal_path("s1")).expect("journal");
    assert_eq!(journal.lines().count(), 1);
    assert!(journal.contains(&b.compress_call_id));
    assert!(audit_codes(&paths).is_empty(), "{:?}", audit_codes(&paths));
    // The view shows the block.
    let s = session::load(&paths, "s1");
    let msgs = s.msgs();
    let v = normafs::noa::view::project(&msgs, &s.state.state, &cfg());
    let first: Value =
        serde_json::from_slice(v.to_jsonl().split(|&b| b == b'\n').next().expect("line"))
            .expect("json");
    assert_eq!(first["block"], "b1");
}

#[test]
fn an_invalid_batch_changes_no_byte() {
    let (d, paths) = chat_root(10);
    txn::compress(&paths, "s1", &input(&[("m0001", "m0002")]), &cfg(), now()).expect("first");
    let before = snapshot(d.path());
    for (bad, msg) in [
        (
            input(&[("m0003", "m0004"), ("m0005", "m0099")]),
            "unknown ref m0099",
        ),
        (
            input(&[("m0006", "m0004")]),
            "range m0006..m0004 ends before it starts",
        ),
        (
            json!({"ranges": [{"start": "m0003", "end": "m0004", "summary": "short"}]}),
            "summary shorter than 50 characters",
        ),
        (json!({"nonsense": 1}), "bad compress input"),
    ] {
        let e = txn::compress(&paths, "s1", &bad, &cfg(), now()).expect_err("must fail");
        assert!(matches!(e, TxnError::Invalid(_)), "{e:?}");
        assert!(e.to_string().contains(msg), "{e} vs {msg}");
        assert_eq!(
            snapshot(d.path()),
            before,
            "files changed by a failed batch"
        );
    }
}

#[test]
fn a_failed_archive_write_rolls_back_and_a_failed_state_write_still_commits() {
    let (d, paths) = chat_root(12);
    let before = snapshot(d.path());
    failpoint::set_thread_nth("compress.after-archive", 2, Action::Error);
    let e = txn::compress(
        &paths,
        "s1",
        &input(&[("m0001", "m0002"), ("m0003", "m0004")]),
        &cfg(),
        now(),
    )
    .expect_err("injected");
    failpoint::clear_thread();
    assert!(matches!(e, TxnError::Io(_)), "{e:?}");
    let mut after = snapshot(d.path());
    after.retain(|k, _| !k.ends_with("tier1") && !k.starts_with("noa/s1/.normafs"));
    assert_eq!(after, before, "archives left behind");

    failpoint::set_thread("compress.before-journal", Action::Error);
    assert!(txn::compress(&paths, "s1", &input(&[("m0001", "m0002")]), &cfg(), now()).is_err());
    failpoint::clear_thread();
    assert!(!paths.state_path("s1").exists());
    assert!(
        std::fs::read_dir(paths.archive_root("s1").join("tier1"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 0
    );

    // The state write fails after the journal committed: success with a warning.
    failpoint::set_thread("compress.after-journal", Action::Error);
    let out = txn::compress(&paths, "s1", &input(&[("m0001", "m0002")]), &cfg(), now())
        .expect("committed");
    failpoint::clear_thread();
    assert!(out.message.contains("warning"), "{}", out.message);
    assert_eq!(out.result["warnings"].as_array().map(Vec::len), Some(1));
    assert!(audit_codes(&paths)
        .iter()
        .any(|c| c.starts_with("state.behind-journal")));
    // The next command rolls the batch forward first.
    let out =
        txn::compress(&paths, "s1", &input(&[("m0003", "m0004")]), &cfg(), now()).expect("second");
    assert!(
        out.result["recovery"].to_string().contains("rolled 1"),
        "{}",
        out.result
    );
    let st = parse_state(&std::fs::read(paths.state_path("s1")).expect("state")).expect("parse");
    assert_eq!(
        st.blocks
            .iter()
            .map(|b| b.block_id.name())
            .collect::<Vec<_>>(),
        ["b1", "b2"]
    );
    assert!(audit_codes(&paths).is_empty(), "{:?}", audit_codes(&paths));
}

#[test]
fn recovery_cuts_a_torn_journal_and_removes_debris() {
    let (_d, paths) = chat_root(10);
    txn::compress(&paths, "s1", &input(&[("m0001", "m0002")]), &cfg(), now()).expect("first");
    let root = paths.archive_root("s1");
    // A batch that never committed: its archive and a torn journal line, plus a temp file.
    std::fs::write(root.join("tier1/b7_m0003-m0004.md"), "---\nblock: b7\ntier: 1\nrange: m0003-m0004\noriginal_tokens: 5\ncall: ctl-deadbeef\n---\n# x\n").expect("debris");
    std::fs::write(
        root.join("tier1/.b8_m0003-m0004.md.tmp-0123456789abcdef"),
        "partial",
    )
    .expect("temp");
    let mut j = std::fs::OpenOptions::new()
        .append(true)
        .open(paths.journal_path("s1"))
        .expect("journal");
    std::io::Write::write_all(&mut j, b"{\"at\":\"2026").expect("torn");
    let codes = audit_codes(&paths);
    assert!(
        codes.iter().any(|c| c.starts_with("archive.orphan")),
        "{codes:?}"
    );
    assert!(
        codes.iter().any(|c| c.starts_with("archive.temp-debris")),
        "{codes:?}"
    );
    assert!(
        codes.iter().any(|c| c.starts_with("journal.torn-tail")),
        "{codes:?}"
    );
    let notes = txn::recover(&paths, "s1", &cfg(), now()).expect("recover");
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(audit_codes(&paths).is_empty(), "{:?}", audit_codes(&paths));
    // A runtime-written archive (no ctl- call) is never removed, only reported.
    std::fs::write(
        root.join("tier1/b9_m0003-m0004.md"),
        "---\nblock: b9\ntier: 1\nrange: m0003-m0004\noriginal_tokens: 5\n---\n# x\n",
    )
    .expect("runtime");
    txn::recover(&paths, "s1", &cfg(), now()).expect("recover");
    assert!(root.join("tier1/b9_m0003-m0004.md").exists());
}

#[test]
fn rebuild_after_deleting_state_reproduces_blocks_and_adopts_archives() {
    let d = example_root();
    let paths = RootPaths::from_root(d.path());
    let spath = paths.state_path("7f0c2a");
    let old = parse_state(&std::fs::read(&spath).expect("state")).expect("parse");
    let archives_before: Vec<_> = snapshot(d.path())
        .into_iter()
        .filter(|(k, _)| k.contains("tier1"))
        .collect();
    std::fs::remove_file(&spath).expect("rm");
    let out = txn::rebuild(&paths, "7f0c2a", &cfg(), now()).expect("rebuild");
    assert_eq!(
        out.result["adopted"].as_array().map(Vec::len),
        Some(2),
        "{}",
        out.result
    );
    let new = parse_state(&std::fs::read(&spath).expect("state")).expect("parse");
    assert_eq!(new.blocks.len(), old.blocks.len());
    for (a, b) in old.blocks.iter().zip(&new.blocks) {
        assert_eq!(a.block_id, b.block_id);
        assert_eq!(
            (a.tier, &a.start_ref, &a.end_ref),
            (b.tier, &b.start_ref, &b.end_ref)
        );
        assert_eq!(a.effective_message_ids, b.effective_message_ids);
        assert_eq!(a.compressed_tokens, b.compressed_tokens);
        assert_eq!(
            (&a.summary, &a.topic, &a.compress_call_id),
            (&b.summary, &b.topic, &b.compress_call_id)
        );
        assert_eq!(a.archive_rel, b.archive_rel);
    }
    for (raw, r) in &old.message_refs.by_raw {
        assert_eq!(new.message_refs.by_raw.get(raw), Some(r), "ref of {raw}");
    }
    for (r, t) in &old.token_snapshot.as_ref().expect("snapshot").by_ref {
        assert_eq!(
            new.token_snapshot.as_ref().and_then(|s| s.by_ref.get(r)),
            Some(t)
        );
    }
    assert_eq!(new.stats, old.stats);
    let archives_after: Vec<_> = snapshot(d.path())
        .into_iter()
        .filter(|(k, _)| k.contains("tier1"))
        .collect();
    assert_eq!(
        archives_after, archives_before,
        "adopted archives must stay byte-identical"
    );
}

#[test]
fn rebuild_carries_unknown_fields_and_keeps_a_tampered_archive() {
    let d = example_root();
    let paths = RootPaths::from_root(d.path());
    let spath = paths.state_path("7f0c2a");
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(&spath).expect("state")).expect("json");
    v["hostExtension"] = json!({"keep": [1, 2, 3]});
    v["blocks"][0]["reviewer"] = json!("alice");
    std::fs::write(&spath, serde_json::to_vec_pretty(&v).expect("ser")).expect("write");
    let a1 = paths.archive_root("7f0c2a").join("tier1/b1_m0001-m0006.md");
    let tampered = std::fs::read_to_string(&a1)
        .expect("read")
        .replace("range: m0001-m0006", "range: m0001-m0005");
    std::fs::write(&a1, &tampered).expect("tamper");
    let out = txn::rebuild(&paths, "7f0c2a", &cfg(), now()).expect("rebuild");
    assert_eq!(
        out.result["replaced"].as_array().map(Vec::len),
        Some(1),
        "{}",
        out.result
    );
    let nv: Value = serde_json::from_slice(&std::fs::read(&spath).expect("state")).expect("json");
    assert_eq!(nv["hostExtension"], json!({"keep": [1, 2, 3]}));
    assert_eq!(nv["blocks"][0]["reviewer"], "alice");
    // The tampered file is kept beside the rewritten one, byte for byte.
    let kept: Vec<_> = std::fs::read_dir(a1.parent().expect("dir"))
        .expect("ls")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("b1_m0001-m0006.md.replaced-")
        })
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        std::fs::read_to_string(kept[0].path()).expect("kept"),
        tampered
    );
    let rewritten = std::fs::read_to_string(&a1).expect("new");
    assert!(rewritten.contains("range: m0001-m0006") && rewritten.contains("body_sha256: "));
    assert!(audit_codes(&paths).is_empty(), "{:?}", audit_codes(&paths));
}

#[test]
fn rebuild_of_a_malformed_state_keeps_the_old_file() {
    let d = example_root();
    let paths = RootPaths::from_root(d.path());
    let spath = paths.state_path("7f0c2a");
    std::fs::write(&spath, b"{ this is not json").expect("write");
    // Compress refuses to write over it.
    let e = txn::compress(
        &paths,
        "7f0c2a",
        &input(&[("m0015", "m0016")]),
        &cfg(),
        now(),
    )
    .expect_err("refused");
    assert!(e.to_string().contains("run `rebuild`"), "{e}");
    let out = txn::rebuild(&paths, "7f0c2a", &cfg(), now()).expect("rebuild");
    let kept = out.result["keptState"].as_str().expect("kept").to_string();
    assert_eq!(std::fs::read(&kept).expect("kept"), b"{ this is not json");
    assert!(parse_state(&std::fs::read(&spath).expect("state")).is_ok());
}

#[test]
fn a_held_lock_answers_busy() {
    let (_d, paths) = chat_root(10);
    let _held =
        normafs::store::lock::acquire(&paths.archive_root("s1"), std::time::Duration::from_secs(1))
            .expect("lock");
    let runner = Runner {
        paths: &paths,
        cfg: &cfg(),
        read_only: false,
    };
    let rec = runner.run(&Scope::Session("s1".into()), "rebuild", 1, now());
    assert!(!rec.ok);
    assert_eq!(rec.error, Some(CtlErrorKind::Busy));
}

#[test]
fn ctl_lines_parse_and_report() {
    let (_d, paths) = chat_root(10);
    let c = cfg();
    let runner = Runner {
        paths: &paths,
        cfg: &c,
        read_only: false,
    };
    let s1 = Scope::Session("s1".into());
    let rec = runner.run(&s1, &format!("compress m0001 m0004 {SUMMARY}"), 7, now());
    assert!(rec.ok, "{}", rec.message);
    let j = rec.to_json();
    assert_eq!(j["seq"], 7);
    assert_eq!(j["result"]["blocks"][0]["block"], "b1");
    assert_eq!(
        j["result"]["blocks"][0]["archive"],
        "tier1/b1_m0001-m0004.md"
    );
    let rec = runner.run(&s1, "nonsense", 8, now());
    assert_eq!(
        (rec.ok, rec.error.clone()),
        (false, Some(CtlErrorKind::Invalid))
    );
    assert_eq!(rec.message, "unknown command `nonsense` (try `help`)");
    assert!(runner
        .run(&s1, "help", 9, now())
        .message
        .contains("compress START END SUMMARY"));
    assert_eq!(
        runner.run(&s1, "compress m0001", 9, now()).error,
        Some(CtlErrorKind::Invalid)
    );
    assert_eq!(
        runner.run(&Scope::Root, "rebuild", 9, now()).error,
        Some(CtlErrorKind::Invalid)
    );
    let ro = Runner {
        read_only: true,
        ..runner.clone()
    };
    assert_eq!(
        ro.run(&s1, "rebuild", 10, now()).error,
        Some(CtlErrorKind::ReadOnly)
    );
    assert!(ro.run(&s1, "help", 10, now()).ok);
}

/// What the "runtime" writes over state.json when the failpoint calls [`clobber`].
static CLOBBER: std::sync::Mutex<Option<(std::path::PathBuf, Vec<u8>)>> =
    std::sync::Mutex::new(None);

fn clobber() {
    if let Some((p, bytes)) = CLOBBER.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        std::fs::write(p, bytes).expect("clobber");
    }
}

/// The runtime replaces state.json with an older version right after a command's recovery
/// rolled the journal forward: the command still plans on every committed batch (no block id
/// reused, no archive name taken twice) and writes them all.
#[test]
fn a_state_replaced_right_after_recovery_loses_no_batch() {
    let (_d, paths) = chat_root(16);
    let spath = paths.state_path("s1");
    let first =
        txn::compress(&paths, "s1", &input(&[("m0011", "m0012")]), &cfg(), now()).expect("first");
    let old = std::fs::read(&spath).expect("state");
    let second =
        txn::compress(&paths, "s1", &input(&[("m0001", "m0002")]), &cfg(), now()).expect("second");
    // The runtime's older version, written over the batch, then again after each recovery.
    std::fs::write(&spath, &old).expect("undo");
    *CLOBBER.lock().unwrap_or_else(|e| e.into_inner()) = Some((spath.clone(), old.clone()));
    failpoint::set_thread("recover.after-rollforward", Action::Call(clobber));
    let third = txn::compress(&paths, "s1", &input(&[("m0003", "m0004")]), &cfg(), now());
    // The range of the undone batch again: refused or compressed again, never an I/O error.
    std::fs::write(&spath, &old).expect("undo");
    let again = txn::compress(&paths, "s1", &input(&[("m0001", "m0002")]), &cfg(), now());
    failpoint::clear_thread();
    let third = third.expect("third");
    assert!(
        !matches!(again, Err(TxnError::Io(_))),
        "the undone range again: {again:?}"
    );
    let state = parse_state(&std::fs::read(&spath).expect("state")).expect("parse");
    let calls: Vec<&str> = state
        .blocks
        .iter()
        .map(|b| b.compress_call_id.as_str())
        .collect();
    for out in [&first, &second, &third] {
        let id = out.result["callId"].as_str().expect("callId");
        assert!(calls.contains(&id), "{id} missing from {calls:?}");
    }
    let mut ids: Vec<String> = state
        .blocks
        .iter()
        .map(|b| b.block_id.to_string())
        .collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "a block id used twice");
}
