//! Parsed transcripts and `state.json` files of a root, kept within a memory budget beside
//! the contents a caller computes from them (a mount's computed files), which share it.
//!
//! Parsed transcripts are kept for incremental refresh and counted as [`PARSED_PER_BYTE`]
//! times the bytes parsed; parsed states the same factor of the file size; contents their
//! bytes. Whatever was used least recently is evicted first, contents and parse state
//! alike: a scan of many sessions (`ls -lR`, `grep -r`) keeps the session it is at, whose
//! files are being served, and lets the earlier ones go (a mount's computed files are read
//! through the kernel's page cache, which holds what was served; a later pass needs their
//! bytes only where the kernel dropped its pages). What does not fit is loaded (or
//! computed), served and dropped.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::inputs::Inputs;
use super::root::RootPaths;
use super::transcripts::TranscriptFile;
use crate::format::state::{load_state, StateLoad};

/// What a cache entry is, for the shared LRU order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key<K> {
    Content(K),
    Transcript(String),
    State(String),
}

/// A kept value and what it counts against the budget.
struct Kept<T> {
    value: T,
    /// The fingerprint of the inputs it was computed from (0 for transcripts, which refresh
    /// themselves).
    fp: u64,
    bytes: usize,
    tick: u64,
}

/// Which map of [`Caches`] a helper works on.
type Pick<K, V, Q, T> = fn(&mut Caches<K, V>) -> &mut HashMap<Q, Kept<T>>;

/// The three caches and their shared accounting.
struct Caches<K, V> {
    content: HashMap<K, Kept<V>>,
    transcripts: HashMap<String, Kept<Arc<Mutex<TranscriptFile>>>>,
    states: HashMap<String, Kept<Arc<StateLoad>>>,
    /// Computed contents by their last use.
    lru_content: BTreeMap<u64, Key<K>>,
    /// Parsed transcripts and states by their last use.
    lru_parsed: BTreeMap<u64, Key<K>>,
    tick: u64,
    /// Bytes counted for all entries.
    bytes: usize,
    /// Bytes counted for computed contents only.
    content_bytes: usize,
}

