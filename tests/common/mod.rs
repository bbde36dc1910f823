//! Shared helpers of the integration tests: hand-built transcripts in the runtime's record
//! shape, copies of the runtime's oracle corpus (`tests/data/norma/corpus`), the filesystem
//! without a mount and through one, and the commands the tests run. A helper that two test
//! files need lives here, once. Every test binary that declares `mod common;` compiles all of
//! it, hence `allow(dead_code)`: each uses only some.
//!
//! Live sessions: a copy's transcripts get fresh modification times, and a transcript written
//! within `live_seconds` (120 s by default) makes its session look live, so that `compress` and
//! `rebuild` answer `EBUSY` (SPEC 6). [`example_root`] therefore sets every transcript's mtime
//! one day back: a copy of the corpus is idle, as the runtime left it, under the default
//! settings. A test about live sessions touches a transcript itself. Memory files get the
//! modification times the runtime's scan saw (`oracle/_memory/scan.json`), so that the scan
//! order, and the computed `MEMORY.md`, are the runtime's.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use normafs::format::transcript::{parse_line, Message, Record};
use serde_json::{json, Value};

/// Builds a transcript the way the runtime writes one (SPEC 2.1): records keyed `uuid` (32
/// lowercase hex), `parent_uuid` (the previous record's, omitted on the first), `session_id`,
/// `timestamp` (UTC RFC 3339, trailing zeros of the fraction trimmed), `type` and `message`.
pub struct Session {
    pub sid: String,
    pub records: Vec<Record>,
    n: u64,
}

/// The first record's time, Unix seconds (2026-11-30T10:00:00Z).
const BASE_SECS: i64 = 1_795_946_400;

impl Session {
    pub fn new(sid: &str) -> Session {
        Session {
            sid: sid.to_string(),
            records: Vec::new(),
            n: 0,
        }
    }

    /// The timestamp the next record will get.
    pub fn next_timestamp(&self) -> String {
        Self::timestamp_of(self.n + 1)
    }

    /// Record `n`'s time: one second apart, with a nanosecond so the fraction is never empty.
    fn timestamp_of(n: u64) -> String {
        let t = chrono::DateTime::from_timestamp(BASE_SECS + n as i64, 1).expect("a time");
        t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
    }

    /// Append one record; `rest` holds the keys after `type` (`message`, `boundary`).
    fn push(&mut self, kind: &str, rest: Vec<(&str, Value)>) -> &mut Self {
        self.n += 1;
        let mut v = json!({"uuid": format!("{:032x}", 0x00ab_c000_u64 + self.n)});
        if let Some(prev) = self.records.last() {
            v["parent_uuid"] = json!(prev.uuid);
        }
        v["session_id"] = json!(self.sid);
        v["timestamp"] = json!(Self::timestamp_of(self.n));
        v["type"] = json!(kind);
        for (k, x) in rest {
            v[k] = x;
        }
        let line = serde_json::to_string(&v).expect("json");
        self.records
            .push(parse_line(line.as_bytes()).expect("record"));
        self
    }

    /// A message record with these content blocks.
    pub fn message(&mut self, role: &str, content: Value) -> &mut Self {
        self.push(
            "message",
            vec![("message", json!({"role": role, "content": content}))],
        )
    }

    pub fn user(&mut self, text: &str) -> &mut Self {
        self.message("user", json!([{"type": "text", "text": text}]))
    }

    pub fn assistant(&mut self, text: &str) -> &mut Self {
        self.message("assistant", json!([{"type": "text", "text": text}]))
    }

    /// One assistant message: thinking, then text (four content messages with its result:
    /// thinking, text, tool call, tool result).
    pub fn thinking(&mut self, thinking: &str, text: &str) -> &mut Self {
        self.message(
            "assistant",
            json!([{"type": "thinking", "thinking": thinking, "signature": "sig"},
                   {"type": "text", "text": text}]),
        )
    }

    pub fn tool_use(&mut self, id: &str, name: &str, input: Value) -> &mut Self {
        self.message(
            "assistant",
            json!([{"type": "tool_use", "id": id, "name": name, "input": input}]),
        )
    }

