//! Store layer tests: durable writes, failpoints, the session lock, the journal, root discovery.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use normafs::store::durable::{
    atomic_replace, create_dir_all_durable, create_new_durable, is_runtime_temp, is_temp_name,
    remove_durable, temp_target_name,
};
use normafs::store::failpoint::{self, Action};
use normafs::store::journal::{self, JournalEntry};
use normafs::store::lock::{self, LockError};
use normafs::store::root::{
    discover, escape_name, valid_session_name, BadEntry, BadName, RootOverrides, RootPaths,
};
use serde_json::{json, Map, Value};

/// Disarms the thread's failpoints when a test ends, even by a failed assertion.
struct Armed;

impl Armed {
    fn new(name: &str, action: Action) -> Armed {
        failpoint::set_thread(name, action);
        Armed
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        failpoint::clear_thread();
    }
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temp dir")
}

/// Sorted names in `dir`.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

// ---------------------------------------------------------------- durable writes

#[test]
fn atomic_replace_creates_then_replaces_and_touches_nothing_else() {
    let dir = tempdir();
    let other = dir.path().join("other.txt");
    fs::write(&other, b"neighbour").expect("write");
    let target = dir.path().join("state.json");

    atomic_replace(&target, b"{\"v\":1}\n").expect("create");
    assert_eq!(fs::read(&target).expect("read"), b"{\"v\":1}\n");
    atomic_replace(&target, b"{\"v\":2}\n").expect("replace");
    assert_eq!(fs::read(&target).expect("read"), b"{\"v\":2}\n");
    atomic_replace(&target, b"").expect("replace with empty");
    assert_eq!(fs::read(&target).expect("read"), b"");

    assert_eq!(listing(dir.path()), ["other.txt", "state.json"]);
    assert_eq!(fs::read(&other).expect("read"), b"neighbour");
}

#[test]
fn injected_failure_before_rename_keeps_old_file_and_leaves_no_temp() {
    for point in ["atomic.after-temp-write", "atomic.before-rename"] {
        let dir = tempdir();
        let target = dir.path().join("state.json");
        fs::write(&target, b"old bytes").expect("write");

        let _armed = Armed::new(point, Action::Error);
        let err = atomic_replace(&target, b"new bytes").expect_err("failpoint must fail");
        assert_eq!(err.kind(), io::ErrorKind::Other);
        assert_eq!(err.to_string(), format!("injected failure at {point}"));

        assert_eq!(fs::read(&target).expect("read"), b"old bytes", "{point}");
        assert_eq!(listing(dir.path()), ["state.json"], "{point}");
    }
}

#[test]
fn injected_failure_on_a_new_target_creates_nothing() {
    let dir = tempdir();
    let target = dir.path().join("new.md");
    let _armed = Armed::new("atomic.before-rename", Action::Error);
    assert!(atomic_replace(&target, b"x").is_err());
    assert!(create_new_durable(&target, b"x").is_err());
    assert_eq!(listing(dir.path()), Vec::<String>::new());
}

#[test]
fn injected_panic_before_rename_still_removes_the_temp_file() {
    let dir = tempdir();
    let target = dir.path().join("state.json");
    fs::write(&target, b"old").expect("write");
    let result = std::panic::catch_unwind(|| {
        let _armed = Armed::new("atomic.after-temp-write", Action::Panic);
        atomic_replace(&target, b"new")
    });
    assert!(result.is_err(), "the failpoint panics");
    assert_eq!(fs::read(&target).expect("read"), b"old");
    assert_eq!(listing(dir.path()), ["state.json"]);
}

#[test]
fn failure_after_rename_reports_error_but_target_is_replaced() {
    let dir = tempdir();
    let target = dir.path().join("state.json");
    fs::write(&target, b"old").expect("write");
    let _armed = Armed::new("atomic.after-rename", Action::Error);
    assert!(atomic_replace(&target, b"new").is_err());
    assert_eq!(fs::read(&target).expect("read"), b"new");
    assert_eq!(listing(dir.path()), ["state.json"]);
}

