//! The audit (SPEC 9): every integrity problem of a session root, one finding a line,
//! `<severity> <code> <path>[:<line>] — <message>`, sorted by path then line, and a summary.
//!
//! Codes beyond the SPEC catalogue (normafs choices): `journal.malformed` (error: a committed
//! journal line that is not an entry), `journal.torn-tail` (warn: an uncommitted batch, cut by
//! the next ctl command), `transcript.unreadable` / `state.unreadable`-style I/O failures are
//! reported under the nearest catalogue code with the OS message.

mod bounds;
mod root;
mod session;
pub use bounds::*;
pub use root::*;
pub use session::*;

use std::collections::HashMap;
use std::path::Path;

use serde_json::json;

use crate::config::{Config, NoaConfig};
use crate::format::archive;
pub use crate::format::loader::Severity;
use crate::format::loader::Transcript;
use crate::format::memory;
use crate::format::state::StateLoadError;
use crate::noa::views::Projection;
use crate::noa::{pipeline, protect, refs};
use crate::store::root::{Discovery, RootPaths};
use crate::store::session::SessionData;

/// A mount's settings file that stopped parsing (error): the mount goes on with the settings it
/// had, and every `audit.txt` says so until the file is mended. A mount's code only: a command
/// stops at such a file.
pub const SETTINGS_UNREADABLE: &str = "settings.unreadable";

/// Every code of the SPEC 9 catalogue, in its order: transcript, state, archive (the
/// per-session codes), then memory, root and normafs's journal.
pub const CATALOGUE: [&str; 44] = [
    "transcript.malformed-line",
    "transcript.line-too-long",
    "transcript.duplicate-uuid",
    "transcript.torn-tail",
    "transcript.parent-chain",
    "transcript.session-mismatch",
    "transcript.bad-shape",
    "transcript.orphan-tool-result",
    "transcript.unanswered-tool-use",
    "transcript.pending-tool-use",
    "state.missing",
    "state.malformed",
    "state.version",
    "state.session-mismatch",
    "state.ref-map",
    "state.dangling-ref",
    "state.block-range",
    "state.unknown-block",
    "state.overlap",
    "state.dead-block",
    "state.next-block-id",
    "state.stats",
    "state.inherited",
    "state.unreplayable",
    "state.behind-journal",
    "state.runtime-unaware",
    "state.unknown-keys",
    "archive.missing",
    "archive.moved",
    "archive.mismatch",
    "archive.corrupt",
    "archive.truncated",
    "archive.orphan",
    "archive.temp-debris",
    "memory.slug-collision",
    "memory.empty-slug",
    "memory.name-mismatch",
    "memory.malformed",
    "memory.unknown-keys",
    "memory.unknown-type",
    "memory.index-stale",
    "root.bad-name",
    "journal.malformed",
    "journal.torn-tail",
];

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub code: &'static str,
    pub path: String,
    pub line: Option<u64>,
    pub message: String,
}

impl Finding {
    /// The `audit.txt` line (without newline).
    pub fn to_line(&self) -> String {
        let loc = match self.line {
            Some(l) => format!("{}:{l}", self.path),
            None => self.path.clone(),
        };
        format!("{} {} {loc} — {}", self.severity, self.code, self.message)
    }
}

/// How paths are named: relative to ROOT (the CLI) or to the mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStyle {
    Root,
    Mount,
}

impl PathStyle {
    pub fn transcript(self, sid: &str) -> String {
        match self {
            PathStyle::Root => format!("transcripts/{sid}.jsonl"),
            PathStyle::Mount => format!("sessions/{sid}/transcript.jsonl"),
        }
    }
    fn sidechain(self, sid: &str, aid: &str) -> String {
        match self {
            PathStyle::Root => format!("transcripts/{sid}/subagents/agent-{aid}.jsonl"),
            PathStyle::Mount => format!("sessions/{sid}/subagents/agent-{aid}.jsonl"),
        }
    }
    /// A file under the session's archive root.
    fn archive(self, sid: &str, rel: &str) -> String {
        match self {
            PathStyle::Root => format!("noa/{sid}/{rel}"),
            PathStyle::Mount => format!("sessions/{sid}/{rel}"),
        }
    }
}

/// A whole audit.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    pub findings: Vec<Finding>,
    /// Each replayed session's peak (boundedness, `normafs audit` only).
    pub peaks: Vec<crate::timeline::Peak>,
    /// Replayed sessions without a request.
    pub quiet: Vec<String>,
}

impl Audit {
    fn push(
        &mut self,
        severity: Severity,
        code: &'static str,
        path: String,
        line: Option<u64>,
        message: String,
    ) {
        self.findings.push(Finding {
            severity,
            code,
            path,
            line,
            message,
        });
    }

    /// The finding that the settings file `path` could not be used, for `why`.
    pub fn settings_unreadable(&mut self, path: String, why: &str) {
        self.push(
            Severity::Error,
            SETTINGS_UNREADABLE,
            path,
            None,
            format!(
                "{why}; the mount goes on with the settings it had before this change (mend the \
                 file and they apply)"
            ),
        );
    }

