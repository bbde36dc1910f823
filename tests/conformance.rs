//! Conformance with the runtime's oracle (SPEC 4.11): what normafs computes from the corpus
//! the runtime wrote equals what the runtime computed from it.

mod common;

use std::fs;

use common::norma_data;
use normafs::config::NoaConfig;
use normafs::format::loader::Transcript;
use normafs::format::state::load_state;
use normafs::noa::{assemble, content, pipeline};
use serde_json::Value;

/// The configuration the runtime ran a session with.
fn config_of(s: &Value) -> NoaConfig {
    let c = &s["Config"];
    let n = &c["Nudge"];
    NoaConfig {
        window: c["ModelContextLimit"].as_u64().unwrap(),
        floor_ratio: n["MinContextLimitPct"].as_f64().unwrap(),
        pressure_ratio: n["MaxContextLimitPct"].as_f64().unwrap(),
        truncate_ratio: c["Truncate"]["Threshold"].as_f64().unwrap(),
        growth_ratio: n["GrowthRatio"].as_f64().unwrap(),
        growth_floor: n["GrowthFloor"].as_u64().unwrap(),
        growth_cap: n["GrowthCap"].as_u64().unwrap(),
        min_growth_floor: n["MinGrowthFloor"].as_u64().unwrap(),
        min_growth_ratio: n["MinGrowthRatio"].as_f64().unwrap(),
        tier2_growth_multiplier: n["Tier2GrowthMultiplier"].as_f64().unwrap(),
        protect_recent_messages: c["PreserveRecentMessages"].as_u64().unwrap() as usize,
        protect_recent_tokens: c["PreserveRecentTokens"].as_u64().unwrap(),
        protected_tools: c["ProtectedTools"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .unwrap_or_default(),
        min_range_chars: c["Compress"]["MinCompressRange"].as_u64().unwrap() as usize,
        min_summary_chars: c["Compress"]["MinSummaryLength"].as_u64().unwrap() as usize,
        max_summary_chars: c["Compress"]["MaxSummaryLength"].as_u64().unwrap() as usize,
        max_tier: c["Tiers"]["MaxTier"].as_u64().unwrap() as u32,
        tier2_min_blocks: c["Tiers"]["Tier2Trigger"].as_u64().unwrap() as usize,
        tier3_min_blocks: c["Tiers"]["Tier3Trigger"].as_u64().unwrap() as usize,
        ..NoaConfig::default()
    }
}

/// The first difference between two JSON values, as a path.
fn first_diff(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = first_diff(p, q, &format!("{path}.{k}")) {
                            return Some(d);
                        }
                    }
                    _ => return Some(format!("{path}.{k}: present on one side only")),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{path}: {} vs {} items", x.len(), y.len()));
            }
            x.iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (p, q))| first_diff(p, q, &format!("{path}[{i}]")))
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ if a == b => None,
        _ => {
            let short = |v: &Value| v.to_string().chars().take(120).collect::<String>();
            Some(format!("{path}: {} vs {}", short(a), short(b)))
        }
    }
}

fn is_nudge(m: &Value) -> bool {
    m["content"].as_array().is_some_and(|c| {
        c.iter().any(|b| {
            b["text"]
                .as_str()
                .is_some_and(|t| t.contains("HOW TO COMPRESS"))
        })
    })
}

