//! A session directory's layout (SPEC 5) in one table: every name it shows, what it is, where
//! a real one is backed, and how a computed one is made. The namespace (`child`, `list`), the
//! backing paths of real names, the computed files a session computation makes and their input
//! fingerprints all read it (through a mount's [`Layout`]: this table and the computed files
//! added at setup).
//!
//! A new computed file of a session is a [`ComputedFile`] (its name, its [`DependsOn`] and its
//! render function, which makes its bytes from a [`SessionFiles`]) and its entry, nothing
//! else: for a built-in one, a `ComputedKind` constant below and its row of [`SESSION`] (its
//! place in the listing), its render function beside the others in
//! `computed/session_files.rs`; for one a program adds, `Setup::computed_file`
//! (`MountOptions::computed_files` for a mount).

use std::path::PathBuf;

use crate::bytes::Bytes;

use super::computed::session_files::{self as files, SessionFiles};
use super::error::FsError;
use super::node::{Base, ComputedKind, HistoryLink, HISTORY_DIR};

/// What a name of a session directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// A real file or directory, backed in `base` at `backing`.
    Real(Base, BackedAt),
    /// A computed file, made from its transcript and state (and its ancestors' states) and
    /// what its `DependsOn` adds.
    Computed(ComputedKind),
    /// `raw/`: the archived ranges' originals.
    RawDir,
    /// `memory`, a link to the root's `memory/`.
    MemoryLink,
    /// The session's `ctl` file.
    Ctl,
}

/// Where a real name of session `sid` is backed, relative to its base directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackedAt {
    /// `<sid>.jsonl`.
    SessionFile,
    /// `<sid>/<name>`.
    InSessionDir(&'static str),
}

/// What a computed file is made from besides the transcript and states: the inputs its
/// fingerprint (and so its mtime and its staleness) covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DependsOn {
    /// The session's `subagents/` transcripts.
    pub subagents: bool,
    /// The session's archive directory, tiers included.
    pub archives: bool,
    /// Whether the session looks live (which changes with time alone).
    pub liveness: bool,
}

impl DependsOn {
    /// Only the transcript and the states.
    pub const NOTHING_ELSE: DependsOn = DependsOn {
        subagents: false,
        archives: false,
        liveness: false,
    };
}

/// Makes a computed file's bytes from its session's files of one computation.
pub type Render = fn(&mut SessionFiles<'_, '_>) -> Result<Bytes, FsError>;

/// A computed file of a session: its name, what its fingerprint covers, and how it is made.
/// Its render function must make the same bytes from the same inputs (a version is
/// remembered per input fingerprint, and its bytes are made again when evicted).
#[derive(Debug)]
pub struct ComputedFile {
    pub name: &'static str,
    pub inputs: DependsOn,
    pub render: Render,
    /// Made after the session's other files, once the view's turn is let go: its render
    /// loads the whole session ([`SessionFiles::session`]), so the two are not held at once.
    pub made_last: bool,
}

impl ComputedFile {
    /// `name`, made by `render` from the transcript and states only.
    pub const fn new(name: &'static str, render: Render) -> ComputedFile {
        ComputedFile {
            name,
            inputs: DependsOn::NOTHING_ELSE,
            render,
            made_last: false,
        }
    }

    /// Made from `inputs` besides.
    pub const fn depends_on(self, inputs: DependsOn) -> ComputedFile {
        ComputedFile { inputs, ..self }
    }

    /// Made last (see [`ComputedFile::made_last`]).
    pub const fn made_last(self) -> ComputedFile {
        ComputedFile {
            made_last: true,
            ..self
        }
    }
}

/// One name of a session directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub name: &'static str,
    pub item: Item,
}

const fn real(name: &'static str, base: Base, backing: BackedAt) -> Row {
    Row {
        name,
        item: Item::Real(base, backing),
    }
}

const fn computed(kind: ComputedKind) -> Row {
    Row {
        name: kind.name(),
        item: Item::Computed(kind),
    }
}

/// The real names, which the watcher also maps its backing events to.
pub const TRANSCRIPT: &str = "transcript.jsonl";
pub const SUBAGENTS: &str = "subagents";
pub const STATE: &str = "state.json";
pub const CTL_LOG: &str = "ctl.jsonl";

