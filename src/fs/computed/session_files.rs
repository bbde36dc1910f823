//! What a session's computed files are made from in one computation ([`SessionFiles`]), and the
//! render functions of the built-in ones (`layout.rs` names them). Everything a file may need
//! is made when first asked for and shared by the files made after it: a file not made costs
//! nothing.

use chrono::{DateTime, Utc};

use crate::audit::{self, Audit, PathStyle, Severity};
use crate::bytes::Bytes;
use crate::config::NoaConfig;
use crate::format::loader::Transcript;
use crate::format::state::{State, StateLoad};
use crate::format::transcript::{Message, Usage};
use crate::noa::pipeline::Turn;
use crate::noa::render::{self, StatusInputs};
use crate::noa::views::{self as view, Projection};
use crate::store::session::{self, SessionData, TranscriptOf};

use super::super::error::FsError;
use super::Computed;

/// A session's files of one computation: its transcript, states and settings, its projection,
/// its view (made once, when first asked for), and its subagents' transcripts (read when first
/// asked for). A computed file's render function makes its bytes from these.
pub struct SessionFiles<'x, 'a> {
    pub(super) computed: &'x Computed,
    pub(super) sid: &'x str,
    pub(super) cfg: &'x NoaConfig,
    pub(super) st: &'x StateLoad,
    /// The state the view applies (an ancestor's, for a fork without blocks).
    pub(super) state: &'x State,
    /// The ancestor it is inherited from.
    pub(super) inherited: Option<&'x str>,
    pub(super) transcript: &'a Transcript,
    pub(super) transcript_exists: bool,
    pub(super) p: &'x Projection<'a>,
    pub(super) view: view::Files<'x, 'a>,
    /// The lines written by the previous computation over the same transcript.
    pub(super) lines: &'x mut view::Lines,
    pub(super) places: &'x render::Places<'x>,
    /// The subagents' transcripts, once read (`None`: not yet).
    pub(super) sidechains: Option<Vec<(String, std::path::PathBuf, Transcript)>>,
    pub(super) now: DateTime<Utc>,
    /// The session's findings, once `audit.txt` is made (the root's `audit.txt` takes them
    /// while the session is unchanged).
    pub(super) found: Option<Audit>,
}

impl<'x, 'a> SessionFiles<'x, 'a> {
    pub fn sid(&self) -> &'x str {
        self.sid
    }

    /// The session's settings.
    pub fn config(&self) -> &'x NoaConfig {
        self.cfg
    }

    /// The state the view applies.
    pub fn state(&self) -> &'x State {
        self.state
    }

    /// The parsed transcript.
    pub fn transcript(&self) -> &'a Transcript {
        self.transcript
    }

    /// The session's messages, as the view is made from them.
    pub fn messages(&self) -> &[&'a Message] {
        &self.p.msgs
    }

    /// The moment the files are made as of: what they say of time is as of then.
    pub fn now(&self) -> DateTime<Utc> {
        self.now
    }

    /// The view a resumed runtime sends, as a turn: made once for all the files that ask.
    pub fn turn(&self) -> &Turn<'x, 'a> {
        self.view.turn()
    }

    /// How `view.md` names places.
    pub fn places(&self) -> &'x render::Places<'x> {
        self.places
    }

    /// A file of the view, in `form`.
    pub fn view_file(&mut self, form: view::Form<'_>) -> Bytes {
        self.view.bytes(form, self.lines)
    }

    /// Each subagent's usage.
    pub fn subagent_usage(&mut self) -> Vec<(String, Usage)> {
        self.sidechains()
            .iter()
            .map(|(aid, _, t)| (aid.clone(), t.usage.clone()))
            .collect()
    }

    fn sidechains(&mut self) -> &[(String, std::path::PathBuf, Transcript)] {
        let (paths, sid) = (&self.computed.paths, self.sid);
        self.sidechains
            .get_or_insert_with(|| session::sidechains(paths, sid))
    }

    /// The whole session as the audit reads it: its archives, journal and subagents besides.
    /// The view's turn is let go first (it is made again if a file asks for it after this).
    pub fn session(&mut self) -> SessionData<'a> {
        self.view.let_go();
        let sidechains = match self.sidechains.take() {
            Some(s) => s,
            None => session::sidechains(&self.computed.paths, self.sid),
        };
        session::load_around(
            &self.computed.paths,
            self.sid,
            TranscriptOf::Borrowed(self.transcript),
            self.transcript_exists,
            sidechains,
        )
    }
}

/// `view.jsonl`.
pub fn view(f: &mut SessionFiles<'_, '_>) -> Result<Bytes, FsError> {
    Ok(f.view_file(view::Form::View))
}

/// `view.md`.
pub fn view_md(f: &mut SessionFiles<'_, '_>) -> Result<Bytes, FsError> {
    Ok(f.view_file(view::Form::Markdown(f.places)))
}

/// `materialized.jsonl`.
pub fn materialized(f: &mut SessionFiles<'_, '_>) -> Result<Bytes, FsError> {
    Ok(f.view_file(view::Form::Materialized))
}

/// `status.json`: its idle time as of the computation's moment.
pub fn status(f: &mut SessionFiles<'_, '_>) -> Result<Bytes, FsError> {
    let subagents = f.subagent_usage();
    let problems = f.transcript.problems();
    let count = |s: Severity| problems.iter().filter(|p| p.severity() == s).count();
    let c = f.computed;
    let inp = StatusInputs {
        session: f.sid,
        usage: &f.transcript.usage,
        subagents: &subagents,
        problems: (
            count(Severity::Error),
            count(Severity::Warn),
            count(Severity::Info),
        ),
        state_error: f.st.error.as_ref().map(|e| e.to_string()),
        idle_seconds: crate::store::ctl::idle_seconds(&c.paths, f.sid, f.now),
        inherited_from: f.inherited,
        settings: f.cfg.describe(),
        window_assumed: c.cfg().window_assumed(f.sid),
    };
    let status = render::status(f.turn(), f.state, f.cfg, &inp);
    let mut b = serde_json::to_vec_pretty(&status).unwrap_or_default();
    b.push(b'\n');
    Ok(Bytes::from(b))
}

/// `audit.txt`: the session's own findings.
pub fn audit(f: &mut SessionFiles<'_, '_>) -> Result<Bytes, FsError> {
    let s = f.session();
    let mut a = Audit::default();
    audit::audit_session_with(
        &mut a,
        &s,
        Some(f.p),
        f.cfg,
        PathStyle::Mount,
        &f.computed.paths,
    );
    if let Some(e) = f.computed.settings_error() {
        a.settings_unreadable(e.shown_path(), &e.reason);
    }
    a.sort();
    let text = a.to_text().into_bytes();
    f.found = Some(a);
    Ok(Bytes::from(text))
}
