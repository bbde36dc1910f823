//! What the filesystem's operations answer: attributes, entries, directory entries, opened
//! files and requested attribute changes (plain data the adapter converts for the kernel).

use std::ffi::OsString;
use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::real::Stat;

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

/// An entry of a `readdirplus` answer (see [`NormaFs::entry_plus`](super::NormaFs::entry_plus)).
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
    /// Bypass the page cache (ctl; computed files under `--ttl-ms 0`; real files whose
    /// changes nobody reports).
    pub direct_io: bool,
    /// The kernel may keep the file's cached pages from earlier opens: every change of the
    /// backing file is reported (a real file covered by the watches), or the inode stands
    /// for one version of a computed file.
    pub keep_cache: bool,
    /// The backing file, for kernel passthrough of real files.
    pub backing: Option<Arc<File>>,
    /// The kernel may keep an older size than this open reads (a computed file's version,
    /// extended since, or the size kept before the watcher reported the change): it must
    /// drop it before the open is answered, so that reads and `fstat` on the handle ask.
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

pub(super) fn kind_of(st: &Stat) -> FileKind {
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

pub(super) fn to_timespec(t: SystemTime) -> libc::timespec {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// The bytes of `data` a read of `size` bytes at `offset` returns.
pub fn window(data: &[u8], offset: u64, size: u32) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let end = start.saturating_add(size as usize).min(data.len());
    data.get(start..end).unwrap_or_default()
}

/// Where a `readdirplus` answer goes (the kernel's reply buffer; a list in a test).
pub trait PlusReplier {
    /// Add entry `e` with its attributes, kept for `ttl`; `true` when the answer is full and
    /// `e` was not added.
    fn add(&mut self, e: &DirEntry, attr: &Attr, ttl: Duration) -> bool;
}
