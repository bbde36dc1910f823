//! Reassembly (SPEC 4.4 step 8, 4.9): a turn's view rebuilt into provider messages as the
//! runtime sends them — blocks of one transcript message back together, ref tags on user
//! text and tool results, unpaired tool blocks and empty messages dropped — and their
//! `view.jsonl` / `materialized.jsonl` lines.
//!
//! Messages carry the runtime's message model only (its ten block fields, empty ones
//! omitted): what a provider receives, not the transcript's every field.

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::Value;

use super::content::{str_field, Core, Kind, Origin, Role, Slot};
use super::pipeline::{Pos, Turn};
use super::tokens;
use crate::format::state::State;
use crate::format::transcript::{Content, Message, ToolResultContent};

/// One content block in the runtime's model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Block<'a> {
    pub kind: Cow<'a, str>,
    pub text: Cow<'a, str>,
    pub thinking: Cow<'a, str>,
    pub signature: Cow<'a, str>,
    pub id: Cow<'a, str>,
    pub name: Cow<'a, str>,
    /// Raw JSON text; empty = absent.
    pub input: Cow<'a, str>,
    pub tool_use_id: Cow<'a, str>,
    pub content: Vec<Block<'a>>,
    pub is_error: bool,
}

impl<'a> Block<'a> {
    pub fn text(t: impl Into<Cow<'a, str>>) -> Block<'a> {
        Block {
            kind: Cow::Borrowed("text"),
            text: t.into(),
            ..Block::default()
        }
    }

    /// A transcript block as the runtime reads it (fields it does not know dropped).
    pub fn of(c: &'a Content) -> Block<'a> {
        let b = |s: &'a str| Cow::Borrowed(s);
        match c {
            Content::Text(t) => Block::text(b(&t.text)),
            Content::Thinking(t) => Block {
                kind: b("thinking"),
                thinking: b(&t.thinking),
                signature: t.signature.as_deref().map_or(Cow::Borrowed(""), b),
                ..Block::default()
            },
            Content::ToolUse(u) => Block {
                kind: b("tool_use"),
                id: b(&u.id),
                name: b(&u.name),
                input: b(u.input.get()),
                ..Block::default()
            },
            Content::ToolResult(r) => Block {
                kind: b("tool_result"),
                tool_use_id: b(&r.tool_use_id),
                content: match &r.content {
                    None => Vec::new(),
                    Some(ToolResultContent::Text(t)) => vec![Block::text(b(t))],
                    Some(ToolResultContent::Items(items)) => items.iter().map(Block::of).collect(),
                },
                is_error: r.is_error(),
                ..Block::default()
            },
            Content::CompactBoundary(p) => Block {
                kind: b("compact_boundary"),
                input: b(p.input.get()),
                ..Block::default()
            },
            Content::Other(v) => Block::of_value(v),
        }
    }

    fn of_value(v: &'a Value) -> Block<'a> {
        let s = |k: &str| Cow::Borrowed(str_field(v, k));
        Block {
            kind: s("type"),
            text: s("text"),
            thinking: s("thinking"),
            signature: s("signature"),
            id: s("id"),
            name: s("name"),
            input: match v.get("input") {
                None | Some(Value::Null) => Cow::Borrowed(""),
                Some(i) => Cow::Owned(i.to_string()),
            },
            tool_use_id: s("tool_use_id"),
            content: match v.get("content") {
                Some(Value::Array(items)) => items.iter().map(Block::of_value).collect(),
                _ => Vec::new(),
            },
            is_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"type\":");
        push_str(out, &self.kind);
        for (key, v) in [
            ("text", &self.text),
            ("thinking", &self.thinking),
            ("signature", &self.signature),
            ("id", &self.id),
            ("name", &self.name),
        ] {
            if !v.is_empty() {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(key.as_bytes());
                out.extend_from_slice(b"\":");
                push_str(out, v);
            }
        }
        if !self.input.is_empty() {
            out.extend_from_slice(b",\"input\":");
            out.extend_from_slice(self.input.as_bytes());
        }
        if !self.tool_use_id.is_empty() {
            out.extend_from_slice(b",\"tool_use_id\":");
            push_str(out, &self.tool_use_id);
        }
        if !self.content.is_empty() {
            out.extend_from_slice(b",\"content\":[");
            for (i, c) in self.content.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                c.write(out);
            }
            out.push(b']');
        }
        if self.is_error {
            out.extend_from_slice(b",\"is_error\":true");
        }
        out.push(b'}');
    }
}

/// A JSON string.
pub fn push_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// What a provider message stands for, for its `view.jsonl` line.
#[derive(Debug, Clone, PartialEq)]
pub enum Meta {
    /// A transcript message: the refs of its content, whether truncation cut it.
    Message {
        refs: Vec<Slot>,
        truncated: bool,
    },
    /// A block's summary.
    Summary {
        block: String,
        tier: i64,
        range: String,
    },
    Nudge(&'static str),
}

/// One provider message.
#[derive(Debug, Clone, PartialEq)]
pub struct Out<'a> {
    pub role: Cow<'a, str>,
    /// `None`: the runtime's `"content": null`.
    pub content: Option<Vec<Block<'a>>>,
    /// The ref of each block (parallel to `content`; `Slot::None` for none).
    pub slots: Vec<Slot>,
    pub meta: Meta,
}

impl Out<'_> {
    /// The message as the runtime serializes it.
    pub fn write_message(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"role\":");
        push_str(out, &self.role);
        out.extend_from_slice(b",\"content\":");
        match &self.content {
            None => out.extend_from_slice(b"null"),
            Some(blocks) => {
                out.push(b'[');
                for (i, b) in blocks.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    b.write(out);
                }
                out.push(b']');
            }
        }
        out.push(b'}');
    }

    /// Its `view.jsonl` line, newline included.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        match &self.meta {
            Meta::Message { refs, truncated } => {
                out.extend_from_slice(b"\"refs\":[");
                let mut first = true;
                for r in refs {
                    if let Some(name) = r.name() {
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        push_str(out, &name);
                    }
                }
                out.push(b']');
                if *truncated {
                    out.extend_from_slice(b",\"truncated\":true");
                }
            }
            Meta::Summary { block, tier, range } => {
                out.extend_from_slice(b"\"block\":");
                push_str(out, block);
                out.extend_from_slice(format!(",\"tier\":{tier},\"range\":").as_bytes());
                push_str(out, range);
            }
            Meta::Nudge(kind) => {
                out.extend_from_slice(b"\"nudge\":");
                push_str(out, kind);
            }
        }
        out.extend_from_slice(b",\"message\":");
        self.write_message(out);
        out.extend_from_slice(b"}\n");
    }
}