#[test]
fn nth_thread_failpoint_fails_only_that_write() {
    let dir = tempdir();
    let _armed = Armed::new("unused", Action::Error);
    failpoint::set_thread_nth("atomic.before-rename", 2, Action::Error);
    let a = dir.path().join("a.md");
    let b = dir.path().join("b.md");
    let c = dir.path().join("c.md");
    assert!(create_new_durable(&a, b"a").is_ok());
    assert!(create_new_durable(&b, b"b").is_err());
    assert!(create_new_durable(&c, b"c").is_ok());
    assert_eq!(listing(dir.path()), ["a.md", "c.md"]);
}

#[test]
fn replace_keeps_the_permission_bits_of_the_old_file() {
    let dir = tempdir();
    let target = dir.path().join("state.json");
    fs::write(&target, b"old").expect("write");
    fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).expect("chmod");
    atomic_replace(&target, b"new").expect("replace");
    assert_eq!(mode(&target), 0o600);
}

#[test]
fn new_files_are_at_most_0644() {
    let dir = tempdir();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    atomic_replace(&a, b"a").expect("create");
    create_new_durable(&b, b"b").expect("create");
    for path in [a, b] {
        assert_eq!(mode(&path) & !0o644, 0, "{}", path.display());
        assert_ne!(mode(&path) & 0o600, 0, "owner can read and write");
    }
}

#[test]
fn create_new_durable_refuses_to_overwrite() {
    let dir = tempdir();
    let target = dir.path().join("b1_m00001-m00006.md");
    create_new_durable(&target, b"first").expect("create");
    assert_eq!(fs::read(&target).expect("read"), b"first");

    let err = create_new_durable(&target, b"second").expect_err("exists");
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert_eq!(fs::read(&target).expect("read"), b"first");

    let link = dir.path().join("dangling.md");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).expect("symlink");
    let err = create_new_durable(&link, b"x").expect_err("a dangling symlink exists too");
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    assert!(!dir.path().join("nowhere").exists());

    assert_eq!(listing(dir.path()), ["b1_m00001-m00006.md", "dangling.md"]);
}

#[test]
fn writes_need_an_existing_directory_and_create_dir_all_durable_makes_it() {
    let dir = tempdir();
    let nested = dir.path().join("noa/s1/tier2");
    let target = nested.join("b3_m00001-m00009.md");
    assert_eq!(
        create_new_durable(&target, b"x").map_err(|e| e.kind()),
        Err(io::ErrorKind::NotFound)
    );
    create_dir_all_durable(&nested).expect("mkdir -p");
    create_dir_all_durable(&nested).expect("idempotent");
    create_new_durable(&target, b"x").expect("create");
    assert_eq!(fs::read(&target).expect("read"), b"x");

    let file = dir.path().join("plain");
    fs::write(&file, b"").expect("write");
    assert!(create_dir_all_durable(&file.join("sub")).is_err());
}

#[test]
fn remove_durable_unlinks_and_reports_missing_files() {
    let dir = tempdir();
    let target = dir.path().join("x.md");
    fs::write(&target, b"x").expect("write");
    remove_durable(&target).expect("remove");
    assert!(!target.exists());
    assert_eq!(
        remove_durable(&target).map_err(|e| e.kind()),
        Err(io::ErrorKind::NotFound)
    );
}

#[test]
fn temp_names_are_recognised() {
    assert!(is_temp_name(".state.json.tmp-0123456789abcdef"));
    assert_eq!(
        temp_target_name(".b1_m00001-m00006.md.tmp-00ff"),
        Some("b1_m00001-m00006.md")
    );
    for name in [
        "state.json",
        "state.json.tmp-00ff",
        ".state.json.tmp-",
        ".state.json.tmp-zz",
        ".normafs.lock",
        ".tmp-00",
    ] {
        assert!(!is_temp_name(name), "{name}");
    }
    // The runtime's temp files (SPEC 1): its state writer's and its archiver's.
    for name in [".noa-state-123456.tmp", ".noa-4242.tmp"] {
        assert!(is_runtime_temp(name) && is_temp_name(name), "{name}");
        assert_eq!(temp_target_name(name), None, "{name}");
    }
    for name in [
        ".noa-.tmp",
        "noa-state-1.tmp",
        ".noa-state-1.tmp.x",
        ".normafs.lock",
    ] {
        assert!(!is_runtime_temp(name), "{name}");
    }
}

