//! Tier archives (SPEC 2.4): the Markdown file a compressed block's messages go to, with a
//! writer and a tolerant parser that read each other's output back to an equal model.
//!
//! Layout (every line ends in `\n`):
//!
//! ```text
//! ---
//! block: b3                      required keys: block, tier, range, original_tokens
//! tier: 1
//! range: m0010-m0042
//! original_tokens: 5320
//! …optional keys, unknown keys…
//! body_sha256: <hex>             SHA-256 of every byte after the closing `---` line
//! ---
//! # Archive b3 · tier 1 · m0010–m0042
//!
//! > summary, every line prefixed with "> "
//!
//! ## m0010 · user · <timestamp>  a raw entry: heading, empty line, parts
//! ## absorbed b1 · tier 1 · …    an absorbed block (tier >= 2)
//! ```
//!
//! Parts of a raw entry, each followed by one empty line: a first text part that is "safe"
//! (see [`is_bare_safe`]) is written bare; any other text part is `### text` plus a fence;
//! `### thinking` plus the text (bare when safe, else fenced); `### tool_use <name> (<id>)`
//! plus a `json` fence of the input; `### tool_result <id>[ (error)]` plus one fence per nested
//! item (plain for text, `json` otherwise); anything else `### <type>` plus a `json` fence of
//! the whole item. Fences are a run of backticks one longer than the longest run inside the
//! content (at least three) and close only on a line that is exactly that run, so no content
//! can end a fence early.
//!
//! Known limits of the text form, all of which need values the runtime never writes: header
//! values and headings are single lines (line breaks become spaces), frontmatter values are
//! trimmed, a role containing ` · ` with no timestamp, a tool id containing ` (`, a tool_result
//! id ending in ` (error)`, and an unknown part type spelled like a known heading
//! (`tool_use X (Y)`, `tool_result X`) do not read back as written.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::format::memory::{frontmatter_lines, frontmatter_value, one_line, split_pair};
use crate::format::transcript::{Content, Message};

/// The archive's frontmatter. `start`/`end` are the `range` key (`<start>-<end>`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontmatter {
    pub block: String,
    pub tier: u32,
    pub start: String,
    pub end: String,
    pub original_tokens: u64,
    pub session: Option<String>,
    pub created: Option<String>,
    pub topic: Option<String>,
    /// Tier 1: the number of raw messages.
    pub message_count: Option<u64>,
    /// Tier >= 2: the absorbed blocks, written `[b1, b2]`.
    pub consumed_blocks: Option<Vec<String>>,
    /// Tier >= 2: raw messages absorbed besides the blocks.
    pub loose_messages: Option<u64>,
    /// The compress call id that created the block.
    pub call: Option<String>,
    /// As read; [`render`] always writes the hash of the body it writes.
    pub body_sha256: Option<String>,
    /// Unknown keys in file order, written back before `body_sha256`.
    pub extra: Vec<(String, String)>,
}

impl Frontmatter {
    /// A frontmatter with the required keys and nothing else.
    pub fn new(block: &str, tier: u32, start: &str, end: &str, original_tokens: u64) -> Self {
        Frontmatter {
            block: block.to_string(),
            tier,
            start: start.to_string(),
            end: end.to_string(),
            original_tokens,
            ..Frontmatter::default()
        }
    }

    /// The `range` value, `<start>-<end>`.
    pub fn range(&self) -> String {
        format!("{}-{}", self.start, self.end)
    }
}

/// A whole archive.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchiveDoc {
    pub front: Frontmatter,
    pub summary: String,
    pub entries: Vec<Entry>,
}

/// One section of the body.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A raw message: `## <ref> · <role>[ · <timestamp>]` and its parts.
    Raw {
        reference: String,
        role: String,
        timestamp: Option<String>,
        parts: Vec<Part>,
    },
    /// An absorbed block (tier >= 2): its summary and a link to its archive.
    Absorbed {
        block: String,
        tier: u32,
        start: String,
        end: String,
        summary: String,
        /// Relative to this archive, e.g. `../tier1/b1_m0001-m0009.md` (see [`absorbed_link`]).
        link: String,
        /// Absolute path at writing time.
        path: String,
    },
}

