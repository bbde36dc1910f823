//! Memory files (SPEC 2.2) read and written as the runtime does: slug, parse, render, the
//! directory scan, the computed `MEMORY.md` index, the audit checks (SPEC 9) and keyword
//! relevance.
//!
//! What the runtime reads from a file is decided by [`parse`] alone; normafs's extras (unknown
//! frontmatter keys kept for a rewrite, the irregularities the audit reports) sit beside it and
//! never change it. Parsing never fails: the runtime reads every file it can open.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;

use crate::format::loader::Severity;

/// The memory types the runtime names; any other `type` is accepted (and reported as info).
pub const KNOWN_TYPES: [&str; 4] = ["user", "feedback", "project", "reference"];

/// The index file of the memory directory; never a memory itself.
pub const INDEX_FILE: &str = "MEMORY.md";

/// The first line of the index.
const INDEX_HEADING: &str = "# Memory\n\n";

/// The index body of a directory without memories.
const INDEX_EMPTY: &str = "(no memories yet)\n";

/// A character lowercased by its simple (one-to-one) Unicode mapping, as the runtime's
/// lowercasing does. Rust's `to_lowercase` uses the full mapping, which differs for one
/// character only: `İ` (U+0130) becomes `i` + U+0307 there and plain `i` here.
fn simple_lower(c: char) -> char {
    if c == '\u{130}' {
        return 'i';
    }
    let mut lower = c.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(l), None) => l,
        _ => c,
    }
}

/// `slug(name)`: lowercase; every run of characters outside ASCII `[a-z0-9]` becomes one `-`;
/// leading and trailing `-` trimmed. A name without an ASCII letter or digit gives `""` (its
/// file is `.md`).
///
/// Lowercasing comes first, so the rare characters whose lowercase is ASCII (`K` KELVIN SIGN,
/// `İ`) count as the letter they become.
pub fn slug(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut pending_dash = false;
    for c in name.chars().map(simple_lower) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            if pending_dash && !out.is_empty() {
                out.push('-');
            }
            pending_dash = false;
            out.push(c);
        } else {
            pending_dash = true;
        }
    }
    out
}

/// The file a memory of this name is saved in and looked up from: `slug(name).md`.
pub fn file_for(name: &str) -> String {
    format!("{}.md", slug(name))
}

/// Something in a memory file that the runtime reads other than its writer likely meant, or
/// that normafs had to replace to read it. Each is a `memory.malformed` finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Irregularity {
    /// The file does not start with `---`: all of it is the content, the name is the stem.
    NoFrontmatter,
    /// The file starts with `---` but no `\n---` follows: all of it is the content.
    Unclosed,
    /// A frontmatter line (1-based line of the file) without `:`; the runtime ignores it.
    NoColon { line: usize },
    /// A frontmatter line whose key is empty; the runtime ignores it.
    EmptyKey { line: usize },
    /// `name`, `description` or `type` given again; the runtime keeps the last value.
    Repeated { key: String, line: usize },
    /// The file is not UTF-8: normafs reads it with U+FFFD in place of the bad bytes, where
    /// the runtime keeps the bytes.
    NotUtf8,
    /// The file name is not UTF-8 ([`Memory::file_name`] has U+FFFD in place of the bad bytes).
    FileNameNotUtf8,
}

impl Irregularity {
    /// The line of the file it is about, if one.
    pub fn line(&self) -> Option<usize> {
        match self {
            Irregularity::NoColon { line }
            | Irregularity::EmptyKey { line }
            | Irregularity::Repeated { line, .. } => Some(*line),
            _ => None,
        }
    }

    fn message(&self, stem: &str) -> String {
        match self {
            Irregularity::NoFrontmatter => format!(
                "no frontmatter: the runtime reads the whole file as the content of a memory \
                 named {stem:?} with no description"
            ),
            Irregularity::Unclosed => "the frontmatter is never closed (no line starting with \
                 `---` follows): the runtime reads the whole file as the content"
                .to_string(),
            Irregularity::NoColon { .. } => {
                "a frontmatter line without `:`; the runtime ignores it".to_string()
            }
            Irregularity::EmptyKey { .. } => {
                "a frontmatter line with an empty key; the runtime ignores it".to_string()
            }
            Irregularity::Repeated { key, .. } => {
                format!("`{key}` given again; the runtime keeps this last value")
            }
            Irregularity::NotUtf8 => "not valid UTF-8: normafs shows U+FFFD for the bad bytes, \
                 the runtime keeps them"
                .to_string(),
            Irregularity::FileNameNotUtf8 => {
                "the file name is not valid UTF-8 (shown with U+FFFD)".to_string()
            }
        }
    }
}

