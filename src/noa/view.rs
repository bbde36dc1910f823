//! The projection (SPEC 4.3): what the model sees. [`materialize`] runs steps 1-5 (4.8);
//! [`project`] adds measuring, emergency truncation, the nudge and reassembly into
//! `view.jsonl` lines.

use std::any::Any;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use serde::Serialize;
use serde_json::{json, Value};

use crate::config::{NoaConfig, COMPRESS_TOOL};

/// Bytes kept at the head and at the tail of a truncated tool result.
const TRUNCATE_HEAD: usize = 1024;
const TRUNCATE_TAIL: usize = 512;
use crate::format::state::{Block, State};
use crate::format::transcript::{Content, Extra, ToolResultContent};
use crate::noa::refs::{self, RefAssignment};
use crate::noa::tokens;
use crate::noa::Msg;

/// One line of the view: a message, or the summary of a live block.
#[derive(Debug, Clone)]
pub enum Item<'a> {
    Msg(MsgItem<'a>),
    Block(BlockItem),
}

#[derive(Debug, Clone)]
pub struct MsgItem<'a> {
    /// Index of the message in the transcript's message list.
    pub msg: usize,
    /// The parts left after hiding consumed Compress calls (and truncation).
    pub content: Vec<Cow<'a, Content>>,
    pub tokens: u64,
    pub truncated: bool,
    /// Holds a hard-protected tool's call or result (never compressed or truncated).
    pub protected_tool: bool,
}

#[derive(Debug, Clone)]
pub struct BlockItem {
    /// Index of the block in `state.blocks`.
    pub block: usize,
    /// Messages this block replaces in the view, ascending.
    pub covered: Vec<usize>,
    pub tokens: u64,
    /// The summary message's text.
    pub text: String,
}

impl Item<'_> {
    pub fn tokens(&self) -> u64 {
        match self {
            Item::Msg(m) => m.tokens,
            Item::Block(b) => b.tokens,
        }
    }
}

/// Steps 1-5 of the projection: the pruned message list and what led to it.
#[derive(Debug, Clone)]
pub struct Materialized<'a> {
    pub msgs: &'a [Msg<'a>],
    pub state: &'a State,
    pub refs: RefAssignment,
    /// Tokens of each whole message: the frozen value when recorded, else the estimate.
    pub msg_tokens: Vec<u64>,
    /// Whether each block of `state.blocks` is live (active, every message present).
    pub live: Vec<bool>,
    pub items: Vec<Item<'a>>,
    /// Messages dropped because only consumed Compress calls were in them.
    pub hidden: Vec<usize>,
    /// The item showing each message (a block item for covered ones), `None` when hidden.
    pub item_of_msg: Vec<Option<usize>>,
    keys: MemoKeys,
}

/// The text of a block's summary message (SPEC 4.3).
pub fn summary_text(b: &Block) -> String {
    let mut s = format!(
        "[noa archive {} · tier {} · {}–{} · {} tokens]\n",
        b.block_id.name(),
        b.tier,
        b.start_ref,
        b.end_ref,
        b.compressed_tokens
    );
    if let Some(t) = b.topic.as_deref().filter(|t| !t.is_empty()) {
        s.push_str("topic: ");
        s.push_str(t);
        s.push('\n');
    }
    s.push_str(&b.summary);
    s.push('\n');
    s.push_str(&format!("archive: {} ({})", b.archive_rel, b.archive_path));
    s
}

/// Sort key of a block when two live blocks cover one message: lower tier, then lower number.
fn precedence(b: &Block, index: usize) -> (u32, u64, usize) {
    (b.tier, b.block_id.number().unwrap_or(u64::MAX), index)
}

/// tool_use id -> tool name, over all messages.
pub fn tool_names<'a>(msgs: &[Msg<'a>]) -> HashMap<&'a str, &'a str> {
    let mut names = HashMap::new();
    for m in msgs {
        for c in &m.message.content {
            if let Content::ToolUse(u) = c {
                names.entry(u.id.as_str()).or_insert(u.name.as_str());
            }
        }
    }
    names
}

/// Whether parts hold a call of a hard-protected tool or the result of one; `protected_id`
/// says whether a tool_use id is a call of one.
fn holds_protected_tool<'c>(
    parts: impl IntoIterator<Item = &'c Content>,
    protected_id: impl Fn(&str) -> bool,
    cfg: &NoaConfig,
) -> bool {
    parts.into_iter().any(|c| match c {
        Content::ToolUse(u) => cfg.is_protected_tool(&u.name),
        Content::ToolResult(r) => protected_id(&r.tool_use_id),
        _ => false,
    })
}