/// The built-in computed files.
impl ComputedKind {
    pub const VIEW: ComputedKind = ComputedKind::of(&ComputedFile::new("view.jsonl", files::view));
    pub const VIEW_MD: ComputedKind =
        ComputedKind::of(&ComputedFile::new("view.md", files::view_md));
    pub const MATERIALIZED: ComputedKind = ComputedKind::of(&ComputedFile::new(
        "materialized.jsonl",
        files::materialized,
    ));
    pub const AUDIT: ComputedKind = ComputedKind::of(
        &ComputedFile::new("audit.txt", files::audit)
            .depends_on(DependsOn {
                subagents: true,
                archives: true,
                liveness: false,
            })
            .made_last(),
    );
    pub const STATUS: ComputedKind = ComputedKind::of(
        &ComputedFile::new("status.json", files::status).depends_on(DependsOn {
            subagents: true,
            archives: false,
            liveness: true,
        }),
    );
}

/// A session directory, in listing order. Its archive tiers (`tier<N>/`) are listed after the
/// real names: their names are found on disk, not here; the computed files a mount adds
/// come after the table (see [`Layout`]).
pub const SESSION: [Row; 12] = [
    real(TRANSCRIPT, Base::Transcripts, BackedAt::SessionFile),
    real(
        SUBAGENTS,
        Base::Transcripts,
        BackedAt::InSessionDir(SUBAGENTS),
    ),
    real(STATE, Base::Archives, BackedAt::InSessionDir(STATE)),
    real(CTL_LOG, Base::Archives, BackedAt::InSessionDir(CTL_LOG)),
    computed(ComputedKind::VIEW),
    computed(ComputedKind::VIEW_MD),
    computed(ComputedKind::MATERIALIZED),
    computed(ComputedKind::AUDIT),
    computed(ComputedKind::STATUS),
    Row {
        name: "raw",
        item: Item::RawDir,
    },
    Row {
        name: "memory",
        item: Item::MemoryLink,
    },
    Row {
        name: "ctl",
        item: Item::Ctl,
    },
];

/// Why a computed file cannot be added to a session directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("a session directory already shows a {0:?}")]
    Taken(&'static str),
    #[error("{0:?} cannot name a file of a session directory")]
    NotAName(&'static str),
}

/// What a mount's session directories show: the [`SESSION`] table, then the computed files
/// added at setup, in the order they were added.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    added: Vec<Row>,
}

impl Layout {
    /// Every row, in listing order.
    pub fn rows(&self) -> impl Iterator<Item = &Row> {
        SESSION.iter().chain(&self.added)
    }

    /// The entry named `name` in a session directory.
    pub fn find(&self, name: &str) -> Option<Item> {
        self.rows().find(|s| s.name == name).map(|s| s.item)
    }

    /// The computed files of a session, in listing order.
    pub fn computed_files(&self) -> impl Iterator<Item = ComputedKind> + '_ {
        self.rows().filter_map(|s| match s.item {
            Item::Computed(kind) => Some(kind),
            _ => None,
        })
    }

    /// Show `f` in every session directory, after the others. Its name must be one no other
    /// name of a session directory has or may have (an archive tier's, a history link's).
    pub fn add(&mut self, f: &'static ComputedFile) -> Result<(), LayoutError> {
        let name = f.name;
        if name.len() > 255 || !super::real::valid_component(std::ffi::OsStr::new(name)) {
            return Err(LayoutError::NotAName(name));
        }
        let taken = self.find(name).is_some()
            || HistoryLink::of_name(name).is_some()
            || name == HISTORY_DIR
            || crate::store::session::is_tier_dir(name);
        if taken {
            return Err(LayoutError::Taken(name));
        }
        self.added.push(computed(ComputedKind::of(f)));
        Ok(())
    }
}

/// The session-directory name of `<sid>/<leaf>` in `base`, when the table shows it.
pub fn shown_in_session_dir(base: Base, leaf: &str) -> Option<&'static str> {
    SESSION
        .iter()
        .find(|s| matches!(s.item, Item::Real(b, BackedAt::InSessionDir(l)) if b == base && l == leaf))
        .map(|s| s.name)
}

