//! Crash safety of the ctl transactions (SPEC 4.4, 4.7, 8): `normafs ctl` runs compress and
//! rebuild in a child process that dies at every named failpoint and by SIGKILL at random
//! moments; after each crash the root is consistent, and the next command recovers it fully.
//!
//! Environment: `NORMAFS_TORTURE_KILLS` (random kills, default 30), `NORMAFS_TORTURE_SEED`
//! (the PRNG seed, default fixed so a failure replays). Each test prints a one-line `crash:`
//! summary on stderr (`scripts/torture.sh` shows them).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use common::{copy_tree, ctl_noa, snapshot, text_of, write_session, Session};
use normafs::format::archive;
use normafs::format::state::{parse_state, State};
use normafs::store::failpoint::{self, Action};
use normafs::store::journal::{self, JournalRead};
use normafs::store::root::RootPaths;
use normafs::store::txn;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_normafs");
const SID: &str = "s1";
const SUMMARY: &str = "The user asked questions and got long answers about the build.";
/// [`ctl_noa`] as the ctl/audit flags (SPEC 10): ranges compressible in a short session, no
/// batch minimum, and no session counted as live (each root is written just before its command
/// runs).
const FLAGS: [&str; 8] = [
    "--protect-recent-messages",
    "2",
    "--protect-recent-tokens",
    "0",
    "--min-range-chars",
    "0",
    "--live-seconds",
    "0",
];
/// Messages in the test session: enough for several compress commands and a follow-up.
const MESSAGES: usize = 30;
/// The range the "next compress" after a crash uses; no scenario touches it.
const NEXT_RANGE: (&str, &str) = ("m00021", "m00022");
/// Highest `:<n>` tried per failpoint and scenario (no scenario hits any name this often).
const MAX_HITS: u64 = 12;

/// The runtime's Compress input for these ranges.
fn ranges(rs: &[(&str, &str)]) -> String {
    json!({"content": rs.iter().map(|(s, e)| json!({"startId": s, "endId": e, "topic": "t", "summary": SUMMARY})).collect::<Vec<_>>()}).to_string()
}

// ---------------------------------------------------------------------------------------------
// Scenarios: a root prepared in-process, then one ctl command run in a child.

/// What state a scenario's root is in before its command, and what follows a crash.
#[derive(Clone, Copy, PartialEq)]
enum Follow {
    /// Either the next compress or a rebuild recovers it.
    Any,
    /// Only a rebuild (the root holds damage that only rebuild repairs).
    Rebuild,
}

struct Scenario {
    name: &'static str,
    setup: fn(&Path),
    command: fn() -> Vec<String>,
    follow: Follow,
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "compress-first",
            setup: setup_fresh,
            command: || words(&["compress", "m00001", "m00004", SUMMARY]),
            follow: Follow::Any,
        },
        Scenario {
            name: "compress-two-ranges",
            setup: setup_one_block,
            command: || {
                vec![
                    "compress".into(),
                    ranges(&[("m00005", "m00008"), ("m00009", "m00012")]),
                ]
            },
            follow: Follow::Any,
        },
        Scenario {
            name: "compress-tier2",
            setup: setup_three_blocks,
            // Block endpoints: a tier-2 block absorbing the three tier-1 blocks.
            command: || vec!["compress".into(), ranges(&[("b1", "b3")])],
            follow: Follow::Any,
        },
        Scenario {
            name: "compress-after-crash",
            setup: setup_behind_and_torn,
            command: || words(&["compress", "m00013", "m00016", SUMMARY]),
            follow: Follow::Any,
        },
        Scenario {
            name: "rebuild-no-state",
            setup: setup_no_state,
            command: || words(&["rebuild"]),
            follow: Follow::Any,
        },
        Scenario {
            name: "rebuild-tampered",
            setup: setup_tampered,
            command: || words(&["rebuild"]),
            follow: Follow::Rebuild,
        },
        Scenario {
            name: "rebuild-malformed-state",
            setup: setup_malformed_state,
            command: || words(&["rebuild"]),
            follow: Follow::Rebuild,
        },
        Scenario {
            name: "rebuild-after-crash",
            setup: setup_behind_and_torn,
            command: || words(&["rebuild"]),
            follow: Follow::Any,
        },
    ]
}

