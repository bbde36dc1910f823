//! The ctl transactions on disk: compress, recovery, rebuild — atomic, durable, lossless —
//! and the ctl runner around them (live sessions, forced commands, read-only).

mod common;

use chrono::{TimeZone, Utc};
use common::{ctl_noa, example_root, snapshot, text_of, write_session, Session};
use normafs::audit::{self, PathStyle};
use normafs::config::{Config, NoaConfig};
use normafs::format::state::{parse_state, State};
use normafs::noa::views as view;
use normafs::store::ctl::{Runner, Scope};
use normafs::store::failpoint::{self, Action};
use normafs::store::journal;
use normafs::store::root::{discover, RootPaths};
use normafs::store::session;
use normafs::store::txn::{self, TxnError};
use serde_json::{json, Value};

const SUMMARY: &str = "The user asked questions and got long answers about the build.";

/// [`ctl_noa`] as the settings of every session.
fn config() -> Config {
    Config {
        noa: ctl_noa(),
        ..Config::default()
    }
}

fn now() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0)
        .single()
        .expect("time")
}

/// Session `s1`: `n` messages alternating user (odd refs) and assistant.
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

/// The runtime's Compress input for these ranges.
fn input(ranges: &[(&str, &str)]) -> String {
    json!({"content": ranges.iter().map(|(s, e)| json!({"startId": s, "endId": e, "topic": "t", "summary": SUMMARY})).collect::<Vec<_>>()}).to_string()
}

/// Compress `ranges` of session s1 with the short session's settings, now.
fn compress_s1(paths: &RootPaths, ranges: &[(&str, &str)]) -> Result<txn::Outcome, TxnError> {
    txn::compress(paths, "s1", &input(ranges), &ctl_noa(), now())
}

fn state_of(paths: &RootPaths, sid: &str) -> State {
    parse_state(&std::fs::read(paths.state_path(sid)).expect("state")).expect("parse")
}

/// The audit's warnings and errors, as `code path`; the corpus's one hazard the runtime made
/// itself (`memory.empty-slug`, SPEC 9) aside.
fn audit_codes(paths: &RootPaths) -> Vec<String> {
    let d = discover(paths).expect("discover");
    let a = audit::audit_root(
        paths,
        &d,
        &config(),
        audit::How::new(PathStyle::Root),
        &mut |_, _| {},
    );
    a.findings
        .iter()
        .filter(|f| f.severity != audit::Severity::Info && f.code != "memory.empty-slug")
        .map(|f| format!("{} {}", f.code, f.path))
        .collect()
}

#[test]
fn compress_writes_archive_journal_and_state() {
    let (_d, paths) = chat_root(10);
    let out = compress_s1(&paths, &[("m00001", "m00004")]).expect("ok");
    // The runtime's panel.
    let st = state_of(&paths, "s1");
    assert_eq!(st.blocks().len(), 1);
    let b = &st.blocks()[0];
    assert!(out.message.starts_with("▣ noa | "), "{}", out.message);
    assert!(
        out.message
            .contains(&format!("b1(T1)=m00001–m00004 → {}", b.archive_path)),
        "{}",
        out.message
    );
    assert_eq!(out.result["panel"], json!(out.message));
    assert!(b.compress_call_id.starts_with("ctl-"));
    assert_eq!(out.result["callId"], json!(b.compress_call_id));
    assert_eq!(b.archive_rel, "tier1/b1_m00001-m00004.md");
    assert_eq!(
        b.archive_path,
        paths
            .archive_root("s1")
            .join(&b.archive_rel)
            .to_string_lossy()
    );
    assert_eq!(b.created_at, now().timestamp());
    assert_eq!((st.stats.compression_count, st.next_block_id), (1, 2));
    assert_eq!(st.stats.tokens_compressed, b.compressed_tokens);
    // The refs of the view ctl saw are recorded, with the counts its tags showed.
    assert_eq!(st.message_refs.by_ref.len(), 10);
    assert_eq!(st.token_snapshot.len(), 5, "the user texts' tags");
    let arch =
        std::fs::read_to_string(paths.archive_root("s1").join(&b.archive_rel)).expect("archive");
    assert!(arch.contains(&format!("\ncall: {}\n", b.compress_call_id)));
    assert!(arch.contains("\nbody_sha256: "));
    assert!(arch.contains("\n## m00001 · user\n"), "{arch}");
    assert!(arch.contains("\n## m00004 · assistant\n"), "{arch}");
    let jr = journal::read(&paths.journal_path("s1")).expect("journal");
    assert_eq!(jr.entries.len(), 1);
    let e = &jr.entries[0].1;
    assert_eq!(e.call_id, b.compress_call_id);
    assert_eq!(
        e.input,
        serde_json::from_str::<Value>(&input(&[("m00001", "m00004")])).expect("json")
    );
    assert_eq!(e.blocks[0]["blockId"], "b1");
    assert!(e.extra.contains_key("after"), "the message it ran after");
    assert!(audit_codes(&paths).is_empty(), "{:?}", audit_codes(&paths));
    // The view shows the block where its first message was.
    let s = session::load(&paths, "s1");
    let p = view::Projection::new(s.messages());
    let v = view::Files::new(&p, &s.state.state, &ctl_noa(), "s1", &view::runtime_path)
        .view()
        .to_jsonl();
    let first: Value =
        serde_json::from_slice(v.split(|&b| b == b'\n').next().expect("line")).expect("json");
    assert_eq!(first["block"], "b1");
}

