//! ctl, audit and mounting as users meet them (issue 25): the commands of the issue, run
//! through a real mount with the shell and the tools people use. Without /dev/fuse each test
//! says it skipped, and fails under CI, where a mount is always possible.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

use common::{lines, mount, ok, quoted, sh, Mounted};
use serde_json::Value;

/// The corpus session with 15 tier-1 blocks.
const SID: &str = "s2-tier1";

/// The corpus mounted, or `None` (said) where no mount can be made; under CI that fails.
fn example() -> Option<Mounted> {
    common::mount_example()
}

/// The last JSON line `tail -n 1` prints of a ctl file.
fn last_result(ctl: &Path) -> Value {
    let out = ok(&sh(&format!("tail -n 1 {}", quoted(ctl))));
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

/// Every result line of a fresh read of a ctl file.
fn results(ctl: &Path) -> Vec<Value> {
    lines(&std::fs::read(ctl).expect("read ctl"))
}

#[test]
fn tail_reads_the_end_of_a_ctl_file_past_8_kib() {
    let Some(m) = example() else { return };
    let ctl = m.at(&format!("sessions/{SID}/ctl"));
    // `help` answers some 700 bytes: 20 of them pass 8 KiB.
    for _ in 0..20 {
        ok(&sh(&format!("echo help > {}", quoted(&ctl))));
    }
    let whole = std::fs::read(&ctl).expect("read");
    assert!(whole.len() > 8 << 10, "{} bytes of results", whole.len());
    let last = results(&ctl).pop().expect("a result");
    assert_eq!(last_result(&ctl), last, "tail -n 1 ctl is the last result");
    assert_eq!(last["seq"], 20);
    // `tail -c` seeks; `cat | tail -c` does not: the same bytes.
    let sought = sh(&format!("tail -c 60 {}", quoted(&ctl))).stdout;
    let piped = sh(&format!("cat {} | tail -c 60", quoted(&ctl))).stdout;
    assert_eq!(sought, piped);
    assert_eq!(sought, whole[whole.len() - 60..]);
    // `dd skip=` reads at an offset of a fresh handle: the bytes at that offset.
    let at = whole.len() - 1000;
    let dd = sh(&format!(
        "dd if={} bs=1 skip={at} status=none | head -c 100",
        quoted(&ctl)
    ))
    .stdout;
    assert_eq!(dd, whole[at..at + 100]);
}

#[test]
fn a_forks_audit_in_the_mount_finds_the_archives_its_parent_holds() {
    let Some(m) = example() else { return };
    let text = std::fs::read_to_string(m.at("sessions/s5-fork-of-s2/audit.txt")).expect("read");
    assert!(
        !text.contains("archive.missing"),
        "the fork's inherited archives exist under its parent:\n{text}"
    );
    // The same findings through every door: the CLI's audit of the session, code by code.
    let codes = |t: &str| {
        let mut c: Vec<String> = t
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let sev = w.next()?;
                let code = w.next()?;
                matches!(sev, "error" | "warn" | "info").then(|| format!("{sev} {code}"))
            })
            .collect();
        c.sort();
        c
    };
    let config = config_file();
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(["audit"])
        .arg(m.root())
        .arg("s5-fork-of-s2")
        .args(["--config"])
        .arg(config.path())
        .output()
        .expect("run normafs audit");
    let cli = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(codes(&text), codes(&cli), "mount:\n{text}\ncli:\n{cli}");
    assert_eq!(o.status.code(), Some(0), "{cli}");
}

/// The corpus's settings as a file the CLI reads (the mount was given the same).
fn config_file() -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().expect("tempfile");
    f.write_all(common::corpus_config_toml("").as_bytes())
        .expect("write config");
    f
}

#[test]
fn a_refused_write_leaves_its_result_with_the_reason() {
    let Some(m) = example() else { return };
    let ctl = m.at(&format!("sessions/{SID}/ctl"));
    ok(&sh(&format!("echo help > {}", quoted(&ctl))));
    // Not UTF-8: refused, and said so where `tail -n1 ctl` looks.
    let o = sh(&format!("printf 'help\\xff\\n' > {}", quoted(&ctl)));
    assert!(!o.status.success(), "a write that is not UTF-8 is refused");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Invalid argument"));
    let r = last_result(&ctl);
    assert_eq!(r["ok"], false, "{r}");
    assert!(r["message"].as_str().unwrap_or("").contains("UTF-8"), "{r}");
    assert_eq!(r["seq"], 2, "{r}");
    // 10 MB of random bytes: refused whole, quoted in a few hundred characters at most.
    let o = sh(&format!("head -c 10000000 /dev/urandom > {}", quoted(&ctl)));
    assert!(!o.status.success());
    let r = last_result(&ctl);
    assert_eq!(r["ok"], false, "{r}");
    let chars = r["command"].as_str().expect("command").chars().count();
    assert!(chars <= 301, "the command is quoted in {chars} characters");
    let line = ok(&sh(&format!("tail -n 1 {} | wc -c", quoted(&ctl))));
    assert!(line.trim().parse::<usize>().expect("wc") < 2048, "{line}");
}