/// One memory file: what the runtime reads from it, and normafs's extras.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    /// The file name in the memory directory, e.g. `build-system.md` (or `.md`).
    pub file_name: String,
    /// The `name` value; the file stem when it is absent or empty.
    pub name: String,
    /// The `description` value (`""` when absent).
    pub description: String,
    /// The `type` value; `None` when absent or empty (the runtime's unset type).
    pub kind: Option<String>,
    /// What follows the frontmatter, as the runtime reads it; the whole file without one.
    pub content: String,
    /// Frontmatter keys other than `name`, `description` and `type`, trimmed, in file order:
    /// the runtime ignores them, [`render`] writes them back.
    pub extra: Vec<(String, String)>,
    /// What the audit reports as `memory.malformed`, in file order.
    pub irregularities: Vec<Irregularity>,
    /// The file's modification time.
    pub mtime: SystemTime,
}

impl Memory {
    /// A memory as the runtime would save it: in `slug(name).md`, no extras.
    pub fn new(name: &str, description: &str, kind: Option<&str>, content: &str) -> Memory {
        Memory {
            file_name: file_for(name),
            name: name.to_string(),
            description: description.to_string(),
            kind: kind.filter(|k| !k.is_empty()).map(str::to_string),
            content: content.to_string(),
            extra: Vec::new(),
            irregularities: Vec::new(),
            mtime: SystemTime::UNIX_EPOCH,
        }
    }

    /// The file name without its `.md` suffix (`""` for `.md`).
    pub fn stem(&self) -> &str {
        file_stem(&self.file_name)
    }

    /// The file this memory is saved in and looked up from: `slug(name).md`.
    pub fn target_file(&self) -> String {
        file_for(&self.name)
    }
}

fn file_stem(file_name: &str) -> &str {
    file_name.strip_suffix(".md").unwrap_or(file_name)
}

/// The 1-based line of byte offset `at` of `text`.
fn line_at(text: &str, at: usize) -> usize {
    1 + text
        .as_bytes()
        .get(..at)
        .map_or(0, |b| memchr::memchr_iter(b'\n', b).count())
}

/// Parse one memory file the runtime's way.
///
/// A frontmatter exists only when the text starts with `---` and, once that and the line
/// breaks right after it are skipped, contains `\n---`; the head is what lies between. Each head
/// line is split at its first `:`, key and value trimmed; `name`, `description` and `type` are
/// read (the last occurrence wins), other keys go to [`Memory::extra`]. The content is what
/// follows `\n---`, without its leading `-` characters and then its leading `\r`/`\n`. Without a
/// frontmatter the whole text is the content. An empty name becomes the file stem.
pub fn parse(file_name: &str, text: &str, mtime: SystemTime) -> Memory {
    let stem = file_stem(file_name);
    let mut m = Memory {
        file_name: file_name.to_string(),
        name: String::new(),
        description: String::new(),
        kind: None,
        content: String::new(),
        extra: Vec::new(),
        irregularities: Vec::new(),
        mtime,
    };
    let head_and_rest = text.strip_prefix("---").and_then(|after| {
        let rest = after.trim_start_matches(['\r', '\n']);
        let end = rest.find("\n---")?;
        let head_at = text.len() - rest.len();
        Some((head_at, rest.get(..end)?, rest.get(end + 4..)?))
    });
    match head_and_rest {
        Some((head_at, head, rest)) => {
            m.content = rest
                .trim_start_matches('-')
                .trim_start_matches(['\r', '\n'])
                .to_string();
            let first_line = line_at(text, head_at);
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            for (i, line) in head.split('\n').enumerate() {
                let number = first_line + i;
                let Some((key, value)) = line.split_once(':') else {
                    if !line.trim().is_empty() {
                        m.irregularities
                            .push(Irregularity::NoColon { line: number });
                    }
                    continue;
                };
                let (key, value) = (key.trim(), value.trim());
                match key {
                    "name" | "description" | "type" => {
                        if !seen.insert(key) {
                            m.irregularities.push(Irregularity::Repeated {
                                key: key.to_string(),
                                line: number,
                            });
                        }
                        match key {
                            "name" => m.name = value.to_string(),
                            "description" => m.description = value.to_string(),
                            _ => m.kind = (!value.is_empty()).then(|| value.to_string()),
                        }
                    }
                    "" => m
                        .irregularities
                        .push(Irregularity::EmptyKey { line: number }),
                    _ => m.extra.push((key.to_string(), value.to_string())),
                }
            }
        }
        None => {
            m.content = text.to_string();
            m.irregularities.push(if text.starts_with("---") {
                Irregularity::Unclosed
            } else {
                Irregularity::NoFrontmatter
            });
        }
    }
    if m.name.is_empty() {
        m.name = stem.to_string();
    }
    m
}

