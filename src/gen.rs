//! `normafs gen`: a deterministic generator of synthetic session roots in the runtime's own
//! dialect (SPEC 1, 2), for tests, demos and benchmarks.
//!
//! Every file is what the runtime would have written:
//! - transcripts are chains of `message` records (32-hex uuids, `parent_uuid` from the second
//!   record on, UTC RFC 3339 times with Go's trimmed fraction); an assistant turn is one record
//!   of thinking (signed), text and tool_use blocks, its results one user record of
//!   `tool_result` blocks whose `content` is an array of text blocks; subagents write sidechain
//!   transcripts; one session in seven holds a built-in compaction marker with the kept tail
//!   recorded a second time;
//! - Compress calls are made the way the runtime's model makes them: at spaced points the
//!   generator takes the view a resumed runtime would send ([`session::turn`]), picks ranges
//!   from the runtime's recommendation ([`recommend::recommend`]) or, once enough tier-1
//!   blocks are live, a block-endpoint range `b<i>..b<j>`, records the tool_use with the
//!   runtime's Compress input, applies it with [`compress::apply`] exactly as
//!   [`crate::noa::rebuild::rebuild`] replays a transcript call, and records the panel as the
//!   tool result (failed calls too: a short summary, an unknown ref). So a rebuild from history
//!   gives back the very `state.json` written. Like a model that reads the panels, it sends
//!   only ranges whose blocks overlap no live block (tried first, see `Session::disjoint`);
//! - `noa/<sid>/state.json` ([`State::to_json`]) only for sessions that compressed, every
//!   archive in the runtime's layout and labels (without normafs's `call`/`body_sha256` keys:
//!   the runtime wrote them), memory files and `MEMORY.md` in the runtime's bytes (one with a
//!   Unicode-only name, the file `.md`).
//!
//! Times: a transcript's modification time is set to its last record's timestamp, so no
//! generated session looks live to ctl (SPEC 6: a transcript written within `live_seconds`)
//! and a ctl command works on it at once; memory files get fixed times one minute apart (scan
//! order, and so `MEMORY.md`, is reproducible). Generated time starts at 2025-06-02T09:00:00Z,
//! sessions an hour apart.
//!
//! Output depends only on the options and the root path (archive paths are absolute): the same
//! options give byte-identical files. Randomness comes from a self-contained splitmix64 stream
//! per session.
//!
//! Cost: each Compress attempt projects the session so far twice (O(messages)), so a session
//! makes at most [`MAX_ATTEMPTS`] of them, and a session longer than
//! [`MAX_COMPRESSED_MESSAGES`] messages (the benchmark's big one) none at all.
//!
//! Choices: every main transcript has exactly `messages` message records and ends with an
//! assistant answer (a prompt gets a user follow-up when the count left is even); about
//! a fifth of the sessions never compress and get no `noa/<sid>/` at all (the audit shows
//! `state.missing` info for them).

mod damage;
mod text;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{json, Map, Value};

use crate::config::NoaConfig;
use crate::format::archive::{self, Labels};
use crate::format::memory;
use crate::format::state::State;
use crate::format::transcript::{
    CompactBoundaryPart, Content, Message, RawJson, Record, ThinkingPart, ToolResultContent,
    ToolResultPart, ToolUsePart, Usage,
};
use crate::noa::compress::{self, Applied, Placement};
use crate::noa::content::{self, Origin, COMPRESS_TOOL};
use crate::noa::pipeline::{self, Count, Turn};
use crate::noa::session::{self, Projection};
use crate::noa::{args, recommend, refs, tokens};

use text::Rng;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenOptions {
    /// Clean sessions to write.
    pub sessions: usize,
    /// Messages per main transcript (exactly).
    pub messages: usize,
    pub seed: u64,
    /// Also write one damaged session (or file) per code of the SPEC 9 catalogue gen can make.
    pub corrupt: bool,
    /// Give some sessions sidechain transcripts of subagents.
    pub subagents: bool,
    /// Memory files to write (plus `MEMORY.md`).
    pub memories: usize,
    /// Largest tool result, in bytes.
    pub max_result_bytes: usize,
    /// The noa settings the Compress calls are made with (the runtime's, by default).
    pub config: NoaConfig,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            sessions: 8,
            messages: 200,
            seed: 1,
            corrupt: false,
            subagents: true,
            memories: 6,
            max_result_bytes: 300_000,
            config: NoaConfig::default(),
        }
    }
}

/// One injected damage: the audit finding it must produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The SPEC 9 code, e.g. `transcript.torn-tail`.
    pub code: &'static str,
    /// Relative to the root: `transcripts/<sid>.jsonl`, `noa/<sid>/state.json` (state.*),
    /// `noa/<sid>/<archiveRel>` (archive.*), `noa/<sid>/ctl.jsonl` (journal.*),
    /// `memory/<file>`, or the bad entry itself.
    pub path: String,
    /// 1-based line of the damaged line, when the damage is one line.
    pub line: Option<usize>,
    /// What was done, for people.
    pub note: String,
}

/// What [`generate`] wrote.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenReport {
    /// Sessions written (clean and damaged).
    pub sessions: usize,
    /// Ids of the clean sessions, in order.
    pub clean_sessions: Vec<String>,
    /// Ids of the damaged sessions, in order.
    pub corrupt_sessions: Vec<String>,
    /// Message records in main transcripts.
    pub messages: usize,
    /// Sidechain transcripts and their message records.
    pub subagents: usize,
    pub subagent_messages: usize,
    /// Compress calls whose panel reports blocks.
    pub compress_calls: usize,
    /// Compress calls recorded with a panel that made no block (the runtime refused them).
    pub refused_calls: usize,
    /// Blocks in the written `state.json` files (all tiers, active or not).
    pub blocks: usize,
    /// Memory files written (not counting `MEMORY.md`).
    pub memories: usize,
    pub files: usize,
    pub bytes: u64,
    /// With `corrupt`: every damage injected and the finding it must produce.
    pub damages: Vec<Damage>,
}

