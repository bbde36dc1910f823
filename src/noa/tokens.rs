//! The runtime's token estimate (SPEC 4.2) and how counts are shown.

/// Whether a character counts as one token on its own: CJK ideographs, kana, Hangul syllables.
fn is_cjk(c: char) -> bool {
    matches!(c, '\u{4E00}'..='\u{9FFF}' | '\u{3040}'..='\u{30FF}' | '\u{AC00}'..='\u{D7AF}')
}

/// Tokens of a text: one per CJK character plus a quarter (rounded up) of the others, counted
/// in Unicode scalar values.
pub fn count(text: &str) -> u64 {
    count_and_chars(text).0
}

/// Tokens and characters of a text in one pass over it.
pub fn count_and_chars(text: &str) -> (u64, usize) {
    if text.is_ascii() {
        return ((text.len() as u64).div_ceil(4), text.len());
    }
    let mut tally = Tally::default();
    tally.add_str(text);
    (tally.tokens(), tally.chars())
}

/// Bytes looked at together before their counts are added up: few enough that a count fits
/// in a byte, so that the loops below run on as many bytes at once as the CPU holds.
const BLOCK: usize = 128;

/// The CJK characters and all characters of valid UTF-8, counted without branches: a
/// character is a byte that is not a continuation byte (`10xxxxxx`), and a CJK one is a
/// three-byte sequence whose lead and next bytes put it in one of [`is_cjk`]'s ranges.
fn cjk_and_chars(b: &[u8]) -> (u64, u64) {
    // Every three-byte sequence starts at least two bytes before the end.
    let n = b.len().saturating_sub(2);
    let (xs, ys, zs) = (
        b.get(..n).unwrap_or_default(),
        b.get(1..n + 1).unwrap_or_default(),
        b.get(2..).unwrap_or_default(),
    );
    let (mut chars, mut cjk) = (0u64, 0u64);
    let mut at = 0;
    while at < n {
        let end = (at + BLOCK).min(n);
        let (mut c, mut k) = (0u8, 0u8);
        for ((&x, &y), &z) in xs[at..end].iter().zip(&ys[at..end]).zip(&zs[at..end]) {
            c = c.wrapping_add(u8::from(!is_continuation(x)));
            k = k.wrapping_add(u8::from(starts_cjk(x, y, z)));
        }
        chars += u64::from(c);
        cjk += u64::from(k);
        at = end;
    }
    for &x in b.get(n..).unwrap_or_default() {
        chars += u64::from(!is_continuation(x));
    }
    (cjk, chars)
}

#[inline(always)]
fn is_continuation(x: u8) -> bool {
    x & 0xc0 == 0x80
}

/// Whether the bytes `x y z` of valid UTF-8 start a character of [`is_cjk`]'s ranges:
/// U+3040–30FF is `E3 81..83 _`, U+4E00–9FFF is `E4 B8.. _` and `E5..E9 _ _`, U+AC00–D7AF is
/// `EA B0.. _`, `EB..EC _ _`, `ED ..9D _` and `ED 9E ..AF`. Bitwise, so that it vectorises.
#[inline(always)]
fn starts_cjk(x: u8, y: u8, z: u8) -> bool {
    let kana = (x == 0xe3) & (y.wrapping_sub(0x81) <= 2);
    let han = ((x == 0xe4) & (y >= 0xb8)) | (x.wrapping_sub(0xe5) <= 4);
    let hangul = ((x == 0xea) & (y >= 0xb0))
        | (x.wrapping_sub(0xeb) <= 1)
        | ((x == 0xed) & ((y < 0x9e) | ((y == 0x9e) & (z <= 0xaf))));
    kana | han | hangul
}

/// Characters counted as [`count`] counts them, for a text seen in pieces.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    cjk: u64,
    other: u64,
}

impl Tally {
    pub fn add(&mut self, c: char) {
        if is_cjk(c) {
            self.cjk += 1;
        } else {
            self.other += 1;
        }
    }

    pub fn add_str(&mut self, text: &str) {
        let (cjk, chars) = cjk_and_chars(text.as_bytes());
        self.cjk += cjk;
        self.other += chars - cjk;
    }

    /// Add what `other` counted (a text seen in two pieces counts as the two).
    pub fn merge(&mut self, other: Tally) {
        self.cjk += other.cjk;
        self.other += other.other;
    }

    pub fn tokens(&self) -> u64 {
        self.cjk + self.other.div_ceil(4)
    }

    pub fn chars(&self) -> usize {
        (self.cjk + self.other) as usize
    }
}

/// Characters (Unicode scalar values): how the runtime measures summaries and ranges.
pub fn chars(text: &str) -> usize {
    if text.is_ascii() {
        text.len()
    } else {
        text.chars().count()
    }
}

