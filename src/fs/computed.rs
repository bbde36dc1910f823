//! The contents of computed files, made by the noa core from the backing files, cached by an
//! input fingerprint (size, mtime, inode of each input) within the `--cache-mb` budget that
//! they share with the parsed transcripts and states they are made from
//! (`store::cache::Cache`).

use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::audit::{self, Audit, PathStyle};
use crate::bytes::Bytes;
use crate::config::{ArchivePaths, Config};
use crate::format::memory;
use crate::format::state::{Block, StateLoad};
use crate::noa::render::{self, StatusInputs};
use crate::noa::session::{self as view, Projection};
use crate::noa::{assemble, protect, refs};
use crate::store::cache::Cache;
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

/// The computations and their cache.
pub struct Computed {
    paths: RootPaths,
    cfg: Config,
    /// Contents by node, beside the parsed transcripts and states they are made from.
    cache: Cache<Node, Content>,
    /// Where the mount is, for `archive_paths = mount`.
    mountpoint: Option<PathBuf>,
}

impl Computed {
    pub fn new(paths: RootPaths, cfg: Config) -> Computed {
        let budget = (cfg.cache_mb as usize).saturating_mul(1 << 20);
        Computed {
            paths,
            cfg,
            cache: Cache::new(budget),
            mountpoint: None,
        }
    }

    /// Name archives inside the mount at `mnt` for sessions whose `archive_paths` is `mount`.
    pub fn set_mountpoint(&mut self, mnt: &Path) {
        self.mountpoint = Some(mnt.to_path_buf());
    }

    /// How a session's summaries name their archive: inside the mount when `in_mount` and the
    /// mount point is known (the archive's path under the mount when it is found under the
    /// session's archive root), else as the runtime does (`archivePath`).
    fn archive_namer<'s>(
        &'s self,
        sid: &'s str,
        in_mount: bool,
    ) -> Box<dyn Fn(&Block) -> String + 's> {
        let Some(mnt) = self.mountpoint.as_ref().filter(|_| in_mount) else {
            return Box::new(view::runtime_path);
        };
        Box::new(move |b: &Block| {
            // `<archives>/<owner>/tier<N>/<file>` is `sessions/<owner>/tier<N>/<file>` in the
            // mount (an inherited block's owner is the parent session).
            session::locate_archive(&self.paths, sid, b)
                .and_then(|p| {
                    let rel = p.strip_prefix(&self.paths.archives).ok()?.to_path_buf();
                    let owner = rel.components().next()?.as_os_str().to_str()?;
                    let tier = rel.components().nth(1)?.as_os_str().to_str()?;
                    (session::exists(&self.paths, owner) && session::is_tier_dir(tier))
                        .then(|| mnt.join("sessions").join(&rel).display().to_string())
                })
                .unwrap_or_else(|| view::runtime_path(b))
        })
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

    /// The content of a computed node, from the cache when its inputs are unchanged.
    pub fn content(&self, node: &Node) -> Result<Content, FsError> {
        let (fp, mtime, perm) = self.fingerprint(node);
        if let Some(hit) = self.cache.content(node, fp) {
            // The mode is always fresh (a chmod changes the fingerprint too, by the ctime).
            return Ok(Content { perm, ..hit });
        }
        let computed = self.compute(node);
        self.cache.release_memory();
        let content = Content {
            data: computed?,
            mtime,
            perm,
            fp,
        };
        let len = content.data.len() as usize;
        self.cache
            .keep_content(node.clone(), content.clone(), fp, len);
        self.cache.release_memory();
        Ok(content)
    }

    /// Bytes held by the cache of computed contents.
    pub fn cached_bytes(&self) -> usize {
        self.cache.content_bytes()
    }

    /// Bytes counted against the budget: computed contents, parsed transcripts and states.
    pub fn budget_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Parsed transcripts kept.
    pub fn kept_transcripts(&self) -> usize {
        self.cache.kept_transcripts()
    }

    /// The parsed transcript of a session, refreshed.
    fn transcript(&self, sid: &str) -> Result<Arc<Mutex<TranscriptFile>>, FsError> {
        self.cache
            .transcript(&self.paths, sid)
            .map_err(FsError::from)
    }

    /// The parsed `state.json` of a session.
    fn state(&self, sid: &str) -> Arc<StateLoad> {
        self.cache.state(&self.paths, sid)
    }

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
                let namer = self.archive_namer(sid, cfg.archive_paths == ArchivePaths::Mount);
                let path: view::ArchivePath<'_> = &*namer;
                let out: Bytes = match kind {
                    ComputedKind::View => view::view_bytes(&p, &state, cfg, path, &mut memo.view),
                    ComputedKind::Materialized => {
                        view::materialized_bytes(&p, &state, cfg, path, &mut memo.materialized)
                    }
                    ComputedKind::ViewMd => {
                        let turn = view::turn(&p, &state, cfg, path);
                        let msgs = assemble::assemble(&turn, &p.msgs, &state, true);
                        let in_mount = self.archive_namer(sid, true);
                        let places = match &self.mountpoint {
                            Some(mnt) => render::Places::Mount {
                                mnt,
                                archive: &*in_mount,
                            },
                            None => render::Places::Relative,
                        };
                        render::markdown(&msgs, &turn, &state, cfg, sid, &places)
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
    use crate::store::cache::{parsed_bytes, PARSED_PER_BYTE};

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
        let budget = s.cache.budget();
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
            s.cache.keeps_transcript(last),
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
