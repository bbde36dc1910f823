//! The namespace: which node a name is in a directory, and every entry of a directory.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::fs::node::{HistoryFile, HistoryLink};
use crate::fs::reply::kind_of;
use crate::fs::{layout, node, real, testhook};
use crate::fs::{Base, DirEntry, Entry, FileKind, FsError, Node, NormaFs, MEMORY_LINK, ROOT_INO};
use crate::store::root;

impl NormaFs {
    /// The child `name` of `parent`, if it exists.
    pub fn child(&self, parent: &Node, name: &OsStr) -> Result<Node, FsError> {
        if name.len() > 255 {
            return Err(FsError::NameTooLong);
        }
        if !real::valid_component(name) {
            return Err(FsError::NotFound);
        }
        let s = name.to_str();
        let node = match (parent, s) {
            (Node::Root, Some("sessions")) => Node::Sessions,
            (Node::Root, Some("memory")) => Node::MemoryDir,
            (Node::Root, Some("audit.txt")) => Node::RootAudit,
            (Node::Root, Some("ctl")) => Node::Ctl(None),
            (Node::Root, Some(node::HISTORY_DIR)) => Node::HistoryDir(None),
            (Node::Root, Some("timeline.svg")) => Node::HistoryLink(None, HistoryLink::TimelineSvg),
            (Node::Root, Some("index.html")) => Node::HistoryLink(None, HistoryLink::Index),
            (Node::HistoryDir(None), Some("timeline.svg")) => {
                Node::History(None, HistoryFile::TimelineSvg)
            }
            (Node::HistoryDir(None), Some("index.html")) => Node::History(None, HistoryFile::Index),
            (Node::Session(sid), Some(node::HISTORY_DIR)) => Node::HistoryDir(Some(sid.clone())),
            (Node::Session(sid), Some(n)) if HistoryLink::of_name(n).is_some() => {
                Node::HistoryLink(
                    Some(sid.clone()),
                    HistoryLink::of_name(n).unwrap_or(HistoryLink::At),
                )
            }
            (Node::HistoryDir(Some(sid)), Some("timeline.jsonl")) => {
                Node::History(Some(sid.clone()), HistoryFile::Timeline)
            }
            (Node::HistoryDir(Some(sid)), Some("timeline.svg")) => {
                Node::History(Some(sid.clone()), HistoryFile::TimelineSvg)
            }
            (Node::HistoryDir(Some(sid)), Some("view.html")) => {
                Node::History(Some(sid.clone()), HistoryFile::Page)
            }
            (Node::HistoryDir(Some(sid)), Some("at")) => Node::AtDir(sid.clone()),
            (Node::AtDir(sid), Some(node::AT_LATEST)) => Node::AtLatest(sid.clone()),
            (Node::AtDir(sid), Some(n)) => match node::parse_point(n) {
                Some(k) if k <= self.computed.message_count(sid)? => Node::AtPoint(sid.clone(), k),
                _ => return Err(FsError::NotFound),
            },
            (Node::AtPoint(sid, k), Some("view.jsonl")) => {
                Node::History(Some(sid.clone()), HistoryFile::View(*k))
            }
            (Node::AtPoint(sid, k), Some("view.md")) => {
                Node::History(Some(sid.clone()), HistoryFile::ViewMd(*k))
            }
            (Node::AtPoint(sid, k), Some("view.html")) => {
                Node::History(Some(sid.clone()), HistoryFile::PageAt(*k))
            }
            (Node::Sessions, Some(sid)) if self.session_exists(sid) => {
                Node::Session(sid.to_string())
            }
            (Node::Session(sid), Some(n)) => match self.computed.layout().find(n) {
                Some(layout::Item::Computed(kind)) => Node::Computed(sid.clone(), kind),
                Some(layout::Item::RawDir) => Node::RawDir(sid.clone()),
                Some(layout::Item::MemoryLink) => Node::MemoryLink(sid.clone()),
                Some(layout::Item::Ctl) => Node::Ctl(Some(sid.clone())),
                Some(layout::Item::Real(..)) | None => match layout::session_real(sid, n) {
                    Some((b, rel)) => {
                        self.backing.lstat(b, &rel)?;
                        Node::Real(b, rel)
                    }
                    None => return Err(FsError::NotFound),
                },
            },
            (Node::RawDir(sid), Some(n)) => {
                let Some((start, end)) = node::parse_raw_name(n) else {
                    return Err(FsError::NotFound);
                };
                let raw = Node::Raw(sid.clone(), start.to_string(), end.to_string());
                // A range whose version is known current exists (its session is unchanged
                // since it was made); any other is checked against the session's refs.
                if self.computed.known_now(&raw).is_none()
                    && !self.computed.raw_range_exists(sid, start, end)?
                {
                    return Err(FsError::NotFound);
                }
                raw
            }
            (Node::MemoryDir, Some("MEMORY.md")) => Node::MemoryIndex,
            (Node::MemoryDir, _) => {
                let rel = PathBuf::from(name);
                self.backing.lstat(Base::Memory, &rel)?;
                Node::Real(Base::Memory, rel)
            }
            (Node::Real(b, rel), _) => {
                let rel = rel.join(name);
                self.backing.lstat(*b, &rel)?;
                Node::Real(*b, rel)
            }
            _ => return Err(FsError::NotFound),
        };
        Ok(node)
    }

