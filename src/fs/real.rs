//! Real files under the three backing directories, reached without ever following a symlink:
//! every path component is opened relative to its directory with `O_NOFOLLOW`, so nothing
//! outside the backing directories can be read or written through the mount.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use super::error::FsError;
use super::node::Base;

/// The three backing directories.
#[derive(Debug, Clone)]
pub struct Backing {
    pub transcripts: PathBuf,
    pub memory: PathBuf,
    pub archives: PathBuf,
}

fn last_err() -> FsError {
    FsError::from(std::io::Error::last_os_error())
}

fn cstr(name: &OsStr) -> Result<CString, FsError> {
    CString::new(name.as_bytes()).map_err(|_| FsError::Invalid("NUL in a name".into()))
}

/// The mtime of a directory of the root (a session's, for its listing's attributes).
pub fn mtime(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The names in a directory of the root and whether each is a directory (the watcher's
/// look into a directory that appeared); empty when it cannot be read.
pub fn entries(p: &Path) -> Vec<(OsString, bool)> {
    let Ok(rd) = std::fs::read_dir(p) else {
        return Vec::new();
    };
    rd.flatten()
        .map(|e| (e.file_name(), e.file_type().is_ok_and(|t| t.is_dir())))
        .collect()
}

/// A name that may appear as one path component.
pub fn valid_component(name: &OsStr) -> bool {
    let b = name.as_bytes();
    !b.is_empty() && b != b"." && b != b".." && !b.contains(&b'/') && !b.contains(&0)
}

/// An open directory (or any file) descriptor.
#[derive(Debug)]
pub struct Fd(OwnedFd);

impl Fd {
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

fn openat(dir: RawFd, name: &CString, flags: i32, mode: u32) -> Result<OwnedFd, FsError> {
    // SAFETY: `name` is a valid C string; the returned descriptor is owned by us on success.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(last_err());
    }
    // SAFETY: `fd` is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat` result.
pub type Stat = libc::stat;

fn fstatat(dir: RawFd, name: &CString, flags: i32) -> Result<Stat, FsError> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: Stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers for the call's duration.
    let r = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, flags) };
    if r < 0 {
        return Err(last_err());
    }
    Ok(st)
}

/// What makes a backing file the file it is: device, inode number and birth time (an inode
/// number is soon reused for a new file once the old one is gone, as when the runtime
/// replaces `state.json` again and again; the birth time tells them apart). Where the
/// filesystem keeps no birth time, the change time stands in (an append then looks like
/// another file: safe, only less cached).
pub type Ident = (u64, u64, i64, u32);

/// `statx` of `name` in `dir`: its `stat` and its identity, read at once (two calls could
/// see two files when the name is renamed over between them).
fn statx_at(dir: RawFd, name: &CString, flags: i32) -> Result<(Stat, Ident), FsError> {
    // SAFETY: zeroed statx is a valid out-parameter.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
    // SAFETY: valid pointers for the call's duration.
    if unsafe { libc::statx(dir, name.as_ptr(), flags, mask, &mut sx) } < 0 {
        return Err(last_err());
    }
    let dev = libc::makedev(sx.stx_dev_major, sx.stx_dev_minor);
    let born = if sx.stx_mask & libc::STATX_BTIME != 0 {
        sx.stx_btime
    } else {
        sx.stx_ctime
    };
    // SAFETY: zeroed stat is a valid value; the fields used are set below.
    let mut st: Stat = unsafe { std::mem::zeroed() };
    st.st_dev = dev;
    st.st_ino = sx.stx_ino;
    st.st_mode = u32::from(sx.stx_mode);
    st.st_nlink = sx.stx_nlink as _;
    st.st_uid = sx.stx_uid;
    st.st_gid = sx.stx_gid;
    st.st_rdev = libc::makedev(sx.stx_rdev_major, sx.stx_rdev_minor);
    st.st_size = sx.stx_size as i64;
    st.st_blksize = sx.stx_blksize as _;
    st.st_blocks = sx.stx_blocks as i64;
    st.st_atime = sx.stx_atime.tv_sec;
    st.st_atime_nsec = i64::from(sx.stx_atime.tv_nsec);
    st.st_mtime = sx.stx_mtime.tv_sec;
    st.st_mtime_nsec = i64::from(sx.stx_mtime.tv_nsec);
    st.st_ctime = sx.stx_ctime.tv_sec;
    st.st_ctime_nsec = i64::from(sx.stx_ctime.tv_nsec);
    Ok((st, (dev, sx.stx_ino, born.tv_sec, born.tv_nsec)))
}

