//! Computed files for people and tools: `view.md`, `raw/<range>.md`, `status.json`; and a
//! fork's inherited state (SPEC 4.10).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use super::assemble::{Assembled, Block as OutBlock, Meta, Out};
use super::content::Slot;
use super::pipeline::{truncate_threshold, Turn};
use super::tokens;
use super::views::Projection;
use crate::config::NoaConfig;
use crate::format::archive::{self, MessageEntry, MessageKind};
use crate::format::state::State;
use crate::format::transcript::Usage;

/// How many ancestors a fork may inherit from.
pub const MAX_INHERIT_DEPTH: usize = 8;

/// A session's state as the runtime opens it: its own when it has blocks, else (with
/// `parents`) the first ancestor's that loads and has blocks, with stats and nudge reset.
/// `parent` loads one ancestor's state (`None`: missing or unloadable). Returns the state and
/// the ancestor it came from.
pub fn inherit(
    own: State,
    session: &str,
    parents: &[String],
    parent: &dyn Fn(&str) -> Option<State>,
) -> (State, Option<String>) {
    if !own.blocks().is_empty() {
        return (own, None);
    }
    for p in parents.iter().take(MAX_INHERIT_DEPTH) {
        if p.is_empty() || p == session {
            continue;
        }
        let Some(st) = parent(p) else { continue };
        if st.blocks().is_empty() {
            continue;
        }
        let mut child = st;
        child.session_id = session.to_string();
        child.nudge = Default::default();
        child.stats = Default::default();
        return (child, Some(p.clone()));
    }
    (own, None)
}

/// The usage band of a count: `below-floor`, `floor`, `pressure`, `emergency`.
pub fn band(count: u64, cfg: &NoaConfig) -> &'static str {
    let usage = count as f64 / cfg.window.max(1) as f64;
    if usage >= cfg.truncate_ratio {
        "emergency"
    } else if usage >= cfg.pressure_ratio {
        "pressure"
    } else if usage >= cfg.floor_ratio {
        "floor"
    } else {
        "below-floor"
    }
}

fn fenced(out: &mut String, body: &str, lang: &str) {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat((longest + 1).max(3));
    let _ = writeln!(out, "{fence}{lang}");
    out.push_str(body);
    if !body.ends_with('\n') {
        out.push('\n');
    }
    let _ = writeln!(out, "{fence}\n");
}

fn block_md(out: &mut String, b: &OutBlock<'_>) {
    match b.kind.as_ref() {
        "text" => {
            out.push_str(&b.full_text());
            out.push_str("\n\n");
        }
        "thinking" => {
            out.push_str("*thinking*\n\n");
            for line in b.thinking.lines() {
                let _ = writeln!(out, "> {line}");
            }
            out.push('\n');
        }
        "tool_use" => {
            let _ = writeln!(out, "**tool_use** `{}` ({})\n", b.name, b.id);
            fenced(out, &b.input, "json");
        }
        "tool_result" => {
            let err = if b.is_error { " (error)" } else { "" };
            let _ = writeln!(out, "**tool_result** ({}){err}\n", b.tool_use_id);
            let body: Vec<String> = b
                .content
                .iter()
                .map(|c| c.full_text().into_owned())
                .collect();
            fenced(out, &body.join("\n"), "");
        }
        other => {
            let _ = writeln!(out, "*{other} block*\n");
        }
    }
}

/// Where `view.md` says a summary's originals are.
pub enum Places<'a> {
    /// The archive as the state records it (relative when it can be) and `raw/<range>.md`.
    Relative,
    /// Paths inside the mount at `mnt`: the archive as `archive` names it, and the session's
    /// `raw/` file.
    Mount {
        mnt: &'a std::path::Path,
        archive: &'a dyn Fn(&crate::format::state::Block) -> String,
    },
}

/// `view.md`: the view for people — what the model is sent, message by message, each summary
/// with the archive that holds its originals and the `raw/` file that shows them.
pub fn markdown(
    out_msgs: &Assembled<'_>,
    t: &Turn<'_, '_>,
    state: &State,
    cfg: &NoaConfig,
    session: &str,
    places: &Places<'_>,
) -> String {
    let mut s = markdown_head(out_msgs.messages.len(), t, cfg, session);
    for m in &out_msgs.messages {
        message_md(&mut s, m, state, session, places);
    }
    s
}

