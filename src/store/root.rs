//! The session root layout (SPEC 1): where a session's files live, which names can be sessions,
//! and discovery of the sessions present.
//!
//! Discovery rules (SPEC 1 plus normafs choices):
//! - A session `<sid>` exists when `transcripts/<sid>.jsonl` is a regular file or `noa/<sid>/` is
//!   a directory. Missing `transcripts/` or `noa/` directories simply hold no sessions.
//! - In `transcripts/`, only entries ending in `.jsonl` are candidates; directories (`<sid>/`
//!   holding `subagents/`) and other files are ignored, never reported. In `noa/`, only
//!   directories are candidates; files there are ignored.
//! - A candidate whose name is invalid ([`valid_session_name`]) is reported as a [`BadEntry`]
//!   (audit `root.bad-name`). Entries named `.normafs*` and temp files of durable writes
//!   ([`is_temp_name`]) are ignored in both directories.
//! - Symlinks are not followed blindly: a symlink candidate counts as a session only if it
//!   resolves to an entry of the right kind (regular file / directory) **directly in the same
//!   backing directory** (e.g. `old.jsonl -> new.jsonl`); otherwise (outside, nested, dangling)
//!   it is a bad entry, so the mount never passes through files from elsewhere. A candidate that is neither (a FIFO named `x.jsonl`, …) is a bad entry too.
//! - [`BadEntry::path_rel`] is `transcripts/<name>` or `noa/<name>` (the default layout names,
//!   also under override flags), with the name escaped by [`escape_name`] so it fits on one line.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{self, FileType};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::durable::is_temp_name;
use super::journal::JOURNAL_FILE_NAME;

/// Default directory names under a session root.
pub const TRANSCRIPTS_DIR: &str = "transcripts";
pub const MEMORY_DIR: &str = "memory";
pub const ARCHIVES_DIR: &str = "noa";

/// File name of a session's Noa state inside its archive root.
pub const STATE_FILE_NAME: &str = "state.json";

/// Prefix of normafs's own bookkeeping files (`.normafs.lock`), ignored by discovery.
const NORMAFS_PREFIX: &[u8] = b".normafs";
const TRANSCRIPT_SUFFIX: &[u8] = b".jsonl";

/// The three backing directories of a session root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootPaths {
    pub transcripts: PathBuf,
    pub memory: PathBuf,
    /// The archive *base* dir: a session's archive root is `archives/<sid>`.
    pub archives: PathBuf,
}

/// Directories given by `--transcripts`, `--memory`, `--archives`; `None` keeps the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RootOverrides {
    pub transcripts: Option<PathBuf>,
    pub memory: Option<PathBuf>,
    pub archives: Option<PathBuf>,
}

impl RootPaths {
    /// `ROOT/transcripts`, `ROOT/memory`, `ROOT/noa`.
    pub fn from_root(root: &Path) -> Self {
        Self::with_overrides(root, RootOverrides::default())
    }

    /// The default layout under `root`, with each given override replacing its directory.
    pub fn with_overrides(root: &Path, overrides: RootOverrides) -> Self {
        RootPaths {
            transcripts: overrides
                .transcripts
                .unwrap_or_else(|| root.join(TRANSCRIPTS_DIR)),
            memory: overrides.memory.unwrap_or_else(|| root.join(MEMORY_DIR)),
            archives: overrides
                .archives
                .unwrap_or_else(|| root.join(ARCHIVES_DIR)),
        }
    }

    // The per-session paths below assume `sid` passed `valid_session_name` (it then cannot
    // escape its directory).

    /// `transcripts/<sid>.jsonl`.
    pub fn transcript_path(&self, sid: &str) -> PathBuf {
        debug_assert!(valid_session_name(OsStr::new(sid)).is_ok());
        self.transcripts.join(format!("{sid}.jsonl"))
    }

    /// `transcripts/<sid>/subagents`.
    pub fn subagents_dir(&self, sid: &str) -> PathBuf {
        debug_assert!(valid_session_name(OsStr::new(sid)).is_ok());
        self.transcripts.join(sid).join("subagents")
    }

    /// `noa/<sid>`: the session's archive root.
    pub fn archive_root(&self, sid: &str) -> PathBuf {
        debug_assert!(valid_session_name(OsStr::new(sid)).is_ok());
        self.archives.join(sid)
    }

    /// `noa/<sid>/state.json`.
    pub fn state_path(&self, sid: &str) -> PathBuf {
        self.archive_root(sid).join(STATE_FILE_NAME)
    }

    /// `noa/<sid>/ctl.jsonl`.
    pub fn journal_path(&self, sid: &str) -> PathBuf {
        self.archive_root(sid).join(JOURNAL_FILE_NAME)
    }
}

/// Why a name cannot be a session (SPEC 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadName {
    #[error("empty name")]
    Empty,
    #[error("`.` and `..` cannot be sessions")]
    DotOrDotDot,
    #[error("name contains `/`")]
    Slash,
    #[error("name contains NUL")]
    Nul,
    #[error("name is not valid UTF-8")]
    NotUtf8,
    #[error("name contains a control character")]
    Control,
    #[error("name starts with `.`")]
    LeadingDot,
}

/// Checks that `name` can be a session id and returns it as `&str`.
///
/// Checked in this order (the first failure is reported): empty, `.`/`..`, `/`, NUL, UTF-8,
/// other control characters (Unicode `Cc`: C0, DEL, C1), leading `.`.
pub fn valid_session_name(name: &OsStr) -> Result<&str, BadName> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Err(BadName::Empty);
    }
    if bytes == b"." || bytes == b".." {
        return Err(BadName::DotOrDotDot);
    }
    if bytes.contains(&b'/') {
        return Err(BadName::Slash);
    }
    if bytes.contains(&0) {
        return Err(BadName::Nul);
    }
    let name = name.to_str().ok_or(BadName::NotUtf8)?;
    if name.chars().any(char::is_control) {
        return Err(BadName::Control);
    }
    if name.starts_with('.') {
        return Err(BadName::LeadingDot);
    }
    Ok(name)
}