/// One `write()` of `data` to `path`: its error, if any.
fn write_once(path: &Path, data: &[u8]) -> Option<std::io::Error> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open ctl");
    match f.write(data) {
        Ok(n) => {
            assert_eq!(n, data.len(), "written whole");
            None
        }
        Err(e) => Some(e),
    }
}

#[test]
fn one_large_write_runs_whole_or_not_at_all() {
    let Some(m) = example() else { return };
    let ctl = m.at(&format!("sessions/{SID}/ctl"));
    let state = m.root().join(format!("noa/{SID}/state.json"));
    let before = std::fs::read(&state).expect("state");
    // `os.write(fd, b'help\n' + b'x' * 2 MiB)`: the kernel sends it in pieces.
    let mut data = b"help\n".to_vec();
    data.extend(std::iter::repeat_n(b'x', 2 << 20));
    let e = write_once(&ctl, &data).expect("refused");
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    let all = results(&ctl);
    assert_eq!(all.len(), 1, "only the refusal is recorded: {all:?}");
    assert_eq!(all[0]["ok"], false);
    assert!(
        all[0]["command"].as_str().expect("command").chars().count() <= 301,
        "quoted briefly"
    );
    assert!(all[0]["message"]
        .as_str()
        .expect("message")
        .contains("none of it was run"));
    // 10 MB of repeated compress lines in one write: nothing committed.
    let line = "compress m00001 m00003 A summary long enough to be taken as one by the check.\n";
    let big = line.repeat(10_000_000 / line.len());
    let e = write_once(&ctl, big.as_bytes()).expect("refused");
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    assert_eq!(
        std::fs::read(&state).expect("state"),
        before,
        "state.json untouched"
    );
    assert!(
        !m.root().join(format!("noa/{SID}/ctl.jsonl")).exists(),
        "no batch journaled"
    );
    // A write with a line that is no command runs none of its lines.
    let e = write_once(&ctl, b"help\nfrobnicate\n").expect("refused");
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    let all = results(&ctl);
    assert!(
        all.iter().all(|r| r["command"] != "help"),
        "help did not run: {all:?}"
    );
    let last = all.last().expect("a result");
    assert!(
        last["message"]
            .as_str()
            .unwrap_or("")
            .contains("frobnicate"),
        "{last}"
    );
}

