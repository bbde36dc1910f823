//! The tolerant, incremental transcript loader (SPEC 3): bytes in, records and problems out.
//!
//! Pure code, no I/O. It never fails on content: every well-formed line becomes a [`Loaded`]
//! record, everything else becomes a [`Problem`] with its line number and byte offset.
//!
//! Incremental loading: a [`Parser`] is fed the bytes of a file in order, in chunks of any size.
//! Only newline-terminated lines are committed; an unterminated last line is parsed tentatively
//! (a record, or a torn tail) and parsed again when more bytes arrive. Invariant: after any
//! sequence of feeds, [`Parser::transcript`] equals [`Transcript::parse`] of all bytes fed.
//! A feed costs O(new bytes + length of the unterminated last line).
//!
//! Rules where SPEC 3/9 leave room (normafs choices):
//! - A line is malformed when it is empty or blank, not a JSON object, or an object whose known
//!   fields do not have their types (`"uuid": 5`, a missing `uuid` or `type`, a known field
//!   twice); the message is serde_json's (its column is within the line). Bytes are not
//!   altered: a trailing `\r` is JSON whitespace and accepted.
//! - The unterminated last line is a record when it parses, else a torn tail (a warning).
//! - The parent chain follows parsed records: a malformed line in between is skipped, so it
//!   does not break the chain by itself. The first record must have no `parent_uuid`; every
//!   later one must name the previous parsed record.
//! - Tool ids are read from the top level of `content[]` of messages (SPEC 3 "Messages");
//!   a tool_use answered by an earlier tool_result (the orphan case) stays unanswered; a second
//!   result for an answered tool_use is not an orphan; a repeated tool_use id replaces the
//!   earlier open one.
//! - Pending: walking back from the last message, each assistant message that has tool uses
//!   and none of them answered is in the trailing run; any other message ends it. The open
//!   tool uses of the run are `pending-tool-use` (info), all others `unanswered-tool-use`.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;

use serde::de::IgnoredAny;

use super::cold::{ColdRegion, ColdSink, ColdStore, TakeCold};
use super::short::ShortStr;
use super::transcript::{
    parse_line, Content, Message, Record, ToolResultContent, ToolUsePart, Usage,
};

/// The hasher of the loader's maps of ids: seeded per process, and a fraction of SipHash's
/// cost (SipHash was 2% of a large transcript's parse).
type Quick = foldhash::fast::RandomState;

/// How bad a finding is (SPEC 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warn,
    Info,
}

impl Severity {
    /// The word used in `audit.txt`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warn => "warn",
            Severity::Info => "info",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The transcript findings of SPEC 9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProblemKind {
    /// A newline-terminated line that is not a JSON object of the record shape.
    MalformedLine,
    /// The last line has no newline and does not parse (a write in progress); ignored.
    TornTail,
    /// A record reuses the uuid of an earlier record (reported on the later one).
    DuplicateUuid,
    /// `parent_uuid` is not the uuid of the previous parsed record.
    ParentChain,
    /// `session_id` differs from the session the file belongs to.
    SessionMismatch,
    /// A tool_result whose `tool_use_id` had no earlier tool_use.
    OrphanToolResult,
    /// A tool_use never answered by a later tool_result, not in the trailing run.
    UnansweredToolUse,
    /// A tool_use in the trailing run of unanswered assistant messages.
    PendingToolUse,
    /// A line longer than the runtime's loader accepts (64 MiB).
    LineTooLong,
    /// A record the runtime cannot read as it is: another role than user/assistant, a
    /// tool_result whose content is not an array, a known block type with fields of the
    /// wrong type.
    BadShape,
}

/// The longest line the runtime's transcript loader reads.
pub const MAX_LINE: usize = 64 << 20;

impl ProblemKind {
    /// The SPEC 9 code.
    pub fn code(&self) -> &'static str {
        match self {
            ProblemKind::MalformedLine => "transcript.malformed-line",
            ProblemKind::TornTail => "transcript.torn-tail",
            ProblemKind::DuplicateUuid => "transcript.duplicate-uuid",
            ProblemKind::ParentChain => "transcript.parent-chain",
            ProblemKind::SessionMismatch => "transcript.session-mismatch",
            ProblemKind::OrphanToolResult => "transcript.orphan-tool-result",
            ProblemKind::UnansweredToolUse => "transcript.unanswered-tool-use",
            ProblemKind::PendingToolUse => "transcript.pending-tool-use",
            ProblemKind::LineTooLong => "transcript.line-too-long",
            ProblemKind::BadShape => "transcript.bad-shape",
        }
    }

