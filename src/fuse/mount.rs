//! The mount: checks of the device and the mountpoint, the passthrough probe, the kernel
//! invalidation plumbing (the watcher's events and expiring links), and the background
//! session with its clean unmount.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{BackgroundSession, BackingId, INodeNo, MountOption, Notifier, Session, SessionACL};
use parking_lot::Mutex;

use crate::config::Config;
use crate::fs::watch::{Inval, Watcher};
use crate::fs::{FsOptions, NormaFs};
use crate::store::root::RootPaths;

use super::{Backings, MountOptions, NormaFuse, Shared};

/// A running mount; unmounts on drop.
pub struct MountHandle {
    session: Option<BackgroundSession>,
    watcher: Option<Arc<Watcher>>,
    watch_thread: Option<JoinHandle<()>>,
    mountpoint: PathBuf,
    passthrough: bool,
    passthrough_note: String,
    fs: Arc<NormaFs>,
}

impl MountHandle {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether real files use kernel passthrough.
    pub fn passthrough(&self) -> bool {
        self.passthrough
    }

    /// Why passthrough is on or off, for `--verbose`.
    pub fn passthrough_note(&self) -> &str {
        &self.passthrough_note
    }

    pub fn fs(&self) -> &Arc<NormaFs> {
        &self.fs
    }

    /// Directories watched by inotify (0 when inotify is unavailable).
    pub fn watches(&self) -> usize {
        self.watcher.as_ref().map_or(0, |w| w.watches())
    }

    /// The session ended without us (someone unmounted it).
    pub fn is_finished(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Unmount now and wait for the workers.
    pub fn unmount(mut self) -> io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> io::Result<()> {
        if let Some(w) = self.watcher.take() {
            w.stop();
        }
        if let Some(t) = self.watch_thread.take() {
            let _ = t.join();
        }
        let Some(s) = self.session.take() else {
            return Ok(());
        };
        match s.umount_and_join() {
            Ok(()) => Ok(()),
            Err(e) => {
                // Busy (a process still has a file or its cwd there): detach it lazily; the
                // kernel ends the session when the last user leaves.
                tracing::warn!(
                    "unmounting {}: {e}; detaching lazily",
                    self.mountpoint.display()
                );
                lazy_unmount(&self.mountpoint)
            }
        }
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!("cannot unmount {}: {e}", self.mountpoint.display());
        }
    }
}

fn lazy_unmount(p: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the mount point"))?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Ok(())
}

/// `/dev/fuse` can be opened.
fn check_fuse() -> io::Result<()> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "FUSE is not available: cannot open /dev/fuse ({e}); install the fuse3 \
                     package and load the fuse kernel module (modprobe fuse)"
                ),
            )
        })
}

/// What to say of a mount point whose FUSE daemon is gone: the command that clears it.
pub fn dead_mount_advice(mnt: &Path) -> String {
    let m = mnt.display();
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let cmd = if root {
        format!("umount -l '{m}'")
    } else {
        format!("fusermount3 -u '{m}'")
    };
    format!("is a mount whose normafs process is gone (Transport endpoint is not connected): run `{cmd}`, then mount again")
}

/// The mount point exists, is an empty directory, and is not inside a backing directory.
fn check_mountpoint(paths: &RootPaths, mnt: &Path) -> io::Result<PathBuf> {
    let bad = |kind: io::ErrorKind, what: &str| {
        io::Error::new(kind, format!("mount point {} {what}", mnt.display()))
    };
    let meta = std::fs::metadata(mnt).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => bad(e.kind(), "does not exist"),
        // A mount whose daemon died (kill -9, a crash): the kernel still holds it.
        _ if e.raw_os_error() == Some(libc::ENOTCONN) => bad(e.kind(), &dead_mount_advice(mnt)),
        _ => bad(e.kind(), &format!("cannot be used: {e}")),
    })?;
    if !meta.is_dir() {
        return Err(bad(io::ErrorKind::InvalidInput, "is not a directory"));
    }
    let mut rd =
        std::fs::read_dir(mnt).map_err(|e| bad(e.kind(), &format!("cannot be read: {e}")))?;
    if rd.next().is_some() {
        return Err(bad(io::ErrorKind::InvalidInput, "is not empty"));
    }
    let canon = mnt.canonicalize()?;
    for (label, dir) in [
        ("transcripts", &paths.transcripts),
        ("memory", &paths.memory),
        ("archives", &paths.archives),
    ] {
        if let Ok(d) = dir.canonicalize() {
            if canon.starts_with(&d) {
                return Err(bad(
                    io::ErrorKind::InvalidInput,
                    &format!("is inside the {label} directory {}", d.display()),
                ));
            }
        }
    }
    Ok(canon)
}

/// A regular file of the root, to try passthrough with.
fn probe_file(paths: &RootPaths) -> Option<File> {
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
const FUSE_DEV_IOC_BACKING_CLOSE: libc::c_ulong = (1 << 30) | (4 << 16) | (229 << 8) | 2;

/// Decide passthrough once: the kernel must have granted it and accept a backing file.
fn decide_passthrough<S: AsFd>(
    dev: &S,
    paths: &RootPaths,
    want: bool,
    granted: bool,
) -> (bool, String) {
    if !want {
        return (
            false,
            "off (--no-passthrough): real files are read and written with pread/pwrite".into(),
        );
    }
    if !granted {
        return (false, "off: the kernel does not offer FUSE passthrough (Linux 6.9+); real files are read and written with pread/pwrite".into());
    }
    let Some(f) = probe_file(paths) else {
        return (true, "on: kernel FUSE passthrough for real files (granted by the kernel; no file to try yet)".into());
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
            (true, "on: kernel FUSE passthrough for real files".into())
        }
        Err(e) => (false, format!("off: the kernel refused a backing file ({e}); real files are read and written with pread/pwrite")),
    }
}

