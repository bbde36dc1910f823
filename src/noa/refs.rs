//! Refs (SPEC 4.2): stable short names `m0001`, `m0002`, … for transcript messages.
//!
//! Refs already in `messageRefs` are kept; a message without one gets the next number after the
//! largest `m<digits>` ref ever recorded, in transcript order. Refs are never reused.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::format::state::State;
use crate::noa::Msg;

/// The number N of a ref `m<N>`; `None` for anything else.
pub fn ref_number(r: &str) -> Option<u64> {
    let digits = r.strip_prefix('m')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `m` followed by N zero-padded to at least four digits.
pub fn format_ref(n: u64) -> String {
    format!("m{n:04}")
}

/// The refs of every message of a transcript: the recorded ones plus in-memory assignments.
#[derive(Debug, Clone, Default)]
pub struct RefAssignment {
    /// The ref of each message, by message index.
    pub per_msg: Vec<String>,
    /// Indices of messages whose ref is new (not yet in `messageRefs`).
    pub new: Vec<usize>,
    /// Ref -> first message index carrying it; built on first use (a view does not need it).
    index: OnceLock<HashMap<String, usize>>,
}

impl RefAssignment {
    /// The refs of some first messages, to [`extend`] to more.
    pub fn of_prefix(per_msg: Vec<String>, new: Vec<usize>) -> RefAssignment {
        RefAssignment {
            per_msg,
            new,
            index: OnceLock::new(),
        }
    }

    /// The message index of a ref, if some message of the transcript carries it.
    pub fn msg_of(&self, r: &str) -> Option<usize> {
        let index = self.index.get_or_init(|| {
            let mut index = HashMap::with_capacity(self.per_msg.len());
            for (i, r) in self.per_msg.iter().enumerate() {
                index.entry(r.clone()).or_insert(i);
            }
            index
        });
        index.get(r).copied()
    }
}

/// The largest ref number recorded in `state` (0 when none).
pub fn recorded_max(state: &State) -> u64 {
    let refs = &state.message_refs;
    refs.by_ref
        .keys()
        .chain(refs.by_raw.values())
        .filter_map(|r| ref_number(r))
        .max()
        .unwrap_or(0)
}

/// Assign refs to `msgs` given the recorded map in `state` (pure; nothing is persisted).
pub fn assign(state: &State, msgs: &[Msg<'_>]) -> RefAssignment {
    let mut out = RefAssignment {
        per_msg: Vec::with_capacity(msgs.len()),
        new: Vec::new(),
        index: OnceLock::new(),
    };
    extend(state, msgs, &mut out, recorded_max(state));
    out
}

/// Assign refs to the messages of `msgs` after the ones `out` holds, new refs numbered after
/// `max`; the largest number given. [`assign`] is this from nothing; from the refs of a prefix
/// it gives what `assign` of all `msgs` gives, provided that no later message repeats the raw
/// id of a prefix message that got a new ref (which would share it).
pub fn extend(state: &State, msgs: &[Msg<'_>], out: &mut RefAssignment, mut max: u64) -> u64 {
    let refs = &state.message_refs;
    let mut fresh: HashMap<&str, String> = HashMap::new();
    let from = out.per_msg.len();
    for (i, m) in msgs.iter().enumerate().skip(from) {
        let r = if let Some(r) = refs.by_raw.get(m.raw_id) {
            r.clone()
        } else if let Some(r) = fresh.get(m.raw_id) {
            // A duplicated uuid shares the ref of its first occurrence.
            r.clone()
        } else {
            // Saturating: a state.json may record an absurd ref like m18446744073709551615.
            max = max.saturating_add(1);
            let r = format_ref(max);
            fresh.insert(m.raw_id, r.clone());
            out.new.push(i);
            r
        };
        out.per_msg.push(r);
    }
    out.index = OnceLock::new();
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_names() {
        assert_eq!(format_ref(1), "m0001");
        assert_eq!(format_ref(9999), "m9999");
        assert_eq!(format_ref(10000), "m10000");
        assert_eq!(ref_number("m0042"), Some(42));
        assert_eq!(ref_number("m10000"), Some(10000));
        assert_eq!(ref_number("m"), None);
        assert_eq!(ref_number("x12"), None);
        assert_eq!(ref_number("m-1"), None);
    }
}
