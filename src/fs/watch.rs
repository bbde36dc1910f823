//! Freshness (SPEC 5): which kernel caches a change in a backing directory makes stale, and an
//! inotify watcher that reports them.
//!
//! [`plan`] is the pure decision: one inotify event in one watched directory gives the nodes
//! whose cached attributes (and pages) and the directory entries the kernel must drop, and the
//! new directories to watch. [`Watcher`] owns the inotify descriptor: the three backing
//! directories are watched from the start; a session's own directories (`transcripts/<sid>/`,
//! its `subagents/`, the archive root and its `tier<N>/`) once the kernel has looked the session
//! up. The caller turns nodes into inode numbers and notifies the kernel; it never needs to hold
//! a lock of this module while doing so.
//!
//! [`Watcher::covers`] tells whether every change that can make a node's cached attributes,
//! entries, listing or pages stale is reported: only then may the kernel keep them for long.
//! A directory that appears is watched first and read second, and what is already in it is
//! reported as if it had just been created, so that nothing written before the watch existed is
//! missed. Not covered (and so kept only for `--ttl-ms`): everything while inotify is unavailable
//! or after a watch could not be added (the watch limit), directories below `memory/`,
//! `subagents/` and `tier<N>/`, and a session until the kernel has looked it up. Changes that
//! inotify does not see (writes through another hard link, through a shared mapping) show
//! after the kernel drops its caches.

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::layout;
use super::node::{Base, HistoryFile, Node};
use crate::store::root::{valid_session_name, RootPaths};
use crate::store::session::is_tier_dir;

/// A watched backing directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dir {
    /// The transcripts directory (`<sid>.jsonl`, `<sid>/`).
    Transcripts,
    /// The memory directory.
    Memory,
    /// The archive base directory (`<sid>/`).
    Archives,
    /// `transcripts/<sid>/` (holds `subagents/`).
    SessionTranscripts(String),
    /// `transcripts/<sid>/subagents/`.
    Subagents(String),
    /// The archive root `noa/<sid>/`.
    ArchiveRoot(String),
    /// `noa/<sid>/tier<N>/`.
    Tier(String, String),
    /// The directory holding a backing directory that is not there (a root where the runtime
    /// has not compressed yet has no `noa/`): watched for it to appear, so that what is
    /// served meanwhile is still covered (see [`Watcher::covers`]).
    Above(PathBuf),
}

impl Dir {
    /// Where the directory is on disk.
    pub fn path(&self, paths: &RootPaths) -> PathBuf {
        match self {
            Dir::Transcripts => paths.transcripts.clone(),
            Dir::Memory => paths.memory.clone(),
            Dir::Archives => paths.archives.clone(),
            Dir::SessionTranscripts(sid) => paths.transcripts.join(sid),
            Dir::Subagents(sid) => paths.subagents_dir(sid),
            Dir::ArchiveRoot(sid) => paths.archive_root(sid),
            Dir::Tier(sid, t) => paths.archive_root(sid).join(t),
            Dir::Above(path) => path.clone(),
        }
    }

    /// A backing directory (one of the three the mount serves from).
    fn is_backing(&self) -> bool {
        matches!(self, Dir::Transcripts | Dir::Memory | Dir::Archives)
    }
}

/// A kernel cache to drop.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Inval {
    /// The attributes of a node; with `data`, its cached pages too.
    Inode { node: Node, data: bool },
    /// The entry `name` of the directory `parent` (a name appeared or disappeared).
    Entry { parent: Node, name: OsString },
    /// The computed files whose inputs include what changed, with their pages (and the entries
    /// of `raw/` ranges, which come and go with the session's files). The root's `audit.txt`
    /// reads everything: it is in every set.
    Computed(Affected),
}

/// Which computed files an input belongs to (each set includes the root's `audit.txt`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Affected {
    /// A session's `view.jsonl`, `view.md`, `audit.txt`, `status.json` and `raw/` ranges.
    Session(String),
    /// `memory/MEMORY.md`.
    Memory,
    /// Only the root's `audit.txt` (a name in a backing directory that is no session).
    Root,
}

