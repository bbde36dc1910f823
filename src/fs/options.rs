//! The mount's options as the filesystem decides with them: TTLs, whether the kernel caches
//! at all, the read-only guard and the errno of a refused namespace change.

use std::time::Duration;

use super::FsError;
use crate::config::Config;

/// Mount options that change behaviour.
#[derive(Debug, Clone)]
pub struct FsOptions {
    pub read_only: bool,
    /// Owner of computed nodes.
    pub uid: u32,
    pub gid: u32,
    /// Largest write the kernel sends; a ctl write of this size may be a split command.
    pub max_write: u32,
    /// TTL of real files' attributes and entries (and of directories').
    pub real_ttl: Duration,
    /// The same TTL for nodes whose every change is reported by inotify (see
    /// [`Watcher::covers`](super::watch::Watcher::covers)).
    pub watched_ttl: Duration,
}

/// TTL of attributes and entries that inotify keeps fresh.
pub const WATCHED_TTL: Duration = Duration::from_secs(3600);

impl FsOptions {
    pub fn new(cfg: &Config, read_only: bool) -> FsOptions {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        FsOptions {
            read_only,
            uid,
            gid,
            max_write: 1 << 20,
            real_ttl: Duration::from_millis(cfg.ttl_ms),
            watched_ttl: WATCHED_TTL.max(Duration::from_millis(cfg.ttl_ms)),
        }
        .with_caching_decided()
    }

    /// `--ttl-ms 0` asks for no caching at all: no TTL (watched nodes' neither), and none of
    /// the kernel's own caches (`init` asks for them only when this holds).
    pub fn kernel_caching(&self) -> bool {
        self.real_ttl > Duration::ZERO
    }

    fn with_caching_decided(mut self) -> FsOptions {
        if !self.kernel_caching() {
            self.watched_ttl = Duration::ZERO;
        }
        self
    }

    /// When the kernel's copy of a link's target must be dropped: never when the kernel keeps
    /// no copies (`kernel_keeps_links` false) or when the watches report every change of it
    /// (`kept`), else after the real files' TTL, as an attribute would expire.
    pub fn link_expiry(&self, kept: bool, kernel_keeps_links: bool) -> Option<Duration> {
        (!kept && kernel_keeps_links).then_some(self.real_ttl)
    }

    /// An operation that would change a file: refused under `--read-only`.
    pub fn writable(&self) -> Result<(), FsError> {
        if self.read_only {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// mkdir, rmdir, mknod, symlink and link: the namespace has no place for them
    /// (`EROFS` under `--read-only`, where every change is refused alike, else `EPERM`).
    pub fn namespace_change(&self) -> FsError {
        match self.writable() {
            Err(e) => e,
            Ok(()) => FsError::Perm,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{FsOptions, WATCHED_TTL};
    use crate::config::Config;
    use crate::fs::FsError;

    fn options(ttl_ms: u64, read_only: bool) -> FsOptions {
        let cfg = Config {
            ttl_ms,
            ..Config::default()
        };
        FsOptions::new(&cfg, read_only)
    }

    #[test]
    fn ttl_zero_turns_off_every_cache_and_others_keep_watched_nodes_long() {
        let none = options(0, false);
        assert!(!none.kernel_caching());
        assert_eq!(
            (none.real_ttl, none.watched_ttl),
            (Duration::ZERO, Duration::ZERO)
        );
        let some = options(500, false);
        assert!(some.kernel_caching());
        assert_eq!(some.real_ttl, Duration::from_millis(500));
        assert_eq!(some.watched_ttl, WATCHED_TTL);
        let long = options(2 * WATCHED_TTL.as_millis() as u64, false);
        assert_eq!(long.watched_ttl, long.real_ttl);
    }

    #[test]
    fn a_link_target_the_kernel_keeps_expires_after_the_ttl_unless_watched() {
        let o = options(700, false);
        assert_eq!(o.link_expiry(false, true), Some(Duration::from_millis(700)));
        assert_eq!(o.link_expiry(true, true), None);
        assert_eq!(o.link_expiry(false, false), None);
        assert_eq!(o.link_expiry(true, false), None);
    }

    #[test]
    fn read_only_refuses_changes_with_erofs_and_the_namespace_with_eperm_otherwise() {
        let ro = options(1000, true);
        assert_eq!(ro.writable(), Err(FsError::ReadOnly));
        assert_eq!(ro.namespace_change().errno(), libc::EROFS);
        let rw = options(1000, false);
        assert_eq!(rw.writable(), Ok(()));
        assert_eq!(rw.namespace_change().errno(), libc::EPERM);
    }
}
