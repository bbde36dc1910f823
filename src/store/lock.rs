//! The per-session write lock (SPEC 6): an exclusive `flock` on `<archive root>/.normafs.lock`,
//! held for the whole of a ctl command (recovery included), so two mounts, or a mount and the
//! CLI, never interleave their writes to one session.
//!
//! `flock` locks belong to the open file description, so two [`acquire`]s in one process (each
//! opens the file anew) exclude each other just as two processes do. The lock file is never
//! removed: unlinking it would let a waiter lock an orphaned inode while a newcomer locks a new
//! one. Its content is unused (empty).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::durable;

/// File name of the lock inside an archive root.
pub const LOCK_FILE_NAME: &str = ".normafs.lock";

/// How long ctl commands wait for the lock before answering `EBUSY` (SPEC 6).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// First and longest pause between two attempts while the lock is held elsewhere.
const FIRST_POLL: Duration = Duration::from_millis(5);
const MAX_POLL: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another holder still had the lock when the timeout ran out (maps to `EBUSY`).
    #[error("the session is locked by another normafs command (timed out waiting)")]
    Busy,
    /// Creating the archive root or the lock file, or `flock` itself, failed (maps to `EIO`).
    #[error("cannot take the session lock: {0}")]
    Io(#[from] io::Error),
}

/// A held session lock; released when dropped.
#[derive(Debug)]
pub struct SessionLock {
    file: File,
    path: PathBuf,
}

impl SessionLock {
    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SessionLock {
    fn drop(&mut self) {
        // Closing the file releases the lock too; unlocking explicitly also covers a descriptor
        // duplicated into a child process.
        // SAFETY: the descriptor is owned by `self.file` and still open.
        unsafe {
            libc::flock(self.file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// Takes the exclusive lock of `archive_root`, creating the directory (durably) and the lock
/// file (mode 0644) when missing. Polls with `LOCK_NB` until `timeout` has passed; a zero
/// timeout tries exactly once.
pub fn acquire(archive_root: &Path, timeout: Duration) -> Result<SessionLock, LockError> {
    durable::create_dir_all_durable(archive_root)?;
    let path = archive_root.join(LOCK_FILE_NAME);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(durable::FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)?;
    let deadline = Instant::now() + timeout;
    let mut pause = FIRST_POLL;
    loop {
        if try_lock(&file)? {
            return Ok(SessionLock { file, path });
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(LockError::Busy);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(MAX_POLL);
    }
}

/// One non-blocking attempt: `Ok(false)` when someone else holds the lock.
fn try_lock(file: &File) -> io::Result<bool> {
    loop {
        // SAFETY: `file` owns an open descriptor for the duration of the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}
