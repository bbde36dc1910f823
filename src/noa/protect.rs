//! Protection (SPEC 4.6): hard-protected tools, and the soft protected tail.

use std::collections::HashSet;

use super::content::{Core, Role, Slot, COMPRESS_TOOL, SUMMARY_HEADER};
use crate::config::NoaConfig;

/// Tools whose output is bulky and can be fetched again: they take no place in the recency
/// window (and stay compressible).
const NEVER_PRESERVE_RECENT: [&str; 5] = ["Read", "Grep", "Glob", "Bash", "LS"];

/// A configured pattern against a tool name: case-insensitive, exact or a trailing `*`.
pub fn tool_matches(pattern: &str, tool: &str) -> bool {
    if pattern.is_empty() || tool.is_empty() {
        return false;
    }
    // Lowercased a character at a time (as the runtime lowers each rune), without allocating:
    // this runs for every tool message of every view.
    let (prefix, whole) = match pattern.strip_suffix('*') {
        Some(prefix) => (prefix, false),
        None => (pattern, true),
    };
    let mut p = prefix.chars().flat_map(char::to_lowercase);
    let mut t = tool.chars().flat_map(char::to_lowercase);
    loop {
        match (p.next(), t.next()) {
            (None, None) => return true,
            (None, Some(_)) => return !whole,
            (Some(_), None) => return false,
            (Some(a), Some(b)) if a != b => return false,
            _ => {}
        }
    }
}

/// Hard-protected: a call or result of Compress or of a configured protected tool.
pub fn is_hard(c: &Core<'_>, cfg: &NoaConfig) -> bool {
    !c.tool.is_empty()
        && (c.tool == COMPRESS_TOOL || cfg.protected_tools.iter().any(|p| tool_matches(p, c.tool)))
}

pub fn never_preserve_recent(c: &Core<'_>) -> bool {
    !c.tool.is_empty()
        && NEVER_PRESERVE_RECENT
            .iter()
            .any(|n| n.eq_ignore_ascii_case(c.tool))
}

/// The call ids of hard-protected content, so that the other half of the exchange is
/// protected too.
pub fn protected_calls<'c, 'a: 'c>(
    cores: impl IntoIterator<Item = &'c Core<'a>>,
    cfg: &NoaConfig,
) -> HashSet<&'c str> {
    cores
        .into_iter()
        .filter(|c| !c.call.is_empty() && is_hard(c, cfg))
        .map(|c| c.call)
        .collect()
}

pub fn is_hard_paired(c: &Core<'_>, cfg: &NoaConfig, calls: &HashSet<&str>) -> bool {
    is_hard(c, cfg) || (!c.call.is_empty() && calls.contains(c.call))
}

/// The soft protected zone over a view: among the visible, uncovered, addressable,
/// non-summary messages (bulky re-obtainable tools aside), the last
/// `protect_recent_messages`, the suffix reaching `protect_recent_tokens`, and the last user
/// text. `items` yields each message with its slot and whether a live block covers it.
pub fn soft_zone<'s, 'a: 's>(
    items: impl IntoIterator<Item = (&'s Core<'a>, &'s str, &'s Slot, bool, u64)>,
    cfg: &NoaConfig,
) -> HashSet<Slot> {
    struct Visible<'s> {
        slot: &'s Slot,
        tokens: u64,
        user: bool,
    }
    let mut visible = Vec::new();
    for (c, text, slot, covered, tokens) in items {
        if covered || c.is_summary() || text.starts_with(SUMMARY_HEADER) || !slot.is_ref() {
            continue;
        }
        if never_preserve_recent(c) {
            continue;
        }
        visible.push(Visible {
            slot,
            tokens,
            user: c.role == Role::User,
        });
    }
    let mut out = HashSet::new();
    let n = cfg.protect_recent_messages;
    if n > 0 {
        for v in &visible[visible.len().saturating_sub(n)..] {
            out.insert(v.slot.clone());
        }
    }
    if cfg.protect_recent_tokens > 0 {
        let mut acc = 0u64;
        for v in visible.iter().rev() {
            if acc >= cfg.protect_recent_tokens {
                break;
            }
            out.insert(v.slot.clone());
            acc += v.tokens;
        }
    }
    if n > 0 {
        if let Some(v) = visible.iter().rev().find(|v| v.user) {
            out.insert(v.slot.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_case_insensitively_with_a_trailing_star() {
        assert!(tool_matches("bash", "Bash"));
        assert!(tool_matches("mcp__*", "mcp__github"));
        assert!(!tool_matches("mcp__*", "Bash"));
        assert!(!tool_matches("", "Bash"));
        assert!(!tool_matches("Ba", "Bash"));
        assert!(tool_matches("*", "Bash"));
        assert!(tool_matches("BASH*", "bash"));
        assert!(!tool_matches("Bashes", "Bash"));
        assert!(tool_matches("ÉCRIRE", "écrire"));
    }
}
