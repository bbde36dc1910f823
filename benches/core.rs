//! Criterion benchmarks of the noa core: transcript parsing (MB/s), projection, compress
//! validation, and rebuild of a session with hundreds of blocks. Each benchmark's name carries
//! its input size.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use normafs::config::NoaConfig;
use normafs::format::loader::{Parser, Transcript};
use normafs::format::state::State;
use normafs::format::transcript::parse_line;
use normafs::gen::{generate, GenOptions};
use normafs::noa::compress::{self, Batch, Ctx, RangeSpec};
use normafs::noa::replay;
use normafs::noa::view;
use normafs::store::session;
use serde_json::json;

/// A generated transcript of `messages` messages and its parsed form.
fn generated(messages: usize) -> (Vec<u8>, State) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let opts = GenOptions {
        sessions: 1,
        messages,
        seed: 42,
        subagents: false,
        memories: 0,
        ..GenOptions::default()
    };
    generate(&root, &opts, &mut |_, _| {}).expect("gen");
    let sid = std::fs::read_dir(root.join("transcripts"))
        .expect("ls")
        .flatten()
        .find_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".jsonl"))
                .map(str::to_string)
        })
        .expect("session");
    let bytes = std::fs::read(root.join(format!("transcripts/{sid}.jsonl"))).expect("read");
    let state =
        normafs::format::state::load_state(&root.join(format!("noa/{sid}/state.json")), &sid).state;
    (bytes, state)
}