    pub fn tool_result(&mut self, id: &str, text: &str) -> &mut Self {
        self.message(
            "user",
            json!([{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": text}]}]),
        )
    }

    pub fn tool_result_error(&mut self, id: &str, text: &str) -> &mut Self {
        self.message(
            "user",
            json!([{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": text}], "is_error": true}]),
        )
    }

    /// A tool call and its result.
    pub fn tool(&mut self, id: &str, name: &str, input: Value, result: &str) -> &mut Self {
        self.tool_use(id, name, input).tool_result(id, result)
    }

    /// A Compress call with `input` and the result `panel` (the runtime's tool result).
    pub fn compress_call(&mut self, id: &str, input: Value, panel: &str) -> &mut Self {
        self.tool(id, "Compress", input, panel)
    }

    /// A built-in compaction marker (SPEC 2.1): a user message whose one block is a
    /// `compact_boundary`.
    pub fn compact_marker(&mut self, pre_tokens: u64) -> &mut Self {
        self.message(
            "user",
            json!([{"type": "compact_boundary", "input": {"pre_tokens": pre_tokens}}]),
        )
    }

    /// A boundary record (no message).
    pub fn boundary(&mut self) -> &mut Self {
        self.push("boundary", vec![("boundary", json!({"pre_tokens": 0}))])
    }

    /// The uuid of the n-th message record (0-based).
    pub fn uuid(&self, n: usize) -> String {
        self.records
            .iter()
            .filter(|r| r.as_message().is_some())
            .nth(n)
            .map(|r| r.uuid.to_string())
            .expect("message")
    }

    /// The messages as the core takes them (`store::session::messages`): records that carry
    /// a message, boundary records aside, in file order.
    pub fn msgs(&self) -> Vec<&Message> {
        self.records.iter().filter_map(Record::as_message).collect()
    }

    /// The raw id (SPEC 2.5: `h_` + 16 hex) of each content message, in projection order.
    pub fn ids(&self) -> Vec<String> {
        normafs::noa::content::project(&self.msgs())
            .into_iter()
            .map(|c| c.id.to_string())
            .collect()
    }

    pub fn jsonl(&self) -> String {
        let mut s = String::new();
        for r in &self.records {
            s.push_str(&r.to_line());
            s.push('\n');
        }
        s
    }
}

/// A text of exactly `tokens` tokens (4 ASCII characters each).
pub fn text_of(tokens: usize, fill: char) -> String {
    std::iter::repeat_n(fill, tokens * 4).collect()
}

/// Parse view.jsonl bytes into JSON values.
pub fn lines(bytes: &[u8]) -> Vec<Value> {
    std::str::from_utf8(bytes)
        .expect("utf8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("view line is JSON"))
        .collect()
}

/// Copy a directory tree (files and dirs only), making it writable.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).expect("copy");
            let mut p = std::fs::metadata(&dst).expect("meta").permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o644);
            std::fs::set_permissions(&dst, p).expect("chmod");
        }
    }
}

/// `tests/data/norma`: the runtime's corpus and its oracle.
pub fn norma_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/norma")
}

/// The corpus's sessions.
pub const CORPUS_SESSIONS: [&str; 5] = [
    "s1-small",
    "s2-tier1",
    "s3-tier2",
    "s4-subagent",
    "s5-fork-of-s2",
];

/// A file of the oracle, as JSON (`oracle/<rel>`).
pub fn oracle(rel: &str) -> Value {
    let p = norma_data().join("oracle").join(rel);
    serde_json::from_slice(&std::fs::read(&p).expect("oracle file")).expect("oracle JSON")
}

/// Set a file's modification time.
pub fn set_mtime(p: &Path, t: SystemTime) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .expect("open for set_modified");
    f.set_modified(t).expect("set_modified");
}

/// Set every regular file under `dir` to modification time `t`.
pub fn set_tree_mtime(dir: &Path, t: SystemTime) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let ft = e.file_type().expect("type");
        if ft.is_dir() {
            set_tree_mtime(&e.path(), t);
        } else if ft.is_file() {
            set_mtime(&e.path(), t);
        }
    }
}

