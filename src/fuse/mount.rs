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

use super::{helper, Backings, MountOptions, NormaFuse, Shared};

/// A running mount; unmounts on drop.
pub struct MountHandle {
    session: Option<BackgroundSession>,
    watcher: Option<Arc<Watcher>>,
    watch_thread: Option<JoinHandle<()>>,
    mountpoint: PathBuf,
    passthrough: bool,
    passthrough_why: &'static str,
    passthrough_note: String,
    fs: Arc<NormaFs>,
    via: Via,
    shared: Arc<Shared>,
}

/// How the mount was made, which says how it is undone.
enum Via {
    /// mount(2) on our own `/dev/fuse` descriptor (root).
    Syscall,
    /// `fusermount3` (an ordinary user, or `auto_unmount`).
    Helper {
        bin: PathBuf,
        keeper: helper::Keeper,
    },
}

impl Via {
    /// How the mount was made, for `--verbose`.
    fn describe(&self) -> String {
        match self {
            Via::Syscall => "mounted with mount(2) on /dev/fuse".into(),
            Via::Helper { bin, keeper } => format!(
                "mounted through {}{}",
                bin.display(),
                if keeper.auto_unmount() {
                    ", which unmounts when this process ends (auto_unmount)"
                } else {
                    ""
                }
            ),
        }
    }
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

    /// `on`, or `off (<why>)`, for the start line.
    pub fn passthrough_summary(&self) -> String {
        if self.passthrough {
            "on".into()
        } else {
            format!("off ({})", self.passthrough_why)
        }
    }

    /// The command that unmounts this mount from a shell.
    pub fn unmount_command(&self) -> String {
        let m = self.mountpoint.display();
        match &self.via {
            Via::Syscall => format!("umount '{m}'"),
            Via::Helper { bin, .. } => format!(
                "{} -u '{m}'",
                bin.file_name()
                    .map_or("fusermount3".into(), |n| n.to_string_lossy())
            ),
        }
    }

    /// How the mount was made (mount(2), or which helper), for `--verbose`.
    pub fn mounted_via(&self) -> String {
        self.via.describe()
    }

    /// The requests the kernel sent so far, by kind.
    pub fn requests(&self) -> Vec<(&'static str, u64)> {
        self.shared.requests.snapshot()
    }

    /// One line of what the mount did so far: requests by kind, computations, and the
    /// cache (what `kill -USR1` prints).
    pub fn report(&self) -> String {
        let reqs: Vec<String> = self
            .requests()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(op, n)| format!("{op}={n}"))
            .collect();
        let c = self.fs.computed_counts();
        let held = self.fs.held_versions();
        format!(
            "normafs: requests {}; computations={} renders={} input_checks={} refills={}; cache {} of {} MiB; held {} versions, {} MiB",
            reqs.join(" "),
            c.computations,
            c.renders,
            c.input_checks,
            c.refills,
            self.fs.cache_used() >> 20,
            self.fs.cache_budget() >> 20,
            held.0,
            held.1 >> 20
        )
    }

    pub fn fs(&self) -> &Arc<NormaFs> {
        &self.fs
    }

    /// Backing directories left unwatched because inotify is blind on their filesystem
    /// (network, cluster, FUSE), with its name.
    pub fn blind_dirs(&self) -> Vec<(PathBuf, &'static str)> {
        self.watcher.as_ref().map_or_else(Vec::new, |w| w.blind())
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
        if s.guard.is_finished() {
            // Unmounted from outside (`umount`, `fusermount3 -u`): nothing left to undo.
            return s.join();
        }
        if let Via::Helper { bin, .. } = &self.via {
            let r = helper::unmount(bin, &self.mountpoint, false).or_else(|e| {
                tracing::warn!(
                    "unmounting {}: {e}; detaching lazily",
                    self.mountpoint.display()
                );
                helper::unmount(bin, &self.mountpoint, true)
            });
            // Without the mount the workers' reads end; the helper (auto_unmount) goes too.
            return r.and_then(|()| s.join());
        }
        match unmount_syscall(&self.mountpoint) {
            // Without the mount the workers' reads end.
            Ok(()) => s.join(),
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

fn c_path(p: &Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the mount point"))
}

/// As root: open `/dev/fuse` and mount it at `mnt` with mount(2), as type `fuse.normafs` —
/// the type `fusermount3`'s mounts get, which `/proc/mounts`, `findmnt -t fuse.normafs` and
/// `umount -t fuse.normafs` name — with the options fuser's own mount would give (the caller's
/// ids, `default_permissions`, `nosuid`, `nodev`, `noatime`; `noexec` and `allow_other` when
/// asked). The descriptor serves the session.
fn mount_syscall(
    mnt: &Path,
    source: &str,
    no_exec: bool,
    allow_other: bool,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")?;
    let mode = std::fs::metadata(mnt)?.mode() & libc::S_IFMT;
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={mode:o},user_id={uid},group_id={gid},default_permissions",
        dev.as_raw_fd()
    );
    if allow_other {
        data.push_str(",allow_other");
    }
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOATIME;
    if no_exec {
        flags |= libc::MS_NOEXEC;
    }
    let target = c_path(mnt)?;
    let data = std::ffi::CString::new(data).map_err(|_| io::Error::other("mount data"))?;
    let source = std::ffi::CString::new(source).map_err(|_| io::Error::other("mount source"))?;
    // SAFETY: valid C strings for the call's duration; `data` is the FUSE mount data string.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            c"fuse.normafs".as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(dev.into())
}

/// Unmount our mount(2) mount at `p` (already gone: nothing to do).
fn unmount_syscall(p: &Path) -> io::Result<()> {
    let c = c_path(p)?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), 0) } < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Ok(())
}

