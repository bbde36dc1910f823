//! Real mounts, used with the tools people use: `ls`, `cat`, `stat`, `grep`, `jq`, `tail`, `cp`,
//! `sed -i`, shell redirections and python. Each test mounts its own temporary copy of a root on
//! its own temporary directory; the guard unmounts even when the test fails. Without /dev/fuse
//! every test prints a notice and skips; under CI (`NORMAFS_REQUIRE_MOUNT`, which `.ci/run`
//! sets, or `CI`) it fails instead.

mod common;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    cat, example_root, fuse_available, have, is_mounted, mount, mount_example, ok, sh, snapshot,
    text_of, tool, within, write_session, Mounted, Session,
};
use normafs::config::Config;
use normafs::fuse::MountOptions;

/// The corpus session with 15 tier-1 blocks.
const SID: &str = "s2-tier1";
/// The corpus session with a subagent.
const SUB: &str = "s4-subagent";

fn err(o: &Output) -> String {
    assert!(!o.status.success(), "should have failed: {o:?}");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn os(p: &Path) -> &OsStr {
    p.as_os_str()
}

fn stat(fmt: &str, p: &Path) -> String {
    ok(&tool("stat", &[OsStr::new("-c"), OsStr::new(fmt), os(p)]))
        .trim()
        .to_string()
}

/// Every synthetic file of the example mount (ctl excluded: its size is not its content).
fn synthetic_files(m: &Mounted) -> Vec<PathBuf> {
    let s = m.at(&format!("sessions/{SID}"));
    let mut v = vec![
        m.at("audit.txt"),
        m.at("memory/MEMORY.md"),
        s.join("view.jsonl"),
        s.join("view.md"),
        s.join("materialized.jsonl"),
        s.join("audit.txt"),
        s.join("status.json"),
        s.join("raw/m00001.md"),
        m.at(&format!("sessions/{SUB}/view.jsonl")),
        m.at(&format!("sessions/{SUB}/status.json")),
    ];
    let raw = ok(&tool("ls", &[os(&s.join("raw"))]));
    assert!(!raw.trim().is_empty(), "raw/ lists the block ranges");
    v.extend(raw.lines().map(|n| s.join("raw").join(n)));
    v
}

#[test]
fn tools_read_the_example_root() {
    let Some(m) = mount_example() else {
        return;
    };
    let s = m.at(&format!("sessions/{SID}"));

    assert_eq!(
        ok(&tool("ls", &[os(&m.at("sessions"))])),
        common::CORPUS_SESSIONS.join("\n") + "\n"
    );
    let names = ok(&tool("ls", &[os(&s)]));
    for n in [
        "audit.txt",
        "ctl",
        "materialized.jsonl",
        "memory",
        "raw",
        "state.json",
        "status.json",
        "tier1",
        "transcript.jsonl",
        "view.jsonl",
        "view.md",
    ] {
        assert!(names.lines().any(|l| l == n), "{n} in {names}");
    }
    let sub = ok(&tool(
        "ls",
        &[os(&m.at(&format!("sessions/{SUB}/subagents")))],
    ));
    assert_eq!(sub, "agent-a7f3c2.jsonl\n");

    // Real files are the backing bytes.
    let backing = m.root().join(format!("transcripts/{SID}.jsonl"));
    assert_eq!(
        cat(&s.join("transcript.jsonl")),
        std::fs::read(&backing).expect("read")
    );

    // Synthetic files: st_size is exactly what a read returns; mode 0444.
    for p in synthetic_files(&m) {
        let bytes = cat(&p);
        assert!(!bytes.is_empty(), "{} is empty", p.display());
        assert_eq!(
            stat("%s", &p),
            bytes.len().to_string(),
            "st_size of {}",
            p.display()
        );
        assert_eq!(stat("%a", &p), "444", "{}", p.display());
    }
    assert_eq!(stat("%a", &s.join("ctl")), "600");

    // tail -c seeks by st_size.
    let view = cat(&s.join("view.jsonl"));
    let tail = ok(&tool(
        "tail",
        &[
            OsStr::new("-c"),
            OsStr::new("100"),
            os(&s.join("view.jsonl")),
        ],
    ));
    assert_eq!(tail.as_bytes(), &view[view.len() - 100..]);

    // grep -r over the whole mount finds a file named in the summaries: in the transcript
    // (the Compress calls), the view (the summaries), an archive (its quoted summary).
    let hits = ok(&tool(
        "grep",
        &[OsStr::new("-rl"), OsStr::new("auth/jwt.go:42"), os(m.mnt())],
    ));
    for want in [
        "s2-tier1/transcript.jsonl",
        "s2-tier1/view.jsonl",
        "s2-tier1/tier1/b1_m00004-m00009.md",
    ] {
        assert!(hits.lines().any(|l| l.ends_with(want)), "{want} in {hits}");
    }

    // jq reads every view line.
    if have("jq") {
        let out = ok(&tool(
            "jq",
            &[
                OsStr::new("-c"),
                OsStr::new(".message"),
                os(&s.join("view.jsonl")),
            ],
        ));
        assert_eq!(
            out.lines().count(),
            view.split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .count()
        );
        assert!(out.lines().all(|l| l.starts_with("{\"role\":")), "{out}");
    }

    // python: walk the whole mount, parse every line of every view.jsonl.
    if have("python3") {
        let script = r#"
import json, os, sys
views = lines = 0
for d, dirs, files in os.walk(sys.argv[1]):
    for f in files:
        if f == "view.jsonl":
            views += 1
            with open(os.path.join(d, f)) as fh:
                for line in fh:
                    json.loads(line)
                    lines += 1
print(views, lines)
"#;
        let out = ok(&Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(m.mnt())
            .output()
            .expect("python3"));
        let lines: usize = common::CORPUS_SESSIONS
            .iter()
            .map(|sid| common::lines(&cat(&m.at(&format!("sessions/{sid}/view.jsonl")))).len())
            .sum();
        assert_eq!(out.trim(), format!("5 {lines}"));
    }

    // cp -r of a session directory: its real files arrive byte-identical.
    let dest = tempfile::tempdir().expect("tempdir");
    ok(&tool(
        "cp",
        &[OsStr::new("-r"), os(&s), os(&dest.path().join("copy"))],
    ));
    let copy = dest.path().join("copy");
    let root = m.root();
    for (in_copy, in_root) in [
        ("transcript.jsonl", format!("transcripts/{SID}.jsonl")),
        ("state.json", format!("noa/{SID}/state.json")),
        (
            "tier1/b1_m00004-m00009.md",
            format!("noa/{SID}/tier1/b1_m00004-m00009.md"),
        ),
        (
            "tier1/b15_m00116-m00121.md",
            format!("noa/{SID}/tier1/b15_m00116-m00121.md"),
        ),
    ] {
        assert_eq!(
            std::fs::read(copy.join(in_copy)).expect("copied"),
            std::fs::read(root.join(&in_root)).expect("backing"),
            "{in_copy}"
        );
    }
    assert_eq!(
        std::fs::read(copy.join("view.jsonl")).expect("copied view"),
        view
    );

    // Inode numbers are stable across lookups.
    let first = stat("%i", &s.join("transcript.jsonl"));
    assert_eq!(stat("%i", &s.join("transcript.jsonl")), first);
    assert_eq!(
        stat("%i", &s.join("view.jsonl")),
        stat("%i", &s.join("view.jsonl"))
    );
}

/// The corpus mounted with each session's settings (its window, a fork's parents): what
/// `jq -c .message` extracts from a session's view.jsonl is what the runtime sends for it
/// (oracle resume-view.json), message for message; likewise materialized.jsonl.
#[test]
fn the_corpus_views_through_jq_are_the_runtimes() {
    if !have("jq") {
        return;
    }
    let Some(m) = mount_example() else {
        return;
    };
    let jq = |p: &Path| -> Vec<serde_json::Value> {
        ok(&tool(
            "jq",
            &[OsStr::new("-c"), OsStr::new(".message"), os(p)],
        ))
        .lines()
        .map(|l| serde_json::from_str(l).expect("jq prints JSON"))
        .collect()
    };
    let s3 = jq(&m.at("sessions/s3-tier2/view.jsonl"));
    let want = common::oracle("s3-tier2/resume-view.json");
    assert_eq!(s3.len(), want.as_array().map(Vec::len).unwrap_or(0));
    assert_eq!(serde_json::Value::Array(s3), want, "s3-tier2");
    for sid in common::CORPUS_SESSIONS {
        let got = jq(&m.at(&format!("sessions/{sid}/view.jsonl")));
        let want = common::oracle(&format!("{sid}/resume-view.json"));
        assert_eq!(serde_json::Value::Array(got), want, "{sid}: view");
        let got = jq(&m.at(&format!("sessions/{sid}/materialized.jsonl")));
        let want = common::oracle(&format!("{sid}/materialize.json"));
        assert_eq!(serde_json::Value::Array(got), want, "{sid}: materialized");
    }
    // The block lines name their block, tier and range.
    let blocks = ok(&tool(
        "jq",
        &[
            OsStr::new("-c"),
            OsStr::new("select(.block) | [.block, .tier, .range]"),
            os(&m.at("sessions/s3-tier2/view.jsonl")),
        ],
    ));
    assert_eq!(blocks.lines().count(), 35);
    assert!(
        blocks.lines().any(|l| l.contains(",2,")),
        "the tier-2 block: {blocks}"
    );
}

/// The oracle's first Compress input for s2-tier1, written to ctl as the runtime's Compress
/// input (`compress {json}` in one write): it makes the runtime's three blocks, and a read of
/// ctl shows the runtime's panel.
#[test]
fn a_compress_input_of_the_runtime_through_ctl() {
    let Some(m) = mount_example() else {
        return;
    };
    let ctl = m.at(&format!("sessions/{SID}/ctl"));
    let input = common::norma_data().join("oracle/s2-tier1/compress-1/input.json");
    assert!(!std::fs::read_to_string(&input)
        .expect("input")
        .contains('\''));
    // A script reads the view, compresses, and reads the view again at once: the second
    // read shows the new blocks (the first one's lookup held the view before them; the
    // command lets go of that, before inotify reports the files it wrote).
    let view = m.at(&format!("sessions/{SID}/view.jsonl"));
    let out = ok(&sh(&format!(
        "cat '{v}' > /dev/null && echo \"compress $(cat '{}')\" > '{}' && cat '{v}'",
        input.display(),
        ctl.display(),
        v = view.display()
    )));
    for b in ["b16", "b17", "b18"] {
        assert!(
            out.contains(&format!("\"block\":\"{b}\"")),
            "{b} in the view read right after the command"
        );
    }
    let results = common::lines(&cat(&ctl));
    let last = results.last().expect("a result");
    assert_eq!(last["ok"], true, "{last}");
    let panel = last["message"].as_str().expect("panel");
    let want =
        std::fs::read_to_string(common::norma_data().join("oracle/s2-tier1/compress-1/result.txt"))
            .expect("result.txt");
    // The runtime's panel, but for the archive paths (they name where the copy is).
    let strip = |t: &str| -> Vec<String> {
        t.trim_end()
            .lines()
            .map(|l| l.split(" → /").next().unwrap_or(l).to_string())
            .collect()
    };
    // `result.panel` is the runtime's panel; the message is it, then what normafs adds in
    // words (here, which rule protects the messages left out), each in `result.warnings`.
    let runtime_panel = last["result"]["panel"].as_str().expect("panel");
    assert_eq!(strip(runtime_panel), strip(&want), "{runtime_panel}");
    let added = panel
        .strip_prefix(runtime_panel)
        .expect("the message starts with the panel");
    for l in added.lines().filter(|l| !l.is_empty()) {
        let w = l.strip_prefix("  warn: ").expect("a warn line");
        assert!(
            last["result"]["warnings"]
                .as_array()
                .is_some_and(|ws| ws.iter().any(|x| x == w)),
            "{w}"
        );
    }
    assert!(
        added.contains("are left out as protected: within the last 5000 tokens"),
        "{added}"
    );
    let ids: Vec<&str> = last["result"]["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .map(|b| b["blockId"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["b16", "b17", "b18"]);
    for f in [
        "tier1/b16_m00124-m00129.md",
        "tier1/b17_m00132-m00137.md",
        "tier1/b18_m00140-m00145.md",
    ] {
        let a = String::from_utf8(cat(&m.at(&format!("sessions/{SID}/{f}")))).expect("utf8");
        assert!(a.starts_with("---\nblock: b1"), "{a}");
        assert!(a.contains("\ntopic: oracle batch "), "{a}");
    }
    let view = String::from_utf8(cat(&m.at(&format!("sessions/{SID}/view.jsonl")))).expect("utf8");
    for b in ["b16", "b17", "b18"] {
        assert!(
            view.contains(&format!("{{\"block\":\"{b}\",\"tier\":1,")),
            "{b}"
        );
    }
    let state: serde_json::Value =
        serde_json::from_slice(&cat(&m.at(&format!("sessions/{SID}/state.json")))).expect("json");
    assert_eq!(state["nextBlockId"], 19);
    assert_eq!(state["blocks"].as_array().map(Vec::len), Some(18));
}

/// A session whose transcript was just written looks live (SPEC 6): a `compress` write fails
/// with EBUSY, and ctl says why; `compress!` runs anyway.
#[test]
fn a_live_session_answers_ebusy_and_compress_bang_runs() {
    let Some(m) = mount_example() else {
        return;
    };
    let ctl = m.at(&format!("sessions/{SID}/ctl"));
    let input = common::norma_data().join("oracle/s2-tier1/compress-1/input.json");
    // The runtime writes to the transcript.
    ok(&tool(
        "touch",
        &[os(&m.root().join(format!("transcripts/{SID}.jsonl")))],
    ));
    let before = snapshot(m.root());
    let e = err(&sh(&format!(
        "echo \"compress $(cat '{}')\" > '{}'",
        input.display(),
        ctl.display()
    )));
    assert!(e.contains("Device or resource busy"), "{e}");
    assert_eq!(snapshot(m.root()), before, "nothing written");
    let results = common::lines(&cat(&ctl));
    let last = results.last().expect("a result");
    assert_eq!(last["ok"], false);
    let why = last["message"].as_str().expect("message");
    assert!(
        why.contains("looks live") && why.contains("compress!"),
        "{why}"
    );
    let status: serde_json::Value =
        serde_json::from_slice(&cat(&m.at(&format!("sessions/{SID}/status.json")))).expect("json");
    assert!(status.to_string().contains("live"), "{status}");
    // Forced.
    ok(&sh(&format!(
        "echo \"compress! $(cat '{}')\" > '{}'",
        input.display(),
        ctl.display()
    )));
    let last = common::lines(&cat(&ctl)).pop().expect("a result");
    assert_eq!(last["ok"], true, "{last}");
    assert!(last["command"]
        .as_str()
        .is_some_and(|c| c.starts_with("compress! {")));
    let state: serde_json::Value =
        serde_json::from_slice(&cat(&m.at(&format!("sessions/{SID}/state.json")))).expect("json");
    assert_eq!(state["blocks"].as_array().map(Vec::len), Some(18));
    // rebuild answers EBUSY too; rebuild! runs.
    let e = err(&sh(&format!("echo rebuild > '{}'", ctl.display())));
    assert!(e.contains("Device or resource busy"), "{e}");
    ok(&sh(&format!("echo 'rebuild!' > '{}'", ctl.display())));
}

#[test]
fn inodes_stay_after_the_kernel_forgets_them() {
    let cfg = Config {
        ttl_ms: 50,
        ..Config::default()
    };
    let Some(m) = mount(example_root(), cfg, MountOptions::default()) else {
        return;
    };
    let p = m.at(&format!("sessions/{SID}/tier1/b1_m00004-m00009.md"));
    let first = stat("%i", &p);
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(stat("%i", &p), first, "same path, same inode after the TTL");
}

#[test]
fn memory_edits_with_sed_and_redirection() {
    for passthrough in [true, false] {
        let Some(m) = mount(
            example_root(),
            Config::default(),
            MountOptions {
                passthrough,
                ..MountOptions::default()
            },
        ) else {
            return;
        };
        let file = m.at("memory/build-system.md");
        let backing = m.root().join("memory/build-system.md");
        ok(&tool(
            "sed",
            &[
                OsStr::new("-i"),
                OsStr::new("s/how to build and test this repo/how to build, test and lint it/"),
                os(&file),
            ],
        ));
        let text = std::fs::read_to_string(&backing).expect("backing");
        assert!(
            text.contains("description: how to build, test and lint it\n"),
            "{text}"
        );
        assert_eq!(cat(&file), text.as_bytes());

        ok(&sh(&format!(
            "printf -- '---\\nname: Release train\\ndescription: Releases leave on Tuesdays\\ntype: project\\n---\\nBody.\\n' > '{}'",
            m.at("memory/release-train.md").display()
        )));
        let created = std::fs::read_to_string(m.root().join("memory/release-train.md"))
            .expect("created in the backing directory");
        assert!(
            created.starts_with("---\nname: Release train\n"),
            "{created}"
        );

        let index = String::from_utf8(cat(&m.at("memory/MEMORY.md"))).expect("utf8");
        assert!(
            index.contains("- [Release train](release-train.md) — Releases leave on Tuesdays\n"),
            "{index}"
        );
        assert!(
            index.contains("- [Build system](build-system.md) — how to build, test and lint it\n"),
            "{index}"
        );
        assert!(index.starts_with("# Memory\n\n"), "{index}");

        // fsync through the mount reaches the backing file (and fsyncdir its directory).
        if have("python3") {
            ok(&Command::new("python3")
                .arg("-c")
                .arg(
                    "import os,sys\n\
                     fd=os.open(sys.argv[1], os.O_WRONLY|os.O_APPEND)\n\
                     os.write(fd, b'More.\\n'); os.fsync(fd); os.fdatasync(fd); os.close(fd)\n\
                     d=os.open(sys.argv[2], os.O_RDONLY); os.fsync(d); os.close(d)",
                )
                .arg(m.at("memory/release-train.md"))
                .arg(m.at("memory"))
                .output()
                .expect("python3"));
            assert!(
                std::fs::read_to_string(m.root().join("memory/release-train.md"))
                    .expect("read")
                    .ends_with("Body.\nMore.\n")
            );
        }
    }
}

/// A session of 24 messages whose first 22 may be compressed.
fn compressible_root() -> (tempfile::TempDir, Config) {
    let root = tempfile::tempdir().expect("tempdir");
    let mut s = Session::new("s1");
    for i in 0..12 {
        s.user(&format!("question {i}: {}", text_of(40, 'q')));
        s.assistant(&format!("answer {i}: {}", text_of(40, 'a')));
    }
    write_session(root.path(), &s);
    std::fs::create_dir_all(root.path().join("memory")).expect("mkdir");
    std::fs::create_dir_all(root.path().join("noa")).expect("mkdir");
    let mut cfg = Config::default();
    cfg.noa.protect_recent_messages = 2;
    cfg.noa.protect_recent_tokens = 0;
    cfg.noa.min_range_chars = 0;
    // Written just now: not live for this test (the live session has its own test).
    cfg.noa.live_seconds = 0;
    (root, cfg)
}

#[test]
fn ctl_through_the_shell() {
    let (root, cfg) = compressible_root();
    let Some(m) = mount(root, cfg, MountOptions::default()) else {
        return;
    };
    let ctl = m.at("sessions/s1/ctl");
    let view = m.at("sessions/s1/view.jsonl");

    ok(&sh(&format!(
        "echo 'compress m00003 m00010 The user asked eight questions about q and got answers.' > '{}'",
        ctl.display()
    )));
    let lines = common::lines(&cat(&view));
    let block = lines
        .iter()
        .find(|l| l["block"] == "b1")
        .expect("a block line in view.jsonl");
    assert_eq!(
        (block["tier"].as_u64(), block["range"].as_str()),
        (Some(1), Some("m00003-m00010"))
    );
    assert!(
        !lines.iter().any(|l| l["refs"]
            .as_array()
            .is_some_and(|r| r.contains(&serde_json::json!("m00005")))),
        "m00005 is compressed"
    );
    assert!(m.root().join("noa/s1/tier1/b1_m00003-m00010.md").is_file());
    assert!(ok(&tool("ls", &[os(&m.at("sessions/s1/tier1"))])).contains("b1_m00003-m00010.md"));
    // The summary names its archive; raw/ shows the originals of the range.
    let summary = block["message"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(
        summary.contains("<noa-archive block=\"b1\" tier=\"1\" range=\"m00003-m00010\""),
        "{summary}"
    );
    let raw = String::from_utf8(cat(&m.at("sessions/s1/raw/m00003-m00010.md"))).expect("utf8");
    assert!(raw.contains("## m00005 · user"), "{raw}");

    // A bad command fails in the shell with EINVAL and changes nothing.
    let before = snapshot(m.root());
    let e = err(&sh(&format!("echo nonsense > '{}'", ctl.display())));
    assert!(e.contains("Invalid argument"), "{e}");
    let e = err(&sh(&format!(
        "echo 'compress m00023 m00024 too late: the tail is protected, nothing is left to take' > '{}'",
        ctl.display()
    )));
    assert!(e.contains("Invalid argument"), "{e}");
    assert_eq!(snapshot(m.root()), before, "failed commands change nothing");

    // A fresh handle reads the latest results as JSON lines.
    let results = common::lines(&cat(&ctl));
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0]["ok"], true);
    assert_eq!(
        results[0]["command"]
            .as_str()
            .map(|c| c.starts_with("compress m00003")),
        Some(true)
    );
    assert_eq!(results[1]["ok"], false);
    assert_eq!(results[1]["command"], "nonsense");
    for r in &results {
        for k in ["seq", "at", "command", "ok", "message", "result"] {
            assert!(r.get(k).is_some(), "{k} in {r}");
        }
    }

    // The root ctl answers help.
    ok(&sh(&format!("echo help > '{}'", m.at("ctl").display())));
}

/// The shell patterns of scripts on ctl (SPEC 6): a read-write descriptor reads its results
/// from their start; a failure stops what the shell writes line by line after it; `st_size`
/// is what a fresh open reads, so `tar` copies it whole.
#[test]
fn ctl_for_shell_scripts() {
    let (root, cfg) = compressible_root();
    let Some(m) = mount(root, cfg, MountOptions::default()) else {
        return;
    };
    let ctl = m.at("sessions/s1/ctl");
    let c = ctl.display();

    // `echo 'compress …' > ctl; tail -n 1 ctl`: the writer's own result, naming its pid.
    let out = ok(&sh(&format!(
        "echo 'compress m00003 m00010 The user asked eight questions about q and got answers.' > '{c}'; echo $$; tail -n 1 '{c}'"
    )));
    let (pid, last) = out.split_once('\n').expect("pid, then the result");
    let result = &common::lines(last.as_bytes())[0];
    assert_eq!(result["ok"], true, "{out}");
    assert_eq!(result["pid"].to_string(), pid, "{out}");
    assert_eq!(result["result"]["blocks"][0]["blockId"], "b1", "{out}");

    // One write is one batch: a line that is no command refuses all of it.
    let before = snapshot(m.root());
    let e = err(&sh(&format!(
        "printf 'help\\nfrob\\nrebuild\\n' | cat > '{c}'"
    )));
    assert!(e.contains("Invalid argument"), "{e}");
    let results = common::lines(&cat(&ctl));
    let last = results.last().expect("a result");
    assert_eq!(last["ok"], false, "{results:?}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.contains("none of this write was run")),
        "{last}"
    );
    assert_eq!(snapshot(m.root()), before, "nothing of the batch ran");

    // A write of blank lines is answered (no error: a blank line between commands is none).
    ok(&sh(&format!("printf '\\n' > '{c}'")));
    let results = common::lines(&cat(&ctl));
    let last = results.last().expect("a result");
    assert_eq!(last["ok"], true, "{last}");
    assert_eq!(last["command"], "", "{last}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("an empty write: no command in it, nothing was run")),
        "{last}"
    );

    // The shell's own `printf` writes line by line: each line is a batch of its own, and
    // one that fails does not stop the next.
    let e = err(&sh(&format!("printf 'help\\nfrob\\nhelp\\n' > '{c}'")));
    assert!(e.contains("Invalid argument"), "{e}");
    let results = common::lines(&cat(&ctl));
    let last: Vec<(String, bool)> = results[results.len() - 3..]
        .iter()
        .map(|r| {
            (
                r["command"].as_str().unwrap_or("").to_string(),
                r["ok"] == true,
            )
        })
        .collect();
    assert_eq!(
        last,
        [
            ("help".to_string(), true),
            ("frob".to_string(), false),
            ("help".to_string(), true)
        ],
        "{results:?}"
    );

    // st_size is what a fresh open reads; tar copies that.
    let fresh = cat(&ctl);
    let size = ok(&tool(
        "stat",
        &[OsStr::new("-c"), OsStr::new("%s"), os(&ctl)],
    ));
    assert_eq!(size.trim(), fresh.len().to_string());
    let copied = ok(&sh(&format!(
        "tar -C '{}' -cf - ctl | tar -xOf -",
        m.at("sessions/s1").display()
    )));
    assert_eq!(copied.as_bytes(), &fresh[..]);
}

/// A file created in `memory/` gets the caller's mode and umask (pjdfstest open/02), not the
/// mount's.
#[test]
fn memory_files_are_created_with_the_callers_mode_and_umask() {
    let Some(m) = mount(example_root(), Config::default(), MountOptions::default()) else {
        return;
    };
    let mem = m.at("memory");
    for (umask, name, how, want) in [
        (
            "0",
            "n1.md",
            "python3 -c 'import os; os.close(os.open(\"n1.md\", os.O_CREAT|os.O_WRONLY, 0o620))'",
            "620",
        ),
        ("027", "n2.md", "touch n2.md", "640"),
        ("077", "n3.md", "echo hi > n3.md", "600"),
        ("002", "n4.md", "touch n4.md", "664"),
    ] {
        let out = ok(&sh(&format!(
            "cd '{}' && umask {umask} && {how} && stat -c %a {name}",
            mem.display()
        )));
        assert_eq!(out.trim(), want, "umask {umask}: {how}");
        let real = std::fs::metadata(m.root().join("memory").join(name)).expect("made");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(format!("{:o}", real.permissions().mode() & 0o7777), want);
    }
}

/// `tail -f view.jsonl` follows a live session: an appended message shows without reopening.
#[test]
fn tail_f_follows_the_view_of_a_live_session() {
    let Some(m) = mount(example_root(), Config::default(), MountOptions::default()) else {
        return;
    };
    let sid = "s1-small";
    let view = m.at(&format!("sessions/{sid}/view.jsonl"));
    let out = m.root().join("tail.out");
    let mut tail = Command::new("tail")
        .args([
            OsStr::new("-f"),
            OsStr::new("-s"),
            OsStr::new("0.2"),
            os(&view),
        ])
        .stdout(std::fs::File::create(&out).expect("out"))
        .spawn()
        .expect("tail");
    let has = |needle: &str| {
        within(Duration::from_secs(10), || {
            String::from_utf8_lossy(&std::fs::read(&out).unwrap_or_default()).contains(needle)
        })
    };
    let first = has("\"role\":\"user\"");
    common::append_user_message(
        &m.root().join(format!("transcripts/{sid}.jsonl")),
        sid,
        "Seen by tail -f.",
    );
    let followed = has("Seen by tail -f.");
    let _ = tail.kill();
    let _ = tail.wait();
    assert!(first, "tail printed the view");
    assert!(followed, "tail -f showed the appended message");
}

#[test]
fn synthetic_files_refuse_writes() {
    let Some(m) = mount_example() else {
        return;
    };
    let before = snapshot(m.root());
    for f in [
        format!("sessions/{SID}/view.jsonl"),
        format!("sessions/{SID}/audit.txt"),
        "memory/MEMORY.md".to_string(),
        "audit.txt".to_string(),
    ] {
        let e = err(&sh(&format!("echo x > '{}'", m.at(&f).display())));
        assert!(e.contains("Permission denied"), "{f}: {e}");
        let e = err(&sh(&format!("echo x >> '{}'", m.at(&f).display())));
        assert!(e.contains("Permission denied"), "{f}: {e}");
    }
    let e = err(&tool(
        "touch",
        &[os(&m.at(&format!("sessions/{SID}/new-file")))],
    ));
    assert!(e.contains("Permission denied"), "{e}");
    let e = err(&tool("mkdir", &[os(&m.at("memory/sub"))]));
    assert!(e.contains("Operation not permitted"), "{e}");
    assert_eq!(snapshot(m.root()), before);
}

/// The flags statvfs(2) gives for `p`.
fn nix_statvfs(p: &Path) -> libc::c_ulong {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid C string and a zeroed struct statvfs fills.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0, "statvfs");
    s.f_flag
}

