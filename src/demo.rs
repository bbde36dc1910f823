//! `normafs demo`: a built-in example session root in the runtime's dialect (made by the
//! generator, with a little damage for the audit to find), and the lines a new user can try on
//! it.
//!
//! The root holds three sessions: a showcase that compressed into tier-1 blocks and one tier-2
//! block and left its last third uncompressed, one that never compressed, and one with a
//! built-in compaction marker; memories (one with a Unicode-only name, the file `.md`). The
//! damage: a torn last line in the third session's transcript and a memory saved after
//! `MEMORY.md` was written. Every transcript's modification time is its last record's time
//! (the generator's rule), so no session looks live and the `compress` line works at once.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::NoaConfig;
use crate::gen::{generate_profiled, GenError, GenOptions, Profile};
use crate::noa::recommend;
use crate::noa::views::{self, Projection};
use crate::store::root::RootPaths;
use crate::store::session as store_session;

/// What the demo root holds.
#[derive(Debug, Clone)]
pub struct DemoRoot {
    pub root: PathBuf,
    pub sessions: Vec<String>,
    /// A session with compressions, for the examples.
    pub showcase: String,
    /// A `compress` command that the showcase session accepts now.
    pub compress_hint: Option<String>,
}

/// Why the demo root could not be written.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Gen(#[from] GenError),
    /// Cutting off the last transcript's end.
    #[error("{}: {source}", path.display())]
    Damage {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Saving the memory the index does not name.
    #[error("{0}")]
    Memory(std::io::Error),
    #[error("the generator wrote no session")]
    NoSession,
}

/// The summary used by the example `compress` line.
const HINT_SUMMARY: &str = "Summary written by hand: what these messages established.";

