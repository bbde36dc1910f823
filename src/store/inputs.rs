//! The inputs of a computation, fingerprinted by `stat`: equal fingerprints, equal inputs
//! (size, mtime, ctime, inode and device of each file; the names of a directory tree).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Inputs of a computation, fingerprinted by stat.
pub struct Inputs {
    hasher: DefaultHasher,
    newest: Option<SystemTime>,
    /// Every input so far is readable by its group, and that group is the mounting user's.
    group_reads: bool,
    /// Every input so far is readable by others.
    others_read: bool,
    gid: u32,
    /// Total size of the files seen.
    pub size: u64,
}

impl Default for Inputs {
    fn default() -> Self {
        Inputs {
            hasher: DefaultHasher::default(),
            newest: None,
            group_reads: true,
            others_read: true,
            // SAFETY: getegid cannot fail.
            gid: unsafe { libc::getegid() },
            size: 0,
        }
    }
}

impl Inputs {
    pub fn file(&mut self, p: &Path) {
        match std::fs::metadata(p) {
            Ok(m) => {
                use std::os::unix::fs::MetadataExt;
                // The ctime too: a rewrite in place that keeps the size and sets the mtime
                // back (`cp -p`, `touch -r`) still changes it.
                (m.len(), m.mtime(), m.mtime_nsec(), m.ino(), m.dev()).hash(&mut self.hasher);
                (m.ctime(), m.ctime_nsec()).hash(&mut self.hasher);
                self.size = self.size.saturating_add(m.len());
                if let Ok(t) = m.modified() {
                    self.newest = Some(self.newest.map_or(t, |n| n.max(t)));
                }
                self.others_read &= m.mode() & 0o004 != 0;
                self.group_reads &= m.mode() & 0o040 != 0 && m.gid() == self.gid;
            }
            Err(_) => 0u8.hash(&mut self.hasher),
        }
    }

    /// Permission bits of a file computed from these inputs (read by group and others only when every input is).
    pub fn perm(&self) -> u16 {
        0o400 | if self.group_reads { 0o040 } else { 0 } | if self.others_read { 0o004 } else { 0 }
    }

    /// A directory and, recursively up to `depth`, everything in it.
    pub fn tree(&mut self, p: &Path, depth: usize) {
        self.file(p);
        if depth == 0 {
            return;
        }
        let Ok(rd) = std::fs::read_dir(p) else { return };
        let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for e in entries {
            e.hash(&mut self.hasher);
            if e.is_dir() {
                self.tree(&e, depth - 1);
            } else {
                self.file(&e);
            }
        }
    }

    /// Something else the result depends on goes into the fingerprint here.
    pub fn hasher(&mut self) -> &mut DefaultHasher {
        &mut self.hasher
    }

    /// The fingerprint, the newest mtime and the permission bits.
    pub fn finish(&self) -> (u64, SystemTime, u16) {
        (
            self.hasher.finish(),
            self.newest.unwrap_or(UNIX_EPOCH),
            self.perm(),
        )
    }
}