/// Tokens of a whole message: the frozen value of its ref when recorded, else the estimate.
fn msg_tokens_of(state: &State, r: &str, m: &Msg<'_>) -> u64 {
    state
        .token_snapshot
        .as_ref()
        .and_then(|t| t.by_ref.get(r).copied())
        .unwrap_or_else(|| tokens::message_tokens(m.message))
}

/// The ids of the Compress calls that made blocks (step 5 hides them).
fn consumed_calls(state: &State) -> HashSet<&str> {
    state
        .blocks
        .iter()
        .map(|b| b.compress_call_id.as_str())
        .filter(|id| !id.is_empty())
        .collect()
}

/// Step 5 for message `i`, outside live blocks: its parts without consumed Compress calls and
/// their results; `None` when that leaves nothing.
fn msg_item<'a>(
    i: usize,
    m: &Msg<'a>,
    msg_tokens: u64,
    consumed: &HashSet<&str>,
    protected_id: impl Fn(&str) -> bool,
    cfg: &NoaConfig,
) -> Option<MsgItem<'a>> {
    let mut removed = false;
    let content: Vec<Cow<'a, Content>> = m
        .message
        .content
        .iter()
        .filter(|c| {
            let hide = match c {
                Content::ToolUse(u) => consumed.contains(u.id.as_str()),
                Content::ToolResult(r) => consumed.contains(r.tool_use_id.as_str()),
                _ => false,
            };
            removed |= hide;
            !hide
        })
        .map(Cow::Borrowed)
        .collect();
    if removed && content.is_empty() {
        return None;
    }
    let tokens = if removed {
        tokens::parts_tokens(content.iter().map(|c| c.as_ref()))
    } else {
        msg_tokens
    };
    let protected_tool =
        holds_protected_tool(content.iter().map(|c| c.as_ref()), protected_id, cfg);
    Some(MsgItem {
        msg: i,
        content,
        tokens,
        truncated: false,
        protected_tool,
    })
}

/// Steps 1-5 of SPEC 4.3 (= materialize, 4.8): project, assign refs, sync liveness, prune,
/// hide consumed Compress calls.
pub fn materialize<'a>(msgs: &'a [Msg<'a>], state: &'a State, cfg: &NoaConfig) -> Materialized<'a> {
    let refs = refs::assign(state, msgs);
    let msg_tokens: Vec<u64> = msgs
        .iter()
        .zip(&refs.per_msg)
        .map(|(m, r)| msg_tokens_of(state, r, m))
        .collect();

    // First message index of each raw id (a duplicated uuid is covered at its first place).
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        first.entry(m.raw_id).or_insert(i);
    }

    let mut missing = HashSet::new();
    let live: Vec<bool> = state
        .blocks
        .iter()
        .map(|b| {
            if !b.active {
                return false;
            }
            let absent: Vec<&String> = b
                .effective_message_ids
                .iter()
                .filter(|id| !first.contains_key(id.as_str()))
                .collect();
            let live = absent.is_empty();
            missing.extend(absent.into_iter().cloned());
            live
        })
        .collect();

    // Step 4: the winning live block of each covered message.
    let mut winner: Vec<Option<usize>> = vec![None; msgs.len()];
    for (bi, b) in state.blocks.iter().enumerate() {
        if !live[bi] {
            continue;
        }
        for id in &b.effective_message_ids {
            let Some(&mi) = first.get(id.as_str()) else {
                continue;
            };
            let slot = &mut winner[mi];
            match *slot {
                Some(cur) if precedence(&state.blocks[cur], cur) <= precedence(b, bi) => {}
                _ => *slot = Some(bi),
            }
        }
    }
    drop(first);

    let consumed = consumed_calls(state);
    let names = tool_names(msgs);
    let protected_id = |id: &str| names.get(id).is_some_and(|n| cfg.is_protected_tool(n));

    let mut items: Vec<Item<'a>> = Vec::with_capacity(msgs.len());
    let mut item_of_msg: Vec<Option<usize>> = vec![None; msgs.len()];
    let mut item_of_block: Vec<Option<usize>> = vec![None; state.blocks.len()];
    let mut hidden = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        if let Some(bi) = winner[i] {
            let ii = match item_of_block[bi] {
                Some(ii) => ii,
                None => {
                    let text = summary_text(&state.blocks[bi]);
                    items.push(Item::Block(BlockItem {
                        block: bi,
                        covered: Vec::new(),
                        tokens: tokens::text_tokens(&text),
                        text,
                    }));
                    item_of_block[bi] = Some(items.len() - 1);
                    items.len() - 1
                }
            };
            if let Some(Item::Block(b)) = items.get_mut(ii) {
                b.covered.push(i);
            }
            item_of_msg[i] = Some(ii);
            continue;
        }
        match msg_item(i, m, msg_tokens[i], &consumed, protected_id, cfg) {
            Some(item) => {
                items.push(Item::Msg(item));
                item_of_msg[i] = Some(items.len() - 1);
            }
            None => hidden.push(i),
        }
    }
    let protected_ids = names
        .iter()
        .filter(|(_, n)| cfg.is_protected_tool(n))
        .map(|(id, _)| id.to_string())
        .collect();

    Materialized {
        msgs,
        state,
        refs,
        msg_tokens,
        live,
        items,
        hidden,
        item_of_msg,
        keys: MemoKeys {
            missing,
            protected_ids,
        },
    }
}

