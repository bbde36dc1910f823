//! Permissions through a real mount, checked as another user (`nobody`, uid 65534): the mount is
//! private to its owner unless `--allow-other`; with it, the kernel still enforces every file's
//! mode (`default_permissions`): `ctl` files are 0600, so nobody else runs commands, and a 0600
//! real file stays unreadable. Needs root (to switch users) and `setpriv` or `runuser`; prints a
//! notice and skips otherwise (a mount test without /dev/fuse fails under CI instead).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{
    force_unmount, fuse_available, have, is_mounted, mount, ok, sh, snapshot, text_of, within,
    write_session, Session,
};
use normafs::config::Config;
use normafs::fuse::MountOptions;

const SID: &str = "p1";
const NOBODY: u32 = 65534;

/// Whether this process can run commands as `nobody` (root, and a tool to switch).
fn can_switch_users() -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("notice: not root: the other-user permission tests are skipped");
        return false;
    }
    have("setpriv") || have("runuser")
}

/// Run a bash command line as `nobody` with no supplementary groups.
fn as_nobody(cmd: &str) -> Output {
    let mut c = if have("setpriv") {
        let mut c = Command::new("setpriv");
        c.args([
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".into(),
            "--".into(),
            "bash".into(),
        ]);
        c
    } else {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--", "bash"]);
        c
    };
    c.arg("-c").arg(cmd).output().expect("run as nobody")
}

/// The command failed with "Permission denied" (EACCES).
fn denied(o: &Output, what: &str) {
    refused(o, what, "Permission denied");
}

/// The command failed with `message`.
fn refused(o: &Output, what: &str, message: &str) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains(message),
        "{what}: expected {message}, got status {:?}, stdout {:?}, stderr {e:?}",
        o.status,
        String::from_utf8_lossy(&o.stdout)
    );
}

/// A root with one session, a private (0600) and a public (0644) memory, all owned by root.
fn root_with_private_memory() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    let mut s = Session::new(SID);
    for i in 0..6 {
        s.user(&format!("question {i}: {}", text_of(30, 'q')));
        s.assistant(&format!("answer {i}: {}", text_of(30, 'a')));
    }
    write_session(root.path(), &s);
    let mem = root.path().join("memory");
    std::fs::create_dir_all(&mem).expect("mkdir");
    std::fs::create_dir_all(root.path().join("noa")).expect("mkdir");
    for (name, mode) in [("secret.md", 0o600), ("public.md", 0o644)] {
        let p = mem.join(name);
        std::fs::write(
            &p,
            format!("---\nname: {name}\ndescription: a {name}\ntype: user\n---\nbody of {name}\n"),
        )
        .expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    root
}

/// The /proc/self/mountinfo line of the mount at `p`.
fn mountinfo_line(p: &Path) -> String {
    let want = p
        .canonicalize()
        .expect("canonical")
        .to_string_lossy()
        .into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(want.as_str()))
        .unwrap_or_else(|| panic!("{want} is not in /proc/self/mountinfo"))
        .to_string()
}

fn mode_of(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()));
    (m.mode() & 0o7777, m.uid())
}

/// A mount made without `--allow-other` is the owner's alone: its options lack `allow_other`
/// and another user is refused at the mount point itself.
#[test]
fn the_default_mount_is_private_to_its_owner() {
    let Some(m) = mount(
        root_with_private_memory(),
        Config::default(),
        MountOptions::default(),
    ) else {
        return;
    };
    let line = mountinfo_line(m.mnt());
    assert!(!line.contains("allow_other"), "{line}");
    assert!(line.contains("default_permissions"), "{line}");

    // ctl files are 0600 and the mounting user's.
    assert_eq!(mode_of(&m.at(&format!("sessions/{SID}/ctl"))), (0o600, 0));
    assert_eq!(mode_of(&m.at("ctl")), (0o600, 0));
    assert_eq!(
        mode_of(&m.at(&format!("sessions/{SID}/view.jsonl"))).0,
        0o444
    );

    if !can_switch_users() {
        return;
    }
    let mnt = m.mnt().display().to_string();
    denied(
        &as_nobody(&format!("stat '{mnt}'")),
        "stat of the mount point",
    );
    denied(&as_nobody(&format!("ls '{mnt}/sessions'")), "ls sessions");
    denied(
        &as_nobody(&format!("cat '{mnt}/sessions/{SID}/view.jsonl'")),
        "cat view.jsonl",
    );
    // The owner is served.
    ok(&sh(&format!("cat '{mnt}/sessions/{SID}/view.jsonl'")));
}