#[test]
fn read_only_mount() {
    let Some(m) = mount(
        example_root(),
        Config::default(),
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    ) else {
        return;
    };
    let before = snapshot(m.root());
    let mem = m.at("memory/build-system.md");
    let e = err(&sh(&format!("echo x >> '{}'", mem.display())));
    assert!(e.contains("Read-only file system"), "{e}");
    let e = err(&tool(
        "sed",
        &[OsStr::new("-i"), OsStr::new("s/a/b/"), os(&mem)],
    ));
    assert!(e.contains("Read-only file system"), "{e}");
    let e = err(&sh(&format!(
        "echo x > '{}'",
        m.at("memory/new.md").display()
    )));
    assert!(e.contains("Read-only file system"), "{e}");
    let e = err(&tool("rm", &[os(&mem)]));
    assert!(e.contains("Read-only file system"), "{e}");
    let ctl = m.at(&format!("sessions/{SID}/ctl"));
    let e = err(&sh(&format!("echo rebuild > '{}'", ctl.display())));
    assert!(e.contains("Read-only file system"), "{e}");
    // The kernel's read-only flag: `mount` and `findmnt` list it `ro`, and statvfs says so.
    let opts = ok(&tool(
        "findmnt",
        &[OsStr::new("-no"), OsStr::new("OPTIONS"), os(m.mnt())],
    ));
    assert!(opts.split(',').any(|o| o.trim() == "ro"), "{opts}");
    let vfs = nix_statvfs(m.mnt());
    assert!(vfs & libc::ST_RDONLY != 0, "statvfs flags {vfs:#x}");
    // `help` cannot be written there, so it is there to read: ctl's first result (SPEC 6's
    // "help still works", a normafs choice for a kernel-read-only mount).
    let text = String::from_utf8_lossy(&cat(&ctl)).into_owned();
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().unwrap_or_default()).expect("a result line");
    assert_eq!(first["command"], "help");
    assert_eq!(first["ok"], true);
    let message = first["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("rebuild") && message.contains("this mount is read-only"),
        "{message}"
    );
    let root_ctl = String::from_utf8_lossy(&cat(&m.at("ctl"))).into_owned();
    assert!(root_ctl.contains("reindex-memory"), "{root_ctl}");
    // Reading still works.
    assert!(!cat(&mem).is_empty());
    assert_eq!(snapshot(m.root()), before);
}