/// `fstat` of an open backing file with its identity.
pub fn fstat_ident(f: &File) -> Result<(Stat, Ident), FsError> {
    statx_at(f.as_raw_fd(), &CString::from(c""), libc::AT_EMPTY_PATH)
}

/// Up to `size` bytes of `f` from `offset`, fewer only at its end (a read of a real file,
/// into a buffer that is not zeroed first: reads through the page cache ask for up to a
/// megabyte each).
pub fn read_at(f: &File, offset: u64, size: usize) -> Result<Vec<u8>, FsError> {
    let mut buf: Vec<u8> = Vec::with_capacity(size);
    while buf.len() < size {
        let at = offset.saturating_add(buf.len() as u64);
        let spare = buf.spare_capacity_mut();
        // SAFETY: pread writes at most `spare.len()` bytes into the vector's spare capacity,
        // which stays allocated for the call; only the bytes it reports written are then
        // counted as initialized.
        let n = unsafe {
            libc::pread(
                f.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                spare.len(),
                i64::try_from(at).unwrap_or(i64::MAX),
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(FsError::from(e));
        }
        if n == 0 {
            break;
        }
        // SAFETY: pread initialized the next `n` bytes (n <= spare capacity).
        unsafe { buf.set_len(buf.len() + n as usize) };
    }
    Ok(buf)
}

/// `fstat` of an open backing file.
pub fn fstat(f: &File) -> Result<Stat, FsError> {
    // SAFETY: zeroed stat is a valid out-parameter.
    let mut st: Stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor we hold open, a valid pointer for the call's duration.
    if unsafe { libc::fstat(f.as_raw_fd(), &mut st) } < 0 {
        return Err(last_err());
    }
    Ok(st)
}

/// A regular backing file opened by [`Backing::open_regular`].
pub struct Regular {
    pub file: File,
    /// Opened for reading (else as a path: `fstat` only, reopened to be read or written).
    pub readable: bool,
    pub st: Stat,
    pub id: Ident,
}

/// `f` opened again with `flags` through `/proc/self/fd`: the same file, whatever its name
/// names by now (a held file opened as a path, to be read).
pub fn reopen(f: &File, flags: i32) -> Result<File, FsError> {
    let p = CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map_err(|_| FsError::Invalid("descriptor path".into()))?;
    let flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_TRUNC);
    openat(libc::AT_FDCWD, &p, flags, 0).map(File::from)
}

/// The path through which `f` is reached whatever its name names by now, removed or
/// renamed over (`/proc/self/fd/N`: it works for a descriptor opened as a path too).
fn fd_path(f: &File) -> Result<CString, FsError> {
    CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map_err(|_| FsError::Invalid("descriptor path".into()))
}

/// Attribute changes of the file `f` is open on (for reading, writing, or as a path): an
/// inode's operations reach its own file, not whatever its name names by now.
pub mod by_fd {
    use super::*;

    /// Set the size of `f`'s file.
    pub fn truncate(f: &File, size: u64) -> Result<(), FsError> {
        let size = i64::try_from(size).map_err(|_| FsError::Os(libc::EFBIG))?;
        // SAFETY: a descriptor we hold open.
        if unsafe { libc::ftruncate(f.as_raw_fd(), size) } == 0 {
            return Ok(());
        }
        match last_err() {
            // Not open for writing (or a path): opened for writing through /proc.
            FsError::Os(libc::EBADF) | FsError::Invalid(_) => {
                let w = reopen(f, libc::O_WRONLY)?;
                // SAFETY: a descriptor just opened.
                if unsafe { libc::ftruncate(w.as_raw_fd(), size) } < 0 {
                    return Err(last_err());
                }
                Ok(())
            }
            e => Err(e),
        }
    }