/// [`format`] written onto `s`.
pub fn push_format(s: &mut String, n: u64) {
    use std::fmt::Write as _;
    if n < 1000 {
        let _ = write!(s, "{n}");
    } else if n < 10_000 {
        let _ = write!(s, "{:.1}K", n as f64 / 1000.0);
    } else {
        let _ = write!(s, "{}K", (n + 500) / 1000);
    }
}

/// A count as tags and panels show it: exact below 1000, `1.2K` below 10000, else `12K`.
pub fn format(n: u64) -> String {
    let mut s = String::new();
    push_format(&mut s, n);
    s
}

/// `Math.round` for the non-negative values the runtime rounds.
pub fn round_half_up(x: f64) -> i64 {
    if x.is_finite() {
        x.round() as i64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cjk_one_each_and_others_by_four() {
        assert_eq!(count(""), 0);
        assert_eq!(count("abcd"), 1);
        assert_eq!(count("abcde"), 2);
        assert_eq!(count("日本語"), 3);
        assert_eq!(count("日本語ab"), 4);
        assert_eq!(count("é"), 1);
        assert_eq!(count("한국"), 2);
        assert_eq!(count("😀😀😀😀😀"), 2);
        for text in [
            "",
            "abcde",
            "日本語ab",
            "é😀x",
            "a long ascii run, then 한국어 주석은 그대로 두세요 and カタカナ — done ✓ 𝄞",
            "丁\u{9fff}\u{a000}\u{3040}\u{30ff}\u{3100}\u{ac00}\u{d7af}\u{d7b0}\u{4dff}",
        ] {
            assert_eq!(
                count_and_chars(text),
                (count(text), chars(text)),
                "{text:?}"
            );
            let by_chars = text.chars().fold((0u64, 0u64), |(k, o), c| {
                if is_cjk(c) {
                    (k + 1, o)
                } else {
                    (k, o + 1)
                }
            });
            assert_eq!(count(text), by_chars.0 + by_chars.1.div_ceil(4), "{text:?}");
        }
    }

    /// Counted by bytes as by characters, over texts of every kind of character about the
    /// CJK ranges' ends, in every mix and length (blocks of bytes counted together, and
    /// characters across their ends).
    #[test]
    fn a_text_is_tallied_by_its_bytes_as_by_its_characters() {
        let palette: Vec<char> = "a ~\n\u{7f}é\u{7ff}\u{800}\u{303f}\u{3040}\u{30ff}\u{3100}\u{4dff}\u{4e00}\u{9fff}\u{a000}\u{abff}\u{ac00}\u{d7af}\u{d7b0}\u{e000}\u{ffff}😀\u{10ffff}"
            .chars()
            .collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..3000 {
            let len = (next() % 400) as usize;
            // Mostly ASCII in some texts, any character in others.
            let ascii_bias = round % 3;
            let text: String = (0..len)
                .map(|_| {
                    let r = next();
                    if ascii_bias > 0 && r % 4 != 0 {
                        'x'
                    } else {
                        palette[(r >> 8) as usize % palette.len()]
                    }
                })
                .collect();
            let mut tally = Tally::default();
            tally.add_str(&text);
            let by_chars = text.chars().fold(Tally::default(), |mut t, c| {
                t.add(c);
                t
            });
            assert_eq!(
                (tally.tokens(), tally.chars()),
                (by_chars.tokens(), by_chars.chars()),
                "{text:?}"
            );
        }
    }

    /// Every character there is, in one text and each with letters after it, counted as its
    /// `char` is.
    #[test]
    fn every_character_is_counted_as_its_char() {
        let all: String = (0..=0x10_ffffu32).filter_map(char::from_u32).collect();
        let by_chars = all.chars().fold(Tally::default(), |mut t, c| {
            t.add(c);
            t
        });
        assert_eq!(count_and_chars(&all), (by_chars.tokens(), by_chars.chars()));
        // With three ASCII letters after it, a CJK character makes two tokens, another one.
        for c in all.chars() {
            let text = format!("{c}abc");
            let want = if is_cjk(c) { 2 } else { 1 };
            assert_eq!(count_and_chars(&text), (want, 4), "{c:?}");
        }
    }

    #[test]
    fn formats_like_the_runtime() {
        assert_eq!(format(999), "999");
        assert_eq!(format(1000), "1.0K");
        assert_eq!(format(1049), "1.0K");
        assert_eq!(format(1050), "1.1K");
        assert_eq!(format(1150), "1.1K");
        assert_eq!(format(1250), "1.2K");
        assert_eq!(format(1350), "1.4K");
        assert_eq!(format(1450), "1.4K");
        assert_eq!(format(1750), "1.8K");
        assert_eq!(format(9999), "10.0K");
        assert_eq!(format(10_000), "10K");
        assert_eq!(format(10_499), "10K");
        assert_eq!(format(10_500), "11K");
        assert_eq!(format(31_200), "31K");
    }
}