/// What one event means.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    pub invals: Vec<Inval>,
    /// Directories that appeared and belong to a watched session.
    pub watch: Vec<Dir>,
}

const NAME_CHANGED: u32 =
    libc::IN_CREATE | libc::IN_DELETE | libc::IN_MOVED_FROM | libc::IN_MOVED_TO;
/// The file's bytes changed or it was replaced: drop its pages, not just its attributes (a
/// file served from the page cache may change in place without changing size).
const REPLACED: u32 = libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO | libc::IN_CREATE;
const APPEARED: u32 = libc::IN_CREATE | libc::IN_MOVED_TO;

/// The events the watcher asks for.
pub const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MODIFY
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_ONLYDIR;

/// The kernel caches that the event `mask` on `name` in the watched `dir` makes stale.
/// `watched` tells whether a session's directories are watched (so a directory of it that
/// appears is watched too).
///
/// A directory whose names changed is invalidated with its pages: they hold its cached
/// listing. An empty `name` is an event of the watched directory itself.
pub fn plan(dir: &Dir, name: &OsStr, mask: u32, watched: &dyn Fn(&str) -> bool) -> Plan {
    let mut p = Plan::default();
    // What happens beside a missing backing directory is the watcher's to read (it alone
    // knows which names are backing directories): see `Watcher::above_event`.
    if let Dir::Above(_) = dir {
        return p;
    }
    let changed = mask & NAME_CHANGED != 0;
    let data = mask & REPLACED != 0;
    let new_dir = mask & APPEARED != 0 && mask & libc::IN_ISDIR != 0;
    let inode = |node: Node, data: bool| Inval::Inode { node, data };
    let entry = |parent: Node, name: &OsStr| Inval::Entry {
        parent,
        name: name.to_os_string(),
    };
    p.invals.push(Inval::Computed(computed_of(dir, name)));
    if name.is_empty() {
        if let Some(node) = dir_node(dir) {
            p.invals.push(inode(node, false));
        }
        return p;
    }
    let Some(s) = name.to_str() else {
        // No node of the mount has a name that is not UTF-8 except real files under memory/
        // and archive directories; those are handled below by their byte names.
        if let Dir::Memory = dir {
            memory_event(&mut p, name, changed, data);
        }
        return p;
    };
    match dir {
        Dir::Transcripts => {
            if let Some(sid) = s.strip_suffix(".jsonl").filter(|sid| is_session(sid)) {
                p.invals
                    .push(inode(Node::Real(Base::Transcripts, PathBuf::from(s)), data));
                p.invals
                    .push(inode(Node::Session(sid.to_string()), changed));
                if changed {
                    p.invals.push(entry(Node::Sessions, OsStr::new(sid)));
                    p.invals.push(inode(Node::Sessions, true));
                    p.invals.push(entry(
                        Node::Session(sid.to_string()),
                        OsStr::new(layout::TRANSCRIPT),
                    ));
                }
            } else if is_session(s) && new_dir && watched(s) {
                p.watch.push(Dir::SessionTranscripts(s.to_string()));
            }
        }
        Dir::SessionTranscripts(sid) => {
            if s == layout::SUBAGENTS {
                let rel = PathBuf::from(sid).join(s);
                p.invals
                    .push(inode(Node::Real(Base::Transcripts, rel), false));
                if changed {
                    p.invals.push(entry(Node::Session(sid.clone()), name));
                    p.invals.push(inode(Node::Session(sid.clone()), true));
                }
                if new_dir {
                    p.watch.push(Dir::Subagents(sid.clone()));
                }
            }
        }
        Dir::Subagents(sid) => {
            let dir_rel = PathBuf::from(sid).join(layout::SUBAGENTS);
            p.invals.push(inode(
                Node::Real(Base::Transcripts, dir_rel.join(name)),
                data,
            ));
            if changed {
                let parent = Node::Real(Base::Transcripts, dir_rel);
                p.invals.push(entry(parent.clone(), name));
                p.invals.push(inode(parent, true));
            }
        }
        Dir::Memory => memory_event(&mut p, name, changed, data),
        Dir::Archives => {
            if is_session(s) && mask & libc::IN_ISDIR != 0 {
                p.invals.push(inode(Node::Session(s.to_string()), changed));
                if changed {
                    p.invals.push(entry(Node::Sessions, name));
                    p.invals.push(inode(Node::Sessions, true));
                }
                if new_dir && watched(s) {
                    p.watch.push(Dir::ArchiveRoot(s.to_string()));
                }
            }
        }
        Dir::ArchiveRoot(sid) => {
            // The archive root's real files (its other names are tiers or debris).
            let is_file = layout::shown_in_session_dir(Base::Archives, s).is_some();
            let is_tier = is_tier_dir(s);
            if is_file || is_tier {
                let rel = PathBuf::from(sid).join(s);
                p.invals
                    .push(inode(Node::Real(Base::Archives, rel), data && is_file));
                if changed {
                    p.invals.push(entry(Node::Session(sid.clone()), name));
                }
                if is_tier && new_dir {
                    p.watch.push(Dir::Tier(sid.clone(), s.to_string()));
                }
            }
            if s == layout::STATE {
                // raw/ lists the block ranges of the state; its mtime is the state's.
                p.invals.push(inode(Node::RawDir(sid.clone()), true));
            }
            if changed || is_file || is_tier {
                // The session directory's mtime is the archive root's (any name changes it).
                p.invals.push(inode(
                    Node::Session(sid.clone()),
                    changed && (is_file || is_tier),
                ));
            }
        }
        Dir::Tier(sid, t) => {
            let dir_rel = PathBuf::from(sid).join(t);
            p.invals
                .push(inode(Node::Real(Base::Archives, dir_rel.join(name)), data));
            if changed {
                let parent = Node::Real(Base::Archives, dir_rel);
                p.invals.push(entry(parent.clone(), name));
                p.invals.push(inode(parent, true));
            }
        }
        Dir::Above(_) => {}
    }
    p
}

