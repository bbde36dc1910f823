//! Soak tests through a real mount: live writers (the runtime appending to a transcript, the
//! runtime replacing `state.json` by rename, ctl commands) against readers that open, fstat and
//! read every synthetic file to EOF. Every read must be complete (bytes read = the fstat'd
//! `st_size` of that open handle) and valid, nothing may fail or deadlock, and at the end every
//! appended message is in `view.jsonl` under its ref or covered by a live block whose archive
//! holds it.
//!
//! Duration: `NORMAFS_SOAK_SECONDS` (default 5); append rate: `NORMAFS_SOAK_RATE` records per
//! second (default 400). Each test prints one `soak:` line of figures (scripts/torture.sh shows
//! them). A watchdog unmounts and exits the process if a test does not end in time.

mod common;

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{force_unmount, mount, within};
use normafs::config::Config;
use normafs::fuse::MountOptions;
use serde_json::{json, Value};

// ---- settings -------------------------------------------------------------------------------

fn soak_duration() -> Duration {
    let secs = std::env::var("NORMAFS_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(5.0);
    Duration::from_secs_f64(secs)
}

fn append_rate() -> u64 {
    std::env::var("NORMAFS_SOAK_RATE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|r| *r > 0)
        .unwrap_or(400)
}

/// Messages the ctl thread never puts in a range (the protected tail is 8 of them).
const TAIL_KEPT: usize = 10;

/// The protected tail is 8 messages; no batch minimum; and no session counts as live: the
/// soak's "runtime" appends all the time, and what is tested is normafs's own consistency
/// under concurrent writers (the live-session guard is tested in tests/txn.rs and
/// tests/mount.rs).
fn soak_config() -> Config {
    let mut cfg = Config::default();
    cfg.noa.protect_recent_messages = 8;
    cfg.noa.protect_recent_tokens = 0;
    cfg.noa.min_range_chars = 0;
    cfg.noa.live_seconds = 0;
    cfg
}

// ---- a small deterministic PRNG ---------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

// ---- failures and counters shared by the threads -----------------------------------------------

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    failures: Mutex<Vec<String>>,
    reads: AtomicU64,
    read_bytes: AtomicU64,
    committed: AtomicU64,
    refused: AtomicU64,
    state_reads: AtomicU64,
    behind_seen: AtomicU64,
    rolled_forward: AtomicU64,
    renames: AtomicU64,
    runtime_clobbered: AtomicU64,
    calls: Mutex<Vec<String>>,
}

impl Shared {
    fn fail(&self, what: String) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if f.len() < 50 {
            f.push(what);
        }
    }

    fn failures(&self) -> Vec<String> {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Ends the process (after detaching the mount) if the test has not finished by `limit`: a
/// deadlocked mount must fail the run, not hang it.
struct Watchdog {
    done: Arc<AtomicBool>,
}

impl Watchdog {
    fn start(name: &'static str, limit: Duration, mnt: PathBuf, shared: Arc<Shared>) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let end = Instant::now() + limit;
            while Instant::now() < end {
                if d.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            eprintln!(
                "soak watchdog: {name} did not finish within {limit:?} (deadlock?); reads so far {}, failures {:?}; detaching the mount and exiting",
                shared.reads.load(Ordering::Relaxed),
                shared.failures()
            );
            force_unmount(&mnt);
            std::process::exit(3);
        });
        Watchdog { done }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

// ---- the runtime's transcript writer -----------------------------------------------------------

/// One message appended to the transcript.
#[derive(Clone)]
struct Appended {
    /// 1-based position among the session's messages: its ref is `m<index>`.
    index: usize,
    uuid: String,
    /// Its raw id (SPEC 2.5): what `state.json` and blocks name it by.
    id: String,
    marker: String,
    message: Value,
}

impl Appended {
    fn expected_ref(&self) -> String {
        format!("m{:05}", self.index)
    }
}

/// Appends records the way the runtime does: one JSON line per record, chained uuids, written
/// with `O_APPEND`; some lines in two writes with a pause between (a torn tail meanwhile).
struct Appender {
    file: File,
    sid: String,
    prev: Option<String>,
    rng: Rng,
    messages: Vec<Appended>,
    bytes: u64,
    splits: u64,
}

const FILLER: &[&str] = &[
    "the build",
    "linker",
    "zstd",
    "cargo test",
    "refactor",
    "é accent",
    "한글 텍스트",
    "emoji 🚀",
    "json {\"k\":[1,2]}",
    "back`tick`s",
    "line\nbreak",
    "quote \" mark",
];

impl Appender {
    fn create(root: &Path, sid: &str, seed: u64) -> Appender {
        let dir = root.join("transcripts");
        std::fs::create_dir_all(&dir).expect("mkdir transcripts");
        std::fs::create_dir_all(root.join("memory")).expect("mkdir memory");
        std::fs::create_dir_all(root.join("noa")).expect("mkdir noa");
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{sid}.jsonl")))
            .expect("open transcript");
        Appender {
            file,
            sid: sid.to_string(),
            prev: None,
            rng: Rng(seed | 1),
            messages: Vec::new(),
            bytes: 0,
            splits: 0,
        }
    }

    fn next_record(&mut self) -> (Vec<u8>, Appended) {
        let index = self.messages.len() + 1;
        let uuid = format!(
            "5a0c{:028x}",
            self.rng.next() as u128 * 1_000_003 + index as u128
        );
        let marker = format!("soak-{}-{index:07}:", self.sid);
        let mut text = marker.clone();
        for _ in 0..self.rng.range(4, 24) {
            text.push(' ');
            text.push_str(FILLER[(self.rng.next() % FILLER.len() as u64) as usize]);
        }
        let role = if index % 2 == 1 { "user" } else { "assistant" };
        use normafs::noa::content::{derive_id, Kind, Role};
        let core_role = if role == "user" {
            Role::User
        } else {
            Role::Assistant
        };
        let id = derive_id(core_role, Kind::Text, "", "", &text);
        let message = json!({"role": role, "content": [{"type": "text", "text": text}]});
        let mut rec = json!({"uuid": uuid});
        if let Some(p) = &self.prev {
            rec["parent_uuid"] = json!(p);
        }
        rec["session_id"] = json!(self.sid);
        rec["timestamp"] = json!(normafs::store::txn::timestamp(chrono::Utc::now()));
        rec["type"] = json!("message");
        rec["message"] = message.clone();
        if role == "assistant" {
            rec["usage"] = json!({"input_tokens": 100 + index, "output_tokens": 20});
        }
        let mut line = serde_json::to_vec(&rec).expect("json");
        line.push(b'\n');
        (
            line,
            Appended {
                index,
                uuid,
                id,
                marker,
                message,
            },
        )
    }

    /// Append one record: in one write, or (with `split`) in two writes around a pause.
    fn append(&mut self, split: Option<Duration>) -> std::io::Result<()> {
        let (line, a) = self.next_record();
        match split {
            Some(pause) => {
                // Any split point, inside a UTF-8 sequence or right before the newline included.
                let at = self.rng.range(1, line.len() as u64 - 1) as usize;
                let (head, tail) = line.split_at(at);
                self.file.write_all(head)?;
                std::thread::sleep(pause);
                self.file.write_all(tail)?;
                self.splits += 1;
            }
            None => self.file.write_all(&line)?,
        }
        self.bytes += line.len() as u64;
        self.prev = Some(a.uuid.clone());
        self.messages.push(a);
        Ok(())
    }

    /// `n` records in whole-line writes.
    fn append_many(&mut self, n: usize) {
        for _ in 0..n {
            self.append(None).expect("append");
        }
    }
}

/// Run the runtime's writer until `stop`: about `rate` records a second, a third of them split
/// with a 0.2–3 ms pause.
fn writer_thread(mut app: Appender, rate: u64, shared: Arc<Shared>) -> JoinHandle<Appender> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut n: u64 = 0;
        while !shared.stopped() {
            let split = app
                .rng
                .chance(33)
                .then(|| Duration::from_micros(app.rng.range(200, 3000)));
            if let Err(e) = app.append(split) {
                shared.fail(format!("writer: append failed: {e}"));
                break;
            }
            n += 1;
            let due = start + Duration::from_secs_f64(n as f64 / rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        app
    })
}

// ---- readers -----------------------------------------------------------------------------------

/// Check the bytes of one synthetic file.
fn validate(name: &str, bytes: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    if name == "view.jsonl" {
        if !text.is_empty() && !text.ends_with('\n') {
            return Err("view.jsonl does not end with a newline".into());
        }
        for (i, l) in text.lines().enumerate() {
            let v: Value = serde_json::from_str(l)
                .map_err(|e| format!("line {} is not JSON ({e}): {l:.120}", i + 1))?;
            let kind_ok =
                v.get("refs").is_some() || v.get("block").is_some() || v.get("nudge").is_some();
            if !kind_ok || !v["message"].is_object() {
                return Err(format!("line {} is not a view line: {l:.120}", i + 1));
            }
        }
    } else if name == "status.json" {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("status.json: {e}"))?;
        if !v.is_object() {
            return Err("status.json is not an object".into());
        }
    } else if name == "audit.txt" {
        if !text
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("summary:"))
        {
            return Err(format!("audit.txt has no summary line: {text:.200}"));
        }
    } else if name == "state.json" {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("state.json: {e}"))?;
        if v["version"] != 1 {
            return Err("state.json has no version 1".into());
        }
    }
    Ok(())
}

