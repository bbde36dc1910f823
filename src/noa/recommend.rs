//! What a view offers to compress (the runtime's recommendation): runs of compressible
//! messages between live blocks, protected content and the protected tail, merged until each
//! clears the batch minimum.

use super::content::{Kind, Role, Slot};
use super::fasthash::FastSet;
use super::pipeline::{Facts, Pos, Turn};
use super::{protect, tokens};
use crate::config::NoaConfig;
use crate::format::state::State;

/// Ranges smaller than this are not offered (a fragment would fail the batch's size gate).
pub const VIABLE_RANGE_MIN_TOKENS: u64 = 200;

/// A compressible span.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeInfo {
    pub start: Slot,
    pub end: Slot,
    pub count: usize,
    pub tokens: u64,
    pub chars: usize,
    pub tool_pct: i64,
    pub text_pct: i64,
    pub user_msgs: usize,
}

/// A span of hard-protected content.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtectedRange {
    pub start: Slot,
    pub end: Slot,
    pub count: usize,
    pub tokens: u64,
    pub tools: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recommendation {
    pub ranges: Vec<RangeInfo>,
    pub protected: Vec<ProtectedRange>,
}

/// The soft protected zone of a turn's view.
pub fn soft_zone(t: &Turn<'_, '_>, state: &State, cfg: &NoaConfig) -> FastSet<Slot> {
    zone(t, &t.facts(state, cfg), cfg).slots
}

fn zone(t: &Turn<'_, '_>, facts: &Facts<'_>, cfg: &NoaConfig) -> protect::Zone {
    protect::soft_zone(
        t.view()
            .rev()
            .map(|(p, c)| (c, t.headed(p), t.slot(p), facts.covered(p, c), t.tokens(p))),
        cfg,
    )
}

/// A compressible message as the scan meets it.
struct Scanned {
    slot: Slot,
    tokens: u64,
    chars: usize,
    tool: bool,
    user: bool,
    gap_before: bool,
}

pub fn recommend(t: &Turn<'_, '_>, state: &State, cfg: &NoaConfig) -> Recommendation {
    let facts = t.facts(state, cfg);
    let soft = zone(t, &facts, cfg);
    let mut groups = Grouper::default();
    let mut protected = Vec::new();
    let mut run: Option<ProtectedRange> = None;
    let mut gap = false;
    for &p in &t.items {
        // What noa writes (summaries, the nudge) has no ref.
        let Pos::Core(i) = p else { continue };
        let (c, slot) = (&t.proj[i as usize], &t.slots[i as usize]);
        if !slot.is_ref() {
            continue;
        }
        let (tokens, chars, headed) = t.measures(i);
        if facts.covered(p, c) || c.is_summary() || headed {
            gap = true;
            protected.extend(run.take());
        } else if facts.paired(p, c, cfg) {
            gap = true;
            let n = tokens;
            let r = run.get_or_insert_with(|| ProtectedRange {
                start: slot.clone(),
                end: slot.clone(),
                count: 0,
                tokens: 0,
                tools: Vec::new(),
            });
            r.end = slot.clone();
            r.count += 1;
            r.tokens += n;
            if !c.tool.is_empty() && !r.tools.iter().any(|x| x == c.tool) {
                r.tools.push(c.tool.to_string());
            }
        } else if soft.contains(slot) {
            gap = true;
            protected.extend(run.take());
        } else {
            protected.extend(run.take());
            groups.push(Scanned {
                slot: slot.clone(),
                tokens,
                chars,
                tool: matches!(c.kind, Kind::ToolCall | Kind::ToolResult),
                user: c.role == Role::User,
                gap_before: gap,
            });
            gap = false;
        }
    }
    protected.extend(run.take());
    let ranges = merge_to_threshold(groups.finish(), cfg.min_range_chars);
    Recommendation {
        ranges: ranges
            .into_iter()
            .filter(|r| r.tokens >= VIABLE_RANGE_MIN_TOKENS)
            .collect(),
        protected,
    }
}

fn pct(part: f64, whole: usize) -> i64 {
    tokens::round_half_up(part / whole as f64)
}

/// Cuts the scanned run into ranges at gaps, and at a user message once a range holds
/// three, as the scan goes (a large view's messages are not listed first).
#[derive(Default)]
struct Grouper {
    out: Vec<RangeInfo>,
    /// The open range and its tool messages.
    cur: Option<(RangeInfo, usize)>,
}

impl Grouper {
    fn flush(&mut self) {
        if let Some((mut r, tools)) = self.cur.take() {
            if r.count > 0 {
                r.tool_pct = pct(tools as f64 * 100.0, r.count);
                r.text_pct = 100 - r.tool_pct;
            }
            self.out.push(r);
        }
    }

    fn push(&mut self, it: Scanned) {
        if let Some((r, _)) = &self.cur {
            if it.gap_before || (it.user && r.count >= 3) {
                self.flush();
            }
        }
        let (r, tools) = self.cur.get_or_insert_with(|| {
            (
                RangeInfo {
                    start: it.slot.clone(),
                    end: it.slot.clone(),
                    count: 0,
                    tokens: 0,
                    chars: 0,
                    tool_pct: 0,
                    text_pct: 0,
                    user_msgs: 0,
                },
                0,
            )
        });
        r.end = it.slot;
        r.count += 1;
        r.tokens += it.tokens;
        r.chars += it.chars;
        *tools += usize::from(it.tool);
        r.user_msgs += usize::from(it.user);
    }

    fn finish(mut self) -> Vec<RangeInfo> {
        self.flush();
        self.out
    }
}

/// Coalesce adjacent ranges until each clears `min_chars`.
fn merge_to_threshold(ranges: Vec<RangeInfo>, min_chars: usize) -> Vec<RangeInfo> {
    if min_chars == 0 || ranges.is_empty() {
        return ranges;
    }
    let mut out = Vec::new();
    let mut cur: Option<(RangeInfo, i64, usize)> = None;
    let flush = |cur: &mut Option<(RangeInfo, i64, usize)>, out: &mut Vec<RangeInfo>| {
        if let Some((mut r, weighted, total)) = cur.take() {
            if total > 0 {
                r.tool_pct = pct(weighted as f64, total);
                r.text_pct = 100 - r.tool_pct;
            }
            out.push(r);
        }
    };
    for r in ranges {
        match &mut cur {
            None => {
                let w = r.tool_pct * r.count as i64;
                let n = r.count;
                cur = Some((r, w, n));
            }
            Some((c, w, n)) => {
                c.end = r.end.clone();
                c.count += r.count;
                c.tokens += r.tokens;
                c.chars += r.chars;
                c.user_msgs += r.user_msgs;
                *w += r.tool_pct * r.count as i64;
                *n += r.count;
            }
        }
        if cur.as_ref().is_some_and(|(c, _, _)| c.chars >= min_chars) {
            flush(&mut cur, &mut out);
        }
    }
    flush(&mut cur, &mut out);
    out
}
