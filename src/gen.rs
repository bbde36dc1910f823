//! `normafs gen`: a deterministic generator of realistic synthetic session roots (SPEC 1, 2) for
//! tests, demos and benchmarks.
//!
//! Every session is written the way the runtime and the noa core would have written it: chained
//! records, tool calls answered by results, Compress calls planned by [`crate::noa::compress`]
//! against the view of the transcript at the time of the call (so a rebuild from history gives
//! back the very `state.json` written), their archives, sidechain transcripts and memory files
//! with a matching `MEMORY.md`. With `corrupt`, extra sessions and files carry one damage each of
//! the SPEC 9 catalogue, listed in [`GenReport::damages`].
//!
//! Output depends only on the options and the root path (archive paths are absolute): the same
//! options give byte-identical files. Randomness comes from a self-contained splitmix64 stream
//! per session.
//!
//! Choices: every main transcript has exactly `messages` messages and ends with an assistant
//! answer (an odd count gets one user follow-up right after the first prompt); about a fifth of
//! the sessions never compress and get no `noa/<sid>/` at all (so the audit shows `state.missing`
//! info for them); `state.json` is written only for sessions with blocks; Compress attempts are
//! spaced so that a session makes about 30 at most (each costs O(messages) in the core); memory
//! files get fixed modification times so that scan order, and `MEMORY.md`, are reproducible.

mod damage;
mod text;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::config::NoaConfig;
use crate::format::memory;
use crate::format::state::State;
use crate::format::transcript::{
    BoundaryMeta, CompactBoundaryPart, Content, Message, RawJson, Record, TextPart, ThinkingPart,
    ToolResultContent, ToolResultPart, ToolUsePart, Usage,
};
use crate::noa::compress::{self, Batch, CompressError, Ctx, Planned, RangeSpec};
use crate::noa::view::{self, Item, Materialized};
use crate::noa::{refs, tokens, Msg};

