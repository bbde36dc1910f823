//! STUB (replaced by the h-state branch): the shape of the runtime's state.json v1.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Default)]
pub struct State {
    pub version: i64,
    pub session_id: String,
    pub next_block_id: i64,
    pub blocks: Option<Vec<Block>>,
    pub message_refs: MessageRefs,
    pub token_snapshot: HashMap<String, i64>,
    pub nudge: NudgeState,
    pub stats: Stats,
    pub derived_from: String,
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Block {
    pub block_id: String,
    pub tier: i64,
    pub topic: String,
    pub summary: String,
    pub direct_message_ids: Vec<String>,
    pub effective_message_ids: Vec<String>,
    pub direct_block_ids: Vec<String>,
    pub archive_path: String,
    pub archive_rel: String,
    pub compressed_tokens: i64,
    pub start_ref: String,
    pub end_ref: String,
    pub created_at: i64,
    pub active: bool,
    pub compress_call_id: String,
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct MessageRefs {
    pub by_raw: HashMap<String, String>,
    pub by_ref: HashMap<String, String>,
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct NudgeState {
    pub last_per_message_nudge_tokens: i64,
    pub last_nudge_shown_tokens: i64,
    pub last_shown_by_tier: BTreeMap<String, i64>,
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stats {
    pub tokens_compressed: i64,
    pub compression_count: i64,
    pub extra: Map<String, Value>,
}

impl State {
    pub fn initial(session_id: &str) -> State {
        State {
            version: 1,
            session_id: session_id.to_string(),
            next_block_id: 1,
            ..State::default()
        }
    }

    pub fn blocks(&self) -> &[Block] {
        self.blocks.as_deref().unwrap_or(&[])
    }

    pub fn to_json(&self) -> String {
        String::new()
    }
}
