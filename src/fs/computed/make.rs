//! Making computed files' bytes with the noa core: a session's files from one refresh of its
//! parsed transcript, one projection and one pipeline run (the computed files of the mount's
//! layout, each by its render function, and the `raw/` ranges of its blocks), `MEMORY.md` and
//! the root's `audit.txt` each on their own.

use crate::audit::{self, Audit, PathStyle};
use crate::bytes::Bytes;
use crate::config::ArchivePaths;
use crate::format::memory;
use crate::format::state::Block;
use crate::noa::render;
use crate::noa::views::{self as view, Projection};
use crate::noa::{protect, refs};
use crate::store::root;
use crate::store::session;

use super::super::error::FsError;
use super::super::layout::{ComputedFile, Layout, LayoutError};
use super::super::node::{self, ComputedKind, HistoryFile, Node};
use super::session_files::SessionFiles;
use super::{Computed, ALL_AT_ONCE};

impl Computed {
    /// How a session's summaries name their archive: inside the mount when `in_mount` and the
    /// mount point is known (the archive's path under the mount when it is found under the
    /// session's archive root), else as the runtime does (`archivePath`).
    fn archive_namer<'s>(
        &'s self,
        sid: &'s str,
        in_mount: bool,
    ) -> Box<dyn Fn(&Block) -> String + Sync + 's> {
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

    /// What a session directory shows: the computed files `make_session` makes.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Show `f` in every session directory (see [`Layout::add`]).
    pub fn add_file(&mut self, f: &'static ComputedFile) -> Result<(), LayoutError> {
        self.layout.add(f)
    }

    /// The files of session `sid`, made from one refresh of its transcript and one pipeline
    /// run: all of the layout's when the transcript is at most [`ALL_AT_ONCE`], else `node`
    /// only. What they say of time is as of `now`. A file whose render fails is left out
    /// (it fails when asked for itself).
    pub(super) fn make_session(
        &self,
        sid: &str,
        node: &Node,
        now: chrono::DateTime<chrono::Utc>,
        audit_fp: u64,
    ) -> Result<Vec<(Node, Bytes)>, FsError> {
        // Taken first: bytes made under settings that changed meanwhile are made again.
        let stamp = self.live.stamp(sid);
        let cfg = &self.cfg().for_session(sid);
        let st = self.state(sid);
        let (state, inherited) = session::opened_state(&self.paths, sid, &st.state, cfg);
        let t = self.transcript(sid)?;
        let mut tf = t.lock();
        let all = tf.len() <= ALL_AT_ONCE;
        let file = |k: ComputedKind| Node::Computed(sid.to_string(), k);
        // The files made, in the layout's order; those that load the whole session last.
        let mut kinds: Vec<ComputedKind> = self
            .layout
            .computed_files()
            .filter(|&k| all || file(k) == *node)
            .collect();
        kinds.sort_by_key(|k| k.file().made_last);
        // After appends, ids and lines are made for the new messages only (under the same
        // settings: a change of them makes all again).
        let mut memo = match tf.take_memo::<(u64, view::ViewMemo)>() {
            Some((s, memo)) if s == stamp => memo,
            _ => view::ViewMemo::default(),
        };
        // A large session's lines, kept for the next version and served, are spooled to
        // disk: only what is being made is resident.
        if tf.len() > self.spool_from.load(std::sync::atomic::Ordering::Relaxed) {
            memo.lines.spool_to(&std::env::temp_dir());
        }
        let transcript_exists = tf.exists();
        let tr = tf.transcript();
        // After appends to a session projected before, little is let go (see below).
        let before = memo.projection.messages();
        let p = Projection::with_memo(session::messages(tr), &mut memo.projection);
        let appended = before > 0 && memo.projection.messages() > before;
        let namer = self.archive_namer(sid, cfg.archive_paths == ArchivePaths::Mount);
        let in_mount = self.archive_namer(sid, true);
        let places = self.places(&*in_mount);
        let mut files = SessionFiles {
            computed: self,
            sid,
            cfg,
            st: &st,
            state: &state,
            inherited: inherited.as_deref(),
            transcript: tr,
            transcript_exists,
            p: &p,
            view: view::Files::new(&p, &state, cfg, sid, &*namer),
            lines: &mut memo.lines,
            places: &places,
            sidechains: None,
            now,
            found: None,
        };
        let mut out: Vec<(Node, Bytes)> = Vec::new();
        for kind in kinds {
            match (kind.file().render)(&mut files) {
                Ok(bytes) => out.push((file(kind), bytes)),
                Err(e) if file(kind) == *node => return Err(e),
                Err(e) => tracing::debug!("{sid}/{}: {e}", kind.name()),
            }
        }
        if let Some(found) = files.found.take() {
            self.keep_findings(sid, audit_fp, found);
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
        memo.projection.give_back(p.cores, appended);
        // A message read from the unterminated last line may be replaced when the line is
        // finished (or turns out to be no record): ids and lines derived from it are not
        // kept for the next version.
        let tentative = tf.stable_messages() < tf.transcript().messages.len();
        if !tentative {
            tf.keep_memo((stamp, memo));
        }
        drop(tf);
        // A large session's files are made one at a time (`ls -l` makes each to learn its
        // size): what one computation let go is given back to the system before the next
        // (a few ms), else each stacks its own on what glibc kept of the last (`ls -l` of a
        // tool-heavy 100,000-message session and a read of each file peaked 33 MiB higher).
        // Not after appends (the next read after an append makes a view again at once; the
        // half-second pass gives it back).
        if !all && !appended {
            self.cache.give_back_now();
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
        let cfg = self.cfg().for_session(sid);
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
            HistoryFile::Page => {
                let namer = self.archive_namer(sid, cfg.archive_paths == ArchivePaths::Mount);
                Ok(crate::html::session_page(
                    &self.paths,
                    &self.cfg(),
                    sid,
                    now,
                    &*namer,
                ))
            }
            HistoryFile::PageAt(n) => {
                let namer = self.archive_namer(sid, cfg.archive_paths == ArchivePaths::Mount);
                crate::html::page_at(&self.paths, &self.cfg(), sid, n, now, &*namer).map_err(err)
            }
            HistoryFile::Index => Err(FsError::Invalid("not a session's file".into())),
        }
    }

    /// How many messages session `sid`'s transcript has (the last point of `at/`).
    pub fn message_count(&self, sid: &str) -> Result<usize, FsError> {
        let t = self.transcript(sid)?;
        let tf = t.lock();
        Ok(session::messages(tf.transcript()).len())
    }

    /// The request points of session `sid` (`at/`'s numbered names), where the replay makes
    /// its requests.
    pub fn request_points(&self, sid: &str) -> Result<Vec<usize>, FsError> {
        let t = self.transcript(sid)?;
        let tf = t.lock();
        Ok(session::request_points(tf.transcript()))
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
                // A session whose own audit.txt was made from its inputs as they are now
                // gives its findings as they were found then.
                let a = audit::audit_root_with(
                    &self.paths,
                    &d,
                    &self.cfg(),
                    audit::How::new(PathStyle::Mount),
                    &|sid| self.findings(sid),
                    &mut |_, _| {},
                );
                // Once, not once per session whose findings were kept with it.
                let mut a = a;
                a.findings.retain(|f| f.code != audit::SETTINGS_UNREADABLE);
                if let Some(e) = self.settings_error() {
                    a.settings_unreadable(e.shown_path(), &e.reason);
                    a.sort();
                }
                Ok(Bytes::from(a.to_text().into_bytes()))
            }
            Node::History(None, HistoryFile::TimelineSvg) => {
                let d = root::discover(&self.paths).map_err(FsError::from)?;
                let mut a = Audit::default();
                audit::audit_bounds_of(
                    &mut a,
                    &self.paths,
                    &d.sessions,
                    &self.cfg(),
                    PathStyle::Mount,
                );
                Ok(Bytes::from(
                    crate::timeline::root_svg(
                        &crate::timeline::peaks_by_session(&d.sessions, &a.peaks),
                        self.cfg().noa.pressure_ratio,
                        self.cfg().noa.truncate_ratio,
                    )
                    .into_bytes(),
                ))
            }
            Node::History(None, HistoryFile::Index) => {
                let d = root::discover(&self.paths).map_err(FsError::from)?;
                // Each session's figures as its own files have them (made, or kept, as for a
                // reader of them), and the root's picture likewise.
                let rows: Vec<_> = d
                    .sessions
                    .iter()
                    .map(|sid| {
                        let file = |kind| {
                            self.content(&Node::Computed(sid.clone(), kind))
                                .ok()
                                .and_then(|r| r.data)
                        };
                        let status = file(ComputedKind::STATUS).and_then(|b| {
                            serde_json::from_slice::<serde_json::Value>(&b.to_vec()).ok()
                        });
                        let counts = file(ComputedKind::AUDIT)
                            .and_then(|_| self.findings(sid))
                            .map_or((0, 0, 0), |a| a.counts());
                        let messages = self.message_count(sid).unwrap_or(0);
                        crate::html::index_row(&self.paths, sid, status, counts, messages)
                    })
                    .collect();
                let svg = self
                    .content(&Node::History(None, HistoryFile::TimelineSvg))
                    .ok()
                    .and_then(|r| r.data)
                    .map(|b| String::from_utf8_lossy(&b.to_vec()).into_owned());
                Ok(Bytes::from(
                    crate::noa::html::index_page(&rows, svg.as_deref()).into_bytes(),
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
        let cfg = self.cfg().for_session(sid);
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
        let cfg = self.cfg().for_session(sid);
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
