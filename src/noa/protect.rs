//! Protection (SPEC 4.6): hard-protected tools, and the soft protected tail.

use std::collections::HashSet;

use super::content::{Core, Role, Slot, COMPRESS_TOOL};
use crate::config::NoaConfig;
use crate::fasthash::FastSet;

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
    is_hard(c, cfg) || (!c.call.is_empty() && !calls.is_empty() && calls.contains(c.call))
}

/// The soft protected zone: the refs in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Zone {
    /// Its least canonical ref (`u32::MAX` for none), and which numbers from it on are in
    /// it, one bit each (a zone is made at every request of a replay and asked about each
    /// message its scan meets: bits are cheaper to make and to ask than a set).
    least: u32,
    bits: Vec<u64>,
    /// Its other refs (rare).
    others: Vec<Slot>,
    /// The least canonical ref of its recent tail (the last messages and those reaching the
    /// token count; the last user text may be far older).
    tail_least: u32,
    /// The last user text's ref (`Some(None)`: the view has none; `None`: not looked for).
    pub user: Option<Option<Slot>>,
    /// The least canonical ref among the last `protect_recent_messages` messages, and among
    /// those within `protect_recent_tokens` (`u32::MAX` for none): which rule holds a message.
    count_least: u32,
    tokens_least: u32,
}

/// The rule of the soft zone that holds a message (the first that does, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SoftRule {
    /// Among the last `protect_recent_messages`.
    Count,
    /// Within the last `protect_recent_tokens`.
    Tokens,
    /// The latest user message.
    User,
}

impl Zone {
    fn new(nums: &[u32], others: Vec<Slot>, tail_least: u32, user: Option<Option<Slot>>) -> Zone {
        let least = nums.iter().copied().min().unwrap_or(u32::MAX);
        let span = nums
            .iter()
            .map(|&n| n - least)
            .max()
            .map_or(0, |s| s as usize + 1);
        let mut bits = vec![0u64; span.div_ceil(64)];
        for &n in nums {
            let k = (n - least) as usize;
            bits[k / 64] |= 1 << (k % 64);
        }
        Zone {
            least,
            bits,
            others,
            tail_least,
            user,
            count_least: u32::MAX,
            tokens_least: u32::MAX,
        }
    }

    /// Which rule holds `slot`, a slot of the zone (`None` when none does).
    pub fn rule_of(&self, slot: &Slot) -> Option<SoftRule> {
        if let Slot::Num(k) = slot {
            if *k >= self.count_least && self.contains(slot) {
                return Some(SoftRule::Count);
            }
            if *k >= self.tokens_least && self.contains(slot) {
                return Some(SoftRule::Tokens);
            }
        }
        if self.user.as_ref().is_some_and(|u| u.as_ref() == Some(slot)) {
            return Some(SoftRule::User);
        }
        None
    }

    /// The least canonical ref of its recent tail (`u32::MAX` for none).
    pub fn tail_least(&self) -> u32 {
        self.tail_least
    }

    /// Its canonical refs up to `n`, ascending.
    pub fn nums_upto(&self, n: u32) -> Vec<u32> {
        let Some(span) = n.checked_sub(self.least) else {
            return Vec::new();
        };
        let span = (span as usize + 1).min(self.bits.len() * 64);
        (0..span)
            .filter(|&k| self.bits[k / 64] & (1 << (k % 64)) != 0)
            .map(|k| self.least + k as u32)
            .collect()
    }

    /// The least canonical ref in it (`u32::MAX` for none).
    pub fn least(&self) -> u32 {
        self.least
    }

    /// Whether every ref in it is canonical.
    pub fn all_canonical(&self) -> bool {
        self.others.is_empty()
    }

    pub fn contains(&self, slot: &Slot) -> bool {
        match slot {
            Slot::Num(n) => n.checked_sub(self.least).is_some_and(|k| {
                let k = k as usize;
                self.bits
                    .get(k / 64)
                    .is_some_and(|w| w & (1 << (k % 64)) != 0)
            }),
            slot => self.others.contains(slot),
        }
    }

    /// Its refs as a set.
    pub fn slots(&self) -> FastSet<Slot> {
        let span = self.bits.len() * 64;
        let nums = (0..span)
            .filter(|&k| self.bits[k / 64] & (1 << (k % 64)) != 0)
            .map(|k| Slot::Num(self.least + k as u32));
        nums.chain(self.others.iter().cloned()).collect()
    }
}

