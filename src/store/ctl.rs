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
    Compress(Value),
    Rebuild,
    Help,
    ReindexMemory,
}

impl Command {
    /// Whether the command changes files (refused under `--read-only`).
    pub fn mutates(&self) -> bool {
        !matches!(self, Command::Help)
    }
}

/// Why a command failed, by the errno the mount answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CtlErrorKind {
    /// `EINVAL`: parse or validation.
    Invalid,
    /// `EBUSY`: the session lock is held.
    Busy,
    /// `EIO`: backing I/O.
    Io,
    /// `EROFS`: a mutating command under `--read-only`.
    ReadOnly,
}

impl CtlErrorKind {
    pub fn errno(&self) -> i32 {
        match self {
            CtlErrorKind::Invalid => libc::EINVAL,
            CtlErrorKind::Busy => libc::EBUSY,
            CtlErrorKind::Io => libc::EIO,
            CtlErrorKind::ReadOnly => libc::EROFS,
        }
    }
}

pub const SESSION_HELP: &str = "commands (one per line):
  compress {\"ranges\":[{\"start\":\"m0010\",\"end\":\"m0042\",\"topic\":\"…\",\"summary\":\"…\"}]}
  compress START END SUMMARY…     one range, no topic; SUMMARY is the rest of the line
  rebuild                         rebuild state.json from the transcript and the journal
  help                            this text
results: read this file (JSON lines: seq, at, command, ok, message, result)";

pub const ROOT_HELP: &str = "commands (one per line):
  reindex-memory                  write memory/MEMORY.md from the computed index, durably
  help                            this text
results: read this file (JSON lines: seq, at, command, ok, message, result)";

/// At most 64 characters of a word echoed in an error (a write may be megabytes long).
fn clip(word: &str) -> String {
    match word.char_indices().nth(64) {
        Some((at, _)) => format!("{}…", word.get(..at).unwrap_or_default()),
        None => word.to_string(),
    }
}

/// Parse one command line of a `ctl` file.
pub fn parse(line: &str, scope: &Scope) -> Result<Command, String> {
    let line = line.trim();
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((w, r)) => (w, r.trim()),
        None => (line, ""),
    };
    let no_args = |c: Command| {
        if rest.is_empty() {
            Ok(c)
        } else {
            Err(format!("`{word}` takes no arguments"))
        }
    };
    match (word, scope) {
        ("help", _) => no_args(Command::Help),
        ("compress", Scope::Session(_)) => {
            if rest.starts_with('{') {
                let v: Value = serde_json::from_str(rest).map_err(|e| format!("compress: invalid JSON: {e}"))?;
                return Ok(Command::Compress(v));
            }
            let mut it = rest.splitn(3, char::is_whitespace);
            let (Some(start), Some(end), Some(summary)) = (it.next(), it.next(), it.next()) else {
                return Err("usage: compress START END SUMMARY… or compress {json}".into());
            };
            let summary = summary.trim();
            if start.is_empty() || end.is_empty() || summary.is_empty() {
                return Err("usage: compress START END SUMMARY… or compress {json}".into());
            }
            Ok(Command::Compress(json!({"ranges": [{"start": start, "end": end, "summary": summary}]})))
        }
        ("rebuild", Scope::Session(_)) => no_args(Command::Rebuild),
        ("reindex-memory", Scope::Root) => no_args(Command::ReindexMemory),
        ("", _) => Err("empty command (try `help`)".into()),
        (w, Scope::Session(_)) => Err(format!("unknown command `{}` (try `help`)", clip(w))),
        (w, Scope::Root) => Err(format!("unknown command `{}` for the root ctl (try `help`; compress and rebuild are in sessions/<sid>/ctl)", clip(w))),
    }
}

/// The record of one command, as read back from `ctl`.
#[derive(Debug, Clone, PartialEq)]
pub struct CtlRecord {
    pub seq: u64,
    pub at: String,
    pub command: String,
    pub ok: bool,
    pub message: String,
    pub result: Value,
    /// Set when `ok` is false.
    pub error: Option<CtlErrorKind>,
}

impl CtlRecord {
    /// The JSON line `{"seq","at","command","ok","message","result"}`.
    pub fn to_json(&self) -> Value {
        json!({
            "seq": self.seq,
            "at": self.at,
            "command": self.command,
            "ok": self.ok,
            "message": self.message,
            "result": self.result,
        })
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
        let command = line.trim().to_string();
        let fail = |kind: CtlErrorKind, message: String| CtlRecord {
            seq,
            at: at.clone(),
            command: command.clone(),
            ok: false,
            message,
            result: Value::Null,
            error: Some(kind),
        };
        let cmd = match parse(line, scope) {
            Ok(c) => c,
            Err(m) => return fail(CtlErrorKind::Invalid, m),
        };
        if self.read_only && cmd.mutates() {
            return fail(
                CtlErrorKind::ReadOnly,
                "read-only mount: commands that change files are refused".into(),
            );
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
            (Command::Compress(input), Scope::Session(sid)) => {
                txn::compress(self.paths, sid, input, self.cfg, now)
            }
            (Command::Rebuild, Scope::Session(sid)) => txn::rebuild(self.paths, sid, self.cfg, now),
            (Command::ReindexMemory, _) => reindex_memory(self.paths),
            _ => Err(TxnError::Invalid("command not available here".into())),
        };
        match outcome {
            Ok(o) => CtlRecord {
                seq,
                at,
                command,
                ok: true,
                message: o.message,
                result: o.result,
                error: None,
            },
            Err(e) => {
                let kind = match e {
                    TxnError::Invalid(_) => CtlErrorKind::Invalid,
                    TxnError::Busy(_) => CtlErrorKind::Busy,
                    TxnError::Io(_) => CtlErrorKind::Io,
                };
                fail(kind, e.to_string())
            }
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
