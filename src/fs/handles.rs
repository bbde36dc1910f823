//! The open handles of the mount: what each open holds (a computed file's inode, a real
//! file's descriptor, a ctl handle's own results, a directory's listing), by handle number.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::real::Windows;
use super::DirEntry;
use crate::store::ctl::Scope;

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
    /// A ctl file: its scope, and the results as its first read (or its last from 0) found
    /// them (`None`: read afresh at every read, as the kernel's own opens are).
    Ctl {
        scope: Scope,
        snapshot: Option<Option<Arc<Vec<u8>>>>,
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

/// The handles, numbered from 1 (0 is never a handle), each number used once; and the
/// implicit ones, by inode and whether they write (see `NormaFs::implicit_handle`).
pub(super) struct HandleTable {
    map: Mutex<HashMap<u64, Handle>>,
    next: AtomicU64,
    implicit: Mutex<HashMap<(u64, bool), u64>>,
}

impl HandleTable {
    pub(super) fn new() -> HandleTable {
        HandleTable {
            map: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            implicit: Mutex::new(HashMap::new()),
        }
    }

    /// The implicit handle of inode `ino` (writing with `write`), if it has one.
    pub(super) fn implicit(&self, ino: u64, write: bool) -> Option<u64> {
        self.implicit.lock().get(&(ino, write)).copied()
    }

    /// Make `fh` the implicit handle of `ino`, unless it has one: then `Err` with that one.
    pub(super) fn set_implicit(&self, ino: u64, write: bool, fh: u64) -> Result<(), u64> {
        let mut m = self.implicit.lock();
        match m.get(&(ino, write)) {
            Some(&theirs) => Err(theirs),
            None => {
                m.insert((ino, write), fh);
                Ok(())
            }
        }
    }

    /// Take the implicit handles of `ino` out (the kernel forgot it); their numbers.
    pub(super) fn take_implicit(&self, ino: u64) -> Vec<u64> {
        let mut m = self.implicit.lock();
        [false, true]
            .into_iter()
            .filter_map(|w| m.remove(&(ino, w)))
            .collect()
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
