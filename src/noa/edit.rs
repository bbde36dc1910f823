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
    /// A cut keeping its text's bytes up to `head` and from `tail`, `tally` being theirs.
    fn cut_at(head: usize, tail: usize, n: u64, mut tally: tokens::Tally) -> Edit {
        let mut marker = String::with_capacity(80);
        push_marker(&mut marker, n);
        tally.add_str(&marker);
        Edit {
            body: Body::Cut { head, tail, n },
            tokens: tally.tokens(),
            chars: tally.chars(),
        }
    }

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
            &Body::Cut { head, tail, n } => Cow::Owned(around_marker(
                own.get(..head).unwrap_or(""),
                own.get(tail..).unwrap_or(""),
                n,
            )),
        }
    }

    /// [`Edit::text`] for a message's own text as a projection holds it: read only when the
    /// edit keeps part of it.
    pub fn text_of<'t>(&'t self, own: &'t Text<'_>) -> Cow<'t, str> {
        let &Body::Cut { head, tail, n } = &self.body else {
            return Cow::Borrowed(self.own_text().unwrap_or(""));
        };
        if let Text::Cold(c) = own {
            // Only the ends it keeps are read back.
            let (head, tail) = (c.range(0, head), c.range(tail, c.len()));
            return Cow::Owned(around_marker(&head, &tail, n));
        }
        match own.get() {
            Cow::Borrowed(o) => self.text(o),
            Cow::Owned(o) => Cow::Owned(self.text(&o).into_owned()),
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

/// A cut's text: its head, the marker for its `n` tokens, its tail.
fn around_marker(head: &str, tail: &str, n: u64) -> String {
    let mut text = String::with_capacity(head.len() + tail.len() + 80);
    text.push_str(head);
    push_marker(&mut text, n);
    text.push_str(tail);
    text
}

/// A tool result of `n` tokens cut to its first and last [`TRUNCATE_KEEP_CHARS`] characters
/// around the marker; `None` when it is not longer than both.
pub(super) fn cut(text: &str, n: u64) -> Option<Edit> {
    let (head, tail, tally) = ends_within(text, text, 0, text.len(), TRUNCATE_KEEP_CHARS)?;
    Some(Edit::cut_at(head, tail, n, tally))
}

/// [`cut`] of a message's own text as a projection holds it: a long text on disk is read
/// only at its two ends (the cut keeps [`TRUNCATE_KEEP_CHARS`] characters of each), not
/// whole.
pub(super) fn cut_of(own: &Text<'_>, n: u64) -> Option<Edit> {
    let Text::Cold(c) = own else {
        return cut(&own.get(), n);
    };
    let (len, window) = (c.len(), END_WINDOW);
    if len > 2 * window {
        let ends = c
            .chars_within(0, window)
            .zip(c.chars_within(len - window, len));
        if let Some(((_, head), (tail_at, tail))) = ends {
            let (head, tail, tally) = ends_within(&head, &tail, tail_at, len, TRUNCATE_KEEP_CHARS)?;
            return Some(Edit::cut_at(head, tail, n, tally));
        }
    }
    // Cuts are made here and there, not in the order texts are stored: read alone.
    cut(&c.range(0, len), n)
}

/// The bytes read at each end of a long text to cut it: [`TRUNCATE_KEEP_CHARS`] characters
/// and one more, at four bytes each at most, so that the whole characters within the bytes
/// read are always enough.
const END_WINDOW: usize = 4 * (TRUNCATE_KEEP_CHARS + 1);

/// Where the first `keep` characters of a text of `len` bytes end and its last `keep` begin,
/// when it has more than `2 * keep` characters, with their tally (taken on the way: these
/// texts are cut again at every view). `head` is the text's beginning and `tail` its end from
/// byte `tail_at`, each whole characters and at least `keep + 1` of them (or the whole text).
fn ends_within(
    head: &str,
    tail: &str,
    tail_at: usize,
    len: usize,
    keep: usize,
) -> Option<(usize, usize, tokens::Tally)> {
    if len <= 2 * keep || keep == 0 {
        return None; // no more characters than bytes
    }
    let mut tally = tokens::Tally::default();
    let mut head_end = None;
    for (k, (at, c)) in head.char_indices().enumerate() {
        if k == keep {
            head_end = Some(at);
            break;
        }
        tally.add(c);
    }
    let mut tail_start = None;
    for (at, c) in tail.char_indices().rev().take(keep) {
        tally.add(c);
        tail_start = Some(tail_at + at);
    }
    let (head_end, tail_start) = (head_end?, tail_start?);
    (head_end < tail_start).then_some((head_end, tail_start, tally))
}

/// The first and last `keep` characters of a text longer than `2 * keep` characters.
#[cfg(test)]
fn head_and_tail(text: &str, keep: usize) -> Option<(&str, &str, tokens::Tally)> {
    let (head, tail, tally) = ends_within(text, text, 0, text.len(), keep)?;
    Some((&text[..head], &text[tail..], tally))
}

#[cfg(test)]
mod tests {
    use super::{cut, cut_of, head_and_tail, END_WINDOW, TRUNCATE_KEEP_CHARS};
    use crate::format::cold::{moved, ColdSink, ColdStore, ColdStr};
    use crate::noa::content::Text;
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
            // The head as it is, then the marker.
            assert!(made[head.len()..].starts_with("\n\n...[truncated for context space"));
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

    /// Texts on disk are cut from their two ends only, and their cut made from those ends:
    /// the same edit and text as from the whole text, for lengths about where the ends
    /// meet, characters of one to four bytes across the bytes read, and texts too few in
    /// characters to cut though long in bytes.
    #[test]
    fn a_text_on_disk_is_cut_from_its_ends_as_from_the_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sink = ColdSink::to(ColdStore::new(dir.path()).expect("store"));
        let mut texts = Vec::new();
        for unit in ["a", "é", "日", "😀", "x한😀é "] {
            let per = unit.len() as f64 / unit.chars().count() as f64;
            for chars in [
                2 * TRUNCATE_KEEP_CHARS + 1,
                (2.0 * END_WINDOW as f64 / per) as usize - 3,
                (2.0 * END_WINDOW as f64 / per) as usize + 5,
                (3.0 * END_WINDOW as f64 / per) as usize + 1,
                50_000,
            ] {
                for shift in ["", "ab", "字"] {
                    let body: String = unit.chars().cycle().take(chars).collect();
                    texts.push(format!("{shift}{body}"));
                }
            }
        }
        // Long in bytes, too few characters to cut.
        texts.push("😀".repeat(2 * TRUNCATE_KEEP_CHARS));
        let kept: Vec<ColdStr> = texts.iter().map(|t| moved(&mut sink, t)).collect();
        sink.flush();
        let mut cuts = 0;
        for (k, text) in kept.iter().zip(&texts) {
            let own = Text::stored(k);
            assert!(matches!(own, Text::Cold(_)), "the text is on disk");
            let (whole, ends) = (cut(text, 4321), cut_of(&own, 4321));
            assert_eq!(whole.is_some(), ends.is_some(), "{} bytes", text.len());
            let (Some(whole), Some(ends)) = (whole, ends) else {
                continue;
            };
            cuts += 1;
            assert_eq!(
                (whole.tokens, whole.chars),
                (ends.tokens, ends.chars),
                "{} bytes",
                text.len()
            );
            assert_eq!(whole.text(text), ends.text_of(&own), "{} bytes", text.len());
            assert_eq!(whole.text(text), ends.text(text));
        }
        assert!(cuts > 40, "most texts are long enough to cut: {cuts}");
    }
}
