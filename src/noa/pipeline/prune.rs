//! Steps 2 and 3 of the pipeline: block liveness, and the prune (covered content out,
//! summaries in, then the repairs: reasoning kept with its turn, Compress exchanges whole,
//! orphans stripped).

use super::*;

/// Step 2: a block absorbed by another is inactive; any other is live iff any of its
/// effective messages is projected (its rendered summary never is).
pub(super) fn liveness(state: &State, blocks: &ids::Blocks) -> Vec<bool> {
    let absorbed: FastSet<&str> = state
        .blocks()
        .iter()
        .flat_map(|b| b.direct_block_ids.iter().map(String::as_str))
        .collect();
    state
        .blocks()
        .iter()
        .enumerate()
        .map(|(bi, b)| {
            !absorbed.contains(b.block_id.as_str())
                && blocks.firsts(bi).iter().any(|&f| f != ids::NONE)
        })
        .collect()
}

/// Step 3: covered content out, summaries in, then the repairs; `covered` is what the live
/// blocks cover (some projected id: else nothing would be pruned).
pub(super) fn prune(
    t: &mut Turn<'_, '_>,
    state: &State,
    (ids, firsts): (&ids::Ids<'_>, &ids::Blocks),
    archive_path: &dyn Fn(&Block) -> String,
    mut covered: ids::Covered,
) {
    let msgs: Vec<&Core<'_>> = t.proj.iter().collect();
    keep_reasoning_of_visible_turns(&msgs, ids, &mut covered);
    keep_compress_pairs_whole(&msgs, ids, &mut covered);
    let first_user = t.proj.iter().position(|c| c.role == Role::User);

    let mut anchors: Vec<(usize, i64, u32)> = Vec::new();
    for (bi, b) in state.blocks().iter().enumerate() {
        if !t.active[bi] {
            continue;
        }
        let at = firsts
            .firsts(bi)
            .iter()
            .copied()
            .filter(|&f| f != ids::NONE)
            .min()
            .map_or(0, |i| i as usize);
        anchors.push((at, block_number(&b.block_id), bi as u32));
    }
    anchors.sort_by_key(|&(at, n, _)| (at, n));

    let blocks = state.blocks();
    let mut items = Vec::with_capacity(t.proj.len() + anchors.len());
    let mut next = 0;
    for i in 0..t.proj.len() {
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
        if Some(i) == first_user || !covered.contains(ids.first(i)) {
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

/// A reasoning run whose turn keeps a visible act stays visible with it (`msgs` are the
/// projection `ids` numbers).
pub(super) fn keep_reasoning_of_visible_turns(
    msgs: &[&Core<'_>],
    ids: &ids::Ids<'_>,
    covered: &mut ids::Covered,
) {
    for (reasoning, acts) in turns::runs(msgs) {
        if reasoning.is_empty() {
            continue;
        }
        if acts.clone().any(|i| !covered.contains(ids.first(i))) {
            for i in reasoning {
                covered.remove(ids.first(i));
            }
        }
    }
}

/// A Compress exchange is covered whole or not at all.
pub(super) fn keep_compress_pairs_whole(
    msgs: &[&Core<'_>],
    ids: &ids::Ids<'_>,
    covered: &mut ids::Covered,
) {
    let mut calls: FastMap<&str, usize> = FastMap::default();
    let mut results: FastMap<&str, usize> = FastMap::default();
    let mut compress: Vec<&str> = Vec::new();
    for (i, c) in msgs.iter().enumerate() {
        if c.kind == Kind::ToolCall && c.tool == COMPRESS_TOOL && !c.call.is_empty() {
            compress.push(c.call);
            calls.insert(c.call, i);
        } else if c.kind == Kind::ToolResult && !c.call.is_empty() {
            results.insert(c.call, i);
        }
    }
    for call in compress {
        let (Some(&ci), Some(&ri)) = (calls.get(call), results.get(call)) else {
            continue;
        };
        let (cid, rid) = (ids.first(ci), ids.first(ri));
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
