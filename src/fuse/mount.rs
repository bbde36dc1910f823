//! The mount: the background session with its clean unmount, and its setup — how to mount
//! (`how.rs`: the device, the mountpoint, mount(2) or `fusermount3`), passthrough decided
//! once (`super::passthrough`), and the threads that tell the kernel what changed
//! (`notify.rs`: the watcher's invalidations, expiring links, growing files' tails).

use std::ffi::OsStr;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{BackgroundSession, INodeNo, MountOption, Notifier, Session, SessionACL};
use parking_lot::Mutex;

use crate::config::Config;
use crate::fs::watch::{Inval, Watcher};
use crate::fs::{FsOptions, NormaFs};
use crate::store::root::RootPaths;

use super::{helper, Backings, MountOptions, NormaFuse, Shared};

mod how;
mod notify;
mod settings;
use super::passthrough::decide_passthrough;
pub(super) use how::privileged;
use how::*;
use notify::*;

/// A running mount; unmounts on drop.
pub struct MountHandle {
    session: Option<BackgroundSession>,
    watcher: Option<Arc<Watcher>>,
    watch_thread: Option<JoinHandle<()>>,
    settings_watch: Option<settings::SettingsWatch>,
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
        if let Some(w) = self.settings_watch.take() {
            w.stop.store(true, Ordering::Relaxed);
            let _ = w.thread.join();
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
    let watcher = match Watcher::new(&paths) {
        Ok(w) => Some(Arc::new(w)),
        Err(e) => {
            tracing::warn!("inotify unavailable ({e}); changes show after the attribute TTL");
            None
        }
    };
    // Four malloc arenas, not glibc's eight per core: each thread of its own keeps the
    // memory it freed. With two, the threads that parse a large transcript together shared
    // one arena's lock: H's first read took 2.15 s against 1.83 s with four (medians of 11
    // interleaved runs). More are faster still (eight: 1.15 s against 1.24 s with four, once
    // stored texts were read back without a lock; six: 1.18 s against 1.25 s), because the
    // parse's threads, then made anew for each 16 MiB read, less often took an arena in use.
    // But each arena keeps its own freed memory: with `tests/resident.rs` run whole, the peak
    // of a 65 MiB transcript's first read was 73-80 MiB with four, 84 MiB with six and 77-89
    // MiB with eight, against the 1.25x (81 MiB) that test holds the mount to. Threads kept
    // for the parse (`pool.rs`) took more than that gain with four arenas: 0.86 -> 0.73 s.
    // Blocks of 32 MiB and more are mapped on their own, those below come from the heap (the
    // bound glibc would reach by itself, fixed from the start). With a bound of 256 KiB,
    // every large list of a computation was a new mapping faulted in page by page: the first
    // read of a 100,000-message session's view took ~1.21 s against ~1.03 s (medians of 10
    // interleaved runs), with the RSS after `ls -l` and `du` of a 1,000-session root
    // (+43-46 MiB), after a whole-mount grep (77-78 MiB) and after a read past a small
    // budget (14 MiB) the same either way; what is freed goes back to the system through
    // `malloc_trim` (`store/cache.rs`).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt has no preconditions; set before the mount's threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 4);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
    let setup = NormaFs::setup(
        paths.clone(),
        cfg.clone(),
        FsOptions::new(&cfg, opts.read_only),
    );
    let fs = (opts.computed_files.iter())
        .try_fold(setup, |s, f| s.computed_file(f))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?
        // Summaries name archives inside the mount under `archive_paths = mount`.
        .mountpoint(&mountpoint)
        // The budget (`--cache-mb`) bounds the mount's resident memory, not only its cache.
        .bounding_resident_memory()
        // Each real file the kernel holds an inode of is held open (see `InodeTable`): as
        // many descriptors as may be had, three quarters of them for held files.
        .files_held_at_most(raise_descriptor_limit() / 4 * 3)
        .watcher(watcher.clone())
        .build();
    let shared = Arc::new(Shared::default());
    let nf = NormaFuse {
        fs: Arc::new(fs),
        want_passthrough: opts.passthrough && !opts.no_open,
        no_open: opts.no_open,
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
    // `--read-only` is the kernel's read-only flag (`mount` and `findmnt` list it `ro`, and no
    // change reaches the mount), and `NormaFs` refuses every change besides (EROFS). `ctl`
    // cannot be opened for writing then: its `help` is there to read instead.
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
            let fd = mount_syscall(
                &mountpoint,
                &source,
                opts.no_exec,
                opts.allow_other,
                opts.read_only,
            )
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
            if opts.read_only {
                o.push("ro");
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
    let (passthrough, passthrough_why, passthrough_note) = if opts.no_open {
        (
            false,
            "the default; -o passthrough for it",
            "off (the default: the kernel opens files itself and serves warm reads from its \
             page cache; real files are read and written with pread/pwrite; -o passthrough \
             answers opens and hands real files to the kernel)"
                .to_string(),
        )
    } else {
        decide_passthrough(
            &session,
            &paths,
            opts.passthrough,
            shared.kernel_passthrough.load(Ordering::Relaxed),
        )
    };
    shared.passthrough.store(passthrough, Ordering::Relaxed);
    let notifier = session.notifier();
    let _ = shared.notifier.set(notifier.clone());
    let _ = shared
        .expire
        .set(Mutex::new(expire_later(notifier.clone())?));
    fs.set_tell_kernel(tell_kernel(Arc::downgrade(&fs), notifier.clone())?);
    if opts.no_open {
        fs.set_kernel_opens();
    }
    // Without passthrough real files are read through the mount's page cache too.
    fs.set_tail_drops(
        drop_tails(Arc::downgrade(&fs), notifier.clone())?,
        !passthrough,
    );
    let bg = session.spawn()?;
    let_go_idle_files(Arc::downgrade(&fs))?;
    make_ahead(Arc::downgrade(&fs))?;
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
        settings_watch: None,
        mountpoint,
        passthrough,
        passthrough_why,
        passthrough_note,
        fs: fs.clone(),
        via,
        shared: shared.clone(),
    };
    if let Some(sources) = opts.settings.clone() {
        handle.settings_watch = Some(settings::watch_settings(
            sources,
            fs.clone(),
            notifier.clone(),
        )?);
    }
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
