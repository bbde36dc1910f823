//! The mount as system tools start it: `normafs mount --daemon` (returns once mounted, logs to
//! `--log-file`), `mount -t fuse.normafs` and an fstab line (through `mount.fuse3`), and
//! `-o auto_unmount` clearing the mount after `kill -9`. Each test has its own root and mount
//! point; a guard ends the daemon it started (by its PID) and detaches the mount, also when
//! the test fails.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{
    alive, example_root, fuse_available, have, is_mounted, pid_of, stderr, within, Daemon,
};

const BIN: &str = env!("CARGO_BIN_EXE_normafs");

/// `mount.fuse3`, which `mount -t fuse.<prog>` runs.
fn have_mount_fuse3() -> bool {
    let ok = ["/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"]
        .iter()
        .any(|p| Path::new(p).exists());
    if !ok {
        eprintln!("notice: mount.fuse3 (the fuse3 package) is not installed: test skipped");
    }
    ok
}

/// `--daemon` returns once the mount is up, with the start line; the daemon serves with the
/// `-o` settings, logs to `--log-file`, and unmounts on SIGTERM. Failures come back as the
/// command's own one line and exit status.
#[test]
fn daemon_returns_once_mounted_and_ends_on_sigterm() {
    let root = example_root();
    let mnt = tempfile::tempdir().expect("tempdir");
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("normafs.log");
    let o = Command::new(BIN)
        .args(["mount", "--daemon", "--log-file"])
        .arg(&log)
        .arg(root.path())
        .arg(mnt.path())
        .args(["-o", "ro,window=128000,ttl_ms=500"])
        .output()
        .expect("run");
    let start = stderr(&o);
    assert!(o.status.success(), "{start}");
    let pid = pid_of(&start);
    let _d = Daemon {
        pid,
        mnt: mnt.path().to_path_buf(),
    };
    assert!(
        start.starts_with(&format!(
            "normafs: mounted {} at {} (pid {pid}, passthrough: ",
            root.path().display(),
            mnt.path().display()
        )) && start.contains(&format!(
            "`umount '{}'` or kill {pid}",
            mnt.path().display()
        )),
        "{start}"
    );
    assert!(is_mounted(mnt.path()), "mounted when --daemon returns");
    assert!(alive(pid));
    // The settings of -o apply: the window shows in status.json; `ro` refuses changes.
    let status = std::fs::read_to_string(mnt.path().join("sessions/s2-tier1/status.json"))
        .expect("status.json");
    assert!(status.contains("128000"), "{status}");
    let e = std::fs::write(mnt.path().join("memory/new.md"), "x").expect_err("read-only");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    // SAFETY: signals the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert!(
        within(Duration::from_secs(10), || !is_mounted(mnt.path())
            && !alive(pid)),
        "SIGTERM unmounts and ends the daemon"
    );
    let logged = std::fs::read_to_string(&log).expect("the log file");
    assert!(logged.contains(&start.trim().to_string()), "{logged}");
    assert!(
        logged.contains(&format!("normafs: unmounted {}", mnt.path().display())),
        "{logged}"
    );

    // Failures: the command says what the daemon found, with its exit status.
    std::fs::write(mnt.path().join("stray"), "x").expect("write");
    let o = Command::new(BIN)
        .args(["mount", "--daemon"])
        .arg(root.path())
        .arg(mnt.path())
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).trim(),
        format!("normafs: mount point {} is not empty", mnt.path().display())
    );
    std::fs::remove_file(mnt.path().join("stray")).expect("rm");
    let o = Command::new(BIN)
        .args(["mount", "--daemon"])
        .arg(root.path())
        .arg(mnt.path())
        .args(["-o", "frobnicate=1"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown key \"frobnicate\""),
        "{}",
        stderr(&o)
    );
    assert!(!is_mounted(mnt.path()));
}

/// Where `mount -t fuse.normafs` finds its helper: mount(8) clears `PATH` before it runs
/// `mount.fuse3`, which runs `/bin/sh -c 'normafs ROOT MNT -o …'`, so the shell's built-in
/// default applies whatever the caller's `PATH` (dash's begins `/usr/local/sbin:/usr/local/bin`,
/// bash's `/usr/local/bin:/usr/local/sbin`).
const HELPER_DIRS: [&str; 2] = ["/usr/local/sbin", "/usr/local/bin"];

