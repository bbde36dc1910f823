//! Content messages (SPEC 2.5, 4.1): the one-per-content-block units noa works on, their raw
//! ids, and the projection of a transcript's messages into them.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::fasthash::{FastMap, FastSet};
use crate::format::transcript::{Content, Message, ToolResultContent};

/// The tool whose calls noa itself answers; always hard-protected.
pub const COMPRESS_TOOL: &str = "Compress";
/// The id prefix of a rendered summary (`noa_summary_b3`).
pub const SUMMARY_ID_PREFIX: &str = "noa_summary_";
/// The id of the injected nudge.
pub const NUDGE_ID: &str = "noa_nudge";
/// How every rendered summary starts.
pub const SUMMARY_HEADER: &str = "[Compressed conversation section]";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Text,
    Reasoning,
    ToolCall,
    ToolResult,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Text => "text",
            Kind::Reasoning => "reasoning",
            Kind::ToolCall => "tool-call",
            Kind::ToolResult => "tool-result",
        }
    }
}

/// Where a content message came from: a transcript content block, or noa itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Index of the message in the slice given to [`project`], and of the block in it.
    Block {
        msg: u32,
        block: u32,
    },
    /// A rendered summary: the index of its block in the state.
    Summary {
        block: u32,
    },
    Nudge,
}

/// A content message's ref: a number `m%05d`, another string found in the state, or the
/// hard-protected marker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Slot {
    None,
    Blocked,
    Num(u32),
    /// A ref recorded in the state that is not `m` + five digits (kept as written).
    Other(Box<str>),
}

impl Slot {
    /// The ref as the state and the tags write it; `None` for no ref and for `BLOCKED`.
    pub fn name(&self) -> Option<Cow<'_, str>> {
        match self {
            Slot::Num(n) => Some(Cow::Owned(super::refs::format_ref(*n))),
            Slot::Other(s) => Some(Cow::Borrowed(s)),
            Slot::None | Slot::Blocked => None,
        }
    }

    /// The number of a canonical ref.
    pub fn number(&self) -> Option<u32> {
        match self {
            Slot::Num(n) => Some(*n),
            Slot::Other(s) => super::refs::parse_ref(s),
            Slot::None | Slot::Blocked => None,
        }
    }

    /// Whether the model can address it (a ref that is not `BLOCKED`).
    pub fn is_ref(&self) -> bool {
        matches!(self, Slot::Num(_) | Slot::Other(_))
    }
}

/// One content message (the runtime's "core message").
#[derive(Debug, Clone)]
pub struct Core<'a> {
    /// `h_` + 16 hex digits (+ `_N` for a repeat), or a summary's / the nudge's id.
    pub id: Cow<'a, str>,
    pub role: Role,
    pub kind: Kind,
    /// The body with any trailing ref tag stripped (a tool call: its input as stored).
    pub text: Cow<'a, str>,
    /// Tool name (calls, and results through the call they answer), else "".
    pub tool: &'a str,
    /// Tool call id (calls and results), else "".
    pub call: &'a str,
    pub origin: Origin,
}

impl Core<'_> {
    pub fn is_summary(&self) -> bool {
        matches!(self.origin, Origin::Summary { .. })
            && self.role == Role::User
            && self.kind == Kind::Text
            && self.text.starts_with(SUMMARY_HEADER)
    }

    pub fn is_synthetic(&self) -> bool {
        !matches!(self.origin, Origin::Block { .. })
    }

    /// Assistant text or a tool call: what a reasoning run belongs to.
    pub fn is_act(&self) -> bool {
        self.role == Role::Assistant && matches!(self.kind, Kind::Text | Kind::ToolCall)
    }

    pub fn is_compress_call(&self) -> bool {
        self.kind == Kind::ToolCall && self.tool == COMPRESS_TOOL && !self.call.is_empty()
    }

    /// Its token cost (SPEC 4.2).
    pub fn tokens(&self) -> u64 {
        super::tokens::count(&self.text)
    }
}