    pub fn chmod(f: &File, mode: u32) -> Result<(), FsError> {
        let p = fd_path(f)?;
        // SAFETY: valid C string; the /proc link names `f`'s file.
        if unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) } < 0 {
            return Err(last_err());
        }
        Ok(())
    }

    pub fn chown(f: &File, uid: Option<u32>, gid: Option<u32>) -> Result<(), FsError> {
        let p = fd_path(f)?;
        let (u, g) = (uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX));
        // SAFETY: valid C string; -1 leaves an id unchanged.
        if unsafe { libc::chown(p.as_ptr(), u, g) } < 0 {
            return Err(last_err());
        }
        Ok(())
    }

    pub fn utimes(
        f: &File,
        atime: Option<libc::timespec>,
        mtime: Option<libc::timespec>,
    ) -> Result<(), FsError> {
        let p = fd_path(f)?;
        let omit = libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        };
        let times = [atime.unwrap_or(omit), mtime.unwrap_or(omit)];
        // SAFETY: valid pointers for the call.
        if unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), 0) } < 0 {
            return Err(last_err());
        }
        Ok(())
    }

    /// `fallocate(2)` on `f`'s file (opened for writing through /proc when `f` is not).
    pub fn fallocate(f: &File, mode: i32, offset: u64, length: u64) -> Result<(), FsError> {
        let (off, len) = (
            i64::try_from(offset).map_err(|_| FsError::Os(libc::EFBIG))?,
            i64::try_from(length).map_err(|_| FsError::Os(libc::EFBIG))?,
        );
        let run = |fd: RawFd| loop {
            // SAFETY: a descriptor we hold open.
            if unsafe { libc::fallocate(fd, mode, off, len) } == 0 {
                return Ok(());
            }
            match last_err() {
                FsError::Os(libc::EINTR) => continue,
                e => return Err(e),
            }
        };
        match run(f.as_raw_fd()) {
            Err(FsError::Os(libc::EBADF)) => run(reopen(f, libc::O_WRONLY)?.as_raw_fd()),
            r => r,
        }
    }
}

impl Backing {
    pub fn base(&self, b: Base) -> &Path {
        match b {
            Base::Transcripts => &self.transcripts,
            Base::Memory => &self.memory,
            Base::Archives => &self.archives,
        }
    }

    /// The components of `rel`, each checked.
    fn components(rel: &Path) -> Result<Vec<&OsStr>, FsError> {
        rel.components()
            .map(|c| match c {
                Component::Normal(n) if valid_component(n) => Ok(n),
                _ => Err(FsError::NotFound),
            })
            .collect()
    }

    /// Open the backing directory itself (the base may be a symlink the user configured).
    fn open_base(&self, b: Base) -> Result<OwnedFd, FsError> {
        let p = cstr(self.base(b).as_os_str())?;
        openat(libc::AT_FDCWD, &p, libc::O_RDONLY | libc::O_DIRECTORY, 0)
    }

    /// Open the directory holding the last component of `rel`, walking with `O_NOFOLLOW`.
    /// Returns the directory and the last component (`None` when `rel` is empty: the base).
    fn parent(&self, b: Base, rel: &Path) -> Result<(OwnedFd, Option<CString>), FsError> {
        let comps = Self::components(rel)?;
        let mut dir = self.open_base(b)?;
        let Some((last, init)) = comps.split_last() else {
            return Ok((dir, None));
        };
        for c in init {
            dir = openat(
                dir.as_raw_fd(),
                &cstr(c)?,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(|e| match e {
                FsError::Loop => FsError::NotFound,
                e => e,
            })?;
        }
        Ok((dir, Some(cstr(last)?)))
    }

    /// `lstat` of a real node (never follows a symlink).
    pub fn lstat(&self, b: Base, rel: &Path) -> Result<Stat, FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        match leaf {
            Some(l) => fstatat(dir.as_raw_fd(), &l, libc::AT_SYMLINK_NOFOLLOW),
            None => fstatat(dir.as_raw_fd(), &CString::from(c"."), 0),
        }
    }

