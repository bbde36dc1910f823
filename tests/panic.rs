//! Panic isolation through a real mount: a panic inside a request handler is caught, the caller
//! gets `EIO` ("Input/output error"), and the mount keeps serving, for every request type the
//! adapter handles and more times than it has worker threads (a panic that killed its worker
//! would hang the mount after two). Uses the process-wide test hooks in `normafs::fs::testhook`,
//! so the tests here run one at a time.

mod common;

use std::ffi::OsStr;
use std::process::Output;
use std::sync::Mutex;

use common::{example_root, force_unmount, mount, quoted, Mounted};
use normafs::config::Config;
use normafs::fs::{set_panic_on_lookup, set_panic_on_request};
use normafs::fuse::MountOptions;

const SID: &str = "s2-tier1";

/// The hooks are process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Disarms both hooks when dropped, also when a test fails.
struct Disarm;

impl Drop for Disarm {
    fn drop(&mut self) {
        set_panic_on_lookup(None);
        set_panic_on_request(None);
    }
}

/// Keep the expected panics of the hooks out of the test output (every other panic is printed
/// as usual).
fn quiet_hook_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or("");
            if !msg.starts_with("test hook:") {
                default(info);
            }
        }));
    });
}

/// Two worker threads: more panics than workers prove that a panic does not end its worker.
/// `--ttl-ms 0`: nothing is cached by the kernel, so every command reaches the handler it is
/// meant to reach.
/// `opens`: the mount answers OPEN (the default); else the kernel opens files itself
/// (`--no-open`).
fn mount_two_workers(opens: bool) -> Option<Mounted> {
    quiet_hook_panics();
    common::mount(
        example_root(),
        Config {
            ttl_ms: 0,
            ..Config::default()
        },
        MountOptions {
            threads: 2,
            no_open: !opens,
            ..MountOptions::default()
        },
    )
}

/// Run a bash command line, bounded: a request left unanswered fails the test instead of
/// hanging it.
fn sh(cmd: &str) -> Output {
    std::process::Command::new("timeout")
        .args(["-k", "5", "20", "bash", "-c", cmd])
        .output()
        .expect("run")
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: failed ({:?}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn eio(o: &Output, what: &str) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("Input/output error"),
        "{what}: expected Input/output error, got {:?}: stdout {:?} stderr {e:?}",
        o.status,
        String::from_utf8_lossy(&o.stdout)
    );
}

/// The mount answers normally: a listing, a synthetic file's exact bytes, a stat.
fn serves(m: &Mounted, view: &[u8]) {
    let s = m.at(&format!("sessions/{SID}"));
    let names = ok(&sh(&format!("ls '{}'", s.display())), "ls");
    assert!(names.lines().any(|l| l == "view.jsonl"), "{names}");
    let o = sh(&format!("cat '{}'", s.join("view.jsonl").display()));
    ok(&o, "cat view.jsonl");
    assert_eq!(o.stdout, view, "view.jsonl reads whole");
    ok(
        &sh(&format!("stat '{}'", s.join("status.json").display())),
        "stat",
    );
}

#[test]
fn a_panicking_lookup_answers_eio_and_the_mount_keeps_serving() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _disarm = Disarm;
    let Some(m) = mount_two_workers(false) else {
        return;
    };
    let s = m.at(&format!("sessions/{SID}"));
    let view = std::fs::read(s.join("view.jsonl")).expect("view");
    set_panic_on_lookup(Some(OsStr::new("boom")));
    for round in 0..6 {
        eio(
            &sh(&format!("stat {}", quoted(&s.join("boom")))),
            &format!("stat boom, round {round}"),
        );
        serves(&m, &view);
    }
    set_panic_on_lookup(None);
    let o = sh(&format!("stat {}", quoted(&s.join("boom"))));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("No such file or directory"),
        "{o:?}"
    );
}

/// Every request type the adapter handles: armed, the operation fails with EIO (or, for the
/// requests whose answer the caller never sees, succeeds); disarmed, the mount serves as before.
/// Both ways: a mount that answers opens, and one where the kernel opens files itself (no
/// OPEN or RELEASE to panic in).
#[test]
fn every_request_type_survives_a_panic() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _disarm = Disarm;
    for opens in [false, true] {
        every_request_type_survives_a_panic_on(opens);
    }
}