#[test]
fn views_equal_the_runtimes_resumed_views() {
    let mut failures = Vec::new();
    for s in common::oracle("corpus-spec.json")["Sessions"]
        .as_array()
        .unwrap()
    {
        let sid = s["ID"].as_str().unwrap();
        let cfg = config_of(s);
        let bytes = fs::read(norma_data().join(format!("corpus/transcripts/{sid}.jsonl"))).unwrap();
        let tr = Transcript::parse(&bytes, Some(sid));
        let msgs: Vec<_> = tr.iter_messages().map(|(_, m)| m).collect();
        let load = load_state(
            &norma_data().join(format!("corpus/noa/{sid}/state.json")),
            sid,
        );
        assert!(load.error.is_none(), "{sid}: {:?}", load.error);
        let state = load.state;
        let proj = content::project(&msgs);
        let mut t = pipeline::run(&proj, &state, &cfg, pipeline::Count::Measured, &|b| {
            b.archive_path.clone()
        });
        t.inject_nudge();
        let out = assemble::assemble(&t, &msgs, &state, true);
        let want: Vec<Value> = serde_json::from_slice(
            &fs::read(norma_data().join(format!("oracle/{sid}/resume-view.json"))).unwrap(),
        )
        .unwrap();
        let got: Vec<Value> = out
            .messages
            .iter()
            .map(|m| {
                let mut b = Vec::new();
                m.write_message(&mut b);
                serde_json::from_slice(&b).unwrap()
            })
            .collect();
        let mut diff = None;
        for (i, w) in want.iter().enumerate() {
            let Some(g) = got.get(i) else {
                diff = Some(format!("message {i}: missing"));
                break;
            };
            if is_nudge(w) {
                if !matches!(out.messages[i].meta, assemble::Meta::Nudge(_)) {
                    diff = Some(format!(
                        "message {i}: the runtime's nudge is not a nudge here"
                    ));
                    break;
                }
                continue;
            }
            if let Some(d) = first_diff(g, w, "$") {
                diff = Some(format!("message {i}: {d}"));
                break;
            }
        }
        eprintln!(
            "{sid}: {} messages, {} summaries",
            got.len(),
            out.messages
                .iter()
                .filter(|m| matches!(m.meta, assemble::Meta::Summary { .. }))
                .count()
        );
        if diff.is_none() && got.len() != want.len() {
            diff = Some(format!(
                "{} messages, the runtime {}",
                got.len(),
                want.len()
            ));
        }
        if let Some(d) = diff {
            failures.push(format!("{sid}: {d}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

struct Session {
    sid: String,
    cfg: NoaConfig,
    bytes: Vec<u8>,
    state: normafs::format::state::State,
}

fn sessions() -> Vec<Session> {
    common::oracle("corpus-spec.json")["Sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let sid = s["ID"].as_str().unwrap().to_string();
            let bytes =
                fs::read(norma_data().join(format!("corpus/transcripts/{sid}.jsonl"))).unwrap();
            let state = load_state(
                &norma_data().join(format!("corpus/noa/{sid}/state.json")),
                &sid,
            )
            .state;
            Session {
                cfg: config_of(s),
                sid,
                bytes,
                state,
            }
        })
        .collect()
}

/// A file of session `sid`'s oracle.
fn oracle(sid: &str, file: &str) -> Value {
    common::oracle(&format!("{sid}/{file}"))
}

#[test]
fn tokens_and_refs_equal_the_runtimes() {
    for s in sessions() {
        let tr = Transcript::parse(&s.bytes, Some(&s.sid));
        let msgs: Vec<_> = tr.iter_messages().map(|(_, m)| m).collect();
        let proj = content::project(&msgs);
        let t = pipeline::run(&proj, &s.state, &s.cfg, pipeline::Count::Measured, &|b| {
            b.archive_path.clone()
        });
        let want = oracle(&s.sid, "tokens.json");
        let want = want.as_array().unwrap();
        assert_eq!(proj.len(), want.len(), "{}: content messages", s.sid);
        for (i, (c, w)) in proj.iter().zip(want).enumerate() {
            let got = serde_json::json!({
                "id": &*c.id, "role": c.role.as_str(), "contentType": c.kind.as_str(),
                "toolName": c.tool, "toolCallId": c.call,
                "tokens": normafs::noa::tokens::count(&c.text.get()),
                "runes": c.text.get().chars().count(),
                "ref": match &t.slots[i] {
                    normafs::noa::content::Slot::Blocked => "BLOCKED".to_string(),
                    slot => slot.name().map(|n| n.into_owned()).unwrap_or_default(),
                },
            });
            for k in [
                "id",
                "role",
                "contentType",
                "toolName",
                "toolCallId",
                "tokens",
                "runes",
                "ref",
            ] {
                assert_eq!(got[k], w[k], "{} core {i} ({}): {k}", s.sid, c.id);
            }
        }
    }
}

#[test]
fn materialized_histories_equal_the_runtimes() {
    use normafs::noa::views;
    for s in sessions() {
        let tr = Transcript::parse(&s.bytes, Some(&s.sid));
        let p = views::Projection::new(tr.iter_messages().map(|(_, m)| m).collect());
        let out =
            views::Files::new(&p, &s.state, &s.cfg, &s.sid, &views::runtime_path).materialized();
        let got: Vec<Value> = out
            .messages
            .iter()
            .map(|m| {
                let mut b = Vec::new();
                m.write_message(&mut b);
                serde_json::from_slice(&b).unwrap()
            })
            .collect();
        let want = oracle(&s.sid, "materialize.json");
        if let Some(d) = first_diff(&Value::Array(got), &want, "$") {
            panic!("{}: {d}", s.sid);
        }
    }
}

#[test]
fn compress_calls_give_the_runtimes_blocks_state_and_panel() {
    use normafs::noa::{args, compress, views};
    let mut checked = 0;
    for s in sessions() {
        let tr = Transcript::parse(&s.bytes, Some(&s.sid));
        let p = views::Projection::new(tr.iter_messages().map(|(_, m)| m).collect());
        for n in 1.. {
            let dir = norma_data().join(format!("oracle/{}/compress-{n}", s.sid));
            if !dir.is_dir() {
                break;
            }
            let meta: Value =
                serde_json::from_slice(&fs::read(dir.join("compress.json")).unwrap()).unwrap();
            let input = fs::read_to_string(dir.join("input.json")).unwrap();
            let want_panel = fs::read_to_string(dir.join("result.txt")).unwrap();
            let t = views::turn(&p, &s.state, &s.cfg, &views::runtime_path);
            let shown = assemble::assemble(&t, &p.msgs, &s.state, true);
            let ledger = t.ledger(&s.state, &shown.tagged);
            let parsed = args::parse(&input);
            let root = format!("{}/{}", meta["archiveBaseDir"].as_str().unwrap(), s.sid);
            let place = compress::Placement::new(
                &root,
                &s.sid,
                "2027-01-01T00:00:00Z",
                meta["nowUnix"].as_i64().unwrap(),
            );
            let call = meta["toolUseId"].as_str().unwrap();
            let applied = compress::apply(&t, &ledger, &parsed.ranges, &s.cfg, call, &place);
            let panel = compress::panel(&applied, t.measure);
            assert_eq!(
                panel,
                want_panel.trim_end(),
                "{} compress-{n}: panel",
                s.sid
            );
            for (b, a) in applied.created.iter().zip(&applied.archives) {
                let mut plain = a.clone();
                plain.call = None;
                plain.with_body_sha256 = false;
                let got = normafs::format::archive::render(&plain, Default::default());
                let want =
                    fs::read_to_string(dir.join("base").join(&s.sid).join(&b.archive_rel)).unwrap();
                assert_eq!(
                    got, want,
                    "{} compress-{n}: archive {}",
                    s.sid, b.archive_rel
                );
                let ours = normafs::format::archive::render(a, Default::default());
                let parsed = normafs::format::archive::parse(&ours).unwrap();
                assert_eq!(parsed.body_sha256_ok, Some(true));
                assert_eq!(parsed.frontmatter.call.as_deref(), Some(call));
            }
            let state_file = dir.join("state.json");
            if state_file.exists() {
                let want = fs::read_to_string(state_file).unwrap();
                let got = applied.state.to_json();
                if got != want {
                    let (g, w): (Value, Value) = (
                        serde_json::from_str(&got).unwrap(),
                        serde_json::from_str(&want).unwrap(),
                    );
                    panic!(
                        "{} compress-{n}: state differs: {:?}",
                        s.sid,
                        first_diff(&g, &w, "$")
                    );
                }
            } else {
                assert!(
                    applied.created.is_empty() || !applied.whole(),
                    "{} compress-{n}",
                    s.sid
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
}

#[test]
fn rebuilds_equal_the_runtimes() {
    use normafs::noa::{compress, rebuild, views};
    for s in sessions() {
        let tr = Transcript::parse(&s.bytes, Some(&s.sid));
        let p = views::Projection::new(tr.iter_messages().map(|(_, m)| m).collect());
        let place = compress::Placement::new("/x", &s.sid, "2027-01-01T00:00:00Z", 1798761600);
        let r = rebuild::Replay::new(&p, &s.cfg, &place, &[], &views::runtime_path).rebuild();
        let want = oracle(&s.sid, "rebuild/state.json");
        let norm = |v: &Value| {
            let blocks: Vec<Value> = v["blocks"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|b| {
                            let mut b = b.clone();
                            b.as_object_mut().unwrap().remove("createdAt");
                            b.as_object_mut().unwrap().remove("archivePath");
                            b
                        })
                        .collect()
                })
                .unwrap_or_default();
            serde_json::json!({"blocks": blocks, "next": v["nextBlockId"], "byRef": v["messageRefs"]["byRef"], "byRaw": v["messageRefs"]["byRaw"], "stats": v["stats"], "snap": v["tokenSnapshot"]})
        };
        let got: Value = serde_json::from_str(&r.state.to_json()).unwrap();
        if let Some(d) = first_diff(&norm(&got), &norm(&want), "$") {
            panic!("{}: rebuild differs: {d} (skipped {:?})", s.sid, r.skipped);
        }
    }
}

/// A copy of the runtime's corpus whose transcripts were last written long ago (a copy's fresh
/// mtimes would make every session look live to ctl).
fn corpus_copy() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .args(["-a", "--no-preserve=mode"])
        .arg(norma_data().join("corpus/."))
        .arg(d.path())
        .status()
        .unwrap();
    assert!(status.success());
    d
}

/// Each `compress-N` input run as a ctl command on a copy of the corpus (archives, journal and
/// state written by the store) gives the runtime's blocks and refs; a batch the runtime refused
/// or split is refused whole and changes nothing.
#[test]
fn ctl_compress_writes_the_runtimes_state() {
    use normafs::store::root::RootPaths;
    let now = chrono::DateTime::parse_from_rfc3339("2027-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let keep = |v: &Value| -> Vec<Value> {
        v["blocks"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|mut b| {
                for k in ["createdAt", "archivePath", "compressCallId"] {
                    b.as_object_mut().unwrap().remove(k);
                }
                b
            })
            .collect()
    };
    let mut checked = 0;
    for s in sessions() {
        for n in 1.. {
            let dir = norma_data().join(format!("oracle/{}/compress-{n}", s.sid));
            if !dir.is_dir() {
                break;
            }
            let root = corpus_copy();
            let paths = RootPaths::from_root(root.path());
            let input = fs::read_to_string(dir.join("input.json")).unwrap();
            let spath = paths.state_path(&s.sid);
            let before = fs::read(&spath).ok();
            let got = normafs::store::txn::compress(&paths, &s.sid, input.trim(), &s.cfg, now);
            match fs::read_to_string(dir.join("state.json")) {
                Ok(want) => {
                    let out = got.unwrap_or_else(|e| panic!("{} compress-{n}: {e}", s.sid));
                    let want: Value = serde_json::from_str(&want).unwrap();
                    let state: Value = serde_json::from_slice(&fs::read(&spath).unwrap()).unwrap();
                    if let Some(d) = first_diff(
                        &Value::Array(keep(&state)),
                        &Value::Array(keep(&want)),
                        "$.blocks",
                    ) {
                        panic!("{} compress-{n}: {d}", s.sid);
                    }
                    assert_eq!(
                        state["messageRefs"]["byRef"], want["messageRefs"]["byRef"],
                        "{} compress-{n}",
                        s.sid
                    );
                    assert_eq!(state["stats"], want["stats"]);
                    // The journal holds the batch; every block's archive is where it says.
                    let journal = fs::read_to_string(paths.journal_path(&s.sid)).unwrap();
                    assert!(journal.contains(out.result["callId"].as_str().unwrap()));
                    for b in out.result["blocks"].as_array().unwrap() {
                        let rel = b["archiveRel"].as_str().unwrap();
                        let text =
                            fs::read_to_string(paths.archive_root(&s.sid).join(rel)).unwrap();
                        let parsed = normafs::format::archive::parse(&text).unwrap();
                        assert_eq!(parsed.body_sha256_ok, Some(true));
                    }
                }
                Err(_) => {
                    assert!(
                        got.is_err(),
                        "{} compress-{n}: the runtime refused or split it",
                        s.sid
                    );
                    assert_eq!(
                        fs::read(&spath).ok(),
                        before,
                        "{} compress-{n}: nothing written",
                        s.sid
                    );
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
}
