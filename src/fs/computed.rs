//! Computed files: what each one's current version is — its size, a keyed digest of its
//! bytes, its mtime and mode, remembered per input fingerprint (a few dozen bytes a file) —
//! and its bytes, made by the noa core (`computed/make.rs`) and kept within the `--cache-mb`
//! budget beside the parsed transcripts and states they are made from
//! (`store::cache::Cache`). Bytes are evicted freely: the same inputs make the same bytes
//! again, so a size, a `stat` or a version check never needs them kept.
//!
//! A version is current while its inputs' fingerprint is. The fingerprint is found by `stat`
//! of the inputs (`store::inputs::Inputs`), or, while the watcher covers the file, it is known
//! unchanged as long as the file's generation is: the watcher's reports advance the
//! generation of the session (or memory, or root) they concern ([`Computed::changed`]), so a
//! covered file of a session that did not change asks the disk nothing.

mod make;
pub mod session_files;
mod settings;

pub use settings::SettingsError;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};
use parking_lot::Mutex;

use crate::bytes::Bytes;
use crate::config::Config;
use crate::format::state::StateLoad;
use crate::noa::render;
use crate::store::cache::Cache;
use crate::store::inputs::Inputs;
use crate::store::root::{self, RootPaths};
use crate::store::transcripts::TranscriptFile;

use super::error::FsError;
use super::layout::Layout;
use super::node::{ComputedKind, Node};
use super::watch::Affected;

/// A computed file's version: what describes it, and its bytes when they are at hand.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The bytes (`None` when only the description was asked for, or they were evicted).
    pub data: Option<Bytes>,
    pub size: u64,
    /// A keyed digest of the bytes (see [`digest`]) when they are at most [`SAME_BYTES`].
    pub digest: Option<u64>,
    /// The newest mtime of the inputs.
    pub mtime: SystemTime,
    /// Read for the owner (the mounting user); for group and others only when every input grants
    /// it to them (the group: when the input's group is the mounting user's), so a file derived
    /// from a 0600 transcript or memory never shows it to a user that the file itself is hidden
    /// from (`--allow-other`).
    pub perm: u16,
    /// The fingerprint of the inputs the bytes were computed from: equal fingerprints, equal
    /// bytes (the kernel's cached size and pages are checked against it).
    pub fp: u64,
    /// Which computation made it: the bytes kept are this version's only when kept by the
    /// same one (two computations from inputs that changed while they were read may make
    /// other bytes under one fingerprint).
    pub made: u64,
}

/// Files up to this size carry a digest of their bytes: two versions of one from different
/// inputs are told apart by it without their bytes (a raw range when the transcript grows,
/// `status.json` when nothing it counts moved), and a handle opened on one reads its bytes
/// only when the kernel asks for a page (see `fs/versions.rs`). Larger files are views,
/// which grow rather than stay the same.
pub const SAME_BYTES: u64 = 1 << 20;

/// A keyed digest of the first `len` bytes of `data` (`None` when `data` is shorter), keyed
/// per process, so no content can be made to match another's on purpose.
pub fn digest(data: &Bytes, len: u64) -> Option<u64> {
    static KEYS: OnceLock<std::hash::RandomState> = OnceLock::new();
    if data.len() < len {
        return None;
    }
    let mut h = KEYS.get_or_init(std::hash::RandomState::new).build_hasher();
    h.write_u64(len);
    let _ = data.each_slice_upto(len, |b| {
        h.write(b);
        Ok(())
    });
    Some(h.finish())
}

/// What a caller needs of a version besides its description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// The description only (an attribute): bytes made for it are not kept.
    Size,
    /// The bytes if they are at hand (a lookup, whose hold keeps them for the open that may
    /// follow): bytes made for it are handed over, not kept, so a `stat` keeps none.
    Pin,
    /// The bytes (an open, a read): kept within the budget.
    Bytes,
    /// As `Pin`, for a reader that has not come yet (see [`AHEAD`]): the bytes made stay at
    /// hand longer ([`AHEAD_KEPT`]).
    Ahead,
}

/// A version known, and how long it is known current without asking the disk.
#[derive(Debug, Clone)]
struct Known {
    /// Its description (no bytes).
    c: Rendered,
    /// The generation it was known current at, while the watcher covers the file.
    gen: Option<u64>,
    /// Current until then at most (whether the session looks live changes with time alone).
    until: Option<Instant>,
    /// When it was made: what it says of time (`status.json`'s `idle_seconds`) is as of
    /// then, so that it is made again byte for byte from the same inputs.
    made_at: DateTime<Utc>,
    /// The `stat` pass its inputs were found by: a computation whose pass was earlier (it
    /// took longer) does not replace it.
    taken: u64,
    /// When a version of other inputs was last replaced by one of the file's (`None`: this
    /// is the first known).
    changed_at: Option<Instant>,
    /// Its bytes, when it is small and the kernel opens files itself (see
    /// [`Computed::keep_small`]).
    small: Option<Bytes>,
}

/// The largest computed file whose bytes are kept with its description when the kernel opens
/// files itself and the file changes now and then (`status.json`, a session's `audit.txt`).
pub const SMALL_KEPT: u64 = 16 << 10;

/// A computed file whose version replaced another within this long "changes now and then":
/// what the kernel was told of it is kept readable more carefully (see
/// [`Computed::keep_small`]). The files of sessions that do not change keep no bytes: a
/// `stat`, `ls -l` or `du` of a thousand sessions leaves nothing behind.
pub const CHANGING: Duration = Duration::from_secs(10);