fn every_request_type_survives_a_panic_on(opens: bool) {
    let Some(m) = mount_two_workers(opens) else {
        return;
    };
    let mnt = m.mnt();
    let s = m.at(&format!("sessions/{SID}"));
    let view = std::fs::read(s.join("view.jsonl")).expect("view");
    let mem = |n: &str| quoted(&m.at(&format!("memory/{n}")));
    let py_fsync = |p: String| {
        format!("python3 -c \"import os; fd = os.open({p}, os.O_WRONLY); os.fsync(fd)\"")
    };
    // (request type, a command that sends it, whether the caller sees the error)
    let cases: Vec<(&str, String, bool)> = vec![
        (
            "lookup",
            format!("stat {}", quoted(&s.join("audit.txt"))),
            true,
        ),
        (
            "getattr",
            format!("stat {}", quoted(&s.join("view.md"))),
            true,
        ),
        ("opendir", format!("ls {}", quoted(&m.at("sessions"))), true),
        ("readdir", format!("ls {}", quoted(&m.at("sessions"))), true),
        (
            "open",
            format!("cat {}", quoted(&s.join("view.jsonl"))),
            true,
        ),
        // A file not read before: the kernel keeps what it read across opens.
        (
            "read",
            format!("cat {}", quoted(&s.join("materialized.jsonl"))),
            true,
        ),
        (
            "write",
            format!("echo help > {}", quoted(&s.join("ctl"))),
            true,
        ),
        (
            "readlink",
            format!("readlink -v {}", quoted(&s.join("memory"))),
            true,
        ),
        ("statfs", format!("stat -f {}", quoted(mnt)), true),
        ("setattr", format!("touch {}", mem("build-system.md")), true),
        ("create", format!("echo x > {}", mem("new.md")), true),
        ("unlink", format!("rm {}", mem("ci-dashboard.md")), true),
        (
            "rename",
            format!("mv {} {}", mem("prefers-small-prs.md"), mem("moved.md")),
            true,
        ),
        ("fsync", py_fsync(mem("build-system.md")), true),
        (
            "fsyncdir",
            format!("sync {}", quoted(&m.at("memory"))),
            true,
        ),
        (
            "release",
            format!("cat {}", quoted(&s.join("view.md"))),
            false,
        ),
        ("releasedir", format!("ls {}", quoted(&s)), false),
    ];
    for (op, cmd, visible) in &cases {
        if !opens && (*op == "open" || *op == "release") {
            continue;
        }
        set_panic_on_request(Some(op));
        // Twice each: more panics in all than the mount has workers.
        for _ in 0..2 {
            let o = sh(cmd);
            if *visible {
                eio(&o, &format!("{op}: {cmd}"));
            } else {
                ok(&o, &format!("{op}: {cmd}"));
            }
        }
        set_panic_on_request(None);
        serves(&m, &view);
    }
    // Nothing was changed by the refused requests.
    for n in ["build-system.md", "ci-dashboard.md", "prefers-small-prs.md"] {
        assert!(m.root().join("memory").join(n).is_file(), "{n} kept");
    }
    assert!(!m.root().join("memory/new.md").exists());
    assert!(!m.root().join("memory/moved.md").exists());
    // A mount whose workers had died would not unmount cleanly.
    let mnt = m.mnt().to_path_buf();
    drop(m);
    assert!(!common::is_mounted(&mnt));
    force_unmount(&mnt);
}

/// READDIRPLUS is only negotiated where the kernel may cache (not under `--ttl-ms 0`, which the
/// other tests here use): a panic inside it answers EIO, and nothing of the failed listing is
/// counted or kept, so the next listing is whole.
#[test]
fn a_panicking_readdirplus_answers_eio_and_the_mount_keeps_serving() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _disarm = Disarm;
    quiet_hook_panics();
    let Some(m) = mount(
        example_root(),
        Config::default(),
        MountOptions {
            threads: 2,
            ..MountOptions::default()
        },
    ) else {
        return;
    };
    let s = m.at(&format!("sessions/{SID}"));
    set_panic_on_request(Some("readdirplus"));
    // Three times: more panics than the mount has workers. A failed listing is not kept by
    // the kernel, so each `ls` asks again.
    for round in 0..3 {
        eio(
            &sh(&format!("ls -l {}", quoted(&s))),
            &format!("ls -l, round {round}"),
        );
    }
    set_panic_on_request(None);
    let view = std::fs::read(s.join("view.jsonl")).expect("view");
    serves(&m, &view);
    let listed = ok(&sh(&format!("ls -l {}", quoted(&s))), "ls -l");
    let line = listed
        .lines()
        .find(|l| l.ends_with(" view.jsonl"))
        .unwrap_or_else(|| panic!("view.jsonl listed: {listed}"));
    assert!(
        line.split_whitespace().any(|f| f == view.len().to_string()),
        "ls -l shows view.jsonl's size {}: {line}",
        view.len()
    );
}

/// Without a mount: the lookup hook panics inside `NormaFs::lookup` for its name only, and
/// disarmed it is gone.
#[test]
fn the_lookup_hook_panics_in_the_fs_layer_for_its_name_only() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _disarm = Disarm;
    quiet_hook_panics();
    let d = example_root();
    let cfg = Config::default();
    let fs = normafs::fs::NormaFs::new(
        normafs::store::root::RootPaths::from_root(d.path()),
        cfg.clone(),
        normafs::fs::FsOptions::new(&cfg, false),
    );
    let root = normafs::fs::ROOT_INO;
    set_panic_on_lookup(Some(OsStr::new("boom")));
    let hit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fs.lookup(root, OsStr::new("boom"))
    }));
    assert!(hit.is_err(), "the armed name panics");
    assert!(
        fs.lookup(root, OsStr::new("sessions")).is_ok(),
        "other names pass"
    );
    set_panic_on_lookup(None);
    assert!(matches!(
        fs.lookup(root, OsStr::new("boom")),
        Err(normafs::fs::FsError::NotFound)
    ));
}