fn lazy_unmount(p: &Path) -> io::Result<()> {
    let c = c_path(p)?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Ok(())
}

/// Whether this process may mount FUSE itself (mount(2) needs CAP_SYS_ADMIN; as root we
/// have it).
fn privileged() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// How to mount: mount(2) as root, else (or for `auto_unmount`) through `fusermount3`; the
/// second value is whether `/dev/fuse` opens for us (each worker's clone of the descriptor
/// opens it). Neither possible is one line naming the cause.
fn how_to_mount(opts: &MountOptions) -> io::Result<(Option<PathBuf>, bool)> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop);
    if let Err(e) = &dev {
        if e.kind() == io::ErrorKind::NotFound {
            return Err(io::Error::new(
                e.kind(),
                "FUSE is not available: /dev/fuse does not exist (load the fuse kernel module: \
                 modprobe fuse; in a container, pass the device in)",
            ));
        }
    }
    let opens = dev.is_ok();
    if privileged() && !opts.auto_unmount {
        return match dev {
            Ok(()) => Ok((None, true)),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("FUSE is not available: cannot open /dev/fuse ({e})"),
            )),
        };
    }
    if let Some(bin) = helper::find() {
        if opts.auto_unmount && !opts.allow_other && !privileged() && !user_allow_other() {
            // fusermount3 looks at the mount as root to see that it is dead; the kernel lets
            // root into an ordinary user's mount only with allow_other.
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "-o auto_unmount: for an ordinary user's mount fusermount3 needs the line \
                 `user_allow_other` in /etc/fuse.conf (it checks the dead mount as root); an \
                 administrator adds it, or mount without auto_unmount",
            ));
        }
        if opts.allow_other && !privileged() && !user_allow_other() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "-o allow_other: /etc/fuse.conf does not have the line `user_allow_other`, which \
                 lets ordinary users open their mounts to others (an administrator adds it; or \
                 mount without allow_other)",
            ));
        }
        return Ok((Some(bin), opens));
    }
    let why = if opts.auto_unmount {
        "-o auto_unmount needs fusermount3".to_string()
    } else {
        match dev {
            Ok(()) => "an ordinary user cannot call mount(2) (it needs CAP_SYS_ADMIN)".to_string(),
            Err(e) => format!("cannot open /dev/fuse ({e})"),
        }
    };
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "cannot mount: {why}, and fusermount3, which mounts FUSE for ordinary users, is not \
             installed (Debian/Ubuntu: apt install fuse3; or set FUSERMOUNT_PATH)"
        ),
    ))
}

/// The helper could not open `/dev/fuse` (it opens it as the user): say the device's mode,
/// which is the cause on machines that keep it 0600.
fn explain_device(e: io::Error, dev_opens: bool) -> io::Error {
    use std::os::unix::fs::PermissionsExt;
    if dev_opens || !e.to_string().contains("/dev/fuse") {
        return e;
    }
    let mode = std::fs::metadata("/dev/fuse").map_or(0, |m| m.permissions().mode() & 0o777);
    io::Error::new(
        e.kind(),
        format!(
            "{e} (/dev/fuse is mode {mode:04o} here; ordinary users need 0666, its usual mode: \
             an administrator runs `chmod 0666 /dev/fuse` or adds a udev rule)"
        ),
    )
}

