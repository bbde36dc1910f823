//! `rebuild`: a session's state made again from its transcript's Compress calls and the
//! journal, under the session lock.

use super::*;

/// Rebuild state from history (SPEC 4.8), durably.
pub fn rebuild(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    now: DateTime<Utc>,
) -> Result<Outcome, TxnError> {
    let _lock = take_lock(paths, sid)?;
    let notes = recover(paths, sid, cfg, now)?;
    let t = command_transcript(paths, sid)?;
    let root = paths.archive_root(sid);
    let root_str = absolute(&root);
    let p = Projection::new(session::messages(&t));
    let batches = journal_batches(paths, sid, &p, &t)?;
    let place = placement(&root_str, sid, now);
    let rep = rebuild::Replay::new(&p, cfg, &place, &batches, &noa_session::runtime_path).rebuild();
    let mut state = rep.state;

    // Carry over what normafs does not interpret from a parsable old state, and the creation
    // time of a block the old state holds with the same id and call.
    let spath = paths.state_path(sid);
    let old_bytes = crate::format::read_no_follow(&spath).ok();
    let old = old_bytes.as_deref().map(parse_state);
    let stamp = file_stamp(now);
    let mut kept_state = None;
    match &old {
        Some(Ok(o)) => {
            state.extra = o.extra.clone();
            state.derived_from = o.derived_from.clone();
            if let Some(blocks) = state.blocks.as_mut() {
                for b in blocks.iter_mut() {
                    if let Some(ob) = o.blocks().iter().find(|ob| {
                        ob.block_id == b.block_id && ob.compress_call_id == b.compress_call_id
                    }) {
                        b.extra = ob.extra.clone();
                        if ob.created_at != 0 {
                            b.created_at = ob.created_at;
                        }
                    }
                }
            }
            let reproduced: HashSet<(&str, &str)> = state
                .blocks()
                .iter()
                .map(|b| (b.block_id.as_str(), b.compress_call_id.as_str()))
                .collect();
            let lost = o.blocks().iter().any(|ob| {
                !reproduced.contains(&(ob.block_id.as_str(), ob.compress_call_id.as_str()))
            });
            if lost {
                kept_state = Some(spath.with_file_name(format!("state.json.replaced-{stamp}")));
            }
        }
        Some(Err(_)) => {
            kept_state = Some(spath.with_file_name(format!("state.json.replaced-{stamp}")))
        }
        None => {}
    }

    // Archives: adopt matching ones, rewrite others keeping the old file beside.
    let (mut adopted, mut written, mut replaced) = (Vec::new(), Vec::new(), Vec::new());
    for a in &rep.archives {
        let Some(b) = state.blocks().iter().find(|b| b.block_id == a.block_id) else {
            continue;
        };
        match place_archive(&root, b, &archive_text(a), &stamp)? {
            ArchivePlacement::Adopted => adopted.push(b.archive_rel.clone()),
            ArchivePlacement::Written => written.push(b.archive_rel.clone()),
            ArchivePlacement::Replaced(k) => replaced.push(json!({"archive": b.archive_rel, "kept": k.strip_prefix(&root).unwrap_or(&k).to_string_lossy()})),
        }
        failpoint::hit("rebuild.after-archive").map_err(|e| io_err("rebuild", &root, e))?;
    }
    if let Some(k) = &kept_state {
        if let Some(bytes) = &old_bytes {
            durable::create_dir_all_durable(&root)
                .map_err(|e| io_err("cannot create", &root, e))?;
            durable::create_new_durable(k, bytes).map_err(|e| io_err("cannot keep", k, e))?;
            failpoint::hit("rebuild.after-keep-state").map_err(|e| io_err("cannot keep", k, e))?;
        }
    }
    failpoint::hit("rebuild.before-state").map_err(|e| io_err("rebuild", &spath, e))?;
    durable::create_dir_all_durable(&root).map_err(|e| io_err("cannot create", &root, e))?;
    durable::atomic_replace(&spath, state.to_json().as_bytes())
        .map_err(|e| io_err("cannot write", &spath, e))?;
    failpoint::hit("rebuild.after-state").map_err(|e| io_err("rebuild", &spath, e))?;

    let message = format!(
        "rebuilt {} block(s) from {} call(s); {} archive(s) adopted, {} written, {} replaced{}",
        state.blocks().len(),
        rep.replayed,
        adopted.len(),
        written.len(),
        replaced.len(),
        if rep.skipped.is_empty() {
            String::new()
        } else {
            format!("; {} call(s) skipped", rep.skipped.len())
        }
    );
    Ok(Outcome {
        message,
        result: json!({
            "blocks": state.blocks().len(),
            "replayed": rep.replayed,
            "adopted": adopted,
            "written": written,
            "replaced": replaced,
            "skipped": rep.skipped,
            "keptState": kept_state.map(|k| k.to_string_lossy().into_owned()),
            "recovery": notes,
        }),
    })
}

