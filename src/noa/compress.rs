//! Compress (SPEC 4.5): a batch of ranges applied to the view the model saw, as the runtime
//! applies it — endpoints resolved (refs or block ids, swapped when reversed, snapped into an
//! absorbing block), ranges widened around tool pairs and reasoning, tiers decided,
//! protected content excluded, split turns withdrawn, summaries checked — and the panel that
//! reports it.
//!
//! The runtime's batch is partial (a failing range is reported, the others still make
//! blocks); [`Applied`] says which happened so that ctl can refuse a partial batch whole.

mod resolve;
use resolve::*;

mod panel;
pub use panel::*;

mod gate;
use gate::size_gate;

mod undo;
pub use undo::Undo;

use std::collections::{HashMap, HashSet};

use super::args::Range;
use super::content::{Core, Kind, Origin, Slot};
use super::pipeline::Turn;
use super::protect;
use super::refs::{self, format_ref, parse_block_id, parse_ref};
use super::tokens;
use crate::config::NoaConfig;
use crate::fasthash::{FastMap, FastSet};
use crate::format::archive::{
    self as archive, Archive, BlockEntry, Entry, MessageEntry, MessageKind,
};
use crate::format::state::{Block, State};

/// How far widening looks for the other half of a tool exchange.
const TOOL_PAIR_MAX_SCAN: usize = 20;

/// What a batch did.
#[derive(Debug, Clone)]
pub struct Applied {
    /// The state after the batch (unchanged when no block was made).
    pub state: State,
    pub created: Vec<Block>,
    /// One archive per created block, its bodies taken from the transcript (never cut).
    pub archives: Vec<Archive>,
    pub tokens_compressed: i64,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// Ranges skipped for overlapping an earlier one.
    pub skipped: usize,
    pub surviving: Vec<String>,
    /// The messages left out of a range as protected, each with the rule that holds it (for
    /// words a user can act on; the runtime's warning names the messages only).
    pub protected: Vec<(String, protect::SoftRule)>,
}

impl Applied {
    /// Every range made its block: no error, nothing skipped.
    pub fn whole(&self) -> bool {
        self.errors.is_empty() && self.skipped == 0 && !self.created.is_empty()
    }
}

/// The archive root's naming of a new block's archive.
pub struct Placement<'f> {
    /// `<archive root>` as an absolute path (archivePath = root/rel).
    pub root: &'f str,
    pub session: &'f str,
    /// RFC 3339 (seconds) and Unix time of "now".
    pub created: String,
    pub now: i64,
    /// Whether the new blocks' archives are wanted with their messages (a replay that keeps
    /// only states and requests does not copy every compressed message's text).
    pub entries: bool,
}

impl<'f> Placement<'f> {
    /// New blocks of `session` archived under `root`, made at `created` (an archive's
    /// `created`) and `now` (a block's `createdAt`).
    pub fn new(root: &'f str, session: &'f str, created: impl Into<String>, now: i64) -> Self {
        Placement {
            root,
            session,
            created: created.into(),
            now,
            entries: true,
        }
    }

    /// The same placement, the archives made without their entries.
    pub fn without_entries(&self) -> Placement<'f> {
        Placement {
            created: self.created.clone(),
            entries: false,
            ..*self
        }
    }
}

/// Apply one Compress call to a turn's view (nudge included). `state` is the state after the
/// view (its refs recorded, liveness set: [`Turn::ledger`]).
pub fn apply(
    t: &Turn<'_, '_>,
    state: &State,
    ranges: &[Range],
    cfg: &NoaConfig,
    call: &str,
    place: &Placement<'_>,
) -> Applied {
    apply_owned(t, state.clone(), ranges, cfg, call, place)
}

