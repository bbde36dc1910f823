//! A session directory's layout (SPEC 5) in one table: every name it shows, what it is, where
//! a real one is backed, and what a computed one is made from. The namespace (`child`,
//! `list`), the backing paths of real names, the names of computed files and their input
//! fingerprints all read it: a new computed file is one [`SESSION`] entry, a [`ComputedKind`]
//! and its compute function in `computed.rs`.

use std::path::PathBuf;

use super::node::{Base, ComputedKind};

/// What a name of a session directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// A real file or directory, backed in `base` at `backing`.
    Real(Base, BackedAt),
    /// A computed file, made from its transcript and state (and its ancestors' states) and
    /// what `DependsOn` adds.
    Computed(ComputedKind, DependsOn),
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

const fn computed(name: &'static str, kind: ComputedKind, inputs: DependsOn) -> Row {
    Row {
        name,
        item: Item::Computed(kind, inputs),
    }
}

/// Only the transcript and the states.
const VIEW_INPUTS: DependsOn = DependsOn {
    subagents: false,
    archives: false,
    liveness: false,
};

/// The real names, which the watcher also maps its backing events to.
pub const TRANSCRIPT: &str = "transcript.jsonl";
pub const SUBAGENTS: &str = "subagents";
pub const STATE: &str = "state.json";
pub const CTL_LOG: &str = "ctl.jsonl";

/// A session directory, in listing order. Its archive tiers (`tier<N>/`) are listed after the
/// real names: their names are found on disk, not here.
pub const SESSION: [Row; 12] = [
    real(TRANSCRIPT, Base::Transcripts, BackedAt::SessionFile),
    real(
        SUBAGENTS,
        Base::Transcripts,
        BackedAt::InSessionDir(SUBAGENTS),
    ),
    real(STATE, Base::Archives, BackedAt::InSessionDir(STATE)),
    real(CTL_LOG, Base::Archives, BackedAt::InSessionDir(CTL_LOG)),
    computed("view.jsonl", ComputedKind::View, VIEW_INPUTS),
    computed("view.md", ComputedKind::ViewMd, VIEW_INPUTS),
    computed(
        "materialized.jsonl",
        ComputedKind::Materialized,
        VIEW_INPUTS,
    ),
    computed(
        "audit.txt",
        ComputedKind::Audit,
        DependsOn {
            subagents: true,
            archives: true,
            liveness: false,
        },
    ),
    computed(
        "status.json",
        ComputedKind::Status,
        DependsOn {
            subagents: true,
            archives: false,
            liveness: true,
        },
    ),
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

/// The entry named `name` in a session directory.
pub fn find(name: &str) -> Option<Item> {
    SESSION.iter().find(|s| s.name == name).map(|s| s.item)
}

/// The session-directory name of `<sid>/<leaf>` in `base`, when the table shows it.
pub fn shown_in_session_dir(base: Base, leaf: &str) -> Option<&'static str> {
    SESSION
        .iter()
        .find(|s| matches!(s.item, Item::Real(b, BackedAt::InSessionDir(l)) if b == base && l == leaf))
        .map(|s| s.name)
}

/// The computed files of a session, in listing order.
pub fn computed_files() -> impl Iterator<Item = (&'static str, ComputedKind, DependsOn)> {
    SESSION.iter().filter_map(|s| match s.item {
        Item::Computed(kind, inputs) => Some((s.name, kind, inputs)),
        _ => None,
    })
}

/// The name and inputs of a computed file.
pub fn of_kind(kind: ComputedKind) -> (&'static str, DependsOn) {
    computed_files()
        .find(|(_, k, _)| *k == kind)
        .map(|(name, _, inputs)| (name, inputs))
        // Every kind has its entry (a test checks it).
        .unwrap_or(("", VIEW_INPUTS))
}

impl ComputedKind {
    /// Its name in a session directory ([`SESSION`]).
    pub fn name(self) -> &'static str {
        of_kind(self).0
    }

    /// What it is made from, besides the transcript and the states.
    pub fn inputs(self) -> DependsOn {
        of_kind(self).1
    }
}

/// Where a real name of a session directory is backed: a name of the table, or an archive
/// tier `tier<N>`.
pub fn session_real(sid: &str, name: &str) -> Option<(Base, PathBuf)> {
    match find(name) {
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
    use super::{computed_files, find, of_kind, session_real, shown_in_session_dir, Item, SESSION};
    use crate::fs::node::{Base, ComputedKind};
    use std::path::PathBuf;

    #[test]
    fn every_kind_has_one_entry_and_names_are_unique() {
        for kind in ComputedKind::ALL {
            assert_eq!(
                computed_files().filter(|(_, k, _)| *k == kind).count(),
                1,
                "{kind:?}"
            );
            assert!(!of_kind(kind).0.is_empty());
            assert_eq!(
                find(kind.name()),
                Some(Item::Computed(kind, of_kind(kind).1))
            );
        }
        assert_eq!(computed_files().count(), ComputedKind::ALL.len());
        let mut names: Vec<&str> = SESSION.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SESSION.len());
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
