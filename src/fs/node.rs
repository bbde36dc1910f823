//! What an inode stands for: the mount's namespace (SPEC 5).

use std::path::PathBuf;

/// One of the three backing directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Base {
    Transcripts,
    Memory,
    Archives,
}

/// A computed file of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComputedKind {
    View,
    ViewMd,
    Materialized,
    Audit,
    Status,
}

impl ComputedKind {
    /// Its name in a session directory ([`super::layout::SESSION`]).
    pub fn name(self) -> &'static str {
        super::layout::of_kind(self).0
    }

    /// What it is made from, besides the transcript and the states.
    pub fn inputs(self) -> super::layout::Inputs {
        super::layout::of_kind(self).1
    }

    pub const ALL: [ComputedKind; 5] = [
        ComputedKind::View,
        ComputedKind::ViewMd,
        ComputedKind::Materialized,
        ComputedKind::Audit,
        ComputedKind::Status,
    ];
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
    /// `/sessions/<sid>/{view.jsonl,view.md,materialized.jsonl,audit.txt,status.json}` (the
    /// layout's table, `layout::SESSION`, names them)
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
}

impl Node {
    /// Computed files, made on read (ctl excluded).
    pub fn is_computed_file(&self) -> bool {
        matches!(
            self,
            Node::Raw(..) | Node::Computed(..) | Node::RootAudit | Node::MemoryIndex
        )
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

/// Where a real name of a session directory is backed: a name of the layout's table, or an
/// archive tier `tier<N>`.
pub fn session_real(sid: &str, name: &str) -> Option<(Base, PathBuf)> {
    use super::layout::{self, Backing, Entry};
    match layout::find(name) {
        Some(Entry::Real(base, Backing::SessionFile)) => {
            Some((base, PathBuf::from(format!("{sid}.jsonl"))))
        }
        Some(Entry::Real(base, Backing::InSessionDir(leaf))) => {
            Some((base, PathBuf::from(sid).join(leaf)))
        }
        Some(_) => None,
        None if crate::store::session::is_tier_dir(name) => {
            Some((Base::Archives, PathBuf::from(sid).join(name)))
        }
        None => None,
    }
}