/// Whether an extra key can be written back without changing what the runtime reads: a
/// single-line key that the reader gives back as is, is not one the runtime reads, and does not
/// start the line with the `---` that would close the frontmatter early.
fn writable_extra(key: &str) -> bool {
    !key.is_empty()
        && key.trim() == key
        && !key.contains([':', '\n'])
        && !matches!(key, "name" | "description" | "type")
        && !key.starts_with("---")
}

/// Write a memory the way the runtime saves it: `---`, `name: `, `description: ` (always),
/// `type: ` (only when set), `---`, an empty line, the content without its trailing newlines and
/// one `\n`.
///
/// normafs choices: line breaks inside the name, description or type become spaces (written as
/// is, they would end the value early and the runtime would read a different memory); the extra
/// keys follow `type`, in their order, each as `key: value` on one line; one that could not be
/// read back as the same key (see [`writable_extra`]) is dropped.
pub fn render(m: &Memory) -> String {
    let mut out = String::from("---\n");
    out.push_str(&format!("name: {}\n", one_line(&m.name)));
    out.push_str(&format!("description: {}\n", one_line(&m.description)));
    if let Some(kind) = m.kind.as_deref().filter(|k| !k.is_empty()) {
        out.push_str(&format!("type: {}\n", one_line(kind)));
    }
    for (key, value) in &m.extra {
        if writable_extra(key) {
            out.push_str(&format!("{key}: {}\n", one_line(value)));
        }
    }
    out.push_str("---\n\n");
    out.push_str(m.content.trim_end_matches('\n'));
    out.push('\n');
    out
}

/// A file the scan skipped, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanProblem {
    /// The file name (U+FFFD for bytes that are not UTF-8); `""` for the directory itself.
    pub file_name: String,
    pub message: String,
}

/// The result of scanning a memory directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryScan {
    /// In scan order: modification time newest first, ties by file name (bytewise).
    pub memories: Vec<Memory>,
    /// Files that could not be read, by file name.
    pub problems: Vec<ScanProblem>,
}

/// Scan a memory directory as the runtime does: every entry directly in `dir` whose name ends
/// in `.md` (`.md` itself included), except `MEMORY.md` and directories. A missing directory
/// is an empty scan; an unlistable one is one problem.
///
/// normafs choices: files are opened without following symbolic links and must be regular
/// files (a link or a special file is a problem; the runtime would follow the link); a file
/// that cannot be read is a problem where the runtime skips it silently; ties of modification
/// time go by file name, where the runtime leaves them in no defined order.
pub fn scan(dir: &Path) -> MemoryScan {
    let mut result = MemoryScan::default();
    let list_problem = |e: std::io::Error| ScanProblem {
        file_name: String::new(),
        message: format!("cannot list {}: {e}", dir.display()),
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return result,
        Err(e) => {
            result.problems.push(list_problem(e));
            return result;
        }
    };
    let mut found: Vec<(Vec<u8>, Memory)> = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                result.problems.push(list_problem(e));
                continue;
            }
        };
        let raw = entry.file_name();
        let bytes = raw.as_bytes();
        if !bytes.ends_with(b".md") || raw == INDEX_FILE {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let file_name = raw.to_string_lossy().into_owned();
        let (data, meta) = match crate::format::read_regular_no_follow(&entry.path()) {
            Ok(read) => read,
            Err(e) => {
                result.problems.push(ScanProblem {
                    file_name,
                    message: format!("cannot read: {e}"),
                });
                continue;
            }
        };
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let (text, utf8) = match String::from_utf8(data) {
            Ok(text) => (text, true),
            Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), false),
        };
        let mut m = parse(&file_name, &text, mtime);
        if !utf8 {
            m.irregularities.insert(0, Irregularity::NotUtf8);
        }
        if raw.to_str().is_none() {
            m.irregularities.insert(0, Irregularity::FileNameNotUtf8);
        }
        found.push((bytes.to_vec(), m));
    }
    found.sort_by(|(na, a), (nb, b)| b.mtime.cmp(&a.mtime).then_with(|| na.cmp(nb)));
    result.memories = found.into_iter().map(|(_, m)| m).collect();
    result
        .problems
        .sort_by(|a, b| a.file_name.cmp(&b.file_name));
    result
}

