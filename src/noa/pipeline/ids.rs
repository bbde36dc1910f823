//! A projection's message ids by number, for steps 2 and 3: each core's id as the index of
//! the first core that carries it (the cores of one message share its id), and each block's
//! effective ids likewise. What the prune asks of ids — is it covered, uncover it, where is
//! a block's first message — is then a look at a list instead of a hash of a string. A
//! replay keeps both from one whole run to the next (its requests are over prefixes of one
//! projection, and a block's ids never change): only the cores and blocks added since are
//! looked up.

use super::*;

/// The first index of each id of a projection (or of its first `len` cores, grown since).
#[derive(Default)]
pub struct Ids<'p> {
    of: FastMap<&'p str, u32>,
    /// Per core: the first index of its id.
    first: Vec<u32>,
    /// The projection's address (a replay's prefixes share it).
    base: usize,
}

/// A block's effective ids by their first index (`NONE`: not projected).
struct BlockIds {
    block: String,
    call: String,
    firsts: Vec<u32>,
    /// Whether some id was not found (it may be among cores added later).
    missing: bool,
    /// How many cores the ids were looked up among.
    looked: usize,
}

/// No index: an id the projection does not carry.
pub const NONE: u32 = u32::MAX;

impl<'p> Ids<'p> {
    /// Grown to `proj`: the cores added to the prefix it was made for, or made again for
    /// another projection.
    pub fn cover(&mut self, proj: &'p [Core<'_>]) {
        let base = proj.as_ptr() as usize;
        if base != self.base || proj.len() < self.first.len() {
            self.of.clear();
            self.first.clear();
            self.base = base;
        }
        let from = self.first.len();
        self.of.reserve(proj.len() - from);
        self.first.reserve(proj.len() - from);
        for (i, c) in proj.iter().enumerate().skip(from) {
            let first = *self.of.entry(c.id.as_ref()).or_insert(i as u32);
            self.first.push(first);
        }
    }

    /// The first index of core `i`'s id.
    #[inline]
    pub fn first(&self, i: usize) -> u32 {
        self.first[i]
    }

    /// The first index of `id`, if the projection carries it.
    #[inline]
    pub fn get(&self, id: &str) -> Option<u32> {
        self.of.get(id).copied()
    }

    /// How many cores it covers.
    pub fn len(&self) -> usize {
        self.first.len()
    }
}

/// The state's blocks' effective ids by first index.
#[derive(Default)]
pub struct Blocks {
    of: Vec<BlockIds>,
    /// The projection the indices are of.
    base: usize,
    /// Every effective id of the first `hashed_of` blocks, hashed (made when asked for: a
    /// replay asks whether a new message carries one, whether projected yet or not).
    hashed: FastSet<u64>,
    hashed_of: usize,
}

impl Blocks {
    /// Those of `state`'s blocks over `ids`: looked up again only for a block not met before
    /// and for one with ids not found while the projection has grown.
    pub fn cover(&mut self, state: &State, ids: &Ids<'_>) {
        if ids.base != self.base {
            self.of.clear();
            self.base = ids.base;
        }
        self.follow(state);
        let blocks = state.blocks();
        for (i, b) in blocks.iter().enumerate() {
            if let Some(k) = self.of.get(i) {
                if !k.missing || k.looked == ids.len() {
                    continue;
                }
            }
            let firsts: Vec<u32> = b
                .effective_message_ids
                .iter()
                .map(|id| ids.get(id).unwrap_or(NONE))
                .collect();
            let k = BlockIds {
                block: b.block_id.clone(),
                call: b.compress_call_id.clone(),
                missing: firsts.contains(&NONE),
                firsts,
                looked: ids.len(),
            };
            match self.of.get_mut(i) {
                Some(slot) => *slot = k,
                None => self.of.push(k),
            }
        }
    }

    /// Only the blocks `state` still holds are kept (a replay's blocks are only added to, and
    /// a refused call's taken off again; another state has others).
    fn follow(&mut self, state: &State) {
        let same = |k: &BlockIds, b: &Block| k.block == b.block_id && k.call == b.compress_call_id;
        let kept = self
            .of
            .iter()
            .zip(state.blocks())
            .take_while(|(k, b)| same(k, b))
            .count();
        self.of.truncate(kept);
        if self.hashed_of > kept {
            self.hashed.clear();
            self.hashed_of = 0;
        }
    }

    /// Hashes every effective id of `state`'s blocks (those [`Blocks::cover`] was last
    /// given) into [`Blocks::hashed`]: those of the blocks hashed before are kept while the
    /// state holds them.
    pub fn hash(&mut self, state: &State) {
        let blocks = state.blocks();
        debug_assert_eq!(self.of.len(), blocks.len(), "blocks not covered");
        let new = blocks[self.hashed_of.min(blocks.len())..]
            .iter()
            .map(|b| &b.effective_message_ids);
        self.hashed.reserve(new.clone().map(Vec::len).sum());
        self.hashed.extend(new.flatten().map(|id| id_hash(id)));
        self.hashed_of = blocks.len();
    }

