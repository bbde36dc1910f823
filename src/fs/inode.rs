//! The one owner of inode numbers: node identity -> inode, with lookup counts.
//!
//! Lookup counts follow the kernel's lookup/forget protocol. A real file's inode stands for one
//! backing file for life (device, inode, birth time), and holds it open from the kernel's
//! lookup until its forget, whatever its name names meanwhile (removed or renamed over, it
//! still answers for its file: `fstat`, `fchmod`, `ftruncate` of an open descriptor reach
//! it); a computed file's for one version of it
//! (a new version of other bytes gets a new inode: see `versions.rs`). A retired computed
//! inode the kernel has forgotten gives its slot to a later inode, under a new number (the
//! slot's generation is in its high bits).

use std::collections::{HashMap, HashSet};

use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::node::Node;
use super::real::Ident;

/// Inode number of the mount's root.
pub const ROOT_INO: u64 = 1;

#[derive(Debug, Default)]
struct Inner {
    by_node: HashMap<Node, u64>,
    /// Per slot (an inode number's low 32 bits, less one): the node, `None` once detached
    /// (renamed over or removed), the kernel's lookups, and the slot's generation (the
    /// number's high bits; see [`InodeTable::detach`]).
    nodes: Vec<(Option<Node>, u64, u32)>,
    /// The backing file each real regular file's inode stands for, for the inode's whole
    /// life (a file replaced by rename is another file, with an inode of its own, see
    /// [`InodeTable::renew`]), and the descriptor it is held by while the kernel holds the
    /// inode: the kernel keeps one size and one page cache per inode, so every size it is
    /// told of an inode and every byte it reads for it come from that one file.
    files: HashMap<u64, Bound>,
    /// The inodes of `files` that are held, and how many may be (past it, the idle ones
    /// held the longest ago are let go first).
    holding: HashSet<u64>,
    cap: usize,
    /// Per session, the inodes of its `raw/` ranges (a change of the session invalidates
    /// them all; scanning every inode for them would cost as much as the table is large).
    raw: HashMap<String, Vec<u64>>,
    /// Per computed file listed before the kernel was told of it, the inode a listing links
    /// its name to (see [`InodeTable::listing_ino`]).
    listing: HashMap<Node, u64>,
    /// Inodes that name nothing and that nothing can ask for again (see
    /// [`InodeTable::detach`]): their slots are given again, under new numbers, before the
    /// table grows.
    free: Vec<u64>,
}

/// The file a real regular file's inode stands for.
#[derive(Debug)]
struct Bound {
    id: Ident,
    held: Option<Held>,
    /// When the file was last looked up or opened (the least recent are let go first when
    /// more files are held than the cap allows).
    until: Instant,
    /// Seen shorter than the kernel held it (truncated in place under the mount).
    shrunk: bool,
}

/// A backing file held open for its inode.
#[derive(Debug, Clone)]
pub struct Held {
    pub file: Arc<File>,
    /// Open for reading (else opened as a path: reopened for each open of the inode).
    pub readable: bool,
}

/// How many backing files are held open at most unless told otherwise
/// ([`InodeTable::set_cap`]).
const DEFAULT_CAP: usize = 4096;

/// How long a file an open held for an inode the kernel does not hold (one a listing linked)
/// stays held with no handle open: long enough for the kernel's retry after ESTALE to find
/// it held. An inode the kernel looked up holds its file until the kernel forgets it.
pub const HOLD_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct InodeTable {
    inner: RwLock<Inner>,
}

/// An inode number's slot and generation.
fn split(ino: u64) -> (usize, u32) {
    (
        ((ino & 0xFFFF_FFFF).wrapping_sub(1)) as usize,
        (ino >> 32) as u32,
    )
}

/// The inode number of slot `i` in generation `gen`.
fn number(i: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32) | (i as u64 + 1)
}

impl Inner {
    /// The slot of `ino`, if `ino` is its current number.
    fn slot(&self, ino: u64) -> Option<&(Option<Node>, u64, u32)> {
        let (i, gen) = split(ino);
        self.nodes.get(i).filter(|s| s.2 == gen)
    }