fn is_session(s: &str) -> bool {
    valid_session_name(OsStr::new(s)).is_ok()
}

/// The computed files that read `name` in `dir` (or `dir` itself, for an empty name).
fn computed_of(dir: &Dir, name: &OsStr) -> Affected {
    let session = |s: &str| Affected::Session(s.to_string());
    match dir {
        Dir::Memory => Affected::Memory,
        Dir::SessionTranscripts(sid)
        | Dir::Subagents(sid)
        | Dir::ArchiveRoot(sid)
        | Dir::Tier(sid, _) => session(sid),
        Dir::Transcripts => match name.to_str() {
            Some(s) => match s.strip_suffix(".jsonl").unwrap_or(s) {
                sid if is_session(sid) => session(sid),
                _ => Affected::Root,
            },
            None => Affected::Root,
        },
        Dir::Archives => match name.to_str() {
            Some(sid) if is_session(sid) => session(sid),
            _ => Affected::Root,
        },
        Dir::Above(_) => Affected::Root,
    }
}

/// The node whose attributes a watched directory's own attributes are.
fn dir_node(dir: &Dir) -> Option<Node> {
    match dir {
        Dir::Transcripts | Dir::Archives => Some(Node::Sessions),
        Dir::Memory => Some(Node::MemoryDir),
        Dir::SessionTranscripts(_) => None,
        Dir::Subagents(sid) => Some(Node::Real(
            Base::Transcripts,
            PathBuf::from(sid).join(layout::SUBAGENTS),
        )),
        Dir::ArchiveRoot(sid) => Some(Node::Session(sid.clone())),
        Dir::Tier(sid, t) => Some(Node::Real(Base::Archives, PathBuf::from(sid).join(t))),
        Dir::Above(_) => None,
    }
}