/// The state the runtime had when it built the request after the first `n` messages of the
/// transcript (issue 26): the rebuild replay stopped there — the transcript's Compress calls,
/// the journal's batches and the requests before it — over which the view of those `n`
/// messages is the one the runtime sent. Archive paths are where the session's state names
/// its archives (the runtime's), else the archive root as normafs sees it. Reads only; no
/// lock is taken.
pub fn state_at(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    n: usize,
    now: DateTime<Utc>,
) -> Result<State, TxnError> {
    let mut states = states_at(paths, sid, cfg, &[n], now)?;
    Ok(states.pop().unwrap_or_else(|| State::initial(sid)))
}

/// [`state_at`] for each of `points`, from one replay.
pub fn states_at(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    points: &[usize],
    now: DateTime<Utc>,
) -> Result<Vec<State>, TxnError> {
    let files = SessionFiles::read(paths, sid)?;
    // The states only: no request's nudge is decided.
    let rec = files.recorded();
    Ok(history_of(paths, sid, cfg, points, now, rec, rebuild::Asked::states)?.states)
}

/// Session `sid`'s history replayed up to the largest of `points` (none: up to the end; see
/// [`state_at`]): the states there, and what every request before it showed and every
/// replayed call made; with the transcript it was read from.
pub fn history(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    points: &[usize],
    now: DateTime<Utc>,
) -> Result<(rebuild::History, Transcript), TxnError> {
    let files = SessionFiles::read(paths, sid)?;
    let asked = rebuild::Asked::requests;
    let h = history_of(paths, sid, cfg, points, now, files.recorded(), asked)?;
    Ok((h, files.transcript))
}

/// A session's files a replay reads: its transcript, journal and `state.json`.
pub struct SessionFiles {
    pub transcript: Transcript,
    pub journal: journal::JournalRead,
    /// Its blocks and the rest but the ref maps and token snapshot (see
    /// [`crate::format::state::parse_state_blocks`]).
    pub state: State,
}

impl SessionFiles {
    /// Read them (an unreadable transcript or journal is an error; a state that is not,
    /// the initial one, as the audit reports it).
    pub fn read(paths: &RootPaths, sid: &str) -> Result<SessionFiles, TxnError> {
        let transcript = command_transcript(paths, sid)?;
        let jpath = paths.journal_path(sid);
        let journal = journal::read(&jpath).map_err(|e| io_err("cannot read", &jpath, e))?;
        let state = crate::format::state::load_state_blocks(&paths.state_path(sid), sid).state;
        Ok(SessionFiles {
            transcript,
            journal,
            state,
        })
    }

    /// [`SessionFiles::read`] for what the first `messages` messages need: a session without
    /// ctl batches has its transcript read only that far (a batch is placed by what follows
    /// it in the transcript, so with batches the whole of it is read).
    pub fn read_for_first(
        paths: &RootPaths,
        sid: &str,
        messages: usize,
    ) -> Result<SessionFiles, TxnError> {
        let jpath = paths.journal_path(sid);
        let journal = journal::read(&jpath).map_err(|e| io_err("cannot read", &jpath, e))?;
        if !journal.entries.is_empty() {
            return SessionFiles::read(paths, sid);
        }
        let path = paths.transcript_path(sid);
        let transcript = transcript_or_error(session::load_first_messages(&path, sid, messages))?;
        let state = crate::format::state::load_state_blocks(&paths.state_path(sid), sid).state;
        Ok(SessionFiles {
            transcript,
            journal,
            state,
        })
    }