/// `/etc/fuse.conf` has `user_allow_other`.
fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf").is_ok_and(|t| {
        t.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .any(|l| l == "user_allow_other")
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

/// What is mounted at `mnt` now, from `/proc/self/mountinfo`: the source and the type.
fn mounted_at(mnt: &Path) -> Option<(String, String)> {
    let canon = mnt.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // Fields: id parent dev root MOUNTPOINT opts [optional…] - TYPE SOURCE superopts; spaces
    // and the like in paths are octal escapes.
    let unescape = |f: &str| {
        let b = f.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let oct = b.get(i + 1..i + 4).and_then(|d| {
                std::str::from_utf8(d)
                    .ok()
                    .and_then(|d| u8::from_str_radix(d, 8).ok())
            });
            match (b[i], oct) {
                (b'\\', Some(c)) => {
                    out.push(c);
                    i += 4;
                }
                (c, _) => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let at = unescape(fields.get(4)?);
        if Path::new(&at) != canon {
            return None;
        }
        let dash = fields.iter().position(|f| *f == "-")?;
        Some((
            unescape(fields.get(dash + 2)?),
            fields.get(dash + 1)?.to_string(),
        ))
    })
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
        if let Some((source, kind)) = mounted_at(mnt) {
            // SAFETY: geteuid cannot fail.
            let root = unsafe { libc::geteuid() } == 0;
            let m = mnt.display();
            let cmd = if root {
                format!("umount '{m}'")
            } else {
                format!("fusermount3 -u '{m}'")
            };
            return Err(bad(
                io::ErrorKind::InvalidInput,
                &format!("is already a mount ({source}, type {kind}): `{cmd}` unmounts it"),
            ));
        }
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

/// Decide passthrough once: the kernel must have granted it and accept a backing file. Whether
/// it is on, the short reason when it is not, and the whole story for `--verbose`.
fn decide_passthrough<S: AsFd>(
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

/// A thread that has the kernel drop the pages of a growing file (computed, or real without
/// passthrough) from the one its last size told ends in, then says so (see
/// `NormaFs::drop_tail`): apart from the workers, which serve the reads such a drop may wait
/// for. It ends with the mount.
fn drop_tails(
    fs: std::sync::Weak<NormaFs>,
    n: Notifier,
) -> io::Result<std::sync::mpsc::Sender<crate::fs::TailDrop>> {
    let (tx, rx) = std::sync::mpsc::channel::<crate::fs::TailDrop>();
    std::thread::Builder::new()
        .name("normafs-tails".into())
        .spawn(move || {
            while let Ok(d) = rx.recv() {
                let Some(fs) = fs.upgrade() else { return };
                fs.drop_tail(d, |from| {
                    if let Err(e) = n.inval_inode(INodeNo(d.ino), from as i64, 0) {
                        tracing::debug!("drop the pages of inode {} from {from}: {e}", d.ino);
                    }
                });
            }
        })?;
    Ok(tx)
}

/// As root, give the mount's own read-ahead (`/sys/class/bdi/0:N/read_ahead_kb`, 128 KiB
/// as the kernel makes it) that of the device under `backing`, at least 1 MiB: reads through
/// the page cache then come to normafs in as many bytes at once as a native read asks its
/// disk for (P1u, cold). `Ok(None)` when there is nothing to do (not root, or already so).
fn read_ahead_like(mnt: &Path, backing: &Path) -> io::Result<Option<u64>> {
    use std::os::unix::fs::MetadataExt;
    if !privileged() {
        return Ok(None);
    }
    let bdi = |dev: u64| {
        let (ma, mi) = (libc::major(dev), libc::minor(dev));
        [
            format!("/sys/class/bdi/{ma}:{mi}/read_ahead_kb"),
            format!("/sys/dev/block/{ma}:{mi}/queue/read_ahead_kb"),
            format!("/sys/dev/block/{ma}:{mi}/../queue/read_ahead_kb"),
        ]
    };
    let read_kb = |p: &str| -> Option<u64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let want = bdi(std::fs::metadata(backing)?.dev())
        .iter()
        .find_map(|p| read_kb(p))
        .unwrap_or(0)
        .clamp(1024, 16 * 1024);
    let ours = bdi(std::fs::metadata(mnt)?.dev())[0].clone();
    if read_kb(&ours).is_some_and(|kb| kb >= want) {
        return Ok(None);
    }
    std::fs::write(&ours, want.to_string())?;
    Ok(Some(want))
}

/// A thread that lets go, every half second, of the real files held for their inodes that
/// no handle shares once their grace is over (see `InodeTable`); it ends with the mount.
fn let_go_idle_files(fs: std::sync::Weak<NormaFs>) -> io::Result<()> {
    std::thread::Builder::new()
        .name("normafs-let-go".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            match fs.upgrade() {
                Some(fs) => {
                    fs.let_go_idle_files();
                }
                None => return,
            }
        })?;
    Ok(())
}

/// Drop one kernel cache (a node the kernel was never told about needs nothing).
fn invalidate(fs: &NormaFs, n: &Notifier, i: &Inval) {
    let r = match i {
        Inval::Inode { node, data } => match fs.known_ino(node) {
            // Every page dropped: what a real file's held-back growth waits for.
            Some(ino) if *data => fs.drop_real_pages(ino, || n.inval_inode(INodeNo(ino), 0, 0)),
            Some(ino) => n.inval_inode(INodeNo(ino), -1, 0),
            None => return,
        },
        Inval::Entry { parent, name } => match fs.known_ino(parent) {
            Some(ino) => n.inval_entry(INodeNo(ino), name),
            None => return,
        },
        Inval::Computed(c) => {
            for i in fs.invalidate_computed(c) {
                // Attributes and the name, so that the next path walk asks which inode it
                // has now; never the pages: an inode stands for one version, whose bytes they
                // stay (a version left behind goes with its inode once the kernel lets it go).
                if let Err(e) = n.inval_inode(INodeNo(i.ino), -1, 0) {
                    tracing::debug!("invalidate computed inode {}: {e}", i.ino);
                }
                if let Some((dir, name)) = i.entry {
                    if let Err(e) = n.inval_entry(INodeNo(dir), OsStr::new(&name)) {
                        tracing::debug!("invalidate computed entry {name}: {e}");
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

/// Raise this process's soft limit of open descriptors to its hard limit (as root, the hard
/// limit first to 2^20 or the system's `nr_open`, whichever is lower); the soft limit after.
fn raise_descriptor_limit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<libc::rlim_t>().ok())
        .unwrap_or(lim.rlim_max);
    let want = nr_open.min(1 << 20).max(lim.rlim_max);
    let raised = libc::rlimit {
        rlim_cur: want,
        rlim_max: want,
    };
    // SAFETY: a valid rlimit; refused (EPERM) without CAP_SYS_RESOURCE, which changes nothing.
    if want > lim.rlim_max && unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        return want as usize;
    }
    let soft = libc::rlimit {
        rlim_cur: lim.rlim_max,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: a valid rlimit within the hard limit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &soft) } == 0 {
        return lim.rlim_max as usize;
    }
    lim.rlim_cur as usize
}

/// Mount `paths` at `mnt` and serve it from background threads until the handle is dropped.
pub fn mount_background(
    paths: RootPaths,
    cfg: Config,
    opts: MountOptions,
    mnt: &Path,
) -> io::Result<MountHandle> {
    let (helper_bin, dev_opens) = how_to_mount(&opts)?;
    let mountpoint = check_mountpoint(&paths, mnt)?;
    let mut fs = NormaFs::new(
        paths.clone(),
        cfg.clone(),
        FsOptions::new(&cfg, opts.read_only),
    );
    // Summaries name archives inside the mount under `archive_paths = mount`.
    fs.set_mountpoint(&mountpoint);
    // The budget (`--cache-mb`) bounds the mount's resident memory, not only its cache.
    fs.bound_resident_memory();
    // Each real file the kernel holds an inode of is held open (see `InodeTable`): as
    // many descriptors as may be had, three quarters of them for held files.
    fs.set_files_held_at_most(raise_descriptor_limit() / 4 * 3);
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
        zero_opendir: !opts.auto_unmount,
        shared: shared.clone(),
        backings: Mutex::new(Backings::default()),
    };
    let mut config = fuser::Config::default();
    let source = opts.source.as_ref().map_or_else(
        || "normafs".to_string(),
        |p| p.to_string_lossy().into_owned(),
    );
    config.mount_options = vec![
        MountOption::FSName(source.clone()),
        MountOption::Subtype("normafs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
        MountOption::NoSuid,
        MountOption::NoDev,
    ];
    if opts.no_exec {
        config.mount_options.push(MountOption::NoExec);
    }
    // `--read-only` is enforced by `NormaFs` (EROFS for every change), not by the kernel's
    // read-only flag: that would refuse to open `ctl` for writing, and `help` must still work
    // there (SPEC 6).
    if opts.allow_other {
        config.acl = SessionACL::All;
    }
    config.n_threads = Some(opts.threads.max(1));
    // Each worker's clone of the descriptor opens /dev/fuse; where only fusermount3 can open
    // it, the workers share the one descriptor.
    config.clone_fd = dev_opens;
    let cannot = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!("cannot mount at {}: {e}", mountpoint.display()),
        )
    };
    let (session, via) = match helper_bin {
        None => {
            let fd = mount_syscall(&mountpoint, &source, opts.no_exec, opts.allow_other)
                .map_err(cannot)?;
            match Session::from_fd(nf, fd, config.acl, config.clone()) {
                Ok(s) => (s, Via::Syscall),
                Err(e) => {
                    let _ = unmount_syscall(&mountpoint).or_else(|_| lazy_unmount(&mountpoint));
                    return Err(cannot(e));
                }
            }
        }
        Some(bin) => {
            // fusermount3 reads `\,` and `\\` in a value as the character.
            let fsname = format!(
                "fsname={}",
                source.replace('\\', "\\\\").replace(',', "\\,")
            );
            let mut o = vec![
                fsname.as_str(),
                "subtype=normafs",
                "default_permissions",
                "noatime",
                "nosuid",
                "nodev",
            ];
            let mut acl = config.acl;
            if opts.allow_other {
                o.push("allow_other");
            } else if opts.auto_unmount && !privileged() {
                // The kernel lets others in for fusermount3's check as root; we let in only
                // root and the owner (libfuse's allow_root).
                o.push("allow_other");
                acl = SessionACL::RootAndOwner;
            }
            if opts.auto_unmount {
                o.push("auto_unmount");
            }
            if opts.no_exec {
                o.push("noexec");
            }
            let (fd, keeper) = helper::mount(&bin, &mountpoint, &o.join(","))
                .map_err(|e| cannot(explain_device(e, dev_opens)))?;
            config.acl = acl;
            match Session::from_fd(nf, fd, acl, config.clone()) {
                Ok(s) => (s, Via::Helper { bin, keeper }),
                Err(e) => {
                    let _ = helper::unmount(&bin, &mountpoint, true);
                    return Err(cannot(e));
                }
            }
        }
    };
    let fs = shared
        .fs
        .get()
        .cloned()
        .ok_or_else(|| io::Error::other("the kernel did not initialize the mount"))?;
    let (passthrough, passthrough_why, passthrough_note) = decide_passthrough(
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
    // Without passthrough real files are read through the mount's page cache too.
    fs.set_tail_drops(
        drop_tails(Arc::downgrade(&fs), notifier.clone())?,
        !passthrough,
    );
    let bg = session.spawn()?;
    let_go_idle_files(Arc::downgrade(&fs))?;
    if !passthrough {
        match read_ahead_like(&mountpoint, &paths.memory) {
            Ok(Some(kb)) => tracing::debug!("the mount's read-ahead set to {kb} KiB"),
            Ok(None) => {}
            Err(e) => tracing::debug!("the mount's read-ahead left as it is: {e}"),
        }
    }
    let mut handle = MountHandle {
        session: Some(bg),
        watcher: watcher.clone(),
        watch_thread: None,
        mountpoint,
        passthrough,
        passthrough_why,
        passthrough_note,
        fs: fs.clone(),
        via,
        shared: shared.clone(),
    };
    if let Some(w) = watcher {
        let t = std::thread::Builder::new()
            .name("normafs-watch".into())
            .spawn(move || {
                w.run(&mut |i| invalidate(&fs, &notifier, i), &mut || {
                    // Events were lost: drop every attribute, page and listing the kernel
                    // may have kept for long (new replies get the short TTL from now on).
                    for ino in fs.held_inodes() {
                        fs.computed_pages_dropped(ino, 0);
                        let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
                    }
                })
            })?;
        handle.watch_thread = Some(t);
    }
    Ok(handle)
}