/// The index line of one memory, without its newline: `- [<name>](<slug(name)>.md) — <description>`.
pub fn index_line(m: &Memory) -> String {
    format!("- [{}]({}) — {}", m.name, m.target_file(), m.description)
}

/// `MEMORY.md` as the runtime writes it: `# Memory`, an empty line, then one [`index_line`]
/// per memory in the given (scan) order, each ending in `\n`; `(no memories yet)` when there
/// are none.
pub fn render_index(memories: &[Memory]) -> String {
    let mut out = String::from(INDEX_HEADING);
    if memories.is_empty() {
        out.push_str(INDEX_EMPTY);
    }
    for m in memories {
        out.push_str(&index_line(m));
        out.push('\n');
    }
    out
}

/// Whether an on-disk `MEMORY.md` lists the same lines as the computed index, compared as sets
/// of lines (split at `\n`, nothing trimmed): the runtime orders the index by modification time
/// and a copied root loses the times, so a merely reordered index is not stale.
pub fn index_matches(on_disk: &str, computed: &str) -> bool {
    fn lines(text: &str) -> BTreeSet<&str> {
        text.split_terminator('\n').collect()
    }
    lines(on_disk) == lines(computed)
}

/// What the audit reports about the memory directory (SPEC 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemoryProblemKind {
    /// Two or more memories whose names give one `slug(name).md` (error).
    SlugCollision,
    /// A name whose slug is empty: its file is `.md` (warn).
    EmptySlug,
    /// The file name is not `slug(name).md` (warn).
    NameMismatch,
    /// An [`Irregularity`], or a file that cannot be read (warn).
    Malformed,
    /// Frontmatter keys the runtime drops at its next save (warn).
    UnknownKeys,
    /// `type` is not one of [`KNOWN_TYPES`] (info).
    UnknownType,
    /// The on-disk `MEMORY.md` lists other lines than the computed index (warn).
    IndexStale,
}

impl MemoryProblemKind {
    /// The audit code, e.g. `memory.slug-collision`.
    pub fn code(self) -> &'static str {
        match self {
            MemoryProblemKind::SlugCollision => "memory.slug-collision",
            MemoryProblemKind::EmptySlug => "memory.empty-slug",
            MemoryProblemKind::NameMismatch => "memory.name-mismatch",
            MemoryProblemKind::Malformed => "memory.malformed",
            MemoryProblemKind::UnknownKeys => "memory.unknown-keys",
            MemoryProblemKind::UnknownType => "memory.unknown-type",
            MemoryProblemKind::IndexStale => "memory.index-stale",
        }
    }

    /// The severity SPEC 9 gives the code.
    pub fn severity(self) -> Severity {
        match self {
            MemoryProblemKind::SlugCollision => Severity::Error,
            MemoryProblemKind::UnknownType => Severity::Info,
            MemoryProblemKind::EmptySlug
            | MemoryProblemKind::NameMismatch
            | MemoryProblemKind::Malformed
            | MemoryProblemKind::UnknownKeys
            | MemoryProblemKind::IndexStale => Severity::Warn,
        }
    }
}

/// One memory finding, about one file of the memory directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryProblem {
    pub kind: MemoryProblemKind,
    /// The file name; `""` for the directory itself.
    pub file_name: String,
    /// The 1-based line of the file, when the finding is about one.
    pub line: Option<usize>,
    pub message: String,
}

