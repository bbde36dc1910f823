//! Recovery before a command: temp files of interrupted writes removed, the state read as it
//! is on disk (and replaced only if unchanged), and batches the journal committed but the state
//! lacks rolled forward.

use super::*;

/// Recovery (SPEC 4.4), run under the lock before every command: cut a torn journal tail, roll
/// committed batches missing from `state.json` forward, remove debris of uncommitted batches.
/// Returns notes on what it did.
pub fn recover(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    now: DateTime<Utc>,
) -> Result<Vec<String>, TxnError> {
    let mut notes = Vec::new();
    let root = paths.archive_root(sid);
    let jpath = paths.journal_path(sid);
    let mut jr = journal::read(&jpath).map_err(|e| io_err("cannot read", &jpath, e))?;
    if let Some(off) = jr.torn_tail {
        journal::cut_torn_tail(&jpath, off).map_err(|e| io_err("cannot cut", &jpath, e))?;
        failpoint::hit("recover.after-cut").map_err(|e| io_err("recovery", &jpath, e))?;
        notes.push("cut an uncommitted batch from the journal tail".to_string());
        jr.torn_tail = None;
    }
    let journal_calls: HashSet<String> =
        jr.entries.iter().map(|(_, e)| e.call_id.clone()).collect();

    // Roll forward.
    let referenced = roll_forward(paths, sid, cfg, now, &jr, &mut notes)?.referenced;

    // Debris: temp files, and archives of ctl batches that never committed.
    let Ok(entries) = fs::read_dir(&root) else {
        return Ok(notes);
    };
    let mut dirs = vec![root.clone()];
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().is_ok_and(|t| t.is_dir()) && is_tier_dir(&name) {
            dirs.push(e.path());
        }
    }
    for dir in dirs {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !e.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            let remove = if durable::is_runtime_temp(&name) {
                // The runtime may be writing it right now: only an old one is debris.
                e.metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > RUNTIME_TEMP_AGE)
            } else if is_temp_name(&name) {
                true
            } else if name.ends_with(".md") && dir != root && !referenced.contains(&e.path()) {
                fs::read_to_string(e.path())
                    .ok()
                    .and_then(|t| archive::parse(&t).ok())
                    .and_then(|p| p.frontmatter.call)
                    .is_some_and(|call| call.starts_with("ctl-") && !journal_calls.contains(&call))
            } else {
                false
            };
            if remove {
                durable::remove_durable(&e.path())
                    .map_err(|err| io_err("cannot remove", &e.path(), err))?;
                failpoint::hit("recover.after-remove-debris")
                    .map_err(|err| io_err("recovery", &e.path(), err))?;
                notes.push(format!(
                    "removed debris {}",
                    e.path().strip_prefix(&root).unwrap_or(&e.path()).display()
                ));
            }
        }
    }
    Ok(notes)
}

/// How old a runtime temp file must be before recovery takes it for debris (a younger one
/// may be a write in progress).
pub(super) const RUNTIME_TEMP_AGE: Duration = Duration::from_secs(120);

/// How many times a `state.json` write is computed again because the file was replaced while
/// it was computed (the runtime rewrites it without a lock).
pub(super) const STATE_ATTEMPTS: usize = 5;

/// A `state.json` as read: its bytes and the identity of the file they came from. The file is
/// held open, so its inode number cannot be reused by a file renamed in meanwhile (timestamps
/// are too coarse to tell two quick writes of the same size apart).
pub(super) struct StateFile {
    pub(super) bytes: Option<Vec<u8>>,
    pub(super) id: Option<FileId>,
    pub(super) _held: Option<fs::File>,
}

/// Device, inode, size, mtime and ctime: a rename over the file, or a write into it, changes it.
pub(super) type FileId = (u64, u64, u64, i64, i64, i64, i64);

pub(super) fn file_id(m: &fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    (
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    )
}