/// mount(2), failing the test with the error.
fn sys_mount(source: Option<&Path>, target: &Path, flags: libc::c_ulong) {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("a path");
    let (source, target) = (source.map(c), c(target));
    // SAFETY: NUL-terminated strings that outlive the call; null for the arguments not used.
    let r = unsafe {
        libc::mount(
            source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    assert_eq!(
        r,
        0,
        "mount {target:?}: {}",
        std::io::Error::last_os_error()
    );
}

/// Runs `f` on a thread of its own, in a mount namespace of its own where the built binary is
/// installed as a user installs it: copied as `normafs` into a directory whose name has a dot
/// (as a checkout's or `mktemp -d`'s path may), which is bind-mounted over [`HELPER_DIRS`].
/// Nothing mounted in that namespace shows outside it, and it goes with the thread. `f` gets
/// the copy. (A type naming the binary by its path, `fuse./a.b/normafs`, fails where the path
/// has a dot: mount(8), looking for a helper `mount.fuse./a.b/normafs`, cuts the type at its
/// last dot, finds none and answers "wrong fs type, bad option, bad superblock".)
fn with_normafs_installed(f: impl FnOnce(&Path) + Send) {
    let dir = tempfile::Builder::new()
        .prefix("normafs.bin.")
        .tempdir()
        .expect("tempdir");
    let helper = dir.path().join("normafs");
    std::fs::copy(BIN, &helper).expect("copy the binary");
    let over: Vec<&Path> = HELPER_DIRS
        .iter()
        .map(Path::new)
        .filter(|d| d.is_dir())
        .collect();
    if over.is_empty() {
        eprintln!("notice: none of {HELPER_DIRS:?} exists: test skipped");
        return;
    }
    let name = std::thread::current().name().map(str::to_string);
    std::thread::scope(|s| {
        let mut thread = std::thread::Builder::new();
        if let Some(name) = name {
            thread = thread.name(name);
        }
        thread
            .spawn_scoped(s, || {
                // SAFETY: unshare takes no pointers; with CLONE_NEWNS it gives this thread (and
                // what it starts) a copy of the mount table, the other threads keep theirs.
                let r = unsafe { libc::unshare(libc::CLONE_NEWNS) };
                assert_eq!(r, 0, "unshare: {}", std::io::Error::last_os_error());
                sys_mount(None, Path::new("/"), libc::MS_REC | libc::MS_PRIVATE);
                for d in over {
                    sys_mount(Some(dir.path()), d, libc::MS_BIND);
                }
                f(&helper)
            })
            .expect("a thread")
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    });
}

/// Whether process `pid` runs the file at `exe`.
fn runs(pid: i32, exe: &Path) -> bool {
    let (Ok(a), Ok(b)) = (
        std::fs::metadata(format!("/proc/{pid}/exe")),
        std::fs::metadata(exe),
    ) else {
        return false;
    };
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// `mount -t fuse.normafs ROOT MNT -o …` and an fstab line mount through `mount.fuse3`
/// (which runs `normafs ROOT MNT -o …`, with mount(8)'s own words such as `rw,dev,suid`),
/// with the built binary installed where the shell finds it ([`with_normafs_installed`]);
/// `umount` ends the daemon.
#[test]
fn mount_t_fuse_normafs_and_an_fstab_line() {
    if !have_mount_fuse3() || !have("mount") {
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("notice: mount(8) with a helper needs root here: test skipped");
        return;
    }
    with_normafs_installed(mount_t_fuse_normafs);
}

fn mount_t_fuse_normafs(helper: &Path) {
    let root = example_root();
    let mnt = tempfile::tempdir().expect("tempdir");
    let fstype = "fuse.normafs";
    let o = Command::new("mount")
        .args(["-t", fstype])
        .arg(root.path())
        .arg(mnt.path())
        .args(["-o", "ro,window=128000,noatime"])
        .output()
        .expect("run mount");
    let start = stderr(&o);
    assert!(o.status.success(), "{start}");
    let pid = pid_of(&start);
    let _d = Daemon {
        pid,
        mnt: mnt.path().to_path_buf(),
    };
    assert!(is_mounted(mnt.path()));
    assert!(runs(pid, helper), "the daemon runs {}", helper.display());
    let status = std::fs::read_to_string(mnt.path().join("sessions/s2-tier1/status.json"))
        .expect("status.json");
    assert!(status.contains("128000"), "{status}");
    assert_eq!(
        std::fs::write(mnt.path().join("memory/new.md"), "x")
            .expect_err("ro")
            .raw_os_error(),
        Some(libc::EROFS)
    );
    let u = Command::new("umount")
        .arg(mnt.path())
        .output()
        .expect("umount");
    assert!(u.status.success(), "{}", stderr(&u));
    assert!(
        within(Duration::from_secs(10), || !alive(pid)),
        "the daemon ends with its mount"
    );

    // An fstab line (an fstab of the test's own: `mount -T FILE MNT`), with the words an
    // fstab line carries.
    let dir = tempfile::tempdir().expect("tempdir");
    let fstab = dir.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "{} {} {fstype} noauto,nofail,_netdev,x-systemd.automount,window=64000 0 0\n",
            root.path().display(),
            mnt.path().display()
        ),
    )
    .expect("write fstab");
    let o = Command::new("mount")
        .arg("-T")
        .arg(&fstab)
        .arg(mnt.path())
        .output()
        .expect("run mount -T");
    let start = stderr(&o);
    assert!(o.status.success(), "{start}");
    let pid = pid_of(&start);
    let _d2 = Daemon {
        pid,
        mnt: mnt.path().to_path_buf(),
    };
    assert!(runs(pid, helper), "the daemon runs {}", helper.display());
    let status = std::fs::read_to_string(mnt.path().join("sessions/s2-tier1/status.json"))
        .expect("status.json");
    assert!(status.contains("64000"), "{status}");
    // Not read-only this time: a memory file is written through.
    std::fs::write(mnt.path().join("memory/new.md"), "x\n").expect("write through");
    assert!(root.path().join("memory/new.md").exists());
    let u = Command::new("umount")
        .arg(mnt.path())
        .output()
        .expect("umount");
    assert!(u.status.success(), "{}", stderr(&u));
    assert!(within(Duration::from_secs(10), || !alive(pid)));
}

/// `-o auto_unmount`: after `kill -9` of the daemon, fusermount3 clears the mount (without
/// it the kernel keeps a dead mount, see tests/mount.rs).
#[test]
fn auto_unmount_clears_the_mount_after_kill_9() {
    if !fuse_available() || !have("fusermount3") {
        return;
    }
    let root = example_root();
    let mnt = tempfile::tempdir().expect("tempdir");
    let o = Command::new(BIN)
        .args(["mount", "--daemon", "--verbose"])
        .arg(root.path())
        .arg(mnt.path())
        .args(["-o", "auto_unmount"])
        .output()
        .expect("run");
    let start = stderr(&o);
    assert!(o.status.success(), "{start}");
    assert!(
        start.contains("fusermount3") && start.contains("auto_unmount"),
        "{start}"
    );
    let pid = pid_of(&start);
    let _d = Daemon {
        pid,
        mnt: mnt.path().to_path_buf(),
    };
    assert!(is_mounted(mnt.path()));
    assert!(std::fs::read_dir(mnt.path().join("sessions")).is_ok());
    // SAFETY: signals the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(
        within(Duration::from_secs(10), || !is_mounted(mnt.path())),
        "fusermount3 unmounts after kill -9"
    );
}