/// How often at most the mount gives its heap's free memory back to the system.
pub const GIVE_BACK_EVERY: Duration = Duration::from_secs(2);

/// How often the mount computed and checked: what its counters report.
#[derive(Debug, Default)]
pub struct Counters {
    /// Runs of the noa core over a session (one parse refresh and one pipeline run), and
    /// of the computations of `MEMORY.md` and the root's `audit.txt`.
    pub computations: AtomicU64,
    /// Computed files rendered (several per session computation).
    pub renders: AtomicU64,
    /// `stat` passes over a computed file's inputs.
    pub input_checks: AtomicU64,
    /// Reads that reached the mount for a version whose bytes were not at hand: the kernel
    /// no longer held those pages (it may let a page go at any time), so they are made again.
    pub refills: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub computations: u64,
    pub renders: u64,
    pub input_checks: u64,
    pub refills: u64,
}

/// The generation of what computed files are made from, advanced by the watcher's reports.
#[derive(Default)]
struct Generations {
    sessions: Mutex<HashMap<String, u64>>,
    memory: AtomicU64,
    root: AtomicU64,
    /// Each session's configured ancestors (whose states a fork's view reads).
    parents: Mutex<HashMap<String, Arc<Vec<String>>>>,
}

impl Generations {
    fn parents(&self, cfg: &Config, sid: &str) -> Arc<Vec<String>> {
        let mut g = self.parents.lock();
        if let Some(p) = g.get(sid) {
            return p.clone();
        }
        let p: Vec<String> = cfg
            .for_session(sid)
            .parents
            .iter()
            .take(render::MAX_INHERIT_DEPTH)
            .cloned()
            .collect();
        let p = Arc::new(p);
        g.insert(sid.to_string(), p.clone());
        p
    }

    /// The generation of `node`'s inputs: a sum of counters that only grow, so any report
    /// that concerns them changes it.
    fn of(&self, cfg: &Config, node: &Node) -> u64 {
        match node {
            Node::Computed(sid, _) | Node::Raw(sid, _, _) | Node::History(Some(sid), _) => {
                let parents = self.parents(cfg, sid);
                let g = self.sessions.lock();
                let at = |s: &str| g.get(s).copied().unwrap_or(0);
                parents
                    .iter()
                    .fold(at(sid), |sum, p| sum.wrapping_add(at(p)))
            }
            Node::MemoryIndex => self.memory.load(Ordering::Acquire),
            Node::RootAudit | Node::History(None, _) => self.root.load(Ordering::Acquire),
            _ => 0,
        }
    }

    /// The settings changed: each session's ancestors are read from them again.
    fn forget_parents(&self) {
        self.parents.lock().clear();
    }

    fn advance(&self, a: &Affected) {
        match a {
            Affected::Session(sid) => {
                *self.sessions.lock().entry(sid.clone()).or_default() += 1;
            }
            Affected::Memory => {
                self.memory.fetch_add(1, Ordering::AcqRel);
            }
            Affected::Root => {}
        }
        self.root.fetch_add(1, Ordering::AcqRel);
    }
}

/// The fingerprints of a node's inputs, taken by one `stat` pass: for a session's files,
/// each part of the session's inputs once, combined per file.
struct Fingerprints {
    /// When they were taken: the number of the `stat` pass (later passes, higher numbers).
    taken: u64,
    /// Transcript and states (the session's and its ancestors').
    base: Part,
    subagents: Part,
    archives: Part,
    /// Whether the session looks live, and until when it does.
    live: (bool, Option<Instant>),
    /// The session's settings (see `computed/settings.rs`); of the root's files, all
    /// settings and a settings file's error.
    settings: u64,
    /// A settings file's error, which a session's `audit.txt` says (0: none).
    error: u64,
}

/// One part's fingerprint, newest mtime and permission bits.
#[derive(Debug, Clone, Copy)]
struct Part {
    fp: u64,
    mtime: SystemTime,
    perm: u16,
}

impl Part {
    fn of(inp: &Inputs) -> Part {
        let (fp, mtime, perm) = inp.finish();
        Part { fp, mtime, perm }
    }
}

/// A fingerprint's description of a file: fingerprint, newest mtime, mode, current until.
type Described = (u64, SystemTime, u16, Option<Instant>);

impl Fingerprints {
    /// What computed file `kind` of the session is made from.
    fn of_kind(&self, kind: ComputedKind) -> Described {
        let d = self.of_inputs(kind.inputs());
        if kind == ComputedKind::AUDIT {
            return self.with_error(d);
        }
        d
    }