impl<K, V> Default for Caches<K, V> {
    fn default() -> Self {
        Caches {
            content: HashMap::new(),
            transcripts: HashMap::new(),
            states: HashMap::new(),
            lru_content: BTreeMap::new(),
            lru_parsed: BTreeMap::new(),
            tick: 0,
            bytes: 0,
            content_bytes: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Caches<K, V> {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The LRU order an entry is in.
    fn lru_of(&mut self, key: &Key<K>) -> &mut BTreeMap<u64, Key<K>> {
        match key {
            Key::Content(_) => &mut self.lru_content,
            Key::Transcript(_) | Key::State(_) => &mut self.lru_parsed,
        }
    }

    /// A new entry, used now.
    fn insert_lru(&mut self, key: Key<K>) -> u64 {
        let t = self.next_tick();
        self.lru_of(&key).insert(t, key);
        t
    }

    /// Mark an entry used now: move it to the end of its LRU order.
    fn touch(&mut self, old_tick: u64, key: Key<K>) -> u64 {
        self.lru_of(&key).remove(&old_tick);
        self.insert_lru(key)
    }

    /// Use a kept value: it when its fingerprint is `fp` (any, for `None`), moved to the end of
    /// its LRU order.
    fn hit<Q: Hash + Eq, T: Clone>(
        &mut self,
        pick: Pick<K, V, Q, T>,
        k: &Q,
        key: Key<K>,
        fp: Option<u64>,
    ) -> Option<T> {
        let (value, tick) = pick(self)
            .get(k)
            .filter(|e| fp.is_none_or(|fp| e.fp == fp))
            .map(|e| (e.value.clone(), e.tick))?;
        let new = self.touch(tick, key);
        if let Some(e) = pick(self).get_mut(k) {
            e.tick = new;
        }
        Some(value)
    }

    /// Keep a value (replacing any under the same key), used now.
    fn keep<Q: Hash + Eq, T>(
        &mut self,
        pick: Pick<K, V, Q, T>,
        k: Q,
        key: Key<K>,
        value: T,
        fp: u64,
        bytes: usize,
    ) {
        self.remove(&key);
        let tick = self.insert_lru(key);
        pick(self).insert(
            k,
            Kept {
                value,
                fp,
                bytes,
                tick,
            },
        );
        self.bytes += bytes;
    }

    /// Remove an entry; the bytes it counted.
    fn remove(&mut self, key: &Key<K>) -> usize {
        let (tick, bytes) = match key {
            Key::Content(n) => match self.content.remove(n) {
                Some(k) => {
                    self.content_bytes -= k.bytes;
                    (k.tick, k.bytes)
                }
                None => return 0,
            },
            Key::Transcript(s) => match self.transcripts.remove(s) {
                Some(k) => (k.tick, k.bytes),
                None => return 0,
            },
            Key::State(s) => match self.states.remove(s) {
                Some(k) => (k.tick, k.bytes),
                None => return 0,
            },
        };
        self.lru_of(key).remove(&tick);
        self.bytes -= bytes;
        bytes
    }

    /// Evict least recently used entries until within `budget`; the bytes freed.
    fn trim(&mut self, budget: usize) -> usize {
        let mut freed = 0;
        while self.bytes > budget {
            // The least recently used of either order (ticks are shared).
            let content_older = match (
                self.lru_content.first_key_value(),
                self.lru_parsed.first_key_value(),
            ) {
                (Some((c, _)), Some((p, _))) => c < p,
                (c, _) => c.is_some(),
            };
            let oldest = if content_older {
                self.lru_content.pop_first()
            } else {
                self.lru_parsed.pop_first()
            };
            let Some((_, key)) = oldest else {
                break;
            };
            freed += self.remove(&key);
        }
        freed
    }
}

/// Parsed transcripts and states take about this many bytes of memory per byte of file
/// (measured: a parsed transcript about 1.4×, with its view memo about 1.5×; a parsed
/// `state.json` about 2×).
pub const PARSED_PER_BYTE: usize = 2;

/// Freed cache memory from which it is worth giving memory back to the system.
const TRIM_AFTER_BYTES: usize = 16 << 20;

/// How many measurements of the memory outside the cache its estimate is the least of (a
/// computation in flight, whose memory is gone a moment later, is not taken for overhead).
const OVERHEAD_SAMPLES: usize = 16;

/// The cache of a root's parsed files and of contents keyed by `K`.
///
/// Once [`Cache::bound_resident`] is called (a mount: the process is the cache's), the budget
/// bounds the process's resident memory, not only what the cache counts: what the process
/// holds besides (inode tables, the allocator's own, structures the count misses) is measured
/// after each computation, and the cache keeps that much less.
pub struct Cache<K, V> {
    budget: usize,
    caches: Mutex<Caches<K, V>>,
    /// Cache memory was freed since memory was last given back to the system.
    freed: AtomicBool,
    /// Resident memory the cache does not count, as last estimated (see [`Overhead`]).
    overhead: AtomicUsize,
    samples: Mutex<Overhead>,
    /// The budget bounds the process's resident memory.
    resident: AtomicBool,
    /// Files this small are parsed again rather than kept, unless written this lately (see
    /// [`Cache::keep_quick_parses_while_live`]).
    quick: std::sync::OnceLock<(u64, std::time::Duration)>,
    /// The parses kept only briefly (not worth keeping, see [`Cache::let_go_brief`]), by
    /// session, with their last use: transcripts, then states.
    brief: Mutex<Brief>,
    /// Transcripts this long move their records' cold bytes to the temporary directory when
    /// parsed (see [`Cache::store_cold_from`]); never by default.
    cold_from: std::sync::atomic::AtomicU64,
}

/// Parses kept for a moment only, by session id, and when each was last used.
#[derive(Default)]
struct Brief {
    transcripts: HashMap<String, std::time::Instant>,
    states: HashMap<String, std::time::Instant>,
    /// The last parse larger than the budget, held outside it while in use: a reader of its
    /// session's files (`grep -r`, `cat *`) asks for them one after another, each made
    /// from the same parse (one parse of a 100,000-message session takes seconds).
    over: Option<(String, Arc<Mutex<TranscriptFile>>, std::time::Instant)>,
}

/// The last measurements of the resident memory the cache does not count.
#[derive(Default)]
struct Overhead {
    seen: [usize; OVERHEAD_SAMPLES],
    next: usize,
    filled: usize,
}

impl Overhead {
    /// Record one measurement; the estimate is the least of the recent ones.
    fn add(&mut self, bytes: usize) -> usize {
        self.seen[self.next] = bytes;
        self.next = (self.next + 1) % OVERHEAD_SAMPLES;
        self.filled = (self.filled + 1).min(OVERHEAD_SAMPLES);
        self.seen[..self.filled].iter().copied().min().unwrap_or(0)
    }
}

/// The process's resident memory in bytes, when the system tells it.
fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages.saturating_mul(usize::try_from(page).ok().filter(|&p| p > 0)?))
}

impl<K: Hash + Eq + Clone, V: Clone> Cache<K, V> {
    /// An empty cache of `budget` bytes.
    pub fn new(budget: usize) -> Cache<K, V> {
        Cache {
            budget,
            caches: Mutex::new(Caches::default()),
            freed: AtomicBool::new(false),
            overhead: AtomicUsize::new(0),
            samples: Mutex::new(Overhead::default()),
            resident: AtomicBool::new(false),
            quick: std::sync::OnceLock::new(),
            brief: Mutex::new(Brief::default()),
            cold_from: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }

    /// Transcripts of at least `bytes` parsed from now on keep their records' cold bytes
    /// (thinking signatures, unknown record fields) in an unlinked file in the temporary
    /// directory, not in memory (see [`crate::format::cold`]).
    pub fn store_cold_from(&self, bytes: u64) {
        self.cold_from.store(bytes, Ordering::Relaxed);
    }

    /// Keep the parse of a transcript or `state.json` of at most `bytes` only while the
    /// session's transcript was written within `live` (a session the runtime is writing: the
    /// view after an append parses the new lines only). Others are kept only while they are
    /// in use (a listing and the computation that follows it parse a session's files several
    /// times within a moment), then let go ([`Cache::let_go_brief`]) and parsed again when
    /// asked for (a few milliseconds each): a `stat`, `ls -l`, `du` or `grep -r` of a
    /// thousand sessions at rest leaves no parse state behind, and the budget goes to what is
    /// costly to make again.
    pub fn keep_quick_parses_while_live(&self, bytes: u64, live: std::time::Duration) {
        let _ = self.quick.set((bytes, live));
    }

    /// Let go of the parses kept briefly that were not used for `idle`; the bytes they
    /// counted.
    pub fn let_go_brief(&self, idle: std::time::Duration) -> usize {
        let now = std::time::Instant::now();
        let (transcripts, states, over) = {
            let mut b = self.brief.lock();
            let old = |m: &mut HashMap<String, std::time::Instant>| {
                let mut gone = Vec::new();
                m.retain(|sid, at| {
                    let keep = now.duration_since(*at) < idle;
                    if !keep {
                        gone.push(sid.clone());
                    }
                    keep
                });
                gone
            };
            let over = b
                .over
                .take_if(|(_, _, at)| now.duration_since(*at) >= idle)
                .map_or(0, |(_, t, _)| parsed_bytes(t.lock().len()));
            (old(&mut b.transcripts), old(&mut b.states), over)
        };
        let mut c = self.caches.lock();
        let mut freed = over;
        for sid in transcripts {
            freed += c.remove(&Key::Transcript(sid));
        }
        for sid in states {
            freed += c.remove(&Key::State(sid));
        }
        freed
    }

    /// Whether the parse of a file of session `sid`, `len` bytes long, is worth keeping: it
    /// is large, or the session looks live (its transcript, `path`, was written lately).
    fn worth_keeping(&self, path: &std::path::Path, len: u64) -> bool {
        let Some(&(quick, live)) = self.quick.get() else {
            return true;
        };
        len > quick
            || std::fs::metadata(path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().map_or(true, |e| e < live))
    }

    /// Let `budget` bound the process's resident memory: the process serves this cache
    /// alone (a mount, not a test or a command that computes and exits).
    pub fn bound_resident(&mut self, budget: usize) {
        self.budget = budget;
        self.resident.store(true, Ordering::Relaxed);
    }

    /// What the cache may count: the budget less the memory the process holds besides,
    /// never less than half the budget.
    fn limit(&self) -> usize {
        let other = self.overhead.load(Ordering::Relaxed).min(self.budget / 2);
        self.budget - other
    }

    /// The budget, in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Evict until within budget (under the caches' lock).
    fn trim(&self, c: &mut Caches<K, V>) {
        if c.trim(self.limit()) >= TRIM_AFTER_BYTES {
            self.freed.store(true, Ordering::Relaxed);
        }
    }

    /// Give freed heap memory back to the system after large evictions, so that the mount's
    /// resident size follows the budget (glibc keeps freed memory otherwise); then, when the
    /// budget bounds the process, measure what it holds besides the cache and keep the
    /// cache within what is left of the budget. Called with no lock held, after each
    /// computation.
    pub fn release_memory(&self) {
        self.give_back();
        if !self.resident.load(Ordering::Relaxed) {
            return;
        }
        if let Some(rss) = resident_bytes() {
            self.settle(rss);
        }
    }

    /// Take `rss`, the process's resident bytes just measured, into the estimate of the
    /// memory outside the cache, and evict what no longer fits beside it.
    fn settle(&self, rss: usize) {
        let counted = self.caches.lock().bytes;
        let other = self.samples.lock().add(rss.saturating_sub(counted));
        self.overhead.store(other, Ordering::Relaxed);
        let mut c = self.caches.lock();
        if c.bytes > self.limit() {
            self.trim(&mut c);
            drop(c);
            self.give_back();
        }
    }

    /// Give the heap's free memory back to the system now: memory the cache does not count
    /// was let go (parse state not kept, bytes held a moment), which glibc would keep
    /// otherwise.
    pub fn give_back_now(&self) {
        self.freed.store(true, Ordering::Relaxed);
        self.give_back();
    }

    /// `malloc_trim` when cache memory was freed since the last time.
    fn give_back(&self) {
        if self.freed.swap(false, Ordering::Relaxed) {
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: malloc_trim has no preconditions.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }

    /// The parsed transcript of a session, refreshed (only new bytes are parsed). Kept for the
    /// next read when it fits the budget.
    pub fn transcript(
        &self,
        paths: &RootPaths,
        sid: &str,
    ) -> io::Result<Arc<Mutex<TranscriptFile>>> {
        let key = || Key::Transcript(sid.to_string());
        let known = self
            .caches
            .lock()
            .hit(|c| &mut c.transcripts, &sid.to_string(), key(), None);
        if let Some(t) = known {
            if let Some(at) = self.brief.lock().transcripts.get_mut(sid) {
                *at = std::time::Instant::now();
            }
            let len = {
                let mut tf = t.lock();
                tf.refresh()?;
                tf.len()
            };
            let bytes = parsed_bytes(len);
            let mut c = self.caches.lock();
            let mut grown = 0;
            if let Some(k) = c.transcripts.get_mut(sid) {
                if Arc::ptr_eq(&k.value, &t) {
                    grown = bytes as isize - k.bytes as isize;
                    k.bytes = bytes;
                }
            }
            c.bytes = c.bytes.saturating_add_signed(grown);
            if c.bytes > self.limit() {
                // The transcript itself is the most recently used: others go first.
                self.trim(&mut c);
            }
            return Ok(t);
        }
        let over = {
            let mut b = self.brief.lock();
            b.over
                .as_mut()
                .filter(|(s, _, _)| s == sid)
                .map(|(_, t, at)| {
                    *at = std::time::Instant::now();
                    t.clone()
                })
        };
        if let Some(t) = over {
            t.lock().refresh()?;
            return Ok(t);
        }
        // Parse outside the caches' lock: other sessions stay readable meanwhile. A transcript
        // that is a symlink leading out of its directory is never followed.
        let path = paths.transcript_path(sid);
        if super::root::is_escaping_link(
            &paths.transcripts,
            path.file_name().unwrap_or_default(),
            false,
        ) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let cold = match self.cold_from.load(Ordering::Relaxed) {
            u64::MAX => None,
            from => Some((std::env::temp_dir(), from)),
        };
        let tf = TranscriptFile::open_storing_cold(path.clone(), Some(sid), cold)?;
        let bytes = parsed_bytes(tf.len());
        let keep = self.worth_keeping(&path, tf.len());
        let t = Arc::new(Mutex::new(tf));
        let mut c = self.caches.lock();
        if let Some(k) = c.transcripts.get(sid) {
            // Parsed meanwhile by another reader: share theirs.
            return Ok(k.value.clone());
        }
        if bytes > self.budget() {
            self.freed.store(true, Ordering::Relaxed);
            if self.quick.get().is_some() {
                self.brief.lock().over =
                    Some((sid.to_string(), t.clone(), std::time::Instant::now()));
            }
            return Ok(t);
        }
        // A parse kept for long is never let go as a brief one made before it.
        let mut brief = self.brief.lock();
        if keep {
            brief.transcripts.remove(sid);
        } else {
            (brief.transcripts).insert(sid.to_string(), std::time::Instant::now());
        }
        drop(brief);
        c.keep(
            |c| &mut c.transcripts,
            sid.to_string(),
            key(),
            t.clone(),
            0,
            bytes,
        );
        self.trim(&mut c);
        Ok(t)
    }

    /// The parsed `state.json` of a session, from the cache while the file is unchanged.
    pub fn state(&self, paths: &RootPaths, sid: &str) -> Arc<StateLoad> {
        let path = paths.state_path(sid);
        // Fingerprint before reading: a change in between makes the next call read again.
        let mut inp = Inputs::default();
        inp.file(&path);
        let (fp, _, _) = inp.finish();
        let key = || Key::State(sid.to_string());
        if let Some(st) =
            self.caches
                .lock()
                .hit(|c| &mut c.states, &sid.to_string(), key(), Some(fp))
        {
            if let Some(at) = self.brief.lock().states.get_mut(sid) {
                *at = std::time::Instant::now();
            }
            return st;
        }
        let st = Arc::new(load_state(&path, sid));
        let bytes = parsed_bytes(inp.size);
        let keep = self.worth_keeping(&paths.transcript_path(sid), inp.size);
        let mut c = self.caches.lock();
        c.remove(&key());
        if bytes <= self.budget() {
            let mut brief = self.brief.lock();
            if keep {
                brief.states.remove(sid);
            } else {
                (brief.states).insert(sid.to_string(), std::time::Instant::now());
            }
            drop(brief);
            c.keep(
                |c| &mut c.states,
                sid.to_string(),
                key(),
                st.clone(),
                fp,
                bytes,
            );
            self.trim(&mut c);
        }
        st
    }

    /// The content kept under `key` when it was computed from inputs of fingerprint `fp`.
    pub fn content(&self, key: &K, fp: u64) -> Option<V> {
        self.caches
            .lock()
            .hit(|c| &mut c.content, key, Key::Content(key.clone()), Some(fp))
    }

    /// Keep `value` (`bytes` long, computed from inputs of fingerprint `fp`) under `key`,
    /// when it takes at most half the budget; any older content there goes.
    pub fn keep_content(&self, key: K, value: V, fp: u64, bytes: usize) {
        let mut c = self.caches.lock();
        c.remove(&Key::Content(key.clone()));
        if bytes <= self.budget() / 2 {
            c.keep(
                |c| &mut c.content,
                key.clone(),
                Key::Content(key),
                value,
                fp,
                bytes,
            );
            c.content_bytes += bytes;
            self.trim(&mut c);
        }
    }

    /// Bytes held by kept contents.
    pub fn content_bytes(&self) -> usize {
        self.caches.lock().content_bytes
    }

    /// Bytes counted against the budget: contents, parsed transcripts and states.
    pub fn bytes(&self) -> usize {
        self.caches.lock().bytes
    }

    /// Parsed transcripts kept.
    pub fn kept_transcripts(&self) -> usize {
        self.caches.lock().transcripts.len()
    }

    /// Whether the parsed transcript of `sid` is kept.
    pub fn keeps_transcript(&self, sid: &str) -> bool {
        self.caches.lock().transcripts.contains_key(sid)
    }
}

/// What a parse of `len` bytes counts against the budget.
pub fn parsed_bytes(len: u64) -> usize {
    usize::try_from(len)
        .unwrap_or(usize::MAX)
        .saturating_mul(PARSED_PER_BYTE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache of a 1,000-byte budget holding four 200-byte contents.
    fn four_kept() -> Cache<u32, u32> {
        let cache = Cache::new(1000);
        for k in 0..4 {
            cache.keep_content(k, k, 7, 200);
        }
        assert_eq!(cache.bytes(), 800);
        cache
    }

    #[test]
    fn memory_held_outside_the_cache_leaves_it_that_much_less() {
        let cache = four_kept();
        // The process holds 400 bytes besides: 600 are left, the least recent content goes.
        cache.settle(800 + 400);
        assert_eq!(cache.bytes(), 600);
        assert_eq!(
            cache.content(&0, 7),
            None,
            "the least recently used went first"
        );
        assert_eq!(cache.content(&3, 7), Some(3));
        // A new content is kept within what is left.
        cache.keep_content(9, 9, 7, 200);
        assert!(cache.bytes() <= 600, "{} bytes kept", cache.bytes());
    }

    #[test]
    fn the_cache_keeps_half_its_budget_whatever_else_the_process_holds() {
        let cache = four_kept();
        cache.settle(800 + 10_000);
        assert_eq!(cache.bytes(), 400);
    }

    #[test]
    fn a_passing_peak_is_not_taken_for_memory_held_outside() {
        let cache = four_kept();
        cache.settle(800 + 100);
        // A computation in flight for a moment: the estimate stays the least seen lately.
        cache.settle(800 + 900);
        assert_eq!(cache.bytes(), 800, "nothing evicted for a peak");
        // Held for as long as the samples remember, it counts.
        for _ in 0..OVERHEAD_SAMPLES {
            cache.settle(cache.bytes() + 300);
        }
        assert_eq!(cache.bytes(), 600);
    }

    #[test]
    fn resident_size_is_read() {
        let rss = resident_bytes().expect("/proc/self/statm");
        assert!(rss > 1 << 20, "{rss} bytes resident");
    }

    #[test]
    fn a_parse_larger_than_the_budget_serves_the_files_asked_for_one_after_another() {
        let d = tempfile::tempdir().expect("tempdir");
        let opts = crate::gen::GenOptions {
            sessions: 1,
            messages: 400,
            ..crate::gen::GenOptions::default()
        };
        let r = crate::gen::generate(d.path(), &opts, &mut |_, _| {}).expect("gen");
        let sid = &r.clean_sessions[0];
        let paths = RootPaths::from_root(d.path());
        // A budget of one byte: no parse fits it.
        let mut c: Cache<u32, u32> = Cache::new(1);
        c.bound_resident(1);
        c.keep_quick_parses_while_live(1, std::time::Duration::ZERO);
        let first = c.transcript(&paths, sid).expect("parse");
        let second = c.transcript(&paths, sid).expect("again");
        assert!(
            Arc::ptr_eq(&first, &second),
            "the second file uses the same parse"
        );
        assert_eq!(c.bytes(), 0, "held outside the budget");
        assert!(
            c.let_go_brief(std::time::Duration::from_secs(60)) == 0,
            "in use: kept"
        );
        assert!(
            c.let_go_brief(std::time::Duration::ZERO) > 0,
            "idle: let go"
        );
        let third = c.transcript(&paths, sid).expect("parsed again");
        assert!(!Arc::ptr_eq(&first, &third));
    }
}