/// Open, fstat, read to EOF, close; the bytes.
fn read_checked(p: &Path, shared: &Shared) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::MetadataExt;
    let mut f = File::open(p).map_err(|e| format!("open: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("fstat: {e}"))?;
    let size = meta.len();
    let mut buf = Vec::with_capacity(size as usize);
    f.read_to_end(&mut buf).map_err(|e| format!("read: {e}"))?;
    shared.reads.fetch_add(1, Ordering::Relaxed);
    shared
        .read_bytes
        .fetch_add(buf.len() as u64, Ordering::Relaxed);
    // A real file the runtime replaces by rename (state.json) is checked by content only: the
    // kernel may answer fstat from attributes it cached for the path before the rename. A
    // computed file grows like an appended file (its open handles follow the versions that
    // extend what they read, README "Design decisions"), so a read may return a newer
    // version than `fstat` said, or, when two of the kernel's size requests cross, an older
    // one than the `fstat` answer it did not keep: a whole version either way (the caller
    // checks the content), never nothing.
    let real = p.file_name().is_some_and(|n| n == "state.json");
    if !real && buf.len() as u64 != size && buf.is_empty() {
        return Err(format!(
            "read {} bytes but fstat on the open handle said {size}",
            buf.len()
        ));
    }
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    validate(&name, &buf).map_err(|e| {
        // What tells a cut read from a wrong one.
        let after = f.metadata().map(|m| m.len()).unwrap_or(0);
        let tail = &buf[buf.len().saturating_sub(60)..];
        format!(
            "{e} (inode {}: read {} bytes, fstat said {size} before and {after} after, \
             {} NUL bytes, ends {:?})",
            meta.ino(),
            buf.len(),
            buf.iter().filter(|&&b| b == 0).count(),
            String::from_utf8_lossy(tail)
        )
    })?;
    Ok(buf)
}

/// Loop over the session's synthetic files (and `state.json` when `with_state`) until `stop`.
fn reader_thread(
    session: PathBuf,
    seed: u64,
    with_state: bool,
    shared: Arc<Shared>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut rng = Rng(seed | 1);
        while !shared.stopped() {
            let mut files: Vec<PathBuf> = ["view.jsonl", "view.md", "status.json", "audit.txt"]
                .iter()
                .map(|n| session.join(n))
                .collect();
            match std::fs::read_dir(session.join("raw")) {
                Ok(rd) => {
                    let names: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
                    for _ in 0..names.len().min(3) {
                        let i = (rng.next() % names.len() as u64) as usize;
                        files.push(names[i].clone());
                    }
                }
                Err(e) => shared.fail(format!("ls raw/: {e}")),
            }
            // Any range of refs that existed from the start.
            let a = rng.range(1, 30);
            let b = rng.range(a, 40);
            files.push(session.join(format!("raw/m{a:05}-m{b:05}.md")));
            if with_state {
                files.push(session.join("state.json"));
            }
            for p in files {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let r = read_checked(&p, &shared).map(|b| {
                    if name == "audit.txt"
                        && String::from_utf8_lossy(&b).contains("state.behind-journal")
                    {
                        shared.behind_seen.fetch_add(1, Ordering::Relaxed);
                    }
                    if name == "state.json" {
                        shared.state_reads.fetch_add(1, Ordering::Relaxed);
                    }
                });
                if let Err(e) = r {
                    shared.fail(format!("{}: {e}", p.display()));
                }
            }
        }
    })
}

