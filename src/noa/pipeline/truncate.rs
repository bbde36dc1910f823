//! Step 6 of the pipeline: at or above the truncation threshold, the largest tool results
//! outside the recent tail are cut to their first and last characters around a marker.

use super::*;

/// The marker a cut tool result carries (detected by substring).
pub const TRUNCATION_MARKER: &str = "[truncated for context space";
pub const TRUNCATE_MIN_TOKENS: u64 = 1000;
const TRUNCATE_KEEP_CHARS: usize = 2000;

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

/// A tool result of `n` tokens cut to its first and last [`TRUNCATE_KEEP_CHARS`] characters
/// around the marker; `None` when it is not longer than both.
fn cut(text: &str, n: u64) -> Option<Edit> {
    let (head, tail, mut tally) = head_and_tail(text, TRUNCATE_KEEP_CHARS)?;
    let mut marker = String::with_capacity(80);
    push_marker(&mut marker, n);
    tally.add_str(&marker);
    Some(Edit {
        body: Body::Cut {
            head: head.len(),
            tail: text.len() - tail.len(),
            n,
        },
        tokens: tally.tokens(),
        chars: tally.chars(),
    })
}

/// The first and last `keep` characters of a text longer than `2 * keep` characters, with
/// their tally (taken on the way: these texts are cut again at every view).
fn head_and_tail(text: &str, keep: usize) -> Option<(&str, &str, tokens::Tally)> {
    if text.len() <= 2 * keep || keep == 0 {
        return None; // no more characters than bytes
    }
    let mut tally = tokens::Tally::default();
    let mut head_end = None;
    for (k, (at, c)) in text.char_indices().enumerate() {
        if k == keep {
            head_end = Some(at);
            break;
        }
        tally.add(c);
    }
    let mut tail_start = None;
    for (at, c) in text.char_indices().rev().take(keep) {
        tally.add(c);
        tail_start = Some(at);
    }
    let (head_end, tail_start) = (head_end?, tail_start?);
    (head_end < tail_start).then(|| (&text[..head_end], &text[tail_start..], tally))
}

#[cfg(test)]
mod tests {
    use super::{cut, head_and_tail, TRUNCATE_KEEP_CHARS};
    use crate::noa::tokens;

    fn ends(text: &str, keep: usize) -> Option<(&str, &str)> {
        head_and_tail(text, keep).map(|(h, t, _)| (h, t))
    }

    #[test]
    fn head_and_tail_count_characters_not_bytes() {
        assert_eq!(ends("abcd", 2), None);
        assert_eq!(ends("abcde", 2), Some(("ab", "de")));
        assert_eq!(ends("日本語ab", 2), Some(("日本", "ab")));
        assert_eq!(ends("日本語a", 2), None);
        assert_eq!(ends("é😀xyé", 2), Some(("é😀", "yé")));
    }

    #[test]
    fn a_cut_is_measured_as_its_text_is() {
        let long = |unit: &str| unit.repeat(2 * TRUNCATE_KEEP_CHARS / unit.chars().count() + 7);
        for text in [long("abc "), long("한국어 "), long("x😀日")] {
            let edit = cut(&text, 1234).expect("long enough to cut");
            let made = edit.text(&text);
            assert!(made.contains("original ~1234 tokens"));
            assert_eq!((edit.tokens, edit.chars), tokens::count_and_chars(&made));
            let (head, tail) = ends(&text, TRUNCATE_KEEP_CHARS).expect("cut");
            assert!(made.starts_with(head) && made.ends_with(tail));
            assert_eq!(edit.lead(&text), head);
        }
        assert!(cut(&"a".repeat(2 * TRUNCATE_KEEP_CHARS), 9).is_none());
    }
}
