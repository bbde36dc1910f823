//! Memory files (SPEC 2.2): slug, tolerant frontmatter parsing, rendering, directory scan,
//! the computed `MEMORY.md` index (SPEC 5), the audit checks and keyword relevance.
//!
//! Parsing never fails: a file without a well-formed frontmatter becomes a memory whose body is
//! the whole file and whose name is the file stem, flagged `malformed` for the audit.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::SystemTime;

/// The memory types SPEC 2.2 names; any other `type` is accepted and reported.
pub const KNOWN_TYPES: [&str; 4] = ["user", "feedback", "project", "reference"];

/// The index file of the memory directory; never a memory itself.
pub const INDEX_FILE: &str = "MEMORY.md";

/// `slug(name)`: lowercase; every run of bytes outside ASCII `[a-z0-9]` becomes one `-`;
/// leading and trailing `-` trimmed. A name without ASCII letters or digits gives `""`.
///
/// Lowercasing is Unicode lowercasing, as the runtime does before its ASCII filter, so the rare
/// characters whose lowercase form contains ASCII (`K` KELVIN SIGN -> `k`) keep it.
pub fn slug(name: &str) -> String {
    let lower = name.to_lowercase();
    let mut out = String::with_capacity(lower.len());
    let mut pending_dash = false;
    for c in lower.bytes() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            if pending_dash && !out.is_empty() {
                out.push('-');
            }
            pending_dash = false;
            out.push(char::from(c));
        } else {
            pending_dash = true;
        }
    }
    out
}

/// One memory file, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    /// The file name in the memory directory, e.g. `build-system.md`.
    pub file_name: String,
    /// The `name` key; the file stem when the frontmatter is malformed or has no `name`.
    pub name: String,
    /// The `description` key (`""` when absent).
    pub description: String,
    /// The `type` key; `None` when absent or empty.
    pub kind: Option<String>,
    /// Everything after the closing `---` line; the whole file when malformed.
    pub body: String,
    /// Every frontmatter pair in file order (known and unknown keys); `None` when malformed.
    pub frontmatter: Option<Vec<(String, String)>>,
    /// No well-formed frontmatter.
    pub malformed: bool,
    pub mtime: SystemTime,
}

impl Memory {
    /// The file name without its `.md` extension.
    pub fn stem(&self) -> &str {
        file_stem(&self.file_name)
    }