/// List the session directory and its `raw/` (`readdirplus` hands the kernel placeholders for
/// computed files it does not hold) and `stat` what was listed: a computed file that is never
/// empty must never show size 0, the placeholder's.
fn lister_thread(session: PathBuf, shared: Arc<Shared>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        while !shared.stopped() {
            for dir in [session.clone(), session.join("raw")] {
                let names: Vec<PathBuf> = match std::fs::read_dir(&dir) {
                    Ok(rd) => rd.flatten().map(|e| e.path()).collect(),
                    Err(e) => {
                        shared.fail(format!("ls {}: {e}", dir.display()));
                        continue;
                    }
                };
                for p in names {
                    let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
                    let never_empty = match name.as_deref() {
                        Some("view.jsonl" | "view.md" | "status.json") => true,
                        Some(n) => n.ends_with(".md") && dir.ends_with("raw"),
                        None => false,
                    };
                    match std::fs::metadata(&p) {
                        Ok(m) if never_empty && m.len() == 0 => {
                            shared.fail(format!("{}: size 0 after a listing", p.display()))
                        }
                        Ok(_) => {}
                        // A raw range may go away with a compress.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => shared.fail(format!("stat {}: {e}", p.display())),
                    }
                }
            }
        }
    })
}

// ---- ctl commands ------------------------------------------------------------------------------

/// The refs of the view's items (a message: its first and last ref; a block: its range),
/// nudge excluded.
fn view_items(view: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(view)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            if let Some(refs) = v["refs"].as_array().filter(|r| !r.is_empty()) {
                let first = refs.first()?.as_str()?.to_string();
                let last = refs.last()?.as_str()?.to_string();
                Some((first, last))
            } else {
                let (s, e) = v["range"].as_str()?.split_once('-')?;
                v.get("block").map(|_| (s.to_string(), e.to_string()))
            }
        })
        .collect()
}

/// Run one command on a fresh read-write handle of `ctl`: its result line, or the errno.
fn ctl(ctl: &Path, command: &str) -> Result<Value, (i32, String)> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(ctl)
        .map_err(|e| (e.raw_os_error().unwrap_or(0), format!("open ctl: {e}")))?;
    let written = f.write(command.as_bytes());
    // The results, from the start; this thread's is the last that names it (the kernel names
    // the thread that wrote).
    // SAFETY: gettid has no preconditions.
    let tid = i64::from(unsafe { libc::gettid() });
    let mut out = String::new();
    let read = f
        .seek(SeekFrom::Start(0))
        .and_then(|_| f.read_to_string(&mut out));
    let result = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|r| r["pid"].as_i64() == Some(tid))
        .unwrap_or(Value::Null);
    match written {
        Ok(n) if n == command.len() => match read {
            Ok(_) => Ok(result),
            Err(e) => Err((0, format!("read ctl: {e}"))),
        },
        Ok(n) => Err((0, format!("short ctl write: {n} of {}", command.len()))),
        Err(e) => Err((
            e.raw_os_error().unwrap_or(0),
            format!("{e}: {}", result["message"].as_str().unwrap_or("")),
        )),
    }
}

/// Count what a successful compress's recovery rolled forward.
fn note_recovery(result: &Value, shared: &Shared) {
    for n in result["result"]["recovery"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let n = n.as_str().unwrap_or("");
        if let Some(rest) = n.strip_prefix("rolled ") {
            let k: u64 = rest
                .split_whitespace()
                .next()
                .and_then(|k| k.parse().ok())
                .unwrap_or(0);
            shared.rolled_forward.fetch_add(k, Ordering::Relaxed);
        }
    }
}

/// A compress command over items `i..=j` of the view (text or JSON form).
fn compress_command(
    items: &[(String, String)],
    i: usize,
    j: usize,
    k: u64,
    json_form: bool,
) -> String {
    let (start, end) = (&items[i].0, &items[j].1);
    let summary = format!(
        "soak summary {k}: the user and the assistant went over {start} to {end} in detail"
    );
    if json_form {
        let input = json!({"content": [{"startId": start, "endId": end, "topic": format!("soak {k}"), "summary": summary}]});
        format!("compress {input}\n")
    } else {
        format!("compress {start} {end} {summary}\n")
    }
}