// ---------------------------------------------------------------- crash tests (NORMAFS_FAILPOINT)

const CRASH_DIR: &str = "NORMAFS_TEST_CRASH_DIR";
const CRASH_OP: &str = "NORMAFS_TEST_CRASH_OP";

/// Not a test by itself: the body that `crash_*` tests run in a child process with
/// `NORMAFS_FAILPOINT` set. Does nothing when run directly.
#[test]
#[ignore = "run as a child process by the crash tests"]
fn crash_child() {
    let (Some(dir), Some(op)) = (std::env::var_os(CRASH_DIR), std::env::var(CRASH_OP).ok()) else {
        return;
    };
    let dir = PathBuf::from(dir);
    match op.as_str() {
        "replace" => {
            let _ = atomic_replace(&dir.join("state.json"), b"new state");
        }
        "journal" => {
            for n in 1..=3 {
                let _ = journal::append(&dir.join("ctl.jsonl"), &entry(&format!("ctl-{n}")));
            }
        }
        _ => {}
    }
}

/// Runs `crash_child` with the failpoint armed through the environment; returns its status.
fn run_crash_child(dir: &Path, op: &str, failpoint_spec: &str) -> std::process::ExitStatus {
    let exe = std::env::current_exe().expect("test binary path");
    Command::new(exe)
        .args(["--exact", "crash_child", "--ignored", "--test-threads=1"])
        .env(CRASH_DIR, dir)
        .env(CRASH_OP, op)
        .env(failpoint::ENV_VAR, failpoint_spec)
        .output()
        .expect("run the child")
        .status
}

#[test]
fn crash_before_rename_leaves_old_file_and_recognisable_temp_debris() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempdir();
    fs::write(dir.path().join("state.json"), b"old state").expect("write");
    let status = run_crash_child(dir.path(), "replace", "atomic.before-rename");
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "child aborted: {status:?}"
    );

    assert_eq!(
        fs::read(dir.path().join("state.json")).expect("read"),
        b"old state"
    );
    let names = listing(dir.path());
    assert_eq!(names.len(), 2, "{names:?}");
    let temp = names.iter().find(|n| n.as_str() != "state.json");
    let temp = temp.expect("a temp file");
    assert_eq!(temp_target_name(temp), Some("state.json"));
    assert_eq!(
        fs::read(dir.path().join(temp)).expect("read"),
        b"new state",
        "the temp file was complete and fsynced"
    );
}

#[test]
fn crash_at_nth_journal_append_keeps_earlier_commits() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempdir();
    let status = run_crash_child(dir.path(), "journal", "journal.before-append:2");
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "child aborted: {status:?}"
    );
    let read = journal::read(&dir.path().join("ctl.jsonl")).expect("read");
    let ids: Vec<&str> = read
        .entries
        .iter()
        .map(|(_, e)| e.call_id.as_str())
        .collect();
    assert_eq!(ids, ["ctl-1"]);
    assert_eq!(read.torn_tail, None);
}

#[test]
fn child_without_failpoint_completes() {
    let dir = tempdir();
    let status = run_crash_child(dir.path(), "journal", "some.other-point");
    assert!(status.success(), "{status:?}");
    let read = journal::read(&dir.path().join("ctl.jsonl")).expect("read");
    assert_eq!(read.entries.len(), 3);
}

// ---------------------------------------------------------------- lock

#[test]
fn lock_creates_root_and_file_and_excludes_a_second_holder() {
    let dir = tempdir();
    let root = dir.path().join("noa/s1");
    let held = lock::acquire(&root, Duration::from_secs(1)).expect("first lock");
    assert_eq!(held.path(), root.join(".normafs.lock"));
    assert!(held.path().is_file());

    let started = Instant::now();
    let second = lock::acquire(&root, Duration::from_millis(100));
    assert!(matches!(second, Err(LockError::Busy)), "{second:?}");
    assert!(started.elapsed() >= Duration::from_millis(100), "it waited");

    let root2 = root.clone();
    let from_thread = std::thread::spawn(move || {
        matches!(lock::acquire(&root2, Duration::ZERO), Err(LockError::Busy))
    })
    .join();
    assert!(matches!(from_thread, Ok(true)));

    drop(held);
    let again = lock::acquire(&root, Duration::ZERO).expect("free after drop");
    drop(again);
}