impl Entry {
    /// A raw entry for a transcript message.
    pub fn raw(reference: &str, message: &Message, timestamp: Option<&str>) -> Entry {
        Entry::Raw {
            reference: reference.to_string(),
            role: message.role.to_string(),
            timestamp: timestamp.map(str::to_string),
            parts: message.content.iter().map(Part::from_content).collect(),
        }
    }
}

/// One content part of a raw entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    Thinking(String),
    ToolUse {
        name: String,
        id: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        is_error: bool,
        items: Vec<ResultItem>,
    },
    /// compact_boundary, skill, unknown types: the whole item.
    Other {
        kind: String,
        value: Value,
    },
}

/// One nested item of a tool_result.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultItem {
    Text(String),
    /// A non-text item, whole.
    Json(Value),
}

impl Part {
    /// The archive form of a transcript content item. Text, thinking and tool parts keep their
    /// content (not signatures or unknown fields: an archive is readable evidence, the
    /// transcript stays the lossless record); every other item is kept whole. A tool_result
    /// whose content is a plain string has one text item.
    pub fn from_content(content: &Content) -> Part {
        match content {
            Content::Text(p) => Part::Text(p.text.clone()),
            Content::Thinking(p) => Part::Thinking(p.thinking.clone()),
            Content::ToolUse(p) => Part::ToolUse {
                name: p.name.clone(),
                id: p.id.clone(),
                input: p.input.to_value(),
            },
            Content::ToolResult(p) => Part::ToolResult {
                tool_use_id: p.tool_use_id.clone(),
                is_error: p.is_error(),
                items: p
                    .items()
                    .iter()
                    .map(|item| match item {
                        Content::Text(t) => ResultItem::Text(t.text.clone()),
                        other => ResultItem::Json(content_value(other)),
                    })
                    .collect(),
            },
            other => Part::Other {
                kind: other.type_name().to_string(),
                value: content_value(other),
            },
        }
    }
}

fn content_value(content: &Content) -> Value {
    // Serializing a model built from JSON values cannot fail.
    serde_json::to_value(content).unwrap_or(Value::Null)
}

/// Errors that keep an archive from being read at all (SPEC 9 `archive.corrupt`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("no parsable frontmatter (the file must start with a `---` line and close it)")]
    NoFrontmatter,
    #[error("frontmatter lacks the required key `{0}`")]
    MissingKey(&'static str),
    #[error("frontmatter key `{key}` has a bad value {value:?}")]
    BadValue { key: String, value: String },
    #[error("bad range {0:?} (expected <start>-<end>)")]
    BadRange(String),
}

/// A body problem that did not keep the archive from being read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyWarning {
    /// 1-based line number in the file.
    pub line: usize,
    pub message: String,
}

/// What [`parse`] read.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedArchive {
    pub doc: ArchiveDoc,
    /// `None` when the file has no `body_sha256`; otherwise whether the body matches it.
    pub sha_ok: Option<bool>,
    /// Problems in the frontmatter's optional keys or in the body, in file order.
    pub warnings: Vec<BodyWarning>,
}

/// `<block>_<start>-<end>.md`
pub fn file_name(block: &str, start: &str, end: &str) -> String {
    format!("{block}_{start}-{end}.md")
}

/// The inverse of [`file_name`]: `(block, start, end)`, all non-empty.
pub fn parse_file_name(name: &str) -> Option<(String, String, String)> {
    let stem = name.strip_suffix(".md")?;
    let (block, range) = stem.split_once('_')?;
    let (start, end) = range.split_once('-')?;
    if block.is_empty() || start.is_empty() || end.is_empty() {
        return None;
    }
    Some((block.to_string(), start.to_string(), end.to_string()))
}

/// The link from an archive to the archive of a block it absorbed:
/// `../tier<child_tier>/<child_file>`.
pub fn absorbed_link(child_tier: u32, child_file: &str) -> String {
    format!("../tier{child_tier}/{child_file}")
}

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Whether a text can be written bare (no heading, no fence) and read back unchanged: it is
/// non-empty, does not start or end with a line break, has no `\r`, and no line of it starts
/// with `#` (a heading) or with a run of three or more backticks (a fence).
pub fn is_bare_safe(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with('\n')
        && !text.ends_with('\n')
        && !text.contains('\r')
        && text
            .split('\n')
            .all(|l| !l.starts_with('#') && !l.starts_with("```"))
}

