//! The contents of computed files, made by the noa core from the backing files, cached by an input
//! fingerprint (size, mtime, inode of each input) within a memory budget.
//!
//! Three caches share the budget (`--cache-mb`): computed contents (their bytes), parsed
//! transcripts (kept for incremental refresh; counted as [`PARSED_PER_BYTE`] times the bytes
//! parsed) and parsed `state.json` files (the same factor of the file size). Parse state is
//! evicted first, least recently used first, then computed contents: a scan of many sessions
//! (`ls -lR`, `grep -r`) keeps what it serves instead of evicting it in a cycle. What does not
//! fit is computed, served and dropped.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::audit::{self, Audit, PathStyle};
use crate::bytes::Bytes;
use crate::config::Config;
use crate::format::memory;
use crate::format::state::{load_state, StateLoad};
use crate::noa::render::{self, StatusInputs};
use crate::noa::session::{self as view, Projection};
use crate::noa::{assemble, protect, refs};
use crate::store::inputs::Inputs;
use crate::store::root::{self, RootPaths};
use crate::store::session;
use crate::store::transcripts::TranscriptFile;

use super::error::FsError;
use super::node::{ComputedKind, Node};

/// Computed bytes of a computed file, the newest mtime of its inputs, and its permission bits.
#[derive(Debug, Clone)]
pub struct Content {
    pub data: Bytes,
    pub mtime: SystemTime,
    /// Read for the owner (the mounting user); for group and others only when every input grants
    /// it to them (the group: when the input's group is the mounting user's), so a file derived
    /// from a 0600 transcript or memory never shows it to a user that the file itself is hidden
    /// from (`--allow-other`).
    pub perm: u16,
    /// The fingerprint of the inputs the bytes were computed from: equal fingerprints, equal
    /// bytes (the kernel's cached size and pages are checked against it).
    pub fp: u64,
}

/// What a cache entry is, for the shared LRU order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Content(Node),
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
type Pick<K, T> = fn(&mut Caches) -> &mut HashMap<K, Kept<T>>;

/// The three caches and their shared accounting.
#[derive(Default)]
struct Caches {
    content: HashMap<Node, Kept<Content>>,
    transcripts: HashMap<String, Kept<Arc<Mutex<TranscriptFile>>>>,
    states: HashMap<String, Kept<Arc<StateLoad>>>,
    /// Computed contents by their last use.
    lru_content: BTreeMap<u64, Key>,
    /// Parsed transcripts and states by their last use (evicted first).
    lru_parsed: BTreeMap<u64, Key>,
    tick: u64,
    /// Bytes counted for all entries.
    bytes: usize,
    /// Bytes counted for computed contents only.
    content_bytes: usize,
}

impl Caches {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The LRU order an entry is in.
    fn lru_of(&mut self, key: &Key) -> &mut BTreeMap<u64, Key> {
        match key {
            Key::Content(_) => &mut self.lru_content,
            Key::Transcript(_) | Key::State(_) => &mut self.lru_parsed,
        }
    }

    /// A new entry, used now.
    fn insert_lru(&mut self, key: Key) -> u64 {
        let t = self.next_tick();
        self.lru_of(&key).insert(t, key);
        t
    }

    /// Mark an entry used now: move it to the end of its LRU order.
    fn touch(&mut self, old_tick: u64, key: Key) -> u64 {
        self.lru_of(&key).remove(&old_tick);
        self.insert_lru(key)
    }