    pub fn recorded(&self) -> Recorded<'_> {
        Recorded {
            transcript: &self.transcript,
            state: &self.state,
            journal: &self.journal,
            projected: None,
        }
    }
}

/// What a session's files hold, read already (an audit has them).
#[derive(Clone, Copy)]
pub struct Recorded<'r> {
    pub transcript: &'r Transcript,
    /// Its `state.json` (where its blocks' archives are).
    pub state: &'r State,
    pub journal: &'r journal::JournalRead,
    /// The projection of the transcript's first messages, when made already (with no ctl
    /// batch, what a history up to that many messages is replayed over).
    pub projected: Option<&'r Projection<'r>>,
}

/// [`history`] from files read already, replayed as `asked` of the points: with
/// [`rebuild::Asked::states`] the states only ([`states_at`]), with
/// [`rebuild::Asked::requests`] what every request showed too.
pub fn history_of(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    points: &[usize],
    now: DateTime<Utc>,
    rec: Recorded<'_>,
    asked: fn(&[usize]) -> rebuild::Asked<'_>,
) -> Result<rebuild::History, TxnError> {
    let t = rec.transcript;
    let all = session::messages(t);
    let end = [all.len()];
    let points = if points.is_empty() { &end[..] } else { points };
    if let Some(&n) = points.iter().find(|&&n| n > all.len()) {
        return Err(TxnError::Invalid(format!(
            "the transcript of {sid} has {} messages, not {n}",
            all.len()
        )));
    }
    // Without ctl batches (placed by what follows them) nothing after the last point counts.
    let last = points.iter().copied().max().unwrap_or(all.len());
    let mut all = all;
    if rec.journal.entries.is_empty() {
        all.truncate(last);
    }
    let made;
    let full = match rec.projected {
        Some(p) if rec.journal.entries.is_empty() && p.msgs.len() == all.len() => p,
        _ => {
            made = Projection::new(all);
            &made
        }
    };
    let uuids = session::message_uuids(t);
    let batches: Vec<JournalBatch> = rec
        .journal
        .entries
        .iter()
        .map(|(_, e)| journal_batch(e, full, &uuids, t))
        .collect();
    let root = rec
        .state
        .blocks()
        .iter()
        .find_map(|b| {
            // `<base>/<sid>/tier<N>/<file>`: this session's root under the same base (an
            // inherited block names its parent's).
            let base = Path::new(&b.archive_path).parent()?.parent()?.parent()?;
            base.is_absolute()
                .then(|| base.join(sid).to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| absolute(&paths.archive_root(sid)));
    let place = placement(&root, sid, now);
    let path = &noa_session::runtime_path;
    let requests = session::request_points(t);
    let replay = rebuild::Replay::new(full, cfg, &place, &batches, path).with_requests(&requests);
    let mut h = replay.history(asked(points));
    // A block the session's state holds (made by the same call) is where that state says:
    // a fork's inherited blocks live in its parent's archives.
    for state in &mut h.states {
        for b in state.blocks.iter_mut().flatten() {
            if let Some(r) = rec
                .state
                .blocks()
                .iter()
                .find(|r| r.block_id == b.block_id && r.compress_call_id == b.compress_call_id)
            {
                b.archive_path.clone_from(&r.archive_path);
                b.archive_rel.clone_from(&r.archive_rel);
            }
        }
    }
    Ok(h)
}

/// The journal's committed batches of session `sid`, each placed in `p` (the projection of
/// transcript `t`'s messages).
fn journal_batches(
    paths: &RootPaths,
    sid: &str,
    p: &Projection<'_>,
    t: &Transcript,
) -> Result<Vec<JournalBatch>, TxnError> {
    let jpath = paths.journal_path(sid);
    let jr = journal::read(&jpath).map_err(|e| io_err("cannot read", &jpath, e))?;
    let uuids = session::message_uuids(t);
    Ok(jr
        .entries
        .iter()
        .map(|(_, e)| journal_batch(e, p, &uuids, t))
        .collect())
}