    /// The value of the first frontmatter pair with this key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.frontmatter
            .as_ref()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

fn file_stem(file_name: &str) -> &str {
    file_name.strip_suffix(".md").unwrap_or(file_name)
}

/// The lines of a `---` frontmatter, each with its 1-based line number, and the body after the
/// closing `---` line; `None` unless the first line is exactly `---` and a closing line follows.
///
/// Shared by memories and tier archives: frontmatter is not YAML, each line is `key: value`
/// split at its first `:` ([`split_pair`]).
pub(crate) fn frontmatter_lines(text: &str) -> Option<(Vec<(usize, &str)>, &str)> {
    let mut rest = text.strip_prefix("---\n")?;
    let mut lines = Vec::new();
    let mut number = 1;
    loop {
        number += 1;
        let (line, after, had_newline) = match rest.split_once('\n') {
            Some((line, after)) => (line, after, true),
            None => (rest, "", false),
        };
        if line == "---" {
            return Some((lines, after));
        }
        if !had_newline {
            // The end of the file, and no closing line.
            return None;
        }
        lines.push((number, line));
        rest = after;
    }
}

/// A frontmatter line split at its first `:`, key and value trimmed; `None` when it has no
/// `:` or an empty key.
pub(crate) fn split_pair(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(':')?;
    let key = key.trim();
    (!key.is_empty()).then_some((key, value.trim()))
}

/// Line breaks (`\r\n`, `\r`, `\n`) as spaces: headings and header values are single lines.
pub(crate) fn one_line(value: &str) -> String {
    value.replace("\r\n", " ").replace(['\r', '\n'], " ")
}

/// A frontmatter value as written: one line, trimmed (the reader trims values).
pub(crate) fn frontmatter_value(value: &str) -> String {
    one_line(value).trim().to_string()
}

/// The pairs of a memory's frontmatter and its body; `None` when not well-formed (see
/// [`frontmatter_lines`]; a non-blank line that is not `key: value` also makes it malformed).
/// Blank lines inside the frontmatter are tolerated and skipped.
fn split_frontmatter(text: &str) -> Option<(Vec<(String, String)>, &str)> {
    let (lines, body) = frontmatter_lines(text)?;
    let mut pairs = Vec::new();
    for (_, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let (key, value) = split_pair(line)?;
        pairs.push((key.to_string(), value.to_string()));
    }
    Some((pairs, body))
}

/// Parse one memory file. Never fails; see [`Memory::malformed`].
pub fn parse(file_name: &str, text: &str, mtime: SystemTime) -> Memory {
    let stem = file_stem(file_name).to_string();
    match split_frontmatter(text) {
        Some((pairs, body)) => {
            let first = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
            Memory {
                file_name: file_name.to_string(),
                name: first("name").unwrap_or(stem),
                description: first("description").unwrap_or_default(),
                kind: first("type").filter(|t| !t.is_empty()),
                body: body.to_string(),
                frontmatter: Some(pairs),
                malformed: false,
                mtime,
            }
        }
        None => Memory {
            file_name: file_name.to_string(),
            name: stem,
            description: String::new(),
            kind: None,
            body: text.to_string(),
            frontmatter: None,
            malformed: true,
            mtime,
        },
    }
}

/// Write a memory in the SPEC 2.2 form: `name`, `description`, `type` (omitted when empty),
/// then the unknown keys in their original order, then the body.
pub fn render(m: &Memory) -> String {
    let mut out = String::from("---\n");
    out.push_str(&format!("name: {}\n", frontmatter_value(&m.name)));
    out.push_str(&format!(
        "description: {}\n",
        frontmatter_value(&m.description)
    ));
    if let Some(kind) = m
        .kind
        .as_deref()
        .map(frontmatter_value)
        .filter(|k| !k.is_empty())
    {
        out.push_str(&format!("type: {kind}\n"));
    }
    for (k, v) in m.frontmatter.iter().flatten() {
        if matches!(k.as_str(), "name" | "description" | "type") {
            continue;
        }
        let key = frontmatter_value(k).replace(':', "-");
        out.push_str(&format!("{key}: {}\n", frontmatter_value(v)));
    }
    out.push_str("---\n");
    out.push_str(&m.body);
    out
}

/// A file the scan skipped, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanProblem {
    pub file_name: String,
    pub message: String,
}

/// The result of scanning a memory directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryScan {
    /// In scan order: modification time newest first, ties by file name.
    pub memories: Vec<Memory>,
    /// Files skipped because they could not be read or are not UTF-8, by file name.
    pub problems: Vec<ScanProblem>,
}

/// Scan a memory directory (SPEC 2.2): every `*.md` directly in `dir` except `MEMORY.md`.
/// Sub-directories and symlinks to directories are ignored; a symlink to a file is followed only
/// when the file is directly in `dir` (any other is a problem: nothing outside is read).
/// A missing directory is an empty scan; an unreadable directory is one problem.
pub fn scan(dir: &Path) -> MemoryScan {
    let mut result = MemoryScan::default();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return result,
        Err(e) => {
            result.problems.push(ScanProblem {
                file_name: String::new(),
                message: format!("cannot list {}: {e}", dir.display()),
            });
            return result;
        }
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                result.problems.push(ScanProblem {
                    file_name: String::new(),
                    message: format!("cannot list {}: {e}", dir.display()),
                });
                continue;
            }
        };
        let raw_name = entry.file_name();
        let path = entry.path();
        if path.extension().map(|e| e == "md") != Some(true) || raw_name == INDEX_FILE {
            continue;
        }
        let Some(file_name) = raw_name.to_str().map(str::to_string) else {
            result.problems.push(ScanProblem {
                file_name: raw_name.to_string_lossy().into_owned(),
                message: "file name is not valid UTF-8".to_string(),
            });
            continue;
        };
        match read_memory(dir, &path, &file_name) {
            Ok(Some(m)) => result.memories.push(m),
            Ok(None) => {}
            Err(message) => result.problems.push(ScanProblem { file_name, message }),
        }
    }
    result.memories.sort_by(|a, b| {
        b.mtime
            .cmp(&a.mtime)
            .then_with(|| a.file_name.cmp(&b.file_name))
    });
    result
        .problems
        .sort_by(|a, b| a.file_name.cmp(&b.file_name));
    result
}