    /// A file that says the settings file's error: `audit.txt` and the page.
    fn with_error(&self, d: Described) -> Described {
        if self.error == 0 {
            return d;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (d.0, self.error).hash(&mut h);
        (h.finish(), d.1, d.2, d.3)
    }

    /// What a file made from the transcript, the states and `more` is made from.
    fn of_inputs(&self, more: super::layout::DependsOn) -> Described {
        let mut parts = vec![self.base];
        if more.subagents {
            parts.push(self.subagents);
        }
        if more.archives {
            parts.push(self.archives);
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut mtime = UNIX_EPOCH;
        // Owner-readable always; group and others only when every part grants it.
        let mut perm = 0o444;
        for p in &parts {
            p.fp.hash(&mut h);
            mtime = mtime.max(p.mtime);
            perm &= p.perm;
        }
        self.settings.hash(&mut h);
        let mut until = None;
        if more.liveness {
            self.live.0.hash(&mut h);
            until = self.live.1;
        }
        (h.finish(), mtime, perm, until)
    }

    /// A raw range is made from the transcript and the session's own state only.
    fn of_raw(&self) -> Described {
        let fp = if self.settings == 0 {
            self.base.fp
        } else {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (self.base.fp, self.settings).hash(&mut h);
            h.finish()
        };
        (fp, self.base.mtime, self.base.perm, None)
    }

    fn of(&self, node: &Node) -> Described {
        match node {
            Node::Computed(_, kind) => self.of_kind(*kind),
            // The page shows the session's figures (`status.json`'s) and its audit's.
            Node::History(Some(_), super::node::HistoryFile::Page) => {
                self.with_error(self.of_inputs(super::layout::DependsOn {
                    subagents: true,
                    archives: true,
                    liveness: true,
                }))
            }
            // The replay reads the journal, in the archive root.
            Node::History(Some(_), _) => self.of_inputs(super::layout::DependsOn {
                archives: true,
                ..Default::default()
            }),
            _ => self.of_raw(),
        }
    }
}

/// The computations, what they made and their cache.
pub struct Computed {
    paths: RootPaths,
    /// The settings in effect (a change of the settings files replaces them).
    live: settings::Live,
    /// Bytes by node, with the computation that made them, beside the parsed transcripts
    /// and states they are made from.
    cache: Cache<Node, (Bytes, u64)>,
    /// The versions known, by node.
    known: Mutex<HashMap<Node, Known>>,
    gens: Generations,
    counters: Counters,
    /// The bytes the last computations for a lookup made (see [`RECENT`]).
    recent: Mutex<Recent>,
    /// A lock per session being made (see [`Computed::current`]).
    making: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Each session's findings when its `audit.txt` was last made, with the fingerprint of
    /// the inputs they were found in (see [`Computed::findings`]).
    found: Mutex<Found>,
    /// Where the mount is, for `archive_paths = mount`.
    mountpoint: Option<PathBuf>,
    /// Told of each version that is current until a time (see [`Computed::on_current_until`]).
    current_until: std::sync::OnceLock<CurrentUntil>,
    /// The computations counted when the heap was last given back (see
    /// [`Computed::give_back_heap`]).
    trimmed_at: AtomicU64,
    /// When the heap was last given back, in milliseconds since `started`.
    trimmed_ms: AtomicU64,
    /// Bytes let go since then.
    freed_since_trim: std::sync::atomic::AtomicUsize,
    /// Small files' bytes are kept with their descriptions (see [`Computed::keep_small`]).
    keep_small: std::sync::atomic::AtomicBool,
    /// When this was made: the mtime of files made of nothing.
    started: SystemTime,
    /// Sessions whose transcript is longer spool the lines of their files to disk (see
    /// [`Computed::spool_lines_from`]).
    spool_from: AtomicU64,
    /// What a session directory shows: the computed files a session computation makes.
    layout: Layout,
}

/// Told of computed file `Node`'s version, current until the time given.
pub type CurrentUntil = Box<dyn Fn(&Node, Instant) + Send + Sync>;

/// How long the bytes of a computation made for a lookup stay at hand, outside the budget: a
/// lookup needs only its file's size (its hold takes its bytes), but a reader of a directory
/// (`grep -r`, `cat *`) opens the session's other files next, which would otherwise make the
/// session again; a `stat`, `ls -l` or `du` keeps none of them past this.
pub const RECENT: Duration = Duration::from_secs(1);

/// The bytes of the last computations made for a lookup or ahead of a reader (see
/// [`Computed::ahead`]), each by node with the computation that made them, and until when
/// they are kept.
#[derive(Default)]
struct Recent {
    made: std::collections::VecDeque<(Instant, Vec<Made>)>,
}

/// A file a computation made: its node, bytes, and the computation.
type Made = (Node, Bytes, u64);

/// Computations whose bytes stay at hand a moment, at most: the one a reader is at and those
/// made ahead of it (see [`AHEAD`]), with room for a few others between.
const RECENT_KEPT: usize = 2 * AHEAD + 2;

/// The bytes at hand besides the last computation's, at most: files made one at a time of a
/// large session are each as large as its transcript.
pub const RECENT_BYTES: u64 = 16 << 20;

/// How many sessions after the one a reader of the whole tree (`grep -r`, `du`, `ls -lR`)
/// entered are made ahead of it, on other threads: it then finds them made.
pub const AHEAD: usize = 2;

/// How long the bytes made ahead of a reader stay at hand before it comes (a slow reader,
/// or one on a loaded machine, takes longer than [`RECENT`] over a session); once used, as
/// long as any others.
pub const AHEAD_KEPT: Duration = Duration::from_secs(10);

impl Recent {
    /// Drop what is over its time; the bytes let go.
    fn expire(&mut self) -> usize {
        let now = Instant::now();
        let mut freed = 0;
        self.made.retain(|(until, made)| {
            let keep = now < *until;
            if !keep {
                freed += resident(made) as usize;
            }
            keep
        });
        freed
    }

    /// Keep what a computation made for `life` (at least [`SPOOLED_LIFE`] when it is in a
    /// spool).
    fn push(&mut self, made: Vec<Made>, life: Duration) {
        self.expire();
        let life = if on_disk(&made) {
            life.max(SPOOLED_LIFE)
        } else {
            life
        };
        self.made.push_back((Instant::now() + life, made));
        loop {
            let disk = self.made.iter().filter(|(_, m)| on_disk(m)).count();
            let memory = self.made.len() - disk;
            let oldest = |spooled: bool| self.made.iter().position(|(_, m)| on_disk(m) == spooled);
            let drop = if memory > RECENT_KEPT {
                oldest(false)
            } else if disk > SPOOLED_KEPT {
                oldest(true)
            } else if self.made.len() > 1 && self.bytes() - self.newest_bytes() > RECENT_BYTES {
                Some(0)
            } else {
                None
            };
            match drop {
                Some(i) => {
                    self.made.remove(i);
                }
                None => break,
            }
        }
    }

    /// The bytes `made` made of `node`, if at hand; what is used stays at least [`RECENT`]
    /// from now.
    fn find(&mut self, node: &Node, made: u64) -> Option<Bytes> {
        self.expire();
        let soon = Instant::now() + RECENT;
        self.made.iter_mut().rev().find_map(|(until, m)| {
            let d = m
                .iter()
                .find(|(n, _, id)| n == node && *id == made)
                .map(|(_, d, _)| d.clone())?;
            *until = (*until).max(soon);
            Some(d)
        })
    }

    /// The resident bytes of the last computation.
    fn newest_bytes(&self) -> u64 {
        self.made.back().map_or(0, |(_, m)| resident(m))
    }

    /// The resident bytes of all.
    fn bytes(&self) -> u64 {
        self.made.iter().map(|(_, m)| resident(m)).sum()
    }
}

/// How long a large session's files, made in a spool, stay at hand after a lookup: `ls -l`
/// makes each of them to learn its size (several seconds for a 100,000-message session),
/// and the reads that follow it would make each again (each with its computation's
/// transient memory, on top of what the others keep).
pub const SPOOLED_LIFE: Duration = Duration::from_secs(10);

/// Computations whose files are in spools kept at hand at most (besides [`RECENT_KEPT`]
/// others): they cost disk, not memory, and a session has about ten files.
const SPOOLED_KEPT: usize = 12;

/// The bytes of `made` in memory.
fn resident(made: &[Made]) -> u64 {
    made.iter().map(|(_, d, _)| d.resident_len()).sum()
}

/// Whether `made` is (almost) all in spools.
fn on_disk(made: &[Made]) -> bool {
    !made.is_empty()
        && made
            .iter()
            .all(|(_, d, _)| d.resident_len().saturating_mul(8) <= d.len())
}

/// Sessions' findings kept for the root's `audit.txt`, and about how many bytes they take.
#[derive(Default)]
struct Found {
    by_session: HashMap<String, (u64, Arc<crate::audit::Audit>)>,
    bytes: usize,
}

/// The findings kept for the root's `audit.txt` take this much memory at most: past it, a
/// session's findings are found again when the root's audit is made.
pub const FOUND_KEPT: usize = 4 << 20;

/// About how much memory findings take.
fn findings_bytes(a: &crate::audit::Audit) -> usize {
    a.findings
        .iter()
        .map(|f| 64 + f.path.len() + f.message.len())
        .sum::<usize>()
        + 64
}

/// How long a version of a history file (`.history/`) is served without a look at its inputs.
pub const HISTORY_FRESH: chrono::TimeDelta = chrono::TimeDelta::seconds(1);

/// Sessions whose transcript is at most this long have all their computed files made in one
/// computation (one refresh of the parsed transcript, one pipeline run): a listing or a
/// `grep -r` asks for every one of them. Longer ones make only the file asked for: their
/// files are large, and memory is held by each until it is served.
pub const ALL_AT_ONCE: u64 = 4 << 20;

impl Computed {
    pub fn new(paths: RootPaths, cfg: Config) -> Computed {
        let budget = cfg.cache_bytes();
        Computed {
            paths,
            live: settings::Live::new(cfg),
            cache: {
                let cache = Cache::new(budget);
                cache.store_cold_from(ALL_AT_ONCE);
                cache
            },
            known: Mutex::new(HashMap::new()),
            gens: Generations::default(),
            counters: Counters::default(),
            recent: Mutex::new(Recent::default()),
            making: Mutex::new(HashMap::new()),
            found: Mutex::new(Found::default()),
            mountpoint: None,
            current_until: std::sync::OnceLock::new(),
            keep_small: std::sync::atomic::AtomicBool::new(false),
            trimmed_at: AtomicU64::new(0),
            trimmed_ms: AtomicU64::new(0),
            freed_since_trim: std::sync::atomic::AtomicUsize::new(0),
            started: SystemTime::now(),
            spool_from: AtomicU64::new(ALL_AT_ONCE),
            layout: Layout::default(),
        }
    }

    /// Spool the lines of `view.jsonl` and `materialized.jsonl` of sessions whose
    /// transcript is longer than `bytes` to unlinked files in the temporary directory
    /// (by default those made one file at a time, [`ALL_AT_ONCE`]): the lines kept for the
    /// next version after an append, and the version served, are then not resident.
    pub fn spool_lines_from(&self, bytes: u64) {
        self.spool_from.store(bytes, Ordering::Relaxed);
        // Their records' cold bytes too (thinking signatures, unknown record fields).
        self.cache.store_cold_from(bytes);
    }

    /// The settings in effect.
    pub fn cfg(&self) -> Arc<Config> {
        self.live.cfg()
    }

    /// Compute with `new` from now on: the sessions of the root whose files it changes (their
    /// files are made again when next asked for).
    pub fn replace_settings(&self, new: Config) -> Vec<String> {
        let sessions = self.sessions_now();
        let changed = self.live.replace(new, &sessions);
        self.gens.forget_parents();
        changed
    }

    /// Keep the settings in effect, and say `error` in every `audit.txt`: the sessions whose
    /// `audit.txt` changes.
    pub fn settings_failed(&self, error: SettingsError) -> Vec<String> {
        let sessions = self.sessions_now();
        self.live.failed(error, &sessions)
    }

    /// The error of a settings file the mount could not use, kept while it lasts.
    pub fn settings_error(&self) -> Option<SettingsError> {
        self.live.error()
    }

    fn sessions_now(&self) -> Vec<String> {
        root::discover(&self.paths).map_or_else(|_| Vec::new(), |d| d.sessions)
    }

    /// Name archives inside the mount at `mnt` for sessions whose `archive_paths` is `mount`.
    pub fn set_mountpoint(&mut self, mnt: &Path) {
        self.mountpoint = Some(mnt.to_path_buf());
    }

    /// Keep the bytes of small files ([`SMALL_KEPT`]) with their descriptions: when the
    /// kernel opens files itself, the version a lookup told it of must be readable when its
    /// first read comes, even if the content moved on meanwhile (no open comes between).
    pub fn keep_small(&self) {
        self.keep_small.store(true, Ordering::Relaxed);
    }

    /// Have `f` told of each version current until a time (a session's files that depend on
    /// whether it looks live), once per version.
    pub fn on_current_until(&self, f: CurrentUntil) {
        let _ = self.current_until.set(f);
    }

    fn tell_until(&self, node: &Node, until: Option<Instant>) {
        if let (Some(at), Some(f)) = (until, self.current_until.get()) {
            f(node, at);
        }
    }

    /// Let the cache's budget bound the whole process's resident memory (a mount).
    /// Its budget is the mount's (see [`Config::mount_cache_bytes`]).
    pub fn bound_resident(&mut self) {
        self.cache.bound_resident(self.cfg().mount_cache_bytes());
        // Sessions made one file at a time are costly to parse again; the others are not,
        // unless they look live (by the root's `live_seconds`).
        let live = self.cfg().noa.live_seconds;
        self.cache
            .keep_quick_parses_while_live(ALL_AT_ONCE, Duration::from_secs(live));
    }

    /// The watcher reported (or a ctl command made) a change of what `a` names: the versions
    /// known of its files are checked against the disk again before they are used.
    /// `false` when a session's inputs turn out unchanged for every version known of its
    /// files (an event that changed nothing they are made from: an access time, an
    /// attribute of a file no fingerprint covers): those versions stay current, and the
    /// kernel's caches of them need not be dropped.
    pub fn changed(&self, a: &Affected) -> bool {
        if let Affected::Session(sid) = a {
            if self.session_unchanged(sid) {
                self.gens.advance(&Affected::Root);
                return false;
            }
        }
        self.gens.advance(a);
        true
    }

    /// Whether every version known of session `sid`'s files is made from its inputs as they
    /// are now (one `stat` pass); `false` when none is known.
    fn session_unchanged(&self, sid: &str) -> bool {
        let mine: Vec<(Node, u64)> = self
            .known
            .lock()
            .iter()
            .filter(|(n, _)| {
                matches!(
                    n,
                    Node::Computed(..) | Node::Raw(..) | Node::History(Some(_), _)
                ) && n.session_of() == Some(sid)
            })
            .map(|(n, k)| (n.clone(), k.c.fp))
            .collect();
        let Some((first, _)) = mine.first() else {
            return false;
        };
        // Raw ranges' fingerprints are a part of the session files' (the transcript and its
        // own state): one pass over a session file's inputs gives both.
        let probe = match first {
            Node::Raw(s, _, _) => Node::Computed(s.clone(), ComputedKind::VIEW),
            n => n.clone(),
        };
        let fps = self.fingerprints(&probe);
        let raw = fps.of_raw().0;
        mine.iter().all(|(n, fp)| match n {
            Node::Raw(..) => *fp == raw,
            n => fps.of(n).0 == *fp,
        })
    }

    /// The fingerprints of the inputs of `node` (for a session's file, of all the session's
    /// inputs at once).
    fn fingerprints(&self, node: &Node) -> Fingerprints {
        let mut fps = self.fingerprints_of_inputs(node);
        // Made of nothing yet (a root mounted with --allow-empty): as of the mount's start,
        // not 1970.
        if fps.base.mtime == UNIX_EPOCH {
            fps.base.mtime = self.started;
        }
        fps
    }

    fn fingerprints_of_inputs(&self, node: &Node) -> Fingerprints {
        let taken = self.counters.input_checks.fetch_add(1, Ordering::Relaxed) + 1;
        let p = &self.paths;
        let part = |f: &dyn Fn(&mut Inputs)| {
            let mut inp = Inputs::default();
            f(&mut inp);
            Part::of(&inp)
        };
        let empty = part(&|_| {});
        match node {
            Node::Computed(sid, _) | Node::Raw(sid, _, _) | Node::History(Some(sid), _) => {
                let raw = matches!(node, Node::Raw(..));
                let base = part(&|inp| {
                    inp.file(&p.transcript_path(sid));
                    inp.file(&p.state_path(sid));
                    if raw {
                        return;
                    }
                    // A fork's view comes from its ancestors' states while it has no blocks.
                    for parent in self.gens.parents(&self.cfg(), sid).iter() {
                        if root::valid_session_name(std::ffi::OsStr::new(parent)).is_ok() {
                            inp.file(&p.state_path(parent));
                        }
                    }
                });
                let settings = self.live.stamp(sid);
                if raw {
                    return Fingerprints {
                        taken,
                        base,
                        subagents: empty,
                        archives: empty,
                        live: (false, None),
                        settings,
                        error: 0,
                    };
                }
                let cfg = self.cfg().for_session(sid);
                let now = chrono::Utc::now();
                let idle = crate::store::ctl::idle_seconds(p, sid, now);
                let live = match idle {
                    Some(i) if i < cfg.live_seconds => (
                        true,
                        Some(Instant::now() + Duration::from_secs(cfg.live_seconds - i)),
                    ),
                    _ => (false, None),
                };
                Fingerprints {
                    taken,
                    base,
                    subagents: part(&|inp| inp.tree(&p.subagents_dir(sid), 1)),
                    archives: part(&|inp| inp.tree(&p.archive_root(sid), 2)),
                    live,
                    settings,
                    error: self.live.error_fp(),
                }
            }
            Node::MemoryIndex => Fingerprints {
                taken,
                base: part(&|inp| inp.tree(&p.memory, 1)),
                subagents: empty,
                archives: empty,
                live: (false, None),
                settings: 0,
                error: 0,
            },
            _ => Fingerprints {
                taken,
                base: part(&|inp| {
                    inp.tree(&p.transcripts, 3);
                    inp.tree(&p.archives, 3);
                    inp.tree(&p.memory, 1);
                }),
                subagents: empty,
                archives: empty,
                live: (false, None),
                settings: self.live.whole(),
                error: 0,
            },
        }
    }

    /// The version known of `node` when it is current for sure without asking the disk.
    fn known_current(&self, node: &Node, gen: u64) -> Option<Rendered> {
        let k = self.known.lock();
        let k = k.get(node)?;
        let fresh = k.gen == Some(gen) && k.until.is_none_or(|u| Instant::now() < u);
        fresh.then(|| k.c.clone())
    }

    /// The version of `node` known current without a look at its inputs (they are watched and
    /// no change of them was reported since it was made), described; `None` when finding out
    /// would take that look.
    pub fn known_now(&self, node: &Node) -> Option<Rendered> {
        self.known_current(node, self.gens.of(&self.cfg(), node))
    }

    /// The current version of computed file `node`, described, with its bytes as `want`
    /// asks. `covered`: the watcher reports every change of its inputs (asked before this
    /// call), so while its generation stays, the version known is current.
    pub fn current(&self, node: &Node, covered: bool, want: Want) -> Result<Rendered, FsError> {
        // Taken before the inputs are looked at: a change reported from now on makes
        // whatever this finds out of date.
        let gen = self.gens.of(&self.cfg(), node);
        if covered {
            if let Some(c) = self.known_current(node, gen) {
                return self.with_bytes(node, c, want);
            }
        }
        // A history file replays its session: of a live one, a version made within
        // [`HISTORY_FRESH`] is served as it is (else every call on the file would replay it
        // again, and the file would move on under its reader at every append). Not one the
        // watcher covers: a change was reported since it was made, and the kernel, told to
        // drop it, would keep the old version for long.
        if !covered && matches!(node, Node::History(..)) {
            let recent = self.known.lock().get(node).and_then(|k| {
                let age = Utc::now().signed_duration_since(k.made_at);
                (age >= chrono::TimeDelta::zero() && age < HISTORY_FRESH).then(|| k.c.clone())
            });
            if let Some(c) = recent {
                return self.with_bytes(node, c, want);
            }
        }
        let fps = self.fingerprints(node);
        let (fp, mtime, perm, until) = fps.of(node);
        let known = {
            let mut k = self.known.lock();
            match k.get_mut(node) {
                Some(k) if k.c.fp == fp => {
                    k.taken = k.taken.max(fps.taken);
                    k.gen = covered.then_some(gen);
                    if until != k.until {
                        self.tell_until(node, until);
                    }
                    k.until = until;
                    // The mode is always fresh (a chmod changes the fingerprint too, by the
                    // ctime).
                    k.c.perm = perm;
                    k.c.mtime = mtime;
                    Some(k.c.clone())
                }
                _ => None,
            }
        };
        if let Some(c) = known {
            return self.with_bytes(node, c, want);
        }
        let sid = match node {
            Node::Computed(sid, _) | Node::Raw(sid, _, _) => sid,
            _ => return self.make(node, &fps, covered.then_some(gen), want, Utc::now()),
        };
        // One computation of a session at a time: a reader that reaches a session being made
        // ahead of it (or by another reader) waits for it and takes what it made.
        let turn = self.turn_of(sid);
        let made = {
            let _mine = turn.lock();
            let meanwhile = self
                .known
                .lock()
                .get(node)
                .filter(|k| k.c.fp == fp)
                .map(|k| k.c.clone());
            match meanwhile {
                Some(c) => self.with_bytes(node, c, want),
                None => self.make(node, &fps, covered.then_some(gen), want, Utc::now()),
            }
        };
        let mut turns = self.making.lock();
        if Arc::strong_count(&turn) == 2 {
            turns.remove(sid);
        }
        made
    }

    /// The lock a computation of session `sid` holds.
    fn turn_of(&self, sid: &str) -> Arc<Mutex<()>> {
        self.making
            .lock()
            .entry(sid.to_string())
            .or_default()
            .clone()
    }

    /// `c` with its bytes as `want` asks: kept ones, or made again (from the inputs as they
    /// are now: when they changed meanwhile, that is the newer version, described as such).
    fn with_bytes(&self, node: &Node, mut c: Rendered, want: Want) -> Result<Rendered, FsError> {
        if want == Want::Size {
            return Ok(c);
        }
        c.data = self
            .cache
            .content(node, c.fp)
            .filter(|(_, made)| *made == c.made)
            .map(|(d, _)| d);
        if c.data.is_none() {
            c.data = self.recent(node, c.made).or_else(|| {
                self.known
                    .lock()
                    .get(node)
                    .filter(|k| k.c.fp == c.fp && k.c.made == c.made)
                    .and_then(|k| k.small.clone())
            });
            if let (Some(d), Want::Bytes) = (&c.data, want) {
                // Read now: kept within the budget from here on.
                self.cache
                    .keep_content(node.clone(), (d.clone(), c.made), c.fp, d.len() as usize);
                self.cache.release_memory();
            }
        }
        if c.data.is_some() || want != Want::Bytes {
            return Ok(c);
        }
        let gen = self.gens.of(&self.cfg(), node);
        let fps = self.fingerprints(node);
        // Made under the generation taken before, which stays the mark of what is known
        // current; as of the time `c` was made when its inputs are still the same.
        let (covered, made_at) = match self.known.lock().get(node) {
            Some(k) => (k.gen.map(|_| gen), k.made_at),
            None => (None, Utc::now()),
        };
        let as_of = if fps.of(node).0 == c.fp {
            made_at
        } else {
            Utc::now()
        };
        self.make(node, &fps, covered, want, as_of)
    }

    /// Make `node` (and, for a session's file, the session's other files with it when the
    /// session is small: see [`ALL_AT_ONCE`]), remember what was made, keep the bytes when
    /// they were wanted (see [`Want`]), and return `node`'s version with its bytes. What the
    /// files say of time is as of `now`.
    fn make(
        &self,
        node: &Node,
        fps: &Fingerprints,
        gen: Option<u64>,
        want: Want,
        now: DateTime<Utc>,
    ) -> Result<Rendered, FsError> {
        let id = self.counters.computations.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::debug!("computation {id}: {node:?} ({want:?})");
        let made = match node {
            Node::Computed(sid, _) | Node::Raw(sid, _, _) => {
                let audit_fp = fps.of_kind(ComputedKind::AUDIT).0;
                self.make_session(sid, node, now, audit_fp)
            }
            Node::History(Some(sid), f) => self
                .make_history(sid, *f, now)
                .map(|b| vec![(node.clone(), b)]),
            _ => self.make_one(node).map(|b| vec![(node.clone(), b)]),
        };
        self.cache.release_memory();
        let made = made?;
        self.counters
            .renders
            .fetch_add(made.len() as u64, Ordering::Relaxed);
        let mut out = None;
        let mut recent = Vec::new();
        for (n, data) in made {
            let (fp, mtime, perm, until) = fps.of(&n);
            let size = data.len();
            let c = Rendered {
                digest: (size <= SAME_BYTES).then(|| digest(&data, size)).flatten(),
                data: None,
                size,
                mtime,
                perm,
                fp,
                made: id,
            };
            let mut known = self.known.lock();
            if known.get(&n).is_none_or(|k| k.taken <= fps.taken) {
                if known.get(&n).is_none_or(|k| k.until != until) {
                    self.tell_until(&n, until);
                }
                let changed_at = match known.get(&n) {
                    Some(k) if k.c.fp != fp => Some(Instant::now()),
                    Some(k) => k.changed_at,
                    None => None,
                };
                let small = (self.keep_small.load(Ordering::Relaxed)
                    && size <= SMALL_KEPT
                    && changed_at.is_some_and(|at| at.elapsed() < CHANGING))
                .then(|| data.clone());
                known.insert(
                    n.clone(),
                    Known {
                        c: c.clone(),
                        gen,
                        until,
                        made_at: now,
                        taken: fps.taken,
                        changed_at,
                        small,
                    },
                );
            }
            drop(known);
            match want {
                Want::Bytes => {
                    self.cache
                        .keep_content(n.clone(), (data.clone(), id), fp, size as usize);
                }
                Want::Pin | Want::Ahead => recent.push((n.clone(), data.clone(), id)),
                _ => {}
            }
            if n == *node {
                out = Some(Rendered {
                    data: Some(data),
                    ..c
                });
            }
        }
        match want {
            Want::Pin => self.recent.lock().push(recent, RECENT),
            Want::Ahead => self.recent.lock().push(recent, AHEAD_KEPT),
            _ => {}
        }
        self.cache.release_memory();
        out.ok_or(FsError::NotFound)
    }

    /// Keep session `sid`'s findings, found in inputs of fingerprint `fp` (that of its
    /// `audit.txt`), for the root's `audit.txt`.
    pub(super) fn keep_findings(&self, sid: &str, fp: u64, found: crate::audit::Audit) {
        let size = findings_bytes(&found);
        let mut f = self.found.lock();
        if let Some((_, old)) = f.by_session.remove(sid) {
            f.bytes -= findings_bytes(&old);
        }
        if f.bytes + size <= FOUND_KEPT {
            f.bytes += size;
            f.by_session.insert(sid.to_string(), (fp, Arc::new(found)));
        }
    }

    /// Session `sid`'s findings when they were found in its inputs as they are now (one
    /// `stat` pass over them); `None` when not kept or the inputs changed since.
    pub(super) fn findings(&self, sid: &str) -> Option<crate::audit::Audit> {
        let kept = self.found.lock().by_session.get(sid).cloned()?;
        let node = Node::Computed(sid.to_string(), ComputedKind::AUDIT);
        let fp = self.fingerprints(&node).of_kind(ComputedKind::AUDIT).0;
        (fp == kept.0).then(|| (*kept.1).clone())
    }

    /// The bytes computation `made` made of `node` for a lookup (or ahead of a reader) a
    /// moment ago, if at hand.
    pub(super) fn recent(&self, node: &Node, made: u64) -> Option<Bytes> {
        self.recent.lock().find(node, made)
    }

    /// Let go of the bytes of the computations for a lookup once [`RECENT`] is over (called
    /// every half second while mounted); the bytes let go.
    /// The parses of sessions at rest not used for [`RECENT`] go too.
    pub fn let_go_recent(&self) -> usize {
        self.cache.let_go_brief(RECENT) + self.recent.lock().expire()
    }

    /// Give the heap's free memory back to the system when bytes were let go (`freed`) or
    /// computations ran since it was last given back (what they parsed and did not keep is
    /// free now), at most every [`GIVE_BACK_EVERY`] (pages given back are faulted in again
    /// by the next computations: a cold `grep -r` computes all the while). Called every half
    /// second while mounted.
    pub fn give_back_heap(&self, freed: usize) {
        self.freed_since_trim.fetch_add(freed, Ordering::Relaxed);
        let now = self.started.elapsed().map_or(0, |d| d.as_millis() as u64);
        let last = self.trimmed_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < GIVE_BACK_EVERY.as_millis() as u64 {
            return;
        }
        let made = self.counters.computations.load(Ordering::Relaxed);
        let before = self.trimmed_at.swap(made, Ordering::Relaxed);
        if self.freed_since_trim.swap(0, Ordering::Relaxed) > 0 || made != before {
            self.trimmed_ms.store(now, Ordering::Relaxed);
            self.cache.give_back_now();
        }
    }

    /// The content of `node` from the inputs as they are now (for tests and tools that
    /// want the bytes).
    pub fn content(&self, node: &Node) -> Result<Rendered, FsError> {
        self.current(node, false, Want::Bytes)
    }

    /// The node's version is known no more (it is gone).
    pub fn forget(&self, node: &Node) {
        self.known.lock().remove(node);
    }

    /// Bytes held by the cache of computed contents.
    /// Whether `node`'s version replaced one of other inputs within `within` (its inputs
    /// change now and then: a session whose runtime is at work).
    pub fn changed_lately(&self, node: &Node, within: Duration) -> bool {
        self.known
            .lock()
            .get(node)
            .and_then(|k| k.changed_at)
            .is_some_and(|at| at.elapsed() < within)
    }

    pub fn cached_bytes(&self) -> usize {
        self.cache.content_bytes()
    }

    /// Bytes of a computation for a lookup held a moment outside the budget (see [`RECENT`]).
    pub fn recent_bytes(&self) -> u64 {
        self.recent.lock().bytes()
    }

    /// Bytes counted against the budget: computed contents, parsed transcripts and states.
    pub fn budget_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// The budget, in bytes.
    pub fn budget(&self) -> usize {
        self.cache.budget()
    }

    /// Parsed transcripts kept.
    pub fn kept_transcripts(&self) -> usize {
        self.cache.kept_transcripts()
    }

    /// What the counters say now.
    /// A read reached the mount for a version whose bytes were not at hand.
    pub fn count_refill(&self) {
        self.counters.refills.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> Counts {
        let c = &self.counters;
        Counts {
            computations: c.computations.load(Ordering::Relaxed),
            renders: c.renders.load(Ordering::Relaxed),
            input_checks: c.input_checks.load(Ordering::Relaxed),
            refills: c.refills.load(Ordering::Relaxed),
        }
    }

    /// Versions known (their descriptions, without bytes).
    pub fn known_versions(&self) -> usize {
        self.known.lock().len()
    }

    /// The parsed transcript of a session, refreshed.
    fn transcript(&self, sid: &str) -> Result<Arc<Mutex<TranscriptFile>>, FsError> {
        self.cache
            .transcript(&self.paths, sid)
            .map_err(FsError::from)
    }

    /// The parsed `state.json` of a session.
    fn state(&self, sid: &str) -> Arc<StateLoad> {
        self.cache.state(&self.paths, sid)
    }
}

/// Time of a `stat` pair.
pub fn systime(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec.clamp(0, 999_999_999) as u32)
    } else {
        UNIX_EPOCH
    }
}

#[cfg(test)]
mod tests;
