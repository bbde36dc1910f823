//! Content messages (SPEC 2.5, 4.1): the one-per-content-block units noa works on, their raw
//! ids, and the projection of a transcript's messages into them.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use regex::Regex;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::fasthash::{FastMap, FastSet};
use crate::format::cold::ColdStr;
use crate::format::transcript::{Content, Message, ToolResultContent};

/// The tool whose calls noa itself answers; always hard-protected.
pub const COMPRESS_TOOL: &str = "Compress";
/// The id prefix of a rendered summary (`noa_summary_b3`).
pub const SUMMARY_ID_PREFIX: &str = "noa_summary_";
/// The id of the injected nudge.
pub const NUDGE_ID: &str = "noa_nudge";
/// How every rendered summary starts.
pub const SUMMARY_HEADER: &str = "[Compressed conversation section]";

/// Whether a text opens as a summary does. (Asked of every message of every view: the first
/// byte settles it for almost all.)
pub fn is_summary_text(text: &str) -> bool {
    text.as_bytes().first() == Some(&b'[') && text.starts_with(SUMMARY_HEADER)
}

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
    /// A ref recorded in the state that is not `m` + five digits (kept as written; rare, so
    /// behind one pointer: a slot is 16 bytes).
    Other(Box<String>),
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

/// A content message's id, in place: `h_`, 16 hex digits and a short `_N` take 24 bytes.
pub type RawId = crate::format::short::InlineStr<22>;

/// One content message (the runtime's "core message").
#[derive(Debug, Clone)]
pub struct Core<'a> {
    /// `h_` + 16 hex digits (+ `_N` for a repeat), or a summary's / the nudge's id (shared
    /// with the projection's memo).
    pub id: RawId,
    pub role: Role,
    pub kind: Kind,
    /// The body with any trailing ref tag stripped (a tool call: its input as stored).
    pub text: Text<'a>,
    /// Tool name (calls, and results through the call they answer), else "".
    pub tool: &'a str,
    /// Tool call id (calls and results), else "".
    pub call: &'a str,
    pub origin: Origin,
    /// `tokens(text)` (SPEC 4.2), computed once.
    pub tokens: u32,
    /// Characters of the text (Unicode scalar values), computed once.
    pub chars: u32,
    /// A tool result whose text already holds the truncation marker (looked for once).
    pub marked: bool,
    /// Its text begins with the summary header (looked at once: the first byte of every
    /// text, read again by each pass over a view, is a cache miss per message).
    pub headed: bool,
    /// Its transcript message's role is `assistant` (kept here: a pass over a large view
    /// that looks at each message misses the cache on each).
    pub by_assistant: bool,
    /// Calls and results: a number for the call id, equal for equal ids ([`NO_PAIR`] for a
    /// result no call has the id of, and for any other message).
    pub pair: u32,
    /// A tool result long enough to be cut, or a Compress call (whose summaries a view
    /// stubs): where that edit is kept once made (shared with the projection's memo, so that
    /// the next view does not make it again).
    pub cut: Option<CutCell>,
}

/// A tool result's cut (`None`: too short to cut), or a Compress call's stubbed arguments
/// (`None`: nothing to stub), made the first time a view needs it.
pub type CutCell = Arc<OnceLock<Option<super::edit::Edit>>>;

