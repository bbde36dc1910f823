//! The computed files as the mount computes them (`fs::computed::Computed`, with its kept parsed
//! transcript refreshed by appends and its content cache) are byte for byte what the core
//! computes from scratch over a fresh read of the files — across appends (complete lines,
//! unterminated and torn last lines, repeated uuids, compaction markers, blocks that name
//! messages not yet written, calls of protected tools and Compress), state changes, rewrites
//! of the file, and truncation and protection boundaries that move.
//!
//! Today the mount recomputes every view, so this holds by construction; it is here for the
//! incremental view, which must keep it.

mod common;

use std::fs;

use common::append;
use normafs::config::{Config, NoaConfig};
use normafs::format::loader::Transcript;
use normafs::format::state::{load_state, State};
use normafs::fs::computed::Computed;
use normafs::fs::node::{ComputedKind, Node};
use normafs::noa::content::{derive_id, Kind, Role};
use normafs::noa::{assemble, render, views as view};
use normafs::store::root::RootPaths;
use normafs::store::session;
use proptest::prelude::*;
use serde_json::{json, Value};

const SID: &str = "s";

/// Record uuids: a small pool, so that uuids repeat.
fn uuid(n: u8) -> String {
    format!("{:032x}", n % 24)
}

/// Tool ids, shared by calls, results and blocks' Compress calls.
fn tool_id(n: u8) -> String {
    format!("toolu_{}", n % 6)
}

/// The text of content key `k`: a small pool, so that states name content before it is
/// written, and the same content repeats (raw ids get `_1`, `_2`, …). Some end with a ref
/// tag, which a user's text loses in the view (a long session's texts are on disk: read back
/// to be stripped).
fn text(k: u8) -> String {
    let k = k % 16;
    let body = format!("k{k} {}", "é".repeat(k as usize * 53 % 700));
    match k % 5 {
        4 => format!("{body}\n<noa-ref id=\"m0000{}\" tokens=\"12\"/>", k % 7 + 1),
        _ => body,
    }
}

/// The raw id of user or assistant text of key `k` (its first occurrence).
fn text_id(k: u8, user: bool) -> String {
    let role = if user { Role::User } else { Role::Assistant };
    derive_id(role, Kind::Text, "", "", &text(k))
}

/// Tools of the calls: a bulky re-obtainable one, Compress, and a protected one.
const TOOLS: [&str; 4] = ["Read", "Read", "Compress", "mcp__db"];

#[derive(Debug, Clone)]
enum Line {
    /// role: user, assistant, or (rarely) a role the runtime cannot read.
    Text {
        uuid: u8,
        role: u8,
        key: u8,
    },
    Thinking {
        uuid: u8,
        key: u8,
    },
    /// tool: Read, Compress, or a protected tool.
    Call {
        uuid: u8,
        id: u8,
        tool: u8,
    },
    Result {
        uuid: u8,
        id: u8,
        len: u16,
    },
    Marker {
        uuid: u8,
    },
    Boundary {
        uuid: u8,
    },
}