/// [`apply`] to a state of the caller's that becomes the result's (a state of a long session
/// is large: it is not copied).
pub fn apply_owned(
    t: &Turn<'_, '_>,
    state: State,
    ranges: &[Range],
    cfg: &NoaConfig,
    call: &str,
    place: &Placement<'_>,
) -> Applied {
    let mut res = Applied {
        state: State::initial(""),
        created: Vec::new(),
        archives: Vec::new(),
        tokens_compressed: 0,
        errors: Vec::new(),
        warnings: Vec::new(),
        skipped: 0,
        surviving: Vec::new(),
        protected: Vec::new(),
    };
    if ranges.is_empty() {
        res.state = state;
        return res;
    }
    let msgs: Vec<M<'_, '_>> = t
        .items
        .iter()
        .map(|&p| M {
            core: t.core(p),
            headed: t.headed(p),
            chars: t.chars(p),
            slot: t.slot(p),
            tokens: t.tokens(p),
        })
        .collect();
    let mut index = FastMap::with_capacity_and_hasher(msgs.len(), Default::default());
    for (i, m) in msgs.iter().enumerate() {
        if !m.core.id.is_empty() {
            index.entry(m.core.id.as_ref()).or_insert(i);
        }
    }
    let anchor = Ctx::anchors(&state, &index);
    let by_id = state
        .blocks()
        .iter()
        .enumerate()
        .map(|(i, b)| (b.block_id.as_str(), i))
        .collect();
    let ctx = Ctx {
        msgs,
        state: &state,
        index,
        anchor,
        by_id,
    };

    // A: resolve every range.
    let mut entries: Vec<Requested> = Vec::new();
    let (mut unknown, mut consumed, mut resolvable) = (0, 0, 0);
    for r in ranges {
        let e = ctx.resolve(&r.start, &r.end);
        match &e {
            Ok(rr) => {
                resolvable += 1;
                res.warnings.extend(rr.warnings.iter().cloned());
            }
            Err((NotFound::Unknown | NotFound::Invalid, _)) => unknown += 1,
            Err((NotFound::Consumed, _)) => consumed += 1,
        }
        entries.push((e, false));
    }

    // B: a range starting inside an earlier accepted one is skipped.
    let mut order: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].0.is_ok())
        .collect();
    order.sort_by_key(|&i| entries[i].0.as_ref().map_or(0, |r| r.start));
    let mut accepted_max: i64 = -1;
    for i in order {
        let (start, end) = match &entries[i].0 {
            Ok(r) => (r.start as i64, r.end as i64),
            Err(_) => continue,
        };
        if start <= accepted_max {
            entries[i].1 = true;
            res.skipped += 1;
            res.warnings.push(format!(
                "Skipped range ({}..{}) — overlaps an earlier range in the batch; the earlier range takes precedence. Keep ranges disjoint.",
                ranges[i].start, ranges[i].end
            ));
            continue;
        }
        accepted_max = accepted_max.max(end);
    }

    // C: the batch's size gate.
    if let Some(msg) = size_gate(
        &ctx,
        &entries,
        ranges.len(),
        cfg,
        unknown,
        consumed,
        resolvable,
    ) {
        res.errors.push(msg);
        res.state = state;
        return res;
    }

    // D: build every block (against one view and one state: what every range is checked
    // against is found once).
    let mut next_block = state.next_block_id;
    let shared = Shared::of(&ctx.msgs, &state, cfg);
    let mut built: Vec<(Block, Archive)> = Vec::new();
    for (i, (e, skipped)) in entries.iter().enumerate() {
        let rr = match e {
            Err((_, msg)) => {
                res.errors.push(msg.clone());
                continue;
            }
            Ok(_) if *skipped => continue,
            Ok(rr) => rr,
        };
        match build(
            &ctx,
            &ranges[i],
            rr,
            &mut next_block,
            cfg,
            &shared,
            call,
            place,
        ) {
            Ok((block, arch, warns, surviving)) => {
                res.warnings.extend(warns);
                push_unique(&mut res.surviving, surviving);
                built.push((block, arch));
            }
            Err((warns, surviving, msg)) => {
                res.warnings.extend(warns);
                push_unique(&mut res.surviving, surviving);
                res.errors.push(msg);
            }
        }
    }
    res.protected = shared.held.take();
    res.protected.sort();
    res.protected.dedup();
    let mut working = state;
    working.next_block_id = next_block;
    if built.is_empty() {
        res.state = working;
        return res;
    }

    // F: commit.
    let blocks = working.blocks.get_or_insert_with(Vec::new);
    for (b, a) in built {
        res.tokens_compressed += b.compressed_tokens;
        for id in &b.direct_block_ids {
            if let Some(child) = blocks.iter_mut().find(|x| &x.block_id == id) {
                child.active = false;
            }
        }
        blocks.push(b.clone());
        res.created.push(b);
        res.archives.push(a);
    }
    working.stats.compression_count += res.created.len() as i64;
    working.stats.tokens_compressed += res.tokens_compressed;
    working.nudge.last_per_message_nudge_tokens = 0;
    working.nudge.last_nudge_shown_tokens = 0;
    working.nudge.last_shown_by_tier.clear();
    res.state = working;
    res
}

