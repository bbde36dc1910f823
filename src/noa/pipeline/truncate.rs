//! Step 6 of the pipeline: at or above the truncation threshold, the largest tool results
//! outside the recent tail are cut to their first and last characters around a marker.

use super::*;
use crate::noa::edit::cut;

/// The truncation threshold in tokens: `truncate_ratio × window`, truncated.
pub fn truncate_threshold(cfg: &NoaConfig) -> u64 {
    let t = cfg.truncate_ratio * cfg.window as f64;
    if t.is_finite() && t > 0.0 {
        t as u64
    } else {
        0
    }
}

/// Step 6: at or above the threshold, cut the largest tool results outside the recent tail
/// until the count is at most 90% of it.
pub(super) fn cut_results(t: &mut Turn<'_, '_>, cfg: &NoaConfig) {
    let threshold = truncate_threshold(cfg);
    if cfg.window == 0 || threshold == 0 || t.count < threshold {
        return;
    }
    let target = (threshold as f64 * 0.9) as u64;
    let cutoff = t.items.len().saturating_sub(cfg.protect_recent_messages);
    let mut candidates: Vec<(u32, u64)> = Vec::new();
    for &p in &t.items[..cutoff] {
        let Pos::Core(i) = p else { continue };
        let c = t.core(p);
        let text = t.text(p);
        // An edited text is not the core's own: look at it again.
        let marked = match t.edit(i) {
            Some(_) => crate::noa::content::is_marked(c.kind, &text),
            None => c.marked,
        };
        if c.kind != Kind::ToolResult || text.is_empty() || marked {
            continue;
        }
        let n = t.tokens(p);
        if n >= TRUNCATE_MIN_TOKENS {
            candidates.push((i, n));
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.1));
    // Signed, as the runtime counts: a cut that costs more than it saves lowers the savings.
    let mut saved = 0i64;
    for (i, n) in candidates {
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
            Some(cell) => cell.get_or_init(|| cut(&core.text, n)).clone(),
            None => cut(&core.text, n),
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
