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

// ---------------------------------------------------------------------------------------------
// Writing

/// The label of a message without a ref.
const UNADDRESSED: &str = "(unaddressed)";

/// Render an archive. With `call: None` and `with_body_sha256: false` the bytes are the
/// runtime's for the same input; the two normafs keys follow the runtime's keys.
pub fn render(a: &Archive, labels: Labels) -> String {
    let body = render_body(a, labels.text());
    let mut out = String::with_capacity(body.len() + 512);
    out.push_str("---\n");
    key(&mut out, "block", &a.block_id);
    key(&mut out, "tier", &a.tier.to_string());
    if !a.session.is_empty() {
        key(&mut out, "session", &a.session);
    }
    if !a.created.is_empty() {
        key(&mut out, "created", &a.created);
    }
    key(&mut out, "range", &format!("{}-{}", a.start_ref, a.end_ref));
    // The counts come from the entries themselves, so they cannot disagree with the body.
    let consumed: Vec<&str> = a
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::Block(b) => Some(b.block_id.as_str()),
            Entry::Message(_) => None,
        })
        .collect();
    let messages = a.entries.len() - consumed.len();
    if consumed.is_empty() {
        key(&mut out, "message_count", &messages.to_string());
    } else {
        key(
            &mut out,
            "consumed_blocks",
            &format!("[{}]", consumed.join(", ")),
        );
        key(&mut out, "loose_messages", &messages.to_string());
    }
    key(&mut out, "original_tokens", &a.original_tokens.to_string());
    if !a.topic.is_empty() {
        key(&mut out, "topic", &a.topic);
    }
    if let Some(call) = &a.call {
        key(&mut out, "call", call);
    }
    if a.with_body_sha256 {
        key(&mut out, "body_sha256", &sha256_hex(body.as_bytes()));
    }
    out.push_str("---\n");
    out.push_str(&body);
    out
}

/// One `key: value` frontmatter line. A value is one line: a line break in it (a topic
/// given with one; the runtime writes it as it is, leaving a frontmatter no reader can take
/// apart) is written as a space.
fn key(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    out.push_str(": ");
    if value.contains(['\n', '\r']) {
        out.push_str(&value.replace(['\n', '\r'], " "));
    } else {
        out.push_str(value);
    }
    out.push('\n');
}