impl GenReport {
    /// One line for people: what was written.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "wrote {} sessions ({} messages, {} compress calls, {} refused, {} blocks, {} \
             subagents), {} memories: {} files, {} bytes",
            self.sessions,
            self.messages,
            self.compress_calls,
            self.refused_calls,
            self.blocks,
            self.subagents,
            self.memories,
            self.files,
            self.bytes
        );
        if !self.damages.is_empty() {
            s.push_str(&format!("; {} damages injected", self.damages.len()));
        }
        s
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error("{0} is not empty; gen writes only into an empty or new directory")]
    NotEmpty(PathBuf),
    #[error("{0} exists and is not a directory")]
    NotADirectory(PathBuf),
    #[error("{0} is not valid UTF-8; archive paths must be")]
    NonUtf8Path(PathBuf),
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot build the {code} damage: {reason}")]
    Damage { code: &'static str, reason: String },
}

/// 2025-06-02T09:00:00Z, the start of generated time.
const BASE_SECS: i64 = 1_748_854_800;
const NANOS: i64 = 1_000_000_000;
/// Sessions start an hour apart.
const SESSION_GAP_SECS: i64 = 3600;

/// Most Compress attempts of one session (each projects the session so far twice).
pub const MAX_ATTEMPTS: usize = 24;
/// Sessions longer than this never compress (the projections would cost minutes).
pub const MAX_COMPRESSED_MESSAGES: usize = 20_000;

/// Write a synthetic session root at `root` (which must be empty or not exist).
///
/// `progress(done, total)` is called once before the first session and after each session.
pub fn generate(
    root: &Path,
    opts: &GenOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<GenReport, GenError> {
    generate_profiled(root, opts, &[], progress)
}

/// [`generate`], the first sessions made to `profiles` (the others drawn at random).
pub(crate) fn generate_profiled(
    root: &Path,
    opts: &GenOptions,
    profiles: &[Profile],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<GenReport, GenError> {
    let root = prepare_root(root)?;
    let mut out = Out {
        root,
        bytes: 0,
        files: 0,
    };
    for dir in ["transcripts", "memory", "noa"] {
        out.mkdir(dir)?;
    }
    let mut report = GenReport::default();
    let damages: Vec<&'static str> = if opts.corrupt {
        damage::session_damages()
    } else {
        Vec::new()
    };
    let total = opts.sessions + damages.len();
    progress(0, total);

    for i in 0..opts.sessions {
        let mut spec = clean_spec(opts, i);
        if let Some(&p) = profiles.get(i) {
            let mut rng = Rng::derive(opts.seed, &format!("profile/{}", spec.sid));
            spec = profiled(spec, p, &mut rng);
        }
        let s = build(
            &spec,
            &opts.config,
            &out.archive_root(&spec.sid)?,
            opts.seed,
        );
        write_session(&mut out, &s, &mut report)?;
        report.clean_sessions.push(spec.sid);
        progress(i + 1, total);
    }
    for (k, &code) in damages.iter().enumerate() {
        let slot = opts.sessions + k;
        let found = damage::session(code, opts, slot, &mut out, &mut report)?;
        report.damages.extend(found);
        progress(slot + 1, total);
    }

    write_memories(&mut out, opts, &mut report)?;
    if opts.corrupt {
        let found = damage::root_entries(&mut out, opts)?;
        report.damages.extend(found);
    }
    report.bytes = out.bytes;
    report.files = out.files;
    Ok(report)
}

/// Create `root` (or check that it is an empty directory); return its absolute path.
fn prepare_root(root: &Path) -> Result<PathBuf, GenError> {
    let io = |source| GenError::Io {
        path: root.to_path_buf(),
        source,
    };
    match std::fs::metadata(root) {
        Ok(meta) if !meta.is_dir() => return Err(GenError::NotADirectory(root.to_path_buf())),
        Ok(_) => {
            if std::fs::read_dir(root).map_err(io)?.next().is_some() {
                return Err(GenError::NotEmpty(root.to_path_buf()));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(root).map_err(io)?
        }
        Err(e) => return Err(io(e)),
    }
    let abs = std::path::absolute(root).map_err(io)?;
    if abs.to_str().is_none() {
        return Err(GenError::NonUtf8Path(abs));
    }
    Ok(abs)
}

/// The output directory: writes files and counts them.
pub(crate) struct Out {
    root: PathBuf,
    bytes: u64,
    files: usize,
}

impl Out {
    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn mkdir(&mut self, rel: &str) -> Result<(), GenError> {
        let path = self.path(rel);
        std::fs::create_dir_all(&path).map_err(|source| GenError::Io { path, source })
    }

    /// Write `bytes` at `rel` (relative to the root), creating parent directories.
    fn write(&mut self, rel: &str, bytes: &[u8]) -> Result<PathBuf, GenError> {
        let path = self.path(rel);
        let io = |source| GenError::Io {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&path, bytes).map_err(io)?;
        self.bytes += bytes.len() as u64;
        self.files += 1;
        Ok(path)
    }

    /// The absolute archive root of a session, as `archivePath` holds it.
    fn archive_root(&self, sid: &str) -> Result<String, GenError> {
        let path = self.root.join("noa").join(sid);
        path.to_str()
            .map(str::to_string)
            .ok_or(GenError::NonUtf8Path(path))
    }
}

/// Set a file's modification time to `ns` (Unix nanoseconds).
fn set_mtime(path: &Path, ns: i64) -> Result<(), GenError> {
    let t = SystemTime::UNIX_EPOCH
        + Duration::new(
            ns.div_euclid(NANOS).max(0) as u64,
            ns.rem_euclid(NANOS) as u32,
        );
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(t))
        .map_err(|source| GenError::Io {
            path: path.to_path_buf(),
            source,
        })
}

/// `s<seed-hex>-<nnnn>`.
fn session_id(seed: u64, i: usize) -> String {
    format!("s{seed:x}-{:04}", i + 1)
}

/// When and how a session calls Compress.
#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    /// Message count of the first attempt.
    pub first_at: usize,
    /// Messages between attempts (jittered by ±25%).
    pub interval: usize,
    /// Share of attempts that are deliberately refused (recorded with an error panel).
    pub refuse_percent: usize,
    /// Share of eligible attempts that consolidate live blocks into the next tier.
    pub consolidate_percent: usize,
    /// Most consolidations of the session.
    pub max_consolidations: usize,
    /// Share of tier-1 calls that send every recommended range (else just enough of them).
    pub all_ranges_percent: usize,
    /// No attempt within this many messages of the end.
    pub quiet_tail: usize,
}

