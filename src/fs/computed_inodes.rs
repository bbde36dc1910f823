//! Computed files' inodes, the one place that decides between a computed file's name, its
//! inodes and their versions (`fs/versions.rs`): which inode a lookup gives the name, what an
//! inode is described as, what an open of it reads, what `readdirplus` links, and when a
//! forgotten inode names nothing. The operations in `fs/ops/` ask these and nothing else.

use std::time::Duration;

use super::computed::Want;
use super::handles::Handle;
use super::{testhook, Entry, FileKind, FsError, Node, NormaFs, Opened, PlusEntry};
use crate::bytes::Bytes;

impl NormaFs {
    /// The entry a lookup of computed file `node` answers: the name's inode, holding the
    /// version it is described as for the open that may follow (the caller counts the
    /// kernel's lookup).
    pub(super) fn computed_lookup(&self, node: &Node) -> Result<Entry, FsError> {
        let attr = |ino| {
            testhook::before_computed_entry();
            self.computed_entry(node, ino, true)
        };
        let mut ino = self.inodes.ino(node);
        let mut r = attr(ino);
        // The content left the inode's version (here or in a lookup of the same name on
        // another worker meanwhile: a live session changes every few milliseconds): the
        // name's new inode. A lookup answered ESTALE during the kernel's retry of an open
        // reaches the reader, so the name is tried again while its inode keeps changing under
        // it (a few times: each change needs a new version).
        for _ in 0..8 {
            if self.inodes.get(node) != Some(ino) {
                ino = self.inodes.ino(node);
            } else if matches!(r, Err(FsError::Stale)) {
                ino = self.inodes.renew(node);
            } else {
                break;
            }
            r = attr(ino);
        }
        r
    }