/// Everything after the closing `---` line (what `body_sha256` covers).
fn render_body(a: &Archive, l: &LabelText) -> String {
    let mut out = String::new();
    out.push('\n');
    out.push_str("# ");
    out.push_str(l.title);
    out.push(' ');
    span_line(&mut out, &a.block_id, a.tier, &a.start_ref, &a.end_ref);
    out.push('\n');
    let summary = a.summary.trim();
    if !summary.is_empty() {
        out.push_str(l.summary);
        out.push_str("\n\n");
        for line in summary.split('\n') {
            out.push_str("> ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str("---\n\n");
    // With absorbed blocks at level 2, loose messages go one level down.
    let level = if a.entries.iter().any(|e| matches!(e, Entry::Block(_))) {
        "###"
    } else {
        "##"
    };
    for e in &a.entries {
        match e {
            Entry::Block(b) => block_entry(&mut out, b, l),
            Entry::Message(m) => message_entry(&mut out, m, level),
        }
    }
    out
}

/// `b3 · Tier 1 · m00010–m00042` and a line break: the title's and a block heading's tail.
fn span_line(out: &mut String, block_id: &str, tier: i64, start: &str, end: &str) {
    out.push_str(block_id);
    out.push_str(" · Tier ");
    out.push_str(&tier.to_string());
    out.push_str(" · ");
    out.push_str(start);
    out.push('–');
    out.push_str(end);
    out.push('\n');
}

/// Messages rendered as a tier-1 archive's entries (`raw/` files show ranges this way).
pub fn render_messages(entries: &[MessageEntry]) -> String {
    let mut out = String::new();
    for m in entries {
        message_entry(&mut out, m, "##");
    }
    out
}

fn block_entry(out: &mut String, b: &BlockEntry, l: &LabelText) {
    out.push_str("## ");
    span_line(out, &b.block_id, b.tier, &b.start_ref, &b.end_ref);
    out.push('\n');
    if !b.topic.is_empty() {
        out.push_str("**");
        out.push_str(&b.topic);
        out.push_str("**\n\n");
    }
    let summary = b.summary.trim();
    if !summary.is_empty() {
        out.push_str(summary);
        out.push_str("\n\n");
    }
    if !b.archive_rel.is_empty() {
        // The link is followed from a `tier<N>/` file, one directory below the root.
        let link = if b.archive_rel.contains('/') {
            format!("../{}", b.archive_rel)
        } else {
            b.archive_rel.clone()
        };
        out.push_str(l.child);
        out.push_str("[`");
        out.push_str(&b.archive_rel);
        out.push_str("`](");
        out.push_str(&link);
        out.push_str(")\n");
    }
    if !b.archive_path.is_empty() {
        out.push_str(l.absolute);
        out.push('`');
        out.push_str(&b.archive_path);
        out.push_str("`\n");
    }
    out.push('\n');
}

fn message_entry(out: &mut String, m: &MessageEntry, level: &str) {
    out.push_str(level);
    out.push(' ');
    out.push_str(m.reference.as_deref().unwrap_or(UNADDRESSED));
    out.push_str(" · ");
    match m.kind {
        MessageKind::Text | MessageKind::Thinking => {
            out.push_str(&m.role);
            if m.kind == MessageKind::Thinking {
                out.push_str(" · thinking");
            }
            out.push_str("\n\n");
            out.push_str(&m.text);
            out.push_str("\n\n");
        }
        MessageKind::ToolUse => {
            out.push_str(&m.role);
            out.push_str(" · tool_use · ");
            out.push_str(&m.tool);
            out.push_str("\n\n");
            fenced(out, &m.text, "json");
        }
        MessageKind::ToolResult => {
            out.push_str("tool_result · ");
            out.push_str(if m.tool.is_empty() { "tool" } else { &m.tool });
            out.push_str("\n\n");
            fenced(out, &m.text, "");
        }
    }
}

/// The length of the longest run of backticks in `s`.
fn longest_backtick_run(s: &str) -> usize {
    let (mut longest, mut run) = (0, 0);
    for b in s.bytes() {
        run = if b == b'`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// `body` in a fence of backticks one longer than any run inside it, and at least three, so
/// that no line of the body can close it.
fn fenced(out: &mut String, body: &str, info: &str) {
    let fence = "`".repeat((longest_backtick_run(body) + 1).max(3));
    out.push_str(&fence);
    out.push_str(info);
    out.push('\n');
    out.push_str(body);
    if !body.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&fence);
    out.push_str("\n\n");
}

// ---------------------------------------------------------------------------------------------
// Reading

/// The frontmatter as read; every key is kept, unknown ones in [`Frontmatter::other`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Frontmatter {
    pub block: String,
    pub tier: Option<i64>,
    pub session: Option<String>,
    pub created: Option<String>,
    /// `range: <start>-<end>`, split at its first `-`.
    pub range: Option<(String, String)>,
    pub message_count: Option<i64>,
    /// `[b1, b2]`; `[]` reads as an empty list.
    pub consumed_blocks: Option<Vec<String>>,
    pub loose_messages: Option<i64>,
    pub original_tokens: Option<i64>,
    pub topic: Option<String>,
    pub call: Option<String>,
    /// As written (the comparison with the body ignores ASCII case).
    pub body_sha256: Option<String>,
    /// Unknown keys with their values, in file order.
    pub other: Vec<(String, String)>,
}

/// One entry heading found in the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    /// 2 or 3 (the number of `#`).
    pub level: u8,
    /// 1-based line number in the file.
    pub line: usize,
    pub kind: HeadingKind,
}

/// What a heading line says. The grammar (fields separated by ` · `):
///
/// - `<ref> · <role>` text; `<ref> · <role> · thinking`; `<ref> · <role> · tool_use · <tool>`;
///   `<ref> · tool_result · <tool>`, where `<ref>` is `m` and digits or `(unaddressed)` and
///   `<role>` one of `user`, `assistant`, `tool`; at level 2 or 3.
/// - `<block> · Tier <n> · <start>–<end>`, where `<block>` is `b` and digits; at level 2 only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadingKind {
    Message {
        /// `None` for `(unaddressed)`.
        reference: Option<String>,
        /// `None` for a tool result.
        role: Option<String>,
        kind: MessageKind,
        /// `Some` for tool_use and tool_result.
        tool: Option<String>,
    },
    Block {
        block_id: String,
        tier: i64,
        start_ref: String,
        end_ref: String,
    },
}

/// A read archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub frontmatter: Frontmatter,
    /// From the title, else the summary label, else an absorbed block's link line; Chinese
    /// when none of them is there.
    pub labels: Labels,
    /// The title line after `# ` (`归档 b3 · Tier 1 · m00010–m00042`).
    pub title: Option<String>,
    /// The quoted summary, its lines joined with `\n`; `None` without the summary label.
    pub summary: Option<String>,
    /// The entry headings in file order.
    pub headings: Vec<Heading>,
    /// Whether `body_sha256` matches the body; `None` without that key.
    pub body_sha256_ok: Option<bool>,
}

