//! Reading an archive: its frontmatter (every key kept), its headings and entries, in the
//! runtime's layout with Chinese or English labels.

use super::*;

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
pub(super) fn quoted(value: &str) -> String {
    pub(super) const MAX: usize = 60;
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
pub(super) fn read_frontmatter(lines: &[(usize, &str)]) -> Result<Frontmatter, ArchiveError> {
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
pub(super) struct Body {
    pub(super) labels: Option<Labels>,
    pub(super) title: Option<String>,
    pub(super) summary: Option<String>,
    pub(super) headings: Vec<Heading>,
}

/// Where the body reader is.
pub(super) enum At<'a> {
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
pub(super) fn fence_run(line: &str) -> Option<&str> {
    let run = line.bytes().take_while(|&b| b == b'`').count();
    // Backticks are ASCII, so `run` is a char boundary.
    (run >= 3).then(|| &line[..run])
}

pub(super) fn read_body(body: &str, first_line: usize) -> Body {
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
pub(super) fn entry_line<'a>(
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
pub(super) fn heading(line: &str) -> Option<(u8, HeadingKind)> {
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