    /// The SPEC 9 severity.
    pub fn severity(&self) -> Severity {
        match self {
            ProblemKind::MalformedLine | ProblemKind::DuplicateUuid | ProblemKind::LineTooLong => {
                Severity::Error
            }
            ProblemKind::TornTail
            | ProblemKind::ParentChain
            | ProblemKind::SessionMismatch
            | ProblemKind::OrphanToolResult
            | ProblemKind::UnansweredToolUse
            | ProblemKind::BadShape => Severity::Warn,
            ProblemKind::PendingToolUse => Severity::Info,
        }
    }
}

/// One finding about a transcript, located by 1-based line and byte offset of the line start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub kind: ProblemKind,
    pub line: u64,
    pub offset: u64,
    pub message: String,
}

impl Problem {
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    pub fn severity(&self) -> Severity {
        self.kind.severity()
    }
}

/// A parsed record and where its line is.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub record: Record,
    /// 1-based line number.
    pub line: u64,
    /// Byte offset of the start of the line.
    pub offset: u64,
}

/// Where an open (not yet answered) tool_use is.
#[derive(Debug, Clone, PartialEq)]
struct OpenUse {
    /// Index into `Transcript::records`.
    record: usize,
    /// Index into the message's `content[]`.
    item: usize,
    line: u64,
    offset: u64,
}

/// The result of loading a transcript.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    /// Every well-formed record, in file order (including a parsable unterminated last line).
    pub records: Vec<Loaded>,
    /// Indices into `records` of the `message` records with a non-null message, in file order.
    pub messages: Vec<usize>,
    /// Usage summed over all records.
    pub usage: Usage,
    /// Line-local and backward-looking problems, in line order (tool-use findings are derived
    /// on demand from `open`, since they depend on what follows).
    found: Vec<Problem>,
    /// The torn tail, when the unterminated last line does not parse.
    torn: Option<Problem>,
    /// Every tool_use id seen so far.
    seen_tool_uses: HashSet<String, Quick>,
    /// Tool uses not (yet) answered by a later tool_result.
    open: HashMap<String, OpenUse, Quick>,
}

impl Transcript {
    /// Load a whole transcript. `session` is the session id the file belongs to, when known.
    pub fn parse(bytes: &[u8], session: Option<&str>) -> Transcript {
        let mut parser = Parser::new(session);
        parser.feed(bytes);
        parser.into_transcript()
    }

    /// All problems, sorted by line (within a line: line-local findings, then tool uses in
    /// content order).
    pub fn problems(&self) -> Vec<Problem> {
        let pending = self.pending_records();
        let mut tools: Vec<(&String, &OpenUse)> = self.open.iter().collect();
        tools.sort_by_key(|(_, u)| (u.record, u.item));
        let mut all: Vec<Problem> = self.found.iter().chain(self.torn.iter()).cloned().collect();
        for (id, u) in tools {
            let name = self.tool_use_part(u).map_or("", |p| p.name.as_str());
            let (kind, message) = if pending.contains(&u.record) {
                (
                    ProblemKind::PendingToolUse,
                    format!(
                        "tool_use {id} ({name}) at the tail awaits its result; \
                         the runtime drops it on resume"
                    ),
                )
            } else {
                (
                    ProblemKind::UnansweredToolUse,
                    format!("tool_use {id} ({name}) has no tool_result"),
                )
            };
            all.push(Problem {
                kind,
                line: u.line,
                offset: u.offset,
                message,
            });
        }
        // Stable: keeps line-local findings before tool findings of the same line.
        all.sort_by_key(|p| p.line);
        all
    }