/// Sorts findings by file name, kind, line (stable: the order they were found in otherwise).
fn sort_problems(problems: &mut [MemoryProblem]) {
    problems.sort_by(|a, b| {
        a.file_name
            .cmp(&b.file_name)
            .then_with(|| a.kind.cmp(&b.kind))
            .then_with(|| a.line.cmp(&b.line))
    });
}

/// Audit the memories of a scan: one finding per problem, sorted by file name, kind, line.
///
/// The rules, each about a memory as the runtime reads it:
/// - `memory.slug-collision` (error): two or more memories of the scan whose names give the
///   same `slug(name).md`, the empty slug included (two Unicode-only names both map to `.md`).
///   The runtime saves and looks up a memory only in that file, so saving one overwrites the
///   other and recalling either reads one of them. Reported on every member of the group. A
///   memory whose target is merely another memory's *file* (whose own name maps elsewhere) is
///   not a collision: its `memory.name-mismatch` message names the file it would overwrite.
/// - `memory.empty-slug` (warn): `slug(name)` is empty, so the memory lives in the hidden file
///   `.md`, which the next such name overwrites. The one hazard the runtime itself creates.
/// - `memory.name-mismatch` (warn): the file name is not `slug(name).md` (also when the slug
///   is empty and the file is not `.md`): the runtime would look it up, and save it, elsewhere.
/// - `memory.malformed` (warn): each [`Irregularity`] (no frontmatter, an unclosed one, a head
///   line without `:` or with an empty key, a repeated known key, bytes that are not UTF-8), and
///   each file the scan could not read.
/// - `memory.unknown-keys` (warn): frontmatter keys other than `name`, `description`, `type`;
///   the runtime ignores them and drops them when it next saves the memory.
/// - `memory.unknown-type` (info): a `type` outside [`KNOWN_TYPES`] (the runtime accepts it).
pub fn check(scan: &MemoryScan) -> Vec<MemoryProblem> {
    let mut out = Vec::new();
    let mut push = |kind, file_name: &str, line, message| {
        out.push(MemoryProblem {
            kind,
            file_name: file_name.to_string(),
            line,
            message,
        });
    };
    for p in &scan.problems {
        push(
            MemoryProblemKind::Malformed,
            &p.file_name,
            None,
            p.message.clone(),
        );
    }
    let mut by_target: BTreeMap<String, Vec<&Memory>> = BTreeMap::new();
    let holder: BTreeMap<&str, &Memory> = scan
        .memories
        .iter()
        .map(|m| (m.file_name.as_str(), m))
        .collect();
    for m in &scan.memories {
        let file = m.file_name.as_str();
        let target = m.target_file();
        for irregular in &m.irregularities {
            push(
                MemoryProblemKind::Malformed,
                file,
                irregular.line(),
                irregular.message(m.stem()),
            );
        }
        if slug(&m.name).is_empty() {
            push(
                MemoryProblemKind::EmptySlug,
                file,
                None,
                format!(
                    "name {:?} has no ASCII letter or digit: the runtime keeps it in the hidden \
                     file .md, which the next such name overwrites",
                    m.name
                ),
            );
        }
        if file != target {
            let mut message = format!(
                "name {:?} belongs in {target}: the runtime looks it up and saves it there",
                m.name
            );
            if let Some(other) = holder.get(target.as_str()) {
                message.push_str(&format!(", overwriting the memory {:?}", other.name));
            }
            push(MemoryProblemKind::NameMismatch, file, None, message);
        }
        if !m.extra.is_empty() {
            let keys: Vec<&str> = m.extra.iter().map(|(k, _)| k.as_str()).collect();
            push(
                MemoryProblemKind::UnknownKeys,
                file,
                None,
                format!(
                    "the runtime drops {} at its next save of this memory",
                    keys.join(", ")
                ),
            );
        }
        if let Some(kind) = &m.kind {
            if !KNOWN_TYPES.contains(&kind.as_str()) {
                push(
                    MemoryProblemKind::UnknownType,
                    file,
                    None,
                    format!(
                        "type {kind:?} is not one of {} (the runtime accepts it)",
                        KNOWN_TYPES.join(", ")
                    ),
                );
            }
        }
        by_target.entry(target).or_default().push(m);
    }
    for (target, group) in &by_target {
        if group.len() < 2 {
            continue;
        }
        for m in group {
            let others: Vec<String> = group
                .iter()
                .filter(|o| o.file_name != m.file_name)
                .map(|o| format!("{:?} ({})", o.name, o.file_name))
                .collect();
            push(
                MemoryProblemKind::SlugCollision,
                &m.file_name,
                None,
                format!(
                    "name {:?} maps to {target}, as {} does: saving one overwrites the other",
                    m.name,
                    others.join(", ")
                ),
            );
        }
    }
    sort_problems(&mut out);
    out
}

