//! The view at every request (issue 26), against the runtime's own: four sessions its agent
//! loop wrote live, with the view it sent at each request (`tests/data/norma/timeline/`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use normafs::config::NoaConfig;
use normafs::format::state::State;
use normafs::store::root::RootPaths;
use serde_json::Value;

/// The sessions of the timeline oracle.
const SESSIONS: [&str; 4] = ["t1-w9000", "t2-w16000", "t3-w40000", "t4-w40000"];

fn data() -> PathBuf {
    common::norma_data().join("timeline")
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

/// The kind of nudge a provider message is (`emergency`, `gentle`, `tier2`, `tier3`), when it
/// is one: a user message of one text, worded by the runtime (its nudges all carry its
/// `HOW TO COMPRESS` rules, as its own agent tests find them) or by normafs (`[noa] …`),
/// which words its own.
fn nudge_kind(m: &Value) -> Option<&'static str> {
    let Some([only]) = m["content"].as_array().map(Vec::as_slice) else {
        return None;
    };
    if m["role"] != "user" || only["type"] != "text" {
        return None;
    }
    let text = only["text"].as_str().unwrap_or("");
    if text.contains("\nHOW TO COMPRESS\n") {
        return Some(if text.contains("TIER 2 DISTILLATION") {
            "tier2"
        } else if text.contains("TIER 3 CONDENSATION") {
            "tier3"
        } else if text.contains("⚠️ Context limit reached") {
            "emergency"
        } else {
            "gentle"
        });
    }
    let first = text.strip_prefix("[noa] ")?.lines().next().unwrap_or("");
    Some(if first.contains("tier-1 summaries have piled up") {
        "tier2"
    } else if first.contains("tier-2 summaries have piled up") {
        "tier3"
    } else if first.contains("compress now") {
        "emergency"
    } else {
        "gentle"
    })
}

fn is_nudge(m: &Value) -> bool {
    nudge_kind(m).is_some()
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
    use normafs::noa::views as view;
    let s = normafs::store::session::load(paths, sid);
    let mut msgs = s.messages();
    msgs.truncate(n);
    let (state, _) = normafs::store::session::opened_state(paths, sid, state, cfg);
    let p = view::Projection::new(msgs);
    let bytes = view::Files::new(&p, &state, cfg, sid, &view::runtime_path)
        .bytes(view::Form::View, &mut Default::default());
    common::lines(&bytes.to_vec())
        .into_iter()
        .map(|mut v| v["message"].take())
        .collect()
}