/// A file name made printable on one line: `\` as `\\`, control characters as `\n`, `\t`, `\r`,
/// `\0` or `\u{…}`, bytes that are not UTF-8 as `\xNN`; everything else unchanged.
pub fn escape_name(name: &OsStr) -> String {
    let mut out = String::new();
    for chunk in name.as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.extend(c.escape_debug()),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            // Writing to a String cannot fail.
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// The sessions of a root and the entries that could not be sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// Session ids, sorted (byte order) and without duplicates.
    pub sessions: Vec<String>,
    /// Bad entries, sorted by `path_rel`.
    pub bad_names: Vec<BadEntry>,
}

/// An entry whose name or kind cannot be a session (audit `root.bad-name`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BadEntry {
    /// `transcripts/<escaped name>` or `noa/<escaped name>`.
    pub path_rel: String,
    /// Why, for the audit message.
    pub reason: String,
}

/// Lists the sessions of a root (see the module docs for the rules).
pub fn discover(paths: &RootPaths) -> io::Result<Discovery> {
    let mut sessions = BTreeSet::new();
    let mut bad_names = Vec::new();
    let dirs = [
        (&paths.transcripts, TRANSCRIPTS_DIR, Kind::Transcript),
        (&paths.archives, ARCHIVES_DIR, Kind::ArchiveRoot),
    ];
    for (dir, label, kind) in dirs {
        for candidate in list_dir(dir)? {
            match classify(dir, kind, &candidate) {
                Verdict::Ignore => {}
                Verdict::Session(sid) => {
                    sessions.insert(sid);
                }
                Verdict::Bad(reason) => bad_names.push(BadEntry {
                    path_rel: format!("{label}/{}", escape_name(&candidate.name)),
                    reason,
                }),
            }
        }
    }
    bad_names.sort();
    Ok(Discovery {
        sessions: sessions.into_iter().collect(),
        bad_names,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `transcripts/<sid>.jsonl`, a regular file.
    Transcript,
    /// `noa/<sid>/`, a directory.
    ArchiveRoot,
}

enum Verdict {
    Ignore,
    Session(String),
    Bad(String),
}

struct Candidate {
    name: std::ffi::OsString,
    file_type: FileType,
}

/// The entries of `dir` with their own (not followed) types; a missing dir has none.
fn list_dir(dir: &Path) -> io::Result<Vec<Candidate>> {
    let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(with_path(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(with_path)?;
        match entry.file_type() {
            Ok(file_type) => out.push(Candidate {
                name: entry.file_name(),
                file_type,
            }),
            // Removed between readdir and stat: it is not there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(with_path(e)),
        }
    }
    Ok(out)
}

fn classify(dir: &Path, kind: Kind, candidate: &Candidate) -> Verdict {
    let name = candidate.name.as_os_str();
    if name.as_bytes().starts_with(NORMAFS_PREFIX) || name.to_str().is_some_and(is_temp_name) {
        return Verdict::Ignore;
    }
    let file_type = candidate.file_type;
    let sid = match kind {
        Kind::Transcript => {
            let Some(stem) = name.as_bytes().strip_suffix(TRANSCRIPT_SUFFIX) else {
                return Verdict::Ignore;
            };
            if file_type.is_dir() {
                return Verdict::Ignore;
            }
            OsStr::from_bytes(stem)
        }
        Kind::ArchiveRoot => {
            if !file_type.is_dir() && !file_type.is_symlink() {
                return Verdict::Ignore;
            }
            name
        }
    };
    let sid = match valid_session_name(sid) {
        Ok(sid) => sid.to_owned(),
        Err(bad) => return Verdict::Bad(bad.to_string()),
    };
    let (wanted, label) = match kind {
        Kind::Transcript => (file_type.is_file(), "a regular file"),
        Kind::ArchiveRoot => (file_type.is_dir(), "a directory"),
    };
    if wanted || (file_type.is_symlink() && symlink_stays_inside(dir, name, kind)) {
        Verdict::Session(sid)
    } else if file_type.is_symlink() {
        Verdict::Bad(format!(
            "symlink does not resolve to {label} inside its backing directory"
        ))
    } else {
        Verdict::Bad(format!("not {label}"))
    }
}

/// Whether `dir/name` is a symbolic link that discovery does not follow: one that does not
/// resolve to a directory (`want_dir`) or a regular file directly in `dir`. `false` for
/// anything that is not a symlink, or is missing.
pub fn is_escaping_link(dir: &Path, name: &OsStr, want_dir: bool) -> bool {
    let kind = if want_dir {
        Kind::ArchiveRoot
    } else {
        Kind::Transcript
    };
    fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.file_type().is_symlink())
        && !symlink_stays_inside(dir, name, kind)
}

/// Whether the symlink `dir/name` resolves to an entry of `kind`'s type directly in `dir`.
fn symlink_stays_inside(dir: &Path, name: &OsStr, kind: Kind) -> bool {
    let (Ok(base), Ok(target)) = (fs::canonicalize(dir), fs::canonicalize(dir.join(name))) else {
        return false;
    };
    let Ok(meta) = fs::metadata(&target) else {
        return false;
    };
    let right_kind = match kind {
        Kind::Transcript => meta.is_file(),
        Kind::ArchiveRoot => meta.is_dir(),
    };
    right_kind && target.parent() == Some(base.as_path())
}
