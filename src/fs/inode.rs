//! The one owner of inode numbers: node identity -> stable inode, with lookup counts.
//!
//! An inode number is never reused for another node during the life of the mount, and a node
//! keeps its number while it exists. Lookup counts follow the kernel's lookup/forget protocol;
//! forgetting does not free the number (so a path keeps its inode), it only lets the table know
//! the kernel holds no reference.

use std::collections::HashMap;

use parking_lot::RwLock;

use super::node::Node;

/// Inode number of the mount's root.
pub const ROOT_INO: u64 = 1;

#[derive(Debug, Default)]
struct Inner {
    by_node: HashMap<Node, u64>,
    /// Index `ino - 1`: the node, `None` once detached (renamed over or removed).
    nodes: Vec<(Option<Node>, u64)>,
    /// The backing file (device, inode) each real regular file's inode stands for: a file
    /// replaced by rename is another file, with an inode of its own (see [`InodeTable::renew`]).
    /// With it, whether the kernel was told this file's attributes since the inode was
    /// bound to it (until then its size and pages may be another file's).
    files: HashMap<u64, (super::real::Ident, bool)>,
    /// Per session, the inodes of its `raw/` ranges (a change of the session invalidates
    /// them all; scanning every inode for them would cost as much as the table is large).
    raw: HashMap<String, Vec<u64>>,
}

#[derive(Debug)]
pub struct InodeTable {
    inner: RwLock<Inner>,
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl InodeTable {
    pub fn new() -> InodeTable {
        let mut inner = Inner::default();
        inner.by_node.insert(Node::Root, ROOT_INO);
        inner.nodes.push((Some(Node::Root), 1));
        InodeTable {
            inner: RwLock::new(inner),
        }
    }

    /// The inode of `node`, allocated on first sight.
    pub fn ino(&self, node: &Node) -> u64 {
        if let Some(&ino) = self.inner.read().by_node.get(node) {
            return ino;
        }
        let mut w = self.inner.write();
        if let Some(&ino) = w.by_node.get(node) {
            return ino;
        }
        w.nodes.push((Some(node.clone()), 0));
        let ino = w.nodes.len() as u64;
        w.by_node.insert(node.clone(), ino);
        if let Node::Raw(sid, ..) = node {
            w.raw.entry(sid.clone()).or_default().push(ino);
        }
        ino
    }

    /// Whether `ino` stands for the backing file `id`: recorded on first sight; `false` when
    /// it stands for another (the name was renamed over since).
    pub fn same_file(&self, ino: u64, id: super::real::Ident) -> bool {
        if let Some(&(known, _)) = self.inner.read().files.get(&ino) {
            return known == id;
        }
        self.inner.write().files.entry(ino).or_insert((id, false)).0 == id
    }

    /// The kernel is told the attributes of `ino`'s file `id` (a reply of them).
    pub fn told(&self, ino: u64, id: super::real::Ident) {
        if let Some(e) = self.inner.write().files.get_mut(&ino) {
            if e.0 == id {
                e.1 = true;
            }
        }
    }

    /// Whether the kernel was told the attributes of `ino`'s file since it was bound to it.
    pub fn was_told(&self, ino: u64) -> bool {
        self.inner.read().files.get(&ino).is_some_and(|e| e.1)
    }

    /// `ino` stands for the backing file `id` from now on (no handle holds its old one).
    pub fn rebind(&self, ino: u64, id: super::real::Ident) {
        self.inner.write().files.insert(ino, (id, false));
    }

    /// `node` names another backing file than its inode stood for: a new inode for it; the
    /// old one is detached (its open handles keep reading the file they opened).
    /// The old inode keeps naming `node`, so that `getattr` of it still answers (for the
    /// file a handle of it opened, see `NormaFs::getattr`) while `open` of it is refused.
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
        if let Some(slot) = w.nodes.get_mut((ino - 1) as usize) {
            slot.1 = slot.1.saturating_add(1);
        }
        ino
    }

    /// One more kernel lookup of `ino`, which names a node already (a `readdirplus` entry).
    pub fn lookup_ino(&self, ino: u64) {
        let mut w = self.inner.write();
        if let Some(slot) = w.nodes.get_mut((ino.wrapping_sub(1)) as usize) {
            slot.1 = slot.1.saturating_add(1);
        }
    }

    /// The kernel dropped `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut w = self.inner.write();
        if let Some(slot) = w.nodes.get_mut((ino.wrapping_sub(1)) as usize) {
            slot.1 = slot.1.saturating_sub(n);
        }
    }

    /// The node of an inode; `None` for unknown or detached inodes.
    pub fn node(&self, ino: u64) -> Option<Node> {
        let r = self.inner.read();
        r.nodes
            .get((ino.wrapping_sub(1)) as usize)
            .and_then(|s| s.0.clone())
    }

    /// The kernel's lookup count of `ino` (for tests and debugging).
    pub fn lookups(&self, ino: u64) -> u64 {
        let r = self.inner.read();
        r.nodes
            .get((ino.wrapping_sub(1)) as usize)
            .map(|s| s.1)
            .unwrap_or(0)
    }

    /// `from` was renamed to `to`: the inode of `from` now names `to`; the inode that named `to`
    /// before (replaced) is detached. Children of renamed directories keep their old names
    /// (memory/ has no sub-directories normafs manages).
    pub fn rename(&self, from: &Node, to: &Node) {
        let mut w = self.inner.write();
        if let Some(old_to) = w.by_node.remove(to) {
            if let Some(slot) = w.nodes.get_mut((old_to - 1) as usize) {
                slot.0 = None;
            }
        }
        if let Some(ino) = w.by_node.remove(from) {
            if let Some(slot) = w.nodes.get_mut((ino - 1) as usize) {
                slot.0 = Some(to.clone());
            }
            w.by_node.insert(to.clone(), ino);
        }
    }

    /// `node` was removed: detach its inode so a new file of the same name gets a new one.
    pub fn remove(&self, node: &Node) {
        let mut w = self.inner.write();
        if let Some(ino) = w.by_node.remove(node) {
            if let Some(slot) = w.nodes.get_mut((ino - 1) as usize) {
                slot.0 = None;
            }
        }
    }

    /// Inodes the kernel holds (looked up and not forgotten), the root included.
    pub fn held(&self) -> Vec<u64> {
        let r = self.inner.read();
        r.nodes
            .iter()
            .enumerate()
            .filter(|(i, (node, lookups))| node.is_some() && (*lookups > 0 || *i == 0))
            .map(|(i, _)| i as u64 + 1)
            .collect()
    }

    /// The `raw/` ranges of session `sid` that have an inode: (inode, range name).
    pub fn raw_of(&self, sid: &str) -> Vec<(u64, String)> {
        let r = self.inner.read();
        r.raw
            .get(sid)
            .into_iter()
            .flatten()
            .filter_map(|&ino| match r.nodes.get((ino - 1) as usize) {
                Some((Some(Node::Raw(s, a, b)), _)) if s == sid => {
                    Some((ino, super::node::raw_name(a, b)))
                }
                _ => None,
            })
            .collect()
    }

    /// Number of inodes ever allocated.
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
            t.held(),
            vec![ROOT_INO, ia],
            "b was listed, never looked up"
        );
        t.forget(ia, 1);
        assert_eq!(t.held(), vec![ROOT_INO]);
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
}
