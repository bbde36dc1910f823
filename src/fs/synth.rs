//! Synthetic file contents, computed by the noa core from the backing files, cached by an input
//! fingerprint (size, mtime, inode of each input) within a memory budget.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::audit::{self, Audit, PathStyle};
use crate::config::Config;
use crate::format::memory;
use crate::noa::status::{status, StatusInputs};
use crate::noa::view;
use crate::store::root::{self, RootPaths};
use crate::store::session;
use crate::store::transcripts::TranscriptFile;

use super::error::FsError;
use super::node::{Node, SynthKind};

/// Computed bytes of a synthetic file, the newest mtime of its inputs, and its permission bits.
#[derive(Debug, Clone)]
pub struct Content {
    pub data: Arc<Vec<u8>>,
    pub mtime: SystemTime,
    /// Read for the owner (the mounting user); for group and others only when every input grants
    /// it to them (the group: when the input's group is the mounting user's), so a file derived
    /// from a 0600 transcript or memory never shows it to a user that the file itself is hidden
    /// from (`--allow-other`).
    pub perm: u16,
}

struct Cached {
    fp: u64,
    content: Content,
    tick: u64,
}

/// Inputs of a computation, fingerprinted by stat.
struct Inputs {
    hasher: DefaultHasher,
    newest: Option<SystemTime>,
    /// Every input so far is readable by its group, and that group is the mounting user's.
    group_reads: bool,
    /// Every input so far is readable by others.
    others_read: bool,
    gid: u32,
}

impl Default for Inputs {
    fn default() -> Self {
        Inputs {
            hasher: DefaultHasher::default(),
            newest: None,
            group_reads: true,
            others_read: true,
            // SAFETY: getegid cannot fail.
            gid: unsafe { libc::getegid() },
        }
    }
}

impl Inputs {
    fn file(&mut self, p: &Path) {
        match std::fs::metadata(p) {
            Ok(m) => {
                use std::os::unix::fs::MetadataExt;
                (m.len(), m.mtime(), m.mtime_nsec(), m.ino(), m.dev()).hash(&mut self.hasher);
                if let Ok(t) = m.modified() {
                    self.newest = Some(self.newest.map_or(t, |n| n.max(t)));
                }
                self.others_read &= m.mode() & 0o004 != 0;
                self.group_reads &= m.mode() & 0o040 != 0 && m.gid() == self.gid;
            }
            Err(_) => 0u8.hash(&mut self.hasher),
        }
    }

    /// Permission bits of a file computed from these inputs (see [`Content::perm`]).
    fn perm(&self) -> u16 {
        0o400 | if self.group_reads { 0o040 } else { 0 } | if self.others_read { 0o004 } else { 0 }
    }

    /// A directory and, recursively up to `depth`, everything in it.
    fn tree(&mut self, p: &Path, depth: usize) {
        self.file(p);
        if depth == 0 {
            return;
        }
        let Ok(rd) = std::fs::read_dir(p) else { return };
        let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for e in entries {
            e.hash(&mut self.hasher);
            if e.is_dir() {
                self.tree(&e, depth - 1);
            } else {
                self.file(&e);
            }
        }
    }

    fn finish(&self) -> (u64, SystemTime, u16) {
        (
            self.hasher.finish(),
            self.newest.unwrap_or(UNIX_EPOCH),
            self.perm(),
        )
    }
}

/// The computations and their cache.
pub struct Synth {
    paths: RootPaths,
    cfg: Config,
    cache: Mutex<(
        HashMap<Node, Cached>,
        u64,   /*tick*/
        usize, /*bytes*/
    )>,
    /// Parsed transcripts, reloaded incrementally (bounded: see `transcript`).
    transcripts: Mutex<HashMap<String, Arc<Mutex<TranscriptFile>>>>,
}

/// How many parsed transcripts are kept between reads.
const TRANSCRIPTS_KEPT: usize = 256;

impl Synth {
    pub fn new(paths: RootPaths, cfg: Config) -> Synth {
        Synth {
            paths,
            cfg,
            cache: Mutex::new((HashMap::new(), 0, 0)),
            transcripts: Mutex::new(HashMap::new()),
        }
    }

    fn budget(&self) -> usize {
        (self.cfg.cache_mb as usize).saturating_mul(1 << 20)
    }