#[test]
fn changes_in_the_backing_dirs_show_at_once() {
    // A long TTL: anything fresh within a second was invalidated through inotify.
    let cfg = Config {
        ttl_ms: 60_000,
        ..Config::default()
    };
    let Some(m) = mount(
        example_root(),
        cfg,
        MountOptions {
            passthrough: false,
            ..MountOptions::default()
        },
    ) else {
        return;
    };
    let s = m.at(&format!("sessions/{SID}"));
    let root = m.root().to_path_buf();
    let transcript = root.join(format!("transcripts/{SID}.jsonl"));
    let size0 = stat("%s", &s.join("transcript.jsonl"));
    let view0 = cat(&s.join("view.jsonl"));
    let mem = m.at("memory/ci-dashboard.md");
    assert!(!cat(&mem).is_empty());

    // The runtime appends a message.
    let line = common::chained_user_line(&transcript, SID, "Appended while mounted.");
    let t0 = Instant::now();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&transcript)
            .expect("open");
        writeln!(f, "{line}").expect("append");
    }
    let want = std::fs::metadata(&transcript)
        .expect("meta")
        .len()
        .to_string();
    assert_ne!(want, size0);
    assert!(
        within(Duration::from_secs(1), || stat(
            "%s",
            &s.join("transcript.jsonl")
        ) == want),
        "transcript.jsonl size follows within a second"
    );
    let view1 = cat(&s.join("view.jsonl"));
    assert_ne!(view1, view0);
    assert!(String::from_utf8_lossy(&view1).contains("Appended while mounted."));
    let tail = ok(&tool(
        "tail",
        &[
            OsStr::new("-n"),
            OsStr::new("1"),
            os(&s.join("transcript.jsonl")),
        ],
    ));
    assert!(tail.contains("Appended while mounted."), "{tail}");
    assert!(t0.elapsed() < Duration::from_secs(5));

    // A memory file deleted and another rewritten behind the mount's back.
    std::fs::remove_file(root.join("memory/ci-dashboard.md")).expect("rm");
    assert!(
        within(Duration::from_secs(1), || !mem.exists()),
        "a deleted memory disappears"
    );
    let prefs = m.at("memory/prefers-small-prs.md");
    assert!(!cat(&prefs).is_empty());
    let tmp = root.join("memory/.prefs.tmp");
    std::fs::write(&tmp, "---\nname: Prefers small PRs\ndescription: Rewritten\n---\nlonger body than before, much longer\n").expect("write");
    std::fs::rename(&tmp, root.join("memory/prefers-small-prs.md")).expect("rename");
    assert!(
        within(Duration::from_secs(1), || String::from_utf8_lossy(&cat(
            &prefs
        ))
        .ends_with("much longer\n")),
        "a replaced memory shows its new content"
    );

    // A new session and a new archive.
    std::fs::copy(&transcript, root.join("transcripts/s9-copy.jsonl")).expect("copy");
    assert!(within(Duration::from_secs(1), || m
        .at("sessions/s9-copy")
        .is_dir()));
    std::fs::write(root.join(format!("noa/{SID}/tier1/extra.md")), "x").expect("write");
    assert!(within(Duration::from_secs(1), || ok(&tool(
        "ls",
        &[os(&s.join("tier1"))]
    ))
    .contains("extra.md")));
    assert!(
        m.handle().watches() > 3,
        "the session's directories are watched"
    );
}