#[test]
fn lock_waiter_gets_the_lock_when_the_holder_releases_it() {
    let dir = tempdir();
    let root = dir.path().to_path_buf();
    let held = lock::acquire(&root, Duration::ZERO).expect("lock");
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        drop(held);
    });
    let started = Instant::now();
    let got = lock::acquire(&root, Duration::from_secs(5));
    assert!(got.is_ok(), "{got:?}");
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(holder.join().is_ok());
}

#[test]
fn locks_of_different_sessions_are_independent() {
    let dir = tempdir();
    let a = lock::acquire(&dir.path().join("a"), Duration::ZERO).expect("a");
    let b = lock::acquire(&dir.path().join("b"), Duration::ZERO).expect("b");
    drop((a, b));
}

// ---------------------------------------------------------------- journal

fn entry(call_id: &str) -> JournalEntry {
    JournalEntry {
        at: "2026-11-30T12:00:00Z".to_owned(),
        input: json!({"content":[{"startId":"m00001","endId":"m00004","summary":"did things\nover lines"}]}),
        blocks: vec![json!({"blockId":"b1","tier":1})],
        call_id: call_id.to_owned(),
        extra: Map::new(),
    }
}

#[test]
fn journal_append_read_round_trip_is_lossless() {
    let dir = tempdir();
    let path = dir.path().join("ctl.jsonl");
    let mut second = entry("ctl-2");
    second.extra.insert("zeta".to_owned(), json!(1));
    second.extra.insert("alpha".to_owned(), json!({"k":[1,2]}));
    journal::append(&path, &entry("ctl-1")).expect("append 1");
    journal::append(&path, &second).expect("append 2");

    let text = fs::read_to_string(&path).expect("read");
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    assert_eq!(lines.len(), 2, "one compact line per entry: {text}");
    assert!(text.ends_with('\n'));
    assert!(lines[1].starts_with(r#"{"at":"2026-11-30T12:00:00Z","input":"#));
    assert!(lines[1].ends_with(r#""callId":"ctl-2","zeta":1,"alpha":{"k":[1,2]}}"#));

    let read = journal::read(&path).expect("read");
    assert_eq!(read.entries, vec![(1, entry("ctl-1")), (2, second)]);
    assert_eq!(read.torn_tail, None);
    assert!(read.malformed.is_empty());
    assert_eq!(mode(&path) & !0o644, 0);
}

#[test]
fn missing_journal_is_empty() {
    let dir = tempdir();
    let read = journal::read(&dir.path().join("ctl.jsonl")).expect("read");
    assert_eq!(read, journal::JournalRead::default());
}

#[test]
fn unterminated_last_line_is_torn_even_if_it_parses_and_can_be_cut() {
    let dir = tempdir();
    let path = dir.path().join("ctl.jsonl");
    journal::append(&path, &entry("ctl-1")).expect("append");
    let committed = fs::read(&path).expect("read");

    for tail in [
        &br#"{"at":"2026-11-30T12:05"#[..],
        &serde_json::to_vec(&entry("ctl-2")).expect("json"),
    ] {
        let mut bytes = committed.clone();
        bytes.extend_from_slice(tail);
        fs::write(&path, &bytes).expect("write");

        let read = journal::read(&path).expect("read");
        assert_eq!(read.entries.len(), 1);
        assert_eq!(read.torn_tail, Some(committed.len() as u64));
        assert!(read.malformed.is_empty());

        let err = journal::append(&path, &entry("ctl-3")).expect_err("refuses after a torn tail");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(
            fs::read(&path).expect("read"),
            bytes,
            "append changed nothing"
        );

        journal::cut_torn_tail(&path, committed.len() as u64).expect("cut");
        assert_eq!(fs::read(&path).expect("read"), committed);
    }
    journal::append(&path, &entry("ctl-3")).expect("append after the cut");
    let ids: Vec<String> = journal::read(&path)
        .expect("read")
        .entries
        .into_iter()
        .map(|(_, e)| e.call_id)
        .collect();
    assert_eq!(ids, ["ctl-1", "ctl-3"]);
}

#[test]
fn a_journal_that_is_only_a_torn_line_is_cut_to_empty() {
    let dir = tempdir();
    let path = dir.path().join("ctl.jsonl");
    fs::write(&path, b"{\"at\"").expect("write");
    let read = journal::read(&path).expect("read");
    assert_eq!(read.torn_tail, Some(0));
    assert!(read.entries.is_empty());
    journal::cut_torn_tail(&path, 0).expect("cut");
    assert_eq!(fs::read(&path).expect("read"), b"");
}

#[test]
fn cut_torn_tail_only_cuts_at_a_line_start_within_the_file() {
    let dir = tempdir();
    let path = dir.path().join("ctl.jsonl");
    journal::append(&path, &entry("ctl-1")).expect("append");
    let before = fs::read(&path).expect("read");
    let len = before.len() as u64;
    for bad in [5, len + 10] {
        let err = journal::cut_torn_tail(&path, bad).expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "offset {bad}");
    }
    assert_eq!(fs::read(&path).expect("read"), before);
}

#[test]
fn malformed_lines_are_reported_and_skipped() {
    let dir = tempdir();
    let path = dir.path().join("ctl.jsonl");
    let good = serde_json::to_string(&entry("ctl-1")).expect("json");
    let text = format!("{good}\nnot json\n\n{{\"at\":\"x\"}}\n{good}\n");
    fs::write(&path, text).expect("write");
    let read = journal::read(&path).expect("read");
    let lines: Vec<u64> = read.entries.iter().map(|(n, _)| *n).collect();
    assert_eq!(lines, [1, 5]);
    let bad: Vec<u64> = read.malformed.iter().map(|(n, _)| *n).collect();
    assert_eq!(bad, [2, 4], "{:?}", read.malformed);
    assert!(
        read.malformed[1].1.contains("input"),
        "{:?}",
        read.malformed
    );
    assert_eq!(read.torn_tail, None);
}

#[test]
fn journal_failpoints_bracket_the_commit() {
    let dir = tempdir();
    let path = dir.path().join("ctl.jsonl");
    journal::append(&path, &entry("ctl-1")).expect("append");
    let before = fs::read(&path).expect("read");
    {
        let _armed = Armed::new("journal.before-append", Action::Error);
        assert!(journal::append(&path, &entry("ctl-2")).is_err());
        assert_eq!(fs::read(&path).expect("read"), before, "nothing written");
    }
    {
        let _armed = Armed::new("journal.after-append", Action::Error);
        assert!(journal::append(&path, &entry("ctl-3")).is_err());
    }
    let ids: Vec<String> = journal::read(&path)
        .expect("read")
        .entries
        .into_iter()
        .map(|(_, e)| e.call_id)
        .collect();
    assert_eq!(
        ids,
        ["ctl-1", "ctl-3"],
        "after-append fires once the line is durable"
    );
}

#[test]
fn journal_entry_requires_its_fields_and_keeps_unknown_ones() {
    let line = r#"{"callId":"ctl-9","at":"t","input":{"content":[]},"blocks":["b1"],"v":2}"#;
    let parsed: JournalEntry = serde_json::from_str(line).expect("parse");
    assert_eq!(parsed.call_id, "ctl-9");
    assert_eq!(parsed.blocks, vec![Value::from("b1")]);
    assert_eq!(parsed.extra.get("v"), Some(&json!(2)));
    let missing = r#"{"at":"t","input":{},"blocks":[]}"#;
    assert!(serde_json::from_str::<JournalEntry>(missing).is_err());
}

// ---------------------------------------------------------------- root layout and discovery

#[test]
fn root_paths_default_and_overridden() {
    let root = Path::new("/r");
    let paths = RootPaths::from_root(root);
    assert_eq!(paths.transcripts, Path::new("/r/transcripts"));
    assert_eq!(paths.memory, Path::new("/r/memory"));
    assert_eq!(paths.archives, Path::new("/r/noa"));
    assert_eq!(
        paths.transcript_path("s1"),
        Path::new("/r/transcripts/s1.jsonl")
    );
    assert_eq!(
        paths.subagents_dir("s1"),
        Path::new("/r/transcripts/s1/subagents")
    );
    assert_eq!(paths.archive_root("s1"), Path::new("/r/noa/s1"));
    assert_eq!(paths.state_path("s1"), Path::new("/r/noa/s1/state.json"));
    assert_eq!(paths.journal_path("s1"), Path::new("/r/noa/s1/ctl.jsonl"));

    let paths = RootPaths::with_overrides(
        root,
        RootOverrides {
            transcripts: None,
            memory: Some(PathBuf::from("/m")),
            archives: Some(PathBuf::from("/a")),
        },
    );
    assert_eq!(paths.transcripts, Path::new("/r/transcripts"));
    assert_eq!(paths.memory, Path::new("/m"));
    assert_eq!(paths.state_path("s1"), Path::new("/a/s1/state.json"));
}

#[test]
fn session_name_validation() {
    let ok = ["7f0c2a", "a b", "sess-1.2", "한글", "x..y"];
    for name in ok {
        assert_eq!(valid_session_name(OsStr::new(name)), Ok(name));
    }
    let bad: [(&[u8], BadName); 11] = [
        (b"", BadName::Empty),
        (b".", BadName::DotOrDotDot),
        (b"..", BadName::DotOrDotDot),
        (b"a/b", BadName::Slash),
        (b"a\0b", BadName::Nul),
        (b"caf\xe9", BadName::NotUtf8),
        (b"a\nb", BadName::Control),
        (b"tab\there", BadName::Control),
        (b"del\x7f", BadName::Control),
        ("c1\u{85}".as_bytes(), BadName::Control),
        (b".hidden", BadName::LeadingDot),
    ];
    for (name, why) in bad {
        assert_eq!(
            valid_session_name(OsStr::from_bytes(name)),
            Err(why),
            "{name:?}"
        );
    }
}

#[test]
fn escaped_names_fit_on_one_line() {
    assert_eq!(escape_name(OsStr::from_bytes(b"a\nb.jsonl")), "a\\nb.jsonl");
    assert_eq!(escape_name(OsStr::from_bytes(b"caf\xe9")), "caf\\xe9");
    assert_eq!(
        escape_name(OsStr::from_bytes(b"back\\slash")),
        "back\\\\slash"
    );
    assert_eq!(escape_name(OsStr::new("한글 ok")), "한글 ok");
}

fn touch(path: &Path) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).expect("mkdir");
    }
    fs::write(path, b"").expect("write");
}