/// Go's `%q` for the plain strings tags carry.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\r' => q.push_str("\\r"),
            '\t' => q.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => q.push_str(&format!("\\x{:02x}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// The ref tag of a message: `<noa-ref id="m00042" tokens="1.2K"/>`, tool results with
/// `src="<tool>"`.
pub fn ref_tag(reference: &str, c: &Core<'_>, tokens: u64) -> String {
    let mut tag = format!(
        "<noa-ref id={} tokens={}",
        quote(reference),
        quote(&tokens::format(tokens))
    );
    let src = match c.kind {
        Kind::ToolCall | Kind::ToolResult if c.tool.is_empty() => "tool",
        Kind::ToolCall | Kind::ToolResult => c.tool,
        Kind::Text => "",
        Kind::Reasoning => "reasoning",
    };
    if !src.is_empty() {
        tag.push_str(&format!(" src={}", quote(src)));
    }
    tag.push_str("/>");
    tag
}

/// The result of reassembly.
#[derive(Debug, Default)]
pub struct Assembled<'a> {
    pub messages: Vec<Out<'a>>,
    /// Ref → token count of tags shown without a snapshot entry (frozen by the runtime).
    pub tagged: Vec<(String, i64)>,
}

impl Assembled<'_> {
    pub fn to_jsonl(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for m in &self.messages {
            m.write_line(&mut out);
        }
        out
    }
}

/// Rebuild a turn's view into provider messages; with `tags`, user text and tool results
/// carry their ref tags (counts from the state's snapshot; new ones are recorded).
pub fn assemble<'a>(
    t: &Turn<'_, 'a>,
    msgs: &[&'a Message],
    state: &State,
    tags: bool,
) -> Assembled<'a> {
    let mut tagged = Vec::new();
    let mut tag_body = |body: &str, c: &Core<'_>, slot: &Slot| -> String {
        if !tags {
            return body.to_string();
        }
        let Some(reference) = slot.name() else {
            return body.to_string();
        };
        let n = match state.token_snapshot.get(reference.as_ref()) {
            Some(&n) => n.max(0) as u64,
            None => {
                let n = tokens::count(body);
                tagged.push((reference.to_string(), n as i64));
                n
            }
        };
        let tag = ref_tag(&reference, c, n);
        if body.is_empty() {
            tag
        } else {
            format!("{body}\n{tag}")
        }
    };
    let mut out: Vec<Out<'a>> = Vec::new();
    let items = &t.items;
    let mut i = 0;
    while i < items.len() {
        let p = items[i];
        let c = t.core(p);
        let Origin::Block { msg, .. } = c.origin else {
            let meta = match c.origin {
                Origin::Summary { block } => {
                    let b = &state.blocks()[block as usize];
                    Meta::Summary {
                        block: b.block_id.clone(),
                        tier: b.tier,
                        range: format!("{}-{}", b.start_ref, b.end_ref),
                    }
                }
                _ => Meta::Nudge(
                    t.injected()
                        .and_then(|d| d.kind)
                        .map_or("gentle", |k| k.as_str()),
                ),
            };
            out.push(Out {
                role: Cow::Borrowed("user"),
                content: Some(vec![Block::text(t.text(p).to_string())]),
                slots: vec![Slot::None],
                meta,
            });
            i += 1;
            continue;
        };
        let mut j = i;
        let mut content = Vec::new();
        let mut slots = Vec::new();
        let mut truncated = false;
        let orig = msgs[msg as usize];
        while j < items.len() {
            let q = items[j];
            let cq = t.core(q);
            let Origin::Block { msg: m2, block } = cq.origin else {
                break;
            };
            if m2 != msg {
                break;
            }
            j += 1;
            let Some(src) = orig.content.get(block as usize) else {
                continue;
            };
            let mut b = Block::of(src);
            let body = t.text(q);
            let slot = t.slot(q);
            match cq.kind {
                Kind::Text => {
                    b.text = Cow::Owned(if cq.role == Role::User {
                        tag_body(body, cq, slot)
                    } else {
                        body.to_string()
                    });
                }
                Kind::Reasoning => b.thinking = Cow::Owned(body.to_string()),
                Kind::ToolCall => {
                    if body != b.input
                        && serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok()
                    {
                        b.input = Cow::Owned(body.to_string());
                    }
                }
                Kind::ToolResult => {
                    b.content = vec![Block::text(tag_body(body, cq, slot))];
                }
            }
            truncated |= t.is_truncated(q);
            content.push(b);
            slots.push(slot.clone());
        }
        i = j;
        if !content.is_empty() {
            out.push(Out {
                role: Cow::Borrowed(orig.role.as_ref()),
                content: Some(content),
                slots: slots.clone(),
                meta: Meta::Message {
                    refs: slots,
                    truncated,
                },
            });
        }
    }
    Assembled {
        messages: drop_empty(pair_tool_blocks(out)),
        tagged,
    }
}