/// With `--allow-other` another user enters the mount and reads what the modes allow, and
/// nothing more: no ctl command (0600), no private memory, no change to any file.
#[test]
fn allow_other_still_enforces_every_mode() {
    let Some(m) = mount(
        root_with_private_memory(),
        Config::default(),
        MountOptions {
            allow_other: true,
            ..MountOptions::default()
        },
    ) else {
        return;
    };
    let line = mountinfo_line(m.mnt());
    assert!(line.contains("allow_other"), "{line}");
    assert!(line.contains("default_permissions"), "{line}");
    if !can_switch_users() {
        return;
    }
    // The mount's root (0755) hides the temporary directory's own 0700 mode.
    assert_eq!(mode_of(m.mnt()).0, 0o755);
    let mnt = m.mnt().display().to_string();
    let s = format!("{mnt}/sessions/{SID}");
    let before = snapshot(m.root());

    // nobody is let in: what is readable by all is read.
    assert_eq!(
        ok(&as_nobody(&format!("ls '{mnt}/sessions'"))),
        format!("{SID}\n")
    );
    assert!(ok(&as_nobody(&format!("cat '{s}/view.jsonl'"))).contains("question 0"));
    assert!(ok(&as_nobody(&format!("cat '{mnt}/memory/public.md'"))).contains("body of public.md"));

    // ctl: neither a session's nor the root's can be written, or read.
    denied(
        &as_nobody(&format!("echo help > '{s}/ctl'")),
        "session ctl write",
    );
    denied(
        &as_nobody(&format!(
            "echo 'compress m00001 m00004 a summary that is long enough to be one' > '{s}/ctl'"
        )),
        "session ctl compress",
    );
    denied(
        &as_nobody(&format!("echo reindex-memory > '{mnt}/ctl'")),
        "root ctl write",
    );
    denied(&as_nobody(&format!("cat '{s}/ctl'")), "session ctl read");

    // Another user's private file stays private; nothing can be changed or created.
    denied(
        &as_nobody(&format!("cat '{mnt}/memory/secret.md'")),
        "0600 memory",
    );
    denied(
        &as_nobody(&format!("head -c1 '{mnt}/memory/secret.md'")),
        "0600 memory",
    );
    denied(
        &as_nobody(&format!("echo x >> '{mnt}/memory/public.md'")),
        "append to 0644 memory",
    );
    denied(
        &as_nobody(&format!("echo x > '{mnt}/memory/new.md'")),
        "create in memory/",
    );
    denied(
        &as_nobody(&format!("rm -f '{mnt}/memory/public.md'")),
        "unlink in memory/",
    );
    denied(
        &as_nobody(&format!(
            "mv '{mnt}/memory/public.md' '{mnt}/memory/moved.md'"
        )),
        "rename in memory/",
    );
    denied(
        &as_nobody(&format!("echo x >> '{s}/transcript.jsonl'")),
        "append to the transcript",
    );
    // Only the owner may chmod (EPERM for anyone else).
    refused(
        &as_nobody(&format!("chmod 666 '{s}/ctl'")),
        "chmod of ctl",
        "Operation not permitted",
    );
    refused(
        &as_nobody(&format!("chmod 644 '{mnt}/memory/secret.md'")),
        "chmod of a 0600 memory",
        "Operation not permitted",
    );
    assert_eq!(snapshot(m.root()), before, "nobody changed nothing");

    // The owner does all of it (so the refusals above are about the user, not the mount).
    ok(&sh(&format!("cat '{mnt}/memory/secret.md'")));
    ok(&sh(&format!("echo help > '{s}/ctl'")));
    ok(&sh(&format!("cat '{s}/ctl'")));
}

/// A file computed from a private input is as private as that input: with a 0600 transcript
/// and a 0600 memory, nobody reads neither them nor the views, raw ranges, status, audits and
/// index computed from them. Making the input readable makes them readable again.
#[test]
fn derived_files_are_as_private_as_their_inputs() {
    let root = root_with_private_memory();
    let transcript = root.path().join(format!("transcripts/{SID}.jsonl"));
    std::fs::set_permissions(&transcript, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let Some(m) = mount(
        root,
        Config::default(),
        MountOptions {
            allow_other: true,
            ..MountOptions::default()
        },
    ) else {
        return;
    };
    let s = m.at(&format!("sessions/{SID}"));
    let derived = [
        s.join("view.jsonl"),
        s.join("view.md"),
        s.join("status.json"),
        s.join("audit.txt"),
        s.join("raw/m00001-m00003.md"),
        m.at("memory/MEMORY.md"),
        m.at("audit.txt"),
    ];
    for p in &derived {
        assert_eq!(mode_of(p), (0o400, 0), "{}", p.display());
        // The owner reads them.
        assert!(!std::fs::read(p).expect("owner reads").is_empty());
    }
    if !can_switch_users() {
        return;
    }
    denied(
        &as_nobody(&format!("cat '{}'", s.join("transcript.jsonl").display())),
        "0600 transcript",
    );
    for p in &derived {
        denied(
            &as_nobody(&format!("cat '{}'", p.display())),
            &p.display().to_string(),
        );
    }

    // chmod of the input shows as soon as inotify reports it (the content is unchanged, the
    // mode is not).
    std::fs::set_permissions(&transcript, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert!(common::within(
        std::time::Duration::from_secs(5),
        || mode_of(&s.join("view.jsonl")).0 == 0o444
    ));
    assert!(ok(&as_nobody(&format!(
        "cat '{}'",
        s.join("view.jsonl").display()
    )))
    .contains("question 0"));
    denied(
        &as_nobody(&format!("cat '{}'", m.at("memory/MEMORY.md").display())),
        "MEMORY.md of a 0600 memory",
    );
}

/// `normafs mount` itself: without `--allow-other` the kernel mount has no `allow_other`.
#[test]
fn the_binary_mounts_without_allow_other_by_default() {
    if !fuse_available() {
        return;
    }
    struct Bin {
        child: Child,
        mnt: tempfile::TempDir,
    }
    impl Drop for Bin {
        fn drop(&mut self) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let _ = self.child.wait();
            force_unmount(self.mnt.path());
        }
    }
    let root = root_with_private_memory();
    let mnt = tempfile::tempdir().expect("tempdir");
    let child = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("mount")
        .arg(root.path())
        .arg(mnt.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn normafs mount");
    let bin = Bin { child, mnt };
    assert!(
        within(Duration::from_secs(10), || is_mounted(bin.mnt.path())),
        "normafs mount did not mount"
    );
    let line = mountinfo_line(bin.mnt.path());
    assert!(line.contains("fuse"), "{line}");
    assert!(!line.contains("allow_other"), "{line}");
    assert!(line.contains("default_permissions"), "{line}");
}