/// `view.md`'s head: what precedes its `count` messages.
pub fn markdown_head(count: usize, t: &Turn<'_, '_>, cfg: &NoaConfig, session: &str) -> String {
    let mut s = String::new();
    let live: usize = t.active.iter().filter(|a| **a).count();
    let _ = writeln!(s, "# View of {session}\n");
    let _ = writeln!(
        s,
        "{} messages · {} tokens of a {} window ({}) · {} live block(s) · nudge: {}\n",
        count,
        tokens::format(t.measure),
        tokens::format(cfg.window),
        band(t.measure, cfg),
        live,
        t.injected()
            .and_then(|d| d.kind)
            .map_or("none", |k| k.as_str())
    );
    let _ = writeln!(s, "Settings: {}\n", settings_line(cfg));
    if let Some(line) = raw_hint(t) {
        let _ = writeln!(s, "{line}\n");
    }
    s
}

/// One message of `view.md`, appended to `s`.
pub fn message_md(s: &mut String, m: &Out<'_>, state: &State, session: &str, places: &Places<'_>) {
    match &m.meta {
        Meta::Message { refs, truncated } => {
            let names: Vec<String> = refs
                .iter()
                .filter_map(|r| r.name().map(|n| n.into_owned()))
                .collect();
            let refs = if names.is_empty() {
                String::new()
            } else {
                format!("{} · ", names.join(" "))
            };
            let cut = if *truncated {
                " · truncated for this request"
            } else {
                ""
            };
            let _ = writeln!(s, "## {refs}{}{cut}\n", m.role);
        }
        Meta::Summary { block, tier, range } => {
            let _ = writeln!(s, "## {block} · tier {tier} · {range} (summary)\n");
        }
        Meta::Nudge(kind) => {
            let _ = writeln!(s, "## nudge · {kind}\n");
        }
    }
    for b in m.content.iter().flatten() {
        block_md(s, b);
    }
    if let Meta::Summary { block, range, .. } = &m.meta {
        if let Some(b) = state.blocks().iter().find(|b| &b.block_id == block) {
            let (archive, raw) = match places {
                Places::Relative => (
                    if b.archive_rel.is_empty() {
                        b.archive_path.clone()
                    } else {
                        b.archive_rel.clone()
                    },
                    format!("raw/{range}.md"),
                ),
                Places::Mount { mnt, archive } => (
                    archive(b),
                    mnt.join("sessions")
                        .join(session)
                        .join("raw")
                        .join(format!("{range}.md"))
                        .display()
                        .to_string(),
                ),
            };
            let _ = writeln!(s, "Archive: `{archive}` · originals: `{raw}`\n");
        }
    }
}

fn settings_line(cfg: &NoaConfig) -> String {
    format!(
        "window={} floor_ratio={} pressure_ratio={} truncate_ratio={} protect_recent_messages={} protect_recent_tokens={} protected_tools=[{}] min_range_chars={} min_summary_chars={} max_summary_chars={} max_tier={}",
        cfg.window,
        cfg.floor_ratio,
        cfg.pressure_ratio,
        cfg.truncate_ratio,
        cfg.protect_recent_messages,
        cfg.protect_recent_tokens,
        cfg.protected_tools.join(","),
        cfg.min_range_chars,
        cfg.min_summary_chars,
        cfg.max_summary_chars,
        cfg.max_tier
    )
}

/// Why a raw range cannot be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RawError {
    #[error("unknown ref {0}")]
    UnknownRef(String),
    #[error("range {0}..{1} ends before it starts")]
    Reversed(String, String),
}

/// `raw/<start>-<end>.md` (and `raw/<ref>.md`): every content message of the transcript from
/// `start` to `end` in projection order, untruncated, compressed or not, rendered like archive
/// entries.
pub fn raw_range(
    p: &Projection<'_>,
    slots: &[Slot],
    start: u32,
    end: u32,
) -> Result<String, RawError> {
    let at = |n: u32| {
        slots
            .iter()
            .position(|s| s.number() == Some(n))
            .ok_or_else(|| RawError::UnknownRef(super::refs::format_ref(n)))
    };
    let (s, e) = (at(start)?, at(end)?);
    if s > e {
        return Err(RawError::Reversed(
            super::refs::format_ref(start),
            super::refs::format_ref(end),
        ));
    }
    let entries: Vec<MessageEntry> = p.cores[s..=e]
        .iter()
        .zip(&slots[s..=e])
        .map(|(c, slot)| MessageEntry {
            reference: slot.name().map(|n| n.into_owned()),
            role: c.role.as_str().to_string(),
            kind: match c.kind {
                super::content::Kind::Text => MessageKind::Text,
                super::content::Kind::Reasoning => MessageKind::Thinking,
                super::content::Kind::ToolCall => MessageKind::ToolUse,
                super::content::Kind::ToolResult => MessageKind::ToolResult,
            },
            tool: c.tool.to_string(),
            text: c.text.get().into_owned(),
        })
        .collect();
    let title = if start == end {
        format!("# Raw {}\n\n", super::refs::format_ref(start))
    } else {
        format!(
            "# Raw {}–{}\n\n",
            super::refs::format_ref(start),
            super::refs::format_ref(end)
        )
    };
    Ok(format!("{title}{}", archive::render_messages(&entries)))
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "total": u.total(),
    })
}

