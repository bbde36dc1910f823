//! What a view offers to compress (the runtime's recommendation): runs of compressible
//! messages between live blocks, protected content and the protected tail, merged until each
//! clears the batch minimum.

use super::content::{Kind, Role, Slot};
use super::pipeline::{Facts, Pos, Turn};
use super::{protect, tokens};
use crate::config::NoaConfig;
use crate::fasthash::FastSet;
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
    zone(t, &t.facts(state, cfg), cfg).slots()
}

fn zone(t: &Turn<'_, '_>, facts: &Facts<'_>, cfg: &NoaConfig) -> protect::Zone {
    zone_knowing(t, facts, cfg, None)
}

/// [`zone`], the last user text known (see [`protect::soft_zone_knowing`]).
fn zone_knowing(
    t: &Turn<'_, '_>,
    facts: &Facts<'_>,
    cfg: &NoaConfig,
    user: Option<Option<Slot>>,
) -> protect::Zone {
    // A message without a ref is passed over by the zone: looked at no further (past ref
    // `m99999` that is every newer message, which each request of a replay walks back over).
    protect::soft_zone_knowing(
        t.view()
            .rev()
            .filter(|&(p, _)| t.slot(p).is_ref())
            .map(|(p, c)| (c, t.headed(p), t.slot(p), facts.covered(p, c), t.tokens(p))),
        cfg,
        user,
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
    let mut scan = Scan::default();
    scan.over(t, &facts, &soft, cfg, 0, None);
    scan.recommendation(cfg)
}

/// The scan of a view as far as it went: the runs of compressible messages cut so far and
/// the protected ones.
#[derive(Debug, Clone, Default)]
struct Scan {
    groups: Grouper,
    protected: Vec<ProtectedRange>,
    run: Option<ProtectedRange>,
    gap: bool,
    /// The highest canonical ref met so far.
    highest: u32,
}

/// Where the scan of a view can be taken up again at the next request of a replay: its
/// state before the first message the soft zone took (nothing before it depends on the
/// tail, which is all a grown request changes besides the cuts).
#[derive(Debug, Clone)]
struct Mark {
    /// The view position and its core.
    at: usize,
    core: u32,
    /// The zone's refs up to `highest` (what the scan before the mark met of it).
    below: Vec<u32>,
    /// The scan before it (its lists cut back to these lengths).
    out: usize,
    protected: usize,
    cur: Option<(RangeInfo, usize)>,
    run: Option<ProtectedRange>,
    gap: bool,
    highest: u32,
}

impl Scan {
    /// Scan `t`'s view from position `from`; `mark`, when given, is set at the first message
    /// of the soft zone's recent tail (the last user text before it stays, mostly, from one
    /// request to the next).
    fn over(
        &mut self,
        t: &Turn<'_, '_>,
        facts: &Facts<'_>,
        soft: &protect::Zone,
        cfg: &NoaConfig,
        from: usize,
        mut mark: Option<&mut Option<Mark>>,
    ) {
        for (k, &p) in t.items.iter().enumerate().skip(from) {
            // What noa writes (summaries, the nudge) has no ref.
            let Pos::Core(i) = p else { continue };
            let (c, slot) = (&t.proj[i as usize], &t.slots[i as usize]);
            if !slot.is_ref() {
                continue;
            }
            let (tokens, chars, headed) = t.measures(i);
            if facts.covered(p, c) || c.is_summary() || headed {
                self.gap = true;
                self.protected.extend(self.run.take());
            } else if facts.paired(p, c, cfg) {
                self.gap = true;
                let r = self.run.get_or_insert_with(|| ProtectedRange {
                    start: slot.clone(),
                    end: slot.clone(),
                    count: 0,
                    tokens: 0,
                    tools: Vec::new(),
                });
                r.end = slot.clone();
                r.count += 1;
                r.tokens += tokens;
                if !c.tool.is_empty() && !r.tools.iter().any(|x| x == c.tool) {
                    r.tools.push(c.tool.to_string());
                }
            } else if soft.contains(slot) {
                let tail = !matches!(slot, Slot::Num(n) if *n < soft.tail_least());
                if let Some(m) = mark.take_if(|_| tail) {
                    *m = Some(Mark {
                        at: k,
                        core: i,
                        below: soft.nums_upto(self.highest),
                        out: self.groups.out.len(),
                        protected: self.protected.len(),
                        cur: self.groups.cur.clone(),
                        run: self.run.clone(),
                        gap: self.gap,
                        highest: self.highest,
                    });
                }
                self.gap = true;
                self.protected.extend(self.run.take());
            } else {
                self.protected.extend(self.run.take());
                self.groups.push(Scanned {
                    slot: slot.clone(),
                    tokens,
                    chars,
                    tool: matches!(c.kind, Kind::ToolCall | Kind::ToolResult),
                    user: c.role == Role::User,
                    gap_before: self.gap,
                });
                self.gap = false;
            }
            if let Slot::Num(n) = slot {
                self.highest = self.highest.max(*n);
            }
        }
    }

    /// Back to where `m` was taken.
    fn back_to(&mut self, m: &Mark) {
        self.groups.out.truncate(m.out);
        self.groups.cur.clone_from(&m.cur);
        self.protected.truncate(m.protected);
        self.run.clone_from(&m.run);
        self.gap = m.gap;
        self.highest = m.highest;
    }

    /// The recommendation of the scan so far as if the view ended here.
    fn recommendation(&self, cfg: &NoaConfig) -> Recommendation {
        self.recommendation_from(&mut Merger::default(), 0, cfg)
    }

    /// [`Scan::recommendation`], its ranges coalesced from `merged` (the first `merged.fed`
    /// ranges of the scan's, fed already), which is left with the first `keep` fed.
    fn recommendation_from(
        &self,
        merged: &mut Merger,
        keep: usize,
        cfg: &NoaConfig,
    ) -> Recommendation {
        let out = &self.groups.out;
        let min = cfg.min_range_chars;
        if merged.fed > keep.min(out.len()) {
            *merged = Merger::default();
        }
        for r in &out[merged.fed..keep.min(out.len())] {
            merged.feed(r, min);
        }
        let mut m = merged.clone();
        for r in &out[m.fed..] {
            m.feed(r, min);
        }
        let mut open = Grouper {
            out: Vec::new(),
            cur: self.groups.cur.clone(),
        };
        open.flush();
        for r in &open.out {
            m.feed(r, min);
        }
        let ranges = m.finish();
        let mut protected = self.protected.clone();
        protected.extend(self.run.clone());
        Recommendation {
            ranges: ranges
                .into_iter()
                .filter(|r| r.tokens >= VIABLE_RANGE_MIN_TOKENS)
                .collect(),
            protected,
        }
    }
}

/// The recommendation of each request of a replay, the scan taken up where the one before
/// left off when nothing before that place changed: the same view there (the replay's step
/// 4 carried over: see `pipeline::Growing`), the same cuts, and no message there in the new
/// soft zone. [`Resume::reset`] whenever the view is not the one before and new messages.
#[derive(Debug, Default)]
pub struct Resume {
    scan: Scan,
    mark: Option<Mark>,
    /// The scan's ranges before the mark, coalesced.
    merged: Merger,
    /// The tool results cut when the mark was taken, in order.
    cuts: Vec<u32>,
    /// The last user text of the zone made last, and how many messages its view had.
    user: Option<Option<Slot>>,
    seen: usize,
    /// Scans taken up, and made whole (what a benchmark asks).
    pub resumed: usize,
    pub whole: usize,
}

impl Resume {
    pub fn reset(&mut self) {
        self.mark = None;
        self.user = None;
    }

    /// The recommendation for turn `t` (as [`recommend`] makes it).
    pub fn recommend(
        &mut self,
        t: &Turn<'_, '_>,
        state: &State,
        cfg: &NoaConfig,
    ) -> Recommendation {
        let facts = t.facts(state, cfg);
        // The last user text is the one before while the view only grew by messages none of
        // which is one.
        let user = self.user.take().filter(|_| {
            t.kept.is_some()
                && t.items.get(self.seen..).is_some_and(|new| {
                    !new.iter().any(|&p| {
                        let c = t.core(p);
                        protect::is_zone_user(c, t.headed(p), t.slot(p), facts.covered(p, c))
                    })
                })
        });
        let soft = zone_knowing(t, &facts, cfg, user);
        self.user.clone_from(&soft.user);
        self.seen = t.items.len();
        let mut cuts = t.cuts.clone();
        cuts.sort_unstable();
        let resumed = self.mark.is_some();
        let from = match self.mark.take() {
            Some(m)
                if t.kept.is_some()
                    && soft.all_canonical()
                    && soft.nums_upto(m.highest) == m.below
                    && first_difference(&self.cuts, &cuts).is_none_or(|d| d >= m.core) =>
            {
                self.scan.back_to(&m);
                self.resumed += 1;
                m.at
            }
            _ => {
                self.scan = Scan::default();
                self.whole += 1;
                0
            }
        };
        let mut mark = None;
        self.scan.over(t, &facts, &soft, cfg, from, Some(&mut mark));
        if from == 0 || !resumed {
            // Every range scanned again: none coalesced before is known to be the same.
            self.merged = Merger::default();
        }
        // The ranges before the mark are the next resumed scan's first ones.
        let keep = mark.as_ref().map_or(0, |m: &Mark| m.out);
        self.mark = mark;
        self.cuts = cuts;
        let rec = self.scan.recommendation_from(&mut self.merged, keep, cfg);
        debug_assert_eq!(rec, recommend(t, state, cfg), "a resumed scan differs");
        rec
    }
}

/// The least element in one sorted list and not the other.
fn first_difference(a: &[u32], b: &[u32]) -> Option<u32> {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] != b[j] {
            return Some(a[i].min(b[j]));
        }
        i += 1;
        j += 1;
    }
    a.get(i).or(b.get(j)).copied()
}

