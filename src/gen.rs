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
//!   generator takes the view a resumed runtime would send ([`views::turn`]), picks ranges
//!   from the runtime's recommendation ([`recommend::recommend`]) or, once enough tier-1
//!   blocks are live, a block-endpoint range `b<i>..b<j>`, records the tool_use with the
//!   runtime's Compress input, applies it with [`compress::apply`] exactly as
//!   [`crate::noa::rebuild::Replay::rebuild`] replays a transcript call, and records the panel
//!   as the tool result (failed calls too: a short summary, an unknown ref). So a rebuild from
//!   history gives back the very `state.json` written. Like a model that reads the panels, it
//!   sends only ranges whose blocks overlap no live block (tried first, see `Session::disjoint`);
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

mod conversation;
mod damage;
mod text;
mod write;

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
use crate::noa::views::{self, Projection};
use crate::noa::{args, recommend, refs, tokens};

use conversation::*;
use text::Rng;
use write::*;

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
            s.push_str(&format!(
                "; {} damages injected: {} clean sessions and {} damaged ones",
                self.damages.len(),
                self.clean_sessions.len(),
                self.corrupt_sessions.len()
            ));
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