/// A backing directory on a filesystem where inotify is blind (here FUSE: another normafs
/// mount's `memory/`, written from underneath it) is detected at mount, said on the start
/// line, and served with the attribute TTL: a change made beneath shows within it (a watched
/// directory's attributes are kept for an hour).
#[test]
fn a_backing_directory_on_fuse_is_served_with_ttls() {
    let Some(lower) = common::mount_example() else {
        return;
    };
    let root = example_root();
    let mnt = tempfile::tempdir().expect("tempdir");
    let o = Command::new(BIN)
        .args(["mount", "--daemon", "--ttl-ms", "300", "--memory"])
        .arg(lower.at("memory"))
        .arg(root.path())
        .arg(mnt.path())
        .output()
        .expect("run");
    let start = stderr(&o);
    assert!(o.status.success(), "{start}");
    let _d = Daemon {
        pid: pid_of(&start),
        mnt: mnt.path().to_path_buf(),
    };
    assert!(
        start.contains(&format!(
            "{} is on FUSE, where inotify misses changes made elsewhere",
            lower.at("memory").display()
        )) && start.contains("(300 ms, --ttl-ms)"),
        "{start}"
    );
    let name = "build-system.md";
    let through = mnt.path().join("memory").join(name);
    let before = std::fs::metadata(&through).expect("stat").len();
    // Written beneath the lower mount, in its backing directory.
    let beneath = lower.root().join("memory").join(name);
    let mut text = std::fs::read_to_string(&beneath).expect("read");
    text.push_str("\nA line written beneath both mounts.\n");
    std::fs::write(&beneath, &text).expect("write beneath");
    let after = text.len() as u64;
    assert_ne!(before, after);
    assert!(
        within(Duration::from_secs(5), || std::fs::metadata(&through)
            .is_ok_and(|m| m.len() == after)),
        "the change shows within the TTL"
    );
    assert_eq!(std::fs::read_to_string(&through).expect("read"), text);
}

