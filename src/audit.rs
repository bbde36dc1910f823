//! The audit (SPEC 9): every integrity problem of a session root, one finding a line,
//! `<severity> <code> <path>[:<line>] — <message>`, sorted by path then line, and a summary.
//!
//! Codes beyond the SPEC catalogue (normafs choices): `journal.malformed` (error: a committed
//! journal line that is not an entry), `journal.torn-tail` (warn: an uncommitted batch, cut by
//! the next ctl command), `transcript.unreadable` / `state.unreadable`-style I/O failures are
//! reported under the nearest catalogue code with the OS message.

mod bounds;
mod root;
pub use bounds::*;
pub use root::*;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::json;

use crate::config::{Config, NoaConfig};
use crate::format::archive;
pub use crate::format::loader::Severity;
use crate::format::loader::Transcript;
use crate::format::memory;
use crate::format::state::StateLoadError;
use crate::noa::session::Projection;
use crate::noa::{pipeline, protect, refs};
use crate::store::root::{Discovery, RootPaths};
use crate::store::session::SessionData;

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

/// Audit one session into `a`: its transcripts, journal, `state.json` and archives (SPEC 9);
/// the root's paths find archives of inherited blocks in the sessions they live in.
pub fn audit_session_in(
    a: &mut Audit,
    s: &SessionData,
    cfg: &NoaConfig,
    style: PathStyle,
    paths: &RootPaths,
) {
    audit_session_with(a, s, None, cfg, style, paths);
}

