//! The ctl files: each write is one batch, its commands run in order through the store's
//! runner; every read shows the scope's latest results (`fs/ctl_log.rs`), each naming the
//! process that wrote its command.

use crate::fs::handles::Handle;
use crate::fs::{FsError, NormaFs};
use crate::store::ctl::{parse, quote, CtlRecord, Runner, Scope, QUOTE_CHARS};
use crate::store::txn::TxnError;

impl NormaFs {
    /// The scope of ctl file `sid` (a session's, or the root's with `None`); `ENOENT` once
    /// its session is gone.
    pub(in crate::fs) fn ctl_scope(&self, sid: &Option<String>) -> Result<Scope, FsError> {
        match sid {
            Some(s) if !self.session_exists(s) => Err(FsError::NotFound),
            Some(s) => Ok(Scope::Session(s.clone())),
            None => Ok(Scope::Root),
        }
    }

    /// A write to `ctl` by process `pid`: one batch of whole commands, run in order,
    /// stopping at the first failure. Each write stands alone: what an earlier one did, on
    /// this handle or another, does not decide what this one runs.
    pub(in crate::fs) fn write_ctl(
        &self,
        fh: u64,
        data: &[u8],
        pid: Option<u32>,
    ) -> Result<u32, FsError> {
        let scope = match self.handles.lock().get(&fh) {
            Some(Handle::Ctl { scope, .. }) => scope.clone(),
            _ => return Err(FsError::BadHandle),
        };
        let r = self.run_commands(&scope, data, pid);
        self.ctl_written(&scope);
        r
    }

    /// The largest write `ctl` takes: the kernel splits a longer `write()` into requests of
    /// at most `max_write` bytes at page boundaries of the writer's buffer, so a request
    /// within a page of `max_write` may be a piece of one. Refusing it refuses the first
    /// piece, and the kernel sends no other: a write runs whole or not at all.
    pub(in crate::fs) fn ctl_write_limit(&self) -> usize {
        (self.max_write() as usize).saturating_sub(crate::fs::real::page_size())
    }

    /// Record a write by `pid` refused before any of it ran, in the scope's log.
    fn refuse(&self, scope: &Scope, data: &[u8], e: TxnError, pid: Option<u32>) {
        let head = &data[..data.len().min(4 * QUOTE_CHARS)];
        let quoted = String::from_utf8_lossy(head);
        let quoted = quoted.trim_end_matches('\n');
        let rec = CtlRecord::refused(self.ctl_log.next_seq(scope), chrono::Utc::now(), quoted, e);
        self.ctl_log.record(scope, rec.by(pid));
    }

    /// The commands of one write, in order, stopping at the first failure. Every line is
    /// parsed first: a write with a line that is no command runs none of them.
    fn run_commands(&self, scope: &Scope, data: &[u8], pid: Option<u32>) -> Result<u32, FsError> {
        let refuse = |e: TxnError| {
            let errno = FsError::from(&e);
            self.refuse(scope, data, e, pid);
            Err(errno)
        };
        if data.len() > self.ctl_write_limit() {
            return refuse(TxnError::Invalid(format!(
                "a ctl write must be at most {} bytes (a longer one reaches the mount in pieces); \
                 this one was {} bytes, and none of it was run",
                self.ctl_write_limit(),
                data.len()
            )));
        }
        let Ok(text) = std::str::from_utf8(data) else {
            return refuse(TxnError::Invalid(
                "ctl commands must be UTF-8; none of this write was run".into(),
            ));
        };
        let lines: Vec<&str> = text
            .split('\n')
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if lines.is_empty() {
            // Answered, not refused: a blank line between a script's commands is no error.
            let rec = CtlRecord {
                seq: self.ctl_log.next_seq(scope),
                pid,
                at: crate::store::txn::timestamp(chrono::Utc::now()),
                command: String::new(),
                ok: true,
                message: "an empty write: no command in it, nothing was run (write one command \
                          a line; `help` lists them)"
                    .into(),
                result: serde_json::Value::Null,
                error: None,
            };
            self.ctl_log.record(scope, rec);
            return Ok(data.len() as u32);
        }
        if lines.len() > 1 {
            for line in &lines {
                if let Err(m) = parse(line, scope) {
                    return refuse(TxnError::Invalid(format!(
                        "{m} (in `{}`); none of this write was run",
                        quote(line)
                    )));
                }
            }
        }
        let noa = self.scope_settings(scope);
        let runner = Runner {
            paths: &self.paths,
            cfg: &noa,
            read_only: self.opts.read_only,
        };
        for line in lines {
            let seq = self.ctl_log.next_seq(scope);
            let started = std::time::Instant::now();
            let rec = runner.run(scope, line, seq, chrono::Utc::now());
            self.after_command(scope, started);
            let error = rec.error.clone();
            self.ctl_log.record(scope, rec.by(pid));
            if let Some(e) = &error {
                return Err(FsError::from(e));
            }
        }
        Ok(data.len() as u32)
    }

    /// On a read-only mount the kernel refuses to open `ctl` for writing, so `help` is there
    /// to read: a scope's `ctl` holds its result before any other.
    pub(in crate::fs) fn read_only_help(&self, scope: &Scope) {
        if !self.opts.read_only || self.ctl_log.changed(scope).is_some() {
            return;
        }
        let noa = self.scope_settings(scope);
        let runner = Runner {
            paths: &self.paths,
            cfg: &noa,
            read_only: true,
        };
        let mut rec = runner.run(scope, "help", 1, chrono::Utc::now());
        rec.message.push_str(
            "\nthis mount is read-only (--read-only): the kernel refuses to open this file for \
             writing; `normafs ctl ROOT SID COMMAND…` runs a command without the mount",
        );
        // Once, though several readers may ask at the same moment.
        self.ctl_log.record_first(scope, rec);
    }

    /// The settings ctl commands of `scope` run with: the session's, or the top level's.
    fn scope_settings(&self, scope: &Scope) -> crate::config::NoaConfig {
        let cfg = self.computed.cfg();
        match scope {
            Scope::Session(sid) => cfg.for_session(sid),
            Scope::Root => cfg.noa.clone(),
        }
    }

    /// The size of what a fresh open of the ctl file of `scope` reads, and its mtime: when
    /// its latest result was recorded (the mount's start before any).
    pub(in crate::fs) fn ctl_size_and_time(&self, scope: &Scope) -> (u64, std::time::SystemTime) {
        let at = self.ctl_log.changed(scope).unwrap_or(self.started);
        (self.ctl_log.fresh_len(scope), at)
    }
}