fn pct(part: f64, whole: usize) -> i64 {
    tokens::round_half_up(part / whole as f64)
}

/// Cuts the scanned run into ranges at gaps, and at a user message once a range holds
/// three, as the scan goes (a large view's messages are not listed first).
#[derive(Debug, Clone, Default)]
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
}

/// Adjacent ranges coalesced until each clears the minimum, as they come: those coalesced so
/// far, and the open one with its tool messages weighted and its messages.
#[derive(Debug, Clone, Default)]
struct Merger {
    out: Vec<RangeInfo>,
    cur: Option<(RangeInfo, i64, usize)>,
    /// How many ranges were fed.
    fed: usize,
}

impl Merger {
    fn feed(&mut self, r: &RangeInfo, min_chars: usize) {
        self.fed += 1;
        if min_chars == 0 {
            self.out.push(r.clone());
            return;
        }
        match &mut self.cur {
            None => {
                let w = r.tool_pct * r.count as i64;
                self.cur = Some((r.clone(), w, r.count));
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
        if self
            .cur
            .as_ref()
            .is_some_and(|(c, _, _)| c.chars >= min_chars)
        {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if let Some((mut r, weighted, total)) = self.cur.take() {
            if total > 0 {
                r.tool_pct = pct(weighted as f64, total);
                r.text_pct = 100 - r.tool_pct;
            }
            self.out.push(r);
        }
    }

    fn finish(mut self) -> Vec<RangeInfo> {
        self.flush();
        self.out
    }
}
