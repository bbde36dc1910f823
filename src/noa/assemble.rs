//! Reassembly (SPEC 4.4 step 8, 4.9): a turn's view rebuilt into provider messages as the
//! runtime sends them — blocks of one transcript message back together, ref tags on user
//! text and tool results, unpaired tool blocks and empty messages dropped — and their
//! `view.jsonl` / `materialized.jsonl` lines.
//!
//! Messages carry the runtime's message model only (its ten block fields, empty ones
//! omitted): what a provider receives, not the transcript's every field.

use std::borrow::Cow;

use serde_json::Value;

use super::content::{str_field, Core, Kind, Origin, Role, Slot, NO_PAIR};
use super::pipeline::{Pos, Turn};
use super::tokens;
use crate::format::cold::ColdStr;
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
    /// Appended to `text` when written (a ref tag and its separator): kept apart so that the
    /// body is not copied.
    pub suffix: String,
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
            Content::Text(t) => Block::text(t.text.get()),
            Content::Thinking(t) => Block {
                kind: b("thinking"),
                thinking: t.thinking.get(),
                signature: t.signature.as_ref().map_or(Cow::Borrowed(""), ColdStr::get),
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
            suffix: String::new(),
        }
    }

    /// The text as sent (body and suffix).
    pub fn full_text(&self) -> Cow<'_, str> {
        if self.suffix.is_empty() {
            Cow::Borrowed(&self.text)
        } else {
            Cow::Owned(format!("{}{}", self.text, self.suffix))
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"type\":");
        push_str(out, &self.kind);
        if !self.text.is_empty() || !self.suffix.is_empty() {
            out.extend_from_slice(b",\"text\":\"");
            escape_into(out, &self.text);
            escape_into(out, &self.suffix);
            out.push(b'"');
        }
        for (key, v) in [
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
    out.push(b'"');
    escape_into(out, s);
    out.push(b'"');
}

/// The JSON escape of `s`, without quotes: `"`, `\\` and control characters escaped (the
/// usual short forms where JSON has them), everything else as it is.
pub fn escape_into(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    /// The top bit of each byte of `w` (little-endian) that is a control character, `"` or
    /// `\\`, and maybe of bytes after the first such: the lowest bit set is always the first.
    #[inline]
    fn needs(w: u64) -> u64 {
        const LO: u64 = 0x0101_0101_0101_0101;
        const HI: u64 = 0x8080_8080_8080_8080;
        // A byte's borrow can only flag the bytes above it.
        let zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
        let below_space = w.wrapping_sub(LO * 0x20) & !w & HI;
        below_space | zero(w ^ (LO * b'"' as u64)) | zero(w ^ (LO * b'\\' as u64))
    }
    let b = s.as_bytes();
    out.reserve(b.len());
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        if i + 8 <= b.len() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            match needs(u64::from_le_bytes(w)) {
                0 => {
                    i += 8;
                    continue;
                }
                // Straight to the first byte to escape.
                m => i += (m.trailing_zeros() / 8) as usize,
            }
        }
        let c = b[i];
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => {
                out.extend_from_slice(&b[start..i]);
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(c >> 4) as usize]);
                out.push(HEX[(c & 0xf) as usize]);
                i += 1;
                start = i;
                continue;
            }
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&b[start..i]);
        out.extend_from_slice(esc);
        i += 1;
        start = i;
    }
    out.extend_from_slice(&b[start..]);
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