    /// The inode and attributes of `node`, counting one kernel lookup of the inode; a real
    /// file replaced by rename since its inode was given gets a new inode. A regular real
    /// file is held open by its inode from here until the kernel forgets it (see
    /// `InodeTable::lookup_file`); one that cannot be held (out of descriptors) is answered
    /// from its name.
    pub(in crate::fs) fn entry_of(&self, node: &Node) -> Result<Entry, FsError> {
        if let Node::Real(b, rel) = node {
            let ttls = self.real_ttls(node);
            match self.backing.open_regular(*b, rel) {
                Ok(Some(r)) => {
                    let held = crate::fs::inode::Held {
                        file: std::sync::Arc::new(r.file),
                        readable: r.readable,
                    };
                    let ino = self.inodes.lookup_file(node, r.id, held);
                    return Ok(self.real_entry(node, ino, &r.st, ttls));
                }
                Ok(None) => {}
                Err(FsError::Os(libc::EMFILE | libc::ENFILE)) => {
                    tracing::debug!("lookup of {node:?}: out of descriptors, not held");
                }
                Err(e) => return Err(e),
            }
        }
        if node.is_computed_file() {
            let e = self.computed_lookup(node)?;
            self.inodes.lookup_ino(e.attr.ino);
            return Ok(e);
        }
        // A real name renamed over since its inode was given: the name's new inode.
        let mut ino = self.inodes.ino(node);
        let mut r = self.attr_of(node, ino);
        for _ in 0..8 {
            if !matches!(r, Err(FsError::Stale)) {
                break;
            }
            ino = self.inodes.renew(node);
            r = self.attr_of(node, ino);
        }
        let e = r?;
        self.inodes.lookup_ino(e.attr.ino);
        Ok(e)
    }

