//! The audit against generated roots: clean `gen` output has no error and no warning but the
//! runtime's own hazard (`memory.empty-slug`); `gen --corrupt` output shows every code of the
//! SPEC 9 catalogue, each where (and on the line where) the damage was made.

use std::collections::BTreeSet;

use normafs::audit::{self, PathStyle, Severity};
use normafs::config::Config;
use normafs::gen::{generate, GenOptions};
use normafs::store::root::{discover, RootPaths};

use normafs::audit::CATALOGUE;

fn audit_of(root: &std::path::Path) -> audit::Audit {
    let paths = RootPaths::from_root(root);
    let d = discover(&paths).expect("discover");
    audit::audit_root(
        &paths,
        &d,
        &Config::default(),
        audit::How::new(PathStyle::Root),
        &mut |_, _| {},
    )
}

#[test]
fn clean_generated_root_has_no_error_or_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let opts = GenOptions {
        sessions: 6,
        messages: 400,
        seed: 11,
        ..GenOptions::default()
    };
    let report = generate(&root, &opts, &mut |_, _| {}).expect("gen");
    assert!(
        report.blocks > 5,
        "the root should hold compressions: {}",
        report.summary()
    );
    let a = audit_of(&root);
    let bad: Vec<String> = a
        .findings
        .iter()
        .filter(|f| f.severity != Severity::Info)
        .filter(|f| !(f.code == "memory.empty-slug" && f.path == "memory/.md"))
        .map(|f| f.to_line())
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
    // The info it has: sessions that never compressed.
    for f in &a.findings {
        assert!(
            matches!(f.code, "state.missing" | "memory.empty-slug"),
            "{}",
            f.to_line()
        );
    }
}

#[test]
fn clean_roots_with_other_settings_audit_clean_too() {
    for (seed, messages, window) in [(2, 160, 40_000), (3, 600, 128_000), (4, 90, 200_000)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        let mut opts = GenOptions {
            sessions: 8,
            messages,
            seed,
            max_result_bytes: 20_000,
            ..GenOptions::default()
        };
        opts.config.window = window;
        generate(&root, &opts, &mut |_, _| {}).expect("gen");
        let paths = RootPaths::from_root(&root);
        let d = discover(&paths).expect("discover");
        let mut cfg = Config::default();
        cfg.noa.window = window;
        let a = audit::audit_root(
            &paths,
            &d,
            &cfg,
            audit::How::new(PathStyle::Root),
            &mut |_, _| {},
        );
        let bad: Vec<String> = a
            .findings
            .iter()
            .filter(|f| f.severity != Severity::Info && f.code != "memory.empty-slug")
            .map(|f| f.to_line())
            .collect();
        assert!(bad.is_empty(), "seed {seed}: {bad:#?}");
    }
}

#[test]
fn corrupt_generated_root_shows_every_catalogue_code_where_the_damage_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let opts = GenOptions {
        sessions: 2,
        messages: 200,
        seed: 5,
        corrupt: true,
        ..GenOptions::default()
    };
    let report = generate(&root, &opts, &mut |_, _| {}).expect("gen");
    let a = audit_of(&root);
    let found: BTreeSet<&str> = a.findings.iter().map(|f| f.code).collect();
    let missing: Vec<&&str> = CATALOGUE.iter().filter(|c| !found.contains(**c)).collect();
    assert!(
        missing.is_empty(),
        "codes not reported: {missing:?}\n{}",
        a.to_text()
    );
    for d in &report.damages {
        // The audit escapes control characters so that each finding stays one line.
        let path = d.path.replace('\n', "\\n");
        let hit = a.findings.iter().any(|f| {
            f.code == d.code && f.path == path && d.line.is_none_or(|l| f.line == Some(l as u64))
        });
        assert!(
            hit,
            "damage {} at {} ({}) not reported:\n{}",
            d.code,
            d.path,
            d.note,
            a.to_text()
        );
    }
    assert!(a.has_errors());
    // The text form is sorted by path then line and ends with the summary.
    let text = a.to_text();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.last().expect("summary").starts_with("summary: "));
    let keys: Vec<(String, Option<u64>)> = a
        .findings
        .iter()
        .map(|f| (f.path.clone(), f.line))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}

#[test]
fn parallel_audit_equals_the_sequential_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    let opts = GenOptions {
        sessions: 12,
        messages: 60,
        seed: 9,
        corrupt: true,
        ..GenOptions::default()
    };
    generate(&root, &opts, &mut |_, _| {}).expect("gen");
    let paths = RootPaths::from_root(&root);
    let d = discover(&paths).expect("discover");
    let cfg = Config::default();
    let with = |threads: usize| {
        let mut calls = Vec::new();
        let how = audit::How {
            threads,
            ..audit::How::new(PathStyle::Root)
        };
        let a = audit::audit_root(&paths, &d, &cfg, how, &mut |n, t| calls.push((n, t)));
        // Progress: once per session, counting up to the total, on the calling thread.
        let total = d.sessions.len();
        let expected: Vec<(usize, usize)> = (1..=total).map(|n| (n, total)).collect();
        assert_eq!(calls, expected, "progress with {threads} threads");
        a
    };
    let sequential = with(1);
    assert!(sequential.has_errors(), "{}", sequential.to_text());
    for threads in [2, 3, 64] {
        let parallel = with(threads);
        assert_eq!(parallel.findings, sequential.findings, "{threads} threads");
        assert_eq!(parallel.to_text(), sequential.to_text());
        assert_eq!(parallel.to_json(), sequential.to_json());
    }
    // The default (one thread a core) is the same audit too.
    assert_eq!(audit_of(&root).findings, sequential.findings);
}
