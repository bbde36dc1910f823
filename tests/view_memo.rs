//! The view computed again from a memo after appends is byte for byte the view computed from
//! scratch: across appends (complete lines, unterminated and torn last lines, repeated uuids,
//! messages a dead block waits for, calls of protected tools), state changes, rewrites of the
//! file, and truncation and protection boundaries that move.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use normafs::config::NoaConfig;
use normafs::format::loader::Transcript;
use normafs::format::state::State;
use normafs::noa::view;
use normafs::store::session;
use normafs::store::transcripts::TranscriptFile;
use proptest::prelude::*;
use serde_json::json;

/// Raw ids: a small pool, so that states name them before they exist and uuids repeat.
fn uuid(n: u8) -> String {
    format!("u{:031}", n % 24)
}

/// Tool ids, shared by calls, results and blocks' Compress calls.
fn tool_id(n: u8) -> String {
    format!("toolu_{}", n % 6)
}

#[derive(Debug, Clone)]
enum Line {
    Text { uuid: u8, role: u8, len: u16 },
    Call { uuid: u8, id: u8, compress: bool },
    Result { uuid: u8, id: u8, len: u16 },
    Boundary { uuid: u8 },
}

impl Line {
    fn json(&self) -> String {
        let record = |uuid: u8, role: &str, content: serde_json::Value| {
            json!({"uuid": self::uuid(uuid), "session_id": "s", "type": "message",
                   "message": {"role": role, "content": content}})
            .to_string()
        };
        match *self {
            Line::Text { uuid, role, len } => record(
                uuid,
                ["user", "assistant", "system"][role as usize % 3],
                json!([{"type": "text", "text": "é".repeat(len as usize)}]),
            ),
            Line::Call { uuid, id, compress } => record(
                uuid,
                "assistant",
                json!([{"type": "text", "text": "calling"},
                       {"type": "tool_use", "id": tool_id(id),
                        "name": if compress { "Compress" } else { "Read" }, "input": {"n": id}}]),
            ),
            Line::Result { uuid, id, len } => record(
                uuid,
                "user",
                json!([{"type": "tool_result", "tool_use_id": tool_id(id),
                        "content": [{"type": "text", "text": "r".repeat(len as usize)}]}]),
            ),
            Line::Boundary { uuid } => {
                json!({"uuid": self::uuid(uuid), "type": "boundary"}).to_string()
            }
        }
    }
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        4 => (any::<u8>(), any::<u8>(), 0u16..400).prop_map(|(uuid, role, len)| Line::Text { uuid, role, len }),
        2 => (any::<u8>(), any::<u8>(), proptest::bool::weighted(0.2))
            .prop_map(|(uuid, id, compress)| Line::Call { uuid, id, compress }),
        2 => (any::<u8>(), any::<u8>(), 0u16..2000).prop_map(|(uuid, id, len)| Line::Result { uuid, id, len }),
        1 => any::<u8>().prop_map(|uuid| Line::Boundary { uuid }),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    /// Complete lines.
    Append(Vec<Line>),
    /// A line without its newline: the first `cut` bytes of it (all of it when `cut` is large).
    Unterminated(Line, u16),
    /// Only a newline (ends an unterminated line).
    Newline,
    /// A new state.json.
    State(StateSpec),
    /// The file rewritten with its first `keep` lines.
    Rewrite(u8),
    /// A read of view.md instead of view.jsonl (the memo then has no lines for new items).
    ReadMarkdown,
}

#[derive(Debug, Clone)]
struct StateSpec {
    /// (first uuid, count, active, tier, compress call)
    blocks: Vec<(u8, u8, bool, u8, Option<u8>)>,
    /// uuids with recorded refs, and the number to start from.
    refs: Vec<u8>,
    ref_base: u16,
    /// Frozen tokens for some recorded refs.
    frozen: Vec<(u8, u16)>,
}