impl Line {
    fn json(&self) -> String {
        let record = |uuid: u8, role: &str, content: Value| {
            // With fields the runtime's model does not know, as real sessions have on every
            // record (a mount keeps a long session's out of memory).
            json!({"uuid": self::uuid(uuid), "session_id": SID, "timestamp": "2026-11-30T10:00:00.5Z",
                   "type": "message", "message": {"role": role, "content": content},
                   "cwd": "/home/dev/project", "version": "2.0.14", "git_branch": format!("feat/세션-{uuid}")})
            .to_string()
        };
        match *self {
            Line::Text { uuid, role, key } => record(
                uuid,
                ["user", "assistant", "user", "assistant", "system"][role as usize % 5],
                json!([{"type": "text", "text": text(key)}]),
            ),
            Line::Thinking { uuid, key } => record(
                uuid,
                "assistant",
                json!([{"type": "thinking", "thinking": text(key), "signature": format!("c2ln{key}").repeat(20)},
                       {"type": "text", "text": format!("after thinking {key}")}]),
            ),
            Line::Call { uuid, id, tool } => record(
                uuid,
                "assistant",
                json!([{"type": "text", "text": "calling"},
                       {"type": "tool_use", "id": tool_id(id),
                        "name": TOOLS[tool as usize % 4],
                        "input": {"content": [{"startId": "m00001", "endId": "m00003", "summary": "é".repeat(300)}]}}]),
            ),
            Line::Result { uuid, id, len } => {
                let body = "r".repeat(len as usize);
                // One text item, two (joined in the view), or one ending with a ref tag.
                let items = match len % 4 {
                    1 => json!([{"type": "text", "text": body}, {"type": "text", "text": "and a second item of the result"}]),
                    2 => json!([{"type": "text", "text": format!("{body}\n<noa-ref id=\"m00002\" tokens=\"7\"/>")}]),
                    _ => json!([{"type": "text", "text": body}]),
                };
                record(
                    uuid,
                    "user",
                    json!([{"type": "tool_result", "tool_use_id": tool_id(id), "content": items}]),
                )
            }
            Line::Marker { uuid } => record(
                uuid,
                "user",
                json!([{"type": "compact_boundary", "input": {"pre_tokens": 1000}}]),
            ),
            Line::Boundary { uuid } => {
                json!({"uuid": self::uuid(uuid), "session_id": SID, "type": "boundary", "boundary": {"pre_tokens": 5}})
                    .to_string()
            }
        }
    }
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        5 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(uuid, role, key)| Line::Text { uuid, role, key }),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(uuid, key)| Line::Thinking { uuid, key }),
        2 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(uuid, id, tool)| Line::Call { uuid, id, tool }),
        2 => (any::<u8>(), any::<u8>(), 0u16..9000).prop_map(|(uuid, id, len)| Line::Result { uuid, id, len }),
        1 => any::<u8>().prop_map(|uuid| Line::Marker { uuid }),
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
}

#[derive(Debug, Clone)]
struct StateSpec {
    /// (first key, count, active, tier, compress call)
    blocks: Vec<(u8, u8, bool, u8, Option<u8>)>,
    /// Keys of user texts with recorded refs, and the number to start from.
    refs: Vec<u8>,
    ref_base: u16,
    /// Frozen token counts for some recorded refs.
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
        2 => state_spec().prop_map(Op::State),
        1 => any::<u8>().prop_map(Op::Rewrite),
    ]
}

/// A state.json in the runtime's shape (the core reads it as the runtime would).
fn build_state(spec: &StateSpec) -> Value {
    let mut blocks = Vec::new();
    for (n, &(first, count, active, tier, call)) in spec.blocks.iter().enumerate() {
        // Alternate user and assistant text of consecutive keys.
        let ids: Vec<String> = (0..count)
            .map(|k| text_id(first.wrapping_add(k), k % 2 == 0))
            .collect();
        let id = format!("b{}", n + 1);
        blocks.push(json!({
            "blockId": id, "tier": tier, "summary": format!("summary of {id}"),
            "directMessageIds": ids, "effectiveMessageIds": ids,
            "archivePath": format!("/r/noa/s/tier{tier}/{id}_m00001-m00002.md"),
            "archiveRel": format!("tier{tier}/{id}_m00001-m00002.md"),
            "compressedTokens": 10, "startRef": "m00001", "endRef": "m00002",
            "active": active, "compressCallId": call.map(tool_id).unwrap_or_default(),
        }));
    }
    let mut by_raw = serde_json::Map::new();
    let mut by_ref = serde_json::Map::new();
    for (k, &key) in spec.refs.iter().enumerate() {
        let r = format!("m{:05}", spec.ref_base as usize + k + 1);
        let id = text_id(key, true);
        by_raw.insert(id.clone(), json!(r));
        by_ref.insert(r, json!(id));
    }
    let mut snap = serde_json::Map::new();
    for &(key, tokens) in &spec.frozen {
        if let Some(r) = by_raw.get(&text_id(key, true)) {
            snap.insert(r.as_str().unwrap_or_default().to_string(), json!(tokens));
        }
    }
    let mut st = json!({
        "version": 1, "sessionId": SID, "nextBlockId": spec.blocks.len() + 1,
        "blocks": if blocks.is_empty() { Value::Null } else { Value::Array(blocks) },
        "messageRefs": {"byRaw": by_raw, "byRef": by_ref},
        "nudge": {"lastPerMessageNudgeTokens": 0, "lastNudgeShownTokens": 0},
        "stats": {"tokensCompressed": 0, "compressionCount": spec.blocks.len()}
    });
    if !snap.is_empty() {
        st["tokenSnapshot"] = Value::Object(snap);
    }
    st
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
        min_range_chars: 200,
        tier2_min_blocks: 2,
        protected_tools: vec!["mcp__*".into()],
        ..NoaConfig::default()
    }
}