    /// Use a kept value: it when its fingerprint is `fp` (any, for `None`), moved to the end of
    /// its LRU order.
    fn hit<K: std::hash::Hash + Eq, T: Clone>(
        &mut self,
        pick: Pick<K, T>,
        k: &K,
        key: Key,
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
    fn keep<K: std::hash::Hash + Eq, T>(
        &mut self,
        pick: Pick<K, T>,
        k: K,
        key: Key,
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
    fn remove(&mut self, key: &Key) -> usize {
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
            let Some((_, key)) = self
                .lru_parsed
                .pop_first()
                .or_else(|| self.lru_content.pop_first())
            else {
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

/// The computations and their cache.
pub struct Computed {
    paths: RootPaths,
    cfg: Config,
    caches: Mutex<Caches>,
    /// Cache memory was freed since memory was last given back to the system.
    freed: std::sync::atomic::AtomicBool,
}

impl Computed {
    pub fn new(paths: RootPaths, cfg: Config) -> Computed {
        Computed {
            paths,
            cfg,
            caches: Mutex::new(Caches::default()),
            freed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn budget(&self) -> usize {
        (self.cfg.cache_mb as usize).saturating_mul(1 << 20)
    }

    /// Evict until within budget (under the caches' lock).
    fn trim(&self, c: &mut Caches) {
        if c.trim(self.budget()) >= TRIM_AFTER_BYTES {
            self.freed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Give freed heap memory back to the system after large evictions, so that the mount's
    /// resident size follows the budget (glibc keeps freed memory otherwise). Called with no
    /// lock held.
    fn release_memory(&self) {
        if self.freed.swap(false, std::sync::atomic::Ordering::Relaxed) {
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: malloc_trim has no preconditions.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }

    /// The fingerprint of a node's inputs, their newest mtime, and the file's permission bits.
    fn fingerprint(&self, node: &Node) -> (u64, SystemTime, u16) {
        let mut inp = Inputs::default();
        let p = &self.paths;
        match node {
            Node::Computed(sid, kind) => {
                inp.file(&p.transcript_path(sid));
                inp.file(&p.state_path(sid));
                // A fork's view comes from its ancestors' states while it has no blocks.
                for parent in self
                    .cfg
                    .for_session(sid)
                    .parents
                    .iter()
                    .take(render::MAX_INHERIT_DEPTH)
                {
                    if root::valid_session_name(std::ffi::OsStr::new(parent)).is_ok() {
                        inp.file(&p.state_path(parent));
                    }
                }
                // What else the layout says the file is made from.
                let more = kind.inputs();
                if more.subagents {
                    inp.tree(&p.subagents_dir(sid), 1);
                }
                if more.archives {
                    inp.tree(&p.archive_root(sid), 2);
                }
                if more.liveness {
                    let cfg = self.cfg.for_session(sid);
                    crate::store::ctl::live_reason(p, sid, &cfg, chrono::Utc::now())
                        .is_some()
                        .hash(inp.hasher());
                }
            }
            Node::Raw(sid, _, _) => {
                inp.file(&p.transcript_path(sid));
                inp.file(&p.state_path(sid));
            }
            Node::MemoryIndex => inp.tree(&p.memory, 1),
            Node::RootAudit => {
                inp.tree(&p.transcripts, 3);
                inp.tree(&p.archives, 3);
                inp.tree(&p.memory, 1);
            }
            _ => {}
        }
        inp.finish()
    }

    /// The parsed transcript of a session, refreshed (only new bytes are parsed). Kept for the
    /// next read when it fits the budget.
    fn transcript(&self, sid: &str) -> Result<Arc<Mutex<TranscriptFile>>, FsError> {
        let key = || Key::Transcript(sid.to_string());
        let known = self
            .caches
            .lock()
            .hit(|c| &mut c.transcripts, &sid.to_string(), key(), None);
        if let Some(t) = known {
            let len = {
                let mut tf = t.lock();
                tf.refresh().map_err(FsError::from)?;
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
            if c.bytes > self.budget() {
                // The transcript itself is the most recently used: others go first.
                self.trim(&mut c);
            }
            return Ok(t);
        }
        // Parse outside the caches' lock: other sessions stay readable meanwhile. A transcript
        // that is a symlink leading out of its directory is never followed.
        let path = self.paths.transcript_path(sid);
        if crate::store::root::is_escaping_link(
            &self.paths.transcripts,
            path.file_name().unwrap_or_default(),
            false,
        ) {
            return Err(FsError::NotFound);
        }
        let tf = TranscriptFile::open(path, Some(sid)).map_err(FsError::from)?;
        let bytes = parsed_bytes(tf.len());
        let t = Arc::new(Mutex::new(tf));
        let mut c = self.caches.lock();
        if let Some(k) = c.transcripts.get(sid) {
            // Parsed meanwhile by another reader: share theirs.
            return Ok(k.value.clone());
        }
        if bytes > self.budget() {
            self.freed.store(true, std::sync::atomic::Ordering::Relaxed);
            return Ok(t);
        }
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
    fn state(&self, sid: &str) -> Arc<StateLoad> {
        let path = self.paths.state_path(sid);
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
            return st;
        }
        let st = Arc::new(load_state(&path, sid));
        let bytes = parsed_bytes(inp.size);
        let mut c = self.caches.lock();
        c.remove(&key());
        if bytes <= self.budget() {
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

    /// The content of a computed node, from the cache when its inputs are unchanged.
    pub fn content(&self, node: &Node) -> Result<Content, FsError> {
        let (fp, mtime, perm) = self.fingerprint(node);
        let key = || Key::Content(node.clone());
        if let Some(hit) = self
            .caches
            .lock()
            .hit(|c| &mut c.content, node, key(), Some(fp))
        {
            // A chmod does not change the fingerprint: the mode is always fresh.
            return Ok(Content { perm, ..hit });
        }
        let computed = self.compute(node);
        self.release_memory();
        let content = Content {
            data: computed?,
            mtime,
            perm,
            fp,
        };
        let len = content.data.len() as usize;
        let mut c = self.caches.lock();
        c.remove(&key());
        if len <= self.budget() / 2 {
            c.keep(
                |c| &mut c.content,
                node.clone(),
                key(),
                content.clone(),
                fp,
                len,
            );
            c.content_bytes += len;
            self.trim(&mut c);
        }
        drop(c);
        self.release_memory();
        Ok(content)
    }

    /// Bytes held by the cache of computed contents.
    pub fn cached_bytes(&self) -> usize {
        self.caches.lock().content_bytes
    }

    /// Bytes counted against the budget: computed contents, parsed transcripts and states.
    pub fn budget_bytes(&self) -> usize {
        self.caches.lock().bytes
    }

    /// Sessions whose parsed transcript is kept.
    pub fn kept_transcripts(&self) -> usize {
        self.caches.lock().transcripts.len()
    }

    /// The bytes of a computed file (a view's are shared with its memo).
    fn compute(&self, node: &Node) -> Result<Bytes, FsError> {
        match node {
            Node::Computed(sid, ComputedKind::Audit) => {
                let cfg = &self.cfg.for_session(sid);
                let s = session::load(&self.paths, sid);
                let mut a = Audit::default();
                audit::audit_session(&mut a, &s, cfg, PathStyle::Mount);
                a.sort();
                Ok(Bytes::from(a.to_text().into_bytes()))
            }
            Node::Computed(sid, kind) => {
                let cfg = &self.cfg.for_session(sid);
                let st = self.state(sid);
                let (state, inherited) = session::opened_state(&self.paths, sid, &st.state, cfg);
                let t = self.transcript(sid)?;
                let mut tf = t.lock();
                // After appends, ids and lines are computed for the new messages only.
                let mut memo = tf.take_memo::<view::ViewMemo>().unwrap_or_default();
                let tr = tf.transcript();
                let p = Projection::with_memo(session::messages(tr), &mut memo.projection);
                let path = &view::runtime_path;
                let out: Bytes = match kind {
                    ComputedKind::View => view::view_bytes(&p, &state, cfg, path, &mut memo.view),
                    ComputedKind::Materialized => {
                        view::materialized_bytes(&p, &state, cfg, path, &mut memo.materialized)
                    }
                    ComputedKind::ViewMd => {
                        let turn = view::turn(&p, &state, cfg, path);
                        let msgs = assemble::assemble(&turn, &p.msgs, &state, true);
                        render::markdown(&msgs, &turn, &state, cfg, sid)
                            .into_bytes()
                            .into()
                    }
                    _ => {
                        let subs: Vec<(String, crate::format::transcript::Usage)> =
                            session::sidechains(&self.paths, sid)
                                .into_iter()
                                .map(|(aid, _, t)| (aid, t.usage))
                                .collect();
                        let problems = tr.problems();
                        let count = |s: crate::audit::Severity| {
                            problems.iter().filter(|p| p.severity() == s).count()
                        };
                        let turn = view::turn(&p, &state, cfg, path);
                        let inp = StatusInputs {
                            session: sid,
                            usage: &tr.usage,
                            subagents: &subs,
                            problems: (
                                count(crate::audit::Severity::Error),
                                count(crate::audit::Severity::Warn),
                                count(crate::audit::Severity::Info),
                            ),
                            state_error: st.error.as_ref().map(|e| e.to_string()),
                            idle_seconds: crate::store::ctl::idle_seconds(
                                &self.paths,
                                sid,
                                chrono::Utc::now(),
                            ),
                            inherited_from: inherited.as_deref(),
                            settings: cfg.describe(),
                        };
                        let mut out =
                            serde_json::to_vec_pretty(&render::status(&turn, &state, cfg, &inp))
                                .unwrap_or_default();
                        out.push(b'\n');
                        out.into()
                    }
                };
                drop(p);
                // A message read from the unterminated last line may be replaced when the
                // line is finished (or turns out to be no record): ids and lines derived from
                // it are not kept for the next version.
                let tentative = tf.stable_messages() < tf.transcript().messages.len();
                if !tentative {
                    tf.keep_memo(memo);
                }
                Ok(out)
            }
            Node::Raw(sid, start, end) => {
                let (a, b) = raw_refs(start, end).ok_or(FsError::NotFound)?;
                let (p_slots, text) = self.with_slots(sid, |p, slots| {
                    (slots.len(), render::raw_range(p, slots, a, b))
                })?;
                let _ = p_slots;
                text.map(|t| Bytes::from(t.into_bytes()))
                    .map_err(|_| FsError::NotFound)
            }
            Node::MemoryIndex => {
                let scan = memory::scan(&self.paths.memory);
                Ok(Bytes::from(
                    memory::render_index(&scan.memories).into_bytes(),
                ))
            }
            Node::RootAudit => {
                let d = root::discover(&self.paths).map_err(FsError::from)?;
                let a =
                    audit::audit_root(&self.paths, &d, &self.cfg, PathStyle::Mount, &mut |_, _| {});
                Ok(Bytes::from(a.to_text().into_bytes()))
            }
            _ => Err(FsError::Invalid("not a computed file".into())),
        }
    }

    /// Run `f` over a session's projection and the refs its content has (recorded, or as a
    /// view would hand them out).
    fn with_slots<R>(
        &self,
        sid: &str,
        f: impl FnOnce(&Projection<'_>, &[crate::noa::content::Slot]) -> R,
    ) -> Result<R, FsError> {
        let cfg = self.cfg.for_session(sid);
        let st = self.state(sid);
        let (state, _) = session::opened_state(&self.paths, sid, &st.state, &cfg);
        let t = self.transcript(sid)?;
        let tf = t.lock();
        let p = Projection::new(session::messages(tf.transcript()));
        let (slots, _) = refs::assign(&p.cores, &state, |c| protect::is_hard(c, &cfg));
        Ok(f(&p, &slots))
    }

    /// Whether `start`-`end` names a range of known refs of session `sid`.
    pub fn raw_range_exists(&self, sid: &str, start: &str, end: &str) -> Result<bool, FsError> {
        let Some((a, b)) = raw_refs(start, end) else {
            return Ok(false);
        };
        self.with_slots(sid, |_, slots| {
            let at = |n: u32| slots.iter().position(|s| s.number() == Some(n));
            matches!((at(a), at(b)), (Some(x), Some(y)) if x <= y)
        })
    }

    /// Names listed in `raw/`: one per block range.
    pub fn raw_names(&self, sid: &str) -> Vec<String> {
        let cfg = self.cfg.for_session(sid);
        let st = self.state(sid);
        let (state, _) = session::opened_state(&self.paths, sid, &st.state, &cfg);
        let mut names: Vec<String> = state
            .blocks()
            .iter()
            .filter(|b| raw_refs(&b.start_ref, &b.end_ref).is_some())
            .map(|b| super::node::raw_name(&b.start_ref, &b.end_ref))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// The numbers of a raw file's canonical refs.
fn raw_refs(start: &str, end: &str) -> Option<(u32, u32)> {
    let canonical = |r: &str| refs::parse_ref(r).filter(|&n| refs::format_ref(n) == r);
    Some((canonical(start)?, canonical(end)?))
}

/// What a parse of `len` bytes counts against the budget.
fn parsed_bytes(len: u64) -> usize {
    usize::try_from(len)
        .unwrap_or(usize::MAX)
        .saturating_mul(PARSED_PER_BYTE)
}

/// Time of a `stat` pair.
pub fn systime(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec.clamp(0, 999_999_999) as u32)
    } else {
        UNIX_EPOCH
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::{generate, GenOptions};

    /// A generated root of `sessions` sessions, and its session ids.
    fn root(sessions: usize, messages: usize) -> (tempfile::TempDir, RootPaths, Vec<String>) {
        let d = tempfile::tempdir().expect("tempdir");
        let mut opts = GenOptions {
            sessions,
            messages,
            max_result_bytes: 20_000,
            ..GenOptions::default()
        };
        // A small window: the sessions compress, so they have a state.json.
        opts.config.window = 20_000;
        let r = generate(d.path(), &opts, &mut |_, _| {}).expect("gen");
        let paths = RootPaths::from_root(d.path());
        (d, paths, r.clean_sessions)
    }

    fn computed(paths: &RootPaths, cache_mb: u64) -> Computed {
        let cfg = Config {
            cache_mb,
            ..Config::default()
        };
        Computed::new(paths.clone(), cfg)
    }

    fn view(sid: &str) -> Node {
        Node::Computed(sid.to_string(), ComputedKind::View)
    }

    #[test]
    fn parsed_transcripts_are_kept_within_the_budget() {
        let (_d, paths, sids) = root(6, 150);
        let size = |sid: &str| {
            std::fs::metadata(paths.transcript_path(sid))
                .expect("meta")
                .len() as usize
        };
        let largest = sids.iter().map(|s| size(s)).max().expect("sessions");
        // A budget that holds about two parsed transcripts.
        let mb = (2 * largest * PARSED_PER_BYTE).div_ceil(1 << 20) as u64;
        let s = computed(&paths, mb);
        let budget = s.budget();
        for sid in &sids {
            let v = s.content(&view(sid)).expect("view");
            assert!(!v.data.is_empty());
            assert!(
                s.budget_bytes() <= budget,
                "{} counted bytes exceed the budget {budget}",
                s.budget_bytes()
            );
        }
        assert!(s.kept_transcripts() >= 1, "the latest transcript is kept");
        assert!(
            s.kept_transcripts() < sids.len(),
            "older transcripts were evicted"
        );
        let last = sids.last().expect("a session");
        assert!(
            s.caches.lock().transcripts.contains_key(last),
            "the most recently used transcript stays"
        );
    }

    #[test]
    fn a_scan_keeps_what_it_serves_before_parse_state() {
        let (_d, paths, sids) = root(8, 400);
        // The views fit the budget (with a quarter to spare); the parsed transcripts do not,
        // all together.
        let views: usize = sids
            .iter()
            .map(|sid| {
                computed(&paths, 256)
                    .content(&view(sid))
                    .expect("view")
                    .data
                    .len() as usize
            })
            .sum();
        let parsed: usize = sids
            .iter()
            .map(|sid| {
                parsed_bytes(
                    std::fs::metadata(paths.transcript_path(sid))
                        .expect("meta")
                        .len(),
                )
            })
            .sum();
        let mb = (views * 5 / 4).div_ceil(1 << 20) as u64;
        assert!(
            (mb as usize) << 20 < parsed,
            "the parsed transcripts ({parsed} bytes) exceed {mb} MiB"
        );
        let s = computed(&paths, mb);
        let first: Vec<Content> = sids
            .iter()
            .map(|sid| s.content(&view(sid)).expect("view"))
            .collect();
        for (sid, c) in sids.iter().zip(&first) {
            let again = s.content(&view(sid)).expect("view");
            assert!(
                Bytes::ptr_eq(&again.data, &c.data),
                "{sid}: the second pass is served from the cache"
            );
        }
        assert!(s.budget_bytes() <= (mb as usize) << 20);
    }

    #[test]
    fn a_transcript_larger_than_the_budget_is_served_and_dropped() {
        let (_d, paths, sids) = root(1, 1000);
        let sid = &sids[0];
        let len = std::fs::metadata(paths.transcript_path(sid))
            .expect("meta")
            .len() as usize;
        assert!(len * PARSED_PER_BYTE > 1 << 20, "the transcript is large");
        let small = computed(&paths, 1);
        let big = computed(&paths, 1024);
        let a = small.content(&view(sid)).expect("view");
        let b = big.content(&view(sid)).expect("view");
        assert!(a.data == b.data, "the same view either way");
        assert_eq!(small.kept_transcripts(), 0);
        assert!(small.budget_bytes() <= 1 << 20);
        assert_eq!(big.kept_transcripts(), 1);
    }

    #[test]
    fn a_replaced_state_is_parsed_again() {
        let (_d, paths, sids) = root(3, 300);
        let s = computed(&paths, 256);
        let sid = sids
            .iter()
            .find(|sid| paths.state_path(sid).is_file())
            .expect("a session with state.json");
        let before = s.content(&view(sid)).expect("view");
        assert!(s.content(&view(sid)).expect("view").data == before.data);
        // Replaced by rename, the way the store writes it: every summary says something else.
        let bytes = std::fs::read(paths.state_path(sid)).expect("read");
        let mut st = crate::format::state::parse_state(&bytes).expect("state");
        for b in st.blocks.iter_mut().flatten() {
            b.summary.push_str(" (edited)");
        }
        let text = st.to_json();
        let tmp = paths.archive_root(sid).join(".state.json.tmp-test");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, paths.state_path(sid)).expect("rename");
        let after = s.content(&view(sid)).expect("view");
        assert!(after.data != before.data, "the new state is used");
        let fresh = computed(&paths, 256).content(&view(sid)).expect("view");
        assert!(after.data == fresh.data, "the same as a fresh computation");
    }
}
