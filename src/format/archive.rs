//! Tier archives in the runtime's own layout (SPEC 2.4): a writer whose output is the runtime's
//! byte for byte, plus normafs's two frontmatter keys, and a reader for both label languages.
//!
//! The layout, every line ending in `\n` (`·` is U+00B7; the title and heading ranges use the
//! en dash U+2013, the frontmatter `range:` an ASCII `-`):
//!
//! ```text
//! ---
//! block: b3
//! tier: 1
//! session: s2                      omitted when empty
//! created: 2026-12-01T09:06:56Z    omitted when empty
//! range: m00010-m00042
//! message_count: 4                 no absorbed blocks; else consumed_blocks: [b1, b2] and
//! original_tokens: 5320                                     loose_messages: <messages>
//! topic: build fixes               omitted when empty
//! call: toolu_01                   normafs only
//! body_sha256: <hex>               normafs only: SHA-256 of every byte after the closing line
//! ---
//!
//! # 归档 b3 · Tier 1 · m00010–m00042
//!
//! **摘要**（当前在上下文中生效的版本）：   only when the trimmed summary is not empty
//!
//! > one quoted line per line of the trimmed summary
//!
//! ---
//!
//! ## m00010 · user                        entries in view order, each heading followed by an
//!                                          empty line, each entry ending in an empty line
//! ```
//!
//! Reading. Headings are recognised by their exact grammar ([`HeadingKind`]), only after the
//! header (the first `---` line after the frontmatter), and only with an empty line before and
//! after them, as the writer puts them. The body of a tool_use or tool_result is a fence: its
//! opening line is a run of three or more backticks after the heading's empty line, and it
//! closes only at a line that is exactly that run. The writer makes the run longer than any run
//! inside the body, so no body line can close it, and nothing inside it is a heading.
//!
//! Text and thinking bodies are written verbatim, without a fence, so the format cannot tell a
//! line of such a body that is shaped exactly like a heading (with an empty line on each side)
//! from a real heading: the reader takes it for a heading. Backtick lines in those bodies are
//! body text, not fences (a model's unbalanced code fence must not hide every later heading).
//! The audit compares the heading count with the frontmatter's counts, which catches both.

mod write;
pub use write::*;

mod read;
pub use read::*;

use sha2::{Digest, Sha256};

use crate::format::memory::frontmatter_lines;

/// The language of the fixed labels. The runtime writes Chinese; a vendored variant of it
/// writes English. The structure is the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Labels {
    #[default]
    Chinese,
    English,
}

/// The fixed strings of one label language.
struct LabelText {
    /// The title's first word: `# <title> b3 · Tier 1 · …`.
    title: &'static str,
    /// The line before the quoted summary.
    summary: &'static str,
    /// Prefix of an absorbed block's relative link line.
    child: &'static str,
    /// Prefix of an absorbed block's absolute path line.
    absolute: &'static str,
}

const CHINESE: LabelText = LabelText {
    title: "归档",
    summary: "**摘要**（当前在上下文中生效的版本）：",
    child: "> 下级归档：",
    absolute: "> 绝对路径：",
};

const ENGLISH: LabelText = LabelText {
    title: "Archive",
    summary: "**Summary** (the version currently active in context):",
    child: "> Child archive: ",
    absolute: "> Absolute path: ",
};

impl Labels {
    fn text(self) -> &'static LabelText {
        match self {
            Labels::Chinese => &CHINESE,
            Labels::English => &ENGLISH,
        }
    }
}

/// What a message entry holds (the noa content types text / reasoning / tool-call /
/// tool-result).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    Text,
    Thinking,
    ToolUse,
    ToolResult,
}

/// One original message of the block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageEntry {
    /// The message's ref (`m00012`); `None` renders `(unaddressed)`.
    pub reference: Option<String>,
    /// `user`, `assistant` or `tool` (noa roles); a tool result's heading has no role.
    pub role: String,
    pub kind: MessageKind,
    /// The tool's name (tool_use, tool_result); an empty name renders `tool` for a result.
    pub tool: String,
    /// The body verbatim; for a tool_use its input JSON as stored.
    pub text: String,
}