/// What [`materialize`] found that a [`Memo`] needs to extend its result.
#[derive(Debug, Clone, Default)]
struct MemoKeys {
    /// Effective ids of active blocks that no message has (their blocks are dead).
    missing: HashSet<String>,
    /// tool_use ids whose first call is of a hard-protected tool.
    protected_ids: HashSet<String>,
}

/// An item of a [`Memo`]: what the item was before truncation, without borrowed parts.
#[derive(Debug, Clone)]
enum Kept {
    Msg {
        msg: usize,
        tokens: u64,
        /// Some parts were consumed Compress calls (hidden).
        removed: bool,
        protected_tool: bool,
    },
    Block(BlockItem),
}

/// What a view computation keeps so that the next one, after messages were only appended to the
/// transcript, redoes just the new messages (see [`project_memo`]): steps 1-5 for the first
/// `msgs` messages, and the `view.jsonl` lines of their items. Valid for one state (the `token`
/// given with it) and one configuration; the transcript's owner drops it when the transcript is
/// parsed again.
pub struct Memo {
    /// Weak: a memo does not keep a state alive; it still keeps its address from being reused.
    token: Weak<dyn Any + Send + Sync>,
    cfg: NoaConfig,
    /// Messages covered: those of complete lines when it was made.
    msgs: usize,
    per_msg: Vec<String>,
    new: Vec<usize>,
    /// The largest ref number given.
    max: u64,
    /// Hashes of the raw ids that got new refs (a later message repeating one shares its ref).
    fresh: HashSet<u64>,
    msg_tokens: Vec<u64>,
    live: Vec<bool>,
    keys: MemoKeys,
    items: Vec<Kept>,
    hidden: Vec<usize>,
    item_of_msg: Vec<Option<usize>>,
    /// Where the line of each item (no newline), untruncated, is in `base`, once serialized.
    lines: Vec<LineAt>,
    /// The `view.jsonl` bytes the lines are in (shared with whoever keeps that content).
    base: Option<Arc<Vec<u8>>>,
}

/// Where an item's `view.jsonl` line is: start and length in the bytes it was written to.
type LineAt = Option<(usize, usize)>;

/// A memo extended to more messages: the materialized view, its lines and their bytes.
type Extended<'a> = (Materialized<'a>, Vec<LineAt>, Option<Arc<Vec<u8>>>);

impl std::fmt::Debug for Memo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memo")
            .field("msgs", &self.msgs)
            .field("items", &self.items.len())
            .finish()
    }
}