/// Make a copied root idle: every transcript (sidechains too) last written a day ago.
pub fn make_idle(root: &Path) {
    set_tree_mtime(
        &root.join("transcripts"),
        SystemTime::now() - Duration::from_secs(86_400),
    );
}

/// A temporary copy of the runtime's corpus (`tests/data/norma/corpus`: sessions s1-small,
/// s2-tier1, s3-tier2, s4-subagent with a sidechain, s5-fork-of-s2), idle (see the module
/// notes), its memory files at the modification times the runtime's scan saw.
pub fn example_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_tree(&norma_data().join("corpus"), dir.path());
    make_idle(dir.path());
    for m in oracle("_memory/scan.json").as_array().expect("scan") {
        let file = m["file"].as_str().expect("file");
        let at = chrono::DateTime::parse_from_rfc3339(m["modTime"].as_str().expect("modTime"))
            .expect("a time");
        let t = SystemTime::UNIX_EPOCH
            + Duration::new(at.timestamp() as u64, at.timestamp_subsec_nanos());
        set_mtime(&dir.path().join("memory").join(file), t);
    }
    dir
}

/// The settings the runtime ran the corpus's sessions with, as a `--config` file: a table per
/// session with its window and its parents (`oracle/corpus-spec.json`; every other key of
/// the corpus is the default). `top` goes first (top-level keys, e.g. `live_seconds = 0`).
pub fn corpus_config_toml(top: &str) -> String {
    let spec = oracle("corpus-spec.json");
    let mut out = String::from(top);
    out.push('\n');
    for s in spec["Sessions"].as_array().expect("sessions") {
        let id = s["ID"].as_str().expect("id");
        out.push_str(&format!(
            "\n[sessions.\"{id}\"]\nwindow = {}\n",
            s["Config"]["ModelContextLimit"]
        ));
        if let Some(p) = s["ParentSessionIDs"].as_array().filter(|a| !a.is_empty()) {
            out.push_str(&format!("parents = {}\n", Value::Array(p.clone())));
        }
    }
    out
}

/// [`corpus_config_toml`] as a configuration.
pub fn corpus_config() -> normafs::config::Config {
    let text = corpus_config_toml("");
    let file = normafs::config::ConfigFile::parse(&text, Path::new("corpus.toml")).expect("toml");
    let (cfg, warnings) =
        normafs::config::Config::build(file, &normafs::config::Settings::default());
    assert!(warnings.is_empty(), "{warnings:?}");
    cfg
}

/// The noa settings of one corpus session.
pub fn corpus_noa(sid: &str) -> normafs::config::NoaConfig {
    corpus_config().for_session(sid)
}

/// Settings under which ctl acts at once on a short session: a 2-message protected tail, no
/// token protection, no batch minimum, and no session counted as live (the tests write each
/// root just before its command).
pub fn ctl_noa() -> normafs::config::NoaConfig {
    normafs::config::NoaConfig {
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        min_range_chars: 0,
        live_seconds: 0,
        ..normafs::config::NoaConfig::default()
    }
}

/// Every file under `root` with its bytes, by relative path (the lock file excluded).
pub fn snapshot(root: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fn walk(
        base: &std::path::Path,
        dir: &std::path::Path,
        out: &mut std::collections::BTreeMap<String, Vec<u8>>,
    ) {
        for e in std::fs::read_dir(dir).expect("read_dir") {
            let e = e.expect("entry");
            let p = e.path();
            if e.file_type().expect("type").is_dir() {
                walk(base, &p, out);
            } else if e.file_name() != ".normafs.lock" {
                let rel = p
                    .strip_prefix(base)
                    .expect("prefix")
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read(&p).expect("read"));
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Write a built session's transcript under `root/transcripts/`.
pub fn write_session(root: &std::path::Path, s: &Session) {
    let dir = root.join("transcripts");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join(format!("{}.jsonl", s.sid)), s.jsonl()).expect("write");
}

// ---- the filesystem without a mount ----------------------------------------------------------

/// The inode of `path` (`/`-separated, relative to the mount's root), looked up one name at a
/// time as the kernel does; each lookup counts a kernel reference.
pub fn lookup_path(fs: &normafs::fs::NormaFs, path: &str) -> Result<u64, normafs::fs::FsError> {
    let mut ino = normafs::fs::ROOT_INO;
    for c in path.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, std::ffi::OsStr::new(c))?.attr.ino;
    }
    Ok(ino)
}

