//! The transcript record model (SPEC 2.1): one JSON object per line, read and written losslessly.
//!
//! Every struct keeps the fields it does not know in `extra` (serde `flatten`, order preserved),
//! and content items of an unknown type, or a known type whose fields do not fit, are kept as the
//! raw JSON value. Serializing a parsed record gives back a JSON value equal to its input; for
//! input in the runtime's canonical compact form, the very same bytes.

mod raw;
pub use raw::*;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::de::{Error as _, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::cold::ColdStr;
use super::short::{InlineStr, ShortStr};

/// One line of a transcript.
///
/// Deserialized by hand (see `RecordVisitor`) rather than with serde `flatten`, which would
/// buffer every line into an intermediate tree first. An optional string or bool field written
/// as `null` reads as `None` and the `null` is kept in `extra` under its own name, so that it is
/// written back.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Record {
    pub uuid: ShortStr,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_uuid: Option<ShortStr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    /// Shared: records of one file mostly repeat it (the loader gives them one string).
    #[serde(serialize_with = "shared_str")]
    pub session_id: Option<Arc<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<Box<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_sidechain: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<ShortStr>,
    /// `"message"` or `"boundary"`; any other value is kept as written.
    #[serde(rename = "type")]
    pub kind: Word,
    /// `None`: absent. `Some(None)`: present and `null` (kept so the line round-trips).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Option<Message>>,
    /// Boxed, as `boundary`: records keep only a pointer for what most of them lack.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Box<Usage>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boundary: Option<Option<Box<BoundaryMeta>>>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RecordVisitor)
    }
}

/// Reads a record field by field: known fields typed, any other kept in `extra`.
struct RecordVisitor;

impl<'de> Visitor<'de> for RecordVisitor {
    type Value = Record;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a transcript record (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Record, A::Error> {
        let mut uuid = None;
        let mut kind = None;
        let mut parent_uuid = None;
        let mut session_id = None;
        let mut agent_id = None;
        let mut is_sidechain = None;
        let mut timestamp = None;
        let mut message = None;
        let mut usage = None;
        let mut boundary = None;
        let mut extra = ExtraText::default();
        let mut nulls = Nulls::default();
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                "uuid" => once(&mut uuid, "uuid", map.next_value()?)?,
                "type" => once(&mut kind, "type", map.next_value::<Word>()?)?,
                "parent_uuid" => optional(
                    &mut parent_uuid,
                    (&mut extra, &mut nulls),
                    "parent_uuid",
                    map.next_value()?,
                )?,
                "session_id" => optional(
                    &mut session_id,
                    (&mut extra, &mut nulls),
                    "session_id",
                    map.next_value::<Option<String>>()?.map(Arc::from),
                )?,
                "agent_id" => optional(
                    &mut agent_id,
                    (&mut extra, &mut nulls),
                    "agent_id",
                    map.next_value()?,
                )?,
                "is_sidechain" => optional(
                    &mut is_sidechain,
                    (&mut extra, &mut nulls),
                    "is_sidechain",
                    map.next_value()?,
                )?,
                "timestamp" => optional(
                    &mut timestamp,
                    (&mut extra, &mut nulls),
                    "timestamp",
                    map.next_value()?,
                )?,
                "message" => once(&mut message, "message", map.next_value()?)?,
                "usage" => once(&mut usage, "usage", map.next_value()?)?,
                "boundary" => once(&mut boundary, "boundary", map.next_value()?)?,
                _ => {
                    // Read as a value: checked as the runtime checks it (nesting, UTF-8).
                    let value: Value = map.next_value()?;
                    extra.push(&key, &value);
                }
            }
        }
        Ok(Record {
            uuid: uuid.ok_or_else(|| A::Error::missing_field("uuid"))?,
            parent_uuid,
            session_id,
            agent_id,
            is_sidechain,
            timestamp,
            kind: kind.ok_or_else(|| A::Error::missing_field("type"))?,
            message,
            usage,
            boundary,
            extra: extra.finish(),
        })
    }
}

/// A string (an object key, or a value), borrowed from the input when it has no escape: known
/// keys cost no allocation.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_string())))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

/// A record's kind or a message's role: a short word, in place (16 bytes).
pub type Word = InlineStr<14>;