fn bad(path_rel: &str, reason: &str) -> BadEntry {
    BadEntry {
        path_rel: path_rel.to_owned(),
        reason: reason.to_owned(),
    }
}

#[test]
fn discovery_finds_sessions_from_either_directory() {
    let dir = tempdir();
    let root = dir.path();
    touch(&root.join("transcripts/only-transcript.jsonl"));
    touch(&root.join("transcripts/both.jsonl"));
    touch(&root.join("transcripts/both/subagents/agent-1.jsonl"));
    fs::create_dir_all(root.join("noa/both/tier1")).expect("mkdir");
    fs::create_dir_all(root.join("noa/only-archive")).expect("mkdir");
    // Not sessions, not bad names:
    fs::create_dir_all(root.join("transcripts/orphan-subagents/subagents")).expect("mkdir");
    fs::create_dir_all(root.join("transcripts/.cache")).expect("mkdir");
    touch(&root.join("transcripts/notes.txt"));
    touch(&root.join("transcripts/.both.jsonl.tmp-00ab"));
    touch(&root.join("transcripts/.normafs.lock"));
    touch(&root.join("noa/README"));
    touch(&root.join("noa/.normafs-anything"));
    fs::create_dir_all(root.join("noa/.x.tmp-0f")).expect("mkdir");
    touch(&root.join("memory/a.md"));

    let found = discover(&RootPaths::from_root(root)).expect("discover");
    assert_eq!(found.sessions, ["both", "only-archive", "only-transcript"]);
    assert_eq!(found.bad_names, Vec::<BadEntry>::new());
}

