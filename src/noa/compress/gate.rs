//! Step C of a Compress batch: the batch's size gate (SPEC 4.5), and the message that says
//! why a batch too small is refused.

use super::resolve::{Ctx, EndKind};
use super::Requested;
use crate::config::NoaConfig;
use crate::format::state::Block;
use crate::noa::refs::{self, format_ref};

/// Why the batch is refused, when its live message ranges cover fewer characters than the
/// minimum (a range ending at a block is never too small).
pub(super) fn size_gate(
    ctx: &Ctx<'_, '_, '_>,
    entries: &[Requested],
    requested: usize,
    cfg: &NoaConfig,
    unknown: usize,
    consumed: usize,
    resolvable: usize,
) -> Option<String> {
    let min = cfg.min_range_chars;
    if min == 0 {
        return None;
    }
    let mut total = 0usize;
    let mut block_range = false;
    let mut live = 0;
    for (e, skipped) in entries {
        let Ok(rr) = e else { continue };
        if *skipped {
            continue;
        }
        live += 1;
        if rr.kind == EndKind::Block {
            block_range = true;
            continue;
        }
        for id in &rr.ids {
            if let Some(&i) = ctx.index.get(id.as_str()) {
                total += ctx.msgs[i].chars;
            }
        }
    }
    if block_range || total >= min {
        return None;
    }
    let state = ctx.state;
    let diagnostics = format!(
        "[diagnostics: session highest ref={}, unknown ranges in request={unknown}/{requested}, session history={} compression(s), {} block(s)]",
        format_ref(refs::highest_recorded(state).max(1)),
        state.stats.compression_count,
        state.blocks().len()
    );
    Some(if resolvable == 0 && consumed == 0 && unknown > 0 {
        format!(
            "None of the {requested} requested range(s) resolved — every ref is unknown to this session. \
             Refs are per-session snapshots, assigned once when a message is first rendered; no compression \
             reassigns them, so an unknown ref cannot have come from an earlier compression here. \
             Use the refs shown in the <noa-ref> tags of the current context. {diagnostics}"
        )
    } else if consumed > 0 {
        let active: Vec<&Block> = state.blocks().iter().filter(|b| b.active).collect();
        let hint = match (active.first(), active.last()) {
            (Some(a), Some(b)) => format!("Active blocks: {}..{}.", a.block_id, b.block_id),
            _ => String::new(),
        };
        format!(
            "Every requested range is already compressed — its content is covered by an active block. {hint} {diagnostics}"
        )
    } else {
        format!(
            "Total compressible content too small ({total} chars across {live} range(s), min {min}). \
             Combine more messages into fewer, larger ranges."
        )
    })
}