fn push_unique(into: &mut Vec<String>, from: Vec<String>) {
    for id in from {
        if !into.contains(&id) {
            into.push(id);
        }
    }
}

/// Widen `[start, end]` so that no tool exchange is cut (Compress exchanges aside).
fn widen_tool_pairs(mut start: usize, mut end: usize, msgs: &[M<'_, '_>]) -> (usize, usize) {
    if end >= msgs.len() || start > end {
        return (start, end);
    }
    let calls: HashSet<&str> = msgs[start..=end]
        .iter()
        .filter(|m| !m.core.call.is_empty() && m.core.tool != super::content::COMPRESS_TOOL)
        .map(|m| m.core.call)
        .collect();
    if calls.is_empty() {
        return (start, end);
    }
    let forward = (end + TOOL_PAIR_MAX_SCAN).min(msgs.len() - 1);
    let backward = start.saturating_sub(TOOL_PAIR_MAX_SCAN);
    for (i, m) in msgs.iter().enumerate().take(forward + 1).skip(end + 1) {
        if m.core.call.is_empty() || !calls.contains(m.core.call) {
            break;
        }
        end = i;
    }
    let mut i = start;
    while i > backward {
        i -= 1;
        if msgs[i].core.call.is_empty() || !calls.contains(msgs[i].core.call) {
            break;
        }
        start = i;
    }
    (start, end)
}

/// Widen so that a reasoning run and the acts after it stay together.
fn widen_reasoning(mut start: usize, mut end: usize, msgs: &[M<'_, '_>]) -> (usize, usize) {
    if end >= msgs.len() || start > end {
        return (start, end);
    }
    if msgs[end].core.kind == Kind::Reasoning {
        let mut i = end + 1;
        while i < msgs.len() && msgs[i].core.kind == Kind::Reasoning {
            i += 1;
        }
        while i < msgs.len() && msgs[i].core.is_act() {
            end = i;
            i += 1;
        }
    }
    if msgs[start].core.is_act() {
        let mut i = start;
        while i > 0 && msgs[i - 1].core.kind == Kind::Reasoning {
            i -= 1;
            start = i;
        }
    }
    (start, end)
}

fn widen(start: usize, end: usize, msgs: &[M<'_, '_>]) -> (usize, usize) {
    let (mut s, mut e) = (start, end);
    for _ in 0..2 {
        let (a, b) = widen_reasoning(s, e, msgs);
        let (a, b) = widen_tool_pairs(a, b, msgs);
        if (a, b) == (s, e) {
            break;
        }
        (s, e) = (a, b);
    }
    (s, e)
}

struct TierDecision {
    target: i64,
    output: i64,
    consumed: Vec<String>,
    surviving: Vec<String>,
}

/// A range's tiers: a message range makes a tier-1 block; with a block endpoint, the lowest
/// tier among the live blocks anchored in it is absorbed into one tier up (capped), the
/// higher ones stay.
fn decide_tier(kind: EndKind, nested: &[String], working: &State, cfg: &NoaConfig) -> TierDecision {
    let max_tier = if cfg.max_tier < 2 {
        3
    } else {
        cfg.max_tier as i64
    };
    let mut d = TierDecision {
        target: 1,
        output: 1,
        consumed: Vec::new(),
        surviving: Vec::new(),
    };
    if kind != EndKind::Block {
        return d;
    }
    let find = |id: &str| {
        working
            .blocks()
            .iter()
            .find(|b| b.block_id == id)
            .filter(|b| b.active)
    };
    let lowest = nested
        .iter()
        .filter_map(|id| find(id))
        .map(|b| b.tier)
        .min();
    if let Some(l) = lowest.filter(|&l| l > 0) {
        d.target = l;
    }
    d.output = max_tier.min(d.target + 1);
    for id in nested {
        let Some(b) = find(id) else { continue };
        if b.tier == d.target {
            d.consumed.push(id.clone());
        } else {
            d.surviving.push(id.clone());
        }
    }
    d
}

