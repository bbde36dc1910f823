//! The runtime's panel: the tool result of a Compress call, and the count of blocks a panel
//! reports.

use super::*;

/// The runtime's panel: the tool result of a Compress call.
pub fn panel(a: &Applied, before: u64) -> String {
    let mut s = String::new();
    if a.created.is_empty() {
        s.push_str("▣ noa | 0 blocks created");
        if !a.errors.is_empty() {
            s.push('\n');
            for e in &a.errors {
                s.push_str(&format!("  error: {e}\n"));
            }
        }
        for w in &a.warnings {
            s.push_str(&format!("  warn: {w}\n"));
        }
        return s.trim_end_matches('\n').to_string();
    }
    let after = (before as i64 - a.tokens_compressed).max(0) as u64;
    s.push_str(&format!(
        "▣ noa | {} → {} tokens (~{} reclaimed)\n",
        tokens::format(before),
        tokens::format(after),
        tokens::format(before.saturating_sub(after))
    ));
    let covered: HashSet<&str> = a
        .created
        .iter()
        .flat_map(|b| b.effective_message_ids.iter().map(String::as_str))
        .collect();
    for b in &a.created {
        let star = if span_has_uncovered(b, &a.state, &covered) {
            "*"
        } else {
            ""
        };
        s.push_str(&format!(
            "  {}(T{})={}–{}{star} → {}\n",
            b.block_id, b.tier, b.start_ref, b.end_ref, b.archive_path
        ));
    }
    if !a.surviving.is_empty() {
        let parts: Vec<String> = a
            .surviving
            .iter()
            .map(
                |id| match a.state.blocks().iter().find(|b| &b.block_id == id) {
                    Some(b) => format!("{id}(T{})", b.tier),
                    None => id.clone(),
                },
            )
            .collect();
        s.push_str(&format!(
            "  note: {} was inside the requested range but was not consumed\n",
            parts.join(", ")
        ));
        s.push_str(
            "        (only the lowest tier present is absorbed). Compress that layer separately.\n",
        );
    }
    for e in &a.errors {
        s.push_str(&format!("  error: {e}\n"));
    }
    for w in &a.warnings {
        s.push_str(&format!("  warn: {w}\n"));
    }
    s.trim_end_matches('\n').to_string()
}

pub(super) fn span_has_uncovered(b: &Block, state: &State, covered: &HashSet<&str>) -> bool {
    let (Some(lo), Some(hi)) = (parse_ref(&b.start_ref), parse_ref(&b.end_ref)) else {
        return false;
    };
    state.message_refs.by_ref.iter().any(|(r, raw)| {
        parse_ref(r).is_some_and(|n| n >= lo && n <= hi) && !covered.contains(raw.as_str())
    })
}

/// How many blocks a panel reports (`bN(Tt)=` lines): the runtime's test of a successful
/// Compress call when it rebuilds.
pub fn panel_block_count(text: &str) -> usize {
    let b = text.as_bytes();
    let mut n = 0;
    let mut i = 0;
    while i < b.len() {
        // \bb\d+\(T\d+\)=
        if b[i] == b'b' && (i == 0 || !is_word(b[i - 1])) {
            let mut j = i + 1;
            let d0 = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j > d0 && b.get(j) == Some(&b'(') && b.get(j + 1) == Some(&b'T') {
                let mut k = j + 2;
                let t0 = k;
                while k < b.len() && b[k].is_ascii_digit() {
                    k += 1;
                }
                if k > t0 && b.get(k) == Some(&b')') && b.get(k + 1) == Some(&b'=') {
                    n += 1;
                    i = k + 2;
                    continue;
                }
            }
        }
        i += 1;
    }
    n
}

pub(super) fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}