    /// The messages (SPEC 3), in file order, with their records.
    pub fn iter_messages(&self) -> impl Iterator<Item = (&Loaded, &Message)> + '_ {
        self.messages.iter().filter_map(|&i| {
            let loaded = self.records.get(i)?;
            Some((loaded, loaded.record.as_message()?))
        })
    }

    /// Records that form the trailing run of assistant messages whose tool uses are all
    /// unanswered (what the runtime drops on resume). An assistant message without tool_use,
    /// or any other message, ends the run.
    fn pending_records(&self) -> HashSet<usize> {
        let mut run = HashSet::new();
        for &i in self.messages.iter().rev() {
            let Some(msg) = self.records.get(i).and_then(|l| l.record.as_message()) else {
                break;
            };
            if msg.role != "assistant" {
                break;
            }
            let ids: Vec<&str> = msg
                .content
                .iter()
                .filter_map(|c| match c {
                    Content::ToolUse(u) => Some(u.id.as_str()),
                    _ => None,
                })
                .collect();
            let all_open = ids
                .iter()
                .all(|id| self.open.get(*id).is_some_and(|o| o.record == i));
            if ids.is_empty() || !all_open {
                break;
            }
            run.insert(i);
        }
        run
    }

    fn tool_use_part(&self, u: &OpenUse) -> Option<&ToolUsePart> {
        let msg = self.records.get(u.record)?.record.as_message()?;
        match msg.content.get(u.item)? {
            Content::ToolUse(p) => Some(p),
            _ => None,
        }
    }
}

/// What applying the tentative last record changed, so that it can be taken back.
#[derive(Debug, Clone, Default)]
struct Undo {
    usage: Usage,
    messages_len: usize,
    found_len: usize,
    uuid_inserted: Option<ShortStr>,
    prev: Option<(ShortStr, u64)>,
    seen_inserted: Vec<String>,
    /// Changes to `open`, in order: `(id, value before the change)`.
    open_changes: Vec<(String, Option<OpenUse>)>,
}

/// The first line of each uuid, without a second copy of every uuid: a uuid is found by its hash
/// and checked against the uuid of the record found. A uuid whose hash an earlier, different
/// uuid already has is kept whole aside.
#[derive(Debug, Clone, Default)]
struct UuidIndex<S = Quick> {
    hasher: S,
    /// Hash of a uuid -> index in `Transcript::records` of its first record.
    by_hash: HashMap<u64, usize, Quick>,
    /// Uuid -> first line, for uuids whose hash was taken.
    aside: HashMap<String, u64, Quick>,
}

impl<S: BuildHasher> UuidIndex<S> {
    fn first_line(&self, uuid: &str, records: &[Loaded]) -> Option<u64> {
        let found = self
            .by_hash
            .get(&self.hasher.hash_one(uuid))
            .and_then(|&i| records.get(i))
            .filter(|l| l.record.uuid == uuid);
        match found {
            Some(l) => Some(l.line),
            None => self.aside.get(uuid).copied(),
        }
    }

    /// Record the first use of `uuid`, by the record at `index`.
    fn insert(&mut self, uuid: &str, index: usize, line: u64) {
        match self.by_hash.entry(self.hasher.hash_one(uuid)) {
            Entry::Vacant(e) => {
                e.insert(index);
            }
            Entry::Occupied(_) => {
                self.aside.insert(uuid.to_string(), line);
            }
        }
    }

    /// Take back [`UuidIndex::insert`] of the record at `index`.
    fn remove(&mut self, uuid: &str, index: usize) {
        let h = self.hasher.hash_one(uuid);
        if self.by_hash.get(&h) == Some(&index) {
            self.by_hash.remove(&h);
        } else {
            self.aside.remove(uuid);
        }
    }
}

/// An incremental transcript loader: feed it the bytes of a file in order.
#[derive(Debug, Clone)]
pub struct Parser {
    t: Transcript,
    session: Option<String>,
    /// First line of each uuid.
    uuids: UuidIndex,
    /// Uuid and line of the previous parsed record.
    prev: Option<(ShortStr, u64)>,
    /// Bytes of complete lines so far.
    committed: u64,
    /// Number of complete lines so far.
    lines: u64,
    /// Start offset and length (newline included) of the last complete line.
    last_line: Option<(u64, u64)>,
    /// The unterminated last line.
    pending: Vec<u8>,
    /// Set while the tentative parse of `pending` produced a record: how to take it back.
    tail_undo: Option<Undo>,
    /// The last session id read: a record repeating it shares it.
    last_session: Option<Arc<str>>,
    /// Where the records' cold bytes go (see [`Parser::store_cold_in`]).
    cold: ColdSink,
}