/// The fields of an object, in order, each key once.
type Fields<'k> = Vec<(Cow<'k, str>, Value)>;

/// A map of fields.
fn to_map(fields: Fields<'_>) -> Map<String, Value> {
    fields
        .into_iter()
        .map(|(k, v)| (k.into_owned(), v))
        .collect()
}

/// Serialize a shared string (a field skipped when `None`).
fn shared_str<S: Serializer>(v: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(v),
        None => s.serialize_none(),
    }
}

/// Set a field that may appear once.
fn once<T, E: serde::de::Error>(slot: &mut Option<T>, name: &'static str, v: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(v);
    Ok(())
}

/// The known optional fields read as `null` so far (each may appear once).
#[derive(Default)]
struct Nulls(Vec<&'static str>);

/// Set an optional field; a `null` leaves it `None` and is kept in `extra` to be written back.
fn optional<T, E: serde::de::Error>(
    slot: &mut Option<T>,
    (extra, nulls): (&mut ExtraText, &mut Nulls),
    key: &'static str,
    v: Option<T>,
) -> Result<(), E> {
    if slot.is_some() || nulls.0.contains(&key) {
        return Err(E::custom(format_args!("duplicate field `{key}`")));
    }
    match v {
        Some(v) => *slot = Some(v),
        None => {
            nulls.0.push(key);
            extra.push(key, &Value::Null);
        }
    }
    Ok(())
}

impl Record {
    /// The message of a `message` record, when it has a non-null one (SPEC 3 "Messages").
    pub fn as_message(&self) -> Option<&Message> {
        if self.kind == "message" {
            self.message.as_ref().and_then(|m| m.as_ref())
        } else {
            None
        }
    }

    pub fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref().and_then(|u| u.as_deref())
    }

    /// Serialize to the compact single-line JSON form (no trailing newline).
    pub fn to_line(&self) -> String {
        // Serializing a value built from maps and strings cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// `{role, content[]}` of an LLM message (deserialized by hand, like [`Record`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub role: Word,
    pub content: Vec<Content>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MessageVisitor)
    }
}

struct MessageVisitor;

impl<'de> Visitor<'de> for MessageVisitor {
    type Value = Message;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
        let mut role = None;
        let mut content = None;
        let mut extra = ExtraText::default();
        let mut nulls = Nulls::default();
        while let Some(Key(key)) = map.next_key()? {
            match &*key {
                "role" => once(&mut role, "role", map.next_value::<Word>()?)?,
                "content" => optional(
                    &mut content,
                    (&mut extra, &mut nulls),
                    "content",
                    map.next_value()?,
                )?,
                _ => {
                    // Read as a value: checked as the runtime checks it (nesting, UTF-8).
                    let value: Value = map.next_value()?;
                    extra.push(&key, &value);
                }
            }
        }
        // Read without a length, the list may have grown past its size: trim it for keeps.
        let mut content: Vec<Content> = content.unwrap_or_default();
        content.shrink_to_fit();
        Ok(Message {
            role: role.ok_or_else(|| A::Error::missing_field("role"))?,
            content,
            extra: extra.finish(),
        })
    }
}

impl Message {
    pub fn new(role: &str, content: Vec<Content>) -> Message {
        Message {
            role: role.into(),
            content,
            extra: Extra::default(),
        }
    }
}

/// Token usage of one assistant turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
    }

    pub fn total(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }
}

