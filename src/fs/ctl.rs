//! The ctl files: commands written to a handle run in order through the store's runner, and
//! each scope's log of recent results, which a fresh handle reads (a handle that wrote reads
//! its own).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use super::handles::Handle;
use super::{FsError, NormaFs};
use crate::store::ctl::{CtlRecord, Runner, Scope};

/// How many results a fresh `ctl` handle reads.
pub const CTL_HISTORY: usize = 32;

/// Per scope (a session's ctl, or the root's): the last sequence number and the latest
/// results.
#[derive(Default)]
pub(super) struct CtlLog {
    by_scope: Mutex<HashMap<Option<String>, ScopeLog>>,
}

/// A scope's last sequence number and latest results.
type ScopeLog = (u64, VecDeque<CtlRecord>);

fn scope_key(s: &Scope) -> Option<String> {
    match s {
        Scope::Session(sid) => Some(sid.clone()),
        Scope::Root => None,
    }
}

/// Results as the ctl file reads them: one JSON line each.
fn render(records: &[CtlRecord]) -> Vec<u8> {
    let mut text = Vec::new();
    for r in records {
        text.extend_from_slice(r.to_json().to_string().as_bytes());
        text.push(b'\n');
    }
    text
}

impl CtlLog {
    /// The sequence number of the next command in `scope`.
    pub(super) fn next_seq(&self, scope: &Scope) -> u64 {
        let mut log = self.by_scope.lock();
        let e = log.entry(scope_key(scope)).or_default();
        e.0 += 1;
        e.0
    }

    /// Keep `rec` among the latest results of `scope`.
    pub(super) fn record(&self, scope: &Scope, rec: CtlRecord) {
        let mut log = self.by_scope.lock();
        let e = log.entry(scope_key(scope)).or_default();
        e.1.push_back(rec);
        while e.1.len() > CTL_HISTORY {
            e.1.pop_front();
        }
    }

