//! Unit tests of the computed files' cache and versions.

use super::*;
use crate::gen::{generate, GenOptions};
use crate::store::cache::PARSED_PER_BYTE;

/// A generated root of `sessions` sessions, and its session ids.
fn root(sessions: usize, messages: usize) -> (tempfile::TempDir, RootPaths, Vec<String>) {
    let d = tempfile::tempdir().expect("tempdir");
    let mut opts = GenOptions {
        sessions,
        messages,
        max_result_bytes: 20_000,
        ..GenOptions::default()
    };
    // A small window: the sessions compress, so they have a state.json.
    opts.config.window = 20_000;
    let r = generate(d.path(), &opts, &mut |_, _| {}).expect("gen");
    let paths = RootPaths::from_root(d.path());
    (d, paths, r.clean_sessions)
}

fn computed(paths: &RootPaths, cache_mb: u64) -> Computed {
    let cfg = Config {
        cache_mb: Some(cache_mb),
        ..Config::default()
    };
    Computed::new(paths.clone(), cfg)
}

fn data(c: &Rendered) -> &Bytes {
    c.data.as_ref().expect("the bytes")
}

fn view(sid: &str) -> Node {
    Node::Computed(sid.to_string(), ComputedKind::VIEW)
}

#[test]
fn parsed_transcripts_are_kept_within_the_budget() {
    let (_d, paths, sids) = root(6, 150);
    let size = |sid: &str| {
        std::fs::metadata(paths.transcript_path(sid))
            .expect("meta")
            .len() as usize
    };
    let largest = sids.iter().map(|s| size(s)).max().expect("sessions");
    // A budget that holds about two parsed transcripts.
    let mb = (2 * largest * PARSED_PER_BYTE).div_ceil(1 << 20) as u64;
    let s = computed(&paths, mb);
    let budget = s.cache.budget();
    for sid in &sids {
        let v = s.content(&view(sid)).expect("view");
        assert!(!data(&v).is_empty());
        assert!(
            s.budget_bytes() <= budget,
            "{} counted bytes exceed the budget {budget}",
            s.budget_bytes()
        );
    }
    assert!(s.kept_transcripts() >= 1, "the latest transcript is kept");
    assert!(
        s.kept_transcripts() < sids.len(),
        "older transcripts were evicted"
    );
    let last = sids.last().expect("a session");
    assert!(
        s.cache.keeps_transcript(last),
        "the most recently used transcript stays"
    );
}

#[test]
fn known_versions_are_described_without_making_them_again() {
    let (_d, paths, sids) = root(8, 400);
    // A budget far smaller than the session's files: their bytes cannot stay.
    let s = computed(&paths, 1);
    let every = |sid: &str| {
        s.layout()
            .computed_files()
            .map(|k| Node::Computed(sid.to_string(), k))
            .collect::<Vec<_>>()
    };
    let mut sizes = Vec::new();
    for sid in &sids {
        for n in every(sid) {
            sizes.push(s.current(&n, true, Want::Size).expect("described").size);
        }
    }
    let first = s.counts();
    assert_eq!(
        first.computations as usize,
        sids.len(),
        "one computation per session serves all its files"
    );
    assert_eq!(s.cached_bytes(), 0, "a size keeps no bytes");
    // A second pass while the watcher reported nothing: nothing made, nothing checked; an
    // open (`Pin`) of a file with a digest needs no bytes either.
    let mut again = Vec::new();
    for sid in &sids {
        for n in every(sid) {
            let c = s.current(&n, true, Want::Pin).expect("described");
            assert!(c.digest.is_some());
            again.push(c.size);
        }
    }
    assert_eq!(again, sizes);
    assert_eq!(s.counts(), first);
    // A change reported in one session: its inputs are checked again (unchanged on disk:
    // nothing is made).
    s.changed(&Affected::Session(sids[0].clone()));
    s.current(&view(&sids[0]), true, Want::Size)
        .expect("described");
    s.current(&view(&sids[1]), true, Want::Size)
        .expect("described");
    let after = s.counts();
    assert_eq!(after.input_checks, first.input_checks + 1);
    assert_eq!(after.computations, first.computations);
    // Not covered by the watcher: every request checks the inputs.
    s.current(&view(&sids[1]), false, Want::Size)
        .expect("described");
    assert_eq!(s.counts().input_checks, after.input_checks + 1);
    // The bytes, when asked for, are the same as a fresh computation's.
    let b = s
        .current(&view(&sids[2]), true, Want::Bytes)
        .expect("bytes");
    let fresh = computed(&paths, 256)
        .content(&view(&sids[2]))
        .expect("view");
    assert!(data(&b) == data(&fresh));
    assert_eq!(b.size, data(&b).len());
    assert_eq!(b.digest, fresh.digest);
}

