//! The fuser adapter: each kernel request is converted into a [`NormaFs`] call and its result
//! into the reply. The mount itself is in `mount.rs` (how to mount in `mount/how.rs`, the
//! threads that tell the kernel what changed in `mount/notify.rs`), passthrough (the probe,
//! the backing ids, how an open is answered) in `passthrough.rs`, the foreground process's
//! signals in `signals.rs`.
//!
//! Decisions about the filesystem live in `fs/`; this file only translates. Every handler runs
//! its work inside `catch_unwind`: a panic is logged and answered with `EIO`, and the mount keeps
//! serving.
//!
//! Real files use kernel FUSE passthrough when the kernel grants it (decided once at mount by
//! registering one backing file; `--no-passthrough` turns it off; a backing id is kept per
//! inode and shared by its opens): reads and writes then go from the kernel straight to the
//! backing file. Otherwise they go through `NormaFs::read`/`write` (pread/pwrite on the
//! handle's backing file, large cached reads from mappings of it). How each open is read is
//! `fs/open.rs`'s decision: the page cache kept across opens for watched real files and for
//! computed files (an inode stands for one version of a computed file), direct I/O for `ctl`,
//! unwatched real files and everything under `--ttl-ms 0`. Nodes covered by inotify get a long
//! attribute and entry TTL and directory listings cached by the kernel; the watcher invalidates
//! them on every change (`fs/watch.rs`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use crate::fs::open::{self, Access, ReadPath, Share};
use crate::fs::{Attr, DirEntry, FileKind, FsError, NormaFs, Opened, PlusReplier, SetAttr};

mod helper;
mod mount;
mod passthrough;
use passthrough::{Backings, OpenAs};
mod signals;

pub use mount::{mount_background, MountHandle};
pub use signals::report_on;
pub use signals::{block_exit_signals, wait_for_exit};

thread_local! {
    /// A worker's buffer for reads of a computed file that span two of its pieces.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The largest [`SCRATCH`] a worker keeps between reads (the kernel reads at most a few MiB).
const SCRATCH_KEPT: usize = 4 << 20;

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Refuse every change (`EROFS`), ctl commands that would write included.
    pub read_only: bool,
    /// With `no_open` off: use kernel FUSE passthrough for real files when the kernel allows
    /// it (`-o passthrough`).
    pub passthrough: bool,
    /// Answer OPEN `ENOSYS` once (the default): the kernel then opens every file itself,
    /// keeping its pages across opens, and sends no OPEN, FLUSH or RELEASE; its reads and
    /// writes go through each inode's implicit handle (`NormaFs::implicit_handle`). No
    /// passthrough then (it is given at OPEN). Off (`-o passthrough`): every open is
    /// answered, today's per-open path.
    pub no_open: bool,
    /// Let other users reach the mount (`allow_other`; needs `user_allow_other` for non-root).
    pub allow_other: bool,
    /// Worker threads, each with its own `/dev/fuse` descriptor.
    pub threads: usize,
    /// Have `fusermount3` unmount when this process ends, even by `kill -9`.
    pub auto_unmount: bool,
    /// Mount `noexec`.
    pub no_exec: bool,
    /// What `mount` and `df` show as the mount's source (the root's path); `normafs` when
    /// not given.
    pub source: Option<std::path::PathBuf>,
    /// Computed files shown in every session directory besides the built-in ones (see
    /// `NormaFs::setup(..).computed_file(..)`).
    pub computed_files: Vec<&'static crate::fs::ComputedFile>,
    /// Where the settings came from: their files are watched, and a change applied while
    /// mounted. `None`: the settings given stay.
    pub settings: Option<crate::config::Sources>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            passthrough: false,
            no_open: true,
            allow_other: false,
            threads: 4,
            auto_unmount: false,
            no_exec: false,
            source: None,
            computed_files: Vec::new(),
            settings: None,
        }
    }
}

/// How many requests of each kind the kernel sent: what `kill -USR1` prints and the bench
/// reports (a warm pass over covered files should send no `LOOKUP` or `GETATTR`).
#[derive(Default)]
pub struct Requests {
    counts: [AtomicU64; Requests::OPS.len()],
}