    /// The latest results of `scope`, oldest first.
    pub(super) fn recent(&self, scope: &Scope) -> Vec<CtlRecord> {
        self.by_scope
            .lock()
            .get(&scope_key(scope))
            .map(|(_, q)| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A read of a ctl handle: its own results once it wrote, else the scope's latest, as
    /// JSON lines. The first read after a write (or any read at or before where the last
    /// snapshot started, as a read from 0 is) makes them and starts them at its offset: a
    /// handle open for reading and writing, whose offset the writes moved, reads its results
    /// from their start (SPEC 6). The reads after it go on in the same snapshot.
    pub(super) fn read(
        &self,
        scope: &Scope,
        own: &[CtlRecord],
        wrote: bool,
        snapshot: &mut Option<(u64, Arc<Vec<u8>>)>,
        offset: u64,
        size: u32,
    ) -> Vec<u8> {
        let fresh = snapshot.as_ref().is_none_or(|(start, _)| offset <= *start);
        if fresh {
            let records = if wrote {
                own.to_vec()
            } else {
                self.recent(scope)
            };
            *snapshot = Some((offset, Arc::new(render(&records))));
        }
        snapshot
            .as_ref()
            .map(|(start, d)| super::window(d, offset - start, size).to_vec())
            .unwrap_or_default()
    }

    /// The size of what a fresh handle of `scope` reads (`ctl`'s `st_size`).
    pub(super) fn fresh_len(&self, scope: &Scope) -> u64 {
        render(&self.recent(scope)).len() as u64
    }
}

impl NormaFs {
    /// A write to `ctl`: one or more whole commands, run in order, stopping at the first failure.
    pub(super) fn write_ctl(&self, fh: u64, data: &[u8]) -> Result<u32, FsError> {
        let scope = match self.handles.lock().get(&fh) {
            Some(Handle::Ctl {
                failed: Some(e), ..
            }) => return Err(e.clone()),
            Some(Handle::Ctl { scope, .. }) => scope.clone(),
            _ => return Err(FsError::BadHandle),
        };
        let result = self.run_commands(fh, &scope, data);
        if let Err(e) = &result {
            // Sticky: the rest of what the writer meant to run is refused alike.
            if let Some(Handle::Ctl { failed, .. }) = self.handles.lock().get_mut(&fh) {
                *failed = Some(e.clone());
            }
        }
        result
    }

    /// The commands of one write, in order, stopping at the first failure.
    fn run_commands(&self, fh: u64, scope: &Scope, data: &[u8]) -> Result<u32, FsError> {
        if data.len() >= self.opts.max_write as usize {
            return Err(FsError::Invalid(format!(
                "a ctl write must be shorter than {} bytes",
                self.opts.max_write
            )));
        }
        let text = std::str::from_utf8(data)
            .map_err(|_| FsError::Invalid("ctl commands must be UTF-8".into()))?;
        let noa = match scope {
            Scope::Session(sid) => self.cfg.for_session(sid),
            Scope::Root => self.cfg.noa.clone(),
        };
        let runner = Runner {
            paths: &self.paths,
            cfg: &noa,
            read_only: self.opts.read_only,
        };
        for line in text.split('\n').map(str::trim).filter(|l| !l.is_empty()) {
            let seq = self.ctl_log.next_seq(scope);
            let started = std::time::Instant::now();
            let rec = runner.run(scope, line, seq, chrono::Utc::now());
            self.after_command(scope, started);
            self.ctl_log.record(scope, rec.clone());
            if let Some(Handle::Ctl {
                own,
                wrote,
                snapshot,
                ..
            }) = self.handles.lock().get_mut(&fh)
            {
                own.push(rec.clone());
                *wrote = true;
                *snapshot = None;
            }
            if let Some(e) = &rec.error {
                return Err(FsError::from(e));
            }
        }
        Ok(data.len() as u32)
    }

    /// The size of what a fresh open of the ctl file of `scope` reads.
    pub(super) fn ctl_size(&self, scope: &Scope) -> u64 {
        self.ctl_log.fresh_len(scope)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::{CtlLog, CTL_HISTORY};
    use crate::store::ctl::{CtlRecord, Scope};

    fn rec(seq: u64, command: &str) -> CtlRecord {
        CtlRecord {
            seq,
            at: "2026-12-01T00:00:00Z".into(),
            command: command.into(),
            ok: true,
            message: String::new(),
            result: Value::Null,
            error: None,
        }
    }

    fn commands(bytes: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(bytes)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("json")["command"].to_string())
            .collect()
    }

    #[test]
    fn each_scope_numbers_its_commands_and_keeps_its_latest_results() {
        let log = CtlLog::default();
        let (a, root) = (Scope::Session("s1".into()), Scope::Root);
        assert_eq!((log.next_seq(&a), log.next_seq(&a)), (1, 2));
        assert_eq!(log.next_seq(&root), 1, "another scope counts on its own");
        for i in 0..CTL_HISTORY as u64 + 5 {
            log.record(&a, rec(i, &format!("c{i}")));
        }
        let recent = log.recent(&a);
        assert_eq!(recent.len(), CTL_HISTORY);
        assert_eq!(recent[0].command, "c5", "the oldest go first");
        assert!(log.recent(&root).is_empty());
    }

    #[test]
    fn a_handle_reads_the_log_until_it_writes_then_its_own_results_from_one_snapshot() {
        let log = CtlLog::default();
        let s = Scope::Session("s1".into());
        log.record(&s, rec(1, "help"));
        let mut snap = None;
        let fresh = log.read(&s, &[], false, &mut snap, 0, 4096);
        assert_eq!(commands(&fresh), ["\"help\""]);
        // Later results do not change a snapshot read on from a later offset.
        log.record(&s, rec(2, "status"));
        let rest = log.read(&s, &[], false, &mut snap, 5, 4096);
        assert_eq!(rest, fresh[5..]);
        let own = [rec(3, "compress m1 m2")];
        let mine = log.read(&s, &own, true, &mut None, 0, 4096);
        assert_eq!(commands(&mine), ["\"compress m1 m2\""]);
    }
}