fn id_hash(id: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

impl Memo {
    /// Steps 1-5 over `msgs`, from this memo: `None` when it does not apply (another state or
    /// configuration, fewer messages) or when the new messages could change earlier items (a
    /// dead block's missing message, a raw id repeating one with a new ref, a call of a
    /// hard-protected tool). Otherwise the very result of [`materialize`], and the lines kept.
    #[allow(clippy::type_complexity)]
    fn extend<'a>(
        self,
        msgs: &'a [Msg<'a>],
        state: &'a State,
        token: &Arc<dyn Any + Send + Sync>,
        cfg: &NoaConfig,
    ) -> Option<Extended<'a>> {
        if !Weak::ptr_eq(&self.token, &Arc::downgrade(token))
            || self.cfg != *cfg
            || msgs.len() < self.msgs
        {
            return None;
        }
        let added = msgs.get(self.msgs..)?;
        let changes_earlier = |m: &Msg<'_>| {
            self.keys.missing.contains(m.raw_id)
                || self.fresh.contains(&id_hash(m.raw_id))
                || m.message
                    .content
                    .iter()
                    .any(|c| matches!(c, Content::ToolUse(u) if cfg.is_protected_tool(&u.name)))
        };
        if added.iter().any(changes_earlier) {
            return None;
        }
        // Every live block's messages are in the prefix, so the new ones are not covered (a
        // repeated raw id is covered at its first place); liveness is unchanged, and so is
        // which tool_use ids are calls of protected tools.
        let mut refs = RefAssignment::of_prefix(self.per_msg, self.new);
        refs::extend(state, msgs, &mut refs, self.max);
        let mut msg_tokens = self.msg_tokens;
        for (i, m) in msgs.iter().enumerate().skip(self.msgs) {
            msg_tokens.push(msg_tokens_of(state, &refs.per_msg[i], m));
        }
        let consumed = consumed_calls(state);
        let mut items: Vec<Item<'a>> = Vec::with_capacity(self.items.len() + added.len());
        for kept in self.items {
            items.push(match kept {
                Kept::Block(b) => Item::Block(b),
                Kept::Msg {
                    msg,
                    tokens,
                    removed,
                    protected_tool,
                } => {
                    let parts = &msgs.get(msg)?.message.content;
                    let content = parts
                        .iter()
                        .filter(|c| {
                            !removed
                                || !match c {
                                    Content::ToolUse(u) => consumed.contains(u.id.as_str()),
                                    Content::ToolResult(r) => {
                                        consumed.contains(r.tool_use_id.as_str())
                                    }
                                    _ => false,
                                }
                        })
                        .map(Cow::Borrowed)
                        .collect();
                    Item::Msg(MsgItem {
                        msg,
                        content,
                        tokens,
                        truncated: false,
                        protected_tool,
                    })
                }
            });
        }
        let mut hidden = self.hidden;
        let mut item_of_msg = self.item_of_msg;
        let keys = self.keys;
        let protected_id = |id: &str| keys.protected_ids.contains(id);
        for (i, m) in msgs.iter().enumerate().skip(self.msgs) {
            match msg_item(i, m, msg_tokens[i], &consumed, protected_id, cfg) {
                Some(item) => {
                    items.push(Item::Msg(item));
                    item_of_msg.push(Some(items.len() - 1));
                }
                None => {
                    hidden.push(i);
                    item_of_msg.push(None);
                }
            }
        }
        let mat = Materialized {
            msgs,
            state,
            refs,
            msg_tokens,
            live: self.live,
            items,
            hidden,
            item_of_msg,
            keys,
        };
        Some((mat, self.lines, self.base))
    }
}

impl Materialized<'_> {
    /// Step 6: total projected tokens.
    pub fn total_tokens(&self) -> u64 {
        // Saturating: frozen token counts come from state.json and may be absurd.
        self.items
            .iter()
            .fold(0u64, |sum, it| sum.saturating_add(it.tokens()))
    }

    /// The ref of a message.
    pub fn ref_of(&self, msg: usize) -> &str {
        self.refs.per_msg.get(msg).map(String::as_str).unwrap_or("")
    }

    /// First and last ref an item stands for.
    pub fn item_span(&self, item: &Item<'_>) -> (String, String) {
        match item {
            Item::Msg(m) => (
                self.ref_of(m.msg).to_string(),
                self.ref_of(m.msg).to_string(),
            ),
            Item::Block(b) => {
                let blk = &self.state.blocks[b.block];
                (blk.start_ref.clone(), blk.end_ref.clone())
            }
        }
    }
}

