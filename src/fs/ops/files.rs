//! Files: opening nodes (computed files on their inode's version, real files on their backing
//! descriptor, ctl), reading and writing handles, releasing and syncing them.

use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::bytes::Bytes;
use crate::fs::handles::Handle;
use crate::fs::real::{page_size, Window};
use crate::fs::{Base, FsError, Node, NormaFs, Opened};

/// The flags a caller's `flags` open the backing file with: the mount does its own I/O, so
/// the caller's `O_DIRECT` (whose alignment rules are the caller's buffers', not the
/// mount's) is not passed on; a symbolic link is never followed.
pub(in crate::fs) fn backing_flags(flags: i32) -> i32 {
    (flags & !libc::O_DIRECT) | libc::O_NOFOLLOW
}

/// What a read of a computed file is answered from: the version's bytes, or those of the
/// range read from where they were kept on disk (starting at the offset given).
pub enum Chunk {
    Whole(Bytes),
    At(u64, Vec<u8>),
}

impl Chunk {
    /// The bytes at `offset`, at most `size` (copied into `scratch` when they lie in more
    /// than one piece of a version's bytes).
    pub fn window_in<'a>(&'a self, offset: u64, size: u32, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        match self {
            Chunk::Whole(b) => b.window_in(offset, size, scratch),
            Chunk::At(at, d) => {
                let from = (offset.saturating_sub(*at) as usize).min(d.len());
                let to = from.saturating_add(size as usize).min(d.len());
                &d[from..to]
            }
        }
    }
}

impl NormaFs {
    pub(in crate::fs) fn new_handle(&self, h: Handle) -> u64 {
        self.handles.open(h)
    }

    /// The file real inode `ino` stands for, open: the one it holds, else the one handle
    /// `fh` has open. `None`: neither (its name is then asked, and must still name it).
    pub(in crate::fs) fn real_file(&self, ino: u64, fh: Option<u64>) -> Option<Arc<std::fs::File>> {
        if let Some(h) = self.inodes.held_file(ino) {
            return Some(h.file);
        }
        match self.handles.lock().get(&fh?) {
            Some(Handle::Real { file, ino: i, .. }) if *i == ino => Some(file.clone()),
            _ => None,
        }
    }

    pub(in crate::fs) fn writes(flags: i32) -> bool {
        let acc = flags & libc::O_ACCMODE;
        acc == libc::O_WRONLY || acc == libc::O_RDWR || flags & libc::O_TRUNC != 0
    }

    /// `open`.
    pub fn open(&self, ino: u64, flags: i32) -> Result<Opened, FsError> {
        let arrived = std::time::Instant::now();
        let node = self.node(ino)?;
        match &node {
            Node::Ctl(sid) => {
                let scope = self.ctl_scope(sid)?;
                let fh = self.new_handle(Handle::Ctl {
                    scope,
                    snapshot: Some(None),
                });
                Ok(Opened {
                    fh,
                    direct_io: true,
                    keep_cache: false,
                    backing: None,
                    stale_attr: false,
                })
            }
            n if n.is_computed_file() => self.open_computed(n, ino, flags, arrived),
            Node::Real(b, rel) => {
                if Self::writes(flags) {
                    self.opts.writable()?;
                }
                // A file seen shorter than the kernel held it is read with direct I/O from
                // then on (see `read`), and so is one growing now (`fs/growth.rs`): its
                // reads reach the file and see its end, never a page cut at an older one.
                let keep_cache = self.covered(&node, false)
                    && !self.inodes.shrunk(ino)
                    && !self.growth.growing(ino);
                let f = self.real_open(ino, *b, rel, flags)?;
                let fh = self.new_handle(Handle::real(f.clone(), ino, keep_cache));
                Ok(Opened {
                    fh,
                    direct_io: false,
                    keep_cache,
                    backing: Some(f),
                    stale_attr: false,
                })
            }
            Node::MemoryLink(_) | Node::HistoryLink(..) | Node::AtLatest(_) => Err(FsError::Loop),
            _ => Err(FsError::IsDir),
        }
    }