#[test]
fn an_invalid_batch_changes_no_byte() {
    let (d, paths) = chat_root(10);
    compress_s1(&paths, &[("m00001", "m00002")]).expect("first");
    let before = snapshot(d.path());
    let short = json!({"content": [{"startId": "m00003", "endId": "m00004", "summary": "short"}]})
        .to_string();
    for (bad, msg) in [
        // One good range and one with an unknown ref: the runtime would make a block of the
        // first; ctl refuses the batch whole.
        (
            input(&[("m00003", "m00004"), ("m00005", "m00099")]),
            "m00099 does not exist in this session",
        ),
        (short, "Summary too short (5 chars, min 50)"),
        (
            input(&[("m00003", "m00006"), ("m00005", "m00007")]),
            "overlaps an earlier range",
        ),
        (json!({"nonsense": 1}).to_string(), "no `content` field"),
        ("not json at all".to_string(), "could not be parsed"),
    ] {
        let e = txn::compress(&paths, "s1", &bad, &ctl_noa(), now()).expect_err("must fail");
        assert!(matches!(e, TxnError::Invalid(_)), "{e:?}");
        assert!(e.to_string().contains(msg), "{e} vs {msg}");
        assert_eq!(
            snapshot(d.path()),
            before,
            "files changed by a failed batch"
        );
    }
}

/// v2: reversed endpoints are swapped (the runtime's rule), not an error.
#[test]
fn reversed_endpoints_are_swapped() {
    let (_d, paths) = chat_root(10);
    compress_s1(&paths, &[("m00006", "m00003")]).expect("ok");
    let st = state_of(&paths, "s1");
    let b = &st.blocks()[0];
    assert_eq!(
        (b.start_ref.as_str(), b.end_ref.as_str()),
        ("m00003", "m00006")
    );
}

#[test]
fn a_failed_archive_write_rolls_back_and_a_failed_state_write_still_commits() {
    let (d, paths) = chat_root(12);
    let before = snapshot(d.path());
    failpoint::set_thread_nth("compress.after-archive", 2, Action::Error);
    let e =
        compress_s1(&paths, &[("m00001", "m00002"), ("m00003", "m00004")]).expect_err("injected");
    failpoint::clear_thread();
    assert!(matches!(e, TxnError::Io(_)), "{e:?}");
    let mut after = snapshot(d.path());
    after.retain(|k, _| !k.ends_with("tier1") && !k.starts_with("noa/s1/.normafs"));
    assert_eq!(after, before, "archives left behind");

    failpoint::set_thread("compress.before-journal", Action::Error);
    assert!(compress_s1(&paths, &[("m00001", "m00002")]).is_err());
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
    let out = compress_s1(&paths, &[("m00001", "m00002")]).expect("committed");
    failpoint::clear_thread();
    assert_eq!(
        out.result["warnings"].as_array().map(Vec::len),
        Some(1),
        "{}",
        out.result
    );
    assert!(audit_codes(&paths)
        .iter()
        .any(|c| c.starts_with("state.behind-journal")));
    // The next command rolls the batch forward first.
    let out = compress_s1(&paths, &[("m00003", "m00004")]).expect("second");
    assert!(
        out.result["recovery"].to_string().contains("rolled 1"),
        "{}",
        out.result
    );
    let st = state_of(&paths, "s1");
    assert_eq!(
        st.blocks()
            .iter()
            .map(|b| b.block_id.as_str())
            .collect::<Vec<_>>(),
        ["b1", "b2"]
    );
    assert!(audit_codes(&paths).is_empty(), "{:?}", audit_codes(&paths));
}

