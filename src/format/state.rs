//! Noa `state.json` v1 (SPEC 2.3): a lossless model and the load rules.
//!
//! Unknown fields at every level are kept in `extra` and written back unchanged. Maps keep the
//! order they were read in, so canonical input re-serializes to the same bytes.

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A block id: `"b3"`, or a bare number `3` that readers treat as `b3`. Kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BlockId {
    Name(String),
    Number(u64),
}

impl BlockId {
    pub fn from_number(n: u64) -> BlockId {
        BlockId::Name(format!("b{n}"))
    }

    /// The canonical name: `b3` for both `"b3"` and `3`; other strings as written.
    pub fn name(&self) -> String {
        match self {
            BlockId::Name(s) => s.clone(),
            BlockId::Number(n) => format!("b{n}"),
        }
    }

    /// The number N of `b<N>` (or of a bare number); `None` for other strings.
    pub fn number(&self) -> Option<u64> {
        match self {
            BlockId::Number(n) => Some(*n),
            BlockId::Name(s) => {
                let digits = s.strip_prefix('b')?;
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                digits.parse().ok()
            }
        }
    }
}

impl std::fmt::Display for BlockId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl Serialize for BlockId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BlockId::Name(n) => n.serialize(s),
            BlockId::Number(n) => n.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for BlockId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Number(u64),
        }
        Ok(match Raw::deserialize(d)? {
            Raw::Name(s) => BlockId::Name(s),
            Raw::Number(n) => BlockId::Number(n),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Block {
    pub block_id: BlockId,
    pub tier: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_message_ids: Option<Vec<String>>,
    pub effective_message_ids: Vec<String>,
    #[serde(default)]
    pub direct_block_ids: Vec<BlockId>,
    #[serde(default)]
    pub archive_path: String,
    pub archive_rel: String,
    #[serde(default)]
    pub compressed_tokens: u64,
    pub start_ref: String,
    pub end_ref: String,
    #[serde(default)]
    pub created_at: String,
    pub active: bool,
    #[serde(default)]
    pub compress_call_id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageRefs {
    #[serde(default)]
    pub by_raw: IndexMap<String, String>,
    #[serde(default)]
    pub by_ref: IndexMap<String, String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenSnapshot {
    #[serde(default)]
    pub by_ref: IndexMap<String, u64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NudgeState {
    #[serde(default)]
    pub last_per_message_nudge_tokens: u64,
    #[serde(default)]
    pub last_nudge_shown_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_shown_by_tier: Option<IndexMap<String, u64>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    #[serde(default)]
    pub tokens_compressed: u64,
    #[serde(default)]
    pub compression_count: u64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The whole `state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    pub version: u64,
    #[serde(default)]
    pub session_id: String,
    #[serde(default = "one")]
    pub next_block_id: u64,
    #[serde(default)]
    pub blocks: Vec<Block>,
    #[serde(default)]
    pub message_refs: MessageRefs,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_snapshot: Option<TokenSnapshot>,
    #[serde(default)]
    pub nudge: NudgeState,
    #[serde(default)]
    pub stats: Stats,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived_from: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn one() -> u64 {
    1
}

impl State {
    /// The initial state of a session: empty, `nextBlockId` 1.
    pub fn initial(session_id: &str) -> State {
        State {
            version: 1,
            session_id: session_id.to_string(),
            next_block_id: 1,
            blocks: Vec::new(),
            message_refs: MessageRefs::default(),
            token_snapshot: None,
            nudge: NudgeState::default(),
            stats: Stats::default(),
            derived_from: None,
            extra: Map::new(),
        }
    }

    /// The block with this id (`b3` and `3` are the same block).
    pub fn block(&self, id: &BlockId) -> Option<&Block> {
        let name = id.name();
        self.blocks.iter().find(|b| b.block_id.name() == name)
    }

    /// Pretty JSON with a trailing newline, the form normafs writes.
    pub fn to_pretty(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Why a `state.json` could not be used (SPEC 2.3 "Loading").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateLoadError {
    /// Not JSON, not an object, or an object that does not fit the v1 shape.
    #[error("malformed state.json: {0}")]
    Malformed(String),
    /// The file exists but cannot be read.
    #[error("cannot read state.json: {0}")]
    Io(String),
    /// `version` is not 1; the raw JSON value as written (e.g. `2`, `"1"`).
    #[error("unsupported state.json version {0} (expected 1)")]
    Version(String),
}

/// Parse `state.json` bytes.
///
/// `version` is checked on the raw JSON first, so a file of another version reports
/// [`StateLoadError::Version`] whatever its shape; a missing `version` is malformed.
pub fn parse_state(bytes: &[u8]) -> Result<State, StateLoadError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| StateLoadError::Malformed(e.to_string()))?;
    let Value::Object(map) = &value else {
        return Err(StateLoadError::Malformed(format!(
            "expected a JSON object, found {}",
            crate::format::transcript::json_kind(&value)
        )));
    };
    match map.get("version") {
        None => {
            return Err(StateLoadError::Malformed(
                "missing \"version\" field".to_string(),
            ))
        }
        Some(v) if v.as_u64() == Some(1) => {}
        Some(v) => return Err(StateLoadError::Version(v.to_string())),
    }
    State::deserialize(value).map_err(|e| StateLoadError::Malformed(e.to_string()))
}

/// The outcome of loading a session's `state.json`: always a usable state.
#[derive(Debug, Clone, PartialEq)]
pub struct StateLoad {
    /// The loaded state, or [`State::initial`] when the file is missing or unusable.
    pub state: State,
    /// Why the file could not be used; `None` when loaded or missing.
    pub error: Option<StateLoadError>,
    /// Whether something exists at the path (a file, or anything that failed to read).
    pub exists: bool,
}

/// Load `state.json` with the SPEC 2.3 rules: a missing file gives the initial state and no
/// error; a malformed file, an I/O error or `version != 1` gives an error *and* the initial
/// state of `session_id`. Nothing is repaired or rebuilt here. A symbolic link is not followed
/// (an I/O error).
pub fn load_state(path: &std::path::Path, session_id: &str) -> StateLoad {
    let failed = |error: StateLoadError| StateLoad {
        state: State::initial(session_id),
        error: Some(error),
        exists: true,
    };
    match crate::format::read_no_follow(path) {
        Ok(bytes) => match parse_state(&bytes) {
            Ok(state) => StateLoad {
                state,
                error: None,
                exists: true,
            },
            Err(e) => failed(e),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => StateLoad {
            state: State::initial(session_id),
            error: None,
            exists: false,
        },
        Err(e) => failed(StateLoadError::Io(format!("{}: {e}", path.display()))),
    }
}