/// A content message's text: a string, or its block's own text left in a store of cold
/// bytes (see [`crate::format::cold`]) and read back each time a rule or a file needs it.
/// The rules that look at every message use the measures taken once ([`Core::tokens`],
/// [`Core::chars`], ...), so a large session's texts stay on disk between reads.
#[derive(Debug, Clone)]
pub enum Text<'a> {
    Str(Cow<'a, str>),
    Cold(&'a ColdStr),
    /// A tool result's text items (two or more non-empty), joined by `\n` when read: not
    /// kept joined, nor read back to be joined at each projection.
    Joined(&'a [Content]),
}

impl<'a> Text<'a> {
    /// A block's own text: borrowed when it is in memory, else left where it is.
    pub fn stored(s: &'a ColdStr) -> Text<'a> {
        match s.in_memory() {
            Some(t) => Text::Str(Cow::Borrowed(t)),
            None => Text::Cold(s),
        }
    }

    /// The text (read back when it is cold).
    pub fn get(&self) -> Cow<'_, str> {
        match self {
            Text::Str(s) => Cow::Borrowed(s),
            Text::Cold(c) => c.get(),
            Text::Joined(items) => Cow::Owned(join_items(items)),
        }
    }

    /// Whether it may hold a ref tag (told without reading a text on disk).
    fn may_hold_ref_tag(&self) -> bool {
        match self {
            Text::Str(s) => crate::format::cold::holds_ref_tag(s.as_bytes()),
            Text::Cold(c) => c.may_hold_ref_tag(),
            Text::Joined(items) => items
                .iter()
                .filter_map(nested_text)
                .any(|t| t.may_hold_ref_tag()),
        }
    }

    /// The text, for as long as the transcript lives (a copy when it is cold or made).
    pub fn get_ref(&self) -> Cow<'a, str> {
        match self {
            Text::Str(Cow::Borrowed(s)) => Cow::Borrowed(s),
            Text::Str(Cow::Owned(s)) => Cow::Owned(s.clone()),
            Text::Cold(c) => c.get(),
            Text::Joined(items) => Cow::Owned(join_items(items)),
        }
    }

    /// Whether it is its block's own text, as stored (nothing stripped or joined).
    pub fn is_stored(&self) -> bool {
        matches!(self, Text::Str(Cow::Borrowed(_)) | Text::Cold(_))
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Text::Str(s) => s.len(),
            Text::Cold(c) => c.len(),
            Text::Joined(items) => {
                let (n, len) = items
                    .iter()
                    .filter_map(nested_text)
                    .fold((0usize, 0usize), |(n, len), t| (n + 1, len + t.len()));
                len + n.saturating_sub(1)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<String> for Text<'_> {
    fn from(s: String) -> Self {
        Text::Str(Cow::Owned(s))
    }
}

impl<'a> From<&'a str> for Text<'a> {
    fn from(s: &'a str) -> Self {
        Text::Str(Cow::Borrowed(s))
    }
}

impl<'a> From<Cow<'a, str>> for Text<'a> {
    fn from(s: Cow<'a, str>) -> Self {
        Text::Str(s)
    }
}

/// A block's own text with any trailing ref tag stripped: left where it is when there was
/// none (a text on disk is read back only when it may hold one).
fn stripped(s: &ColdStr) -> Text<'_> {
    if let Some(t) = s.in_memory() {
        return strip_ref_tag(t).into();
    }
    if !s.may_hold_ref_tag() {
        return Text::Cold(s);
    }
    match strip_ref_tag(&s.get()) {
        Cow::Owned(t) => Text::from(t),
        Cow::Borrowed(_) => Text::Cold(s),
    }
}

/// Whether a view may edit a message (and it gets a [`CutCell`]): a Compress call, or a tool
/// result it may cut.
fn edited(kind: Kind, tool: &str, tokens: u32, marked: bool) -> bool {
    (kind == Kind::ToolCall && tool == COMPRESS_TOOL) || cuttable(kind, tokens, marked)
}

/// Whether a message may be cut by a view.
fn cuttable(kind: Kind, tokens: u32, marked: bool) -> bool {
    kind == Kind::ToolResult && !marked && u64::from(tokens) >= super::edit::TRUNCATE_MIN_TOKENS
}

/// A [`Known::call_at`] of a message with no call found.
const NO_CALL: (u32, u32) = (u32::MAX, u32::MAX);

/// The [`Core::pair`] of a message no call pairs with.
pub const NO_PAIR: u32 = u32::MAX;

impl Core<'_> {
    pub fn is_summary(&self) -> bool {
        matches!(self.origin, Origin::Summary { .. })
            && self.role == Role::User
            && self.kind == Kind::Text
            && self.headed
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
        u64::from(self.tokens)
    }

    /// A content message noa writes itself (a summary, the nudge).
    pub fn synthetic(id: &str, text: String, origin: Origin) -> Core<'static> {
        let measured = super::tokens::count_and_chars(&text);
        Core::synthetic_measured(id, text, origin, measured)
    }

    /// [`Core::synthetic`] of a text whose count (`count_and_chars`) is known.
    pub fn synthetic_measured(
        id: &str,
        text: String,
        origin: Origin,
        (tokens, chars): (u64, usize),
    ) -> Core<'static> {
        let tokens = u32::try_from(tokens).unwrap_or(u32::MAX);
        let chars = u32::try_from(chars).unwrap_or(u32::MAX);
        let headed = is_summary_text(&text);
        Core {
            id: RawId::from(id),
            role: Role::User,
            kind: Kind::Text,
            text: Text::from(text),
            tool: "",
            call: "",
            origin,
            tokens,
            chars,
            marked: false,
            headed,
            by_assistant: false,
            pair: NO_PAIR,
            cut: None,
        }
    }
}

