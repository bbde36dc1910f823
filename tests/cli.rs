//! The `normafs` binary as a user runs it: outputs, exit codes, one-line errors, `--help`.

mod common;

use std::process::{Command, Output};

use common::example_root;

fn normafs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(args)
        .output()
        .expect("run normafs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A failure: non-zero exit, nothing on stdout, exactly one line on stderr naming the problem.
fn assert_one_line_error(o: &Output, needle: &str) {
    assert!(!o.status.success(), "should fail: {o:?}");
    let e = stderr(o);
    assert_eq!(e.lines().count(), 1, "one line expected: {e:?}");
    assert!(e.starts_with("normafs: "), "{e}");
    assert!(e.contains(needle), "{e:?} should mention {needle:?}");
}

#[test]
fn help_on_every_command() {
    for cmd in [
        vec!["--help"],
        vec!["view", "--help"],
        vec!["audit", "--help"],
        vec!["ctl", "--help"],
        vec!["gen", "--help"],
    ] {
        let o = normafs(&cmd);
        assert!(o.status.success(), "{cmd:?}");
        assert!(
            stdout(&o).contains("Usage: normafs"),
            "{cmd:?}: {}",
            stdout(&o)
        );
    }
    let o = normafs(&["view", "--help"]);
    assert!(stdout(&o).contains("--protect-recent-messages"));
    assert!(stdout(&o).contains("--config <FILE>"));
}

#[test]
fn view_and_audit_of_the_example() {
    let d = example_root();
    let root = d.path().to_str().expect("utf8");
    let o = normafs(&["view", root, "7f0c2a"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let kinds: Vec<String> = lines
        .iter()
        .map(|l| {
            l.get("block")
                .or(l.get("ref"))
                .and_then(|v| v.as_str())
                .unwrap_or("?")
                .to_string()
        })
        .collect();
    assert_eq!(kinds, ["b1", "b2", "m0015", "m0016"]);
    let o = normafs(&["view", root, "7f0c2a", "--md"]);
    assert!(
        stdout(&o).contains("## b1 · tier 1 · m0001–m0006\n"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("## m0016 · assistant\n"));

    let o = normafs(&["audit", root]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(
        text.ends_with("summary: 0 errors, 0 warnings, 2 info\n"),
        "{text}"
    );
    assert!(
        text.starts_with("info archive.moved noa/7f0c2a/tier1/b1_m0001-m0006.md — "),
        "{text}"
    );
    let o = normafs(&["audit", root, "7f0c2a", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["summary"]["errors"], 0);
    assert_eq!(v["findings"][0]["code"], "archive.moved");
}

#[test]
fn audit_exits_1_on_errors() {
    let d = example_root();
    std::fs::write(d.path().join("noa/7f0c2a/state.json"), "[1,2]").expect("write");
    let o = normafs(&["audit", d.path().to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("error state.malformed noa/7f0c2a/state.json — malformed state.json: expected a JSON object, found an array"), "{}", stdout(&o));
}

#[test]
fn ctl_prints_its_result_line_or_one_error_line() {
    let d = example_root();
    let root = d.path().to_str().expect("utf8");
    let o = normafs(&["ctl", root, "7f0c2a", "rebuild"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json line");
    assert_eq!(v["ok"], true);
    assert_eq!(v["command"], "rebuild");
    assert_eq!(v["seq"], 1);
    let o = normafs(&[
        "ctl",
        root,
        "7f0c2a",
        "compress",
        "m0001",
        "m0099",
        "a summary long enough to pass",
    ]);
    assert_one_line_error(&o, "unknown ref m0099");
    let o = normafs(&["ctl", root, "7f0c2a", "nonsense"]);
    assert_one_line_error(&o, "unknown command `nonsense`");
    let o = normafs(&["ctl", root, "-", "reindex-memory"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = normafs(&["ctl", root, "-", "help"]);
    assert!(stdout(&o).contains("reindex-memory"));
}

#[test]
fn bad_input_is_one_line_and_non_zero() {
    let d = example_root();
    let root = d.path().to_str().expect("utf8");
    assert_one_line_error(
        &normafs(&["view", "/nonexistent/root", "x"]),
        "/nonexistent/root is not a directory",
    );
    assert_one_line_error(&normafs(&["view", root, "nosuch"]), "no session nosuch");
    assert_one_line_error(&normafs(&["view", root, "../etc"]), "is not a session name");
    assert_one_line_error(
        &normafs(&["view", root, "7f0c2a", "--window", "abc"]),
        "invalid value 'abc'",
    );
    assert_one_line_error(&normafs(&["frobnicate"]), "unrecognized subcommand");
    assert_one_line_error(
        &normafs(&["audit", root, "--config", "/nonexistent.toml"]),
        "cannot read config file /nonexistent.toml",
    );
    let o = normafs(&["view", root, "7f0c2a", "--floor-ratio", "7"]);
    assert!(o.status.success());
    assert!(
        stderr(&o).contains("warning: floor_ratio = 7 is not a ratio in [0, 1]"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn settings_come_from_flags_options_and_session_tables() {
    let d = example_root();
    let root = d.path().to_str().expect("utf8");
    let cfg = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let p = cfg.path().join(name);
        std::fs::write(&p, text).expect("write");
        p.to_str().expect("utf8").to_string()
    };
    let view = |extra: &[&str]| {
        let mut args = vec!["view", root, "7f0c2a"];
        args.extend_from_slice(extra);
        let o = normafs(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        o
    };
    let default = stdout(&view(&[]));
    let small = stdout(&view(&["-o", "window=100"]));
    assert_ne!(small, default, "a tiny window changes the view");
    assert_eq!(stdout(&view(&["--window", "100"])), small);
    let table = write("t.toml", "[sessions.\"7f0c2a\"]\nwindow = 100\n");
    assert_eq!(stdout(&view(&["--config", &table])), small);
    let other = write("o.toml", "[sessions.\"other\"]\nwindow = 100\n");
    assert_eq!(stdout(&view(&["--config", &other])), default);
    // The command line wins over the file.
    assert_eq!(
        stdout(&view(&["--config", &table, "-o", "window=200000"])),
        default
    );

    // A questionable value in a session table: a warning naming the session; the view goes on.
    let bad = write("b.toml", "[sessions.\"7f0c2a\"]\nmax_tier = 9\n");
    let o = view(&["--config", &bad]);
    assert_eq!(stdout(&o), default);
    assert!(
        stderr(&o).contains("warning: [sessions.\"7f0c2a\"] max_tier = 9 is not 2 or 3"),
        "{}",
        stderr(&o)
    );

    // Unusable settings stop every command with one line and exit 2.
    let unknown = write("u.toml", "[sessions.\"7f0c2a\"]\nwindw = 100\n");
    for args in [
        vec!["view", root, "7f0c2a", "--config", &unknown],
        vec!["audit", root, "--config", &unknown],
        vec!["ctl", root, "7f0c2a", "help", "--config", &unknown],
    ] {
        let o = normafs(&args);
        assert_one_line_error(&o, "unknown key \"windw\"");
        assert!(stderr(&o).contains("u.toml"), "{}", stderr(&o));
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
    let o = normafs(&["audit", root, "-o", "window"]);
    assert_one_line_error(&o, "-o window: expected key=value");
    assert_eq!(o.status.code(), Some(2));
}