impl Requests {
    /// The operations counted, by the name their handler runs under.
    const OPS: [&'static str; 16] = [
        "lookup",
        "getattr",
        "open",
        "read",
        "write",
        "release",
        "flush",
        "readdir",
        "readdirplus",
        "opendir",
        "forget",
        "setattr",
        "readlink",
        "statfs",
        "create",
        "other",
    ];

    fn count(&self, op: &str) {
        let i = Self::OPS
            .iter()
            .position(|o| *o == op)
            .unwrap_or(Self::OPS.len() - 1);
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Each operation and its count so far.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        Self::OPS
            .iter()
            .zip(&self.counts)
            .map(|(o, c)| (*o, c.load(Ordering::Relaxed)))
            .collect()
    }
}

/// What the mount agreed with the kernel.
#[derive(Default)]
struct Shared {
    /// Requests received, by kind.
    requests: Requests,
    /// The filesystem as initialized (after `max_write` was negotiated).
    fs: OnceLock<Arc<NormaFs>>,
    /// The kernel granted `FUSE_PASSTHROUGH`.
    kernel_passthrough: AtomicBool,
    /// Tells the kernel to drop caches (set once the session exists).
    notifier: OnceLock<Notifier>,
    /// `OPENDIR` is answered `ENOSYS` (see `opendir`).
    no_opendir: AtomicBool,
    /// The kernel keeps symbolic links' targets (see `readlink`).
    cache_symlinks: AtomicBool,
    /// Inodes whose cached pages the kernel must drop at a given time (see `expire_later`).
    expire: OnceLock<Mutex<std::sync::mpsc::Sender<(std::time::Instant, u64)>>>,
    /// Real files are opened with passthrough (decided once, at mount).
    passthrough: AtomicBool,
}

/// The kernel's `readdirplus` buffer as the filesystem fills it.
struct PlusReply<'r>(&'r mut ReplyDirectoryPlus);

impl PlusReplier for PlusReply<'_> {
    fn add(&mut self, e: &DirEntry, attr: &Attr, ttl: std::time::Duration) -> bool {
        let next = u64::try_from(e.offset).unwrap_or(0);
        self.0.add(
            INodeNo(attr.ino),
            next,
            &e.name,
            &ttl,
            &file_attr(attr),
            Generation(0),
        )
    }
}

/// The fuser [`Filesystem`] of normafs.
pub struct NormaFuse {
    fs: Arc<NormaFs>,
    want_passthrough: bool,
    /// OPEN is answered `ENOSYS` (see `MountOptions::no_open`).
    no_open: bool,
    /// Let the kernel open directories without OPENDIR (see `init`).
    zero_opendir: bool,
    shared: Arc<Shared>,
    backings: Mutex<Backings>,
}

fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::Dir => FileType::Directory,
        FileKind::File => FileType::RegularFile,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.ctime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 4096,
        flags: 0,
    }
}