    fn slot_mut(&mut self, ino: u64) -> Option<&mut (Option<Node>, u64, u32)> {
        let (i, gen) = split(ino);
        self.nodes.get_mut(i).filter(|s| s.2 == gen)
    }

    /// A new inode naming `node`: the slot of a number `detach` gave back if there is one,
    /// under its next generation (a number the kernel or a listing still names stays that
    /// of nothing).
    fn new_ino(&mut self, node: &Node) -> u64 {
        while let Some(old) = self.free.pop() {
            let (i, _) = split(old);
            if let Some(slot) = self.slot_mut(old) {
                if slot.0.is_none() && slot.1 == 0 {
                    let gen = slot.2.wrapping_add(1);
                    *slot = (Some(node.clone()), 0, gen);
                    return number(i, gen);
                }
            }
        }
        self.nodes.push((Some(node.clone()), 0, 0));
        self.nodes.len() as u64
    }

    fn ino_of(&mut self, node: &Node) -> u64 {
        if let Some(&ino) = self.by_node.get(node) {
            return ino;
        }
        let ino = self.new_ino(node);
        self.by_node.insert(node.clone(), ino);
        if let Node::Raw(sid, ..) = node {
            self.raw.entry(sid.clone()).or_default().push(ino);
        }
        ino
    }

    /// Hold `file` for `ino` (standing for `id`) unless it is held, for [`HOLD_GRACE`] at least;
    /// over the cap, files let go (idle, the grace over first, then the least recently
    /// used) go to `spare`, to be closed once the table is unlocked.
    fn hold(&mut self, ino: u64, id: Ident, file: Held, spare: &mut Vec<Held>) {
        let now = Instant::now();
        let b = self.files.entry(ino).or_insert(Bound {
            id,
            held: None,
            until: now,
            shrunk: false,
        });
        b.until = now + HOLD_GRACE;
        if b.held.is_some() {
            spare.push(file);
            return;
        }
        b.held = Some(file);
        self.holding.insert(ino);
        if self.holding.len() > self.cap {
            self.let_go_unheld(now, spare);
        }
        if self.holding.len() > self.cap {
            // The least recently used eighth of the idle ones, the new one aside.
            let mut idle: Vec<(Instant, u64)> = self
                .holding
                .iter()
                .filter(|&&i| i != ino)
                .filter_map(|&i| self.files.get(&i).map(|b| (b.until, i)))
                .collect();
            idle.sort_unstable();
            let last = idle
                .get((self.cap / 8).max(1).min(idle.len()).saturating_sub(1))
                .map(|e| e.0);
            if let Some(last) = last {
                self.let_go(|i, until| i != ino && until <= last, self.cap / 8, spare);
            }
        }
    }

    /// Let go of the files of inodes the kernel does not hold (an open of an inode a listing
    /// linked held them) whose grace is over and that no handle shares.
    fn let_go_unheld(&mut self, now: Instant, spare: &mut Vec<Held>) {
        let unheld: HashSet<u64> = self
            .holding
            .iter()
            .copied()
            .filter(|&i| self.slot(i).is_none_or(|s| s.1 == 0))
            .collect();
        if !unheld.is_empty() {
            self.let_go(
                |i, until| unheld.contains(&i) && until <= now,
                usize::MAX,
                spare,
            );
        }
    }

    /// Whether `ino` is the inode its node's name gives (not removed or renamed over).
    fn current(&self, ino: u64) -> bool {
        self.slot(ino)
            .and_then(|s| s.0.as_ref())
            .is_some_and(|n| self.by_node.get(n) == Some(&ino))
    }