    /// `lstat` of a real node with its identity, from one call.
    pub fn lstat_ident(&self, b: Base, rel: &Path) -> Result<(Stat, Ident), FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        match leaf {
            Some(l) => statx_at(dir.as_raw_fd(), &l, libc::AT_SYMLINK_NOFOLLOW),
            None => statx_at(dir.as_raw_fd(), &CString::from(c"."), 0),
        }
    }

    /// Open a real file (`O_NOFOLLOW`: a symlink is refused with `ELOOP`).
    pub fn open(&self, b: Base, rel: &Path, flags: i32) -> Result<File, FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        let leaf = leaf.ok_or(FsError::IsDir)?;
        let fd = openat(dir.as_raw_fd(), &leaf, flags | libc::O_NOFOLLOW, 0)?;
        Ok(File::from(fd))
    }

    /// The file at `rel` if it is a regular file, opened to be held for its inode (read
    /// only, else as a path when it may not be read), with its `stat` and identity taken from
    /// the descriptor; `Ok(None)` for anything else (a directory, a link, a device: never
    /// opened). One walk to the directory, then `statx`, `open` and `fstat` of the leaf.
    pub fn open_regular(&self, b: Base, rel: &Path) -> Result<Option<Regular>, FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        let Some(leaf) = leaf else {
            return Ok(None);
        };
        let (st, _) = statx_at(dir.as_raw_fd(), &leaf, libc::AT_SYMLINK_NOFOLLOW)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(None);
        }
        let plain = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW;
        let (fd, readable) = match openat(dir.as_raw_fd(), &leaf, plain, 0) {
            Ok(fd) => (fd, true),
            Err(FsError::Access) => (
                openat(dir.as_raw_fd(), &leaf, libc::O_PATH | libc::O_NOFOLLOW, 0)?,
                false,
            ),
            Err(e) => return Err(e),
        };
        let file = File::from(fd);
        let (st, id) = fstat_ident(&file)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            // Renamed over by something else between the two looks.
            return Ok(None);
        }
        Ok(Some(Regular {
            file,
            readable,
            st,
            id,
        }))
    }

    /// Open `rel` with `O_CREAT`: a file it creates gets exactly `mode` (the caller's mode
    /// and umask, not the daemon's umask) and, with `owner` (the caller's uid and gid) when
    /// this process may give files away (root), belongs to the caller: its uid, and its gid
    /// or the directory's when the directory is set-group-ID, as a local file system does. A
    /// file that was there is opened as it is.
    pub fn create(
        &self,
        b: Base,
        rel: &Path,
        flags: i32,
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<File, FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        let leaf = leaf.ok_or(FsError::Exists)?;
        let flags = flags | libc::O_NOFOLLOW;
        let fd = match openat(
            dir.as_raw_fd(),
            &leaf,
            flags | libc::O_CREAT | libc::O_EXCL,
            mode,
        ) {
            Err(FsError::Exists) if flags & libc::O_EXCL == 0 => {
                return openat(dir.as_raw_fd(), &leaf, flags & !libc::O_CREAT, 0).map(File::from)
            }
            other => other?,
        };
        // SAFETY: geteuid has no preconditions.
        if let Some((uid, gid)) = owner.filter(|_| unsafe { libc::geteuid() } == 0) {
            let d = fstatat(dir.as_raw_fd(), &CString::from(c""), libc::AT_EMPTY_PATH)?;
            let gid = if d.st_mode & libc::S_ISGID != 0 {
                d.st_gid
            } else {
                gid
            };
            // SAFETY: a valid open descriptor (the mode is set after: a chown clears the
            // set-ID bits).
            if unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) } < 0 {
                return Err(last_err());
            }
        }
        // SAFETY: a valid open descriptor.
        if unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) } < 0 {
            return Err(last_err());
        }
        Ok(File::from(fd))
    }

    /// A real directory, opened for listing and fsync.
    pub fn open_dir(&self, b: Base, rel: &Path) -> Result<Fd, FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        match leaf {
            Some(l) => Ok(Fd(openat(
                dir.as_raw_fd(),
                &l,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )?)),
            None => Ok(Fd(dir)),
        }
    }

    /// Entries of a real directory (no `.`/`..`), sorted by name.
    pub fn list(&self, b: Base, rel: &Path) -> Result<Vec<OsString>, FsError> {
        let fd = self.open_dir(b, rel)?;
        // Reading through the descriptor's /proc link lists exactly the directory we opened.
        let path = format!("/proc/self/fd/{}", fd.raw());
        let mut names: Vec<OsString> = std::fs::read_dir(path)?
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        names.sort();
        Ok(names)
    }

    pub fn readlink(&self, b: Base, rel: &Path) -> Result<Vec<u8>, FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        let leaf = leaf.ok_or(FsError::Invalid("not a symlink".into()))?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: buffer valid for its length.
        let n = unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                leaf.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(last_err());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    pub fn unlink(&self, b: Base, rel: &Path) -> Result<(), FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        let leaf = leaf.ok_or(FsError::Perm)?;
        // SAFETY: valid C string.
        if unsafe { libc::unlinkat(dir.as_raw_fd(), leaf.as_ptr(), 0) } < 0 {
            return Err(last_err());
        }
        Ok(())
    }

    /// `renameat2` within one backing directory.
    pub fn rename(&self, b: Base, from: &Path, to: &Path, flags: u32) -> Result<(), FsError> {
        let (fd, fl) = self.parent(b, from)?;
        let (td, tl) = self.parent(b, to)?;
        let (fl, tl) = (fl.ok_or(FsError::Perm)?, tl.ok_or(FsError::Perm)?);
        // SAFETY: valid descriptors and C strings.
        let r = unsafe {
            libc::renameat2(
                fd.as_raw_fd(),
                fl.as_ptr(),
                td.as_raw_fd(),
                tl.as_ptr(),
                flags,
            )
        };
        if r < 0 {
            return Err(last_err());
        }
        Ok(())
    }

    /// chmod without following a symlink (refused on symlinks).
    pub fn chmod(&self, b: Base, rel: &Path, mode: u32) -> Result<(), FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        let leaf = leaf.ok_or(FsError::Perm)?;
        let fd = openat(dir.as_raw_fd(), &leaf, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let st = fstatat(fd.as_raw_fd(), &CString::from(c""), libc::AT_EMPTY_PATH)?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(FsError::Perm);
        }
        let p =
            CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(|_| FsError::Perm)?;
        // SAFETY: valid C string; the /proc link names the file we opened without following.
        if unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) } < 0 {
            return Err(last_err());
        }
        Ok(())
    }

    pub fn chown(
        &self,
        b: Base,
        rel: &Path,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<(), FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        let leaf = leaf.ok_or(FsError::Perm)?;
        let u = uid.unwrap_or(u32::MAX);
        let g = gid.unwrap_or(u32::MAX);
        // SAFETY: valid descriptor and C string; -1 leaves an id unchanged.
        if unsafe {
            libc::fchownat(
                dir.as_raw_fd(),
                leaf.as_ptr(),
                u,
                g,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } < 0
        {
            return Err(last_err());
        }
        Ok(())
    }

    pub fn utimes(
        &self,
        b: Base,
        rel: &Path,
        atime: Option<libc::timespec>,
        mtime: Option<libc::timespec>,
    ) -> Result<(), FsError> {
        let (dir, leaf) = self.parent(b, rel)?;
        let leaf = leaf.ok_or(FsError::Perm)?;
        let omit = libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        };
        let times = [atime.unwrap_or(omit), mtime.unwrap_or(omit)];
        // SAFETY: valid pointers.
        if unsafe {
            libc::utimensat(
                dir.as_raw_fd(),
                leaf.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } < 0
        {
            return Err(last_err());
        }
        Ok(())
    }

    pub fn truncate(&self, b: Base, rel: &Path, size: u64) -> Result<(), FsError> {
        let f = self.open(b, rel, libc::O_WRONLY)?;
        f.set_len(size)?;
        Ok(())
    }
}

