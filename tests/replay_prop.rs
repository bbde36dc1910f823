//! Property: for random sessions and random Compress batches applied as ctl applies them
//! (`noa::rebuild::ctl_apply`: against the view a resumed runtime sends, refused unless whole),
//! rebuilding from history — the batches as journal entries at their place in time, or as the
//! transcript's own Compress calls with their panels — gives the state the sequence gave.

mod common;

use common::{text_of, Session};
use normafs::config::NoaConfig;
use normafs::format::state::State;
use normafs::noa::args;
use normafs::noa::compress::{self, Placement};
use normafs::noa::content::Slot;
use normafs::noa::rebuild::{self, JournalBatch};
use normafs::noa::views::{self, Projection};
use proptest::prelude::*;
use serde_json::{json, Value};

const SID: &str = "s1";

fn place() -> Placement<'static> {
    Placement::new("/r/noa/s1", SID, "2026-11-30T12:00:00Z", 1_796_040_000)
}

#[derive(Debug, Clone)]
enum Step {
    /// Append messages: (kind, size).
    Grow(Vec<(u8, usize)>),
    /// A batch of ranges given as fractions (per mille) of the refs in view; `true` ends a
    /// range at a live block instead, when there is one.
    Compress(Vec<(u16, u16, bool)>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        prop::collection::vec((0u8..5, 1usize..60), 1..8).prop_map(Step::Grow),
        prop::collection::vec((0u16..1000, 0u16..1000, prop::bool::weighted(0.3)), 1..3)
            .prop_map(Step::Compress),
    ]
}

fn grow(s: &mut Session, n: &mut usize, kind: u8, size: usize) {
    *n += 1;
    match kind {
        0 => s.user(&format!("u{n} {}", text_of(size, 'u'))),
        1 => s.assistant(&format!("a{n} {}", text_of(size, 'a'))),
        2 => {
            let id = format!("tool{n}");
            s.tool(
                &id,
                "Read",
                json!({"path": format!("f{n}"), "size": size}),
                &text_of(size, 'r'),
            )
        }
        3 => s.thinking(&format!("t{n} {}", text_of(size, 't')), &format!("a{n}")),
        // What a session may hold besides (only in `odd` runs): a call never answered, a
        // result no call asked for, a result long before its call, reasoning with no act.
        5 => s
            .tool_use(&format!("lost{n}"), "Read", json!({"path": "x"}))
            .user(&format!("u{n} moving on")),
        6 => s.tool_result(&format!("nobody{n}"), &text_of(size, 'o')),
        7 => s
            .tool_result(&format!("early{n}"), &text_of(size, 'e'))
            .user(&format!("u{n} meanwhile"))
            .tool_use(&format!("early{n}"), "Read", json!({"path": "y"})),
        8 => s.message(
            "assistant",
            json!([{"type": "thinking", "thinking": format!("t{n} alone"), "signature": "s"}]),
        ),
        _ => s.boundary(),
    };
}

/// How a committed batch is recorded for the rebuild.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Record {
    Journal,
    Transcript,
}

fn run(steps: &[Step], cfg: &NoaConfig, record: Record) -> Result<State, TestCaseError> {
    run_with(steps, cfg, record, false)
}