/// What every range of one batch is checked against (one view, one state): found once
/// per batch, not once per range.
struct Shared<'t, 'a, 's> {
    /// Ids the live blocks cover (SPEC 2.5).
    covered: FastSet<&'s str>,
    /// Call ids of hard-protected content.
    calls: HashSet<&'t str>,
    /// The soft protected tail.
    soft: protect::Zone,
    /// The messages it held out of a range, with the rule that did.
    held: std::cell::RefCell<Vec<(String, protect::SoftRule)>>,
    cores: Vec<&'t Core<'a>>,
    turns: Vec<super::turns::TurnGroup>,
}

impl<'t, 'a, 's> Shared<'t, 'a, 's> {
    fn of(msgs: &[M<'t, 'a>], state: &'s State, cfg: &NoaConfig) -> Self {
        let active: Vec<bool> = state.blocks().iter().map(|b| b.active).collect();
        let covered = super::pipeline::covered(state, &active);
        let soft = protect::soft_zone(
            msgs.iter()
                .rev()
                .map(|m| (m.core, m.headed, m.slot, covered.contains(m.id()), m.tokens)),
            cfg,
        );
        let cores: Vec<&'t Core<'a>> = msgs.iter().map(|m| m.core).collect();
        Shared {
            calls: protect::protected_calls(cores.iter().copied(), cfg),
            turns: super::turns::groups(&cores),
            covered,
            soft,
            held: Default::default(),
            cores,
        }
    }
}

type Built = (Block, Archive, Vec<String>, Vec<String>);
type Failed = (Vec<String>, Vec<String>, String);