/// Whether a tool result's text holds the truncation marker: truncated before, it is not cut
/// again.
pub fn is_marked(kind: Kind, text: &str) -> bool {
    // One searcher for every text: building one is a cost each time.
    static MARKER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| {
            memchr::memmem::Finder::new(super::edit::TRUNCATION_MARKER.as_bytes())
        });
    kind == Kind::ToolResult && MARKER.find(text.as_bytes()).is_some()
}

/// Tokens and characters of a text.
pub fn measure(text: &str) -> (u32, u32) {
    let (tokens, chars) = super::tokens::count_and_chars(text);
    (
        u32::try_from(tokens).unwrap_or(u32::MAX),
        u32::try_from(chars).unwrap_or(u32::MAX),
    )
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
    raw_id(digest, n).to_string()
}

/// [`id_text`] written in place: `h_`, 16 hex digits, and `_n` after the first occurrence.
/// Every block of a projection has one, so no heap string and no formatting machinery.
pub fn raw_id(digest: u64, n: u32) -> RawId {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // `h_`, 16 digits, `_` and at most 10 decimal digits.
    let mut buf = [0u8; 29];
    buf[..2].copy_from_slice(b"h_");
    for (i, b) in buf[2..18].iter_mut().enumerate() {
        *b = HEX[((digest >> (60 - 4 * i)) & 0xf) as usize];
    }
    let mut len = 18;
    if n > 0 {
        buf[len] = b'_';
        len += 1;
        let mut digits = [0u8; 10];
        let (mut k, mut rest) = (digits.len(), n);
        while rest > 0 {
            k -= 1;
            digits[k] = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        let digits = &digits[k..];
        buf[len..len + digits.len()].copy_from_slice(digits);
        len += digits.len();
    }
    RawId::from(std::str::from_utf8(&buf[..len]).unwrap_or_default())
}

/// Tells repeats apart within one projection: the first occurrence of an id keeps it, the
/// later ones get `_1`, `_2`, ….
#[derive(Debug, Default, Clone)]
pub struct Repeats {
    /// Digests met (almost every one once: a set takes half a map's memory).
    seen: FastSet<u64>,
    /// Digests met more than once, and the number of the next occurrence.
    again: FastMap<u64, u32>,
}

impl Repeats {
    /// The id of the next occurrence of a digest.
    pub fn next(&mut self, digest: u64) -> RawId {
        let n = if self.seen.insert(digest) {
            0
        } else {
            let next = self.again.entry(digest).or_insert(1);
            *next += 1;
            *next - 1
        };
        raw_id(digest, n)
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
    if !crate::format::cold::holds_ref_tag(s.as_bytes()) {
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
fn result_text<'a>(content: Option<&'a ToolResultContent>) -> Text<'a> {
    match content {
        None => Text::from(""),
        Some(ToolResultContent::Text(t)) => Text::from(t.as_str()),
        Some(ToolResultContent::Items(items)) => {
            let mut texts = items.iter().filter_map(nested_text);
            let Some(first) = texts.next() else {
                return Text::from("");
            };
            match texts.next() {
                None => first,
                Some(_) => Text::Joined(items),
            }
        }
    }
}

/// A tool result's nested non-empty text blocks joined by `\n`.
fn join_items(items: &[Content]) -> String {
    let mut joined = String::new();
    for (i, t) in items.iter().filter_map(nested_text).enumerate() {
        if i > 0 {
            joined.push('\n');
        }
        joined.push_str(&t.get());
    }
    joined
}

fn nested_text(c: &Content) -> Option<Text<'_>> {
    let t = match c {
        Content::Text(t) => Text::stored(&t.text),
        Content::Other(v) if str_field(v, "type") == "text" => Text::from(str_field(v, "text")),
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
    names: &dyn Fn(&str) -> &'a str,
) -> Option<BlockParts<'a>> {
    let user = role == "user";
    Some(match c {
        Content::Text(t) if user => (Role::User, Kind::Text, stripped(&t.text), "", ""),
        Content::Text(t) => (Role::Assistant, Kind::Text, Text::stored(&t.text), "", ""),
        Content::Thinking(t) => (
            Role::Assistant,
            Kind::Reasoning,
            Text::stored(&t.thinking),
            "",
            "",
        ),
        Content::ToolUse(u) => call_parts(Cow::Borrowed(u.input.get()), &u.name, u.id.as_ref()),
        Content::ToolResult(r) => {
            result_parts(result_text(r.content.as_ref()), &r.tool_use_id, names)
        }
        Content::CompactBoundary(_) => return None,
        // A known type whose fields did not fit: read what the runtime would read.
        Content::Other(v) => match str_field(v, "type") {
            "text" => text_parts(user, str_field(v, "text")),
            "thinking" => reasoning_parts(str_field(v, "thinking")),
            "tool_use" => {
                let input = match v.get("input") {
                    None | Some(Value::Null) => Cow::Borrowed(""),
                    Some(i) => Cow::Owned(i.to_string()),
                };
                call_parts(input, str_field(v, "name"), str_field(v, "id"))
            }
            "tool_result" => result_parts(
                value_result_text(v).into(),
                str_field(v, "tool_use_id"),
                names,
            ),
            _ => return None,
        },
    })
}

/// What [`block_core`] yields: a [`Core`]'s role, kind, text, tool and call.
pub type BlockParts<'a> = (Role, Kind, Text<'a>, &'a str, &'a str);