/// The ref tag of a message: `<noa-ref id="m00042" tokens="1.2K"/>`, tool results with
/// `src="<tool>"`.
pub fn ref_tag(reference: &str, c: &Core<'_>, tokens: u64) -> String {
    let mut tag = format!(
        "<noa-ref id={} tokens={}",
        crate::format::gojson::quote(reference),
        crate::format::gojson::quote(&tokens::format(tokens))
    );
    let src = match c.kind {
        Kind::ToolCall | Kind::ToolResult if c.tool.is_empty() => "tool",
        Kind::ToolCall | Kind::ToolResult => c.tool,
        Kind::Text => "",
        Kind::Reasoning => "reasoning",
    };
    if !src.is_empty() {
        tag.push_str(&format!(" src={}", crate::format::gojson::quote(src)));
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
    let mut messages = Vec::new();
    let tagged = each(t, msgs, state, tags, &mut |m, _| messages.push(m));
    Assembled { messages, tagged }
}

/// The tool blocks a turn's rebuilt list holds, by call-id number (`Core::pair`): (calls,
/// results). Every tool block comes from a view message, so this is known beforehand.
fn tool_pairs(t: &Turn<'_, '_>, items: &[Pos]) -> (Vec<bool>, Vec<bool>) {
    let (mut uses, mut results) = (Vec::<bool>::new(), Vec::<bool>::new());
    for &p in items {
        let c = t.core(p);
        let set = match c.kind {
            Kind::ToolCall => &mut uses,
            Kind::ToolResult => &mut results,
            _ => continue,
        };
        if c.pair != NO_PAIR {
            let k = c.pair as usize;
            if set.len() <= k {
                set.resize(k + 1, false);
            }
            set[k] = true;
        }
    }
    (uses, results)
}

/// The tags [`assemble`] would show without a snapshot entry (its `tagged`), without
/// building the messages: what a request records (the replay makes one per assistant
/// message, so this is its hot path).
pub fn fresh_tags(t: &Turn<'_, '_>, state: &State) -> Vec<(String, i64)> {
    let snapshot = &state.token_snapshot;
    // A grown turn's earlier cores showed their tags at the request before (which is over
    // the same blocks and the same pairs), and its new cores pair among themselves only:
    // only those can show a tag first.
    let from = t.kept.as_ref().map_or(0, |k| k.new_from);
    let first = t
        .items
        .iter()
        .rposition(|&p| matches!(p, Pos::Core(i) if i < from))
        .map_or(0, |k| k + 1);
    let items = &t.items[first..];
    let (uses, results) = tool_pairs(t, items);
    let has = |set: &[bool], pair: u32| set.get(pair as usize).copied().unwrap_or(false);
    let mut out = Vec::new();
    for &p in items {
        let c = t.core(p);
        if !matches!(c.origin, Origin::Block { .. }) {
            continue;
        }
        // A result no call in the view asked for is dropped with its tag; a user message is
        // never dropped as empty.
        let shown = match c.kind {
            Kind::ToolResult => has(&uses, c.pair),
            Kind::ToolCall => c.role == Role::User && has(&results, c.pair),
            _ => c.role == Role::User,
        };
        let slot = t.slot(p);
        if !shown || !slot.is_ref() {
            continue;
        }
        // Most tags of a request were shown before: their names are looked up without
        // being made.
        let mut buf = [0u8; 6];
        let known = match slot {
            Slot::Num(n) => snapshot.contains_key(super::refs::ref_name_in(*n, &mut buf)),
            other => other
                .name()
                .is_some_and(|name| snapshot.contains_key(name.as_ref())),
        };
        if known {
            continue;
        }
        let Some(name) = slot.name() else { continue };
        out.push((name.into_owned(), t.tokens(p) as i64));
    }
    out
}

/// A message's identity for reuse between views: equal keys, equal lines (a transcript
/// message is its index, the blocks kept with their refs, edits and tags; a message noa
/// writes is its text).
pub type LineKey = u64;

fn key_hasher() -> impl std::hash::Hasher {
    // A line is reused on an equal key alone: a hash of good quality, with a fixed seed so
    // that keys mean the same in every version.
    std::hash::BuildHasher::build_hasher(&foldhash::quality::FixedState::with_seed(0x6e6f_6d61))
}

/// The provider messages of a turn, one at a time, in order, each with its [`LineKey`]:
/// blocks of one transcript message rebuilt together, unpaired tool blocks and empty
/// messages dropped (as the runtime's reassembly does over the whole list: which calls and
/// results exist is known from the view beforehand). Returns the tags shown without a
/// snapshot entry.
pub fn each<'a>(
    t: &Turn<'_, 'a>,
    msgs: &[&'a Message],
    state: &State,
    tags: bool,
    sink: &mut dyn FnMut(Out<'a>, LineKey),
) -> Vec<(String, i64)> {
    each_wanted(t, msgs, state, tags, &|_| true, &mut |m, key| {
        if let Some(m) = m {
            sink(m, key)
        }
    })
}

/// [`each`], building a message only when `want` wants its key (else the sink gets `None`
/// and the key: a line the caller already has).
pub fn each_wanted<'a>(
    t: &Turn<'_, 'a>,
    msgs: &[&'a Message],
    state: &State,
    tags: bool,
    want: &dyn Fn(LineKey) -> bool,
    sink: &mut dyn FnMut(Option<Out<'a>>, LineKey),
) -> Vec<(String, i64)> {
    let pairs = ToolPairs::of(t);
    let whole = Part {
        range: 0..t.items.len(),
        pairs: &pairs,
    };
    each_wanted_in(t, msgs, state, tags, whole, want, sink)
}

/// Which pairs of a turn have a call and which a result (by [`Core::pair`]): made once for
/// all the parts of a view.
pub struct ToolPairs {
    uses: Vec<bool>,
    results: Vec<bool>,
}

impl ToolPairs {
    pub fn of(t: &Turn<'_, '_>) -> ToolPairs {
        let (uses, results) = tool_pairs(t, &t.items);
        ToolPairs { uses, results }
    }
}

/// Items `range` of a turn (beginning and ending where messages do, see
/// [`message_start_from`]), with the turn's pairs.
pub struct Part<'p> {
    pub range: std::ops::Range<usize>,
    pub pairs: &'p ToolPairs,
}

/// Where the message that item `at` of `t` belongs to begins, or the one after it when `at`
/// is within a message: a place to split a turn's items into parts of whole messages.
pub fn message_start_from(t: &Turn<'_, '_>, at: usize) -> usize {
    let msg_of = |i: usize| match t.items.get(i).map(|&p| t.core(p).origin) {
        Some(Origin::Block { msg, .. }) => Some(msg),
        _ => None,
    };
    let mut i = at.min(t.items.len());
    // Past the last item, `msg_of` is `None`: the loop ends there.
    while i > 0 && msg_of(i).is_some_and(|m| msg_of(i - 1) == Some(m)) {
        i += 1;
    }
    i
}

/// [`each_wanted`] for the messages of `part` of `t`'s items.
pub fn each_wanted_in<'a>(
    t: &Turn<'_, 'a>,
    msgs: &[&'a Message],
    state: &State,
    tags: bool,
    part: Part<'_>,
    want: &dyn Fn(LineKey) -> bool,
    sink: &mut dyn FnMut(Option<Out<'a>>, LineKey),
) -> Vec<(String, i64)> {
    use std::hash::{Hash, Hasher};
    let mut tagged = Vec::new();
    // The number a message's tag shows (none for a message without a tag), and whether the
    // snapshot lacked it.
    let snapshot = &state.token_snapshot;
    let tag_number = |p: Pos, slot: &Slot| -> Option<(u64, bool)> {
        if !tags || !slot.is_ref() {
            return None;
        }
        let known = if snapshot.is_empty() {
            None
        } else {
            slot.name().and_then(|r| snapshot.get(r.as_ref()).copied())
        };
        Some(match known {
            Some(n) => (n.max(0) as u64, false),
            None => (t.tokens(p), true),
        })
    };
    let (uses, results) = (&part.pairs.uses, &part.pairs.results);
    let has = |set: &[bool], pair: u32| set.get(pair as usize).copied().unwrap_or(false);
    let items = t.items.get(..part.range.end).unwrap_or(&t.items);
    let mut kept: Vec<Pos> = Vec::new();
    let mut i = part.range.start;
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
            let text = t.text(p);
            let mut h = key_hasher();
            (1u8, &*text, format!("{meta:?}")).hash(&mut h);
            let key = h.finish();
            let m = want(key).then(|| Out {
                role: Cow::Borrowed("user"),
                content: Some(vec![Block::text(text.to_string())]),
                slots: vec![Slot::None],
                meta,
            });
            sink(m, key);
            i += 1;
            continue;
        };
        // The message's kept blocks and its key, before building anything.
        kept.clear();
        let mut h = key_hasher();
        (0u8, msg).hash(&mut h);
        let orig = msgs[msg as usize];
        let mut j = i;
        let (mut acts, mut text_chars, mut truncated) = (false, 0usize, false);
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
            // Pairing: a call no result answers, or a result no call asked for, goes.
            let paired = match cq.kind {
                Kind::ToolCall => has(results, cq.pair),
                Kind::ToolResult => has(uses, cq.pair),
                _ => true,
            };
            if !paired {
                continue;
            }
            let slot = t.slot(q);
            // A cut is made from the block's own text alone (which its place names): its
            // flag stands for it. Any other edit is hashed whole.
            let edited = match q {
                Pos::Core(k) => t.edit(k).map(|e| e.own_text().unwrap_or("")),
                Pos::Synth(_) => None,
            };
            let tagged_kind =
                cq.kind == Kind::ToolResult || (cq.kind == Kind::Text && cq.role == Role::User);
            let number = if tagged_kind {
                tag_number(q, slot)
            } else {
                None
            };
            // The tool by its place, not its bytes (a miss per message): a text of the
            // transcript never moves or changes while its lines are kept (a line cache lives
            // with its transcript's parse), and another call naming a result is another place.
            let tool = (cq.tool.as_ptr() as usize, cq.tool.len());
            (block, slot, edited, number.map(|n| n.0), tool).hash(&mut h);
            match cq.kind {
                Kind::ToolCall | Kind::Reasoning => acts = true,
                Kind::Text => text_chars += t.chars(q),
                Kind::ToolResult => {}
            }
            truncated |= t.is_truncated(q);
            kept.push(q);
        }
        i = j;
        if kept.is_empty() || (!acts && text_chars == 0 && c.by_assistant) {
            // Nothing left, or an assistant message the runtime drops as empty.
            continue;
        }
        truncated.hash(&mut h);
        let key = h.finish();
        if !want(key) {
            sink(None, key);
            continue;
        }
        let mut content = Vec::with_capacity(kept.len());
        let mut slots = Vec::with_capacity(kept.len());
        for &q in &kept {
            let cq = t.core(q);
            let Origin::Block { block, .. } = cq.origin else {
                continue;
            };
            let Some(src) = orig.content.get(block as usize) else {
                continue;
            };
            let slot = t.slot(q);
            let body = t.text_ref(q);
            let mut suffix = String::new();
            if let (Some((n, fresh)), Some(reference)) = (
                (cq.kind == Kind::ToolResult || cq.role == Role::User)
                    .then(|| tag_number(q, slot))
                    .flatten(),
                slot.name(),
            ) {
                if fresh {
                    tagged.push((reference.to_string(), n as i64));
                }
                let tag = ref_tag(&reference, cq, n);
                suffix = if body.is_empty() {
                    tag
                } else {
                    format!("\n{tag}")
                };
            }
            let mut b = match cq.kind {
                // A result's content becomes the one tagged text: its nested blocks are not
                // needed.
                Kind::ToolResult => match src {
                    Content::ToolResult(r) => Block {
                        kind: Cow::Borrowed("tool_result"),
                        tool_use_id: Cow::Borrowed(r.tool_use_id.as_str()),
                        is_error: r.is_error(),
                        ..Block::default()
                    },
                    other => Block::of(other),
                },
                _ => Block::of(src),
            };
            match cq.kind {
                Kind::Text => {
                    b.suffix = suffix;
                    b.text = body;
                }
                Kind::Reasoning => b.thinking = body,
                Kind::ToolCall => {
                    if *body != *b.input
                        && serde_json::from_str::<serde::de::IgnoredAny>(&body).is_ok()
                    {
                        b.input = body;
                    }
                }
                Kind::ToolResult => {
                    let mut inner = Block::text(body);
                    inner.suffix = suffix;
                    b.content = vec![inner];
                }
            }
            content.push(b);
            slots.push(slot.clone());
        }
        sink(
            Some(Out {
                role: Cow::Borrowed(orig.role.as_ref()),
                content: Some(content),
                slots: slots.clone(),
                meta: Meta::Message {
                    refs: slots,
                    truncated,
                },
            }),
            key,
        );
    }
    tagged
}

