//! The noa core on hand-built transcripts, for what the oracle corpus does not exercise (it
//! has no nudge and no truncation; tests/conformance.rs covers what it has): the nudge kinds
//! and where the nudge goes, emergency truncation, Compress-call hiding, the first user
//! message, orphan stripping, hard and soft protection, ref tags and compaction markers.
//! Expected values come from SPEC 4 and the runtime's rules (its nudge, truncate,
//! hide_compress, prune, recommend and reftag files), worked out by hand for each session.

mod common;

use common::{lines, Session};
use normafs::config::NoaConfig;
use normafs::format::archive::{Entry, MessageKind};
use normafs::format::state::{parse_state, State};
use normafs::noa::compress::{self, Applied, Placement};
use normafs::noa::content::{self, Slot};
use normafs::noa::nudge::{Decision, NudgeKind};
use normafs::noa::views::{self, Projection};
use normafs::noa::{args, pipeline, rebuild, recommend, tokens};
use serde_json::{json, Value};

const SID: &str = "s";

fn place() -> Placement<'static> {
    Placement::new("/r/noa/s", SID, "2026-11-30T12:00:00Z", 1_796_040_000)
}

/// Settings under which a few thousand tokens already nudge: the growth unit is 100 tokens
/// (`growth_floor` = `growth_cap`, so the window does not change it), the cadence gate
/// `max(50, 0.45 × 100)` = 50, a minimum benefit of 300 and a 2-message protected tail.
/// The window is set per test from the session's measure.
fn cfg() -> NoaConfig {
    NoaConfig {
        window: 10_000,
        growth_floor: 100,
        growth_cap: 100,
        min_growth_floor: 50,
        min_benefit_tokens: Some(300),
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        min_range_chars: 2000,
        ..NoaConfig::default()
    }
}

/// A text of exactly `tokens` tokens (ASCII, 4 characters each) that starts with `i`, so
/// that every message has its own raw id.
fn body(i: usize, tokens: usize) -> String {
    format!("{i:04}{}", "x".repeat(4 * (tokens - 1)))
}

/// `n` messages alternating user (odd refs) and assistant (even refs), of `tokens` each.
fn chat(n: usize, tokens: usize) -> Session {
    let mut s = Session::new(SID);
    for i in 1..=n {
        if i % 2 == 1 {
            s.user(&body(i, tokens));
        } else {
            s.assistant(&body(i, tokens));
        }
    }
    s
}

fn summary(len: usize, seed: &str) -> String {
    let mut s = format!("{seed}: decisions, paths and errors to keep. ");
    while s.chars().count() < len {
        s.push_str("more detail. ");
    }
    s.chars().take(len).collect()
}

/// The view lines (`view.jsonl`) of a session.
fn view(s: &Session, state: &State, cfg: &NoaConfig) -> Vec<Value> {
    let p = Projection::new(s.msgs());
    lines(
        &views::Files::new(&p, state, cfg, SID, &views::runtime_path)
            .view()
            .to_jsonl(),
    )
}

/// The materialized history lines (`materialized.jsonl`) of a projection.
fn materialized(p: &Projection<'_>, state: &State) -> Vec<Value> {
    let cfg = cfg();
    let files = views::Files::new(p, state, &cfg, SID, &views::runtime_path);
    lines(&files.materialized().to_jsonl())
}

/// The nudge decision of a session's view, and the view's measure.
fn decide(s: &Session, state: &State, cfg: &NoaConfig) -> (Decision, u64) {
    let p = Projection::new(s.msgs());
    let t = views::turn(&p, state, cfg, &views::runtime_path);
    (t.nudge.clone().expect("a decision"), t.measure)
}

/// The window at which the session's measure is `usage` of it.
fn window_for(s: &Session, state: &State, cfg: &NoaConfig, usage: f64) -> u64 {
    let (_, measure) = decide(s, state, cfg);
    (measure as f64 / usage).ceil() as u64
}

/// Apply a Compress batch as ctl does, returning what it did (it must make every block).
fn apply(s: &Session, state: &State, cfg: &NoaConfig, call: &str, input: &Value) -> Applied {
    let p = Projection::new(s.msgs());
    let parsed = args::parse(&input.to_string());
    assert!(!parsed.ranges.is_empty(), "{input}");
    let a = rebuild::ctl_apply(
        &p,
        state,
        cfg,
        &parsed.ranges,
        call,
        &place(),
        &views::runtime_path,
    );
    assert!(a.whole(), "{input}: {:?} {:?}", a.errors, a.warnings);
    a
}

/// A batch of ranges, each with a summary of `len` characters.
fn ranges(spans: &[(&str, &str)], len: usize) -> Value {
    let content: Vec<Value> = spans
        .iter()
        .map(|(a, b)| json!({"startId": a, "endId": b, "topic": format!("{a} to {b}"), "summary": summary(len, &format!("{a}..{b}"))}))
        .collect();
    json!({ "content": content })
}

/// The settings for building states: no batch minimum.
fn building(cfg: &NoaConfig) -> NoaConfig {
    NoaConfig {
        min_range_chars: 0,
        ..cfg.clone()
    }
}

fn compressed(
    s: &Session,
    state: &State,
    cfg: &NoaConfig,
    spans: &[(&str, &str)],
    len: usize,
) -> State {
    apply(s, state, &building(cfg), "ctl-x", &ranges(spans, len)).state
}