    /// The backing file an open of real inode `ino` (node `b`/`rel`) with `flags` serves: the
    /// inode's own file, never another one the name may name by now (renamed over since the
    /// kernel's lookup; the kernel keeps one size and one page cache per inode).
    ///
    /// A read-only open of a held inode reads the held file (shared, or opened again through
    /// `/proc/self/fd` when it was held as a path). Any other open opens the name, which must
    /// still name the inode's file (the inode holds it from then on if it held none): else
    /// ESTALE, and the kernel looks the name up again and retries the open — a write must
    /// reach the file the name names, not a replaced one.
    fn real_open(
        &self,
        ino: u64,
        b: Base,
        rel: &std::path::Path,
        flags: i32,
    ) -> Result<Arc<std::fs::File>, FsError> {
        let flags = backing_flags(flags) & !(libc::O_CREAT | libc::O_EXCL);
        let writes = Self::writes(flags);
        if !writes {
            if let Some(h) = self.inodes.held_file_for_open(ino) {
                return if h.readable {
                    Ok(h.file)
                } else {
                    crate::fs::real::reopen(&h.file, flags).map(Arc::new)
                };
            }
        }
        let f = self.backing.open(b, rel, flags)?;
        let (st, id) = crate::fs::real::fstat_ident(&f)?;
        let f = Arc::new(f);
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(f);
        }
        let held = crate::fs::inode::Held {
            file: f.clone(),
            readable: flags & libc::O_ACCMODE != libc::O_WRONLY,
        };
        if !self.inodes.hold(ino, id, held) {
            return Err(FsError::Stale);
        }
        Ok(f)
    }

    /// The bytes a computed file's handle reads (for reads served without a copy): its
    /// inode's version. A read at or past its end (with direct I/O: `tail -f`, or a reader
    /// at the end; through the page cache the kernel asks for the size first) brings the
    /// version up to the file's newer content when that extends it (SPEC 5). `None` for any
    /// other handle.
    ///
    /// A version opened without its bytes at hand (the kernel held its pages) gets them at
    /// the first read that reaches the mount: made again from the inputs, which must still
    /// make them (the same fingerprint, or content that extends them, told by their digest).
    /// When the inputs were rewritten between that open and that read, the version's bytes
    /// are gone: `EIO`.
    pub fn computed_snapshot(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Option<Result<Chunk, FsError>> {
        let ino = match self.handles.lock().get(&fh) {
            Some(Handle::Computed { ino }) => *ino,
            _ => return None,
        };
        let Some(head) = self.versions.head(ino) else {
            return Some(Ok(Chunk::Whole(Bytes::default())));
        };
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        let mut head = head;
        if offset >= head.len {
            if let Ok(d) = self.computed_version(&node, ino, false) {
                if d.head.len > head.len {
                    head = d.head;
                }
            }
        }
        let data = match (&head.data, &head.spill) {
            (None, Some(spill)) => spill
                .read(offset, size)
                .map(|d| Chunk::At(offset, d))
                .map_err(FsError::from),
            _ => {
                if head.data.is_none() {
                    self.computed.count_refill();
                }
                self.head_bytes(ino, &node, &head).map(Chunk::Whole)
            }
        };
        match &data {
            Ok(_) => {
                let n = head.len.saturating_sub(offset).min(u64::from(size));
                self.versions.served(ino, offset, n);
            }
            Err(_) => tracing::warn!(
                "{node:?} (inode {ino}): its inputs were rewritten after it was opened and the \
                 kernel dropped pages of it before they were read again; answered EIO (open it \
                 again)"
            ),
        }
        Some(data)
    }

    /// A real file's large read as a window of its page cache and the range of it to send
    /// (see `real::Windows`); `None` for any other handle or read (`read` serves those).
    pub fn read_mapped(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Option<(Arc<Window>, Range<usize>)> {
        // Only through the page cache: should a truncation race the reply, the kernel
        // reads the page again; a direct read would answer the reader `EIO`.
        let (f, windows, ino) = match self.handles.lock().get(&fh) {
            Some(Handle::Real {
                file,
                windows: Some(w),
                ino,
            }) => (file.clone(), w.clone(), *ino),
            _ => return None,
        };
        let (w, range) = windows.read(&f, offset, size as usize)?;
        // As in `read`: a reply short by a page or more.
        if range.len() + page_size() <= size as usize {
            self.shrank(ino);
        }
        Some((w, range))
    }

    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>, FsError> {
        let mut handles = self.handles.lock();
        match handles.get_mut(&fh) {
            Some(Handle::Computed { .. }) => {
                // Outside the handles' lock: other readers go on meanwhile.
                drop(handles);
                let data = self
                    .computed_snapshot(fh, offset, size)
                    .unwrap_or_else(|| Ok(Chunk::Whole(Bytes::default())))?;
                Ok(match &data {
                    Chunk::Whole(b) => b.window(offset, size).into_owned(),
                    Chunk::At(..) => data.window_in(offset, size, &mut Vec::new()).to_vec(),
                })
            }
            Some(Handle::Real {
                file: f,
                windows,
                ino,
            }) => {
                let (f, ino, cached) = (f.clone(), *ino, windows.is_some());
                drop(handles);
                let data = crate::fs::real::read_at(&f, offset, size as usize)?;
                // Through the page cache the kernel asks for pages within the size it holds:
                // a reply short by a page or more means the file is shorter now (truncated
                // under the mount), and the kernel fills the rest with zeros, keeping its
                // size if anything changed its attributes meanwhile. Later opens of the
                // inode read it with direct I/O, where a short read is the end of the file.
                if cached && data.len() + page_size() <= size as usize {
                    self.shrank(ino);
                }
                Ok(data)
            }
            Some(Handle::Ctl { scope, snapshot }) => {
                self.read_only_help(scope);
                Ok(self.ctl_log.read(scope, snapshot.as_mut(), offset, size))
            }
            Some(Handle::Dir(_)) => Err(FsError::IsDir),
            None => Err(FsError::BadHandle),
        }
    }

    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        self.write_as(fh, offset, data, None)
    }

    /// [`NormaFs::write`] by process `pid` (a ctl result names it).
    pub fn write_as(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
        pid: Option<u32>,
    ) -> Result<u32, FsError> {
        let target = {
            let handles = self.handles.lock();
            match handles.get(&fh) {
                Some(Handle::Real { file, ino, .. }) => Ok(Some((file.clone(), *ino))),
                Some(Handle::Ctl { .. }) => Ok(None),
                Some(Handle::Computed { .. }) => Err(FsError::Access),
                Some(Handle::Dir(_)) => Err(FsError::IsDir),
                None => Err(FsError::BadHandle),
            }
        }?;
        if let Some((f, ino)) = target {
            self.opts.writable()?;
            f.write_all_at(data, offset)?;
            // The kernel's size reaches the write's end, its pages hold what was written.
            self.wrote(ino, &f, offset.saturating_add(data.len() as u64));
            return Ok(data.len() as u32);
        }
        self.write_ctl(fh, data, pid)
    }

    /// A change through the mount took real file `ino` (open as `f`) to `end` at least: the
    /// size the kernel is told never falls behind it, and no stat taken before reads as a
    /// shrink after it (the file's own stat now places it).
    fn wrote(&self, ino: u64, f: &std::fs::File, end: u64) {
        if self.growth.tracked(ino).is_none() {
            return;
        }
        let after = crate::fs::real::fstat(f)
            .ok()
            .map(|st| crate::fs::growth::Seen {
                size: st.st_size as u64,
                ctime: crate::fs::computed::systime(st.st_ctime, st.st_ctime_nsec),
            });
        self.growth.wrote(ino, end, after);
    }

    /// `fallocate(2)` of real inode `ino` through handle `fh`, `mode` as the caller gave it.
    pub fn fallocate(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> Result<(), FsError> {
        let f = match self.handles.lock().get(&fh) {
            Some(Handle::Real { file, .. }) => file.clone(),
            Some(Handle::Dir(_)) => return Err(FsError::IsDir),
            Some(_) => return Err(FsError::NotSupported),
            None => return Err(FsError::BadHandle),
        };
        self.opts.writable()?;
        crate::fs::real::by_fd::fallocate(&f, mode, offset, length)?;
        if mode & (libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE) == 0 {
            self.wrote(ino, &f, offset.saturating_add(length));
        }
        Ok(())
    }

    /// A read of real file `ino` through the page cache found it shorter than the kernel
    /// holds it (cut under the mount): with the mount's own opens, later opens read it with
    /// direct I/O; when the kernel opens files itself, it is told to drop the file's pages
    /// (the one the short reply left zero-filled among them) and attributes.
    fn shrank(&self, ino: u64) {
        self.inodes.mark_shrunk(ino);
        if let Ok(node) = self.node(ino) {
            self.tell_kernel_later(crate::fs::watch::Inval::Inode { node, data: true });
        }
    }

    /// The handle requests of inode `ino` go through when the kernel opens files itself (no
    /// OPEN: its reads and writes name no handle): one per inode, and a second one to write
    /// a real file, made at the first request that needs it and released when the kernel
    /// forgets the inode (`forget`). The kernel checked the caller's access when it opened;
    /// a real file is written where the inode's file is, whatever its name names by now.
    pub fn implicit_handle(&self, ino: u64, write: bool) -> Result<u64, FsError> {
        let write = write && matches!(self.node(ino)?, Node::Real(..));
        if let Some(fh) = self.handles.implicit(ino, write) {
            return Ok(fh);
        }
        let node = self.node(ino)?;
        let fh = match &node {
            Node::Ctl(sid) => self.new_handle(Handle::Ctl {
                scope: self.ctl_scope(sid)?,
                snapshot: None,
            }),
            n if n.is_computed_file() => {
                let fh = self
                    .open_computed(n, ino, libc::O_RDONLY, std::time::Instant::now())?
                    .fh;
                // The version stays readable until the kernel forgets the inode, whatever
                // pages it drops and however the content moves on: its bytes are kept now,
                // in memory within the budget, on disk past it.
                if let Some(head) = self.versions.head(ino).filter(|h| !h.kept()) {
                    if let Err(e) = self.head_bytes(ino, n, &head) {
                        self.release(fh);
                        return Err(e);
                    }
                }
                self.versions.trim();
                fh
            }
            Node::Real(b, rel) => {
                if write {
                    self.opts.writable()?;
                }
                let f = self.implicit_file(ino, *b, rel, write)?;
                self.new_handle(Handle::real(f, ino, true))
            }
            Node::MemoryLink(_) | Node::HistoryLink(..) | Node::AtLatest(_) => {
                return Err(FsError::Loop)
            }
            _ => return Err(FsError::IsDir),
        };
        match self.handles.set_implicit(ino, write, fh) {
            Ok(()) => Ok(fh),
            // Another request made one first: that one it is.
            Err(theirs) => {
                self.release(fh);
                Ok(theirs)
            }
        }
    }

    /// The backing file an implicit handle of real inode `ino` reads, or writes with
    /// `write`: the file the inode holds (opened again through /proc for writing, or for
    /// reading when it is held as a path), else the name's, which must still be the inode's.
    fn implicit_file(
        &self,
        ino: u64,
        b: Base,
        rel: &std::path::Path,
        write: bool,
    ) -> Result<Arc<std::fs::File>, FsError> {
        if let Some(h) = self.inodes.held_file(ino) {
            return match (write, h.readable) {
                (false, true) => Ok(h.file),
                (false, false) => crate::fs::real::reopen(&h.file, libc::O_RDONLY).map(Arc::new),
                (true, _) => crate::fs::real::reopen(&h.file, libc::O_RDWR).map(Arc::new),
            };
        }
        let flags = if write { libc::O_RDWR } else { libc::O_RDONLY };
        self.real_open(ino, b, rel, flags)
    }

    /// The kernel forgot `ino`: its implicit handles go.
    pub(in crate::fs) fn release_implicit(&self, ino: u64) {
        for fh in self.handles.take_implicit(ino) {
            self.release(fh);
        }
    }

    pub fn release(&self, fh: u64) {
        if let Some(Handle::Computed { ino }) = self.handles.close(fh) {
            self.versions.closed(ino);
        }
    }

    /// `fsync` of a real file reaches the backing file; computed files have nothing to sync.
    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<(), FsError> {
        let f = match self.handles.lock().get(&fh) {
            Some(Handle::Real { file, .. }) => file.clone(),
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
}