/// A text block: a user's loses its ref tag.
fn text_parts(user: bool, text: &str) -> BlockParts<'_> {
    if user {
        (Role::User, Kind::Text, strip_ref_tag(text).into(), "", "")
    } else {
        (Role::Assistant, Kind::Text, text.into(), "", "")
    }
}

fn reasoning_parts(text: &str) -> BlockParts<'_> {
    (Role::Assistant, Kind::Reasoning, text.into(), "", "")
}

fn call_parts<'a>(input: Cow<'a, str>, tool: &'a str, call: &'a str) -> BlockParts<'a> {
    (Role::Assistant, Kind::ToolCall, input.into(), tool, call)
}

/// A tool result: its text loses its ref tag; its tool is the one its call named.
fn result_parts<'a>(
    text: Text<'a>,
    call: &'a str,
    names: &dyn Fn(&str) -> &'a str,
) -> BlockParts<'a> {
    let text = match text {
        Text::Str(Cow::Borrowed(t)) => strip_ref_tag(t).into(),
        Text::Str(Cow::Owned(t)) => Text::from(strip_ref_tag(&t).into_owned()),
        Text::Cold(c) => stripped(c),
        joined @ Text::Joined(_) => {
            let owned = match joined.may_hold_ref_tag() {
                true => match strip_ref_tag(&joined.get()) {
                    Cow::Owned(t) => Some(t),
                    Cow::Borrowed(_) => None,
                },
                false => None,
            };
            owned.map_or(joined, Text::from)
        }
    };
    (Role::Tool, Kind::ToolResult, text, names(call), call)
}

/// What is known of a projected content message beyond its block.
#[derive(Debug, Clone)]
struct Known {
    id: RawId,
    tokens: u32,
    chars: u32,
    /// Its text is its block's own text as stored (no tag stripped, one text): taken without
    /// looking at it again.
    plain: bool,
    /// A tool result's call (message, block), when found: its tool name without a lookup.
    /// ([`NO_CALL`] when not found: a memo holds one per content message.)
    call_at: (u32, u32),
    marked: bool,
    headed: bool,
    pair: u32,
    cut: Option<CutCell>,
}

impl Known {
    /// The content message of a block with these parts, as far as it is known.
    fn core<'a>(&self, parts: BlockParts<'a>, origin: Origin, by_assistant: bool) -> Core<'a> {
        let (role, kind, text, tool, call) = parts;
        Core {
            id: self.id.clone(),
            role,
            kind,
            text,
            tool,
            call,
            origin,
            tokens: self.tokens,
            chars: self.chars,
            marked: self.marked,
            headed: self.headed,
            by_assistant,
            pair: self.pair,
            cut: self.cut.clone(),
        }
    }
}

/// A tool call id's call: where the call naming its results is (message, block), and the
/// id's number (in order of first appearance).
#[derive(Debug, Clone, Copy)]
struct CallAt {
    at: (u32, u32),
    seq: u32,
}

