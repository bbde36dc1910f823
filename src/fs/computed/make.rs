//! Making computed files' bytes with the noa core: a session's files from one refresh of its
//! parsed transcript, one projection and one pipeline run (`view.jsonl`, `view.md`,
//! `materialized.jsonl`, `status.json`, `audit.txt` and the `raw/` ranges of its blocks),
//! `MEMORY.md` and the root's `audit.txt` each on their own.

use crate::audit::{self, Audit, PathStyle};
use crate::bytes::Bytes;
use crate::config::ArchivePaths;
use crate::format::memory;
use crate::format::state::Block;
use crate::noa::render::{self, StatusInputs};
use crate::noa::views::{self as view, Projection};
use crate::noa::{protect, refs};
use crate::store::root;
use crate::store::session::{self, TranscriptOf};

use super::super::error::FsError;
use super::super::node::{self, ComputedKind, HistoryFile, Node};
use super::{Computed, ALL_AT_ONCE};

impl Computed {
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

    /// How `view.md` names places: inside the mount (archives as `in_mount` names them) once
    /// its mount point is known.
    fn places<'s>(&'s self, in_mount: &'s dyn Fn(&Block) -> String) -> render::Places<'s> {
        match &self.mountpoint {
            Some(mnt) => render::Places::Mount {
                mnt,
                archive: in_mount,
            },
            None => render::Places::Relative,
        }
    }

