//! Attributes: what `getattr` and `lookup` tell the kernel of a node, and for how long.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::fs::computed::systime;
use crate::fs::real::Stat;
use crate::fs::reply::kind_of;
use crate::fs::{Attr, Base, Entry, FileKind, FsError, Node, NormaFs, MEMORY_LINK};

impl NormaFs {
    /// Attributes of a node normafs makes (a directory of its own, a link, a computed file):
    /// no backing file has them.
    pub(in crate::fs) fn made_attr(
        &self,
        ino: u64,
        kind: FileKind,
        perm: u16,
        size: u64,
        mtime: SystemTime,
    ) -> Attr {
        Attr {
            ino,
            kind,
            size,
            blocks: size.div_ceil(512),
            perm,
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            uid: self.opts.uid,
            gid: self.opts.gid,
            rdev: 0,
            atime: mtime,
            mtime,
            ctime: mtime,
        }
    }

    fn real_attr(&self, ino: u64, st: &Stat) -> Attr {
        Attr {
            ino,
            kind: kind_of(st),
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            atime: systime(st.st_atime, st.st_atime_nsec),
            mtime: systime(st.st_mtime, st.st_mtime_nsec),
            ctime: systime(st.st_ctime, st.st_ctime_nsec),
        }
    }

    /// How long the kernel may keep a real node's attributes, as a directory and as a file:
    /// decided before reading them (a change from then on is reported and invalidated).
    pub(in crate::fs) fn real_ttls(&self, node: &Node) -> (Duration, Duration) {
        (self.ttl_of(node, true), self.ttl_of(node, false))
    }

    /// The entry of real node `node` as inode `ino`, from its file's `st`; `ttls` from
    /// [`NormaFs::real_ttls`]. A regular file read through the page cache that grew is told
    /// the size `fs/growth.rs` allows.
    pub(in crate::fs) fn real_entry(
        &self,
        node: &Node,
        ino: u64,
        st: &Stat,
        ttls: (Duration, Duration),
    ) -> Entry {
        self.real_entry_as(node, ino, st, ttls, false)
    }

    /// [`NormaFs::real_entry`]; `truncated`: for a truncation through the mount, whose size
    /// the kernel takes as it is.
    fn real_entry_as(
        &self,
        node: &Node,
        ino: u64,
        st: &Stat,
        ttls: (Duration, Duration),
        truncated: bool,
    ) -> Entry {
        let mut attr = self.real_attr(ino, st);
        let mut ttl = if attr.kind == FileKind::Dir {
            ttls.0
        } else {
            ttls.1
        };
        if attr.kind == FileKind::File && self.growth.enabled() && self.covered(node, false) {
            let seen = crate::fs::growth::Seen {
                size: attr.size,
                ctime: attr.ctime,
            };
            if truncated {
                attr.size = self.growth.truncated(ino, seen);
            } else {
                let told = self.growth.tell(ino, seen);
                attr.size = told.size;
                if told.held {
                    // Asked again once the larger size may be told.
                    ttl = ttl.min(crate::fs::growth::DROP_GRACE);
                }
            }
        }
        Entry {
            attr,
            ttl,
            entry_ttl: ttl,
        }
    }

    fn mtime_of(p: &Path) -> Option<SystemTime> {
        crate::fs::real::mtime(p)
    }