#[test]
fn a_thousand_sessions() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("transcripts");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for i in 0..1000 {
        std::fs::write(dir.join(format!("s{i:04}.jsonl")), "").expect("write");
    }
    let Some(m) = mount(root, Config::default(), MountOptions::default()) else {
        return;
    };
    let out = ok(&tool("ls", &[os(&m.at("sessions"))]));
    let names: Vec<&str> = out.lines().collect();
    assert_eq!(names.len(), 1000);
    assert_eq!((names[0], names[999]), ("s0000", "s0999"));
    let out = ok(&tool("ls", &[OsStr::new("-l"), os(&m.at("sessions"))]));
    assert_eq!(out.lines().filter(|l| l.starts_with('d')).count(), 1000);
}

// ---- the binary ---------------------------------------------------------------------------

/// `normafs mount` as a child process; on drop: SIGTERM, wait, and detach if still mounted.
struct BinMount {
    child: Option<Child>,
    mnt: PathBuf,
    /// stderr lines read so far.
    lines: Vec<String>,
    stderr: Option<BufReader<std::process::ChildStderr>>,
}

impl BinMount {
    fn start(args: &[&OsStr], mnt: &Path) -> BinMount {
        BinMount::start_in(Path::new("."), args, mnt)
    }

    /// [`BinMount::start`] with `cwd` as the working directory (for relative names).
    fn start_in(cwd: &Path, args: &[&OsStr], mnt: &Path) -> BinMount {
        let mut child = Command::new(env!("CARGO_BIN_EXE_normafs"))
            .current_dir(cwd)
            .arg("mount")
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn normafs mount");
        let stderr = child.stderr.take().map(BufReader::new);
        let mut b = BinMount {
            child: Some(child),
            mnt: mnt.to_path_buf(),
            lines: Vec::new(),
            stderr,
        };
        // Up to the start line (warnings may come first); stops at the end of stderr.
        for _ in 0..20 {
            let l = b.read_line();
            if l.is_empty() || l.starts_with("normafs: mounted ") {
                break;
            }
        }
        b
    }