impl Parser {
    pub fn new(session: Option<&str>) -> Parser {
        Parser {
            t: Transcript::default(),
            session: session.map(str::to_string),
            uuids: UuidIndex::default(),
            prev: None,
            committed: 0,
            lines: 0,
            last_line: None,
            last_session: None,
            pending: Vec::new(),
            tail_undo: None,
            cold: ColdSink::default(),
        }
    }

    /// Move the cold bytes of the records read from now on (thinking signatures, unknown
    /// record fields: see [`crate::format::cold`]) to `store`.
    pub fn store_cold_in(&mut self, store: ColdStore) {
        self.cold = ColdSink::to(store);
    }

    /// The transcript of all bytes fed so far.
    pub fn transcript(&self) -> &Transcript {
        &self.t
    }

    pub fn into_transcript(self) -> Transcript {
        self.t
    }

    /// Give back the spare capacity of the record lists (after a whole file was read: they
    /// grew by doubling).
    pub fn shrink_to_fit(&mut self) {
        self.t.records.shrink_to_fit();
        self.t.messages.shrink_to_fit();
    }

    /// Bytes of complete (newline-terminated) lines fed so far.
    pub fn committed_len(&self) -> u64 {
        self.committed
    }

    /// All bytes fed so far (complete lines plus the unterminated last line).
    pub fn fed_len(&self) -> u64 {
        self.committed.saturating_add(self.pending.len() as u64)
    }

    /// The unterminated last line fed so far (empty when the input ends with a newline).
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// The number of messages from complete lines: later feeds keep them as they are (a
    /// message read from the unterminated last line may be replaced).
    pub fn stable_messages(&self) -> usize {
        match &self.tail_undo {
            Some(undo) => undo.messages_len,
            None => self.t.messages.len(),
        }
    }

    /// Offset and length (newline included) of the last complete line, if any.
    pub fn last_line(&self) -> Option<(u64, u64)> {
        self.last_line
    }

    /// Feed the bytes that follow everything fed before.
    pub fn feed(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.rollback_tail();
        let mut rest = bytes;
        if !self.pending.is_empty() {
            match memchr::memchr(b'\n', rest) {
                Some(nl) => {
                    let mut line = std::mem::take(&mut self.pending);
                    line.extend_from_slice(rest.get(..nl).unwrap_or_default());
                    self.commit_line(&line);
                    // Keep the allocation for the next unterminated line.
                    line.clear();
                    self.pending = line;
                    rest = rest.get(nl + 1..).unwrap_or_default();
                }
                None => {
                    self.pending.extend_from_slice(rest);
                    rest = &[];
                }
            }
        }
        let done = memchr::memrchr(b'\n', rest).map_or(0, |nl| nl + 1);
        let (complete, tail) = rest.split_at(done);
        self.commit_lines(complete);
        self.pending.extend_from_slice(tail);
        self.parse_tail();
        // Every cold range handed out is readable once the feed returns.
        self.cold.flush();
    }

    /// Parse and commit complete lines (each ending with a newline). Large feeds are cut into
    /// pieces that this thread and helpers on the other cores take in turn to parse; only
    /// committing is in order, here, between the pieces this thread parses.
    fn commit_lines(&mut self, complete: &[u8]) {
        let helpers = parse_helpers(complete.len());
        if helpers == 0 {
            for line in lines_of(complete) {
                self.commit_line(line);
            }
            return;
        }
        let pieces = pieces_of(complete, PIECE);
        // Each piece moves its cold bytes to a region of the store of its own, on the thread
        // that parses it: where its lines are in the feed, from where the feed's begins.
        let regions = self.cold.reserve(complete.len() as u64);
        let parse = |i: usize| {
            let piece = pieces[i];
            let region = regions.as_ref().map(|(store, at)| {
                let from = piece.as_ptr() as u64 - complete.as_ptr() as u64;
                ColdRegion::new(store.clone(), at + from, piece.len())
            });
            parse_piece(piece, region)
        };
        let shared = Pieces::new(pieces.len());
        let help = || shared.parse_on_helper(&parse);
        crate::pool::with_helpers(helpers, &help, || {
            for next in 0..pieces.len() {
                let parsed = loop {
                    match shared.next_for_committer(next) {
                        Next::Parsed(parsed) => break parsed,
                        Next::Own => break parse(next),
                        Next::Ahead(i) => shared.put(i, parse(i)),
                    }
                };
                for (line, record) in parsed.lines {
                    self.commit_parsed(line, record);
                }
                if let Some(region) = parsed.cold {
                    self.cold.fill(region);
                }
            }
        });
    }