/// A thread that has the kernel drop the cached pages of an inode at the time it is sent with
/// (a link target the watcher does not cover: kept for the TTL, like attributes). It ends when
/// the sender is dropped, with the mount.
fn expire_later(n: Notifier) -> io::Result<std::sync::mpsc::Sender<(std::time::Instant, u64)>> {
    use std::sync::mpsc::RecvTimeoutError;
    let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, u64)>();
    std::thread::Builder::new()
        .name("normafs-expire".into())
        .spawn(move || {
            let mut due: std::collections::BTreeSet<(std::time::Instant, u64)> =
                std::collections::BTreeSet::new();
            loop {
                let now = std::time::Instant::now();
                while let Some(&(at, ino)) = due.first() {
                    if at > now {
                        break;
                    }
                    due.pop_first();
                    if let Err(e) = n.inval_inode(INodeNo(ino), 0, 0) {
                        tracing::debug!("expire inode {ino}: {e}");
                    }
                }
                let wait = due
                    .first()
                    .map(|&(at, _)| at.saturating_duration_since(now))
                    .unwrap_or(Duration::from_secs(3600));
                match rx.recv_timeout(wait) {
                    Ok(x) => {
                        due.insert(x);
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        })?;
    Ok(tx)
}

/// Drop one kernel cache (a node the kernel was never told about needs nothing).
fn invalidate(fs: &NormaFs, n: &Notifier, i: &Inval) {
    let r = match i {
        Inval::Inode { node, data } => match fs.known_ino(node) {
            Some(ino) => n.inval_inode(INodeNo(ino), if *data { 0 } else { -1 }, 0),
            None => return,
        },
        Inval::Entry { parent, name } => match fs.known_ino(parent) {
            Some(ino) => n.inval_entry(INodeNo(ino), name),
            None => return,
        },
        Inval::Computed(c) => {
            for (ino, entry) in fs.invalidate_computed(c) {
                if let Err(e) = n.inval_inode(INodeNo(ino), 0, 0) {
                    tracing::debug!("invalidate computed inode {ino}: {e}");
                }
                if let Some((dir, name)) = entry {
                    if let Err(e) = n.inval_entry(INodeNo(dir), OsStr::new(&name)) {
                        tracing::debug!("invalidate raw entry {name}: {e}");
                    }
                }
            }
            return;
        }
    };
    if let Err(e) = r {
        tracing::debug!("invalidate {i:?}: {e}");
    }
}

/// Mount `paths` at `mnt` and serve it from background threads until the handle is dropped.
pub fn mount_background(
    paths: RootPaths,
    cfg: Config,
    opts: MountOptions,
    mnt: &Path,
) -> io::Result<MountHandle> {
    check_fuse()?;
    let mountpoint = check_mountpoint(&paths, mnt)?;
    let mut fs = NormaFs::new(
        paths.clone(),
        cfg.clone(),
        FsOptions::new(&cfg, opts.read_only),
    );
    // Summaries name archives inside the mount under `archive_paths = mount`.
    fs.set_mountpoint(&mountpoint);
    let watcher = match Watcher::new(&paths) {
        Ok(w) => Some(Arc::new(w)),
        Err(e) => {
            tracing::warn!("inotify unavailable ({e}); changes show after the attribute TTL");
            None
        }
    };
    if let Some(w) = &watcher {
        fs.set_watcher(w.clone());
    }
    let shared = Arc::new(Shared::default());
    let nf = NormaFuse {
        fs: Arc::new(fs),
        want_passthrough: opts.passthrough,
        shared: shared.clone(),
        backings: Mutex::new(Backings::default()),
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName("normafs".into()),
        MountOption::Subtype("normafs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    // `--read-only` is enforced by `NormaFs` (EROFS for every change), not by the kernel's
    // read-only flag: that would refuse to open `ctl` for writing, and `help` must still work
    // there (SPEC 6).
    if opts.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    let session = Session::new(nf, &mountpoint, &config).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot mount at {}: {e}", mountpoint.display()),
        )
    })?;
    let fs = shared
        .fs
        .get()
        .cloned()
        .ok_or_else(|| io::Error::other("the kernel did not initialize the mount"))?;
    let (passthrough, passthrough_note) = decide_passthrough(
        &session,
        &paths,
        opts.passthrough,
        shared.kernel_passthrough.load(Ordering::Relaxed),
    );
    shared.passthrough.store(passthrough, Ordering::Relaxed);
    let notifier = session.notifier();
    let _ = shared.notifier.set(notifier.clone());
    let _ = shared
        .expire
        .set(Mutex::new(expire_later(notifier.clone())?));
    let bg = session.spawn()?;
    let mut handle = MountHandle {
        session: Some(bg),
        watcher: watcher.clone(),
        watch_thread: None,
        mountpoint,
        passthrough,
        passthrough_note,
        fs: fs.clone(),
    };
    if let Some(w) = watcher {
        let t = std::thread::Builder::new()
            .name("normafs-watch".into())
            .spawn(move || {
                w.run(&mut |i| invalidate(&fs, &notifier, i), &mut || {
                    // Events were lost: drop every attribute, page and listing the kernel
                    // may have kept for long (new replies get the short TTL from now on).
                    for ino in fs.held_inodes() {
                        let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
                    }
                })
            })?;
        handle.watch_thread = Some(t);
    }
    Ok(handle)
}