/// Index of the first item of the protected tail (SPEC 4.5): the longer of the last
/// `protect_recent_messages` items and the shortest suffix reaching `protect_recent_tokens`.
pub fn protected_start(items: &[Item<'_>], cfg: &NoaConfig) -> usize {
    let by_count = items.len().saturating_sub(cfg.protect_recent_messages);
    if cfg.protect_recent_tokens == 0 {
        // The empty suffix already reaches zero tokens.
        return by_count;
    }
    let mut by_tokens = 0;
    let mut sum = 0u64;
    for (i, it) in items.iter().enumerate().rev() {
        sum = sum.saturating_add(it.tokens());
        if sum >= cfg.protect_recent_tokens {
            by_tokens = i;
            break;
        }
    }
    by_count.min(by_tokens)
}

/// The nudge appended to a view (SPEC 4.6).
#[derive(Debug, Clone, PartialEq)]
pub struct Nudge {
    /// `urgent`, `tier1`, `tier2` or `tier3`.
    pub kind: String,
    pub text: String,
}

/// The full projection: materialized items after truncation, with the nudge.
#[derive(Debug, Clone)]
pub struct View<'a> {
    pub mat: Materialized<'a>,
    /// Projected tokens measured before truncation (step 6).
    pub measured: u64,
    /// Projected tokens after truncation.
    pub projected: u64,
    pub protected_start: usize,
    pub nudge: Option<Nudge>,
    /// Tokens of each item before truncation.
    untruncated: Vec<u64>,
    /// Where the `view.jsonl` line of each untruncated item (no newline) is in `base`, once
    /// serialized: taken from a [`Memo`] and filled in by [`View::to_jsonl_shared`].
    lines: RefCell<Vec<LineAt>>,
    /// The bytes `lines` point into.
    base: RefCell<Option<Arc<Vec<u8>>>>,
}

/// Cut `s` to its first `head` and last `tail` bytes (on char boundaries) joined by the noa
/// marker; `None` when that would not make it shorter.
pub fn truncate_text(s: &str, head: usize, tail: usize) -> Option<String> {
    if s.len() <= head.saturating_add(tail) {
        return None;
    }
    let mut h = head.min(s.len());
    while !s.is_char_boundary(h) {
        h -= 1;
    }
    let mut t = s.len() - tail;
    while !s.is_char_boundary(t) {
        t += 1;
    }
    let removed = t.saturating_sub(h);
    let out = format!(
        "{}\n[… {removed} bytes truncated by noa …]\n{}",
        &s[..h],
        &s[t..]
    );
    (out.len() < s.len()).then_some(out)
}

/// A tool_result part with its text items truncated; `None` when nothing changed.
fn truncate_result(c: &Content, _cfg: &NoaConfig) -> Option<Content> {
    let Content::ToolResult(r) = c else {
        return None;
    };
    let cut = |t: &str| truncate_text(t, TRUNCATE_HEAD, TRUNCATE_TAIL);
    let content = match r.content.as_ref()? {
        ToolResultContent::Text(t) => ToolResultContent::Text(cut(t)?),
        ToolResultContent::Items(items) => {
            let mut changed = false;
            let items = items
                .iter()
                .map(|it| match it {
                    Content::Text(t) => match cut(&t.text) {
                        Some(s) => {
                            changed = true;
                            let mut t = t.clone();
                            t.text = s;
                            Content::Text(t)
                        }
                        None => it.clone(),
                    },
                    other => other.clone(),
                })
                .collect();
            if !changed {
                return None;
            }
            ToolResultContent::Items(items)
        }
    };
    let mut r = r.clone();
    r.content = Some(content);
    Some(Content::ToolResult(r))
}