impl Schedule {
    /// The schedule of a generated session of `messages` messages.
    fn random(rng: &mut Rng, messages: usize) -> Schedule {
        let interval = (24 + rng.range(0, 16)).max(messages / MAX_ATTEMPTS);
        Schedule {
            first_at: interval,
            interval,
            refuse_percent: 8,
            consolidate_percent: 60,
            max_consolidations: 2,
            all_ranges_percent: 40,
            quiet_tail: 0,
        }
    }
}

/// A session made for `normafs demo` rather than drawn at random.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Profile {
    /// Compresses often, consolidates once enough tier-1 blocks are live, and leaves its last
    /// third uncompressed (so a ctl `compress` has something to take).
    Showcase,
    /// Never compresses.
    Plain,
    /// A built-in compaction marker, then Compress calls after it.
    Marker,
}

/// One session to build.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub sid: String,
    pub messages: usize,
    pub start_ns: i64,
    pub max_result_bytes: usize,
    /// Most subagents (Task calls with a sidechain transcript).
    pub subagents: usize,
    pub compress: Option<Schedule>,
    /// Record a built-in compaction marker at this share (percent) of the messages.
    pub marker_at_percent: Option<usize>,
}

fn clean_spec(opts: &GenOptions, i: usize) -> Spec {
    let sid = session_id(opts.seed, i);
    let mut rng = Rng::derive(opts.seed, &format!("spec/{sid}"));
    let compress = (rng.percent(80) && opts.messages <= MAX_COMPRESSED_MESSAGES)
        .then(|| Schedule::random(&mut rng, opts.messages));
    let subagents = if opts.subagents && rng.percent(35) {
        rng.range(1, 2)
    } else {
        0
    };
    Spec {
        start_ns: start_ns(i, &mut rng),
        sid,
        messages: opts.messages,
        max_result_bytes: opts.max_result_bytes,
        subagents,
        compress,
        marker_at_percent: (i % 7 == 3).then_some(40),
    }
}

/// A clean spec made to a profile.
fn profiled(mut spec: Spec, profile: Profile, rng: &mut Rng) -> Spec {
    let m = spec.messages;
    match profile {
        Profile::Showcase => {
            spec.compress = Some(Schedule {
                first_at: 20,
                interval: 12,
                refuse_percent: 10,
                consolidate_percent: 100,
                max_consolidations: 1,
                all_ranges_percent: 50,
                quiet_tail: m / 3,
            });
            spec.marker_at_percent = None;
        }
        Profile::Plain => {
            spec.compress = None;
            spec.marker_at_percent = None;
        }
        Profile::Marker => {
            spec.compress = Some(Schedule::random(rng, m));
            spec.marker_at_percent = Some(40);
        }
    }
    spec
}

/// Start time of the session in slot `i`.
fn start_ns(i: usize, rng: &mut Rng) -> i64 {
    let secs = BASE_SECS + (i as i64) * SESSION_GAP_SECS + rng.range(0, 600) as i64;
    secs * NANOS + rng.range(0, 999_999_999) as i64
}

/// RFC 3339 in UTC as Go writes `time.RFC3339Nano`: the fraction's trailing zeros trimmed
/// (none at all on a whole second).
pub(crate) fn rfc3339(ns: i64) -> String {
    let Some(t) = chrono::DateTime::from_timestamp(ns.div_euclid(NANOS), 0) else {
        return String::new();
    };
    let mut s = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let frac = ns.rem_euclid(NANOS);
    if frac != 0 {
        let digits = format!("{frac:09}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// RFC 3339 to the second (an archive's `created`) and Unix seconds (a block's `createdAt`).
fn seconds(ns: i64) -> (String, i64) {
    let secs = ns.div_euclid(NANOS);
    (rfc3339(secs * NANOS), secs)
}

/// A Compress call recorded with a panel that reports blocks.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub call_id: String,
}

/// What to write as `state.json`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StateFile {
    /// The built state, when it has blocks.
    Auto,
    /// None.
    Skip,
    /// These bytes.
    Raw(String),
}

/// One range of a Compress call as the model writes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Want {
    pub start: String,
    pub end: String,
    pub summary: String,
    /// Empty: no topic.
    pub topic: String,
}

/// The runtime's Compress input, `{"content":[{"startId","endId","summary","topic"?}]}`, in
/// the order the tool's schema lists the keys.
pub(crate) fn compress_input(wants: &[Want]) -> String {
    let content: Vec<Value> = wants
        .iter()
        .map(|w| {
            let mut m = Map::new();
            m.insert("startId".into(), json!(w.start));
            m.insert("endId".into(), json!(w.end));
            m.insert("summary".into(), json!(w.summary));
            if !w.topic.is_empty() {
                m.insert("topic".into(), json!(w.topic));
            }
            Value::Object(m)
        })
        .collect();
    json!({ "content": content }).to_string()
}

/// A session being built, then written.
pub(crate) struct Session<'a> {
    pub cfg: &'a NoaConfig,
    pub rng: Rng,
    pub sid: String,
    /// The absolute archive root (`archivePath` = root/archiveRel).
    pub archive_root: String,
    agent: Option<String>,
    max_result_bytes: usize,
    pub records: Vec<Record>,
    pub clock_ns: i64,
    context_tokens: u64,
    since_assistant: u64,
    pub messages: usize,
    pub state: State,
    /// `(archiveRel, archive)` of every block: rendered as they are (the runtime's have no
    /// `call`/`body_sha256`, those of ctl batches do).
    pub archives: Vec<(String, archive::Archive)>,
    /// `(agent id, records)`.
    pub sidechains: Vec<(String, Vec<Record>)>,
    pub calls: Vec<Call>,
    pub refused: usize,
    subagent_budget: usize,
    consolidations: usize,
    // What the writer does besides the runtime (damages).
    pub state_file: StateFile,
    /// `(record index, line)`: a raw line written before that record (after the last one
    /// for an index past the end).
    pub garbage: Vec<(usize, String)>,
    /// Written after the last line, without a newline.
    pub torn_tail: Option<String>,
    /// Extra files under the archive root: `(relative path, bytes)`.
    pub noa_extra: Vec<(String, Vec<u8>)>,
    /// The bytes of `ctl.jsonl`, when there is one.
    pub journal: Option<String>,
}