/// Issue compress commands through the mount until `stop`: ranges of 2–12 view items outside the
/// tail, sometimes over blocks (tier 2 and 3) and sometimes into the protected tail (refused).
/// `EINVAL` counts as refused; any other error is a failure.
fn ctl_thread(
    session: PathBuf,
    seed: u64,
    pause_ms: (u64, u64),
    shared: Arc<Shared>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut rng = Rng(seed | 1);
        let mut k = 0;
        while !shared.stopped() {
            std::thread::sleep(Duration::from_millis(rng.range(pause_ms.0, pause_ms.1)));
            let view = match std::fs::read(session.join("view.jsonl")) {
                Ok(v) => v,
                Err(e) => {
                    shared.fail(format!("ctl thread: read view.jsonl: {e}"));
                    continue;
                }
            };
            let items = view_items(&view);
            let into_tail = rng.chance(10);
            let usable = if into_tail {
                items.len()
            } else {
                items.len().saturating_sub(TAIL_KEPT)
            };
            if usable < 2 {
                continue;
            }
            let len = rng.range(2, 12).min(usable as u64) as usize;
            let i = if into_tail {
                usable - len
            } else {
                rng.range(0, (usable - len) as u64) as usize
            };
            k += 1;
            let cmd = compress_command(&items, i, i + len - 1, k, rng.chance(30));
            match ctl(&session.join("ctl"), &cmd) {
                Ok(r) => {
                    if r["ok"] != true {
                        shared.fail(format!("ctl: success without ok: {r}"));
                    }
                    match r["result"]["callId"].as_str() {
                        Some(c) => shared
                            .calls
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(c.to_string()),
                        None => shared.fail(format!("ctl: no callId in {r}")),
                    }
                    note_recovery(&r, &shared);
                    shared.committed.fetch_add(1, Ordering::Relaxed);
                }
                Err((libc::EINVAL, _)) => {
                    shared.refused.fetch_add(1, Ordering::Relaxed);
                }
                Err((errno, e)) => shared.fail(format!("ctl `{}`: errno {errno}: {e}", cmd.trim())),
            }
        }
    })
}

// ---- the final check ---------------------------------------------------------------------------

/// Every archive of the session, read through the mount, concatenated.
fn archives_text(session: &Path) -> String {
    let mut out = String::new();
    let Ok(rd) = std::fs::read_dir(session) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("tier") {
            continue;
        }
        for a in std::fs::read_dir(e.path()).expect("ls tier").flatten() {
            if a.file_name().to_string_lossy().ends_with(".md") {
                out.push_str(&std::fs::read_to_string(a.path()).expect("read archive"));
            }
        }
    }
    out
}

/// Where every appended message ended up: `(in the view, covered by a block)`; an error names
/// the first message that is neither.
fn account_for(
    session: &Path,
    state_path: &Path,
    messages: &[Appended],
) -> Result<(usize, usize), String> {
    let view = std::fs::read(session.join("view.jsonl")).map_err(|e| format!("view: {e}"))?;
    validate("view.jsonl", &view)?;
    let lines = common::lines(&view);
    let by_ref: HashMap<&str, &Value> = lines
        .iter()
        .filter_map(|l| l["refs"][0].as_str().map(|r| (r, &l["message"])))
        .collect();
    let blocks_in_view: HashSet<&str> = lines.iter().filter_map(|l| l["block"].as_str()).collect();
    let state: Value = match std::fs::read(state_path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| format!("state.json: {e}"))?,
        Err(_) => json!({"blocks": []}),
    };
    let mut covering: HashMap<&str, Vec<&str>> = HashMap::new();
    for b in state["blocks"].as_array().into_iter().flatten() {
        let id = b["blockId"].as_str().unwrap_or("");
        if b["active"] == true && blocks_in_view.contains(id) {
            for u in b["effectiveMessageIds"].as_array().into_iter().flatten() {
                covering
                    .entry(u.as_str().unwrap_or(""))
                    .or_default()
                    .push(id);
            }
        }
    }
    let archives = archives_text(session);
    let (mut in_view, mut in_blocks) = (0, 0);
    for m in messages {
        let r = m.expected_ref();
        if let Some(refd) = state["messageRefs"]["byRaw"][&m.id].as_str() {
            if refd != r {
                return Err(format!(
                    "{} has ref {refd} in state.json, expected {r}",
                    m.marker
                ));
            }
        }
        // In the view: the message as written, a user text with its ref tag after it.
        let shown = |v: &Value| {
            let text = m.message["content"][0]["text"].as_str().unwrap_or("");
            let got = v["content"][0]["text"].as_str().unwrap_or("");
            v["role"] == m.message["role"]
                && v["content"].as_array().map(Vec::len) == Some(1)
                && (got == text
                    || (m.message["role"] == "user"
                        && got.starts_with(&format!("{text}\n<noa-ref id=\"{r}\" "))))
        };
        let covered = covering.get(m.id.as_str());
        match (by_ref.get(r.as_str()), covered) {
            // The first user message stays in view even where a block covers it (SPEC 4.4).
            (Some(v), _) if covered.is_none() || m.index == 1 => {
                if !shown(v) {
                    return Err(format!("{r} in the view is not {}: {v}", m.marker));
                }
                in_view += 1;
            }
            (None, Some(ids)) if ids.len() == 1 => {
                if !archives.contains(&m.marker) {
                    return Err(format!(
                        "{r} ({}) is covered by {} but no archive holds it",
                        m.marker, ids[0]
                    ));
                }
                in_blocks += 1;
            }
            (v, ids) => {
                return Err(format!(
                    "{r} ({}) lost or doubled: in the view {}, covered by {:?}",
                    m.marker,
                    v.is_some(),
                    ids
                ))
            }
        }
    }
    Ok((in_view, in_blocks))
}

/// Error findings (and the summary line) of an audit text.
fn audit_errors(audit: &str) -> Vec<&str> {
    audit.lines().filter(|l| l.starts_with("error ")).collect()
}

/// Descriptors of this process open on files under `dir` (the backing root of one test).
fn fds_under(dir: &Path) -> Vec<PathBuf> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|t| t.starts_with(&dir))
                .collect()
        })
        .unwrap_or_default()
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn stop_and_join<T>(shared: &Shared, handles: Vec<JoinHandle<T>>) -> Vec<T> {
    shared.stop.store(true, Ordering::Relaxed);
    handles
        .into_iter()
        .map(|h| h.join().expect("a soak thread panicked"))
        .collect()
}

// ---- the tests ---------------------------------------------------------------------------------

/// One runtime writer appends at a high rate (whole lines, and lines split across two writes);
/// three readers open/fstat/read every synthetic file; a ctl thread compresses ranges. No read
/// fails or is short, every byte read is valid, nothing deadlocks, and nothing appended is lost.
#[test]
fn live_writers_soak() {
    live_writers(MountOptions::default());
}