#[test]
fn recovery_cuts_a_torn_journal_and_removes_debris() {
    let (_d, paths) = chat_root(10);
    compress_s1(&paths, &[("m00001", "m00002")]).expect("first");
    let root = paths.archive_root("s1");
    // A batch that never committed: its archive and a torn journal line, plus temp files of
    // normafs and of the runtime.
    std::fs::write(
        root.join("tier1/b7_m00003-m00004.md"),
        "---\nblock: b7\ntier: 1\nrange: m00003-m00004\nmessage_count: 2\noriginal_tokens: 5\ncall: ctl-deadbeef\n---\n\n# 归档 b7 · Tier 1 · m00003–m00004\n\n---\n\n",
    )
    .expect("debris");
    std::fs::write(
        root.join("tier1/.b8_m00003-m00004.md.tmp-0123456789abcdef"),
        "partial",
    )
    .expect("temp");
    let mut j = std::fs::OpenOptions::new()
        .append(true)
        .open(paths.journal_path("s1"))
        .expect("journal");
    std::io::Write::write_all(&mut j, b"{\"at\":\"2026").expect("torn");
    let codes = audit_codes(&paths);
    for code in ["archive.orphan", "archive.temp-debris", "journal.torn-tail"] {
        assert!(
            codes.iter().any(|c| c.starts_with(code)),
            "{code}: {codes:?}"
        );
    }
    let notes = txn::recover(&paths, "s1", &ctl_noa(), now()).expect("recover");
    assert_eq!(notes.len(), 3, "{notes:?}");
    assert!(audit_codes(&paths).is_empty(), "{:?}", audit_codes(&paths));
    // A runtime-written archive (no ctl- call) is never removed, only reported.
    std::fs::write(
        root.join("tier1/b9_m00003-m00004.md"),
        "---\nblock: b9\ntier: 1\nrange: m00003-m00004\nmessage_count: 2\noriginal_tokens: 5\n---\n\n# 归档 b9 · Tier 1 · m00003–m00004\n\n---\n\n",
    )
    .expect("runtime");
    // A temp file of the runtime's (it writes state.json through one) is debris too, but the
    // runtime may be writing it right now: recovery removes only an old one.
    let rt = root.join(".noa-state-123.tmp");
    std::fs::write(&rt, "{").expect("runtime temp");
    txn::recover(&paths, "s1", &ctl_noa(), now()).expect("recover");
    assert!(root.join("tier1/b9_m00003-m00004.md").exists());
    assert!(rt.exists(), "a fresh runtime temp file is left alone");
    assert_eq!(
        audit_codes(&paths),
        [
            "archive.temp-debris noa/s1/.noa-state-123.tmp",
            "archive.orphan noa/s1/tier1/b9_m00003-m00004.md"
        ]
    );
    common::set_mtime(
        &rt,
        std::time::SystemTime::now() - std::time::Duration::from_secs(3600),
    );
    let notes = txn::recover(&paths, "s1", &ctl_noa(), now()).expect("recover");
    assert!(!rt.exists(), "an old one is removed: {notes:?}");
}