/// The first 8 bytes of SHA-256 of `role|type|callId|toolName|text`: a raw id's digits.
pub fn id_digest(role: Role, kind: Kind, call: &str, tool: &str, text: &str) -> u64 {
    let mut h = Sha256::new();
    for part in [role.as_str(), kind.as_str(), call, tool] {
        h.update(part.as_bytes());
        h.update(b"|");
    }
    h.update(text.as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// `h_` + the first 16 hex digits of SHA-256 of `role|type|callId|toolName|text`.
pub fn derive_id(role: Role, kind: Kind, call: &str, tool: &str, text: &str) -> String {
    id_text(id_digest(role, kind, call, tool, text), 0)
}

/// The id of the `n`-th occurrence (0: the first) of a digest.
pub fn id_text(digest: u64, n: u32) -> String {
    let mut id = String::with_capacity(24);
    let _ = write!(id, "h_{digest:016x}");
    if n > 0 {
        let _ = write!(id, "_{n}");
    }
    id
}

/// Tells repeats apart within one projection: the first occurrence of an id keeps it, the
/// later ones get `_1`, `_2`, ….
#[derive(Debug, Default, Clone)]
pub struct Repeats {
    seen: FastMap<u64, u32>,
}

impl Repeats {
    /// The id of the next occurrence of a digest.
    pub fn next(&mut self, digest: u64) -> String {
        let n = self.seen.entry(digest).or_insert(0);
        let id = id_text(digest, *n);
        *n += 1;
        id
    }
}

fn trailing_tag() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r#"(?:^|\n)<noa-ref[\t\n\x0C\r ]+id="m[0-9]{5}"[^>]*/>[\t\n\x0C\r ]*\z"#)
            .expect("a valid pattern")
    })
}

/// The body without the ref tag the runtime appends (only the trailing form, one separator).
pub fn strip_ref_tag(s: &str) -> Cow<'_, str> {
    if !s.contains("<noa-ref") {
        return Cow::Borrowed(s);
    }
    match trailing_tag().find(s) {
        Some(m) => Cow::Owned(format!("{}{}", &s[..m.start()], &s[m.end()..])),
        None => Cow::Borrowed(s),
    }
}

/// The index of the last compaction marker: a message whose only block is a
/// `compact_boundary`.
pub fn last_marker(msgs: &[&Message]) -> Option<usize> {
    msgs.iter().rposition(|m| is_marker(m))
}

pub fn is_marker(m: &Message) -> bool {
    m.content.len() == 1 && m.content[0].type_name() == "compact_boundary"
}

/// Tool names by call id, over every tool_use block of `msgs`.
pub fn tool_names<'a>(msgs: &[&'a Message]) -> FastMap<&'a str, &'a str> {
    let mut names = FastMap::default();
    for m in msgs {
        for c in &m.content {
            match c {
                Content::ToolUse(u) => {
                    names.insert(u.id.as_ref(), u.name.as_str());
                }
                Content::Other(v) if str_field(v, "type") == "tool_use" => {
                    names.insert(str_field(v, "id"), str_field(v, "name"));
                }
                _ => {}
            }
        }
    }
    names
}

/// A string field of a JSON object ("" when absent or not a string).
pub fn str_field<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A tool result's body: its nested non-empty text blocks joined by `\n`.
fn result_text<'a>(content: Option<&'a ToolResultContent>) -> Cow<'a, str> {
    match content {
        None => Cow::Borrowed(""),
        Some(ToolResultContent::Text(t)) => Cow::Borrowed(t),
        Some(ToolResultContent::Items(items)) => {
            let texts: Vec<&str> = items.iter().filter_map(nested_text).collect();
            match texts.as_slice() {
                [] => Cow::Borrowed(""),
                [one] => Cow::Borrowed(one),
                many => Cow::Owned(many.join("\n")),
            }
        }
    }
}

fn nested_text(c: &Content) -> Option<&str> {
    let t = match c {
        Content::Text(t) => t.text.as_str(),
        Content::Other(v) if str_field(v, "type") == "text" => str_field(v, "text"),
        _ => return None,
    };
    (!t.is_empty()).then_some(t)
}