/// The next message of the conversation.
enum Next {
    Prompt,
    Assistant,
    Results(Vec<(String, &'static str)>),
}

/// What a Compress attempt sends.
pub(crate) enum Pick {
    /// Ranges the recommendation offers: tier-1 blocks.
    Ranges(Vec<Want>),
    /// A block-endpoint range that makes a block of the next tier.
    Consolidate(Want),
    /// A batch the runtime refuses.
    Refused(Vec<Want>),
}

impl<'a> Session<'a> {
    pub fn new(
        cfg: &'a NoaConfig,
        rng: Rng,
        sid: &str,
        archive_root: &str,
        start_ns: i64,
    ) -> Session<'a> {
        Session {
            cfg,
            rng,
            sid: sid.to_string(),
            archive_root: archive_root.to_string(),
            agent: None,
            max_result_bytes: 300_000,
            records: Vec::new(),
            clock_ns: start_ns,
            context_tokens: 0,
            since_assistant: 0,
            messages: 0,
            state: State::initial(sid),
            archives: Vec::new(),
            sidechains: Vec::new(),
            calls: Vec::new(),
            refused: 0,
            subagent_budget: 0,
            consolidations: 0,
            state_file: StateFile::Auto,
            garbage: Vec::new(),
            torn_tail: None,
            noa_extra: Vec::new(),
            journal: None,
        }
    }

    /// Advance the clock by a few seconds; the new time.
    pub fn tick(&mut self) -> String {
        let secs = self.rng.range(1, 9) as i64;
        self.clock_ns += secs * NANOS + self.rng.range(0, 999_999_999) as i64;
        rfc3339(self.clock_ns)
    }

    /// A record chained to the previous one, timestamped now.
    pub fn record(&mut self, kind: &str) -> Record {
        let ts = self.tick();
        let sidechain = self.agent.is_some();
        Record {
            uuid: self.rng.uuid().into(),
            parent_uuid: self.records.last().map(|r| r.uuid.clone()),
            session_id: Some(self.sid.as_str().into()),
            agent_id: self.agent.as_deref().map(Box::from),
            is_sidechain: sidechain.then_some(true),
            timestamp: Some(ts.into()),
            kind: kind.to_string().into(),
            message: None,
            usage: None,
            boundary: None,
            extra: Default::default(),
        }
    }

    /// Append a message record (assistant records carry usage); its index in `records`.
    pub fn push_message(&mut self, role: &str, content: Vec<Content>) -> usize {
        let message = Message::new(role, content);
        let t = message_tokens(&message);
        let mut rec = self.record("message");
        if role == "assistant" {
            rec.usage = Some(Some(Box::new(Usage {
                input_tokens: self.rng.range(3, 900) as u64,
                output_tokens: t.max(1),
                cache_read_tokens: self.context_tokens,
                cache_write_tokens: self.since_assistant,
                extra: Default::default(),
            })));
            self.since_assistant = 0;
        } else {
            self.since_assistant += t;
        }
        self.context_tokens += t;
        rec.message = Some(Some(message));
        self.records.push(rec);
        self.messages += 1;
        self.records.len() - 1
    }

    pub fn user_text(&mut self, text: &str) -> usize {
        self.push_message("user", vec![Content::text(text)])
    }

    pub fn prompt(&mut self) -> usize {
        let t = text::user_prompt(&mut self.rng);
        self.user_text(&t)
    }

    pub fn final_answer(&mut self) -> usize {
        let mut content = Vec::new();
        if self.rng.percent(40) {
            content.push(self.thinking());
        }
        content.push(Content::text(&text::assistant_answer(&mut self.rng)));
        self.push_message("assistant", content)
    }

    fn thinking(&mut self) -> Content {
        Content::Thinking(ThinkingPart {
            thinking: text::thinking(&mut self.rng),
            signature: Some(self.rng.signature()),
            extra: Default::default(),
        })
    }

    /// An assistant turn calling one or two tools; the calls to answer.
    pub fn tool_calls(&mut self) -> Vec<(String, &'static str)> {
        let mut content = Vec::new();
        if self.rng.percent(75) {
            content.push(self.thinking());
        }
        if self.rng.percent(60) {
            content.push(Content::text(&text::assistant_preamble(&mut self.rng)));
        }
        let n = if self.rng.percent(12) { 2 } else { 1 };
        let mut calls = Vec::new();
        for _ in 0..n {
            let id = self.rng.tool_id();
            let (tool, input) = if self.subagent_budget > 0 && self.rng.percent(8) {
                let task = text::subagent_task(&mut self.rng);
                (
                    "Task",
                    json!({"description": "Find callers", "prompt": task, "subagent_type": "general-purpose"}),
                )
            } else {
                let tool = self.rng.pick(text::TOOLS);
                (tool, text::tool_input(&mut self.rng, tool))
            };
            content.push(tool_use(&id, tool, &input.to_string()));
            calls.push((id, tool));
        }
        self.push_message("assistant", content);
        calls
    }

    /// The user record answering `calls`.
    pub fn tool_results(&mut self, calls: &[(String, &'static str)]) -> usize {
        let mut content = Vec::new();
        for (id, tool) in calls {
            let part = if *tool == "Task" {
                let answer = self.subagent();
                tool_result(id, &answer, false)
            } else if self.rng.percent(6) {
                let err = text::tool_error(&mut self.rng, tool);
                tool_result(id, &err, true)
            } else {
                let mut size = text::result_size(&mut self.rng, self.max_result_bytes);
                if matches!(*tool, "Edit" | "Write") {
                    size = size.min(600);
                }
                let out = text::tool_output(&mut self.rng, tool, size);
                tool_result(id, &out, false)
            };
            content.push(part);
        }
        self.push_message("user", content)
    }

    /// Run a subagent in a sidechain transcript; its final answer.
    fn subagent(&mut self) -> String {
        self.subagent_budget = self.subagent_budget.saturating_sub(1);
        let aid = self.rng.hex(6);
        let rng = Rng::new(self.rng.next_u64());
        let mut side = Session::new(self.cfg, rng, &self.sid, "", self.clock_ns);
        side.agent = Some(aid.clone());
        side.max_result_bytes = self.max_result_bytes.min(20_000);
        let task = text::subagent_task(&mut side.rng);
        side.user_text(&task);
        for _ in 0..side.rng.range(1, 3) {
            let calls = side.tool_calls();
            side.tool_results(&calls);
        }
        side.final_answer();
        self.clock_ns = side.clock_ns;
        let answer = side
            .records
            .last()
            .and_then(|r| r.as_message())
            .and_then(|m| {
                m.content.iter().find_map(|c| match c {
                    Content::Text(t) => Some(t.text.clone()),
                    _ => None,
                })
            })
            .unwrap_or_default();
        self.sidechains.push((aid, side.records));
        answer
    }

    /// A built-in compaction (SPEC 2.1): the marker, then the kept tail (the last turn when it
    /// is short, else the last answer) recorded a second time.
    fn compact(&mut self) {
        let start = self
            .records
            .iter()
            .rposition(|r| {
                r.as_message().is_some_and(|m| {
                    m.role == "user" && matches!(m.content.first(), Some(Content::Text(_)))
                })
            })
            .unwrap_or(0);
        let start = if self.records.len() - start <= 6 {
            start
        } else {
            self.records.len().saturating_sub(1)
        };
        let kept: Vec<Message> = self.records[start..]
            .iter()
            .filter_map(|r| r.as_message().cloned())
            .collect();
        let meta = json!({
            "pre_tokens": self.context_tokens.max(1),
            "trigger": "auto",
            "messages_summarized": self.messages.saturating_sub(kept.len()),
        });
        self.push_message(
            "user",
            vec![Content::CompactBoundary(CompactBoundaryPart {
                input: RawJson::from_value(&meta),
                extra: Default::default(),
            })],
        );
        self.context_tokens = 0;
        for m in kept {
            let role = m.role.to_string();
            self.push_message(&role, m.content);
        }
    }

    /// The messages so far, as the core reads them.
    fn messages_of(records: &[Record]) -> Vec<&Message> {
        records.iter().filter_map(Record::as_message).collect()
    }

    /// Try a Compress call now; true when one was recorded (two messages).
    fn try_compress(&mut self, sched: &Schedule) -> bool {
        let cfg = self.cfg;
        let refuse = self.rng.percent(sched.refuse_percent);
        let consolidate = self.consolidations < sched.max_consolidations
            && self.rng.percent(sched.consolidate_percent);
        let all_ranges = self.rng.percent(sched.all_ranges_percent);
        // The view a resumed runtime sends, and what it recommends.
        let (pick, before) = {
            let p = Projection::new(Session::messages_of(&self.records));
            let t = session::turn(&p, &self.state, cfg, &session::runtime_path);
            let rec = recommend::recommend(&t, &self.state, cfg);
            let pick = if refuse {
                refused(&mut self.rng, &t, &rec, cfg)
            } else {
                consolidate
                    .then(|| consolidation(&mut self.rng, &t, &self.state, cfg))
                    .flatten()
                    .or_else(|| tier1(&mut self.rng, &rec, cfg, all_ranges))
            };
            let pick = match pick {
                Some(Pick::Ranges(w)) => {
                    let w = self.disjoint(&p, w);
                    (!w.is_empty()).then_some(Pick::Ranges(w))
                }
                Some(Pick::Consolidate(w)) => {
                    let w = self.disjoint(&p, vec![w]);
                    w.into_iter().next().map(Pick::Consolidate)
                }
                other => other,
            };
            (pick, t.measure)
        };
        let Some(pick) = pick else {
            return false;
        };
        let wants = match &pick {
            Pick::Ranges(w) | Pick::Refused(w) => w.clone(),
            Pick::Consolidate(w) => vec![w.clone()],
        };
        let call_id = self.rng.tool_id();
        let input = compress_input(&wants);
        self.push_message("assistant", vec![tool_use(&call_id, COMPRESS_TOOL, &input)]);
        let applied = self.apply_call(&call_id, &input);
        let panel = compress::panel(&applied, before);
        self.push_message("user", vec![tool_result(&call_id, &panel, false)]);
        if applied.created.is_empty() {
            self.refused += 1;
            return true;
        }
        if matches!(pick, Pick::Consolidate(_)) {
            self.consolidations += 1;
        }
        for (b, a) in applied.created.iter().zip(&applied.archives) {
            let mut plain = a.clone();
            plain.call = None;
            plain.with_body_sha256 = false;
            self.archives.push((b.archive_rel.clone(), plain));
        }
        self.state = applied.state;
        self.calls.push(Call { call_id });
        true
    }

    /// The ranges of `wants` whose blocks overlap no other live block.
    ///
    /// The runtime widens each range on its own (around tool pairs and reasoning runs) and
    /// counts in a block's coverage what the view shows in its span, covered or not (a
    /// reasoning run kept for its visible act, the first user message): so two adjacent
    /// ranges, or a range next to an older block, can make live blocks that cover one message
    /// (`state.overlap`, an error the runtime's own states never show when its model reads
    /// the panels). The generator tries the batch first, exactly as it will be applied, and
    /// sends only ranges that stay apart.
    pub(crate) fn disjoint(&self, p: &Projection<'_>, wants: Vec<Want>) -> Vec<Want> {
        let cfg = self.cfg;
        let t = pipeline::run(
            &p.cores,
            &self.state,
            cfg,
            Count::Given(0),
            &session::runtime_path,
        );
        let ledger = t.ledger(&self.state, &[]);
        let (created, now) = seconds(self.clock_ns);
        let place = Placement {
            root: &self.archive_root,
            session: &self.sid,
            created: &created,
            now,
        };
        let overlaps = |wants: &[Want]| {
            let parsed = args::parse(&compress_input(wants));
            let a = compress::apply(&t, &ledger, &parsed.ranges, cfg, "dry-run", &place);
            a.created.is_empty() || overlapping(&a.state)
        };
        if !overlaps(&wants) {
            return wants;
        }
        let mut kept: Vec<Want> = Vec::new();
        for w in wants {
            kept.push(w);
            if overlaps(&kept) {
                kept.pop();
            }
        }
        kept
    }

    /// Apply the Compress call just recorded (the last record holds its tool_use) exactly as
    /// a rebuild replays it: against the projection up to and including the call, with no
    /// token count (no truncation, no nudge), on the state with that view's refs recorded.
    fn apply_call(&self, call_id: &str, input: &str) -> Applied {
        let cfg = self.cfg;
        // The projection of the whole transcript a rebuild slices, not the one a resumed
        // runtime continues from (that drops the trailing call, still unanswered here).
        let cores = content::project(&Session::messages_of(&self.records));
        let t: Turn<'_, '_> = pipeline::run(
            &cores,
            &self.state,
            cfg,
            Count::Given(0),
            &session::runtime_path,
        );
        let ledger = t.ledger(&self.state, &[]);
        let parsed = args::parse(input);
        let (created, now) = seconds(self.clock_ns);
        let place = Placement {
            root: &self.archive_root,
            session: &self.sid,
            created: &created,
            now,
        };
        compress::apply(&t, &ledger, &parsed.ranges, cfg, call_id, &place)
    }
}

/// Whether two active blocks of `state` cover one message.
pub(crate) fn overlapping(state: &State) -> bool {
    let mut seen = std::collections::HashSet::new();
    state
        .blocks()
        .iter()
        .filter(|b| b.active)
        .flat_map(|b| b.effective_message_ids.iter())
        .any(|id| !seen.insert(id.as_str()))
}

/// Tokens of a message's content (SPEC 4.2), for the usage counters.
fn message_tokens(m: &Message) -> u64 {
    m.content
        .iter()
        .map(|c| match c {
            Content::Text(t) => tokens::count(&t.text),
            Content::Thinking(t) => tokens::count(&t.thinking),
            Content::ToolUse(u) => tokens::count(u.input.get()),
            Content::ToolResult(r) => r
                .items()
                .iter()
                .map(|i| match i {
                    Content::Text(t) => tokens::count(&t.text),
                    _ => 0,
                })
                .sum(),
            _ => 0,
        })
        .sum()
}

/// A summary of a span of `chars` characters: at least `min_summary_chars`, shorter than the
/// span where it can be.
fn summary_for(rng: &mut Rng, cfg: &NoaConfig, chars: usize) -> Option<String> {
    let min = cfg.min_summary_chars.max(1);
    let max = (chars / 2).max(min + 8).min(cfg.max_summary_chars.max(min));
    text::summary(rng, min, max)
}

/// Tier-1 ranges from the recommendation: the oldest ones until their characters clear the
/// batch minimum (or every one of them).
fn tier1(
    rng: &mut Rng,
    rec: &recommend::Recommendation,
    cfg: &NoaConfig,
    all: bool,
) -> Option<Pick> {
    let mut wants = Vec::new();
    let mut chars = 0;
    for r in &rec.ranges {
        if !all && chars >= cfg.min_range_chars && !wants.is_empty() {
            break;
        }
        let (Some(start), Some(end)) = (r.start.name(), r.end.name()) else {
            continue;
        };
        let summary = summary_for(rng, cfg, r.chars)?;
        wants.push(Want {
            start: start.into_owned(),
            end: end.into_owned(),
            summary,
            topic: if rng.percent(85) {
                text::topic(rng)
            } else {
                String::new()
            },
        });
        chars += r.chars;
    }
    (chars >= cfg.min_range_chars && !wants.is_empty()).then_some(Pick::Ranges(wants))
}

/// A consolidation: from the first to the last but one live block of the lowest eligible tier
/// in view order (the last too when there are only two), with no live block of a lower tier
/// between them (the range absorbs the blocks of its lowest tier into one of the next). A
/// tier is eligible with at least `tier2_min_blocks` (tier 1) or `tier3_min_blocks` (tier 2)
/// live blocks and a next tier within `max_tier`.
fn consolidation(rng: &mut Rng, t: &Turn<'_, '_>, state: &State, cfg: &NoaConfig) -> Option<Pick> {
    let max_tier = if cfg.max_tier < 2 {
        3
    } else {
        i64::from(cfg.max_tier)
    };
    let blocks = state.blocks();
    let live: Vec<usize> = t
        .view()
        .filter_map(|(_, c)| match c.origin {
            Origin::Summary { block } if c.is_summary() => Some(block as usize),
            _ => None,
        })
        .filter(|&i| blocks.get(i).is_some_and(|b| b.active))
        .collect();
    for (tier, min) in [(1, cfg.tier2_min_blocks), (2, cfg.tier3_min_blocks)] {
        if tier + 1 > max_tier {
            continue;
        }
        let count = live.iter().filter(|&&i| blocks[i].tier == tier).count();
        if count < min.max(2) {
            continue;
        }
        // The first run of blocks of this tier or higher holding two of this tier.
        let mut run: Vec<usize> = Vec::new();
        let mut best: Option<Vec<usize>> = None;
        for &i in live.iter().chain(std::iter::once(&usize::MAX)) {
            let b = blocks.get(i);
            if b.is_some_and(|b| b.tier >= tier) {
                run.push(i);
                continue;
            }
            let of_tier: Vec<usize> = run
                .iter()
                .copied()
                .filter(|&k| blocks[k].tier == tier)
                .collect();
            if of_tier.len() >= 2 {
                best = Some(of_tier);
                break;
            }
            run.clear();
        }
        let Some(mut of_tier) = best else { continue };
        // The newest block stays as it is (its detail is the most likely to be needed).
        if of_tier.len() > 2 {
            of_tier.pop();
        }
        let (first, last) = (&blocks[of_tier[0]], &blocks[of_tier[of_tier.len() - 1]]);
        let children: Vec<(String, String)> = of_tier
            .iter()
            .map(|&k| (blocks[k].block_id.clone(), blocks[k].summary.clone()))
            .collect();
        let summary = text::consolidated_summary(
            rng,
            &children,
            cfg.min_summary_chars,
            cfg.max_summary_chars.max(cfg.min_summary_chars),
        )?;
        return Some(Pick::Consolidate(Want {
            start: first.block_id.clone(),
            end: last.block_id.clone(),
            summary,
            topic: text::topic(rng),
        }));
    }
    None
}

/// A batch the runtime refuses: a summary below the minimum over a recommended range, or a
/// range ending at a ref this session never handed out.
fn refused(
    rng: &mut Rng,
    t: &Turn<'_, '_>,
    rec: &recommend::Recommendation,
    cfg: &NoaConfig,
) -> Option<Pick> {
    let first = rec.ranges.first();
    if let Some(r) = first.filter(|_| cfg.min_summary_chars > 6 && rng.percent(50)) {
        let (start, end) = (r.start.name()?, r.end.name()?);
        return Some(Pick::Refused(vec![Want {
            start: start.into_owned(),
            end: end.into_owned(),
            summary: "Done.".to_string(),
            topic: String::new(),
        }]));
    }
    let highest = t.slots.iter().filter_map(|s| s.number()).max()?;
    let start = first
        .and_then(|r| r.start.name().map(|n| n.into_owned()))
        .unwrap_or_else(|| refs::format_ref(1));
    let summary = summary_for(rng, cfg, 4000)?;
    Some(Pick::Refused(vec![Want {
        start,
        end: refs::format_ref((highest + 40).min(refs::MAX_REF)),
        summary,
        topic: text::topic(rng),
    }]))
}

pub(crate) fn tool_use(id: &str, name: &str, input: &str) -> Content {
    Content::ToolUse(ToolUsePart {
        id: id.to_string(),
        name: name.to_string(),
        input: RawJson::from_text(input).unwrap_or_default(),
        extra: Default::default(),
    })
}

/// A tool result as the runtime records it: `content` an array of one text block.
pub(crate) fn tool_result(id: &str, text: &str, is_error: bool) -> Content {
    Content::ToolResult(ToolResultPart {
        tool_use_id: id.to_string(),
        content: Some(ToolResultContent::Items(vec![Content::text(text)])),
        is_error: is_error.then_some(true),
        extra: Default::default(),
    })
}

/// Build one session as its spec says.
pub(crate) fn build<'a>(
    spec: &Spec,
    cfg: &'a NoaConfig,
    archive_root: &str,
    seed: u64,
) -> Session<'a> {
    let rng = Rng::derive(seed, &format!("session/{}", spec.sid));
    let mut s = Session::new(cfg, rng, &spec.sid, archive_root, spec.start_ns);
    s.max_result_bytes = spec.max_result_bytes;
    s.subagent_budget = spec.subagents;
    run(&mut s, spec);
    s
}

/// Go on with the conversation of `s` (which ends with an answer, or is empty) until it holds
/// `spec.messages` messages, compressing as `spec.compress` says.
pub(crate) fn run(s: &mut Session<'_>, spec: &Spec) {
    let m = spec.messages;
    let mut marker_at = spec
        .marker_at_percent
        .map(|p| m * p / 100)
        .filter(|&at| at >= 4 && at + 12 <= m);
    let mut next_compress = spec.compress.as_ref().map(|c| c.first_at);
    if let (Some(at), Some(next)) = (marker_at, next_compress.as_mut()) {
        // No Compress call before the marker: the projection starts after it (SPEC 4.1), so
        // a rebuild could not replay them.
        if let Some(c) = &spec.compress {
            *next = (*next).max(at + c.interval);
        }
    }
    let mut next = Next::Prompt;
    while s.messages < m {
        let remaining = m - s.messages;
        next = match next {
            Next::Prompt => {
                if marker_at.is_some_and(|at| s.messages >= at) && remaining >= 12 {
                    marker_at = None;
                    s.compact();
                    if s.messages >= m {
                        break;
                    }
                }
                s.prompt();
                // Every later step takes two messages (a tool turn and its results, a final
                // answer and the next prompt, a Compress call and its panel): with an even
                // count left, the user sends a follow-up right away, so the transcript still
                // ends with an assistant answer.
                let left = m.saturating_sub(s.messages);
                if left >= 2 && left % 2 == 0 {
                    let t = text::user_followup(&mut s.rng);
                    s.user_text(&t);
                }
                Next::Assistant
            }
            Next::Assistant => {
                if let (Some(sched), Some(at)) = (&spec.compress, next_compress) {
                    if s.messages >= at && remaining >= 3 + sched.quiet_tail {
                        let jitter = sched.interval * s.rng.range(75, 125) / 100;
                        next_compress = Some(s.messages + jitter.max(1));
                        if s.try_compress(sched) {
                            next = Next::Assistant;
                            continue;
                        }
                    }
                }
                if remaining < 3 || s.rng.percent(25) {
                    s.final_answer();
                    Next::Prompt
                } else {
                    Next::Results(s.tool_calls())
                }
            }
            Next::Results(calls) => {
                s.tool_results(&calls);
                Next::Assistant
            }
        };
    }
}

/// The time of a record (Unix nanoseconds), when it has a parsable one.
fn record_ns(r: &Record) -> Option<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(r.timestamp.as_deref()?).ok()?;
    t.timestamp_nanos_opt()
}

