//! Compress (SPEC 4.4 steps 1-3 and the in-memory commit of step 6): validate a batch of ranges
//! against the current view, choose tiers, build the new blocks, their archive bytes and the
//! state that commits them. Writing files is the store's job.

use std::collections::{BTreeSet, HashMap};

use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::NoaConfig;

/// Fewest messages a range of a strict batch may cover.
pub const MIN_RANGE_MESSAGES: usize = 2;
use crate::format::archive::{self, ArchiveDoc, Entry, Frontmatter};
use crate::format::state::{Block, BlockId, State, TokenSnapshot};
use crate::format::transcript::Content;
use crate::noa::tokens;
use crate::noa::view::{self, Item, Materialized};
use crate::noa::Msg;

/// One range of a Compress call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeSpec {
    pub start: String,
    pub end: String,
    #[serde(default)]
    pub topic: Option<String>,
    pub summary: String,
}

/// The Compress tool's input (and the JSON form of the ctl command).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    pub ranges: Vec<RangeSpec>,
}

/// Why a batch was rejected. Every variant is a bad request (`EINVAL` at the mount).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompressError {
    #[error("bad compress input: {0}")]
    BadInput(String),
    #[error("no ranges to compress")]
    Empty,
    #[error("unknown ref {0}")]
    UnknownRef(String),
    #[error("range {start}..{end} ends before it starts")]
    Reversed { start: String, end: String },
    #[error("range {start}..{end} holds no message")]
    NoMessage { start: String, end: String },
    #[error(
        "range {start}..{end} overlaps or comes before the previous range {prev_start}..{prev_end}"
    )]
    Order {
        start: String,
        end: String,
        prev_start: String,
        prev_end: String,
    },
    #[error("range {start}..{end} touches the protected tail (it starts at {tail})")]
    ProtectedTail {
        start: String,
        end: String,
        tail: String,
    },
    #[error("range {start}..{end} holds {at}, a call or result of the protected tool {tool}")]
    ProtectedTool {
        start: String,
        end: String,
        at: String,
        tool: String,
    },
    #[error("range {start}..{end} covers {count} message(s); at least {min} required")]
    TooFew {
        start: String,
        end: String,
        count: usize,
        min: usize,
    },
    #[error("summary shorter than {0} characters")]
    SummaryTooShort(usize),
    #[error("summary ({summary} tokens) is not shorter than what it replaces ({covered} tokens)")]
    SummaryTooLong { summary: u64, covered: u64 },
}

/// Parse a batch from the tool's input (an object, or a string holding one).
pub fn parse_batch(input: &Value) -> Result<Batch, CompressError> {
    let parsed;
    let v = match input {
        Value::String(s) => {
            parsed = serde_json::from_str::<Value>(s)
                .map_err(|e| CompressError::BadInput(e.to_string()))?;
            &parsed
        }
        v => v,
    };
    let batch = Batch::deserialize(v).map_err(|e| CompressError::BadInput(e.to_string()))?;
    if batch.ranges.is_empty() {
        return Err(CompressError::Empty);
    }
    Ok(batch)
}

/// Everything a compress needs besides the batch.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// The messages of the transcript as it stands (for replay: before the call).
    pub msgs: &'a [Msg<'a>],
    pub state: &'a State,
    pub cfg: &'a NoaConfig,
    /// Live command: apply protection and size rules. Replay: structural checks only.
    pub strict: bool,
    /// The tool_use id, or `ctl-<uuid>`.
    pub call_id: &'a str,
    /// RFC 3339 time written into `createdAt` and the archives.
    pub now: &'a str,
    pub session: &'a str,
    /// Absolute path of the session's archive root (for `archivePath`).
    pub archive_root: &'a str,
}

/// One new block with its archive.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedBlock {
    pub block: Block,
    /// Names of the blocks it absorbed.
    pub absorbed: Vec<String>,
    /// Re-compression at the terminal tier (detail loss).
    pub terminal: bool,
    /// View tokens before minus after.
    pub tokens_saved: u64,
    /// Loose messages it covers directly.
    pub loose: usize,
    /// The archive file's bytes.
    pub archive: String,
}

impl PlannedBlock {
    /// The result entry of this block (ctl results and the journal).
    pub fn result_json(&self) -> Value {
        let b = &self.block;
        let mut v = json!({
            "block": b.block_id.name(),
            "tier": b.tier,
            "start": b.start_ref,
            "end": b.end_ref,
            "archive": b.archive_rel,
            "archivePath": b.archive_path,
            "compressedTokens": b.compressed_tokens,
            "tokensSaved": self.tokens_saved,
            "messages": b.effective_message_ids.len(),
            "absorbed": self.absorbed,
        });
        if self.terminal {
            v["note"] = json!("terminal recompress (detail loss)");
        }
        v
    }
}