fn words(ws: &[&str]) -> Vec<String> {
    ws.iter().map(|w| w.to_string()).collect()
}

fn paths(root: &Path) -> RootPaths {
    RootPaths::from_root(root)
}

fn setup_fresh(root: &Path) {
    let mut s = Session::new(SID);
    for i in 0..MESSAGES {
        if i % 2 == 0 {
            s.user(&format!("question {i} {}", text_of(30, 'q')));
        } else {
            s.assistant(&format!("answer {i} {}", text_of(30, 'a')));
        }
    }
    write_session(root, &s);
}

fn compress_in_process(root: &Path, rs: &[(&str, &str)]) {
    txn::compress(&paths(root), SID, &ranges(rs), &ctl_noa(), Utc::now()).expect("setup compress");
}

fn setup_one_block(root: &Path) {
    setup_fresh(root);
    compress_in_process(root, &[("m00001", "m00004")]);
}

fn setup_three_blocks(root: &Path) {
    setup_one_block(root);
    compress_in_process(root, &[("m00005", "m00008")]);
    compress_in_process(root, &[("m00009", "m00012")]);
}

/// Three tier-1 blocks absorbed into a tier-2 block, then `state.json` deleted.
fn setup_no_state(root: &Path) {
    setup_three_blocks(root);
    compress_in_process(root, &[("b1", "b3")]);
    std::fs::remove_file(paths(root).state_path(SID)).expect("rm state");
}

/// The frontmatter range of b2's archive edited: the state points at a mismatching archive.
fn setup_tampered(root: &Path) {
    setup_three_blocks(root);
    let p = paths(root);
    let st = read_state(&p).expect("state");
    let b2 = st.blocks().iter().find(|b| b.block_id == "b2").expect("b2");
    let path = p.archive_root(SID).join(&b2.archive_rel);
    let text = std::fs::read_to_string(&path).expect("archive");
    let tampered = text.replace("range: m00005-m00008", "range: m00005-m00007");
    assert_ne!(text, tampered);
    std::fs::write(&path, tampered).expect("tamper");
}

fn setup_malformed_state(root: &Path) {
    setup_three_blocks(root);
    std::fs::write(
        paths(root).state_path(SID),
        b"{ \"version\": 1, \"blocks\": [",
    )
    .expect("w");
}

