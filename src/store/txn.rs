//! The ctl transactions on disk (SPEC 4.4 steps 4-6, recovery, 4.7 rebuild), each under the
//! session lock.
//!
//! Order of a compress: archives (each created durably, never overwriting), then the journal
//! line (the commit point), then `state.json` (atomic replace). A crash anywhere leaves either
//! the old state or a state that the journal rolls forward; debris is removed by the recovery
//! that starts every command.
//!
//! Failpoints (the table is in [`failpoint`](super::failpoint)): `compress.after-archive` (after
//! each archive), `compress.before-journal`, `compress.after-journal`, `compress.after-state`,
//! `recover.after-cut`, `recover.after-archive` (each rolled-forward block),
//! `recover.after-rollforward`, `recover.after-remove-debris` (each file),
//! `rebuild.after-keep-archive`, `rebuild.after-archive`, `rebuild.after-keep-state`,
//! `rebuild.before-state`, `rebuild.after-state`.

mod recover;
pub use recover::*;

mod rebuilding;
pub use rebuilding::*;

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

use crate::config::NoaConfig;
use crate::format::archive::{self, Archive, Labels};
use crate::format::loader::Transcript;
use crate::format::state::{parse_state, Block, State};
use crate::noa::args;
use crate::noa::compress::{self, Applied, Placement};
use crate::noa::rebuild::{self, JournalBatch};
use crate::noa::views::{self as noa_session, Projection};
use crate::store::durable::{self, is_temp_name};
use crate::store::failpoint;
use crate::store::journal::{self, JournalEntry};
use crate::store::lock::{self, LockError, SessionLock};
use crate::store::root::{is_escaping_link, RootPaths};
use crate::store::session::{self, is_tier_dir};

/// Why a command failed, by what the caller should answer (the mount: `EINVAL`, `EBUSY`,
/// `EIO`, `EROFS`, as `From<&TxnError> for FsError` says).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// A bad request; nothing was changed.
    #[error("{0}")]
    Invalid(String),
    /// Another command holds the session lock.
    #[error("another ctl command holds the lock of session {0} (waited 5 s)")]
    Busy(String),
    /// The session looks live (its runtime may overwrite the result): why.
    #[error("{0}")]
    Live(String),
    /// A command that changes files, on a read-only mount.
    #[error("read-only mount: commands that change files are refused")]
    ReadOnly,

    /// Reading or writing the backing files failed.
    #[error("{0}")]
    Io(String),
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> TxnError {
    TxnError::Io(format!("{what} {}: {e}", path.display()))
}

/// The outcome of a successful command.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// One line for people.
    pub message: String,
    /// Machine-readable detail.
    pub result: Value,
}

/// RFC 3339 UTC with nanoseconds, the transcript's own time format.
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

/// How long a command waits for the session lock.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

fn take_lock(paths: &RootPaths, sid: &str) -> Result<SessionLock, TxnError> {
    let root = paths.archive_root(sid);
    if is_escaping_link(&paths.archives, std::ffi::OsStr::new(sid), true) {
        return Err(TxnError::Invalid(format!(
            "{} is a symbolic link leading outside {} (not followed)",
            root.display(),
            paths.archives.display()
        )));
    }
    lock::acquire(&root, LOCK_WAIT).map_err(|e| match e {
        LockError::Busy => TxnError::Busy(sid.to_string()),
        LockError::Io(e) => io_err("cannot lock", &root, e),
    })
}

/// Refuses to write `rel` under `root` through a directory that is a symbolic link (it could
/// lead anywhere).
fn check_dirs(root: &Path, rel: &str) -> Result<(), TxnError> {
    let parent = Path::new(rel).parent().unwrap_or(Path::new(""));
    crate::format::check_no_links(root, parent).map_err(|e| io_err("cannot write under", root, e))
}