    /// Read one stderr line (blocking); empty at end of stream.
    fn read_line(&mut self) -> String {
        let mut l = String::new();
        if let Some(r) = &mut self.stderr {
            let _ = r.read_line(&mut l);
        }
        self.lines.push(l.clone());
        l
    }

    fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: sends a signal to our own child.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// Wait for the exit (at most 10 s); the status and the rest of stderr.
    fn wait(&mut self) -> (std::process::ExitStatus, String) {
        let mut c = self.child.take().expect("running");
        let end = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = c.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > end {
                let _ = c.kill();
                break c.wait().expect("wait");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = String::new();
        if let Some(r) = &mut self.stderr {
            let _ = std::io::Read::read_to_string(r, &mut rest);
        }
        (status, rest)
    }
}

impl Drop for BinMount {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.signal(libc::SIGTERM);
            let _ = self.wait();
        }
        common::force_unmount(&self.mnt);
    }
}

#[test]
fn the_start_and_end_lines_name_relative_paths_absolutely() {
    if !common::fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    common::copy_tree(
        &common::norma_data().join("corpus"),
        &dir.path().join("root"),
    );
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    // A session table with a typo in its id: the mount says so among its first lines.
    let settings_file = dir.path().join("root/.normafs.toml");
    std::fs::write(&settings_file, "[sessions.\"s1-smal\"]\nwindow = 9000\n").expect("write");
    let mut b = BinMount::start_in(dir.path(), &[OsStr::new("root"), OsStr::new("mnt")], &mnt);
    let first = b.lines.last().cloned().unwrap_or_default();
    assert!(
        first.starts_with(&format!(
            "normafs: mounted {} at {} (pid ",
            dir.path().join("root").display(),
            mnt.display()
        )),
        "{first:?}"
    );
    let settings = b.read_line();
    assert!(
        settings.contains(&format!(
            "`normafs config {}`",
            dir.path().join("root").display()
        )),
        "{settings}"
    );
    let warning = b.read_line();
    assert_eq!(
        warning.trim_end(),
        format!(
            "normafs: warning: [sessions.\"s1-smal\"] in {} names no session of this root, so \
             it applies to nothing; the nearest session id is \"s1-small\"",
            settings_file.display()
        )
    );
    b.signal(libc::SIGTERM);
    let (status, rest) = b.wait();
    assert!(status.success(), "{rest}");
    assert!(
        rest.contains(&format!("normafs: unmounted {}", mnt.display())),
        "{rest}"
    );
}