/// Step 7: truncate tool results oldest first, outside the protected tail and protected tools,
/// until the total is at most the threshold. Returns the new total.
fn emergency_truncate(
    items: &mut [Item<'_>],
    protected_start: usize,
    mut total: u64,
    cfg: &NoaConfig,
) -> u64 {
    let threshold = cfg.truncate_threshold();
    for item in items.iter_mut().take(protected_start) {
        if total <= threshold {
            break;
        }
        let Item::Msg(m) = item else { continue };
        if m.protected_tool {
            continue;
        }
        for part in m.content.iter_mut() {
            if total <= threshold {
                break;
            }
            if let Some(new) = truncate_result(part, cfg) {
                let before = tokens::part_tokens(part);
                let after = tokens::part_tokens(&new);
                let saved = before.saturating_sub(after);
                *part = Cow::Owned(new);
                m.tokens = m.tokens.saturating_sub(saved);
                m.truncated = true;
                total = total.saturating_sub(saved);
            }
        }
    }
    total
}

/// Compressible benefit: tokens of message items before the protected tail, outside blocks and
/// protected tools. Also returns the first and last such ref.
fn benefit(mat: &Materialized<'_>, protected_start: usize) -> (u64, Option<(String, String)>) {
    let mut sum = 0u64;
    let mut span: Option<(String, String)> = None;
    for it in mat.items.iter().take(protected_start) {
        if let Item::Msg(m) = it {
            if m.protected_tool {
                continue;
            }
            sum = m.tokens.saturating_add(sum);
            let r = mat.ref_of(m.msg).to_string();
            match &mut span {
                Some((_, last)) => *last = r,
                None => span = Some((r.clone(), r)),
            }
        }
    }
    (sum, span)
}

/// Step 8 (SPEC 4.6): at most one nudge, by priority urgent > tier1 > tier2 > tier3.
fn decide_nudge(
    mat: &Materialized<'_>,
    measured: u64,
    projected: u64,
    protected_start: usize,
    cfg: &NoaConfig,
) -> Option<Nudge> {
    let window = cfg.window.max(1);
    let usage = measured as f64 / window as f64;
    let pct = (projected as f64 * 100.0 / window as f64).round() as u64;
    let nudge_state = &mat.state.nudge;
    let cadence = cfg.cadence();
    let grown = |since: u64| projected.saturating_sub(since) >= cadence;
    let (benefit, span) = benefit(mat, protected_start);
    let tool = COMPRESS_TOOL;
    let example = span
        .map(|(a, b)| format!(" (for example {a}–{b})"))
        .unwrap_or_default();

    if usage > cfg.truncate_ratio {
        return Some(Nudge {
            kind: "urgent".into(),
            text: format!(
                "[noa] URGENT: the context reached {measured} of {window} tokens, above the \
                 emergency threshold; old tool results were truncated (now {projected} tokens, \
                 {pct}%). Call {tool} now on older ranges{example}, with a summary of each."
            ),
        });
    }
    if usage >= cfg.floor_ratio && benefit >= cfg.min_benefit() {
        let in_pressure = usage >= cfg.pressure_ratio;
        if in_pressure || grown(nudge_state.last_per_message_nudge_tokens) {
            return Some(Nudge {
                kind: "tier1".into(),
                text: format!(
                    "[noa] Context at {pct}% of the window ({projected} of {window} tokens). About \
                     {benefit} tokens outside the protected tail can be compressed: call {tool} \
                     with ranges of older messages{example} and a summary of each."
                ),
            });
        }
    }
    for (tier, min_blocks) in [(2u32, cfg.tier2_min_blocks), (3u32, cfg.tier3_min_blocks)] {
        if tier > cfg.max_tier {
            break;
        }
        let lower: Vec<&Block> = mat
            .state
            .blocks
            .iter()
            .zip(&mat.live)
            .filter(|(b, live)| **live && b.tier == tier - 1)
            .map(|(b, _)| b)
            .collect();
        if lower.len() < min_blocks.max(1) {
            continue;
        }
        let since = nudge_state
            .last_shown_by_tier
            .as_ref()
            .and_then(|m| m.get(&tier.to_string()).copied())
            .unwrap_or(0);
        if !grown(since) {
            continue;
        }
        let first = lower.first().map(|b| b.start_ref.as_str()).unwrap_or("");
        let last = lower.last().map(|b| b.end_ref.as_str()).unwrap_or("");
        let ids: Vec<String> = lower.iter().map(|b| b.block_id.name()).collect();
        return Some(Nudge {
            kind: format!("tier{tier}"),
            text: format!(
                "[noa] {} live tier-{} blocks ({}). Consolidate them into a tier-{tier} block: call \
                 {tool} with one range spanning them ({first}–{last}) and one summary.",
                lower.len(),
                tier - 1,
                ids.join(", ")
            ),
        });
    }
    None
}

/// The whole projection (SPEC 4.3 steps 1-8).
pub fn project<'a>(msgs: &'a [Msg<'a>], state: &'a State, cfg: &NoaConfig) -> View<'a> {
    finish(materialize(msgs, state, cfg), Vec::new(), None, cfg)
}

/// [`project`], from what an earlier computation kept (see [`Memo`]): the same view, computed
/// for the new messages only when the memo applies. `token` stands for `state`: the same
/// allocation exactly when the state is the same. Keep the result's [`View::into_memo`] for
/// the next call.
pub fn project_memo<'a>(
    msgs: &'a [Msg<'a>],
    state: &'a State,
    token: &Arc<dyn Any + Send + Sync>,
    cfg: &NoaConfig,
    memo: Option<Memo>,
) -> View<'a> {
    match memo.and_then(|m| m.extend(msgs, state, token, cfg)) {
        Some((mat, lines, base)) => finish(mat, lines, base, cfg),
        None => project(msgs, state, cfg),
    }
}