/// What a projection keeps so that the projection of the same messages plus appended ones
/// hashes, scans and measures the appended ones only. The transcript it was made from may
/// only have grown (a transcript file drops its memo when it parses again).
#[derive(Debug, Default, Clone)]
pub struct ProjectionMemo {
    /// Index of the first message after the last compaction marker.
    start: usize,
    /// Messages projected.
    msgs: usize,
    /// Each content message, in order.
    known: Vec<Known>,
    repeats: Repeats,
    /// Call ids of tool results whose call was not found (a later call would rename them).
    unnamed: FastSet<String>,
    /// Where each tool call is (message, block), by call id: a result's tool name.
    calls: FastMap<CallId, CallAt>,
    /// Messages whose calls are in `calls`.
    calls_seen: usize,
    /// Made for one projection and dropped after (see [`project`]): `known` is not kept.
    once: bool,
    /// The list of the last projection after appends, emptied and given back (see
    /// [`ProjectionMemo::give_back`]): the next one is made in it.
    spare: Vec<Core<'static>>,
}

/// A tool call id as a memo keeps it: in place up to 30 bytes (`toolu_` and 24 more, as the
/// runtime's providers make them), a third of a `String` key's memory.
type CallId = crate::format::short::InlineStr<30>;

/// The tool calls of `msgs[from..]` into `calls`; `false` when a call id repeats one already
/// there (the later call would rename earlier results: the memo no longer applies).
fn add_calls(calls: &mut FastMap<CallId, CallAt>, msgs: &[&Message], from: usize) -> bool {
    for (mi, m) in msgs.iter().enumerate().skip(from) {
        for (bi, c) in m.content.iter().enumerate() {
            let id = match c {
                Content::ToolUse(u) => u.id.as_str(),
                Content::Other(v) if str_field(v, "type") == "tool_use" => str_field(v, "id"),
                _ => continue,
            };
            let call = CallAt {
                at: (mi as u32, bi as u32),
                seq: calls.len() as u32,
            };
            if calls.insert(CallId::from(id), call).is_some() {
                return false;
            }
        }
    }
    true
}

/// The tool name of the call at `(msg, block)`.
fn call_name<'a>(msgs: &[&'a Message], at: (u32, u32)) -> &'a str {
    match msgs
        .get(at.0 as usize)
        .and_then(|m| m.content.get(at.1 as usize))
    {
        Some(Content::ToolUse(u)) => u.name.as_str(),
        Some(Content::Other(v)) => str_field(v, "name"),
        _ => "",
    }
}

/// The content messages of `msgs` after the last compaction marker, in order, with raw ids.
/// Origins index `msgs` itself.
pub fn project<'a>(msgs: &[&'a Message]) -> Vec<Core<'a>> {
    // What a memo keeps for the next projection (a tenth of a large one's memory) is not
    // made: this one is dropped.
    ProjectionMemo {
        once: true,
        ..ProjectionMemo::default()
    }
    .project(msgs)
}

impl ProjectionMemo {
    /// How many messages it has projected (0: none yet).
    pub fn messages(&self) -> usize {
        self.msgs
    }