    /// The entry of computed file `n` as inode `ino` (`hold`: for a lookup, see
    /// [`NormaFs::computed_version`]).
    pub(super) fn computed_entry(&self, n: &Node, ino: u64, hold: bool) -> Result<Entry, FsError> {
        let zero = Duration::ZERO;
        if let Some(sid) = n.session_of() {
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
        let d = self.computed_version(n, ino, hold)?;
        // When the kernel opens files itself, the attributes of a file whose inputs changed
        // lately are kept for no time: its first read asks for them again, which binds the
        // inode to the content then and holds it for that read (no open comes between). Once
        // the kernel read some of it, the inode is that version's: its attributes are kept
        // as a file's at rest are, until the watcher tells of a change (else the kernel asks
        // again before every read of a reader, hundreds of times for one `cat`).
        let ttl = if covered && (!self.changing(n) || self.versions.touched(ino)) {
            self.opts.watched_ttl
        } else {
            zero
        };
        Ok(Entry {
            attr: self.made_attr(ino, FileKind::File, d.perm, d.size, d.mtime),
            ttl,
            entry_ttl: entry_ttl.max(ttl),
        })
    }

    /// The version computed file `node`'s inode `ino` is described as: its open handles'
    /// (brought up to the current content when that extends it), else the current content
    /// if the inode stands for it. When the content left the inode's version, the name gets a
    /// new inode for the next lookup; the old one answers for its open handles, or ESTALE
    /// when it has none.
    /// `hold`: a lookup, after which the version found is held for a moment, so that the
    /// kernel's open that follows reads it whatever the content is by then.
    pub(super) fn computed_version(
        &self,
        node: &Node,
        ino: u64,
        hold: bool,
    ) -> Result<super::versions::Described, FsError> {
        // A lookup's version is held for the open that may follow, with its bytes when they
        // are at hand (the open gets them otherwise, see `open_want`); an attribute needs no
        // bytes.
        // The retry's lookup after an ESTALE takes the bytes: its open must not fail again.
        // When the kernel opens files itself, no open comes between a lookup (or an attribute
        // request) and the first read to tell it of another size: the version told is held,
        // with its bytes when the file changes now and then, so that the read finds them
        // whatever the content is by then.
        let changing = self.changing(node);
        let want = match hold {
            true if self.versions.retrying(node) || changing => Want::Bytes,
            true => Want::Pin,
            false if changing => Want::Bytes,
            false => Want::Size,
        };
        let c = self.current_content(node, ino, want)?;
        let current = self.inodes.get(node) == Some(ino);
        let (fit, d) = self.versions.fit(ino, current, &c);
        match fit {
            super::versions::Fit::Left { .. } if current => {
                self.inodes.renew(node);
            }
            // The hold takes the bytes of a file that changes now and then (or of the
            // kernel's retry): the first read must find the version told whatever the content
            // is by then. A file at rest is made again from the same inputs when read (its
            // computation's bytes stay at hand a moment, see `computed::RECENT`): a `stat`,
            // `ls -l` or `du` of a thousand sessions holds no bytes.
            super::versions::Fit::Fits if hold && want == Want::Bytes => {
                self.versions.hold(ino, &c, node)
            }
            super::versions::Fit::Fits if hold => {
                let told = super::computed::Rendered {
                    data: None,
                    ..c.clone()
                };
                self.versions.hold(ino, &told, node)
            }
            _ => {}
        }
        let d = match d {
            None if !hold => self.versions.rebind_untouched(ino, &c),
            d => d,
        };
        if !hold && d.is_some() && changing {
            self.versions.hold(ino, &c, node);
        }
        if d.is_none() && !hold {
            self.versions.answered_stale(node);
        }
        d.ok_or(FsError::Stale)
    }

    /// Whether computed file `node` changes now and then while the kernel opens files itself
    /// (a version of it replaced another within the last ten seconds): see
    /// [`NormaFs::computed_version`].
    fn changing(&self, node: &Node) -> bool {
        self.kernel_opens()
            && self
                .computed
                .changed_lately(node, super::computed::CHANGING)
    }

    /// What an open of computed inode `ino` needs of its version: its bytes, unless the
    /// kernel holds every page of it (`Versions::whole`) or a lookup's hold has them.
    pub(super) fn open_want(&self, ino: u64) -> Want {
        if self.versions.whole(ino) || self.versions.pinned(ino) {
            Want::Pin
        } else {
            Want::Bytes
        }
    }

    /// The current content of computed file `node` for inode `ino`, with its bytes as `want`
    /// asks, and always when the inode's open handles read a version it may extend.
    pub(super) fn current_content(
        &self,
        node: &Node,
        ino: u64,
        want: Want,
    ) -> Result<super::computed::Rendered, FsError> {
        let covered = self.covered(node, false);
        let c = self.computed.current(node, covered, want)?;
        if self.versions.wants_bytes(ino, &c) {
            return self.computed.current(node, covered, Want::Bytes);
        }
        Ok(c)
    }

    /// Note the attributes a reply gives the kernel for a computed file.
    pub(super) fn tell(&self, node: &Node, e: &Entry) {
        if node.is_computed_file() {
            self.versions.tell(e.attr.ino, &e.attr);
        }
    }

    /// `open` of computed file `n` as inode `ino` (`arrived`: when the request reached the
    /// mount): a handle on the inode's version, brought up to the content when that extends
    /// it, or the version a lookup held; ESTALE when the content left it (the kernel looks
    /// the name up again and retries under the new inode).
    pub(super) fn open_computed(
        &self,
        n: &Node,
        ino: u64,
        flags: i32,
        arrived: std::time::Instant,
    ) -> Result<Opened, FsError> {
        if Self::writes(flags) {
            return Err(FsError::Access);
        }
        if let Some(sid) = n.session_of() {
            if !self.session_exists(sid) {
                return Err(FsError::NotFound);
            }
        }
        self.before_computing(n);
        let c = self.current_content(n, ino, self.open_want(ino))?;
        let current = self.inodes.get(n) == Some(ino);
        // When the kernel opens files itself, this is its first read of the inode, sized by
        // what a lookup or attribute request just told it: a version held without its bytes,
        // whose content moved on since, takes them from the computation that made it while
        // they are at hand, so the read finds that version rather than the inode being given
        // to the content now (of another size: the kernel would cut it or fill it with zeros).
        if self.kernel_opens() {
            if let Some(head) = self.versions.head(ino).filter(|h| !h.kept()) {
                self.recent_head_bytes(ino, n, &head);
            }
        }
        let opening = self.versions.open(ino, current, &c, arrived);
        // The content moved on from the inode's version: the name's next lookup
        // gets a new inode.
        let moved_on = !matches!(
            opening,
            Ok(super::versions::Opening {
                fit: super::versions::Fit::Fits,
                ..
            })
        );
        if moved_on && current {
            self.inodes.renew(n);
        }
        // Neither its version nor one a lookup held a moment ago: the kernel looks
        // the name up again and retries under its new inode.
        let opening = opening.map_err(|left| {
            tracing::debug!("open of {n:?} (inode {ino}): {left:?}");
            self.versions.answered_stale(n);
            FsError::Stale
        })?;
        // The handle's version needs its bytes at hand unless the kernel holds every
        // page of it (a hold or a race may have left it without): found now, while
        // the inputs that make it are likely still there; else the kernel looks the
        // name up again.
        if let Some(head) = self.versions.head(ino) {
            if head.data.is_none() && !self.versions.whole(ino) {
                if let Err(e) = self.head_bytes(ino, n, &head) {
                    self.versions.closed(ino);
                    if current {
                        self.inodes.renew(n);
                    }
                    self.versions.answered_stale(n);
                    tracing::debug!(
                        "open of {n:?} (inode {ino}): its bytes are gone ({e}; {})",
                        self.versions.describe(ino)
                    );
                    return Err(FsError::Stale);
                }
            }
        }
        let fh = self.new_handle(Handle::Computed { ino });
        // Through the page cache, kept across opens: every size and page the kernel
        // holds of this inode is its version's (`fs/versions.rs`). Not when the
        // kernel is to keep nothing (`--ttl-ms 0`).
        Ok(Opened {
            fh,
            direct_io: !self.opts.kernel_caching(),
            keep_cache: true,
            backing: None,
            // Unless the kernel was last told this very size (its reads stop at
            // the size it holds).
            stale_attr: !opening.size_told,
        })
    }

    /// What `readdirplus` links computed file `node` (inode `ino` in the listing) with:
    /// its version the kernel was told of, kept while every input is watched; else what it
    /// was last told, or a placeholder kept for no time (the kernel asks again before using
    /// it), never a size it was not told.
    pub(super) fn computed_plus(&self, node: &Node, ino: u64, placeholder: Entry) -> PlusEntry {
        if let Some(en) = self.held_computed_entry(node) {
            return PlusEntry::Linked(en);
        }
        if let Some(attr) = self.versions.told(ino) {
            return PlusEntry::Linked(Entry {
                attr,
                ttl: Duration::ZERO,
                entry_ttl: Duration::ZERO,
            });
        }
        let mut p = placeholder;
        p.attr.ino = self.inodes.listing_ino(node);
        PlusEntry::Linked(p)
    }

    /// A computed file's entry as the kernel holds it, when the version its inode was last
    /// described as is still the current one (known without a look at the inputs): its
    /// lookup's inode, attributes and TTLs. A listing must not shorten them: an entry given
    /// no time is dropped by the kernel once unused, and its inode with it, pages and all.
    fn held_computed_entry(&self, node: &Node) -> Option<Entry> {
        if !self.covered(node, false) {
            return None;
        }
        let ino = self.inodes.get(node)?;
        let c = self.computed.known_now(node)?;
        let attr = self.versions.told_of(ino, &c)?;
        Some(Entry {
            attr,
            ttl: self.opts.watched_ttl,
            entry_ttl: self.opts.watched_ttl,
        })
    }

    /// The kernel forgot inode `ino`: a computed file's inode of a version gone, read by no
    /// handle, names nothing from now on (nothing can ask for it again).
    pub(super) fn forget_computed(&self, ino: u64) {
        if let Ok(node) = self.node(ino) {
            if node.is_computed_file()
                && self.inodes.get(&node) != Some(ino)
                && !self.versions.is_open(ino)
            {
                self.inodes.detach(ino);
            }
        }
    }

    /// The bytes of version `head` of inode `ino` (computed file `node`) that the computation
    /// that made it left at hand a moment (see `computed::RECENT`), pinned to the inode.
    fn recent_head_bytes(
        &self,
        ino: u64,
        node: &Node,
        head: &super::versions::Head,
    ) -> Option<Bytes> {
        let data = self
            .computed
            .recent(node, head.made)
            .filter(|d| d.len() == head.len)?;
        self.versions.pin(ino, head.fp, &data);
        Some(data)
    }

    /// The bytes of version `head` of computed file `node` (inode `ino`): pinned, left at
    /// hand by the computation that made it, or made again and pinned (see
    /// [`NormaFs::computed_snapshot`]).
    pub(super) fn head_bytes(
        &self,
        ino: u64,
        node: &Node,
        head: &super::versions::Head,
    ) -> Result<Bytes, FsError> {
        if let Some(d) = &head.data {
            return Ok(d.clone());
        }
        if let Some(s) = &head.spill {
            return s.bytes().map_err(FsError::from);
        }
        if let Some(data) = self.recent_head_bytes(ino, node, head) {
            self.versions.trim();
            return Ok(data);
        }
        let c = self
            .computed
            .current(node, self.covered(node, false), Want::Bytes)?;
        match head.found_in(&c) {
            Some(data) => {
                self.versions.pin(ino, head.fp, &data);
                self.versions.trim();
                Ok(data)
            }
            // The inputs were rewritten since the version was made: its bytes are gone.
            None => Err(FsError::Os(libc::EIO)),
        }
    }
}
