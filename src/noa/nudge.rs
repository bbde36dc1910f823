//! The nudge (SPEC 4.7): whether a resumed runtime asks the model to compress now, at which
//! tier and over what — decided by the runtime's rules — and normafs's own wording of it.

use std::fmt::Write as _;

use super::content::Slot;
use super::pipeline::Turn;
use super::recommend::{self, ProtectedRange, RangeInfo, Recommendation};
use super::tokens;
use crate::config::NoaConfig;
use crate::format::state::State;

/// Which nudge it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NudgeKind {
    Gentle,
    Emergency,
    Tier2,
    Tier3,
}

impl NudgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NudgeKind::Gentle => "gentle",
            NudgeKind::Emergency => "emergency",
            NudgeKind::Tier2 => "tier2",
            NudgeKind::Tier3 => "tier3",
        }
    }
}

/// An active block as the nudge lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockSpan {
    pub block_id: String,
    pub tier: i64,
    pub start_ref: String,
    pub end_ref: String,
}

/// The decision for one view.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Whether a nudge is injected; the rest describes the situation either way.
    pub inject: bool,
    /// 0 when nothing is injected.
    pub tier: u32,
    pub kind: Option<NudgeKind>,
    pub usage: f64,
    pub pressure: bool,
    pub recommendation: Recommendation,
    /// How many blocks are live, and the last [`LAST_BLOCKS`] of them by where they start.
    pub live_blocks: usize,
    pub last_blocks: Vec<BlockSpan>,
    /// The blocks a tier-2/3 nudge asks to consolidate.
    pub targets: Vec<BlockSpan>,
    pub pending: [u64; 3],
    pub truncated: usize,
    /// Why (for status.json and view.md).
    pub reason: String,
}

/// How many of the live blocks a decision lists (the nudge names the last ones).
pub const LAST_BLOCKS: usize = 8;

/// The growth unit: a share of the window, clamped.
fn adaptive_growth(cfg: &NoaConfig) -> u64 {
    if cfg.window == 0 {
        return cfg.growth_floor;
    }
    let unit = tokens::round_half_up(cfg.window as f64 * cfg.growth_ratio).max(0) as u64;
    unit.max(cfg.growth_floor).min(cfg.growth_cap)
}

/// How much the context must grow before another nudge.
pub fn cadence_gate(cfg: &NoaConfig) -> u64 {
    let adaptive = adaptive_growth(cfg);
    cfg.min_growth_floor
        .max((cfg.min_growth_ratio * adaptive as f64) as u64)
}

fn span(b: &crate::format::state::Block) -> BlockSpan {
    BlockSpan {
        block_id: b.block_id.clone(),
        tier: b.tier,
        start_ref: b.start_ref.clone(),
        end_ref: b.end_ref.clone(),
    }
}

fn pending_summary(p: &[u64; 3]) -> String {
    format!(
        "pending T1 {} / T2 {} / T3 {}",
        tokens::format(p[0]),
        tokens::format(p[1]),
        tokens::format(p[2])
    )
}

/// The pacing a live runtime keeps between its requests (in memory only: the state it
/// writes holds zeros), after a request whose count was `count` and whose decision was `d`:
/// re-anchored when the context fell by a growth unit, the first count kept as the
/// baseline, the count of a shown nudge kept (by tier too).
pub fn stamp(
    nudge: &mut crate::format::state::NudgeState,
    cfg: &NoaConfig,
    count: u64,
    d: &Decision,
) {
    let count = count as i64;
    let unit = adaptive_growth(cfg) as i64;
    let baseline = nudge.last_per_message_nudge_tokens;
    if baseline > 0 && count < baseline - unit {
        nudge.last_per_message_nudge_tokens = count;
        nudge.last_nudge_shown_tokens = 0;
        nudge.last_shown_by_tier.clear();
    }
    if nudge.last_per_message_nudge_tokens == 0 {
        nudge.last_per_message_nudge_tokens = count;
    }
    if d.inject {
        nudge.last_nudge_shown_tokens = count;
        if d.tier != 0 {
            nudge.last_shown_by_tier.insert(d.tier.to_string(), count);
        }
    }
}

