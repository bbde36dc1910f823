//! Criterion benchmarks of the noa core: transcript parsing (MB/s), the view and the
//! materialized history, a Compress batch as ctl applies it, and rebuild of a session with
//! hundreds of blocks from its Compress calls. Each benchmark's name carries its input size.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use normafs::config::NoaConfig;
use normafs::format::loader::{Parser, Transcript};
use normafs::format::state::State;
use normafs::format::transcript::parse_line;
use normafs::gen::{generate, GenOptions};
use normafs::noa::content::Slot;
use normafs::noa::session as view;
use normafs::noa::{args, compress, rebuild};
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
    let msgs = session::messages(&t);
    let cfg = NoaConfig::default();
    let mut g = c.benchmark_group("view");
    g.sample_size(10);
    let path = &view::runtime_path;
    g.bench_function(
        format!(
            "project+jsonl/{}msg/{}blocks",
            msgs.len(),
            state.blocks().len()
        ),
        |b| {
            b.iter(|| {
                let p = view::Projection::new(msgs.clone());
                view::view(&p, &state, &cfg, path).to_jsonl().len()
            })
        },
    );
    g.bench_function(format!("materialize/{}msg", msgs.len()), |b| {
        b.iter(|| {
            let p = view::Projection::new(msgs.clone());
            view::materialize(&p, &state, &cfg, path).messages.len()
        })
    });
    g.finish();
}

/// Where a benchmark's blocks say their archives are.
fn place() -> compress::Placement<'static> {
    compress::Placement {
        root: "/r/noa/s",
        session: "s",
        created: "2026-11-30T12:00:00Z",
        now: 1_796_040_000,
    }
}

fn settings() -> NoaConfig {
    NoaConfig {
        protect_recent_messages: 2,
        protect_recent_tokens: 0,
        min_range_chars: 0,
        ..NoaConfig::default()
    }
}

/// The refs of a session's view, in order.
fn view_refs(p: &view::Projection<'_>, state: &State, cfg: &NoaConfig) -> Vec<String> {
    let t = view::turn(p, state, cfg, &view::runtime_path);
    t.items
        .iter()
        .filter_map(|&q| match t.slot(q) {
            s @ Slot::Num(_) => s.name().map(|n| n.into_owned()),
            _ => None,
        })
        .collect()
}

/// A session of `n` messages compressed every 8 messages: about n/8 tier-1 blocks, recorded
/// as Compress calls (with their panels) in the transcript.
fn many_blocks(n: usize) -> (Vec<u8>, State) {
    let cfg = settings();
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
            let msgs: Vec<_> = records.iter().filter_map(|r| r.as_message()).collect();
            let p = view::Projection::new(msgs);
            let refs = view_refs(&p, &state, &cfg);
            let last = refs.len().saturating_sub(3);
            let first = last.saturating_sub(7);
            let input = json!({"content": [{"startId": refs[first], "endId": refs[last], "summary": "A summary of eight messages of the session, long enough."}]});
            let parsed = args::parse(&input.to_string());
            let id = format!("toolu_{calls}");
            calls += 1;
            let before = view::turn(&p, &state, &cfg, &view::runtime_path).measure;
            let a = rebuild::ctl_apply(
                &p,
                &state,
                &cfg,
                &parsed.ranges,
                &id,
                &place(),
                &view::runtime_path,
            );
            if a.whole() {
                let panel = compress::panel(&a, before);
                state = a.state;
                drop(p);
                push(
                    &mut lines,
                    "assistant",
                    json!([{"type": "tool_use", "id": id, "name": "Compress", "input": input}]),
                );
                push(
                    &mut lines,
                    "user",
                    json!([{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": panel}]}]),
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
    let msgs = session::messages(&t);
    let cfg = settings();
    let mut g = c.benchmark_group("compress");
    g.sample_size(10);
    let p = view::Projection::new(msgs.clone());
    let refs = view_refs(&p, &state, &cfg);
    let n = refs.len();
    let input = json!({"content": [{"startId": refs[n - 10], "endId": refs[n - 4], "summary": "A summary of the last few messages of the session, long enough."}]});
    let ranges = args::parse(&input.to_string()).ranges;
    g.bench_function(
        format!(
            "validate+build/{}msg/{}blocks",
            msgs.len(),
            state.blocks().len()
        ),
        |b| {
            b.iter(|| {
                let a = rebuild::ctl_apply(
                    &p,
                    &state,
                    &cfg,
                    &ranges,
                    "ctl-x",
                    &place(),
                    &view::runtime_path,
                );
                assert!(a.whole(), "{:?}", a.errors);
                a.created.len()
            })
        },
    );
    g.bench_function(
        format!("rebuild/{}msg/{}blocks", msgs.len(), state.blocks().len()),
        |b| {
            b.iter(|| {
                rebuild::rebuild(&p, &cfg, "s", &place(), &[], &view::runtime_path)
                    .state
                    .blocks()
                    .len()
            })
        },
    );
    g.finish();
}

criterion_group!(benches, parse, projection, compress_and_rebuild);
criterion_main!(benches);
