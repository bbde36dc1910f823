//! The open handles of the mount: what each open holds (a computed file's inode, a real
//! file's descriptor, a ctl handle's own results, a directory's listing), by handle number.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::real::Windows;
use super::{DirEntry, FsError};
use crate::store::ctl::{CtlRecord, Scope};

/// What an open handle holds.
pub(super) enum Handle {
    /// A computed file's inode: its handles read the version it stands for
    /// (`fs/versions.rs`).
    Computed {
        ino: u64,
    },
    /// A real file's descriptor, the windows of it its large reads are served from (only
    /// when it is read through the page cache, see `NormaFs::read_mapped`), and its inode.
    Real {
        file: Arc<File>,
        windows: Option<Arc<Windows>>,
        ino: u64,
    },
    Ctl {
        scope: Scope,
        own: Vec<CtlRecord>,
        wrote: bool,
        /// The results as read, and the file offset they start at (the first read after
        /// the last write: a handle open for reading and writing reads its results from
        /// their start whatever it wrote, SPEC 6).
        snapshot: Option<(u64, Arc<Vec<u8>>)>,
        /// The error of the command that failed on this handle: every later write answers
        /// it without running (a shell writes `printf 'a\nb\n'` line by line).
        failed: Option<FsError>,
    },
    Dir(Vec<DirEntry>),
}

impl Handle {
    /// A handle of real file `f`, inode `ino`; `mapped`: its large reads may be answered
    /// from mappings of the file.
    pub(super) fn real(f: Arc<File>, ino: u64, mapped: bool) -> Handle {
        Handle::Real {
            file: f,
            windows: mapped.then(Arc::default),
            ino,
        }
    }
}

/// The handles, numbered from 1 (0 is never a handle), each number used once.
pub(super) struct HandleTable {
    map: Mutex<HashMap<u64, Handle>>,
    next: AtomicU64,
}

impl HandleTable {
    pub(super) fn new() -> HandleTable {
        HandleTable {
            map: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    /// Register `h` under a new number.
    pub(super) fn open(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.map.lock().insert(fh, h);
        fh
    }

    /// The table, locked (held briefly: no I/O under it).
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<u64, Handle>> {
        self.map.lock()
    }

    /// Take handle `fh` out (its release).
    pub(super) fn close(&self, fh: u64) -> Option<Handle> {
        self.map.lock().remove(&fh)
    }
}

#[cfg(test)]
mod tests {
    use super::{Handle, HandleTable};

    #[test]
    fn handles_get_distinct_nonzero_numbers_and_close_once() {
        let t = HandleTable::new();
        let a = t.open(Handle::Dir(Vec::new()));
        let b = t.open(Handle::Dir(Vec::new()));
        assert!(a != 0 && b != 0 && a != b);
        assert!(t.close(a).is_some());
        assert!(t.close(a).is_none());
        assert!(t.lock().contains_key(&b));
        let c = t.open(Handle::Dir(Vec::new()));
        assert!(c != a && c != b, "a number is not used again");
    }
}
