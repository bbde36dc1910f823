//! The filesystem without fuser: the session layout ([`layout`], the one table of what a
//! session directory shows), nodes, inodes, attributes, handles with snapshots, the ctl
//! protocol and errors. `fuse.rs` translates kernel requests into these calls.
//!
//! Every method returns plain structs or an [`FsError`]; tests drive this layer with no mount.

pub mod error;
mod handles;
pub mod inode;
pub mod layout;
pub mod node;
pub mod open;
pub mod real;
pub mod synth;
pub mod testhook;
pub mod watch;

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::bytes::Bytes;
use crate::config::Config;
use crate::store::ctl::{CtlRecord, Runner, Scope};
use crate::store::root::{self, RootPaths};

pub use error::FsError;
use handles::{Handle, HandleTable};
pub use inode::ROOT_INO;
pub use node::{Base, Node, SynthKind};
use real::{Backing, Stat};
use synth::{systime, Synth};
pub use testhook::{set_panic_on_lookup, set_panic_on_request};

/// The kind of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Dir,
    File,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

/// Attributes of a node.
#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    pub ino: u64,
    pub kind: FileKind,
    pub size: u64,
    pub blocks: u64,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

/// A looked-up node: its attributes and how long the kernel may cache them.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub attr: Attr,
    /// How long the kernel may keep the attributes.
    pub ttl: Duration,
    /// How long the kernel may keep the name (at least `ttl`): a computed file's name lives
    /// as long as its directory's listing, its size not at all.
    pub entry_ttl: Duration,
}

/// An entry of a `readdirplus` answer (see [`NormaFs::entry_plus`]).
#[derive(Debug, Clone)]
pub enum PlusEntry {
    /// Sent with these attributes, and linked by the kernel: counts one lookup.
    Linked(Entry),
    /// Sent, never linked (`.` and `..`): the attributes only fill the slot.
    Unlinked(Entry),
    /// Gone since the listing: not sent.
    Gone,
}

/// One directory entry; `offset` is the offset of the *next* entry.
#[derive(Debug, Clone, PartialEq)]
pub struct DirEntry {
    pub ino: u64,
    pub offset: i64,
    pub kind: FileKind,
    pub name: OsString,
}

/// An opened file.
#[derive(Debug, Clone)]
pub struct Opened {
    pub fh: u64,
    /// Bypass the page cache (synthetic files and ctl).
    pub direct_io: bool,
    /// The kernel may keep the file's cached pages from earlier opens: every change of the
    /// backing file is reported (a real file covered by the watches).
    pub keep_cache: bool,
    /// The backing file, for kernel passthrough of real files.
    pub backing: Option<Arc<File>>,
    /// The kernel may keep a size of this computed file that is not the snapshot's: it must
    /// drop it before the open is answered, so that `fstat` on the handle asks for the
    /// snapshot's (see [`OpenSynth`]).
    pub stale_attr: bool,
}

/// Attribute changes requested by `setattr`.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SystemTime>,
    pub mtime: Option<SystemTime>,
    /// Set atime/mtime to now.
    pub atime_now: bool,
    pub mtime_now: bool,
}

/// Mount options that change behaviour.
#[derive(Debug, Clone)]
pub struct FsOptions {
    pub read_only: bool,
    /// Owner of synthetic nodes.
    pub uid: u32,
    pub gid: u32,
    /// Largest write the kernel sends; a ctl write of this size may be a split command.
    pub max_write: u32,
    /// TTL of real files' attributes and entries (and of directories').
    pub real_ttl: Duration,
    /// The same TTL for nodes whose every change is reported by inotify (see
    /// [`watch::Watcher::covers`]).
    pub watched_ttl: Duration,
}

/// TTL of attributes and entries that inotify keeps fresh.
pub const WATCHED_TTL: Duration = Duration::from_secs(3600);

impl FsOptions {
    pub fn new(cfg: &Config, read_only: bool) -> FsOptions {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        FsOptions {
            read_only,
            uid,
            gid,
            max_write: 1 << 20,
            real_ttl: Duration::from_millis(cfg.ttl_ms),
            watched_ttl: WATCHED_TTL.max(Duration::from_millis(cfg.ttl_ms)),
        }
        .with_caching_decided()
    }

    /// `--ttl-ms 0` asks for no caching at all: no TTL (watched nodes' neither), and none of
    /// the kernel's own caches (`init` asks for them only when this holds).
    pub fn kernel_caching(&self) -> bool {
        self.real_ttl > Duration::ZERO
    }

    fn with_caching_decided(mut self) -> FsOptions {
        if !self.kernel_caching() {
            self.watched_ttl = Duration::ZERO;
        }
        self
    }

    /// When the kernel's copy of a link's target must be dropped: never when the kernel keeps
    /// no copies (`kernel_keeps_links` false) or when the watches report every change of it
    /// (`kept`), else after the real files' TTL, as an attribute would expire.
    pub fn link_expiry(&self, kept: bool, kernel_keeps_links: bool) -> Option<Duration> {
        (!kept && kernel_keeps_links).then_some(self.real_ttl)
    }

