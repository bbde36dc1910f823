//! Every computed output of the shared corpus, the timeline oracle's sessions and a `gen` root
//! is byte for byte what it was when `tests/data/golden-outputs.txt` was written (issue 41: a
//! leaner representation must not change a byte). The file lists each output's SHA-256, its
//! size and what made it; a change to any output fails here with the outputs that changed.
//!
//! When an output changes on purpose (a rule fixed against the oracle), rewrite the file with
//! `NORMAFS_GOLDEN_WRITE=1 cargo test --test golden` and say why in the commit. To check
//! another build against the file (an older commit's, say), name its binary in
//! `NORMAFS_GOLDEN_BIN`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::{copy_tree, corpus_config_toml, norma_data, set_tree_mtime, CORPUS_SESSIONS};
use sha2::{Digest, Sha256};

const GOLDEN: &str = "tests/data/golden-outputs.txt";

/// Run `normafs ARGS`, expecting exit 0 (or 1 for `audit`, which exits 1 on errors); the root's
/// temporary path in the output is replaced by `ROOT` so the bytes do not depend on it.
fn output(root: &Path, args: &[&str]) -> Vec<u8> {
    let bin = std::env::var_os("NORMAFS_GOLDEN_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_normafs").into());
    let out = Command::new(bin)
        .args(args)
        .env("XDG_CONFIG_HOME", root.join(".no-user-config"))
        .output()
        .expect("run normafs");
    let audit = args[0] == "audit";
    assert!(
        out.status.success() || (audit && out.status.code() == Some(1)),
        "normafs {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = out.stdout;
    let at = root.to_str().expect("utf-8 path").as_bytes();
    let mut masked = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(at) {
            masked.extend_from_slice(b"ROOT");
            i += at.len();
        } else {
            masked.push(text[i]);
            i += 1;
        }
    }
    masked
}

/// The outputs of one session: its view (JSON lines and Markdown), its materialized history,
/// its timeline (lines and picture), its audit, and its views at a third and two thirds of its
/// messages.
fn session_outputs(
    root: &Path,
    sid: &str,
    settings: &[&str],
    into: &mut BTreeMap<String, Vec<u8>>,
) {
    let r = root.to_str().expect("utf-8 path");
    let with = |cmd: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        a.extend(settings.iter().map(|s| s.to_string()));
        a
    };
    let run = |cmd: &[&str]| {
        let a = with(cmd);
        output(root, &a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    into.insert(format!("{sid} view"), run(&["view", r, sid]));
    into.insert(format!("{sid} view --md"), run(&["view", "--md", r, sid]));
    into.insert(
        format!("{sid} view --materialized"),
        run(&["view", "--materialized", r, sid]),
    );
    let timeline = run(&["timeline", r, sid]);
    let mut requests = timeline.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    let last = requests
        .next_back()
        .and_then(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .and_then(|v| v["messages"].as_u64())
        .unwrap_or(0);
    into.insert(format!("{sid} timeline"), timeline);
    into.insert(
        format!("{sid} timeline --svg"),
        run(&["timeline", "--svg", r, sid]),
    );
    into.insert(format!("{sid} audit"), run(&["audit", r, sid]));
    for n in [last / 3, last * 2 / 3] {
        if n > 0 {
            let n = n.to_string();
            into.insert(
                format!("{sid} view --at {n}"),
                run(&["view", "--at", &n, r, sid]),
            );
        }
    }
}

/// Every output this test pins, by name.
fn all_outputs() -> BTreeMap<String, Vec<u8>> {
    let day_ago = SystemTime::now() - Duration::from_secs(86_400);
    let mut out = BTreeMap::new();

    // The runtime's corpus, with the settings it ran under.
    let corpus = tempfile::tempdir().expect("tempdir");
    copy_tree(&norma_data().join("corpus"), corpus.path());
    set_tree_mtime(corpus.path(), day_ago);
    let cfg = corpus.path().join("corpus.toml");
    std::fs::write(&cfg, corpus_config_toml("")).expect("write config");
    let cfg = cfg.to_str().expect("utf-8").to_string();
    for sid in CORPUS_SESSIONS {
        session_outputs(corpus.path(), sid, &["--config", &cfg], &mut out);
    }

    // The four sessions the runtime's agent loop wrote live, each at its window.
    let live = tempfile::tempdir().expect("tempdir");
    copy_tree(&norma_data().join("timeline/root"), live.path());
    set_tree_mtime(live.path(), day_ago);
    for (sid, window) in [
        ("t1-w9000", "9000"),
        ("t2-w16000", "16000"),
        ("t3-w40000", "40000"),
        ("t4-w40000", "40000"),
    ] {
        session_outputs(live.path(), sid, &["--window", window], &mut out);
    }

    // A generated root with every kind of content gen writes: compressed blocks of all tiers,
    // tool calls and results, thinking.
    let gen = tempfile::tempdir().expect("tempdir");
    let root = gen.path().join("root");
    let r = root.to_str().expect("utf-8").to_string();
    output(
        gen.path(),
        &[
            "gen",
            "--sessions",
            "2",
            "--messages",
            "1500",
            "--seed",
            "41",
            &r,
        ],
    );
    set_tree_mtime(&root, day_ago);
    let paths = normafs::store::root::RootPaths::from_root(&root);
    let sids = normafs::store::root::discover(&paths)
        .expect("the gen root's sessions")
        .sessions;
    assert!(!sids.is_empty(), "gen wrote no session");
    for sid in &sids {
        session_outputs(&root, sid, &[], &mut out);
    }
    out.insert("gen audit".into(), output(&root, &["audit", &r]));
    out.insert(
        "gen timeline --svg".into(),
        output(&root, &["timeline", "--svg", &r]),
    );
    out
}

fn lines_of(outputs: &BTreeMap<String, Vec<u8>>) -> String {
    let mut s = String::new();
    for (name, bytes) in outputs {
        let digest = Sha256::digest(bytes);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        s.push_str(&format!("{hex} {} {name}\n", bytes.len()));
    }
    s
}

#[test]
fn every_output_is_byte_for_byte_as_pinned() {
    let outputs = all_outputs();
    assert!(outputs.len() > 80, "only {} outputs", outputs.len());
    for (name, bytes) in &outputs {
        assert!(!bytes.is_empty(), "{name} printed nothing");
    }
    let now = lines_of(&outputs);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("NORMAFS_GOLDEN_WRITE").is_some() {
        std::fs::write(&path, &now).expect("write golden file");
        return;
    }
    let pinned = std::fs::read_to_string(&path).expect("tests/data/golden-outputs.txt");
    let by_name = |s: &str| -> BTreeMap<String, String> {
        s.lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ' ');
                let (_hex, _size, name) = (it.next()?, it.next()?, it.next()?);
                Some((name.to_string(), l.to_string()))
            })
            .collect()
    };
    let (want, got) = (by_name(&pinned), by_name(&now));
    let mut changed = Vec::new();
    for (name, line) in &want {
        match got.get(name) {
            Some(l) if l == line => {}
            Some(l) => changed.push(format!("changed: {line}\n     now: {l}")),
            None => changed.push(format!("missing: {line}")),
        }
    }
    for (name, line) in &got {
        if !want.contains_key(name) {
            changed.push(format!("new: {line}"));
        }
    }
    assert!(
        changed.is_empty(),
        "{} output(s) differ from {GOLDEN}:\n{}",
        changed.len(),
        changed.join("\n")
    );
}