/// The same with the mount answering opens (`-o passthrough`).
#[test]
fn live_writers_soak_with_opens() {
    live_writers(MountOptions {
        passthrough: true,
        no_open: false,
        ..MountOptions::default()
    });
}

fn live_writers(opts: MountOptions) {
    let duration = soak_duration();
    let rate = append_rate();
    let sid = "s1";
    let root = tempfile::tempdir().expect("tempdir");
    let mut app = Appender::create(root.path(), sid, 0x5eed);
    app.append_many(40);
    let state_path = root.path().join("noa").join(sid).join("state.json");
    let Some(m) = mount(root, soak_config(), opts) else {
        return;
    };
    let shared = Arc::new(Shared::default());
    let _dog = Watchdog::start(
        "live_writers_soak",
        duration * 3 + Duration::from_secs(120),
        m.mnt().to_path_buf(),
        shared.clone(),
    );
    let session = m.at(&format!("sessions/{sid}"));
    let backing = m.root().to_path_buf();
    let rss0 = rss_kb();
    let t0 = Instant::now();

    let writer = writer_thread(app, rate, shared.clone());
    let mut others = vec![
        ctl_thread(session.clone(), 7, (20, 150), shared.clone()),
        lister_thread(session.clone(), shared.clone()),
    ];
    for i in 0..3 {
        others.push(reader_thread(
            session.clone(),
            100 + i,
            false,
            shared.clone(),
        ));
    }
    // Sample memory while it runs: the synthetic-content cache must stay within its budget.
    let budget = soak_config().cache_bytes() as u64;
    let (mut peak_cache, mut peak_rss) = (0, 0);
    let end = Instant::now() + duration;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(250));
        peak_cache = peak_cache.max(m.handle().fs().cached_bytes() as u64);
        peak_rss = peak_rss.max(rss_kb());
    }
    shared.stop.store(true, Ordering::Relaxed);
    let app = writer.join().expect("writer panicked");
    stop_and_join(&shared, others);
    let elapsed = t0.elapsed();
    let Appender {
        file,
        messages,
        bytes,
        splits,
        ..
    } = app;
    drop(file);

    let failures = shared.failures();
    let accounted = account_for(&session, &state_path, &messages);
    let (in_view, in_blocks) = accounted.clone().unwrap_or_default();
    let audit = std::fs::read_to_string(session.join("audit.txt")).expect("audit");
    let journal = std::fs::read_to_string(session.join("ctl.jsonl")).unwrap_or_default();
    let calls = shared
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    // Every file is closed: the mount holds no backing descriptor (SPEC 5, resources) once the
    // kernel forgets the inodes (a file is held from its lookup until then), which it does
    // when it lets its entries go: as root, it is told to now.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let _ = std::fs::write("/proc/sys/vm/drop_caches", "2");
    }
    let released = within(Duration::from_secs(10), || fds_under(&backing).is_empty());
    // Freed memory that glibc keeps in its arenas is not held by the mount.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
    let rss1 = rss_kb();
    let committed = shared.committed.load(Ordering::Relaxed);
    println!(
        "soak: live writers {:.1}s: appended {} records ({} bytes, {} split across two writes), all {} verified ({} in view.jsonl under their ref, {} in live blocks with archived text); {} reads ({} bytes) complete and valid; ctl {} committed, {} refused (EINVAL); backing descriptors left open: {}; synthetic cache peak {} MiB (budget {} MiB); process rss {} -> peak {} -> {} MiB after malloc_trim",
        elapsed.as_secs_f64(),
        messages.len(),
        bytes,
        splits,
        messages.len(),
        in_view,
        in_blocks,
        shared.reads.load(Ordering::Relaxed),
        shared.read_bytes.load(Ordering::Relaxed),
        committed,
        shared.refused.load(Ordering::Relaxed),
        fds_under(&backing).len(),
        peak_cache >> 20,
        budget >> 20,
        rss0 / 1024,
        peak_rss / 1024,
        rss1 / 1024,
    );
    assert!(
        peak_cache <= budget,
        "cache {peak_cache} over its budget {budget}"
    );
    assert!(
        failures.is_empty(),
        "{} failures, first: {failures:#?}",
        failures.len()
    );
    if let Err(e) = accounted {
        panic!("{e}");
    }
    assert!(audit_errors(&audit).is_empty(), "{audit}");
    assert!(!audit.contains("state.behind-journal"), "{audit}");
    for c in &calls {
        assert!(
            journal.contains(c.as_str()),
            "{c} committed but not in the journal"
        );
    }
    assert!(
        released,
        "backing files still open: {:?}",
        fds_under(&backing)
    );
    assert!(committed > 0, "no ctl command committed");
    assert!(
        in_blocks > 0 && in_view > 0,
        "{in_view} in the view, {in_blocks} in blocks"
    );
}

/// The runtime's `state.json` rewrite: read, change its own field, write a temp file, rename it
/// over `state.json` (no lock, no fsync, like the runtime).
fn runtime_rewrite(state_path: &Path, counter: u64, pause: Duration) -> Result<bool, String> {
    let bytes = match std::fs::read(state_path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("runtime read: {e}")),
    };
    let mut v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("runtime read a torn state.json: {e}"))?;
    std::thread::sleep(pause);
    v["runtimeCounter"] = json!(counter);
    let tmp = state_path.with_file_name(format!("state.json.tmp-{counter}"));
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(&v).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("runtime write: {e}"))?;
    std::fs::rename(&tmp, state_path).map_err(|e| format!("runtime rename: {e}"))?;
    Ok(true)
}

/// The runtime's own change to `state.json`, a counter in a key of its own (normafs carries
/// keys it does not know over on every write; the nudge fields it would reset).
fn nudge_counter(state_path: &Path) -> Option<u64> {
    let v: Value = serde_json::from_slice(&std::fs::read(state_path).ok()?).ok()?;
    v["runtimeCounter"].as_u64()
}