/// The soft protected zone over a view: among the visible, uncovered, addressable,
/// non-summary messages (bulky re-obtainable tools aside), the last
/// `protect_recent_messages`, the suffix reaching `protect_recent_tokens`, and the last user
/// text. `from_last` yields each message, the last first, with whether its text begins with
/// the summary header, its slot, whether a live block covers it and its tokens; it is read
/// only as far back as the zone reaches.
pub fn soft_zone<'s, 'a: 's>(
    from_last: impl IntoIterator<Item = (&'s Core<'a>, bool, &'s Slot, bool, u64)>,
    cfg: &NoaConfig,
) -> Zone {
    soft_zone_knowing(from_last, cfg, None)
}

/// Whether a message the zone reads counts as a user text for it (see [`soft_zone`]).
pub fn is_zone_user(c: &Core<'_>, headed: bool, slot: &Slot, covered: bool) -> bool {
    c.role == Role::User
        && !(covered || c.is_summary() || headed || !slot.is_ref())
        && !never_preserve_recent(c)
}

/// [`soft_zone`], the last user text `known` already (`Some(None)`: there is none): read
/// then only as far back as the recent tail reaches. What is known must be so: the last
/// message [`is_zone_user`] holds for.
pub fn soft_zone_knowing<'s, 'a: 's>(
    from_last: impl IntoIterator<Item = (&'s Core<'a>, bool, &'s Slot, bool, u64)>,
    cfg: &NoaConfig,
    known: Option<Option<Slot>>,
) -> Zone {
    let (mut nums, mut others) = (Vec::new(), Vec::new());
    let mut out = |slot: &Slot| match slot {
        Slot::Num(n) => nums.push(*n),
        other if !others.contains(other) => others.push(other.clone()),
        _ => {}
    };
    let n = cfg.protect_recent_messages;
    let want_tokens = cfg.protect_recent_tokens;
    let (mut seen, mut acc) = (0usize, 0u64);
    let mut tail_least = u32::MAX;
    let (mut count_least, mut tokens_least) = (u32::MAX, u32::MAX);
    // The last user text is looked for only with a message count configured.
    let mut user = (n == 0).then_some(None);
    for (c, headed, slot, covered, tokens) in from_last {
        if covered || c.is_summary() || headed || !slot.is_ref() {
            continue;
        }
        if never_preserve_recent(c) {
            continue;
        }
        let by_count = seen < n;
        let by_tokens = want_tokens > 0 && acc < want_tokens;
        if by_count || by_tokens {
            out(slot);
            if let Slot::Num(k) = slot {
                tail_least = tail_least.min(*k);
                if by_count {
                    count_least = count_least.min(*k);
                }
                if by_tokens {
                    tokens_least = tokens_least.min(*k);
                }
            }
        }
        if by_tokens {
            acc += tokens;
        }
        if user.is_none() && c.role == Role::User {
            out(slot);
            user = Some(Some(slot.clone()));
        }
        seen += 1;
        if seen >= n && !(want_tokens > 0 && acc < want_tokens) {
            if user.is_some() {
                break;
            }
            if let Some(k) = &known {
                // Older than all read so far (it would have been met).
                if let Some(slot) = k {
                    out(slot);
                }
                user = Some(k.clone());
                break;
            }
        }
    }
    // Read to the view's start without meeting one: there is none.
    let user = if n == 0 { None } else { Some(user.flatten()) };
    let mut zone = Zone::new(&nums, others, tail_least, user);
    zone.count_least = count_least;
    zone.tokens_least = tokens_least;
    zone
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

    /// The zone as first written: every visible message listed, then each rule applied.
    fn zone_by_rules(items: &[(Core<'_>, Slot, bool)], cfg: &NoaConfig) -> FastSet<Slot> {
        let visible: Vec<&(Core<'_>, Slot, bool)> = items
            .iter()
            .filter(|(c, slot, covered)| {
                !*covered && slot.is_ref() && !c.is_summary() && !never_preserve_recent(c)
            })
            .collect();
        let mut out = FastSet::default();
        let n = cfg.protect_recent_messages;
        for v in &visible[visible.len().saturating_sub(n)..] {
            out.insert(v.1.clone());
        }
        let mut acc = 0;
        for v in visible.iter().rev() {
            if cfg.protect_recent_tokens == 0 || acc >= cfg.protect_recent_tokens {
                break;
            }
            out.insert(v.1.clone());
            acc += v.0.tokens();
        }
        if n > 0 {
            if let Some(v) = visible.iter().rev().find(|v| v.0.role == Role::User) {
                out.insert(v.1.clone());
            }
        }
        out
    }

    /// Each message of the zone with the first rule that holds it (count, tokens, user).
    fn rules_by_hand(items: &[(Core<'_>, Slot, bool)], cfg: &NoaConfig) -> Vec<(Slot, SoftRule)> {
        let visible: Vec<&(Core<'_>, Slot, bool)> = items
            .iter()
            .filter(|(c, slot, covered)| {
                !*covered && slot.is_ref() && !c.is_summary() && !never_preserve_recent(c)
            })
            .collect();
        let n = cfg.protect_recent_messages;
        let by_count: Vec<&Slot> = visible[visible.len().saturating_sub(n)..]
            .iter()
            .map(|v| &v.1)
            .collect();
        let mut by_tokens = Vec::new();
        let mut acc = 0;
        for v in visible.iter().rev() {
            if cfg.protect_recent_tokens == 0 || acc >= cfg.protect_recent_tokens {
                break;
            }
            by_tokens.push(&v.1);
            acc += v.0.tokens();
        }
        let user = (n > 0)
            .then(|| visible.iter().rev().find(|v| v.0.role == Role::User))
            .flatten()
            .map(|v| &v.1);
        visible
            .iter()
            .filter_map(|v| {
                let rule = if by_count.contains(&&v.1) {
                    SoftRule::Count
                } else if by_tokens.contains(&&v.1) {
                    SoftRule::Tokens
                } else if user == Some(&v.1) {
                    SoftRule::User
                } else {
                    return None;
                };
                Some((v.1.clone(), rule))
            })
            .collect()
    }

    #[test]
    fn the_zone_read_from_the_end_is_the_zone_by_its_rules() {
        let mut seed = 7u64;
        let mut next = move |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for round in 0..300 {
            let len = next(30) as usize;
            let items: Vec<(Core<'static>, Slot, bool)> = (0..len)
                .map(|i| {
                    let text = "x".repeat(next(400) as usize);
                    let mut c = Core::synthetic("h_0", text, crate::noa::content::Origin::Nudge);
                    match next(4) {
                        0 => c.role = Role::User,
                        1 => {
                            c.role = Role::Tool;
                            c.tool = "Bash";
                        }
                        2 => {
                            c.role = Role::Tool;
                            c.tool = "Edit";
                        }
                        _ => c.role = Role::Assistant,
                    }
                    let slot = if next(8) == 0 {
                        Slot::None
                    } else {
                        Slot::Num(i as u32 + 1)
                    };
                    (c, slot, next(6) == 0)
                })
                .collect();
            let cfg = NoaConfig {
                protect_recent_messages: next(5) as usize,
                protect_recent_tokens: [0, 50, 300, 5000][next(4) as usize],
                ..NoaConfig::default()
            };
            let zone = soft_zone(
                items
                    .iter()
                    .rev()
                    .map(|(c, slot, covered)| (c, c.headed, slot, *covered, c.tokens())),
                &cfg,
            );
            assert_eq!(zone.slots(), zone_by_rules(&items, &cfg), "round {round}");
            for (slot, rule) in rules_by_hand(&items, &cfg) {
                assert_eq!(zone.rule_of(&slot), Some(rule), "round {round}: {slot:?}");
            }
            // The last user text, and the zone read knowing it.
            let last_user = items
                .iter()
                .rev()
                .find(|(c, slot, covered)| is_zone_user(c, c.headed, slot, *covered))
                .map(|(_, slot, _)| slot.clone());
            let want = (cfg.protect_recent_messages > 0).then(|| last_user.clone());
            assert_eq!(zone.user, want, "round {round}");
            let knowing = soft_zone_knowing(
                items
                    .iter()
                    .rev()
                    .map(|(c, slot, covered)| (c, c.headed, slot, *covered, c.tokens())),
                &cfg,
                Some(last_user),
            );
            assert_eq!(knowing, zone, "round {round}");
        }
    }
}