    /// The ids [`Blocks::hash`] hashed.
    pub fn hashed(&self) -> &FastSet<u64> {
        &self.hashed
    }

    /// Block `bi`'s effective ids by first index.
    pub fn firsts(&self, bi: usize) -> &[u32] {
        &self.of[bi].firsts
    }
}

/// An id hashed as [`Blocks::hashed`] holds it.
pub fn id_hash(id: &str) -> u64 {
    use std::hash::BuildHasher;
    crate::fasthash::FastBuild::default().hash_one(id)
}

/// Ids covered, by first index (see [`Ids`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covered {
    by_first: Vec<bool>,
    any: bool,
}

impl Covered {
    /// The effective ids of the live blocks among the `len` cores of `ids`.
    pub fn of(blocks: &Blocks, active: &[bool], len: usize) -> Covered {
        let mut by_first = vec![false; len];
        let mut any = false;
        for (bi, _) in active.iter().enumerate().filter(|(_, &a)| a) {
            for &f in blocks.firsts(bi) {
                if let Some(c) = by_first.get_mut(f as usize) {
                    *c = true;
                    any = true;
                }
            }
        }
        Covered { by_first, any }
    }

    /// Whether the id whose first index is `first` is covered.
    #[inline]
    pub fn contains(&self, first: u32) -> bool {
        self.by_first.get(first as usize).copied().unwrap_or(false)
    }

    #[inline]
    pub fn remove(&mut self, first: u32) {
        if let Some(c) = self.by_first.get_mut(first as usize) {
            *c = false;
        }
    }

    /// Whether any projected id is covered.
    pub fn any(&self) -> bool {
        self.any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::noa::content::Origin;

    fn cores(ids: &[&str]) -> Vec<Core<'static>> {
        ids.iter()
            .map(|id| Core::synthetic(id, "x".into(), Origin::Nudge))
            .collect()
    }

    fn block(id: &str, call: &str, effective: &[&str]) -> Block {
        Block {
            block_id: id.into(),
            compress_call_id: call.into(),
            effective_message_ids: effective.iter().map(|s| s.to_string()).collect(),
            ..Block::default()
        }
    }

    fn state(blocks: Vec<Block>) -> State {
        State {
            blocks: Some(blocks),
            ..State::initial("s")
        }
    }

    #[test]
    fn ids_and_blocks_grow_with_the_projection_and_follow_the_blocks() {
        let proj = cores(&["a", "a", "b", "c", "b", "d"]);
        let mut ids = Ids::default();
        ids.cover(&proj[..3]);
        assert_eq!((ids.len(), ids.get("b"), ids.get("c")), (3, Some(2), None));
        let mut blocks = Blocks::default();
        let s = state(vec![block("b1", "c1", &["c", "a"])]);
        blocks.cover(&s, &ids);
        assert_eq!(blocks.firsts(0), &[NONE, 0]);
        // The id not found is looked up again once the projection has it.
        ids.cover(&proj);
        assert_eq!(ids.first, vec![0, 0, 2, 3, 2, 5]);
        blocks.cover(&s, &ids);
        assert_eq!(blocks.firsts(0), &[3, 0]);
        // A block added; one taken back and another made under its id by another call.
        let s = state(vec![
            block("b1", "c1", &["c", "a"]),
            block("b2", "c2", &["b"]),
        ]);
        blocks.cover(&s, &ids);
        assert_eq!(
            (blocks.firsts(0), blocks.firsts(1)),
            (&[3, 0][..], &[2][..])
        );
        let hashed = |ids: &[&str]| ids.iter().map(|id| id_hash(id)).collect::<FastSet<u64>>();
        blocks.hash(&s);
        assert_eq!(blocks.hashed(), &hashed(&["c", "a", "b"]));
        let s = state(vec![
            block("b1", "c1", &["c", "a"]),
            block("b2", "c3", &["d", "e"]),
        ]);
        blocks.cover(&s, &ids);
        assert_eq!(blocks.firsts(1), &[5, NONE]);
        // The hashed ids follow: those of the block taken back go.
        blocks.hash(&s);
        assert_eq!(blocks.hashed(), &hashed(&["c", "a", "d", "e"]));
        // Covered by first index: the cores of one id together.
        let mut covered = Covered::of(&blocks, &[false, true], proj.len());
        assert!(covered.any());
        let is = |c: &Covered| {
            (0..proj.len())
                .map(|i| c.contains(ids.first(i)))
                .collect::<Vec<_>>()
        };
        assert_eq!(is(&covered), [false, false, false, false, false, true]);
        let covered_all = Covered::of(&blocks, &[true, false], proj.len());
        assert_eq!(is(&covered_all), [true, true, false, true, false, false]);
        covered.remove(ids.first(5));
        assert!(!covered.contains(5));
        // Another projection: numbered again.
        let other = cores(&["d", "c"]);
        ids.cover(&other);
        blocks.cover(&s, &ids);
        assert_eq!((ids.len(), blocks.firsts(0)), (2, &[1, NONE][..]));
    }
}
