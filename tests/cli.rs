//! The `normafs` binary as a user runs it: outputs, exit codes, one-line errors, `--help`.

mod common;

use std::process::{Command, Output};

use common::{example_root, stderr};

fn normafs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(args)
        .output()
        .expect("run normafs")
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

/// The corpus's settings as a `--config` file (each session's window and parents) in `dir`.
fn corpus_config_file(dir: &std::path::Path) -> String {
    let p = dir.join("corpus.toml");
    std::fs::write(&p, common::corpus_config_toml("")).expect("write config");
    p.to_str().expect("utf8").to_string()
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

/// `normafs view` of the corpus with each session's settings prints what the runtime sends
/// (oracle `resume-view.json`, as `jq -c .message` would extract it) and, with
/// `--materialized`, the runtime's materialized history; `--md` is view.md; the audit of the
/// healthy root has no error and only the runtime's own hazard as a warning.
#[test]
fn view_and_audit_of_the_example() {
    let d = example_root();
    let root = d.path().to_str().expect("utf8");
    let cfg_dir = tempfile::tempdir().expect("tempdir");
    let cfg = corpus_config_file(cfg_dir.path());
    for sid in common::CORPUS_SESSIONS {
        let o = normafs(&["view", root, sid, "--config", &cfg]);
        assert!(o.status.success(), "{sid}: {}", stderr(&o));
        let got: Vec<serde_json::Value> = json_lines(&stdout(&o))
            .into_iter()
            .map(|l| l["message"].clone())
            .collect();
        let want = common::oracle(&format!("{sid}/resume-view.json"));
        assert_eq!(serde_json::Value::Array(got), want, "{sid}: view");
        let o = normafs(&["view", root, sid, "--config", &cfg, "--materialized"]);
        assert!(o.status.success(), "{sid}: {}", stderr(&o));
        let got: Vec<serde_json::Value> = json_lines(&stdout(&o))
            .into_iter()
            .map(|l| l["message"].clone())
            .collect();
        let want = common::oracle(&format!("{sid}/materialize.json"));
        assert_eq!(serde_json::Value::Array(got), want, "{sid}: materialized");
    }
    // The line shapes: a transcript message by its refs, a summary by its block.
    let o = normafs(&["view", root, "s2-tier1", "--config", &cfg]);
    let lines = json_lines(&stdout(&o));
    assert_eq!(lines[0]["refs"], serde_json::json!(["m00001"]));
    assert_eq!(lines[0]["message"]["role"], "user");
    let summaries: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l.get("block").is_some()).collect();
    assert_eq!(summaries.len(), 15);
    assert_eq!(
        (
            &summaries[0]["block"],
            &summaries[0]["tier"],
            &summaries[0]["range"]
        ),
        (
            &serde_json::json!("b1"),
            &serde_json::json!(1),
            &serde_json::json!("m00004-m00009")
        )
    );
    let o = normafs(&["view", root, "s2-tier1", "--config", &cfg, "--md"]);
    let md = stdout(&o);
    assert!(md.starts_with("# View of s2-tier1\n"), "{md}");
    assert!(md.contains("of a 40K window"), "{md}");
    assert!(
        md.contains("\n## b1 · tier 1 · m00004-m00009 (summary)\n"),
        "{md}"
    );
    assert!(md.contains("originals: `raw/m00004-m00009.md`"), "{md}");

    let o = normafs(&["audit", root, "--config", &cfg]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(
        text.ends_with("summary: 0 errors, 1 warnings, 6 info\n"),
        "{text}"
    );
    let warnings: Vec<&str> = text.lines().filter(|l| l.starts_with("warn ")).collect();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].starts_with("warn memory.empty-slug memory/.md — "));
    assert!(
        text.contains("info state.inherited noa/s5-fork-of-s2/state.json — "),
        "{text}"
    );
    // One session's audit: its own files (the memory's finding is the root's).
    let o = normafs(&["audit", root, "s2-tier1", "--json", "--config", &cfg]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["summary"]["errors"], 0);
    assert_eq!(v["findings"][0]["code"], "archive.moved");
    assert_eq!(v["findings"].as_array().map(Vec::len), Some(1));
    // The fork's inherited archives are found in the session they live in.
    let o = normafs(&["audit", root, "s5-fork-of-s2", "--config", &cfg]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stdout(&o).contains("info state.inherited noa/s5-fork-of-s2/state.json"));
}