    /// The files of session `sid`, made from one refresh of its transcript and one pipeline
    /// run: all of them when the transcript is at most [`ALL_AT_ONCE`], else `node` only.
    /// `status.json` tells the session's idle time as of `now`.
    pub(super) fn make_session(
        &self,
        sid: &str,
        node: &Node,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<(Node, Bytes)>, FsError> {
        let cfg = &self.cfg.for_session(sid);
        let st = self.state(sid);
        let (state, inherited) = session::opened_state(&self.paths, sid, &st.state, cfg);
        let t = self.transcript(sid)?;
        let mut tf = t.lock();
        let all = tf.len() <= ALL_AT_ONCE;
        let wants = |n: &Node| all || n == node;
        let file = |k: ComputedKind| Node::Computed(sid.to_string(), k);
        // After appends, ids and lines are made for the new messages only.
        let mut memo = tf.take_memo::<view::ViewMemo>().unwrap_or_default();
        let tr = tf.transcript();
        let p = Projection::with_memo(session::messages(tr), &mut memo.projection);
        let namer = self.archive_namer(sid, cfg.archive_paths == ArchivePaths::Mount);
        let path: view::ArchivePath<'_> = &*namer;
        let mut out: Vec<(Node, Bytes)> = Vec::new();

        let in_mount = self.archive_namer(sid, true);
        let places = self.places(&*in_mount);
        let mut files = view::Files::new(&p, &state, cfg, sid, path);
        let wants_any = |ks: &[ComputedKind]| ks.iter().any(|&k| wants(&file(k)));
        let sidechains = if wants_any(&[ComputedKind::Status, ComputedKind::Audit]) {
            session::sidechains(&self.paths, sid)
        } else {
            Vec::new()
        };
        let subagents: Vec<(String, crate::format::transcript::Usage)> = sidechains
            .iter()
            .map(|(aid, _, t)| (aid.clone(), t.usage.clone()))
            .collect();
        let mut sidechains = Some(sidechains);
        for kind in ComputedKind::ALL {
            if !wants(&file(kind)) {
                continue;
            }
            let bytes = match kind {
                ComputedKind::View => files.bytes(view::Form::View, &mut memo.lines),
                ComputedKind::ViewMd => files.bytes(view::Form::Markdown(&places), &mut memo.lines),
                ComputedKind::Materialized => {
                    files.bytes(view::Form::Materialized, &mut memo.lines)
                }
                ComputedKind::Status => {
                    let problems = tr.problems();
                    let count = |s: crate::audit::Severity| {
                        problems.iter().filter(|p| p.severity() == s).count()
                    };
                    let inp = StatusInputs {
                        session: sid,
                        usage: &tr.usage,
                        subagents: &subagents,
                        problems: (
                            count(crate::audit::Severity::Error),
                            count(crate::audit::Severity::Warn),
                            count(crate::audit::Severity::Info),
                        ),
                        state_error: st.error.as_ref().map(|e| e.to_string()),
                        idle_seconds: crate::store::ctl::idle_seconds(&self.paths, sid, now),
                        inherited_from: inherited.as_deref(),
                        settings: cfg.describe(),
                        window_assumed: self.cfg.window_assumed(sid),
                    };
                    let status = render::status(files.turn(), &state, cfg, &inp);
                    let mut b = serde_json::to_vec_pretty(&status).unwrap_or_default();
                    b.push(b'\n');
                    Bytes::from(b)
                }
                ComputedKind::Audit => {
                    files.let_go();
                    let s = session::load_around(
                        &self.paths,
                        sid,
                        TranscriptOf::Borrowed(tr),
                        tf.exists(),
                        sidechains.take().unwrap_or_default(),
                    );
                    let mut a = Audit::default();
                    audit::audit_session_with(
                        &mut a,
                        &s,
                        Some(&p),
                        cfg,
                        PathStyle::Mount,
                        &self.paths,
                    );
                    a.sort();
                    Bytes::from(a.to_text().into_bytes())
                }
            };
            out.push((file(kind), bytes));
        }
        drop(files);
        // Raw ranges: every block's when all are made, else the one asked for.
        let ranges: Vec<(String, String)> = match node {
            Node::Raw(_, s, e) if !all => vec![(s.clone(), e.clone())],
            _ if all => block_ranges(&state),
            _ => Vec::new(),
        };
        let ranges: Vec<(String, String)> = match node {
            Node::Raw(_, s, e) if !ranges.iter().any(|(a, b)| a == s && b == e) => {
                ranges.into_iter().chain([(s.clone(), e.clone())]).collect()
            }
            _ => ranges,
        };
        if !ranges.is_empty() {
            let (slots, _) = refs::assign(&p.cores, &state, |c| protect::is_hard(c, cfg));
            for (s, e) in ranges {
                let Some((a, b)) = raw_refs(&s, &e) else {
                    continue;
                };
                if let Ok(text) = render::raw_range(&p, &slots, a, b) {
                    out.push((
                        Node::Raw(sid.to_string(), s, e),
                        Bytes::from(text.into_bytes()),
                    ));
                }
            }
        }
        drop(p);
        // A message read from the unterminated last line may be replaced when the line is
        // finished (or turns out to be no record): ids and lines derived from it are not
        // kept for the next version.
        let tentative = tf.stable_messages() < tf.transcript().messages.len();
        if !tentative {
            tf.keep_memo(memo);
        }
        Ok(out)
    }

    /// A file of session `sid`'s `.history/`: its history replayed (issue 26).
    pub(super) fn make_history(
        &self,
        sid: &str,
        f: HistoryFile,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Bytes, FsError> {
        use crate::timeline;
        let cfg = self.cfg.for_session(sid);
        let err = |e: crate::store::txn::TxnError| FsError::from(&e);
        match f {
            HistoryFile::Timeline | HistoryFile::TimelineSvg => {
                let tl = timeline::build(&self.paths, sid, &cfg, now).map_err(err)?;
                Ok(Bytes::from(match f {
                    HistoryFile::Timeline => tl.to_jsonl(),
                    _ => tl.svg().into_bytes(),
                }))
            }
            HistoryFile::View(n) | HistoryFile::ViewMd(n) => {
                let namer = self.archive_namer(sid, cfg.archive_paths == ArchivePaths::Mount);
                let in_mount = self.archive_namer(sid, true);
                let places = self.places(&*in_mount);
                let form = match f {
                    HistoryFile::ViewMd(_) => view::Form::Markdown(&places),
                    _ => view::Form::View,
                };
                timeline::view_at(&self.paths, sid, &cfg, n, now, &*namer, form).map_err(err)
            }
        }
    }

    /// How many messages session `sid`'s transcript has (the last point of `at/`).
    pub fn message_count(&self, sid: &str) -> Result<usize, FsError> {
        let t = self.transcript(sid)?;
        let tf = t.lock();
        Ok(session::messages(tf.transcript()).len())
    }

    /// The request points of session `sid` (`at/`'s numbered names): before each assistant
    /// message after the first message, as the replay makes them.
    pub fn request_points(&self, sid: &str) -> Result<Vec<usize>, FsError> {
        let t = self.transcript(sid)?;
        let tf = t.lock();
        Ok(session::messages(tf.transcript())
            .iter()
            .enumerate()
            .filter(|(m, msg)| *m > 0 && msg.role == "assistant")
            .map(|(m, _)| m)
            .collect())
    }

    /// `MEMORY.md` or the root's `audit.txt`.
    pub(super) fn make_one(&self, node: &Node) -> Result<Bytes, FsError> {
        match node {
            Node::MemoryIndex => {
                let scan = memory::scan(&self.paths.memory);
                Ok(Bytes::from(
                    memory::render_index(&scan.memories).into_bytes(),
                ))
            }
            Node::RootAudit => {
                let d = root::discover(&self.paths).map_err(FsError::from)?;
                let a = audit::audit_root(
                    &self.paths,
                    &d,
                    &self.cfg,
                    audit::How::new(PathStyle::Mount),
                    &mut |_, _| {},
                );
                Ok(Bytes::from(a.to_text().into_bytes()))
            }
            Node::History(None, HistoryFile::TimelineSvg) => {
                let d = root::discover(&self.paths).map_err(FsError::from)?;
                let mut a = Audit::default();
                audit::audit_bounds_of(
                    &mut a,
                    &self.paths,
                    &d.sessions,
                    &self.cfg,
                    PathStyle::Mount,
                );
                Ok(Bytes::from(
                    crate::timeline::root_svg(
                        &crate::timeline::peaks_by_session(&d.sessions, &a.peaks),
                        self.cfg.noa.pressure_ratio,
                        self.cfg.noa.truncate_ratio,
                    )
                    .into_bytes(),
                ))
            }
            _ => Err(FsError::Invalid("not a computed file".into())),
        }
    }

    /// Whether `start`-`end` names a range of known refs of session `sid`: a block's range
    /// is (its file is made with the session's, or tells otherwise when made); any other is
    /// checked against the refs the session's content has (recorded, or as a view would
    /// hand them out).
    pub fn raw_range_exists(&self, sid: &str, start: &str, end: &str) -> Result<bool, FsError> {
        let Some((a, b)) = raw_refs(start, end) else {
            return Ok(false);
        };
        if self.raw_names(sid).contains(&node::raw_name(start, end)) {
            return Ok(true);
        }
        let cfg = self.cfg.for_session(sid);
        let st = self.state(sid);
        let (state, _) = session::opened_state(&self.paths, sid, &st.state, &cfg);
        let t = self.transcript(sid)?;
        let tf = t.lock();
        let p = Projection::new(session::messages(tf.transcript()));
        let (slots, _) = refs::assign(&p.cores, &state, |c| protect::is_hard(c, &cfg));
        let at = |n: u32| slots.iter().position(|s| s.number() == Some(n));
        Ok(matches!((at(a), at(b)), (Some(x), Some(y)) if x <= y))
    }

    /// Names listed in `raw/`: one per block range.
    pub fn raw_names(&self, sid: &str) -> Vec<String> {
        let cfg = self.cfg.for_session(sid);
        let st = self.state(sid);
        let (state, _) = session::opened_state(&self.paths, sid, &st.state, &cfg);
        let mut names: Vec<String> = block_ranges(&state)
            .iter()
            .map(|(s, e)| node::raw_name(s, e))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// The ranges of a state's blocks whose refs are canonical.
fn block_ranges(state: &crate::format::state::State) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = state
        .blocks()
        .iter()
        .filter(|b| raw_refs(&b.start_ref, &b.end_ref).is_some())
        .map(|b| (b.start_ref.clone(), b.end_ref.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The numbers of a raw file's canonical refs.
fn raw_refs(start: &str, end: &str) -> Option<(u32, u32)> {
    let canonical = |r: &str| refs::parse_ref(r).filter(|&n| refs::format_ref(n) == r);
    Some((canonical(start)?, canonical(end)?))
}