    /// Attributes of a node and their TTL.
    pub fn attr_of(&self, node: &Node, ino: u64) -> Result<Entry, FsError> {
        // Decided before reading: a change from now on is reported and invalidated.
        let ttl = self.ttl_of(node, true);
        let attr = match node {
            Node::Root => self.made_attr(ino, FileKind::Dir, 0o755, 0, self.started),
            Node::Sessions => {
                let m = [&self.paths.transcripts, &self.paths.archives]
                    .iter()
                    .filter_map(|p| Self::mtime_of(p))
                    .max()
                    .unwrap_or(self.started);
                self.made_attr(ino, FileKind::Dir, 0o755, 0, m)
            }
            Node::Session(sid) => {
                if !self.session_exists(sid) {
                    return Err(FsError::NotFound);
                }
                // Every backing directory whose names the listing shows: a kernel that keeps
                // the listing drops it when this mtime changes.
                let m = [
                    self.paths.transcript_path(sid),
                    self.paths.transcripts.join(sid),
                    self.paths.archive_root(sid),
                ]
                .iter()
                .filter_map(|p| Self::mtime_of(p))
                .max()
                .unwrap_or(self.started);
                self.made_attr(ino, FileKind::Dir, 0o755, 0, m)
            }
            Node::RawDir(sid) => {
                if !self.session_exists(sid) {
                    return Err(FsError::NotFound);
                }
                let m = Self::mtime_of(&self.paths.state_path(sid)).unwrap_or(self.started);
                self.made_attr(ino, FileKind::Dir, 0o555, 0, m)
            }
            Node::MemoryLink(_) => self.made_attr(
                ino,
                FileKind::Symlink,
                0o777,
                MEMORY_LINK.len() as u64,
                self.started,
            ),
            Node::HistoryLink(..)
            | Node::HistoryDir(..)
            | Node::AtDir(..)
            | Node::AtPoint(..)
            | Node::AtLatest(..) => {
                let Some(sid) = node.session_of() else {
                    // The root's.
                    return Ok(Entry {
                        attr: self.history_attr(node, ino),
                        ttl,
                        entry_ttl: ttl,
                    });
                };
                if !self.session_exists(sid) {
                    return Err(FsError::NotFound);
                }
                if let Node::AtPoint(_, n) = node {
                    if *n > self.computed.message_count(sid)? {
                        return Err(FsError::NotFound);
                    }
                }
                self.history_attr(node, ino)
            }
            Node::Ctl(sid) => {
                // The size is what a fresh open reads (the latest results), so `tar` and
                // `rsync` copy them; it changes with every command, so it is never kept. The
                // name is kept as long as the session's existence is.
                let scope = self.ctl_scope(sid)?;
                self.read_only_help(&scope);
                let (size, mtime) = self.ctl_size_and_time(&scope);
                // The mount tells the kernel of every new result (`ctl_written`): kept as
                // long as what the watcher covers. Else never kept.
                let ttl = if self.tells_kernel() {
                    self.ttl_of(node, false)
                } else {
                    Duration::ZERO
                };
                return Ok(Entry {
                    attr: self.made_attr(ino, FileKind::File, 0o600, size, mtime),
                    ttl,
                    entry_ttl: self.ttl_of(node, false),
                });
            }
            Node::MemoryDir => match self.backing.lstat(Base::Memory, Path::new("")) {
                Ok(st) => {
                    let mut a = self.real_attr(ino, &st);
                    a.kind = FileKind::Dir;
                    a
                }
                Err(_) => self.made_attr(ino, FileKind::Dir, 0o755, 0, self.started),
            },
            n if n.is_computed_file() => return self.computed_entry(n, ino, false),
            Node::Real(..) => return self.real_attr_of(node, ino, false),
            _ => return Err(FsError::NotFound),
        };
        Ok(Entry {
            attr,
            ttl,
            entry_ttl: ttl,
        })
    }

    /// The attributes of `.history/`'s directories and the links into it: made, as of the
    /// mount's start (what they name is made on each read).
    fn history_attr(&self, node: &Node, ino: u64) -> Attr {
        let link = |target: &str| (FileKind::Symlink, 0o777, target.len() as u64);
        let (kind, perm, size) = match node {
            Node::HistoryLink(_, l) => link(l.target()),
            Node::AtLatest(_) => link(crate::fs::node::AT_LATEST_TARGET),
            _ => (FileKind::Dir, 0o555, 0),
        };
        self.made_attr(ino, kind, perm, size, self.started)
    }

    /// The entry of real node `node`, inode `ino` (`truncated`: see
    /// [`NormaFs::real_entry_as`]).
    pub(in crate::fs) fn real_attr_of(
        &self,
        node: &Node,
        ino: u64,
        truncated: bool,
    ) -> Result<Entry, FsError> {
        self.real_attr_by(node, ino, None, truncated)
    }

    /// [`NormaFs::real_attr_of`], asked through handle `fh` when there is one.
    pub(in crate::fs) fn real_attr_by(
        &self,
        node: &Node,
        ino: u64,
        fh: Option<u64>,
        truncated: bool,
    ) -> Result<Entry, FsError> {
        let Node::Real(base, rel) = node else {
            return Err(FsError::NotFound);
        };
        let ttls = self.real_ttls(node);
        // An inode answers for its own file, whatever the name names by now (removed,
        // renamed over): the file it holds, or the one the handle asked through has open;
        // else the name's file, which must be the inode's.
        let (st, id) = match self.real_file(ino, fh) {
            Some(f) => crate::fs::real::fstat_ident(&f)?,
            None => self.backing.lstat_ident(*base, rel)?,
        };
        if !self.inodes.answers_for(ino, &st, id) {
            return Err(FsError::Stale);
        }
        Ok(self.real_entry_as(node, ino, &st, ttls, truncated))
    }

    /// `getattr`. An open computed file's handles all read the version their inode stands
    /// for, so any `fstat` of them reports what its reads return (see `fs/versions.rs`).
    pub fn getattr(&self, ino: u64) -> Result<Entry, FsError> {
        self.getattr_by(ino, None)
    }

    /// [`NormaFs::getattr`] asked through handle `fh` (an `fstat`).
    pub fn getattr_by(&self, ino: u64, fh: Option<u64>) -> Result<Entry, FsError> {
        let node = self.node(ino)?;
        tracing::trace!("getattr {ino}: {node:?}");
        // An inode renamed over that holds no file any more answers ESTALE: the kernel
        // looks the name up again (a `stat` by path is retried so); so does a computed
        // file's inode whose version is gone. An `fstat` asks through its handle.
        let e = match (&node, fh) {
            (Node::Real(..), Some(_)) => self.real_attr_by(&node, ino, fh, false)?,
            _ => self.attr_of(&node, ino)?,
        };
        self.tell(&node, &e);
        Ok(e)
    }
}
