//! The open handles of computed files, and the attributes the kernel was last told of each.
//!
//! A computed file whose inputs are all watched has its attributes kept for long, like a real
//! file (the watcher invalidates them when an input changes), but the kernel keeps one size per
//! inode for all handles, and `fstat` on a handle must report the size of its own snapshot. So
//! every open drops the attributes the kernel holds (after the handle is registered here), and
//! a size is given a long TTL only while every open handle holds the bytes it describes: any
//! other reply expires at once, and `fstat` reaches the mount. Reads always use direct I/O
//! from the handle's snapshot (the page cache would serve one inode's pages and size to
//! handles of different bytes).

use std::collections::HashMap;

use parking_lot::Mutex;

use super::Attr;

#[derive(Default)]
pub(super) struct Snapshots {
    /// Open handles: handle → (inode, thread id of the opener). FUSE sends the GETATTR of
    /// `fstat` without a file handle, so a getattr from the thread that opened a computed
    /// file finds its snapshot here and reports that size: `fstat` on an open handle matches
    /// the bytes its reads return even while the inputs change.
    openers: Mutex<HashMap<u64, (u64, u32)>>,
    /// By inode: its open handles and the fingerprints of their bytes.
    open: Mutex<HashMap<u64, HashMap<u64, u64>>>,
    /// The attributes last sent for each computed file the kernel holds (see
    /// [`NormaFs::entry_plus`](super::NormaFs::entry_plus)).
    told: Mutex<HashMap<u64, Attr>>,
}

impl Snapshots {
    /// Handle `fh` of inode `ino` was opened by thread `pid` (0: unknown) on bytes of
    /// fingerprint `fp`.
    pub(super) fn opened(&self, fh: u64, ino: u64, pid: u32, fp: u64) {
        if pid != 0 {
            self.openers.lock().insert(fh, (ino, pid));
        }
        self.open.lock().entry(ino).or_default().insert(fh, fp);
    }

    /// Handle `fh` of inode `ino` now holds the bytes of fingerprint `fp`.
    pub(super) fn refreshed(&self, fh: u64, ino: u64, fp: u64) {
        if let Some(f) = self.open.lock().get_mut(&ino).and_then(|o| o.get_mut(&fh)) {
            *f = fp;
        }
    }

    /// Handle `fh` of a computed file was released.
    pub(super) fn closed(&self, fh: u64) {
        let ino = self.openers.lock().remove(&fh).map(|(ino, _)| ino);
        let mut all = self.open.lock();
        let found = ino.and_then(|ino| all.get_mut(&ino).map(|o| o.remove(&fh)));
        if found.is_none() {
            // Opened without a known thread: look the handle up everywhere.
            for o in all.values_mut() {
                o.remove(&fh);
            }
        }
        all.retain(|_, o| !o.is_empty());
    }

    /// The newest handle that thread `pid` holds open on `ino`.
    pub(super) fn opened_by(&self, ino: u64, pid: u32) -> Option<u64> {
        if pid == 0 {
            return None;
        }
        self.openers
            .lock()
            .iter()
            .filter(|(_, &(i, p))| i == ino && p == pid)
            .map(|(&fh, _)| fh)
            .max()
    }

    /// Whether every open handle of `ino` holds the bytes of fingerprint `fp` (none open:
    /// yes), so that a size of them may be kept for long.
    pub(super) fn all_hold(&self, ino: u64, fp: u64) -> bool {
        self.open
            .lock()
            .get(&ino)
            .is_none_or(|o| o.values().all(|&f| f == fp))
    }

    /// The kernel was given `attr` for computed file `ino`.
    pub(super) fn tell(&self, ino: u64, attr: &Attr) {
        self.told.lock().insert(ino, attr.clone());
    }

    /// The attributes the kernel was last given for `ino`.
    pub(super) fn told(&self, ino: u64) -> Option<Attr> {
        self.told.lock().get(&ino).cloned()
    }

    /// The kernel forgot `ino`.
    pub(super) fn forget(&self, ino: u64) {
        self.told.lock().remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::Snapshots;
    use crate::fs::{Attr, FileKind};

    #[test]
    fn a_size_is_kept_only_while_every_open_handle_holds_its_bytes() {
        let s = Snapshots::default();
        assert!(s.all_hold(7, 1), "nothing open");
        s.opened(10, 7, 100, 1);
        s.opened(11, 7, 0, 1);
        assert!(s.all_hold(7, 1));
        s.opened(12, 7, 200, 2);
        assert!(
            !s.all_hold(7, 1) && !s.all_hold(7, 2),
            "two snapshots of other bytes"
        );
        s.closed(12);
        assert!(s.all_hold(7, 1));
        // A handle opened without a known thread is found on release all the same.
        s.closed(11);
        s.closed(10);
        assert!(s.all_hold(7, 3));
        assert!(
            s.open.lock().is_empty(),
            "an inode without handles is dropped"
        );
    }

    #[test]
    fn fstat_without_a_handle_finds_the_newest_snapshot_of_the_calling_thread() {
        let s = Snapshots::default();
        s.opened(3, 9, 100, 1);
        s.opened(5, 9, 100, 2);
        s.opened(4, 9, 200, 3);
        s.opened(6, 8, 100, 4);
        assert_eq!(s.opened_by(9, 100), Some(5));
        assert_eq!(s.opened_by(9, 200), Some(4));
        assert_eq!(s.opened_by(9, 300), None);
        assert_eq!(s.opened_by(9, 0), None, "an unknown thread");
        s.closed(5);
        assert_eq!(s.opened_by(9, 100), Some(3));
    }

    #[test]
    fn the_attributes_told_are_kept_until_the_kernel_forgets_the_inode() {
        let s = Snapshots::default();
        let t = SystemTime::UNIX_EPOCH;
        let a = Attr {
            ino: 4,
            kind: FileKind::File,
            size: 12,
            blocks: 1,
            perm: 0o444,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            atime: t,
            mtime: t,
            ctime: t,
        };
        assert_eq!(s.told(4), None);
        s.tell(4, &a);
        assert_eq!(s.told(4), Some(a));
        s.forget(4);
        assert_eq!(s.told(4), None);
    }
}