    /// Project `msgs` (the messages this memo was made from, plus appended ones, or any
    /// messages when the memo is empty), and remember the new ones.
    pub fn project<'a>(&mut self, msgs: &[&'a Message]) -> Vec<Core<'a>> {
        // The messages projected before are looked at again only when they are not known
        // (a marker among them is where `start` is).
        let start = match msgs.get(self.msgs..) {
            Some(new) if self.msgs > 0 => {
                last_marker(new).map_or(self.start, |i| self.msgs + i + 1)
            }
            _ => last_marker(msgs).map_or(0, |i| i + 1),
        };
        let tail = &msgs[start..];
        let usable = self.start == start
            && self.msgs <= msgs.len()
            && add_calls(&mut self.calls, msgs, self.calls_seen.max(start))
            && self
                .unnamed
                .iter()
                .all(|call| !self.calls.contains_key(call.as_str()));
        if !usable {
            *self = ProjectionMemo {
                start,
                once: self.once,
                ..ProjectionMemo::default()
            };
            // A call id given twice: the last call names the results, as the runtime's map.
            self.calls.clear();
            for (mi, m) in msgs.iter().enumerate().skip(start) {
                for (bi, c) in m.content.iter().enumerate() {
                    let id = match c {
                        Content::ToolUse(u) => u.id.as_str(),
                        Content::Other(v) if str_field(v, "type") == "tool_use" => {
                            str_field(v, "id")
                        }
                        _ => continue,
                    };
                    let seq = self.calls.len() as u32;
                    self.calls
                        .entry(CallId::from(id))
                        .and_modify(|c| c.at = (mi as u32, bi as u32))
                        .or_insert(CallAt {
                            at: (mi as u32, bi as u32),
                            seq,
                        });
                }
            }
        }
        self.calls_seen = msgs.len();
        let calls = std::mem::take(&mut self.calls);
        let names = |call: &str| calls.get(call).map_or("", |c| call_name(msgs, c.at));
        let from = self.msgs.max(start);
        // As many as the blocks, at most: a projection is kept while its transcript lasts.
        let blocks: usize = tail.iter().map(|m| m.content.len()).sum();
        // In the last list given back when it has room; a new one has room for appends when
        // this memo is being appended to.
        let spare = std::mem::take(&mut self.spare);
        let mut out: Vec<Core<'a>> = match spare.capacity() {
            n if n >= blocks => spare,
            0 => Vec::with_capacity(blocks),
            _ => Vec::with_capacity(blocks + blocks / 64),
        };
        if self.known.is_empty() && !self.once {
            self.known.reserve_exact(blocks);
        }
        // The measures of the new blocks, made on several cores when there are many.
        let mut measured = measure_blocks(msgs, from.max(start), &names).into_iter();
        let mut k = 0;
        for (mi, m) in msgs.iter().enumerate().skip(start) {
            // Each message and its blocks are elsewhere in memory: asked for ahead, they are
            // not waited for one by one.
            if let Some(ahead) = msgs.get(mi + 2 * AHEAD) {
                prefetch(*ahead as *const Message);
            }
            if let Some(ahead) = msgs.get(mi + AHEAD) {
                prefetch(ahead.content.as_ptr());
            }
            // A tool result's items are a third place.
            if let Some(ahead) = msgs.get(mi + AHEAD / 2) {
                for c in &ahead.content {
                    if let Content::ToolResult(r) = c {
                        if let Some(ToolResultContent::Items(items)) = &r.content {
                            prefetch(items.as_ptr());
                        }
                    }
                }
            }
            for (bi, c) in m.content.iter().enumerate() {
                let origin = Origin::Block {
                    msg: mi as u32,
                    block: bi as u32,
                };
                if mi < from {
                    // Known: the id, the measures, and whether the text is the block's own.
                    let Some(kn) = self.known.get(k) else {
                        break;
                    };
                    let known_name = |call: &str| match kn.call_at {
                        NO_CALL => names(call),
                        at => call_name(msgs, at),
                    };
                    let core = if kn.plain {
                        plain_core(&m.role, c, &known_name)
                    } else {
                        block_core(&m.role, c, &known_name)
                    };
                    let Some(parts) = core else {
                        continue;
                    };
                    out.push(kn.core(parts, origin, m.role == "assistant"));
                    k += 1;
                    continue;
                }
                let Some((role, kind, text, tool, call)) = block_core(&m.role, c, &names) else {
                    continue;
                };
                if kind == Kind::ToolResult && tool.is_empty() {
                    self.unnamed.insert(call.to_string());
                }
                // Borrowed: nothing was stripped or joined.
                let plain = text.is_stored();
                let Measured {
                    tokens,
                    chars,
                    marked,
                    headed,
                    digest,
                } = measured
                    .next()
                    .unwrap_or_else(|| Measured::of(role, kind, &text.get(), tool, call));
                let found = match kind {
                    Kind::ToolCall | Kind::ToolResult => calls.get(call).copied(),
                    _ => None,
                };
                let call_at = found
                    .filter(|_| kind == Kind::ToolResult)
                    .map_or(NO_CALL, |c| c.at);
                let pair = found.map_or(NO_PAIR, |c| c.seq);
                let cut = edited(kind, tool, tokens, marked).then(CutCell::default);
                let id = self.repeats.next(digest);
                let kn = Known {
                    id,
                    tokens,
                    chars,
                    plain,
                    call_at,
                    marked,
                    headed,
                    pair,
                    cut,
                };
                let parts = (role, kind, text, tool, call);
                out.push(kn.core(parts, origin, m.role == "assistant"));
                if !self.once {
                    self.known.push(kn);
                }
            }
        }
        self.msgs = msgs.len();
        self.calls = calls;
        out
    }

    /// Keep the list of a projection made after appends, emptied, for the next one: a session
    /// appended to is projected again soon, and a large list is tens of MB of fresh pages to
    /// fault in each time (a third of the projection's time after an append to a
    /// 100,000-message session). A first projection's list is not kept.
    pub fn give_back(&mut self, mut cores: Vec<Core<'_>>, appended: bool) {
        if self.once || !appended {
            return;
        }
        cores.clear();
        // The same allocation, empty: a list of a type of the same layout is collected in
        // place, and the lifetime of what it holds is all that changes.
        #[allow(
            clippy::unnecessary_filter_map,
            reason = "an adapter that yields nothing, to collect the empty list in place"
        )]
        let spare = cores.into_iter().filter_map(|_| None).collect();
        self.spare = spare;
    }
}

