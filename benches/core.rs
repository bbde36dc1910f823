//! Criterion benchmarks of the noa core: transcript parsing (MB/s) and appends, the view and
//! the materialized history, a Compress call, and a rebuild from history. Each benchmark's
//! name carries its input size.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use normafs::config::NoaConfig;
use normafs::format::loader::{Parser, Transcript};
use normafs::format::state::{load_state, State};
use normafs::gen::{generate, GenOptions};
use normafs::noa::{args, compress, rebuild, recommend, views};
use normafs::store::session as store;

/// A generated session of `messages` messages compressed in a `window`-token context: its
/// transcript bytes, id, state and settings.
fn generated(messages: usize, window: u64) -> (Vec<u8>, String, State, NoaConfig) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let config = NoaConfig {
        window,
        ..NoaConfig::default()
    };
    let opts = GenOptions {
        sessions: 1,
        messages,
        seed: 42,
        subagents: false,
        memories: 0,
        config: config.clone(),
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
    let state = load_state(&root.join(format!("noa/{sid}/state.json")), &sid).state;
    (bytes, sid, state, config)
}

fn parse(c: &mut Criterion) {
    let (bytes, sid, _, _) = generated(20_000, 200_000);
    let mut g = c.benchmark_group("transcript");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.sample_size(10);
    g.bench_function(
        format!("parse/{}msg/{}MB", 20_000, bytes.len() >> 20),
        |b| b.iter(|| Transcript::parse(&bytes, Some(&sid))),
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
                let mut p = Parser::new(Some(&sid));
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

fn view(c: &mut Criterion) {
    let (bytes, sid, state, cfg) = generated(20_000, 40_000);
    let t = Transcript::parse(&bytes, Some(&sid));
    let path = &views::runtime_path;
    let mut g = c.benchmark_group("view");
    g.sample_size(10);
    let n = store::messages(&t).len();
    let blocks = state.blocks().len();
    g.bench_function(format!("view.jsonl/{n}msg/{blocks}blocks"), |b| {
        b.iter(|| {
            let p = views::Projection::new(store::messages(&t));
            views::Files::new(&p, &state, &cfg, "", path)
                .bytes(views::Form::View, &mut Default::default())
                .len()
        })
    });
    // The same view again with the memo of the previous one (what an append costs, minus the
    // appended messages).
    let mut memo = normafs::noa::content::ProjectionMemo::default();
    let p = views::Projection::with_memo(store::messages(&t), &mut memo);
    let mut lines = Default::default();
    views::Files::new(&p, &state, &cfg, "", path).bytes(views::Form::View, &mut lines);
    drop(p);
    g.bench_function(format!("view.jsonl-again/{n}msg/{blocks}blocks"), |b| {
        b.iter(|| {
            let p = views::Projection::with_memo(store::messages(&t), &mut memo);
            views::Files::new(&p, &state, &cfg, "", path)
                .bytes(views::Form::View, &mut lines)
                .len()
        })
    });
    g.bench_function(format!("materialized.jsonl/{n}msg"), |b| {
        b.iter(|| {
            let p = views::Projection::new(store::messages(&t));
            views::Files::new(&p, &state, &cfg, "", path)
                .bytes(views::Form::Materialized, &mut Default::default())
                .len()
        })
    });
    g.finish();
}

fn compress_and_rebuild(c: &mut Criterion) {
    let (bytes, sid, state, cfg) = generated(4_000, 40_000);
    let t = Transcript::parse(&bytes, Some(&sid));
    let p = views::Projection::new(store::messages(&t));
    let path = &views::runtime_path;
    let place = compress::Placement::new("/r/noa/s", &sid, "2027-01-01T00:00:00Z", 1_798_761_600);
    // A range the session offers now.
    let turn = views::turn(&p, &state, &cfg, path);
    let offered = recommend::recommend(&turn, &state, &cfg);
    let range = offered.ranges.first().expect("a compressible range");
    let input = format!(
        r#"{{"content":[{{"startId":"{}","endId":"{}","summary":"A summary long enough for the minimum: what these messages established."}}]}}"#,
        range.start.name().unwrap_or_default(),
        range.end.name().unwrap_or_default()
    );
    drop(turn);
    let ranges = args::parse(&input).ranges;
    let mut g = c.benchmark_group("compress");
    g.sample_size(10);
    g.bench_function(format!("ctl-batch/{}msg", p.msgs.len()), |b| {
        b.iter(|| {
            let a = rebuild::ctl_apply(&p, &state, &cfg, &ranges, "ctl-x", &place, path);
            assert!(a.whole());
            a.created.len()
        })
    });
    let blocks = state.blocks().len();
    g.bench_function(format!("rebuild/{}msg/{blocks}blocks", p.msgs.len()), |b| {
        b.iter(|| {
            rebuild::Replay::new(&p, &cfg, &place, &[], path)
                .rebuild()
                .replayed
        })
    });
    g.finish();
}

criterion_group!(benches, parse, view, compress_and_rebuild);
criterion_main!(benches);