/// The runtime rewrites `state.json` by temp + rename while the mount reads views and ctl
/// commands commit. A runtime rename that overwrites a state.json a ctl compress just committed
/// is not a silent loss: the batch is in the journal, the audit shows `state.behind-journal`,
/// and the next ctl command rolls it forward. Every state.json read parses; views stay valid.
#[test]
fn runtime_state_rename_soak() {
    state_rename_soak(true);
}

/// The same with real files read through normafs (pread) and the page cache, as on kernels
/// without FUSE passthrough.
#[test]
fn runtime_state_rename_soak_without_passthrough() {
    state_rename_soak(false);
}

/// The same where the kernel opens files itself (`--no-open`).
#[test]
fn runtime_state_rename_soak_without_opens() {
    state_rename_soak_as(MountOptions {
        no_open: true,
        ..MountOptions::default()
    });
}

/// With the mount answering opens (`-o passthrough`), passing real files through or not.
fn state_rename_soak(passthrough: bool) {
    state_rename_soak_as(MountOptions {
        passthrough,
        no_open: false,
        ..MountOptions::default()
    });
}

fn state_rename_soak_as(opts: MountOptions) {
    let duration = soak_duration();
    let sid = "s2";
    let root = tempfile::tempdir().expect("tempdir");
    let mut app = Appender::create(root.path(), sid, 0xfeed);
    app.append_many(120);
    let state_path = root.path().join("noa").join(sid).join("state.json");
    let Some(m) = mount(root, soak_config(), opts) else {
        return;
    };
    let shared = Arc::new(Shared::default());
    let _dog = Watchdog::start(
        "runtime_state_rename_soak",
        duration * 3 + Duration::from_secs(120),
        m.mnt().to_path_buf(),
        shared.clone(),
    );
    let session = m.at(&format!("sessions/{sid}"));
    let ctl_path = session.join("ctl");

    // The lost update, step by step. A first ctl batch creates state.json.
    let first = ctl(
        &ctl_path,
        "compress m00001 m00010 the first ten messages of the session, summarised at length\n",
    )
    .unwrap_or_else(|e| panic!("first compress: {e:?}"));
    assert_eq!(first["ok"], true, "{first}");
    // The runtime reads state.json (as it stands before the next batch) …
    let stale = std::fs::read(&state_path).expect("state.json");
    // … a ctl batch commits …
    let lost = ctl(
        &ctl_path,
        "compress m00011 m00020 the next ten messages of the session, summarised at length\n",
    )
    .unwrap_or_else(|e| panic!("second compress: {e:?}"));
    let lost_call = lost["result"]["callId"]
        .as_str()
        .expect("callId")
        .to_string();
    // … and the runtime renames its copy over it: the batch is gone from state.json.
    let mut v: Value = serde_json::from_slice(&stale).expect("state json");
    v["runtimeCounter"] = json!(1);
    let tmp = state_path.with_file_name("state.json.tmp-1");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&v).expect("json")).expect("write tmp");
    std::fs::rename(&tmp, &state_path).expect("rename");
    assert!(!std::fs::read_to_string(&state_path)
        .expect("state")
        .contains(&lost_call));

    // Not silent: the audit names the batch, the view still holds every message (uncompressed),
    // and the batch's archive is kept (it is the journal's, not an orphan).
    let audit = std::fs::read_to_string(session.join("audit.txt")).expect("audit");
    let finding = audit
        .lines()
        .find(|l| l.contains("state.behind-journal"))
        .unwrap_or_else(|| panic!("no state.behind-journal finding in:\n{audit}"));
    assert!(finding.contains(&lost_call), "{finding}");
    assert!(!audit.contains("archive.orphan"), "{audit}");
    let (in_view, _) =
        account_for(&session, &state_path, &app.messages).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        in_view,
        120 - 10 + 1,
        "m00011..m00020 are back in the view until the roll-forward (and m00001, the first \
         user message, never left it)"
    );
    let status: Value =
        serde_json::from_slice(&std::fs::read(session.join("status.json")).expect("status"))
            .expect("status json");
    assert!(status.is_object());

    // The next ctl command rolls it forward, keeping the runtime's own change.
    let next = ctl(
        &ctl_path,
        "compress m00021 m00030 ten more messages of the session, summarised at length too\n",
    )
    .unwrap_or_else(|e| panic!("third compress: {e:?}"));
    let notes = next["result"]["recovery"].to_string();
    assert!(notes.contains("rolled 1 committed batch"), "{next}");
    let state = std::fs::read_to_string(&state_path).expect("state");
    assert!(
        state.contains(&lost_call),
        "the lost batch is back in state.json"
    );
    assert_eq!(
        nudge_counter(&state_path),
        Some(1),
        "the runtime's change is kept"
    );
    let audit = std::fs::read_to_string(session.join("audit.txt")).expect("audit");
    assert!(!audit.contains("state.behind-journal"), "{audit}");
    assert!(audit_errors(&audit).is_empty(), "{audit}");
    let view =
        String::from_utf8(std::fs::read(session.join("view.jsonl")).expect("view")).expect("utf8");
    for b in [
        "\"range\":\"m00001-m00010\"",
        "\"range\":\"m00011-m00020\"",
        "\"range\":\"m00021-m00030\"",
    ] {
        assert!(view.contains(b), "block {b} in the view");
    }

    // The soak: the runtime rewrites state.json in a loop while readers and ctl run and the
    // transcript grows slowly.
    for c in [&first, &lost, &next] {
        if let Some(id) = c["result"]["callId"].as_str() {
            shared
                .calls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(id.to_string());
        }
    }
    let t0 = Instant::now();
    let writer = writer_thread(app, 40, shared.clone());
    let runtime_stop = Arc::new(AtomicBool::new(false));
    let runtime = {
        let shared = shared.clone();
        let state_path = state_path.clone();
        let runtime_stop = runtime_stop.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(99);
            let mut counter = 1;
            while !runtime_stop.load(Ordering::Relaxed) {
                counter += 1;
                let pause = Duration::from_micros(rng.range(0, 4000));
                match runtime_rewrite(&state_path, counter, pause) {
                    Ok(true) => {
                        shared.renames.fetch_add(1, Ordering::Relaxed);
                        shared.state_reads.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(false) => {}
                    Err(e) => shared.fail(e),
                }
                std::thread::sleep(Duration::from_millis(rng.range(1, 15)));
                // A ctl command that replaced state.json since this write, from a state.json it
                // read before it, undid this change.
                if nudge_counter(&state_path).is_some_and(|c| c < counter) {
                    shared.runtime_clobbered.fetch_add(1, Ordering::Relaxed);
                }
            }
            counter
        })
    };
    let mut others = vec![ctl_thread(session.clone(), 11, (10, 80), shared.clone())];
    for i in 0..2 {
        others.push(reader_thread(
            session.clone(),
            200 + i,
            true,
            shared.clone(),
        ));
    }
    std::thread::sleep(duration);
    shared.stop.store(true, Ordering::Relaxed);
    let mut app = writer.join().expect("writer panicked");
    stop_and_join(&shared, others);
    // The runtime writes once more after the last ctl command, then stops.
    let renames = shared.renames.load(Ordering::Relaxed);
    assert!(
        within(Duration::from_secs(10), || shared
            .renames
            .load(Ordering::Relaxed)
            > renames + 1),
        "the runtime thread stopped writing"
    );
    runtime_stop.store(true, Ordering::Relaxed);
    let last_counter = runtime.join().expect("runtime panicked");
    let elapsed = t0.elapsed();
    let failures = shared.failures();
    assert!(
        failures.is_empty(),
        "{} failures, first: {failures:#?}",
        failures.len()
    );

    // The runtime stopped: the next ctl command rolls every lost batch forward.
    app.append_many(20);
    let n = app.messages.len();
    let cmd = format!(
        "compress m{:05} m{:05} the last messages before the end of the soak, said in short\n",
        n - 19,
        n - 12
    );
    let last = ctl(&ctl_path, &cmd).unwrap_or_else(|e| panic!("final compress: {e:?}"));
    note_recovery(&last, &shared);
    shared.calls.lock().unwrap_or_else(|e| e.into_inner()).push(
        last["result"]["callId"]
            .as_str()
            .expect("callId")
            .to_string(),
    );
    let state = std::fs::read_to_string(&state_path).expect("state");
    let journal = std::fs::read_to_string(session.join("ctl.jsonl")).expect("journal");
    let calls = shared
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let audit = std::fs::read_to_string(session.join("audit.txt")).expect("audit");
    let accounted = account_for(&session, &state_path, &app.messages);
    let (in_view, in_blocks) = accounted.clone().unwrap_or_default();
    println!(
        "soak: runtime renames ({}) {:.1}s: {} state.json renames by the runtime, {} state.json reads all parsed; {} reads ({} bytes) complete and valid; ctl {} committed, {} refused (EINVAL); lost updates: {} audits showed state.behind-journal, {} batches rolled forward, all {} committed batches in state.json at the end; runtime changes undone by a ctl write: {}; {} messages verified ({} in view, {} in blocks)",
        if m.handle().passthrough() { "passthrough" } else { "pread" },
        elapsed.as_secs_f64(),
        shared.renames.load(Ordering::Relaxed),
        shared.state_reads.load(Ordering::Relaxed),
        shared.reads.load(Ordering::Relaxed),
        shared.read_bytes.load(Ordering::Relaxed),
        shared.committed.load(Ordering::Relaxed),
        shared.refused.load(Ordering::Relaxed),
        shared.behind_seen.load(Ordering::Relaxed),
        shared.rolled_forward.load(Ordering::Relaxed),
        calls.len(),
        shared.runtime_clobbered.load(Ordering::Relaxed),
        n,
        in_view,
        in_blocks,
    );
    for c in &calls {
        assert!(
            journal.contains(c.as_str()),
            "{c} committed but not in the journal"
        );
        assert!(
            state.contains(c.as_str()),
            "{c} committed but missing from state.json"
        );
    }
    assert!(!audit.contains("state.behind-journal"), "{audit}");
    assert!(audit_errors(&audit).is_empty(), "{audit}");
    if let Err(e) = accounted {
        panic!("{e}");
    }
    assert_eq!(
        nudge_counter(&state_path),
        Some(last_counter),
        "the runtime's last write is kept"
    );
    // A ctl command replaces state.json only if it is still the file it read, so a runtime
    // change is undone only when its rename lands in the microseconds between that check and
    // the rename (without the check, about 12% of them were undone in this soak).
    let clobbered = shared.runtime_clobbered.load(Ordering::Relaxed);
    let renames = shared.renames.load(Ordering::Relaxed);
    assert!(
        clobbered * 20 <= renames,
        "{clobbered} of {renames} runtime changes undone"
    );
}