/// The corpus's s2-tier1 without its state.json: rebuilt from the transcript's Compress calls,
/// the blocks and stats are the runtime's own (`createdAt` is now and `archivePath` names the
/// copy), the refs those of the runtime's rebuild, and every archive is adopted byte for
/// byte.
#[test]
fn rebuild_after_deleting_state_reproduces_blocks_and_adopts_archives() {
    let d = example_root();
    let paths = RootPaths::from_root(d.path());
    let sid = "s2-tier1";
    let spath = paths.state_path(sid);
    let old = state_of(&paths, sid);
    let archives_before: Vec<_> = snapshot(d.path())
        .into_iter()
        .filter(|(k, _)| k.contains("/tier1/"))
        .collect();
    std::fs::remove_file(&spath).expect("rm");
    let cfg = common::corpus_noa(sid);
    let out = txn::rebuild(&paths, sid, &cfg, now()).expect("rebuild");
    assert_eq!(
        out.result["adopted"].as_array().map(Vec::len),
        Some(15),
        "{}",
        out.result
    );
    assert_eq!(out.result["blocks"], 15);
    assert_eq!(
        out.result["skipped"],
        json!([]),
        "every call of the transcript replays"
    );
    let new = state_of(&paths, sid);
    assert_eq!(new.blocks().len(), old.blocks().len());
    for (a, b) in old.blocks().iter().zip(new.blocks()) {
        let mut a = a.clone();
        a.created_at = b.created_at;
        a.archive_path = b.archive_path.clone();
        assert_eq!(&a, b);
        assert_eq!(b.created_at, now().timestamp());
        assert!(b
            .archive_path
            .starts_with(&*paths.archive_root(sid).to_string_lossy()));
    }
    // Refs and token snapshot are what the runtime's own rebuild writes (oracle): every ref
    // the runtime had recorded comes back with its number (one more: the replayed call
    // itself, BLOCKED), and no tag counts are frozen by a replay.
    let oracle = common::oracle("s2-tier1/rebuild/state.json");
    let v: Value = serde_json::from_str(&new.to_json()).expect("json");
    assert_eq!(v["messageRefs"], oracle["messageRefs"]);
    assert_eq!(v.get("tokenSnapshot"), oracle.get("tokenSnapshot"));
    for (r, id) in &old.message_refs.by_ref {
        assert_eq!(new.message_refs.by_ref.get(r), Some(id), "{r}");
    }
    assert_eq!(new.stats, old.stats);
    assert_eq!(new.next_block_id, old.next_block_id);
    let archives_after: Vec<_> = snapshot(d.path())
        .into_iter()
        .filter(|(k, _)| k.contains("/tier1/"))
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
    let sid = "s2-tier1";
    let spath = paths.state_path(sid);
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(&spath).expect("state")).expect("json");
    v["hostExtension"] = json!({"keep": [1, 2, 3]});
    v["blocks"][0]["reviewer"] = json!("alice");
    std::fs::write(&spath, serde_json::to_vec_pretty(&v).expect("ser")).expect("write");
    let a1 = paths.archive_root(sid).join("tier1/b1_m00004-m00009.md");
    let tampered = std::fs::read_to_string(&a1)
        .expect("read")
        .replace("range: m00004-m00009", "range: m00004-m00008");
    std::fs::write(&a1, &tampered).expect("tamper");
    let out = txn::rebuild(&paths, sid, &common::corpus_noa(sid), now()).expect("rebuild");
    assert_eq!(
        out.result["replaced"].as_array().map(Vec::len),
        Some(1),
        "{}",
        out.result
    );
    assert_eq!(out.result["adopted"].as_array().map(Vec::len), Some(14));
    let nv: Value = serde_json::from_slice(&std::fs::read(&spath).expect("state")).expect("json");
    assert_eq!(nv["hostExtension"], json!({"keep": [1, 2, 3]}));
    assert_eq!(nv["blocks"][0]["reviewer"], "alice");
    // The old block's creation time is kept (same id, same call).
    assert_eq!(nv["blocks"][0]["createdAt"], v["blocks"][0]["createdAt"]);
    // The tampered file is kept beside the rewritten one, byte for byte.
    let kept: Vec<_> = std::fs::read_dir(a1.parent().expect("dir"))
        .expect("ls")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("b1_m00004-m00009.md.replaced-")
        })
        .collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        std::fs::read_to_string(kept[0].path()).expect("kept"),
        tampered
    );
    let rewritten = std::fs::read_to_string(&a1).expect("new");
    assert!(rewritten.contains("range: m00004-m00009") && rewritten.contains("body_sha256: "));
    // What is left to say: the keys the runtime would drop at its next save.
    assert_eq!(
        audit_codes(&paths),
        ["state.unknown-keys noa/s2-tier1/state.json"]
    );
}

