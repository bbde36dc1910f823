//! Rebuild from history (SPEC 4.7), the pure part: find every recorded Compress call and
//! journal batch, order them by time, and replay each against the transcript as it stood then.

use chrono::{DateTime, FixedOffset};
use serde_json::Value;

use crate::config::{NoaConfig, COMPRESS_TOOL};
use crate::format::state::State;
use crate::format::transcript::Content;
use crate::noa::compress::{self, Ctx, PlannedBlock};
use crate::noa::Msg;

/// Where a replayed batch comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A Compress tool_use in the transcript: the index of its message.
    Transcript { msg: usize },
    /// An entry of the journal `ctl.jsonl`: messages recorded at or before `at` count.
    Journal,
}

/// One batch to replay.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub source: Source,
    /// RFC 3339 time: the call record's timestamp, or the journal entry's `at`.
    pub at: String,
    pub call_id: String,
    pub input: Value,
}

/// Parse an RFC 3339 time; `None` when it is not one.
pub fn parse_time(s: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(s).ok()
}

/// Compare two RFC 3339 times, falling back to string order when one does not parse.
fn time_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    match (parse_time(a), parse_time(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

/// Every Compress call of the transcript whose result is present and not an error.
pub fn transcript_calls(msgs: &[Msg<'_>], _cfg: &NoaConfig) -> Vec<Event> {
    let mut ok_results = std::collections::HashSet::new();
    for m in msgs {
        for c in &m.message.content {
            if let Content::ToolResult(r) = c {
                if !r.is_error() {
                    ok_results.insert(r.tool_use_id.as_str());
                }
            }
        }
    }
    let mut out = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        if m.message.role != "assistant" {
            continue;
        }
        for c in &m.message.content {
            if let Content::ToolUse(u) = c {
                if u.name == COMPRESS_TOOL && ok_results.contains(u.id.as_str()) {
                    out.push(Event {
                        source: Source::Transcript { msg: i },
                        at: m.timestamp.unwrap_or("").to_string(),
                        call_id: u.id.clone(),
                        input: u.input.to_value(),
                    });
                }
            }
        }
    }
    out
}

/// Put events in time order (stable: transcript calls keep their order).
pub fn order(events: &mut [Event]) {
    events.sort_by(|a, b| time_cmp(&a.at, &b.at));
}

/// The number of leading messages an event sees.
pub fn prefix_len(msgs: &[Msg<'_>], ev: &Event) -> usize {
    match ev.source {
        Source::Transcript { msg } => msg.min(msgs.len()),
        Source::Journal => msgs
            .iter()
            .position(|m| {
                m.timestamp
                    .is_some_and(|t| time_cmp(t, &ev.at) == std::cmp::Ordering::Greater)
            })
            .unwrap_or(msgs.len()),
    }
}

/// Result of replaying one event.
#[derive(Debug, Clone)]
pub enum Applied {
    Done(Vec<PlannedBlock>),
    Skipped(String),
}

/// Replay one event against `state`; on success `state` advances.
pub fn apply(
    state: &mut State,
    msgs: &[Msg<'_>],
    ev: &Event,
    cfg: &NoaConfig,
    session: &str,
    archive_root: &str,
) -> Applied {
    let batch = match compress::parse_batch(&ev.input) {
        Ok(b) => b,
        Err(e) => return Applied::Skipped(e.to_string()),
    };
    let n = prefix_len(msgs, ev);
    let ctx = Ctx {
        msgs: &msgs[..n],
        state,
        cfg,
        strict: false,
        call_id: &ev.call_id,
        now: &ev.at,
        session,
        archive_root,
    };
    match compress::plan(&ctx, &batch) {
        Ok(p) => {
            *state = p.state;
            Applied::Done(p.blocks)
        }
        Err(e) => Applied::Skipped(e.to_string()),
    }
}

/// What a replay produced.
#[derive(Debug, Clone)]
pub struct Replay {
    pub state: State,
    /// Per applied event: its call id and blocks.
    pub applied: Vec<(String, Vec<PlannedBlock>)>,
    /// Per skipped event: its call id and why.
    pub skipped: Vec<(String, String)>,
}

/// Replay `events` (already ordered) against an initial state of `session`.
pub fn replay(
    msgs: &[Msg<'_>],
    events: &[Event],
    cfg: &NoaConfig,
    session: &str,
    archive_root: &str,
) -> Replay {
    let mut state = State::initial(session);
    let mut applied = Vec::new();
    let mut skipped = Vec::new();
    for ev in events {
        match apply(&mut state, msgs, ev, cfg, session, archive_root) {
            Applied::Done(blocks) => applied.push((ev.call_id.clone(), blocks)),
            Applied::Skipped(why) => skipped.push((ev.call_id.clone(), why)),
        }
    }
    Replay {
        state,
        applied,
        skipped,
    }
}
