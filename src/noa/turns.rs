//! Assistant turns (a reasoning run, the acts after it, their results): the unit that must not
//! be split between what is compressed and what stays visible.

use super::content::{Core, Kind};
use crate::fasthash::FastSet;

#[derive(Debug, Default, Clone)]
pub struct TurnGroup {
    pub reasoning: Vec<usize>,
    pub acts: Vec<usize>,
    pub results: Vec<usize>,
}

impl TurnGroup {
    /// Its first message's place (a group is never empty).
    pub fn first(&self) -> usize {
        self.all().min().unwrap_or(0)
    }

    /// Its last message's place.
    pub fn last(&self) -> usize {
        self.all().max().unwrap_or(0)
    }

    pub fn all(&self) -> impl Iterator<Item = usize> + '_ {
        self.reasoning
            .iter()
            .chain(&self.acts)
            .chain(&self.results)
            .copied()
    }
}

/// The reasoning runs and acts of each turn of `msgs` ([`groups`] without their results,
/// which never begin a turn), made as they are asked for.
pub fn runs<'m>(
    msgs: &'m [&Core<'_>],
) -> impl Iterator<Item = (std::ops::Range<usize>, std::ops::Range<usize>)> + 'm {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < msgs.len() && msgs[i].kind != Kind::Reasoning && !msgs[i].is_act() {
            i += 1;
        }
        if i >= msgs.len() {
            return None;
        }
        let start = i;
        while i < msgs.len() && msgs[i].kind == Kind::Reasoning {
            i += 1;
        }
        let acts = i;
        while i < msgs.len() && msgs[i].is_act() {
            i += 1;
        }
        Some((start..acts, acts..i))
    })
}

/// The turns of a sequence of content messages (indices into it).
pub fn groups<'c, 'a: 'c>(msgs: &[&'c Core<'a>]) -> Vec<TurnGroup> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < msgs.len() {
        if msgs[i].kind != Kind::Reasoning && !msgs[i].is_act() {
            i += 1;
            continue;
        }
        let mut g = TurnGroup::default();
        while i < msgs.len() && msgs[i].kind == Kind::Reasoning {
            g.reasoning.push(i);
            i += 1;
        }
        // A turn makes a few calls: looked through, not hashed (a long session has
        // thousands of turns).
        let mut calls: Vec<&str> = Vec::new();
        while i < msgs.len() && msgs[i].is_act() {
            g.acts.push(i);
            if !msgs[i].call.is_empty() {
                calls.push(msgs[i].call);
            }
            i += 1;
        }
        while i < msgs.len() && msgs[i].kind == Kind::ToolResult && calls.contains(&msgs[i].call) {
            g.results.push(i);
            i += 1;
        }
        if !g.reasoning.is_empty() || !g.acts.is_empty() {
            out.push(g);
        }
    }
    out
}

/// Remove from `folded` (ids being compressed) every turn whose reasoning would be folded
/// while one of its tool calls stays visible; returns the ids withdrawn.
/// `turns` are [`groups`] of `msgs`; every message of `msgs` whose id is in `folded` is at a
/// place within `within` (only the turns there are looked at: a long view has thousands).
pub fn withdraw_split<'x>(
    turns: &[TurnGroup],
    msgs: &[&'x Core<'_>],
    folded: &mut FastSet<&'x str>,
    within: std::ops::RangeInclusive<usize>,
) -> Vec<&'x str> {
    let mut withdrawn = Vec::new();
    if folded.is_empty() {
        return withdrawn;
    }
    debug_assert!(
        msgs.iter()
            .enumerate()
            .all(|(i, m)| within.contains(&i) || !folded.contains(m.id.as_ref())),
        "a folded message outside {within:?}"
    );
    // Groups are in order and do not overlap.
    let first = turns.partition_point(|g| g.last() < *within.start());
    let overlapping = turns[first..]
        .iter()
        .take_while(|g| g.first() <= *within.end());
    for g in overlapping {
        if g.reasoning.is_empty() {
            continue;
        }
        let reasoning_folded = g
            .reasoning
            .iter()
            .any(|&i| folded.contains(msgs[i].id.as_ref()));
        if !reasoning_folded {
            continue;
        }
        let call_visible = g
            .acts
            .iter()
            .any(|&i| msgs[i].kind == Kind::ToolCall && !folded.contains(msgs[i].id.as_ref()));
        if !call_visible {
            continue;
        }
        for i in g.all() {
            if folded.remove(msgs[i].id.as_ref()) {
                withdrawn.push(msgs[i].id.as_ref());
            }
        }
    }
    withdrawn
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::noa::content::{Origin, Role};

    fn core(kind: Kind, role: Role, call: &'static str) -> Core<'static> {
        let mut c = Core::synthetic("x", String::new(), Origin::Nudge);
        (c.kind, c.role, c.call) = (kind, role, call);
        c
    }

    #[test]
    fn runs_are_the_groups_without_their_results() {
        use Kind::*;
        let (a, u) = (Role::Assistant, Role::User);
        // Every sequence of five of these messages.
        let kinds = [
            (Reasoning, a, ""),
            (Text, a, ""),
            (ToolCall, a, "c1"),
            (ToolResult, u, "c1"),
            (ToolResult, u, "c2"),
            (Text, u, ""),
        ];
        for n in 0..kinds.len().pow(5) {
            let seq: Vec<Core<'static>> = (0..5)
                .map(|k| {
                    let (kind, role, call) = kinds[n / kinds.len().pow(k) % kinds.len()];
                    core(kind, role, call)
                })
                .collect();
            let msgs: Vec<&Core<'_>> = seq.iter().collect();
            let from_groups: Vec<(Vec<usize>, Vec<usize>)> = groups(&msgs)
                .into_iter()
                .map(|g| (g.reasoning, g.acts))
                .collect();
            let from_runs: Vec<(Vec<usize>, Vec<usize>)> = runs(&msgs)
                .map(|(r, acts)| (r.collect(), acts.collect()))
                .collect();
            assert_eq!(from_runs, from_groups, "sequence {n}");
        }
    }
}