#[test]
fn the_binary_mounts_and_unmounts_on_signals() {
    for (sig, extra) in [(libc::SIGTERM, None), (libc::SIGINT, Some("--passthrough"))] {
        let root = example_root();
        let mnt = tempfile::tempdir().expect("tempdir");
        let mut args = vec![os(root.path()), os(mnt.path()), OsStr::new("--verbose")];
        if let Some(e) = extra {
            args.push(OsStr::new(e));
        }
        let mut b = BinMount::start(&args, mnt.path());
        let first = b.lines.last().cloned().unwrap_or_default();
        assert!(
            first.starts_with(&format!(
                "normafs: mounted {} at {} (pid {}, passthrough: ",
                root.path().display(),
                mnt.path().display(),
                b.child.as_ref().map_or(0, Child::id)
            )) && first.trim_end().ends_with("); Ctrl-C to unmount"),
            "{first:?}"
        );
        // The files the settings came from (none here) and where to see each session's.
        let settings = b.read_line();
        assert!(
            settings.starts_with("normafs: settings from the defaults (no ")
                && settings.contains("`normafs config "),
            "{settings}"
        );
        let via = b.read_line();
        assert!(via.starts_with("normafs: mounted with mount(2)"), "{via}");
        let note = b.read_line();
        assert!(note.starts_with("normafs: passthrough "), "{note}");
        if extra.is_some() {
            // Asked for, as root: the kernel grants it, or the line says why not.
            assert!(!first.contains("passthrough: off (the default"), "{first}");
        } else {
            assert!(
                first.contains("passthrough: off (the default; -o passthrough for it))"),
                "{first}"
            );
            assert!(note.contains("the kernel opens files itself"), "{note}");
        }
        assert!(is_mounted(mnt.path()));
        assert_eq!(
            cat(&mnt.path().join(format!("sessions/{SID}/transcript.jsonl"))),
            std::fs::read(root.path().join(format!("transcripts/{SID}.jsonl"))).expect("read")
        );
        b.signal(sig);
        let (status, rest) = b.wait();
        assert!(status.success(), "exit {status:?}: {rest}");
        assert!(rest.contains("normafs: unmounted"), "{rest}");
        assert!(!is_mounted(mnt.path()), "unmounted after signal {sig}");
    }
}