/// [`audit_session_in`] with the projection of the session's messages when the caller has
/// it already (a mount computing the session's other files from the same transcript).
pub fn audit_session_with(
    a: &mut Audit,
    s: &SessionData,
    projection: Option<&Projection<'_>>,
    cfg: &NoaConfig,
    style: PathStyle,
    paths: &RootPaths,
) {
    let sid = &s.sid;
    transcript_findings(a, &s.transcript, &style.transcript(sid));
    for (aid, _, t) in &s.sidechains {
        transcript_findings(a, t, &style.sidechain(sid, aid));
    }

    let spath = style.archive(sid, "state.json");
    let state_text = if s.state.exists {
        crate::format::read_no_follow(&s.archive_root.join("state.json"))
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_default()
    } else {
        String::new()
    };
    let lines = StateLines::new(&state_text);
    let block_line = |name: &str| lines.line_of(&format!("\"blockId\": \"{name}\""));
    let journal_path = style.archive(sid, "ctl.jsonl");
    let journal = match &s.journal {
        Ok(j) => Some(j),
        Err(e) => {
            a.push(
                Severity::Error,
                "journal.malformed",
                journal_path.clone(),
                None,
                format!("cannot read the journal: {e}"),
            );
            None
        }
    };
    if let Some(j) = journal {
        for (line, msg) in &j.malformed {
            a.push(
                Severity::Error,
                "journal.malformed",
                journal_path.clone(),
                Some(*line),
                format!("not a journal entry: {msg}"),
            );
        }
        if j.torn_tail.is_some() {
            let line = j.entries.len() as u64 + j.malformed.len() as u64 + 1;
            a.push(
                Severity::Warn,
                "journal.torn-tail",
                journal_path.clone(),
                Some(line),
                "an uncommitted batch (torn last line); the next ctl command cuts it".into(),
            );
        }
    }

    match &s.state.error {
        Some(e) => {
            let code = match e {
                StateLoadError::Version(_) => "state.version",
                StateLoadError::Malformed(_) | StateLoadError::Io(_) => "state.malformed",
            };
            a.push(
                Severity::Error,
                code,
                spath.clone(),
                None,
                format!("{e}; the runtime starts this session from an empty state (run `rebuild` to recover)"),
            );
        }
        None if !s.state.exists && s.transcript_exists => {
            a.push(
                Severity::Info,
                "state.missing",
                spath.clone(),
                None,
                "no state.json: nothing compressed yet".into(),
            );
        }
        None => {}
    }
    let usable = s.state.exists && s.state.error.is_none();
    let st = &s.state.state;
    if usable && st.session_id != *sid {
        a.push(
            Severity::Error,
            "state.session-mismatch",
            spath.clone(),
            lines.line_of("\"sessionId\""),
            format!("sessionId is {:?}, the session is {sid:?}", st.session_id),
        );
    }
    if usable {
        let unknown = st.unknown_keys();
        if !unknown.is_empty() {
            a.push(
                Severity::Warn,
                "state.unknown-keys",
                spath.clone(),
                None,
                format!(
                    "keys the runtime does not know and drops at its next save: {}",
                    examples(&unknown)
                ),
            );
        }
    }

    // The projection and the refs a view hands out: what the state's refs and ranges name.
    // Only a state with refs or blocks needs the projection (most sessions have neither, and
    // hashing every content block is most of a session's audit).
    let needed = !st.message_refs.by_raw.is_empty()
        || !st.message_refs.by_ref.is_empty()
        || !st.blocks().is_empty();
    let own;
    let p = match projection {
        Some(p) if needed => p,
        _ => {
            own = Projection::new(if needed { s.messages() } else { Vec::new() });
            &own
        }
    };
    let (slots, _) = refs::assign(&p.cores, st, |c| protect::is_hard(c, cfg));
    let present: HashSet<&str> = p.cores.iter().map(|c| c.id.as_ref()).collect();
    let numbered: HashSet<u32> = slots.iter().filter_map(|s| s.number()).collect();

    // Ref maps.
    let refs_map = &st.message_refs;
    let mut disagree: Vec<(String, Option<u64>)> = Vec::new();
    let mut raws: Vec<(&String, &String)> = refs_map.by_raw.iter().collect();
    raws.sort();
    for (raw, r) in raws {
        if r != refs::BLOCKED && refs_map.by_ref.get(r) != Some(raw) {
            disagree.push((
                format!("byRaw maps {raw} to {r} but byRef does not map {r} back"),
                lines.line_of(&format!("\"{raw}\": \"{r}\"")),
            ));
        }
    }
    let mut by_ref: Vec<(&String, &String)> = refs_map.by_ref.iter().collect();
    by_ref.sort();
    for (r, raw) in &by_ref {
        if refs_map.by_raw.get(*raw) != Some(*r) {
            disagree.push((
                format!("byRef maps {r} to {raw} but byRaw does not map {raw} back"),
                lines.line_of(&format!("\"{r}\": \"{raw}\"")),
            ));
        }
    }
    for (m, line) in disagree {
        a.push(Severity::Error, "state.ref-map", spath.clone(), line, m);
    }
    if s.transcript_exists || !p.msgs.is_empty() {
        let mut dangling: Vec<String> = refs_map
            .by_raw
            .iter()
            .filter(|(raw, _)| !present.contains(raw.as_str()))
            .map(|(raw, r)| format!("{r} ({raw})"))
            .collect();
        dangling.sort();
        if !dangling.is_empty() {
            a.push(
                Severity::Warn,
                "state.dangling-ref",
                spath.clone(),
                None,
                format!(
                    "{} recorded ref(s) name content that is not in the transcript's projection: {}",
                    dangling.len(),
                    examples(&dangling)
                ),
            );
        }
    }

    let blocks = st.blocks();
    let known_ref = |r: &str| {
        refs_map.by_ref.contains_key(r) || refs::parse_ref(r).is_some_and(|n| numbered.contains(&n))
    };
    let by_name: HashMap<&str, usize> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| (b.block_id.as_str(), i))
        .collect();
    let tool_ids: HashSet<&str> = p
        .cores
        .iter()
        .filter(|c| c.kind == crate::noa::content::Kind::ToolCall)
        .map(|c| c.call)
        .collect();
    let journal_calls: HashSet<&str> = journal
        .map(|j| j.entries.iter().map(|(_, e)| e.call_id.as_str()).collect())
        .unwrap_or_default();
    let live = if blocks.is_empty() {
        Vec::new()
    } else {
        pipeline::prune_only(&p.cores, st, cfg, &crate::noa::session::runtime_path).active
    };
    let absorbed: HashSet<&str> = blocks
        .iter()
        .flat_map(|b| b.direct_block_ids.iter().map(String::as_str))
        .collect();
    // Archives of committed journal batches are not orphans, even before a roll-forward.
    let mut referenced: HashSet<String> = journal
        .map(|j| {
            j.entries
                .iter()
                .flat_map(|(_, e)| e.blocks.iter())
                .filter_map(|b| b.get("archiveRel").and_then(|v| v.as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let mut max_block = 0u32;
    let mut inherited_from: Vec<String> = Vec::new();
    let mut ctl_made: Vec<String> = Vec::new();
    let mut moved: Vec<String> = Vec::new();

    for b in blocks {
        let name = b.block_id.as_str();
        let line = block_line(name);
        max_block = max_block.max(refs::parse_block_id(name).unwrap_or(0));
        for (label, r) in [("startRef", &b.start_ref), ("endRef", &b.end_ref)] {
            if !known_ref(r) {
                a.push(
                    Severity::Error,
                    "state.block-range",
                    spath.clone(),
                    line,
                    format!("{name}: {label} {r:?} is not a known ref"),
                );
            }
        }
        if let (Some(x), Some(y)) = (refs::parse_ref(&b.start_ref), refs::parse_ref(&b.end_ref)) {
            if x > y {
                a.push(
                    Severity::Error,
                    "state.block-range",
                    spath.clone(),
                    line,
                    format!(
                        "{name}: range {}..{} ends before it starts",
                        b.start_ref, b.end_ref
                    ),
                );
            }
        }
        for child in &b.direct_block_ids {
            if !by_name.contains_key(child.as_str()) {
                a.push(
                    Severity::Error,
                    "state.unknown-block",
                    spath.clone(),
                    line,
                    format!("{name} absorbed {child}, which is not in blocks"),
                );
            }
        }
        if b.active
            && !absorbed.contains(name)
            && !b
                .effective_message_ids
                .iter()
                .any(|id| present.contains(id.as_str()))
        {
            a.push(
                Severity::Warn,
                "state.dead-block",
                spath.clone(),
                line,
                format!("{name} is active but none of its messages is in the transcript; the view leaves it out"),
            );
        }
        let call = b.compress_call_id.as_str();
        if call.is_empty() || (!tool_ids.contains(call) && !journal_calls.contains(call)) {
            a.push(Severity::Warn, "state.unreplayable", spath.clone(), line, format!("{name}: compressCallId {call:?} is neither in the transcript nor in the journal; a rebuild cannot reproduce it"));
        } else if !tool_ids.contains(call) {
            ctl_made.push(name.to_string());
        }
        if let Some(other) = other_session(&b.archive_path, sid) {
            if !inherited_from.iter().any(|x| x == other) {
                inherited_from.push(other.to_string());
            }
        }

        // The block's archive (SPEC 2.3 lookup order).
        if !b.archive_rel.is_empty() && !safe_rel(&b.archive_rel) {
            a.push(
                Severity::Error,
                "archive.mismatch",
                spath.clone(),
                line,
                format!(
                    "{name}: archiveRel {:?} leaves the archive root",
                    b.archive_rel
                ),
            );
            continue;
        }
        let found = crate::store::session::locate_archive(paths, sid, b);
        let apath = if b.archive_rel.is_empty() {
            spath.clone()
        } else {
            style.archive(sid, &b.archive_rel)
        };
        let Some(found) = found else {
            a.push(
                Severity::Error,
                "archive.missing",
                apath,
                None,
                format!(
                    "the archive of {name} cannot be found (archiveRel {:?}, archivePath {:?})",
                    b.archive_rel, b.archive_path
                ),
            );
            continue;
        };
        if found.starts_with(&s.archive_root) {
            if let Ok(rel) = found.strip_prefix(&s.archive_root) {
                referenced.insert(rel.to_string_lossy().into_owned());
            }
        }
        if Path::new(&b.archive_path) != found
            && std::path::absolute(&found).ok().as_deref() != Some(Path::new(&b.archive_path))
        {
            moved.push(name.to_string());
        }
        let text = match crate::format::read_no_follow(&found)
            .map_err(|e| e.to_string())
            .and_then(|b| String::from_utf8(b).map_err(|_| "not valid UTF-8".to_string()))
        {
            Ok(t) => t,
            Err(e) => {
                a.push(
                    Severity::Error,
                    "archive.corrupt",
                    apath,
                    None,
                    format!("cannot read: {e}"),
                );
                continue;
            }
        };
        match archive::parse(&text) {
            Err(e) => a.push(
                Severity::Error,
                "archive.corrupt",
                apath,
                Some(1),
                e.to_string(),
            ),
            Ok(parsed) => {
                if parsed.body_sha256_ok == Some(false) {
                    a.push(Severity::Error, "archive.corrupt", apath.clone(), None, "body_sha256 does not match the body (the archive was changed after it was written)".into());
                }
                let f = &parsed.frontmatter;
                let mut diffs = Vec::new();
                if f.block != name {
                    diffs.push(format!("block {} (state: {name})", f.block));
                }
                if f.tier != Some(b.tier) {
                    diffs.push(format!("tier {:?} (state: {})", f.tier, b.tier));
                }
                let range = (b.start_ref.clone(), b.end_ref.clone());
                if f.range.as_ref() != Some(&range) {
                    let (fs, fe) = f.range.clone().unwrap_or_default();
                    diffs.push(format!(
                        "range {fs}-{fe} (state: {}-{})",
                        b.start_ref, b.end_ref
                    ));
                }
                let file = found
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if let Some((fs, fe)) = &f.range {
                    if file != archive::file_name(&f.block, fs, fe) {
                        diffs.push(format!("file name {file} does not match its frontmatter"));
                    }
                }
                if !diffs.is_empty() {
                    a.push(
                        Severity::Error,
                        "archive.mismatch",
                        apath.clone(),
                        Some(2),
                        diffs.join("; "),
                    );
                }
                if f.body_sha256.is_none() && text.contains(crate::noa::pipeline::TRUNCATION_MARKER)
                {
                    a.push(Severity::Info, "archive.truncated", apath, None, format!("the runtime archived {name} from an emergency-truncated view; raw/{}-{}.md has the originals", b.start_ref, b.end_ref));
                }
            }
        }
    }

    if !inherited_from.is_empty() {
        a.push(
            Severity::Info,
            "state.inherited",
            spath.clone(),
            None,
            format!(
                "blocks inherited from session(s) {} keep their archives there (a fork)",
                inherited_from.join(", ")
            ),
        );
    }
    if !moved.is_empty() {
        a.push(
            Severity::Info,
            "archive.moved",
            spath.clone(),
            None,
            format!("the archivePath of {} block(s) ({}) is not where the archive is (the root was moved or copied); normafs finds them by archiveRel", moved.len(), examples(&moved)),
        );
    }
    if !ctl_made.is_empty() {
        a.push(
            Severity::Info,
            "state.runtime-unaware",
            spath.clone(),
            None,
            format!("{} block(s) made by normafs's ctl ({}): the runtime's own rebuild knows nothing of the journal and would drop them", ctl_made.len(), examples(&ctl_made)),
        );
    }

    if usable && !blocks.is_empty() && st.next_block_id <= max_block as i64 {
        a.push(
            Severity::Error,
            "state.next-block-id",
            spath.clone(),
            lines.line_of("\"nextBlockId\""),
            format!(
                "nextBlockId {} is not above every block number (highest b{max_block})",
                st.next_block_id
            ),
        );
    }

    // Overlap of live blocks, one finding per pair: two blocks that both newly took one
    // content message. (Effective coverage may overlap: a block takes the visible reasoning an
    // earlier block's span kept, and absorbing blocks repeat their children's.)
    let mut first_cover: HashMap<&str, usize> = HashMap::new();
    let mut pairs: Vec<(usize, usize, String, usize)> = Vec::new();
    for (bi, b) in blocks.iter().enumerate() {
        if !live.get(bi).copied().unwrap_or(false) {
            continue;
        }
        for id in &b.direct_message_ids {
            match first_cover.get(id.as_str()) {
                Some(&other) => match pairs.iter_mut().find(|p| p.0 == other && p.1 == bi) {
                    Some(p) => p.3 += 1,
                    None => {
                        let r = refs_map
                            .by_raw
                            .get(id)
                            .cloned()
                            .unwrap_or_else(|| id.clone());
                        pairs.push((other, bi, r, 1));
                    }
                },
                None => {
                    first_cover.insert(id.as_str(), bi);
                }
            }
        }
    }
    for (x, y, r, n) in pairs {
        let (bx, by) = (&blocks[x].block_id, &blocks[y].block_id);
        let more = if n > 1 {
            format!(" and {} more messages", n - 1)
        } else {
            String::new()
        };
        a.push(
            Severity::Error,
            "state.overlap",
            spath.clone(),
            block_line(by),
            format!("live blocks {bx} and {by} both took {r}{more}"),
        );
    }

    // Stats: the runtime counts what it made (a fork's count starts again at zero).
    if usable && inherited_from.is_empty() {
        let sum: i64 = blocks.iter().map(|b| b.compressed_tokens).sum();
        let count = blocks.len() as i64;
        if st.stats.tokens_compressed != sum || st.stats.compression_count != count {
            a.push(Severity::Warn, "state.stats", spath.clone(), lines.line_of("\"stats\": {"), format!("stats say {} tokens in {} compressions; the blocks hold {sum} tokens in {count}", st.stats.tokens_compressed, st.stats.compression_count));
        }
    }

    // Journal batches not in state.
    if let Some(j) = journal {
        let calls: HashSet<&str> = blocks.iter().map(|b| b.compress_call_id.as_str()).collect();
        for (line, e) in &j.entries {
            if !calls.contains(e.call_id.as_str()) {
                a.push(Severity::Warn, "state.behind-journal", journal_path.clone(), Some(*line), format!("committed batch {} is missing from state.json; the next ctl command or rebuild rolls it forward", e.call_id));
            }
        }
    }

    for f in &s.archives {
        if !referenced.contains(&f.rel) {
            a.push(
                Severity::Warn,
                "archive.orphan",
                style.archive(sid, &f.rel),
                None,
                "no block points to this archive".into(),
            );
        }
    }
    for d in &s.debris {
        a.push(Severity::Warn, "archive.temp-debris", style.archive(sid, d), None, "a leftover temp file of an interrupted write (normafs's or the runtime's); the next ctl command removes it".into());
    }
}