// ---- mounts ---------------------------------------------------------------------------------

/// Whether FUSE mounts can be tested here; prints a notice when not.
pub fn fuse_available() -> bool {
    if std::path::Path::new("/dev/fuse").exists() {
        return true;
    }
    assert!(
        !mount_required(),
        "/dev/fuse is absent where a mount must be possible (CI, NORMAFS_REQUIRE_MOUNT)"
    );
    eprintln!("notice: /dev/fuse is absent: mount test skipped");
    false
}

/// Whether a test that needs a mount must fail rather than skip without one: under CI
/// (`CI`, or `NORMAFS_REQUIRE_MOUNT`, which `.ci/run` sets).
pub fn mount_required() -> bool {
    ["CI", "NORMAFS_REQUIRE_MOUNT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty() && x != "0" && x != "false"))
}

/// Whether `p` is a mount point now, in this thread's mount namespace (per
/// /proc/thread-self/mountinfo: a test may run in a namespace of its own).
pub fn is_mounted(p: &std::path::Path) -> bool {
    let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let info = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap_or_default();
    let want = p.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m == want))
}

/// Detach whatever is still mounted at `p` (the last resort of the guards).
pub fn force_unmount(p: &std::path::Path) {
    if is_mounted(p) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(p)
            .status();
    }
}

/// A temporary root mounted (through the library) on a temporary directory. Dropping it unmounts
/// first, then removes both directories, also when the test panics.
pub struct Mounted {
    handle: Option<normafs::fuse::MountHandle>,
    pub root: tempfile::TempDir,
    pub mnt: tempfile::TempDir,
}

/// A mount of `root` for a test, with `cfg` and `opts`; `None`, said on stderr, where no
/// mount is possible (a failure under CI: [`fuse_available`]). Every mount test starts here,
/// so none mounts without asking and none passes silently for want of a mount:
/// `let Some(m) = mount(..) else { return };`.
pub fn mount(
    root: tempfile::TempDir,
    cfg: normafs::config::Config,
    opts: normafs::fuse::MountOptions,
) -> Option<Mounted> {
    fuse_available().then(|| Mounted::new(root, cfg, opts))
}

/// [`mount`] of a copy of the corpus with each session's settings.
pub fn mount_example() -> Option<Mounted> {
    fuse_available().then(Mounted::example)
}

/// [`mount`] of a copy of the corpus with default settings, as mounted by default: the
/// kernel opens files itself and keeps their pages (normafs's own read path, no passthrough).
pub fn mount_without_passthrough() -> Option<Mounted> {
    fuse_available().then(Mounted::without_passthrough)
}

impl Mounted {
    fn new(
        root: tempfile::TempDir,
        cfg: normafs::config::Config,
        opts: normafs::fuse::MountOptions,
    ) -> Mounted {
        let mnt = tempfile::tempdir().expect("tempdir");
        let paths = normafs::store::root::RootPaths::from_root(root.path());
        let handle = normafs::fuse::mount_background(paths, cfg, opts, mnt.path()).expect("mount");
        Mounted {
            handle: Some(handle),
            root,
            mnt,
        }
    }

    /// A copy of the corpus ([`example_root`]), mounted with each session's settings
    /// ([`corpus_config`]).
    fn example() -> Mounted {
        Mounted::new(
            example_root(),
            corpus_config(),
            normafs::fuse::MountOptions::default(),
        )
    }

    /// A copy of the corpus with default settings, mounted as by default (no passthrough).
    fn without_passthrough() -> Mounted {
        Mounted::new(
            example_root(),
            normafs::config::Config::default(),
            normafs::fuse::MountOptions {
                passthrough: false,
                ..normafs::fuse::MountOptions::default()
            },
        )
    }

    pub fn mnt(&self) -> &std::path::Path {
        self.mnt.path()
    }

    pub fn root(&self) -> &std::path::Path {
        self.root.path()
    }