/// Read one candidate file of `dir`; `Ok(None)` when it is a directory (or a link to one).
fn read_memory(dir: &Path, path: &Path, file_name: &str) -> Result<Option<Memory>, String> {
    let meta = fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if meta.is_dir() {
        return Ok(None);
    }
    let is_link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link {
        let inside = match (fs::canonicalize(dir), fs::canonicalize(path)) {
            (Ok(base), Ok(target)) => target.parent() == Some(base.as_path()),
            _ => false,
        };
        if !inside {
            return Err(
                "symbolic link to a file outside the memory directory (not followed)".to_string(),
            );
        }
    }
    let bytes = fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|e| format!("not valid UTF-8: {e}"))?;
    let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    Ok(Some(parse(file_name, &text, mtime)))
}

/// The index line of one memory: `- [<name>](<file>) — <description>` + ` (<type>)`.
pub fn index_line(m: &Memory) -> String {
    let mut line = format!("- [{}]({}) — {}", m.name, m.file_name, m.description);
    if let Some(kind) = &m.kind {
        line.push_str(&format!(" ({kind})"));
    }
    line
}

/// The computed `MEMORY.md` (SPEC 5): `# Memory index`, an empty line, then one line per
/// memory in the given (scan) order, each ending in `\n`.
pub fn render_index(memories: &[Memory]) -> String {
    let mut out = String::from("# Memory index\n\n");
    for m in memories {
        out.push_str(&index_line(m));
        out.push('\n');
    }
    out
}

/// Whether an on-disk `MEMORY.md` lists the same entries as the computed index.
///
/// Entry lines (those starting with `- `) are compared as a multiset, ignoring their order:
/// the runtime orders the index by modification time, and a copied or restored root loses the
/// original times, so an index whose entries are merely reordered is not stale. Other lines
/// (the heading, blank lines) are not compared.
pub fn index_entries_equal(on_disk: &str, computed: &str) -> bool {
    fn entries(text: &str) -> Vec<&str> {
        let mut lines: Vec<&str> = text.lines().filter(|l| l.starts_with("- ")).collect();
        lines.sort_unstable();
        lines
    }
    entries(on_disk) == entries(computed)
}

/// What the audit reports about memory files (SPEC 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryProblemKind {
    /// Two memories map to one file (error).
    SlugCollision,
    /// The name has no ASCII letter or digit (warn).
    EmptySlug,
    /// The file stem is not `slug(name)` (warn).
    NameMismatch,
    /// No well-formed frontmatter, or the file cannot be read (warn).
    Malformed,
    /// `type` is not one of [`KNOWN_TYPES`] (warn).
    UnknownType,
}

impl MemoryProblemKind {
    /// The audit code, e.g. `memory.slug-collision`.
    pub fn code(self) -> &'static str {
        match self {
            MemoryProblemKind::SlugCollision => "memory.slug-collision",
            MemoryProblemKind::EmptySlug => "memory.empty-slug",
            MemoryProblemKind::NameMismatch => "memory.name-mismatch",
            MemoryProblemKind::Malformed => "memory.malformed",
            MemoryProblemKind::UnknownType => "memory.unknown-type",
        }
    }

    /// `true` for error severity, `false` for warn.
    pub fn is_error(self) -> bool {
        matches!(self, MemoryProblemKind::SlugCollision)
    }
}

/// One memory finding, about one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryProblem {
    pub kind: MemoryProblemKind,
    pub file_name: String,
    pub message: String,
}