    /// `lookup`: the child's attributes; counts one kernel reference.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Entry, FsError> {
        testhook::on_lookup(name);
        let p = self.node(parent)?;
        let child = self.child(&p, name)?;
        // Watched before its attributes are read, so that they get the covered TTL.
        self.known_to_kernel(&child);
        let e = self.entry_of(&child)?;
        self.tell(&child, &e);
        tracing::trace!(
            "lookup {child:?}: ino {} size {} ttl {:?} entry {:?}",
            e.attr.ino,
            e.attr.size,
            e.ttl,
            e.entry_ttl
        );
        Ok(e)
    }

    /// The kernel linked `ino` from a `readdirplus` answer: one more lookup to forget.
    pub fn count_lookup(&self, ino: u64) {
        self.inodes.lookup_ino(ino);
        if let Ok(n) = self.node(ino) {
            self.known_to_kernel(&n);
        }
    }

    /// The kernel now holds `node`: a session is watched from then on (its directories'
    /// changes are reported, so its nodes are covered from their next request).
    pub(in crate::fs) fn known_to_kernel(&self, node: &Node) {
        if let (Some(w), Node::Session(_)) = (&self.watcher, node) {
            w.seen(node);
        }
    }

    /// Whether the kernel holds `ino` (it looked it up more times than it forgot it).
    pub fn held_by_kernel(&self, ino: u64) -> bool {
        self.inodes.lookups(ino) > 0
    }

    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
        if self.inodes.lookups(ino) == 0 {
            self.release_implicit(ino);
            let forgotten = || self.inodes.lookups(ino) == 0;
            self.versions
                .forget(ino, self.node(ino).ok().as_ref(), &forgotten);
            self.growth.forget(ino);
            self.forget_computed(ino);
        }
    }

    /// Whether the kernel may keep the target of symbolic link `ino` until the watcher tells
    /// it otherwise: the session's `memory` link never changes, and a real link is replaced
    /// (never changed in place) in a watched directory. Asked before reading the target.
    pub fn link_kept(&self, ino: u64) -> bool {
        match self.node(ino) {
            Ok(Node::MemoryLink(_) | Node::HistoryLink(..) | Node::AtLatest(_)) => true,
            Ok(n @ Node::Real(..)) => self.covered(&n, false),
            _ => false,
        }
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        match self.node(ino)? {
            Node::MemoryLink(_) => Ok(MEMORY_LINK.as_bytes().to_vec()),
            Node::HistoryLink(_, l) => Ok(l.target().as_bytes().to_vec()),
            Node::AtLatest(_) => Ok(node::AT_LATEST_TARGET.as_bytes().to_vec()),
            Node::Real(b, rel) => self.backing.readlink(b, &rel),
            _ => Err(FsError::Invalid("not a symbolic link".into())),
        }
    }

    /// Every entry of a directory, `.` and `..` first.
    pub fn list(&self, ino: u64) -> Result<Vec<DirEntry>, FsError> {
        let node = self.node(ino)?;
        let parent_ino = match &node {
            Node::Root | Node::Sessions | Node::MemoryDir | Node::RootAudit => ROOT_INO,
            Node::Session(_) => self.inodes.ino(&Node::Sessions),
            Node::RawDir(sid) | Node::HistoryDir(Some(sid)) => {
                self.inodes.ino(&Node::Session(sid.clone()))
            }
            Node::AtDir(sid) => self.inodes.ino(&Node::HistoryDir(Some(sid.clone()))),
            Node::AtPoint(sid, _) => self.inodes.ino(&Node::AtDir(sid.clone())),
            _ => ROOT_INO,
        };
        let mut out: Vec<(u64, FileKind, OsString)> = vec![
            (ino, FileKind::Dir, ".".into()),
            (parent_ino, FileKind::Dir, "..".into()),
        ];
        let mut add = |n: Node, kind: FileKind, name: &OsStr| {
            out.push((self.inodes.ino(&n), kind, name.to_os_string()));
        };
        match &node {
            Node::Root => {
                add(Node::Sessions, FileKind::Dir, OsStr::new("sessions"));
                add(Node::MemoryDir, FileKind::Dir, OsStr::new("memory"));
                add(Node::RootAudit, FileKind::File, OsStr::new("audit.txt"));
                add(Node::Ctl(None), FileKind::File, OsStr::new("ctl"));
                for l in HistoryLink::ROOT {
                    add(
                        Node::HistoryLink(None, l),
                        FileKind::Symlink,
                        OsStr::new(l.name()),
                    );
                }
            }
            Node::HistoryDir(None) => {
                for (f, name) in [
                    (HistoryFile::TimelineSvg, "timeline.svg"),
                    (HistoryFile::Index, "index.html"),
                ] {
                    add(Node::History(None, f), FileKind::File, OsStr::new(name));
                }
            }
            Node::HistoryDir(Some(sid)) => {
                if !self.session_exists(sid) {
                    return Err(FsError::NotFound);
                }
                add(
                    Node::History(Some(sid.clone()), HistoryFile::Timeline),
                    FileKind::File,
                    OsStr::new("timeline.jsonl"),
                );
                add(
                    Node::History(Some(sid.clone()), HistoryFile::TimelineSvg),
                    FileKind::File,
                    OsStr::new("timeline.svg"),
                );
                add(Node::AtDir(sid.clone()), FileKind::Dir, OsStr::new("at"));
                add(
                    Node::History(Some(sid.clone()), HistoryFile::Page),
                    FileKind::File,
                    OsStr::new("view.html"),
                );
            }
            Node::AtDir(sid) => {
                if !self.session_exists(sid) {
                    return Err(FsError::NotFound);
                }
                add(
                    Node::AtLatest(sid.clone()),
                    FileKind::Symlink,
                    OsStr::new(node::AT_LATEST),
                );
                for k in self.computed.request_points(sid)? {
                    add(
                        Node::AtPoint(sid.clone(), k),
                        FileKind::Dir,
                        OsStr::new(&k.to_string()),
                    );
                }
            }
            Node::AtPoint(sid, k) => {
                add(
                    Node::History(Some(sid.clone()), HistoryFile::View(*k)),
                    FileKind::File,
                    OsStr::new("view.jsonl"),
                );
                add(
                    Node::History(Some(sid.clone()), HistoryFile::ViewMd(*k)),
                    FileKind::File,
                    OsStr::new("view.md"),
                );
                add(
                    Node::History(Some(sid.clone()), HistoryFile::PageAt(*k)),
                    FileKind::File,
                    OsStr::new("view.html"),
                );
            }
            Node::Sessions => {
                let d = root::discover(&self.paths).map_err(FsError::from)?;
                self.ahead.listed(d.sessions.clone());
                for sid in d.sessions {
                    add(Node::Session(sid.clone()), FileKind::Dir, OsStr::new(&sid));
                }
            }
            Node::Session(sid) => {
                if !self.session_exists(sid) {
                    return Err(FsError::NotFound);
                }
                self.ahead.entered(sid);
                // The table's real names, then the archive tiers found on disk, then the rest of
                // the table.
                for row in &layout::SESSION {
                    if !matches!(row.item, layout::Item::Real(..)) {
                        continue;
                    }
                    if let Some((b, rel)) = layout::session_real(sid, row.name) {
                        if let Ok(st) = self.backing.lstat(b, &rel) {
                            add(Node::Real(b, rel), kind_of(&st), OsStr::new(row.name));
                        }
                    }
                }
                if let Ok(names) = self.backing.list(Base::Archives, Path::new(sid)) {
                    for n in names {
                        if let Some(s) =
                            n.to_str().filter(|s| crate::store::session::is_tier_dir(s))
                        {
                            let rel = PathBuf::from(sid).join(s);
                            if let Ok(st) = self.backing.lstat(Base::Archives, &rel) {
                                add(Node::Real(Base::Archives, rel), kind_of(&st), &n);
                            }
                        }
                    }
                }
                for row in self.computed.layout().rows() {
                    let (n, kind) = match row.item {
                        layout::Item::Real(..) => continue,
                        layout::Item::Computed(k) => {
                            (Node::Computed(sid.clone(), k), FileKind::File)
                        }
                        layout::Item::RawDir => (Node::RawDir(sid.clone()), FileKind::Dir),
                        layout::Item::MemoryLink => {
                            (Node::MemoryLink(sid.clone()), FileKind::Symlink)
                        }
                        layout::Item::Ctl => (Node::Ctl(Some(sid.clone())), FileKind::File),
                    };
                    add(n, kind, OsStr::new(row.name));
                }
                for l in HistoryLink::SESSION {
                    add(
                        Node::HistoryLink(Some(sid.clone()), l),
                        FileKind::Symlink,
                        OsStr::new(l.name()),
                    );
                }
            }
            Node::RawDir(sid) => {
                for n in self.computed.raw_names(sid) {
                    if let Some((s, e)) = node::parse_raw_name(&n) {
                        add(
                            Node::Raw(sid.clone(), s.to_string(), e.to_string()),
                            FileKind::File,
                            OsStr::new(&n),
                        );
                    }
                }
            }
            Node::MemoryDir => {
                let names = match self.backing.list(Base::Memory, Path::new("")) {
                    Ok(n) => n,
                    Err(FsError::NotFound) => Vec::new(),
                    Err(e) => return Err(e),
                };
                add(Node::MemoryIndex, FileKind::File, OsStr::new("MEMORY.md"));
                for n in names {
                    if n == "MEMORY.md" {
                        continue;
                    }
                    let rel = PathBuf::from(&n);
                    if let Ok(st) = self.backing.lstat(Base::Memory, &rel) {
                        add(Node::Real(Base::Memory, rel), kind_of(&st), &n);
                    }
                }
            }
            Node::Real(b, rel) => {
                for n in self.backing.list(*b, rel)? {
                    let crel = rel.join(&n);
                    if let Ok(st) = self.backing.lstat(*b, &crel) {
                        add(Node::Real(*b, crel), kind_of(&st), &n);
                    }
                }
            }
            _ => return Err(FsError::NotDir),
        }
        Ok(out
            .into_iter()
            .enumerate()
            .map(|(i, (ino, kind, name))| DirEntry {
                ino,
                offset: i as i64 + 1,
                kind,
                name,
            })
            .collect())
    }
}