#[test]
fn discovery_reports_each_kind_of_bad_name() {
    let dir = tempdir();
    let t = dir.path().join("transcripts");
    let n = dir.path().join("noa");
    fs::create_dir_all(&t).expect("mkdir");
    fs::create_dir_all(&n).expect("mkdir");
    touch(&t.join("good.jsonl"));
    touch(&t.join(OsStr::from_bytes(b"caf\xe9.jsonl")));
    touch(&t.join("new\nline.jsonl"));
    touch(&t.join(".hidden.jsonl"));
    touch(&t.join(".jsonl"));
    touch(&t.join("bell\x07.jsonl"));
    fs::create_dir_all(n.join(".trash")).expect("mkdir");
    fs::create_dir_all(n.join("tab\tname")).expect("mkdir");
    fs::create_dir_all(n.join(OsStr::from_bytes(b"\xff"))).expect("mkdir");

    let found = discover(&RootPaths::from_root(dir.path())).expect("discover");
    assert_eq!(found.sessions, ["good"]);
    assert_eq!(
        found.bad_names,
        vec![
            bad("noa/.trash", "name starts with `.`"),
            bad("noa/\\xff", "name is not valid UTF-8"),
            bad("noa/tab\\tname", "name contains a control character"),
            bad("transcripts/.hidden.jsonl", "name starts with `.`"),
            bad("transcripts/.jsonl", "empty name"),
            bad(
                "transcripts/bell\\u{7}.jsonl",
                "name contains a control character"
            ),
            bad("transcripts/caf\\xe9.jsonl", "name is not valid UTF-8"),
            bad(
                "transcripts/new\\nline.jsonl",
                "name contains a control character"
            ),
        ]
    );
}

