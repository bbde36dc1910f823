//! Refs and block ids (SPEC 2.5, 4.3): parsing, and handing out refs to a projection.
//!
//! A ref, once recorded, is never given to another message: a projection keeps every ref the
//! state holds and numbers the rest from one past the highest, in projection order.
//! Hard-protected content is recorded as `BLOCKED` and takes no number.

use std::collections::HashSet;

use super::content::{Core, Slot};
use crate::format::state::State;

pub use crate::format::state::{parse_ref, BLOCKED, MAX_REF};

/// The highest number [`assign`] hands out: [`MAX_REF`], or lower in a test that runs out of
/// numbers within a small session (`set_ref_limit`, with the `testhook` feature).
#[inline]
pub fn ref_limit() -> u32 {
    #[cfg(feature = "testhook")]
    {
        LIMIT.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(feature = "testhook"))]
    {
        MAX_REF
    }
}

#[cfg(feature = "testhook")]
static LIMIT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(MAX_REF);

/// Hand out numbers up to `n` only (at most [`MAX_REF`]): process-wide, for a test of what
/// happens when they run out.
#[cfg(feature = "testhook")]
pub fn set_ref_limit(n: u32) {
    LIMIT.store(n.min(MAX_REF), std::sync::atomic::Ordering::Relaxed);
}

/// `m` + five digits.
pub fn format_ref(n: u32) -> String {
    format!("m{n:05}")
}

/// [`format_ref`] of a number below 100,000 written into `buf`, without an allocation.
pub fn ref_name_in(n: u32, buf: &mut [u8; 6]) -> &str {
    let mut n = n.min(MAX_REF);
    buf[0] = b'm';
    for k in (1..6).rev() {
        buf[k] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    std::str::from_utf8(buf).unwrap_or("m00000")
}

/// A block id, leniently: `b5`, `b005`, `5`, and the displayed `b5(T2)`; `None` below 1.
pub fn parse_block_id(s: &str) -> Option<u32> {
    let mut s = s.trim().to_ascii_lowercase();
    // The tier label as panels show it: a trailing "(t<digits>)".
    if let Some(open) = s.rfind("(t") {
        let label = &s[open + 2..];
        if label.len() > 1
            && label.ends_with(')')
            && label[..label.len() - 1].bytes().all(|b| b.is_ascii_digit())
        {
            s.truncate(open);
        }
    }
    let digits = s.strip_prefix('b').unwrap_or(&s);
    let digits_only = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    if !digits_only {
        return None;
    }
    if s.starts_with('b') {
        let significant = digits.trim_start_matches('0');
        if significant.len() > 9 {
            return None;
        }
    }
    let n: u64 = digits.parse().ok()?;
    (n >= 1 && n <= u32::MAX as u64).then_some(n as u32)
}

/// The canonical block id `b<N>`.
pub fn block_name(n: u32) -> String {
    format!("b{n}")
}

/// A ref as recorded in the state.
pub fn slot_of(recorded: &str) -> Slot {
    if recorded == BLOCKED {
        return Slot::Blocked;
    }
    let canonical = recorded.len() == 6
        && recorded.starts_with('m')
        && recorded[1..].bytes().all(|b| b.is_ascii_digit());
    match recorded.get(1..).unwrap_or("").parse::<u32>() {
        Ok(n) if canonical && (1..=MAX_REF).contains(&n) => Slot::Num(n),
        _ => Slot::Other(Box::new(recorded.to_string())),
    }
}

/// The highest ref number recorded (`BLOCKED` and unparsable refs aside).
pub fn highest_recorded(state: &State) -> u32 {
    state.message_refs.by_raw.highest_ref()
}

/// The slot of every core of a projection: the state's ref for a recorded raw id, else
/// `BLOCKED` for hard-protected content, else the next free number. Also returns the indices
/// of the cores given a slot the state does not record.
pub fn assign(
    cores: &[Core<'_>],
    state: &State,
    protected: impl Fn(&Core<'_>) -> bool,
) -> (Vec<Slot>, Vec<u32>) {
    let by_raw = &state.message_refs.by_raw;
    let mut cursor = highest_recorded(state) + 1;
    // Numbers at or above the cursor that the state's byRef already holds (only when the two
    // maps disagree).
    let by_ref = &state.message_refs.by_ref;
    let taken: HashSet<u32> = if by_ref.highest_key_ref() < cursor {
        HashSet::new()
    } else {
        by_ref
            .keys()
            .filter_map(|r| parse_ref(r))
            .filter(|n| *n >= cursor)
            .collect()
    };
    // A projection gives every core its own id, so each is met once.
    let mut slots = vec![Slot::None; cores.len()];
    let mut new = Vec::new();
    for (i, c) in cores.iter().enumerate() {
        if c.is_synthetic() || c.id.is_empty() {
            continue;
        }
        if let Some(r) = (!by_raw.is_empty())
            .then(|| by_raw.get(c.id.as_ref()))
            .flatten()
        {
            slots[i] = slot_of(r);
            continue;
        }
        slots[i] = if protected(c) {
            Slot::Blocked
        } else {
            while taken.contains(&cursor) {
                cursor += 1;
            }
            if cursor > ref_limit() {
                // The ref space is exhausted: nothing after this gets a ref (or BLOCKED).
                break;
            }
            cursor += 1;
            Slot::Num(cursor - 1)
        };
        new.push(i as u32);
    }
    (slots, new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_parse_leniently() {
        assert_eq!(parse_ref("m00005"), Some(5));
        assert_eq!(parse_ref(" M5 "), Some(5));
        assert_eq!(parse_ref("m000000005"), Some(5));
        assert_eq!(parse_ref("m99999"), Some(99_999));
        assert_eq!(parse_ref("m100000"), None);
        assert_eq!(parse_ref("m0"), None);
        assert_eq!(parse_ref("m"), None);
        assert_eq!(parse_ref("5"), None);
        assert_eq!(parse_ref("m-5"), None);
        assert_eq!(format_ref(42), "m00042");
        let mut buf = [0u8; 6];
        for n in [1, 42, 9_999, 99_999] {
            assert_eq!(ref_name_in(n, &mut buf), format_ref(n));
        }
    }

    #[test]
    fn block_ids_parse_leniently() {
        assert_eq!(parse_block_id("b5"), Some(5));
        assert_eq!(parse_block_id("b005"), Some(5));
        assert_eq!(parse_block_id("5"), Some(5));
        assert_eq!(parse_block_id(" B5(T2) "), Some(5));
        assert_eq!(parse_block_id("b0"), None);
        assert_eq!(parse_block_id("0"), None);
        assert_eq!(parse_block_id("bx"), None);
        assert_eq!(parse_block_id("m5"), None);
        assert_eq!(parse_block_id("b1234567890"), None);
    }

    #[test]
    fn recorded_refs_are_slots() {
        assert_eq!(slot_of("m00012"), Slot::Num(12));
        assert_eq!(slot_of("BLOCKED"), Slot::Blocked);
        assert_eq!(slot_of("m12"), Slot::Other(Box::new("m12".into())));
        assert_eq!(slot_of(""), Slot::Other(Box::default()));
        assert_eq!(std::mem::size_of::<Slot>(), 16);
    }
}