    /// Parse and commit one complete line (without its newline).
    fn commit_line(&mut self, line: &[u8]) {
        self.commit_parsed(line, parse_record(line));
    }

    /// Commit one complete line (without its newline), parsed.
    fn commit_parsed(&mut self, line: &[u8], parsed: Result<Record, LineError>) {
        let number = self.lines + 1;
        let offset = self.committed;
        if line.len() > MAX_LINE {
            self.t.found.push(Problem {
                kind: ProblemKind::LineTooLong,
                line: number,
                offset,
                message: format!(
                    "a line of {} bytes, over the runtime's 64 MiB limit: the runtime cannot load this transcript",
                    line.len()
                ),
            });
        }
        match parsed {
            // The runtime skips empty lines.
            Err(LineError::Empty) => {}
            Ok(record) => self.apply(record, number, offset, None),
            Err(message) => self.t.found.push(Problem {
                kind: ProblemKind::MalformedLine,
                line: number,
                offset,
                message: format!("{message} (the runtime cannot resume this session)"),
            }),
        }
        let len = line.len() as u64 + 1;
        self.lines = number;
        self.committed = offset.saturating_add(len);
        self.last_line = Some((offset, len));
    }

    /// Tentatively parse the unterminated last line.
    fn parse_tail(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let number = self.lines + 1;
        let offset = self.committed;
        // A JSON object ends with `}`: skip the parse while a long line is still arriving.
        let trimmed = self.pending.trim_ascii();
        let parsed = if trimmed.first() == Some(&b'{') && trimmed.last() == Some(&b'}') {
            parse_record(&self.pending)
        } else {
            Err(LineError::Unterminated)
        };
        match parsed {
            Ok(record) => {
                let mut undo = Undo::default();
                self.apply(record, number, offset, Some(&mut undo));
                self.tail_undo = Some(undo);
            }
            Err(reason) => {
                self.t.torn = Some(Problem {
                    kind: ProblemKind::TornTail,
                    line: number,
                    offset,
                    message: format!(
                        "last line has no newline and does not parse ({} bytes, ignored): {reason}",
                        self.pending.len()
                    ),
                })
            }
        }
    }

    /// Take back the tentative last record or torn tail, restoring the committed state.
    fn rollback_tail(&mut self) {
        self.t.torn = None;
        let Some(undo) = self.tail_undo.take() else {
            return;
        };
        self.t.records.pop();
        self.t.messages.truncate(undo.messages_len);
        self.t.usage = undo.usage;
        self.t.found.truncate(undo.found_len);
        if let Some(uuid) = undo.uuid_inserted {
            self.uuids.remove(&uuid, self.t.records.len());
        }
        self.prev = undo.prev;
        for id in undo.seen_inserted {
            self.t.seen_tool_uses.remove(&id);
        }
        for (id, before) in undo.open_changes.into_iter().rev() {
            match before {
                Some(u) => self.t.open.insert(id, u),
                None => self.t.open.remove(&id),
            };
        }
    }