#[test]
fn discovery_of_missing_directories_is_empty() {
    let dir = tempdir();
    let found = discover(&RootPaths::from_root(&dir.path().join("absent"))).expect("discover");
    assert!(found.sessions.is_empty() && found.bad_names.is_empty());

    touch(&dir.path().join("transcripts/s.jsonl"));
    let found = discover(&RootPaths::from_root(dir.path())).expect("no noa/ dir");
    assert_eq!(found.sessions, ["s"]);
}

#[test]
fn discovery_uses_override_directories() {
    let dir = tempdir();
    touch(&dir.path().join("root/transcripts/ignored.jsonl"));
    touch(&dir.path().join("elsewhere/t/from-flag.jsonl"));
    fs::create_dir_all(dir.path().join("elsewhere/a/archived")).expect("mkdir");
    fs::create_dir_all(dir.path().join("root/noa/default-archive")).expect("mkdir");
    let paths = RootPaths::with_overrides(
        &dir.path().join("root"),
        RootOverrides {
            transcripts: Some(dir.path().join("elsewhere/t")),
            memory: None,
            archives: Some(dir.path().join("elsewhere/a")),
        },
    );
    let found = discover(&paths).expect("discover");
    assert_eq!(found.sessions, ["archived", "from-flag"]);
}