/// After `kill -9` the kernel keeps a dead mount (`Transport endpoint is not connected`); the
/// next `normafs mount` says so and gives the command that clears it, which works.
#[test]
fn a_dead_mount_after_kill_9_is_named_with_the_command_that_clears_it() {
    if !fuse_available() {
        return;
    }
    let root = example_root();
    let mnt = tempfile::tempdir().expect("tempdir");
    let mut b = BinMount::start(&[os(root.path()), os(mnt.path())], mnt.path());
    assert!(is_mounted(mnt.path()));
    b.signal(libc::SIGKILL);
    let _ = b.wait();
    assert!(is_mounted(mnt.path()), "the kernel keeps the dead mount");
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args([OsStr::new("mount"), os(root.path()), os(mnt.path())])
        .output()
        .expect("run normafs mount");
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{e}");
    let cmd = format!("umount -l '{}'", mnt.path().display());
    assert!(e.contains("Transport endpoint is not connected"), "{e}");
    assert!(e.contains(&format!("run `{cmd}`")), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    // The advice works (as root: this test runs as root; an ordinary user is told
    // `fusermount3 -u`).
    assert!(sh(&cmd).status.success());
    assert!(!is_mounted(mnt.path()));
}

#[test]
fn the_binary_refuses_bad_mount_points() {
    if !fuse_available() {
        return;
    }
    let root = example_root();
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").expect("write");
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).expect("mkdir");
    std::fs::write(full.join("x"), "x").expect("write");
    let cases: Vec<(PathBuf, PathBuf, &str)> = vec![
        (
            tmp.path().join("nope"),
            tmp.path().join("m1"),
            "is not a directory",
        ),
        (
            root.path().to_path_buf(),
            tmp.path().join("missing"),
            "does not exist",
        ),
        (
            root.path().to_path_buf(),
            file.clone(),
            "is not a directory",
        ),
        (root.path().to_path_buf(), full.clone(), "is not empty"),
        (
            root.path().to_path_buf(),
            root.path().join("memory"),
            "is not empty",
        ),
    ];
    for (r, m, needle) in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
            .arg("mount")
            .arg(&r)
            .arg(&m)
            .output()
            .expect("run");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{r:?} {m:?}");
        assert_eq!(e.lines().count(), 1, "one line: {e}");
        assert!(
            e.starts_with("normafs: ") && e.contains(needle),
            "{needle}: {e}"
        );
        assert!(!is_mounted(&m));
    }
    let sub = root.path().join("memory/mnt");
    std::fs::create_dir(&sub).expect("mkdir");
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("mount")
        .arg(root.path())
        .arg(&sub)
        .output()
        .expect("run");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("is inside the memory directory"), "{e}");
    // Anywhere else inside the root: whatever walks the root would walk the mount.
    let inside = root.path().join("mnt");
    std::fs::create_dir(&inside).expect("mkdir");
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("mount")
        .arg(root.path())
        .arg(&inside)
        .output()
        .expect("run");
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    assert!(
        e.contains(&format!(
            "mount point {} is inside the session root {}",
            inside.canonicalize().expect("canonical").display(),
            root.path().canonicalize().expect("canonical").display()
        )),
        "{e}"
    );
    assert!(!is_mounted(&inside));
    let o = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .args(["mount", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "--read-only",
        "--passthrough",
        "--verbose",
        "--allow-other",
        "--threads <N>",
        "--transcripts <DIR>",
        "--protect-recent-messages",
        "--config <FILE>",
    ] {
        assert!(help.contains(flag), "{flag} in {help}");
    }
}