static RUNTIME_STATE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The runtime renaming a changed state.json over the current one (a failpoint action).
fn runtime_marks_state() {
    let p = RUNTIME_STATE.get().expect("state path");
    let mut v: Value = serde_json::from_slice(&std::fs::read(p).expect("read")).expect("json");
    let mark = v["runtimeMark"].as_u64().unwrap_or(0) + 1;
    v["runtimeMark"] = json!(mark);
    let tmp = p.with_file_name("state.json.tmp-rt");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
    std::fs::rename(&tmp, p).expect("rename");
}

fn compress_now(
    paths: &normafs::store::root::RootPaths,
    sid: &str,
    start: &str,
    end: &str,
) -> Value {
    let input = json!({"content": [{"startId": start, "endId": end, "summary": format!("messages {start} to {end} of the session, summarised at length")}]}).to_string();
    let o =
        normafs::store::txn::compress(paths, sid, &input, &soak_config().noa, chrono::Utc::now())
            .unwrap_or_else(|e| panic!("compress {start}-{end}: {e}"));
    o.result
}

/// Deterministic: the runtime renames state.json in the middle of a ctl command (after the
/// journal commit; during a roll-forward). The command does not undo the runtime's change: it
/// applies its batch onto the runtime's version.
#[test]
fn a_runtime_rename_during_a_command_is_kept() {
    use normafs::store::failpoint::{self, Action};
    let sid = "s3";
    let root = tempfile::tempdir().expect("tempdir");
    let mut app = Appender::create(root.path(), sid, 0xabc);
    app.append_many(60);
    let paths = normafs::store::root::RootPaths::from_root(root.path());
    let spath = paths.state_path(sid);
    RUNTIME_STATE.set(spath.clone()).expect("set once");
    let calls = |state: &str, r: &[&Value]| {
        r.iter()
            .map(|v| v["callId"].as_str().expect("callId").to_string())
            .filter(|c| !state.contains(c.as_str()))
            .collect::<Vec<_>>()
    };

    let first = compress_now(&paths, sid, "m00001", "m00010");
    // Between the journal commit and the state write.
    failpoint::set_thread_nth(
        "compress.after-journal",
        1,
        Action::Call(runtime_marks_state),
    );
    let second = compress_now(&paths, sid, "m00011", "m00020");
    failpoint::clear_thread();
    assert!(
        second["recovery"]
            .to_string()
            .contains("replaced during the command"),
        "{second}"
    );
    let state = std::fs::read_to_string(&spath).expect("state");
    let v: Value = serde_json::from_str(&state).expect("json");
    assert_eq!(v["runtimeMark"], 1, "the runtime's change is kept");
    assert_eq!(
        calls(&state, &[&first, &second]),
        Vec::<String>::new(),
        "both batches are in state.json"
    );

    // A stale runtime copy drops the third batch; the next command rolls it forward, and the
    // runtime renames again while it does.
    let stale = std::fs::read(&spath).expect("state");
    let third = compress_now(&paths, sid, "m00021", "m00030");
    std::fs::write(spath.with_file_name("state.json.tmp-rt"), &stale).expect("write");
    std::fs::rename(spath.with_file_name("state.json.tmp-rt"), &spath).expect("rename");
    failpoint::set_thread_nth(
        "recover.after-archive",
        1,
        Action::Call(runtime_marks_state),
    );
    let fourth = compress_now(&paths, sid, "m00031", "m00040");
    failpoint::clear_thread();
    let notes = fourth["recovery"].to_string();
    assert!(notes.contains("replaced while rolling forward"), "{notes}");
    assert!(notes.contains("rolled 1 committed batch"), "{notes}");
    let state = std::fs::read_to_string(&spath).expect("state");
    let v: Value = serde_json::from_str(&state).expect("json");
    assert_eq!(v["runtimeMark"], 2, "the runtime's change is kept");
    assert_eq!(
        calls(&state, &[&first, &second, &third, &fourth]),
        Vec::<String>::new(),
        "every batch is in state.json"
    );
    let blocks = v["blocks"].as_array().expect("blocks");
    assert_eq!(blocks.iter().filter(|b| b["active"] == true).count(), 4);
}

