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
    pub fn all(&self) -> impl Iterator<Item = usize> + '_ {
        self.reasoning
            .iter()
            .chain(&self.acts)
            .chain(&self.results)
            .copied()
    }
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
/// `turns` are [`groups`] of `msgs`.
pub fn withdraw_split<'x>(
    turns: &[TurnGroup],
    msgs: &[&'x Core<'_>],
    folded: &mut FastSet<&'x str>,
) -> Vec<&'x str> {
    let mut withdrawn = Vec::new();
    if folded.is_empty() {
        return withdrawn;
    }
    for g in turns {
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