/// `memory/<name>`: a real file, except `MEMORY.md`, which the mount computes (TTL 0, direct
/// I/O: nothing of it is cached).
fn memory_event(p: &mut Plan, name: &OsStr, changed: bool, data: bool) {
    if name == "MEMORY.md" {
        return;
    }
    p.invals.push(Inval::Inode {
        node: Node::Real(Base::Memory, PathBuf::from(name)),
        data,
    });
    if changed {
        p.invals.push(Inval::Entry {
            parent: Node::MemoryDir,
            name: name.to_os_string(),
        });
        p.invals.push(Inval::Inode {
            node: Node::MemoryDir,
            data: true,
        });
    }
}

// ---- the inotify watcher ------------------------------------------------------------------

#[derive(Default)]
struct State {
    by_wd: HashMap<i32, Dir>,
    /// The directories watched, each with its current watch (a directory replaced by
    /// another of its name is watched anew before the old watch's end is read).
    dirs: HashMap<Dir, i32>,
    /// Sessions whose directories are watched.
    sessions: HashSet<String>,
    /// Backing directories that are not there, awaited through their parent's watch
    /// (`Dir::Above`): covered as long as that watch is.
    awaited: HashSet<Dir>,
    /// A watch could not be added (the watch limit, most often): nothing is covered any more
    /// (logged once; TTLs keep the mount correct).
    degraded: bool,
    /// Every session is watched, those that appear later too (the root's `audit.txt` reads
    /// them all): see [`Watcher::watch_all`].
    all: bool,
    /// Directories not watched because their filesystem is one where inotify misses changes
    /// (another machine's writes, a FUSE daemon's own), with the filesystem's name.
    blind: Vec<(std::path::PathBuf, &'static str)>,
}

/// The filesystem of `path` when it is one inotify cannot be trusted on: a network or cluster
/// filesystem (other machines' writes are not reported) or FUSE (changes its daemon makes
/// beneath it are not).
pub fn blind_filesystem(path: &std::path::Path) -> Option<&'static str> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: zeroed statfs is a valid out-parameter.
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and out-pointer for the call's duration.
    if unsafe { libc::statfs(c.as_ptr(), &mut sf) } < 0 {
        return None;
    }
    const BLIND: &[(i64, &str)] = &[
        (0x6573_5546, "FUSE"),
        (0x6969, "NFS"),
        (0x517B, "SMB"),
        (0xFF53_4D42, "CIFS"),
        (0xFE53_4D42, "SMB2"),
        (0x00C3_6400, "CephFS"),
        (0x0102_1997, "9P"),
        (0x5346_414F, "AFS"),
        (0x6B41_4653, "AFS"),
        (0x7375_7245, "Coda"),
        (0x7461_636F, "OCFS2"),
        (0x0116_1970, "GFS2"),
        (0x0BD0_0BD0, "Lustre"),
        (0x4750_4653, "GPFS"),
        (0x2003_0528, "OrangeFS"),
        (0x786F_4256, "vboxsf"),
    ];
    let t = sf.f_type as i64 & 0xFFFF_FFFF;
    BLIND.iter().find(|(m, _)| *m == t).map(|(_, n)| *n)
}

