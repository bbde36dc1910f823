//! A root's pages (`view.html`, `at/<n>/view.html`, `index.html`) made from its files: what
//! `normafs html` prints, and what the mount's `.history/` serves. The rendering is
//! `noa::html`'s; this gathers what a page shows besides the view (the figures of
//! `status.json`, the audit's counts, the history picture).

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::audit::{self, Audit, PathStyle, Severity};
use crate::bytes::Bytes;
use crate::config::Config;
use crate::noa::html::{self, Extras, IndexRow};
use crate::noa::render::{self, StatusInputs};
use crate::noa::views::{self as view, ArchivePath, Projection};
use crate::store::root::{self, RootPaths};
use crate::store::session::{self, SessionData};
use crate::store::txn::TxnError;

/// `status.json`'s value of a loaded session, over its projection.
fn status_of(
    paths: &RootPaths,
    cfg: &Config,
    s: &SessionData<'_>,
    files: &view::Files<'_, '_>,
    state: &crate::format::state::State,
    inherited: Option<&str>,
    now: DateTime<Utc>,
) -> Value {
    let sid = s.sid.as_str();
    let noa = cfg.for_session(sid);
    let subagents: Vec<(String, crate::format::transcript::Usage)> = s
        .sidechains
        .iter()
        .map(|(aid, _, t)| (aid.clone(), t.usage.clone()))
        .collect();
    let problems = s.transcript.problems();
    let count = |sev: Severity| problems.iter().filter(|p| p.severity() == sev).count();
    let inp = StatusInputs {
        session: sid,
        usage: &s.transcript.usage,
        subagents: &subagents,
        problems: (
            count(Severity::Error),
            count(Severity::Warn),
            count(Severity::Info),
        ),
        state_error: s.state.error.as_ref().map(|e| e.to_string()),
        idle_seconds: crate::store::ctl::idle_seconds(paths, sid, now),
        inherited_from: inherited,
        settings: noa.describe(),
        window_assumed: cfg.window_assumed(sid),
    };
    render::status(files.turn(), state, &noa, &inp)
}

/// A session's figures and audit counts, and its page when `page` (the history picture
/// inline).
fn session(
    paths: &RootPaths,
    cfg: &Config,
    sid: &str,
    now: DateTime<Utc>,
    path: ArchivePath<'_>,
    page: bool,
) -> (Value, (usize, usize, usize), usize, Option<Bytes>) {
    let noa = cfg.for_session(sid);
    let s = session::load(paths, sid);
    let (state, inherited) = session::opened_state(paths, sid, &s.state.state, &noa);
    let p = Projection::new(s.messages());
    let files = view::Files::new(&p, &state, &noa, sid, path);
    let status = status_of(paths, cfg, &s, &files, &state, inherited.as_deref(), now);
    let mut a = Audit::default();
    audit::audit_session_with(&mut a, &s, Some(&p), &noa, PathStyle::Mount, paths);
    let counts = a.counts();
    let messages = p.msgs.len();
    let bytes = page.then(|| {
        // The history is replayed for the picture only where that is quick.
        let (svg, no_picture) = if messages > PICTURE_MESSAGES {
            let why =
                format!("not drawn here: replaying a history of {messages} messages takes long");
            (None, Some(why))
        } else {
            match crate::timeline::build(paths, sid, &noa, now) {
                Ok(tl) => (Some(tl.svg_linked()), None),
                Err(e) => (
                    None,
                    Some(format!("its history could not be replayed: {e}")),
                ),
            }
        };
        let x = Extras {
            status: Some(status.clone()),
            audit: Some(counts),
            svg,
            at: None,
            last_write: last_write(paths, sid).map(|w| w.0),
            no_picture,
        };
        files.bytes(view::Form::Html(&x), &mut Default::default())
    });
    (status, counts, messages, bytes)
}

/// Sessions of more messages than this have their history picture linked, not inline: a
/// replay of 10,000 messages takes a third of a second, one of 100,000 minutes.
pub const PICTURE_MESSAGES: usize = 10_000;

/// `view.html` of session `sid`: today's view, its figures, and its history.
pub fn session_page(
    paths: &RootPaths,
    cfg: &Config,
    sid: &str,
    now: DateTime<Utc>,
    path: ArchivePath<'_>,
) -> Bytes {
    session(paths, cfg, sid, now, path, true)
        .3
        .unwrap_or_default()
}

/// `at/<n>/view.html`: the page of the view sent after the first `n` messages.
pub fn page_at(
    paths: &RootPaths,
    cfg: &Config,
    sid: &str,
    n: usize,
    now: DateTime<Utc>,
    path: ArchivePath<'_>,
) -> Result<Bytes, TxnError> {
    let x = Extras {
        at: Some(n),
        ..Extras::default()
    };
    let noa = cfg.for_session(sid);
    crate::timeline::view_at(paths, sid, &noa, n, now, path, view::Form::Html(&x))
}

/// When session `sid`'s transcript was last written (RFC 3339, seconds), and how long ago.
pub fn last_write(paths: &RootPaths, sid: &str) -> Option<(String, u64)> {
    let m = std::fs::symlink_metadata(paths.transcript_path(sid)).ok()?;
    let at: DateTime<Utc> = m.modified().ok()?.into();
    let ago = (Utc::now() - at).num_seconds().max(0) as u64;
    Some((at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), ago))
}

/// A row of `index.html` from a session's `status.json` value and audit counts.
pub fn index_row(
    paths: &RootPaths,
    sid: &str,
    status: Option<Value>,
    audit: (usize, usize, usize),
    messages: usize,
) -> IndexRow {
    let written = last_write(paths, sid);
    IndexRow {
        sid: sid.to_string(),
        status,
        messages,
        idle_seconds: written.as_ref().map(|w| w.1),
        last_activity: written.map(|w| w.0),
        audit,
    }
}

/// The root's picture as `index.html` shows it.
pub fn root_picture(paths: &RootPaths, cfg: &Config, sessions: &[String]) -> String {
    let mut a = Audit::default();
    audit::audit_bounds_of(&mut a, paths, sessions, cfg, PathStyle::Mount);
    crate::timeline::root_svg(
        &crate::timeline::peaks_by_session(sessions, &a.peaks),
        cfg.noa.pressure_ratio,
        cfg.noa.truncate_ratio,
    )
}

/// `index.html` of a root: every session's figures, newest first.
pub fn index_page(paths: &RootPaths, cfg: &Config, now: DateTime<Utc>) -> std::io::Result<String> {
    let d = root::discover(paths)?;
    let rows: Vec<IndexRow> = d
        .sessions
        .iter()
        .map(|sid| {
            let (status, counts, messages, _) =
                session(paths, cfg, sid, now, &view::runtime_path, false);
            index_row(paths, sid, Some(status), counts, messages)
        })
        .collect();
    let svg = root_picture(paths, cfg, &d.sessions);
    Ok(html::index_page(&rows, Some(&svg)))
}