use text::Rng;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenOptions {
    /// Clean sessions to write.
    pub sessions: usize,
    /// Messages per main transcript (exactly).
    pub messages: usize,
    pub seed: u64,
    /// Also write one damaged session (or file) per kind of the SPEC 9 catalogue.
    pub corrupt: bool,
    /// Give some sessions sidechain transcripts of subagents.
    pub subagents: bool,
    /// Memory files to write (plus `MEMORY.md`).
    pub memories: usize,
    /// Largest tool result, in bytes.
    pub max_result_bytes: usize,
    /// The noa settings the Compress calls are planned with.
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
    /// `noa/<sid>/<archiveRel>` (archive.*), `memory/<file>`, or the bad entry itself.
    pub path: String,
    /// 1-based line of the damaged transcript record, when the damage is one line.
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
    /// Compress calls recorded with a successful result.
    pub compress_calls: usize,
    /// Compress calls recorded with an error result (the runtime refused them).
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

/// 2026-11-02T09:00:00Z, the start of generated time.
const BASE_SECS: i64 = 1_793_610_000;
const NANOS: i64 = 1_000_000_000;
/// Sessions start five hours apart.
const SESSION_GAP_SECS: i64 = 5 * 3600;

/// Write a synthetic session root at `root` (which must be empty or not exist).
///
/// `progress(done, total)` is called once before the first session and after each session.
pub fn generate(
    root: &Path,
    opts: &GenOptions,
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
    let damages: &[&'static str] = if opts.corrupt {
        damage::SESSION_DAMAGES
    } else {
        &[]
    };
    let total = opts.sessions + damages.len();
    progress(0, total);

    for i in 0..opts.sessions {
        let spec = clean_spec(opts, i);
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
        let (s, found) = damage::session(code, opts, slot, &out)?;
        write_session(&mut out, &s, &mut report)?;
        report.corrupt_sessions.push(s.sid.clone());
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
    /// Live blocks of tier 1 (resp. 2) in a row before a consolidation may be issued.
    pub consolidate_min: (usize, usize),
    pub consolidate_percent: usize,
    /// At most one consolidation.
    pub consolidate_once: bool,
    /// Share of attempts that are deliberately invalid (recorded with an error result).
    pub refuse_percent: usize,
    /// Share of tier-1 calls with two ranges.
    pub multi_range_percent: usize,
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
}

fn clean_spec(opts: &GenOptions, i: usize) -> Spec {
    let sid = session_id(opts.seed, i);
    let mut rng = Rng::derive(opts.seed, &format!("spec/{sid}"));
    let cfg = &opts.config;
    let compress = rng.percent(80).then(|| {
        // About 30 attempts at most: each costs O(messages) in the core.
        let interval = (30 + rng.range(0, 20)).max(opts.messages / 30);
        Schedule {
            first_at: interval,
            interval,
            consolidate_min: (
                rng.range(3, cfg.tier2_min_blocks.max(3)),
                rng.range(2, cfg.tier3_min_blocks.max(2)),
            ),
            consolidate_percent: 60,
            consolidate_once: false,
            refuse_percent: 7,
            multi_range_percent: 15,
        }
    });
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
    }
}

/// Start time of the session in slot `i`.
fn start_ns(i: usize, rng: &mut Rng) -> i64 {
    let secs = BASE_SECS + (i as i64) * SESSION_GAP_SECS + rng.range(0, 3600) as i64;
    secs * NANOS + rng.range(0, 999_999_999) as i64
}

/// RFC 3339 with nanoseconds, UTC.
fn rfc3339(ns: i64) -> String {
    chrono::DateTime::from_timestamp(ns.div_euclid(NANOS), ns.rem_euclid(NANOS) as u32)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
        .unwrap_or_default()
}

/// A successful Compress call as recorded in the transcript.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub call_id: String,
    /// Indices in `records` of the tool_use and of the result.
    pub use_record: usize,
    pub result_record: usize,
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

/// A session being built, then written.
pub(crate) struct Session<'a> {
    pub cfg: &'a NoaConfig,
    pub rng: Rng,
    pub sid: String,
    pub archive_root: String,
    agent: Option<String>,
    max_result_bytes: usize,
    pub records: Vec<Record>,
    pub clock_ns: i64,
    context_tokens: u64,
    since_assistant: u64,
    pub messages: usize,
    pub state: State,
    /// `(archiveRel, bytes)` of every block written.
    pub archives: Vec<(String, String)>,
    /// `(agent id, records)`.
    pub sidechains: Vec<(String, Vec<Record>)>,
    pub calls: Vec<Call>,
    pub refused: usize,
    subagent_budget: usize,
    consolidated: bool,
    /// The time of the next record, when fixed in advance (a Compress call planned at it).
    pinned_ns: Option<i64>,
    // What the writer does besides the model (damages).
    pub state_file: StateFile,
    /// `(record index, line)`: a raw line written before that record.
    pub garbage: Vec<(usize, String)>,
    /// Written after the last line, without a newline.
    pub torn_tail: Option<String>,
    /// Extra files under the archive root: `(relative path, bytes)`.
    pub noa_extra: Vec<(String, Vec<u8>)>,
    /// Lines of `ctl.jsonl`.
    pub journal: Vec<String>,
}

/// The next message of the conversation.
enum Next {
    Prompt,
    Assistant,
    Results(Vec<(String, &'static str)>),
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
            consolidated: false,
            pinned_ns: None,
            state_file: StateFile::Auto,
            garbage: Vec::new(),
            torn_tail: None,
            noa_extra: Vec::new(),
            journal: Vec::new(),
        }
    }

    /// Advance the clock by a few seconds (or to the pinned time); the new time.
    pub fn tick(&mut self) -> String {
        if let Some(ns) = self.pinned_ns.take() {
            self.clock_ns = ns;
            return rfc3339(ns);
        }
        let secs = self.rng.range(1, 9) as i64;
        self.clock_ns += secs * NANOS + self.rng.range(0, 999_999_999) as i64;
        rfc3339(self.clock_ns)
    }