fn state_spec() -> impl Strategy<Value = StateSpec> {
    (
        proptest::collection::vec(
            (
                any::<u8>(),
                1u8..5,
                proptest::bool::weighted(0.8),
                1u8..3,
                proptest::option::of(any::<u8>()),
            ),
            0..4,
        ),
        proptest::collection::vec(any::<u8>(), 0..10),
        0u16..30,
        proptest::collection::vec((any::<u8>(), 0u16..3000), 0..5),
    )
        .prop_map(|(blocks, refs, ref_base, frozen)| StateSpec {
            blocks,
            refs,
            ref_base,
            frozen,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => proptest::collection::vec(line(), 1..6).prop_map(Op::Append),
        1 => (line(), any::<u16>()).prop_map(|(l, cut)| Op::Unterminated(l, cut)),
        1 => Just(Op::Newline),
        1 => state_spec().prop_map(Op::State),
        1 => any::<u8>().prop_map(Op::Rewrite),
        1 => Just(Op::ReadMarkdown),
    ]
}

fn build_state(spec: &StateSpec) -> State {
    let mut st = State::initial("s");
    for (n, &(first, count, active, tier, call)) in spec.blocks.iter().enumerate() {
        let ids: Vec<String> = (0..count).map(|k| uuid(first.wrapping_add(k))).collect();
        let block = json!({
            "blockId": format!("b{}", n + 1), "tier": tier, "summary": "a summary",
            "effectiveMessageIds": ids, "archiveRel": "tier1/x.md",
            "startRef": "m0001", "endRef": "m0002", "active": active,
            "compressCallId": call.map(tool_id).unwrap_or_default(),
        });
        st.blocks
            .push(serde_json::from_value(block).expect("a block"));
    }
    for (k, &u) in spec.refs.iter().enumerate() {
        let r = format!("m{:04}", spec.ref_base as usize + k + 1);
        st.message_refs.by_raw.insert(uuid(u), r.clone());
        st.message_refs.by_ref.insert(r, uuid(u));
    }
    if !spec.frozen.is_empty() {
        let mut snap =
            serde_json::from_value::<normafs::format::state::TokenSnapshot>(json!({"byRef": {}}))
                .expect("snapshot");
        for &(u, tokens) in &spec.frozen {
            if let Some(r) = st.message_refs.by_raw.get(&uuid(u)) {
                snap.by_ref.insert(r.clone(), tokens as u64);
            }
        }
        st.token_snapshot = Some(snap);
    }
    st
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open");
    f.write_all(bytes).expect("append");
}

/// A configuration under which a few messages already truncate and nudge.
fn small_cfg(window: u64, recent: usize, recent_tokens: u64) -> NoaConfig {
    NoaConfig {
        window,
        protect_recent_messages: recent,
        protect_recent_tokens: recent_tokens,
        growth_floor: 10,
        growth_cap: 100,
        min_benefit_tokens: Some(10),
        tier2_min_blocks: 2,
        ..NoaConfig::default()
    }
}

/// Apply `ops`, computing the view after each through the memo (as the mount does) and from
/// scratch: they must be the same.
fn check(ops: &[Op], cfg: &NoaConfig) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.jsonl");
    let mut tf = TranscriptFile::open(&path, Some("s")).expect("open");
    let mut state: Arc<State> = Arc::new(State::initial("s"));
    for op in ops {
        let mut markdown = false;
        match op {
            Op::Append(lines) => {
                let mut bytes = String::new();
                for l in lines {
                    bytes.push_str(&l.json());
                    bytes.push('\n');
                }
                append(&path, bytes.as_bytes());
            }
            Op::Unterminated(l, cut) => {
                let text = l.json();
                append(&path, &text.as_bytes()[..text.len().min(*cut as usize)]);
            }
            Op::Newline => append(&path, b"\n"),
            Op::State(spec) => state = Arc::new(build_state(spec)),
            Op::Rewrite(keep) => {
                let bytes = fs::read(&path).unwrap_or_default();
                let kept: Vec<&[u8]> = bytes
                    .split_inclusive(|&b| b == b'\n')
                    .take(*keep as usize % 8)
                    .collect();
                fs::write(&path, kept.concat()).expect("rewrite");
            }
            Op::ReadMarkdown => markdown = true,
        }
        tf.refresh().expect("refresh");

        // Through the memo, as the mount does.
        let memo = tf.take_memo::<view::Memo>();
        let stable = tf.stable_messages();
        let token: Arc<dyn std::any::Any + Send + Sync> = state.clone();
        let msgs = session::msgs(tf.transcript());
        let v = view::project_memo(&msgs, &state, &token, cfg, memo);
        let (jsonl, md) = if markdown {
            (None, Some(v.to_markdown()))
        } else {
            (Some(v.to_jsonl()), None)
        };
        let measured = (v.measured, v.projected, v.protected_start);
        let memo = v.into_memo(token, cfg, stable);
        drop(msgs);
        if let Some(memo) = memo {
            tf.keep_memo(memo);
        }

        // From scratch.
        let bytes = fs::read(&path).unwrap_or_default();
        let t = Transcript::parse(&bytes, Some("s"));
        let msgs = session::msgs(&t);
        let fresh = view::project(&msgs, &state, cfg);
        prop_assert_eq!(
            measured,
            (fresh.measured, fresh.projected, fresh.protected_start)
        );
        if let Some(jsonl) = jsonl {
            let expected = fresh.to_jsonl();
            prop_assert_eq!(
                String::from_utf8_lossy(&jsonl),
                String::from_utf8_lossy(&expected)
            );
        }
        if let Some(md) = md {
            prop_assert_eq!(md, fresh.to_markdown());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn a_view_from_the_memo_is_the_view_from_scratch(
        ops in proptest::collection::vec(op(), 1..14),
        window in 200u64..4000,
        recent in 0usize..4,
        recent_tokens in prop_oneof![Just(0u64), 1u64..800],
    ) {
        check(&ops, &small_cfg(window, recent, recent_tokens))?;
    }
}

/// A result read before its call: when the call that comes later is of a protected tool, the
/// earlier result becomes protected from truncation.
#[test]
fn a_later_protected_call_protects_an_earlier_result() {
    let result = Line::Result {
        uuid: 1,
        id: 3,
        len: 3000,
    };
    let text = |uuid| Line::Text {
        uuid,
        role: 0,
        len: 10,
    };
    let call = Line::Call {
        uuid: 4,
        id: 3,
        compress: true,
    };
    let ops = [
        Op::Append(vec![result, text(2)]),
        Op::Append(vec![text(3)]),
        Op::Append(vec![call]),
        Op::Append(vec![text(5)]),
    ];
    check(&ops, &small_cfg(600, 1, 0)).expect("the same view");
}

/// A live block that also covers the unterminated last line: when that line turns out to be no
/// record, the block is dead, and nothing of it may be kept.
#[test]
fn a_block_over_the_unterminated_line_is_not_kept() {
    let text = |uuid| Line::Text {
        uuid,
        role: 0,
        len: 10,
    };
    let block = StateSpec {
        blocks: vec![(1, 3, true, 1, None)],
        refs: vec![],
        ref_base: 0,
        frozen: vec![],
    };
    let ops = [
        Op::Append(vec![text(1), text(2)]),
        Op::State(block),
        Op::Unterminated(text(3), u16::MAX),
        Op::Append(vec![text(4)]),
        Op::Append(vec![text(3)]),
    ];
    check(&ops, &small_cfg(100_000, 1, 0)).expect("the same view");
}