/// The computed files the check compares.
const KINDS: [ComputedKind; 3] = [
    ComputedKind::VIEW,
    ComputedKind::VIEW_MD,
    ComputedKind::MATERIALIZED,
];

/// What the core computes for `kind` from a fresh read of the session's files.
fn from_scratch(paths: &RootPaths, cfg: &NoaConfig, kind: ComputedKind) -> Vec<u8> {
    let bytes = fs::read(paths.transcript_path(SID)).unwrap_or_default();
    let t = Transcript::parse(&bytes, Some(SID));
    let state: State = load_state(&paths.state_path(SID), SID).state;
    let p = view::Projection::new(session::messages(&t));
    let path = &view::runtime_path;
    match kind.name() {
        "view.jsonl" => view::Files::new(&p, &state, cfg, SID, path)
            .view()
            .to_jsonl(),
        "materialized.jsonl" => view::Files::new(&p, &state, cfg, SID, path)
            .materialized()
            .to_jsonl(),
        _ => {
            let turn = view::turn(&p, &state, cfg, path);
            let msgs = assemble::assemble(&turn, &p.msgs, &state, true);
            render::markdown(&msgs, &turn, &state, cfg, SID, &render::Places::Relative).into_bytes()
        }
    }
}

/// Apply `ops`, reading the computed files after each through the mount's computation and
/// from scratch: they must be the same. `reads` picks which files are read after each op
/// (a file not read has no cached content to refresh from).
fn check(ops: &[Op], reads: &[u8], cfg: &NoaConfig, spooled: bool) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let paths = RootPaths::from_root(dir.path());
    fs::create_dir_all(&paths.transcripts).expect("mkdir");
    fs::create_dir_all(paths.archive_root(SID)).expect("mkdir");
    let tpath = paths.transcript_path(SID);
    fs::write(&tpath, b"").expect("create");
    let computed = Computed::new(
        paths.clone(),
        Config {
            noa: cfg.clone(),
            ..Config::default()
        },
    );
    if spooled {
        // The lines on disk, as a long session's are.
        computed.spool_lines_from(0);
    }
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Append(lines) => {
                let mut bytes = String::new();
                for l in lines {
                    bytes.push_str(&l.json());
                    bytes.push('\n');
                }
                append(&tpath, bytes.as_bytes());
            }
            Op::Unterminated(l, cut) => {
                let text = l.json();
                append(&tpath, &text.as_bytes()[..text.len().min(*cut as usize)]);
            }
            Op::Newline => append(&tpath, b"\n"),
            Op::State(spec) => {
                // As the runtime writes it: a temp file renamed over the old one.
                let tmp = paths.archive_root(SID).join(".noa-state-1.tmp");
                fs::write(&tmp, build_state(spec).to_string()).expect("state");
                fs::rename(&tmp, paths.state_path(SID)).expect("rename");
            }
            Op::Rewrite(keep) => {
                let bytes = fs::read(&tpath).unwrap_or_default();
                let kept: Vec<&[u8]> = bytes
                    .split_inclusive(|&b| b == b'\n')
                    .take(*keep as usize % 8)
                    .collect();
                fs::write(&tpath, kept.concat()).expect("rewrite");
            }
        }
        let pick = reads.get(i).copied().unwrap_or(0);
        for (k, kind) in KINDS.iter().enumerate() {
            if pick & (1 << k) == 0 && pick != 0 {
                continue;
            }
            let got = computed
                .content(&Node::Computed(SID.to_string(), *kind))
                .expect("computed")
                .data
                .expect("bytes")
                .to_vec();
            let want = from_scratch(&paths, cfg, *kind);
            prop_assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{} after op {}",
                kind.name(),
                i
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_mounts_computed_files_are_the_files_from_scratch(
        ops in proptest::collection::vec(op(), 1..14),
        reads in proptest::collection::vec(0u8..8, 14),
        window in 200u64..6000,
        recent in 0usize..4,
        recent_tokens in prop_oneof![Just(0u64), 1u64..800],
        spooled in any::<bool>(),
    ) {
        check(&ops, &reads, &small_cfg(window, recent, recent_tokens), spooled)?;
    }
}