/// A real file's large reads served straight from its page cache: a window of the file
/// mapped at a time, handed to the kernel as the reply (`writev` copies it into the mount's
/// page cache: one copy where `pread` and the reply make two). Only ranges whose pages are
/// all in the page cache: a cold read is `pread`'s, which reads ahead as the file is read in
/// order (faults on the mapping from several workers at once read far less well).
///
/// The mapped bytes are only ever read by the kernel, never by this process: a page past
/// the end of a file truncated meanwhile would raise `SIGBUS` on a read here, where the
/// kernel's copy fails and the FUSE device ends the request with `EIO`. Each read is bounded
/// by the file's size at that read, so only a truncation racing it can do that.
#[derive(Debug, Default)]
pub struct Windows {
    /// The windows mapped last (at most `KEPT`), newest last.
    recent: parking_lot::Mutex<Vec<Arc<Window>>>,
}

/// One mapping: `len` bytes of the file from `start` (a multiple of the page size).
#[derive(Debug)]
pub struct Window {
    base: NonNull<libc::c_void>,
    start: u64,
    len: usize,
}

// SAFETY: the mapping is owned by its `Window` alone, unmapped once on drop, and never
// written through; moving or sharing it between threads hands out read-only views only.
unsafe impl Send for Window {}
// SAFETY: as above.
unsafe impl Sync for Window {}