/// `normafs demo MNT` as a user runs it: the printed lines work, Ctrl-C cleans everything up.
#[test]
fn the_demo_mounts_an_example_and_cleans_up() {
    if !fuse_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("demo-mnt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("demo")
        .arg(&mnt)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn normafs demo");
    struct Guard(Option<Child>, PathBuf);
    impl Drop for Guard {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                // SAFETY: our own child.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                let _ = c.wait();
            }
            common::force_unmount(&self.1);
        }
    }
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut g = Guard(Some(child), mnt.clone());
    let mut printed = Vec::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l).expect("read") == 0 {
            break;
        }
        let done = l.starts_with("Ctrl-C");
        printed.push(l);
        if done {
            break;
        }
    }
    let text = printed.concat();
    assert!(text.starts_with("normafs demo: 3 sessions from "), "{text}");
    let root = PathBuf::from(
        text.split(" from ")
            .nth(1)
            .and_then(|r| r.split(" mounted at ").next())
            .expect("root"),
    );
    assert!(root.is_dir());
    assert!(is_mounted(&mnt));
    // Every suggested command line that reads works.
    for l in printed.iter().filter(|l| l.starts_with("  ")) {
        let cmd = l.split("  #").next().unwrap_or(l).trim();
        if cmd.starts_with("jq") && !have("jq") {
            continue;
        }
        if cmd.starts_with("less") {
            continue;
        }
        if cmd.starts_with("chromium") {
            // A browser window: the page it opens is there.
            let page = cmd.split_whitespace().last().expect("a page");
            let head = std::fs::read(page).expect("the page");
            assert!(head.starts_with(b"<!DOCTYPE html>"), "{cmd}");
            continue;
        }
        let o = sh(cmd);
        assert!(
            o.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let audit = String::from_utf8(cat(&mnt.join("audit.txt"))).expect("utf8");
    assert!(audit.contains("warn transcript.torn-tail"), "{audit}");
    assert!(audit.contains("warn memory.index-stale"), "{audit}");
    let hint = text
        .lines()
        .find(|l| l.trim_start().starts_with("echo 'compress"))
        .expect("a compress example");
    let ctl = hint.rsplit("> ").next().expect("ctl path").trim();
    let results = String::from_utf8(cat(Path::new(ctl))).expect("utf8");
    assert!(
        results.contains("\"ok\":true") && results.contains("\"command\":\"compress"),
        "{results}"
    );
    let view =
        String::from_utf8(cat(&PathBuf::from(ctl.replace("/ctl", "/view.jsonl")))).expect("utf8");
    assert!(
        view.contains("Summary written by hand"),
        "the new block shows in the view"
    );

    let mut c = g.0.take().expect("child");
    // SAFETY: our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    let status = c.wait().expect("wait");
    assert!(status.success(), "{status:?}");
    assert!(!is_mounted(&mnt));
    assert!(!root.exists(), "the demo root is removed");
    assert!(!mnt.exists(), "the mount point it created is removed");
}

/// An agent whose Read tool sees only the mount (`archive_paths = mount`): from `view.jsonl`
/// alone it reaches every live block's archive (the summary's `path=`) and the originals
/// (`raw/<range>.md` beside the view, and one ref at a time); `view.md` names both inside the
/// mount. Without the setting the view is the runtime's (the test above).
#[test]
fn an_agent_inside_the_mount_follows_summaries_to_archives_and_originals() {
    let text = common::corpus_config_toml("archive_paths = \"mount\"");
    let file = normafs::config::ConfigFile::parse(&text, Path::new("t.toml")).expect("toml");
    let (cfg, _) = Config::build(file, &normafs::config::Settings::default());
    let Some(m) = mount(example_root(), cfg, MountOptions::default()) else {
        return;
    };
    let mnt = m.mnt().canonicalize().expect("mnt");
    let mut followed = 0;
    for sid in common::CORPUS_SESSIONS {
        let dir = m.at(&format!("sessions/{sid}"));
        let view = std::fs::read_to_string(dir.join("view.jsonl")).expect("view");
        let mut live = 0;
        for line in view.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let Some(block) = v["block"].as_str() else {
                continue;
            };
            live += 1;
            let range = v["range"].as_str().expect("range");
            let body = v["message"].to_string();
            let path = body
                .split("path=\\\"")
                .nth(1)
                .and_then(|r| r.split("\\\"").next())
                .unwrap_or_else(|| panic!("{sid} {block}: no path= in {body}"));
            assert!(
                Path::new(path).starts_with(&mnt),
                "{sid} {block}: {path} is not inside the mount {}",
                mnt.display()
            );
            let archive = std::fs::read_to_string(path).expect("the archive through the mount");
            assert!(
                archive.starts_with(&format!("---\nblock: {block}\n"))
                    && archive.contains(&format!("range: {range}\n")),
                "{sid} {block}: {path} is not its archive"
            );
            let raw = std::fs::read_to_string(dir.join(format!("raw/{range}.md")))
                .unwrap_or_else(|e| panic!("{sid}: raw/{range}.md: {e}"));
            let (first, last) = range.split_once('-').expect("a range");
            assert!(
                raw.contains(first) && raw.contains(last),
                "{sid}: raw/{range}.md"
            );
            let one = std::fs::read_to_string(dir.join(format!("raw/{first}.md")))
                .unwrap_or_else(|e| panic!("{sid}: raw/{first}.md: {e}"));
            assert!(one.contains(first) && !one.contains(last), "raw/{first}.md");
            followed += 1;
        }
        let md = std::fs::read_to_string(dir.join("view.md")).expect("view.md");
        let named: Vec<&str> = md.lines().filter(|l| l.starts_with("Archive: `")).collect();
        assert_eq!(
            named.len(),
            live,
            "{sid}: view.md names each summary's archive"
        );
        for l in named {
            for p in l.split('`').skip(1).step_by(2) {
                assert!(Path::new(p).starts_with(&mnt), "{sid}: {l}");
                assert!(std::fs::metadata(p).is_ok(), "{sid}: {p} in view.md");
            }
        }
    }
    assert!(followed >= 35, "the corpus has live blocks: {followed}");
}

/// The type of the mount at `mnt` in this process's mount table, if it is mounted.
fn mount_type(mnt: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let want = mnt.to_string_lossy().into_owned();
    table.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (left.split(' ').nth(4)? == want).then(|| right.split(' ').next().unwrap_or("").to_string())
    })
}

/// A root mount made with mount(2) has the type `fusermount3`'s mounts have, `fuse.normafs`:
/// `findmnt -t fuse.normafs` lists it, and it unmounts cleanly.
#[test]
fn a_root_mount_is_of_type_fuse_normafs() {
    let Some(m) = mount(example_root(), Config::default(), MountOptions::default()) else {
        return;
    };
    assert_eq!(mount_type(m.mnt()).as_deref(), Some("fuse.normafs"));
    let o = Command::new("findmnt")
        .args(["-n", "-o", "TARGET", "-t", "fuse.normafs"])
        .arg(m.mnt())
        .output()
        .expect("findmnt");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        m.mnt().to_string_lossy()
    );
    let mut m = m;
    m.unmount().expect("unmount");
    assert_eq!(mount_type(m.mnt()), None, "unmounted");
}
