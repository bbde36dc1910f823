//! Directory passes: opened directories read from their snapshot, directories read without
//! an open (numbered passes, `fs/listings.rs`), and what `readdirplus` hands the kernel.

use std::time::Duration;

use crate::fs::handles::Handle;
use crate::fs::{DirEntry, Entry, FsError, Listings, Node, NormaFs, PlusEntry, PlusReplier};

impl NormaFs {
    /// `readdirplus`: the entries after `offset` (as [`NormaFs::readdir`]) with what
    /// [`NormaFs::entry_plus`] gives each, into `reply` until it is full. An entry the
    /// kernel links counts one lookup, only once it is in the answer.
    pub fn readdirplus(
        &self,
        ino: u64,
        fh: u64,
        offset: i64,
        reply: &mut dyn PlusReplier,
    ) -> Result<(), FsError> {
        for e in self.readdir(ino, fh, offset)? {
            let (en, linked) = match self.entry_plus(&e) {
                PlusEntry::Linked(en) => (en, true),
                PlusEntry::Unlinked(en) => (en, false),
                PlusEntry::Gone => continue,
            };
            if reply.add(&e, &en.attr, en.ttl.min(en.entry_ttl)) {
                break;
            }
            if linked {
                self.count_lookup(en.attr.ino);
            }
        }
        Ok(())
    }

    /// `opendir`: the handle, and whether the kernel may keep the listing across opens
    /// (every change of it is reported by the watches).
    pub fn opendir(&self, ino: u64) -> Result<(u64, bool), FsError> {
        let node = self.node(ino)?;
        let cache = match &node {
            Node::Root
            | Node::Sessions
            | Node::Session(_)
            | Node::RawDir(_)
            | Node::MemoryDir
            | Node::Real(..) => self.covered(&node, true),
            _ => false,
        };
        let entries = self.list(ino)?;
        Ok((self.new_handle(Handle::Dir(entries)), cache))
    }

    /// Entries after `offset` (0 = from the start): from handle `fh`'s snapshot, or for `fh`
    /// 0 from a pass over a directory the kernel opened itself (see `readdir_unopened`).
    pub fn readdir(&self, ino: u64, fh: u64, offset: i64) -> Result<Vec<DirEntry>, FsError> {
        if fh == 0 {
            return self.readdir_unopened(ino, offset);
        }
        let snapshot = match self.handles.lock().get(&fh) {
            Some(Handle::Dir(e)) => Some(e.clone()),
            _ => None,
        };
        let entries = match snapshot {
            Some(e) => e,
            None => self.list(ino)?,
        };
        Ok(entries.into_iter().filter(|e| e.offset > offset).collect())
    }

    pub fn releasedir(&self, fh: u64) {
        self.handles.close(fh);
    }

    /// `readdir` of a directory the kernel opened without asking (the mount answers `opendir`
    /// with `ENOSYS`, which saves two round trips per directory): the entries after `offset`
    /// (passes and their offsets: `Listings`).
    fn readdir_unopened(&self, ino: u64, offset: i64) -> Result<Vec<DirEntry>, FsError> {
        let (gen, at) = Listings::split(offset);
        let (gen, list) = match (offset > 0).then(|| self.listings.get(ino, gen)).flatten() {
            Some(l) => (gen, l),
            None => self.listings.start(ino, self.list(ino)?),
        };
        let rest = list.get(at..).unwrap_or_default().to_vec();
        if rest.is_empty() {
            self.listings.finished(ino, gen);
        }
        Ok(rest)
    }

    /// What `readdirplus` hands the kernel for entry `e` of a listing. The kernel links every
    /// entry but `.` and `..` like a `lookup` answer and forgets it later, so the caller
    /// counts one lookup per linked entry it sends ([`NormaFs::count_lookup`]).
    ///
    /// The attributes a `lookup` would answer, except for computed files, which a listing
    /// never computes (computing every view of a session to list its directory would cost
    /// far more than the lookups saved): one the kernel does not hold gets placeholder
    /// attributes (size 0), one it holds the attributes last sent for it (the kernel applies
    /// what it is given to the inode it has, and a reader of it must never see a placeholder
    /// size); both kept for no time at all, name included, so the kernel asks again
    /// (`lookup`, `getattr`) before it uses them.
    pub fn entry_plus(&self, e: &DirEntry) -> PlusEntry {
        let placeholder = || Entry {
            attr: self.made_attr(e.ino, e.kind, 0o444, 0, self.started),
            ttl: Duration::ZERO,
            entry_ttl: Duration::ZERO,
        };
        if e.name == "." || e.name == ".." {
            return PlusEntry::Unlinked(placeholder());
        }
        let Ok(node) = self.node(e.ino) else {
            return PlusEntry::Gone;
        };
        if node.is_computed_file() {
            return self.computed_plus(&node, e.ino, placeholder());
        }
        if let Node::Real(b, rel) = &node {
            // The name's file, under the inode that stands for it: a name renamed over
            // since the listing was made is linked to a new inode (an inode's attributes are
            // only ever its own file's).
            let ttls = self.real_ttls(&node);
            return match self.backing.lstat_ident(*b, rel) {
                Ok((st, id)) => {
                    let ino = if self.inodes.answers_for(e.ino, &st, id) {
                        e.ino
                    } else {
                        let ino = self.inodes.renew(&node);
                        self.inodes.same_file(ino, id);
                        ino
                    };
                    PlusEntry::Linked(self.real_entry(&node, ino, &st, ttls))
                }
                Err(FsError::NotFound) => PlusEntry::Gone,
                Err(_) => PlusEntry::Linked(placeholder()),
            };
        }
        // A session listed is watched before its attributes are read (see `lookup`).
        self.known_to_kernel(&node);
        match self.attr_of(&node, e.ino) {
            Ok(a) => PlusEntry::Linked(a),
            // Gone since the listing: left out, as a listing a moment later would.
            Err(FsError::NotFound) => PlusEntry::Gone,
            // The `lookup` that the placeholder's zero TTL brings reports the error.
            Err(_) => PlusEntry::Linked(placeholder()),
        }
    }
}