/// A result read before its call: when the call that comes later is of a protected tool (or
/// Compress), the earlier result takes its tool name and becomes BLOCKED — the view of the
/// earlier lines changes without any of them changing.
#[test]
fn a_later_protected_call_changes_an_earlier_result() {
    let result = Line::Result {
        uuid: 1,
        id: 3,
        len: 3000,
    };
    let text = |uuid| Line::Text {
        uuid,
        role: 0,
        key: uuid,
    };
    let call = Line::Call {
        uuid: 4,
        id: 3,
        tool: 3,
    };
    let ops = [
        Op::Append(vec![result, text(2)]),
        Op::Append(vec![text(3)]),
        Op::Append(vec![call]),
        Op::Append(vec![text(5)]),
    ];
    for spooled in [false, true] {
        check(&ops, &[], &small_cfg(600, 1, 0), spooled).expect("the same files");
    }
}

/// A live block that also covers the unterminated last line: when that line turns out to be
/// no record, its content is not there, and the block is live only by what remains.
#[test]
fn a_block_over_the_unterminated_line_follows_the_line() {
    let text = |uuid, key| Line::Text {
        uuid,
        role: key % 2,
        key,
    };
    let block = StateSpec {
        blocks: vec![(1, 3, true, 1, None)],
        refs: vec![],
        ref_base: 0,
        frozen: vec![],
    };
    let ops = [
        Op::Append(vec![text(1, 1), text(2, 2)]),
        Op::State(block),
        Op::Unterminated(text(3, 3), 40),
        Op::Append(vec![text(4, 5)]),
        Op::Unterminated(text(5, 3), u16::MAX),
        Op::Newline,
        Op::Append(vec![text(6, 3)]),
    ];
    for spooled in [false, true] {
        check(&ops, &[], &small_cfg(100_000, 1, 0), spooled).expect("the same files");
    }
}

/// A compaction marker appended after a view was computed moves the whole projection.
#[test]
fn a_marker_after_a_view_moves_the_projection() {
    let text = |uuid, key| Line::Text {
        uuid,
        role: key % 2,
        key,
    };
    let ops = [
        Op::Append(vec![text(1, 1), text(2, 2), text(3, 3)]),
        Op::State(StateSpec {
            blocks: vec![(1, 2, true, 1, None)],
            refs: vec![1, 3],
            ref_base: 0,
            frozen: vec![(1, 1234)],
        }),
        Op::Append(vec![Line::Marker { uuid: 9 }]),
        Op::Append(vec![text(10, 4), text(11, 1)]),
        Op::Rewrite(3),
        Op::Append(vec![text(12, 5)]),
    ];
    for spooled in [false, true] {
        check(&ops, &[], &small_cfg(2000, 1, 0), spooled).expect("the same files");
    }
}

/// A shrunk failure: a view computed while the last line was unterminated (its record read
/// tentatively), then that line finished by an append that makes it no record at all. The
/// message at its index is another one now; a line or an id kept from the tentative record
/// was served for it.
#[test]
fn a_tentative_last_record_replaced_by_another() {
    let text = |uuid, role, key| Line::Text { uuid, role, key };
    let ops = [
        Op::Append(vec![text(0, 0, 0)]),
        Op::Append(vec![text(0, 0, 0)]),
        Op::Append(vec![text(0, 0, 0)]),
        Op::Unterminated(text(0, 28, 0), 186),
        Op::Append(vec![
            Line::Call {
                uuid: 0,
                id: 0,
                tool: 1,
            },
            Line::Call {
                uuid: 132,
                id: 240,
                tool: 204,
            },
            text(140, 202, 27),
        ]),
    ];
    for spooled in [false, true] {
        check(&ops, &[1, 2, 4, 5, 5], &small_cfg(2351, 2, 0), spooled).expect("the same files");
    }
}
