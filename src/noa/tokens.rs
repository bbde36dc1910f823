//! The runtime's token estimate (SPEC 4.2) and how counts are shown.

/// Whether a character counts as one token on its own: CJK ideographs, kana, Hangul syllables.
fn is_cjk(c: char) -> bool {
    matches!(c, '\u{4E00}'..='\u{9FFF}' | '\u{3040}'..='\u{30FF}' | '\u{AC00}'..='\u{D7AF}')
}

/// Tokens of a text: one per CJK character plus a quarter (rounded up) of the others, counted
/// in Unicode scalar values.
pub fn count(text: &str) -> u64 {
    if text.is_ascii() {
        return (text.len() as u64).div_ceil(4);
    }
    let (mut cjk, mut other) = (0u64, 0u64);
    for c in text.chars() {
        if is_cjk(c) {
            cjk += 1;
        } else {
            other += 1;
        }
    }
    cjk + other.div_ceil(4)
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
        if text.is_ascii() {
            self.other += text.len() as u64;
        } else {
            text.chars().for_each(|c| self.add(c));
        }
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

/// A count as tags and panels show it: exact below 1000, `1.2K` below 10000, else `12K`.
pub fn format(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else if n < 10_000 {
        // Rust and Go both round the binary value's exact decimal expansion, ties to even.
        format!("{:.1}K", n as f64 / 1000.0)
    } else {
        // Whole thousands, half away from zero.
        format!("{}K", (n + 500) / 1000)
    }
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
        for text in ["", "abcde", "日本語ab", "é😀x"] {
            assert_eq!(count_and_chars(text), (count(text), chars(text)));
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
