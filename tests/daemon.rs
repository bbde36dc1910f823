//! The mount as system tools start it: `normafs mount --daemon` (returns once mounted, logs to
//! `--log-file`), `mount -t fuse.normafs` and an fstab line (through `mount.fuse3`), and
//! `-o auto_unmount` clearing the mount after `kill -9`. Each test has its own root and mount
//! point; a guard ends the daemon it started (by its PID) and detaches the mount, also when
//! the test fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{alive, example_root, fuse_available, have, is_mounted, pid_of, within};

const BIN: &str = env!("CARGO_BIN_EXE_normafs");

/// A daemon started by a test: killed (by PID) and its mount detached on drop.
struct Daemon {
    pid: Option<i32>,
    mnt: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            if alive(pid) {
                // SAFETY: signals a process this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        common::force_unmount(&self.mnt);
    }
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

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
    if !fuse_available() {
        return;
    }
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
    let start = text(&o);
    assert!(o.status.success(), "{start}");
    let pid = pid_of(&start);
    let _d = Daemon {
        pid: Some(pid),
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
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(
        text(&o).trim(),
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
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("unknown key \"frobnicate\""),
        "{}",
        text(&o)
    );
    assert!(!is_mounted(mnt.path()));
}

/// `mount -t fuse.<normafs> ROOT MNT -o …` and an fstab line mount through `mount.fuse3`
/// (which runs `normafs ROOT MNT -o …`, with mount(8)'s own words such as `rw,dev,suid`);
/// `umount` ends the daemon.
#[test]
fn mount_t_fuse_normafs_and_an_fstab_line() {
    if !fuse_available() || !have_mount_fuse3() || !have("mount") {
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("notice: mount(8) with a helper needs root here: test skipped");
        return;
    }
    let root = example_root();
    let mnt = tempfile::tempdir().expect("tempdir");
    let fstype = format!("fuse.{BIN}");
    let o = Command::new("mount")
        .args(["-t", &fstype])
        .arg(root.path())
        .arg(mnt.path())
        .args(["-o", "ro,window=128000,noatime"])
        .output()
        .expect("run mount");
    let start = text(&o);
    assert!(o.status.success(), "{start}");
    let pid = pid_of(&start);
    let _d = Daemon {
        pid: Some(pid),
        mnt: mnt.path().to_path_buf(),
    };
    assert!(is_mounted(mnt.path()));
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
    assert!(u.status.success(), "{}", text(&u));
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
    let start = text(&o);
    assert!(o.status.success(), "{start}");
    let pid = pid_of(&start);
    let _d2 = Daemon {
        pid: Some(pid),
        mnt: mnt.path().to_path_buf(),
    };
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
    assert!(u.status.success(), "{}", text(&u));
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
    let start = text(&o);
    assert!(o.status.success(), "{start}");
    assert!(
        start.contains("fusermount3") && start.contains("auto_unmount"),
        "{start}"
    );
    let pid = pid_of(&start);
    let _d = Daemon {
        pid: Some(pid),
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
    if !fuse_available() {
        return;
    }
    let lower = common::Mounted::example();
    let root = example_root();
    let mnt = tempfile::tempdir().expect("tempdir");
    let o = Command::new(BIN)
        .args(["mount", "--daemon", "--ttl-ms", "300", "--memory"])
        .arg(lower.at("memory"))
        .arg(root.path())
        .arg(mnt.path())
        .output()
        .expect("run");
    let start = text(&o);
    assert!(o.status.success(), "{start}");
    let _d = Daemon {
        pid: Some(pid_of(&start)),
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