/// Write a transcript's lines; its modification time is its last record's time.
fn write_transcript(
    out: &mut Out,
    rel: &str,
    records: &[Record],
    garbage: &[(usize, String)],
    torn_tail: Option<&str>,
) -> Result<(), GenError> {
    let mut t = String::new();
    for (i, r) in records.iter().enumerate() {
        for (_, line) in garbage.iter().filter(|(at, _)| *at == i) {
            t.push_str(line);
            t.push('\n');
        }
        t.push_str(&r.to_line());
        t.push('\n');
    }
    for (_, line) in garbage.iter().filter(|(at, _)| *at >= records.len()) {
        t.push_str(line);
        t.push('\n');
    }
    if let Some(tail) = torn_tail {
        t.push_str(tail);
    }
    let path = out.write(rel, t.as_bytes())?;
    if let Some(ns) = records.iter().rev().find_map(record_ns) {
        set_mtime(&path, ns)?;
    }
    Ok(())
}

/// Write a session's files and account for them.
pub(crate) fn write_session(
    out: &mut Out,
    s: &Session<'_>,
    report: &mut GenReport,
) -> Result<(), GenError> {
    let sid = &s.sid;
    write_transcript(
        out,
        &format!("transcripts/{sid}.jsonl"),
        &s.records,
        &s.garbage,
        s.torn_tail.as_deref(),
    )?;
    for (aid, records) in &s.sidechains {
        write_transcript(
            out,
            &format!("transcripts/{sid}/subagents/agent-{aid}.jsonl"),
            records,
            &[],
            None,
        )?;
        report.subagents += 1;
        report.subagent_messages += records.iter().filter(|r| r.as_message().is_some()).count();
    }
    for (rel, a) in &s.archives {
        let text = archive::render(a, Labels::Chinese);
        out.write(&format!("noa/{sid}/{rel}"), text.as_bytes())?;
    }
    let state = match &s.state_file {
        StateFile::Auto => (!s.state.blocks().is_empty()).then(|| s.state.to_json()),
        StateFile::Skip => None,
        StateFile::Raw(bytes) => Some(bytes.clone()),
    };
    if let Some(bytes) = state {
        out.write(&format!("noa/{sid}/state.json"), bytes.as_bytes())?;
        report.blocks += s.state.blocks().len();
    }
    if let Some(j) = &s.journal {
        out.write(&format!("noa/{sid}/ctl.jsonl"), j.as_bytes())?;
    }
    for (rel, bytes) in &s.noa_extra {
        out.write(&format!("noa/{sid}/{rel}"), bytes)?;
    }
    report.sessions += 1;
    report.messages += s
        .records
        .iter()
        .filter(|r| r.as_message().is_some())
        .count();
    report.compress_calls += s.calls.len();
    report.refused_calls += s.refused;
    Ok(())
}

