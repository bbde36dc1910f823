//! One session's files, loaded for the core, the audit and the CLI: the main transcript, its
//! sidechains, `state.json`, the journal and the archive tree.

use std::fs;
use std::path::{Path, PathBuf};

use crate::config::NoaConfig;
use crate::format::loader::Transcript;
use crate::format::state::{load_state, Block, State, StateLoad};
use crate::format::transcript::Message;
use crate::store::durable::is_temp_name;
use crate::store::journal::{self, JournalRead};
use crate::store::root::{is_escaping_link, RootPaths};
use crate::store::transcripts::{sidechain_paths, TranscriptFile};

/// An archive file found under the archive root, by its path relative to it.
#[derive(Debug, Clone)]
pub struct ArchiveFile {
    /// e.g. `tier1/b1_m0001-m0006.md`.
    pub rel: String,
    /// The text, or why it could not be read.
    pub text: Result<String, String>,
}

/// A session's main transcript: loaded for the session, or borrowed from a cache that holds
/// it parsed already (a mount's).
#[derive(Debug)]
pub enum TranscriptOf<'t> {
    Owned(Box<Transcript>),
    Borrowed(&'t Transcript),
}

impl std::ops::Deref for TranscriptOf<'_> {
    type Target = Transcript;

    fn deref(&self) -> &Transcript {
        match self {
            TranscriptOf::Owned(t) => t,
            TranscriptOf::Borrowed(t) => t,
        }
    }
}

/// Everything on disk about one session.
#[derive(Debug)]
pub struct SessionData<'t> {
    pub sid: String,
    pub archive_root: PathBuf,
    pub transcript_path: PathBuf,
    pub transcript_exists: bool,
    pub transcript: TranscriptOf<'t>,
    /// Sidechains: agent id, path, loaded transcript.
    pub sidechains: Vec<(String, PathBuf, Transcript)>,
    pub state: StateLoad,
    /// The journal, or why it could not be read.
    pub journal: Result<JournalRead, String>,
    /// `*.md` files directly in the `tier<N>/` directories, sorted by path.
    pub archives: Vec<ArchiveFile>,
    /// Leftover temp files under the archive root and its tier directories (relative paths).
    pub debris: Vec<String>,
}

/// `tier<N>` directory names.
pub fn is_tier_dir(name: &str) -> bool {
    name.strip_prefix("tier")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

fn list_archives(root: &Path) -> (Vec<ArchiveFile>, Vec<String>) {
    let mut files = Vec::new();
    let mut debris = Vec::new();
    let Ok(entries) = fs::read_dir(root) else {
        return (files, debris);
    };
    let mut tiers = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() && is_tier_dir(&name) {
            tiers.push(name);
        } else if ft.is_file() && is_temp_name(&name) {
            debris.push(name);
        }
    }
    tiers.sort();
    for t in tiers {
        let Ok(entries) = fs::read_dir(root.join(&t)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(ft) = e.file_type() else { continue };
            if !ft.is_file() {
                continue;
            }
            let rel = format!("{t}/{name}");
            if is_temp_name(&name) {
                debris.push(rel);
            } else if name.ends_with(".md") {
                let text = fs::read(e.path())
                    .map_err(|e| e.to_string())
                    .and_then(|b| String::from_utf8(b).map_err(|_| "not valid UTF-8".to_string()));
                files.push(ArchiveFile { rel, text });
            }
        }
    }
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    debris.sort();
    (files, debris)
}

/// Load a transcript file whole (missing = empty); an unreadable file reads as empty and its
/// error is returned beside it. A symbolic link is followed only when discovery would follow
/// it (to a regular file in the same directory); any other reads as empty, with an error.
pub fn load_transcript(path: &Path, sid: &str) -> (Transcript, Option<String>) {
    load_transcript_with(path, || {
        // A long one keeps its records' cold bytes out of memory, as a mount's does.
        let cold = Some((std::env::temp_dir(), COLD_FROM));
        TranscriptFile::open_storing_cold(path, Some(sid), cold)
            .map(TranscriptFile::into_transcript)
    })
}

/// Transcripts this long loaded whole keep their records' cold bytes (thinking signatures,
/// unknown record fields) in an unlinked file in the temporary directory (see
/// [`crate::format::cold`]).
pub const COLD_FROM: u64 = 4 << 20;

/// [`load_transcript`] only as far as its first `messages` messages need
/// ([`crate::store::transcripts::read_first_messages`]).
pub fn load_first_messages(
    path: &Path,
    sid: &str,
    messages: usize,
) -> (Transcript, Option<String>) {
    load_transcript_with(path, || {
        crate::store::transcripts::read_first_messages(path, Some(sid), messages)
    })
}

fn load_transcript_with(
    path: &Path,
    read: impl FnOnce() -> std::io::Result<Transcript>,
) -> (Transcript, Option<String>) {
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        if is_escaping_link(dir, name, false) {
            return (
                Transcript::default(),
                Some(format!(
                    "{} is a symbolic link leading outside its directory (not followed)",
                    path.display()
                )),
            );
        }
    }
    match read() {
        Ok(t) => (t, None),
        Err(e) => (Transcript::default(), Some(e.to_string())),
    }
}

/// A session's subagent transcripts (agent id, path, parsed), in the order of their names.
pub fn sidechains(paths: &RootPaths, sid: &str) -> Vec<(String, PathBuf, Transcript)> {
    sidechain_paths(&paths.transcripts, sid)
        .unwrap_or_default()
        .into_iter()
        .map(|(aid, p)| {
            let (t, _) = load_transcript(&p, sid);
            (aid, p, t)
        })
        .collect()
}