#[test]
fn rebuild_of_a_malformed_state_keeps_the_old_file() {
    let d = example_root();
    let paths = RootPaths::from_root(d.path());
    let sid = "s2-tier1";
    let spath = paths.state_path(sid);
    std::fs::write(&spath, b"{ this is not json").expect("write");
    // Compress refuses to write over it.
    let e = txn::compress(
        &paths,
        sid,
        &input(&[("m00170", "m00175")]),
        &ctl_noa(),
        now(),
    )
    .expect_err("refused");
    assert!(e.to_string().contains("run `rebuild`"), "{e}");
    let out = txn::rebuild(&paths, sid, &common::corpus_noa(sid), now()).expect("rebuild");
    let kept = out.result["keptState"].as_str().expect("kept").to_string();
    assert_eq!(std::fs::read(&kept).expect("kept"), b"{ this is not json");
    assert_eq!(state_of(&paths, sid).blocks().len(), 15);
}

#[test]
fn a_held_lock_answers_busy() {
    let (_d, paths) = chat_root(10);
    let _held =
        normafs::store::lock::acquire(&paths.archive_root("s1"), std::time::Duration::from_secs(1))
            .expect("lock");
    let runner = Runner {
        paths: &paths,
        cfg: &ctl_noa(),
        read_only: false,
    };
    let rec = runner.run(&Scope::Session("s1".into()), "rebuild", 1, now());
    assert!(!rec.ok);
    assert!(
        matches!(rec.error, Some(TxnError::Busy(_))),
        "{:?}",
        rec.error
    );
    assert!(rec.message.contains("holds the lock"), "{}", rec.message);
}

#[test]
fn ctl_lines_parse_and_report() {
    let (_d, paths) = chat_root(10);
    let c = ctl_noa();
    let runner = Runner {
        paths: &paths,
        cfg: &c,
        read_only: false,
    };
    let s1 = Scope::Session("s1".into());
    let rec = runner.run(&s1, &format!("compress m00001 m00004 {SUMMARY}"), 7, now());
    assert!(rec.ok, "{}", rec.message);
    let j = rec.to_json();
    assert_eq!(j["seq"], 7);
    assert_eq!(j["command"], format!("compress m00001 m00004 {SUMMARY}"));
    assert_eq!(j["result"]["blocks"][0]["blockId"], "b1");
    assert_eq!(
        j["result"]["blocks"][0]["archiveRel"],
        "tier1/b1_m00001-m00004.md"
    );
    assert!(j["message"]
        .as_str()
        .expect("panel")
        .starts_with("▣ noa | "));
    // The JSON form: the runtime's Compress input, block ids as endpoints.
    let rec = runner.run(
        &s1,
        &format!("compress {}", input(&[("b1", "m00006")])),
        8,
        now(),
    );
    assert!(rec.ok, "{}", rec.message);
    assert_eq!(rec.result["blocks"][0]["tier"], 2);
    let rec = runner.run(&s1, "nonsense", 8, now());
    assert!(!rec.ok && matches!(rec.error, Some(TxnError::Invalid(_))));
    assert_eq!(rec.message, "unknown command `nonsense` (try `help`)");
    assert!(runner
        .run(&s1, "help", 9, now())
        .message
        .contains("compress START END SUMMARY"));
    assert!(matches!(
        runner.run(&s1, "compress m00001", 9, now()).error,
        Some(TxnError::Invalid(_))
    ));
    assert!(matches!(
        runner.run(&Scope::Root, "rebuild", 9, now()).error,
        Some(TxnError::Invalid(_))
    ));
    assert!(matches!(
        runner.run(&s1, "help!", 9, now()).error,
        Some(TxnError::Invalid(_))
    ));
    let ro = Runner {
        read_only: true,
        ..runner.clone()
    };
    assert_eq!(
        ro.run(&s1, "rebuild", 10, now()).error,
        Some(TxnError::ReadOnly)
    );
    assert_eq!(
        ro.run(&s1, "compress! m00007 m00008 x", 10, now()).error,
        Some(TxnError::ReadOnly)
    );
    assert!(ro.run(&s1, "help", 10, now()).ok);
}

