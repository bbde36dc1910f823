//! Rebuild from history (SPEC 4.8): the state replayed from the transcript's Compress calls —
//! each against the projection up to and including it, as the runtime replays — and from
//! normafs's journal batches at their place in time.

use super::args;
use super::compress::{self, Applied, Placement};
use super::content::{Kind, COMPRESS_TOOL};
use super::pipeline::{self, Count};
use super::session::{ArchivePath, Projection};
use crate::config::NoaConfig;
use crate::format::archive::Archive;
use crate::format::state::State;

/// A batch normafs committed through ctl (a line of `ctl.jsonl`).
#[derive(Debug, Clone)]
pub struct JournalBatch {
    /// How many projected content messages existed when it ran.
    pub prefix: usize,
    /// The Compress input it ran.
    pub input: String,
    pub call: String,
}

/// What a rebuild replayed.
#[derive(Debug, Clone)]
pub struct Rebuilt {
    pub state: State,
    /// The archive of every block of the rebuilt state made by this replay.
    pub archives: Vec<Archive>,
    pub replayed: usize,
    /// Calls that made no block then or that no longer apply, with why.
    pub skipped: Vec<String>,
}

enum Event<'j> {
    Call { index: usize },
    Journal(&'j JournalBatch),
}

/// Replay a session's history.
pub fn rebuild(
    p: &Projection<'_>,
    cfg: &NoaConfig,
    session: &str,
    place: &Placement<'_>,
    journal: &[JournalBatch],
    path: ArchivePath<'_>,
) -> Rebuilt {
    let cores = &p.cores;
    // A call counts as having made blocks when its result's panel lists one: the runtime's
    // own test (its `is_error` is not consulted).
    let mut succeeded = std::collections::HashMap::new();
    for c in cores {
        if c.kind == Kind::ToolResult && c.tool == COMPRESS_TOOL && !c.call.is_empty() {
            succeeded.insert(c.call, compress::panel_block_count(&c.text) > 0);
        }
    }
    let mut events: Vec<(usize, u8, Event<'_>)> = Vec::new();
    for (i, c) in cores.iter().enumerate() {
        if c.kind == Kind::ToolCall && c.tool == COMPRESS_TOOL && !c.call.is_empty() {
            events.push((i + 1, 0, Event::Call { index: i }));
        }
    }
    for b in journal {
        events.push((b.prefix.min(cores.len()), 1, Event::Journal(b)));
    }
    events.sort_by_key(|(at, order, _)| (*at, *order));

    let mut out = Rebuilt {
        state: State::initial(session),
        archives: Vec::new(),
        replayed: 0,
        skipped: Vec::new(),
    };
    for (at, _, ev) in events {
        let prefix = &cores[..at];
        let (journal_batch, call, applied) = match ev {
            Event::Call { index } => {
                let c = &cores[index];
                if !succeeded.get(c.call).copied().unwrap_or(false) {
                    out.skipped
                        .push(format!("{}: its result reports no block", c.call));
                    continue;
                }
                let parsed = args::parse(&c.text);
                if parsed.ranges.is_empty() {
                    out.skipped.push(format!("{}: no usable range", c.call));
                    continue;
                }
                // The runtime replays without a token count: no truncation, no nudge.
                let t = pipeline::run(prefix, &out.state, cfg, Count::Given(0), path);
                let ledger = t.ledger(&out.state, &[]);
                let applied = compress::apply(&t, &ledger, &parsed.ranges, cfg, c.call, place);
                (false, c.call.to_string(), applied)
            }
            Event::Journal(b) => {
                let parsed = args::parse(&b.input);
                let sub = Projection {
                    msgs: p.msgs.clone(),
                    cores: prefix.to_vec(),
                };
                let applied =
                    ctl_apply(&sub, &out.state, cfg, &parsed.ranges, &b.call, place, path);
                (true, b.call.clone(), applied)
            }
        };
        if !applied.errors.is_empty() || applied.created.is_empty() {
            let why = if applied.errors.is_empty() {
                "made no block".to_string()
            } else {
                applied.errors.join("; ")
            };
            out.skipped.push(format!("{call}: {why}"));
            continue;
        }
        // A ctl batch is all or nothing, then and now.
        if journal_batch && !applied.whole() {
            out.skipped
                .push(format!("{call}: part of the batch no longer applies"));
            continue;
        }
        out.archives.extend(applied.archives);
        out.state = applied.state;
        out.replayed += 1;
    }
    // Keep only the archives of blocks the final state holds.
    let ids: std::collections::HashSet<&str> = out
        .state
        .blocks()
        .iter()
        .map(|b| b.block_id.as_str())
        .collect();
    out.archives.retain(|a| ids.contains(a.block_id.as_str()));
    out
}

/// A ctl batch as ctl runs it: against the view a resumed runtime sends (nudge included),
/// on the state with that view's refs recorded.
pub fn ctl_apply(
    p: &Projection<'_>,
    state: &State,
    cfg: &NoaConfig,
    ranges: &[args::Range],
    call: &str,
    place: &Placement<'_>,
    path: ArchivePath<'_>,
) -> Applied {
    let t = super::session::turn(p, state, cfg, path);
    let shown = super::assemble::assemble(&t, &p.msgs, state, true);
    let ledger = t.ledger(state, &shown.tagged);
    compress::apply(&t, &ledger, ranges, cfg, call, place)
}