/// Why an archive cannot be read. Only the frontmatter can make reading fail (SPEC 9
/// `archive.corrupt`); the body is read as far as it goes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("no frontmatter: the first line is not `---`")]
    NoFrontmatter,
    #[error("the frontmatter has no closing `---` line")]
    UnclosedFrontmatter,
    #[error("frontmatter: {0}")]
    Frontmatter(String),
}

/// A value quoted for an error message: one line (Debug escapes line breaks), and short.
fn quoted(value: &str) -> String {
    const MAX: usize = 60;
    match value.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}…", &value[..cut]),
        None => format!("{value:?}"),
    }
}

/// Read an archive of either label language. Never panics; fails only on the frontmatter.
pub fn parse(text: &str) -> Result<Parsed, ArchiveError> {
    let (lines, body) = frontmatter_lines(text).ok_or_else(|| {
        if text.starts_with("---\n") {
            ArchiveError::UnclosedFrontmatter
        } else {
            ArchiveError::NoFrontmatter
        }
    })?;
    let frontmatter = read_frontmatter(&lines)?;
    let body_sha256_ok = frontmatter
        .body_sha256
        .as_ref()
        .map(|want| want.eq_ignore_ascii_case(&sha256_hex(body.as_bytes())));
    // The opening line, the key lines, the closing line: the body starts on the line after.
    let first_line = lines.len() + 3;
    let body = read_body(body, first_line);
    Ok(Parsed {
        frontmatter,
        labels: body.labels.unwrap_or_default(),
        title: body.title,
        summary: body.summary,
        headings: body.headings,
        body_sha256_ok,
    })
}