/// Write a block's archive unless an equal one is there. A different file at the path (or a
/// symbolic link, never followed) is kept beside as `<name>.replaced-<stamp>` and the new one
/// written. Returns what happened.
fn place_archive(
    root: &Path,
    block: &Block,
    text: &str,
    stamp: &str,
) -> Result<ArchivePlacement, TxnError> {
    check_dirs(root, &block.archive_rel)?;
    let path = root.join(&block.archive_rel);
    let dir = path.parent().unwrap_or(root).to_path_buf();
    durable::create_dir_all_durable(&dir).map_err(|e| io_err("cannot create", &dir, e))?;
    let existing = match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => Ok(Vec::new()),
        _ => crate::format::read_no_follow(&path),
    };
    match existing {
        Ok(bytes) => {
            if adoptable(&bytes, block) {
                return Ok(ArchivePlacement::Adopted);
            }
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let kept = dir.join(format!("{name}.replaced-{stamp}"));
            // Keep the old file under a second name, then replace the path atomically: the
            // path always holds a complete archive, so a state.json pointing at it never points
            // at a missing file, whenever a crash comes. (A rename away, then a create, left it
            // missing in between.)
            if fs::hard_link(&path, &kept).is_err() {
                durable::create_new_durable(&kept, &bytes)
                    .map_err(|e| io_err("cannot keep", &path, e))?;
            }
            durable::fsync_dir(&dir).map_err(|e| io_err("cannot sync", &dir, e))?;
            failpoint::hit("rebuild.after-keep-archive")
                .map_err(|e| io_err("cannot keep", &path, e))?;
            durable::atomic_replace(&path, text.as_bytes())
                .map_err(|e| io_err("cannot write", &path, e))?;
            Ok(ArchivePlacement::Replaced(kept))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            durable::create_new_durable(&path, text.as_bytes())
                .map_err(|e| io_err("cannot write", &path, e))?;
            Ok(ArchivePlacement::Written)
        }
        Err(e) => Err(io_err("cannot read", &path, e)),
    }
}

enum ArchivePlacement {
    Adopted,
    Written,
    Replaced(PathBuf),
}

/// An existing archive is adopted only if its frontmatter's block, tier and range match the
/// block, and its `body_sha256`, when present, matches its body (SPEC 4.8).
fn adoptable(bytes: &[u8], b: &Block) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let Ok(parsed) = archive::parse(text) else {
        return false;
    };
    let f = &parsed.frontmatter;
    parsed.body_sha256_ok != Some(false)
        && f.block == b.block_id
        && f.tier == Some(b.tier)
        && f.range.as_ref() == Some(&(b.start_ref.clone(), b.end_ref.clone()))
}

/// The archive text normafs writes (the runtime's layout and labels, plus `call:` and
/// `body_sha256:`).
fn archive_text(a: &Archive) -> String {
    archive::render(a, Labels::Chinese)
}

/// A journal entry as a replayable batch: its input's text, and how many projected content
/// messages existed when it ran (up to the message it names in `after`, else by time).
fn journal_batch(
    e: &JournalEntry,
    p: &Projection<'_>,
    uuids: &[&str],
    t: &Transcript,
) -> JournalBatch {
    let input = match &e.input {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    let msgs_before = match e.extra.get("after").and_then(Value::as_str) {
        Some(u) => uuids.iter().position(|x| *x == u).map(|i| i + 1),
        None => None,
    }
    .unwrap_or_else(|| {
        let at = DateTime::parse_from_rfc3339(&e.at).ok();
        t.iter_messages()
            .take_while(|(l, _)| {
                let ts = l
                    .record
                    .timestamp
                    .as_deref()
                    .and_then(|s| DateTime::parse_from_rfc3339(s).ok());
                matches!((ts, at), (Some(ts), Some(at)) if ts <= at) || at.is_none()
            })
            .count()
    });
    let prefix = p
        .cores
        .iter()
        .take_while(|c| match c.origin {
            crate::noa::content::Origin::Block { msg, .. } => (msg as usize) < msgs_before,
            _ => true,
        })
        .count();
    JournalBatch {
        prefix,
        input,
        call: e.call_id.clone(),
    }
}

/// New blocks of session `sid` archived under `root`, made at `t`: the archive's `created` is
/// `t` in RFC 3339 to the second, the block's `createdAt` its Unix seconds.
fn placement<'f>(root: &'f str, sid: &'f str, t: DateTime<Utc>) -> Placement<'f> {
    Placement::new(
        root,
        sid,
        t.to_rfc3339_opts(SecondsFormat::Secs, true),
        t.timestamp(),
    )
}

/// A journal entry's time (RFC 3339), or now when it is not one.
fn journal_time(at: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(at)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|_| Utc::now())
}