/// The fence for this content: backticks, one more than the longest run inside, at least 3.
fn fence_for(content: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in content.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

/// A fenced block: opening run + info, the content, the closing run (no final newline).
fn fenced(content: &str, info: &str) -> String {
    let fence = fence_for(content);
    format!("{fence}{info}\n{content}\n{fence}")
}

fn json_fenced(value: &Value) -> String {
    // Serializing a JSON value cannot fail.
    fenced(
        &serde_json::to_string_pretty(value).unwrap_or_default(),
        "json",
    )
}

fn render_frontmatter(front: &Frontmatter, body_sha: &str) -> String {
    let mut pairs: Vec<(String, String)> = vec![
        ("block".into(), front.block.clone()),
        ("tier".into(), front.tier.to_string()),
        ("range".into(), front.range()),
        ("original_tokens".into(), front.original_tokens.to_string()),
    ];
    let optional = [
        ("session", front.session.clone()),
        ("created", front.created.clone()),
        ("topic", front.topic.clone()),
        ("message_count", front.message_count.map(|n| n.to_string())),
        (
            "consumed_blocks",
            front.consumed_blocks.as_ref().map(|b| {
                let names: Vec<String> = b.iter().map(|n| frontmatter_value(n)).collect();
                format!("[{}]", names.join(", "))
            }),
        ),
        (
            "loose_messages",
            front.loose_messages.map(|n| n.to_string()),
        ),
        ("call", front.call.clone()),
    ];
    pairs.extend(
        optional
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v))),
    );
    for (k, v) in &front.extra {
        let key = frontmatter_value(k).replace(':', "-");
        // A key already written (or body_sha256) would change that key's meaning: dropped.
        if key.is_empty() || key == "body_sha256" || pairs.iter().any(|(w, _)| *w == key) {
            continue;
        }
        pairs.push((key, v.clone()));
    }
    pairs.push(("body_sha256".into(), body_sha.to_string()));
    let mut out = String::from("---\n");
    for (k, v) in &pairs {
        out.push_str(&format!("{k}: {}\n", frontmatter_value(v)));
    }
    out.push_str("---\n");
    out
}

fn push_quoted(out: &mut String, text: &str) {
    for l in text.split('\n') {
        out.push_str("> ");
        out.push_str(l);
        out.push('\n');
    }
}

fn heading_line(prefix: &str, block: &str, tier: u32, start: &str, end: &str) -> String {
    format!(
        "{prefix} {} · tier {tier} · {}–{}",
        one_line(block),
        one_line(start),
        one_line(end)
    )
}

fn render_part(part: &Part, first: bool) -> String {
    match part {
        Part::Text(t) if first && is_bare_safe(t) => t.clone(),
        Part::Text(t) => format!("### text\n\n{}", fenced(t, "")),
        Part::Thinking(t) if is_bare_safe(t) => format!("### thinking\n\n{t}"),
        Part::Thinking(t) => format!("### thinking\n\n{}", fenced(t, "")),
        Part::ToolUse { name, id, input } => format!(
            "### tool_use {} ({})\n\n{}",
            one_line(name),
            one_line(id),
            json_fenced(input)
        ),
        Part::ToolResult {
            tool_use_id,
            is_error,
            items,
        } => {
            let mut out = format!("### tool_result {}", one_line(tool_use_id));
            if *is_error {
                out.push_str(" (error)");
            }
            for item in items {
                out.push_str("\n\n");
                out.push_str(&match item {
                    ResultItem::Text(t) => fenced(t, ""),
                    ResultItem::Json(v) => json_fenced(v),
                });
            }
            out
        }
        Part::Other { kind, value } => format!("### {}\n\n{}", one_line(kind), json_fenced(value)),
    }
}