    /// The fingerprint of a node's inputs, their newest mtime, and the file's permission bits.
    fn fingerprint(&self, node: &Node) -> (u64, SystemTime, u16) {
        let mut inp = Inputs::default();
        let p = &self.paths;
        match node {
            Node::Synth(sid, kind) => {
                inp.file(&p.transcript_path(sid));
                inp.file(&p.state_path(sid));
                match kind {
                    SynthKind::View | SynthKind::ViewMd => {}
                    SynthKind::Status => inp.tree(&p.subagents_dir(sid), 1),
                    SynthKind::Audit => {
                        inp.tree(&p.subagents_dir(sid), 1);
                        inp.tree(&p.archive_root(sid), 2);
                    }
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

    /// The parsed transcript of a session, refreshed (only new bytes are parsed).
    fn transcript(&self, sid: &str) -> Result<Arc<Mutex<TranscriptFile>>, FsError> {
        let known = self.transcripts.lock().get(sid).cloned();
        if let Some(t) = known {
            t.lock().refresh().map_err(FsError::from)?;
            return Ok(t);
        }
        // Parse outside the map's lock: other sessions stay readable meanwhile.
        let t = Arc::new(Mutex::new(
            TranscriptFile::open(self.paths.transcript_path(sid), Some(sid))
                .map_err(FsError::from)?,
        ));
        let mut map = self.transcripts.lock();
        if map.len() >= TRANSCRIPTS_KEPT {
            map.clear();
        }
        Ok(map.entry(sid.to_string()).or_insert(t).clone())
    }

    /// The content of a synthetic node, from the cache when its inputs are unchanged.
    pub fn content(&self, node: &Node) -> Result<Content, FsError> {
        let (fp, mtime, perm) = self.fingerprint(node);
        {
            let mut c = self.cache.lock();
            c.1 += 1;
            let tick = c.1;
            if let Some(hit) = c.0.get_mut(node) {
                if hit.fp == fp {
                    hit.tick = tick;
                    // A chmod does not change the fingerprint: the mode is always fresh.
                    return Ok(Content {
                        perm,
                        ..hit.content.clone()
                    });
                }
            }
        }
        let data = Arc::new(self.compute(node)?);
        let content = Content { data, mtime, perm };
        let mut c = self.cache.lock();
        let len = content.data.len();
        if len <= self.budget() / 2 {
            c.1 += 1;
            let tick = c.1;
            if let Some(old) = c.0.insert(
                node.clone(),
                Cached {
                    fp,
                    content: content.clone(),
                    tick,
                },
            ) {
                c.2 -= old.content.data.len();
            }
            c.2 += len;
            // Evict least recently used entries until within budget.
            while c.2 > self.budget() {
                let Some(victim) =
                    c.0.iter()
                        .min_by_key(|(_, v)| v.tick)
                        .map(|(k, _)| k.clone())
                else {
                    break;
                };
                if let Some(v) = c.0.remove(&victim) {
                    c.2 -= v.content.data.len();
                }
            }
        }
        Ok(content)
    }

    /// Bytes held by the cache.
    pub fn cached_bytes(&self) -> usize {
        self.cache.lock().2
    }

    fn compute(&self, node: &Node) -> Result<Vec<u8>, FsError> {
        let cfg = &self.cfg.noa;
        match node {
            Node::Synth(sid, SynthKind::Audit) => {
                let s = session::load(&self.paths, sid);
                let mut a = Audit::default();
                audit::audit_session(&mut a, &s, cfg, PathStyle::Mount);
                a.sort();
                Ok(a.to_text().into_bytes())
            }
            Node::Synth(sid, kind) => {
                let t = self.transcript(sid)?;
                let tf = t.lock();
                let tr = tf.transcript();
                let st = crate::format::state::load_state(&self.paths.state_path(sid), sid);
                let msgs = session::msgs(tr);
                let v = view::project(&msgs, &st.state, cfg);
                Ok(match kind {
                    SynthKind::View => v.to_jsonl(),
                    SynthKind::ViewMd => v.to_markdown().into_bytes(),
                    _ => {
                        let subs: Vec<(String, crate::format::transcript::Usage)> =
                            crate::store::transcripts::sidechain_paths(
                                &self.paths.transcripts,
                                sid,
                            )
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(aid, p)| {
                                let (t, _) = session::load_transcript(&p, sid);
                                (aid, t.usage)
                            })
                            .collect();
                        let problems = tr.problems();
                        let count = |s: crate::audit::Severity| {
                            problems.iter().filter(|p| p.severity() == s).count()
                        };
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
                        };
                        let mut out =
                            serde_json::to_vec_pretty(&status(&v, cfg, &inp)).unwrap_or_default();
                        out.push(b'\n');
                        out
                    }
                })
            }
            Node::Raw(sid, start, end) => {
                let t = self.transcript(sid)?;
                let tf = t.lock();
                let st = crate::format::state::load_state(&self.paths.state_path(sid), sid);
                let msgs = session::msgs(tf.transcript());
                let refs = crate::noa::refs::assign(&st.state, &msgs);
                view::raw_range(&msgs, &refs, start, end)
                    .map(String::into_bytes)
                    .map_err(|_| FsError::NotFound)
            }
            Node::MemoryIndex => {
                let scan = memory::scan(&self.paths.memory);
                Ok(memory::render_index(&scan.memories).into_bytes())
            }
            Node::RootAudit => {
                let d = root::discover(&self.paths).map_err(FsError::from)?;
                let a = audit::audit_root(&self.paths, &d, cfg, PathStyle::Mount, &mut |_, _| {});
                Ok(a.to_text().into_bytes())
            }
            _ => Err(FsError::Invalid("not a synthetic file".into())),
        }
    }

    /// Whether `start`-`end` names a range of known refs of session `sid`.
    pub fn raw_range_exists(&self, sid: &str, start: &str, end: &str) -> Result<bool, FsError> {
        let t = self.transcript(sid)?;
        let tf = t.lock();
        let st = crate::format::state::load_state(&self.paths.state_path(sid), sid);
        let msgs = session::msgs(tf.transcript());
        let refs = crate::noa::refs::assign(&st.state, &msgs);
        Ok(matches!((refs.msg_of(start), refs.msg_of(end)), (Some(a), Some(b)) if a <= b))
    }

    /// Names listed in `raw/`: one per block range.
    pub fn raw_names(&self, sid: &str) -> Vec<String> {
        let st = crate::format::state::load_state(&self.paths.state_path(sid), sid);
        let mut names: Vec<String> = st
            .state
            .blocks
            .iter()
            .map(|b| format!("{}-{}.md", b.start_ref, b.end_ref))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Time of a `stat` pair.
pub fn systime(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec.clamp(0, 999_999_999) as u32)
    } else {
        UNIX_EPOCH
    }
}