    /// Let go of at most `most` held files that no open handle shares and `which` (inode,
    /// held until) picks, never one whose name is gone (its file could not be found again).
    /// An inode let go is still bound to its file: an open of it checks that its name still
    /// names that file, and holds it again.
    fn let_go(&mut self, which: impl Fn(u64, Instant) -> bool, most: usize, spare: &mut Vec<Held>) {
        let mut gone = Vec::new();
        for &ino in &self.holding {
            if gone.len() >= most.max(1) {
                break;
            }
            let Some(b) = self.files.get(&ino) else {
                gone.push(ino);
                continue;
            };
            let idle = b
                .held
                .as_ref()
                .is_none_or(|h| Arc::strong_count(&h.file) == 1);
            if idle && self.current(ino) && which(ino, b.until) {
                gone.push(ino);
            }
        }
        for ino in gone {
            self.holding.remove(&ino);
            if let Some(h) = self.files.get_mut(&ino).and_then(|b| b.held.take()) {
                spare.push(h);
            }
        }
    }

    /// Let go of the file `ino` is held by (the kernel forgot the inode). An inode whose
    /// name is gone (removed or renamed over) names nothing from then on: the file it stood
    /// for can be reached no more.
    fn release(&mut self, ino: u64) -> Option<Held> {
        self.holding.remove(&ino);
        let held = self.files.get_mut(&ino).and_then(|b| b.held.take());
        if self.files.contains_key(&ino) && !self.current(ino) {
            // Nothing can ask for it again: its slot is given again, under a new number.
            self.files.remove(&ino);
            if let Some(slot) = self.slot_mut(ino) {
                slot.0 = None;
            }
            self.free.push(ino);
        }
        held
    }