/// The frontmatter's `key: value` lines. Values are taken as written after the one space the
/// runtime puts after the colon (not trimmed: a topic is written verbatim). Empty lines are
/// skipped; a line without a colon, an unreadable value and a repeated key are errors.
fn read_frontmatter(lines: &[(usize, &str)]) -> Result<Frontmatter, ArchiveError> {
    let mut fm = Frontmatter::default();
    let mut block = None;
    let mut seen: Vec<&str> = Vec::new();
    for &(no, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: String| ArchiveError::Frontmatter(format!("line {no}: {what}"));
        let Some((k, v)) = line.split_once(':') else {
            return Err(bad(format!("not a `key: value` line: {}", quoted(line))));
        };
        let v = v.strip_prefix(' ').unwrap_or(v);
        if k.is_empty() || k.contains(char::is_whitespace) {
            return Err(bad(format!("not a `key: value` line: {}", quoted(line))));
        }
        if seen.contains(&k) {
            return Err(bad(format!("key `{k}` appears twice")));
        }
        seen.push(k);
        let int = |v: &str| {
            v.trim()
                .parse::<i64>()
                .map_err(|_| bad(format!("`{k}` is not an integer: {}", quoted(v))))
        };
        match k {
            "block" => block = Some(v.to_string()),
            "tier" => fm.tier = Some(int(v)?),
            "session" => fm.session = Some(v.to_string()),
            "created" => fm.created = Some(v.to_string()),
            "range" => {
                let (s, e) = v
                    .split_once('-')
                    .ok_or_else(|| bad(format!("`range` is not `<start>-<end>`: {}", quoted(v))))?;
                fm.range = Some((s.to_string(), e.to_string()));
            }
            "message_count" => fm.message_count = Some(int(v)?),
            "consumed_blocks" => {
                let inner = v
                    .trim()
                    .strip_prefix('[')
                    .and_then(|r| r.strip_suffix(']'))
                    .ok_or_else(|| {
                        bad(format!(
                            "`consumed_blocks` is not `[b1, b2]`: {}",
                            quoted(v)
                        ))
                    })?;
                let ids = if inner.trim().is_empty() {
                    Vec::new()
                } else {
                    inner.split(',').map(|s| s.trim().to_string()).collect()
                };
                fm.consumed_blocks = Some(ids);
            }
            "loose_messages" => fm.loose_messages = Some(int(v)?),
            "original_tokens" => fm.original_tokens = Some(int(v)?),
            "topic" => fm.topic = Some(v.to_string()),
            "call" => fm.call = Some(v.to_string()),
            "body_sha256" => fm.body_sha256 = Some(v.trim().to_string()),
            _ => fm.other.push((k.to_string(), v.to_string())),
        }
    }
    fm.block = block.ok_or_else(|| ArchiveError::Frontmatter("no `block` key".to_string()))?;
    Ok(fm)
}

/// What the body yields.
#[derive(Default)]
struct Body {
    labels: Option<Labels>,
    title: Option<String>,
    summary: Option<String>,
    headings: Vec<Heading>,
}

/// Where the body reader is.
enum At<'a> {
    /// Before the `---` line that ends the title and summary.
    Header,
    /// Inside the quoted summary (`quoting`: its first `>` line was seen).
    Summary { lines: Vec<&'a str>, quoting: bool },
    /// Between and inside entries (text bodies included).
    Entries,
    /// After a tool heading, before its fence's opening line.
    BeforeFence,
    /// Inside a fence that closes at a line equal to `fence`.
    Fence(&'a str),
}

/// The leading backtick run of a fence's opening line, when it has three or more.
fn fence_run(line: &str) -> Option<&str> {
    let run = line.bytes().take_while(|&b| b == b'`').count();
    // Backticks are ASCII, so `run` is a char boundary.
    (run >= 3).then(|| &line[..run])
}

fn read_body(body: &str, first_line: usize) -> Body {
    let mut out = Body::default();
    let mut at = At::Header;
    let mut lines = body.split('\n').enumerate().peekable();
    // An empty line (or the header's end) before the current one: a heading needs one.
    let mut after_blank = true;
    while let Some((i, line)) = lines.next() {
        let no = first_line + i;
        let next = lines.peek().map(|&(_, l)| l);
        let blank = line.is_empty();
        match &mut at {
            At::Header => {
                if line == "---" {
                    at = At::Entries;
                    after_blank = true;
                    continue;
                }
                if let Some(title) = line.strip_prefix("# ") {
                    if out.title.is_none() {
                        out.title = Some(title.to_string());
                        if title.starts_with("归档 ") {
                            out.labels.get_or_insert(Labels::Chinese);
                        } else if title.starts_with("Archive ") {
                            out.labels.get_or_insert(Labels::English);
                        }
                    }
                } else if line == CHINESE.summary || line == ENGLISH.summary {
                    let which = if line == CHINESE.summary {
                        Labels::Chinese
                    } else {
                        Labels::English
                    };
                    out.labels.get_or_insert(which);
                    at = At::Summary {
                        lines: Vec::new(),
                        quoting: false,
                    };
                } else if heading(line).is_some() {
                    // No separator line: the entries start here.
                    at = At::Entries;
                    entry_line(&mut out, &mut at, line, no, true, next);
                }
            }
            At::Summary {
                lines: quote,
                quoting,
            } => {
                let stripped = line.strip_prefix("> ").or_else(|| line.strip_prefix('>'));
                match stripped {
                    Some(s) => {
                        *quoting = true;
                        quote.push(s);
                    }
                    // Empty lines between the label and the quote.
                    None if blank && !*quoting => {}
                    None => {
                        out.summary = Some(quote.join("\n"));
                        at = At::Header;
                        if line == "---" {
                            at = At::Entries;
                            after_blank = true;
                            continue;
                        }
                    }
                }
            }
            At::Entries | At::BeforeFence => {
                entry_line(&mut out, &mut at, line, no, after_blank, next);
            }
            At::Fence(fence) => {
                if line == *fence {
                    at = At::Entries;
                }
            }
        }
        after_blank = blank;
    }
    if let At::Summary { lines, .. } = at {
        out.summary = Some(lines.join("\n"));
    }
    out
}

/// One line between or inside entries (not inside a fence).
fn entry_line<'a>(
    out: &mut Body,
    at: &mut At<'a>,
    line: &'a str,
    no: usize,
    after_blank: bool,
    next: Option<&str>,
) {
    if let At::BeforeFence = at {
        if line.is_empty() {
            return;
        }
        if let Some(run) = fence_run(line) {
            *at = At::Fence(run);
            return;
        }
        // No fence where the writer puts one: read on as ordinary lines.
        *at = At::Entries;
    }
    if out.labels.is_none() {
        if line.starts_with(CHINESE.child) || line.starts_with(CHINESE.absolute) {
            out.labels = Some(Labels::Chinese);
        } else if line.starts_with(ENGLISH.child) || line.starts_with(ENGLISH.absolute) {
            out.labels = Some(Labels::English);
        }
    }
    // The writer puts an empty line on each side of every heading; the end of the file after
    // one is accepted too (a truncated file).
    if !after_blank || !next.is_none_or(str::is_empty) {
        return;
    }
    let Some((level, kind)) = heading(line) else {
        return;
    };
    if let HeadingKind::Message {
        kind: MessageKind::ToolUse | MessageKind::ToolResult,
        ..
    } = kind
    {
        *at = At::BeforeFence;
    }
    out.headings.push(Heading {
        level,
        line: no,
        kind,
    });
}