/// Whether `sid` names a session of the root: a valid name with a transcript or an archive
/// root.
pub fn exists(paths: &RootPaths, sid: &str) -> bool {
    super::root::valid_session_name(std::ffi::OsStr::new(sid)).is_ok()
        && (paths.transcript_path(sid).is_file() || paths.archive_root(sid).is_dir())
}

/// Load everything about session `sid`.
pub fn load(paths: &RootPaths, sid: &str) -> SessionData<'static> {
    let transcript_path = paths.transcript_path(sid);
    let (transcript, error) = load_transcript(&transcript_path, sid);
    let transcript_exists = error.is_none() && transcript_path.is_file();
    let sidechains = sidechains(paths, sid);
    load_around(
        paths,
        sid,
        TranscriptOf::Owned(Box::new(transcript)),
        transcript_exists,
        sidechains,
    )
}

/// Everything about session `sid` but its transcripts, which the caller has parsed
/// already: the main one (`exists`: its file was there and readable) and the sidechains.
pub fn load_around<'t>(
    paths: &RootPaths,
    sid: &str,
    transcript: TranscriptOf<'t>,
    transcript_exists: bool,
    sidechains: Vec<(String, PathBuf, Transcript)>,
) -> SessionData<'t> {
    let transcript_path = paths.transcript_path(sid);
    let archive_root = paths.archive_root(sid);
    // An archive root that is a symlink leading elsewhere is not followed (discovery reports
    // it as a bad name): the session then has no archive root, so none of the state, journal
    // and archives kept in it.
    let (state, journal, (archives, debris)) =
        if is_escaping_link(&paths.archives, std::ffi::OsStr::new(sid), true) {
            let none = (Vec::new(), Vec::new());
            (StateLoad::missing(sid), Ok(JournalRead::default()), none)
        } else {
            let state = load_state(&paths.state_path(sid), sid);
            let journal = journal::read(&paths.journal_path(sid)).map_err(|e| e.to_string());
            (state, journal, list_archives(&archive_root))
        };
    SessionData {
        sid: sid.to_string(),
        archive_root,
        transcript_path,
        transcript_exists,
        transcript,
        sidechains,
        state,
        journal,
        archives,
        debris,
    }
}

/// The messages of a transcript as the core reads them (SPEC 3 "Messages"), in file order.
pub fn messages(t: &Transcript) -> Vec<&Message> {
    t.iter_messages().map(|(_, m)| m).collect()
}

/// The uuid of each message's record (parallel to [`messages`]).
pub fn message_uuids(t: &Transcript) -> Vec<&str> {
    t.iter_messages()
        .map(|(l, _)| l.record.uuid.as_str())
        .collect()
}

/// Where the runtime made the requests of transcript `t`, by how many messages came before
/// each ([`crate::noa::rebuild::request_points`] over the usage its records report).
pub fn request_points(t: &Transcript) -> Vec<usize> {
    let records: Vec<_> = t.iter_messages().collect();
    let msgs: Vec<&Message> = records.iter().map(|(_, m)| *m).collect();
    crate::noa::rebuild::request_points(&msgs, &|m| {
        records.get(m).and_then(|(l, _)| l.record.usage())
    })
}

/// A session's state as the runtime opens it: its own, or with `parents` configured and no
/// blocks of its own, the first ancestor's that has blocks (SPEC 4.10). Also names the
/// ancestor.
pub fn opened_state(
    paths: &RootPaths,
    sid: &str,
    own: &State,
    cfg: &NoaConfig,
) -> (State, Option<String>) {
    if cfg.parents.is_empty() || !own.blocks().is_empty() {
        return (own.clone(), None);
    }
    crate::noa::render::inherit(own.clone(), sid, &cfg.parents, &|p| {
        if is_escaping_link(&paths.archives, std::ffi::OsStr::new(p), true) {
            return None;
        }
        let l = load_state(&paths.state_path(p), p);
        (l.exists && l.error.is_none()).then_some(l.state)
    })
}

/// Where a block's archive is (SPEC 2.3, normafs's lookup order): `archiveRel` under the
/// session's archive root; else `archivePath` when it lies inside the archive base directory;
/// else the last three components of `archivePath` (`<sid>/tier<N>/<file>`) under the base.
/// Never a path outside the base. `None` when no candidate is a regular file.
pub fn locate_archive(paths: &RootPaths, sid: &str, b: &Block) -> Option<PathBuf> {
    let base = &paths.archives;
    let safe = |rel: &Path| {
        rel.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
            && crate::format::check_no_links(base, rel).is_ok()
    };
    let regular = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    let mut candidates: Vec<PathBuf> = Vec::new();
    if !b.archive_rel.is_empty() {
        candidates.push(Path::new(sid).join(&b.archive_rel));
    }
    if !b.archive_path.is_empty() {
        let abs = Path::new(&b.archive_path);
        let abs_base = std::path::absolute(base).unwrap_or_else(|_| base.clone());
        if let Ok(rel) = abs.strip_prefix(&abs_base) {
            candidates.push(rel.to_path_buf());
        }
        let comps: Vec<_> = abs.components().collect();
        if comps.len() >= 3 {
            let tail: PathBuf = comps[comps.len() - 3..].iter().collect();
            candidates.push(tail);
        }
    }
    candidates
        .into_iter()
        .filter(|rel| safe(rel))
        .map(|rel| base.join(rel))
        .find(|p| regular(p))
}

impl SessionData<'_> {
    pub fn messages(&self) -> Vec<&Message> {
        messages(&self.transcript)
    }

    /// The archive root as a string, for `archivePath`.
    pub fn archive_root_str(&self) -> String {
        self.archive_root.to_string_lossy().into_owned()
    }
}