/// Drop tool calls no result answers and results no call asked for (anywhere in the list);
/// messages left without content go.
pub fn pair_tool_blocks(msgs: Vec<Out<'_>>) -> Vec<Out<'_>> {
    let mut uses: HashSet<String> = HashSet::new();
    let mut results: HashSet<String> = HashSet::new();
    for m in &msgs {
        for b in m.content.iter().flatten() {
            match b.kind.as_ref() {
                "tool_use" => {
                    uses.insert(b.id.to_string());
                }
                "tool_result" => {
                    results.insert(b.tool_use_id.to_string());
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::with_capacity(msgs.len());
    for mut m in msgs {
        let blocks = m.content.take().unwrap_or_default();
        let mut kept = Vec::with_capacity(blocks.len());
        let mut kept_slots = Vec::with_capacity(blocks.len());
        for (b, s) in blocks
            .into_iter()
            .zip(m.slots.drain(..).chain(std::iter::repeat(Slot::None)))
        {
            let keep = match b.kind.as_ref() {
                "tool_use" => results.contains(b.id.as_ref()),
                "tool_result" => uses.contains(b.tool_use_id.as_ref()),
                _ => true,
            };
            if keep {
                kept.push(b);
                kept_slots.push(s);
            }
        }
        if kept.is_empty() {
            continue;
        }
        if let Meta::Message { refs, .. } = &mut m.meta {
            *refs = kept_slots.clone();
        }
        m.content = Some(kept);
        m.slots = kept_slots;
        out.push(m);
    }
    out
}

/// Drop messages without content, and assistant messages with no text, no tool call and no
/// thinking.
fn drop_empty(msgs: Vec<Out<'_>>) -> Vec<Out<'_>> {
    msgs.into_iter()
        .filter(|m| {
            let blocks = m.content.as_deref().unwrap_or(&[]);
            if blocks.is_empty() {
                return false;
            }
            if m.role == "assistant" {
                let text: usize = blocks
                    .iter()
                    .filter(|b| b.kind == "text")
                    .map(|b| b.text.len())
                    .sum();
                let acts = blocks
                    .iter()
                    .any(|b| b.kind == "tool_use" || b.kind == "thinking");
                return text > 0 || acts;
            }
            true
        })
        .collect()
}

/// The messages as they are (the materialized history of a session without live blocks):
/// every transcript message in the runtime's model.
pub fn verbatim<'a>(msgs: &[&'a Message], slots_of: impl Fn(usize) -> Vec<Slot>) -> Assembled<'a> {
    let messages = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let null = m.content.is_empty() && m.extra.get("content").is_some_and(Value::is_null);
            let refs = slots_of(i);
            Out {
                role: Cow::Borrowed(m.role.as_ref()),
                content: (!null).then(|| m.content.iter().map(Block::of).collect()),
                slots: refs.clone(),
                meta: Meta::Message {
                    refs,
                    truncated: false,
                },
            }
        })
        .collect();
    Assembled {
        messages,
        tagged: Vec::new(),
    }
}

/// Positions in order with the core each one holds (for callers that walk a view).
pub fn positions<'t, 'a>(t: &'t Turn<'_, 'a>) -> impl Iterator<Item = (Pos, &'t Core<'a>)> + 't {
    t.items.iter().map(move |&p| (p, t.core(p)))
}