#[test]
fn the_view_at_every_request_is_the_one_the_runtime_sent() {
    let paths = RootPaths::from_root(&data().join("root"));
    let mut report = Vec::new();
    for sid in SESSIONS {
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
            // The nudge: shown where the runtime showed one, and of the same kind.
            let kinds = |v: &[Value]| v.iter().filter_map(nudge_kind).collect::<Vec<_>>();
            let (ours, theirs) = (kinds(&got), kinds(r["view"].as_array().expect("view")));
            assert_eq!(
                !theirs.is_empty(),
                r["nudge"] == true,
                "{sid} at {n}: the trace's nudge flag and its view disagree"
            );
            if ours == theirs {
                same_nudge += 1;
            } else {
                wrong += 1;
                if first_wrong.is_none() {
                    first_wrong = Some(format!(
                        "{sid} at {n}: nudge {ours:?} where the runtime showed {theirs:?}"
                    ));
                }
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
            "{sid}: {wrong} of {} requests differ (nudge wording aside); the nudge shown or not, and its kind, as the runtime did at {same_nudge}",
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
    use normafs::noa::views as view;
    let paths = RootPaths::from_root(&common::norma_data().join("corpus"));
    for sid in common::CORPUS_SESSIONS {
        let cfg = common::corpus_noa(sid);
        let s = normafs::store::session::load(&paths, sid);
        let n = s.messages().len();
        let (recorded, _) =
            normafs::store::session::opened_state(&paths, sid, &s.state.state, &cfg);
        let p = view::Projection::new(s.messages());
        let today = view::Files::new(&p, &recorded, &cfg, sid, &view::runtime_path)
            .bytes(view::Form::View, &mut Default::default());
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

    // t4's tier-2 nudge: shown at the request after 121 messages, as the runtime showed it,
    // not at the one after 119 (issue 38).
    let sid = "t4-w40000";
    for (n, nudged) in [(119, false), (121, true)] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_normafs"))
            .arg("view")
            .arg(&root)
            .args([sid, "--window", "40000", "--at", &n.to_string()])
            .output()
            .expect("run normafs view");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let got: Vec<Value> = common::lines(&o.stdout)
            .into_iter()
            .map(|mut v| v["message"].take())
            .collect();
        let r = trace(sid)
            .into_iter()
            .find(|r| r["messages"] == n)
            .expect("the request");
        let want = r["view"].as_array().expect("view");
        assert_eq!(got.len(), want.len(), "{sid} at {n}");
        let kinds = |v: &[Value]| v.iter().filter_map(nudge_kind).collect::<Vec<_>>();
        assert_eq!(kinds(&got), kinds(want), "{sid} at {n}");
        assert_eq!(kinds(&got) == ["tier2"], nudged, "{sid} at {n}");
    }
}

/// The timeline of a session of the timeline oracle, with its settings.
fn timeline_of(sid: &str) -> normafs::timeline::Timeline {
    let paths = RootPaths::from_root(&data().join("root"));
    normafs::timeline::build(&paths, sid, &config(sid), chrono::Utc::now()).expect("timeline")
}

/// Whether a provider message list holds a cut tool result.
fn has_cut(view: &Value) -> bool {
    view.to_string()
        .contains(normafs::noa::pipeline::TRUNCATION_MARKER)
}

/// The timeline agrees with the views the runtime sent: at each of its requests the
/// timeline has a point, which cut tool results exactly when the runtime's view holds a cut
/// one and showed a nudge exactly when the runtime's did; and the audit's boundedness
/// findings are the timeline's runs, one finding each.
#[test]
fn the_timeline_agrees_with_the_views_the_runtime_sent() {
    let mut over_window = 0;
    let mut cut = 0;
    for sid in SESSIONS {
        let tl = timeline_of(sid);
        let requests = trace(sid);
        for r in &requests {
            let n = r["messages"].as_u64().expect("messages") as usize;
            let p = tl
                .points
                .iter()
                .find(|p| p.request.at == n)
                .unwrap_or_else(|| panic!("{sid}: no point at {n}"));
            assert_eq!(p.request.cut > 0, has_cut(&r["view"]), "{sid} at {n}");
            assert_eq!(
                p.request.nudge.is_some(),
                r["nudge"] == true,
                "{sid} at {n}"
            );
            if p.request.cut > 0 {
                assert!(
                    tl.over_truncate(&p.request),
                    "{sid} at {n}: cut below the threshold"
                );
                cut += 1;
            }
        }
        // Every assistant message answered a request.
        let assistant = requests.len();
        assert!(tl.points.len() >= assistant, "{sid}");
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_normafs"))
            .arg("audit")
            .arg(data().join("root"))
            .arg(sid)
            .args(["--window", &config(sid).window.to_string()])
            .output()
            .expect("run normafs audit");
        let text = String::from_utf8_lossy(&o.stdout);
        let count = |code: &str| text.lines().filter(|l| l.contains(code)).count();
        let windows = tl.runs(|r| tl.over_window(r)).len();
        assert_eq!(count(" view.over-window "), windows, "{sid}:\n{text}");
        assert_eq!(
            count(" view.over-truncate "),
            tl.runs(|r| tl.over_truncate(r)).len(),
            "{sid}:\n{text}"
        );
        let ignored = tl
            .ignored_nudges()
            .iter()
            .filter(|r| r.2 >= normafs::audit::IGNORED_RUN)
            .count();
        assert_eq!(count(" nudge.ignored "), ignored, "{sid}:\n{text}");
        let peak = tl.peak().expect("a peak");
        let line = format!("peak {sid}: {:.1}%", peak.fraction * 100.0);
        assert!(text.contains(&line), "{line} in\n{text}");
        over_window += windows;
        // Without bounds, none of it.
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_normafs"))
            .arg("audit")
            .arg(data().join("root"))
            .args([sid, "--no-bounds"])
            .output()
            .expect("run normafs audit");
        let quiet = String::from_utf8_lossy(&o.stdout);
        assert!(
            !quiet.contains("peak ") && !quiet.contains("view.over-"),
            "{quiet}"
        );
    }
    // The oracle's sessions go past their windows and are cut: the checks above saw both.
    assert!(over_window > 0 && cut > 0, "{over_window} {cut}");
}

/// Right after each recorded Compress call's result, the blocks of the state at that point
/// are the ones the rebuild replay of the history up to there makes.
#[test]
fn after_each_compress_result_the_blocks_are_the_rebuilds() {
    use normafs::noa::compress::Placement;
    use normafs::noa::views as view;
    let roots: Vec<(PathBuf, Vec<(String, NoaConfig)>)> = vec![
        (
            common::norma_data().join("corpus"),
            common::CORPUS_SESSIONS
                .iter()
                .map(|s| (s.to_string(), common::corpus_noa(s)))
                .collect(),
        ),
        (
            data().join("root"),
            SESSIONS
                .iter()
                .map(|s| (s.to_string(), config(s)))
                .collect(),
        ),
    ];
    let mut checked = 0;
    for (root, sessions) in roots {
        let paths = RootPaths::from_root(&root);
        for (sid, cfg) in sessions {
            let s = normafs::store::session::load(&paths, &sid);
            let msgs = s.messages();
            // Positions right after a message holding a Compress result.
            let points: Vec<usize> = msgs
                .iter()
                .enumerate()
                .filter(|(_, m)| {
                    m.content.iter().any(|c| match c {
                        normafs::format::transcript::Content::ToolResult(r) => {
                            msgs.iter().flat_map(|m| m.content.iter()).any(|u| {
                                matches!(u, normafs::format::transcript::Content::ToolUse(u)
                                if u.id == r.tool_use_id && u.name == "Compress")
                            })
                        }
                        _ => false,
                    })
                })
                .map(|(i, _)| i + 1)
                .collect();
            let now = chrono::Utc::now();
            let states =
                normafs::store::txn::states_at(&paths, &sid, &cfg, &points, now).expect("states");
            for (&n, state) in points.iter().zip(&states) {
                let p = view::Projection::new(msgs[..n].to_vec());
                let place = Placement::new("/archives", &sid, "2026-01-01T00:00:00Z", 0);
                let rebuilt =
                    normafs::noa::rebuild::Replay::new(&p, &cfg, &place, &[], &view::runtime_path)
                        .rebuild();
                let key = |st: &State| -> Vec<(String, i64, String, String, Vec<String>)> {
                    st.blocks()
                        .iter()
                        .map(|b| {
                            (
                                b.block_id.clone(),
                                b.tier,
                                b.start_ref.clone(),
                                b.end_ref.clone(),
                                b.effective_message_ids.clone(),
                            )
                        })
                        .collect()
                };
                assert_eq!(key(state), key(&rebuilt.state), "{sid} after message {n}");
                checked += 1;
            }
        }
    }
    assert!(checked > 30, "{checked} points");
}

/// Draw an SVG with a real renderer (`rsvg-convert`, which scripts/test.sh installs): it
/// must parse and give a non-empty picture. `false` (with a notice) where no renderer is
/// installed and none must be.
fn renders(svg: &[u8]) -> bool {
    use std::io::Write as _;
    let mut child = match std::process::Command::new("rsvg-convert")
        .args(["--format", "png"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            assert!(
                !common::mount_required(),
                "rsvg-convert is not installed ({e}): scripts/test.sh installs librsvg2-bin"
            );
            eprintln!("notice: rsvg-convert is not installed: the SVG is not drawn");
            return false;
        }
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(svg)
        .expect("write svg");
    let o = child.wait_with_output().expect("rsvg-convert");
    assert!(
        o.status.success(),
        "rsvg-convert: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.starts_with(b"\x89PNG") && o.stdout.len() > 1000);
    true
}

#[test]
fn timeline_svg_is_drawn_by_a_real_renderer() {
    for sid in SESSIONS {
        let tl = timeline_of(sid);
        let svg = tl.svg();
        assert!(svg.contains("<polyline"), "{sid}");
        renders(svg.as_bytes());
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_normafs"))
        .arg("timeline")
        .arg(data().join("root"))
        .arg("--svg")
        .output()
        .expect("run normafs timeline");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for sid in SESSIONS {
        assert!(String::from_utf8_lossy(&o.stdout).contains(sid));
    }
    renders(&o.stdout);
    // A session without a request yet, and a name XML must escape.
    let empty = normafs::timeline::Timeline {
        session: "a<b>&c".into(),
        window: 1000,
        floor_ratio: 0.45,
        pressure_ratio: 0.75,
        truncate_ratio: 0.95,
        messages: 0,
        points: Vec::new(),
        after: Vec::new(),
    };
    renders(empty.svg().as_bytes());
    // Scaled to the data: at a window far above the curves, its lines are named, not drawn
    // with the curves squeezed under them; the title says what its peak measures.
    let wide = normafs::timeline::Timeline {
        window: 2_000_000,
        ..timeline_of(SESSIONS[0])
    };
    let svg = wide.svg();
    assert!(
        svg.contains("↑ above the chart: window 2,000,000, truncate 1,900,000, pressure 1,500,000"),
        "{svg:.2000}"
    );
    assert!(!svg.contains(">window 2,000,000</text>"));
    assert!(svg.contains("(counted before cuts)"));
    renders(svg.as_bytes());
}

/// The mount's history: `at/<len>/view.jsonl` and `at/latest/view.jsonl` are `view.jsonl`;
/// `at/` lists the request points; `timeline.jsonl` is the CLI's; the links are not followed
/// by `grep -r`; the files are read-only.
#[test]
fn the_mount_shows_each_sessions_history() {
    let Some(m) = common::mount_example() else {
        return;
    };
    for sid in common::CORPUS_SESSIONS {
        let dir = m.at(&format!("sessions/{sid}"));
        let view = std::fs::read(dir.join("view.jsonl")).expect("view.jsonl");
        let s = normafs::store::session::load(&RootPaths::from_root(m.root()), sid);
        let n = s.messages().len();
        let at = std::fs::read(dir.join(format!("at/{n}/view.jsonl"))).expect("at/len");
        assert!(at == view, "{sid}: at/{n}/view.jsonl is not view.jsonl");
        let latest = std::fs::read(dir.join("at/latest/view.jsonl")).expect("at/latest");
        assert!(latest == view, "{sid}");
        assert_eq!(
            std::fs::read_link(dir.join("at")).expect("link"),
            Path::new(".history/at")
        );
        let mut listed: Vec<String> = std::fs::read_dir(dir.join("at"))
            .expect("ls at")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        listed.sort();
        let mut want: Vec<String> = normafs::store::session::request_points(&s.transcript)
            .iter()
            .map(|i| i.to_string())
            .chain(["latest".to_string()])
            .collect();
        want.sort();
        assert_eq!(listed, want, "{sid}");
        // A point's view.md, and names that are no point.
        let md =
            std::fs::read_to_string(dir.join(format!("at/{}/view.md", want[0]))).expect("view.md");
        assert!(md.starts_with(&format!("# View of {sid}")), "{md}");
        for bad in [format!("{}", n + 1), "01".into(), "x".into()] {
            let e = std::fs::metadata(dir.join("at").join(&bad)).expect_err(&bad);
            assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{bad}");
        }
        // timeline.jsonl: the CLI's, one line per request.
        let mounted = std::fs::read(dir.join("timeline.jsonl")).expect("timeline.jsonl");
        let cli = std::process::Command::new(env!("CARGO_BIN_EXE_normafs"))
            .arg("timeline")
            .arg(m.root())
            .arg(sid)
            .args(["-o", &format!("window={}", common::corpus_noa(sid).window)])
            .output()
            .expect("run normafs timeline");
        assert!(cli.status.success());
        assert_eq!(common::lines(&mounted), common::lines(&cli.stdout), "{sid}");
        assert_eq!(common::lines(&mounted).len(), want.len() - 1, "{sid}");
        renders(&std::fs::read(dir.join("timeline.svg")).expect("timeline.svg"));
        // Read-only: `>` and a write through an open file both fail (the kernel opens files
        // itself, and lets root open a mode-0444 file for writing).
        let e = std::fs::write(dir.join("timeline.jsonl"), "x").expect_err("read-only");
        assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
        let e = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("timeline.jsonl"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"x"))
            .expect_err("read-only");
        assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    }
    renders(&std::fs::read(m.at("timeline.svg")).expect("the root's timeline.svg"));
    // `grep -r` does not follow the links into .history/: nothing there is read (each
    // file there replays its session).
    let o = std::process::Command::new("grep")
        .args(["-r", "-l", "-e", "\"role\"", "-e", "\"band\""])
        .arg(m.mnt())
        .output()
        .expect("grep");
    let r = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(r.contains("view.jsonl"), "{r}");
    assert!(!r.contains("timeline") && !r.contains(".history"), "{r}");
    let o = std::process::Command::new("find")
        .arg(m.mnt())
        .output()
        .expect("find");
    let found = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!found.contains(".history/"), "{found}");
}

/// The replay's requests made from the one before (`pipeline::Growing`) are the ones the
/// whole pipeline makes: every request's figures and nudge, and the states at every
/// request point, over generated sessions (Compress calls, refused ones, ctl-free) and the
/// runtime-written ones.
#[test]
fn grown_requests_are_the_whole_pipelines() {
    use normafs::noa::compress::Placement;
    use normafs::noa::rebuild;
    use normafs::noa::views as view;
    let mut roots: Vec<(PathBuf, Option<NoaConfig>)> = vec![
        (common::norma_data().join("corpus"), None),
        (data().join("root"), None),
    ];
    let tmp = tempfile::tempdir().expect("tempdir");
    // The last with every kind of damage `gen` knows (unanswered calls, orphan results…).
    for (seed, window, corrupt) in [
        (1u32, 200_000u64, false),
        (2, 40_000, false),
        (3, 16_000, false),
        (4, 40_000, true),
    ] {
        let root = tmp.path().join(format!("gen{seed}"));
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_normafs"))
            .arg("gen")
            .arg(&root)
            .args(["--sessions", "3", "--messages", "300", "--seed"])
            .arg(seed.to_string())
            .args(corrupt.then_some("--corrupt"))
            .output()
            .expect("run normafs gen");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        roots.push((
            root,
            Some(NoaConfig {
                window,
                ..NoaConfig::default()
            }),
        ));
    }
    let (mut grown, mut requests, mut split) = (0, 0, 0);
    for (root, cfg) in roots {
        let paths = RootPaths::from_root(&root);
        let d = normafs::store::root::discover(&paths).expect("discover");
        for sid in &d.sessions {
            let cfg = match &cfg {
                Some(c) => c.clone(),
                None if SESSIONS.contains(&sid.as_str()) => config(sid),
                None => common::corpus_noa(sid),
            };
            let s = normafs::store::session::load(&paths, sid);
            let p = view::Projection::new(s.messages());
            let points: Vec<usize> = (0..=p.msgs.len()).collect();
            let place = Placement::new("/archives", sid, "2026-01-01T00:00:00Z", 0);
            let path = &view::runtime_path;
            let replay = |asked| rebuild::Replay::new(&p, &cfg, &place, &[], path).history(asked);
            let a = replay(rebuild::Asked::requests(&points));
            let b = replay(rebuild::Asked::whole(&points));
            assert_eq!(b.grown, 0);
            // The states alone (no nudge decided) are the same states.
            let c = replay(rebuild::Asked::states(&points)).states;
            assert!(
                c == a.states,
                "{sid}: states_at differs from history's states"
            );
            assert_eq!(a.requests, b.requests, "{sid} in {}", root.display());
            assert_eq!(a.made, b.made, "{sid}");
            for (k, (x, y)) in a.states.iter().zip(&b.states).enumerate() {
                assert!(x == y, "{sid}: the states at {k} differ");
            }
            grown += a.grown;
            requests += a.requests.len();
            split += usize::from(a.split_at.is_some());
        }
    }
    // Most requests were grown: the check above is of them.
    assert!(grown * 2 > requests, "{grown} of {requests} grown");
    // Some histories were made on two threads (split after a call; debug builds split any
    // that has one late enough, and check the split against one thread's walk).
    if cfg!(debug_assertions) {
        assert!(split > 0, "no history was split");
    }
}

/// The replay's requests are where the runtime made them: before each assistant message but
/// the one that went on from a Compress call in the same response (both carry that request's
/// usage). The traces record every request but the first (its agent starts with a turn of
/// work before it asks).
#[test]
fn the_requests_are_where_the_runtime_made_them() {
    let paths = RootPaths::from_root(&data().join("root"));
    for sid in SESSIONS {
        let s = normafs::store::session::load(&paths, sid);
        let got = normafs::store::session::request_points(&s.transcript);
        let want: Vec<usize> = trace(sid)
            .iter()
            .map(|r| r["messages"].as_u64().expect("messages") as usize)
            .collect();
        assert_eq!(got.first(), Some(&1), "{sid}");
        assert_eq!(&got[1..], &want[..], "{sid}");
        let assistant = s
            .messages()
            .iter()
            .filter(|m| m.role == "assistant")
            .count();
        assert!(got.len() < assistant, "{sid}: no request was left out");
    }
}

/// Without usage, or with a usage reporting no input, a request is made before every
/// assistant message past the first; the same reported input twice in a row is one request.
#[test]
fn request_points_follow_the_reported_usage() {
    use normafs::format::transcript::{Message, Usage};
    use normafs::noa::rebuild::request_points;
    let msgs: Vec<Message> = [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    .iter()
    .map(|r| Message::new(r, Vec::new()))
    .collect();
    let refs: Vec<&Message> = msgs.iter().collect();
    let usage = |input: u64, read: u64| Usage {
        input_tokens: input,
        cache_read_tokens: read,
        ..Usage::default()
    };
    assert_eq!(request_points(&refs, &|_| None), [1, 3, 5]);
    let zero = [usage(0, 0), usage(0, 0), usage(0, 0)];
    assert_eq!(request_points(&refs, &|m| zero.get(m / 2)), [1, 3, 5]);
    // Messages 1 and 3 report the same input: 3 came from the request before 1.
    let same = [usage(10, 5), usage(10, 5), usage(30, 5)];
    assert_eq!(request_points(&refs, &|m| same.get(m / 2)), [1, 5]);
    // The same input with other cache reads is another request.
    let other = [usage(10, 5), usage(10, 6), usage(10, 6)];
    assert_eq!(request_points(&refs, &|m| other.get(m / 2)), [1, 3]);
}
