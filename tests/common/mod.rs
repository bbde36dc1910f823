//! Shared helpers of the integration tests: hand-written sessions.
#![allow(dead_code)]

use normafs::format::transcript::{parse_line, Record};
use normafs::noa::Msg;
use serde_json::{json, Value};

/// Builds a transcript the way the runtime writes one: chained uuids, one record per message.
pub struct Session {
    pub sid: String,
    pub records: Vec<Record>,
    n: u64,
}

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

    fn timestamp_of(n: u64) -> String {
        format!(
            "2026-11-30T{:02}:{:02}:{:02}.000000001Z",
            10 + n / 3600,
            (n / 60) % 60,
            n % 60
        )
    }

    fn push(&mut self, kind: &str, message: Option<Value>) -> &mut Self {
        self.n += 1;
        let uuid = format!("{:032x}", 0xabc000 + self.n);
        let mut v = json!({"uuid": uuid});
        if let Some(prev) = self.records.last() {
            v["parent_uuid"] = json!(prev.uuid);
        }
        v["session_id"] = json!(self.sid);
        v["timestamp"] = json!(format!(
            "2026-11-30T10:{:02}:{:02}.000000001Z",
            self.n / 60,
            self.n % 60
        ));
        v["type"] = json!(kind);
        if let Some(m) = message {
            v["message"] = m;
        }
        let line = serde_json::to_string(&v).expect("json");
        self.records
            .push(parse_line(line.as_bytes()).expect("record"));
        self
    }

    pub fn user(&mut self, text: &str) -> &mut Self {
        self.push(
            "message",
            Some(json!({"role":"user","content":[{"type":"text","text":text}]})),
        )
    }

    pub fn assistant(&mut self, text: &str) -> &mut Self {
        self.push(
            "message",
            Some(json!({"role":"assistant","content":[{"type":"text","text":text}]})),
        )
    }

    pub fn tool_use(&mut self, id: &str, name: &str, input: Value) -> &mut Self {
        self.push(
            "message",
            Some(json!({"role":"assistant","content":[{"type":"tool_use","id":id,"name":name,"input":input}]})),
        )
    }

    pub fn tool_result(&mut self, id: &str, text: &str) -> &mut Self {
        self.push(
            "message",
            Some(json!({"role":"user","content":[{"type":"tool_result","tool_use_id":id,"content":[{"type":"text","text":text}]}]})),
        )
    }

    pub fn tool_result_error(&mut self, id: &str, text: &str) -> &mut Self {
        self.push(
            "message",
            Some(json!({"role":"user","content":[{"type":"tool_result","tool_use_id":id,"content":[{"type":"text","text":text}],"is_error":true}]})),
        )
    }

    pub fn boundary(&mut self) -> &mut Self {
        self.push("boundary", None)
    }

    /// The uuid of the n-th message (0-based).
    pub fn raw(&self, n: usize) -> String {
        self.records
            .iter()
            .filter(|r| r.as_message().is_some())
            .nth(n)
            .map(|r| r.uuid.clone())
            .expect("message")
    }

    pub fn msgs(&self) -> Vec<Msg<'_>> {
        self.records
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

    pub fn jsonl(&self) -> String {
        let mut s = String::new();
        for r in &self.records {
            s.push_str(&r.to_line());
            s.push('\n');
        }
        s
    }
}

/// A text of exactly `tokens` tokens (4 bytes each).
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
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
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

/// A temporary copy of the example root (tests/data/example-root).
pub fn example_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_tree(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/example-root"),
        dir.path(),
    );
    dir
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

// ---- mounts ---------------------------------------------------------------------------------

/// Whether FUSE mounts can be tested here; prints a notice when not.
pub fn fuse_available() -> bool {
    if std::path::Path::new("/dev/fuse").exists() {
        true
    } else {
        eprintln!("notice: /dev/fuse is absent: mount test skipped");
        false
    }
}

/// Whether `p` is a mount point now (per /proc/self/mountinfo).
pub fn is_mounted(p: &std::path::Path) -> bool {
    let p = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
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

impl Mounted {
    pub fn new(
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

    /// The example root, mounted with the default settings.
    pub fn example() -> Mounted {
        Mounted::new(
            example_root(),
            normafs::config::Config::default(),
            normafs::fuse::MountOptions::default(),
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

/// Run a program; its output.
pub fn tool(prog: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(prog)
        .args(args)
        .output()
        .expect("run tool")
}

/// Whether a program is installed (prints a notice when not).
pub fn have(prog: &str) -> bool {
    let ok = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {prog}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("notice: {prog} is not installed: that step is skipped");
    }
    ok
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
    use std::io::Write;
    let line = chained_user_line(p, sid, text);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(p)
        .expect("open");
    writeln!(f, "{line}").expect("append");
}
