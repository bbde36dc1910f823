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