/// What earlier crashes leave: a committed batch missing from `state.json` (the state write
/// failed after the journal commit), a torn journal line, temp files and the archive of a batch
/// that never committed.
fn setup_behind_and_torn(root: &Path) {
    setup_one_block(root);
    failpoint::set_thread("compress.after-journal", Action::Error);
    let out = txn::compress(
        &paths(root),
        SID,
        &ranges(&[("m00005", "m00008")]),
        &ctl_noa(),
        Utc::now(),
    );
    failpoint::clear_thread();
    assert_eq!(
        out.expect("committed with a warning").result["warnings"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let p = paths(root);
    let aroot = p.archive_root(SID);
    std::fs::write(
        aroot.join("tier1/b9_m00013-m00014.md"),
        "---\nblock: b9\ntier: 1\nrange: m00013-m00014\nmessage_count: 2\noriginal_tokens: 60\ncall: ctl-0badc0ffee\n---\n\n# 归档 b9 · Tier 1 · m00013–m00014\n\n---\n\n",
    )
    .expect("orphan");
    std::fs::write(aroot.join(".state.json.tmp-0123456789abcdef"), b"{\"vers").expect("tmp");
    std::fs::write(
        aroot.join("tier1/.b9_m00013-m00014.md.tmp-00ff"),
        b"---\nbl",
    )
    .expect("tmp");
    let mut j = std::fs::OpenOptions::new()
        .append(true)
        .open(p.journal_path(SID))
        .expect("journal");
    std::io::Write::write_all(&mut j, b"{\"at\":\"2026-11-30T12:00:00Z\",\"inp").expect("torn");
}

// ---------------------------------------------------------------------------------------------
// Child processes.

fn base_command(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove(failpoint::ENV_VAR)
        .stdin(Stdio::null());
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit, which
    // is async-signal-safe; aborting children then leave no core files.
    unsafe {
        c.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    c
}

fn ctl_command(root: &Path, cmd: &[String]) -> Command {
    let mut c = base_command(&["ctl"]);
    c.args(FLAGS).arg(root).arg(SID).args(cmd);
    c
}

fn run_ctl(root: &Path, cmd: &[String]) -> Output {
    ctl_command(root, cmd).output().expect("run normafs ctl")
}

/// `normafs audit ROOT --json`: the findings as (severity, "code path") pairs.
fn audit(root: &Path) -> Vec<(String, String)> {
    let mut c = base_command(&["audit"]);
    c.args(FLAGS).arg(root).arg("--json");
    let out = c.output().expect("run normafs audit");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "audit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("audit JSON");
    v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["severity"].as_str().unwrap_or("?").to_string(),
                format!(
                    "{} {} — {}",
                    f["code"].as_str().unwrap_or("?"),
                    f["path"].as_str().unwrap_or("?"),
                    f["message"].as_str().unwrap_or("")
                ),
            )
        })
        .collect()
}

