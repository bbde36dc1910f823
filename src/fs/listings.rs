//! The listings of directory passes read without an open (numbered passes, see
//! [`Listings`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::fs::DirEntry;

/// The listings of passes over directories read without an open. A pass from offset 0 lists
/// the directory afresh and keeps the listing until the pass reaches its end; offsets carry
/// the pass's generation in their high 32 bits, so a pass that goes on while another one
/// started reads its own listing (a few are kept per directory). An offset whose listing is
/// gone continues in a fresh one.
#[derive(Default)]
pub(in crate::fs) struct Listings {
    by_dir: Mutex<HashMap<u64, Vec<Pass>>>,
    next: AtomicU64,
}

/// A pass's generation and listing.
type Pass = (u32, Arc<Vec<DirEntry>>);

/// Passes kept per directory, and directories with passes kept (passes that never ended, of
/// readers that stopped early, are dropped beyond them).
const KEPT_PER_DIR: usize = 4;
const KEPT_DIRS: usize = 4096;

impl Listings {
    /// An offset's generation and the place in its pass's listing.
    pub(in crate::fs) fn split(offset: i64) -> (u32, usize) {
        (
            ((offset >> 32) & 0x7fff_ffff) as u32,
            (offset & 0xffff_ffff) as usize,
        )
    }

    /// The listing of pass `gen` over `dir`, while it is kept.
    pub(in crate::fs) fn get(&self, dir: u64, gen: u32) -> Option<Arc<Vec<DirEntry>>> {
        let all = self.by_dir.lock();
        let passes = all.get(&dir)?;
        passes
            .iter()
            .find(|(g, _)| *g == gen)
            .map(|(_, l)| l.clone())
    }

    /// A new pass over `dir` with `entries` (their offsets then carry its generation): its
    /// generation and listing.
    pub(in crate::fs) fn start(
        &self,
        dir: u64,
        entries: Vec<DirEntry>,
    ) -> (u32, Arc<Vec<DirEntry>>) {
        let g = (self.next.fetch_add(1, Ordering::Relaxed).wrapping_add(1) & 0x7fff_ffff) as u32;
        let list: Arc<Vec<DirEntry>> = Arc::new(
            entries
                .into_iter()
                .map(|mut e| {
                    e.offset |= i64::from(g) << 32;
                    e
                })
                .collect(),
        );
        let mut all = self.by_dir.lock();
        if all.len() >= KEPT_DIRS {
            all.clear();
        }
        let v = all.entry(dir).or_default();
        if v.len() >= KEPT_PER_DIR {
            v.remove(0);
        }
        v.push((g, list.clone()));
        (g, list)
    }

    /// Pass `gen` over `dir` reached its end.
    pub(in crate::fs) fn finished(&self, dir: u64, gen: u32) {
        let mut all = self.by_dir.lock();
        if let Some(v) = all.get_mut(&dir) {
            v.retain(|(g, _)| *g != gen);
            if v.is_empty() {
                all.remove(&dir);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::{Listings, KEPT_PER_DIR};
    use crate::fs::{DirEntry, FileKind};

    fn entries(names: &[&str]) -> Vec<DirEntry> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| DirEntry {
                ino: i as u64 + 1,
                offset: i as i64 + 1,
                kind: FileKind::File,
                name: OsString::from(n),
            })
            .collect()
    }

    #[test]
    fn a_pass_reads_its_own_listing_while_another_starts_and_ends_at_its_end() {
        let l = Listings::default();
        let (g1, first) = l.start(9, entries(&["a", "b"]));
        let (g2, second) = l.start(9, entries(&["a", "b", "c"]));
        assert_ne!(g1, g2);
        // An offset handed out by the first pass finds the first listing.
        let (g, at) = Listings::split(first[0].offset);
        assert_eq!((g, at), (g1, 1));
        assert_eq!(l.get(9, g).expect("kept").len(), 2);
        assert_eq!(Listings::split(second[2].offset), (g2, 3));
        l.finished(9, g1);
        assert!(l.get(9, g1).is_none());
        assert!(l.get(9, g2).is_some());
        l.finished(9, g2);
        assert!(l.by_dir.lock().is_empty());
    }

    #[test]
    fn only_the_last_few_passes_of_a_directory_are_kept() {
        let l = Listings::default();
        let gens: Vec<u32> = (0..KEPT_PER_DIR + 1)
            .map(|_| l.start(1, entries(&["x"])).0)
            .collect();
        assert!(l.get(1, gens[0]).is_none(), "the oldest is dropped");
        assert!(gens[1..].iter().all(|&g| l.get(1, g).is_some()));
    }
}
