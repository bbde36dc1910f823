//! Step 6 of the pipeline: at or above the truncation threshold, the largest tool results
//! outside the recent tail are cut to their first and last characters around a marker.

use super::*;
use crate::noa::edit::cut_of;

/// The truncation threshold in tokens: `truncate_ratio × window`, truncated.
pub fn truncate_threshold(cfg: &NoaConfig) -> u64 {
    let t = cfg.truncate_ratio * cfg.window as f64;
    if t.is_finite() && t > 0.0 {
        t as u64
    } else {
        0
    }
}

/// The tool results a replay's truncation may cut, kept from one request to the next while
/// its view only grows at the end (see `Growing`): those before the recent tail, largest
/// first, then in view order (as [`cut_results`] orders them).
#[derive(Debug, Default)]
pub struct Candidates {
    list: Vec<(u32, u64)>,
    /// How many of the view's items were looked through.
    seen: usize,
}

impl Candidates {
    /// The view is not the one before and new messages: look through all of it again.
    pub fn reset(&mut self) {
        self.list.clear();
        self.seen = 0;
    }
}

/// Step 6: at or above the threshold, cut the largest tool results outside the recent tail
/// until the count is at most 90% of it. `kept`: the candidates found for the request before,
/// when its view is this one's beginning.
pub(super) fn cut_results(t: &mut Turn<'_, '_>, cfg: &NoaConfig, kept: Option<&mut Candidates>) {
    let threshold = truncate_threshold(cfg);
    if cfg.window == 0 || threshold == 0 || t.count < threshold {
        return;
    }
    let target = (threshold as f64 * 0.9) as u64;
    let cutoff = t.items.len().saturating_sub(cfg.protect_recent_messages);
    let mut own = Candidates::default();
    let found = match kept {
        Some(k) if k.seen <= cutoff => k,
        Some(k) => {
            k.reset();
            k
        }
        None => &mut own,
    };
    let more = t.items[found.seen..cutoff]
        .iter()
        .filter_map(|&p| candidate(t, p));
    if found.seen == 0 {
        found.list = more.collect();
        found.list.sort_by_key(|c| std::cmp::Reverse(c.1));
    } else {
        for c in more {
            // After every one found before: among equals, last.
            let at = found.list.partition_point(|&(_, n)| n >= c.1);
            found.list.insert(at, c);
        }
    }
    found.seen = cutoff;
    debug_assert_eq!(
        found.list,
        {
            let mut all: Vec<(u32, u64)> = t.items[..cutoff]
                .iter()
                .filter_map(|&p| candidate(t, p))
                .collect();
            all.sort_by_key(|c| std::cmp::Reverse(c.1));
            all
        },
        "kept truncation candidates differ"
    );
    // Signed, as the runtime counts: a cut that costs more than it saves lowers the savings.
    let mut saved = 0i64;
    for &(i, n) in &found.list {
        if t.count as i64 - saved <= target as i64 {
            break;
        }
        // A cut is made of the core's own text (a tool result has no other edit).
        if t.edit(i).is_some() {
            continue;
        }
        let core = &t.proj[i as usize];
        // Cut once per message while the projection's memo lasts.
        let edit = match &core.cut {
            Some(cell) => cell.get_or_init(|| cut_of(&core.text, n)).clone(),
            None => cut_of(&core.text, n),
        };
        let Some(edit) = edit else {
            continue;
        };
        saved += n as i64 - edit.tokens as i64;
        t.cut_tokens += core.tokens().saturating_sub(edit.tokens);
        t.cuts.push(i);
        t.edits.insert(i, edit, t.proj.len());
        t.truncated += 1;
    }
    t.saved = saved;
}

/// A tool result the truncation may cut: its core and tokens.
fn candidate(t: &Turn<'_, '_>, p: Pos) -> Option<(u32, u64)> {
    let Pos::Core(i) = p else { return None };
    let c = t.core(p);
    if c.kind != Kind::ToolResult {
        return None;
    }
    // An edited text is not the core's own: look at it again (an unedited one is not read:
    // it may be on disk).
    let marked = t.edit(i).map_or(c.marked, Edit::marked);
    if t.chars(p) == 0 || marked {
        return None;
    }
    let n = t.tokens(p);
    (n >= TRUNCATE_MIN_TOKENS).then_some((i, n))
}
