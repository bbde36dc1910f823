//! Step 4 of the pipeline: Compress calls of live blocks stay with their summaries stubbed,
//! calls of other blocks go with their results, the last calls that made no block stay; and
//! what the blocks make of each call (kept per message by a grown turn).

use super::*;

/// The call ids of the state's blocks, and of its live blocks.
pub(super) fn block_calls<'s>(
    state: &'s State,
    active: &[bool],
) -> (FastSet<&'s str>, FastSet<&'s str>) {
    let (mut all, mut live) = (FastSet::default(), FastSet::default());
    for (i, b) in state.blocks().iter().enumerate() {
        if b.compress_call_id.is_empty() {
            continue;
        }
        all.insert(b.compress_call_id.as_str());
        if active.get(i).copied().unwrap_or(false) {
            live.insert(b.compress_call_id.as_str());
        }
    }
    (all, live)
}

/// [`MADE`] and [`LIVE`] of a core.
pub(super) fn call_facts(c: &Core<'_>, calls: &(FastSet<&str>, FastSet<&str>)) -> u8 {
    if !c.is_compress_call() {
        return 0;
    }
    let mut f = 0;
    if calls.0.contains(c.call) {
        f |= MADE;
    }
    if calls.1.contains(c.call) {
        f |= LIVE;
    }
    f
}

/// How many Compress calls that made no block stay in view (the last ones).
const KEEP_LAST_ORPHANED: usize = 2;
/// What a Compress call's summary arguments are cut to.
const SUMMARY_STUB_CHARS: usize = 200;

/// Step 4: Compress calls of live blocks stay with their summaries stubbed; calls of other
/// blocks go with their results; of the calls that made no block, the last two stay. Returns
/// the stubs it made.
pub(super) fn hide_compress_calls(t: &mut Turn<'_, '_>, state: &State) -> Vec<(u32, Edit)> {
    let any = t
        .items
        .iter()
        .any(|&p| t.core(p).kind == Kind::ToolCall && t.core(p).tool == COMPRESS_TOOL);
    if !any {
        return Vec::new();
    }
    // What the blocks make of each call: kept with a grown turn, or found now.
    let found = t.kept.is_none().then(|| block_calls(state, &t.active));
    let fact = |p: Pos| match (p, &t.kept, &found) {
        (Pos::Core(i), Some(k), _) => k.facts.get(i as usize).copied().unwrap_or(0),
        (Pos::Core(_), None, Some(calls)) => call_facts(t.core(p), calls),
        _ => 0,
    };
    // The last two calls that made no block stay (counted per call message).
    let mut orphans_kept: Vec<&str> = Vec::new();
    let mut kept = 0;
    for &p in t.items.iter().rev() {
        if kept >= KEEP_LAST_ORPHANED {
            break;
        }
        let c = t.core(p);
        if c.is_compress_call() && fact(p) & MADE == 0 {
            orphans_kept.push(c.call);
            kept += 1;
        }
    }
    let dropped: FastSet<&str> = t
        .items
        .iter()
        .filter(|&&p| {
            let c = t.core(p);
            c.is_compress_call() && fact(p) & LIVE == 0 && !orphans_kept.contains(&c.call)
        })
        .map(|&p| t.core(p).call)
        .collect();
    let mut edits = Vec::new();
    for &p in &t.items {
        let c = t.core(p);
        if !c.is_compress_call() || dropped.contains(c.call) {
            continue;
        }
        if let Pos::Core(i) = p {
            // Stubbed once per call while the projection's memo lasts.
            let stub = || stub_compress_arguments(&c.text.get()).map(Edit::new);
            let edit = match &c.cut {
                Some(cell) => cell.get_or_init(stub).clone(),
                None => stub(),
            };
            if let Some(edit) = edit {
                edits.push((i, edit));
            }
        }
    }
    if !dropped.is_empty() {
        t.items = t.items_where(&t.items, |c| c.call.is_empty() || !dropped.contains(c.call));
    }
    for (i, edit) in &edits {
        t.edits.insert(*i, edit.clone(), t.proj.len());
    }
    edits
}

/// A Compress call's arguments with every summary longer than 200 characters cut to 199 and
/// `…`; `None` when nothing changes or the arguments cannot be read (they are then kept as
/// they are). The rewrite is Go's re-encoding of a decoded object, as the runtime's.
pub fn stub_compress_arguments(text: &str) -> Option<String> {
    let brace = text.find('{')?;
    let (prefix, body) = text.split_at(brace);
    let mut obj: Value = serde_json::from_str(body).ok()?;
    let content = obj.as_object_mut()?.get_mut("content")?;
    let (mut list, was_string) = match content {
        Value::Array(a) => (std::mem::take(a), false),
        Value::String(s) => match serde_json::from_str::<Value>(s).ok()? {
            Value::Array(a) => (a, true),
            _ => return None,
        },
        _ => return None,
    };
    let mut changed = false;
    for item in &mut list {
        let Some(Value::String(s)) = item.as_object_mut().and_then(|m| m.get_mut("summary")) else {
            continue;
        };
        if s.chars().count() > SUMMARY_STUB_CHARS {
            let mut cut: String = s.chars().take(SUMMARY_STUB_CHARS - 1).collect();
            cut.push('…');
            *s = cut;
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    let list = Value::Array(list);
    *content = if was_string {
        Value::String(crate::format::gojson::marshal_go_any(&list))
    } else {
        list
    };
    Some(format!(
        "{prefix}{}",
        crate::format::gojson::marshal_go_any(&obj)
    ))
}