/// "code path" of each finding of `severity`.
fn findings(a: &[(String, String)], severity: &str) -> BTreeSet<String> {
    a.iter()
        .filter(|(s, _)| s == severity)
        .map(|(_, f)| f.split(" — ").next().unwrap_or("").to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Invariants.

fn read_state(p: &RootPaths) -> Option<State> {
    let bytes = std::fs::read(p.state_path(SID)).ok()?;
    parse_state(&bytes).ok()
}

fn read_journal(p: &RootPaths) -> JournalRead {
    journal::read(&p.journal_path(SID)).expect("read journal")
}

fn journal_calls(j: &JournalRead) -> BTreeSet<String> {
    j.entries.iter().map(|(_, e)| e.call_id.clone()).collect()
}

/// The root as it was before the command: files, journal, error findings.
struct Before {
    files: BTreeMap<String, Vec<u8>>,
    calls: BTreeSet<String>,
    blocks: BTreeSet<(String, String)>,
    errors: BTreeSet<String>,
}

fn before(root: &Path) -> Before {
    let p = paths(root);
    Before {
        files: snapshot(root),
        calls: journal_calls(&read_journal(&p)),
        blocks: read_state(&p).map(|s| block_keys(&s)).unwrap_or_default(),
        errors: findings(&audit(root), "error"),
    }
}

fn block_keys(s: &State) -> BTreeSet<(String, String)> {
    s.blocks()
        .iter()
        .map(|b| (b.block_id.clone(), b.compress_call_id.clone()))
        .collect()
}

fn rel_of(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

/// Invariants of a root right after a crash (`what` names the run in messages). A file the
/// command did not change may keep damage the scenario put there on purpose; nothing the
/// command wrote may be damaged, and the audit shows no error that was not there before.
fn check_after_crash(root: &Path, b: &Before, what: &str) {
    let p = paths(root);
    let spath = p.state_path(SID);
    let unchanged = |path: &Path| {
        let rel = rel_of(root, path);
        match (std::fs::read(path).ok(), b.files.get(&rel)) {
            (Some(now), Some(then)) => now == *then,
            _ => false,
        }
    };
    let state = match std::fs::read(&spath) {
        Err(_) => None,
        Ok(bytes) => match parse_state(&bytes) {
            Ok(s) => Some(s),
            Err(e) => {
                assert!(unchanged(&spath), "{what}: state.json does not parse: {e}");
                None
            }
        },
    };
    let j = read_journal(&p);
    assert!(j.malformed.is_empty(), "{what}: journal {:?}", j.malformed);
    assert!(
        b.calls.is_subset(&journal_calls(&j)),
        "{what}: a committed journal line was lost"
    );
    if let Some(st) = &state {
        let aroot = p.archive_root(SID);
        for blk in st.blocks() {
            let name = blk.block_id.clone();
            let path = aroot.join(&blk.archive_rel);
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "{what}: state.json points at {}, which cannot be read: {e}",
                    blk.archive_rel
                )
            });
            if unchanged(&path) && b.errors.iter().any(|e| e.ends_with(&blk.archive_rel)) {
                continue; // damaged on purpose before the command, not rewritten yet
            }
            let parsed = archive::parse(&text)
                .unwrap_or_else(|e| panic!("{what}: archive of {name} does not parse: {e}"));
            assert_ne!(
                parsed.body_sha256_ok,
                Some(false),
                "{what}: {name}: body_sha256"
            );
            let f = &parsed.frontmatter;
            assert_eq!(
                (f.block.as_str(), f.tier, f.range.clone()),
                (
                    name.as_str(),
                    Some(blk.tier),
                    Some((blk.start_ref.clone(), blk.end_ref.clone()))
                ),
                "{what}: archive frontmatter of {name}"
            );
        }
        let have = block_keys(st);
        assert!(
            b.blocks.is_subset(&have),
            "{what}: blocks of the old state.json lost: {:?}",
            b.blocks.difference(&have).collect::<Vec<_>>()
        );
        // Nothing uncommitted is in the state: every ctl block's batch is in the journal.
        let calls = journal_calls(&j);
        for blk in st.blocks() {
            if blk.compress_call_id.starts_with("ctl-") {
                assert!(
                    calls.contains(&blk.compress_call_id),
                    "{what}: {} in state.json comes from batch {} that the journal does not hold",
                    blk.block_id,
                    blk.compress_call_id
                );
            }
        }
    }
    let errors = findings(&audit(root), "error");
    let new: Vec<_> = errors.difference(&b.errors).collect();
    assert!(
        new.is_empty(),
        "{what}: new audit errors after the crash: {new:?}"
    );
}

/// Invariants once a command ran to the end on the crashed root: a clean audit, no torn
/// journal, every committed batch in `state.json` with the block ids it committed.
fn check_recovered(root: &Path, b: &Before, what: &str) {
    let p = paths(root);
    let a = audit(root);
    let bad: Vec<_> = a
        .iter()
        .filter(|(s, _)| s == "error" || s == "warn")
        .map(|(s, f)| format!("{s} {f}"))
        .collect();
    assert!(bad.is_empty(), "{what}: audit after recovery: {bad:#?}");
    let j = read_journal(&p);
    assert_eq!(j.torn_tail, None, "{what}: torn journal after recovery");
    assert!(j.malformed.is_empty(), "{what}: journal {:?}", j.malformed);
    let st = read_state(&p).unwrap_or_else(|| panic!("{what}: no usable state.json"));
    let have = block_keys(&st);
    for (_, e) in &j.entries {
        for blk in &e.blocks {
            let id = blk["blockId"].as_str().unwrap_or("?").to_string();
            assert!(
                have.contains(&(id.clone(), e.call_id.clone())),
                "{what}: committed batch {} lost its block {id}",
                e.call_id
            );
        }
    }
    assert!(
        b.blocks.is_subset(&have),
        "{what}: blocks of the old state.json lost: {:?}",
        b.blocks.difference(&have).collect::<Vec<_>>()
    );
}