    /// An operation that would change a file: refused under `--read-only`.
    pub fn writable(&self) -> Result<(), FsError> {
        if self.read_only {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// mkdir, rmdir, mknod, symlink and link: the namespace has no place for them
    /// (`EROFS` under `--read-only`, where every change is refused alike, else `EPERM`).
    pub fn namespace_change(&self) -> FsError {
        match self.writable() {
            Err(e) => e,
            Ok(()) => FsError::Perm,
        }
    }
}

/// The open handles of one computed file, and the fingerprint of the bytes each holds.
///
/// A computed file whose inputs are all watched has its attributes kept for long, like a real
/// file (the watcher invalidates them when an input changes), but the kernel keeps one size per
/// inode for all handles, and `fstat` on a handle must report the size of its own snapshot. So
/// every open drops the attributes the kernel holds (after the handle is registered here), and
/// a size is given a long TTL only while every open handle holds the bytes it describes: any
/// other reply expires at once, and `fstat` reaches the mount. Reads always use direct I/O
/// from the handle's snapshot (the page cache would serve one inode's pages and size to
/// handles of different bytes).
#[derive(Debug, Default)]
struct OpenSynth {
    /// Open handles and the fingerprints of their bytes.
    open: HashMap<u64, u64>,
}

/// One pass of [`NormaFs::readdir_unopened`]: its generation and its entries.
type Listing = (u32, Arc<Vec<DirEntry>>);

/// Per ctl file: the last sequence number and the latest results.
type CtlLog = (u64, VecDeque<CtlRecord>);

/// How many results a fresh `ctl` handle reads.
pub const CTL_HISTORY: usize = 32;

/// The filesystem.
pub struct NormaFs {
    paths: RootPaths,
    backing: Backing,
    cfg: Config,
    opts: FsOptions,
    inodes: inode::InodeTable,
    synth: Synth,
    handles: HandleTable,
    ctl_log: Mutex<HashMap<Option<String>, CtlLog>>,
    /// Open synthetic handles: handle → (inode, thread id of the opener). FUSE sends the
    /// GETATTR of `fstat` without a file handle, so a getattr from the thread that opened a
    /// synthetic file finds its snapshot here and reports that size: `fstat` on an open handle
    /// matches the bytes its reads return even while the inputs change.
    synth_openers: Mutex<HashMap<u64, (u64, u32)>>,
    /// The open handles of computed files, by inode (see [`OpenSynth`]).
    open_synth: Mutex<HashMap<u64, OpenSynth>>,
    /// The attributes last sent for each computed file the kernel holds (see `entry_plus`).
    told: Mutex<HashMap<u64, Attr>>,
    /// Listings of passes of [`NormaFs::readdir_unopened`], by directory inode.
    listings: Mutex<HashMap<u64, Vec<Listing>>>,
    next_listing: AtomicU64,
    started: SystemTime,
    /// Reports changes in the backing directories; decides which nodes get `watched_ttl`.
    watcher: Option<Arc<watch::Watcher>>,
}

fn kind_of(st: &Stat) -> FileKind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => FileKind::Dir,
        libc::S_IFLNK => FileKind::Symlink,
        libc::S_IFIFO => FileKind::Fifo,
        libc::S_IFSOCK => FileKind::Socket,
        libc::S_IFCHR => FileKind::CharDevice,
        libc::S_IFBLK => FileKind::BlockDevice,
        _ => FileKind::File,
    }
}