/// Whether no name at all is at `path` (not even a link whose target is missing: the link's
/// target appearing would be reported by no watch).
fn nothing_at(path: &Path) -> bool {
    matches!(
        std::fs::symlink_metadata(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound
    )
}

/// Most sessions [`Watcher::watch_all`] watches (each takes up to about four watches).
pub const WATCH_ALL_MAX: usize = 10_000;

/// An inotify watcher of the backing directories.
pub struct Watcher {
    inotify: OwnedFd,
    /// Written by [`Watcher::stop`] to end [`Watcher::run`].
    stop: OwnedFd,
    paths: RootPaths,
    state: Mutex<State>,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Watcher {
    /// A watcher of the three backing directories (those that exist).
    pub fn new(paths: &RootPaths) -> io::Result<Watcher> {
        // SAFETY: plain syscalls; the descriptors are owned below.
        let ino = cvt(unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) })?;
        // SAFETY: `ino` is a fresh descriptor we own.
        let inotify = unsafe { OwnedFd::from_raw_fd(ino) };
        // SAFETY: as above.
        let ev = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `ev` is a fresh descriptor we own.
        let stop = unsafe { OwnedFd::from_raw_fd(ev) };
        let w = Watcher {
            inotify,
            stop,
            paths: paths.clone(),
            state: Mutex::new(State::default()),
        };
        for d in [Dir::Transcripts, Dir::Memory, Dir::Archives] {
            w.add(d.clone());
            if !w.state.lock().dirs.contains_key(&d) {
                w.await_backing(d, &mut Vec::new());
            }
        }
        Ok(w)
    }

    /// Backing directory `d` is not watched (it is not there, or it went): watch its parent
    /// for it to appear. While that watch stands, `d` is covered: whatever appears in it
    /// is reported when it appears (`above_event`). A `d` found there after all is watched
    /// and read as one that appeared (`out` gets what that drops).
    fn await_backing(&self, d: Dir, out: &mut Vec<Inval>) {
        let path = d.path(&self.paths);
        let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
            return;
        };
        let above = Dir::Above(parent.to_path_buf());
        self.add(above.clone());
        if !self.state.lock().dirs.contains_key(&above) {
            return;
        }
        // It may have appeared before the parent's watch stood.
        self.add_new(d.clone(), out);
        let mut st = self.state.lock();
        if !st.dirs.contains_key(&d) && nothing_at(&path) {
            st.awaited.insert(d);
        }
    }

    /// An event in the parent `parent` of awaited or watched backing directories: one that
    /// appears (a directory, or a link to one) is watched and read; one that goes is awaited
    /// again once nothing is at its path. Anything else there is no input of the mount. True
    /// when a name that goes still had a watch: the watch stands on what the name no longer
    /// is (a directory moved away, a link's target), so the caller treats it as lost events.
    /// (A directory removed loses its watch before its parent reports the removal.)
    fn above_event(&self, parent: &Path, name: &OsStr, mask: u32, out: &mut Vec<Inval>) -> bool {
        if name.is_empty() {
            return false;
        }
        let path = parent.join(name);
        let mut lost = false;
        for d in [Dir::Transcripts, Dir::Memory, Dir::Archives] {
            if d.path(&self.paths) != path {
                continue;
            }
            out.push(Inval::Computed(Affected::Root));
            if let Some(node) = dir_node(&d) {
                out.push(Inval::Inode { node, data: true });
            }
            if mask & APPEARED != 0 {
                self.state.lock().awaited.remove(&d);
                self.add_new(d, out);
            } else if mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
                let mut st = self.state.lock();
                if st.dirs.contains_key(&d) {
                    lost = true;
                } else if nothing_at(&path) {
                    st.awaited.insert(d);
                }
            }
        }
        lost
    }

    /// Number of directories watched.
    pub fn watches(&self) -> usize {
        self.state.lock().by_wd.len()
    }

    /// Directories left unwatched because inotify is blind on their filesystem, with its
    /// name: their changes show after the attribute TTL (`--ttl-ms`).
    pub fn blind(&self) -> Vec<(std::path::PathBuf, &'static str)> {
        self.state.lock().blind.clone()
    }

    /// Watch a directory (missing directories are skipped silently; one on a filesystem
    /// where inotify is blind is left unwatched, so that what is in it is served with TTLs).
    fn add(&self, d: Dir) {
        let path = d.path(&self.paths);
        let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
            return;
        };
        if let Some(fs) = blind_filesystem(&path) {
            // Said of the backing directories (what is under them is on the same filesystem
            // but for a mount point, which this check finds too).
            if matches!(d, Dir::Transcripts | Dir::Memory | Dir::Archives) {
                self.state.lock().blind.push((path, fs));
            }
            return;
        }
        // SAFETY: valid descriptor and C string.
        let wd = unsafe { libc::inotify_add_watch(self.inotify.as_raw_fd(), c.as_ptr(), MASK) };
        let mut st = self.state.lock();
        if wd < 0 {
            let e = io::Error::last_os_error();
            // A directory that is not there: its parent's watch reports it when it appears.
            if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) {
                return;
            }
            if !st.degraded {
                st.degraded = true;
                if e.raw_os_error() == Some(libc::ENOSPC) {
                    tracing::warn!(
                        "inotify watch limit reached (fs.inotify.max_user_watches); \
                         further changes show after the attribute TTL"
                    );
                } else {
                    tracing::warn!(
                        "cannot watch {}: {e}; further changes show after the attribute TTL",
                        path.display()
                    );
                }
            }
            return;
        }
        // One directory reached by two ways (an archive base inside the transcripts
        // directory, say): the directory of the mount's own wins over the parent awaited.
        if let Some(old) = st.by_wd.get(&wd) {
            if *old != d && matches!(d, Dir::Above(_)) {
                return;
            }
        }
        if d.is_backing() {
            st.awaited.remove(&d);
        }
        if let Some(old) = st.by_wd.insert(wd, d.clone()) {
            if st.dirs.get(&old) == Some(&wd) {
                st.dirs.remove(&old);
            }
        }
        st.dirs.insert(d, wd);
    }

    /// Watch a directory that appeared, then report what is already in it as if each entry
    /// had just been created (it may have been filled before the watch existed).
    fn add_new(&self, d: Dir, out: &mut Vec<Inval>) {
        self.add(d.clone());
        for (name, is_dir) in super::real::entries(&d.path(&self.paths)) {
            let mask = libc::IN_CREATE | if is_dir { libc::IN_ISDIR } else { 0 };
            let p = plan(&d, &name, mask, &|s| self.watched(s));
            out.extend(p.invals);
            for w in p.watch {
                self.add_new(w, out);
            }
        }
    }

    /// Whether every change that can make the kernel's cache of `node` stale is reported: its
    /// attributes and entry; its pages for a file; its listing for a directory (`dir`: the
    /// node is one). A computed file is covered when every input of it is watched (a change
    /// of one is reported as `Inval::Computed`; an inode stands for one version of the
    /// file, see `fs/versions.rs`). `ctl` is covered
    /// with its session (its attributes never change; it is read with direct I/O). Ask before
    /// reading what the answer will be about.
    pub fn covers(&self, node: &Node, dir: bool) -> bool {
        let st = self.state.lock();
        if st.degraded {
            return false;
        }
        let has = |d: Dir| {
            st.dirs.contains_key(&d)
                || (d.is_backing()
                    && st.awaited.contains(&d)
                    && d.path(&self.paths)
                        .parent()
                        .is_some_and(|p| st.dirs.contains_key(&Dir::Above(p.to_path_buf()))))
        };
        let base = has(Dir::Transcripts) && has(Dir::Archives);
        let session = |sid: &str| base && st.sessions.contains(sid);
        let parts = |rel: &std::path::Path| -> Vec<String> {
            rel.iter()
                .map(|c| c.to_str().map(str::to_string))
                .collect::<Option<Vec<String>>>()
                .unwrap_or_default()
        };
        match node {
            Node::Root | Node::Ctl(None) => true,
            Node::Ctl(Some(sid)) => session(sid),
            Node::Sessions => base,
            Node::Session(sid) | Node::RawDir(sid) | Node::MemoryLink(sid) => session(sid),
            Node::MemoryDir => has(Dir::Memory),
            // Computed files: covered when every input is (see `Computed::fingerprint`); a change
            // of one is reported as `Inval::Computed`.
            Node::Computed(sid, _) | Node::Raw(sid, _, _) => !dir && session(sid),
            Node::MemoryIndex => !dir && has(Dir::Memory),
            Node::RootAudit => !dir && st.all && base && has(Dir::Memory),
            // The links to a session's history never change: they are as long as the
            // session is (`grep -r` and `ls -lR` look at them on every pass).
            Node::HistoryLink(Some(sid), _) => session(sid),
            Node::HistoryLink(None, _) => base,
            // A session's timeline is made from its transcript, states and archive root (the
            // journal is there): a change of any is reported as the session's, and the kernel
            // is told to drop it (`NormaFs::invalidate_computed`); `.history/` lists the same
            // names always. The views at past requests are made again whenever asked for.
            Node::History(
                Some(sid),
                HistoryFile::Timeline | HistoryFile::TimelineSvg | HistoryFile::Page,
            ) => !dir && session(sid),
            // `at/`'s attributes never change (its listing is made afresh at every pass).
            Node::HistoryDir(Some(sid)) | Node::AtDir(sid) => session(sid),
            Node::HistoryDir(_) | Node::History(..) | Node::AtPoint(..) | Node::AtLatest(_) => {
                false
            }
            Node::Real(Base::Memory, rel) => has(Dir::Memory) && rel.iter().count() == 1 && !dir,
            Node::Real(Base::Transcripts, rel) => match parts(rel).as_slice() {
                [_] => has(Dir::Transcripts) && !dir,
                [sid, sub] if sub == layout::SUBAGENTS => {
                    session(sid)
                        && has(Dir::SessionTranscripts(sid.clone()))
                        && (!dir || has(Dir::Subagents(sid.clone())))
                }
                [sid, sub, _] if sub == layout::SUBAGENTS => {
                    session(sid) && has(Dir::Subagents(sid.clone())) && !dir
                }
                _ => false,
            },
            Node::Real(Base::Archives, rel) => match parts(rel).as_slice() {
                [sid, name] => {
                    session(sid)
                        && has(Dir::ArchiveRoot(sid.clone()))
                        && (!dir || has(Dir::Tier(sid.clone(), name.clone())))
                }
                [sid, t, _] => session(sid) && has(Dir::Tier(sid.clone(), t.clone())) && !dir,
                _ => false,
            },
        }
    }

    /// The kernel looked `node` up: watch its session's directories the first time.
    pub fn seen(&self, node: &Node) {
        if let Node::Session(sid) = node {
            self.watch_session(sid);
        }
    }

    /// Watch the directories of a session (once).
    pub fn watch_session(&self, sid: &str) {
        if !self.state.lock().sessions.insert(sid.to_string()) {
            return;
        }
        self.add(Dir::SessionTranscripts(sid.to_string()));
        self.add(Dir::Subagents(sid.to_string()));
        // The archive root first, then its tiers: a tier created in between is reported by
        // the archive root's watch.
        self.add(Dir::ArchiveRoot(sid.to_string()));
        for (name, _) in super::real::entries(&self.paths.archive_root(sid)) {
            if let Some(t) = name.to_str().filter(|t| is_tier_dir(t)) {
                self.add(Dir::Tier(sid.to_string(), t.to_string()));
            }
        }
    }

    fn watched(&self, sid: &str) -> bool {
        let st = self.state.lock();
        st.all || st.sessions.contains(sid)
    }

    /// Watch every session, and every session that appears from now on: the root's
    /// `audit.txt` reads them all. `sessions` are the sessions there now; call before reading
    /// them. Above [`WATCH_ALL_MAX`] sessions nothing is done (the watch limit is shared with
    /// the system): the root's `audit.txt` stays uncovered.
    pub fn watch_all(&self, sessions: &[String]) {
        if self.state.lock().all || sessions.len() > WATCH_ALL_MAX {
            return;
        }
        self.state.lock().all = true;
        for sid in sessions {
            self.watch_session(sid);
        }
    }

    /// Whether [`Watcher::watch_all`] was done.
    pub fn watches_all(&self) -> bool {
        self.state.lock().all
    }

    /// End [`Watcher::run`] (from any thread).
    pub fn stop(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        let _ = unsafe {
            libc::write(
                self.stop.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// Read events until [`Watcher::stop`]; each batch of events is planned, deduplicated and
    /// handed to `on` (never under a lock of the watcher). An overflow of the event queue is
    /// reported as `overflow()`, after which nothing is covered.
    pub fn run(&self, on: &mut dyn FnMut(&Inval), overflow: &mut dyn FnMut()) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.inotify.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.stop.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfd entries.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if r < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::warn!("inotify poll failed: {}", io::Error::last_os_error());
                return;
            }
            if fds[1].revents != 0 {
                return;
            }
            // SAFETY: reads into our buffer of the given length.
            let n =
                unsafe { libc::read(self.inotify.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                continue;
            }
            let events = parse_events(buf.get(..n as usize).unwrap_or_default());
            self.process(&events, on, overflow);
        }
    }

    /// Plan a batch of events, deduplicated, and hand each invalidation to `on`. After an
    /// overflow of the event queue (events were lost) nothing is covered any more: the caller
    /// is told, to drop what the kernel may have kept for long.
    fn process(&self, events: &[Event], on: &mut dyn FnMut(&Inval), overflow: &mut dyn FnMut()) {
        let mut todo: Vec<Inval> = Vec::new();
        let mut seen: HashSet<Inval> = HashSet::new();
        let mut overflowed = false;
        for ev in events {
            if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                overflowed = true;
                continue;
            }
            let dir = {
                let mut st = self.state.lock();
                if ev.mask & libc::IN_IGNORED != 0 {
                    // The directory is gone; its parent's watch reports it when it comes
                    // back, and it is watched again then (its session stays watched).
                    let gone = st.by_wd.remove(&ev.wd);
                    if let Some(d) = gone.filter(|d| st.dirs.get(d) == Some(&ev.wd)) {
                        st.dirs.remove(&d);
                        if d.is_backing() {
                            drop(st);
                            let mut out = Vec::new();
                            self.await_backing(d, &mut out);
                            keep_new(&mut seen, &mut todo, out);
                        }
                    }
                    continue;
                }
                st.by_wd.get(&ev.wd).cloned()
            };
            let Some(dir) = dir else { continue };
            if let Dir::Above(parent) = &dir {
                let mut out = Vec::new();
                overflowed |= self.above_event(parent, &ev.name, ev.mask, &mut out);
                keep_new(&mut seen, &mut todo, out);
                continue;
            }
            let mut p = plan(&dir, &ev.name, ev.mask, &|s| self.watched(s));
            for d in std::mem::take(&mut p.watch) {
                self.add_new(d, &mut p.invals);
            }
            keep_new(&mut seen, &mut todo, p.invals);
        }
        if overflowed {
            let mut st = self.state.lock();
            if !st.degraded {
                st.degraded = true;
                tracing::warn!(
                    "inotify events were lost (queue overflow); changes show after the \
                     attribute TTL from now on"
                );
            }
            drop(st);
            overflow();
        }
        for i in &todo {
            on(i);
        }
    }
}

