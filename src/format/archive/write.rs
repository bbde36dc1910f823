//! Writing an archive in the runtime's layout (with `call:` and `body_sha256:` as SPEC 2.4
//! says).

use super::*;

/// The label of a message without a ref.
pub(super) const UNADDRESSED: &str = "(unaddressed)";

/// Render an archive. With `call: None` and `with_body_sha256: false` the bytes are the
/// runtime's for the same input; the two normafs keys follow the runtime's keys.
pub fn render(a: &Archive, labels: Labels) -> String {
    let body = render_body(a, labels.text());
    let mut out = String::with_capacity(body.len() + 512);
    out.push_str("---\n");
    key(&mut out, "block", &a.block_id);
    key(&mut out, "tier", &a.tier.to_string());
    if !a.session.is_empty() {
        key(&mut out, "session", &a.session);
    }
    if !a.created.is_empty() {
        key(&mut out, "created", &a.created);
    }
    key(&mut out, "range", &format!("{}-{}", a.start_ref, a.end_ref));
    // The counts come from the entries themselves, so they cannot disagree with the body.
    let consumed: Vec<&str> = a
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::Block(b) => Some(b.block_id.as_str()),
            Entry::Message(_) => None,
        })
        .collect();
    let messages = a.entries.len() - consumed.len();
    if consumed.is_empty() {
        key(&mut out, "message_count", &messages.to_string());
    } else {
        key(
            &mut out,
            "consumed_blocks",
            &format!("[{}]", consumed.join(", ")),
        );
        key(&mut out, "loose_messages", &messages.to_string());
    }
    key(&mut out, "original_tokens", &a.original_tokens.to_string());
    if !a.topic.is_empty() {
        key(&mut out, "topic", &a.topic);
    }
    if let Some(call) = &a.call {
        key(&mut out, "call", call);
    }
    if a.with_body_sha256 {
        key(&mut out, "body_sha256", &sha256_hex(body.as_bytes()));
    }
    out.push_str("---\n");
    out.push_str(&body);
    out
}

/// One `key: value` frontmatter line. A value is one line: a line break in it (a topic
/// given with one; the runtime writes it as it is, leaving a frontmatter no reader can take
/// apart) is written as a space.
pub(super) fn key(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    out.push_str(": ");
    if value.contains(['\n', '\r']) {
        out.push_str(&value.replace(['\n', '\r'], " "));
    } else {
        out.push_str(value);
    }
    out.push('\n');
}

/// Everything after the closing `---` line (what `body_sha256` covers).
pub(super) fn render_body(a: &Archive, l: &LabelText) -> String {
    let mut out = String::new();
    out.push('\n');
    out.push_str("# ");
    out.push_str(l.title);
    out.push(' ');
    span_line(&mut out, &a.block_id, a.tier, &a.start_ref, &a.end_ref);
    out.push('\n');
    let summary = a.summary.trim();
    if !summary.is_empty() {
        out.push_str(l.summary);
        out.push_str("\n\n");
        for line in summary.split('\n') {
            out.push_str("> ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str("---\n\n");
    // With absorbed blocks at level 2, loose messages go one level down.
    let level = if a.entries.iter().any(|e| matches!(e, Entry::Block(_))) {
        "###"
    } else {
        "##"
    };
    for e in &a.entries {
        match e {
            Entry::Block(b) => block_entry(&mut out, b, l),
            Entry::Message(m) => message_entry(&mut out, m, level),
        }
    }
    out
}

/// `b3 · Tier 1 · m00010–m00042` and a line break: the title's and a block heading's tail.
pub(super) fn span_line(out: &mut String, block_id: &str, tier: i64, start: &str, end: &str) {
    out.push_str(block_id);
    out.push_str(" · Tier ");
    out.push_str(&tier.to_string());
    out.push_str(" · ");
    out.push_str(start);
    out.push('–');
    out.push_str(end);
    out.push('\n');
}

/// Messages rendered as a tier-1 archive's entries (`raw/` files show ranges this way).
pub fn render_messages(entries: &[MessageEntry]) -> String {
    let mut out = String::new();
    for m in entries {
        message_entry(&mut out, m, "##");
    }
    out
}

pub(super) fn block_entry(out: &mut String, b: &BlockEntry, l: &LabelText) {
    out.push_str("## ");
    span_line(out, &b.block_id, b.tier, &b.start_ref, &b.end_ref);
    out.push('\n');
    if !b.topic.is_empty() {
        out.push_str("**");
        out.push_str(&b.topic);
        out.push_str("**\n\n");
    }
    let summary = b.summary.trim();
    if !summary.is_empty() {
        out.push_str(summary);
        out.push_str("\n\n");
    }
    if !b.archive_rel.is_empty() {
        // The link is followed from a `tier<N>/` file, one directory below the root.
        let link = if b.archive_rel.contains('/') {
            format!("../{}", b.archive_rel)
        } else {
            b.archive_rel.clone()
        };
        out.push_str(l.child);
        out.push_str("[`");
        out.push_str(&b.archive_rel);
        out.push_str("`](");
        out.push_str(&link);
        out.push_str(")\n");
    }
    if !b.archive_path.is_empty() {
        out.push_str(l.absolute);
        out.push('`');
        out.push_str(&b.archive_path);
        out.push_str("`\n");
    }
    out.push('\n');
}

pub(super) fn message_entry(out: &mut String, m: &MessageEntry, level: &str) {
    out.push_str(level);
    out.push(' ');
    out.push_str(m.reference.as_deref().unwrap_or(UNADDRESSED));
    out.push_str(" · ");
    match m.kind {
        MessageKind::Text | MessageKind::Thinking => {
            out.push_str(&m.role);
            if m.kind == MessageKind::Thinking {
                out.push_str(" · thinking");
            }
            out.push_str("\n\n");
            out.push_str(&m.text);
            out.push_str("\n\n");
        }
        MessageKind::ToolUse => {
            out.push_str(&m.role);
            out.push_str(" · tool_use · ");
            out.push_str(&m.tool);
            out.push_str("\n\n");
            fenced(out, &m.text, "json");
        }
        MessageKind::ToolResult => {
            out.push_str("tool_result · ");
            out.push_str(if m.tool.is_empty() { "tool" } else { &m.tool });
            out.push_str("\n\n");
            fenced(out, &m.text, "");
        }
    }
}

/// The length of the longest run of backticks in `s`.
pub(super) fn longest_backtick_run(s: &str) -> usize {
    let (mut longest, mut run) = (0, 0);
    for b in s.bytes() {
        run = if b == b'`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// `body` in a fence of backticks one longer than any run inside it, and at least three, so
/// that no line of the body can close it.
pub(super) fn fenced(out: &mut String, body: &str, info: &str) {
    let fence = "`".repeat((longest_backtick_run(body) + 1).max(3));
    out.push_str(&fence);
    out.push_str(info);
    out.push('\n');
    out.push_str(body);
    if !body.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&fence);
    out.push_str("\n\n");
}