/// How many messages ahead a pass over a projection asks for the blocks it will look at
/// (their message twice as far ahead, a tool result's items half as far).
const AHEAD: usize = 24;

/// Ask for the memory at `p` to be brought into the cache (nothing where it is not mapped).
#[inline(always)]
fn prefetch<T>(p: *const T) {
    // SAFETY: SSE is in every x86-64 CPU, and a prefetch neither reads for the program
    // nor faults.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// What a new block's content message measures, before its id.
struct Measured {
    tokens: u32,
    chars: u32,
    marked: bool,
    headed: bool,
    /// Its id's digits (see [`id_digest`]).
    digest: u64,
}

impl Measured {
    fn of(role: Role, kind: Kind, text: &str, tool: &str, call: &str) -> Measured {
        let (tokens, chars) = measure(text);
        Measured {
            tokens,
            chars,
            marked: is_marked(kind, text),
            headed: is_summary_text(text),
            digest: id_digest(role, kind, call, tool, text),
        }
    }
}

/// New blocks of at least this many go to more than one core to be measured.
const PARALLEL_BLOCKS: usize = 20_000;

/// The measures of the content messages of `msgs[from..]`, in order (as many as
/// [`block_core`] yields); empty when there are few (they are measured one by one then).
/// Measuring a text (its tokens, characters and SHA-256) is most of projecting it, and
/// texts are measured alone: a large projection is spread over the cores.
fn measure_blocks<'a>(
    msgs: &[&'a Message],
    from: usize,
    names: &(dyn Fn(&str) -> &'a str + Sync),
) -> Vec<Measured> {
    let new = msgs.get(from..).unwrap_or_default();
    let blocks: usize = new.iter().map(|m| m.content.len()).sum();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    if blocks < PARALLEL_BLOCKS || cores < 2 {
        return Vec::new();
    }
    let each = |part: &[&'a Message]| {
        let mut out = Vec::with_capacity(part.iter().map(|m| m.content.len()).sum());
        for m in part {
            for c in &m.content {
                if let Some((role, kind, text, tool, call)) = block_core(&m.role, c, names) {
                    out.push(Measured::of(role, kind, &text.get(), tool, call));
                }
            }
        }
        out
    };
    let per = new.len().div_ceil(cores);
    let parts: Vec<&[&'a Message]> = new.chunks(per.max(1)).collect();
    let measured = crate::pool::each_part(&parts, parts.len().saturating_sub(1), |p| each(p));
    let mut out = Vec::with_capacity(blocks);
    for part in measured {
        out.extend(part);
    }
    out
}

/// A block's content message taken as stored (no tag stripping, a single text): what
/// [`block_core`] gives for a block known to need nothing more.
fn plain_core<'a>(
    role: &str,
    c: &'a Content,
    names: &dyn Fn(&str) -> &'a str,
) -> Option<BlockParts<'a>> {
    match c {
        Content::Text(t) if role == "user" => {
            Some((Role::User, Kind::Text, Text::stored(&t.text), "", ""))
        }
        Content::ToolResult(r) => {
            let text = match &r.content {
                None => Text::from(""),
                Some(ToolResultContent::Text(t)) => Text::from(t.as_str()),
                Some(ToolResultContent::Items(items)) => {
                    let mut texts = items.iter().filter_map(nested_text);
                    let first = texts.next().unwrap_or(Text::from(""));
                    if texts.next().is_some() {
                        return None;
                    }
                    first
                }
            };
            let call = r.tool_use_id.as_str();
            let tool = names(call);
            Some((Role::Tool, Kind::ToolResult, text, tool, call))
        }
        Content::Text(_) | Content::Thinking(_) | Content::ToolUse(_) => block_core(role, c, names),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