#[test]
fn audit_exits_1_on_errors() {
    let d = example_root();
    std::fs::write(d.path().join("noa/s2-tier1/state.json"), "[1,2]").expect("write");
    let o = normafs(&["audit", d.path().to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("error state.malformed noa/s2-tier1/state.json — malformed state.json: invalid type: sequence, expected an object for the top level"), "{}", stdout(&o));
}

#[test]
fn ctl_prints_its_result_line_or_one_error_line() {
    let d = example_root();
    let root = d.path().to_str().expect("utf8");
    let o = normafs(&["ctl", root, "s2-tier1", "rebuild"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json line");
    assert_eq!(v["ok"], true);
    assert_eq!(v["command"], "rebuild");
    assert_eq!(v["seq"], 1);
    assert_eq!(v["result"]["adopted"].as_array().map(Vec::len), Some(15));
    let o = normafs(&[
        "ctl",
        root,
        "s2-tier1",
        "compress",
        "m00150",
        "m99999",
        "a summary long enough to pass the minimum length of fifty",
    ]);
    // A refused batch: the refusal, then the panel as written, each reason once.
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some("normafs: refused, nothing written (normafs applies a batch whole or not at all):"),
        "{e}"
    );
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.starts_with("▣ noa | 0 blocks created")),
        "{e}"
    );
    assert_eq!(
        e.matches("every ref is unknown to this session").count(),
        1,
        "{e}"
    );
    assert!(e.contains("session highest ref=m00182"), "{e}");
    let o = normafs(&["ctl", root, "s2-tier1", "nonsense"]);
    assert_one_line_error(&o, "unknown command `nonsense`");
    let o = normafs(&["ctl", root, "-", "reindex-memory"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = normafs(&["ctl", root, "-", "help"]);
    assert!(stdout(&o).contains("reindex-memory"));
    // The oracle's first Compress input, as the runtime's tool took it.
    let input =
        std::fs::read_to_string(common::norma_data().join("oracle/s2-tier1/compress-1/input.json"))
            .expect("input");
    let cfg_dir = tempfile::tempdir().expect("tempdir");
    let cfg = corpus_config_file(cfg_dir.path());
    let o = normafs(&[
        "ctl", root, "s2-tier1", "--config", &cfg, "compress", &input,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json line");
    let panel = v["message"].as_str().expect("panel");
    assert!(
        panel.starts_with("▣ noa | 19K → 13K tokens (~6.1K reclaimed)\n"),
        "{panel}"
    );
    assert!(panel.contains("  b16(T1)=m00124–m00129* → "), "{panel}");
    // A session written just now looks live: EBUSY, one line saying why; `compress!` runs.
    common::set_mtime(
        &d.path().join("transcripts/s2-tier1.jsonl"),
        std::time::SystemTime::now(),
    );
    let summary = "the late part of the session, summarized for the test at length";
    let o = normafs(&[
        "ctl",
        root,
        "s2-tier1",
        "--min-range-chars",
        "0",
        "compress",
        "m00170",
        "m00175",
        summary,
    ]);
    assert_one_line_error(&o, "looks live");
    assert_eq!(o.status.code(), Some(1), "a command that failed: exit 1");
    let o = normafs(&[
        "ctl",
        root,
        "s2-tier1",
        "--min-range-chars",
        "0",
        "compress!",
        "m00170",
        "m00175",
        summary,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
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
        &normafs(&["view", root, "s2-tier1", "--window", "abc"]),
        "invalid value 'abc'",
    );
    assert_one_line_error(&normafs(&["frobnicate"]), "unrecognized subcommand");
    assert_one_line_error(
        &normafs(&["audit", root, "--config", "/nonexistent.toml"]),
        "cannot read config file /nonexistent.toml",
    );
    // Usage and I/O errors exit 2 (1 is for findings and failed commands).
    for args in [
        vec!["view", "/nonexistent/root", "x"],
        vec!["view", root, "nosuch"],
        vec!["frobnicate"],
    ] {
        assert_eq!(normafs(&args).status.code(), Some(2), "{args:?}");
    }
    // A missing argument is named, with the command whose help tells more.
    for (args, named, help) in [
        (vec!["mount"], "<ROOT> <MNT>", "normafs mount --help"),
        (vec!["view", root], "<SID>", "normafs view --help"),
        (vec!["ctl", root], "<SID> <COMMAND>", "normafs ctl --help"),
    ] {
        let o = normafs(&args);
        assert_one_line_error(&o, named);
        assert!(stderr(&o).contains(help), "{}", stderr(&o));
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
    // A directory that is no session root is said to be none, and exits 2, for each command
    // that reads one (an empty report would look like a healthy root).
    let empty = tempfile::tempdir().expect("tempdir");
    let e = empty.path().to_str().expect("utf8");
    for args in [
        vec!["audit", e],
        vec!["view", e, "s1"],
        vec!["ctl", e, "-", "help"],
    ] {
        let o = normafs(&args);
        assert_one_line_error(&o, "is not a session root");
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
    assert!(stdout(&normafs(&["--help"])).contains("Exit status: 0 ok; 1 findings"));
    let o = normafs(&["view", root, "s2-tier1", "--floor-ratio", "7"]);
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
        let mut args = vec!["view", root, "s2-tier1"];
        args.extend_from_slice(extra);
        let o = normafs(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        o
    };
    let default = stdout(&view(&[]));
    let small = stdout(&view(&["-o", "window=100"]));
    assert_ne!(small, default, "a tiny window changes the view");
    assert_eq!(stdout(&view(&["--window", "100"])), small);
    let table = write("t.toml", "[sessions.\"s2-tier1\"]\nwindow = 100\n");
    assert_eq!(stdout(&view(&["--config", &table])), small);
    let other = write("o.toml", "[sessions.\"other\"]\nwindow = 100\n");
    assert_eq!(stdout(&view(&["--config", &other])), default);
    // The command line wins over the file.
    assert_eq!(
        stdout(&view(&["--config", &table, "-o", "window=200000"])),
        default
    );

    // A questionable value in a session table: a warning naming the session; the view goes on.
    let bad = write("b.toml", "[sessions.\"s2-tier1\"]\nmax_tier = 9\n");
    let o = view(&["--config", &bad]);
    assert_eq!(stdout(&o), default);
    assert!(
        stderr(&o).contains("warning: [sessions.\"s2-tier1\"] max_tier = 9 is not 2 or 3"),
        "{}",
        stderr(&o)
    );

    // Unusable settings stop every command with one line and exit 2.
    let unknown = write("u.toml", "[sessions.\"s2-tier1\"]\nwindw = 100\n");
    for args in [
        vec!["view", root, "s2-tier1", "--config", &unknown],
        vec!["audit", root, "--config", &unknown],
        vec!["ctl", root, "s2-tier1", "help", "--config", &unknown],
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

/// `normafs view` writes the view as it makes it: the same bytes the mount's `view.jsonl`
/// is made of, for a long session with compressed blocks, cut results and a nudge.
#[test]
fn view_written_as_made_is_the_view() {
    use normafs::noa::views;
    use normafs::store::{root::RootPaths, session};
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("r");
    let o = normafs(&[
        "gen",
        &root.to_string_lossy(),
        "--seed",
        "3",
        "--sessions",
        "1",
        "--messages",
        "3000",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sid = std::fs::read_dir(root.join("transcripts"))
        .expect("transcripts")
        .filter_map(|e| e.ok())
        .find_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".jsonl")
                .map(str::to_string)
        })
        .expect("a session");
    let o = normafs(&["view", &root.to_string_lossy(), &sid]);
    assert!(o.status.success(), "{}", stderr(&o));
    let paths = RootPaths::from_root(&root);
    let cfg = normafs::config::NoaConfig::default();
    let s = session::load(&paths, &sid);
    let (state, _) = session::opened_state(&paths, &sid, &s.state.state, &cfg);
    assert!(!state.blocks().is_empty(), "compressed blocks");
    let p = views::Projection::new(s.messages());
    let files = views::Files::new(&p, &state, &cfg, &sid, &views::runtime_path);
    let made = files.bytes(views::Form::View, &mut Default::default());
    // A view of many lines, each written as it is made.
    assert!(made.len() > 4 << 16, "{} bytes", made.len());
    assert!(
        o.stdout == made.to_vec(),
        "normafs view and the view's bytes differ"
    );
}

#[test]
fn a_ctl_compress_says_in_words_how_its_endpoints_were_read() {
    let d = example_root();
    let root = d.path().to_str().expect("utf8");
    let o = normafs(&[
        "ctl",
        root,
        "s2-tier1",
        "--min-range-chars",
        "0",
        "compress",
        "m00141",
        "m00130",
        "the middle part of the session, summarized for the test at length",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json line");
    let warnings: Vec<&str> = v["result"]["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| w.as_str().expect("text"))
        .collect();
    let message = v["message"].as_str().expect("message");
    for want in [
        "m00141 m00130 was given end first: read as the range m00130–m00141",
        "from compression range (recent/last-user zone).",
        // Which rule held them, in words.
        "m00130, m00131, m00134, m00135, m00138, m00139 are left out as protected: within the \
         last 5000 tokens (protect_recent_tokens = 5000); they can be compressed once newer \
         messages follow, or with a lower protect_recent_tokens",
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(want)),
            "{want}: {warnings:?}"
        );
        assert!(message.contains(want), "{want}: {message}");
    }
    // Every warning of the result is a `warn:` line of the message, and no other.
    let warn_lines = message
        .lines()
        .filter(|l| l.trim_start().starts_with("warn: "))
        .count();
    assert_eq!(warn_lines, warnings.len(), "{message}\n{warnings:?}");

    // Held by the message count instead: that rule is named.
    let d = example_root();
    let root = d.path().to_str().expect("utf8");
    let o = normafs(&[
        "ctl",
        root,
        "s2-tier1",
        "--min-range-chars",
        "0",
        "--protect-recent-tokens",
        "0",
        "compress",
        "m00150",
        "m00182",
        "the end of the session, summarized for the test at length",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json line");
    let message = v["message"].as_str().expect("message");
    let want = "m00174, m00175, m00178, m00179, m00182 are left out as protected: among the last \
                5 messages (protect_recent_messages = 5)";
    assert!(message.contains(want), "{want}: {message}");
    assert!(!message.contains("protect_recent_tokens ="), "{message}");
}

#[test]
fn a_ctl_batch_after_the_last_request_shows_on_the_timelines_last_line() {
    let d = example_root();
    let root = d.path().to_str().expect("utf8");
    let o = normafs(&[
        "ctl",
        root,
        "s2-tier1",
        "--min-range-chars",
        "0",
        "compress",
        "m00130",
        "m00141",
        "the middle part of the session, summarized for the test at length",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = normafs(&["timeline", root, "s2-tier1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let last = lines.last().expect("a request");
    assert_eq!(last["ctlAfter"][0]["blocks"][0]["block"], "b16", "{last}");
    assert!(
        last["ctlAfter"][0]["reclaimed"]
            .as_i64()
            .is_some_and(|n| n > 0),
        "{last}"
    );
    assert!(lines[..lines.len() - 1]
        .iter()
        .all(|l| l.get("ctlAfter").is_none() && l["ctl"] == serde_json::json!([])));
}
