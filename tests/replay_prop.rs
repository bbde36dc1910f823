//! Property: for random sessions and random valid compress sequences, rebuilding from history
//! gives the state that the sequence of compress commands gave.

mod common;

use common::{text_of, Session};
use normafs::config::NoaConfig;
use normafs::format::state::State;
use normafs::noa::compress::{self, Batch, Ctx, RangeSpec};
use normafs::noa::replay;
use normafs::noa::view;
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Step {
    /// Append messages: (kind, size).
    Grow(Vec<(u8, usize)>),
    /// Try a compress of items (a, b) given as fractions of the compressible items.
    Compress(Vec<(u16, u16)>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        prop::collection::vec((0u8..4, 1usize..60), 1..8).prop_map(Step::Grow),
        prop::collection::vec((0u16..1000, 0u16..1000), 1..3).prop_map(Step::Compress),
    ]
}

fn grow(s: &mut Session, n: &mut usize, kind: u8, size: usize) {
    *n += 1;
    match kind {
        0 => s.user(&format!("u{n} {}", text_of(size, 'u'))),
        1 => s.assistant(&format!("a{n} {}", text_of(size, 'a'))),
        2 => {
            let id = format!("tool{n}");
            s.tool_use(&id, "Read", json!({"path": format!("f{n}"), "size": size}));
            s.tool_result(&id, &text_of(size, 'r'))
        }
        _ => s.boundary(),
    };
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn rebuild_equals_the_compress_sequence(steps in prop::collection::vec(step(), 1..14), max_tier in 1u32..4) {
        let cfg = NoaConfig { protect_recent_messages: 2, protect_recent_tokens: 0, max_tier, ..NoaConfig::default() };
        let mut s = Session::new("s1");
        let mut n = 0usize;
        for _ in 0..6 { grow(&mut s, &mut n, 0, 30); grow(&mut s, &mut n, 1, 30); }
        let mut state = State::initial("s1");
        let mut calls = 0;
        for st in &steps {
            match st {
                Step::Grow(ms) => for (k, size) in ms { grow(&mut s, &mut n, *k, *size); },
                Step::Compress(fracs) => {
                    let msgs = s.msgs();
                    let mat = view::materialize(&msgs, &state, &cfg);
                    let tail = view::protected_start(&mat.items, &cfg);
                    if tail < 2 { continue; }
                    let mut picks: Vec<(usize, usize)> = fracs.iter().map(|(a, b)| {
                        let x = *a as usize * tail / 1000;
                        let y = *b as usize * tail / 1000;
                        (x.min(y), x.max(y))
                    }).collect();
                    picks.sort();
                    let ranges: Vec<RangeSpec> = picks.iter().map(|&(a, b)| {
                        let (start, _) = mat.item_span(&mat.items[a]);
                        let (_, end) = mat.item_span(&mat.items[b]);
                        RangeSpec { start, end, topic: Some(format!("topic {calls}")), summary: format!("Summary number {calls} of a range of the session.") }
                    }).collect();
                    let call_id = format!("toolu_c{calls}");
                    let now = s.next_timestamp();
                    let ctx = Ctx { msgs: &msgs, state: &state, cfg: &cfg, strict: true, call_id: &call_id, now: &now, session: "s1", archive_root: "/r/noa/s1" };
                    let batch = Batch { ranges: ranges.clone() };
                    let planned = compress::plan(&ctx, &batch);
                    drop(msgs);
                    calls += 1;
                    let input = json!({"ranges": ranges.iter().map(|r| json!({"start": r.start, "end": r.end, "topic": r.topic, "summary": r.summary})).collect::<Vec<_>>()});
                    match planned {
                        Ok(p) => {
                            s.tool_use(&call_id, "Compress", input);
                            s.tool_result(&call_id, "Compressed.");
                            state = p.state;
                        }
                        Err(_) => {
                            // The runtime refused it: recorded with an error result, never replayed.
                            s.tool_use(&call_id, "Compress", input);
                            s.tool_result_error(&call_id, "refused");
                        }
                    }
                    // Keep the tail unprotected-free of the call for the next step.
                    grow(&mut s, &mut n, 0, 10);
                    grow(&mut s, &mut n, 1, 10);
                }
            }
        }
        let msgs = s.msgs();
        let mut events = replay::transcript_calls(&msgs, &cfg);
        replay::order(&mut events);
        let rep = replay::replay(&msgs, &events, &cfg, "s1", "/r/noa/s1");
        prop_assert!(rep.skipped.is_empty(), "skipped: {:?}", rep.skipped);
        prop_assert_eq!(&rep.state.blocks, &state.blocks);
        prop_assert_eq!(rep.state.next_block_id, state.next_block_id);
        prop_assert_eq!(&rep.state.stats, &state.stats);
        prop_assert_eq!(&rep.state.message_refs, &state.message_refs);
        prop_assert_eq!(&rep.state.token_snapshot, &state.token_snapshot);
        // And the views agree.
        let a = view::project(&msgs, &state, &cfg).to_jsonl();
        let b = view::project(&msgs, &rep.state, &cfg).to_jsonl();
        prop_assert_eq!(a, b);
    }
}