#[test]
fn mounting_a_directory_that_is_no_session_root_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("typo");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&empty).expect("mkdir");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let o = refused_within(Command::new(env!("CARGO_BIN_EXE_normafs")).args([
        "mount".as_ref(),
        empty.as_os_str(),
        mnt.as_os_str(),
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a session root"), "{err}");
    assert!(err.contains("--allow-empty"), "the way out is named: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    // --daemon refuses before any daemon starts.
    let o = refused_within(
        Command::new(env!("CARGO_BIN_EXE_normafs"))
            .args(["mount", "--daemon"])
            .args([&empty, &mnt]),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(!common::is_mounted(&mnt));
}

/// Run `cmd`, which should end at once; one that is still running after 20 s (a mount that
/// went ahead) is ended and unmounted, and the test fails.
fn refused_within(cmd: &mut Command) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn normafs");
    let start = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > std::time::Duration::from_secs(20) {
            // SAFETY: kill of our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
            panic!("normafs mount went ahead (still running after 20 s)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn allow_empty_mounts_a_root_that_will_be_filled() {
    if !common::fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("later");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&root).expect("mkdir");
    std::fs::create_dir_all(&mnt).expect("mkdir");
    let log = dir.path().join("log");
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(["mount", "--daemon", "--allow-empty", "--log-file"])
        .args([&log, &root, &mnt])
        .output()
        .expect("run normafs mount");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let listed = std::fs::read_dir(mnt.join("sessions")).map(|d| d.count());
    // A file made of nothing yet is as of the mount, not 1970.
    let audit_time = std::fs::metadata(mnt.join("audit.txt")).and_then(|m| m.modified());
    // `mount` and `df` name the root as the source.
    let source = mount_source(&mnt);
    let _ = Command::new("umount").arg(&mnt).status();
    if common::is_mounted(&mnt) {
        common::force_unmount(&mnt);
    }
    assert_eq!(listed.expect("sessions/ listed"), 0);
    let age = std::time::SystemTime::now()
        .duration_since(audit_time.expect("audit.txt's mtime"))
        .unwrap_or_default();
    assert!(age.as_secs() < 3600, "audit.txt is {age:?} old");
    assert_eq!(source.as_deref(), Some(root.to_str().expect("utf-8")));
}

/// The source `/proc/self/mounts` shows for the mount at `mnt`.
fn mount_source(mnt: &Path) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let want = mnt.canonicalize().ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split(' ');
        let (source, at) = (f.next()?, f.next()?);
        (Path::new(at) == want).then(|| source.to_string())
    })
}

#[test]
fn mounting_on_a_mount_says_it_is_one_and_how_to_unmount_it() {
    let Some(m) = example() else { return };
    let o = refused_within(
        Command::new(env!("CARGO_BIN_EXE_normafs"))
            .arg("mount")
            .args([m.root(), m.mnt()]),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("is already a mount"), "{err}");
    assert!(
        err.contains("umount") || err.contains("fusermount3 -u"),
        "{err}"
    );
}

#[test]
fn ctls_mtime_moves_with_each_result() {
    let Some(m) = example() else { return };
    let ctl = m.at(&format!("sessions/{SID}/ctl"));
    let mtime = || {
        std::fs::metadata(&ctl)
            .and_then(|m| m.modified())
            .expect("mtime")
    };
    let before = mtime();
    std::thread::sleep(std::time::Duration::from_millis(20));
    ok(&sh(&format!("echo help > {}", quoted(&ctl))));
    let after = mtime();
    assert!(after > before, "{before:?} then {after:?}");
}

#[test]
fn ctl_help_names_the_forced_commands_and_the_way_to_pass_a_dash() {
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(["ctl", "--help"])
        .output()
        .expect("run normafs ctl --help");
    let help = ok(&o);
    assert!(
        help.contains("compress!") && help.contains("rebuild!"),
        "{help}"
    );
    assert!(
        !help.contains("quote a summary word"),
        "advice that does not work: {help}"
    );
    // The advice given works: `--` before a command with a word that starts with `-`.
    let root = common::example_root();
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("ctl")
        .arg(root.path())
        .args([SID, "--", "compress", "m00001", "m00002", "-x", "summary"])
        .output()
        .expect("run normafs ctl");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("unexpected argument"), "{err}");
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("ctl")
        .arg(root.path())
        .args([SID, "compress", "m00001", "m00002", "-x", "summary"])
        .output()
        .expect("run normafs ctl");
    assert!(String::from_utf8_lossy(&o.stderr).contains("unexpected argument"));
}

/// `normafs config ROOT [SID]` with `XDG_CONFIG_HOME` at `home`.
fn config_cmd(root: &Path, home: &Path, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("config")
        .arg(root)
        .args(args)
        .env("XDG_CONFIG_HOME", home)
        .output()
        .expect("run normafs config");
    ok(&o)
}

#[test]
fn settings_have_a_home_and_normafs_config_says_where_each_came_from() {
    let root = common::example_root();
    let home = tempfile::tempdir().expect("tempdir");
    // No file anywhere: every window is the default, assumed.
    let out = config_cmd(root.path(), home.path(), &[]);
    assert!(
        out.contains("settings files read, lowest first: none"),
        "{out}"
    );
    assert!(
        out.contains("[sessions.\"s2-tier1\"]\nwindow = 200000  # default: assumed"),
        "{out}"
    );
    // The user's file, then the root's, then the command line.
    let user = home.path().join("normafs/config.toml");
    std::fs::create_dir_all(user.parent().expect("dir")).expect("mkdir");
    std::fs::write(&user, "floor_ratio = 0.5\nwindow = 100000\n").expect("write");
    let beside = root.path().join(".normafs.toml");
    std::fs::write(&beside, "[sessions.\"s2-tier1\"]\nwindow = 40000\n").expect("write");
    let out = config_cmd(root.path(), home.path(), &[]);
    assert!(
        out.contains(&format!("floor_ratio = 0.5  # {}", user.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "[sessions.\"s2-tier1\"]\nwindow = 40000  # {} [sessions.\"s2-tier1\"]",
            beside.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "[sessions.\"s3-tier2\"]\nwindow = 100000  # {}",
            user.display()
        )),
        "{out}"
    );
    let one = config_cmd(root.path(), home.path(), &["s2-tier1", "--window", "9000"]);
    assert!(one.contains("window = 9000  # --window"), "{one}");
    assert!(
        one.contains("max_tier = 3  # default"),
        "every key of one session: {one}"
    );
    // The other commands read the same files: the view is judged at the root file's window.
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(["view", "--md"])
        .arg(root.path())
        .arg("s2-tier1")
        .env("XDG_CONFIG_HOME", home.path())
        .output()
        .expect("run normafs view");
    assert!(ok(&o).contains("window=40000"), "view.md's settings line");
}

