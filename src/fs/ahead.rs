//! Sessions made ahead of a reader of the whole tree. `grep -r`, `du`, `ls -lR` and `find`
//! enter the session directories one after another in the order `sessions/` lists them, and
//! each waits on the mount to make the session it enters. When a reader enters a session's
//! directory, the next [`AHEAD`] sessions of the last listing of `sessions/` are queued and
//! made on a thread of their own (another core), so the reader finds them made; their bytes
//! stay at hand a moment, as a lookup's do (see `computed::RECENT`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

pub use super::computed::AHEAD;

/// The last listing of `sessions/` and the sessions queued to be made ahead.
#[derive(Default)]
pub struct Ahead {
    /// Session ids as `sessions/` listed them last (sorted).
    order: Mutex<Arc<Vec<String>>>,
    queue: Mutex<VecDeque<String>>,
    wake: Condvar,
}

impl Ahead {
    /// `sessions/` was listed: these are its sessions, in order.
    pub fn listed(&self, sids: Vec<String>) {
        *self.order.lock() = Arc::new(sids);
    }

    /// A reader entered session `sid`'s directory: the sessions after it are queued, in
    /// place of what was queued before (a reader that moved on no longer needs those).
    pub fn entered(&self, sid: &str) {
        let order = self.order.lock().clone();
        let Ok(at) = order.binary_search_by(|s| s.as_str().cmp(sid)) else {
            return;
        };
        let next: VecDeque<String> = order.iter().skip(at + 1).take(AHEAD).cloned().collect();
        if next.is_empty() {
            return;
        }
        *self.queue.lock() = next;
        self.wake.notify_one();
    }

    /// The next session to make, waiting up to `wait` for one.
    pub fn next(&self, wait: Duration) -> Option<String> {
        let mut q = self.queue.lock();
        if q.is_empty() {
            self.wake.wait_for(&mut q, wait);
        }
        q.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("s1-{i:04}")).collect()
    }

    #[test]
    fn entering_a_session_queues_the_ones_after_it() {
        let a = Ahead::default();
        a.listed(ids(10));
        a.entered("s1-0003");
        let w = Duration::ZERO;
        let got: Vec<String> = std::iter::from_fn(|| a.next(w)).collect();
        let want: Vec<String> = (4..4 + AHEAD).map(|i| format!("s1-{i:04}")).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_reader_that_moved_on_replaces_the_queue_and_the_last_queues_nothing() {
        let a = Ahead::default();
        a.listed(ids(10));
        a.entered("s1-0001");
        a.entered("s1-0009");
        assert_eq!(a.next(Duration::ZERO).as_deref(), Some("s1-0010"));
        assert_eq!(a.next(Duration::ZERO), None);
        a.entered("s1-0010");
        assert_eq!(a.next(Duration::ZERO), None, "nothing after the last");
        a.entered("s9-unknown");
        assert_eq!(
            a.next(Duration::ZERO),
            None,
            "a session not listed queues nothing"
        );
    }
}
