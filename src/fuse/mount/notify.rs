//! The threads that tell the kernel what changed: the watcher's invalidations, links that
//! expire, the tails of growing files, idle files let go.

use super::*;

/// A thread that has the kernel drop the cached pages of an inode at the time it is sent with
/// (a link target the watcher does not cover: kept for the TTL, like attributes). It ends when
/// the sender is dropped, with the mount.
pub(super) fn expire_later(
    n: Notifier,
) -> io::Result<std::sync::mpsc::Sender<(std::time::Instant, u64)>> {
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

/// A thread that tells the kernel of the changes the mount makes itself (a ctl command's,
/// a ctl file's new results), and of versions current until a time, at that time (see
/// `NormaFs::set_tell_kernel`), apart from the workers: a request waiting for it may hold
/// what the kernel takes to drop a name. A caller waiting for its change waits at most
/// [`TELL_WAIT`]. It ends with the mount.
pub(super) fn tell_kernel(
    fs: std::sync::Weak<NormaFs>,
    n: Notifier,
) -> io::Result<crate::fs::TellKernel> {
    use crate::fs::When;
    use std::sync::mpsc::RecvTimeoutError;
    type Told = (Inval, When, Option<std::sync::mpsc::SyncSender<()>>);
    let (tx, rx) = std::sync::mpsc::channel::<Told>();
    std::thread::Builder::new()
        .name("normafs-tell".into())
        .spawn(move || {
            // Told for later: by time, each at most once.
            let mut due: std::collections::BTreeSet<(std::time::Instant, u64)> =
                std::collections::BTreeSet::new();
            let mut later: std::collections::HashMap<u64, Inval> = std::collections::HashMap::new();
            let mut next_id = 0u64;
            loop {
                let now = std::time::Instant::now();
                while let Some(&(at, id)) = due.first() {
                    if at > now {
                        break;
                    }
                    due.pop_first();
                    if let (Some(i), Some(fs)) = (later.remove(&id), fs.upgrade()) {
                        invalidate(&fs, &n, &i);
                    }
                }
                let wait = due
                    .first()
                    .map(|&(at, _)| at.saturating_duration_since(now))
                    .unwrap_or(Duration::from_secs(3600));
                let (i, when, done) = match rx.recv_timeout(wait) {
                    Ok(x) => x,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return,
                };
                match when {
                    When::At(at) => {
                        let known = due
                            .iter()
                            .any(|&(t, id)| t == at && later.get(&id) == Some(&i));
                        if !known {
                            next_id += 1;
                            due.insert((at, next_id));
                            later.insert(next_id, i);
                        }
                    }
                    When::Soon | When::Now => {
                        let Some(fs) = fs.upgrade() else { return };
                        invalidate(&fs, &n, &i);
                    }
                }
                if let Some(done) = done {
                    let _ = done.try_send(());
                }
            }
        })?;
    let tx = Mutex::new(tx);
    Ok(std::sync::Arc::new(move |i: Inval, when: When| {
        let (done, told) = if when == When::Now {
            let (d, t) = std::sync::mpsc::sync_channel(1);
            (Some(d), Some(t))
        } else {
            (None, None)
        };
        if tx.lock().send((i, when, done)).is_err() {
            return;
        }
        if let Some(told) = told {
            if told.recv_timeout(TELL_WAIT).is_err() {
                tracing::debug!("the kernel took longer than {TELL_WAIT:?} to drop a change");
            }
        }
    }))
}

/// The longest a request waits for the kernel to drop what a change made stale.
pub(super) const TELL_WAIT: Duration = Duration::from_secs(2);

/// A thread that has the kernel drop the pages of a growing file (computed, or real without
/// passthrough) from the one its last size told ends in, then says so (see
/// `NormaFs::drop_tail`): apart from the workers, which serve the reads such a drop may wait
/// for. It ends with the mount.
pub(super) fn drop_tails(
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
pub(super) fn read_ahead_like(mnt: &Path, backing: &Path) -> io::Result<Option<u64>> {
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
pub(super) fn let_go_idle_files(fs: std::sync::Weak<NormaFs>) -> io::Result<()> {
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

/// Make sessions ahead of a reader of the whole tree, on threads of their own (one a core, at
/// most one a session made ahead; see `fs/ahead.rs`), until the mount is gone.
pub(super) fn make_ahead(fs: std::sync::Weak<NormaFs>) -> io::Result<()> {
    let Some(queue) = fs.upgrade().map(|f| f.ahead()) else {
        return Ok(());
    };
    let threads =
        std::thread::available_parallelism().map_or(1, |n| n.get().min(crate::fs::ahead::AHEAD));
    for _ in 0..threads {
        let (fs, queue) = (fs.clone(), queue.clone());
        make_ahead_on_one(fs, queue)?;
    }
    Ok(())
}

fn make_ahead_on_one(
    fs: std::sync::Weak<NormaFs>,
    queue: std::sync::Arc<crate::fs::ahead::Ahead>,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("normafs-ahead".into())
        .spawn(move || loop {
            let next = queue.next(Duration::from_millis(500));
            let Some(fs) = fs.upgrade() else {
                return;
            };
            if let Some(sid) = next {
                let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    fs.make_ahead(&sid);
                }));
                if made.is_err() {
                    tracing::error!("making {sid} ahead panicked; the mount serves on");
                }
            }
        })?;
    Ok(())
}

/// Drop one kernel cache (a node the kernel was never told about needs nothing).
pub(super) fn invalidate(fs: &NormaFs, n: &Notifier, i: &Inval) {
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