fn to_timespec(t: SystemTime) -> libc::timespec {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

impl NormaFs {
    pub fn new(paths: RootPaths, cfg: Config, opts: FsOptions) -> NormaFs {
        let backing = Backing {
            transcripts: paths.transcripts.clone(),
            memory: paths.memory.clone(),
            archives: paths.archives.clone(),
        };
        NormaFs {
            synth: Synth::new(paths.clone(), cfg.clone()),
            paths,
            backing,
            cfg,
            opts,
            inodes: inode::InodeTable::new(),
            handles: HandleTable::new(),
            ctl_log: Mutex::new(HashMap::new()),
            synth_openers: Mutex::new(HashMap::new()),
            open_synth: Mutex::new(HashMap::new()),
            told: Mutex::new(HashMap::new()),
            listings: Mutex::new(HashMap::new()),
            next_listing: AtomicU64::new(1),
            started: SystemTime::now(),
            watcher: None,
        }
    }

    /// Use `w`'s coverage for TTLs and caching (before requests are served). Without a
    /// watcher every node gets `real_ttl` and nothing is kept across opens.
    pub fn set_watcher(&mut self, w: Arc<watch::Watcher>) {
        self.watcher = Some(w);
    }

    /// Whether every change that can make the kernel's cache of `node` stale is reported
    /// (`dir`: as a directory). Asked before reading what a reply will say.
    fn covered(&self, node: &Node, dir: bool) -> bool {
        self.watcher.as_ref().is_some_and(|w| w.covers(node, dir))
    }

    /// The TTL of a node's attributes and entry.
    pub fn ttl_of(&self, node: &Node, dir: bool) -> Duration {
        if self.covered(node, dir) {
            self.opts.watched_ttl
        } else {
            self.opts.real_ttl
        }
    }

    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    pub fn paths(&self) -> &RootPaths {
        &self.paths
    }

    /// The node of an inode, or `ENOENT` for a stale one.
    pub fn node(&self, ino: u64) -> Result<Node, FsError> {
        self.inodes.node(ino).ok_or(FsError::NotFound)
    }

    /// The inode a node has (allocating it), without counting a lookup.
    pub fn ino_of(&self, node: &Node) -> u64 {
        self.inodes.ino(node)
    }

    /// The inode a node has, if one was ever allocated (for cache invalidation: a node the
    /// kernel was never told about needs none).
    pub fn known_ino(&self, node: &Node) -> Option<u64> {
        self.inodes.get(node)
    }

    /// Record the `max_write` the kernel accepted when mounting (before requests are served):
    /// a ctl write of that size may be one the kernel split.
    pub fn set_max_write(&mut self, max_write: u32) {
        self.opts.max_write = max_write;
    }

    /// Inodes the kernel holds (to drop all it may have cached).
    pub fn held_inodes(&self) -> Vec<u64> {
        self.inodes.held()
    }

    pub fn lookup_count(&self, ino: u64) -> u64 {
        self.inodes.lookups(ino)
    }

    fn session_exists(&self, sid: &str) -> bool {
        root::valid_session_name(OsStr::new(sid)).is_ok()
            && (self.paths.transcript_path(sid).is_file() || self.paths.archive_root(sid).is_dir())
    }

    // ---- attributes ------------------------------------------------------------------------

    fn synthetic_attr(
        &self,
        ino: u64,
        kind: FileKind,
        perm: u16,
        size: u64,
        mtime: SystemTime,
    ) -> Attr {
        Attr {
            ino,
            kind,
            size,
            blocks: size.div_ceil(512),
            perm,
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            uid: self.opts.uid,
            gid: self.opts.gid,
            rdev: 0,
            atime: mtime,
            mtime,
            ctime: mtime,
        }
    }

    fn real_attr(&self, ino: u64, st: &Stat) -> Attr {
        Attr {
            ino,
            kind: kind_of(st),
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            atime: systime(st.st_atime, st.st_atime_nsec),
            mtime: systime(st.st_mtime, st.st_mtime_nsec),
            ctime: systime(st.st_ctime, st.st_ctime_nsec),
        }
    }

    fn mtime_of(p: &Path) -> Option<SystemTime> {
        std::fs::metadata(p).and_then(|m| m.modified()).ok()
    }

    /// Attributes of a node and their TTL.
    pub fn attr_of(&self, node: &Node, ino: u64) -> Result<Entry, FsError> {
        let zero = Duration::ZERO;
        // Decided before reading: a change from now on is reported and invalidated.
        let ttl = self.ttl_of(node, true);
        let attr = match node {
            Node::Root => self.synthetic_attr(ino, FileKind::Dir, 0o755, 0, self.started),
            Node::Sessions => {
                let m = [&self.paths.transcripts, &self.paths.archives]
                    .iter()
                    .filter_map(|p| Self::mtime_of(p))
                    .max()
                    .unwrap_or(self.started);
                self.synthetic_attr(ino, FileKind::Dir, 0o755, 0, m)
            }
            Node::Session(sid) => {
                if !self.session_exists(sid) {
                    return Err(FsError::NotFound);
                }
                // Every backing directory whose names the listing shows: a kernel that keeps
                // the listing drops it when this mtime changes.
                let m = [
                    self.paths.transcript_path(sid),
                    self.paths.transcripts.join(sid),
                    self.paths.archive_root(sid),
                ]
                .iter()
                .filter_map(|p| Self::mtime_of(p))
                .max()
                .unwrap_or(self.started);
                self.synthetic_attr(ino, FileKind::Dir, 0o755, 0, m)
            }
            Node::RawDir(sid) => {
                if !self.session_exists(sid) {
                    return Err(FsError::NotFound);
                }
                let m = Self::mtime_of(&self.paths.state_path(sid)).unwrap_or(self.started);
                self.synthetic_attr(ino, FileKind::Dir, 0o555, 0, m)
            }
            Node::MemoryLink(_) => self.synthetic_attr(
                ino,
                FileKind::Symlink,
                0o777,
                MEMORY_LINK.len() as u64,
                self.started,
            ),
            Node::Ctl(sid) => {
                if let Some(sid) = sid {
                    if !self.session_exists(sid) {
                        return Err(FsError::NotFound);
                    }
                }
                // Constant attributes: kept as long as the session's existence is.
                let ttl = self.ttl_of(node, false);
                return Ok(Entry {
                    attr: self.synthetic_attr(ino, FileKind::File, 0o600, 0, self.started),
                    ttl,
                    entry_ttl: ttl,
                });
            }
            Node::MemoryDir => match self.backing.lstat(Base::Memory, Path::new("")) {
                Ok(st) => {
                    let mut a = self.real_attr(ino, &st);
                    a.kind = FileKind::Dir;
                    a
                }
                Err(_) => self.synthetic_attr(ino, FileKind::Dir, 0o755, 0, self.started),
            },
            n if n.is_synthetic_file() => {
                if let Node::Synth(sid, _) | Node::Raw(sid, _, _) = n {
                    if !self.session_exists(sid) {
                        return Err(FsError::NotFound);
                    }
                }
                // Fixed names, listed as long as their directory is; a raw range comes and
                // goes with state.json.
                self.before_computing(n);
                // Kept for long only when every input is watched: each change is reported and
                // invalidated (`invalidate_computed`).
                let covered = self.covered(n, false);
                let entry_ttl = match n {
                    Node::Synth(sid, _) => self.ttl_of(&Node::Session(sid.clone()), true),
                    Node::MemoryIndex => self.ttl_of(&Node::MemoryDir, true),
                    Node::RootAudit => self.ttl_of(&Node::Root, true),
                    Node::Raw(..) if covered => self.opts.watched_ttl,
                    _ => zero,
                };
                let c = self.synth.content(n)?;
                // Not while a handle of other bytes is open: `fstat` on it must reach us.
                let ttl = if covered
                    && self
                        .open_synth
                        .lock()
                        .get(&ino)
                        .is_none_or(|o| o.open.values().all(|&fp| fp == c.fp))
                {
                    self.opts.watched_ttl
                } else {
                    zero
                };
                return Ok(Entry {
                    attr: self.synthetic_attr(ino, FileKind::File, c.perm, c.data.len(), c.mtime),
                    ttl,
                    entry_ttl: entry_ttl.max(ttl),
                });
            }
            Node::Real(base, rel) => {
                let file_ttl = self.ttl_of(node, false);
                let st = self.backing.lstat(*base, rel)?;
                let attr = self.real_attr(ino, &st);
                let ttl = if attr.kind == FileKind::Dir {
                    ttl
                } else {
                    file_ttl
                };
                return Ok(Entry {
                    attr,
                    ttl,
                    entry_ttl: ttl,
                });
            }
            _ => return Err(FsError::NotFound),
        };
        Ok(Entry {
            attr,
            ttl,
            entry_ttl: ttl,
        })
    }

    // ---- namespace -------------------------------------------------------------------------

    /// The child `name` of `parent`, if it exists.
    pub fn child(&self, parent: &Node, name: &OsStr) -> Result<Node, FsError> {
        if name.len() > 255 {
            return Err(FsError::NameTooLong);
        }
        if !real::valid_component(name) {
            return Err(FsError::NotFound);
        }
        let s = name.to_str();
        let node = match (parent, s) {
            (Node::Root, Some("sessions")) => Node::Sessions,
            (Node::Root, Some("memory")) => Node::MemoryDir,
            (Node::Root, Some("audit.txt")) => Node::RootAudit,
            (Node::Root, Some("ctl")) => Node::Ctl(None),
            (Node::Sessions, Some(sid)) if self.session_exists(sid) => {
                Node::Session(sid.to_string())
            }
            (Node::Session(sid), Some(n)) => match layout::find(n) {
                Some(layout::Entry::Computed(kind, _)) => Node::Synth(sid.clone(), kind),
                Some(layout::Entry::RawDir) => Node::RawDir(sid.clone()),
                Some(layout::Entry::MemoryLink) => Node::MemoryLink(sid.clone()),
                Some(layout::Entry::Ctl) => Node::Ctl(Some(sid.clone())),
                Some(layout::Entry::Real(..)) | None => match node::session_real(sid, n) {
                    Some((b, rel)) => {
                        self.backing.lstat(b, &rel)?;
                        Node::Real(b, rel)
                    }
                    None => return Err(FsError::NotFound),
                },
            },
            (Node::RawDir(sid), Some(n)) => {
                let Some((start, end)) = node::parse_raw_name(n) else {
                    return Err(FsError::NotFound);
                };
                if !self.synth.raw_range_exists(sid, start, end)? {
                    return Err(FsError::NotFound);
                }
                Node::Raw(sid.clone(), start.to_string(), end.to_string())
            }
            (Node::MemoryDir, Some("MEMORY.md")) => Node::MemoryIndex,
            (Node::MemoryDir, _) => {
                let rel = PathBuf::from(name);
                self.backing.lstat(Base::Memory, &rel)?;
                Node::Real(Base::Memory, rel)
            }
            (Node::Real(b, rel), _) => {
                let rel = rel.join(name);
                self.backing.lstat(*b, &rel)?;
                Node::Real(*b, rel)
            }
            _ => return Err(FsError::NotFound),
        };
        Ok(node)
    }

    /// `lookup`: the child's attributes; counts one kernel reference.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Entry, FsError> {
        testhook::on_lookup(name);
        let p = self.node(parent)?;
        let child = self.child(&p, name)?;
        let ino = self.inodes.ino(&child);
        let e = self.attr_of(&child, ino)?;
        self.inodes.lookup(&child);
        self.tell(&child, &e);
        Ok(e)
    }

    /// Note the attributes a reply gives the kernel for a computed file.
    fn tell(&self, node: &Node, e: &Entry) {
        if node.is_synthetic_file() {
            self.told.lock().insert(e.attr.ino, e.attr.clone());
        }
    }

    /// What `readdirplus` hands the kernel for entry `e` of a listing. The kernel links every
    /// entry but `.` and `..` like a `lookup` answer and forgets it later, so the caller
    /// counts one lookup per linked entry it sends ([`NormaFs::count_lookup`]).
    ///
    /// The attributes a `lookup` would answer, except for computed files, which a listing
    /// never computes (computing every view of a session to list its directory would cost
    /// far more than the lookups saved): one the kernel does not hold gets placeholder
    /// attributes (size 0), one it holds the attributes last sent for it (the kernel applies
    /// what it is given to the inode it has, and a reader of it must never see a placeholder
    /// size); both kept for no time at all, name included, so the kernel asks again
    /// (`lookup`, `getattr`) before it uses them.
    pub fn entry_plus(&self, e: &DirEntry) -> PlusEntry {
        let placeholder = || Entry {
            attr: self.synthetic_attr(e.ino, e.kind, 0o444, 0, self.started),
            ttl: Duration::ZERO,
            entry_ttl: Duration::ZERO,
        };
        if e.name == "." || e.name == ".." {
            return PlusEntry::Unlinked(placeholder());
        }
        let Ok(node) = self.node(e.ino) else {
            return PlusEntry::Gone;
        };
        if node.is_synthetic_file() {
            if self.inodes.lookups(e.ino) == 0 {
                return PlusEntry::Linked(placeholder());
            }
            if let Some(attr) = self.told.lock().get(&e.ino).cloned() {
                return PlusEntry::Linked(Entry {
                    attr,
                    ttl: Duration::ZERO,
                    entry_ttl: Duration::ZERO,
                });
            }
        }
        match self.attr_of(&node, e.ino) {
            Ok(a) => PlusEntry::Linked(a),
            // Gone since the listing: left out, as a listing a moment later would.
            Err(FsError::NotFound) => PlusEntry::Gone,
            // The `lookup` that the placeholder's zero TTL brings reports the error.
            Err(_) => PlusEntry::Linked(placeholder()),
        }
    }

    /// The kernel linked `ino` from a `readdirplus` answer: one more lookup to forget.
    pub fn count_lookup(&self, ino: u64) {
        self.inodes.lookup_ino(ino);
    }

    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
        if self.inodes.lookups(ino) == 0 {
            self.told.lock().remove(&ino);
        }
    }

    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> Result<Entry, FsError> {
        self.getattr_for(ino, fh, 0)
    }

    /// `getattr` from thread `pid` (0: unknown). An open synthetic handle reports the size of
    /// its own snapshot: the one named by `fh`, else the newest that `pid` opened on `ino`
    /// (`fstat` comes without a handle).
    pub fn getattr_for(&self, ino: u64, fh: Option<u64>, pid: u32) -> Result<Entry, FsError> {
        let node = self.node(ino)?;
        let fh = match fh {
            Some(fh) => Some(fh),
            None if node.is_synthetic_file() => self.synth_opened_by(ino, pid),
            None => None,
        };
        let snapshot = fh.and_then(|fh| match self.handles.lock().get(&fh) {
            Some(Handle::Synth(data, fp)) => Some((data.len(), *fp)),
            _ => None,
        });
        let mut e = self.attr_of(&node, ino)?;
        if let Some((len, _)) = snapshot {
            // attr_of kept nothing for long if this handle holds other bytes (see
            // `OpenSynth`); a size that differs is never kept.
            if e.attr.size != len {
                e.ttl = Duration::ZERO;
            }
            e.attr.size = len;
            e.attr.blocks = len.div_ceil(512);
        }
        self.tell(&node, &e);
        Ok(e)
    }

    /// The newest synthetic handle that thread `pid` holds open on `ino`.
    fn synth_opened_by(&self, ino: u64, pid: u32) -> Option<u64> {
        if pid == 0 {
            return None;
        }
        self.synth_openers
            .lock()
            .iter()
            .filter(|(_, &(i, p))| i == ino && p == pid)
            .map(|(&fh, _)| fh)
            .max()
    }

    /// Whether the kernel may keep the target of symbolic link `ino` until the watcher tells
    /// it otherwise: the session's `memory` link never changes, and a real link is replaced
    /// (never changed in place) in a watched directory. Asked before reading the target.
    pub fn link_kept(&self, ino: u64) -> bool {
        match self.node(ino) {
            Ok(Node::MemoryLink(_)) => true,
            Ok(n @ Node::Real(..)) => self.covered(&n, false),
            _ => false,
        }
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        match self.node(ino)? {
            Node::MemoryLink(_) => Ok(MEMORY_LINK.as_bytes().to_vec()),
            Node::Real(b, rel) => self.backing.readlink(b, &rel),
            _ => Err(FsError::Invalid("not a symbolic link".into())),
        }
    }

    /// Every entry of a directory, `.` and `..` first.
    pub fn list(&self, ino: u64) -> Result<Vec<DirEntry>, FsError> {
        let node = self.node(ino)?;
        let parent_ino = match &node {
            Node::Root | Node::Sessions | Node::MemoryDir | Node::RootAudit => ROOT_INO,
            Node::Session(_) => self.inodes.ino(&Node::Sessions),
            Node::RawDir(sid) => self.inodes.ino(&Node::Session(sid.clone())),
            _ => ROOT_INO,
        };
        let mut out: Vec<(u64, FileKind, OsString)> = vec![
            (ino, FileKind::Dir, ".".into()),
            (parent_ino, FileKind::Dir, "..".into()),
        ];
        let mut add = |n: Node, kind: FileKind, name: &OsStr| {
            out.push((self.inodes.ino(&n), kind, name.to_os_string()));
        };
        match &node {
            Node::Root => {
                add(Node::Sessions, FileKind::Dir, OsStr::new("sessions"));
                add(Node::MemoryDir, FileKind::Dir, OsStr::new("memory"));
                add(Node::RootAudit, FileKind::File, OsStr::new("audit.txt"));
                add(Node::Ctl(None), FileKind::File, OsStr::new("ctl"));
            }
            Node::Sessions => {
                let d = root::discover(&self.paths).map_err(FsError::from)?;
                for sid in d.sessions {
                    add(Node::Session(sid.clone()), FileKind::Dir, OsStr::new(&sid));
                }
            }
            Node::Session(sid) => {
                if !self.session_exists(sid) {
                    return Err(FsError::NotFound);
                }
                // The table's real names, then the archive tiers found on disk, then the rest of
                // the table.
                for slot in &layout::SESSION {
                    if !matches!(slot.entry, layout::Entry::Real(..)) {
                        continue;
                    }
                    if let Some((b, rel)) = node::session_real(sid, slot.name) {
                        if let Ok(st) = self.backing.lstat(b, &rel) {
                            add(Node::Real(b, rel), kind_of(&st), OsStr::new(slot.name));
                        }
                    }
                }
                if let Ok(names) = self.backing.list(Base::Archives, Path::new(sid)) {
                    for n in names {
                        if let Some(s) =
                            n.to_str().filter(|s| crate::store::session::is_tier_dir(s))
                        {
                            let rel = PathBuf::from(sid).join(s);
                            if let Ok(st) = self.backing.lstat(Base::Archives, &rel) {
                                add(Node::Real(Base::Archives, rel), kind_of(&st), &n);
                            }
                        }
                    }
                }
                for slot in &layout::SESSION {
                    let (n, kind) = match slot.entry {
                        layout::Entry::Real(..) => continue,
                        layout::Entry::Computed(k, _) => {
                            (Node::Synth(sid.clone(), k), FileKind::File)
                        }
                        layout::Entry::RawDir => (Node::RawDir(sid.clone()), FileKind::Dir),
                        layout::Entry::MemoryLink => {
                            (Node::MemoryLink(sid.clone()), FileKind::Symlink)
                        }
                        layout::Entry::Ctl => (Node::Ctl(Some(sid.clone())), FileKind::File),
                    };
                    add(n, kind, OsStr::new(slot.name));
                }
            }
            Node::RawDir(sid) => {
                for n in self.synth.raw_names(sid) {
                    if let Some((s, e)) = node::parse_raw_name(&n) {
                        add(
                            Node::Raw(sid.clone(), s.to_string(), e.to_string()),
                            FileKind::File,
                            OsStr::new(&n),
                        );
                    }
                }
            }
            Node::MemoryDir => {
                let names = match self.backing.list(Base::Memory, Path::new("")) {
                    Ok(n) => n,
                    Err(FsError::NotFound) => Vec::new(),
                    Err(e) => return Err(e),
                };
                add(Node::MemoryIndex, FileKind::File, OsStr::new("MEMORY.md"));
                for n in names {
                    if n == "MEMORY.md" {
                        continue;
                    }
                    let rel = PathBuf::from(&n);
                    if let Ok(st) = self.backing.lstat(Base::Memory, &rel) {
                        add(Node::Real(Base::Memory, rel), kind_of(&st), &n);
                    }
                }
            }
            Node::Real(b, rel) => {
                for n in self.backing.list(*b, rel)? {
                    let crel = rel.join(&n);
                    if let Ok(st) = self.backing.lstat(*b, &crel) {
                        add(Node::Real(*b, crel), kind_of(&st), &n);
                    }
                }
            }
            _ => return Err(FsError::NotDir),
        }
        Ok(out
            .into_iter()
            .enumerate()
            .map(|(i, (ino, kind, name))| DirEntry {
                ino,
                offset: i as i64 + 1,
                kind,
                name,
            })
            .collect())
    }

    pub fn opendir(&self, ino: u64) -> Result<u64, FsError> {
        self.opendir_cached(ino).map(|(fh, _)| fh)
    }

    /// `opendir`, and whether the kernel may keep the listing across opens (every change of
    /// it is reported by the watches).
    pub fn opendir_cached(&self, ino: u64) -> Result<(u64, bool), FsError> {
        let node = self.node(ino)?;
        let cache = match &node {
            Node::Root
            | Node::Sessions
            | Node::Session(_)
            | Node::RawDir(_)
            | Node::MemoryDir
            | Node::Real(..) => self.covered(&node, true),
            _ => false,
        };
        let entries = self.list(ino)?;
        Ok((self.new_handle(Handle::Dir(entries)), cache))
    }

    /// Entries after `offset` (0 = from the start), from the handle's snapshot.
    pub fn readdir(&self, ino: u64, fh: u64, offset: i64) -> Result<Vec<DirEntry>, FsError> {
        let snapshot = match self.handles.lock().get(&fh) {
            Some(Handle::Dir(e)) => Some(e.clone()),
            _ => None,
        };
        let entries = match snapshot {
            Some(e) => e,
            None => self.list(ino)?,
        };
        Ok(entries.into_iter().filter(|e| e.offset > offset).collect())
    }

    pub fn releasedir(&self, fh: u64) {
        self.handles.close(fh);
    }

    /// `readdir` of a directory the kernel opened without asking (the mount answers `opendir`
    /// with `ENOSYS`, which saves two round trips per directory): the entries after `offset`.
    ///
    /// A pass from offset 0 lists the directory afresh and keeps the listing until the pass
    /// reaches its end; offsets carry the pass's generation in their high 32 bits, so a pass
    /// that goes on while another one started reads its own listing (a few are kept per
    /// directory). An offset whose listing is gone continues in a fresh one.
    pub fn readdir_unopened(&self, ino: u64, offset: i64) -> Result<Vec<DirEntry>, FsError> {
        const KEPT_PER_DIR: usize = 4;
        const KEPT_DIRS: usize = 4096;
        let gen = ((offset >> 32) & 0x7fff_ffff) as u32;
        let at = (offset & 0xffff_ffff) as usize;
        let kept = if offset > 0 {
            self.listings
                .lock()
                .get(&ino)
                .and_then(|v| v.iter().find(|(g, _)| *g == gen).map(|(_, l)| l.clone()))
        } else {
            None
        };
        let (gen, list) = match kept {
            Some(l) => (gen, l),
            None => {
                let g = (self.next_listing.fetch_add(1, Ordering::Relaxed) & 0x7fff_ffff) as u32;
                let l: Arc<Vec<DirEntry>> = Arc::new(
                    self.list(ino)?
                        .into_iter()
                        .map(|mut e| {
                            e.offset |= i64::from(g) << 32;
                            e
                        })
                        .collect(),
                );
                let mut all = self.listings.lock();
                if all.len() >= KEPT_DIRS {
                    // Passes that never ended (a reader that stopped early).
                    all.clear();
                }
                let v = all.entry(ino).or_default();
                if v.len() >= KEPT_PER_DIR {
                    v.remove(0);
                }
                v.push((g, l.clone()));
                (g, l)
            }
        };
        let rest = list.get(at..).unwrap_or_default().to_vec();
        if rest.is_empty() {
            let mut all = self.listings.lock();
            if let Some(v) = all.get_mut(&ino) {
                v.retain(|(g, _)| *g != gen);
                if v.is_empty() {
                    all.remove(&ino);
                }
            }
        }
        Ok(rest)
    }

    // ---- files -----------------------------------------------------------------------------

    fn new_handle(&self, h: Handle) -> u64 {
        self.handles.open(h)
    }

    fn writes(flags: i32) -> bool {
        let acc = flags & libc::O_ACCMODE;
        acc == libc::O_WRONLY || acc == libc::O_RDWR || flags & libc::O_TRUNC != 0
    }

    pub fn open(&self, ino: u64, flags: i32) -> Result<Opened, FsError> {
        self.open_for(ino, flags, 0)
    }

    /// `open` by thread `pid` (0: unknown); see [`NormaFs::getattr_for`].
    pub fn open_for(&self, ino: u64, flags: i32, pid: u32) -> Result<Opened, FsError> {
        let node = self.node(ino)?;
        match &node {
            Node::Ctl(sid) => {
                if let Some(sid) = sid {
                    if !self.session_exists(sid) {
                        return Err(FsError::NotFound);
                    }
                }
                let scope = match sid {
                    Some(s) => Scope::Session(s.clone()),
                    None => Scope::Root,
                };
                let fh = self.new_handle(Handle::Ctl {
                    scope,
                    own: Vec::new(),
                    wrote: false,
                    snapshot: None,
                });
                Ok(Opened {
                    fh,
                    direct_io: true,
                    keep_cache: false,
                    backing: None,
                    stale_attr: false,
                })
            }
            n if n.is_synthetic_file() => {
                if Self::writes(flags) {
                    return Err(FsError::Access);
                }
                if let Node::Synth(sid, _) | Node::Raw(sid, _, _) = n {
                    if !self.session_exists(sid) {
                        return Err(FsError::NotFound);
                    }
                }
                self.before_computing(n);
                let c = self.synth.content(n)?;
                let fh = self.new_handle(Handle::Synth(c.data, c.fp));
                if pid != 0 {
                    self.synth_openers.lock().insert(fh, (ino, pid));
                }
                self.open_synth
                    .lock()
                    .entry(ino)
                    .or_default()
                    .open
                    .insert(fh, c.fp);
                Ok(Opened {
                    fh,
                    direct_io: true,
                    keep_cache: false,
                    backing: None,
                    stale_attr: true,
                })
            }
            Node::Real(b, rel) => {
                if Self::writes(flags) {
                    self.opts.writable()?;
                }
                let keep_cache = self.covered(&node, false);
                let f = Arc::new(self.backing.open(
                    *b,
                    rel,
                    flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW),
                )?);
                let fh = self.new_handle(Handle::Real(f.clone()));
                Ok(Opened {
                    fh,
                    direct_io: false,
                    keep_cache,
                    backing: Some(f),
                    stale_attr: false,
                })
            }
            Node::MemoryLink(_) => Err(FsError::Loop),
            _ => Err(FsError::IsDir),
        }
    }

    /// The snapshot of a computed file's handle, for reads served without a copy.
    pub fn synth_snapshot(&self, fh: u64) -> Option<Bytes> {
        match self.handles.lock().get(&fh) {
            Some(Handle::Synth(data, _)) => Some(data.clone()),
            _ => None,
        }
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let mut handles = self.handles.lock();
        match handles.get_mut(&fh) {
            Some(Handle::Synth(data, _)) => {
                // Copy outside the handles' lock: other readers go on meanwhile.
                let data = data.clone();
                drop(handles);
                Ok(data.window(offset, size).into_owned())
            }
            Some(Handle::Real(f)) => {
                let f = f.clone();
                drop(handles);
                let mut buf = vec![0u8; size as usize];
                let mut got = 0;
                while got < buf.len() {
                    let n = f.read_at(&mut buf[got..], offset + got as u64)?;
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
                buf.truncate(got);
                Ok(buf)
            }
            Some(Handle::Ctl {
                scope,
                own,
                wrote,
                snapshot,
            }) => {
                if offset == 0 || snapshot.is_none() {
                    let records: Vec<CtlRecord> = if *wrote {
                        own.clone()
                    } else {
                        let key = scope_key(scope);
                        self.ctl_log
                            .lock()
                            .get(&key)
                            .map(|(_, q)| q.iter().cloned().collect())
                            .unwrap_or_default()
                    };
                    let mut text = Vec::new();
                    for r in records {
                        text.extend_from_slice(r.to_json().to_string().as_bytes());
                        text.push(b'\n');
                    }
                    *snapshot = Some(Arc::new(text));
                }
                Ok(snapshot
                    .as_ref()
                    .map(|d| slice(d, offset, size))
                    .unwrap_or_default())
            }
            Some(Handle::Dir(_)) => Err(FsError::IsDir),
            None => Err(FsError::BadHandle),
        }
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let target = {
            let handles = self.handles.lock();
            match handles.get(&fh) {
                Some(Handle::Real(f)) => Ok(Some(f.clone())),
                Some(Handle::Ctl { .. }) => Ok(None),
                Some(Handle::Synth(..)) => Err(FsError::Access),
                Some(Handle::Dir(_)) => Err(FsError::IsDir),
                None => Err(FsError::BadHandle),
            }
        }?;
        if let Some(f) = target {
            self.opts.writable()?;
            f.write_all_at(data, offset)?;
            return Ok(data.len() as u32);
        }
        self.write_ctl(fh, data)
    }

    /// A write to `ctl`: one or more whole commands, run in order, stopping at the first failure.
    fn write_ctl(&self, fh: u64, data: &[u8]) -> Result<u32, FsError> {
        let scope = match self.handles.lock().get(&fh) {
            Some(Handle::Ctl { scope, .. }) => scope.clone(),
            _ => return Err(FsError::BadHandle),
        };
        if data.len() >= self.opts.max_write as usize {
            return Err(FsError::Invalid(format!(
                "a ctl write must be shorter than {} bytes",
                self.opts.max_write
            )));
        }
        let text = std::str::from_utf8(data)
            .map_err(|_| FsError::Invalid("ctl commands must be UTF-8".into()))?;
        let noa = match &scope {
            Scope::Session(sid) => self.cfg.for_session(sid),
            Scope::Root => self.cfg.noa.clone(),
        };
        let runner = Runner {
            paths: &self.paths,
            cfg: &noa,
            read_only: self.opts.read_only,
        };
        let key = scope_key(&scope);
        let mut failure = None;
        for line in text.split('\n').map(str::trim).filter(|l| !l.is_empty()) {
            let seq = {
                let mut log = self.ctl_log.lock();
                let e = log.entry(key.clone()).or_default();
                e.0 += 1;
                e.0
            };
            let rec = runner.run(&scope, line, seq, chrono::Utc::now());
            {
                let mut log = self.ctl_log.lock();
                let e = log.entry(key.clone()).or_default();
                e.1.push_back(rec.clone());
                while e.1.len() > CTL_HISTORY {
                    e.1.pop_front();
                }
            }
            if let Some(Handle::Ctl {
                own,
                wrote,
                snapshot,
                ..
            }) = self.handles.lock().get_mut(&fh)
            {
                own.push(rec.clone());
                *wrote = true;
                *snapshot = None;
            }
            if let Some(kind) = &rec.error {
                failure = Some(FsError::of_ctl(kind, &rec.message));
                break;
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(data.len() as u32),
        }
    }

    pub fn release(&self, fh: u64) {
        let h = self.handles.close(fh);
        let ino = self.synth_openers.lock().remove(&fh).map(|(ino, _)| ino);
        let Some(Handle::Synth(..)) = h else { return };
        let mut all = self.open_synth.lock();
        let found = match ino {
            Some(ino) => all.get_mut(&ino).map(|o| o.open.remove(&fh)),
            None => None,
        };
        if found.is_none() {
            // Opened without a known thread: look the handle up everywhere.
            for o in all.values_mut() {
                o.open.remove(&fh);
            }
        }
        all.retain(|_, o| !o.open.is_empty());
    }

    /// Before computing `node`: the root's `audit.txt` reads every session, so every session
    /// is watched from then on (which makes it covered from its next request).
    fn before_computing(&self, node: &Node) {
        let Some(w) = &self.watcher else { return };
        if *node != Node::RootAudit || w.watches_all() {
            return;
        }
        if let Ok(d) = root::discover(&self.paths) {
            w.watch_all(&d.sessions);
        }
    }

    /// The inodes of the computed files that read an input that changed, and for `raw/`
    /// ranges their directory and name: the caller drops the kernel's caches of them.
    pub fn invalidate_computed(&self, c: &watch::Computed) -> Vec<(u64, Option<(u64, String)>)> {
        let mut out: Vec<(u64, Option<(u64, String)>)> = Vec::new();
        let mut push = |n: Node| {
            if let Some(ino) = self.inodes.get(&n) {
                out.push((ino, None));
            }
        };
        push(Node::RootAudit);
        match c {
            watch::Computed::Session(sid) => {
                for (_, k, _) in layout::computed_files() {
                    push(Node::Synth(sid.clone(), k));
                }
                let dir = self.inodes.get(&Node::RawDir(sid.clone()));
                for (ino, name) in self.inodes.raw_of(sid) {
                    out.push((ino, dir.map(|d| (d, name))));
                }
            }
            watch::Computed::Memory => push(Node::MemoryIndex),
            watch::Computed::Root => {}
        }
        out
    }

    /// `fsync` of a real file reaches the backing file; synthetic files have nothing to sync.
    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<(), FsError> {
        let f = match self.handles.lock().get(&fh) {
            Some(Handle::Real(f)) => f.clone(),
            Some(_) => return Ok(()),
            None => return Err(FsError::BadHandle),
        };
        if datasync {
            f.sync_data()?;
        } else {
            f.sync_all()?;
        }
        Ok(())
    }

    /// `fsyncdir` reaches the backing directory.
    pub fn fsyncdir(&self, ino: u64) -> Result<(), FsError> {
        let (b, rel) = match self.node(ino)? {
            Node::Real(b, rel) => (b, rel),
            Node::MemoryDir => (Base::Memory, PathBuf::new()),
            _ => return Ok(()),
        };
        let d = self.backing.open_dir(b, &rel)?;
        // SAFETY: a valid open descriptor.
        if unsafe { libc::fsync(d.raw()) } < 0 {
            return Err(FsError::from(std::io::Error::last_os_error()));
        }
        Ok(())
    }

    // ---- changes ---------------------------------------------------------------------------

    /// The backing directory where a child of `parent` may be created, removed or renamed:
    /// only `memory/` accepts new names.
    fn mutable_dir(&self, parent: &Node) -> Result<(Base, PathBuf), FsError> {
        match parent {
            Node::MemoryDir => Ok((Base::Memory, PathBuf::new())),
            _ => Err(FsError::Access),
        }
    }

    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Result<(Entry, Opened), FsError> {
        let p = self.node(parent)?;
        let (b, dir) = self.mutable_dir(&p)?;
        self.opts.writable()?;
        if !real::valid_component(name) {
            return Err(FsError::Invalid("bad name".into()));
        }
        if name == "MEMORY.md" {
            return Err(FsError::Access);
        }
        let rel = dir.join(name);
        let node = Node::Real(b, rel.clone());
        let keep_cache = self.covered(&node, false);
        let f = Arc::new(self.backing.create(
            b,
            &rel,
            (flags & !libc::O_NOFOLLOW) | libc::O_CREAT,
            mode & 0o7777,
        )?);
        let ino = self.inodes.lookup(&node);
        let e = self.attr_of(&node, ino)?;
        let fh = self.new_handle(Handle::Real(f.clone()));
        Ok((
            e,
            Opened {
                fh,
                direct_io: false,
                keep_cache,
                backing: Some(f),
                stale_attr: false,
            },
        ))
    }

    pub fn unlink(&self, parent: u64, name: &OsStr) -> Result<(), FsError> {
        let p = self.node(parent)?;
        let child = self.child(&p, name)?;
        let (b, _) = self.mutable_dir(&p)?;
        self.opts.writable()?;
        let Node::Real(_, rel) = &child else {
            return Err(FsError::Access);
        };
        self.backing.unlink(b, rel)?;
        self.inodes.remove(&child);
        Ok(())
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> Result<(), FsError> {
        let p = self.node(parent)?;
        let np = self.node(newparent)?;
        let (b, _) = self.mutable_dir(&p)?;
        let (nb, _) = self.mutable_dir(&np)?;
        self.opts.writable()?;
        if b != nb {
            return Err(FsError::CrossDevice);
        }
        if !real::valid_component(newname) {
            return Err(FsError::Invalid("bad name".into()));
        }
        if name == "MEMORY.md" || newname == "MEMORY.md" {
            return Err(FsError::Access);
        }
        let from = PathBuf::from(name);
        let to = PathBuf::from(newname);
        self.backing.rename(b, &from, &to, flags)?;
        self.inodes.rename(&Node::Real(b, from), &Node::Real(b, to));
        Ok(())
    }

    pub fn setattr(&self, ino: u64, fh: Option<u64>, set: &SetAttr) -> Result<Entry, FsError> {
        let node = self.node(ino)?;
        match &node {
            Node::Ctl(_) => {
                // `echo … > ctl` truncates first: accepted and ignored.
                if set.size.is_some_and(|s| s != 0)
                    || set.mode.is_some()
                    || set.uid.is_some()
                    || set.gid.is_some()
                {
                    return Err(FsError::Perm);
                }
                self.attr_of(&node, ino)
            }
            Node::Real(b, rel) => {
                self.opts.writable()?;
                if let Some(size) = set.size {
                    let handle_file = fh.and_then(|fh| match self.handles.lock().get(&fh) {
                        Some(Handle::Real(f)) => Some(f.clone()),
                        _ => None,
                    });
                    match handle_file {
                        Some(f) => f.set_len(size)?,
                        None => self.backing.truncate(*b, rel, size)?,
                    }
                }
                if let Some(mode) = set.mode {
                    self.backing.chmod(*b, rel, mode & 0o7777)?;
                }
                if set.uid.is_some() || set.gid.is_some() {
                    self.backing.chown(*b, rel, set.uid, set.gid)?;
                }
                let now = SystemTime::now();
                let at = if set.atime_now { Some(now) } else { set.atime };
                let mt = if set.mtime_now { Some(now) } else { set.mtime };
                if at.is_some() || mt.is_some() {
                    self.backing
                        .utimes(*b, rel, at.map(to_timespec), mt.map(to_timespec))?;
                }
                self.attr_of(&node, ino)
            }
            Node::MemoryDir => {
                self.opts.writable()?;
                Err(FsError::Perm)
            }
            _ => {
                self.opts.writable()?;
                Err(FsError::Perm)
            }
        }
    }

    /// `statfs` of the transcripts directory.
    pub fn statfs(&self) -> Result<libc::statvfs, FsError> {
        let p = std::ffi::CString::new(self.paths.transcripts.as_os_str().as_bytes())
            .map_err(|_| FsError::Invalid("path".into()))?;
        // SAFETY: zeroed statvfs is a valid out-parameter.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers.
        if unsafe { libc::statvfs(p.as_ptr(), &mut s) } < 0 {
            return Err(FsError::from(std::io::Error::last_os_error()));
        }
        Ok(s)
    }

    /// Bytes held by the synthetic-content cache.
    pub fn cached_bytes(&self) -> usize {
        self.synth.cached_bytes()
    }
}

/// Target of every session's `memory` link.
pub const MEMORY_LINK: &str = "../../memory";

fn scope_key(s: &Scope) -> Option<String> {
    match s {
        Scope::Session(sid) => Some(sid.clone()),
        Scope::Root => None,
    }
}

fn slice(data: &[u8], offset: u64, size: u32) -> Vec<u8> {
    window(data, offset, size).to_vec()
}

/// The bytes of `data` a read of `size` bytes at `offset` returns.
pub fn window(data: &[u8], offset: u64, size: u32) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let end = start.saturating_add(size as usize).min(data.len());
    data.get(start..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{FsError, FsOptions, WATCHED_TTL};
    use crate::config::Config;

    fn options(ttl_ms: u64, read_only: bool) -> FsOptions {
        let cfg = Config {
            ttl_ms,
            ..Config::default()
        };
        FsOptions::new(&cfg, read_only)
    }

    #[test]
    fn ttl_zero_turns_off_every_cache_and_others_keep_watched_nodes_long() {
        let none = options(0, false);
        assert!(!none.kernel_caching());
        assert_eq!(
            (none.real_ttl, none.watched_ttl),
            (Duration::ZERO, Duration::ZERO)
        );
        let some = options(500, false);
        assert!(some.kernel_caching());
        assert_eq!(some.real_ttl, Duration::from_millis(500));
        assert_eq!(some.watched_ttl, WATCHED_TTL);
        let long = options(2 * WATCHED_TTL.as_millis() as u64, false);
        assert_eq!(long.watched_ttl, long.real_ttl);
    }

    #[test]
    fn a_link_target_the_kernel_keeps_expires_after_the_ttl_unless_watched() {
        let o = options(700, false);
        assert_eq!(o.link_expiry(false, true), Some(Duration::from_millis(700)));
        assert_eq!(o.link_expiry(true, true), None);
        assert_eq!(o.link_expiry(false, false), None);
        assert_eq!(o.link_expiry(true, false), None);
    }

    #[test]
    fn read_only_refuses_changes_with_erofs_and_the_namespace_with_eperm_otherwise() {
        let ro = options(1000, true);
        assert_eq!(ro.writable(), Err(FsError::ReadOnly));
        assert_eq!(ro.namespace_change().errno(), libc::EROFS);
        let rw = options(1000, false);
        assert_eq!(rw.writable(), Ok(()));
        assert_eq!(rw.namespace_change().errno(), libc::EPERM);
    }
}
