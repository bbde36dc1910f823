//! The control protocol (SPEC 6): command lines, their results, and running them. Used by the
//! mount's `ctl` files and by `normafs ctl`.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::config::NoaConfig;
use crate::format::memory;
use crate::store::durable;
use crate::store::root::RootPaths;
use crate::store::txn::{self, TxnError};

/// Which `ctl` file a command was written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Session(String),
    Root,
}

/// A parsed command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// The runtime's Compress input as text; `true`: forced (`compress!`) on a live session.
    Compress(String, bool),
    /// `true`: forced (`rebuild!`).
    Rebuild(bool),
    Help,
    ReindexMemory,
}

impl Command {
    /// Whether the command changes files (refused under `--read-only`).
    pub fn mutates(&self) -> bool {
        !matches!(self, Command::Help)
    }
}

pub const SESSION_HELP: &str = "commands (one per line):
  compress {\"content\":[{\"startId\":\"m00010\",\"endId\":\"m00042\",\"topic\":\"…\",\"summary\":\"…\"}]}
                                  the runtime's Compress input; endpoints are refs or block ids
  compress START END SUMMARY…     one range, no topic; SUMMARY is the rest of the line
  rebuild                         rebuild state.json from the transcript and the journal
  compress! … / rebuild!          the same on a session that looks live (its runtime may
                                  overwrite the result at its next compression)
  help                            this text
one write() is one batch: its lines run in order, all or none, and each gets a result.
results: read this file: the last 32, one JSON line each (seq, pid: the process that wrote
the command, at, command, ok, message, result); `tail -n 1` shows the latest, and a script
sharing the session with others picks its own by pid";

pub const ROOT_HELP: &str = "commands (one per line):
  reindex-memory                  write memory/MEMORY.md from the computed index, durably
  help                            this text
one write() is one batch: its lines run in order, each gets a result.
results: read this file: the last 32, one JSON line each (seq, pid: the process that wrote
the command, at, command, ok, message, result)";

/// At most 64 characters of a word echoed in an error (a write may be megabytes long).
fn clip(word: &str) -> String {
    match word.char_indices().nth(64) {
        Some((at, _)) => format!("{}…", word.get(..at).unwrap_or_default()),
        None => word.to_string(),
    }
}

/// A command line that is no command of its `ctl` file. An unknown word is echoed clipped to
/// 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("empty command (try `help`)")]
    Empty,
    #[error("unknown command `{0}` (try `help`)")]
    Unknown(String),
    #[error("unknown command `{0}` for the root ctl (try `help`; compress and rebuild are in sessions/<sid>/ctl)")]
    UnknownAtRoot(String),
    #[error("`{0}` takes no arguments")]
    TakesNoArguments(String),
    #[error("usage: compress START END SUMMARY… or compress {{json}}")]
    CompressUsage,
}

/// Parse one command line of a `ctl` file.
pub fn parse(line: &str, scope: &Scope) -> Result<Command, CommandError> {
    let line = line.trim();
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((w, r)) => (w, r.trim()),
        None => (line, ""),
    };
    let no_args = |c: Command| {
        if rest.is_empty() {
            Ok(c)
        } else {
            Err(CommandError::TakesNoArguments(word.to_string()))
        }
    };
    let forced = word.ends_with('!');
    let base = word.strip_suffix('!').unwrap_or(word);
    match (base, scope) {
        ("help", _) if !forced => no_args(Command::Help),
        ("compress", Scope::Session(_)) => {
            if rest.is_empty() {
                return Err(CommandError::CompressUsage);
            }
            if rest.starts_with('{') || rest.starts_with('"') || rest.starts_with('`') {
                return Ok(Command::Compress(rest.to_string(), forced));
            }
            let mut it = rest.splitn(3, char::is_whitespace);
            let (Some(start), Some(end), Some(summary)) = (it.next(), it.next(), it.next()) else {
                return Err(CommandError::CompressUsage);
            };
            let summary = summary.trim();
            if start.is_empty() || end.is_empty() || summary.is_empty() {
                return Err(CommandError::CompressUsage);
            }
            let input = json!({"content": [{"startId": start, "endId": end, "summary": summary}]});
            Ok(Command::Compress(input.to_string(), forced))
        }
        ("rebuild", Scope::Session(_)) => no_args(Command::Rebuild(forced)),
        ("reindex-memory", Scope::Root) if !forced => no_args(Command::ReindexMemory),
        ("", _) => Err(CommandError::Empty),
        (_, Scope::Session(_)) => Err(CommandError::Unknown(clip(word))),
        (_, Scope::Root) => Err(CommandError::UnknownAtRoot(clip(word))),
    }
}

/// Seconds since the session's transcript was last written, when it exists.
pub fn idle_seconds(paths: &RootPaths, sid: &str, now: DateTime<Utc>) -> Option<u64> {
    let m = std::fs::symlink_metadata(paths.transcript_path(sid)).ok()?;
    let written: DateTime<Utc> = m.modified().ok()?.into();
    Some((now - written).num_seconds().max(0) as u64)
}