fn time_of(t: Option<TimeOrNow>) -> (Option<SystemTime>, bool) {
    match t {
        Some(TimeOrNow::SpecificTime(t)) => (Some(t), false),
        Some(TimeOrNow::Now) => (None, true),
        None => (None, false),
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Log a failed request at the level its error carries.
fn log_error(op: &str, e: &FsError) {
    match e.level() {
        tracing::Level::DEBUG => tracing::debug!("{op}: {e}"),
        tracing::Level::WARN => tracing::warn!("{op}: {e}"),
        _ => tracing::info!("{op}: {e}"),
    }
}

/// The largest write the kernel will send, given what we ask: without `FUSE_MAX_PAGES` it
/// splits at 32 pages; with it, at `fs.fuse.max_pages_limit` pages (256 by default).
fn kernel_max_write(want: u32, caps: InitFlags) -> u32 {
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as u32,
        _ => 4096,
    };
    let pages: u32 = if caps.contains(InitFlags::FUSE_MAX_PAGES) {
        std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(256)
    } else {
        32
    };
    want.min(pages.saturating_mul(page)).max(4096)
}

impl NormaFuse {
    /// The handle a request of `ino` goes through: `fh`, or when the kernel opened the file
    /// itself (handle 0), the inode's implicit one (writing with `write`).
    fn handle_of(&self, ino: INodeNo, fh: FileHandle, write: bool) -> Result<u64, FsError> {
        match fh.0 {
            0 => self.fs.implicit_handle(ino.0, write),
            fh => Ok(fh),
        }
    }

    /// Run `f`; a panic becomes `EIO`, an error its errno (both logged).
    fn run<T>(&self, op: &str, f: impl FnOnce() -> Result<T, FsError>) -> Result<T, Errno> {
        self.shared.requests.count(op);
        self.run_uncounted(op, f)
    }

    /// [`NormaFuse::run`] for the second part of a request already counted.
    fn run_uncounted<T>(
        &self,
        op: &str,
        f: impl FnOnce() -> Result<T, FsError>,
    ) -> Result<T, Errno> {
        match catch_unwind(AssertUnwindSafe(|| {
            crate::fs::testhook::on_request(op);
            f()
        })) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                log_error(op, &e);
                Err(Errno::from_i32(e.errno()))
            }
            Err(p) => {
                tracing::error!("{op}: panic: {}; answered EIO", panic_message(&*p));
                Err(Errno::EIO)
            }
        }
    }

    /// The kernel's directory offset as the filesystem's.
    fn dir_offset(offset: u64) -> i64 {
        i64::try_from(offset).unwrap_or(i64::MAX)
    }
}