    /// Take `other`'s findings and peaks.
    pub fn absorb(&mut self, other: Audit) {
        self.findings.extend(other.findings);
        self.peaks.extend(other.peaks);
        self.quiet.extend(other.quiet);
    }

    /// Sort by path, then line (findings without a line first), then code and message.
    pub fn sort(&mut self) {
        self.findings.sort_by(|a, b| {
            (a.path.as_str(), a.line, a.code, a.message.as_str()).cmp(&(
                b.path.as_str(),
                b.line,
                b.code,
                b.message.as_str(),
            ))
        });
        self.peaks.sort_by(|a, b| a.session.cmp(&b.session));
        self.quiet.sort();
    }

    /// (errors, warnings, info)
    pub fn counts(&self) -> (usize, usize, usize) {
        let c = |s: Severity| self.findings.iter().filter(|f| f.severity == s).count();
        (c(Severity::Error), c(Severity::Warn), c(Severity::Info))
    }

    pub fn has_errors(&self) -> bool {
        self.counts().0 > 0
    }

    /// The `audit.txt` bytes.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for f in &self.findings {
            s.push_str(&f.to_line());
            s.push('\n');
        }
        for p in &self.peaks {
            s.push_str(&peak_line(p));
            s.push('\n');
        }
        for sid in &self.quiet {
            s.push_str(&format!("peak {sid}: no request\n"));
        }
        let (e, w, i) = self.counts();
        s.push_str(&format!("summary: {e} errors, {w} warnings, {i} info\n"));
        s
    }

    /// The `--json` form: `{"findings":[…],"summary":{…}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let (e, w, i) = self.counts();
        json!({
            "findings": self.findings.iter().map(|f| json!({
                "severity": f.severity.as_str(),
                "code": f.code,
                "path": f.path,
                "line": f.line,
                "message": f.message,
            })).collect::<Vec<_>>(),
            "summary": {"errors": e, "warnings": w, "info": i},
            "peaks": self.peaks.iter().map(|p| json!({
                "session": p.session,
                "fraction": (p.fraction * 10_000.0).round() / 10_000.0,
                "tokens": p.tokens,
                "window": p.window,
                "request": p.request,
                "messages": p.message,
                "band": p.band.as_str(),
                "overTruncate": p.over_truncate,
                "overWindow": p.over_window,
            })).chain(self.quiet.iter().map(|sid| json!({"session": sid, "request": null})))
            .collect::<Vec<_>>(),
        })
    }
}

fn transcript_findings(a: &mut Audit, t: &Transcript, path: &str) {
    for p in t.problems() {
        a.push(
            p.severity(),
            p.code(),
            path.to_string(),
            Some(p.line),
            p.message,
        );
    }
}

/// The 1-based line of the first occurrence of `needle` in `text`.
fn line_of(text: &str, needle: &str) -> Option<u64> {
    let at = text.find(needle)?;
    Some(text[..at].bytes().filter(|&b| b == b'\n').count() as u64 + 1)
}

/// Line numbers in a `state.json`, found without rescanning the file for every finding (a
/// state with 100,000 dangling refs has 100,000 findings): a line holding exactly one entry
/// (`"m0001": "<uuid>",`, the pretty form) is looked up by its content; any other needle is
/// searched for.
struct StateLines<'a> {
    text: &'a str,
    entries: HashMap<&'a str, u64>,
}

impl<'a> StateLines<'a> {
    fn new(text: &'a str) -> Self {
        let mut entries = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let entry = line.trim().trim_end_matches(',');
            entries.entry(entry).or_insert(i as u64 + 1);
        }
        StateLines { text, entries }
    }

    fn line_of(&self, needle: &str) -> Option<u64> {
        match self.entries.get(needle) {
            Some(&line) => Some(line),
            None => line_of(self.text, needle),
        }
    }
}

/// An `archiveRel` that stays inside the archive root: relative, no `..`, no empty parts.
pub fn safe_rel(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.starts_with('/')
        && rel
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
        && !rel.contains('\0')
}

/// At most this many examples are named in one finding that stands for many.
const EXAMPLES: usize = 5;

fn examples(items: &[String]) -> String {
    let mut s = items
        .iter()
        .take(EXAMPLES)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > EXAMPLES {
        s.push_str(&format!(" and {} more", items.len() - EXAMPLES));
    }
    s
}

/// The session an absolute `archivePath` lies in (`<base>/<sid>/tier<N>/<file>`), when it is
/// not `own`.
fn other_session<'p>(archive_path: &'p str, own: &str) -> Option<&'p str> {
    let mut parts = archive_path.rsplit('/');
    let (_file, tier, sid) = (parts.next()?, parts.next()?, parts.next()?);
    (crate::store::session::is_tier_dir(tier) && sid != own && !sid.is_empty()).then_some(sid)
}