fn parse(c: &mut Criterion) {
    let (bytes, _) = generated(20_000);
    let mut g = c.benchmark_group("transcript");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.sample_size(10);
    g.bench_function(
        format!("parse/{}msg/{}MB", 20_000, bytes.len() >> 20),
        |b| b.iter(|| Transcript::parse(&bytes, Some("s"))),
    );
    // Appending 10 records to a parsed transcript costs only the new bytes.
    let cut = bytes
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i + 1)
        .rev()
        .nth(10)
        .unwrap_or(0);
    g.throughput(Throughput::Bytes((bytes.len() - cut) as u64));
    g.bench_function(format!("append10/{}msg", 20_000), |b| {
        b.iter_batched(
            || {
                let mut p = Parser::new(Some("s"));
                p.feed(&bytes[..cut]);
                p
            },
            |mut p| {
                p.feed(&bytes[cut..]);
                p
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn projection(c: &mut Criterion) {
    let (bytes, state) = generated(20_000);
    let t = Transcript::parse(&bytes, Some("s"));
    let msgs = session::msgs(&t);
    let cfg = NoaConfig::default();
    let mut g = c.benchmark_group("view");
    g.sample_size(10);
    g.bench_function(
        format!(
            "project+jsonl/{}msg/{}blocks",
            msgs.len(),
            state.blocks.len()
        ),
        |b| b.iter(|| view::project(&msgs, &state, &cfg).to_jsonl()),
    );
    g.bench_function(format!("materialize/{}msg", msgs.len()), |b| {
        b.iter(|| view::materialize(&msgs, &state, &cfg).items.len())
    });
    g.finish();
}

/// A session of `n` messages compressed every 8 messages: n/8 tier-1 blocks, recorded as
/// Compress calls in the transcript.
fn many_blocks(n: usize) -> (Vec<u8>, State) {
    let cfg = NoaConfig {
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        ..NoaConfig::default()
    };
    let mut lines: Vec<String> = Vec::new();
    let mut state = State::initial("s");
    let seq = std::cell::Cell::new(0u64);
    let push = |lines: &mut Vec<String>, role: &str, content: serde_json::Value| {
        seq.set(seq.get() + 1);
        let seq = seq.get();
        let mut v = json!({"uuid": format!("{seq:032x}"), "session_id": "s", "timestamp": format!("2026-11-30T10:00:00.{seq:09}Z"), "type": "message", "message": {"role": role, "content": content}});
        if seq > 1 {
            v["parent_uuid"] = json!(format!("{:032x}", seq - 1));
        }
        lines.push(v.to_string());
        v["timestamp"].as_str().unwrap_or("").to_string()
    };
    let mut calls = 0;
    for i in 0..n {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        push(
            &mut lines,
            role,
            json!([{"type": "text", "text": format!("message {i} {}", "lorem ipsum dolor sit amet ".repeat(20))}]),
        );
        if i % 8 == 7 && i + 8 < n {
            let records: Vec<_> = lines
                .iter()
                .map(|l| parse_line(l.as_bytes()).expect("record"))
                .collect();
            let msgs: Vec<normafs::noa::Msg<'_>> = records
                .iter()
                .filter_map(|r| {
                    r.as_message().map(|m| normafs::noa::Msg {
                        raw_id: &r.uuid,
                        message: m,
                        timestamp: r.timestamp.as_deref(),
                    })
                })
                .collect();
            let mat = view::materialize(&msgs, &state, &cfg);
            let last = mat.items.len().saturating_sub(3);
            let first = last.saturating_sub(7);
            let (start, _) = mat.item_span(&mat.items[first]);
            let (_, end) = mat.item_span(&mat.items[last]);
            let id = format!("toolu_{calls}");
            calls += 1;
            let now = format!("2026-11-30T10:00:00.{:09}Z", seq.get() + 1);
            let ranges = vec![RangeSpec {
                start: start.clone(),
                end: end.clone(),
                topic: None,
                summary: "A summary of eight messages of the session.".into(),
            }];
            let ctx = Ctx {
                msgs: &msgs,
                state: &state,
                cfg: &cfg,
                strict: false,
                call_id: &id,
                now: &now,
                session: "s",
                archive_root: "/r",
            };
            if let Ok(p) = compress::plan(&ctx, &Batch { ranges }) {
                state = p.state;
                drop(msgs);
                push(
                    &mut lines,
                    "assistant",
                    json!([{"type": "tool_use", "id": id, "name": "Compress", "input": {"ranges": [{"start": start, "end": end, "summary": "A summary of eight messages of the session."}]}}]),
                );
                push(
                    &mut lines,
                    "user",
                    json!([{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": "ok"}]}]),
                );
            }
        }
    }
    let mut bytes = lines.join("\n").into_bytes();
    bytes.push(b'\n');
    (bytes, state)
}

fn compress_and_rebuild(c: &mut Criterion) {
    let (bytes, state) = many_blocks(2_400);
    let t = Transcript::parse(&bytes, Some("s"));
    let msgs = session::msgs(&t);
    let cfg = NoaConfig {
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        ..NoaConfig::default()
    };
    let mut g = c.benchmark_group("compress");
    g.sample_size(10);
    let mat = view::materialize(&msgs, &state, &cfg);
    let n = mat.items.len();
    let (start, _) = mat.item_span(&mat.items[n - 10]);
    let (_, end) = mat.item_span(&mat.items[n - 4]);
    let batch = Batch {
        ranges: vec![RangeSpec {
            start,
            end,
            topic: None,
            summary: "A summary of the last few messages of the session.".into(),
        }],
    };
    g.bench_function(
        format!(
            "validate+build/{}msg/{}blocks",
            msgs.len(),
            state.blocks.len()
        ),
        |b| {
            b.iter(|| {
                let ctx = Ctx {
                    msgs: &msgs,
                    state: &state,
                    cfg: &cfg,
                    strict: true,
                    call_id: "ctl-x",
                    now: "2026-11-30T12:00:00Z",
                    session: "s",
                    archive_root: "/r",
                };
                compress::plan(&ctx, &batch).expect("plan").blocks.len()
            })
        },
    );
    let mut events = replay::transcript_calls(&msgs, &cfg);
    replay::order(&mut events);
    g.bench_function(
        format!("rebuild/{}msg/{}blocks", msgs.len(), state.blocks.len()),
        |b| {
            b.iter(|| {
                replay::replay(&msgs, &events, &cfg, "s", "/r")
                    .state
                    .blocks
                    .len()
            })
        },
    );
    g.finish();
}

criterion_group!(benches, parse, projection, compress_and_rebuild);
criterion_main!(benches);