fn value_result_text(v: &Value) -> Cow<'_, str> {
    let texts: Vec<&str> = match v.get("content") {
        Some(Value::Array(items)) => items
            .iter()
            .filter(|i| str_field(i, "type") == "text")
            .map(|i| str_field(i, "text"))
            .filter(|t| !t.is_empty())
            .collect(),
        Some(Value::String(s)) => vec![s.as_str()],
        _ => Vec::new(),
    };
    match texts.as_slice() {
        [] => Cow::Borrowed(""),
        [one] => Cow::Borrowed(one),
        many => Cow::Owned(many.join("\n")),
    }
}

/// The parts of a content message a block yields (before its id), or `None` for a block that
/// is no content message (a compaction marker, an unknown type).
pub fn block_core<'a>(
    role: &str,
    c: &'a Content,
    names: &FastMap<&'a str, &'a str>,
) -> Option<(Role, Kind, Cow<'a, str>, &'a str, &'a str)> {
    let user = role == "user";
    Some(match c {
        Content::Text(t) if user => (Role::User, Kind::Text, strip_ref_tag(&t.text), "", ""),
        Content::Text(t) => (
            Role::Assistant,
            Kind::Text,
            Cow::Borrowed(t.text.as_str()),
            "",
            "",
        ),
        Content::Thinking(t) => (
            Role::Assistant,
            Kind::Reasoning,
            Cow::Borrowed(t.thinking.as_str()),
            "",
            "",
        ),
        Content::ToolUse(u) => (
            Role::Assistant,
            Kind::ToolCall,
            Cow::Borrowed(u.input.get()),
            u.name.as_str(),
            u.id.as_ref(),
        ),
        Content::ToolResult(r) => {
            let call = r.tool_use_id.as_str();
            let text = match result_text(r.content.as_ref()) {
                Cow::Borrowed(t) => strip_ref_tag(t),
                Cow::Owned(t) => Cow::Owned(strip_ref_tag(&t).into_owned()),
            };
            let tool = names.get(call).copied().unwrap_or("");
            (Role::Tool, Kind::ToolResult, text, tool, call)
        }
        Content::CompactBoundary(_) => return None,
        // A known type whose fields did not fit: read what the runtime would read.
        Content::Other(v) => match str_field(v, "type") {
            "text" if user => (
                Role::User,
                Kind::Text,
                strip_ref_tag(str_field(v, "text")),
                "",
                "",
            ),
            "text" => (
                Role::Assistant,
                Kind::Text,
                Cow::Borrowed(str_field(v, "text")),
                "",
                "",
            ),
            "thinking" => (
                Role::Assistant,
                Kind::Reasoning,
                Cow::Borrowed(str_field(v, "thinking")),
                "",
                "",
            ),
            "tool_use" => {
                let input = match v.get("input") {
                    None | Some(Value::Null) => Cow::Borrowed(""),
                    Some(i) => Cow::Owned(i.to_string()),
                };
                let call = str_field(v, "id");
                (
                    Role::Assistant,
                    Kind::ToolCall,
                    input,
                    str_field(v, "name"),
                    call,
                )
            }
            "tool_result" => {
                let call = str_field(v, "tool_use_id");
                let text = match value_result_text(v) {
                    Cow::Borrowed(t) => strip_ref_tag(t),
                    Cow::Owned(t) => Cow::Owned(strip_ref_tag(&t).into_owned()),
                };
                let tool = names.get(call).copied().unwrap_or("");
                (Role::Tool, Kind::ToolResult, text, tool, call)
            }
            _ => return None,
        },
    })
}

/// What a projection keeps so that the projection of the same messages plus appended ones
/// computes ids for the appended ones only.
#[derive(Debug, Default, Clone)]
pub struct ProjectionMemo {
    /// Index of the first message after the last compaction marker.
    start: usize,
    /// Messages projected (from 0: the marker's slice starts at `start`).
    msgs: usize,
    /// The id of each content message, in order.
    ids: Vec<String>,
    repeats: Repeats,
    /// Call ids of tool results whose call was not found (a later call would rename them).
    unnamed: FastSet<String>,
}