fn text_of_line(line: &Value) -> String {
    line["message"]["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|b| {
            b["text"]
                .as_str()
                .or(b["thinking"].as_str())
                .map(str::to_string)
                .unwrap_or_else(|| {
                    b["content"]
                        .as_array()
                        .map(|c| {
                            c.iter()
                                .filter_map(|x| x["text"].as_str())
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                        .unwrap_or_default()
                })
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The refs a view shows, in order (summaries and the nudge have none).
fn view_refs(v: &[Value]) -> Vec<String> {
    v.iter()
        .flat_map(|l| l["refs"].as_array().cloned().unwrap_or_default())
        .map(|r| r.as_str().expect("a ref").to_string())
        .collect()
}

fn state_json(v: Value) -> State {
    parse_state(v.to_string().as_bytes()).expect("a state")
}

// ---------------------------------------------------------------- the nudge

/// Ten messages of 500 tokens at half the window, on a fresh resume (no nudge history): the
/// first sight with 4000 tokens pending (≥ the growth unit) fires a gentle tier-1 nudge. The
/// recommendation is the runtime's: the protected tail is the last two messages (m00009 is
/// also the last user text); the rest is cut at a user message once a range holds three
/// (m00005), and each half clears the 2000-character batch minimum.
#[test]
fn a_gentle_nudge_on_first_sight_below_pressure_with_enough_pending() {
    let s = chat(10, 500);
    let st = State::initial(SID);
    let cfg = NoaConfig {
        window: window_for(&s, &st, &cfg(), 0.5),
        ..cfg()
    };
    let (d, measure) = decide(&s, &st, &cfg);
    assert_eq!(measure, 5000);
    assert!(d.inject, "{}", d.reason);
    assert_eq!((d.kind, d.tier), (Some(NudgeKind::Gentle), 1));
    assert!(!d.pressure);
    assert_eq!(d.pending, [4000, 0, 0]);
    let spans: Vec<(String, String, usize, u64)> = d
        .recommendation
        .ranges
        .iter()
        .map(|r| {
            (
                r.start.name().unwrap().into_owned(),
                r.end.name().unwrap().into_owned(),
                r.count,
                r.tokens,
            )
        })
        .collect();
    assert_eq!(
        spans,
        [
            ("m00001".into(), "m00004".into(), 4, 2000),
            ("m00005".into(), "m00008".into(), 4, 2000)
        ]
    );

    // In the view: the last line, a user message of one text block, no ref, no tag.
    let v = view(&s, &st, &cfg);
    assert_eq!(v.len(), 11);
    let last = v.last().unwrap();
    assert_eq!(last["nudge"], "gentle");
    assert!(last.get("refs").is_none());
    assert_eq!(last["message"]["role"], "user");
    let blocks = last["message"]["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0]["type"], "text");
    let text = blocks[0]["text"].as_str().unwrap();
    assert!(!text.contains("<noa-ref id="), "{text}");
    // It names what it recommends.
    assert!(
        text.contains("m00001..m00004") && text.contains("m00005..m00008"),
        "{text}"
    );
    assert!(
        !text.contains("m00009"),
        "the protected tail is never recommended"
    );
    // Every other line is a transcript message, in order.
    assert_eq!(
        view_refs(&v[..10]),
        (1..=10).map(|n| format!("m{n:05}")).collect::<Vec<_>>()
    );
}

/// Below the floor a fresh resume has nothing to grow from (growth 0 < the cadence gate);
/// above it, too little pending (< the growth unit) holds the nudge back too.
#[test]
fn no_nudge_below_the_floor_or_without_enough_pending() {
    let s = chat(10, 500);
    let st = State::initial(SID);
    let below = NoaConfig {
        window: window_for(&s, &st, &cfg(), 0.3),
        ..cfg()
    };
    let (d, _) = decide(&s, &st, &below);
    assert!(!d.inject);
    assert!(d.reason.contains("below cadence"), "{}", d.reason);
    assert_eq!(view(&s, &st, &below).len(), 10, "no nudge line");

    let little = NoaConfig {
        window: window_for(&s, &st, &cfg(), 0.5),
        growth_floor: 5000,
        growth_cap: 5000,
        ..cfg()
    };
    let (d, _) = decide(&s, &st, &little);
    assert_eq!(d.pending[0], 4000);
    assert!(
        !d.inject,
        "4000 pending < a growth unit of 5000: {}",
        d.reason
    );
    assert!(view(&s, &st, &little)
        .iter()
        .all(|l| l.get("nudge").is_none()));
}

/// At or above `pressure_ratio` there is no cadence: the tier with the most pending fires
/// when it reclaims at least the minimum benefit, in the emergency voice (the runtime
/// renders every nudge over the pressure line as an emergency).
#[test]
fn pressure_nudges_are_emergency_and_need_the_minimum_benefit() {
    let s = chat(10, 500);
    let st = State::initial(SID);
    let pressed = NoaConfig {
        window: window_for(&s, &st, &cfg(), 0.8),
        ..cfg()
    };
    let (d, _) = decide(&s, &st, &pressed);
    assert!(d.pressure && d.usage < pressed.truncate_ratio);
    assert!(d.inject, "{}", d.reason);
    assert_eq!((d.kind, d.tier), (Some(NudgeKind::Emergency), 1));
    assert_eq!(
        view(&s, &st, &pressed).last().unwrap()["nudge"],
        "emergency"
    );

    let not_worth = NoaConfig {
        min_benefit_tokens: Some(4001),
        ..pressed.clone()
    };
    let (d, _) = decide(&s, &st, &not_worth);
    assert!(!d.inject);
    assert!(d.reason.contains("minimum benefit"), "{}", d.reason);
    assert_eq!(view(&s, &st, &not_worth).len(), 10);
}

/// At `truncate_ratio` and above: the emergency nudge, still the last line.
#[test]
fn an_emergency_nudge_at_the_truncate_ratio() {
    let s = chat(10, 500);
    let st = State::initial(SID);
    let full = NoaConfig {
        window: window_for(&s, &st, &cfg(), 0.99),
        ..cfg()
    };
    let (d, _) = decide(&s, &st, &full);
    assert!(d.usage >= full.truncate_ratio);
    assert_eq!((d.inject, d.kind), (true, Some(NudgeKind::Emergency)));
    assert_eq!(d.truncated, 0, "no tool result to cut");
    let v = view(&s, &st, &full);
    assert_eq!(v.len(), 11);
    assert_eq!(v[10]["nudge"], "emergency");
}

/// Fourteen messages, the middle ten long, folded into five tier-1 blocks of two messages
/// each, with summaries of 100 characters (25 tokens). What stays compressible (m00001 and
/// m00012, 20 tokens each) clears no batch minimum, so tier 1 has nothing pending.
fn five_tier1_blocks() -> (Session, State) {
    let mut s = Session::new(SID);
    for i in 1..=14 {
        let t = if (2..=11).contains(&i) { 500 } else { 20 };
        if i % 2 == 1 {
            s.user(&body(i, t));
        } else {
            s.assistant(&body(i, t));
        }
    }
    let st = compressed(
        &s,
        &State::initial(SID),
        &cfg(),
        &[
            ("m00002", "m00003"),
            ("m00004", "m00005"),
            ("m00006", "m00007"),
            ("m00008", "m00009"),
            ("m00010", "m00011"),
        ],
        100,
    );
    (s, st)
}

/// `tier2_min_blocks` live tier-1 blocks and usage at the floor: a tier-2 nudge naming them.
#[test]
fn a_tier2_nudge_with_enough_live_tier1_blocks_at_the_floor() {
    let (s, st) = five_tier1_blocks();
    assert_eq!(st.blocks().len(), 5);
    let cfg = NoaConfig {
        window: window_for(&s, &st, &cfg(), 0.5),
        ..cfg()
    };
    let (d, _) = decide(&s, &st, &cfg);
    assert_eq!(d.pending, [0, 125, 0]);
    assert!(d.inject, "{}", d.reason);
    assert_eq!((d.kind, d.tier), (Some(NudgeKind::Tier2), 2));
    let targets: Vec<&str> = d.targets.iter().map(|b| b.block_id.as_str()).collect();
    assert_eq!(targets, ["b1", "b2", "b3", "b4", "b5"]);
    let v = view(&s, &st, &cfg);
    let last = v.last().unwrap();
    assert_eq!(last["nudge"], "tier2");
    let text = text_of_line(last);
    for b in ["b1", "b5"] {
        assert!(text.contains(b), "{text}");
    }

    // Below the floor the count does not trigger.
    let low = NoaConfig {
        window: window_for(&s, &st, &cfg, 0.3),
        ..cfg.clone()
    };
    assert!(!decide(&s, &st, &low).0.inject);
    // One block short: no tier qualifies (125 pending is below 1.5 growth units).
    let fewer = NoaConfig {
        tier2_min_blocks: 6,
        ..cfg.clone()
    };
    let (d, _) = decide(&s, &st, &fewer);
    assert!(!d.inject);
    assert!(d.reason.contains("no tier qualifies"), "{}", d.reason);
}

/// Tier-1 blocks folded into two tier-2 blocks (through block endpoints: each absorbs the
/// lowest tier in its range), with `tier3_min_blocks` = 2: a tier-3 nudge naming them.
#[test]
fn a_tier3_nudge_with_enough_live_tier2_blocks() {
    let (s, st) = five_tier1_blocks();
    let st = compressed(&s, &st, &cfg(), &[("b1", "b2"), ("b3", "b5")], 300);
    let tiers: Vec<(&str, i64, bool)> = st
        .blocks()
        .iter()
        .map(|b| (b.block_id.as_str(), b.tier, b.active))
        .collect();
    assert_eq!(
        tiers,
        [
            ("b1", 1, false),
            ("b2", 1, false),
            ("b3", 1, false),
            ("b4", 1, false),
            ("b5", 1, false),
            ("b6", 2, true),
            ("b7", 2, true)
        ]
    );
    let cfg = NoaConfig {
        tier3_min_blocks: 2,
        ..cfg()
    };
    let cfg = NoaConfig {
        window: window_for(&s, &st, &cfg, 0.5),
        ..cfg
    };
    let (d, _) = decide(&s, &st, &cfg);
    assert_eq!(d.pending, [0, 0, 150]);
    assert!(d.inject, "{}", d.reason);
    assert_eq!((d.kind, d.tier), (Some(NudgeKind::Tier3), 3));
    let targets: Vec<&str> = d.targets.iter().map(|b| b.block_id.as_str()).collect();
    assert_eq!(targets, ["b6", "b7"]);
    assert_eq!(view(&s, &st, &cfg).last().unwrap()["nudge"], "tier3");
}

/// Reading a view never writes nudge state: the same view twice is the same bytes, and the
/// state given in is untouched.
#[test]
fn reading_a_view_twice_is_the_same_view() {
    let s = chat(10, 500);
    let st = State::initial(SID);
    let cfg = NoaConfig {
        window: window_for(&s, &st, &cfg(), 0.5),
        ..cfg()
    };
    let p = Projection::new(s.msgs());
    let a = views::Files::new(&p, &st, &cfg, SID, &views::runtime_path)
        .view()
        .to_jsonl();
    let b = views::Files::new(&p, &st, &cfg, SID, &views::runtime_path)
        .view()
        .to_jsonl();
    assert_eq!(a, b);
    assert_eq!(st, State::initial(SID));
}

// ---------------------------------------------------------------- emergency truncation

/// A task, five Bash calls with results of 3000, 6000, 1500, 500 and 5000 tokens, and a
/// closing assistant text. Refs: m00001 the task, then call/result pairs m00002/m00003 …
/// m00010/m00011, m00012 the text.
fn tool_session() -> (Session, [String; 5]) {
    let mut s = Session::new(SID);
    s.user("Run the checks and report.");
    let sizes = [3000, 6000, 1500, 500, 5000];
    let results: [String; 5] = std::array::from_fn(|k| {
        let fill = ['a', 'b', 'c', 'd', 'e'][k];
        // A distinct head and tail, so a cut is visible.
        let n = sizes[k] * 4;
        format!("HEAD{k}{}TAIL{k}", fill.to_string().repeat(n - 10))
    });
    for (k, r) in results.iter().enumerate() {
        let id = format!("toolu_{k}");
        s.tool(&id, "Bash", json!({"command": format!("check {k}")}), r);
    }
    s.assistant("All checks ran.");
    (s, results)
}

/// The text a cut result keeps: its first and last 2000 characters around the runtime's
/// marker naming the original size.
fn cut(original: &str) -> String {
    let chars: Vec<char> = original.chars().collect();
    let head: String = chars[..2000].iter().collect();
    let tail: String = chars[chars.len() - 2000..].iter().collect();
    format!(
        "{head}\n\n...[truncated for context space — original ~{} tokens]...\n\n{tail}",
        tokens::count(original)
    )
}

/// At the threshold, the largest results outside the protected tail are cut first, until the
/// count is at most 90% of the threshold: here the 6000-token result, then the 3000-token
/// one; the 1500 one is left (the count is below target by then), the 500 one is below the
/// 1000-token minimum, and the 5000 one is in the last `protect_recent_messages`.
#[test]
fn emergency_truncation_cuts_the_largest_results_first_until_90_percent() {
    let (s, results) = tool_session();
    let st = State::initial(SID);
    let (_, measure) = decide(&s, &st, &cfg());
    let saved = |r: &str| tokens::count(r) - tokens::count(&cut(r));
    let (s2, s1) = (saved(&results[1]), saved(&results[0]));
    // A target between "after the first cut" and "after both".
    let target = measure - s2 - s1 / 2;
    let window = (target as f64 / 0.9 / 0.95).ceil() as u64;
    let cfg = NoaConfig { window, ..cfg() };
    let threshold = pipeline::truncate_threshold(&cfg);
    assert!(measure >= threshold);
    assert!(measure - s2 > (threshold as f64 * 0.9) as u64);
    assert!(measure - s2 - s1 <= (threshold as f64 * 0.9) as u64);

    let p = Projection::new(s.msgs());
    let t = views::turn(&p, &st, &cfg, &views::runtime_path);
    assert_eq!(t.truncated, 2);
    assert_eq!(t.measure, measure, "the measure is taken before truncation");
    let v = view(&s, &st, &cfg);
    let result_line = |k: usize| {
        let want = format!("m{:05}", 3 + 2 * k);
        v.iter()
            .find(|l| {
                l["refs"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!(want)))
            })
            .unwrap_or_else(|| panic!("{want} in the view"))
            .clone()
    };
    for (k, r) in results.iter().enumerate() {
        let line = result_line(k);
        let block = &line["message"]["content"][0];
        assert_eq!(block["type"], "tool_result");
        let text = block["content"][0]["text"].as_str().unwrap();
        let (shown, tag) = text.rsplit_once('\n').unwrap();
        let reference = format!("m{:05}", 3 + 2 * k);
        if k <= 1 {
            assert_eq!(line["truncated"], true, "result {k}");
            assert_eq!(shown, cut(r), "result {k}");
            assert!(shown.starts_with(&format!("HEAD{k}")) && shown.ends_with(&format!("TAIL{k}")));
            // The tag counts what is sent (and the runtime freezes that count).
            assert_eq!(
                tag,
                format!(
                    "<noa-ref id=\"{reference}\" tokens=\"{}\" src=\"Bash\"/>",
                    tokens::format(tokens::count(&cut(r)))
                )
            );
        } else {
            assert!(line.get("truncated").is_none(), "result {k} is whole");
            assert_eq!(shown, r.as_str(), "result {k}");
        }
    }
    // The nudge is the emergency one, and says what was cut.
    let (d, _) = decide(&s, &st, &cfg);
    assert_eq!((d.kind, d.truncated), (Some(NudgeKind::Emergency), 2));
    let nudge = v.last().unwrap();
    assert_eq!(nudge["nudge"], "emergency");
    assert!(text_of_line(nudge).contains("2 tool result(s)"));
}

/// A result already carrying the marker is not cut again; one of 1000+ tokens in at most
/// 4000 characters (CJK text counts a token a character) cannot be cut and is left whole.
#[test]
fn truncation_skips_cut_results_and_results_too_short_to_cut() {
    let mut s = Session::new(SID);
    s.user("Go.");
    let marked = format!(
        "{}...[truncated for context space — original ~9000 tokens]...{}",
        "p".repeat(6000),
        "q".repeat(6000)
    );
    let cjk = "漢".repeat(3000);
    s.tool("toolu_a", "Bash", json!({"c": 1}), &marked);
    s.tool("toolu_b", "Bash", json!({"c": 2}), &cjk);
    s.assistant("done");
    s.user("next");
    let st = State::initial(SID);
    let (_, measure) = decide(&s, &st, &cfg());
    let cfg = NoaConfig {
        window: measure / 2,
        ..cfg()
    };
    let p = Projection::new(s.msgs());
    let t = views::turn(&p, &st, &cfg, &views::runtime_path);
    assert!(t.count >= pipeline::truncate_threshold(&cfg));
    assert_eq!(t.truncated, 0);
    assert!(view(&s, &st, &cfg)
        .iter()
        .all(|l| l.get("truncated").is_none()));
}

/// Archives normafs writes hold the transcript's text, never the cut one the view sent.
#[test]
fn archives_written_by_ctl_keep_the_untruncated_text() {
    let (s, results) = tool_session();
    let st = State::initial(SID);
    let (_, measure) = decide(&s, &st, &cfg());
    let cfg = NoaConfig {
        window: measure / 2,
        ..cfg()
    };
    let p = Projection::new(s.msgs());
    assert!(views::turn(&p, &st, &cfg, &views::runtime_path).truncated >= 2);
    let a = apply(
        &s,
        &st,
        &building(&cfg),
        "ctl-t",
        &ranges(&[("m00002", "m00005")], 80),
    );
    assert_eq!(a.archives.len(), 1);
    let bodies: Vec<(&str, &str)> = a.archives[0]
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::Message(m) if m.kind == MessageKind::ToolResult => {
                Some((m.reference.as_deref().unwrap_or(""), m.text.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        bodies,
        [
            ("m00003", results[0].as_str()),
            ("m00005", results[1].as_str())
        ]
    );
    let text = normafs::format::archive::render(&a.archives[0], Default::default());
    assert!(!text.contains("[truncated for context space"));
}

// ---------------------------------------------------------------- Compress calls in the view

/// Append a Compress call that made `a`'s blocks (its panel as the result), then a turn.
fn record_call(s: &mut Session, call: &str, input: &Value, a: &Applied) {
    let panel = compress::panel(a, 0);
    s.compress_call(call, input.clone(), &panel);
}

/// A live block's call stays, each summary in its input cut to 199 characters and "…" (the
/// runtime's re-encoding: keys sorted, `<` `>` `&` escaped); its result stays with it.
#[test]
fn a_live_blocks_compress_call_stays_with_its_summaries_stubbed() {
    let mut s = chat(8, 50);
    let st0 = State::initial(SID);
    let long = format!("{} & <kept>", summary(300, "long"));
    let input = json!({"content": [{"startId": "m00002", "endId": "m00005", "topic": "early work", "summary": long}]});
    let a = apply(&s, &st0, &building(&cfg()), "toolu_c1", &input);
    record_call(&mut s, "toolu_c1", &input, &a);
    s.user("What next?").assistant("Carry on.");
    let st = a.state;
    let v = view(&s, &st, &cfg());
    let call = v
        .iter()
        .find(|l| l["message"]["content"][0]["type"] == "tool_use")
        .expect("the call stays");
    let block = &call["message"]["content"][0];
    assert_eq!(block["id"], "toolu_c1");
    assert_eq!(call["refs"], json!([]), "the call is BLOCKED: no ref");
    let stub: String = long.chars().take(199).chain(['…']).collect();
    assert_eq!(
        block["input"],
        json!({"content": [{"endId": "m00005", "startId": "m00002", "summary": stub, "topic": "early work"}]})
    );
    // Re-encoded as the runtime encodes it.
    let p = Projection::new(s.msgs());
    let raw = {
        let out = views::Files::new(&p, &st, &cfg(), SID, &views::runtime_path).view();
        String::from_utf8(out.to_jsonl()).unwrap()
    };
    assert!(raw.contains(r#"{"content":[{"endId":"m00005","startId":"m00002","summary":"long: "#));
    // The whole summary is sent once: in the block's summary message, not again in the call.
    assert_eq!(raw.matches(&long[..250]).count(), 1);
    // The result stays, untagged.
    let result = v
        .iter()
        .find(|l| l["message"]["content"][0]["type"] == "tool_result")
        .expect("the result stays");
    assert!(!text_of_line(result).contains("<noa-ref"));
    assert!(text_of_line(result).contains("b1(T1)="));
    // And the block's summary is in the view.
    assert!(v.iter().any(|l| l["block"] == "b1"));
    // A summary of at most 200 characters is left as it was.
    assert_eq!(
        pipeline::stub_compress_arguments(
            &json!({"content": [{"summary": "x".repeat(200)}]}).to_string()
        ),
        None
    );
}

/// Calls of blocks that are no longer live (absorbed by a tier-2 block) go with their
/// results; the absorbing block's call stays.
#[test]
fn calls_of_dead_blocks_go_with_their_results() {
    let mut s = chat(12, 50);
    let mut st = State::initial(SID);
    for (call, span) in [
        ("toolu_c1", ("m00002", "m00003")),
        ("toolu_c2", ("m00004", "m00005")),
    ] {
        let input = ranges(&[span], 80);
        let a = apply(&s, &st, &building(&cfg()), call, &input);
        record_call(&mut s, call, &input, &a);
        s.user(&format!("after {call}")).assistant("ok");
        st = a.state;
    }
    let input = ranges(&[("b1", "b2")], 80);
    let a = apply(&s, &st, &building(&cfg()), "toolu_c3", &input);
    assert_eq!(a.created[0].tier, 2);
    record_call(&mut s, "toolu_c3", &input, &a);
    s.user("after c3").assistant("ok");
    let st = a.state;
    let v = view(&s, &st, &cfg());
    let ids: Vec<String> = v
        .iter()
        .flat_map(|l| {
            l["message"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|b| {
            b["id"]
                .as_str()
                .or(b["tool_use_id"].as_str())
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        ids,
        ["toolu_c3", "toolu_c3"],
        "only the live block's call and result"
    );
    assert_eq!(
        v.iter().filter(|l| l.get("block").is_some()).count(),
        1,
        "one live summary: b3"
    );
}

/// Of the Compress calls that made no block, the last two stay (the model sees its own
/// mistakes) and older ones go with their results.
#[test]
fn the_last_two_orphaned_compress_calls_stay() {
    let mut s = chat(4, 50);
    for k in 1..=3 {
        let call = format!("toolu_f{k}");
        s.tool_use(
            &call,
            "Compress",
            json!({"content": [{"startId": "m00001", "endId": "m00099", "summary": "x"}]}),
        );
        s.tool_result_error(
            &call,
            "▣ noa | 0 blocks created\n  error: m00099 does not exist in this session",
        );
        s.user(&format!("try {k}")).assistant("again");
    }
    let v = view(&s, &State::initial(SID), &cfg());
    let calls: Vec<&str> = v
        .iter()
        .filter_map(|l| {
            let b = &l["message"]["content"][0];
            (b["type"] == "tool_use").then(|| b["id"].as_str().unwrap())
        })
        .collect();
    assert_eq!(calls, ["toolu_f2", "toolu_f3"]);
    let results = v
        .iter()
        .filter(|l| l["message"]["content"][0]["type"] == "tool_result")
        .count();
    assert_eq!(results, 2);
}

// ---------------------------------------------------------------- prune

/// A block over the first user message: the summary goes in at its place (the earliest
/// covered message), and the task itself stays too.
#[test]
fn the_first_user_message_is_never_removed() {
    let s = chat(8, 50);
    let st = compressed(
        &s,
        &State::initial(SID),
        &cfg(),
        &[("m00001", "m00004")],
        80,
    );
    assert_eq!(st.blocks()[0].start_ref, "m00001");
    let v = view(&s, &st, &cfg());
    assert_eq!(v[0]["block"], "b1");
    assert_eq!(v[1]["refs"], json!(["m00001"]));
    assert_eq!(
        view_refs(&v),
        ["m00001", "m00005", "m00006", "m00007", "m00008"]
    );
    // The materialized history keeps it too.
    let p = Projection::new(s.msgs());
    let m = materialized(&p, &st);
    assert_eq!(m[0]["block"], "b1");
    assert_eq!(m[1]["refs"], json!(["m00001"]));
    assert_eq!(m.len(), 6);
}

/// A hand-made state that covers half of a tool exchange, or an act without its thinking:
/// prune strips the call without a result, the result without a call, and a thinking run
/// no act follows; a thinking run whose act stays visible is kept.
#[test]
fn orphans_are_stripped_after_prune() {
    let mut s = Session::new(SID);
    s.user("Task.");
    s.tool("toolu_1", "Read", json!({"path": "a"}), "contents of a");
    s.tool("toolu_2", "Read", json!({"path": "b"}), "contents of b");
    s.thinking("let me think", "an answer");
    s.user("Hm.");
    s.thinking("more thought", "second answer");
    s.user("Thanks.");
    let ids = s.ids();
    // 0 task, 1 call1, 2 result1, 3 call2, 4 result2, 5 think1, 6 answer1, 7 hm, 8 think2,
    // 9 answer2, 10 thanks
    assert_eq!(ids.len(), 11);
    let covered = [&ids[2], &ids[3], &ids[6], &ids[8]];
    let st = state_json(json!({
        "version": 1, "sessionId": SID, "nextBlockId": 2,
        "blocks": [{
            "blockId": "b1", "tier": 1, "summary": "half of two exchanges",
            "directMessageIds": covered,
            "effectiveMessageIds": covered,
            "archivePath": "/r/noa/s/tier1/b1_m00003-m00009.md", "archiveRel": "tier1/b1_m00003-m00009.md",
            "startRef": "m00003", "endRef": "m00009", "active": true
        }],
        "messageRefs": {"byRaw": {}, "byRef": {}},
        "nudge": {"lastPerMessageNudgeTokens": 0, "lastNudgeShownTokens": 0},
        "stats": {"tokensCompressed": 0, "compressionCount": 1}
    }));
    let v = view(&s, &st, &cfg());
    let kinds: Vec<String> = v
        .iter()
        .map(|l| {
            let types: Vec<&str> = l["message"]["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["type"].as_str().unwrap())
                .collect();
            match l.get("block") {
                Some(b) => format!("summary {}", b.as_str().unwrap()),
                None => types.join("+"),
            }
        })
        .collect();
    // call1 lost its result (covered) and goes; result2 lost its call and goes; think1 lost
    // its act and is followed by a user message, so it goes; think2 keeps its visible act
    // (answer2), so the block's claim on it is dropped and it stays.
    assert_eq!(
        kinds,
        ["text", "summary b1", "text", "thinking+text", "text"],
        "{v:#?}"
    );
    assert_eq!(text_of_line(&v[3]), "more thought\nsecond answer");
}

// ---------------------------------------------------------------- protection

/// Compress and `protected_tools` patterns (case-insensitive, a trailing `*`): their calls,
/// results and the paired halves are BLOCKED — no ref, no tag — and a batch never takes
/// them; other tools are tagged.
#[test]
fn hard_protected_tools_are_blocked_untagged_and_never_compressed() {
    let mut s = Session::new(SID);
    s.user("Task.");
    s.tool("toolu_m", "mcp__github_pr", json!({"n": 1}), &body(1, 300));
    s.tool("toolu_s", "SECRETS", json!({"n": 2}), &body(2, 300));
    s.tool("toolu_r", "Read", json!({"n": 3}), &body(3, 300));
    s.tool(
        "toolu_c",
        "Compress",
        json!({"content": []}),
        "▣ noa | 0 blocks created",
    );
    s.assistant(&body(4, 300));
    s.user("Done?");
    s.assistant("Yes.");
    let cfg = NoaConfig {
        protected_tools: vec!["mcp__*".into(), "secrets".into()],
        ..cfg()
    };
    let st = State::initial(SID);
    let p = Projection::new(s.msgs());
    let t = views::turn(&p, &st, &cfg, &views::runtime_path);
    let slots: Vec<&Slot> = t.slots.iter().collect();
    assert_eq!(
        slots,
        [
            &Slot::Num(1),
            &Slot::Blocked,
            &Slot::Blocked,
            &Slot::Blocked,
            &Slot::Blocked,
            &Slot::Num(2),
            &Slot::Num(3),
            &Slot::Blocked,
            &Slot::Blocked,
            &Slot::Num(4),
            &Slot::Num(5),
            &Slot::Num(6),
        ],
        "refs skip hard-protected content"
    );
    let v = view(&s, &st, &cfg);
    let mut results = 0;
    for l in &v {
        let b = &l["message"]["content"][0];
        if b["type"] == "tool_result" {
            results += 1;
            let tagged = text_of_line(l).contains("<noa-ref");
            let read = b["tool_use_id"] == "toolu_r";
            assert_eq!(tagged, read, "{l}");
            assert_eq!(l["refs"].as_array().unwrap().is_empty(), !read, "{l}");
        }
    }
    assert_eq!(results, 4);
    // A batch over all of it takes only the unprotected content.
    let a = apply(
        &s,
        &st,
        &building(&cfg),
        "ctl-p",
        &ranges(&[("m00001", "m00004")], 80),
    );
    let ids = s.ids();
    assert_eq!(
        a.created[0].direct_message_ids,
        [
            ids[0].clone(),
            ids[5].clone(),
            ids[6].clone(),
            ids[9].clone()
        ]
    );
    for k in [1, 2, 3, 4, 7, 8] {
        assert_eq!(a.state.message_refs.by_raw[&ids[k]], "BLOCKED");
        assert!(!a.state.message_refs.by_ref.values().any(|r| r == &ids[k]));
    }
}

/// The soft tail: the last `protect_recent_messages` (bulky re-obtainable tools — Read,
/// Grep, Glob, Bash, LS — not counted), the suffix reaching `protect_recent_tokens`, and
/// the last user text; a batch entirely inside it makes nothing.
#[test]
fn the_soft_tail_is_protected() {
    let mut s = Session::new(SID);
    s.user(&body(1, 100)); // m00001
    s.assistant(&body(2, 100)); // m00002
    s.user(&body(3, 100)); // m00003: the last user text
    s.assistant(&body(4, 100)); // m00004
    s.tool("toolu_g", "Grep", json!({"q": 1}), &body(5, 100)); // m00005, m00006
    s.assistant(&body(7, 100)); // m00007
    let st = State::initial(SID);
    let p = Projection::new(s.msgs());
    let zone = |cfg: &NoaConfig| {
        let t = views::turn(&p, &st, cfg, &views::runtime_path);
        let mut z: Vec<String> = recommend::soft_zone(&t, &st, cfg)
            .iter()
            .map(|x| x.name().unwrap().into_owned())
            .collect();
        z.sort();
        z
    };
    // Two messages: m00007 and m00004 (the Grep exchange does not count), and m00003.
    assert_eq!(zone(&cfg()), ["m00003", "m00004", "m00007"]);
    // By tokens: the suffix reaching 250 tokens (m00007, m00004, m00003 — Grep aside).
    let by_tokens = NoaConfig {
        protect_recent_messages: 0,
        protect_recent_tokens: 250,
        ..cfg()
    };
    assert_eq!(zone(&by_tokens), ["m00003", "m00004", "m00007"]);
    let one = NoaConfig {
        protect_recent_messages: 1,
        ..cfg()
    };
    assert_eq!(zone(&one), ["m00003", "m00007"]);
    // A batch inside the tail has nothing left to take.
    let parsed = args::parse(&ranges(&[("m00003", "m00004")], 80).to_string());
    let a = rebuild::ctl_apply(
        &p,
        &st,
        &building(&cfg()),
        &parsed.ranges,
        "ctl-s",
        &place(),
        &views::runtime_path,
    );
    assert!(a.created.is_empty());
    assert!(!a.errors.is_empty());
    // The Grep exchange stays compressible.
    let a = apply(
        &s,
        &st,
        &building(&cfg()),
        "ctl-g",
        &ranges(&[("m00005", "m00006")], 80),
    );
    assert_eq!(a.created[0].direct_message_ids.len(), 2);
}

// ---------------------------------------------------------------- ref tags

/// User text and tool results end with `\n<noa-ref id="…" tokens="…"/>` (results with the
/// tool's name as `src`, `tool` when the call has none; a result's text blocks joined into
/// one); assistant text, thinking and tool calls carry none; a tag already at the end of a
/// stored text is not part of its content.
#[test]
fn ref_tags_on_user_text_and_tool_results() {
    let mut s = Session::new(SID);
    s.user(&"a".repeat(60)); // m00001: 15 tokens
    s.thinking("hmm", "Reading."); // m00002 thinking, m00003 text
    s.tool_use("toolu_1", "Read", json!({"path": "x"})); // m00004
    s.message(
        "user",
        json!([{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]),
    ); // m00005
    s.tool("toolu_2", "", json!({}), "anonymous"); // m00006, m00007
    s.user("tagged before\n<noa-ref id=\"m00042\" tokens=\"3\"/>"); // m00008
    let st = State::initial(SID);
    let v = view(&s, &st, &cfg());
    assert_eq!(v.len(), 7);
    assert_eq!(
        v[0]["message"],
        json!({"role": "user", "content": [{"type": "text", "text": format!("{}\n<noa-ref id=\"m00001\" tokens=\"15\"/>", "a".repeat(60))}]})
    );
    assert_eq!(v[0]["refs"], json!(["m00001"]));
    assert_eq!(v[1]["refs"], json!(["m00002", "m00003"]));
    assert_eq!(v[1]["message"]["content"][0]["thinking"], "hmm");
    assert_eq!(v[1]["message"]["content"][0]["signature"], "sig");
    assert_eq!(v[1]["message"]["content"][1]["text"], "Reading.");
    assert_eq!(v[2]["message"]["content"][0]["input"], json!({"path": "x"}));
    assert_eq!(
        v[3]["message"]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "one\ntwo\n<noa-ref id=\"m00005\" tokens=\"2\" src=\"Read\"/>"}]})
    );
    assert_eq!(
        v[5]["message"]["content"][0]["content"][0]["text"],
        "anonymous\n<noa-ref id=\"m00007\" tokens=\"3\" src=\"tool\"/>"
    );
    assert_eq!(
        v[6]["message"]["content"][0]["text"],
        "tagged before\n<noa-ref id=\"m00008\" tokens=\"4\"/>"
    );
    // Stripping the stored tag is what keeps the content's id stable.
    let plain = {
        let mut t = Session::new(SID);
        t.user("tagged before");
        t.ids()
    };
    assert_eq!(s.ids()[7], plain[0]);
}

/// A tag shows the token snapshot's number when the state has one (the count the model saw
/// first), formatted as the runtime formats it: exact below 1000, `%.1fK` below 10000, else
/// whole thousands.
#[test]
fn ref_tags_show_the_token_snapshot() {
    let mut s = Session::new(SID);
    for i in 1..=5 {
        s.user(&body(i, 10)).assistant("ok");
    }
    let ids = s.ids();
    let refs: Vec<String> = (1..=10).map(|n| format!("m{n:05}")).collect();
    let st = state_json(json!({
        "version": 1, "sessionId": SID, "nextBlockId": 1, "blocks": null,
        "messageRefs": {
            "byRaw": ids.iter().zip(&refs).map(|(i, r)| (i.clone(), json!(r))).collect::<serde_json::Map<_, _>>(),
            "byRef": refs.iter().zip(&ids).map(|(r, i)| (r.clone(), json!(i))).collect::<serde_json::Map<_, _>>()
        },
        "tokenSnapshot": {"m00001": 999, "m00003": 1000, "m00005": 1234, "m00007": 9999, "m00009": 12500},
        "nudge": {"lastPerMessageNudgeTokens": 0, "lastNudgeShownTokens": 0},
        "stats": {"tokensCompressed": 0, "compressionCount": 0}
    }));
    let v = view(&s, &st, &cfg());
    let shown: Vec<String> = v
        .iter()
        .filter(|l| l["message"]["role"] == "user")
        .map(|l| {
            let t = text_of_line(l);
            let at = t.find("tokens=\"").unwrap() + 8;
            t[at..at + t[at..].find('"').unwrap()].to_string()
        })
        .collect();
    assert_eq!(shown, ["999", "1.0K", "1.2K", "10.0K", "13K"]);
    // Without a snapshot entry, the live count (10).
    let mut bare = st.clone();
    bare.token_snapshot.clear();
    assert!(text_of_line(&view(&s, &bare, &cfg())[0]).ends_with("tokens=\"10\"/>"));
}

// ---------------------------------------------------------------- compaction markers

/// Only what follows the last compaction marker is projected: refs, view and blocks start
/// there; the materialized history of a session without a live block is every message as
/// it is, markers included.
#[test]
fn compaction_markers_cut_the_projection() {
    let mut s = Session::new(SID);
    s.user("old task").assistant("old answer");
    s.compact_marker(1000);
    s.user("older still").assistant("kept once");
    s.compact_marker(2000);
    s.user("new task").assistant("new answer");
    s.boundary();
    s.user("follow up");
    let msgs = s.msgs();
    assert_eq!(msgs.len(), 9, "the boundary record is no message");
    assert_eq!(content::last_marker(&msgs), Some(5));
    let cores = content::project(&msgs);
    let texts: Vec<String> = cores.iter().map(|c| c.text.get().into_owned()).collect();
    assert_eq!(texts, ["new task", "new answer", "follow up"]);
    let st = State::initial(SID);
    let v = view(&s, &st, &cfg());
    assert_eq!(view_refs(&v), ["m00001", "m00002", "m00003"]);
    assert!(text_of_line(&v[0]).starts_with("new task\n<noa-ref id=\"m00001\""));
    // Materialized without a live block: all nine messages, untagged.
    let p = Projection::new(s.msgs());
    let m = materialized(&p, &st);
    assert_eq!(m.len(), 9);
    assert_eq!(m[2]["message"]["content"][0]["type"], "compact_boundary");
    assert_eq!(m[0]["message"]["content"][0]["text"], "old task");
    assert!(m.iter().all(|l| !l.to_string().contains("<noa-ref")));
    // With a live block: the projection after the marker, the block's summary in place.
    let untailed = NoaConfig {
        protect_recent_messages: 0,
        ..cfg()
    };
    let st = compressed(&s, &st, &untailed, &[("m00001", "m00002")], 80);
    let m = materialized(&p, &st);
    let shape: Vec<String> = m
        .iter()
        .map(|l| match l.get("block") {
            Some(b) => b.as_str().unwrap().to_string(),
            None => text_of_line(l),
        })
        .collect();
    assert_eq!(shape, ["b1", "new task", "follow up"]);
    assert!(text_of_line(&m[0])
        .contains("<noa-archive block=\"b1\" tier=\"1\" range=\"m00001-m00002\""));
}

/// A replay records a Compress call's refs in its state and takes them back when the call
/// is not replayed: the state is then what it was, maps, liveness and snapshot alike.
#[test]
fn a_record_taken_back_leaves_the_state_as_it_was() {
    let cfg = building(&cfg());
    let mut s = chat(8, 60);
    let first = {
        let p = Projection::new(s.msgs());
        let t = views::turn(&p, &State::initial(SID), &cfg, &views::runtime_path);
        t.ledger(&State::initial(SID), &[])
    };
    let made = apply(
        &s,
        &first,
        &cfg,
        "c1",
        &ranges(&[("m00001", "m00004")], 400),
    );
    // Messages the state has no ref for yet.
    for i in 9..=14 {
        s.user(&body(i, 60));
    }
    let p = Projection::new(s.msgs());
    let t = views::turn(&p, &made.state, &cfg, &views::runtime_path);
    let mut state = made.state.clone();
    let recorded = t.record_undoable(&mut state);
    assert_eq!(state, t.ledger(&made.state, &[]));
    assert!(state.message_refs.by_raw.len() > made.state.message_refs.by_raw.len());
    assert!(normafs::noa::refs::highest_recorded(&state) > 8);
    recorded.undo(&mut state);
    assert_eq!(state, made.state);
    assert_eq!(
        normafs::noa::refs::highest_recorded(&state),
        normafs::noa::refs::highest_recorded(&made.state)
    );
}