/// The messages as they are (the materialized history of a session without live blocks):
/// every transcript message in the runtime's model.
pub fn verbatim<'a>(msgs: &[&'a Message], slots_of: impl Fn(usize) -> Vec<Slot>) -> Assembled<'a> {
    let messages = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| verbatim_out(m, slots_of(i)))
        .collect();
    Assembled {
        messages,
        tagged: Vec::new(),
    }
}

/// A transcript message as it is, with the ref of each block.
pub fn verbatim_out<'a>(m: &'a Message, refs: Vec<Slot>) -> Out<'a> {
    let null = m.content.is_empty() && m.extra.get("content").is_some_and(Value::is_null);
    Out {
        role: Cow::Borrowed(m.role.as_ref()),
        content: (!null).then(|| m.content.iter().map(Block::of).collect()),
        slots: refs.clone(),
        meta: Meta::Message {
            refs,
            truncated: false,
        },
    }
}

/// The [`LineKey`] of [`verbatim_out`] of message `i` with `refs` (a transcript message never
/// changes while lines made from it are kept).
pub fn verbatim_key(i: usize, refs: &[Slot]) -> LineKey {
    use std::hash::{Hash, Hasher};
    let mut h = key_hasher();
    (2u8, i, refs).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s` escaped as serde_json writes it, and read back the same.
    fn assert_escaped_as_json(s: &str) {
        let mut out = Vec::new();
        push_str(&mut out, s);
        let back: String = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(back, s);
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            serde_json::to_string(s).expect("JSON"),
            "{s:?}"
        );
    }

    #[test]
    fn escapes_as_json_does() {
        for s in [
            "",
            "plain ascii text that is long enough for words",
            "quote \" and backslash \\ inside a longer run of text",
            "control \u{1} \u{1f} \n\r\t\u{8}\u{c} chars",
            "ünïcödé 日本語 and 😀 emoji \"q\"",
            "12345678\"12345678\\1234567\n",
        ] {
            assert_escaped_as_json(s);
        }
    }

    /// Every byte JSON escapes, at every place of an eight-byte word and past it, among
    /// multi-byte characters: escaped as serde_json does.
    #[test]
    fn escapes_every_byte_at_every_place_as_json_does() {
        let special: Vec<char> = (0u8..0x20)
            .map(char::from)
            .chain(['"', '\\', '\u{7f}', 'é', '日', '😀'])
            .collect();
        for len in [1usize, 15, 16, 17, 31, 32, 33, 47] {
            for at in 0..len {
                for &c in &special {
                    let mut s: String = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNO"
                        .chars()
                        .take(len)
                        .collect();
                    s.insert(at.min(s.len()), c);
                    assert_escaped_as_json(&s);
                }
            }
        }
        // Several in a word, and the bytes a borrow from one could flag above it.
        let mixed: Vec<char> = "\u{0}\u{1f} !\"#\\]\n\u{7f}aé日😀".chars().collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5000 {
            let s: String = (0..(seed % 40) as usize)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    mixed[(seed >> 16) as usize % mixed.len()]
                })
                .collect();
            assert_escaped_as_json(&s);
        }
        for s in [
            "\u{1}\u{2}\u{3}\u{4}\u{5}\u{6}\u{7}\u{8}\u{9}\u{a}\u{b}\u{c}\u{d}\u{e}\u{f}\u{10}\u{11}",
            "\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"",
            "\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\\",
        ] {
            assert_escaped_as_json(s);
        }
    }
}