/// How much of a file one window maps (plus `SPAN`, so that any read starting in it fits).
const WINDOW: u64 = 8 << 20;
/// The largest read the kernel sends (`FUSE_MAX_PAGES`' limit).
const SPAN: u64 = 1 << 20;
/// Windows kept per handle: reads served in parallel may straddle two.
const KEPT: usize = 2;
/// The smallest read worth a window: below it a copy costs less than a mapping.
const MAP_MIN: usize = 64 << 10;

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => 4096,
    }
}

impl Windows {
    /// Up to `size` bytes of `f` from `offset` (fewer at its end) as a mapped window and the
    /// range of it to send; `None` when the read is small, at or past the end, or `f` cannot
    /// be mapped (the caller reads it with `read_at`).
    pub fn read(&self, f: &File, offset: u64, size: usize) -> Option<(Arc<Window>, Range<usize>)> {
        if size < MAP_MIN || size as u64 > SPAN {
            return None;
        }
        let end = f.metadata().ok()?.len();
        let len = end.checked_sub(offset).filter(|&n| n > 0)?.min(size as u64);
        if (len as usize) < MAP_MIN {
            return None;
        }
        let mut recent = self.recent.lock();
        let found = recent.iter().rev().find(|w| w.covers(offset, len)).cloned();
        let w = match found {
            Some(w) => w,
            None => {
                let start = offset - offset % WINDOW;
                let w = Arc::new(Window::map(
                    f,
                    start,
                    (start + WINDOW + SPAN).min(end) - start,
                )?);
                if recent.len() == KEPT {
                    recent.remove(0);
                }
                recent.push(w.clone());
                w
            }
        };
        // A read to the end of the file is likely its reader's last: the window is not kept
        // for the next (unmapped once this read's reply is sent). When the kernel opens files
        // itself a handle lives until the kernel forgets its inode, and windows kept would
        // keep every page of every file read in the mount's resident memory.
        if offset + len == end {
            recent.retain(|k| !Arc::ptr_eq(k, &w));
        }
        drop(recent);
        let from = (offset - w.start) as usize;
        // Pages not read in yet are left to pread: it reads ahead as the file is read in
        // order, where faults on the mapping would read them a page at a time.
        w.resident(from, len as usize)
            .then(|| (w, from..from + len as usize))
    }
}

impl Window {
    fn map(f: &File, start: u64, len: u64) -> Option<Window> {
        let len = usize::try_from(len).ok()?;
        // SAFETY: a new read-only shared mapping of `f`; nothing else refers to its address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                i64::try_from(start).ok()?,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: advice on the mapping just made.
        unsafe { libc::madvise(base, len, libc::MADV_SEQUENTIAL) };
        Some(Window {
            base: NonNull::new(base)?,
            start,
            len,
        })
    }