/// Whether a nudge is out of the question for a turn's view before anything is measured
/// for it: below pressure, not a first sight, and grown less than the cadence gate since the
/// last nudge. [`decide`] decides the same (`inject` false) after measuring what each tier
/// could reclaim; a replay that wants only what was shown asks this first.
pub fn held_back(t: &Turn<'_, '_>, state: &State, cfg: &NoaConfig) -> bool {
    let count = t.count;
    let usage = if cfg.window > 0 {
        count as f64 / cfg.window as f64
    } else {
        0.0
    };
    if usage >= cfg.pressure_ratio || usage >= cfg.truncate_ratio {
        return false;
    }
    let nudge = &state.nudge;
    let baseline = nudge.last_per_message_nudge_tokens;
    // A first sight needs what the tiers could reclaim: not decided here.
    if nudge.last_nudge_shown_tokens == 0 && baseline == 0 && usage >= cfg.floor_ratio {
        return false;
    }
    let mut reference = nudge.last_nudge_shown_tokens;
    if reference == 0 {
        reference = if baseline > 0 { baseline } else { count as i64 };
    }
    (count as i64 - reference) < cadence_gate(cfg) as i64
}

/// The decision of a view [`held_back`] holds back, without the measures that explain it.
pub fn not_shown(t: &Turn<'_, '_>, cfg: &NoaConfig) -> Decision {
    let usage = if cfg.window > 0 {
        t.count as f64 / cfg.window as f64
    } else {
        0.0
    };
    Decision {
        inject: false,
        tier: 0,
        kind: None,
        usage,
        pressure: false,
        recommendation: Recommendation::default(),
        live_blocks: 0,
        last_blocks: Vec::new(),
        targets: Vec::new(),
        pending: [0; 3],
        truncated: t.truncated,
        reason: "below cadence".to_string(),
    }
}

/// Decide the nudge for a turn's view.
pub fn decide(t: &Turn<'_, '_>, state: &State, cfg: &NoaConfig) -> Decision {
    decide_with(t, state, cfg, recommend::recommend(t, state, cfg), true)
}

