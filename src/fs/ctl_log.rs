//! Each ctl scope's log of recent results (a session's ctl, or the root's): the sequence
//! numbers of its commands, and what a fresh handle reads.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::store::ctl::{CtlRecord, Scope};

/// How many results a fresh `ctl` handle reads.
pub const CTL_HISTORY: usize = 32;

/// Per scope (a session's ctl, or the root's): the last sequence number and the latest
/// results.
#[derive(Default)]
pub(in crate::fs) struct CtlLog {
    by_scope: Mutex<HashMap<Option<String>, ScopeLog>>,
}

/// A scope's last sequence number, latest results, and when the last was recorded (the ctl
/// file's mtime: rsync's quick check sees a new result).
type ScopeLog = (u64, VecDeque<CtlRecord>, Option<std::time::SystemTime>);

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
    pub(in crate::fs) fn next_seq(&self, scope: &Scope) -> u64 {
        let mut log = self.by_scope.lock();
        let e = log.entry(scope_key(scope)).or_default();
        e.0 += 1;
        e.0
    }

    /// Keep `rec` among the latest results of `scope`.
    pub(in crate::fs) fn record(&self, scope: &Scope, rec: CtlRecord) {
        let mut log = self.by_scope.lock();
        let e = log.entry(scope_key(scope)).or_default();
        e.1.push_back(rec);
        while e.1.len() > CTL_HISTORY {
            e.1.pop_front();
        }
        e.2 = Some(std::time::SystemTime::now());
    }

    /// Keep `rec` as the first result of `scope`, numbered 1, unless the scope has one.
    pub(in crate::fs) fn record_first(&self, scope: &Scope, mut rec: CtlRecord) {
        let mut log = self.by_scope.lock();
        let e = log.entry(scope_key(scope)).or_default();
        if e.0 > 0 {
            return;
        }
        e.0 = 1;
        rec.seq = 1;
        e.1.push_back(rec);
        e.2 = Some(std::time::SystemTime::now());
    }

    /// The latest results of `scope`, oldest first.
    pub(in crate::fs) fn recent(&self, scope: &Scope) -> Vec<CtlRecord> {
        self.by_scope
            .lock()
            .get(&scope_key(scope))
            .map(|(_, q, _)| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A read of a ctl file: the scope's latest results as JSON lines, the bytes at
    /// `offset` of them. Through a handle (`snapshot`: the mount answers opens), from one
    /// snapshot its first read makes — `tail` seeks near the end, then reads on — taken
    /// afresh by a read from 0; without one (the kernel opens files itself and caches what
    /// it reads until the file's size or mtime changes), afresh at every read.
    pub(in crate::fs) fn read(
        &self,
        scope: &Scope,
        snapshot: Option<&mut Option<Arc<Vec<u8>>>>,
        offset: u64,
        size: u32,
    ) -> Vec<u8> {
        let fresh = || Arc::new(render(&self.recent(scope)));
        let bytes = match snapshot {
            Some(snap) => {
                if snap.is_none() || offset == 0 {
                    *snap = Some(fresh());
                }
                snap.clone().unwrap_or_default()
            }
            None => fresh(),
        };
        crate::fs::window(&bytes, offset, size).to_vec()
    }

    /// The size of what a fresh read of `scope`'s ctl file reads (`ctl`'s `st_size`).
    pub(in crate::fs) fn fresh_len(&self, scope: &Scope) -> u64 {
        render(&self.recent(scope)).len() as u64
    }

    /// When the latest result of `scope` was recorded, if any was.
    pub(in crate::fs) fn changed(&self, scope: &Scope) -> Option<std::time::SystemTime> {
        self.by_scope
            .lock()
            .get(&scope_key(scope))
            .and_then(|(_, _, t)| *t)
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
            pid: None,
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
    fn a_handle_reads_one_snapshot_until_it_reads_from_0_and_no_handle_reads_afresh() {
        let log = CtlLog::default();
        let s = Scope::Session("s1".into());
        log.record(&s, rec(1, "help"));
        let mut snap = None;
        let fresh = log.read(&s, Some(&mut snap), 0, 4096);
        assert_eq!(commands(&fresh), ["\"help\""]);
        // Later results do not change a snapshot read on from a later offset.
        log.record(&s, rec(2, "status"));
        let rest = log.read(&s, Some(&mut snap), 5, 4096);
        assert_eq!(rest, fresh[5..]);
        let again = log.read(&s, Some(&mut snap), 0, 4096);
        assert_eq!(commands(&again), ["\"help\"", "\"status\""]);
        // Without a handle every read is of the latest results.
        log.record(&s, rec(3, "compress m1 m2"));
        let now = log.read(&s, None, 0, 4096);
        assert_eq!(commands(&now).len(), 3);
    }

    #[test]
    fn a_read_at_an_offset_reads_what_a_fresh_read_shows_there() {
        let log = CtlLog::default();
        let s = Scope::Session("s1".into());
        for i in 0..20 {
            log.record(&s, rec(i, &format!("compress m{i} m{}", i + 1)));
        }
        let whole = log.read(&s, None, 0, 1 << 20);
        assert_eq!(whole.len() as u64, log.fresh_len(&s));
        // `tail` seeks near the end of a fresh handle and reads from there.
        let at = whole.len() as u64 - 60;
        let mut snap = None;
        let tail = log.read(&s, Some(&mut snap), at, 4096);
        assert_eq!(tail, whole[whole.len() - 60..]);
        // Beyond the end: nothing.
        let past = log.read(&s, Some(&mut snap), whole.len() as u64 + 10, 4096);
        assert!(past.is_empty());
    }
}