fn follow_up(s: &Scenario, rebuild: bool) -> Vec<String> {
    if rebuild || s.follow == Follow::Rebuild {
        words(&["rebuild"])
    } else {
        words(&["compress", NEXT_RANGE.0, NEXT_RANGE.1, SUMMARY])
    }
}

/// Runs the follow-up command on a crashed root and checks that it recovered everything.
/// Returns whether its recovery had work to do.
fn recover_and_check(root: &Path, s: &Scenario, b: &Before, rebuild: bool, what: &str) -> bool {
    let cmd = follow_up(s, rebuild);
    let out = run_ctl(root, &cmd);
    assert!(
        out.status.success(),
        "{what}: follow-up `{}` failed: {}",
        cmd.first().map(String::as_str).unwrap_or(""),
        String::from_utf8_lossy(&out.stderr)
    );
    check_recovered(root, b, &format!("{what}, after `{}`", cmd.join(" ")));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v["result"]["recovery"]
        .as_array()
        .is_some_and(|r| !r.is_empty())
}

// ---------------------------------------------------------------------------------------------
// The failpoint table.

/// The names in the table of `src/store/failpoint.rs`'s module docs.
fn documented_failpoints() -> BTreeSet<String> {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/failpoint.rs"),
    )
    .expect("failpoint.rs");
    src.lines()
        .filter_map(|l| l.strip_prefix("//! | `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

/// Every `failpoint::hit("<name>")` in the crate's sources.
fn failpoints_in_code() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).expect("source");
                for piece in text.split("failpoint::hit(\"").skip(1) {
                    if let Some(name) = piece.split('"').next() {
                        out.insert(name.to_string());
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out
}

#[test]
fn the_failpoint_table_lists_every_failpoint() {
    let documented = documented_failpoints();
    let code = failpoints_in_code();
    assert_eq!(
        documented, code,
        "failpoint.rs table vs failpoint::hit calls"
    );
    for required in [
        "compress.after-archive",
        "compress.before-journal",
        "compress.after-journal",
        "compress.after-state",
        "recover.after-cut",
        "recover.after-rollforward",
        "rebuild.after-archive",
        "rebuild.before-state",
        "atomic.after-temp-write",
        "atomic.before-rename",
        "atomic.after-rename",
        "journal.before-append",
        "journal.after-append",
    ] {
        assert!(
            documented.contains(required),
            "missing failpoint {required}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Crashes at every failpoint.

/// A scenario's root, prepared once and copied back to the same absolute path before each run
/// (so `archivePath`s stay right without redoing the fsync-heavy setup every time).
struct Prepared {
    dir: tempfile::TempDir,
    before: Before,
}

impl Prepared {
    fn new(s: &Scenario) -> Prepared {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("mkdir");
        (s.setup)(&root);
        let before = before(&root);
        std::fs::rename(&root, dir.path().join("template")).expect("rename");
        Prepared { dir, before }
    }

    /// A fresh copy of the prepared root.
    fn fresh(&self) -> std::path::PathBuf {
        let root = self.dir.path().join("root");
        if root.exists() {
            std::fs::remove_dir_all(&root).expect("rm root");
        }
        copy_tree(&self.dir.path().join("template"), &root);
        root
    }
}

/// What crashing one scenario at every failpoint found.
#[derive(Default)]
struct Tally {
    /// name -> the highest n for which `name:n` crashed the command.
    reached: BTreeMap<String, u64>,
    crashes: usize,
    /// Crashes after the batch's journal line was written.
    committed: usize,
}

/// Runs the scenario's command with `NORMAFS_FAILPOINT=<name>:<n>` for every documented name
/// and n = 1, 2, … until the command no longer reaches the n-th hit; checks every crash.
fn crash_everywhere(si: usize, s: &Scenario, names: &BTreeSet<String>) -> Tally {
    let mut t = Tally::default();
    let prepared = Prepared::new(s);
    let b = &prepared.before;
    let mut checked_clean_run = false;
    for name in names {
        for n in 1..=MAX_HITS {
            let root = &prepared.fresh();
            let what = format!("{} with {name}:{n}", s.name);
            let out = ctl_command(root, &(s.command)())
                .env(failpoint::ENV_VAR, format!("{name}:{n}"))
                .output()
                .expect("run normafs ctl");
            if out.status.success() {
                // The command hits `name` fewer than n times; it ran to the end.
                if !checked_clean_run {
                    check_recovered(root, b, &format!("{} (no crash)", s.name));
                    checked_clean_run = true;
                }
                break;
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.signal(),
                Some(libc::SIGABRT),
                "{what}: expected an abort, got {:?}: {stderr}",
                out.status
            );
            assert!(
                stderr.contains(&format!("failpoint {name} (hit {n}): aborting")),
                "{what}: {stderr}"
            );
            t.crashes += 1;
            let e = t.reached.entry(name.clone()).or_default();
            *e = (*e).max(n);
            check_after_crash(root, b, &what);
            if journal_calls(&read_journal(&paths(root))).len() > b.calls.len() {
                t.committed += 1;
            }
            // Alternate the follow-up so both the next compress and rebuild recover.
            let rebuild = (si + n as usize + t.crashes) % 2 == 0;
            recover_and_check(root, s, b, rebuild, &what);
            assert!(
                n < MAX_HITS,
                "{what}: {name} hit more than {MAX_HITS} times"
            );
        }
    }
    t
}

#[test]
fn a_crash_at_any_failpoint_is_recovered() {
    let start = Instant::now();
    let names = documented_failpoints();
    let all = scenarios();
    // A few workers: the runs wait on fsync far more than they compute.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let si = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(s) = all.get(si) else { break };
                        mine.push(crash_everywhere(si, s, &names));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a scenario failed (see its panic above)"))
            .collect()
    });
    let mut reached: BTreeMap<String, u64> = BTreeMap::new();
    let (mut crashes, mut committed) = (0, 0);
    for t in tallies {
        crashes += t.crashes;
        committed += t.committed;
        for (k, v) in t.reached {
            let e = reached.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    let missing: Vec<_> = names.iter().filter(|n| !reached.contains_key(*n)).collect();
    eprintln!(
        "crash: failpoints: {crashes} crashes ({committed} after the commit point) over {} scenarios; {}/{} failpoints covered ({}); {:.1}s",
        all.len(),
        reached.len(),
        names.len(),
        reached
            .iter()
            .map(|(k, v)| if *v > 1 { format!("{k}:1..{v}") } else { k.clone() })
            .collect::<Vec<_>>()
            .join(", "),
        start.elapsed().as_secs_f64()
    );
    assert!(
        missing.is_empty(),
        "failpoints no scenario reaches: {missing:?}"
    );
    assert!(
        reached
            .get("compress.after-archive")
            .is_some_and(|n| *n >= 2),
        "a two-archive batch must crash at compress.after-archive:2"
    );
}

// ---------------------------------------------------------------------------------------------
// Random SIGKILLs.

/// SplitMix64: a small seeded PRNG, so a failing run replays with the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The wall time of one uninterrupted run of the scenario's command (from spawn to exit).
fn calibrate(s: &Scenario, prepared: &Prepared) -> Duration {
    let mut times = Vec::new();
    for _ in 0..3 {
        let root = prepared.fresh();
        let t = Instant::now();
        let out = run_ctl(&root, &(s.command)());
        times.push(t.elapsed());
        assert!(
            out.status.success(),
            "{}: {}",
            s.name,
            String::from_utf8_lossy(&out.stderr)
        );
        check_recovered(
            &root,
            &prepared.before,
            &format!("{} (uninterrupted)", s.name),
        );
    }
    times.sort();
    times[1]
}

fn kill_after(mut child: Child, delay: Duration) -> std::process::ExitStatus {
    std::thread::sleep(delay);
    // The child may have exited already: kill then only reaps nothing and wait reports its exit.
    let _ = child.kill();
    child.wait().expect("wait")
}

#[test]
fn random_sigkills_never_lose_a_committed_batch() {
    let start = Instant::now();
    let kills = env_u64("NORMAFS_TORTURE_KILLS", 30);
    let seed = env_u64("NORMAFS_TORTURE_SEED", 0x006e_6f72_6d61_6673);
    let mut rng = Rng(seed);
    let all = scenarios();
    let mut prepared: BTreeMap<usize, (Prepared, Duration)> = BTreeMap::new();
    let (mut completed, mut untouched, mut midway, mut committed, mut recovered) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for k in 0..kills {
        let si = rng.below(all.len() as u64) as usize;
        let s = &all[si];
        let (p, full) = prepared.entry(si).or_insert_with(|| {
            let p = Prepared::new(s);
            let full = calibrate(s, &p);
            (p, full)
        });
        let full = *full;
        // From right after the spawn to a little past a full run: kills land before the lock,
        // in every step of the transaction, and after the end.
        let per_mille = 20 + rng.below(1180);
        let delay = full * per_mille as u32 / 1000;
        let root = &p.fresh();
        let b = &p.before;
        let what = format!(
            "kill {k} (seed {seed}) of {} after {}µs",
            s.name,
            delay.as_micros()
        );
        let child = ctl_command(root, &(s.command)())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn normafs ctl");
        let status = kill_after(child, delay);
        if status.success() {
            completed += 1;
        } else {
            assert_eq!(status.signal(), Some(libc::SIGKILL), "{what}: {status:?}");
            if snapshot(root) == b.files {
                untouched += 1;
            } else {
                midway += 1;
            }
        }
        check_after_crash(root, b, &what);
        if journal_calls(&read_journal(&paths(root))).len() > b.calls.len() {
            committed += 1;
        }
        if recover_and_check(root, s, b, rng.below(2) == 0, &what) {
            recovered += 1;
        }
    }
    eprintln!(
        "crash: random kills: {kills} kills (seed {seed}) survived: {completed} ran to the end, {untouched} before any write, {midway} mid-transaction; {committed} committed a batch; {recovered} follow-ups had recovery work; {:.1}s",
        start.elapsed().as_secs_f64()
    );
    if kills >= 10 {
        assert!(midway > 0, "no kill landed mid-transaction");
        assert!(completed < kills, "every run completed before its kill");
        assert!(untouched < kills, "every kill landed before any write");
    }
}

// ---------------------------------------------------------------------------------------------
// Regressions.

/// Recovery removes archives of `ctl-` batches the journal does not hold (debris of a batch that
/// never committed). A journal line that no longer parses must not make it remove an archive
/// that `state.json` points at: the state would point at a missing archive.
#[test]
fn recovery_keeps_archives_the_state_points_at() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    setup_three_blocks(root);
    let p = paths(root);
    let jpath = p.journal_path(SID);
    let text = std::fs::read_to_string(&jpath).expect("journal");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    // Damage b2's committed line (a flipped byte on disk): it is no longer an entry.
    let damaged = format!(
        "{}\n{}\n{}\n",
        lines[0],
        lines[1].replace("\"callId\"", "\"callI\u{0}\""),
        lines[2]
    );
    std::fs::write(&jpath, damaged).expect("damage");
    let st = read_state(&p).expect("state");
    let out = run_ctl(
        root,
        &words(&["compress", NEXT_RANGE.0, NEXT_RANGE.1, SUMMARY]),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for b in st.blocks() {
        assert!(
            p.archive_root(SID).join(&b.archive_rel).is_file(),
            "recovery removed {}, which state.json points at",
            b.archive_rel
        );
    }
    let errors = findings(&audit(root), "error");
    assert!(
        errors.iter().all(|e| e.starts_with("journal.malformed")),
        "{errors:?}"
    );
}