/// Steps 6-8 after materializing.
fn finish<'a>(
    mut mat: Materialized<'a>,
    lines: Vec<LineAt>,
    base: Option<Arc<Vec<u8>>>,
    cfg: &NoaConfig,
) -> View<'a> {
    let measured = mat.total_tokens();
    let protected_start = protected_start(&mat.items, cfg);
    let untruncated = mat.items.iter().map(Item::tokens).collect();
    let projected = if measured > cfg.truncate_threshold() {
        emergency_truncate(&mut mat.items, protected_start, measured, cfg)
    } else {
        measured
    };
    let nudge = decide_nudge(&mat, measured, projected, protected_start, cfg);
    View {
        mat,
        measured,
        projected,
        protected_start,
        nudge,
        untruncated,
        lines: RefCell::new(lines),
        base: RefCell::new(base),
    }
}

#[derive(Serialize)]
struct MsgOut<'x> {
    role: &'x str,
    content: &'x [Cow<'x, Content>],
    #[serde(flatten)]
    extra: &'x Extra,
}

#[derive(Serialize)]
struct MsgLine<'x> {
    #[serde(rename = "ref")]
    reference: &'x str,
    message: MsgOut<'x>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
}

fn user_text(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}]})
}

impl View<'_> {
    /// `view.jsonl`: one JSON object per line (SPEC 4.3 step 9).
    pub fn to_jsonl(&self) -> Vec<u8> {
        self.to_jsonl_shared().as_ref().clone()
    }

    /// [`View::to_jsonl`], shared: the lines kept for the next view (see [`View::into_memo`])
    /// point into these bytes instead of holding a copy of them.
    pub fn to_jsonl_shared(&self) -> Arc<Vec<u8>> {
        let mat = &self.mat;
        let mut lines = self.lines.borrow_mut();
        lines.resize(mat.items.len(), None);
        let old = self.base.borrow_mut().take();
        let old: &[u8] = old.as_deref().map(Vec::as_slice).unwrap_or_default();
        let mut out = Vec::with_capacity(lines.iter().flatten().map(|&(_, n)| n + 1).sum());
        for (it, line) in mat.items.iter().zip(lines.iter_mut()) {
            let truncated = matches!(it, Item::Msg(m) if m.truncated);
            let start = out.len();
            match line.and_then(|(at, n)| old.get(at..at.checked_add(n)?)) {
                Some(l) if !truncated => out.extend_from_slice(l),
                _ => self.write_item(&mut out, it),
            }
            // A truncated item's line is not kept (its untruncated line was in `old`).
            *line = (!truncated).then(|| (start, out.len() - start));
            out.push(b'\n');
        }
        if let Some(n) = &self.nudge {
            // Serializing maps and strings into a Vec cannot fail.
            let _ = serde_json::to_writer(
                &mut out,
                &json!({"nudge": n.kind, "message": user_text(&n.text)}),
            );
            out.push(b'\n');
        }
        let out = Arc::new(out);
        *self.base.borrow_mut() = Some(out.clone());
        out
    }

    /// The line of one item, without its newline.
    fn write_item(&self, out: &mut Vec<u8>, it: &Item<'_>) {
        let mat = &self.mat;
        // Serializing maps and strings into a Vec cannot fail.
        let _ = match it {
            Item::Msg(m) => {
                let msg = mat.msgs[m.msg].message;
                serde_json::to_writer(
                    out,
                    &MsgLine {
                        reference: mat.ref_of(m.msg),
                        message: MsgOut {
                            role: &msg.role,
                            content: &m.content,
                            extra: &msg.extra,
                        },
                        truncated: m.truncated,
                    },
                )
            }
            Item::Block(b) => {
                let blk = &mat.state.blocks[b.block];
                serde_json::to_writer(
                    out,
                    &json!({
                        "block": blk.block_id.name(),
                        "tier": blk.tier,
                        "start": blk.start_ref,
                        "end": blk.end_ref,
                        "message": user_text(&b.text),
                    }),
                )
            }
        };
    }

    /// What to keep for the next [`project_memo`] with the same state (`token`) and
    /// configuration. `stable` is the number of messages read from complete lines: when some
    /// message is not (it comes from an unterminated last line, which may still change, and so
    /// may what was derived from it: a block it makes live, a tool its call names), nothing is
    /// kept.
    pub fn into_memo(
        self,
        token: Arc<dyn Any + Send + Sync>,
        cfg: &NoaConfig,
        stable: usize,
    ) -> Option<Memo> {
        let mat = self.mat;
        if stable != mat.msgs.len() {
            return None;
        }
        let mut lines = self.lines.into_inner();
        lines.resize(mat.items.len(), None);
        let base = self.base.into_inner();
        let items = mat
            .items
            .into_iter()
            .zip(&self.untruncated)
            .map(|(it, &tokens)| match it {
                Item::Block(b) => Kept::Block(b),
                Item::Msg(m) => Kept::Msg {
                    msg: m.msg,
                    tokens,
                    removed: mat
                        .msgs
                        .get(m.msg)
                        .is_some_and(|full| m.content.len() < full.message.content.len()),
                    protected_tool: m.protected_tool,
                },
            })
            .collect();
        let per_msg = mat.refs.per_msg;
        let new = mat.refs.new;
        let max = new
            .last()
            .and_then(|&i| refs::ref_number(per_msg.get(i)?))
            .unwrap_or_else(|| refs::recorded_max(mat.state));
        let fresh = new
            .iter()
            .filter_map(|&i| mat.msgs.get(i))
            .map(|m| id_hash(m.raw_id))
            .collect();
        let (msg_tokens, hidden, item_of_msg) = (mat.msg_tokens, mat.hidden, mat.item_of_msg);
        Some(Memo {
            token: Arc::downgrade(&token),
            cfg: cfg.clone(),
            msgs: stable,
            per_msg,
            new,
            max,
            fresh,
            msg_tokens,
            live: mat.live,
            keys: mat.keys,
            items,
            hidden,
            item_of_msg,
            lines,
            base,
        })
    }
}