#[test]
fn status_json_says_when_a_window_is_assumed_and_how_to_set_it() {
    let root = common::example_root();
    std::fs::write(
        root.path().join(".normafs.toml"),
        "[sessions.\"s2-tier1\"]\nwindow = 40000\n",
    )
    .expect("write");
    let sources = normafs::config::Sources {
        root: Some(root.path().to_path_buf()),
        ..normafs::config::Sources::default()
    };
    let (cfg, _) = sources.load().expect("settings");
    let Some(m) = mount(root, cfg, normafs::fuse::MountOptions::default()) else {
        return;
    };
    let status = |sid: &str| -> Value {
        let text = std::fs::read(m.at(&format!("sessions/{sid}/status.json"))).expect("read");
        serde_json::from_slice(&text).expect("json")
    };
    assert_eq!(status("s2-tier1")["windowAssumed"], Value::Null);
    let why = status("s3-tier2")["windowAssumed"]
        .as_str()
        .map(str::to_string);
    let why = why.expect("the window is said to be assumed");
    assert!(
        why.contains("200000") && why.contains(".normafs.toml"),
        "{why}"
    );
}

#[test]
fn only_the_commands_that_mount_list_the_mounts_own_flags() {
    let help = |cmd: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
            .args([cmd, "--help"])
            .output()
            .expect("run normafs --help");
        ok(&o)
    };
    for cmd in ["view", "audit", "ctl", "gen"] {
        let h = help(cmd);
        assert!(
            !h.contains("--ttl-ms") && !h.contains("--cache-mb"),
            "{cmd} --help lists a mount flag:\n{h}"
        );
    }
    let h = help("mount");
    assert!(h.contains("--ttl-ms") && h.contains("--cache-mb"), "{h}");
    // Refused as any unknown flag, pointing at the command's own help.
    let root = common::example_root();
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("view")
        .arg(root.path())
        .args([SID, "--ttl-ms", "5"])
        .output()
        .expect("run normafs view");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("normafs view --help"));
}

#[test]
fn a_reader_finds_which_refs_raw_opens() {
    let Some(m) = example() else { return };
    let status: Value = serde_json::from_slice(
        &std::fs::read(m.at(&format!("sessions/{SID}/status.json"))).expect("read"),
    )
    .expect("json");
    let hint = status["refs"]["raw"]
        .as_str()
        .expect("status.json says how raw/ opens refs");
    let md = std::fs::read_to_string(m.at(&format!("sessions/{SID}/view.md"))).expect("read");
    assert!(md.contains(hint), "view.md says it too");
    // What it says is true: the first and the last ref open, one and as a range, though
    // `ls raw/` lists only the blocks' ranges.
    let (first, last) = (
        status["refs"]["first"].as_str().expect("first"),
        status["refs"]["last"].as_str().expect("last"),
    );
    assert!(hint.contains(first) && hint.contains(last), "{hint}");
    let listed = ok(&sh(&format!(
        "ls {}",
        quoted(&m.at(&format!("sessions/{SID}/raw")))
    )));
    assert!(!listed.contains(&format!("{last}.md")), "{listed}");
    for name in [
        format!("{first}.md"),
        format!("{last}.md"),
        format!("{first}-{last}.md"),
    ] {
        let text = std::fs::read_to_string(m.at(&format!("sessions/{SID}/raw/{name}")));
        assert!(text.is_ok_and(|t| !t.is_empty()), "raw/{name} opens");
    }
}
