//! The noa core on small hand-written sessions: view, compress, tiers, truncation, nudges.

mod common;

use common::{lines, text_of, Session};
use normafs::config::NoaConfig;
use normafs::format::state::State;
use normafs::noa::compress::{self, Batch, CompressError, Ctx, RangeSpec};
use normafs::noa::view;
use normafs::noa::Msg;
use serde_json::json;

const NOW: &str = "2026-11-30T12:00:00Z";

fn cfg() -> NoaConfig {
    NoaConfig {
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        ..NoaConfig::default()
    }
}

fn range(start: &str, end: &str, summary: &str) -> RangeSpec {
    RangeSpec {
        start: start.into(),
        end: end.into(),
        topic: Some("topic".into()),
        summary: summary.into(),
    }
}

fn run(
    msgs: &[Msg<'_>],
    state: &State,
    cfg: &NoaConfig,
    call: &str,
    ranges: Vec<RangeSpec>,
) -> Result<compress::Planned, CompressError> {
    let ctx = Ctx {
        msgs,
        state,
        cfg,
        strict: true,
        call_id: call,
        now: NOW,
        session: "s1",
        archive_root: "/root/noa/s1",
    };
    compress::plan(&ctx, &Batch { ranges })
}

/// Ten long user/assistant messages, then a short tail.
fn chat(n: usize) -> Session {
    let mut s = Session::new("s1");
    for i in 0..n {
        if i % 2 == 0 {
            s.user(&format!("question {i} {}", text_of(30, 'q')));
        } else {
            s.assistant(&format!("answer {i} {}", text_of(30, 'a')));
        }
    }
    s
}

const SUMMARY: &str = "The user asked questions and got long answers about the build.";

#[test]
fn compress_then_view_shows_the_summary_and_hides_the_consumed_call() {
    let mut s = chat(6);
    let st = State::initial("s1");
    let cfg = cfg();
    let msgs = s.msgs();
    let planned = run(
        &msgs,
        &st,
        &cfg,
        "toolu_c1",
        vec![range("m0001", "m0004", SUMMARY)],
    )
    .expect("compress");
    assert_eq!(planned.blocks.len(), 1);
    let b = &planned.blocks[0].block;
    assert_eq!((b.block_id.name().as_str(), b.tier), ("b1", 1));
    assert_eq!(
        (b.start_ref.as_str(), b.end_ref.as_str()),
        ("m0001", "m0004")
    );
    assert_eq!(b.archive_rel, "tier1/b1_m0001-m0004.md");
    assert_eq!(b.archive_path, "/root/noa/s1/tier1/b1_m0001-m0004.md");
    assert_eq!(b.effective_message_ids.len(), 4);
    assert_eq!(planned.state.next_block_id, 2);
    assert_eq!(planned.state.stats.compression_count, 1);
    assert_eq!(planned.state.stats.tokens_compressed, b.compressed_tokens);
    assert_eq!(planned.state.message_refs.by_ref.len(), 6);
    drop(msgs);

    // The runtime records the Compress call and its result; the view hides both.
    s.tool_use(
        "toolu_c1",
        "Compress",
        json!({"ranges":[{"start":"m0001","end":"m0004","summary":SUMMARY}]}),
    );
    s.tool_result("toolu_c1", "Compressed m0001-m0004 into b1.");
    s.user("next question");
    let msgs = s.msgs();
    let v = view::project(&msgs, &planned.state, &cfg);
    let out = lines(&v.to_jsonl());
    assert_eq!(out.len(), 4, "{out:#?}");
    assert_eq!(out[0]["block"], "b1");
    assert_eq!(out[0]["start"], "m0001");
    assert_eq!(out[0]["end"], "m0004");
    let text = out[0]["message"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(
        text.starts_with("[noa archive b1 · tier 1 · m0001–m0004 · "),
        "{text}"
    );
    assert!(text.contains(SUMMARY));
    assert!(
        text.contains("archive: tier1/b1_m0001-m0004.md (/root/noa/s1/tier1/b1_m0001-m0004.md)")
    );
    assert_eq!(out[1]["ref"], "m0005");
    assert_eq!(out[2]["ref"], "m0006");
    assert_eq!(out[3]["ref"], "m0009");
    let all = String::from_utf8(v.to_jsonl()).expect("utf8");
    assert!(
        !all.contains("toolu_c1"),
        "consumed call still visible: {all}"
    );
}

#[test]
fn tier2_consolidation_absorbs_only_the_lowest_tier() {
    let s = chat(16);
    let cfg = cfg();
    let msgs = s.msgs();
    let mut st = State::initial("s1");
    for (i, (a, b)) in [("m0001", "m0002"), ("m0003", "m0004"), ("m0005", "m0006")]
        .iter()
        .enumerate()
    {
        st = run(
            &msgs,
            &st,
            &cfg,
            &format!("c{i}"),
            vec![range(a, b, SUMMARY)],
        )
        .expect("tier1")
        .state;
    }
    // b4 = tier 2 over b1+b2; then b5 tier1 over m0007-m0008.
    st = run(
        &msgs,
        &st,
        &cfg,
        "c3",
        vec![range("m0001", "m0004", SUMMARY)],
    )
    .expect("tier2")
    .state;
    let b4 = st.blocks.last().expect("b4").clone();
    assert_eq!((b4.block_id.name().as_str(), b4.tier), ("b4", 2));
    assert_eq!(
        b4.direct_block_ids
            .iter()
            .map(|b| b.name())
            .collect::<Vec<_>>(),
        ["b1", "b2"]
    );
    assert!(!st.blocks[0].active && !st.blocks[1].active && st.blocks[2].active);
    st = run(
        &msgs,
        &st,
        &cfg,
        "c4",
        vec![range("m0007", "m0008", SUMMARY)],
    )
    .expect("tier1 b5")
    .state;
    // A range over b4 (tier 2), b3 (tier 1), b5 (tier 1) and loose m0009-m0010: tier 2 absorbing
    // b3 and b5 only; b4 stays active.
    let p = run(
        &msgs,
        &st,
        &cfg,
        "c5",
        vec![range("m0002", "m0010", SUMMARY)],
    )
    .expect("mixed");
    let b6 = &p.blocks[0];
    assert_eq!(b6.block.tier, 2);
    assert_eq!(b6.absorbed, ["b3", "b5"]);
    assert!(!b6.terminal);
    let names: Vec<_> = p
        .state
        .blocks
        .iter()
        .filter(|b| b.active)
        .map(|b| b.block_id.name())
        .collect();
    assert_eq!(names, ["b4", "b6"]);
    // Coverage of b6 is non-contiguous around nothing here: m0005..m0010.
    assert_eq!(
        (b6.block.start_ref.as_str(), b6.block.end_ref.as_str()),
        ("m0005", "m0010")
    );
    assert_eq!(b6.block.effective_message_ids.len(), 6);
    assert_eq!(b6.loose, 2);
    let v = view::project(&msgs, &p.state, &cfg);
    let out = lines(&v.to_jsonl());
    assert_eq!(out[0]["block"], "b4");
    assert_eq!(out[1]["block"], "b6");
    assert_eq!(out[2]["ref"], "m0011");
}

#[test]
fn terminal_recompress_is_reported() {
    let s = chat(12);
    let cfg = NoaConfig {
        max_tier: 1,
        ..cfg()
    };
    let msgs = s.msgs();
    let st = run(
        &msgs,
        &State::initial("s1"),
        &cfg,
        "c1",
        vec![range("m0001", "m0004", SUMMARY)],
    )
    .expect("b1")
    .state;
    let p = run(
        &msgs,
        &st,
        &cfg,
        "c2",
        vec![range("m0001", "m0006", SUMMARY)],
    )
    .expect("b2");
    assert_eq!(p.blocks[0].block.tier, 1);
    assert!(p.blocks[0].terminal);
    assert_eq!(
        p.blocks[0].result_json()["note"],
        "terminal recompress (detail loss)"
    );
}

#[test]
fn a_live_block_with_missing_messages_drops_out_of_the_view() {
    let s = chat(8);
    let cfg = cfg();
    let msgs = s.msgs();
    let mut st = run(
        &msgs,
        &State::initial("s1"),
        &cfg,
        "c1",
        vec![range("m0001", "m0004", SUMMARY)],
    )
    .expect("b1")
    .state;
    st.blocks[0].effective_message_ids.push("gone".into());
    let v = view::project(&msgs, &st, &cfg);
    assert_eq!(v.mat.live, [false]);
    let out = lines(&v.to_jsonl());
    assert_eq!(out.len(), 8);
    assert_eq!(out[0]["ref"], "m0001");
}

#[test]
fn batch_errors_name_the_problem_and_reject_everything() {
    let s = chat(10);
    let cfg = cfg();
    let msgs = s.msgs();
    let st = State::initial("s1");
    let err = |r: Vec<RangeSpec>| {
        run(&msgs, &st, &cfg, "c", r)
            .expect_err("must fail")
            .to_string()
    };
    assert_eq!(
        err(vec![range("m0001", "m0099", SUMMARY)]),
        "unknown ref m0099"
    );
    assert_eq!(
        err(vec![range("m0010", "m0004", SUMMARY)]),
        "range m0010..m0004 ends before it starts"
    );
    assert_eq!(
        err(vec![range("m0001", "m0004", "too short")]),
        "summary shorter than 50 characters"
    );
    // The second range is bad: the first is not applied either (plan returns an error only).
    assert!(err(vec![
        range("m0001", "m0002", SUMMARY),
        range("m0002", "m0004", SUMMARY)
    ])
    .contains("overlaps"));
    assert!(err(vec![range("m0001", "m0009", SUMMARY)]).contains("protected tail"));
    assert!(err(vec![range("m0001", "m0001", SUMMARY)]).contains("at least 2"));
    assert!(
        err(vec![range("m0001", "m0002", &"long summary ".repeat(100))]).contains("not shorter")
    );
}

#[test]
fn ranges_widen_to_keep_tool_pairs_together() {
    let mut s = Session::new("s1");
    s.user(&text_of(40, 'u'));
    s.tool_use("t1", "Read", json!({"path": "a"}));
    s.tool_result("t1", &text_of(40, 'r'));
    s.assistant(&text_of(40, 'a'));
    s.user("tail 1");
    s.user("tail 2");
    let cfg = cfg();
    let msgs = s.msgs();
    let p = run(
        &msgs,
        &State::initial("s1"),
        &cfg,
        "c",
        vec![range("m0001", "m0002", SUMMARY)],
    )
    .expect("widened");
    assert_eq!(p.blocks[0].block.end_ref, "m0003");
    // A range holding the Compress tool (hard-protected) is refused.
    let mut s2 = Session::new("s1");
    s2.user(&text_of(40, 'u'));
    s2.tool_use("c9", "Compress", json!({"ranges": []}));
    s2.tool_result("c9", "error: bad");
    s2.user(&text_of(40, 'u'));
    s2.user("tail 1");
    s2.user("tail 2");
    let msgs2 = s2.msgs();
    let e = run(
        &msgs2,
        &State::initial("s1"),
        &cfg,
        "c",
        vec![range("m0001", "m0004", SUMMARY)],
    )
    .expect_err("protected tool");
    assert!(e.to_string().contains("protected tool Compress"), "{e}");
}

#[test]
fn emergency_truncation_keeps_head_and_tail_and_stops_at_the_threshold() {
    let mut s = Session::new("s1");
    let big = |c: char| format!("HEAD{}TAIL", text_of(1000, c));
    s.user("start");
    for i in 0..6 {
        let id = format!("t{i}");
        s.tool_use(&id, "Read", json!({"n": i}));
        s.tool_result(&id, &big(char::from(b'a' + i as u8)));
    }
    s.user("end");
    let cfg = NoaConfig {
        window: 4000,
        truncate_ratio: 0.95,
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        ..NoaConfig::default()
    };
    let msgs = s.msgs();
    let st = State::initial("s1");
    let v = view::project(&msgs, &st, &cfg);
    assert!(v.measured > 3800);
    assert!(v.projected <= 3800, "{}", v.projected);
    let out = lines(&v.to_jsonl());
    let truncated: Vec<_> = out.iter().filter(|l| l["truncated"] == true).collect();
    // Each result is ~1002 tokens and keeps 1536 bytes when cut: four must be cut, oldest
    // first, to get under 3800.
    assert_eq!(truncated.len(), 4, "{}", v.projected);
    assert_eq!(truncated[0]["ref"], "m0003");
    let t = truncated[0]["message"]["content"][0]["content"][0]["text"]
        .as_str()
        .expect("text");
    let a = |n: usize| "a".repeat(n);
    assert!(t.starts_with(&format!("HEAD{}\n[… ", a(1020))), "{t}");
    assert!(
        t.ends_with(&format!(" bytes truncated by noa …]\n{}TAIL", a(508))),
        "{t}"
    );
    assert_eq!(out.last().expect("nudge")["nudge"], "urgent");
    // The latest result is in the protected tail (the last two items) and stays whole.
    assert!(out[12].get("truncated").is_none());
}

#[test]
fn nudges_appear_in_the_right_band() {
    let cfg = NoaConfig {
        window: 10_000,
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        min_benefit_tokens: Some(100),
        // The cadence this test was written for (SPEC 10's default floor is 50000).
        growth_floor: 5_000,
        ..NoaConfig::default()
    };
    let nudge_of = |tokens: usize, last: u64| {
        let mut s = Session::new("s1");
        s.user(&text_of(tokens, 'x'));
        s.user("a");
        s.user("b");
        let msgs = s.msgs();
        let mut st = State::initial("s1");
        st.nudge.last_per_message_nudge_tokens = last;
        view::project(&msgs, &st, &cfg).nudge.map(|n| n.kind)
    };
    assert_eq!(nudge_of(4000, 0), None, "below the floor");
    assert_eq!(
        nudge_of(5000, 0).as_deref(),
        Some("tier1"),
        "floor band, cadence reached"
    );
    assert_eq!(
        nudge_of(5000, 4800),
        None,
        "floor band, cadence not reached"
    );
    assert_eq!(
        nudge_of(8000, 7900).as_deref(),
        Some("tier1"),
        "pressure band ignores cadence"
    );
    assert_eq!(
        nudge_of(9800, 0).as_deref(),
        Some("urgent"),
        "above the truncate ratio"
    );
}

#[test]
fn tier2_nudge_after_enough_tier1_blocks() {
    let s = chat(20);
    let cfg = NoaConfig {
        tier2_min_blocks: 3,
        window: 1_000_000,
        growth_floor: 0,
        growth_ratio: 0.0,
        ..cfg()
    };
    let msgs = s.msgs();
    let mut st = State::initial("s1");
    for (i, a) in [1, 3, 5].iter().enumerate() {
        st = run(
            &msgs,
            &st,
            &cfg,
            &format!("c{i}"),
            vec![range(
                &format!("m{a:04}"),
                &format!("m{:04}", a + 1),
                SUMMARY,
            )],
        )
        .expect("b")
        .state;
    }
    let v = view::project(&msgs, &st, &cfg);
    let n = v.nudge.expect("tier2 nudge");
    assert_eq!(n.kind, "tier2");
    assert!(n.text.contains("b1, b2, b3"), "{}", n.text);
}

#[test]
fn example_root_view_status_and_raw_range() {
    use normafs::noa::status::{status, StatusInputs};
    use normafs::store::root::RootPaths;
    use normafs::store::session;
    let d = common::example_root();
    let paths = RootPaths::from_root(d.path());
    let s = session::load(&paths, "7f0c2a");
    let msgs = s.msgs();
    let cfg = NoaConfig::default();
    let v = view::project(&msgs, &s.state.state, &cfg);
    assert_eq!(
        v.mat.hidden.len(),
        4,
        "the two consumed Compress calls and their results"
    );
    let subs: Vec<(String, normafs::format::transcript::Usage)> = s
        .sidechains
        .iter()
        .map(|(a, _, t)| (a.clone(), t.usage.clone()))
        .collect();
    let st = status(
        &v,
        &cfg,
        &StatusInputs {
            session: "7f0c2a",
            usage: &s.transcript.usage,
            subagents: &subs,
            problems: (0, 0, 0),
            state_error: None,
        },
    );
    assert_eq!(st["messages"], 16);
    assert_eq!(st["viewLines"], 4);
    assert_eq!(st["band"], "below-floor");
    assert_eq!(st["liveBlocksByTier"]["1"], 2);
    assert_eq!(st["refs"]["last"], "m0016");
    assert_eq!(st["usage"]["parent"]["input_tokens"], 9600);
    assert_eq!(st["usage"]["subagents"]["ag-41"]["input_tokens"], 1200);
    assert_eq!(st["usage"]["sum"]["input_tokens"], 10800);
    assert_eq!(st["projectedTokens"], v.projected);

    // raw/m0002-m0003.md: untruncated raw messages rendered like an archive body.
    let raw = view::raw_range(&msgs, &v.mat.refs, "m0002", "m0003").expect("raw");
    assert!(raw.starts_with("# Raw m0002–m0003\n\n## m0002 · assistant · 2026-10-02T09:00:22.000000001Z\n\n### thinking\n\nCheck the CI log first."), "{raw}");
    assert!(
        raw.contains("### tool_result toolu_a1\n\n```\nld: error: undefined symbol: zstd_compress")
    );
    // A range spanning hidden Compress calls includes them: raw evidence.
    let raw = view::raw_range(&msgs, &v.mat.refs, "m0011", "m0012").expect("raw");
    assert!(raw.contains("### tool_use Compress (toolu_c1)"));
    assert_eq!(
        view::raw_range(&msgs, &v.mat.refs, "m0003", "m0099")
            .expect_err("unknown")
            .to_string(),
        "unknown ref m0099"
    );
    assert!(view::raw_range(&msgs, &v.mat.refs, "m0005", "m0002").is_err());
}