/// A heading line's level and meaning, when it follows the grammar of [`HeadingKind`].
fn heading(line: &str) -> Option<(u8, HeadingKind)> {
    let (level, rest) = if let Some(r) = line.strip_prefix("### ") {
        (3, r)
    } else {
        (2, line.strip_prefix("## ")?)
    };
    let parts: Vec<&str> = rest.split(" · ").collect();
    let label = *parts.first()?;
    if is_block_id(label) {
        if level != 2 || parts.len() != 3 {
            return None;
        }
        let tier = parts[1].strip_prefix("Tier ")?.parse::<i64>().ok()?;
        let (start, end) = parts[2].split_once('–')?;
        return Some((
            level,
            HeadingKind::Block {
                block_id: label.to_string(),
                tier,
                start_ref: start.to_string(),
                end_ref: end.to_string(),
            },
        ));
    }
    let reference = if label == UNADDRESSED {
        None
    } else if is_ref(label) {
        Some(label.to_string())
    } else {
        return None;
    };
    let second = *parts.get(1)?;
    // A tool name may itself contain ` · `: it is the rest of the line.
    let tail = |from: usize| parts[from..].join(" · ");
    let (role, kind, tool) = match (second, parts.get(2).copied()) {
        ("tool_result", Some(_)) => (None, MessageKind::ToolResult, Some(tail(2))),
        ("user" | "assistant" | "tool", third) => {
            let role = Some(second.to_string());
            match third {
                None => (role, MessageKind::Text, None),
                Some("thinking") if parts.len() == 3 => (role, MessageKind::Thinking, None),
                Some("tool_use") if parts.len() >= 4 => (role, MessageKind::ToolUse, Some(tail(3))),
                Some(_) => return None,
            }
        }
        _ => return None,
    };
    Some((
        level,
        HeadingKind::Message {
            reference,
            role,
            kind,
            tool,
        },
    ))
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
