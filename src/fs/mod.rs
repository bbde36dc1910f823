//! The filesystem without fuser. [`NormaFs`] is a façade over owners, each in its own file:
//! `reply` (what operations answer), `options` (TTLs, caching, the read-only guard),
//! [`layout`] (the one table of what a session directory shows), `namespace` (names and
//! listings), `attr` (attributes and their TTLs), `dirs` (directory passes), `files`
//! (opening, reading and writing handles; the handles themselves in `handles`, the
//! version of a computed file each inode stands for in `versions`), [`ctl`] (commands and the ctl log) and `changes`
//! (creating, removing, renaming and `setattr`); nodes, inodes and errors beside them. The
//! adapter in `crate::fuse` translates kernel requests into these calls.
//!
//! Every method returns plain structs or an [`FsError`]; tests drive this layer with no mount.

pub mod ahead;
pub mod computed;
mod computed_inodes;
mod ctl_log;
pub mod error;
mod growth;
mod handles;
pub mod inode;
pub mod layout;
mod listings;
pub mod node;
pub mod open;
mod ops;
mod options;
pub mod real;
mod reply;
pub mod testhook;
pub mod versions;
pub mod watch;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::config::Config;
use crate::store::root::{self, RootPaths};

pub use computed::session_files::SessionFiles;
use computed::Computed;
use ctl_log::CtlLog;
pub use ctl_log::CTL_HISTORY;
pub use error::FsError;
use handles::HandleTable;
pub use inode::ROOT_INO;
pub use layout::{ComputedFile, DependsOn, LayoutError};
use listings::Listings;
pub use node::{Base, ComputedKind, Node};
pub use options::{FsOptions, WATCHED_TTL};
use real::Backing;
pub use reply::window;
pub use reply::PlusReplier;
pub use reply::{Attr, DirEntry, Entry, FileKind, Opened, PlusEntry, SetAttr};
#[cfg(feature = "testhook")]
pub use testhook::{
    set_before_computed_entry, set_before_mapped_reply, set_panic_on_lookup, set_panic_on_request,
};
pub use versions::TailDrop;
use versions::Versions;

/// The filesystem: the root's paths and settings, and the owners of its state.
pub struct NormaFs {
    paths: RootPaths,
    backing: Backing,
    opts: FsOptions,
    inodes: inode::InodeTable,
    /// Computed files' contents, cached.
    computed: Computed,
    handles: HandleTable,
    /// The version each computed file's inode stands for, and the attributes told of them.
    versions: Versions,
    /// The sizes told of real files that grow while read through the page cache.
    growth: growth::Growth,
    ctl_log: CtlLog,
    listings: Listings,
    /// Sessions to make ahead of a reader of the whole tree (see `fs/ahead.rs`).
    ahead: Arc<ahead::Ahead>,
    started: SystemTime,
    /// Reports changes in the backing directories; decides which nodes get `watched_ttl`.
    watcher: Option<Arc<watch::Watcher>>,
    /// The largest write the kernel sends, as negotiated when it mounted (0: not mounted,
    /// `opts.max_write` stands).
    kernel_max_write: std::sync::atomic::AtomicU32,
    /// Where changes the mount makes itself are told to the kernel (see
    /// [`NormaFs::set_tell_kernel`]).
    tell_kernel: std::sync::OnceLock<TellKernel>,
    /// The kernel opens files itself (`--no-open`): its reads name no handle.
    kernel_opens: std::sync::atomic::AtomicBool,
}

/// Tells the kernel to drop what it keeps of `Inval`, [`When`] it says.
pub type TellKernel = std::sync::Arc<dyn Fn(watch::Inval, When) + Send + Sync>;

/// How many bytes of the computed versions the kernel read (and may read again until it
/// forgets their inodes) stay in memory when the kernel opens files itself, at most (and at
/// most a quarter of the cache's budget); the rest is kept in unlinked files in the temporary
/// directory.
pub const PINNED_IN_MEMORY: u64 = 16 << 20;

