//! The mount as an ordinary user runs it: a user of its own (made with useradd when missing,
//! removed after), `normafs mount --daemon` through fusermount3, then the everyday tools, ctl
//! and an edit of a memory, all as that user; `fusermount3 -u` ends it. On these machines
//! `/dev/fuse` is 0600: the test opens it up (0666, its usual mode elsewhere) and puts the
//! mode back after, also when it fails; with it closed, the mount's one-line error names the
//! cause. Needs root (to make the user) and the fuse3 package.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{alive, example_root, fuse_available, have, ok, stderr, within, Daemon};

const BIN: &str = env!("CARGO_BIN_EXE_normafs");
const USER: &str = "normafs-test";

/// `/dev/fuse` at a mode of the test's, its own mode again on drop.
struct DevFuse {
    was: u32,
}

impl DevFuse {
    fn set(mode: u32) -> DevFuse {
        let was = std::fs::metadata("/dev/fuse")
            .expect("/dev/fuse")
            .permissions()
            .mode()
            & 0o7777;
        let d = DevFuse { was };
        d.chmod(mode);
        d
    }

    fn chmod(&self, mode: u32) {
        std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(mode))
            .expect("chmod /dev/fuse");
    }
}

impl Drop for DevFuse {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.was));
    }
}

/// The test's user: made when missing (and then removed on drop).
struct TestUser {
    uid: u32,
    gid: u32,
    made: bool,
}

