//! `status.json` (SPEC 5): the state of a session at a glance.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::config::NoaConfig;
use crate::format::transcript::Usage;
use crate::noa::view::{Item, View};

fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "total": u.total(),
    })
}

/// Inputs of `status.json` beyond the view.
pub struct StatusInputs<'a> {
    pub session: &'a str,
    /// Usage of the main transcript.
    pub usage: &'a Usage,
    /// Usage of each sidechain, by agent id.
    pub subagents: &'a [(String, Usage)],
    /// Transcript problems (main and sidechains): errors, warnings, info.
    pub problems: (usize, usize, usize),
    /// Why state.json could not be loaded, if it could not.
    pub state_error: Option<String>,
}

/// Build `status.json`'s value.
pub fn status(view: &View<'_>, cfg: &NoaConfig, inp: &StatusInputs<'_>) -> Value {
    let mat = &view.mat;
    let raw_tokens: u64 = mat
        .msg_tokens
        .iter()
        .fold(0u64, |sum, &t| sum.saturating_add(t));
    let mut live_by_tier: BTreeMap<String, usize> = BTreeMap::new();
    for (b, live) in mat.state.blocks.iter().zip(&mat.live) {
        if *live {
            *live_by_tier.entry(b.tier.to_string()).or_default() += 1;
        }
    }
    let mut sum = inp.usage.clone();
    let mut subs = serde_json::Map::new();
    for (aid, u) in inp.subagents {
        sum.add(u);
        subs.insert(aid.clone(), usage_json(u));
    }
    let truncated = mat
        .items
        .iter()
        .filter(|i| matches!(i, Item::Msg(m) if m.truncated))
        .count();
    let window = cfg.window.max(1);
    json!({
        "session": inp.session,
        "window": cfg.window,
        "projectedTokens": view.projected,
        "measuredTokens": view.measured,
        "rawTokens": raw_tokens,
        "usageRatio": (view.projected as f64 / window as f64 * 10000.0).round() / 10000.0,
        "band": view.band(cfg),
        "nudge": view.nudge.as_ref().map(|n| json!({"kind": n.kind, "text": n.text})),
        "messages": mat.msgs.len(),
        "viewLines": mat.items.len() + usize::from(view.nudge.is_some()),
        "hiddenMessages": mat.hidden.len(),
        "truncatedMessages": truncated,
        "blocks": mat.state.blocks.len(),
        "liveBlocksByTier": live_by_tier,
        "refs": {
            "recorded": mat.state.message_refs.by_ref.len(),
            "first": mat.refs.per_msg.first(),
            "last": mat.refs.per_msg.last(),
            "unrecorded": mat.refs.new.len(),
        },
        "usage": {"parent": usage_json(inp.usage), "subagents": subs, "sum": usage_json(&sum)},
        "transcriptProblems": {"errors": inp.problems.0, "warnings": inp.problems.1, "info": inp.problems.2},
        "stateError": inp.state_error,
    })
}