/// When the kernel is told (see [`TellKernel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Soon; the caller goes on.
    Soon,
    /// Now: the caller returns once it was told (or after a bound: a mount never waits on
    /// the kernel for long).
    Now,
    /// At that time (a version current until then: whether a session looks live changes
    /// with time alone).
    At(Instant),
}

/// A mount's filesystem being set up, before it serves requests (see [`NormaFs::setup`]).
pub struct Setup(NormaFs);

impl Setup {
    /// Where the mount is: summaries name their archives inside it when a session's
    /// `archive_paths` is `mount`.
    pub fn mountpoint(mut self, mnt: &std::path::Path) -> Setup {
        self.0.computed.set_mountpoint(mnt);
        self
    }

    /// Let the cache budget bound the process's resident memory: the process is this mount's
    /// (see [`crate::store::cache::Cache`]).
    pub fn bounding_resident_memory(mut self) -> Setup {
        self.0.computed.bound_resident();
        self
    }

    /// Hold at most `n` real files open for their inodes (see `InodeTable`).
    pub fn files_held_at_most(self, n: usize) -> Setup {
        self.0.inodes.set_cap(n);
        self
    }

    /// Show computed file `f` in every session directory, after the built-in ones: a name
    /// a session directory shows, or may show, is refused.
    pub fn computed_file(
        mut self,
        f: &'static layout::ComputedFile,
    ) -> Result<Setup, layout::LayoutError> {
        self.0.computed.add_file(f)?;
        Ok(self)
    }

    /// Use `w`'s coverage for TTLs and caching. Without a watcher every node gets `real_ttl`
    /// and nothing is kept across opens.
    pub fn watcher(mut self, w: Option<Arc<watch::Watcher>>) -> Setup {
        self.0.watcher = w;
        self
    }