/// Write the demo root into `root` (which must not exist or be empty).
pub fn write_demo_root(root: &Path, cfg: &NoaConfig) -> Result<DemoRoot, DemoError> {
    let opts = GenOptions {
        sessions: 3,
        messages: 240,
        seed: 2026,
        max_result_bytes: 20_000,
        config: cfg.clone(),
        ..GenOptions::default()
    };
    let profiles = [Profile::Showcase, Profile::Plain, Profile::Marker];
    let report = generate_profiled(root, &opts, &profiles, &mut |_, _| {})?;
    let sessions = report.clean_sessions.clone();
    let paths = RootPaths::from_root(root);
    // A little damage: a write cut off at the end of one transcript (its time kept: the
    // runtime that wrote it is gone), and a memory saved after the index was written.
    if let Some(last) = sessions.last() {
        let path = paths.transcript_path(last);
        let torn = || -> std::io::Result<()> {
            let mtime = std::fs::metadata(&path)?.modified()?;
            let mut f = std::fs::OpenOptions::new().append(true).open(&path)?;
            f.write_all(br#"{"uuid":"5f0c1d2e3b4a59687766554433221100","session_id":""#)?;
            f.set_modified(mtime)
        };
        torn().map_err(|source| DemoError::Damage { path, source })?;
    }
    std::fs::write(
        paths.memory.join("demo-tip.md"),
        "---\nname: Demo tip\ndescription: Saved after MEMORY.md was written, so the index is stale\ntype: reference\n---\n\nRun `echo reindex-memory > ctl` at the mount's root to fix the index.\n",
    )
    .map_err(DemoError::Memory)?;
    let showcase = sessions.first().cloned().ok_or(DemoError::NoSession)?;
    let compress_hint = compress_hint(&paths, &showcase, cfg);
    Ok(DemoRoot {
        root: root.to_path_buf(),
        sessions,
        showcase,
        compress_hint,
    })
}

/// A `compress START END SUMMARY` line that session `sid` accepts now: a range the runtime's
/// recommendation offers on the session's view, checked the way ctl will apply it (a batch of
/// one range that makes its block whole).
pub fn compress_hint(paths: &RootPaths, sid: &str, cfg: &NoaConfig) -> Option<String> {
    let s = store_session::load(paths, sid);
    let (state, _) = store_session::opened_state(paths, sid, &s.state.state, cfg);
    let p = Projection::new(store_session::messages(&s.transcript));
    let t = views::turn(&p, &state, cfg, &views::runtime_path);
    let rec = recommend::recommend(&t, &state, cfg);
    let root = s.archive_root.to_string_lossy().into_owned();
    let place = crate::noa::compress::Placement::new(&root, sid, "2026-01-01T00:00:00Z", 0);
    // The largest first: the part of the session nothing has compressed yet.
    let mut ranges: Vec<&recommend::RangeInfo> = rec
        .ranges
        .iter()
        .filter(|r| r.chars >= cfg.min_range_chars)
        .collect();
    ranges.sort_by_key(|r| std::cmp::Reverse(r.chars));
    for r in ranges {
        let (Some(a), Some(b)) = (r.start.name(), r.end.name()) else {
            continue;
        };
        let range = crate::noa::args::Range {
            start: a.to_string(),
            end: b.to_string(),
            summary: HINT_SUMMARY.to_string(),
            topic: String::new(),
            summary_max_chars: None,
        };
        let applied = crate::noa::rebuild::ctl_apply(
            &p,
            &state,
            cfg,
            std::slice::from_ref(&range),
            "ctl-hint",
            &place,
            &views::runtime_path,
        );
        if applied.whole() {
            return Some(format!("compress {a} {b} {HINT_SUMMARY}"));
        }
    }
    None
}

/// The lines printed by `normafs demo`.
pub fn instructions(d: &DemoRoot, mnt: &Path) -> String {
    let m = mnt.display();
    let s = &d.showcase;
    let tiers: String = (1..=3)
        .filter(|n| d.root.join(format!("noa/{s}/tier{n}")).is_dir())
        .map(|n| format!(" {m}/sessions/{s}/tier{n}/"))
        .collect();
    // Chromium refuses to run as root without it.
    // SAFETY: geteuid has no preconditions and cannot fail.
    let sandbox = if unsafe { libc::geteuid() } == 0 {
        " --no-sandbox"
    } else {
        ""
    };
    let mut out = format!(
        "normafs demo: {} sessions from {} mounted at {m}\n\
         Try, in another terminal:\n\
         \x20 ls {m}/sessions {m}/sessions/{s}\n\
         \x20 head -c 600 {m}/sessions/{s}/view.jsonl          # what the model sees\n\
         \x20 jq -c .message {m}/sessions/{s}/view.jsonl | head -3\n\
         \x20 jq -c 'select(.block) | {{block, tier, range}}' {m}/sessions/{s}/view.jsonl\n\
         \x20 jq -c .message {m}/sessions/{s}/materialized.jsonl | wc -l   # blocks applied, no tags\n\
         \x20 less {m}/sessions/{s}/view.md\n\
         \x20 chromium{sandbox} {m}/index.html                   # every session; each view as a page\n\
         \x20 cat {m}/sessions/{s}/status.json\n\
         \x20 ls {m}/sessions/{s}/raw/{tiers}\n\
         \x20 head -20 {m}/sessions/{s}/raw/m00002.md              # the raw content of one ref\n\
         \x20 cat {m}/audit.txt                                  # a torn line, a stale index\n",
        d.sessions.len(),
        d.root.display(),
    );
    if let Some(h) = &d.compress_hint {
        out.push_str(&format!(
            "\x20 echo '{h}' > {m}/sessions/{s}/ctl\n\
             \x20 cat {m}/sessions/{s}/ctl                          # the result of that command\n"
        ));
    }
    out.push_str("Ctrl-C here unmounts and removes the demo root.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{self, PathStyle, Severity};
    use crate::config::Config;
    use crate::format::state::load_state;
    use crate::store::ctl::{self, Runner, Scope};
    use crate::store::root::discover;

    #[test]
    fn the_demo_root_holds_what_the_instructions_promise() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("demo");
        let cfg = NoaConfig::default();
        let d = write_demo_root(&root, &cfg).expect("demo root");
        assert_eq!(d.sessions.len(), 3);
        let paths = RootPaths::from_root(&root);
        let now = chrono::Utc::now();

        // The showcase: live blocks of tier 1 and 2; the plain session: no state at all; the
        // third: a compaction marker.
        let st = load_state(&paths.state_path(&d.showcase), &d.showcase).state;
        let tiers: std::collections::BTreeSet<i64> = st
            .blocks()
            .iter()
            .filter(|b| b.active)
            .map(|b| b.tier)
            .collect();
        assert!(tiers.contains(&1) && tiers.contains(&2), "{tiers:?}");
        assert!(!paths.archive_root(&d.sessions[1]).exists());
        let third = std::fs::read_to_string(paths.transcript_path(&d.sessions[2])).expect("read");
        assert!(third.contains("\"type\":\"compact_boundary\""));
        for sid in &d.sessions {
            assert_eq!(
                ctl::live_reason(&paths, sid, &cfg, now),
                None,
                "{sid} looks live"
            );
        }

        // The audit finds the damage, and only that (besides the runtime's own hazard).
        let disc = discover(&paths).expect("discover");
        let a = audit::audit_root(
            &paths,
            &disc,
            &Config::default(),
            audit::How::new(PathStyle::Root),
            &mut |_, _| {},
        );
        let warned: Vec<&str> = a
            .findings
            .iter()
            .filter(|f| f.severity != Severity::Info)
            .map(|f| f.code)
            .collect();
        assert_eq!(
            warned,
            [
                "memory.empty-slug",
                "memory.index-stale",
                "transcript.torn-tail"
            ],
            "{}",
            a.to_text()
        );

        // The example command works at once, as ctl runs it.
        let hint = d.compress_hint.clone().expect("a compress hint");
        let text = instructions(&d, Path::new("/mnt/demo"));
        assert!(text.contains(&hint), "{text}");
        assert!(text.contains("/tier2/"), "{text}");
        let runner = Runner {
            paths: &paths,
            cfg: &cfg,
            read_only: false,
        };
        let rec = runner.run(&Scope::Session(d.showcase.clone()), &hint, 1, now);
        assert!(rec.ok, "{}", rec.message);
        let after = load_state(&paths.state_path(&d.showcase), &d.showcase).state;
        assert!(after
            .blocks()
            .iter()
            .any(|b| b.summary == HINT_SUMMARY && b.compress_call_id.starts_with("ctl-")));
    }
}