    /// A record chained to the previous one, timestamped now.
    pub fn record(&mut self, kind: &str) -> Record {
        let ts = self.tick();
        let sidechain = self.agent.is_some();
        Record {
            uuid: self.rng.uuid(),
            parent_uuid: self.records.last().map(|r| r.uuid.clone()),
            session_id: Some(self.sid.as_str().into()),
            agent_id: self.agent.clone(),
            is_sidechain: sidechain.then_some(true),
            timestamp: Some(ts),
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
        let t = tokens::message_tokens(&message);
        let mut rec = self.record("message");
        if role == "assistant" {
            rec.usage = Some(Some(Box::new(Usage {
                input_tokens: self.rng.range(3, 900) as u64,
                output_tokens: t.max(1),
                cache_read_tokens: self.context_tokens,
                cache_write_tokens: self.since_assistant.max(1),
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

    fn push_boundary(&mut self) {
        let skills = ["rust", "git", "review"];
        let n = self.rng.range(1, skills.len());
        let mut rec = self.record("boundary");
        rec.boundary = Some(Some(Box::new(BoundaryMeta {
            trigger: Some("auto".to_string()),
            pre_tokens: self.context_tokens.max(1),
            messages_summarized: Some(self.messages as u64),
            active_skills: Some(skills.iter().take(n).map(|s| s.to_string()).collect()),
            extra: Default::default(),
        })));
        self.records.push(rec);
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
        if self.rng.percent(20) {
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

    /// An assistant message calling one or two tools; the calls to answer.
    pub fn tool_calls(&mut self) -> Vec<(String, &'static str)> {
        let mut content = Vec::new();
        if self.rng.percent(35) {
            content.push(self.thinking());
        }
        if self.rng.percent(45) {
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
            content.push(tool_use(&id, tool, input));
            calls.push((id, tool));
        }
        self.push_message("assistant", content);
        calls
    }

    /// The user message answering `calls`.
    pub fn tool_results(&mut self, calls: &[(String, &'static str)]) -> usize {
        let mut content = Vec::new();
        for (id, tool) in calls {
            let part = if *tool == "Task" {
                let answer = self.subagent();
                tool_result(
                    id,
                    ToolResultContent::Items(vec![Content::text(&answer)]),
                    false,
                )
            } else if self.rng.percent(6) {
                let err = text::tool_error(&mut self.rng, tool);
                tool_result(
                    id,
                    ToolResultContent::Items(vec![Content::text(&err)]),
                    true,
                )
            } else {
                let mut size = text::result_size(&mut self.rng, self.max_result_bytes);
                if matches!(*tool, "Edit" | "Write") {
                    size = size.min(600);
                }
                let out = text::tool_output(&mut self.rng, tool, size);
                if self.rng.percent(10) {
                    tool_result(id, ToolResultContent::Text(out), false)
                } else {
                    tool_result(
                        id,
                        ToolResultContent::Items(vec![Content::text(&out)]),
                        false,
                    )
                }
            };
            content.push(part);
        }
        self.push_message("user", content)
    }

    /// Run a subagent in a sidechain transcript; its final answer.
    fn subagent(&mut self) -> String {
        self.subagent_budget = self.subagent_budget.saturating_sub(1);
        let aid = format!("ag-{}", self.rng.hex(6));
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

    /// The core's view of the messages so far.
    pub fn msgs(records: &[Record]) -> Vec<Msg<'_>> {
        records
            .iter()
            .filter_map(|r| {
                r.as_message().map(|m| Msg {
                    raw_id: &r.uuid,
                    message: m,
                    timestamp: r.timestamp.as_deref(),
                })
            })
            .collect()
    }

    /// Plan a Compress batch over the transcript so far with `choose` picking the ranges; `None`
    /// when it picked nothing.
    pub fn plan_with(
        &mut self,
        call_id: &str,
        now: &str,
        choose: &mut Chooser<'_>,
    ) -> Option<(Vec<RangeSpec>, Result<Planned, CompressError>)> {
        let msgs = Session::msgs(&self.records);
        let mat = view::materialize(&msgs, &self.state, self.cfg);
        let lay = Layout::of(&mat, self.cfg);
        let ranges = choose(&mut self.rng, &mat, &lay)?;
        let ctx = Ctx {
            msgs: &msgs,
            state: &self.state,
            cfg: self.cfg,
            strict: true,
            call_id,
            now,
            session: &self.sid,
            archive_root: &self.archive_root,
        };
        let result = compress::plan(
            &ctx,
            &Batch {
                ranges: ranges.clone(),
            },
        );
        Some((ranges, result))
    }

    /// Try a Compress call at this point; true when one was recorded (two messages).
    fn try_compress(&mut self, sched: &Schedule) -> bool {
        let refuse = self.rng.percent(sched.refuse_percent);
        let call_id = self.rng.tool_id();
        // The tool_use record's time; unused (a gap in time) when nothing is recorded.
        let use_ns = self.clock_ns + self.rng.range(1, 9) as i64 * NANOS;
        let now = rfc3339(use_ns);
        let cfg = self.cfg;
        let consolidate_ok = !(sched.consolidate_once && self.consolidated);
        let mut consolidated = false;
        let mut choose = |rng: &mut Rng, mat: &Materialized<'_>, lay: &Layout| {
            if refuse {
                return Some(refused_ranges(rng, mat, lay, cfg));
            }
            if consolidate_ok && rng.percent(sched.consolidate_percent) {
                for (tier, min) in [(2, sched.consolidate_min.1), (1, sched.consolidate_min.0)] {
                    if tier < cfg.max_tier {
                        if let Some(r) = consolidation(rng, mat, lay, cfg, tier, min) {
                            consolidated = true;
                            return Some(r);
                        }
                    }
                }
            }
            tier1_ranges(rng, mat, lay, cfg, sched.multi_range_percent)
        };
        let Some((ranges, result)) = self.plan_with(&call_id, &now, &mut choose) else {
            return false;
        };
        match result {
            Ok(planned) => {
                self.consolidated |= consolidated;
                self.record_call(&call_id, use_ns, &ranges, Ok(planned));
                true
            }
            Err(e) if refuse => {
                self.record_call(&call_id, use_ns, &ranges, Err(e));
                true
            }
            Err(_) => false,
        }
    }

    /// Append a Compress call at `use_ns` and its result; adopt the plan when it succeeded.
    pub fn record_call(
        &mut self,
        call_id: &str,
        use_ns: i64,
        ranges: &[RangeSpec],
        outcome: Result<Planned, CompressError>,
    ) {
        let mut content = Vec::new();
        if self.rng.percent(30) {
            content.push(Content::text(
                "Compressing older context to keep the window small.",
            ));
        }
        let tool = crate::config::COMPRESS_TOOL.to_string();
        content.push(tool_use(call_id, &tool, batch_json(ranges)));
        self.pinned_ns = Some(use_ns);
        let use_record = self.push_message("assistant", content);
        let (text, is_error) = match &outcome {
            Ok(planned) => (result_text(planned), false),
            Err(e) => (e.to_string(), true),
        };
        let part = tool_result(
            call_id,
            ToolResultContent::Items(vec![Content::text(&text)]),
            is_error,
        );
        let result_record = self.push_message("user", vec![part]);
        match outcome {
            Ok(planned) => {
                for p in &planned.blocks {
                    self.archives
                        .push((p.block.archive_rel.clone(), p.archive.clone()));
                }
                self.state = planned.state;
                self.calls.push(Call {
                    call_id: call_id.to_string(),
                    use_record,
                    result_record,
                });
            }
            Err(_) => self.refused += 1,
        }
    }
}

/// Picks the ranges of a Compress call from the current view.
pub(crate) type Chooser<'c> =
    dyn FnMut(&mut Rng, &Materialized<'_>, &Layout) -> Option<Vec<RangeSpec>> + 'c;

/// `{"ranges":[{start,end,topic,summary}]}`, the Compress tool's input.
pub(crate) fn batch_json(ranges: &[RangeSpec]) -> Value {
    let ranges: Vec<Value> = ranges
        .iter()
        .map(|r| {
            let mut v = serde_json::Map::new();
            v.insert("start".into(), json!(r.start));
            v.insert("end".into(), json!(r.end));
            if let Some(t) = &r.topic {
                v.insert("topic".into(), json!(t));
            }
            v.insert("summary".into(), json!(r.summary));
            Value::Object(v)
        })
        .collect();
    json!({ "ranges": ranges })
}

/// `Compressed m0010-m0042 into b3.` per new block.
fn result_text(planned: &Planned) -> String {
    let parts: Vec<String> = planned
        .blocks
        .iter()
        .map(|p| {
            let b = &p.block;
            let mut s = format!(
                "Compressed {}-{} into {}",
                b.start_ref,
                b.end_ref,
                b.block_id.name()
            );
            if !p.absorbed.is_empty() {
                s.push_str(&format!(
                    " (tier {}, absorbing {})",
                    b.tier,
                    p.absorbed.join(", ")
                ));
            }
            if p.terminal {
                s.push_str(" — terminal recompress (detail loss)");
            }
            s.push('.');
            s
        })
        .collect();
    parts.join(" ")
}

fn tool_use(id: &str, name: &str, input: Value) -> Content {
    Content::ToolUse(ToolUsePart {
        id: id.to_string(),
        name: name.to_string(),
        input: RawJson::from_value(&input),
        extra: Default::default(),
    })
}

fn tool_result(id: &str, content: ToolResultContent, is_error: bool) -> Content {
    Content::ToolResult(ToolResultPart {
        tool_use_id: id.to_string(),
        content: Some(content),
        is_error: is_error.then_some(true),
        extra: Default::default(),
    })
}

/// Where ranges may start and end in a view.
pub(crate) struct Layout {
    /// First item of the protected tail.
    pub tail: usize,
    /// `valid_cut[k]`: no tool_use/tool_result pair has one side before item `k` and the other
    /// at or after it (`k` in `0..=items.len()`).
    pub valid_cut: Vec<bool>,
}

impl Layout {
    pub fn of(mat: &Materialized<'_>, cfg: &NoaConfig) -> Layout {
        let n = mat.items.len();
        let mut use_at: HashMap<&str, usize> = HashMap::new();
        let mut result_at: HashMap<&str, usize> = HashMap::new();
        for (ii, it) in mat.items.iter().enumerate() {
            if let Item::Msg(m) = it {
                for c in &m.content {
                    match c.as_ref() {
                        Content::ToolUse(u) => {
                            use_at.entry(u.id.as_str()).or_insert(ii);
                        }
                        Content::ToolResult(r) => {
                            result_at.insert(r.tool_use_id.as_str(), ii);
                        }
                        _ => {}
                    }
                }
            }
        }
        let mut diff = vec![0i64; n + 2];
        for (id, &u) in &use_at {
            if let Some(&r) = result_at.get(id) {
                let (a, b) = (u.min(r), u.max(r));
                if a < b {
                    diff[a + 1] += 1;
                    diff[b + 1] -= 1;
                }
            }
        }
        let mut acc = 0;
        let valid_cut = diff
            .iter()
            .take(n + 1)
            .map(|d| {
                acc += d;
                acc == 0
            })
            .collect();
        Layout {
            tail: view::protected_start(&mat.items, cfg),
            valid_cut,
        }
    }

    fn cut_ok(&self, k: usize) -> bool {
        self.valid_cut.get(k).copied().unwrap_or(false)
    }
}

/// A message item that a range may hold (not a block, not a protected tool's message).
fn free_msg(it: &Item<'_>) -> bool {
    matches!(it, Item::Msg(m) if !m.protected_tool)
}

/// Tokens a range replaces, as the strict size rule counts them.
fn cost(mat: &Materialized<'_>, items: &[Item<'_>]) -> u64 {
    items
        .iter()
        .map(|it| match it {
            Item::Msg(m) => mat.msg_tokens.get(m.msg).copied().unwrap_or(0),
            Item::Block(b) => mat
                .state
                .blocks
                .get(b.block)
                .map(|blk| blk.compressed_tokens)
                .unwrap_or(0),
        })
        .sum()
}

/// First and last ref of the items `a..=b`.
fn span_refs(mat: &Materialized<'_>, a: usize, b: usize) -> Option<(String, String)> {
    let first = mat.items.get(a)?;
    let last = mat.items.get(b)?;
    Some((mat.item_span(first).0, mat.item_span(last).1))
}

/// A range over items `a..=b` with a fresh summary; `None` when no summary fits.
fn range_over(
    rng: &mut Rng,
    mat: &Materialized<'_>,
    cfg: &NoaConfig,
    a: usize,
    b: usize,
) -> Option<RangeSpec> {
    let covered = cost(mat, mat.items.get(a..=b)?);
    let max_bytes = (covered.saturating_sub(1) as usize).saturating_mul(4);
    let summary = text::summary(rng, cfg.min_summary_chars, max_bytes)?;
    let (start, end) = span_refs(mat, a, b)?;
    Some(RangeSpec {
        start,
        end,
        topic: rng.percent(85).then(|| text::topic(rng)),
        summary,
    })
}

/// New tier-1 ranges: the older part of the longest run of loose messages outside the protected
/// tail (the oldest among equals) that can hold a range, cut where no tool pair is split;
/// sometimes two adjacent ranges.
pub(crate) fn tier1_ranges(
    rng: &mut Rng,
    mat: &Materialized<'_>,
    lay: &Layout,
    cfg: &NoaConfig,
    multi_percent: usize,
) -> Option<Vec<RangeSpec>> {
    let min = crate::noa::compress::MIN_RANGE_MESSAGES.max(2);
    let items = &mat.items;
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < lay.tail {
        if !items.get(i).is_some_and(free_msg) {
            i += 1;
            continue;
        }
        let s = i;
        while i < lay.tail && items.get(i).is_some_and(free_msg) {
            i += 1;
        }
        runs.push((s, i));
    }
    runs.sort_by_key(|&(s, e)| std::cmp::Reverse(e - s));
    for (s, e) in runs {
        let Some(a) = (s..e).find(|&k| lay.cut_ok(k)) else {
            continue;
        };
        let cuts: Vec<usize> = (a + min..=e).filter(|&k| lay.cut_ok(k)).collect();
        let want = a + (e - a) * rng.range(50, 100) / 100;
        let Some(&c) = cuts.iter().rev().find(|&&k| k <= want).or(cuts.first()) else {
            continue;
        };
        if rng.percent(multi_percent) && c >= a + 2 * min {
            let mids: Vec<usize> = (a + min..=c - min).filter(|&k| lay.cut_ok(k)).collect();
            if let Some(&m) = mids.get(rng.below(mids.len())) {
                let first = range_over(rng, mat, cfg, a, m - 1);
                let second = range_over(rng, mat, cfg, m, c - 1);
                if let (Some(x), Some(y)) = (first, second) {
                    return Some(vec![x, y]);
                }
            }
        }
        if let Some(r) = range_over(rng, mat, cfg, a, c - 1) {
            return Some(vec![r]);
        }
    }
    None
}

/// A consolidation: one range from the first to the last live block of `tier` in a stretch
/// outside the tail with no protected message and no block of a lower tier, when it holds at
/// least `min_blocks` of them. The plan makes it tier `tier + 1`.
pub(crate) fn consolidation(
    rng: &mut Rng,
    mat: &Materialized<'_>,
    lay: &Layout,
    cfg: &NoaConfig,
    tier: u32,
    min_blocks: usize,
) -> Option<Vec<RangeSpec>> {
    let items = &mat.items;
    let tier_of = |it: &Item<'_>| match it {
        Item::Block(b) => mat.state.blocks.get(b.block).map(|blk| blk.tier),
        Item::Msg(_) => None,
    };
    let barrier = |it: &Item<'_>| match it {
        Item::Msg(m) => m.protected_tool,
        Item::Block(_) => tier_of(it).is_none_or(|t| t < tier),
    };
    let mut i = 0;
    while i < lay.tail {
        if items.get(i).is_none_or(barrier) {
            i += 1;
            continue;
        }
        let s = i;
        let mut e = i;
        while e < lay.tail && items.get(e).is_some_and(|it| !barrier(it)) {
            e += 1;
        }
        i = e;
        let blocks: Vec<usize> = (s..e)
            .filter(|&k| items.get(k).and_then(tier_of) == Some(tier))
            .collect();
        let (Some(&a), Some(&b)) = (blocks.first(), blocks.last()) else {
            continue;
        };
        if blocks.len() < min_blocks.max(2) || !lay.cut_ok(a) || !lay.cut_ok(b + 1) {
            continue;
        }
        let children: Vec<(String, String)> = blocks
            .iter()
            .filter_map(|&k| match items.get(k) {
                Some(Item::Block(bi)) => mat
                    .state
                    .blocks
                    .get(bi.block)
                    .map(|blk| (blk.block_id.name(), blk.summary.clone())),
                _ => None,
            })
            .collect();
        let covered = cost(mat, items.get(a..=b)?);
        let max_bytes = (covered.saturating_sub(1) as usize).saturating_mul(4);
        let summary = text::consolidated_summary(rng, &children, cfg.min_summary_chars, max_bytes)?;
        let (start, end) = span_refs(mat, a, b)?;
        return Some(vec![RangeSpec {
            start,
            end,
            topic: Some(text::topic(rng)),
            summary,
        }]);
    }
    None
}

/// A batch the runtime refuses: a range into the protected tail, a too-short summary, or an
/// unknown ref.
fn refused_ranges(
    rng: &mut Rng,
    mat: &Materialized<'_>,
    lay: &Layout,
    cfg: &NoaConfig,
) -> Vec<RangeSpec> {
    let n = mat.items.len();
    let last_ref = mat.refs.per_msg.last().cloned().unwrap_or_default();
    let summary = text::summary(rng, cfg.min_summary_chars, 600)
        .unwrap_or_else(|| "Summary of the earlier work.".to_string());
    let topic = Some(text::topic(rng));
    match rng.below(3) {
        0 if lay.tail < n && n > 0 => {
            if let Some((start, end)) = span_refs(mat, 0, n - 1) {
                return vec![RangeSpec {
                    start,
                    end,
                    topic,
                    summary,
                }];
            }
        }
        1 if cfg.min_summary_chars > 6 && lay.tail >= 2 => {
            if let Some((start, end)) = span_refs(mat, 0, lay.tail - 1) {
                return vec![RangeSpec {
                    start,
                    end,
                    topic,
                    summary: "Done.".to_string(),
                }];
            }
        }
        _ => {}
    }
    let beyond = refs::ref_number(&last_ref).unwrap_or(0) + 40;
    let start = mat
        .refs
        .per_msg
        .first()
        .cloned()
        .unwrap_or_else(|| refs::format_ref(1));
    vec![RangeSpec {
        start,
        end: refs::format_ref(beyond),
        topic,
        summary,
    }]
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
    let m = spec.messages;
    let boundary_at = if m >= 4 { m / 2 } else { usize::MAX };
    let compact_part = s.rng.percent(50);
    let mut boundary_done = false;
    let mut compact_pending = false;
    let mut skill_pending = !compact_part && m >= 4;
    let mut next_compress = spec.compress.as_ref().map(|c| c.first_at);
    let mut next = Next::Prompt;
    while s.messages < m {
        if !boundary_done && s.messages >= boundary_at {
            s.push_boundary();
            boundary_done = true;
            compact_pending = compact_part;
        }
        let remaining = m - s.messages;
        next = match next {
            Next::Prompt => {
                let mut content = Vec::new();
                if compact_pending {
                    compact_pending = false;
                    let input = if s.rng.percent(70) {
                        json!({"trigger": "auto", "pre_tokens": s.context_tokens.max(1)})
                    } else {
                        json!(s.context_tokens.max(1))
                    };
                    content.push(Content::CompactBoundary(CompactBoundaryPart {
                        input: RawJson::from_value(&input),
                        extra: Default::default(),
                    }));
                    content.push(Content::text(
                        "This session is being continued from a previous conversation that ran out of context.",
                    ));
                }
                if skill_pending && s.messages >= m / 3 {
                    skill_pending = false;
                    content.push(Content::Other(json!({
                        "type": "skill",
                        "name": "rust-review",
                        "source": "project",
                        "args": {"strict": true}
                    })));
                }
                content.push(Content::Text(TextPart {
                    text: text::user_prompt(&mut s.rng),
                    extra: Default::default(),
                }));
                s.push_message("user", content);
                // An odd count: the user sends a follow-up right away, so the transcript still
                // ends with an assistant answer.
                if m % 2 == 1 && s.messages == 1 && remaining >= 3 {
                    let t = text::user_followup(&mut s.rng);
                    s.user_text(&t);
                }
                Next::Assistant
            }
            Next::Assistant => {
                if let (Some(sched), Some(at)) = (&spec.compress, next_compress) {
                    if s.messages >= at && remaining >= 3 {
                        let jitter = sched.interval * s.rng.range(75, 125) / 100;
                        next_compress = Some(s.messages + jitter.max(1));
                        if s.try_compress(sched) {
                            next = Next::Assistant;
                            continue;
                        }
                    }
                }
                if remaining == 1 || s.rng.percent(30) {
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
    s
}

/// Write a session's files and account for them.
pub(crate) fn write_session(
    out: &mut Out,
    s: &Session<'_>,
    report: &mut GenReport,
) -> Result<(), GenError> {
    let sid = &s.sid;
    let mut t = String::new();
    for (i, r) in s.records.iter().enumerate() {
        for (_, line) in s.garbage.iter().filter(|(at, _)| *at == i) {
            t.push_str(line);
            t.push('\n');
        }
        t.push_str(&r.to_line());
        t.push('\n');
    }
    if let Some(tail) = &s.torn_tail {
        t.push_str(tail);
    }
    out.write(&format!("transcripts/{sid}.jsonl"), t.as_bytes())?;
    for (aid, records) in &s.sidechains {
        let mut t = String::new();
        for r in records {
            t.push_str(&r.to_line());
            t.push('\n');
        }
        out.write(
            &format!("transcripts/{sid}/subagents/agent-{aid}.jsonl"),
            t.as_bytes(),
        )?;
        report.subagents += 1;
        report.subagent_messages += records.iter().filter(|r| r.as_message().is_some()).count();
    }
    for (rel, bytes) in &s.archives {
        out.write(&format!("noa/{sid}/{rel}"), bytes.as_bytes())?;
    }
    let state = match &s.state_file {
        StateFile::Auto => (!s.state.blocks.is_empty()).then(|| s.state.to_pretty()),
        StateFile::Skip => None,
        StateFile::Raw(bytes) => Some(bytes.clone()),
    };
    if let Some(bytes) = state {
        out.write(&format!("noa/{sid}/state.json"), bytes.as_bytes())?;
        report.blocks += s.state.blocks.len();
    }
    if !s.journal.is_empty() {
        let mut j = s.journal.join("\n");
        j.push('\n');
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
/// all four.
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

/// Write one memory file in the SPEC 2.2 form with a fixed modification time (scan order, and
/// so `MEMORY.md`, must not depend on when the files were written).
pub(crate) fn write_memory(
    out: &mut Out,
    file_name: &str,
    text: &str,
    minute: u64,
) -> Result<(), GenError> {
    let path = out.write(&format!("memory/{file_name}"), text.as_bytes())?;
    let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(BASE_SECS as u64 + minute * 60);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(mtime))
        .map_err(|source| GenError::Io { path, source })
}

/// Render a well-formed memory file, as the runtime saves one (`kind` `""`: no type).
pub(crate) fn memory_text(name: &str, description: &str, kind: &str, body: &str) -> String {
    memory::render(&memory::Memory::new(name, description, Some(kind), body))
}

/// `MEMORY.md` computed from the memory directory as it is now.
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
        while !slugs.insert(memory::slug(&name)) {
            name.push_str(" again");
        }
        let file = format!("{}.md", memory::slug(&name));
        write_memory(
            out,
            &file,
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