/// A change of a settings file applies while mounted (issue 43, item 1): the sessions it
/// concerns get new computed files, once, the others keep theirs; a file that stops parsing
/// keeps the settings in effect and is said in the log and in `audit.txt` (the root's once);
/// mended, it applies and the finding goes.
#[test]
fn a_changed_settings_file_applies_while_mounted() {
    let root = example_root();
    let home = tempfile::tempdir().expect("tempdir");
    let mnt = tempfile::tempdir().expect("tempdir");
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("normafs.log");
    let file = root.path().join(".normafs.toml");
    let table = |window: u64| format!("[sessions.\"s2-tier1\"]\nwindow = {window}\n");
    std::fs::write(&file, table(40000)).expect("write settings");
    let o = Command::new(BIN)
        .args(["mount", "--daemon", "--log-file"])
        .arg(&log)
        .arg(root.path())
        .arg(mnt.path())
        .env("XDG_CONFIG_HOME", home.path())
        .env("HOME", home.path())
        .output()
        .expect("run");
    let start = stderr(&o);
    assert!(o.status.success(), "{start}");
    let _d = Daemon {
        pid: pid_of(&start),
        mnt: mnt.path().to_path_buf(),
    };
    let read = |rel: &str| std::fs::read_to_string(mnt.path().join(rel)).expect(rel);
    let window = |sid: &str| -> serde_json::Value {
        let s: serde_json::Value =
            serde_json::from_str(&read(&format!("sessions/{sid}/status.json"))).expect("json");
        s["window"].clone()
    };
    assert_eq!(window("s2-tier1"), 40000);
    let other = "sessions/s3-tier2/status.json";
    let other_before = (
        read(other),
        std::fs::metadata(mnt.path().join(other)).expect("stat"),
    );
    let view_before = read("sessions/s2-tier1/view.md");
    assert!(view_before.contains("window=40000"), "{view_before}");

    // Changed: applies to s2-tier1 without a remount; s3-tier2's files stay as they were.
    std::fs::write(&file, table(50000)).expect("write settings");
    assert!(
        within(Duration::from_secs(10), || window("s2-tier1") == 50000),
        "the new window shows in status.json: {}",
        read("sessions/s2-tier1/status.json")
    );
    assert!(read("sessions/s2-tier1/view.md").contains("window=50000"));
    let other_after = std::fs::metadata(mnt.path().join(other)).expect("stat");
    assert_eq!(read(other), other_before.0, "an unconcerned session's file");
    assert_eq!(
        (other_after.ino(), other_after.mtime()),
        (other_before.1.ino(), other_before.1.mtime()),
        "an unconcerned session's file keeps its version"
    );

    // Broken: the settings in effect stay; the log and audit.txt say why.
    std::fs::write(&file, "[sessions.\"s2-tier1\"]\nwindow = [\n").expect("write settings");
    let audit = "sessions/s2-tier1/audit.txt";
    assert!(
        within(Duration::from_secs(10), || read(audit)
            .contains("settings.unreadable")),
        "audit.txt says the settings file is unreadable: {}",
        read(audit)
    );
    let line = read(audit)
        .lines()
        .find(|l| l.contains("settings.unreadable"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(
        line.starts_with(&format!(
            "error settings.unreadable {} — line ",
            file.display()
        )) && line.contains("goes on with the settings it had"),
        "{line}"
    );
    assert_eq!(window("s2-tier1"), 50000, "the last good settings stay");
    let root_audit = read("audit.txt");
    assert_eq!(
        root_audit.matches("settings.unreadable").count(),
        1,
        "the root's audit.txt says it once: {root_audit}"
    );
    assert!(
        within(Duration::from_secs(5), || std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(&format!("config file {}: line", file.display()))),
        "the log says why: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );

    // Removed: the defaults apply, and the finding goes.
    std::fs::remove_file(&file).expect("remove settings");
    assert!(
        within(Duration::from_secs(10), || window("s2-tier1") == 200000
            && !read(audit).contains("settings.unreadable")),
        "the defaults apply once the file is gone: {} {}",
        read("sessions/s2-tier1/status.json"),
        read(audit)
    );
    assert!(!read("audit.txt").contains("settings.unreadable"));
    let logged = std::fs::read_to_string(&log).expect("the log file");
    assert!(logged.contains("settings changed"), "{logged}");
}