/// The content messages of `msgs` after the last compaction marker, in order, with raw ids.
/// Origins index `msgs` itself.
pub fn project<'a>(msgs: &[&'a Message]) -> Vec<Core<'a>> {
    project_with(msgs, None).0
}

/// [`project`], reusing a memo of an earlier projection of a prefix of `msgs` (when it still
/// applies), and the memo of this one.
pub fn project_with<'a>(
    msgs: &[&'a Message],
    memo: Option<&'a ProjectionMemo>,
) -> (Vec<Core<'a>>, ProjectionMemo) {
    let start = last_marker(msgs).map_or(0, |i| i + 1);
    let tail = &msgs[start..];
    let names = tool_names(tail);
    let usable = memo.filter(|m| {
        m.start == start
            && m.msgs <= msgs.len()
            && m.unnamed
                .iter()
                .all(|call| !names.contains_key(call.as_str()))
    });
    let mut out = Vec::with_capacity(tail.len() * 2);
    let mut next = ProjectionMemo {
        start,
        ..ProjectionMemo::default()
    };
    let (mut reused, from) = match usable {
        Some(m) => {
            next.repeats = m.repeats.clone();
            next.unnamed = m.unnamed.clone();
            (m.ids.iter(), m.msgs)
        }
        None => ([].iter(), start),
    };
    for (mi, m) in msgs.iter().enumerate().skip(start) {
        for (bi, c) in m.content.iter().enumerate() {
            let Some((role, kind, text, tool, call)) = block_core(&m.role, c, &names) else {
                continue;
            };
            let id: Cow<'a, str> = if mi < from {
                match reused.next() {
                    Some(id) => Cow::Borrowed(id.as_str()),
                    None => Cow::Owned(next.repeats.next(id_digest(role, kind, call, tool, &text))),
                }
            } else {
                if kind == Kind::ToolResult && tool.is_empty() {
                    next.unnamed.insert(call.to_string());
                }
                Cow::Owned(next.repeats.next(id_digest(role, kind, call, tool, &text)))
            };
            out.push(Core {
                id,
                role,
                kind,
                text,
                tool,
                call,
                origin: Origin::Block {
                    msg: mi as u32,
                    block: bi as u32,
                },
            });
        }
    }
    next.msgs = msgs.len();
    next.ids = out.iter().map(|c| c.id.to_string()).collect();
    (out, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_only_one_trailing_tag() {
        assert_eq!(
            strip_ref_tag("hi\n<noa-ref id=\"m00001\" tokens=\"1\"/>"),
            "hi"
        );
        assert_eq!(strip_ref_tag("<noa-ref id=\"m00001\" tokens=\"1\"/>"), "");
        assert_eq!(strip_ref_tag("hi\n\n<noa-ref id=\"m00001\"/>\n"), "hi\n");
        assert_eq!(
            strip_ref_tag("<noa-ref id=\"m00001\"/> then text"),
            "<noa-ref id=\"m00001\"/> then text"
        );
        assert_eq!(
            strip_ref_tag("x <noa-ref id=\"m1\"/>"),
            "x <noa-ref id=\"m1\"/>"
        );
    }

    #[test]
    fn ids_hash_role_type_call_tool_text() {
        // sha256("user|text|||Refactor the authentication subsystem and keep it tested.")
        let id = derive_id(
            Role::User,
            Kind::Text,
            "",
            "",
            "Refactor the authentication subsystem and keep it tested.",
        );
        assert!(id.starts_with("h_") && id.len() == 18, "{id}");
        let mut r = Repeats::default();
        assert_eq!(r.next(0xab), "h_00000000000000ab");
        assert_eq!(r.next(0xab), "h_00000000000000ab_1");
        assert_eq!(r.next(0xab), "h_00000000000000ab_2");
        assert_eq!(r.next(0xcd), "h_00000000000000cd");
    }
}