    /// Whether every page of `from..from + len` is in the page cache.
    fn resident(&self, from: usize, len: usize) -> bool {
        let page = page_size();
        let start = from - from % page;
        let pages = (from + len - start).div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: `start..start + pages * page` lies inside the mapping (its last page is
        // partial at most), and `vec` has one byte per page.
        let rc = unsafe {
            libc::mincore(
                self.base.as_ptr().cast::<u8>().add(start).cast(),
                (from + len - start).min(self.len - start),
                vec.as_mut_ptr(),
            )
        };
        rc == 0 && vec.iter().all(|b| b & 1 == 1)
    }

    fn covers(&self, offset: u64, len: u64) -> bool {
        offset >= self.start && offset + len <= self.start + self.len as u64
    }

    /// The bytes of `range` (from `Windows::read`), for the kernel to copy: see `Windows`,
    /// never read them here.
    pub fn for_kernel(&self, range: Range<usize>) -> &[u8] {
        let range = range.start.min(self.len)..range.end.min(self.len);
        // SAFETY: the range lies inside the live mapping of `len` bytes.
        unsafe {
            std::slice::from_raw_parts(
                self.base.as_ptr().cast::<u8>().add(range.start),
                range.end.saturating_sub(range.start),
            )
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`, once.
        unsafe { libc::munmap(self.base.as_ptr(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes whose every byte tells its offset.
    fn patterned(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut f, &bytes).expect("write");
        (f, bytes)
    }

    fn mapped(w: &Windows, f: &File, offset: u64, size: usize) -> Option<Vec<u8>> {
        w.read(f, offset, size)
            .map(|(win, range)| win.for_kernel(range).to_vec())
    }

    #[test]
    fn windows_serve_the_bytes_pread_would() {
        let len = (2 * WINDOW + 300_000) as usize;
        let (tmp, bytes) = patterned(len);
        let f = File::open(tmp.path()).expect("open");
        let w = Windows::default();
        // Aligned and unaligned starts, across a window's end, at the file's end.
        for (offset, size) in [
            (0u64, 128 << 10),
            (4096, 1 << 20),
            (12_345, 200_000),
            (WINDOW - 4096, 128 << 10),
            (WINDOW - 1, 1 << 20),
            (2 * WINDOW, 1 << 20),
            (len as u64 - 70_000, 128 << 10),
        ] {
            let want = read_at(&f, offset, size).expect("pread");
            assert_eq!(
                mapped(&w, &f, offset, size).as_deref(),
                Some(&want[..]),
                "{offset}+{size}"
            );
            let end = (offset as usize + size).min(len);
            assert_eq!(want, bytes[offset as usize..end]);
        }
        assert!(w.recent.lock().len() <= KEPT);
    }

    #[test]
    fn small_reads_and_reads_past_the_end_are_left_to_pread() {
        let (tmp, _) = patterned(1 << 20);
        let f = File::open(tmp.path()).expect("open");
        let w = Windows::default();
        assert!(w.read(&f, 0, 4096).is_none(), "small read");
        assert!(
            w.read(&f, (1 << 20) - 100, 128 << 10).is_none(),
            "100 bytes left"
        );
        assert!(w.read(&f, 1 << 20, 128 << 10).is_none(), "at the end");
        assert!(w.read(&f, 5 << 20, 128 << 10).is_none(), "past the end");
        assert!(
            w.read(&f, 0, 2 << 20).is_none(),
            "larger than any kernel read"
        );
    }

    #[test]
    fn a_file_that_grew_is_mapped_again_and_one_that_shrank_is_read_to_its_new_end() {
        let (tmp, _) = patterned(200_000);
        let f = File::open(tmp.path()).expect("open");
        let w = Windows::default();
        assert_eq!(
            mapped(&w, &f, 0, 128 << 10).map(|b| b.len()),
            Some(128 << 10)
        );
        // Grows past the window mapped at 200,000 bytes.
        let more = std::fs::OpenOptions::new()
            .append(true)
            .open(tmp.path())
            .expect("reopen");
        more.set_len(600_000).expect("grow");
        let at = 400_000u64;
        let want = read_at(&f, at, 128 << 10).expect("pread");
        assert_eq!(mapped(&w, &f, at, 128 << 10).as_deref(), Some(&want[..]));
        // Shrinks: a read is bounded by the size at that read.
        more.set_len(300_000).expect("shrink");
        let want = read_at(&f, 200_000, 128 << 10).expect("pread");
        let got = mapped(&w, &f, 200_000, 128 << 10).expect("mapped");
        assert_eq!(got.len(), 100_000);
        assert_eq!(got, want);
    }

    #[test]
    fn pages_not_read_in_yet_are_left_to_pread() {
        // A hole is in no page cache until something reads it.
        let tmp = tempfile::NamedTempFile::new().expect("temp file");
        tmp.as_file().set_len(4 << 20).expect("sparse");
        let f = File::open(tmp.path()).expect("open");
        let w = Windows::default();
        assert!(w.read(&f, 1 << 20, 128 << 10).is_none(), "not read in");
        assert_eq!(
            read_at(&f, 1 << 20, 128 << 10).expect("pread"),
            vec![0u8; 128 << 10]
        );
        assert_eq!(
            mapped(&w, &f, 1 << 20, 128 << 10),
            Some(vec![0u8; 128 << 10])
        );
    }
}