fn render_body(doc: &ArchiveDoc) -> String {
    let f = &doc.front;
    let mut out = heading_line("# Archive", &f.block, f.tier, &f.start, &f.end);
    out.push_str("\n\n");
    push_quoted(&mut out, &doc.summary);
    out.push('\n');
    out.push_str(&render_entries(&doc.entries));
    out
}

/// The parts of one message, as in an archive's raw entry: each part followed by an empty line.
pub fn render_parts(parts: &[Part]) -> String {
    let mut out = String::new();
    for (i, part) in parts.iter().enumerate() {
        out.push_str(&render_part(part, i == 0));
        out.push_str("\n\n");
    }
    out
}

/// Raw entries and absorbed sections, as in an archive body (also used for `raw/` files).
pub fn render_entries(entries: &[Entry]) -> String {
    let mut out = String::new();
    for entry in entries {
        match entry {
            Entry::Raw {
                reference,
                role,
                timestamp,
                parts,
            } => {
                out.push_str(&format!("## {} · {}", one_line(reference), one_line(role)));
                if let Some(ts) = timestamp {
                    out.push_str(&format!(" · {}", one_line(ts)));
                }
                out.push_str("\n\n");
                out.push_str(&render_parts(parts));
            }
            Entry::Absorbed {
                block,
                tier,
                start,
                end,
                summary,
                link,
                path,
            } => {
                out.push_str(&heading_line("## absorbed", block, *tier, start, end));
                out.push_str("\n\n");
                push_quoted(&mut out, summary);
                out.push('\n');
                out.push_str(&format!(
                    "[archive]({}) — {}\n\n",
                    one_line(link),
                    one_line(path)
                ));
            }
        }
    }
    out
}

/// Write an archive. `body_sha256` is computed from the body written (the doc's own value is
/// ignored), and always present.
pub fn render(doc: &ArchiveDoc) -> String {
    let body = render_body(doc);
    let mut out = render_frontmatter(&doc.front, &sha256_hex(body.as_bytes()));
    out.push_str(&body);
    out
}

// ---------------------------------------------------------------------------------------------
// Reading

fn parse_u64(key: &str, value: &str) -> Result<u64, ArchiveError> {
    value.parse().map_err(|_| ArchiveError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
    })
}