impl Filesystem for NormaFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let want = self.fs.options().max_write;
        let mut accepted = kernel_max_write(want, config.capabilities());
        if let Err(nearest) = config.set_max_write(accepted) {
            accepted = nearest;
            let _ = config.set_max_write(accepted);
        }
        self.fs.record_max_write(accepted);
        // Shared mmap of real files opened with direct I/O (kernels 6.6+).
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        // Directories opened by the kernel itself, their listings checked against their
        // mtime (see `opendir`); not under `--ttl-ms 0`, which asks for no caching at all.
        // Not under auto_unmount: fusermount3 tells a dead mount by an open of its root
        // failing, and without OPENDIR the kernel opens it without asking anyone.
        // Without OPEN the kernel keeps every file's pages across opens, and drops them when
        // a file's size or mtime changes: with `--ttl-ms 0` too.
        if self.fs.options().kernel_caching() || self.no_open {
            let _ = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA);
        }
        if self.fs.options().kernel_caching()
            && self.zero_opendir
            && config
                .capabilities()
                .contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            && config
                .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
                .is_ok()
        {
            self.shared.no_opendir.store(true, Ordering::Relaxed);
        }
        // Links' targets kept by the kernel (`ls -l` reads every session's `memory` link);
        // not under `--ttl-ms 0`.
        if self.fs.options().kernel_caching()
            && config
                .add_capabilities(InitFlags::FUSE_CACHE_SYMLINKS)
                .is_ok()
        {
            self.shared.cache_symlinks.store(true, Ordering::Relaxed);
        }
        // Attributes with the listing, in the kernel's auto mode (the first pass over a
        // directory, and passes after lookups in it): a cold `grep -r` or `ls -l` then sends
        // no `LOOKUP` per real name (see `readdirplus`); not under `--ttl-ms 0`.
        if self.fs.options().kernel_caching() {
            let _ = config.add_capabilities(
                InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO,
            );
        }
        if self.want_passthrough && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok() {
            // Depth 2: backing files may live on a stacked filesystem (overlayfs).
            let _ = config.set_max_stack_depth(2);
            self.shared
                .kernel_passthrough
                .store(true, Ordering::Relaxed);
        }
        let _ = self.shared.fs.set(self.fs.clone());
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.run("lookup", || self.fs.lookup(parent.0, name)) {
            Ok(e) => {
                reply.entry_with_ttls(&e.ttl, &e.entry_ttl, &file_attr(&e.attr), Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _ = self.run("forget", || {
            self.fs.forget(ino.0, nlookup);
            self.let_go_backing(ino.0);
            Ok(())
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let fh = fh.map(|f| f.0).filter(|&f| f != 0);
        match self.run("getattr", || self.fs.getattr_by(ino.0, fh)) {
            Ok(e) => reply.attr(&e.ttl, &file_attr(&e.attr)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let (atime, atime_now) = time_of(atime);
        let (mtime, mtime_now) = time_of(mtime);
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            atime_now,
            mtime_now,
        };
        let fh = fh.map(|f| f.0).filter(|&f| f != 0);
        match self.run("setattr", || self.fs.setattr(ino.0, fh, &set)) {
            Ok(e) => reply.attr(&e.ttl, &file_attr(&e.attr)),
            Err(e) => reply.error(e),
        }
    }

    /// With `FUSE_CACHE_SYMLINKS` the kernel keeps a link's target like a file's pages: a
    /// target the watcher does not cover is dropped again after the TTL.
    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.run("readlink", || {
            let kept = self.fs.link_kept(ino.0);
            self.fs.readlink(ino.0).map(|d| (d, kept))
        }) {
            Ok((d, kept)) => {
                reply.data(&d);
                let keeps = self.shared.cache_symlinks.load(Ordering::Relaxed);
                if let Some(after) = self.fs.options().link_expiry(kept, keeps) {
                    if let Some(x) = self.shared.expire.get() {
                        let _ = x.lock().send((std::time::Instant::now() + after, ino.0));
                    }
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_namespace_change());
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_namespace_change());
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.run("unlink", || self.fs.unlink(parent.0, name)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.no_namespace_change());
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_namespace_change());
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.run("rename", || {
            self.fs
                .rename(parent.0, name, newparent.0, newname, flags.bits())
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(self.no_namespace_change());
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.no_open {
            // Once: the kernel opens files itself from then on (FUSE_NO_OPEN_SUPPORT).
            self.shared.requests.count("open");
            return reply.error(Errno::ENOSYS);
        }
        match self.run("open", || {
            let o = self.fs.open(ino.0, flags.0)?;
            if o.stale_attr {
                // Attributes only (no pages, no lock the kernel may hold): the handle's
                // first read asks for the size of what it reads.
                if let Some(n) = self.shared.notifier.get() {
                    if let Err(e) = n.inval_inode(ino, -1, 0) {
                        tracing::debug!("invalidate attributes of inode {}: {e}", ino.0);
                    }
                }
            }
            let how = self.open_as(ino.0, flags.0, &o, &|f| reply.open_backing(f));
            Ok((o.fh, how))
        }) {
            Ok((fh, OpenAs::Passthrough(id))) => {
                reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id)
            }
            Ok((fh, OpenAs::Plain(f))) => reply.opened(FileHandle(fh), f),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // A computed file's bytes are sent as they are, without a copy; a real file's large
        // reads straight from a mapping of its page cache.
        let fh = match self.run("read", || self.handle_of(ino, fh, false)) {
            Ok(fh) => fh,
            Err(e) => return reply.error(e),
        };
        if let Ok(Some((w, range))) =
            self.run_uncounted("read", || Ok(self.fs.read_mapped(fh, offset, size)))
        {
            crate::fs::testhook::before_mapped_reply();
            return reply.data(w.for_kernel(range));
        }
        match self.run_uncounted("read", || {
            match self.fs.computed_snapshot(fh, offset, size) {
                Some(data) => data.map(Ok),
                None => self.fs.read(fh, offset, size).map(Err),
            }
        }) {
            Ok(Ok(data)) => SCRATCH.with_borrow_mut(|scratch| {
                reply.data(data.window_in(offset, size, scratch));
                // A reader's buffer is kept for its next read (no fresh pages each time),
                // unless some read made it much larger than reads are.
                if scratch.capacity() > SCRATCH_KEPT {
                    *scratch = Vec::new();
                }
            }),
            Ok(Err(d)) => reply.data(&d),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.run("write", || {
            let fh = self.handle_of(ino, fh, true)?;
            self.fs.write_as(fh, offset, data, Some(req.pid()))
        }) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    /// Nothing to do on `close()`: answering `ENOSYS` once makes the kernel stop sending it.
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.shared.requests.count("flush");
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _ = self.run("release", || {
            self.fs.release(fh.0);
            self.backings.lock().by_handle.remove(&fh.0);
            self.let_go_backing(ino.0);
            Ok(())
        });
        reply.ok();
    }

    /// `fallocate(2)` and `posix_fallocate(3)` of real files (passthrough hands the file's
    /// writes to the kernel, not this; without it this reaches the backing file).
    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        match self.run("fallocate", || {
            let fh = self.handle_of(ino, fh, true)?;
            self.fs.fallocate(ino.0, fh, offset, length, mode)
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// Never `ENOSYS`: the kernel would then report every later fsync as done (SPEC 5).
    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.run("fsync", || {
            let fh = self.handle_of(ino, fh, false)?;
            self.fs.fsync(fh, datasync)
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// A listing whose every change is reported is cached by the kernel across opens (it is
    /// dropped with the directory's pages when it changes).
    ///
    /// Where the kernel can open directories by itself, `ENOSYS`: it then never sends
    /// `OPENDIR` or `RELEASEDIR` again (two round trips per directory saved) and keeps every
    /// listing, which stays right because it is dropped when the directory's mtime changes
    /// (`FUSE_AUTO_INVAL_DATA`: checked whenever the attributes are fetched again, at once for
    /// directories the watcher covers, after the TTL for the others).
    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.shared.no_opendir.load(Ordering::Relaxed) {
            self.shared.requests.count("opendir");
            reply.error(Errno::ENOSYS);
            return;
        }
        match self.run("opendir", || self.fs.opendir(ino.0)) {
            Ok((fh, true)) => reply.opened(
                FileHandle(fh),
                FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Ok((fh, false)) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.run("readdir", || {
            self.fs.readdir(ino.0, fh.0, Self::dir_offset(offset))
        }) {
            Ok(entries) => {
                for e in entries {
                    let next = u64::try_from(e.offset).unwrap_or(0);
                    if reply.add(INodeNo(e.ino), next, file_type(e.kind), &e.name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    /// `readdir` with each entry's attributes (see [`NormaFs::entry_plus`]): one lookup
    /// counted per entry the kernel links, only once it is in the answer.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let r = self.run("readdirplus", || {
            self.fs.readdirplus(
                ino.0,
                fh.0,
                Self::dir_offset(offset),
                &mut PlusReply(&mut reply),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _ = self.run("releasedir", || {
            self.fs.releasedir(fh.0);
            Ok(())
        });
        reply.ok();
    }

    /// Never `ENOSYS` (see `fsync`).
    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.run("fsyncdir", || self.fs.fsyncdir(ino.0)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.run("statfs", || self.fs.statfs()) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        match self.run("create", || {
            let owner = Some((req.uid(), req.gid()));
            let (e, o) = self
                .fs
                .create_as(parent.0, name, mode, umask, flags, owner)?;
            let how = self.open_as(e.attr.ino, flags, &o, &|f| reply.open_backing(f));
            Ok((e, o.fh, how))
        }) {
            Ok((e, fh, OpenAs::Passthrough(id))) => reply.created_passthrough(
                &e.ttl,
                &file_attr(&e.attr),
                Generation(0),
                FileHandle(fh),
                FopenFlags::empty(),
                &id,
            ),
            Ok((e, fh, OpenAs::Plain(f))) => reply.created(
                &e.ttl,
                &file_attr(&e.attr),
                Generation(0),
                FileHandle(fh),
                f,
            ),
            Err(e) => reply.error(e),
        }
    }
}

impl NormaFuse {
    /// mkdir, rmdir, mknod, symlink and link: the namespace has no place for them.
    fn no_namespace_change(&self) -> Errno {
        Errno::from_i32(self.fs.options().namespace_change().errno())
    }
}