/// Audit a scan: one finding per problem and file, sorted by file name then kind.
///
/// The name checks (empty slug, name mismatch) are skipped for malformed files, whose name is
/// their stem. A slug collision is reported on every file of the colliding group.
pub fn check(scan: &MemoryScan) -> Vec<MemoryProblem> {
    let mut out = Vec::new();
    for p in &scan.problems {
        out.push(MemoryProblem {
            kind: MemoryProblemKind::Malformed,
            file_name: p.file_name.clone(),
            message: p.message.clone(),
        });
    }
    let mut by_slug: BTreeMap<String, Vec<&Memory>> = BTreeMap::new();
    for m in &scan.memories {
        let s = slug(&m.name);
        if m.malformed {
            out.push(MemoryProblem {
                kind: MemoryProblemKind::Malformed,
                file_name: m.file_name.clone(),
                message: "no well-formed frontmatter; the whole file is the content".to_string(),
            });
        } else if s.is_empty() {
            out.push(MemoryProblem {
                kind: MemoryProblemKind::EmptySlug,
                file_name: m.file_name.clone(),
                message: format!("name {:?} gives an empty slug", m.name),
            });
        } else if m.stem() != s {
            out.push(MemoryProblem {
                kind: MemoryProblemKind::NameMismatch,
                file_name: m.file_name.clone(),
                message: format!("name {:?} belongs in {s}.md", m.name),
            });
        }
        if let Some(kind) = &m.kind {
            if !KNOWN_TYPES.contains(&kind.as_str()) {
                out.push(MemoryProblem {
                    kind: MemoryProblemKind::UnknownType,
                    file_name: m.file_name.clone(),
                    message: format!("unknown type {kind:?}"),
                });
            }
        }
        if !s.is_empty() {
            by_slug.entry(s).or_default().push(m);
        }
    }
    for (s, group) in &by_slug {
        if group.len() < 2 {
            continue;
        }
        for m in group {
            let others: Vec<&str> = group
                .iter()
                .filter(|o| o.file_name != m.file_name)
                .map(|o| o.file_name.as_str())
                .collect();
            out.push(MemoryProblem {
                kind: MemoryProblemKind::SlugCollision,
                file_name: m.file_name.clone(),
                message: format!("slug {s:?} is shared with {}", others.join(", ")),
            });
        }
    }
    out.sort_by(|a, b| {
        a.file_name
            .cmp(&b.file_name)
            .then_with(|| a.kind.cmp(&b.kind))
    });
    out
}

/// The query's search tokens: lowercased ASCII `[a-z0-9_]+` runs, duplicates removed.
fn query_tokens(query: &str) -> Vec<String> {
    let lower = query.to_lowercase();
    let mut tokens: Vec<String> = Vec::new();
    for t in lower.split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')) {
        if !t.is_empty() && !tokens.iter().any(|x| x == t) {
            tokens.push(t.to_string());
        }
    }
    tokens
}

/// Keyword relevance of memories to a query: `(index into memories, score)`, best first.
///
/// For each distinct token, a case-insensitive substring match scores 3 in the name, 3 in the
/// type, 2 in the description and 1 in the body (each field counted separately; summed over
/// tokens). Memories scoring 0 are dropped; ties go to the newer file, then the file name.
pub fn relevance(query: &str, memories: &[Memory]) -> Vec<(usize, u32)> {
    let tokens = query_tokens(query);
    let mut scored: Vec<(usize, u32)> = memories
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let fields = [
                (m.name.to_lowercase(), 3),
                (m.kind.as_deref().unwrap_or("").to_lowercase(), 3),
                (m.description.to_lowercase(), 2),
                (m.body.to_lowercase(), 1),
            ];
            let score: u32 = tokens
                .iter()
                .map(|t| {
                    fields
                        .iter()
                        .filter(|(f, _)| f.contains(t.as_str()))
                        .map(|(_, w)| *w)
                        .sum::<u32>()
                })
                .sum();
            (score > 0).then_some((i, score))
        })
        .collect();
    scored.sort_by(|(a, sa), (b, sb)| {
        let (ma, mb) = (memories.get(*a), memories.get(*b));
        sb.cmp(sa)
            .then_with(|| mb.map(|m| m.mtime).cmp(&ma.map(|m| m.mtime)))
            .then_with(|| ma.map(|m| &m.file_name).cmp(&mb.map(|m| &m.file_name)))
    });
    scored
}