fn parse_list(value: &str) -> Option<Vec<String>> {
    let inner = value.strip_prefix('[')?.strip_suffix(']')?;
    Some(
        inner
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

fn parse_frontmatter(
    lines: &[(usize, &str)],
    warnings: &mut Vec<BodyWarning>,
) -> Result<Frontmatter, ArchiveError> {
    let mut front = Frontmatter::default();
    let (mut block, mut tier, mut range, mut tokens) = (None, None, None, None);
    let mut seen: Vec<String> = Vec::new();
    for &(number, raw) in lines {
        if raw.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = split_pair(raw) else {
            warnings.push(BodyWarning {
                line: number,
                message: format!("frontmatter line is not `key: value`: {raw:?}"),
            });
            continue;
        };
        if seen.iter().any(|k| k == key) {
            warnings.push(BodyWarning {
                line: number,
                message: format!("duplicate frontmatter key `{key}` ignored"),
            });
            continue;
        }
        seen.push(key.to_string());
        match key {
            "block" => block = Some(value.to_string()),
            "tier" => tier = Some(value.to_string()),
            "range" => range = Some(value.to_string()),
            "original_tokens" => tokens = Some(value.to_string()),
            "message_count" | "loose_messages" | "consumed_blocks" => {
                let ok = match key {
                    "message_count" => value.parse().map(|n| front.message_count = Some(n)).is_ok(),
                    "loose_messages" => value
                        .parse()
                        .map(|n| front.loose_messages = Some(n))
                        .is_ok(),
                    _ => parse_list(value)
                        .map(|l| front.consumed_blocks = Some(l))
                        .is_some(),
                };
                if !ok {
                    warnings.push(BodyWarning {
                        line: number,
                        message: format!(
                            "`{key}` has a bad value {value:?}; kept as an unknown key"
                        ),
                    });
                    front.extra.push((key.to_string(), value.to_string()));
                }
            }
            "session" => front.session = Some(value.to_string()),
            "created" => front.created = Some(value.to_string()),
            "topic" => front.topic = Some(value.to_string()),
            "call" => front.call = Some(value.to_string()),
            "body_sha256" => front.body_sha256 = Some(value.to_string()),
            _ => front.extra.push((key.to_string(), value.to_string())),
        }
    }
    front.block = block.ok_or(ArchiveError::MissingKey("block"))?;
    if front.block.is_empty() {
        return Err(ArchiveError::BadValue {
            key: "block".to_string(),
            value: String::new(),
        });
    }
    let tier = tier.ok_or(ArchiveError::MissingKey("tier"))?;
    front.tier = tier.parse().map_err(|_| ArchiveError::BadValue {
        key: "tier".to_string(),
        value: tier.clone(),
    })?;
    let range = range.ok_or(ArchiveError::MissingKey("range"))?;
    let (start, end) = range
        .split_once('-')
        .filter(|(s, e)| !s.is_empty() && !e.is_empty())
        .ok_or_else(|| ArchiveError::BadRange(range.clone()))?;
    front.start = start.to_string();
    front.end = end.to_string();
    let tokens = tokens.ok_or(ArchiveError::MissingKey("original_tokens"))?;
    front.original_tokens = parse_u64("original_tokens", &tokens)?;
    Ok(front)
}

/// Read an archive. Fails only when the frontmatter cannot be read (SPEC 9 `archive.corrupt`);
/// body problems become warnings and the parse returns what it could read.
pub fn parse(text: &str) -> Result<ParsedArchive, ArchiveError> {
    let (fm_lines, body) = frontmatter_lines(text).ok_or(ArchiveError::NoFrontmatter)?;
    let mut warnings = Vec::new();
    let front = parse_frontmatter(&fm_lines, &mut warnings)?;
    let sha_ok = front
        .body_sha256
        .as_ref()
        .map(|want| want.eq_ignore_ascii_case(&sha256_hex(body.as_bytes())));
    // The body's first line number: after the opening line, the key lines and the closing line.
    let first_line = fm_lines.len() + 3;
    let mut reader = BodyReader {
        lines: body.split('\n').collect(),
        pos: 0,
        first_line,
        warnings,
    };
    let (summary, entries) = reader.read_body(&front);
    Ok(ParsedArchive {
        doc: ArchiveDoc {
            front,
            summary,
            entries,
        },
        sha_ok,
        warnings: reader.warnings,
    })
}

/// A cursor over the body's lines (split at `\n`; a `\r` stays in its line).
struct BodyReader<'a> {
    lines: Vec<&'a str>,
    pos: usize,
    first_line: usize,
    warnings: Vec<BodyWarning>,
}

/// A fenced block as read: its info string, its content, the body index of its opening line.
struct Fence<'a> {
    info: &'a str,
    content: String,
    open: usize,
}

/// A fence opening line: a run of 3+ backticks, then the info string.
fn fence_open(line: &str) -> Option<(&str, &str)> {
    let run = line.bytes().take_while(|&b| b == b'`').count();
    if run < 3 {
        return None;
    }
    Some(line.split_at(run))
}