    /// A path inside the mount.
    pub fn at(&self, rel: &str) -> std::path::PathBuf {
        self.mnt.path().join(rel)
    }

    pub fn handle(&self) -> &normafs::fuse::MountHandle {
        self.handle.as_ref().expect("mounted")
    }

    /// How many requests of kind `op` the kernel sent the mount so far.
    pub fn requests_of(&self, op: &str) -> u64 {
        self.handle()
            .requests()
            .into_iter()
            .find(|(o, _)| *o == op)
            .map_or(0, |(_, n)| n)
    }

    /// Unmount now (the directories stay until the value is dropped).
    pub fn unmount(&mut self) -> std::io::Result<()> {
        match self.handle.take() {
            Some(h) => h.unmount(),
            None => Ok(()),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        drop(self.handle.take());
        force_unmount(self.mnt.path());
    }
}

/// Run a command line in bash (dash's `echo` reports every failed write as "I/O error"; bash
/// names the errno, as users see it); its output.
pub fn sh(cmd: &str) -> std::process::Output {
    std::process::Command::new("bash")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("run sh")
}

/// The stdout of a command that must have succeeded (the test fails with its exit status and
/// stderr otherwise).
pub fn ok(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "failed ({:?}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The stdout bytes of a command that must have succeeded (as [`ok`]).
pub fn ok_bytes(o: &std::process::Output) -> Vec<u8> {
    ok(o);
    o.stdout.clone()
}

/// A command's stderr, as text.
pub fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `p` in single quotes, for a shell command line (no test path holds a quote).
pub fn quoted(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// What `cat p` prints; the test fails, with cat's stderr, if it fails.
pub fn cat(p: &Path) -> Vec<u8> {
    let o = tool("cat", &[p.as_os_str()]);
    assert!(
        o.status.success(),
        "cat {}: {}",
        p.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// Run a program; its output.
pub fn tool(prog: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(prog)
        .args(args)
        .output()
        .expect("run tool")
}

/// Whether a program is installed (prints a notice when not). Under CI ([`mount_required`])
/// a missing one fails the test: scripts/test.sh installs every program the tests drive.
pub fn have(prog: &str) -> bool {
    let ok = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {prog}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            !mount_required(),
            "{prog} is not installed where the tests must run whole (CI, NORMAFS_REQUIRE_MOUNT)"
        );
        eprintln!("notice: {prog} is not installed: that step is skipped");
    }
    ok
}

/// Whether process `pid` runs (a zombie has ended).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim().to_string()))
        .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'))
}

/// The PID a `normafs mount` start line names (`(pid N, …`).
pub fn pid_of(start: &str) -> i32 {
    start
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {start:?}"))
}

/// A `normafs mount --daemon` a test started (the PID its start line names, [`pid_of`]): killed
/// and its mount detached on drop, also when the test fails.
pub struct Daemon {
    pub pid: i32,
    pub mnt: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if alive(self.pid) {
            // SAFETY: signals a process the test started.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
        force_unmount(&self.mnt);
    }
}

/// Poll `f` until it holds or `limit` passes; whether it held.
pub fn within(limit: std::time::Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A user message saying `text`, chained to the last record of the transcript at `p` (one JSONL
/// line, without its newline), as the runtime would append it.
pub fn chained_user_line(p: &std::path::Path, sid: &str, text: &str) -> String {
    let old = std::fs::read_to_string(p).expect("read");
    let last: Value = serde_json::from_str(old.lines().last().expect("a line")).expect("json");
    json!({
        "uuid": "0123456789abcdef0123456789abcdef",
        "parent_uuid": last["uuid"],
        "session_id": sid,
        "timestamp": "2026-10-02T09:10:00.000000001Z",
        "type": "message",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]}
    })
    .to_string()
}

/// Append [`chained_user_line`] to the transcript at `p`.
pub fn append_user_message(p: &std::path::Path, sid: &str, text: &str) {
    let line = chained_user_line(p, sid, text);
    append(p, format!("{line}\n").as_bytes());
}

/// Append `bytes` to the file at `path` (created if missing), in one write.
pub fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open");
    f.write_all(bytes).expect("append");
}