fn absolute(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// Why a batch is refused whole: every error and skipped range.
fn refusal(a: &Applied) -> String {
    let mut why: Vec<String> = a.errors.clone();
    why.extend(
        a.warnings
            .iter()
            .filter(|w| w.starts_with("Skipped range"))
            .cloned(),
    );
    if why.is_empty() {
        why.push("no block would be made".into());
    }
    why.join("; ")
}

fn file_stamp(now: DateTime<Utc>) -> String {
    now.format("%Y%m%dT%H%M%S%.9fZ").to_string()
}

/// Load the state for a command: a state.json that exists but cannot be used stops every
/// command but `rebuild` (writing over it would lose it).
/// Also returns the file it was read from, to write over only that one.
fn usable_state(paths: &RootPaths, sid: &str) -> Result<(State, StateFile), TxnError> {
    let spath = paths.state_path(sid);
    let base = read_state_file(&spath)
        .map_err(|e| TxnError::Io(format!("cannot read state.json: {}: {e}", spath.display())))?;
    let state = match &base.bytes {
        None => State::initial(sid),
        Some(bytes) => parse_state(bytes).map_err(|e| {
            TxnError::Invalid(format!(
                "{e}; run `rebuild` to rebuild it from history (the old file is kept)"
            ))
        })?,
    };
    Ok((state, base))
}

/// Load a session's transcript for a command (an unreadable one stops it).
fn command_transcript(paths: &RootPaths, sid: &str) -> Result<Transcript, TxnError> {
    transcript_or_error(session::load_transcript(&paths.transcript_path(sid), sid))
}

fn transcript_or_error((t, err): (Transcript, Option<String>)) -> Result<Transcript, TxnError> {
    match err {
        Some(e) => Err(TxnError::Io(format!("cannot read the transcript: {e}"))),
        None => Ok(t),
    }
}

/// Run a Compress call from a ctl command (SPEC 4.5, 6), durably. `input` is the runtime's
/// Compress input as text (read as leniently as the runtime reads it). The batch is all or
/// nothing: a range that fails or is skipped refuses it whole, and nothing is written.
pub fn compress(
    paths: &RootPaths,
    sid: &str,
    input: &str,
    cfg: &NoaConfig,
    now: DateTime<Utc>,
) -> Result<Outcome, TxnError> {
    let parsed = args::parse(input);
    if parsed.ranges.is_empty() {
        return Err(TxnError::Invalid(if parsed.ok {
            "No ranges provided.".to_string()
        } else {
            parsed.error_message()
        }));
    }
    let _lock = take_lock(paths, sid)?;
    let mut notes = recover(paths, sid, cfg, now)?;
    let (own, base) = usable_state(paths, sid)?;
    let t = command_transcript(paths, sid)?;
    let root = paths.archive_root(sid);
    // The runtime may have replaced state.json since `recover` rolled the journal forward,
    // with a version that lacks committed batches: plan on a state that holds every one (the
    // new batch would else reuse their block ids and ranges), and write them with it.
    let jpath = paths.journal_path(sid);
    let jr = journal::read(&jpath).map_err(|e| io_err("cannot read", &jpath, e))?;
    let (mut state, inherited) = session::opened_state(paths, sid, &own, cfg);
    let (again, skipped) = apply_missing(&mut state, &t, &jr, cfg, sid, &root, now)?;
    if again > 0 {
        notes.push(format!(
            "state.json was replaced after recovery: {again} committed batch(es) applied again"
        ));
    }
    notes.extend(skipped);
    if let Some(p) = &inherited {
        notes.push(format!(
            "the state is inherited from session {p} (no blocks of its own)"
        ));
    }
    let call_id = format!("ctl-{}", uuid::Uuid::new_v4().simple());
    let at = timestamp(now);
    let root_str = absolute(&root);
    let place = placement(&root_str, sid, now);
    let p = Projection::new(session::messages(&t));
    let view = noa_session::turn(&p, &state, cfg, &noa_session::runtime_path);
    let before = view.measure;
    drop(view);
    let applied = rebuild::ctl_apply(
        &p,
        &state,
        cfg,
        &parsed.ranges,
        &call_id,
        &place,
        &noa_session::runtime_path,
    );
    let panel = compress::panel(&applied, before);
    if !applied.whole() {
        // The reasons once: the panel's error and warning lines say them, unless none does.
        let why = refusal(&applied);
        let said = why.split("; ").all(|w| panel.contains(w));
        let head = "refused, nothing written (normafs applies a batch whole or not at all)";
        return Err(TxnError::Invalid(if said {
            format!("{head}:\n{panel}")
        } else {
            format!("{head}: {why}\n{panel}")
        }));
    }

    // Archives first; on failure remove those written.
    let stamp = file_stamp(now);
    let mut written: Vec<PathBuf> = Vec::new();
    let rollback = |written: &[PathBuf]| {
        for p in written {
            let _ = durable::remove_durable(p);
        }
    };
    for (b, a) in applied.created.iter().zip(&applied.archives) {
        match place_archive(&root, b, &archive_text(a), &stamp) {
            Ok(ArchivePlacement::Adopted) => {}
            Ok(ArchivePlacement::Written) => written.push(root.join(&b.archive_rel)),
            Ok(ArchivePlacement::Replaced(k)) => {
                written.push(root.join(&b.archive_rel));
                notes.push(format!(
                    "a different file at {} was kept as {}",
                    b.archive_rel,
                    k.strip_prefix(&root).unwrap_or(&k).display()
                ));
            }
            Err(e) => {
                rollback(&written);
                return Err(e);
            }
        }
        if let Err(e) = failpoint::hit("compress.after-archive") {
            rollback(&written);
            return Err(io_err(
                "cannot write archive",
                &root.join(&b.archive_rel),
                e,
            ));
        }
    }

    // The journal line is the commit point.
    let mut extra = serde_json::Map::new();
    if let Some(last) = session::message_uuids(&t).last() {
        extra.insert("after".into(), Value::String(last.to_string()));
    }
    let entry = JournalEntry {
        at: at.clone(),
        input: serde_json::from_str(input.trim())
            .unwrap_or_else(|_| Value::String(input.to_string())),
        blocks: applied.created.iter().map(block_json).collect(),
        call_id: call_id.clone(),
        extra,
    };
    if let Err(e) =
        failpoint::hit("compress.before-journal").and_then(|_| journal::append(&jpath, &entry))
    {
        rollback(&written);
        return Err(io_err("cannot commit to the journal", &jpath, e));
    }

    // State. A failure here is a success with a warning: the batch is committed.
    let spath = paths.state_path(sid);
    // The batch's own warnings, and how its endpoints were read, in words: in the result
    // and in the message alike.
    let mut warnings: Vec<String> = applied.warnings.clone();
    let read_as = endpoints_read(&parsed.ranges, &applied, cfg);
    let state_write = failpoint::hit("compress.after-journal")
        .and_then(|_| replace_state_if_unchanged(&spath, &base, &applied.state));
    match state_write {
        Ok(true) => {}
        Ok(false) => {
            // The runtime replaced state.json during this command: apply the batch (committed
            // in the journal) onto its version instead of undoing its change.
            notes.push("state.json was replaced during the command; the batch was applied onto the new version".into());
            let merged = journal::read(&jpath)
                .map_err(|e| io_err("cannot read", &jpath, e))
                .and_then(|jr| roll_forward(paths, sid, cfg, now, &jr, &mut notes));
            match merged {
                Ok(r) if r.complete => {}
                Ok(_) => warnings.push("committed to the journal but not yet in state.json (it kept changing); the next ctl command or rebuild rolls it forward".into()),
                Err(e) => warnings.push(format!(
                    "committed to the journal but state.json could not be written ({e}); the next ctl command or rebuild rolls it forward"
                )),
            }
        }
        Err(e) => warnings.push(format!(
            "committed to the journal but state.json could not be written ({e}); the next ctl command or rebuild rolls it forward"
        )),
    }
    let _ = failpoint::hit("compress.after-state");
    let blocks: Vec<Value> = applied
        .created
        .iter()
        .map(|b| {
            json!({"blockId": b.block_id, "tier": b.tier, "startRef": b.start_ref, "endRef": b.end_ref,
                   "archiveRel": b.archive_rel, "compressedTokens": b.compressed_tokens})
        })
        .collect();
    let mut message = panel.clone();
    for w in &read_as {
        message.push_str(&format!("\n  warn: {w}"));
    }
    warnings.extend(read_as);
    Ok(Outcome {
        message,
        result: json!({
            "callId": call_id,
            "blocks": blocks,
            "tokensCompressed": applied.tokens_compressed,
            "panel": panel,
            "warnings": warnings,
            "recovery": notes,
        }),
    })
}

/// How a ctl batch's endpoints were read, where not as written: given end first, widened to
/// whole exchanges, or with protected messages left out (and which setting protects them).
fn endpoints_read(ranges: &[args::Range], a: &Applied, cfg: &NoaConfig) -> Vec<String> {
    use crate::noa::refs::{format_ref, parse_ref};
    let mut out = Vec::new();
    for r in ranges {
        let (Some(x), Some(y)) = (parse_ref(&r.start), parse_ref(&r.end)) else {
            continue;
        };
        let (lo, hi) = (x.min(y), x.max(y));
        if x > y {
            out.push(format!(
                "{} {} was given end first: read as the range {}–{}",
                r.start,
                r.end,
                format_ref(lo),
                format_ref(hi)
            ));
        }
        // A block over the range that reaches past either end of it.
        let made = a.created.iter().find(|b| {
            matches!((parse_ref(&b.start_ref), parse_ref(&b.end_ref)),
                (Some(s), Some(e)) if s <= hi && lo <= e && (s < lo || e > hi))
        });
        if let Some(b) = made {
            {
                out.push(format!(
                    "{}–{} was widened to {}–{} ({}): a block takes whole exchanges, a tool \
                     call with its result and reasoning with what follows it",
                    format_ref(lo),
                    format_ref(hi),
                    b.start_ref,
                    b.end_ref,
                    b.block_id
                ));
            }
        }
    }
    out.extend(protected_by(&a.protected, cfg));
    out
}

/// For each rule of the protected zone that held messages out of a range: which messages,
/// what the rule is, and how to release them.
fn protected_by(held: &[(String, crate::noa::protect::SoftRule)], cfg: &NoaConfig) -> Vec<String> {
    use crate::noa::protect::SoftRule;
    let mut out = Vec::new();
    for rule in [SoftRule::Count, SoftRule::Tokens, SoftRule::User] {
        let refs: Vec<&str> = held
            .iter()
            .filter(|(_, r)| *r == rule)
            .map(|(m, _)| m.as_str())
            .collect();
        let Some(last) = refs.last() else { continue };
        let (these, are) = if refs.len() == 1 {
            (last.to_string(), "is")
        } else {
            (refs.join(", "), "are")
        };
        out.push(match rule {
            SoftRule::Count => format!(
                "{these} {are} left out as protected: among the last {} messages \
                 (protect_recent_messages = {}); they can be compressed once newer messages \
                 follow, or with a lower protect_recent_messages",
                cfg.protect_recent_messages, cfg.protect_recent_messages
            ),
            SoftRule::Tokens => format!(
                "{these} {are} left out as protected: within the last {} tokens \
                 (protect_recent_tokens = {}); they can be compressed once newer messages \
                 follow, or with a lower protect_recent_tokens",
                cfg.protect_recent_tokens, cfg.protect_recent_tokens
            ),
            SoftRule::User => format!(
                "{these} {are} left out as protected: the latest user message (kept while \
                 protect_recent_messages is above 0); it can be compressed once the user writes \
                 again, or with protect_recent_messages = 0"
            ),
        });
    }
    out
}

/// A block as the journal records it: as state.json holds it.
pub(crate) fn block_json(b: &Block) -> Value {
    let mut st = State::initial("");
    st.blocks = Some(vec![b.clone()]);
    serde_json::from_str::<Value>(&st.to_json())
        .ok()
        .and_then(|v| v["blocks"][0].as_object().cloned())
        .map(Value::Object)
        .unwrap_or(Value::Null)
}