/// A session whose transcript was written within `live_seconds` is live: its runtime holds
/// the state in memory and would overwrite ctl's work, so `compress` and `rebuild` answer
/// `EBUSY` saying why; `compress!` and `rebuild!` run anyway.
#[test]
fn a_live_session_is_busy_unless_forced() {
    let (d, paths) = chat_root(10);
    let live = NoaConfig {
        live_seconds: 120,
        ..ctl_noa()
    };
    let runner = Runner {
        paths: &paths,
        cfg: &live,
        read_only: false,
    };
    let s1 = Scope::Session("s1".into());
    let before = snapshot(d.path());
    for line in [
        format!("compress m00001 m00004 {SUMMARY}"),
        "rebuild".into(),
    ] {
        let rec = runner.run(&s1, &line, 1, Utc::now());
        assert!(matches!(rec.error, Some(TxnError::Live(_))), "{line}");
        assert!(rec.message.contains("looks live"), "{}", rec.message);
        assert!(rec.message.contains("compress!"), "{}", rec.message);
    }
    assert_eq!(snapshot(d.path()), before, "nothing written");
    let rec = runner.run(
        &s1,
        &format!("compress! m00001 m00004 {SUMMARY}"),
        2,
        Utc::now(),
    );
    assert!(rec.ok, "{}", rec.message);
    assert_eq!(state_of(&paths, "s1").blocks().len(), 1);
    let rec = runner.run(&s1, "rebuild!", 3, Utc::now());
    assert!(rec.ok, "{}", rec.message);
    assert_eq!(rec.result["blocks"], 1, "the journal batch replays");
    // An idle session (written long enough ago) is not live.
    let t = paths.transcript_path("s1");
    common::set_mtime(
        &t,
        std::time::SystemTime::now() - std::time::Duration::from_secs(600),
    );
    let rec = runner.run(&s1, "rebuild", 4, Utc::now());
    assert!(rec.ok, "{}", rec.message);
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
    let first = compress_s1(&paths, &[("m00011", "m00012")]).expect("first");
    let old = std::fs::read(&spath).expect("state");
    let second = compress_s1(&paths, &[("m00001", "m00002")]).expect("second");
    // The runtime's older version, written over the batch, then again after each recovery.
    std::fs::write(&spath, &old).expect("undo");
    *CLOBBER.lock().unwrap_or_else(|e| e.into_inner()) = Some((spath.clone(), old.clone()));
    failpoint::set_thread("recover.after-rollforward", Action::Call(clobber));
    let third = compress_s1(&paths, &[("m00003", "m00004")]);
    // The range of the undone batch again: refused or compressed again, never an I/O error.
    std::fs::write(&spath, &old).expect("undo");
    let again = compress_s1(&paths, &[("m00001", "m00002")]);
    failpoint::clear_thread();
    let third = third.expect("third");
    assert!(
        !matches!(again, Err(TxnError::Io(_))),
        "the undone range again: {again:?}"
    );
    // The last clobber came after that command's roll-forward; the committed batches are in
    // the journal, and the next command (here: recovery alone) rolls them forward again.
    txn::recover(&paths, "s1", &ctl_noa(), now()).expect("recover");
    let state = state_of(&paths, "s1");
    let calls: Vec<&str> = state
        .blocks()
        .iter()
        .map(|b| b.compress_call_id.as_str())
        .collect();
    for out in [&first, &second, &third] {
        let id = out.result["callId"].as_str().expect("callId");
        assert!(calls.contains(&id), "{id} missing from {calls:?}");
    }
    let mut ids: Vec<String> = state.blocks().iter().map(|b| b.block_id.clone()).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "a block id used twice");
}