    /// Add one parsed record: cross-record checks, tool-use bookkeeping, usage, indices.
    /// With `undo`, every change to the running state is logged so it can be taken back.
    fn apply(&mut self, mut record: Record, line: u64, offset: u64, mut undo: Option<&mut Undo>) {
        take_cold(&mut self.cold, &mut record);
        if let Some(sid) = &mut record.session_id {
            match &self.last_session {
                Some(last) if **last == **sid => *sid = last.clone(),
                _ => self.last_session = Some(sid.clone()),
            }
        }
        if let Some(u) = undo.as_deref_mut() {
            u.usage = self.t.usage.clone();
            u.messages_len = self.t.messages.len();
            u.found_len = self.t.found.len();
            u.prev = self.prev.clone();
        }
        let index = self.t.records.len();
        let problem = |kind, message| Problem {
            kind,
            line,
            offset,
            message,
        };
        let mut found = Vec::new();

        match self.uuids.first_line(&record.uuid, &self.t.records) {
            Some(first) => found.push(problem(
                ProblemKind::DuplicateUuid,
                format!("uuid {} was already used on line {first}", record.uuid),
            )),
            None => {
                self.uuids.insert(&record.uuid, index, line);
                if let Some(u) = undo.as_deref_mut() {
                    u.uuid_inserted = Some(record.uuid.clone());
                }
            }
        }

        if let Some(message) = parent_chain_problem(record.parent_uuid.as_deref(), &self.prev) {
            found.push(problem(ProblemKind::ParentChain, message));
        }
        self.prev = Some((record.uuid.clone(), line));

        if let (Some(expected), Some(actual)) = (&self.session, &record.session_id) {
            if expected.as_str() != &**actual {
                found.push(problem(
                    ProblemKind::SessionMismatch,
                    format!("session_id {actual} differs from the file's session {expected}"),
                ));
            }
        }

        if let Some(msg) = record.as_message() {
            if let Some(why) = bad_shape(msg) {
                found.push(problem(ProblemKind::BadShape, why));
            }
            for (item, content) in msg.content.iter().enumerate() {
                match content {
                    Content::ToolUse(part) => {
                        if self.t.seen_tool_uses.insert(part.id.clone()) {
                            if let Some(u) = undo.as_deref_mut() {
                                u.seen_inserted.push(part.id.clone());
                            }
                        }
                        let open = OpenUse {
                            record: index,
                            item,
                            line,
                            offset,
                        };
                        let before = self.t.open.insert(part.id.clone(), open);
                        if let Some(u) = undo.as_deref_mut() {
                            u.open_changes.push((part.id.clone(), before));
                        }
                    }
                    Content::ToolResult(part) => {
                        if !self.t.seen_tool_uses.contains(&part.tool_use_id) {
                            found.push(problem(
                                ProblemKind::OrphanToolResult,
                                format!(
                                    "tool_result for {} has no earlier tool_use",
                                    part.tool_use_id
                                ),
                            ));
                        } else if let Some(before) = self.t.open.remove(&part.tool_use_id) {
                            if let Some(u) = undo.as_deref_mut() {
                                u.open_changes
                                    .push((part.tool_use_id.clone(), Some(before)));
                            }
                        }
                    }
                    _ => {}
                }
            }
            self.t.messages.push(index);
        }

        if let Some(usage) = record.usage() {
            self.t.usage.add(usage);
        }
        self.t.found.append(&mut found);
        self.t.records.push(Loaded {
            record,
            line,
            offset,
        });
    }
}

/// Why the runtime cannot read a message as it is written, if it cannot.
fn bad_shape(msg: &Message) -> Option<String> {
    if msg.role != "user" && msg.role != "assistant" {
        return Some(format!("role {:?} is neither user nor assistant", msg.role));
    }
    for (i, c) in msg.content.iter().enumerate() {
        match c {
            Content::ToolResult(r) if matches!(r.content, Some(ToolResultContent::Text(_))) => {
                return Some(format!(
                    "content[{i}]: a tool_result whose content is a string, not an array of blocks"
                ));
            }
            Content::Other(v) => {
                let Some(obj) = v.as_object() else {
                    return Some(format!("content[{i}] is not an object"));
                };
                let known = matches!(
                    obj.get("type").and_then(serde_json::Value::as_str),
                    Some("text" | "thinking" | "tool_use" | "tool_result")
                );
                // Fields the runtime reads, and the JSON type each must have.
                let wrong = obj.iter().find(|(k, val)| match k.as_str() {
                    "type" | "text" | "thinking" | "signature" | "id" | "name" | "tool_use_id" => {
                        !(val.is_string() || val.is_null())
                    }
                    "is_error" => !(val.is_boolean() || val.is_null()),
                    "content" => !(val.is_array() || val.is_null()),
                    _ => false,
                });
                if let (true, Some((k, _))) = (known || obj.get("type").is_none(), wrong) {
                    return Some(format!(
                        "content[{i}]: field {k:?} has a type the runtime cannot read"
                    ));
                }
            }
            _ => {}
        }
    }
    None
}