/// A validated batch: the blocks to write and the state that commits them.
#[derive(Debug, Clone)]
pub struct Planned {
    pub blocks: Vec<PlannedBlock>,
    pub state: State,
}

/// The item showing message `mi`; a hidden message resolves to the next (`forward`) or the
/// previous shown item.
fn resolve(mat: &Materialized<'_>, mi: usize, forward: bool) -> Option<usize> {
    if forward {
        (mi..mat.msgs.len()).find_map(|i| mat.item_of_msg[i])
    } else {
        (0..=mi).rev().find_map(|i| mat.item_of_msg[i])
    }
}

/// Validate a batch and build its blocks (SPEC 4.4 steps 1-3) and the committed state (step 6,
/// in memory). Any failure rejects the whole batch.
pub fn plan(ctx: &Ctx<'_>, batch: &Batch) -> Result<Planned, CompressError> {
    if batch.ranges.is_empty() {
        return Err(CompressError::Empty);
    }
    let cfg = ctx.cfg;
    let mat = view::materialize(ctx.msgs, ctx.state, cfg);
    let tail = view::protected_start(&mat.items, cfg);

    // Where each tool call and each result is shown.
    let mut use_item: HashMap<&str, usize> = HashMap::new();
    let mut result_item: HashMap<&str, usize> = HashMap::new();
    for (ii, it) in mat.items.iter().enumerate() {
        if let Item::Msg(m) = it {
            for c in &m.content {
                match c.as_ref() {
                    Content::ToolUse(u) => {
                        use_item.entry(u.id.as_str()).or_insert(ii);
                    }
                    Content::ToolResult(r) => {
                        result_item.insert(r.tool_use_id.as_str(), ii);
                    }
                    _ => {}
                }
            }
        }
    }
    let names = view::tool_names(ctx.msgs);

    let mut spans: Vec<(usize, usize)> = Vec::new();
    for r in &batch.ranges {
        let sm = mat
            .refs
            .msg_of(&r.start)
            .ok_or_else(|| CompressError::UnknownRef(r.start.clone()))?;
        let em = mat
            .refs
            .msg_of(&r.end)
            .ok_or_else(|| CompressError::UnknownRef(r.end.clone()))?;
        if sm > em {
            return Err(CompressError::Reversed {
                start: r.start.clone(),
                end: r.end.clone(),
            });
        }
        let no_message = || CompressError::NoMessage {
            start: r.start.clone(),
            end: r.end.clone(),
        };
        let mut si = resolve(&mat, sm, true).ok_or_else(no_message)?;
        let mut ei = resolve(&mat, em, false).ok_or_else(no_message)?;
        if si > ei {
            return Err(no_message());
        }
        // Widen so that no tool_use/tool_result pair is split.
        loop {
            let (mut ns, mut ne) = (si, ei);
            for it in &mat.items[si..=ei] {
                let Item::Msg(m) = it else { continue };
                for c in &m.content {
                    match c.as_ref() {
                        Content::ToolUse(u) => {
                            if let Some(&ri) = result_item.get(u.id.as_str()) {
                                ne = ne.max(ri);
                            }
                        }
                        Content::ToolResult(res) => {
                            if let Some(&ui) = use_item.get(res.tool_use_id.as_str()) {
                                ns = ns.min(ui);
                            }
                        }
                        _ => {}
                    }
                }
            }
            if (ns, ne) == (si, ei) {
                break;
            }
            (si, ei) = (ns, ne);
        }
        if let Some(&(ps, pe)) = spans.last() {
            if si <= pe {
                let (prev_start, _) = mat.item_span(&mat.items[ps]);
                let (_, prev_end) = mat.item_span(&mat.items[pe]);
                return Err(CompressError::Order {
                    start: r.start.clone(),
                    end: r.end.clone(),
                    prev_start,
                    prev_end,
                });
            }
        }
        if ctx.strict {
            if ei >= tail {
                let (tail_ref, _) = mat.item_span(&mat.items[tail]);
                return Err(CompressError::ProtectedTail {
                    start: r.start.clone(),
                    end: r.end.clone(),
                    tail: tail_ref,
                });
            }
            for it in &mat.items[si..=ei] {
                if let Item::Msg(m) = it {
                    if m.protected_tool {
                        let tool = m
                            .content
                            .iter()
                            .find_map(|c| match c.as_ref() {
                                Content::ToolUse(u) if cfg.is_protected_tool(&u.name) => {
                                    Some(u.name.clone())
                                }
                                Content::ToolResult(res) => names
                                    .get(res.tool_use_id.as_str())
                                    .filter(|n| cfg.is_protected_tool(n))
                                    .map(|n| n.to_string()),
                                _ => None,
                            })
                            .unwrap_or_default();
                        return Err(CompressError::ProtectedTool {
                            start: r.start.clone(),
                            end: r.end.clone(),
                            at: mat.ref_of(m.msg).to_string(),
                            tool,
                        });
                    }
                }
            }
        }
        spans.push((si, ei));
    }

    let mut state = ctx.state.clone();
    let mut next = ctx.state.next_block_id.max(1);
    let mut planned = Vec::new();
    let first_of_raw: HashMap<&str, usize> = {
        let mut m = HashMap::with_capacity(ctx.msgs.len());
        for (i, msg) in ctx.msgs.iter().enumerate() {
            m.entry(msg.raw_id).or_insert(i);
        }
        m
    };

    for (r, &(si, ei)) in batch.ranges.iter().zip(&spans) {
        let mut loose: Vec<usize> = Vec::new();
        let mut inside: Vec<usize> = Vec::new();
        let mut replaced_tokens = 0u64;
        for it in &mat.items[si..=ei] {
            match it {
                Item::Msg(m) => loose.push(m.msg),
                Item::Block(b) => inside.push(b.block),
            }
        }
        let lowest = inside.iter().map(|&b| ctx.state.blocks[b].tier).min();
        let (tier, absorbed, terminal) = match lowest {
            None => (1, Vec::new(), false),
            Some(t) => {
                let absorbed: Vec<usize> = inside
                    .iter()
                    .copied()
                    .filter(|&b| ctx.state.blocks[b].tier == t)
                    .collect();
                (
                    t.saturating_add(1).min(cfg.max_tier),
                    absorbed,
                    t >= cfg.max_tier,
                )
            }
        };
        for it in &mat.items[si..=ei] {
            match it {
                Item::Msg(m) => replaced_tokens = replaced_tokens.saturating_add(m.tokens),
                Item::Block(b) if absorbed.contains(&b.block) => {
                    replaced_tokens = replaced_tokens.saturating_add(b.tokens)
                }
                Item::Block(_) => {}
            }
        }
        let mut effective: BTreeSet<usize> = loose.iter().copied().collect();
        for &b in &absorbed {
            for id in &ctx.state.blocks[b].effective_message_ids {
                if let Some(&mi) = first_of_raw.get(id.as_str()) {
                    effective.insert(mi);
                }
            }
        }
        let (Some(&first), Some(&last)) = (effective.first(), effective.last()) else {
            return Err(CompressError::NoMessage {
                start: r.start.clone(),
                end: r.end.clone(),
            });
        };
        // Saturating: frozen token counts come from state.json and may be absurd.
        let compressed: u64 = effective
            .iter()
            .fold(0u64, |sum, &mi| sum.saturating_add(mat.msg_tokens[mi]));
        if ctx.strict {
            if effective.len() < MIN_RANGE_MESSAGES {
                return Err(CompressError::TooFew {
                    start: r.start.clone(),
                    end: r.end.clone(),
                    count: effective.len(),
                    min: MIN_RANGE_MESSAGES,
                });
            }
            if r.summary.chars().count() < cfg.min_summary_chars {
                return Err(CompressError::SummaryTooShort(cfg.min_summary_chars));
            }
            let st = tokens::text_tokens(&r.summary);
            if st >= compressed {
                return Err(CompressError::SummaryTooLong {
                    summary: st,
                    covered: compressed,
                });
            }
        }

        let id = BlockId::from_number(next);
        next = next.checked_add(1).ok_or_else(|| {
            CompressError::BadInput(format!("nextBlockId {next} cannot be advanced"))
        })?;
        let start_ref = mat.ref_of(first).to_string();
        let end_ref = mat.ref_of(last).to_string();
        let name = id.name();
        // Refs come from state.json, which may be hostile: one holding `/` (`../../x`) would put
        // the archive outside its tier directory, an empty one or one with `-` or a line break
        // would not read back from the archive's `range`. Refs are letters and digits.
        for r in [&start_ref, &end_ref] {
            if r.is_empty() || !r.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(CompressError::BadInput(format!(
                    "ref {r:?} (from state.json) cannot name an archive; refs are letters and digits, like m0012"
                )));
            }
        }
        let rel = format!(
            "tier{tier}/{}",
            archive::file_name(&name, &start_ref, &end_ref)
        );
        let topic = r.topic.clone().filter(|t| !t.is_empty());
        let block = Block {
            block_id: id,
            tier,
            topic: topic.clone(),
            summary: r.summary.clone(),
            direct_message_ids: Some(
                loose
                    .iter()
                    .map(|&mi| ctx.msgs[mi].raw_id.to_string())
                    .collect(),
            ),
            effective_message_ids: effective
                .iter()
                .map(|&mi| ctx.msgs[mi].raw_id.to_string())
                .collect(),
            direct_block_ids: absorbed
                .iter()
                .map(|&b| ctx.state.blocks[b].block_id.clone())
                .collect(),
            archive_path: format!("{}/{rel}", ctx.archive_root.trim_end_matches('/')),
            archive_rel: rel,
            compressed_tokens: compressed,
            start_ref,
            end_ref,
            created_at: ctx.now.to_string(),
            active: true,
            compress_call_id: ctx.call_id.to_string(),
            extra: Default::default(),
        };

        // Archive: raw entries from the raw transcript, absorbed sections for tier >= 2, in
        // transcript order.
        let mut entries: Vec<(usize, Entry)> = loose
            .iter()
            .map(|&mi| {
                let m = &ctx.msgs[mi];
                (mi, Entry::raw(mat.ref_of(mi), m.message, m.timestamp))
            })
            .collect();
        for &b in &absorbed {
            let child = &ctx.state.blocks[b];
            let pos = child
                .effective_message_ids
                .iter()
                .filter_map(|id| first_of_raw.get(id.as_str()).copied())
                .min()
                .unwrap_or(usize::MAX);
            entries.push((
                pos,
                Entry::Absorbed {
                    block: child.block_id.name(),
                    tier: child.tier,
                    start: child.start_ref.clone(),
                    end: child.end_ref.clone(),
                    summary: child.summary.clone(),
                    link: format!("../{}", child.archive_rel),
                    path: format!(
                        "{}/{}",
                        ctx.archive_root.trim_end_matches('/'),
                        child.archive_rel
                    ),
                },
            ));
        }
        entries.sort_by_key(|(pos, _)| *pos);
        let doc = ArchiveDoc {
            front: Frontmatter {
                block: name,
                tier,
                start: block.start_ref.clone(),
                end: block.end_ref.clone(),
                original_tokens: compressed,
                session: Some(ctx.session.to_string()),
                created: Some(ctx.now.to_string()),
                topic,
                message_count: (tier == 1).then_some(loose.len() as u64),
                consumed_blocks: (tier >= 2).then(|| {
                    absorbed
                        .iter()
                        .map(|&b| ctx.state.blocks[b].block_id.name())
                        .collect()
                }),
                loose_messages: (tier >= 2).then_some(loose.len() as u64),
                call: Some(ctx.call_id.to_string()),
                body_sha256: None,
                extra: Vec::new(),
            },
            summary: r.summary.clone(),
            entries: entries.into_iter().map(|(_, e)| e).collect(),
        };
        let summary_tokens = tokens::text_tokens(&view::summary_text(&block));

        for &b in &absorbed {
            if let Some(blk) = state.blocks.get_mut(b) {
                blk.active = false;
            }
        }
        state.stats.tokens_compressed = state.stats.tokens_compressed.saturating_add(compressed);
        state.stats.compression_count = state.stats.compression_count.saturating_add(1);
        planned.push(PlannedBlock {
            absorbed: absorbed
                .iter()
                .map(|&b| ctx.state.blocks[b].block_id.name())
                .collect(),
            terminal,
            tokens_saved: replaced_tokens.saturating_sub(summary_tokens),
            loose: loose.len(),
            archive: archive::render(&doc),
            block,
        });
    }

    state.blocks.extend(planned.iter().map(|p| p.block.clone()));
    state.next_block_id = next;
    record_refs(&mut state, &mat);
    Ok(Planned {
        blocks: planned,
        state,
    })
}

/// Persist the refs and frozen token estimates of every message of the view's transcript.
pub fn record_refs(state: &mut State, mat: &Materialized<'_>) {
    let snapshot = state
        .token_snapshot
        .get_or_insert_with(TokenSnapshot::default);
    for (mi, r) in mat.refs.per_msg.iter().enumerate() {
        snapshot
            .by_ref
            .entry(r.clone())
            .or_insert(mat.msg_tokens[mi]);
    }
    for &mi in &mat.refs.new {
        let raw = mat.msgs[mi].raw_id.to_string();
        let r = mat.refs.per_msg[mi].clone();
        state
            .message_refs
            .by_raw
            .entry(raw.clone())
            .or_insert_with(|| r.clone());
        state.message_refs.by_ref.entry(r).or_insert(raw);
    }
}