/// Inputs of `status.json` beyond the turn.
pub struct StatusInputs<'a> {
    pub session: &'a str,
    pub usage: &'a Usage,
    /// Usage of each sidechain, by agent id.
    pub subagents: &'a [(String, Usage)],
    /// Transcript problems (main and sidechains): errors, warnings, info.
    pub problems: (usize, usize, usize),
    pub state_error: Option<String>,
    /// Seconds since the transcript was last written, when known.
    pub idle_seconds: Option<u64>,
    pub inherited_from: Option<&'a str>,
    /// The settings used, every key (SPEC 10).
    pub settings: Value,
    /// Why the window is only assumed, when no setting gives it.
    pub window_assumed: Option<String>,
}

/// How to open the originals of any ref (`raw/` lists only the blocks' ranges), when the
/// session has refs.
fn raw_hint(t: &Turn<'_, '_>) -> Option<String> {
    let refs = t.slots.iter().filter_map(Slot::number);
    let (first, last) = refs.fold(None, |acc: Option<(u32, u32)>, n| {
        Some(acc.map_or((n, n), |(a, b)| (a.min(n), b.max(n))))
    })?;
    Some(format!(
        "Originals: raw/<ref>.md opens one message, raw/<start>-<end>.md a range, for any refs \
         from {} to {} (raw/ lists the compressed blocks' ranges).",
        super::refs::format_ref(first),
        super::refs::format_ref(last)
    ))
}

/// `status.json`'s value.
pub fn status(t: &Turn<'_, '_>, state: &State, cfg: &NoaConfig, inp: &StatusInputs<'_>) -> Value {
    let mut live_by_tier: BTreeMap<String, usize> = BTreeMap::new();
    for (b, live) in state.blocks().iter().zip(&t.active) {
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
    let refs: Vec<u32> = t.slots.iter().filter_map(Slot::number).collect();
    let decision = t.nudge.as_ref();
    let live = inp.idle_seconds.map(|s| s < cfg.live_seconds);
    json!({
        "session": inp.session,
        "window": cfg.window,
        "measuredTokens": t.measure,
        "usageRatio": (t.measure as f64 / cfg.window.max(1) as f64 * 10000.0).round() / 10000.0,
        "band": band(t.measure, cfg),
        "truncateThreshold": truncate_threshold(cfg),
        "truncatedMessages": t.truncated,
        "nudge": decision.filter(|d| d.inject).map(|d| json!({
            "kind": d.kind.map(|k| k.as_str()),
            "tier": d.tier,
            "targets": d.targets.iter().map(|b| b.block_id.clone()).collect::<Vec<_>>(),
        })),
        "nudgeReason": decision.map(|d| d.reason.clone()),
        "contentMessages": t.proj.len(),
        "viewMessages": t.items.len(),
        "blocks": state.blocks().len(),
        "liveBlocksByTier": live_by_tier,
        "inheritedFrom": inp.inherited_from,
        "refs": {
            "recorded": state.message_refs.by_ref.len(),
            "inMemoryOnly": t.new_refs.iter().filter(|&&i| t.slots[i as usize].is_ref()).count(),
            "first": refs.iter().min().map(|&n| super::refs::format_ref(n)),
            "last": refs.iter().max().map(|&n| super::refs::format_ref(n)),
            "raw": raw_hint(t),
        },
        "usage": {"parent": usage_json(inp.usage), "subagents": subs, "sum": usage_json(&sum)},
        "transcriptProblems": {"errors": inp.problems.0, "warnings": inp.problems.1, "info": inp.problems.2},
        "stateError": inp.state_error,
        "live": {
            "looksLive": live,
            "secondsSinceWrite": inp.idle_seconds,
            "liveSeconds": cfg.live_seconds,
        },
        "settings": inp.settings,
        "windowAssumed": inp.window_assumed,
    })
}
