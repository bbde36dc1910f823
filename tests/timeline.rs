//! The view at every request (issue 26), against the runtime's own: three sessions its agent
//! loop wrote live, with the view it sent at each request (`tests/data/norma/timeline/`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use normafs::config::NoaConfig;
use normafs::format::state::State;
use normafs::store::root::RootPaths;
use serde_json::Value;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/norma/timeline")
}

/// The requests of session `sid`: one JSON value per line of its trace.
fn trace(sid: &str) -> Vec<Value> {
    let o = Command::new("zcat")
        .arg(data().join(format!("{sid}.trace.jsonl.gz")))
        .output()
        .expect("run zcat");
    assert!(o.status.success());
    String::from_utf8(o.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

fn config(sid: &str) -> NoaConfig {
    let spec: Value = serde_json::from_slice(
        &std::fs::read(data().join(format!("{sid}.spec.json"))).expect("spec"),
    )
    .expect("json");
    NoaConfig {
        window: spec["Config"]["ModelContextLimit"]
            .as_u64()
            .expect("window"),
        ..NoaConfig::default()
    }
}

/// Whether a provider message is a nudge: a user message of one text, worded by the runtime
/// (`⚠️ Context limit reached …`) or by normafs (`[noa] …`), which words its own.
fn is_nudge(m: &Value) -> bool {
    let Some([only]) = m["content"].as_array().map(Vec::as_slice) else {
        return false;
    };
    let text = only["text"].as_str().unwrap_or("");
    m["role"] == "user"
        && only["type"] == "text"
        && (text.starts_with("⚠️ Context limit reached") || text.starts_with("[noa] "))
}

/// `a` around where it first differs from `b`.
fn around(a: Option<&&Value>, b: Option<&&Value>) -> String {
    let (a, b) = (
        a.map_or(String::new(), |v| v.to_string()),
        b.map_or(String::new(), |v| v.to_string()),
    );
    let at = a
        .chars()
        .zip(b.chars())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let from = at.saturating_sub(200);
    format!("…{}…", a.chars().skip(from).take(500).collect::<String>())
}

/// The provider messages of the view at `n` over `state`, the state at `n`.
fn view_at(paths: &RootPaths, sid: &str, cfg: &NoaConfig, state: &State, n: usize) -> Vec<Value> {
    use normafs::noa::session as view;
    let s = normafs::store::session::load(paths, sid);
    let mut msgs = s.messages();
    msgs.truncate(n);
    let (state, _) = normafs::store::session::opened_state(paths, sid, state, cfg);
    let p = view::Projection::new(msgs);
    let bytes = view::view_bytes(
        &p,
        &state,
        cfg,
        &view::runtime_path,
        &mut Default::default(),
    );
    common::lines(&bytes.to_vec())
        .into_iter()
        .map(|mut v| v["message"].take())
        .collect()
}

#[test]
fn the_view_at_every_request_is_the_one_the_runtime_sent() {
    let paths = RootPaths::from_root(&data().join("root"));
    let mut report = Vec::new();
    for sid in ["t1-w9000", "t2-w16000", "t3-w40000"] {
        let cfg = config(sid);
        let requests = trace(sid);
        let points: Vec<usize> = requests
            .iter()
            .map(|r| r["messages"].as_u64().expect("messages") as usize)
            .collect();
        // One replay for every request, as the timeline makes them.
        let states = normafs::store::txn::states_at(&paths, sid, &cfg, &points, chrono::Utc::now())
            .expect("the states");
        let mut wrong = 0;
        let mut same_nudge = 0;
        let mut first_wrong = None;
        for ((r, &n), state) in requests.iter().zip(&points).zip(&states) {
            let got = view_at(&paths, sid, &cfg, state, n);
            let want: Vec<&Value> = r["view"]
                .as_array()
                .expect("view")
                .iter()
                .filter(|m| !is_nudge(m))
                .collect();
            let nudged = got.iter().any(is_nudge);
            if nudged == (r["nudge"] == true) {
                same_nudge += 1;
            } else {
                wrong += 1;
            }
            let got: Vec<&Value> = got.iter().filter(|m| !is_nudge(m)).collect();
            if got != want {
                wrong += 1;
                if first_wrong.is_none() {
                    let at = got
                        .iter()
                        .zip(&want)
                        .position(|(a, b)| a != b)
                        .unwrap_or(got.len().min(want.len()));
                    first_wrong = Some(format!(
                        "{sid} at {n}: {} vs {} messages, first difference at {at}:\n  got  {}\n  want {}",
                        got.len(),
                        want.len(),
                        around(got.get(at), want.get(at)),
                        around(want.get(at), got.get(at)),
                    ));
                }
            }
        }
        report.push(format!(
            "{sid}: {wrong} of {} requests differ (nudge wording aside); the nudge shown or not as the runtime did at {same_nudge}",
            requests.len()
        ));
        if let Some(f) = first_wrong {
            report.push(f);
        }
    }
    let text = report.join("\n");
    eprintln!("{text}");
    assert!(
        report
            .iter()
            .filter(|l| l.contains(" requests differ"))
            .all(|l| l.contains(": 0 of ")),
        "{text}"
    );
}

/// At its last message, each corpus session's view is the one the mount shows (`view.jsonl`,
/// from the state the runtime left): the replay stopped at the end comes to the same view.
#[test]
fn the_view_at_the_end_is_the_sessions_view() {
    use normafs::noa::session as view;
    let paths = RootPaths::from_root(&common::norma_data().join("corpus"));
    for sid in common::CORPUS_SESSIONS {
        let cfg = common::corpus_noa(sid);
        let s = normafs::store::session::load(&paths, sid);
        let n = s.messages().len();
        let (recorded, _) =
            normafs::store::session::opened_state(&paths, sid, &s.state.state, &cfg);
        let p = view::Projection::new(s.messages());
        let today = view::view_bytes(
            &p,
            &recorded,
            &cfg,
            &view::runtime_path,
            &mut Default::default(),
        );
        let want: Vec<Value> = common::lines(&today.to_vec())
            .into_iter()
            .map(|mut v| v["message"].take())
            .collect();
        let state = normafs::store::txn::state_at(&paths, sid, &cfg, n, chrono::Utc::now())
            .expect("the state at the end");
        assert_eq!(view_at(&paths, sid, &cfg, &state, n), want, "{sid}");
    }
}

/// `normafs view --at N`: the same view from the command line; an N past the transcript is a
/// one-line error.
#[test]
fn view_at_from_the_command_line() {
    let sid = "t1-w9000";
    let r = trace(sid).into_iter().nth(24).expect("a request");
    let n = r["messages"].as_u64().expect("messages").to_string();
    let root = data().join("root");
    let run = |at: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_normafs"))
            .arg("view")
            .arg(&root)
            .args([sid, "--window", "9000", "--at", at])
            .output()
            .expect("run normafs view")
    };
    let o = run(&n);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: Vec<Value> = common::lines(&o.stdout)
        .into_iter()
        .map(|mut v| v["message"].take())
        .filter(|m| !is_nudge(m))
        .collect();
    let want: Vec<Value> = r["view"]
        .as_array()
        .expect("view")
        .iter()
        .filter(|m| !is_nudge(m))
        .cloned()
        .collect();
    assert_eq!(got, want);
    let o = run("100000");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("messages, not 100000"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