#[allow(clippy::too_many_arguments)]
fn build(
    ctx: &Ctx<'_, '_, '_>,
    req: &Range,
    r: &Resolved,
    next_block: &mut i64,
    cfg: &NoaConfig,
    shared: &Shared<'_, '_, '_>,
    call: &str,
    place: &Placement<'_>,
) -> Result<Built, Failed> {
    let msgs = &ctx.msgs;
    let working = ctx.state;
    let mut warnings = Vec::new();
    let (mut start, mut end) = (r.start, r.end);
    let mut ids = r.ids.clone();
    let mut nested = r.nested.clone();
    if r.kind == EndKind::Message {
        let (s, e) = widen(start, end, msgs);
        if (s, e) != (start, end) {
            (start, end) = (s, e);
            ids = ctx.ids_in(start, end);
            nested = ctx.nested(start, end);
        }
    }
    let tier = decide_tier(r.kind, &nested, working, cfg);
    let surviving = tier.surviving.clone();
    let fail = |warnings: Vec<String>, msg: String| Err((warnings, surviving.clone(), msg));

    // The ids are borrowed from the range and the blocks it consumes (a consolidation
    // lists thousands), and copied once into the block made.
    let consumed: Vec<&Block> = tier
        .consumed
        .iter()
        .filter_map(|id| working.blocks().iter().find(|b| &b.block_id == id))
        .collect();
    let mut effective: FastSet<&str> = FastSet::with_capacity_and_hasher(
        ids.len()
            + consumed
                .iter()
                .map(|b| b.effective_message_ids.len())
                .sum::<usize>(),
        Default::default(),
    );
    effective.extend(ids.iter().map(String::as_str));
    for b in &consumed {
        effective.extend(b.effective_message_ids.iter().map(String::as_str));
    }
    let mut direct: FastSet<&str> = effective
        .iter()
        .copied()
        .filter(|id| !shared.covered.contains(id))
        .collect();

    // Hard-protected content and the other half of its exchanges.
    let find = |id: &str| ctx.index.get(id).map(|&i| &msgs[i]);
    direct.retain(|id| {
        let keep = !find(id).is_some_and(|m| protect::is_hard_paired(m.core, cfg, &shared.calls));
        if !keep {
            effective.remove(id);
        }
        keep
    });

    // The soft protected tail.
    let soft = &shared.soft;
    let mut hit: Vec<String> = Vec::new();
    direct.retain(|id| {
        let slot = match working.message_refs.by_raw.get(*id) {
            Some(r) => refs::slot_of(r),
            None => Slot::None,
        };
        if slot.is_ref() && soft.contains(&slot) {
            let name = slot.name().map(|n| n.into_owned()).unwrap_or_default();
            if let Some(rule) = soft.rule_of(&slot) {
                shared.held.borrow_mut().push((name.clone(), rule));
            }
            hit.push(name);
            effective.remove(id);
            false
        } else {
            true
        }
    });
    if !hit.is_empty() {
        hit.sort();
        if direct.is_empty() && consumed.is_empty() {
            return fail(
                warnings,
                format!(
                    "Range is entirely within the protected zone (the last {} messages and/or the most recent user message): {}. Adjust startId/endId to older messages.",
                    cfg.protect_recent_messages,
                    hit.join(", ")
                ),
            );
        }
        warnings.push(format!(
            "Excluded {} protected message(s) {} from compression range (recent/last-user zone).",
            hit.len(),
            hit.join(", ")
        ));
    }

    // Turn integrity.
    let mut folded: FastSet<&str> = direct.iter().copied().collect();
    let places = folded.iter().filter_map(|id| ctx.index.get(id).copied());
    let within = places.clone().min().unwrap_or(0)..=places.max().unwrap_or(0);
    let withdrawn = super::turns::withdraw_split(&shared.turns, &shared.cores, &mut folded, within);
    if !withdrawn.is_empty() {
        for id in &withdrawn {
            direct.remove(id);
            effective.remove(id);
        }
        if direct.is_empty() && consumed.is_empty() {
            return fail(
                warnings,
                "Range would split a turn at the protected-zone boundary: a visible tool-call must keep its reasoning run (strict-echo providers reject a rebuilt request that lost it). Shrink the range to end before the turn starts, or wait until the whole turn ages out of the protected zone.".to_string(),
            );
        }
        warnings.push(format!(
            "Withdrew {} message(s) to keep turn(s) intact (a visible tool-call would have lost its reasoning run).",
            withdrawn.len()
        ));
    }

    if r.kind != EndKind::Block && direct.is_empty() && !consumed.is_empty() {
        return fail(
            warnings,
            format!(
                "Range contains no new content — it is already covered by blocks {}..{}. To consolidate them, pass their block ids as startId/endId instead.",
                consumed[0].block_id,
                consumed[consumed.len() - 1].block_id
            ),
        );
    }
    let max_tier = if cfg.max_tier < 2 {
        3
    } else {
        cfg.max_tier as i64
    };
    if tier.target == max_tier && direct.is_empty() {
        return fail(
            warnings,
            format!(
                "Tier {max_tier} is the terminal layer — re-summarizing T{max_tier} blocks into another T{max_tier} block reclaims nothing. Compress a lower tier, or include new uncompressed messages in the range."
            ),
        );
    }
    if let Some(msg) = check_summary(req, cfg, direct.len(), consumed.len()) {
        return fail(warnings, msg);
    }

    let mut compressed: i64 = direct
        .iter()
        .filter_map(|id| find(id))
        .map(|m| m.tokens as i64)
        .sum();
    compressed += consumed
        .iter()
        .map(|b| tokens::count(&b.summary) as i64)
        .sum::<i64>();

    let ref_of = |id: &str| -> Option<u32> {
        working.message_refs.by_raw.get(id).and_then(|r| {
            if r == refs::BLOCKED {
                None
            } else {
                parse_ref(r)
            }
        })
    };
    let by_ref = |set: &FastSet<&str>| {
        // Each id's ref looked up once (a consolidation lists thousands).
        let mut v: Vec<(u32, &str)> = set
            .iter()
            .map(|&id| (ref_of(id).unwrap_or(refs::MAX_REF + 1), id))
            .collect();
        v.sort_unstable();
        v.into_iter()
            .map(|(_, id)| id.to_string())
            .collect::<Vec<String>>()
    };
    let effective_ids = by_ref(&effective);
    let direct_ids = by_ref(&direct);
    let nums: Vec<u32> = effective_ids.iter().filter_map(|id| ref_of(id)).collect();
    let (start_ref, end_ref) = match (nums.iter().min(), nums.iter().max()) {
        (Some(&lo), Some(&hi)) => (format_ref(lo), format_ref(hi)),
        _ => (req.start.clone(), req.end.clone()),
    };

    let n = (*next_block).max(1);
    *next_block = n.saturating_add(1);
    let block_id = format!("b{n}");
    let rel = format!(
        "{}/{}",
        archive::tier_dir(tier.output),
        archive::file_name(&block_id, &start_ref, &end_ref)
    );
    let block = Block {
        block_id: block_id.clone(),
        tier: tier.output,
        topic: req.topic.clone(),
        summary: req.summary.clone(),
        direct_message_ids: direct_ids,
        effective_message_ids: effective_ids,
        direct_block_ids: tier.consumed.clone(),
        archive_path: format!("{}/{rel}", place.root.trim_end_matches('/')),
        archive_rel: rel,
        compressed_tokens: compressed,
        start_ref: start_ref.clone(),
        end_ref: end_ref.clone(),
        created_at: place.now,
        active: true,
        compress_call_id: call.to_string(),
        extra: Default::default(),
    };
    let consumed_by: HashMap<&str, &Block> =
        consumed.iter().map(|&b| (b.block_id.as_str(), b)).collect();
    let mut entries = Vec::new();
    let archived = if place.entries {
        start.min(msgs.len())..(end + 1).min(msgs.len())
    } else {
        0..0
    };
    for m in &msgs[archived] {
        if let Origin::Summary { .. } = m.core.origin {
            let id = m
                .core
                .id
                .trim_start_matches(super::content::SUMMARY_ID_PREFIX);
            if let Some(b) = consumed_by.get(id) {
                entries.push(Entry::Block(BlockEntry {
                    block_id: b.block_id.clone(),
                    tier: b.tier,
                    start_ref: b.start_ref.clone(),
                    end_ref: b.end_ref.clone(),
                    topic: b.topic.clone(),
                    summary: b.summary.clone(),
                    archive_rel: b.archive_rel.clone(),
                    archive_path: b.archive_path.clone(),
                }));
            }
            continue;
        }
        if !direct.contains(m.id()) {
            continue;
        }
        entries.push(Entry::Message(MessageEntry {
            reference: working.message_refs.by_raw.get(m.id()).cloned(),
            role: m.core.role.as_str().to_string(),
            kind: match m.core.kind {
                Kind::Text => MessageKind::Text,
                Kind::Reasoning => MessageKind::Thinking,
                Kind::ToolCall => MessageKind::ToolUse,
                Kind::ToolResult => MessageKind::ToolResult,
            },
            tool: m.core.tool.to_string(),
            // The transcript's own text (an emergency cut applies to what is sent only).
            text: m.core.text.get().into_owned(),
        }));
    }
    let arch = Archive {
        block_id,
        tier: tier.output,
        session: place.session.to_string(),
        created: place.created.clone(),
        start_ref,
        end_ref,
        topic: req.topic.clone(),
        summary: req.summary.clone(),
        original_tokens: compressed,
        entries,
        call: Some(call.to_string()),
        with_body_sha256: true,
    };
    Ok((block, arch, warnings, surviving))
}

fn check_summary(req: &Range, cfg: &NoaConfig, direct: usize, consumed: usize) -> Option<String> {
    let s = req.summary.trim();
    if s.is_empty() {
        return Some(
            "Summary is empty — provide a meaningful summary of the compressed range.".into(),
        );
    }
    let n = tokens::chars(s);
    if n < cfg.min_summary_chars {
        return Some(format!(
            "Summary too short ({n} chars, min {}). A summary this brief cannot stand in for the content it replaces.",
            cfg.min_summary_chars
        ));
    }
    let max = match req.summary_max_chars {
        Some(m) if m > 0 => m as usize,
        _ => cfg.max_summary_chars,
    };
    if n > max {
        return Some(format!(
            "Summary too long ({n} chars, max {max}). Strip noise — keep critical paths, decisions, errors, and code references. Or pass summaryMaxChars to increase the limit — don't lose critical info just to fit."
        ));
    }
    if direct == 0 && consumed == 0 {
        return Some("Range contains no compressible messages — all are already covered by active blocks or protected.".into());
    }
    None
}