impl<'a> BodyReader<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.lines.get(self.pos).copied()
    }

    fn warn(&mut self, message: String) {
        self.warn_at(self.pos, message);
    }

    /// A warning about the line at index `pos` of the body.
    fn warn_at(&mut self, pos: usize, message: String) {
        self.warnings.push(BodyWarning {
            line: self.first_line + pos,
            message,
        });
    }

    fn skip_blank(&mut self) {
        while self.peek() == Some("") {
            self.pos += 1;
        }
    }

    fn read_body(&mut self, front: &Frontmatter) -> (String, Vec<Entry>) {
        self.skip_blank();
        let expected = heading_line(
            "# Archive",
            &front.block,
            front.tier,
            &front.start,
            &front.end,
        );
        match self.peek() {
            Some(line) if line.starts_with("# Archive") => {
                if line != expected {
                    self.warn(format!(
                        "heading {line:?} disagrees with the frontmatter ({expected:?})"
                    ));
                }
                self.pos += 1;
            }
            _ => self.warn("missing `# Archive` heading".to_string()),
        }
        self.skip_blank();
        let summary = match self.read_quoted() {
            Some(s) => s,
            None => {
                self.warn("missing summary (`> ` lines)".to_string());
                String::new()
            }
        };
        let mut entries = Vec::new();
        loop {
            self.skip_blank();
            let Some(line) = self.peek() else { break };
            if let Some(rest) = line.strip_prefix("## absorbed ") {
                self.pos += 1;
                if let Some(entry) = self.read_absorbed(rest) {
                    entries.push(entry);
                }
            } else if let Some(rest) = line.strip_prefix("## ") {
                self.pos += 1;
                entries.push(self.read_raw(rest));
            } else {
                self.warn(format!("unexpected line outside an entry: {line:?}"));
                self.pos += 1;
            }
        }
        (summary, entries)
    }

    /// Consecutive `>` lines, each without its `> ` (or `>`) prefix.
    fn read_quoted(&mut self) -> Option<String> {
        let mut lines = Vec::new();
        while let Some(line) = self.peek() {
            let Some(rest) = line.strip_prefix('>') else {
                break;
            };
            lines.push(rest.strip_prefix(' ').unwrap_or(rest));
            self.pos += 1;
        }
        (!lines.is_empty()).then(|| lines.join("\n"))
    }

    /// The fenced block at the cursor, if there is one. An unclosed fence runs to the end.
    fn read_fence(&mut self) -> Option<Fence<'a>> {
        let open = self.pos;
        let (run, info) = fence_open(self.peek()?)?;
        self.pos += 1;
        while let Some(line) = self.peek() {
            if line == run {
                let content = self.lines.get(open + 1..self.pos).unwrap_or(&[]).join("\n");
                self.pos += 1;
                return Some(Fence {
                    info,
                    content,
                    open,
                });
            }
            self.pos += 1;
        }
        self.warn_at(open, format!("fence {run} is never closed"));
        let content = self.lines.get(open + 1..).unwrap_or(&[]).join("\n");
        Some(Fence {
            info,
            content,
            open,
        })
    }

    /// Bare text: the lines up to the next line starting with `#`, trailing empty lines dropped.
    fn read_bare(&mut self) -> String {
        let start = self.pos;
        while let Some(line) = self.peek() {
            if line.starts_with('#') {
                break;
            }
            self.pos += 1;
        }
        let mut lines = self.lines.get(start..self.pos).unwrap_or(&[]);
        while let Some((last, rest)) = lines.split_last() {
            if !last.is_empty() {
                break;
            }
            lines = rest;
        }
        lines.join("\n")
    }

    /// The JSON value of a fence; a string of its content (and a warning) when not JSON.
    fn parse_json(&mut self, fence: Fence<'a>, what: &str) -> Value {
        match serde_json::from_str(&fence.content) {
            Ok(v) => v,
            Err(e) => {
                self.warn_at(
                    fence.open,
                    format!("{what} is not valid JSON ({e}); kept as a string"),
                );
                Value::String(fence.content)
            }
        }
    }

    /// The fence of a part heading: skip blank lines, then read it (warn when missing).
    fn part_fence(&mut self, heading: &str) -> Option<Fence<'a>> {
        self.skip_blank();
        let fence = self.read_fence();
        if fence.is_none() {
            self.warn(format!("`### {heading}` is not followed by a fence"));
        }
        fence
    }

    fn read_raw(&mut self, heading: &str) -> Entry {
        let (reference, rest) = heading.split_once(" · ").unwrap_or_else(|| {
            self.warn(format!("entry heading without a role: {heading:?}"));
            (heading, "")
        });
        let (role, timestamp) = match rest.rsplit_once(" · ") {
            Some((role, ts)) => (role, Some(ts.to_string())),
            None => (rest, None),
        };
        let mut parts = Vec::new();
        loop {
            self.skip_blank();
            let Some(line) = self.peek() else { break };
            if line.starts_with("## ") {
                break;
            }
            if let Some(h) = line.strip_prefix("### ") {
                self.pos += 1;
                if let Some(part) = self.read_part(h) {
                    parts.push(part);
                }
            } else if parts.is_empty() && !line.starts_with('#') {
                parts.push(Part::Text(self.read_bare()));
            } else {
                self.warn(format!("unexpected line in entry {reference}: {line:?}"));
                self.pos += 1;
            }
        }
        Entry::Raw {
            reference: reference.to_string(),
            role: role.to_string(),
            timestamp,
            parts,
        }
    }

    fn read_part(&mut self, heading: &str) -> Option<Part> {
        // An item of another type under a heading: a `json` fence of the whole item.
        let other = |this: &mut Self, fence: Fence<'a>| {
            let value = if fence.info == "json" {
                this.parse_json(fence, "part")
            } else {
                this.warn_at(
                    fence.open,
                    format!("`### {heading}` has a plain fence; kept as a string"),
                );
                Value::String(fence.content)
            };
            Part::Other {
                kind: heading.to_string(),
                value,
            }
        };
        if heading == "text" {
            let fence = self.part_fence(heading)?;
            return Some(if fence.info.is_empty() {
                Part::Text(fence.content)
            } else {
                other(self, fence)
            });
        }
        if heading == "thinking" {
            self.skip_blank();
            let Some(fence) = self.read_fence() else {
                return Some(Part::Thinking(self.read_bare()));
            };
            return Some(if fence.info.is_empty() {
                Part::Thinking(fence.content)
            } else {
                other(self, fence)
            });
        }
        if let Some((name, id)) = heading
            .strip_prefix("tool_use ")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|r| r.rsplit_once(" ("))
        {
            let fence = self.part_fence(heading)?;
            if fence.info != "json" {
                self.warn_at(
                    fence.open,
                    format!("`### {heading}` input is not a `json` fence"),
                );
            }
            let input = self.parse_json(fence, "tool_use input");
            return Some(Part::ToolUse {
                name: name.to_string(),
                id: id.to_string(),
                input,
            });
        }
        if let Some(rest) = heading.strip_prefix("tool_result ") {
            let (tool_use_id, is_error) = match rest.strip_suffix(" (error)") {
                Some(id) => (id, true),
                None => (rest, false),
            };
            let mut items = Vec::new();
            loop {
                self.skip_blank();
                let Some(fence) = self.read_fence() else {
                    break;
                };
                items.push(if fence.info == "json" {
                    ResultItem::Json(self.parse_json(fence, "tool_result item"))
                } else {
                    ResultItem::Text(fence.content)
                });
            }
            return Some(Part::ToolResult {
                tool_use_id: tool_use_id.to_string(),
                is_error,
                items,
            });
        }
        let fence = self.part_fence(heading)?;
        Some(other(self, fence))
    }

    fn read_absorbed(&mut self, heading: &str) -> Option<Entry> {
        let parsed = (|| {
            let mut it = heading.split(" · ");
            let block = it.next()?;
            let tier: u32 = it.next()?.strip_prefix("tier ")?.parse().ok()?;
            let (start, end) = it.next()?.split_once('–')?;
            it.next().is_none().then_some((block, tier, start, end))
        })();
        let Some((block, tier, start, end)) = parsed else {
            // The heading is the line just consumed.
            let at = self.pos.saturating_sub(1);
            self.warn_at(at, format!("bad absorbed heading: {heading:?}"));
            return None;
        };
        self.skip_blank();
        let summary = self.read_quoted().unwrap_or_else(|| {
            self.warn(format!("absorbed {block} has no summary"));
            String::new()
        });
        self.skip_blank();
        let link = self.peek().and_then(|l| {
            l.strip_prefix("[archive](")
                .and_then(|r| r.split_once(") — "))
        });
        let (link, path) = match link {
            Some((link, path)) => {
                self.pos += 1;
                (link.to_string(), path.to_string())
            }
            None => {
                self.warn(format!("absorbed {block} has no `[archive](…) — …` line"));
                (String::new(), String::new())
            }
        };
        Some(Entry::Absorbed {
            block: block.to_string(),
            tier,
            start: start.to_string(),
            end: end.to_string(),
            summary,
            link,
            path,
        })
    }
}