/// An absorbed lower-tier block (archives of tier 2 and above).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockEntry {
    pub block_id: String,
    pub tier: i64,
    pub start_ref: String,
    pub end_ref: String,
    pub topic: String,
    pub summary: String,
    /// `tier1/b1_….md`, relative to the archive root; empty omits the link line.
    pub archive_rel: String,
    /// Absolute path of the block's archive; empty omits the path line.
    pub archive_path: String,
}

/// One entry of an archive, in view order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Message(MessageEntry),
    Block(BlockEntry),
}

/// Everything one archive file is rendered from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Archive {
    pub block_id: String,
    pub tier: i64,
    /// Empty omits the `session:` key.
    pub session: String,
    /// RFC 3339 to the second; empty omits the `created:` key.
    pub created: String,
    pub start_ref: String,
    pub end_ref: String,
    /// Empty omits the `topic:` key.
    pub topic: String,
    pub summary: String,
    /// The block's `compressedTokens`.
    pub original_tokens: i64,
    /// In view order.
    pub entries: Vec<Entry>,
    /// normafs: `call: <compressCallId>`.
    pub call: Option<String>,
    /// normafs: `body_sha256: <hex of every byte after the closing --- line>`.
    pub with_body_sha256: bool,
}

/// The archive's file name: `b3_m00010-m00042.md`.
pub fn file_name(block_id: &str, start_ref: &str, end_ref: &str) -> String {
    format!("{block_id}_{start_ref}-{end_ref}.md")
}

/// The inverse of [`file_name`]: `(block_id, start_ref, end_ref)`, or `None` for any other
/// name. The block id is `b` and digits; each ref is one or more ASCII letters and digits (the
/// runtime falls back to the requested endpoints, which can be block ids, when a block's
/// coverage has no ref), so the split is unambiguous and `file_name` gives the name back.
pub fn parse_file_name(name: &str) -> Option<(String, String, String)> {
    let stem = name.strip_suffix(".md")?;
    let (block, span) = stem.split_once('_')?;
    let (start, end) = span.split_once('-')?;
    let is_ref = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric());
    if !is_block_id(block) || !is_ref(start) || !is_ref(end) {
        return None;
    }
    Some((block.to_string(), start.to_string(), end.to_string()))
}