/// `memory.index-stale` for the on-disk `MEMORY.md` of `dir`, against the index computed from
/// `scan`: the lines differ as sets ([`index_matches`]), or the file cannot be read (not a
/// regular file, a symbolic link, an I/O error). A missing `MEMORY.md` is not stale: the
/// runtime then computes the index itself.
pub fn check_index(dir: &Path, scan: &MemoryScan) -> Option<MemoryProblem> {
    let stale = |message: String| MemoryProblem {
        kind: MemoryProblemKind::IndexStale,
        file_name: INDEX_FILE.to_string(),
        line: None,
        message,
    };
    match crate::format::read_regular_no_follow(&dir.join(INDEX_FILE)) {
        Ok((bytes, _)) => {
            let on_disk = String::from_utf8_lossy(&bytes);
            (!index_matches(&on_disk, &render_index(&scan.memories))).then(|| {
                stale(
                    "MEMORY.md does not list the memories as they are (run `reindex-memory`)"
                        .into(),
                )
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(stale(format!(
            "cannot read MEMORY.md: {e} (run `reindex-memory`)"
        ))),
    }
}

/// Scan `dir` and audit it: [`check`] and [`check_index`], sorted by file name, kind, line.
pub fn audit(dir: &Path) -> Vec<MemoryProblem> {
    let scan = scan(dir);
    let mut out = check(&scan);
    out.extend(check_index(dir, &scan));
    sort_problems(&mut out);
    out
}

/// Words the runtime leaves out of a relevance query.
const STOP_WORDS: [&str; 23] = [
    "the", "a", "an", "and", "or", "of", "to", "in", "is", "it", "for", "on", "do", "i", "you",
    "my", "me", "what", "how", "can", "with", "this", "that",
];

/// A string lowercased character by character with [`simple_lower`].
fn lower(text: &str) -> String {
    text.chars().map(simple_lower).collect()
}

/// The runtime's query tokens: the lowercased query's runs of ASCII `[a-z0-9_]`, at least two
/// characters long and not a stop word; repeats are kept (each counts).
fn query_tokens(query: &str) -> Vec<String> {
    lower(query)
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .filter(|t| t.len() >= 2 && !STOP_WORDS.contains(t))
        .map(str::to_string)
        .collect()
}

/// Keyword relevance of memories to a query, as the runtime ranks them: `(index into
/// memories, score)` for every memory that scores above 0, best first.
///
/// Per token, a case-insensitive substring match scores 3 in the name and type (one field,
/// `name + " " + type`), 2 in the description and 1 in the content. Ties go to the newer file,
/// then keep the order of `memories` (pass them in scan order). The runtime's `Relevant(q, n)`
/// is the first `n` of this.
pub fn relevance(query: &str, memories: &[Memory]) -> Vec<(usize, u32)> {
    let tokens = query_tokens(query);
    let mut scored: Vec<(usize, u32)> = memories
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let heading = lower(&format!("{} {}", m.name, m.kind.as_deref().unwrap_or("")));
            let fields = [
                (heading, 3),
                (lower(&m.description), 2),
                (lower(&m.content), 1),
            ];
            let score: u32 = tokens
                .iter()
                .flat_map(|t| fields.iter().filter(move |(f, _)| f.contains(t.as_str())))
                .map(|(_, w)| *w)
                .sum();
            (score > 0).then_some((i, score))
        })
        .collect();
    scored.sort_by(|(a, sa), (b, sb)| {
        let mtime = |i: &usize| memories.get(*i).map(|m| m.mtime);
        sb.cmp(sa).then_with(|| mtime(b).cmp(&mtime(a)))
    });
    scored
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

/// Line breaks (`\r\n`, `\r`, `\n`) as spaces: headings and header values are single lines.
pub(crate) fn one_line(value: &str) -> String {
    value.replace("\r\n", " ").replace(['\r', '\n'], " ")
}
