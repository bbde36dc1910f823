//! The transcript record model (SPEC 2.1): one JSON object per line, read and written losslessly.
//!
//! Every struct keeps the fields it does not know in `extra` (serde `flatten`, order preserved),
//! and content items of an unknown type, or a known type whose fields do not fit, are kept as the
//! raw JSON value. Serializing a parsed record gives back a JSON value equal to its input; for
//! input in the runtime's canonical compact form, the very same bytes.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// One line of a transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub uuid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_sidechain: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// `"message"` or `"boundary"`; any other value is kept as written.
    #[serde(rename = "type")]
    pub kind: String,
    /// `None`: absent. `Some(None)`: present and `null` (kept so the line round-trips).
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub message: Option<Option<Message>>,
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub usage: Option<Option<Usage>>,
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub boundary: Option<Option<BoundaryMeta>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
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
        self.usage.as_ref().and_then(|u| u.as_ref())
    }

    /// Serialize to the compact single-line JSON form (no trailing newline).
    pub fn to_line(&self) -> String {
        // Serializing a value built from maps and strings cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn present_or_null<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// `{role, content[]}` of an LLM message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Vec<Content>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    pub fn new(role: &str, content: Vec<Content>) -> Message {
        Message {
            role: role.to_string(),
            content,
            extra: Map::new(),
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
    pub extra: Map<String, Value>,
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
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextPart {
    pub text: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThinkingPart {
    pub thinking: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolUsePart {
    pub id: String,
    pub name: String,
    /// Raw JSON input, any value, kept as stored (key order preserved).
    #[serde(default)]
    pub input: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
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
    pub extra: Map<String, Value>,
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
    #[serde(default)]
    pub input: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
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
            text: t.to_string(),
            extra: Map::new(),
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
    pub fn from_value(v: Value) -> Content {
        let Value::Object(mut map) = v else {
            return Content::Other(v);
        };
        let kind = match map.get("type") {
            Some(Value::String(s)) => s.clone(),
            _ => return Content::Other(Value::Object(map)),
        };
        // Parse without the `type` key, then put it back on failure so nothing is lost.
        let type_value = map.shift_remove("type");
        let obj = Value::Object(map);
        let typed = match kind.as_str() {
            "text" => TextPart::deserialize(&obj).ok().map(Content::Text),
            "thinking" => ThinkingPart::deserialize(&obj).ok().map(Content::Thinking),
            "tool_use" => ToolUsePart::deserialize(&obj).ok().map(Content::ToolUse),
            "tool_result" => ToolResultPart::deserialize(&obj)
                .ok()
                .map(Content::ToolResult),
            "compact_boundary" => CompactBoundaryPart::deserialize(&obj)
                .ok()
                .map(Content::CompactBoundary),
            _ => None,
        };
        match typed {
            Some(c) => c,
            None => {
                let Value::Object(rest) = obj else {
                    return Content::Other(obj);
                };
                let mut map = Map::new();
                if let Some(t) = type_value {
                    map.insert("type".to_string(), t);
                }
                map.extend(rest);
                Content::Other(Value::Object(map))
            }
        }
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

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Content::Text(p) => serialize_tagged(s, "text", p),
            Content::Thinking(p) => serialize_tagged(s, "thinking", p),
            Content::ToolUse(p) => serialize_tagged(s, "tool_use", p),
            Content::ToolResult(p) => serialize_tagged(s, "tool_result", p),
            Content::CompactBoundary(p) => serialize_tagged(s, "compact_boundary", p),
            Content::Other(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Content::from_value(Value::deserialize(d)?))
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
pub fn parse_line(line: &[u8]) -> Result<Record, serde_json::Error> {
    serde_json::from_slice(line)
}