/// Readers in a tight loop on a state.json that the runtime replaces in a tight loop by versions
/// of other sizes: every read is one whole version (without passthrough the kernel's cached
/// size of the previous version used to cut reads short).
#[test]
fn replaced_state_json_reads_whole_without_passthrough() {
    replaced_state_json_reads_whole(false);
}

#[test]
fn replaced_state_json_reads_whole_with_passthrough() {
    replaced_state_json_reads_whole(true);
}

fn replaced_state_json_reads_whole(passthrough: bool) {
    let sid = if passthrough { "s6" } else { "s5" };
    let root = tempfile::tempdir().expect("tempdir");
    let mut app = Appender::create(root.path(), sid, 0x55);
    app.append_many(30);
    let Some(m) = mount(
        root,
        soak_config(),
        MountOptions {
            passthrough,
            no_open: false,
            ..MountOptions::default()
        },
    ) else {
        return;
    };
    ctl(
        &m.at(&format!("sessions/{sid}/ctl")),
        "compress m00001 m00004 the first messages of the session, summarised at length\n",
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    let state_path = m.root().join(format!("noa/{sid}/state.json"));
    let base: Value =
        serde_json::from_slice(&std::fs::read(&state_path).expect("state")).expect("json");
    let shared = Arc::new(Shared::default());
    let _dog = Watchdog::start(
        "replaced_state_json",
        Duration::from_secs(120),
        m.mnt().to_path_buf(),
        shared.clone(),
    );
    let runtime = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let mut round: usize = 0;
            while !shared.stopped() {
                round += 1;
                let mut v = base.clone();
                v["runtimePadding"] = json!("x".repeat((round * 7919) % 20000));
                let tmp = state_path.with_file_name(format!("state.json.tmp-{round}"));
                std::fs::write(&tmp, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
                std::fs::rename(&tmp, &state_path).expect("rename");
                shared.renames.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let through = m.at(&format!("sessions/{sid}/state.json"));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let shared = shared.clone();
            let through = through.clone();
            std::thread::spawn(move || {
                while !shared.stopped() {
                    let r = std::fs::read(&through)
                        .map_err(|e| e.to_string())
                        .and_then(|b| {
                            shared.reads.fetch_add(1, Ordering::Relaxed);
                            validate("state.json", &b)
                        });
                    if let Err(e) = r {
                        shared.fail(e);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(soak_duration().min(Duration::from_secs(10)));
    shared.stop.store(true, Ordering::Relaxed);
    runtime.join().expect("runtime");
    for r in readers {
        r.join().expect("reader");
    }
    let failures = shared.failures();
    println!(
        "soak: replaced state.json ({}): {} renames by the runtime, {} reads through the mount, {} not one whole version",
        if m.handle().passthrough() { "passthrough" } else { "pread" },
        shared.renames.load(Ordering::Relaxed),
        shared.reads.load(Ordering::Relaxed),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}
