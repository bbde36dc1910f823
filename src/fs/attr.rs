//! Attributes: what `getattr` and `lookup` tell the kernel of a node, and for how long.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::computed::systime;
use super::real::Stat;
use super::reply::kind_of;
use super::{Attr, Base, Entry, FileKind, FsError, Node, NormaFs, MEMORY_LINK};
use crate::store::ctl::Scope;

impl NormaFs {
    /// Attributes of a node normafs makes (a directory of its own, a link, a computed file):
    /// no backing file has them.
    pub(super) fn made_attr(
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
    pub(super) fn real_ttls(&self, node: &Node) -> (Duration, Duration) {
        (self.ttl_of(node, true), self.ttl_of(node, false))
    }

    /// The entry of real node `node` as inode `ino`, from its file's `st`; `ttls` from
    /// [`NormaFs::real_ttls`].
    pub(super) fn real_entry(&self, ino: u64, st: &Stat, ttls: (Duration, Duration)) -> Entry {
        let attr = self.real_attr(ino, st);
        let ttl = if attr.kind == FileKind::Dir {
            ttls.0
        } else {
            ttls.1
        };
        Entry {
            attr,
            ttl,
            entry_ttl: ttl,
        }
    }

    fn mtime_of(p: &Path) -> Option<SystemTime> {
        super::real::mtime(p)
    }

    /// Attributes of a node and their TTL.
    pub fn attr_of(&self, node: &Node, ino: u64) -> Result<Entry, FsError> {
        let zero = Duration::ZERO;
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
            Node::Ctl(sid) => {
                if let Some(sid) = sid {
                    if !self.session_exists(sid) {
                        return Err(FsError::NotFound);
                    }
                }
                // The size is what a fresh open reads (the latest results), so `tar` and
                // `rsync` copy them; it changes with every command, so it is never kept. The
                // name is kept as long as the session's existence is.
                let scope = match sid {
                    Some(s) => Scope::Session(s.clone()),
                    None => Scope::Root,
                };
                let size = self.ctl_size(&scope);
                return Ok(Entry {
                    attr: self.made_attr(ino, FileKind::File, 0o600, size, self.started),
                    ttl: Duration::ZERO,
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
            n if n.is_computed_file() => {
                if let Node::Computed(sid, _) | Node::Raw(sid, _, _) = n {
                    if !self.session_exists(sid) {
                        return Err(FsError::NotFound);
                    }
                }
                // Fixed names, listed as long as their directory is; a raw range comes and
                // goes with state.json.
                self.before_computing(n);
                // Kept for long only when every input is watched: each change is reported and
                // invalidated (`invalidate_computed`).
                let covered = self.covered(n, false);
                let entry_ttl = match n {
                    Node::Computed(sid, _) => self.ttl_of(&Node::Session(sid.clone()), true),
                    Node::MemoryIndex => self.ttl_of(&Node::MemoryDir, true),
                    Node::RootAudit => self.ttl_of(&Node::Root, true),
                    Node::Raw(..) if covered => self.opts.watched_ttl,
                    _ => zero,
                };
                let c = self.computed.content(n)?;
                // Not while a handle of other bytes is open: `fstat` on it must reach us.
                let ttl = if covered && self.snapshots.all_hold(ino, c.fp) {
                    self.opts.watched_ttl
                } else {
                    zero
                };
                return Ok(Entry {
                    attr: self.made_attr(ino, FileKind::File, c.perm, c.data.len(), c.mtime),
                    ttl,
                    entry_ttl: entry_ttl.max(ttl),
                });
            }
            Node::Real(base, rel) => {
                let ttls = (ttl, self.ttl_of(node, false));
                // A held inode answers for its own file, whatever the name names by now;
                // else the name's file, which must be the inode's.
                let (st, id) = match self.inodes.held_file(ino) {
                    Some(h) => super::real::fstat_ident(&h.file)?,
                    None => self.backing.lstat_ident(*base, rel)?,
                };
                if st.st_mode & libc::S_IFMT == libc::S_IFREG && !self.inodes.same_file(ino, id) {
                    return Err(FsError::Stale);
                }
                return Ok(self.real_entry(ino, &st, ttls));
            }
            _ => return Err(FsError::NotFound),
        };
        Ok(Entry {
            attr,
            ttl,
            entry_ttl: ttl,
        })
    }

    /// `getattr` from thread `pid` (0: unknown). An open computed file's handle reports the
    /// size of its own snapshot: the one named by `fh`, else the newest that `pid` opened on
    /// `ino` (`fstat` comes without a handle).
    pub fn getattr(&self, ino: u64, fh: Option<u64>, pid: u32) -> Result<Entry, FsError> {
        let node = self.node(ino)?;
        let fh = match fh {
            Some(fh) => Some(fh),
            None if node.is_computed_file() => self.snapshots.opened_by(ino, pid),
            None => None,
        };
        let snapshot = fh.and_then(|fh| self.computed_size(fh));
        // An inode renamed over that holds no file any more answers ESTALE: the kernel
        // looks the name up again (a `stat` by path is retried so).
        let mut e = self.attr_of(&node, ino)?;
        if let Some((len, _)) = snapshot {
            // attr_of kept nothing for long if this handle holds other bytes (see
            // `Snapshots`); a size that differs is never kept.
            if e.attr.size != len {
                e.ttl = Duration::ZERO;
            }
            e.attr.size = len;
            e.attr.blocks = len.div_ceil(512);
        }
        self.tell(&node, &e);
        Ok(e)
    }

    /// Note the attributes a reply gives the kernel for a computed file.
    pub(super) fn tell(&self, node: &Node, e: &Entry) {
        if node.is_computed_file() {
            self.snapshots.tell(e.attr.ino, &e.attr);
        }
    }
}