    pub fn build(self) -> NormaFs {
        self.0
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
            computed: Computed::new(paths.clone(), cfg.clone()),
            paths,
            backing,
            opts,
            inodes: inode::InodeTable::new(),
            handles: HandleTable::new(),
            versions: Versions::default(),
            growth: growth::Growth::default(),
            ctl_log: CtlLog::default(),
            listings: Listings::default(),
            ahead: Arc::default(),
            started: SystemTime::now(),
            watcher: None,
            kernel_max_write: std::sync::atomic::AtomicU32::new(0),
            tell_kernel: std::sync::OnceLock::new(),
            kernel_opens: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A filesystem to set up before it serves requests: `NormaFs::setup(..).watcher(w)
    /// .build()`.
    pub fn setup(paths: RootPaths, cfg: Config, opts: FsOptions) -> Setup {
        Setup(NormaFs::new(paths, cfg, opts))
    }

    /// Whether every change that can make the kernel's cache of `node` stale is reported
    /// (`dir`: as a directory). Asked before reading what a reply will say.
    pub(super) fn covered(&self, node: &Node, dir: bool) -> bool {
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

    /// Let go of the real files held for their inodes that no handle shares and whose grace
    /// is over (called every half second while mounted); how many.
    /// The bytes of versions held for lookups and of their computations are let go too, and
    /// the heap given back when they were much: a `stat`, `ls -l` or `du` keeps none of them.
    pub fn let_go_idle_files(&self) -> usize {
        let freed = self.versions.let_go_idle() + self.computed.let_go_recent();
        // Pinned bytes the cache or a computation let go of since are counted now.
        self.versions.trim_all();
        self.computed.give_back_heap(freed);
        self.inodes.let_go_idle()
    }

    /// The queue of sessions to make ahead of a reader (see `fs/ahead.rs`), for the thread
    /// that makes them ([`NormaFs::make_ahead`]).
    pub fn ahead(&self) -> Arc<ahead::Ahead> {
        self.ahead.clone()
    }

    /// Make session `sid`'s files ahead of a reader, unless they are made, the session is
    /// gone, or it is made one file at a time (see `computed::ALL_AT_ONCE`: its files are
    /// large and made only when asked for).
    /// Not under a budget smaller than four times what is kept at hand
    /// (`computed::RECENT_BYTES`): made ahead, a session's bytes are held outside the budget
    /// until their reader comes, which a small budget does not mean to pay for.
    pub fn make_ahead(&self, sid: &str) {
        if (self.computed.budget() as u64) < 4 * computed::RECENT_BYTES || !self.session_exists(sid)
        {
            return;
        }
        let small = std::fs::metadata(self.paths.transcript_path(sid))
            .is_ok_and(|m| m.len() <= computed::ALL_AT_ONCE);
        if !small {
            return;
        }
        let node = Node::Computed(sid.to_string(), node::ComputedKind::VIEW);
        if self.computed.known_now(&node).is_some() {
            return;
        }
        // Watched before its inputs are looked at, as when the reader lists it: what is made
        // stays known current while no change is reported.
        self.known_to_kernel(&Node::Session(sid.to_string()));
        let covered = self.covered(&node, false);
        if let Err(e) = self.computed.current(&node, covered, computed::Want::Ahead) {
            tracing::debug!("{sid} not made ahead: {e:?}");
        }
    }

    /// How many real files are held open for their inodes.
    pub fn files_held(&self) -> usize {
        self.inodes.files_held()
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
    pub fn record_max_write(&self, max_write: u32) {
        self.kernel_max_write
            .store(max_write, std::sync::atomic::Ordering::Relaxed);
    }

    /// The largest write the kernel sends: as negotiated, or as asked before a mount.
    pub fn max_write(&self) -> u32 {
        match self
            .kernel_max_write
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => self.opts.max_write,
            n => n,
        }
    }

    /// Have the sizes of open computed files that grow told to the kernel only after the
    /// page their last size ended in is dropped (see `Versions::set_tail_drops`), and with
    /// `real_files` (the mount reads them through the page cache: no passthrough) those of
    /// real files that grow (`fs/growth.rs`): the mount drops each [`TailDrop`] sent to `tx`
    /// through [`NormaFs::drop_tail`]. Only where the kernel keeps pages.
    pub fn set_tail_drops(&self, tx: std::sync::mpsc::Sender<TailDrop>, real_files: bool) {
        if self.opts.kernel_caching() {
            if real_files {
                self.growth.set_tail_drops(tx.clone());
            }
            self.versions.set_tail_drops(tx);
        }
    }

    /// Carry out drop `d` with `drop_pages` (which has the kernel drop the inode's pages
    /// from the given offset on), measuring before it what it makes safe to tell.
    pub fn drop_tail(&self, d: TailDrop, drop_pages: impl FnOnce(u64)) {
        let from = d.from - d.from % real::page_size() as u64;
        tracing::debug!("tail drop of inode {} from {from}", d.ino);
        if self.growth.tracked(d.ino).is_some() {
            self.drop_real_pages(d.ino, || drop_pages(from));
        } else if let Some(head) = self.versions.head_len(d.ino) {
            drop_pages(from);
            self.versions.pages_dropped(d.ino, from);
            self.versions.tail_dropped(d.ino, head);
        }
    }

    /// Run `drop`, which has the kernel drop pages of `ino` including those of any drop
    /// asked for: for a real file whose growth is held back, its size just before is what
    /// may be told after (`fs/growth.rs`).
    pub fn drop_real_pages<T>(&self, ino: u64, drop: impl FnOnce() -> T) -> T {
        let Some(epoch) = self.growth.tracked(ino) else {
            return drop();
        };
        let head = self.real_seen(ino);
        let r = drop();
        self.growth.dropped(ino, epoch, head);
        r
    }

    /// A stat of real file `ino` now: its held file's, else its name's while that is still
    /// the inode's file.
    fn real_seen(&self, ino: u64) -> Option<growth::Seen> {
        let st = match self.inodes.held_file(ino) {
            Some(h) => real::fstat_ident(&h.file).ok()?.0,
            None => match self.node(ino).ok()? {
                Node::Real(b, rel) => {
                    let (st, id) = self.backing.lstat_ident(b, &rel).ok()?;
                    self.inodes.same_file(ino, id).then_some(st)?
                }
                _ => return None,
            },
        };
        Some(growth::Seen {
            size: st.st_size as u64,
            ctime: computed::systime(st.st_ctime, st.st_ctime_nsec),
        })
    }

    /// The mount had the kernel drop the pages of computed inode `ino` from offset `from` on
    /// (see `Versions::whole`).
    pub fn computed_pages_dropped(&self, ino: u64, from: u64) {
        self.versions.pages_dropped(ino, from);
    }

    /// Inodes the kernel holds (to drop all it may have cached).
    pub fn held_inodes(&self) -> Vec<u64> {
        self.inodes.looked_up()
    }

    pub fn lookup_count(&self, ino: u64) -> u64 {
        self.inodes.lookups(ino)
    }

    pub(super) fn session_exists(&self, sid: &str) -> bool {
        crate::store::session::exists(&self.paths, sid)
    }

    /// Before computing `node`: the root's `audit.txt` reads every session, so every session
    /// is watched from then on (which makes it covered from its next request).
    pub(super) fn before_computing(&self, node: &Node) {
        let Some(w) = &self.watcher else { return };
        if *node != Node::RootAudit || w.watches_all() {
            return;
        }
        if let Ok(d) = root::discover(&self.paths) {
            w.watch_all(&d.sessions);
        }
    }

    /// The computed files that read an input that changed: each inode, whether it has open
    /// handles (their pages are still the bytes they read), and its directory and name. The
    /// caller drops the kernel's attributes of them and their names (the next lookup finds
    /// whether the content is still the inode's version, `fs/versions.rs`).
    /// The settings in effect.
    pub fn settings(&self) -> std::sync::Arc<Config> {
        self.computed.cfg()
    }

    /// The settings files changed: `loaded` is what they give now, or why they cannot be
    /// used (the settings in effect stay, and every `audit.txt` says why). What the kernel
    /// must drop: the computed files of each session the change concerns, and the root's.
    pub fn settings_changed(
        &self,
        loaded: Result<Config, computed::SettingsError>,
    ) -> Vec<watch::Inval> {
        let sessions = match loaded {
            Ok(cfg) => self.computed.replace_settings(cfg),
            Err(e) => self.computed.settings_failed(e),
        };
        sessions
            .into_iter()
            .map(|s| watch::Inval::Computed(watch::Affected::Session(s)))
            .chain([watch::Inval::Computed(watch::Affected::Root)])
            .collect()
    }

    pub fn invalidate_computed(&self, c: &watch::Affected) -> Vec<Invalidated> {
        // First: a request from now on checks the inputs again (unless they turn out the same
        // as every version known of the session's files was made from).
        let changed = self.computed.changed(c);
        let mut out = Vec::new();
        let mut push = |n: Node, parent: Node, name: &str| {
            if let Some(ino) = self.inodes.get(&n) {
                out.push(Invalidated {
                    ino,
                    open: self.versions.is_open(ino),
                    entry: self.inodes.get(&parent).map(|d| (d, name.to_string())),
                });
            }
        };
        push(Node::RootAudit, Node::Root, "audit.txt");
        match c {
            watch::Affected::Session(_) if !changed => {}
            watch::Affected::Session(sid) => {
                for k in self.computed.layout().computed_files() {
                    push(
                        Node::Computed(sid.clone(), k),
                        Node::Session(sid.clone()),
                        k.name(),
                    );
                }
                for (f, name) in [
                    (node::HistoryFile::Timeline, "timeline.jsonl"),
                    (node::HistoryFile::TimelineSvg, "timeline.svg"),
                    (node::HistoryFile::Page, "view.html"),
                ] {
                    push(
                        Node::History(Some(sid.clone()), f),
                        Node::HistoryDir(Some(sid.clone())),
                        name,
                    );
                }
                let dir = self.inodes.get(&Node::RawDir(sid.clone()));
                for (ino, name) in self.inodes.raw_of(sid) {
                    out.push(Invalidated {
                        ino,
                        open: self.versions.is_open(ino),
                        entry: dir.map(|d| (d, name)),
                    });
                }
            }
            watch::Affected::Memory => push(Node::MemoryIndex, Node::MemoryDir, "MEMORY.md"),
            watch::Affected::Root => {}
        }
        out
    }

    /// A ctl command of `scope` ran (from `since`): the computed files it may have changed
    /// hold no version from a lookup before it when the mount answers opens (see
    /// `Versions::release_holds`), so a script's next
    /// read shows its result even before the watcher reports the files it wrote. (Not on
    /// the watcher's reports: a live session changes every few milliseconds, and the hold
    /// is what lets the open that follows a lookup find what the lookup found.)
    pub(super) fn after_command(&self, scope: &crate::store::ctl::Scope, since: Instant) {
        let changed = match scope {
            crate::store::ctl::Scope::Session(sid) => watch::Affected::Session(sid.clone()),
            crate::store::ctl::Scope::Root => watch::Affected::Root,
        };
        match self.tell_kernel.get() {
            // The kernel forgets the session's names and attributes before the write that
            // ran the command returns: the writer's next `cat view.jsonl` finds the new
            // version (the kernel opens files itself and would read the inode it has).
            Some(tell) => {
                let files = self.invalidate_computed(&changed);
                // When the kernel opens files itself, a hold is what the first read of an
                // inode finds: the version whose size the kernel was told and sizes that read
                // by. Ended, the read made the inode stand for the content after the command,
                // whose bytes the kernel cut at the old size or filled with zeros past their
                // end (the live-writer soak read an audit.txt of 122 bytes and 150 zeros).
                // The names the kernel forgets now are looked up again: the lookup gives the
                // name a new inode for the new content.
                if !self.kernel_opens() {
                    self.versions
                        .release_holds(files.into_iter().map(|i| i.ino), since);
                }
                // The real files a command writes (state.json replaced, the journal
                // appended to, archives added), as the watcher would report them.
                if let crate::store::ctl::Scope::Session(sid) = scope {
                    for i in self.command_wrote(sid) {
                        tell(i, When::Soon);
                    }
                }
                tell(watch::Inval::Computed(changed), When::Now);
            }
            None => {
                let files = self.invalidate_computed(&changed);
                self.versions
                    .release_holds(files.into_iter().map(|i| i.ino), since);
            }
        }
    }

    /// What the kernel must drop of session `sid`'s real files once a ctl command wrote
    /// them: `state.json` (replaced), the journal `ctl.jsonl`, the session's listing and its
    /// tiers' (archives added).
    fn command_wrote(&self, sid: &str) -> Vec<watch::Inval> {
        let root = watch::Dir::ArchiveRoot(sid.to_string());
        let watched = |_: &str| true;
        let mut out = Vec::new();
        let replaced = libc::IN_MOVED_TO;
        let appended = libc::IN_MODIFY | libc::IN_CREATE;
        for (name, mask) in [
            (layout::STATE, replaced),
            (layout::CTL_LOG, appended),
            ("", libc::IN_ATTRIB),
        ] {
            out.extend(watch::plan(&root, std::ffi::OsStr::new(name), mask, &watched).invals);
        }
        for t in ["tier1", "tier2", "tier3"] {
            let tier = watch::Dir::Tier(sid.to_string(), t.to_string());
            out.extend(
                watch::plan(&tier, std::ffi::OsStr::new(""), libc::IN_ATTRIB, &watched).invals,
            );
        }
        out.retain(|i| !matches!(i, watch::Inval::Computed(_)));
        out
    }

    /// Have changes the mount makes itself (a ctl command, a ctl file's results) told to the
    /// kernel through `tell`, as the watcher tells it of changes behind the mount.
    pub fn set_tell_kernel(&self, tell: TellKernel) {
        // A session's files current until a time (it stops looking live then) are told gone
        // at that time: nothing else would tell the kernel, which keeps them meanwhile.
        let later = tell.clone();
        self.computed
            .on_current_until(Box::new(move |node: &Node, at: Instant| {
                if let Some(sid) = node.session_of() {
                    let affected = watch::Affected::Session(sid.to_string());
                    later(watch::Inval::Computed(affected), When::At(at));
                }
            }));
        let _ = self.tell_kernel.set(tell);
    }

    /// Tell the kernel to drop `i`, without waiting (a request handler may hold what the
    /// kernel needs for it).
    pub(super) fn tell_kernel_later(&self, i: watch::Inval) {
        if let Some(tell) = self.tell_kernel.get() {
            tell(i, When::Soon);
        }
    }

    /// The kernel opens files itself from now on (`--no-open`, answered when the mount
    /// starts): a lookup's hold keeps the bytes of the version it told the kernel of, which
    /// the first read of the inode then reads (no open comes between to tell the kernel of
    /// another size).
    pub fn set_kernel_opens(&self) {
        self.kernel_opens
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let budget = (self.computed.budget() as u64 / 4).min(PINNED_IN_MEMORY);
        self.versions
            .set_pinned_budget(budget, std::env::temp_dir());
        self.versions.hold_for(Duration::from_secs(2));
        self.versions.set_kernel_opens();
        self.computed.keep_small();
    }

    /// Whether the kernel opens files itself.
    pub(super) fn kernel_opens(&self) -> bool {
        self.kernel_opens.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the kernel is told of the changes the mount makes itself.
    pub(super) fn tells_kernel(&self) -> bool {
        self.tell_kernel.get().is_some()
    }

    /// A write to the ctl file of `scope` was answered: the kernel drops what it cached of
    /// the file (the written bytes among them), so a read after the write reads the results.
    pub(super) fn ctl_written(&self, scope: &crate::store::ctl::Scope) {
        if let Some(tell) = self.tell_kernel.get() {
            let sid = match scope {
                crate::store::ctl::Scope::Session(sid) => Some(sid.clone()),
                crate::store::ctl::Scope::Root => None,
            };
            // Not waited for: the kernel holds the file's pages until the write is answered.
            tell(
                watch::Inval::Inode {
                    node: Node::Ctl(sid),
                    data: true,
                },
                When::Soon,
            );
        }
    }

    /// `statfs` of the transcripts directory.
    pub fn statfs(&self) -> Result<libc::statvfs, FsError> {
        let p = CString::new(self.paths.transcripts.as_os_str().as_bytes())
            .map_err(|_| FsError::Invalid("path".into()))?;
        // SAFETY: zeroed statvfs is a valid out-parameter.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers.
        if unsafe { libc::statvfs(p.as_ptr(), &mut s) } < 0 {
            return Err(FsError::from(std::io::Error::last_os_error()));
        }
        Ok(s)
    }

    /// Bytes held by the computed-content cache.
    pub fn cached_bytes(&self) -> usize {
        self.computed.cached_bytes()
    }

    /// Computed bytes held a moment outside the cache: the last computation for a lookup's
    /// (see [`computed::RECENT`]).
    pub fn recent_bytes(&self) -> u64 {
        self.computed.recent_bytes()
    }

    /// How often computed files were made and their inputs checked (see
    /// [`computed::Counters`]).
    pub fn computed_counts(&self) -> computed::Counts {
        self.computed.counts()
    }

    /// Bytes counted against the cache's budget (computed bytes, parsed transcripts and
    /// states).
    pub fn cache_used(&self) -> usize {
        self.computed.budget_bytes()
    }

    /// Versions whose bytes are held for open handles or lookups: how many, and their bytes.
    pub fn held_versions(&self) -> (usize, u64) {
        self.versions.held()
    }

    /// The budget of the computed-file cache, in bytes.
    pub fn cache_budget(&self) -> usize {
        self.computed.budget()
    }

    /// Slots of the inode table, in use or free to be given again (its size).
    pub fn inode_numbers(&self) -> usize {
        self.inodes.len()
    }
}

/// A computed file whose inputs changed (see [`NormaFs::invalidate_computed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalidated {
    pub ino: u64,
    /// It has open handles.
    pub open: bool,
    /// Its directory's inode and its name, if the directory has an inode.
    pub entry: Option<(u64, String)>,
}

/// Target of every session's `memory` link.
pub const MEMORY_LINK: &str = "../../memory";