/// [`decide`] with the view's recommendation made already.
pub fn decide_with(
    t: &Turn<'_, '_>,
    state: &State,
    cfg: &NoaConfig,
    rec: Recommendation,
    explain: bool,
) -> Decision {
    // The reason is written only when asked for (a replay decides thousands of nudges).
    let why = |f: &dyn Fn() -> String| if explain { f() } else { String::new() };
    let count = t.count;
    let usage = if cfg.window > 0 {
        count as f64 / cfg.window as f64
    } else {
        0.0
    };
    let adaptive = adaptive_growth(cfg);
    let gate = cadence_gate(cfg);
    let min_benefit = cfg.min_benefit();
    let over = usage >= cfg.pressure_ratio;
    let emergency = usage >= cfg.truncate_ratio;
    let pressure = over || emergency;

    let nudge = &state.nudge;
    let baseline = nudge.last_per_message_nudge_tokens;
    let mut reference = nudge.last_nudge_shown_tokens;
    if reference == 0 {
        reference = if baseline > 0 { baseline } else { count as i64 };
    }
    let growth = count as i64 - reference;

    // Pending per tier: tier 1 the compressible content of ranges clearing the minimum,
    // tiers 2 and 3 the summaries of the live blocks one tier below.
    let t1: u64 = rec
        .ranges
        .iter()
        .filter(|r| r.chars >= cfg.min_range_chars)
        .map(|r| r.tokens)
        .sum();
    // Blocks by index: a view of a long session has many, and few of them are named.
    let mut lower: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    let mut pending = [t1, 0, 0];
    let blocks = state.blocks();
    let mut live = Vec::new();
    // Measured once per blocks in a replay's grown requests.
    let kept = t.kept.as_ref().map(|k| &k.blocks[..]).unwrap_or(&[]);
    for (i, b) in blocks.iter().enumerate() {
        if !t.active.get(i).copied().unwrap_or(false) {
            continue;
        }
        let m = kept
            .get(i)
            .copied()
            .unwrap_or_else(|| super::pipeline::BlockMeasure::of(b));
        live.push((m.start, i));
        if b.tier == 1 || b.tier == 2 {
            let k = b.tier as usize;
            pending[k] += m.summary_tokens;
            lower[k - 1].push(i);
        }
    }
    live.sort_by_key(|&(start, _)| start);
    let last_blocks = live[live.len().saturating_sub(LAST_BLOCKS)..]
        .iter()
        .map(|&(_, i)| span(&blocks[i]))
        .collect();
    let counts = [0, lower[0].len(), lower[1].len()];

    let mut d = Decision {
        inject: false,
        tier: 0,
        kind: None,
        usage,
        pressure,
        recommendation: rec,
        live_blocks: live.len(),
        last_blocks,
        targets: Vec::new(),
        pending,
        truncated: t.truncated,
        reason: String::new(),
    };
    let choose = |d: &mut Decision, tier: u32, reason: String| {
        d.inject = true;
        d.tier = tier;
        if tier >= 2 {
            d.targets = lower[tier as usize - 2]
                .iter()
                .map(|&i| span(&blocks[i]))
                .collect();
        }
        d.kind = Some(match tier {
            2 => NudgeKind::Tier2,
            3 => NudgeKind::Tier3,
            _ if pressure => NudgeKind::Emergency,
            _ => NudgeKind::Gentle,
        });
        d.reason = reason;
    };

    if pressure {
        let (mut best, mut best_pending) = (0usize, -1i64);
        for (i, &p) in pending.iter().enumerate() {
            if p as i64 > best_pending {
                best = i;
                best_pending = p as i64;
            }
        }
        if (best_pending as u64) < min_benefit {
            d.reason = why(&|| {
                format!(
                "pressure at {:.0}% but the best tier reclaims only {} (< {} minimum benefit); {}",
                usage * 100.0,
                best_pending.max(0),
                min_benefit,
                pending_summary(&pending)
            )
            });
        } else {
            let reason = why(&|| {
                format!(
                    "pressure at {:.0}%: tier {} reclaims {}; {}",
                    usage * 100.0,
                    best + 1,
                    best_pending,
                    pending_summary(&pending)
                )
            });
            choose(&mut d, best as u32 + 1, reason);
        }
        return d;
    }

    let first_sight = nudge.last_nudge_shown_tokens == 0
        && baseline == 0
        && usage >= cfg.floor_ratio
        && pending.iter().copied().max().unwrap_or(0) >= adaptive;
    if !first_sight && growth < gate as i64 {
        d.reason = why(&|| {
            format!(
                "below cadence: grew {growth} of {gate} since the last nudge; {}",
                pending_summary(&pending)
            )
        });
        return d;
    }
    let tier2_threshold =
        tokens::round_half_up(adaptive as f64 * cfg.tier2_growth_multiplier).max(0) as u64;
    let t2_count_ready = counts[1] >= cfg.tier2_min_blocks && usage >= cfg.floor_ratio;
    let t3_count_ready = counts[2] >= cfg.tier3_min_blocks && usage >= cfg.floor_ratio;
    let cadence_ready = |tier: u32| {
        let last = nudge
            .last_shown_by_tier
            .get(&tier.to_string())
            .copied()
            .unwrap_or(0);
        last == 0 || count as i64 - last >= gate as i64
    };
    if pending[0] >= adaptive {
        let reason = why(&|| {
            format!(
                "growth: tier 1 has {} pending (>= {adaptive}); {}",
                pending[0],
                pending_summary(&pending)
            )
        });
        choose(&mut d, 1, reason);
        return d;
    }
    if t2_count_ready || (pending[1] >= tier2_threshold && pending[1] > pending[0]) {
        if cadence_ready(2) {
            let reason = why(&|| {
                format!(
                    "growth: tier 2 ready ({} block(s), {} pending); {}",
                    counts[1],
                    pending[1],
                    pending_summary(&pending)
                )
            });
            choose(&mut d, 2, reason);
        } else {
            d.reason = why(&|| {
                format!(
                    "tier 2 held back by its cadence; {}",
                    pending_summary(&pending)
                )
            });
        }
        return d;
    }
    if t3_count_ready
        || (pending[2] >= tier2_threshold && pending[2] > pending[1] && pending[2] > pending[0])
    {
        if cadence_ready(3) {
            let reason = why(&|| {
                format!(
                    "growth: tier 3 ready ({} block(s), {} pending); {}",
                    counts[2],
                    pending[2],
                    pending_summary(&pending)
                )
            });
            choose(&mut d, 3, reason);
        } else {
            d.reason = why(&|| {
                format!(
                    "tier 3 held back by its cadence; {}",
                    pending_summary(&pending)
                )
            });
        }
        return d;
    }
    d.reason = why(&|| {
        format!(
            "growth ready but no tier qualifies; {}",
            pending_summary(&pending)
        )
    });
    d
}

