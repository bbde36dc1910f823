//! What an inode stands for: the mount's namespace (SPEC 5).

use std::path::PathBuf;

use super::layout::{ComputedFile, DependsOn};

/// One of the three backing directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Base {
    Transcripts,
    Memory,
    Archives,
}

/// A computed file of a session: a handle to its [`ComputedFile`] (the built-in ones are
/// named in `layout.rs`, as `ComputedKind::VIEW`). Two are the same file when their names are
/// the same: a mount's layout shows a name once.
#[derive(Clone, Copy)]
pub struct ComputedKind(&'static ComputedFile);

impl ComputedKind {
    pub const fn of(f: &'static ComputedFile) -> ComputedKind {
        ComputedKind(f)
    }

    /// Its name in a session directory.
    pub const fn name(self) -> &'static str {
        self.0.name
    }

    /// What it is made from, besides the transcript and the states.
    pub fn inputs(self) -> DependsOn {
        self.0.inputs
    }

    pub fn file(self) -> &'static ComputedFile {
        self.0
    }
}

impl PartialEq for ComputedKind {
    fn eq(&self, other: &ComputedKind) -> bool {
        std::ptr::eq(self.0, other.0) || self.name() == other.name()
    }
}

impl Eq for ComputedKind {}

impl std::hash::Hash for ComputedKind {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.name().hash(h);
    }
}

impl std::fmt::Debug for ComputedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ComputedKind({:?})", self.name())
    }
}

/// A file of a session's (or the root's) history, made by replaying it (issue 26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HistoryFile {
    /// `timeline.jsonl`: one line per request.
    Timeline,
    /// `timeline.svg`: its picture (the root's: every session's peak).
    TimelineSvg,
    /// `at/<n>/view.jsonl`: the view of the request after the first `n` messages.
    View(usize),
    /// `at/<n>/view.md`.
    ViewMd(usize),
    /// `view.html`: today's view as a page, the history picture inline (issue 42).
    Page,
    /// `at/<n>/view.html`.
    PageAt(usize),
    /// The root's `index.html`: every session in one table.
    Index,
}

/// A link beside a session's files (or the root's) into its `.history/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HistoryLink {
    Timeline,
    TimelineSvg,
    At,
    /// `view.html`: behind a link, so that `grep -r` does not read the view a second time.
    Page,
    /// The root's `index.html`.
    Index,
}

impl HistoryLink {
    /// In a session directory, in listing order (the root shows `timeline.svg` only).
    pub const SESSION: [HistoryLink; 4] = [
        HistoryLink::Timeline,
        HistoryLink::TimelineSvg,
        HistoryLink::At,
        HistoryLink::Page,
    ];

    /// At the mount's root, in listing order.
    pub const ROOT: [HistoryLink; 2] = [HistoryLink::TimelineSvg, HistoryLink::Index];

    pub fn name(self) -> &'static str {
        match self {
            HistoryLink::Timeline => "timeline.jsonl",
            HistoryLink::TimelineSvg => "timeline.svg",
            HistoryLink::At => "at",
            HistoryLink::Page => "view.html",
            HistoryLink::Index => "index.html",
        }
    }

    /// What it links to.
    pub fn target(self) -> &'static str {
        match self {
            HistoryLink::Timeline => ".history/timeline.jsonl",
            HistoryLink::TimelineSvg => ".history/timeline.svg",
            HistoryLink::At => ".history/at",
            HistoryLink::Page => ".history/view.html",
            HistoryLink::Index => ".history/index.html",
        }
    }

    pub fn of_name(name: &str) -> Option<HistoryLink> {
        Self::SESSION.into_iter().find(|l| l.name() == name)
    }
}

/// The directory the history links point into: not listed, so that `grep -r` and `find`
/// (which do not follow links) do not replay every session.
pub const HISTORY_DIR: &str = ".history";
/// `at/latest`: the session directory, whose files are today's view.
pub const AT_LATEST: &str = "latest";
pub const AT_LATEST_TARGET: &str = "../..";

/// A request point's name in `at/`: a decimal number without leading zeros.
pub fn parse_point(name: &str) -> Option<usize> {
    let ok = !name.is_empty()
        && name.len() <= 9
        && name.bytes().all(|b| b.is_ascii_digit())
        && (name == "0" || !name.starts_with('0'));
    ok.then(|| name.parse().ok()).flatten()
}

/// A node of the mount.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    /// `/`
    Root,
    /// `/sessions`
    Sessions,
    /// `/sessions/<sid>`
    Session(String),
    /// `/sessions/<sid>/raw`
    RawDir(String),
    /// `/sessions/<sid>/raw/<start>-<end>.md`
    Raw(String, String, String),
    /// `/sessions/<sid>/<name>`, a computed file of the mount's layout (`layout::Layout`:
    /// `view.jsonl`, `view.md`, `materialized.jsonl`, `audit.txt`, `status.json` and those
    /// added at setup)
    Computed(String, ComputedKind),
    /// `/sessions/<sid>/memory -> ../../memory`
    MemoryLink(String),
    /// `/sessions/<sid>/ctl` (`Some`) or `/ctl` (`None`)
    Ctl(Option<String>),
    /// `/audit.txt`
    RootAudit,
    /// `/memory`
    MemoryDir,
    /// `/memory/MEMORY.md` (computed)
    MemoryIndex,
    /// A real file or directory: a path relative to a backing directory.
    Real(Base, PathBuf),
    /// `/sessions/<sid>/.history` (`Some`) or `/.history` (`None`): not listed.
    HistoryDir(Option<String>),
    /// `/sessions/<sid>/{timeline.jsonl,timeline.svg,at,view.html}` (`Some`) or
    /// `/{timeline.svg,index.html}` (`None`): links into `.history/`.
    HistoryLink(Option<String>, HistoryLink),
    /// A computed file of `.history/` (the root's: `timeline.svg` and `index.html`).
    History(Option<String>, HistoryFile),
    /// `/sessions/<sid>/.history/at`
    AtDir(String),
    /// `/sessions/<sid>/.history/at/<n>`
    AtPoint(String, usize),
    /// `/sessions/<sid>/.history/at/latest -> ../..`
    AtLatest(String),
}

impl Node {
    /// Computed files, made on read (ctl excluded).
    pub fn is_computed_file(&self) -> bool {
        matches!(
            self,
            Node::Raw(..)
                | Node::Computed(..)
                | Node::RootAudit
                | Node::MemoryIndex
                | Node::History(..)
        )
    }

    /// The session a node of a session's files belongs to (computed files, `raw/`,
    /// `.history/`).
    pub fn session_of(&self) -> Option<&str> {
        match self {
            Node::Computed(sid, _)
            | Node::Raw(sid, _, _)
            | Node::History(Some(sid), _)
            | Node::HistoryDir(Some(sid))
            | Node::HistoryLink(Some(sid), _)
            | Node::AtDir(sid)
            | Node::AtPoint(sid, _)
            | Node::AtLatest(sid) => Some(sid),
            _ => None,
        }
    }
}

/// The name of a raw file: `m00004-m00009.md`, or `m00005.md` for one ref.
pub fn raw_name(start: &str, end: &str) -> String {
    if start == end {
        format!("{start}.md")
    } else {
        format!("{start}-{end}.md")
    }
}

/// The refs a raw file's name holds (canonical or not; the caller checks).
pub fn parse_raw_name(name: &str) -> Option<(&str, &str)> {
    let stem = name.strip_suffix(".md")?;
    Some(stem.split_once('-').unwrap_or((stem, stem)))
}