impl TestUser {
    fn get() -> Option<TestUser> {
        let id = |flag: &str| -> Option<u32> {
            let o = Command::new("id").args([flag, USER]).output().ok()?;
            String::from_utf8_lossy(&o.stdout).trim().parse().ok()
        };
        let mut made = false;
        if id("-u").is_none() {
            let o = Command::new("useradd")
                .args(["--system", "--no-create-home", "--shell", "/bin/sh", USER])
                .output()
                .ok()?;
            if !o.status.success() {
                eprintln!(
                    "notice: useradd failed ({}): test skipped",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                return None;
            }
            made = true;
        }
        Some(TestUser {
            uid: id("-u")?,
            gid: id("-g")?,
            made,
        })
    }

    /// Give `p` (and what is under it) to the user.
    fn own(&self, p: &Path) {
        let o = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", self.uid, self.gid))
            .arg(p)
            .output()
            .expect("chown");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    /// A command line in bash, as the user (no groups, HOME at /tmp, umask 022).
    fn sh(&self, cmd: &str) -> Output {
        Command::new("setpriv")
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--clear-groups", "bash", "-c"])
            .arg(format!("umask 022; {cmd}"))
            .env("HOME", "/tmp")
            .env_remove("RUST_LOG")
            .output()
            .expect("setpriv")
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        if self.made {
            let _ = Command::new("userdel").arg(USER).output();
        }
    }
}

#[test]
fn an_ordinary_user_mounts_and_works_in_the_mount() {
    if !fuse_available() || !have("fusermount3") || !have("setpriv") || !have("jq") {
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("notice: making the test's user needs root: test skipped");
        return;
    }
    let Some(user) = TestUser::get() else { return };
    let root = example_root();
    let mnt = tempfile::tempdir().expect("tempdir");
    let etc = tempfile::tempdir().expect("tempdir");
    let config = etc.path().join("corpus.toml");
    std::fs::write(&config, common::corpus_config_toml("")).expect("write config");
    // The binary where the user can run it.
    let bin = etc.path().join("normafs");
    std::fs::copy(BIN, &bin).expect("copy the binary");
    for p in [root.path(), mnt.path(), etc.path()] {
        user.own(p);
    }
    let (r, m) = (root.path().display(), mnt.path().display());
    let mount_cmd = format!(
        "'{}' mount --daemon --verbose --config '{}' '{r}' '{m}'",
        bin.display(),
        config.display()
    );

    // /dev/fuse closed to the user: one line naming the cause, exit 2, nothing mounted.
    let dev = DevFuse::set(0o600);
    let o = user.sh(&mount_cmd);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains("failed to open /dev/fuse: Permission denied")
            && e.contains("/dev/fuse is mode 0600")
            && e.contains("chmod 0666 /dev/fuse"),
        "{e}"
    );
    assert!(!common::is_mounted(mnt.path()));

    // Opened up, as elsewhere: the user's mount, through fusermount3, without passthrough.
    dev.chmod(0o666);
    let (start, guard) = mount_as(&user, &mount_cmd, mnt.path());
    let pid = guard.pid;
    assert!(
        start.contains("passthrough: off (the default; -o passthrough for it)")
            && start.contains(&format!("`fusermount3 -u '{m}'`"))
            && start.contains("mounted through /")
            && start.contains("the kernel opens files itself"),
        "{start}"
    );
    let line = mountinfo_line(mnt.path());
    assert!(line.contains(&format!("user_id={}", user.uid)), "{line}");
    // Only the user and root's kernel checks get in: root is refused (no allow_other).
    let e = std::fs::read_dir(mnt.path().join("sessions")).expect_err("root is not let in");
    assert_eq!(e.raw_os_error(), Some(libc::EACCES));

    // The everyday tools, as the user.
    let ls = ok(&user.sh(&format!("ls '{m}/sessions'")));
    assert_eq!(
        ls.lines().collect::<Vec<_>>(),
        [
            "s1-small",
            "s2-tier1",
            "s3-tier2",
            "s4-subagent",
            "s5-fork-of-s2"
        ]
    );
    for sid in common::CORPUS_SESSIONS {
        let got = ok(&user.sh(&format!("jq -c .message '{m}/sessions/{sid}/view.jsonl'")));
        let got: Vec<serde_json::Value> = got
            .lines()
            .map(|l| serde_json::from_str(l).expect("jq prints JSON"))
            .collect();
        let want = common::oracle(&format!("{sid}/resume-view.json"));
        assert_eq!(
            serde_json::Value::Array(got),
            want,
            "{sid}: the runtime's view"
        );
        // Its history through the links: the view at the end is view.jsonl, a timeline line
        // per request point (`at/` lists them and `latest`).
        let n = normafs::store::session::load(
            &normafs::store::root::RootPaths::from_root(root.path()),
            sid,
        )
        .messages()
        .len();
        let d = format!("{m}/sessions/{sid}");
        let counts = ok(&user.sh(&format!(
            "cmp '{d}/at/{n}/view.jsonl' '{d}/view.jsonl' && jq -c .request '{d}/timeline.jsonl' | wc -l && ls '{d}/at' | wc -l"
        )));
        let c: Vec<usize> = counts
            .lines()
            .map(|l| l.trim().parse().expect("a count"))
            .collect();
        assert!(
            c.len() == 2 && c[0] > 0 && c[1] == c[0] + 1,
            "{sid}: {counts}"
        );
        // Sizes agree with what a read returns, real and computed files alike.
        for f in [
            "transcript.jsonl",
            "view.jsonl",
            "view.md",
            "status.json",
            "audit.txt",
            "timeline.jsonl",
            "timeline.svg",
        ] {
            let p = format!("{m}/sessions/{sid}/{f}");
            let o = ok(&user.sh(&format!("stat -L -c %s '{p}'; wc -c < '{p}'")));
            let v: Vec<&str> = o.lines().collect();
            assert_eq!(v.first(), v.get(1), "{sid}/{f}: stat and read disagree");
        }
    }
    ok(&user.sh(&format!(
        "cmp '{m}/sessions/s1-small/transcript.jsonl' '{r}/transcripts/s1-small.jsonl'"
    )));
    let hits = ok(&user.sh(&format!("grep -rl 'noa-archive' '{m}/sessions' | sort")));
    assert!(
        hits.lines().any(|l| l.ends_with("s2-tier1/view.jsonl")),
        "{hits}"
    );
    let less = ok(&user.sh(&format!(
        "LESS= less -FX '{m}/sessions/s1-small/view.md' | head -1"
    )));
    assert_eq!(less.trim(), "# View of s1-small");

    // ctl, as a script writes it: help, then the runtime's Compress input.
    let ctl = format!("{m}/sessions/s2-tier1/ctl");
    let help = ok(&user.sh(&format!("echo help > '{ctl}' && cat '{ctl}'")));
    assert!(help.contains("\"command\":\"help\",\"ok\":true"), "{help}");
    let input = common::norma_data().join("oracle/s2-tier1/compress-1/input.json");
    let input_text = std::fs::read_to_string(&input).expect("input");
    std::fs::write(etc.path().join("input.json"), &input_text).expect("copy input");
    user.own(etc.path());
    let res = ok(&user.sh(&format!(
        "echo \"compress $(cat '{}/input.json')\" > '{ctl}' && tail -n 1 '{ctl}'",
        etc.path().display()
    )));
    let last: serde_json::Value = serde_json::from_str(res.trim()).expect("a result line");
    assert_eq!(last["ok"], true, "{last}");
    let state = root.path().join("noa/s2-tier1/state.json");
    let meta = std::fs::metadata(&state).expect("state.json");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.uid(), user.uid, "the state is the user's file");
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).expect("read")).expect("json");
    assert_eq!(s["nextBlockId"], 19);

    // A memory edited with sed -i, and one made under the user's umask.
    let mem = ok(&user.sh(&format!("ls '{m}/memory'")));
    let file = mem
        .lines()
        .find(|l| l.ends_with(".md") && *l != "MEMORY.md")
        .unwrap_or_else(|| panic!("a memory file: {mem}"))
        .to_string();
    ok(&user.sh(&format!(
        "sed -i '$ a edited by the test' '{m}/memory/{file}'"
    )));
    let back = std::fs::read_to_string(root.path().join("memory").join(&file)).expect("read");
    assert!(back.ends_with("edited by the test\n"), "{back}");
    ok(&user.sh(&format!(
        "umask 027; printf -- '---\\nname: t\\n---\\nbody\\n' > '{m}/memory/t.md'"
    )));
    let made = std::fs::metadata(root.path().join("memory/t.md")).expect("t.md");
    assert_eq!(made.permissions().mode() & 0o777, 0o640);
    assert_eq!(made.uid(), user.uid);

    // The runtime replaces state.json again and again while the user reads it through the
    // mount: every read is one whole version (the rename soak, as an ordinary user's mount,
    // where real files are read without passthrough).
    let base: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).expect("read")).expect("json");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renamer = {
        let (stop, state, base) = (stop.clone(), state.clone(), base.clone());
        let owner = (user.uid, user.gid);
        std::thread::spawn(move || {
            let mut round = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                let mut v = base.clone();
                v["runtimePadding"] = serde_json::json!("x".repeat((round * 7919) % 20000));
                let tmp = state.with_file_name(format!(".state.json.tmp-{round}"));
                std::fs::write(&tmp, serde_json::to_vec_pretty(&v).expect("json")).expect("write");
                std::os::unix::fs::chown(&tmp, Some(owner.0), Some(owner.1)).expect("chown");
                std::fs::rename(&tmp, &state).expect("rename");
            }
            round
        })
    };
    let reads = ok(&user.sh(&format!(
        "bad=0; for i in $(seq 300); do jq -e .version '{m}/sessions/s2-tier1/state.json' \
         >/dev/null 2>&1 || bad=$((bad+1)); done; echo $bad"
    )));
    // And a tight loop of its own (open, fstat, read to the end): every read is as long
    // as its handle's fstat says, and parses.
    let tight = if have("python3") {
        ok(&user.sh(&format!(
            "python3 -c '
import json, os
bad = 0
for _ in range(10000):
    fd = os.open(\"{m}/sessions/s2-tier1/state.json\", os.O_RDONLY)
    size = os.fstat(fd).st_size
    chunks = []
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(fd)
    data = b\"\".join(chunks)
    try:
        json.loads(data)
        bad += len(data) != size
    except ValueError:
        bad += 1
print(bad)
'"
        )))
    } else {
        "0".to_string()
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let renames = renamer.join().expect("renamer");
    assert!(
        renames > 10,
        "the runtime replaced state.json {renames} times"
    );
    assert_eq!(reads.trim(), "0", "reads that were not one whole version");
    assert_eq!(
        tight.trim(),
        "0",
        "tight reads that were not one whole version of their fstat size"
    );

    // The runtime appends to a transcript while the user reads it through the mount again
    // and again (and `stat`s it meanwhile): no read holds zeros where the file has bytes
    // (the kernel's page cut at an older end, `fs/growth.rs`).
    let transcript = root.path().join("transcripts/s2-tier1.jsonl");
    let record = std::fs::read(&transcript)
        .expect("read the transcript")
        .split(|&b| b == b'\n')
        .find(|l| !l.is_empty())
        .expect("a record")
        .to_vec();
    stop.store(false, std::sync::atomic::Ordering::Relaxed);
    let appender = {
        let (stop, transcript, record) = (stop.clone(), transcript.clone(), record.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&transcript)
                .expect("open the transcript");
            let mut n = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Records of varying length, each one write as the runtime makes it.
                let mut line = record.clone();
                line.extend(std::iter::repeat_n(b' ', n % 200));
                line.push(b'\n');
                f.write_all(&line).expect("append");
                n += 1;
                std::thread::sleep(Duration::from_micros(700));
            }
            n
        })
    };
    let zeros = if have("python3") {
        ok(&user.sh(&format!(
            "python3 -c '
import os, threading, time
p = \"{m}/sessions/s2-tier1/transcript.jsonl\"
end = time.time() + 3
def stats():
    while time.time() < end:
        os.stat(p)
threading.Thread(target=stats).start()
bad = reads = 0
while time.time() < end:
    with open(p, \"rb\") as f:
        bad += b\"\\0\" in f.read()
    reads += 1
print(bad, reads)
'"
        )))
    } else {
        "0 0".to_string()
    };
    let tail = ok(&user.sh(&format!(
        "bad=0; for i in $(seq 200); do tr -d -c '\\000' < '{m}/sessions/s2-tier1/transcript.jsonl' \
         | cmp -s - /dev/null || bad=$((bad+1)); done; echo $bad"
    )));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let appended = appender.join().expect("appender");
    assert!(appended > 100, "{appended} records appended");
    assert!(
        zeros.trim().starts_with("0 "),
        "python reads with NULs, of all: {zeros}"
    );
    assert_eq!(tail.trim(), "0", "shell reads with NULs");

    // The user unmounts; the daemon ends.
    ok(&user.sh(&format!("fusermount3 -u '{m}'")));
    assert!(
        within(Duration::from_secs(10), || !common::is_mounted(mnt.path())
            && !alive(pid)),
        "fusermount3 -u ends the mount and its daemon"
    );

    // Read-only, as the user: the kernel's `ro` flag (through fusermount3), every write
    // refused, and ctl's help there to read.
    let (_, guard) = mount_as(&user, &format!("{mount_cmd} --read-only"), mnt.path());
    let pid = guard.pid;
    let line = mountinfo_line(mnt.path());
    let options = line.split(' ').nth(5).unwrap_or_default();
    assert!(options.split(',').any(|o| o == "ro"), "{line}");
    let e = err_of(&user.sh(&format!("echo help > '{ctl}'")));
    assert!(e.contains("Read-only file system"), "{e}");
    let help = ok(&user.sh(&format!("head -n 1 '{ctl}'")));
    let first: serde_json::Value = serde_json::from_str(help.trim()).expect("a result line");
    assert_eq!(first["command"], "help", "{first}");
    assert!(
        first["message"]
            .as_str()
            .is_some_and(|t| t.contains("this mount is read-only")),
        "{first}"
    );
    let e = err_of(&user.sh(&format!("echo x >> '{m}/memory/{file}'")));
    assert!(e.contains("Read-only file system"), "{e}");
    ok(&user.sh(&format!("fusermount3 -u '{m}'")));
    assert!(
        within(Duration::from_secs(10), || !common::is_mounted(mnt.path())
            && !alive(pid)),
        "fusermount3 -u ends the read-only mount and its daemon"
    );
}

/// The line of `/proc/self/mountinfo` for the mount at `mnt`.
/// Mount as the test's user with `cmd` (it returns once the mount serves): what it said on
/// starting, and a guard that ends the daemon and the mount.
fn mount_as(user: &TestUser, cmd: &str, mnt: &Path) -> (String, Daemon) {
    let o = user.sh(cmd);
    let start = stderr(&o);
    assert!(o.status.success(), "{start}");
    let pid = common::pid_of(&start);
    let guard = Daemon {
        pid,
        mnt: mnt.to_path_buf(),
    };
    (start, guard)
}

fn mountinfo_line(mnt: &Path) -> String {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let m = mnt.display().to_string();
    info.lines()
        .find(|l| l.split(' ').nth(4) == Some(m.as_str()))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("{m} is not mounted"))
}

/// The standard error of a command that failed.
fn err_of(o: &std::process::Output) -> String {
    assert!(!o.status.success(), "should have failed: {o:?}");
    String::from_utf8_lossy(&o.stderr).into_owned()
}