/// Move a record's cold bytes to `sink`: its unknown fields, its thinking blocks (thought and
/// signature), the texts of its text blocks and of the text items of its tool results.
fn take_cold(sink: &mut impl TakeCold, record: &mut Record) {
    if let Some(c) = record.extra.cold_mut() {
        sink.take(c);
    }
    if let Some(Some(m)) = &mut record.message {
        for c in &mut m.content {
            match c {
                Content::Thinking(t) => {
                    t.thinking.move_to(sink);
                    if let Some(sig) = &mut t.signature {
                        sig.move_to(sink);
                    }
                }
                Content::Text(t) => t.text.move_to(sink),
                Content::ToolResult(r) => {
                    if let Some(ToolResultContent::Items(items)) = &mut r.content {
                        for item in items {
                            if let Content::Text(t) = item {
                                t.text.move_to(sink);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// The parent-chain finding for a record, given the previous parsed record.
fn parent_chain_problem(parent: Option<&str>, prev: &Option<(ShortStr, u64)>) -> Option<String> {
    match (parent, prev) {
        (None, None) => None,
        (Some(p), Some((u, _))) if *u == p => None,
        (Some(p), None) => Some(format!("first record has parent_uuid {p}")),
        (None, Some((u, l))) => Some(format!(
            "parent_uuid is absent; the previous record (line {l}) has uuid {u}"
        )),
        (Some(p), Some((u, l))) => Some(format!(
            "parent_uuid {p} is not the previous record's uuid {u} (line {l})"
        )),
    }
}

/// Why a transcript line is not a record.
#[derive(Debug, thiserror::Error)]
enum LineError {
    #[error("empty line")]
    Empty,
    /// JSON of another kind than an object: [`value_kind`]'s word for it.
    #[error("not a JSON object: found {0}")]
    NotAnObject(&'static str),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The unterminated last line does not end with `}` (it may be still arriving).
    #[error("does not end with '}}'")]
    Unterminated,
}

/// Complete lines of at least this many bytes are parsed on more than one core.
const PARALLEL_BYTES: usize = 1 << 20;

/// At most this many cores parse one feed.
const PARALLEL_MAX: usize = 4;

/// About how many bytes of lines make one piece of a parse shared between cores.
const PIECE: usize = 256 << 10;

/// How many threads besides this one help parse `len` bytes of complete lines.
fn parse_helpers(len: usize) -> usize {
    if len < PARALLEL_BYTES {
        return 0;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get().min(PARALLEL_MAX)) - 1
}

/// `complete` (lines ending with a newline) cut after the first newline at or past every
/// `size` bytes.
fn pieces_of(complete: &[u8], size: usize) -> Vec<&[u8]> {
    let mut pieces = Vec::with_capacity(complete.len() / size + 1);
    let mut rest = complete;
    while !rest.is_empty() {
        let end = rest
            .get(size..)
            .and_then(|r| memchr::memchr(b'\n', r))
            .map_or(rest.len(), |nl| size + nl + 1);
        let (piece, after) = rest.split_at(end);
        pieces.push(piece);
        rest = after;
    }
    pieces
}

/// A piece's lines, each with its parse, and the region its cold bytes moved to.
struct ParsedPiece<'a> {
    lines: Vec<(&'a [u8], Result<Record, LineError>)>,
    cold: Option<ColdRegion>,
}

fn parse_piece(piece: &[u8], mut cold: Option<ColdRegion>) -> ParsedPiece<'_> {
    let lines = lines_of(piece)
        .map(|line| {
            let mut parsed = parse_record(line);
            if let (Ok(record), Some(region)) = (&mut parsed, &mut cold) {
                take_cold(region, record);
            }
            (line, parsed)
        })
        .collect();
    ParsedPiece { lines, cold }
}

/// The pieces of one shared parse: taken in order by whoever is free, each parsed by one
/// thread and committed in order by the one that commits.
struct Pieces<'a> {
    n: usize,
    taken: std::sync::atomic::AtomicUsize,
    state: parking_lot::Mutex<Vec<Piece<'a>>>,
    ready: parking_lot::Condvar,
}

enum Piece<'a> {
    /// Not taken, or being parsed.
    Waiting,
    Parsed(ParsedPiece<'a>),
    /// The helper that took it stopped (a panic): the committer parses it.
    Dropped,
}

/// What the committer does for the next piece in order.
enum Next<'a> {
    /// Commit the lines a helper parsed.
    Parsed(ParsedPiece<'a>),
    /// Parse and commit it: no one took it.
    Own,
    /// Parse piece `i`, a later one, while a helper parses the next.
    Ahead(usize),
}

impl<'a> Pieces<'a> {
    fn new(n: usize) -> Pieces<'a> {
        Pieces {
            n,
            taken: std::sync::atomic::AtomicUsize::new(0),
            state: parking_lot::Mutex::new((0..n).map(|_| Piece::Waiting).collect()),
            ready: parking_lot::Condvar::new(),
        }
    }

    fn take(&self) -> usize {
        self.taken
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn put(&self, i: usize, parsed: ParsedPiece<'a>) {
        self.set(i, Piece::Parsed(parsed));
    }

    fn set(&self, i: usize, piece: Piece<'a>) {
        if let Some(p) = self.state.lock().get_mut(i) {
            *p = piece;
        }
        self.ready.notify_all();
    }

    /// A helper's part: take pieces until none is left.
    fn parse_on_helper(&self, parse: &impl Fn(usize) -> ParsedPiece<'a>) {
        loop {
            let i = self.take();
            if i >= self.n {
                return;
            }
            // Should the parse panic, the committer is told rather than left waiting.
            let guard = DropGuard(self, i);
            let parsed = parse(i);
            std::mem::forget(guard);
            self.put(i, parsed);
        }
    }

    /// What to do about piece `next`, every piece before it committed.
    fn next_for_committer(&self, next: usize) -> Next<'a> {
        let mut state = self.state.lock();
        loop {
            match state
                .get_mut(next)
                .map(|p| std::mem::replace(p, Piece::Waiting))
            {
                Some(Piece::Parsed(lines)) => return Next::Parsed(lines),
                Some(Piece::Dropped) | None => return Next::Own,
                Some(Piece::Waiting) => {}
            }
            // Taken by a helper, or not yet: take the first piece no one has.
            if self.taken.load(std::sync::atomic::Ordering::Relaxed) < self.n {
                drop(state);
                let i = self.take();
                if i == next {
                    return Next::Own;
                }
                if i < self.n {
                    return Next::Ahead(i);
                }
                state = self.state.lock();
                continue;
            }
            self.ready.wait(&mut state);
        }
    }
}

/// Marks a helper's piece as dropped when its parse unwinds.
struct DropGuard<'p, 'a>(&'p Pieces<'a>, usize);

impl Drop for DropGuard<'_, '_> {
    fn drop(&mut self) {
        self.0.set(self.1, Piece::Dropped);
    }
}

/// The lines of `part` (each ending with a newline), without their newlines.
fn lines_of(part: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', part).map(move |nl| {
        let line = part.get(start..nl).unwrap_or_default();
        start = nl + 1;
        line
    })
}

/// Parse one line into a record, or say why it is not one.
fn parse_record(line: &[u8]) -> Result<Record, LineError> {
    let trimmed = line.trim_ascii();
    match trimmed.first() {
        None => Err(LineError::Empty),
        Some(b'{') => Ok(parse_line(line)?),
        Some(&first) => {
            serde_json::from_slice::<IgnoredAny>(line)?;
            Err(LineError::NotAnObject(value_kind(first)))
        }
    }
}

/// The kind of a JSON value from its first byte, for messages.
fn value_kind(first: u8) -> &'static str {
    match first {
        b'[' => "an array",
        b'"' => "a string",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        _ => "a number",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasherDefault, Hasher};

    /// Every key hashes the same: every uuid after the first goes aside.
    #[derive(Default)]
    struct Collide;

    impl Hasher for Collide {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    #[test]
    fn uuids_with_one_hash_are_told_apart() {
        let records: Vec<Loaded> = ["a", "b"]
            .iter()
            .enumerate()
            .map(|(i, u)| Loaded {
                record: parse_line(format!("{{\"uuid\":\"{u}\",\"type\":\"x\"}}").as_bytes())
                    .expect("record"),
                line: i as u64 + 1,
                offset: 0,
            })
            .collect();
        let mut index = UuidIndex::<BuildHasherDefault<Collide>>::default();
        index.insert("a", 0, 1);
        assert_eq!(index.first_line("b", &records), None);
        index.insert("b", 1, 2);
        assert_eq!(index.first_line("a", &records), Some(1));
        assert_eq!(index.first_line("b", &records), Some(2));
        assert_eq!(index.first_line("c", &records), None);
        index.remove("b", 1);
        assert_eq!(index.first_line("b", &records), None);
        assert_eq!(index.first_line("a", &records), Some(1));
        index.remove("a", 0);
        assert_eq!(index.first_line("a", &records), None);
    }
}
