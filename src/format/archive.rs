//! TEMPORARY API stub, replaced by the real writer/parser from the formats branch.
#![allow(dead_code)]
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frontmatter {
    pub block: String,
    pub tier: u32,
    pub start: String,
    pub end: String,
    pub original_tokens: u64,
    pub session: Option<String>,
    pub created: Option<String>,
    pub topic: Option<String>,
    pub message_count: Option<u64>,
    pub consumed_blocks: Option<Vec<String>>,
    pub loose_messages: Option<u64>,
    pub call: Option<String>,
    pub body_sha256: Option<String>,
    pub extra: Vec<(String, String)>,
}
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveDoc {
    pub front: Frontmatter,
    pub summary: String,
    pub entries: Vec<Entry>,
}
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Raw {
        reference: String,
        role: String,
        timestamp: Option<String>,
        parts: Vec<Part>,
    },
    Absorbed {
        block: String,
        tier: u32,
        start: String,
        end: String,
        summary: String,
        link: String,
        path: String,
    },
}
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
}
impl Part {
    pub fn from_content(_c: &crate::format::transcript::Content) -> Part {
        Part::Text(String::new())
    }
}
pub fn render(_doc: &ArchiveDoc) -> String {
    String::new()
}
pub fn file_name(block: &str, start: &str, end: &str) -> String {
    format!("{block}_{start}-{end}.md")
}
pub fn _unused(_: Value) {}