/// The memories of a generated root: `(name, description, type, body)`; types cycle through
/// all four, and one name is Unicode-only (its file is `.md`, as the runtime names it).
const MEMORIES: &[(&str, &str, &str, &str)] = &[
    (
        "Build system",
        "How the crate links native libraries",
        "project",
        "build.rs emits the link flags; zstd is required.\n\n```toml\n[build-dependencies]\ncc = \"1\"\n```\n",
    ),
    (
        "Prefers small PRs",
        "The user wants one change per PR",
        "feedback",
        "Split refactors from behaviour changes. Reviews happen in the morning (KST).\n",
    ),
    (
        "CI dashboard",
        "Where nightly results are shown",
        "reference",
        "https://ci.example.com/nightly — the red column is the linker job.\n",
    ),
    (
        "한국어 메모",
        "Notes kept in Korean: the name has no ASCII letter, so the file is .md",
        "user",
        "배포는 금요일에 하지 않습니다.\n",
    ),
    (
        "Senior Rust developer",
        "The user knows Rust well; skip the basics",
        "user",
        "Explain trade-offs, not syntax. 한국어로 물어봐도 됩니다.\n",
    ),
    (
        "Release process",
        "Tag, changelog, then publish from CI",
        "project",
        "1. bump the version\n2. `git tag vX.Y.Z`\n3. CI publishes on tag push 🚀\n",
    ),
    (
        "Review tone",
        "Direct, short review comments",
        "feedback",
        "No praise padding; say what to change and why.\n",
    ),
    (
        "Staging database",
        "psql host and read-only role for staging",
        "reference",
        "`psql -h staging-db.internal -U readonly app`\n",
    ),
    (
        "Works in KST",
        "The user is in Seoul (UTC+9)",
        "user",
        "Schedule long jobs for the user's night.\n",
    ),
];