/// Where a real name of a session directory is backed: a name of the table, or an archive
/// tier `tier<N>`.
pub fn session_real(sid: &str, name: &str) -> Option<(Base, PathBuf)> {
    match SESSION.iter().find(|s| s.name == name).map(|s| s.item) {
        Some(Item::Real(base, BackedAt::SessionFile)) => {
            Some((base, PathBuf::from(format!("{sid}.jsonl"))))
        }
        Some(Item::Real(base, BackedAt::InSessionDir(leaf))) => {
            Some((base, PathBuf::from(sid).join(leaf)))
        }
        Some(_) => None,
        None if crate::store::session::is_tier_dir(name) => {
            Some((Base::Archives, PathBuf::from(sid).join(name)))
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{
        session_real, shown_in_session_dir, ComputedFile, Item, Layout, LayoutError, SESSION,
    };
    use crate::bytes::Bytes;
    use crate::fs::node::{Base, ComputedKind};
    use crate::fs::{FsError, SessionFiles};
    use std::path::PathBuf;

    #[test]
    fn names_are_unique_and_each_computed_row_is_its_file() {
        let mut names: Vec<&str> = SESSION.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SESSION.len());
        let layout = Layout::default();
        let kinds: Vec<ComputedKind> = layout.computed_files().collect();
        assert_eq!(kinds.len(), 5);
        for kind in kinds {
            assert_eq!(layout.find(kind.name()), Some(Item::Computed(kind)));
        }
        assert_eq!(ComputedKind::VIEW.name(), "view.jsonl");
        assert!(ComputedKind::AUDIT.inputs().archives);
        assert_ne!(ComputedKind::VIEW, ComputedKind::VIEW_MD);
    }

    fn nothing(_: &mut SessionFiles<'_, '_>) -> Result<Bytes, FsError> {
        Ok(Bytes::default())
    }

    static NOTES: ComputedFile = ComputedFile::new("notes.txt", nothing);

    #[test]
    fn a_file_added_is_shown_after_the_table_and_a_name_is_shown_once() {
        let mut layout = Layout::default();
        assert_eq!(layout.add(&NOTES), Ok(()));
        let notes = ComputedKind::of(&NOTES);
        assert_eq!(layout.find("notes.txt"), Some(Item::Computed(notes)));
        assert_eq!(layout.computed_files().last(), Some(notes));
        assert_eq!(layout.rows().count(), SESSION.len() + 1);
        assert_eq!(layout.add(&NOTES), Err(LayoutError::Taken("notes.txt")));
        assert_eq!(Layout::default().find("notes.txt"), None, "per layout");
        static TAKEN: [ComputedFile; 7] = [
            ComputedFile::new("view.html", nothing),
            ComputedFile::new("view.jsonl", nothing),
            ComputedFile::new("transcript.jsonl", nothing),
            ComputedFile::new("ctl", nothing),
            ComputedFile::new("tier3", nothing),
            ComputedFile::new("timeline.svg", nothing),
            ComputedFile::new(".history", nothing),
        ];
        for f in &TAKEN {
            assert_eq!(layout.add(f), Err(LayoutError::Taken(f.name)), "{}", f.name);
        }
        static NOT_NAMES: [ComputedFile; 4] = [
            ComputedFile::new("", nothing),
            ComputedFile::new("..", nothing),
            ComputedFile::new("a/b", nothing),
            ComputedFile::new("a\0b", nothing),
        ];
        for f in &NOT_NAMES {
            assert_eq!(
                layout.add(f),
                Err(LayoutError::NotAName(f.name)),
                "{}",
                f.name
            );
        }
        assert_eq!(layout.rows().count(), SESSION.len() + 1);
    }

    #[test]
    fn real_names_are_backed_where_the_runtime_writes_them() {
        let backed = [
            ("transcript.jsonl", Some((Base::Transcripts, "s1.jsonl"))),
            ("subagents", Some((Base::Transcripts, "s1/subagents"))),
            ("state.json", Some((Base::Archives, "s1/state.json"))),
            ("ctl.jsonl", Some((Base::Archives, "s1/ctl.jsonl"))),
            ("tier2", Some((Base::Archives, "s1/tier2"))),
            ("view.jsonl", None),
        ];
        for (name, want) in backed {
            let want = want.map(|(b, p)| (b, PathBuf::from(p)));
            assert_eq!(session_real("s1", name), want, "{name}");
        }
        assert_eq!(
            shown_in_session_dir(Base::Archives, "state.json"),
            Some("state.json")
        );
        assert_eq!(
            shown_in_session_dir(Base::Archives, "ctl.jsonl"),
            Some("ctl.jsonl")
        );
        assert_eq!(shown_in_session_dir(Base::Transcripts, "state.json"), None);
        assert_eq!(shown_in_session_dir(Base::Archives, "tier1"), None);
        assert_eq!(session_real("s1", "nothing"), None);
    }
}