/// `Some(why)` when a session looks live (SPEC 6): its transcript was written within
/// `live_seconds`, so its runtime keeps its state in memory and will overwrite ctl's work.
pub fn live_reason(
    paths: &RootPaths,
    sid: &str,
    cfg: &NoaConfig,
    now: DateTime<Utc>,
) -> Option<String> {
    let idle = idle_seconds(paths, sid, now)?;
    (idle < cfg.live_seconds).then(|| {
        format!(
            "session {sid} looks live: its transcript was written {idle} s ago (live_seconds = {}); its runtime keeps the state in memory and would overwrite this at its next compression — run it anyway with `compress!` / `rebuild!`",
            cfg.live_seconds
        )
    })
}

/// At most this many characters of a command are quoted in its result (a bad write may be
/// megabytes long).
pub const QUOTE_CHARS: usize = 300;

/// `command` as its result quotes it: at most [`QUOTE_CHARS`] characters, then `…`.
pub fn quote(command: &str) -> String {
    match command.char_indices().nth(QUOTE_CHARS) {
        Some((at, _)) => format!("{}…", command.get(..at).unwrap_or_default()),
        None => command.to_string(),
    }
}

/// The record of one command, as read back from `ctl`.
#[derive(Debug, Clone, PartialEq)]
pub struct CtlRecord {
    pub seq: u64,
    /// The process that wrote the command through the mount (`None`: `normafs ctl`).
    pub pid: Option<u32>,
    pub at: String,
    pub command: String,
    pub ok: bool,
    pub message: String,
    pub result: Value,
    /// Why, when `ok` is false.
    pub error: Option<TxnError>,
}

impl CtlRecord {
    /// The result of a write refused before any of it ran: `what` quotes it.
    pub fn refused(seq: u64, now: DateTime<Utc>, what: &str, e: TxnError) -> CtlRecord {
        CtlRecord {
            seq,
            pid: None,
            at: txn::timestamp(now),
            command: quote(what),
            ok: false,
            message: e.to_string(),
            result: Value::Null,
            error: Some(e),
        }
    }

    /// The JSON line `{"seq","pid","at","command","ok","message","result"}` (`pid` only
    /// for a command written through the mount).
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("seq".into(), json!(self.seq));
        if let Some(pid) = self.pid {
            m.insert("pid".into(), json!(pid));
        }
        m.insert("at".into(), json!(self.at));
        m.insert("command".into(), json!(self.command));
        m.insert("ok".into(), json!(self.ok));
        m.insert("message".into(), json!(self.message));
        m.insert("result".into(), self.result.clone());
        Value::Object(m)
    }

    /// The record as written by process `pid`.
    pub fn by(mut self, pid: Option<u32>) -> CtlRecord {
        self.pid = pid;
        self
    }
}

/// Where and how commands run.
#[derive(Debug, Clone)]
pub struct Runner<'a> {
    pub paths: &'a RootPaths,
    pub cfg: &'a NoaConfig,
    pub read_only: bool,
}

impl Runner<'_> {
    /// Run one command line; never panics on bad input.
    pub fn run(&self, scope: &Scope, line: &str, seq: u64, now: DateTime<Utc>) -> CtlRecord {
        let at = txn::timestamp(now);
        let command = quote(line.trim());
        let fail = |e: TxnError| CtlRecord {
            seq,
            pid: None,
            at: at.clone(),
            command: command.clone(),
            ok: false,
            message: e.to_string(),
            result: Value::Null,
            error: Some(e),
        };
        let cmd = match parse(line, scope) {
            Ok(c) => c,
            Err(e) => return fail(TxnError::Invalid(e.to_string())),
        };
        if self.read_only && cmd.mutates() {
            return fail(TxnError::ReadOnly);
        }
        if let (Command::Compress(_, false) | Command::Rebuild(false), Scope::Session(sid)) =
            (&cmd, scope)
        {
            if let Some(why) = live_reason(self.paths, sid, self.cfg, now) {
                return fail(TxnError::Live(why));
            }
        }
        let outcome = match (&cmd, scope) {
            (Command::Help, Scope::Session(_)) => Ok(txn::Outcome {
                message: SESSION_HELP.into(),
                result: Value::Null,
            }),
            (Command::Help, Scope::Root) => Ok(txn::Outcome {
                message: ROOT_HELP.into(),
                result: Value::Null,
            }),
            (Command::Compress(input, _), Scope::Session(sid)) => {
                txn::compress(self.paths, sid, input, self.cfg, now)
            }
            (Command::Rebuild(_), Scope::Session(sid)) => {
                txn::rebuild(self.paths, sid, self.cfg, now)
            }
            (Command::ReindexMemory, _) => reindex_memory(self.paths),
            _ => Err(TxnError::Invalid("command not available here".into())),
        };
        match outcome {
            Ok(o) => CtlRecord {
                seq,
                pid: None,
                at,
                command,
                ok: true,
                message: o.message,
                result: o.result,
                error: None,
            },
            Err(e) => fail(e),
        }
    }
}

/// `reindex-memory`: write `MEMORY.md` from the computed index, durably.
pub fn reindex_memory(paths: &RootPaths) -> Result<txn::Outcome, TxnError> {
    let scan = memory::scan(&paths.memory);
    let index = memory::render_index(&scan.memories);
    let path = paths.memory.join("MEMORY.md");
    durable::atomic_replace(&path, index.as_bytes())
        .map_err(|e| TxnError::Io(format!("cannot write {}: {e}", path.display())))?;
    Ok(txn::Outcome {
        message: format!("wrote MEMORY.md with {} memories", scan.memories.len()),
        result: json!({"memories": scan.memories.len(), "skipped": scan.problems.len()}),
    })
}