impl View<'_> {
    /// `view.md`: the same view for people, a heading per line.
    pub fn to_markdown(&self) -> String {
        use crate::format::archive::{render_parts, Part};
        let mat = &self.mat;
        let mut out = String::new();
        for it in &mat.items {
            match it {
                Item::Msg(m) => {
                    let msg = mat.msgs[m.msg].message;
                    out.push_str(&format!("## {} · {}\n\n", mat.ref_of(m.msg), msg.role));
                    let parts: Vec<Part> =
                        m.content.iter().map(|c| Part::from_content(c)).collect();
                    out.push_str(&render_parts(&parts));
                }
                Item::Block(b) => {
                    let blk = &mat.state.blocks[b.block];
                    out.push_str(&format!(
                        "## {} · tier {} · {}–{}\n\n{}\n\n",
                        blk.block_id.name(),
                        blk.tier,
                        blk.start_ref,
                        blk.end_ref,
                        b.text
                    ));
                }
            }
        }
        if let Some(n) = &self.nudge {
            out.push_str(&format!("## nudge · {}\n\n{}\n\n", n.kind, n.text));
        }
        out
    }

    /// The usage band of the measured tokens: `below-floor`, `floor`, `pressure`, `emergency`.
    pub fn band(&self, cfg: &NoaConfig) -> &'static str {
        let usage = self.measured as f64 / cfg.window.max(1) as f64;
        if usage > cfg.truncate_ratio {
            "emergency"
        } else if usage >= cfg.pressure_ratio {
            "pressure"
        } else if usage >= cfg.floor_ratio {
            "floor"
        } else {
            "below-floor"
        }
    }
}

/// Why a raw range cannot be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RawError {
    #[error("unknown ref {0}")]
    UnknownRef(String),
    #[error("range {0}..{1} ends before it starts")]
    Reversed(String, String),
}

/// `raw/<start>-<end>.md`: every raw transcript message from `start` to `end`, rendered like an
/// archive body (untruncated, hidden and compressed messages included).
pub fn raw_range(
    msgs: &[Msg<'_>],
    refs: &RefAssignment,
    start: &str,
    end: &str,
) -> Result<String, RawError> {
    use crate::format::archive::{render_entries, Entry};
    let s = refs
        .msg_of(start)
        .ok_or_else(|| RawError::UnknownRef(start.to_string()))?;
    let e = refs
        .msg_of(end)
        .ok_or_else(|| RawError::UnknownRef(end.to_string()))?;
    if s > e {
        return Err(RawError::Reversed(start.to_string(), end.to_string()));
    }
    let entries: Vec<Entry> = (s..=e)
        .map(|i| Entry::raw(&refs.per_msg[i], msgs[i].message, msgs[i].timestamp))
        .collect();
    Ok(format!(
        "# Raw {start}–{end}\n\n{}",
        render_entries(&entries)
    ))
}