/// The invalidations of `new` not `seen` before, onto `todo` in order.
fn keep_new(seen: &mut HashSet<Inval>, todo: &mut Vec<Inval>, new: Vec<Inval>) {
    for i in new {
        if seen.insert(i.clone()) {
            todo.push(i);
        }
    }
}

/// One inotify event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub wd: i32,
    pub mask: u32,
    pub name: OsString,
}

/// Split a buffer read from an inotify descriptor into events (a truncated tail is dropped).
pub fn parse_events(buf: &[u8]) -> Vec<Event> {
    const HEADER: usize = 16;
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(h) = buf.get(at..at + HEADER) {
        let word = |i: usize| -> [u8; 4] {
            let mut w = [0u8; 4];
            if let Some(s) = h.get(i..i + 4) {
                w.copy_from_slice(s);
            }
            w
        };
        let wd = i32::from_ne_bytes(word(0));
        let mask = u32::from_ne_bytes(word(4));
        let len = u32::from_ne_bytes(word(12)) as usize;
        let Some(raw) = buf.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        out.push(Event {
            wd,
            mask,
            name: OsStr::from_bytes(raw.get(..end).unwrap_or_default()).to_os_string(),
        });
        at += HEADER + len;
    }
    out
}

#[cfg(test)]
mod tests;