/// [`run`]; `odd`: the appended messages include the kinds sessions hold besides well-formed
/// turns (see [`grow`]), and the replay's requests grown from the one before are checked
/// against the whole pipeline's at every point.
fn run_with(
    steps: &[Step],
    cfg: &NoaConfig,
    record: Record,
    odd: bool,
) -> Result<State, TestCaseError> {
    let mut s = Session::new(SID);
    let mut n = 0usize;
    for _ in 0..6 {
        grow(&mut s, &mut n, 0, 30);
        grow(&mut s, &mut n, 1, 30);
    }
    let mut state = State::initial(SID);
    let mut journal: Vec<JournalBatch> = Vec::new();
    let mut made = 0;
    for (k, st) in steps.iter().enumerate() {
        let picks = match st {
            Step::Grow(ms) => {
                for (kind, size) in ms {
                    // Kind 4 (a boundary) stands for the odd kinds in an odd run.
                    let kind = match (*kind, odd) {
                        (4, true) => 5 + (*size % 4) as u8,
                        (k, _) => k,
                    };
                    grow(&mut s, &mut n, kind, *size);
                }
                continue;
            }
            Step::Compress(p) => p,
        };
        if record == Record::Transcript {
            // The runtime replays a call against the projection up to and including the
            // call: a thinking turn that ran on into the call would then have a visible tool
            // call and be withdrawn from the range, while ctl (which ran before the call
            // existed) took it. A user message before each call keeps the call its own turn.
            grow(&mut s, &mut n, 0, 5);
        }
        let call = format!("toolu_c{k}");
        let (input, applied, prefix, before) = {
            let p = Projection::new(s.msgs());
            let t = views::turn(&p, &state, cfg, &views::runtime_path);
            let refs: Vec<String> = t
                .items
                .iter()
                .filter_map(|&q| match t.slot(q) {
                    slot @ Slot::Num(_) => slot.name().map(|n| n.into_owned()),
                    _ => None,
                })
                .collect();
            let live: Vec<String> = state
                .blocks()
                .iter()
                .zip(&t.active)
                .filter(|(_, &a)| a)
                .map(|(b, _)| b.block_id.clone())
                .collect();
            if refs.len() < 2 {
                continue;
            }
            let mut spans: Vec<(usize, usize, bool)> = picks
                .iter()
                .map(|&(a, b, to_block)| {
                    let x = a as usize * refs.len() / 1000;
                    let y = b as usize * refs.len() / 1000;
                    (x.min(y), x.max(y), to_block)
                })
                .collect();
            spans.sort();
            let content: Vec<Value> = spans
                .iter()
                .enumerate()
                .map(|(j, &(a, b, to_block))| {
                    let end = match (to_block, live.get(b % live.len().max(1))) {
                        (true, Some(block)) => block.clone(),
                        _ => refs[b].clone(),
                    };
                    json!({"startId": refs[a], "endId": end, "topic": format!("topic {k}.{j}"),
                           "summary": format!("Summary {k}.{j}: what this range of the session decided and found.")})
                })
                .collect();
            let input = json!({ "content": content });
            let parsed = args::parse(&input.to_string());
            let applied = rebuild::ctl_apply(
                &p,
                &state,
                cfg,
                &parsed.ranges,
                &call,
                &place(),
                &views::runtime_path,
            );
            (input, applied, p.cores.len(), t.measure)
        };
        if applied.whole() {
            made += 1;
            match record {
                Record::Journal => journal.push(JournalBatch {
                    prefix,
                    input: input.to_string(),
                    call: call.clone(),
                }),
                Record::Transcript => {
                    s.compress_call(&call, input, &compress::panel(&applied, before));
                }
            }
            state = applied.state;
        }
        // A refused batch writes nothing: not to the journal, not to the transcript. (A
        // failed call of the runtime would stay in its transcript, and count among the
        // orphaned Compress calls of later views — see the tests below.)
        grow(&mut s, &mut n, 0, 10);
        grow(&mut s, &mut n, 1, 10);
    }
    let p = Projection::new(s.msgs());
    if odd {
        let points: Vec<usize> = (0..=p.msgs.len()).collect();
        let path = &views::runtime_path;
        let replay = |asked| rebuild::Replay::new(&p, cfg, &place(), &journal, path).history(asked);
        let a = replay(rebuild::Asked::requests(&points));
        let b = replay(rebuild::Asked::whole(&points));
        prop_assert_eq!(&a.requests, &b.requests);
        prop_assert_eq!(&a.made, &b.made);
        prop_assert!(a.states == b.states, "the states differ");
        prop_assert!(a.grown > 0 || a.requests.len() < 2 || a.whole == a.requests.len());
        return Ok(state);
    }
    let rep = rebuild::Replay::new(&p, cfg, &place(), &journal, &views::runtime_path).rebuild();
    prop_assert_eq!(rep.replayed, made, "skipped: {:?}", rep.skipped);
    prop_assert_eq!(&rep.state.blocks, &state.blocks);
    prop_assert_eq!(rep.state.next_block_id, state.next_block_id);
    prop_assert_eq!(&rep.state.stats, &state.stats);
    if record == Record::Journal {
        prop_assert_eq!(&rep.state.message_refs, &state.message_refs);
    } else {
        // A call is replayed against the projection up to and including itself, so the
        // replay also records the call's own content as BLOCKED; ctl ran before the call was
        // written. Everything else is the same.
        prop_assert_eq!(&rep.state.message_refs.by_ref, &state.message_refs.by_ref);
        for (id, r) in &state.message_refs.by_raw {
            prop_assert_eq!(rep.state.message_refs.by_raw.get(id), Some(r));
        }
        for (id, r) in &rep.state.message_refs.by_raw {
            if !state.message_refs.by_raw.contains_key(id) {
                prop_assert_eq!(r.as_str(), "BLOCKED", "{}", id);
            }
        }
    }
    if record == Record::Journal {
        // The runtime's replay of its own calls freezes no tag counts; a journal batch is
        // replayed as ctl ran it, tags included.
        prop_assert_eq!(&rep.state.token_snapshot, &state.token_snapshot);
    }
    // Every block the state holds has its archive.
    let mut ids: Vec<&str> = rep.archives.iter().map(|a| a.block_id.as_str()).collect();
    ids.sort();
    let mut want: Vec<&str> = state.blocks().iter().map(|b| b.block_id.as_str()).collect();
    want.sort();
    prop_assert_eq!(ids, want);
    // And the views agree (refs recorded or not, the assignment is the same).
    let a = views::Files::new(&p, &state, cfg, SID, &views::runtime_path)
        .view()
        .to_jsonl();
    let b = views::Files::new(&p, &rep.state, cfg, SID, &views::runtime_path)
        .view()
        .to_jsonl();
    prop_assert_eq!(String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
    Ok(state)
}

/// A window large enough that no view of these sessions truncates (the runtime's replay
/// counts 0 tokens: it never truncates).
fn cfg(max_tier: u32, min_range_chars: usize) -> NoaConfig {
    NoaConfig {
        window: 1_000_000,
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        min_range_chars,
        max_tier,
        ..NoaConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn rebuild_from_the_journal_equals_the_ctl_sequence(
        steps in prop::collection::vec(step(), 1..14),
        max_tier in 1u32..4,
        min_range_chars in prop_oneof![Just(0usize), 50usize..400],
    ) {
        run(&steps, &cfg(max_tier, min_range_chars), Record::Journal)?;
    }

    #[test]
    fn rebuild_from_transcript_calls_equals_the_ctl_sequence(
        steps in prop::collection::vec(step(), 1..14),
        max_tier in 1u32..4,
        min_range_chars in prop_oneof![Just(0usize), 50usize..400],
    ) {
        run(&steps, &cfg(max_tier, min_range_chars), Record::Transcript)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Grown requests are the whole pipeline's over sessions with odd messages too.
    #[test]
    fn grown_requests_with_odd_messages(
        steps in prop::collection::vec(step(), 1..12),
        record in prop_oneof![Just(Record::Journal), Just(Record::Transcript)],
    ) {
        run_with(&steps, &cfg(3, 0), record, true)?;
    }
}

/// A fixed sequence that makes blocks at two tiers, so the property is known to reach them.
#[test]
fn a_known_sequence_reaches_tier2_and_rebuilds() {
    let steps = vec![
        Step::Compress(vec![(0, 300, false)]),
        Step::Grow(vec![(0, 40), (1, 40), (2, 40), (3, 20)]),
        Step::Compress(vec![(400, 600, false)]),
        Step::Grow(vec![(0, 40), (1, 40)]),
        Step::Compress(vec![(0, 999, true)]),
    ];
    let st = run(&steps, &cfg(3, 0), Record::Journal).expect("the same state");
    let tiers: Vec<(i64, bool)> = st.blocks().iter().map(|b| (b.tier, b.active)).collect();
    // The last range starts at m00001, which b1 covers — but the first user message stays
    // in view, after b1's summary: so the range holds b2's summary only, and the tier-2
    // block absorbs b2 alone.
    assert_eq!(tiers, [(1, true), (1, false), (2, true)]);
    // As transcript calls (each after a user message, so other refs are picked).
    let st = run(&steps, &cfg(3, 0), Record::Transcript).expect("the same state");
    assert_eq!(
        st.blocks()
            .iter()
            .filter(|b| b.tier == 2 && b.active)
            .count(),
        1
    );
    assert_eq!(
        st.blocks()
            .iter()
            .filter(|b| b.tier == 1 && !b.active)
            .count(),
        1
    );
}

/// The transcript's calls whose panel lists no block are skipped; one whose panel lists a
/// block is replayed whatever its `is_error` (the runtime's own test, SPEC 4.8).
#[test]
fn only_calls_whose_panel_lists_a_block_are_replayed() {
    let mut s = Session::new(SID);
    let mut n = 0;
    for _ in 0..6 {
        grow(&mut s, &mut n, 0, 30);
        grow(&mut s, &mut n, 1, 30);
    }
    let cfg = cfg(3, 0);
    let input = json!({"content": [{"startId": "m00002", "endId": "m00005", "summary": "Summary of the early part of the session, long enough."}]});
    s.tool_use("toolu_f", "Compress", input.clone());
    s.tool_result("toolu_f", "▣ noa | 0 blocks created\n  error: something");
    grow(&mut s, &mut n, 0, 10);
    let p = Projection::new(s.msgs());
    let rep = rebuild::Replay::new(&p, &cfg, &place(), &[], &views::runtime_path).rebuild();
    assert_eq!(rep.replayed, 0);
    assert!(rep.state.blocks().is_empty());
    assert_eq!(rep.skipped.len(), 1);
    assert!(rep.skipped[0].starts_with("toolu_f:"), "{:?}", rep.skipped);

    // The same input, its result an error that lists a block: replayed.
    s.tool_use("toolu_e", "Compress", input);
    s.tool_result_error(
        "toolu_e",
        "▣ noa | 1 → 1 tokens\n  b1(T1)=m00002–m00005 → /x",
    );
    let p = Projection::new(s.msgs());
    let rep = rebuild::Replay::new(&p, &cfg, &place(), &[], &views::runtime_path).rebuild();
    assert_eq!(rep.replayed, 1, "{:?}", rep.skipped);
    assert_eq!(rep.state.blocks()[0].compress_call_id, "toolu_e");
    assert_eq!(
        (
            rep.state.blocks()[0].start_ref.as_str(),
            rep.state.blocks()[0].end_ref.as_str()
        ),
        ("m00002", "m00005")
    );
}

/// A shrunk failure: a thinking turn right before batches that ctl refused. Recorded as the
/// runtime's failed calls, those calls would stay in the transcript; replaying the last
/// successful call against the projection up to and including itself, the call counts among
/// the orphaned Compress calls, the oldest failed one drops out of that view, and the
/// thinking turn it split is whole again — so the replay takes the thinking while ctl did
/// not. ctl writes nothing for a refused batch, and then the rebuild equals the sequence.
#[test]
fn regression_a_thinking_turn_before_refused_batches() {
    let steps = vec![
        Step::Grow(vec![(0, 1)]),
        Step::Grow(vec![(0, 1), (2, 1)]),
        Step::Grow(vec![(0, 1), (0, 1), (3, 1)]),
        Step::Compress(vec![(200, 0, false), (0, 0, false)]),
        Step::Compress(vec![(91, 591, false)]),
        Step::Compress(vec![(417, 417, true)]),
        Step::Grow(vec![(0, 1)]),
        Step::Compress(vec![(0, 0, true), (5, 179, false)]),
        Step::Compress(vec![(198, 469, true)]),
    ];
    for record in [Record::Journal, Record::Transcript] {
        let st = run(&steps, &cfg(3, 0), record).expect("the same state");
        assert!(!st.blocks().is_empty(), "{record:?}");
    }
}

/// A shrunk failure: a range ending at a thinking whose turn runs on (its text act in the
/// protected tail) up to where the Compress call is written. ctl folds the thinking (only a
/// visible *tool call* withdraws a turn); a replay against the projection that includes the
/// call sees the call as the turn's visible tool call and withdraws it. So a call written
/// straight after such a turn replays differently; after a user message, the same.
#[test]
fn regression_a_thinking_turn_running_on_into_the_call() {
    let steps = vec![
        Step::Grow(vec![(3, 1), (1, 1)]),
        Step::Compress(vec![(800, 0, false)]),
    ];
    run(&steps, &cfg(1, 0), Record::Journal).expect("journal");
    let st = run(&steps, &cfg(1, 0), Record::Transcript).expect("transcript");
    assert_eq!(st.blocks().len(), 1);
}
