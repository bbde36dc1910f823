//! Kernel passthrough: whether the kernel grants it (tried once at mount with a regular file
//! of the root), the backing ids registered for real files' inodes, and how an open is
//! answered (passed through, or through normafs's own read path).

use std::os::fd::{AsFd, AsRawFd};

use crate::store::root::RootPaths;

use super::mount::privileged;
use super::*;

/// Passthrough backing ids: one per inode (the kernel requires all passthrough opens of an
/// inode to share one), registered at its first passthrough open and kept until the kernel
/// forgets the inode, so that later opens cost no registration; the handles using one hold
/// it too.
#[derive(Default)]
pub(super) struct Backings {
    pub(super) by_handle: HashMap<u64, Arc<BackingId>>,
    pub(super) by_inode: HashMap<u64, (Arc<BackingId>, Access)>,
}

/// How to answer an open of a real file.
pub(super) enum OpenAs {
    Passthrough(Arc<BackingId>),
    Plain(FopenFlags),
}

impl NormaFuse {
    /// Unregister the backing id kept for `ino` once the kernel holds the inode no more and
    /// no handle uses the id: while a handle does, the kernel's inode may still pass through
    /// it, and an open registering another would fail (`EIO`).
    pub(super) fn let_go_backing(&self, ino: u64) {
        let mut b = self.backings.lock();
        let unused = b
            .by_inode
            .get(&ino)
            .is_some_and(|(id, _)| Arc::strong_count(id) == 1);
        if unused && !self.fs.held_by_kernel(ino) {
            b.by_inode.remove(&ino);
        }
    }

    /// How to answer the open of `ino` (handle `o`, open `flags`). `open_backing` registers a
    /// backing file with the kernel.
    pub(super) fn open_as(
        &self,
        ino: u64,
        flags: i32,
        o: &Opened,
        open_backing: &dyn Fn(&File) -> io::Result<BackingId>,
    ) -> OpenAs {
        let passthrough = self.shared.passthrough.load(Ordering::Relaxed);
        let file = match (open::read_path(o, passthrough), &o.backing) {
            (ReadPath::DirectIo, _) => return OpenAs::Plain(FopenFlags::FOPEN_DIRECT_IO),
            (ReadPath::PageCache { keep: true }, _) => {
                return OpenAs::Plain(FopenFlags::FOPEN_KEEP_CACHE)
            }
            (ReadPath::PageCache { keep: false }, _) => return OpenAs::Plain(FopenFlags::empty()),
            (ReadPath::Passthrough, Some(file)) => file,
            (ReadPath::Passthrough, None) => return OpenAs::Plain(FopenFlags::FOPEN_DIRECT_IO),
        };
        let need = Access::of(flags);
        let mut b = self.backings.lock();
        let existing = b.by_inode.get(&ino).map(|(id, has)| {
            // In use when a handle holds it besides this table.
            let used = Arc::strong_count(id) > 1;
            (id.clone(), *has, used)
        });
        let shared = existing.as_ref().map(|(_, has, used)| (*has, *used));
        let id = match (open::share(shared, need), existing) {
            (Share::Reuse, Some((id, _, _))) => id,
            (Share::DirectIo, _) => return OpenAs::Plain(FopenFlags::FOPEN_DIRECT_IO),
            (Share::Register | Share::Reuse, _) => match open_backing(file) {
                Ok(id) => {
                    let id = Arc::new(id);
                    b.by_inode.insert(ino, (id.clone(), need));
                    id
                }
                Err(e) => {
                    tracing::warn!("passthrough refused for inode {ino}: {e}; using pread/pwrite");
                    return OpenAs::Plain(FopenFlags::FOPEN_DIRECT_IO);
                }
            },
        };
        b.by_handle.insert(o.fh, id.clone());
        OpenAs::Passthrough(id)
    }
}

/// A regular file of the root, to try passthrough with.
pub(super) fn probe_file(paths: &RootPaths) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    for dir in [&paths.transcripts, &paths.memory] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in rd.flatten().take(64) {
            if e.file_type().is_ok_and(|t| t.is_file()) {
                if let Ok(f) = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                    .open(e.path())
                {
                    return Some(f);
                }
            }
        }
    }
    None
}

/// `FUSE_DEV_IOC_BACKING_CLOSE`: `_IOW(229, 2, u32)`.
pub(super) const FUSE_DEV_IOC_BACKING_CLOSE: libc::c_ulong = (1 << 30) | (4 << 16) | (229 << 8) | 2;

/// Decide passthrough once: the kernel must have granted it and accept a backing file. Whether
/// it is on, the short reason when it is not, and the whole story for `--verbose`.
pub(super) fn decide_passthrough<S: AsFd>(
    dev: &S,
    paths: &RootPaths,
    want: bool,
    granted: bool,
) -> (bool, &'static str, String) {
    const PREAD: &str = "real files are read and written with pread/pwrite";
    if !want {
        return (
            false,
            "--no-passthrough",
            format!("off (--no-passthrough): {PREAD}"),
        );
    }
    if !granted {
        return (
            false,
            "the kernel lacks it",
            format!("off: the kernel does not offer FUSE passthrough (Linux 6.9+); {PREAD}"),
        );
    }
    let Some(f) = probe_file(paths) else {
        return (true, "", "on: kernel FUSE passthrough for real files (granted by the kernel; no file to try yet)".into());
    };
    match BackingId::create_raw(dev, &f) {
        Ok(id) => {
            // SAFETY: closes the backing id we just opened on our own /dev/fuse descriptor.
            unsafe {
                libc::ioctl(
                    dev.as_fd().as_raw_fd(),
                    FUSE_DEV_IOC_BACKING_CLOSE as _,
                    &id as *const u32,
                )
            };
            (true, "", "on: kernel FUSE passthrough for real files".into())
        }
        Err(e) if e.raw_os_error() == Some(libc::EPERM) && !privileged() => (
            false,
            "needs CAP_SYS_ADMIN",
            format!("off: kernel passthrough needs CAP_SYS_ADMIN, which an ordinary user's mount lacks; {PREAD}"),
        ),
        Err(e) => (
            false,
            "the kernel refused a backing file",
            format!("off: the kernel refused a backing file ({e}); {PREAD}"),
        ),
    }
}