    /// `ino`'s name is gone (removed, or renamed over): the name no longer gives it. An
    /// inode standing for a real file still names its node (its operations go to the file
    /// it holds) until the kernel forgets it; any other names nothing.
    fn unname(&mut self, ino: u64) {
        let bound = self.files.get(&ino).is_some_and(|b| b.held.is_some());
        let held = self.slot(ino).is_some_and(|s| s.1 > 0);
        if let Some(slot) = self.slot_mut(ino) {
            if !(bound && held) {
                slot.0 = None;
            }
        }
        if !(bound && held) {
            self.holding.remove(&ino);
            self.files.remove(&ino);
        }
    }
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl InodeTable {
    pub fn new() -> InodeTable {
        let mut inner = Inner {
            cap: DEFAULT_CAP,
            ..Inner::default()
        };
        inner.by_node.insert(Node::Root, ROOT_INO);
        inner.nodes.push((Some(Node::Root), 1, 0));
        InodeTable {
            inner: RwLock::new(inner),
        }
    }

    /// The inode of `node`, allocated on first sight.
    pub fn ino(&self, node: &Node) -> u64 {
        if let Some(&ino) = self.inner.read().by_node.get(node) {
            return ino;
        }
        self.inner.write().ino_of(node)
    }

    /// Real file `ino` was seen shorter than the kernel held it: opens of it use direct I/O
    /// from now on (`NormaFs::read`).
    pub fn mark_shrunk(&self, ino: u64) {
        if let Some(b) = self.inner.write().files.get_mut(&ino) {
            b.shrunk = true;
        }
    }

    /// Whether real file `ino` was seen shorter than the kernel held it.
    pub fn shrunk(&self, ino: u64) -> bool {
        self.inner.read().files.get(&ino).is_some_and(|b| b.shrunk)
    }

    /// Whether `ino` stands for the backing file `id`: recorded on first sight; `false` when
    /// it stands for another (the name was renamed over since).
    pub fn same_file(&self, ino: u64, id: Ident) -> bool {
        if let Some(b) = self.inner.read().files.get(&ino) {
            return b.id == id;
        }
        let mut w = self.inner.write();
        w.files
            .entry(ino)
            .or_insert(Bound {
                id,
                held: None,
                until: Instant::now(),
                shrunk: false,
            })
            .id
            == id
    }

    /// Whether `ino` may answer for the file of `st` and `id` found under its name: a regular
    /// file only when it is the inode's own (one renamed over it since gets a new inode; the
    /// kernel, answered ESTALE, looks the name up again); anything else always.
    pub fn answers_for(&self, ino: u64, st: &libc::stat, id: Ident) -> bool {
        st.st_mode & libc::S_IFMT != libc::S_IFREG || self.same_file(ino, id)
    }

    /// The file `ino` is held by, if it is.
    pub fn held_file(&self, ino: u64) -> Option<Held> {
        self.inner.read().files.get(&ino)?.held.clone()
    }

    /// The kernel looked up `node` and normafs opened its regular file `id` as `file`:
    /// the inode standing for that file (a new one when `node`'s inode stands for another:
    /// renamed over), with one more lookup counted and the file held from now until the
    /// kernel forgets the inode (if the inode was held already, `file` is closed). Counted
    /// and held at once, so that a `forget` meanwhile cannot let go of a file just held.
    pub fn lookup_file(&self, node: &Node, id: Ident, file: Held) -> u64 {
        let mut spare = Vec::new();
        let ino = {
            let mut w = self.inner.write();
            let mut ino = w.ino_of(node);
            if w.files.get(&ino).is_some_and(|b| b.id != id) {
                w.by_node.remove(node);
                ino = w.ino_of(node);
            }
            if let Some(slot) = w.slot_mut(ino) {
                slot.1 = slot.1.saturating_add(1);
            }
            w.hold(ino, id, file, &mut spare);
            ino
        };
        drop(spare);
        ino
    }

    /// Hold `file` as the file of `ino` if `ino` stands for `id` and is not held yet (an
    /// open of an inode a listing linked: no lookup held it). Whether `ino` stands for `id`.
    pub fn hold(&self, ino: u64, id: Ident, file: Held) -> bool {
        let mut spare = Vec::new();
        let same = {
            let mut w = self.inner.write();
            if w.files.get(&ino).is_some_and(|b| b.id != id) {
                false
            } else {
                w.hold(ino, id, file, &mut spare);
                true
            }
        };
        drop(spare);
        same
    }

    /// Let go of the held files of inodes the kernel does not hold that no handle shares,
    /// their grace over; how many.
    pub fn let_go_idle(&self) -> usize {
        let mut spare = Vec::new();
        {
            let mut w = self.inner.write();
            if w.holding.is_empty() {
                return 0;
            }
            w.let_go_unheld(Instant::now(), &mut spare);
        }
        spare.len()
    }

    /// The file `ino` is held by, if it is, held for [`HOLD_GRACE`] more (an open of it).
    pub fn held_file_for_open(&self, ino: u64) -> Option<Held> {
        let mut w = self.inner.write();
        let b = w.files.get_mut(&ino)?;
        let h = b.held.clone()?;
        b.until = Instant::now() + HOLD_GRACE;
        Some(h)
    }

    /// Hold at most `cap` files open (at least 64).
    pub fn set_cap(&self, cap: usize) {
        self.inner.write().cap = cap.max(64);
    }

    /// How many files are held open.
    pub fn files_held(&self) -> usize {
        self.inner.read().holding.len()
    }

    /// `node` names another backing file than its inode stood for: a new inode for it; the
    /// old one is detached (its open handles keep reading the file they opened).
    /// The old inode keeps naming `node`, so that `getattr` of it still answers (for the
    /// file it holds, see `NormaFs::getattr`).
    pub fn renew(&self, node: &Node) -> u64 {
        self.inner.write().by_node.remove(node);
        self.ino(node)
    }

    /// The inode of `node` if it has one (never allocates).
    pub fn get(&self, node: &Node) -> Option<u64> {
        self.inner.read().by_node.get(node).copied()
    }

    /// The inode of `node`, counting one kernel lookup.
    pub fn lookup(&self, node: &Node) -> u64 {
        let ino = self.ino(node);
        let mut w = self.inner.write();
        if let Some(slot) = w.slot_mut(ino) {
            slot.1 = slot.1.saturating_add(1);
        }
        ino
    }

    /// One more kernel lookup of `ino`, which names a node already (a `readdirplus` entry).
    pub fn lookup_ino(&self, ino: u64) {
        let mut w = self.inner.write();
        if let Some(slot) = w.slot_mut(ino) {
            slot.1 = slot.1.saturating_add(1);
        }
    }

    /// The kernel dropped `n` lookups of `ino`; once it holds the inode no more, the file
    /// the inode was held by is let go.
    pub fn forget(&self, ino: u64, n: u64) {
        let spare = {
            let mut w = self.inner.write();
            let Some(slot) = w.slot_mut(ino) else {
                return;
            };
            slot.1 = slot.1.saturating_sub(n);
            if slot.1 > 0 {
                return;
            }
            w.release(ino)
        };
        drop(spare);
    }

    /// The node of an inode; `None` for unknown or detached inodes.
    pub fn node(&self, ino: u64) -> Option<Node> {
        let r = self.inner.read();
        r.slot(ino).and_then(|s| s.0.clone())
    }

    /// The kernel's lookup count of `ino` (for tests and debugging).
    pub fn lookups(&self, ino: u64) -> u64 {
        let r = self.inner.read();
        r.slot(ino).map(|s| s.1).unwrap_or(0)
    }

    /// `from` was renamed to `to`: the inode of `from` now names `to`; the inode that named `to`
    /// before (replaced) is detached. Children of renamed directories keep their old names
    /// (memory/ has no sub-directories normafs manages).
    pub fn rename(&self, from: &Node, to: &Node) {
        let mut w = self.inner.write();
        if let Some(old_to) = w.by_node.remove(to) {
            w.unname(old_to);
        }
        if let Some(ino) = w.by_node.remove(from) {
            if let Some(slot) = w.slot_mut(ino) {
                slot.0 = Some(to.clone());
            }
            w.by_node.insert(to.clone(), ino);
        }
    }

    /// `ino` names nothing any more and nothing can ask for it again (a computed file's inode
    /// of a version gone, forgotten by the kernel and open nowhere): its slot is given to the
    /// next new inode, under a new number (the next generation in its high 32 bits), so that
    /// the old number, wherever it is still written down (a kept listing, a reply under
    /// way), names nothing rather than another node.
    pub fn detach(&self, ino: u64) {
        let mut w = self.inner.write();
        let w = &mut *w;
        let Some((Some(node), lookups, _)) = w.slot(ino).cloned() else {
            return;
        };
        if w.by_node.get(&node) == Some(&ino) {
            // Still the inode its name gives.
            return;
        }
        if let Some(slot) = w.slot_mut(ino) {
            slot.0 = None;
        }
        if lookups > 0 || w.files.contains_key(&ino) {
            // Held by the kernel, or a real file's: only the name is let go.
            return;
        }
        if let Node::Raw(sid, ..) = &node {
            if let Some(list) = w.raw.get_mut(sid) {
                list.retain(|&i| i != ino);
            }
        }
        if w.listing.get(&node) == Some(&ino) {
            w.listing.remove(&node);
        }
        w.free.push(ino);
    }

    /// `node` was removed: detach its inode so a new file of the same name gets a new one
    /// (a real file's inode keeps answering for its file while the kernel holds it).
    pub fn remove(&self, node: &Node) {
        let mut w = self.inner.write();
        if let Some(ino) = w.by_node.remove(node) {
            w.unname(ino);
        }
    }

    /// Inodes the kernel holds (looked up and not forgotten), the root included.
    pub fn looked_up(&self) -> Vec<u64> {
        let r = self.inner.read();
        r.nodes
            .iter()
            .enumerate()
            .filter(|(i, (node, lookups, _))| node.is_some() && (*lookups > 0 || *i == 0))
            .map(|(i, s)| number(i, s.2))
            .collect()
    }

    /// The inode a `readdirplus` answer links computed file `node` to when the kernel was
    /// told nothing of it: one of its own, never the inode a lookup gives, so that the
    /// placeholder attributes a listing sends (it computes nothing) never reach an inode
    /// anyone reads. The kernel looks the name up before any use (the entry is kept for no
    /// time) and finds the file's own inode; an open or `getattr` of this one answers ESTALE.
    pub fn listing_ino(&self, node: &Node) -> u64 {
        let named = |r: &Inner, ino: u64| r.slot(ino).is_some_and(|s| s.0.as_ref() == Some(node));
        {
            let r = self.inner.read();
            if let Some(&ino) = r.listing.get(node).filter(|&&i| named(&r, i)) {
                return ino;
            }
        }
        let mut w = self.inner.write();
        if let Some(&ino) = w.listing.get(node).filter(|&&i| named(&w, i)) {
            return ino;
        }
        let ino = w.new_ino(node);
        w.listing.insert(node.clone(), ino);
        ino
    }

    /// The `raw/` ranges of session `sid` that have an inode: (inode, range name).
    pub fn raw_of(&self, sid: &str) -> Vec<(u64, String)> {
        let r = self.inner.read();
        r.raw
            .get(sid)
            .into_iter()
            .flatten()
            .filter_map(|&ino| match r.slot(ino) {
                Some((Some(Node::Raw(s, a, b)), ..)) if s == sid => {
                    Some((ino, super::node::raw_name(a, b)))
                }
                _ => None,
            })
            .collect()
    }

    /// Number of inode numbers in use or given back (the table's size).
    pub fn len(&self) -> usize {
        self.inner.read().nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::node::Base;
    use std::path::PathBuf;

    #[test]
    fn stable_counted_and_renamed() {
        let t = InodeTable::new();
        let a = Node::Real(Base::Memory, PathBuf::from("a.md"));
        let b = Node::Real(Base::Memory, PathBuf::from("b.md"));
        let ia = t.lookup(&a);
        assert_eq!(t.lookup(&a), ia);
        assert_eq!(t.lookups(ia), 2);
        t.forget(ia, 2);
        assert_eq!(t.lookups(ia), 0);
        assert_eq!(t.ino(&a), ia, "a forgotten path keeps its inode");
        let ib = t.ino(&b);
        t.rename(&a, &b);
        assert_eq!(t.node(ia), Some(b.clone()));
        assert_eq!(t.node(ib), None, "the replaced inode is detached");
        assert_eq!(t.ino(&b), ia);
        t.remove(&b);
        assert_eq!(t.node(ia), None);
        assert_ne!(
            t.ino(&b),
            ia,
            "a new file of the same name gets a new inode"
        );
        assert_eq!(t.node(ROOT_INO), Some(Node::Root));
        assert_eq!(t.node(0), None);
        assert_eq!(t.node(9999), None);
    }

    #[test]
    fn held_inodes_are_those_the_kernel_looked_up() {
        let t = InodeTable::new();
        let a = Node::Real(Base::Memory, PathBuf::from("a.md"));
        let b = Node::Real(Base::Memory, PathBuf::from("b.md"));
        let ia = t.lookup(&a);
        t.ino(&b);
        assert_eq!(
            t.looked_up(),
            vec![ROOT_INO, ia],
            "b was listed, never looked up"
        );
        t.forget(ia, 1);
        assert_eq!(t.looked_up(), vec![ROOT_INO]);
    }

    /// A file to hold, owned by nothing else.
    fn held() -> Held {
        Held {
            file: Arc::new(File::open("/dev/null").expect("/dev/null")),
            readable: true,
        }
    }

    #[test]
    fn a_file_is_held_until_the_kernel_forgets_its_inode() {
        let t = InodeTable::new();
        let a = Node::Real(Base::Memory, PathBuf::from("a.md"));
        let id = (1, 2, 3, 4);
        let ino = t.lookup_file(&a, id, held());
        assert_eq!(t.files_held(), 1);
        std::thread::sleep(HOLD_GRACE + Duration::from_millis(100));
        assert_eq!(t.let_go_idle(), 0, "the kernel holds the inode");
        assert!(t.held_file(ino).is_some());
        // Its name removed: it still names its node, and holds its file, until forgotten.
        t.remove(&a);
        assert_eq!(t.node(ino), Some(a.clone()));
        assert!(t.held_file(ino).is_some());
        assert_ne!(t.ino(&a), ino, "the name gives a new inode");
        t.forget(ino, 1);
        assert_eq!(t.files_held(), 0);
        assert_eq!(t.node(ino), None, "forgotten, it names nothing");

        // An inode the kernel does not hold (a listing linked it) holds the file its open
        // found for its grace, and while a handle shares it.
        let b = Node::Real(Base::Memory, PathBuf::from("b.md"));
        let ib = t.ino(&b);
        assert!(t.hold(ib, id, held()));
        assert!(!t.hold(ib, (9, 9, 9, 9), held()), "never another file");
        assert_eq!(t.let_go_idle(), 0, "within its grace");
        let handle = t.held_file_for_open(ib).expect("held").file;
        std::thread::sleep(HOLD_GRACE + Duration::from_millis(100));
        assert_eq!(t.let_go_idle(), 0, "a handle shares it");
        drop(handle);
        assert_eq!(t.let_go_idle(), 1, "idle and its grace over");
        assert!(t.same_file(ib, id), "still bound to its file");
        // A lookup that finds another file under the name: a new inode.
        let other = t.lookup_file(&b, (5, 6, 7, 8), held());
        assert_ne!(other, ib);
        assert_eq!(t.lookups(other), 1);
    }

    #[test]
    fn raw_ranges_are_found_per_session() {
        let t = InodeTable::new();
        let raw = |s: &str, a: &str, b: &str| Node::Raw(s.into(), a.into(), b.into());
        let x1 = t.ino(&raw("x", "m0001", "m0004"));
        t.ino(&raw("y", "m0001", "m0004"));
        t.ino(&Node::RawDir("x".into()));
        let x2 = t.lookup(&raw("x", "m0005", "m0009"));
        assert_eq!(
            t.raw_of("x"),
            vec![
                (x1, "m0001-m0004.md".to_string()),
                (x2, "m0005-m0009.md".to_string())
            ]
        );
        assert_eq!(t.raw_of("y").len(), 1);
        assert!(t.raw_of("z").is_empty());
        // Asked again: the same inode, listed once.
        assert_eq!(t.ino(&raw("x", "m0001", "m0004")), x1);
        assert_eq!(t.raw_of("x").len(), 2);
    }

    #[test]
    fn a_detached_inode_forgotten_by_the_kernel_gives_its_slot_under_a_new_number() {
        let t = InodeTable::new();
        let raw = Node::Raw("x".into(), "m0001".into(), "m0004".into());
        let view = Node::Computed("x".into(), crate::fs::node::ComputedKind::VIEW);
        let old = t.lookup(&raw);
        let placeholder = t.listing_ino(&view);
        // A new version of the range: a new inode; the old one is still held by the kernel.
        let new = t.renew(&raw);
        assert_ne!(new, old);
        let other = t.renew(&view);
        assert_ne!(
            other & 0xFFFF_FFFF,
            old & 0xFFFF_FFFF,
            "not while the kernel holds it"
        );
        // Forgotten: its slot comes back, once, under a number of its own; the old number
        // names nothing, and the session's raw list lets it go.
        t.forget(old, 1);
        t.detach(old);
        assert_eq!(t.node(old), None, "names nothing");
        assert_eq!(t.raw_of("x"), vec![(new, "m0001-m0004.md".to_string())]);
        let slots = t.len();
        let memory = t.ino(&Node::MemoryIndex);
        assert_eq!(t.len(), slots, "the slot given again");
        assert_eq!(memory & 0xFFFF_FFFF, old & 0xFFFF_FFFF);
        assert_ne!(memory, old, "under a new number");
        assert_eq!(t.node(old), None, "the old number still names nothing");
        assert_eq!(t.node(memory), Some(Node::MemoryIndex));
        t.lookup_ino(old);
        assert_eq!(
            t.lookups(memory),
            0,
            "a late count of the old number counts nothing"
        );
        assert_ne!(t.renew(&Node::RootAudit) & 0xFFFF_FFFF, old & 0xFFFF_FFFF);
        // The current inode of a name is never given away; a listing's placeholder given
        // away is never linked again.
        t.detach(new);
        assert_eq!(t.node(new), Some(raw.clone()));
        t.detach(placeholder);
        let taken = t.ino(&Node::MemoryDir);
        assert_eq!(taken & 0xFFFF_FFFF, placeholder & 0xFFFF_FFFF);
        let again = t.listing_ino(&view);
        assert!(again != taken && again != placeholder);
        assert_eq!(t.node(again), Some(view));
        assert_eq!(t.node(placeholder), None);
    }
}
