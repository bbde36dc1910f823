//! `normafs demo`: a built-in example session root (made by the generator, with a little damage
//! for the audit to find), and the lines a new user can try on it.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::NoaConfig;
use crate::gen::{generate, GenOptions};
use crate::noa::compress::{self, Batch, Ctx, RangeSpec};
use crate::noa::view::{self, Item};
use crate::store::root::RootPaths;
use crate::store::session;

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

/// The summary used by the example `compress` line.
const HINT_SUMMARY: &str = "Summary written by hand: what these messages established.";

/// Write the demo root into `root` (which must not exist or be empty).
pub fn write_demo_root(root: &Path, cfg: &NoaConfig) -> Result<DemoRoot, String> {
    let opts = GenOptions {
        sessions: 3,
        messages: 160,
        seed: 2026,
        max_result_bytes: 20_000,
        config: cfg.clone(),
        ..GenOptions::default()
    };
    let report = generate(root, &opts, &mut |_, _| {}).map_err(|e| e.to_string())?;
    let sessions = report.clean_sessions.clone();
    let paths = RootPaths::from_root(root);
    // A little damage: a write in progress at the end of one transcript, and a memory saved
    // after the index was written.
    if let Some(last) = sessions.last() {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(paths.transcript_path(last))
            .map_err(|e| e.to_string())?;
        f.write_all(br#"{"uuid":"0000demo0000torn","session_id":""#)
            .map_err(|e| e.to_string())?;
    }
    std::fs::write(
        paths.memory.join("demo-tip.md"),
        "---\nname: Demo tip\ndescription: Saved after MEMORY.md was written, so the index is stale\ntype: reference\n---\nRun `echo reindex-memory > ctl` at the mount's root to fix the index.\n",
    )
    .map_err(|e| e.to_string())?;
    let showcase = sessions
        .iter()
        .find(|s| paths.state_path(s).exists())
        .or(sessions.first())
        .cloned()
        .ok_or("the generator wrote no session")?;
    let compress_hint = compress_hint(&paths, &showcase, cfg);
    Ok(DemoRoot {
        root: root.to_path_buf(),
        sessions,
        showcase,
        compress_hint,
    })
}

/// A `compress START END SUMMARY` line that session `sid` accepts now: four loose messages
/// before the protected tail, checked with the core.
pub fn compress_hint(paths: &RootPaths, sid: &str, cfg: &NoaConfig) -> Option<String> {
    let s = session::load(paths, sid);
    let msgs = s.msgs();
    let mat = view::materialize(&msgs, &s.state.state, cfg);
    let tail = view::protected_start(&mat.items, cfg);
    for start in 0..tail {
        let end = (start + 3).min(tail.checked_sub(1)?);
        if end <= start {
            break;
        }
        let items = &mat.items[start..=end];
        if items
            .iter()
            .any(|i| !matches!(i, Item::Msg(m) if !m.protected_tool))
        {
            continue;
        }
        let (a, _) = mat.item_span(&mat.items[start]);
        let (_, b) = mat.item_span(&mat.items[end]);
        let root = s.archive_root_str();
        let ctx = Ctx {
            msgs: &msgs,
            state: &s.state.state,
            cfg,
            strict: true,
            call_id: "ctl-hint",
            now: "2026-01-01T00:00:00Z",
            session: sid,
            archive_root: &root,
        };
        let batch = Batch {
            ranges: vec![RangeSpec {
                start: a.clone(),
                end: b.clone(),
                topic: None,
                summary: HINT_SUMMARY.to_string(),
            }],
        };
        if compress::plan(&ctx, &batch).is_ok() {
            return Some(format!("compress {a} {b} {HINT_SUMMARY}"));
        }
    }
    None
}

/// The lines printed by `normafs demo`.
pub fn instructions(d: &DemoRoot, mnt: &Path) -> String {
    let m = mnt.display();
    let s = &d.showcase;
    let mut out = format!(
        "normafs demo: {} sessions from {} mounted at {m}\n\
         Try, in another terminal:\n\
         \x20 ls {m}/sessions {m}/sessions/{s}\n\
         \x20 head -c 600 {m}/sessions/{s}/view.jsonl          # what the model sees\n\
         \x20 jq -c .message {m}/sessions/{s}/view.jsonl | head -3\n\
         \x20 less {m}/sessions/{s}/view.md\n\
         \x20 cat {m}/sessions/{s}/status.json\n\
         \x20 ls {m}/sessions/{s}/raw/ {m}/sessions/{s}/tier1/    # archived ranges\n\
         \x20 cat {m}/audit.txt                                  # a torn line, a stale index\n\
         \x20 grep -n \"noa archive\" {m}/sessions/{s}/view.md | head -3\n",
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