/// Read `state.json` (absent: no bytes), with the identity of the very file read.
pub(super) fn read_state_file(spath: &Path) -> std::io::Result<StateFile> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(spath);
    match opened {
        // A symbolic link is never followed: it reads as an unusable state (only `rebuild`
        // replaces it, with a real file).
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Ok(StateFile {
            bytes: Some(Vec::new()),
            id: fs::symlink_metadata(spath).ok().map(|m| file_id(&m)),
            _held: None,
        }),
        Ok(mut f) => {
            let id = file_id(&f.metadata()?);
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)?;
            Ok(StateFile {
                bytes: Some(bytes),
                id: Some(id),
                _held: Some(f),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(StateFile {
            bytes: None,
            id: None,
            _held: None,
        }),
        Err(e) => Err(e),
    }
}

/// Replace `state.json` with `state` only if it is still the file `base` was read from, so a
/// state.json the runtime renamed in meanwhile is never undone; `Ok(false)`: it was replaced.
pub(super) fn replace_state_if_unchanged(
    spath: &Path,
    base: &StateFile,
    state: &State,
) -> std::io::Result<bool> {
    durable::atomic_replace_if(
        spath,
        state.to_json().as_bytes(),
        || match fs::symlink_metadata(spath) {
            Ok(m) => base.id == Some(file_id(&m)),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound && base.id.is_none(),
        },
    )
}

/// What [`roll_forward`] did.
pub(super) struct RolledForward {
    /// Archives the final `state.json` points at (never debris).
    pub(super) referenced: HashSet<PathBuf>,
    /// Whether every committed batch is in `state.json` now.
    pub(super) complete: bool,
}

/// Apply the journal batches missing from `state.json` onto it and persist it. If the runtime
/// replaces state.json meanwhile, start again from its version (up to [`STATE_ATTEMPTS`] times),
/// so its change is kept and the batches are still applied. An unparsable state.json is left
/// alone (only `rebuild` replaces it).
pub(super) fn roll_forward(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    now: DateTime<Utc>,
    jr: &journal::JournalRead,
    notes: &mut Vec<String>,
) -> Result<RolledForward, TxnError> {
    let root = paths.archive_root(sid);
    let spath = paths.state_path(sid);
    let mut transcript = None;
    let mut last_referenced = HashSet::new();
    for attempt in 1..=STATE_ATTEMPTS {
        let base = read_state_file(&spath).map_err(|e| io_err("cannot read", &spath, e))?;
        let state = match &base.bytes {
            Some(bytes) => parse_state(bytes).ok(),
            None => Some(State::initial(sid)),
        };
        // An archive state.json points at is never debris, whatever the journal says (a damaged
        // journal line must not cost the archive of a block the state holds).
        let referenced: HashSet<PathBuf> = state
            .iter()
            .flat_map(|s| s.blocks().iter().map(|b| root.join(&b.archive_rel)))
            .collect();
        let done = |complete| {
            Ok(RolledForward {
                referenced: referenced.clone(),
                complete,
            })
        };
        let Some(mut state) = state else {
            return done(false);
        };
        if missing_batches(&state, jr).next().is_none() {
            return done(true);
        }
        let t = transcript
            .get_or_insert_with(|| session::load_transcript(&paths.transcript_path(sid), sid).0);
        let (rolled, skipped) = apply_missing(&mut state, t, jr, cfg, sid, &root, now)?;
        let complete = skipped.is_empty();
        notes.extend(skipped);
        if rolled == 0 {
            return done(complete);
        }
        let st = state;
        let written = replace_state_if_unchanged(&spath, &base, &st)
            .map_err(|e| io_err("cannot write", &spath, e))?;
        if written {
            failpoint::hit("recover.after-rollforward")
                .map_err(|e| io_err("recovery", &spath, e))?;
            notes.push(format!(
                "rolled {rolled} committed batch(es) forward into state.json"
            ));
            return Ok(RolledForward {
                referenced: st
                    .blocks()
                    .iter()
                    .map(|b| root.join(&b.archive_rel))
                    .chain(referenced)
                    .collect(),
                complete,
            });
        }
        last_referenced = referenced;
        if attempt < STATE_ATTEMPTS {
            notes.push(
                "state.json was replaced while rolling forward; applied again onto the new version"
                    .into(),
            );
        }
    }
    notes.push(format!(
        "state.json was replaced {STATE_ATTEMPTS} times while rolling forward; the committed batches stay in the journal for the next command"
    ));
    Ok(RolledForward {
        referenced: last_referenced,
        complete: false,
    })
}

/// The journal batches `state` does not hold, in journal order.
pub(super) fn missing_batches<'j>(
    state: &State,
    jr: &'j journal::JournalRead,
) -> impl Iterator<Item = &'j JournalEntry> {
    let have: HashSet<String> = state
        .blocks()
        .iter()
        .map(|b| b.compress_call_id.clone())
        .collect();
    jr.entries
        .iter()
        .map(|(_, e)| e)
        .filter(move |e| !have.contains(&e.call_id))
}

/// Apply onto `state` every journal batch it does not hold, each against the view of its
/// time, placing their archives: how many were applied, and why the others could not be.
pub(super) fn apply_missing(
    state: &mut State,
    t: &Transcript,
    jr: &journal::JournalRead,
    cfg: &NoaConfig,
    sid: &str,
    root: &Path,
    now: DateTime<Utc>,
) -> Result<(usize, Vec<String>), TxnError> {
    let missing: Vec<&JournalEntry> = missing_batches(state, jr).collect();
    if missing.is_empty() {
        return Ok((0, Vec::new()));
    }
    let stamp = file_stamp(now);
    let root_str = absolute(root);
    let p = Projection::new(session::messages(t));
    let uuids = session::message_uuids(t);
    let mut rolled = 0;
    let mut skipped = Vec::new();
    for e in missing {
        let batch = journal_batch(e, &p, &uuids, t);
        let parsed = args::parse(&batch.input);
        let sub = Projection {
            msgs: p.msgs.clone(),
            cores: p.cores[..batch.prefix.min(p.cores.len())].to_vec(),
        };
        let place = placement(&root_str, sid, journal_time(&e.at));
        let applied = rebuild::ctl_apply(
            &sub,
            state,
            cfg,
            &parsed.ranges,
            &e.call_id,
            &place,
            &noa_session::runtime_path,
        );
        if !applied.whole() {
            skipped.push(format!(
                "journal batch {} could not be rolled forward: {}",
                e.call_id,
                refusal(&applied)
            ));
            continue;
        }
        for (b, a) in applied.created.iter().zip(&applied.archives) {
            place_archive(root, b, &archive_text(a), &stamp)?;
            failpoint::hit("recover.after-archive").map_err(|e| io_err("recovery", root, e))?;
        }
        *state = applied.state;
        rolled += 1;
    }
    Ok((rolled, skipped))
}
