//! Steps 2 and 3 of the pipeline: block liveness, and the prune (covered content out,
//! summaries in, then the repairs: reasoning kept with its turn, Compress exchanges whole,
//! orphans stripped).

use super::*;

/// Each id's first position in the projection.
pub(super) fn first_index<'c>(proj: &'c [Core<'_>]) -> FastMap<&'c str, u32> {
    let mut index = FastMap::with_capacity_and_hasher(proj.len(), Default::default());
    for (i, c) in proj.iter().enumerate() {
        index.entry(c.id.as_ref()).or_insert(i as u32);
    }
    index
}

/// Step 2: a block absorbed by another is inactive; any other is live iff any of its
/// effective messages is projected (its rendered summary never is).
pub(super) fn liveness(state: &State, index: &FastMap<&str, u32>) -> Vec<bool> {
    let absorbed: FastSet<&str> = state
        .blocks()
        .iter()
        .flat_map(|b| b.direct_block_ids.iter().map(String::as_str))
        .collect();
    state
        .blocks()
        .iter()
        .map(|b| {
            !absorbed.contains(b.block_id.as_str())
                && b.effective_message_ids
                    .iter()
                    .any(|id| index.contains_key(id.as_str()))
        })
        .collect()
}

/// Step 3: covered content out, summaries in, then the repairs; `covered` is what the live
/// blocks cover (not empty: nothing would be pruned).
pub(super) fn prune(
    t: &mut Turn<'_, '_>,
    state: &State,
    index: &FastMap<&str, u32>,
    archive_path: &dyn Fn(&Block) -> String,
    mut covered: FastSet<&str>,
) {
    let msgs: Vec<&Core<'_>> = t.proj.iter().collect();
    keep_reasoning_of_visible_turns(&msgs, &mut covered);
    keep_compress_pairs_whole(&msgs, &mut covered);
    let first_user = t.proj.iter().position(|c| c.role == Role::User);

    let mut anchors: Vec<(usize, i64, u32)> = Vec::new();
    for (bi, b) in state.blocks().iter().enumerate() {
        if !t.active[bi] {
            continue;
        }
        let at = b
            .effective_message_ids
            .iter()
            .filter_map(|id| index.get(id.as_str()))
            .min()
            .map_or(0, |&i| i as usize);
        anchors.push((at, block_number(&b.block_id), bi as u32));
    }
    anchors.sort_by_key(|&(at, n, _)| (at, n));

    let blocks = state.blocks();
    let mut items = Vec::with_capacity(t.proj.len() + anchors.len());
    let mut next = 0;
    for (i, c) in t.proj.iter().enumerate() {
        while next < anchors.len() && anchors[next].0 == i {
            let bi = anchors[next].2;
            t.synth.push(summary_core(
                bi,
                &blocks[bi as usize],
                &archive_path(&blocks[bi as usize]),
            ));
            items.push(Pos::Synth(t.synth.len() as u32 - 1));
            next += 1;
        }
        if Some(i) == first_user || !covered.contains(c.id.as_ref()) {
            items.push(Pos::Core(i as u32));
        }
    }
    for &(_, _, bi) in &anchors[next..] {
        t.synth.push(summary_core(
            bi,
            &blocks[bi as usize],
            &archive_path(&blocks[bi as usize]),
        ));
        items.push(Pos::Synth(t.synth.len() as u32 - 1));
    }
    t.items = items;
    strip_orphans(t);
}

/// A reasoning run whose turn keeps a visible act stays visible with it.
pub(super) fn keep_reasoning_of_visible_turns(msgs: &[&Core<'_>], covered: &mut FastSet<&str>) {
    for (reasoning, acts) in turns::runs(msgs) {
        if reasoning.is_empty() {
            continue;
        }
        if msgs[acts].iter().any(|c| !covered.contains(c.id.as_ref())) {
            for c in &msgs[reasoning] {
                covered.remove(c.id.as_ref());
            }
        }
    }
}

/// A Compress exchange is covered whole or not at all.
pub(super) fn keep_compress_pairs_whole(msgs: &[&Core<'_>], covered: &mut FastSet<&str>) {
    let mut calls: FastMap<&str, &str> = FastMap::default();
    let mut results: FastMap<&str, &str> = FastMap::default();
    let mut compress: Vec<&str> = Vec::new();
    for c in msgs {
        if c.kind == Kind::ToolCall && c.tool == COMPRESS_TOOL && !c.call.is_empty() {
            compress.push(c.call);
            calls.insert(c.call, c.id.as_ref());
        } else if c.kind == Kind::ToolResult && !c.call.is_empty() {
            results.insert(c.call, c.id.as_ref());
        }
    }
    for call in compress {
        let (Some(&cid), Some(&rid)) = (calls.get(call), results.get(call)) else {
            continue;
        };
        if covered.contains(cid) != covered.contains(rid) {
            covered.remove(cid);
            covered.remove(rid);
        }
    }
}

/// Tool calls without results (Compress aside), results without calls, and reasoning runs
/// not followed by an act go.
pub(super) fn strip_orphans(t: &mut Turn<'_, '_>) {
    let results: FastSet<&str> = t
        .items
        .iter()
        .map(|&p| t.core(p))
        .filter(|c| c.kind == Kind::ToolResult && !c.call.is_empty())
        .map(|c| c.call)
        .collect();
    let items = t.items_where(&t.items, |c| {
        c.kind != Kind::ToolCall
            || c.call.is_empty()
            || c.tool == COMPRESS_TOOL
            || results.contains(c.call)
    });
    let calls: FastSet<&str> = items
        .iter()
        .map(|&p| t.core(p))
        .filter(|c| c.kind == Kind::ToolCall && !c.call.is_empty())
        .map(|c| c.call)
        .collect();
    let items = t.items_where(&items, |c| {
        !(c.kind == Kind::ToolResult && !c.call.is_empty() && !calls.contains(c.call))
    });
    let mut keep = vec![true; items.len()];
    let mut i = 0;
    while i < items.len() {
        if t.core(items[i]).kind != Kind::Reasoning {
            i += 1;
            continue;
        }
        let start = i;
        while i < items.len() && t.core(items[i]).kind == Kind::Reasoning {
            i += 1;
        }
        if i >= items.len() || !t.core(items[i]).is_act() {
            keep[start..i].iter_mut().for_each(|k| *k = false);
        }
    }
    t.items = items
        .into_iter()
        .zip(keep)
        .filter_map(|(p, k)| k.then_some(p))
        .collect();
}