#[test]
fn a_transcript_larger_than_the_budget_is_served_and_dropped() {
    let (_d, paths, sids) = root(1, 1000);
    let sid = &sids[0];
    let len = std::fs::metadata(paths.transcript_path(sid))
        .expect("meta")
        .len() as usize;
    assert!(len * PARSED_PER_BYTE > 1 << 20, "the transcript is large");
    let small = computed(&paths, 1);
    let big = computed(&paths, 1024);
    let a = small.content(&view(sid)).expect("view");
    let b = big.content(&view(sid)).expect("view");
    assert!(data(&a) == data(&b), "the same view either way");
    assert_eq!(small.kept_transcripts(), 0);
    assert!(small.budget_bytes() <= 1 << 20);
    assert_eq!(big.kept_transcripts(), 1);
}

#[test]
fn a_replaced_state_is_parsed_again() {
    let (_d, paths, sids) = root(3, 300);
    let s = computed(&paths, 256);
    let sid = sids
        .iter()
        .find(|sid| paths.state_path(sid).is_file())
        .expect("a session with state.json");
    let before = s.content(&view(sid)).expect("view");
    assert!(data(&s.content(&view(sid)).expect("view")) == data(&before));
    // Replaced by rename, the way the store writes it: every summary says something else.
    let bytes = std::fs::read(paths.state_path(sid)).expect("read");
    let mut st = crate::format::state::parse_state(&bytes).expect("state");
    for b in st.blocks.iter_mut().flatten() {
        b.summary.push_str(" (edited)");
    }
    let text = st.to_json();
    let tmp = paths.archive_root(sid).join(".state.json.tmp-test");
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, paths.state_path(sid)).expect("rename");
    let after = s.content(&view(sid)).expect("view");
    assert!(data(&after) != data(&before), "the new state is used");
    let fresh = computed(&paths, 256).content(&view(sid)).expect("view");
    assert!(
        data(&after) == data(&fresh),
        "the same as a fresh computation"
    );
}

#[test]
fn the_root_audit_takes_the_findings_of_sessions_made_and_says_the_same() {
    let d = tempfile::tempdir().expect("tempdir");
    let mut opts = GenOptions {
        sessions: 3,
        messages: 60,
        corrupt: true,
        subagents: true,
        max_result_bytes: 20_000,
        ..GenOptions::default()
    };
    opts.config.window = 20_000;
    let r = generate(d.path(), &opts, &mut |_, _| {}).expect("gen");
    let paths = RootPaths::from_root(d.path());
    let audit = Node::RootAudit;
    // Found afresh: no session made yet.
    let fresh = data(&computed(&paths, 64).content(&audit).expect("root audit")).to_vec();
    assert!(
        String::from_utf8_lossy(&fresh).contains("error"),
        "the corrupt sessions have findings"
    );
    let c = computed(&paths, 64);
    let sessions: Vec<String> = r
        .clean_sessions
        .iter()
        .chain(&r.corrupt_sessions)
        .cloned()
        .collect();
    for sid in &sessions {
        c.content(&Node::Computed(sid.clone(), ComputedKind::AUDIT))
            .expect("a session's audit");
    }
    assert_eq!(c.found.lock().by_session.len(), sessions.len());
    let reused = data(&c.content(&audit).expect("root audit")).to_vec();
    assert_eq!(
        String::from_utf8_lossy(&reused),
        String::from_utf8_lossy(&fresh),
        "the same findings, taken from the sessions' own audits"
    );
    // A session changed since: its findings are found again, as they are now.
    let sid = &r.corrupt_sessions[0];
    let t = paths.transcript_path(sid);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&t)
        .expect("transcript");
    std::io::Write::write_all(&mut f, b"{not json\n").expect("append");
    drop(f);
    assert!(
        c.findings(sid).is_none(),
        "changed inputs: the findings kept are not used"
    );
    let after = data(&c.content(&audit).expect("root audit")).to_vec();
    let again = data(&computed(&paths, 64).content(&audit).expect("root audit")).to_vec();
    assert_ne!(after, reused, "the new finding shows");
    assert_eq!(after, again);
}

#[test]
fn bytes_made_ahead_wait_for_their_reader_and_the_recent_stay_few() {
    let mut r = Recent::default();
    let n = |i: usize| Node::Computed(format!("s1-{i:04}"), ComputedKind::VIEW);
    let one = |i: usize, len: usize| vec![(n(i), Bytes::from(vec![b'x'; len]), i as u64)];
    r.push(one(1, 10), Duration::ZERO);
    r.push(one(2, 10), AHEAD_KEPT);
    assert!(
        r.find(&n(1), 1).is_none(),
        "a lookup's bytes go after their moment"
    );
    assert!(
        r.find(&n(2), 2).is_some(),
        "bytes made ahead wait for their reader"
    );
    for i in 3..3 + 2 * RECENT_KEPT {
        r.push(one(i, 10), AHEAD_KEPT);
    }
    assert_eq!(r.made.len(), RECENT_KEPT, "a few computations at most");
    // Large ones: the newest always stays, the others within RECENT_BYTES.
    let big = (RECENT_BYTES / 2 + 1) as usize;
    r.push(one(100, big), AHEAD_KEPT);
    r.push(one(101, big), AHEAD_KEPT);
    r.push(one(102, big), AHEAD_KEPT);
    assert!(r.bytes() - r.newest_bytes() <= RECENT_BYTES);
    assert!(r.find(&n(102), 102).is_some());
}
