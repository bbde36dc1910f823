//! A message's rewritten body in a view: a Compress call's stubbed arguments, or a tool result
//! cut to its first and last characters around the truncation marker (SPEC 4.4 step 6). The
//! pipeline decides which results are cut; the projection (`content.rs`) keeps each message's
//! edit once made.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

use super::content::Text;
use super::tokens;

/// The marker a cut tool result carries (detected by substring).
pub const TRUNCATION_MARKER: &str = "[truncated for context space";
/// The smallest tool result (in tokens) a view may cut.
pub const TRUNCATE_MIN_TOKENS: u64 = 1000;
/// How many characters of a cut result are kept at each end.
const TRUNCATE_KEEP_CHARS: usize = 2000;

/// A rewritten body: a Compress call's stubbed arguments, or a cut tool result.
#[derive(Debug, Clone)]
pub struct Edit {
    body: Body,
    /// The text's measures, taken once: a turn asks for them many times.
    pub(super) tokens: u64,
    pub(super) chars: usize,
}

#[derive(Debug, Clone)]
enum Body {
    /// A text of its own.
    Text(Arc<str>),
    /// The message's own text kept up to byte `head` and from byte `tail`, the truncation
    /// marker for its `n` tokens between: only where to cut is kept (a view of a large
    /// session holds thousands of cuts, each as long as two texts of
    /// [`TRUNCATE_KEEP_CHARS`]), the text is made when a line is written.
    Cut { head: usize, tail: usize, n: u64 },
}

impl Edit {
    pub fn new(text: String) -> Edit {
        let (tokens, chars) = tokens::count_and_chars(&text);
        Edit {
            body: Body::Text(Arc::from(text)),
            tokens,
            chars,
        }
    }

    /// A cut tool result.
    pub fn truncated(&self) -> bool {
        matches!(self.body, Body::Cut { .. })
    }

    /// The text this edit gives a message whose own text is `own`.
    pub fn text<'t>(&'t self, own: &'t str) -> Cow<'t, str> {
        match &self.body {
            Body::Text(t) => Cow::Borrowed(t),
            &Body::Cut { head, tail, n } => {
                let (head, tail) = (own.get(..head).unwrap_or(""), own.get(tail..).unwrap_or(""));
                let mut text = String::with_capacity(head.len() + tail.len() + 80);
                text.push_str(head);
                push_marker(&mut text, n);
                text.push_str(tail);
                Cow::Owned(text)
            }
        }
    }

    /// The beginning of [`Edit::text`] without making it: all of it, or a cut's head (at
    /// least [`TRUNCATE_KEEP_CHARS`] characters, enough to tell a summary's header).
    pub fn lead<'t>(&'t self, own: &'t str) -> &'t str {
        match &self.body {
            Body::Text(t) => t,
            &Body::Cut { head, .. } => own.get(..head).unwrap_or(""),
        }
    }

    /// [`Edit::text`] for a message's own text as a projection holds it: read only when the
    /// edit keeps part of it.
    pub fn text_of<'t>(&'t self, own: &'t Text<'_>) -> Cow<'t, str> {
        if let Body::Text(t) = &self.body {
            return Cow::Borrowed(t);
        }
        match own.get() {
            Cow::Borrowed(o) => self.text(o),
            Cow::Owned(o) => Cow::Owned(self.text(&o).into_owned()),
        }
    }

    /// The length in bytes of [`Edit::text`] for a message whose own text is `own_len` bytes
    /// long (a cut's is told without reading its own text).
    pub fn len_of(&self, own_len: usize) -> usize {
        match &self.body {
            Body::Text(t) => t.len(),
            &Body::Cut { head, tail, n } => {
                let mut marker = String::new();
                push_marker(&mut marker, n);
                head + marker.len() + own_len.saturating_sub(tail)
            }
        }
    }

    /// Whether [`Edit::text`] holds the truncation marker, as a tool result's
    /// (`content::is_marked`): a cut's always does.
    pub fn marked(&self) -> bool {
        match &self.body {
            Body::Text(t) => t.contains(TRUNCATION_MARKER),
            Body::Cut { .. } => true,
        }
    }

    /// Whether [`Edit::text`] begins with the summary header, for a message whose own text
    /// does or not (`own_headed`): a cut's head is its own text's first
    /// [`TRUNCATE_KEEP_CHARS`] characters, which tell the header as the whole text does, so
    /// the own text is not read again (it may be on disk).
    pub fn headed(&self, own_headed: bool) -> bool {
        match &self.body {
            Body::Text(t) => super::content::is_summary_text(t),
            Body::Cut { .. } => own_headed,
        }
    }

    /// The text of an edit that is not a cut (a cut's text is its message's own, so its
    /// place stands for it).
    pub fn own_text(&self) -> Option<&str> {
        match &self.body {
            Body::Text(t) => Some(t),
            Body::Cut { .. } => None,
        }
    }
}

/// The truncation marker between a cut's head and tail.
fn push_marker(text: &mut String, n: u64) {
    let _ = write!(
        text,
        "\n\n...{TRUNCATION_MARKER} — original ~{n} tokens]...\n\n"
    );
}

/// A tool result of `n` tokens cut to its first and last [`TRUNCATE_KEEP_CHARS`] characters
/// around the marker; `None` when it is not longer than both.
pub(super) fn cut(text: &str, n: u64) -> Option<Edit> {
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
            assert_eq!(edit.len_of(text.len()), made.len());
            assert!(edit.marked() && made.contains(super::TRUNCATION_MARKER));
            let own_headed = crate::noa::content::is_summary_text(&text);
            assert_eq!(
                edit.headed(own_headed),
                crate::noa::content::is_summary_text(head)
            );
        }
        // A summary's text cut keeps its header.
        let summary = format!("{}\n{}", crate::noa::content::SUMMARY_HEADER, long("y "));
        let edit = cut(&summary, 99).expect("long enough to cut");
        assert!(edit.headed(true));
        assert!(crate::noa::content::is_summary_text(&edit.text(&summary)));
        assert!(cut(&"a".repeat(2 * TRUNCATE_KEEP_CHARS), 9).is_none());
    }
}