/// The directory of a tier's archives, relative to the session's archive root: `tier1`.
pub fn tier_dir(tier: i64) -> String {
    format!("tier{tier}")
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// `b` followed by one or more ASCII digits.
fn is_block_id(s: &str) -> bool {
    s.strip_prefix('b')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// `m` followed by one or more ASCII digits (the runtime writes five; readers are lenient).
fn is_ref(s: &str) -> bool {
    s.strip_prefix('m')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(
        reference: Option<&str>,
        role: Option<&str>,
        kind: MessageKind,
        tool: Option<&str>,
    ) -> HeadingKind {
        HeadingKind::Message {
            reference: reference.map(str::to_string),
            role: role.map(str::to_string),
            kind,
            tool: tool.map(str::to_string),
        }
    }

    #[test]
    fn heading_grammar() {
        use MessageKind::*;
        let cases = [
            (
                "## m00010 · user",
                2,
                msg(Some("m00010"), Some("user"), Text, None),
            ),
            (
                "### m00011 · assistant · thinking",
                3,
                msg(Some("m00011"), Some("assistant"), Thinking, None),
            ),
            (
                "## m00012 · assistant · tool_use · Bash",
                2,
                msg(Some("m00012"), Some("assistant"), ToolUse, Some("Bash")),
            ),
            (
                "## m00012 · assistant · tool_use · a · b",
                2,
                msg(Some("m00012"), Some("assistant"), ToolUse, Some("a · b")),
            ),
            (
                "## m00012 · assistant · tool_use · ",
                2,
                msg(Some("m00012"), Some("assistant"), ToolUse, Some("")),
            ),
            (
                "## m00013 · tool_result · Bash",
                2,
                msg(Some("m00013"), None, ToolResult, Some("Bash")),
            ),
            (
                "### (unaddressed) · tool_result · tool",
                3,
                msg(None, None, ToolResult, Some("tool")),
            ),
            ("## m5 · tool", 2, msg(Some("m5"), Some("tool"), Text, None)),
        ];
        for (line, level, kind) in cases {
            assert_eq!(heading(line), Some((level, kind)), "{line}");
        }
        assert_eq!(
            heading("## b1 · Tier 1 · m00001–m00009"),
            Some((
                2,
                HeadingKind::Block {
                    block_id: "b1".into(),
                    tier: 1,
                    start_ref: "m00001".into(),
                    end_ref: "m00009".into(),
                }
            ))
        );
        for line in [
            "",
            "#",
            "## ",
            "# m00010 · user",
            "#### m00010 · user",
            "##m00010 · user",
            "## m00010",
            "## m00010 · system",
            "## m00010 ·  user",
            "## m00010 · user ",
            "## m00010 · user · extra",
            "## m00010 · assistant · thinking · x",
            "## m00010 · assistant · tool_use",
            "## m00010 · tool_result",
            "## M00010 · user",
            "## m · user",
            "## m0001x · user",
            "## x00010 · user",
            "## (unaddressed)",
            "### b1 · Tier 1 · m00001–m00009",
            "## b1 · Tier x · m00001–m00009",
            "## b1 · tier 1 · m00001–m00009",
            "## b1 · Tier 1 · m00001-m00009",
            "## b1 · Tier 1",
            "## b1 · Tier 1 · m1–m2 · x",
            "## b · Tier 1 · m1–m2",
        ] {
            assert_eq!(heading(line), None, "{line:?}");
        }
    }

    #[test]
    fn fence_lengths() {
        assert_eq!(longest_backtick_run(""), 0);
        assert_eq!(longest_backtick_run("a`b``c```"), 3);
        assert_eq!(fence_run("```json"), Some("```"));
        assert_eq!(fence_run("````"), Some("````"));
        assert_eq!(fence_run("``"), None);
        assert_eq!(fence_run(" ```"), None);
        let mut out = String::new();
        fenced(&mut out, "a``b", "json");
        assert_eq!(out, "```json\na``b\n```\n\n");
        out.clear();
        fenced(&mut out, "x\n````\n", "");
        assert_eq!(out, "`````\nx\n````\n`````\n\n");
    }

    #[test]
    fn quoted_values_are_short_single_lines() {
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
        let long = "é".repeat(100);
        let q = quoted(&long);
        assert!(q.ends_with('…') && q.chars().count() == 63, "{q}");
    }

    #[test]
    fn file_name_inverts() {
        for (b, s, e) in [("b1", "m00001", "m00009"), ("b123", "m5", "b7")] {
            let name = file_name(b, s, e);
            assert_eq!(
                parse_file_name(&name),
                Some((b.to_string(), s.to_string(), e.to_string()))
            );
        }
    }

    #[test]
    fn sha256_of_nothing() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn labels_from_the_summary_or_a_child_link_without_a_title() {
        let p = parse("---\nblock: b1\n---\n\n**Summary** (the version currently active in context):\n\n> s\n\n---\n")
            .unwrap();
        assert_eq!(
            (p.labels, p.title, p.summary.as_deref()),
            (Labels::English, None, Some("s"))
        );
        let p = parse(
            "---\nblock: b2\n---\n\n---\n\n## b1 · Tier 1 · m1–m2\n\n> Child archive: [`x`](x)\n\n",
        )
        .unwrap();
        assert_eq!((p.labels, p.headings.len()), (Labels::English, 1));
        let p = parse("---\nblock: b2\n---\n").unwrap();
        assert_eq!(p.labels, Labels::Chinese);
    }
}