/// Write one memory file with a fixed modification time (scan order, and so `MEMORY.md`, must
/// not depend on when the files were written).
pub(crate) fn write_memory(
    out: &mut Out,
    file_name: &str,
    text: &str,
    minute: u64,
) -> Result<(), GenError> {
    let path = out.write(&format!("memory/{file_name}"), text.as_bytes())?;
    set_mtime(&path, (BASE_SECS + minute as i64 * 60) * NANOS)
}

/// Render a well-formed memory file, as the runtime saves one (`kind` `""`: no type).
pub(crate) fn memory_text(name: &str, description: &str, kind: &str, body: &str) -> String {
    let kind = (!kind.is_empty()).then_some(kind);
    memory::render(&memory::Memory::new(name, description, kind, body))
}

/// `MEMORY.md` computed from the memory directory as it is now, as the runtime writes it.
pub(crate) fn write_index(out: &mut Out) -> Result<(), GenError> {
    let scan = memory::scan(&out.path("memory"));
    let index = memory::render_index(&scan.memories);
    out.write("memory/MEMORY.md", index.as_bytes())?;
    Ok(())
}

fn write_memories(
    out: &mut Out,
    opts: &GenOptions,
    report: &mut GenReport,
) -> Result<(), GenError> {
    let mut slugs = std::collections::HashSet::new();
    for i in 0..opts.memories {
        let Some(&(base, description, kind, body)) = MEMORIES.get(i % MEMORIES.len()) else {
            continue;
        };
        let round = i / MEMORIES.len();
        let mut name = if round == 0 {
            base.to_string()
        } else {
            format!("{base} {}", round + 1)
        };
        // Two names sharing a slug would overwrite each other (the runtime's hazard); only
        // the first Unicode-only name keeps the empty slug.
        while !slugs.insert(memory::slug(&name)) {
            name.push_str(" again");
        }
        write_memory(
            out,
            &memory::file_for(&name),
            &memory_text(&name, description, kind, body),
            i as u64,
        )?;
        report.memories += 1;
    }
    if opts.corrupt {
        let found = damage::memories(out, opts.memories as u64)?;
        report.memories += found.1;
        report.damages.extend(found.0);
    } else {
        write_index(out)?;
    }
    Ok(())
}