#[test]
fn discovery_follows_symlinks_only_inside_their_directory() {
    use std::os::unix::fs::symlink;
    let dir = tempdir();
    let t = dir.path().join("transcripts");
    let n = dir.path().join("noa");
    touch(&t.join("real.jsonl"));
    touch(&t.join("real/subagents/agent-1.jsonl"));
    touch(&dir.path().join("outside.jsonl"));
    fs::create_dir_all(n.join("real")).expect("mkdir");
    symlink("real.jsonl", t.join("alias.jsonl")).expect("symlink");
    symlink(dir.path().join("outside.jsonl"), t.join("escape.jsonl")).expect("symlink");
    symlink("missing.jsonl", t.join("dangling.jsonl")).expect("symlink");
    symlink("real/subagents/agent-1.jsonl", t.join("nested.jsonl")).expect("symlink");
    symlink("real", t.join("dir.jsonl")).expect("symlink");
    symlink("real", n.join("linked")).expect("symlink");
    symlink(dir.path(), n.join("away")).expect("symlink");

    let found = discover(&RootPaths::from_root(dir.path())).expect("discover");
    assert_eq!(found.sessions, ["alias", "linked", "real"]);
    let file_reason = "symlink does not resolve to a regular file inside its backing directory";
    let dir_reason = "symlink does not resolve to a directory inside its backing directory";
    assert_eq!(
        found.bad_names,
        vec![
            bad("noa/away", dir_reason),
            bad("transcripts/dangling.jsonl", file_reason),
            bad("transcripts/dir.jsonl", file_reason),
            bad("transcripts/escape.jsonl", file_reason),
            bad("transcripts/nested.jsonl", file_reason),
        ]
    );
}

#[test]
fn a_fifo_named_like_a_transcript_is_not_a_session() {
    let dir = tempdir();
    let t = dir.path().join("transcripts");
    fs::create_dir_all(&t).expect("mkdir");
    let fifo = std::ffi::CString::new(t.join("pipe.jsonl").as_os_str().as_bytes()).expect("path");
    // SAFETY: `fifo` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let found = discover(&RootPaths::from_root(dir.path())).expect("discover");
    assert!(found.sessions.is_empty());
    assert_eq!(
        found.bad_names,
        vec![bad("transcripts/pipe.jsonl", "not a regular file")]
    );
}

#[test]
fn the_corpus_has_its_five_sessions_and_one_sidechain() {
    let root = common::norma_data().join("corpus");
    let paths = RootPaths::from_root(&root);
    let found = discover(&paths).expect("discover");
    assert_eq!(
        found.sessions,
        [
            "s1-small",
            "s2-tier1",
            "s3-tier2",
            "s4-subagent",
            "s5-fork-of-s2"
        ]
    );
    assert!(found.bad_names.is_empty(), "{:?}", found.bad_names);
    let sides = normafs::store::transcripts::sidechain_paths(&paths.transcripts, "s4-subagent")
        .expect("sidechains");
    assert_eq!(sides.len(), 1);
    assert_eq!(sides[0].0, "a7f3c2");
}

/// `view --at`'s read of a transcript stops once its first messages are complete: those
/// messages are the whole file's, and a point past the end reads all of it.
#[test]
fn the_first_messages_of_a_transcript_are_the_whole_files() {
    use normafs::store::session;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = common::Session::new("s1");
    for i in 0..40 {
        // Some 12 MB in all: more than one of the reader's chunks.
        s.user(&format!(
            "question {i} {}",
            "x".repeat((i % 5 + 1) * 100_000)
        ))
        .assistant(&format!("answer {i}"));
    }
    let path = dir.path().join("s1.jsonl");
    // A torn last line: a record cut short, as a writer leaves it mid-append.
    let mut text = s.jsonl();
    text.push_str("{\"uuid\":\"torn\",\"type\":\"mess");
    fs::write(&path, text).expect("write");
    let (whole, err) = session::load_transcript(&path, "s1");
    assert!(err.is_none());
    let all = session::messages(&whole);
    assert_eq!(all.len(), 80);
    for n in [0, 1, 5, 79, 80, 81, 200] {
        let (first, err) = session::load_first_messages(&path, "s1", n);
        assert!(err.is_none());
        let got = session::messages(&first);
        assert!(got.len() >= n.min(80), "{n}: {} messages", got.len());
        let k = n.min(80);
        assert_eq!(
            got[..k]
                .iter()
                .map(|m| serde_json::to_string(m).ok())
                .collect::<Vec<_>>(),
            all[..k]
                .iter()
                .map(|m| serde_json::to_string(m).ok())
                .collect::<Vec<_>>(),
            "{n}"
        );
        if n >= 80 {
            assert_eq!(got.len(), 80, "{n}: read to the end");
        }
        if n <= 5 {
            assert!(got.len() < 80, "{n}: the read stops early");
        }
    }
}