fn push_slot(s: &mut String, slot: &Slot) {
    match slot {
        Slot::Num(n) => s.push_str(super::refs::ref_name_in(*n, &mut [0; 6])),
        other => {
            if let Some(n) = other.name() {
                s.push_str(&n);
            }
        }
    }
}

/// A range's line (written in place: a nudge of a long session lists many).
fn push_range_line(s: &mut String, r: &RangeInfo) {
    s.push_str("- ");
    push_slot(s, &r.start);
    s.push_str("..");
    push_slot(s, &r.end);
    s.push_str(": ");
    push_int(s, r.count as i64);
    s.push_str(" messages, ~");
    tokens::push_format(s, r.tokens);
    s.push_str(" tokens (");
    push_int(s, r.tool_pct);
    s.push_str("% tool output");
    match r.user_msgs {
        0 => {}
        1 => s.push_str(", 1 user message"),
        n => {
            let _ = write!(s, ", {n} user messages");
        }
    }
    s.push_str(")\n");
}

/// A number, written without the formatting machinery (a nudge writes several per range).
fn push_int(s: &mut String, n: i64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    let mut m = n.unsigned_abs();
    loop {
        at -= 1;
        buf[at] = b'0' + (m % 10) as u8;
        m /= 10;
        if m == 0 {
            break;
        }
    }
    if n < 0 {
        s.push('-');
    }
    s.push_str(std::str::from_utf8(&buf[at..]).unwrap_or("0"));
}

fn push_protected_line(s: &mut String, r: &ProtectedRange) {
    s.push_str("- ");
    push_slot(s, &r.start);
    s.push_str("..");
    push_slot(s, &r.end);
    let _ = write!(s, ": {} messages of ", r.count);
    for (k, tool) in r.tools.iter().enumerate() {
        if k > 0 {
            s.push_str(", ");
        }
        s.push_str(tool);
    }
    s.push_str(" — protected, leave them out\n");
}

/// normafs's wording of a nudge (the runtime's prose is its own; SPEC 4.4).
pub fn render(d: &Decision) -> String {
    render_with(d, None)
}

/// The range lines of the nudge rendered last: the lines of the ranges a nudge lists first
/// that the last one listed first too are copied from it (a replay's consecutive nudges
/// list mostly the same ranges, and a long view lists many; those that change are the
/// recent ones, listed last).
#[derive(Debug, Default)]
pub struct RangeLines {
    ranges: Vec<RangeInfo>,
    text: String,
    /// Where each range's line ends in `text`.
    ends: Vec<usize>,
    /// What `text` counts up to the end of each line (a nudge's measure without a pass over
    /// the lines it kept).
    tallies: Vec<crate::noa::tokens::Tally>,
}

impl RangeLines {
    /// Writes the lines of `ranges` into `s`.
    fn write(&mut self, s: &mut String, ranges: &[RangeInfo]) {
        let same = self
            .ranges
            .iter()
            .zip(ranges)
            .take_while(|(a, b)| a == b)
            .count();
        self.text
            .truncate(same.checked_sub(1).map_or(0, |k| self.ends[k]));
        self.ends.truncate(same);
        self.ranges.truncate(same);
        self.tallies.truncate(same);
        for r in &ranges[same..] {
            let start = self.text.len();
            push_range_line(&mut self.text, r);
            let mut tally = self.tallies.last().copied().unwrap_or_default();
            tally.add_str(&self.text[start..]);
            self.ends.push(self.text.len());
            self.ranges.push(r.clone());
            self.tallies.push(tally);
        }
        s.push_str(&self.text);
    }

