//! How the kernel serves an open file: through passthrough, the page cache, or direct I/O.
//! Pure decisions, taken from what [`super::NormaFs::open`] answered and what the mount was
//! granted; the adapter carries them out (`fuse/mod.rs`, `open_as`).

use super::Opened;

/// How an open is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPath {
    /// Every read and write goes to normafs (`ctl`, computed files under `--ttl-ms 0`, real
    /// files whose changes nobody reports).
    DirectIo,
    /// Through the page cache; `keep`: kept across opens (every change is reported).
    PageCache { keep: bool },
    /// Kernel passthrough to the backing file.
    Passthrough,
}

/// The read path of an open.
///
/// `ctl` asks for direct I/O, and so do computed files when the kernel is to keep nothing
/// (`--ttl-ms 0`); else a computed file is read through the page cache, kept across opens:
/// its inode stands for one version of it (`fs/versions.rs`). A real file passes through
/// to its backing file when the mount has passthrough. Else it is read through the page cache, kept across
/// opens, when every change of it is reported (watched): an inode stands for one backing
/// file for its whole life and is held by it (`InodeTable::lookup_file`), so the one size
/// and page cache the kernel keeps per inode are always that file's — a name renamed over is
/// a new inode. A real file whose changes are not reported (a backing directory inotify is
/// blind to, or no watch) is read with direct I/O: each read reaches the file.
pub fn read_path(o: &Opened, passthrough: bool) -> ReadPath {
    if o.direct_io {
        return ReadPath::DirectIo;
    }
    match (o.backing.is_some(), passthrough) {
        (true, true) => ReadPath::Passthrough,
        (true, false) if !o.keep_cache => ReadPath::DirectIo,
        (_, _) => ReadPath::PageCache { keep: o.keep_cache },
    }
}

/// How a backing file is opened: a passthrough backing id serves only opens it can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    read: bool,
    write: bool,
    append: bool,
}

impl Access {
    /// The access an `open(2)` with `flags` needs.
    pub fn of(flags: i32) -> Access {
        let acc = flags & libc::O_ACCMODE;
        Access {
            read: acc == libc::O_RDONLY || acc == libc::O_RDWR,
            write: acc == libc::O_WRONLY || acc == libc::O_RDWR,
            append: flags & libc::O_APPEND != 0,
        }
    }

    /// Whether a backing file opened with this access serves an open needing `need`.
    pub fn serves(self, need: Access) -> bool {
        (!need.read || self.read) && (!need.write || self.write) && self.append == need.append
    }
}

/// A passthrough open of an inode, given the backing id kept for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    /// The inode's backing id serves this open too.
    Reuse,
    /// The inode has no backing id, or one no open handle uses that does not serve this
    /// open: register its backing file (in place of that one).
    Register,
    /// Another open of the inode passes through with an access that does not serve this one:
    /// direct I/O (the kernel wants one backing id per inode, and refuses to mix passthrough
    /// with the page cache on it).
    DirectIo,
}

/// How a passthrough open shares the inode's backing id (`existing`: the access of the one
/// kept, and whether an open handle uses it).
pub fn share(existing: Option<(Access, bool)>, need: Access) -> Share {
    match existing {
        Some((has, _)) if has.serves(need) => Share::Reuse,
        Some((_, true)) => Share::DirectIo,
        Some((_, false)) | None => Share::Register,
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::sync::Arc;

    use super::{read_path, share, Access, ReadPath, Share};
    use crate::fs::Opened;

    fn opened(direct_io: bool, keep_cache: bool, backing: bool) -> Opened {
        Opened {
            fh: 1,
            direct_io,
            keep_cache,
            backing: backing.then(|| Arc::new(File::open("/dev/null").expect("/dev/null"))),
            stale_attr: false,
        }
    }

    #[test]
    fn opens_asking_for_direct_io_get_it_and_real_files_pass_through_or_the_page_cache_when_watched(
    ) {
        for pt in [false, true] {
            assert_eq!(
                read_path(&opened(true, false, false), pt),
                ReadPath::DirectIo
            );
            assert_eq!(read_path(&opened(true, true, true), pt), ReadPath::DirectIo);
            assert_eq!(
                read_path(&opened(false, true, false), pt),
                ReadPath::PageCache { keep: true }
            );
            assert_eq!(
                read_path(&opened(false, false, false), pt),
                ReadPath::PageCache { keep: false }
            );
        }
        assert_eq!(
            read_path(&opened(false, true, true), true),
            ReadPath::Passthrough
        );
        // Without passthrough: the page cache, kept, for a watched real file; direct I/O
        // for one whose changes nobody reports.
        assert_eq!(
            read_path(&opened(false, true, true), false),
            ReadPath::PageCache { keep: true }
        );
        assert_eq!(
            read_path(&opened(false, false, true), false),
            ReadPath::DirectIo
        );
        assert_eq!(
            read_path(&opened(false, false, true), true),
            ReadPath::Passthrough
        );
    }

    #[test]
    fn one_backing_id_per_inode_serves_only_the_opens_its_access_covers() {
        let r = Access::of(libc::O_RDONLY);
        let w = Access::of(libc::O_WRONLY);
        let rw = Access::of(libc::O_RDWR);
        let ra = Access::of(libc::O_RDWR | libc::O_APPEND);
        assert_eq!(share(None, r), Share::Register);
        for used in [true, false] {
            assert_eq!(share(Some((rw, used)), r), Share::Reuse);
            assert_eq!(share(Some((rw, used)), w), Share::Reuse);
            assert_eq!(share(Some((ra, used)), ra), Share::Reuse);
        }
        assert_eq!(share(Some((r, true)), w), Share::DirectIo);
        assert_eq!(share(Some((r, true)), rw), Share::DirectIo);
        assert_eq!(share(Some((rw, true)), ra), Share::DirectIo);
        // Kept for the inode, used by no handle: replaced by one that serves the open.
        assert_eq!(share(Some((r, false)), w), Share::Register);
        assert_eq!(share(Some((rw, false)), ra), Share::Register);
    }
}