/// Metadata of a compaction boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BoundaryMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    #[serde(default)]
    pub pre_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_summarized: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_skills: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextPart {
    /// Read by the rules that measure or cut it, copied by the files that carry it: cold
    /// bytes in a large transcript (see [`crate::format::cold`]).
    pub text: ColdStr,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThinkingPart {
    /// Measured once by a view, copied by the files that carry it: cold bytes in a large
    /// transcript, as a text block's.
    pub thinking: ColdStr,
    /// Never looked inside: cold bytes (see [`crate::format::cold`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<ColdStr>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUsePart {
    pub id: String,
    pub name: String,
    /// The input exactly as stored: its bytes are the call's identity (SPEC 2.5).
    pub input: RawJson,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The `content` of a tool_result: nested items, or a plain string (read as one text item).
#[derive(Debug, Clone, PartialEq)]
pub enum ToolResultContent {
    Items(Vec<Content>),
    Text(String),
}

impl ToolResultContent {
    /// The nested items, a plain string seen as one text item.
    pub fn items(&self) -> Vec<Content> {
        match self {
            ToolResultContent::Items(items) => items.clone(),
            ToolResultContent::Text(t) => vec![Content::text(t)],
        }
    }
}

impl Serialize for ToolResultContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolResultContent::Items(items) => items.serialize(s),
            ToolResultContent::Text(t) => t.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ToolResultContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(ToolResultContent::Text(s)),
            Value::Array(items) => Ok(ToolResultContent::Items(
                items.into_iter().map(Content::from_value).collect(),
            )),
            other => Err(D::Error::custom(format!(
                "tool_result content must be an array or a string, found {}",
                json_kind(&other)
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultPart {
    pub tool_use_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<ToolResultContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ToolResultPart {
    pub fn is_error(&self) -> bool {
        self.is_error.unwrap_or(false)
    }

    /// Nested items (a plain string is one text item; absent content is none).
    pub fn items(&self) -> Vec<Content> {
        self.content.as_ref().map(|c| c.items()).unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactBoundaryPart {
    /// A boundary object, or a bare integer (legacy `pre_tokens`); kept as written.
    pub input: RawJson,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One item of `message.content[]`.
///
/// Known types are typed; a `skill` item, an item of an unknown type, and a known type whose
/// fields do not fit its shape are all kept verbatim as `Other`.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(TextPart),
    Thinking(ThinkingPart),
    ToolUse(ToolUsePart),
    ToolResult(ToolResultPart),
    CompactBoundary(CompactBoundaryPart),
    Other(Value),
}

impl Content {
    pub fn text(t: &str) -> Content {
        Content::Text(TextPart {
            text: ColdStr::from(t),
            extra: Extra::default(),
        })
    }

    /// The `type` string of this item (`""` when it has none).
    pub fn type_name(&self) -> &str {
        match self {
            Content::Text(_) => "text",
            Content::Thinking(_) => "thinking",
            Content::ToolUse(_) => "tool_use",
            Content::ToolResult(_) => "tool_result",
            Content::CompactBoundary(_) => "compact_boundary",
            Content::Other(v) => v.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// Classify a raw JSON item; never fails.
    ///
    /// An item is typed when its required fields have their types and its optional fields
    /// are absent, `null` or of their type; a `null` optional field reads as `None` and stays
    /// in `extra` to be written back. Anything else is kept whole as `Other`.
    pub fn from_value(v: Value) -> Content {
        match v {
            Value::Object(map) => {
                let fields = map.into_iter().map(|(k, v)| (Cow::Owned(k), v)).collect();
                Content::from_fields(fields, None)
            }
            other => Content::Other(other),
        }
    }

    /// Classify the fields of a JSON object, in order, each key once (see [`from_value`]).
    ///
    /// [`from_value`]: Content::from_value
    ///
    /// `raw` is the `input` field's text when the reader kept it (its slot in `fields` then
    /// holds a `null` placeholder).
    fn from_fields(mut fields: Fields<'_>, mut raw: Option<Box<RawValue>>) -> Content {
        let kind = match get(&fields, "type") {
            Some(Value::String(s)) => s.as_str(),
            _ => return Content::Other(Value::Object(to_map(restore_input(fields, raw)))),
        };
        let fits = match kind {
            "text" => is_str(get(&fields, "text")),
            "thinking" => is_str(get(&fields, "thinking")) && opt_str(get(&fields, "signature")),
            // `input` must be there: an absent one could not be written back absent.
            "tool_use" => {
                is_str(get(&fields, "id"))
                    && is_str(get(&fields, "name"))
                    && get(&fields, "input").is_some()
            }
            "tool_result" => {
                is_str(get(&fields, "tool_use_id"))
                    && matches!(
                        get(&fields, "content"),
                        None | Some(Value::Null | Value::String(_) | Value::Array(_))
                    )
                    && matches!(
                        get(&fields, "is_error"),
                        None | Some(Value::Null | Value::Bool(_))
                    )
            }
            "compact_boundary" => get(&fields, "input").is_some(),
            _ => false,
        };
        if !fits {
            return Content::Other(Value::Object(to_map(restore_input(fields, raw))));
        }
        // The shape is checked: take the fields out, the rest is `extra`.
        let kind = match take(&mut fields, "type") {
            Some(Value::String(k)) => k,
            _ => String::new(),
        };
        // An `input` of a kind that has none of its own is kept in `extra` as written.
        if !matches!(kind.as_str(), "tool_use" | "compact_boundary") {
            fields = restore_input(fields, raw.take());
        }
        let f = &mut fields;
        let c = match kind.as_str() {
            "text" => Content::Text(TextPart {
                text: ColdStr::from(take_str(f, "text").unwrap_or_default()),
                extra: Extra::default(),
            }),
            "thinking" => Content::Thinking(ThinkingPart {
                thinking: ColdStr::from(take_str(f, "thinking").unwrap_or_default()),
                signature: take_str(f, "signature").map(ColdStr::from),
                extra: Extra::default(),
            }),
            "tool_use" => Content::ToolUse(ToolUsePart {
                id: take_str(f, "id").unwrap_or_default(),
                name: take_str(f, "name").unwrap_or_default(),
                input: raw_input(f, raw),
                extra: Extra::default(),
            }),
            "tool_result" => {
                let tool_use_id = take_str(f, "tool_use_id").unwrap_or_default();
                let content = match take_non_null(f, "content") {
                    Some(Value::String(t)) => Some(ToolResultContent::Text(t)),
                    Some(Value::Array(items)) => Some(ToolResultContent::Items(
                        items.into_iter().map(Content::from_value).collect(),
                    )),
                    _ => None,
                };
                let is_error = take_non_null(f, "is_error").and_then(|v| v.as_bool());
                Content::ToolResult(ToolResultPart {
                    tool_use_id,
                    content,
                    is_error,
                    extra: Extra::default(),
                })
            }
            _ => Content::CompactBoundary(CompactBoundaryPart {
                input: raw_input(f, raw),
                extra: Extra::default(),
            }),
        };
        // Usually nothing is left: an empty map allocates nothing.
        c.with_extra(fields)
    }

    /// This item with `extra` set to `fields` (typed items only).
    fn with_extra(mut self, fields: Fields<'_>) -> Content {
        if fields.is_empty() {
            return self;
        }
        let extra = match &mut self {
            Content::Text(p) => &mut p.extra,
            Content::Thinking(p) => &mut p.extra,
            Content::ToolUse(p) => &mut p.extra,
            Content::ToolResult(p) => &mut p.extra,
            Content::CompactBoundary(p) => &mut p.extra,
            Content::Other(_) => return self,
        };
        *extra = Extra::from(to_map(fields));
        self
    }
}

/// Reads a content item straight into its fields: a typed item never becomes a map first.
struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = Content;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a content item")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Content, A::Error> {
        let mut fields: Fields<'de> = Vec::with_capacity(map.size_hint().unwrap_or(4));
        let mut raw = None;
        while let Some(Key(key)) = map.next_key()? {
            let value: Value = if key == "input" {
                // Kept as text: a tool call's identity is its input's exact bytes.
                raw = Some(map.next_value::<Box<RawValue>>()?);
                Value::Null
            } else {
                map.next_value()?
            };
            // A repeated key keeps its first place and takes the last value, as in a `Map`.
            match fields.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => fields.push((key, value)),
            }
        }
        Ok(Content::from_fields(fields, raw))
    }

    // Anything but an object is kept as it is.
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Content, E> {
        Ok(Content::Other(Value::Bool(v)))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Content, E> {
        Ok(Content::Other(Value::from(v)))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Content, E> {
        Ok(Content::Other(Value::from(v)))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Content, E> {
        Ok(Content::Other(Value::from(v)))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Content, E> {
        Ok(Content::Other(Value::String(v.to_string())))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Content, E> {
        Ok(Content::Other(Value::String(v)))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Content, E> {
        Ok(Content::Other(Value::Null))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Content, E> {
        Ok(Content::Other(Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Content, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Content, A::Error> {
        use serde::de::value::SeqAccessDeserializer;
        Ok(Content::Other(Value::deserialize(
            SeqAccessDeserializer::new(seq),
        )?))
    }
}

/// The `input` field as text: the reader's raw text, else the value read.
fn raw_input(fields: &mut Fields<'_>, raw: Option<Box<RawValue>>) -> RawJson {
    let value = take(fields, "input");
    match raw {
        Some(raw) => RawJson(raw),
        None => RawJson::from_value(&value.unwrap_or_default()),
    }
}

/// Put the raw `input` back as a value (for an item kept whole as `Other`).
fn restore_input<'k>(mut fields: Fields<'k>, raw: Option<Box<RawValue>>) -> Fields<'k> {
    if let Some(raw) = raw {
        if let Some(slot) = fields.iter_mut().find(|(k, _)| k == "input") {
            slot.1 = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
        }
    }
    fields
}

fn is_str(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::String(_)))
}

fn opt_str(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null | Value::String(_)))
}

/// A field's value.
fn get<'v>(fields: &'v [(Cow<'_, str>, Value)], key: &str) -> Option<&'v Value> {
    fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Remove a field.
fn take(fields: &mut Fields<'_>, key: &str) -> Option<Value> {
    let i = fields.iter().position(|(k, _)| k == key)?;
    Some(fields.remove(i).1)
}

/// Remove a field unless it is `null` (a `null` stays, to be written back from `extra`).
fn take_non_null(fields: &mut Fields<'_>, key: &str) -> Option<Value> {
    match fields.iter().find(|(k, _)| k == key) {
        None | Some((_, Value::Null)) => None,
        Some(_) => take(fields, key),
    }
}

fn take_str(fields: &mut Fields<'_>, key: &str) -> Option<String> {
    match take_non_null(fields, key) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// Serialize `{"type": name, ...fields}` with `type` first, as the runtime writes it.
fn serialize_tagged<S: Serializer, T: Serialize>(
    s: S,
    name: &str,
    part: &T,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let v = serde_json::to_value(part).map_err(serde::ser::Error::custom)?;
    let Value::Object(fields) = v else {
        return Err(serde::ser::Error::custom("content part is not an object"));
    };
    let mut m = s.serialize_map(Some(fields.len() + 1))?;
    m.serialize_entry("type", name)?;
    for (k, v) in &fields {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

/// Serialize `{"type": name, fields…, "input": raw, extra…}` without re-encoding the input.
fn serialize_with_input<S: Serializer>(
    s: S,
    name: &str,
    fields: &[(&str, &str)],
    input: &RawJson,
    extra: &Extra,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(fields.len() + 2 + extra.len()))?;
    m.serialize_entry("type", name)?;
    for (k, v) in fields {
        m.serialize_entry(k, v)?;
    }
    m.serialize_entry("input", input)?;
    for (k, v) in extra.iter() {
        m.serialize_entry(k, v)?;
    }
    m.end()
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Content::Text(p) => serialize_tagged(s, "text", p),
            Content::Thinking(p) => serialize_tagged(s, "thinking", p),
            Content::ToolUse(p) => {
                let fields = [("id", p.id.as_str()), ("name", p.name.as_str())];
                serialize_with_input(s, "tool_use", &fields, &p.input, &p.extra)
            }
            Content::ToolResult(p) => serialize_tagged(s, "tool_result", p),
            Content::CompactBoundary(p) => {
                serialize_with_input(s, "compact_boundary", &[], &p.input, &p.extra)
            }
            Content::Other(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ContentVisitor)
    }
}

/// A short name for the kind of a JSON value, for messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parse one line (without its newline) into a record. The error is serde_json's message.
///
/// A line that is UTF-8 throughout (every line the runtime writes) is checked once, with
/// SIMD, and parsed as text: serde_json then does not check each string again, which was a
/// tenth of a large transcript's parse. Any other line is parsed as bytes, with serde_json's
/// own error for what is not UTF-8 inside a string.
pub fn parse_line(line: &[u8]) -> Result<Record, serde_json::Error> {
    match simdutf8::basic::from_utf8(line) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(line),
    }
}