    /// What the lines last written count.
    fn tally(&self) -> crate::noa::tokens::Tally {
        self.tallies.last().copied().unwrap_or_default()
    }
}

/// [`render_with`] and what its text counts (`count_and_chars`), the range lines kept in
/// `lines` counted once, when they were written.
pub fn render_measured(d: &Decision, lines: &mut RangeLines) -> (String, (u64, usize)) {
    let mut kept = None;
    let s = render_into(d, Some(lines), &mut kept);
    let mut tally = crate::noa::tokens::Tally::default();
    match kept {
        Some((from, to)) => {
            tally.add_str(&s[..from]);
            tally.merge(lines.tally());
            tally.add_str(&s[to..]);
        }
        None => tally.add_str(&s),
    }
    (s, (tally.tokens(), tally.chars()))
}

/// [`render`], reusing and keeping the range lines in `lines` when given.
pub fn render_with(d: &Decision, lines: Option<&mut RangeLines>) -> String {
    render_into(d, lines, &mut None)
}

/// [`render_with`], saying where in the text the kept range lines went (`kept`).
fn render_into(
    d: &Decision,
    lines: Option<&mut RangeLines>,
    kept: &mut Option<(usize, usize)>,
) -> String {
    // Room for the fixed text and a line per range (grown once at most).
    let mut s = String::with_capacity(1024 + 64 * d.recommendation.ranges.len());
    let usage = format!("{:.0}%", d.usage * 100.0);
    match d.kind {
        Some(NudgeKind::Emergency) => {
            let _ = writeln!(
                s,
                "[noa] The context is at {usage} of its window: compress now, oldest consumed \
                 tool output first."
            );
        }
        Some(NudgeKind::Tier2) | Some(NudgeKind::Tier3) => {
            let _ = writeln!(
                s,
                "[noa] The context is at {usage} of its window and tier-{} summaries have piled \
                 up: fold them into one tier-{} summary, using block ids as startId and endId.",
                d.tier - 1,
                d.tier
            );
        }
        _ => {
            let _ = writeln!(
                s,
                "[noa] The context is at {usage} of its window. If the current step no longer \
                 needs some of the ranges below, compress them in one call; otherwise carry on."
            );
        }
    }
    if d.truncated > 0 {
        let _ = writeln!(
            s,
            "{} tool result(s) were cut for this request only; the stored history is whole. \
             Do not run those tools again — compress instead.",
            d.truncated
        );
    }
    if !d.targets.is_empty() {
        s.push_str("\nBlocks to fold:\n");
        for b in &d.targets {
            let _ = writeln!(
                s,
                "- {} (tier {}): {}..{}",
                b.block_id, b.tier, b.start_ref, b.end_ref
            );
        }
    } else {
        let rec = &d.recommendation;
        if rec.ranges.is_empty() && rec.protected.is_empty() {
            s.push_str("\nNo range stands out: compress whatever the task no longer needs.\n");
        } else {
            s.push_str("\nCompressible, oldest first:\n");
            match lines {
                Some(lines) => {
                    let from = s.len();
                    lines.write(&mut s, &rec.ranges);
                    *kept = Some((from, s.len()));
                }
                None => {
                    for r in &rec.ranges {
                        push_range_line(&mut s, r);
                    }
                }
            }
            for r in &rec.protected {
                push_protected_line(&mut s, r);
            }
        }
    }
    if d.live_blocks > 0 {
        let _ = write!(s, "\nLive blocks ({}): ", d.live_blocks);
        for (k, b) in d.last_blocks.iter().enumerate() {
            if k > 0 {
                s.push_str(", ");
            }
            let _ = write!(
                s,
                "{}(T{})={}..{}",
                b.block_id, b.tier, b.start_ref, b.end_ref
            );
        }
        s.push('\n');
    }
    s.push_str(
        "\nCall Compress with {\"content\":[{\"startId\":\"m00012\",\"endId\":\"m00045\",\
         \"topic\":\"a few words\",\"summary\":\"what a later step must still know: paths, \
         decisions, exact errors, open questions\"}]}. Endpoints are refs from the <noa-ref> \
         tags or block ids; ranges in one call must not overlap; the most recent messages and \
         the last user message cannot be compressed.",
    );
    s
}
