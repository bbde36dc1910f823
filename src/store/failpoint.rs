//! Named failpoints on the write paths, for crash and failure-injection tests.
//!
//! Every step of a durable write calls [`hit`] with a stable name. Normally that is a cheap no-op
//! (one cached `OnceLock` read and one relaxed atomic load). Two ways to arm a failpoint:
//!
//! - **Environment** (crash tests, across processes): `NORMAFS_FAILPOINT=<name>[:<n>]` makes the
//!   `n`-th hit (default the 1st, counted over the whole process) of `<name>` print one line to
//!   stderr and `abort()` the process, leaving the disk exactly as a crash at that step would
//!   (minus power loss: the page cache survives). The variable is read once and cached. A value
//!   whose `:<n>` part is not a positive integer disables it and says so on stderr once.
//! - **Thread override** (in-process tests): [`set_thread`] arms `<name>` on the calling thread
//!   only, so tests running in parallel do not disturb each other; [`Action::Error`] makes `hit`
//!   return an `io::Error` of kind `Other` ("injected failure at <name>"), [`Action::Panic`]
//!   panics, [`Action::Call`] runs a function there and passes. [`set_thread`] fires on every
//!   hit; [`set_thread_nth`] fires on the `n`-th hit only (counted from the call).
//!   [`clear_thread`] disarms everything on the thread.
//!
//! Failpoint names (keep this list complete when adding a `hit`):
//!
//! | name | where |
//! |---|---|
//! | `atomic.after-temp-write` | [`durable`](super::durable) (SPEC 8.1) temp file written, not yet fsynced |
//! | `atomic.before-rename` | temp file fsynced, target not yet replaced |
//! | `atomic.after-rename` | target replaced (or created), directory not yet fsynced |
//! | `journal.before-append` | [`journal`](super::journal) open and checked, the line not yet written |
//! | `journal.after-write` | journal line written, not yet fsynced |
//! | `journal.after-append` | journal line fsynced (and a new journal's directory): the batch is committed |
//! | `compress.after-archive` | [`txn`](super::txn) compress step 4: after each archive (`:2` = the second) |
//! | `compress.before-journal` | every archive written, journal not yet appended |
//! | `compress.after-journal` | step 5 done (committed), `state.json` not yet written |
//! | `compress.after-state` | step 6 done: `state.json` replaced |
//! | `recover.after-cut` | recovery: a torn journal tail cut off |
//! | `recover.after-archive` | recovery roll-forward: after placing each block's archive |
//! | `recover.after-rollforward` | rolled-forward `state.json` written |
//! | `recover.after-remove-debris` | after removing each temp file or uncommitted `ctl-` archive |
//! | `rebuild.after-keep-archive` | an archive that cannot be adopted kept as `<name>.replaced-<stamp>`, the new one not yet written (rebuild and roll-forward) |
//! | `rebuild.after-archive` | rebuild: after each block's archive is adopted, written or replaced |
//! | `rebuild.after-keep-state` | the old `state.json` kept as `state.json.replaced-<stamp>` |
//! | `rebuild.before-state` | every archive placed, `state.json` not yet written |
//! | `rebuild.after-state` | rebuilt `state.json` written |
//!
//! `atomic.*` are hit by both `atomic_replace` and `create_new_durable`, so by every archive and
//! `state.json` write; a command hits them several times (`NORMAFS_FAILPOINT=atomic.before-rename:3`).
//! `tests/crash.rs` checks that this table lists every name the code hits and that each is reached.

use std::cell::RefCell;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The environment variable that arms a process-wide crash failpoint.
pub const ENV_VAR: &str = "NORMAFS_FAILPOINT";

/// What an armed thread failpoint does when hit.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    /// `hit` returns `io::Error` (kind `Other`, message "injected failure at <name>").
    Error,
    /// `hit` panics with "injected panic at <name>".
    Panic,
    /// `hit` calls the function, then passes: another writer acting at that step (the runtime
    /// replacing `state.json` in the middle of a command).
    Call(fn()),
}

/// Called at each named step of a write path; see the module docs for what can happen.
pub fn hit(name: &str) -> io::Result<()> {
    if let Some(env) = env_failpoint() {
        env.hit(name);
    }
    if THREADS_ARMED.load(Ordering::Relaxed) == 0 {
        return Ok(());
    }
    let fired = THREAD.with(|t| t.borrow_mut().fire(name));
    match fired {
        None => Ok(()),
        Some(Action::Error) => Err(io::Error::other(format!("injected failure at {name}"))),
        Some(Action::Panic) => panic!("injected panic at {name}"),
        Some(Action::Call(f)) => {
            f();
            Ok(())
        }
    }
}

/// Arms `name` on the calling thread: every later hit of it performs `action`.
/// Replaces an earlier arming of the same name on this thread.
pub fn set_thread(name: &str, action: Action) {
    arm(name, action, None);
}

/// Arms `name` on the calling thread for its `nth` hit only (1 = the next hit), counted from now;
/// earlier and later hits pass. `nth == 0` is treated as 1.
pub fn set_thread_nth(name: &str, nth: u64, action: Action) {
    arm(name, action, Some(nth.max(1)));
}

/// Disarms every failpoint of the calling thread.
pub fn clear_thread() {
    THREAD.with(|t| t.borrow_mut().clear());
}

/// Number of threads with at least one armed failpoint; keeps `hit` cheap when it is zero.
static THREADS_ARMED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD: RefCell<ThreadPoints> = const { RefCell::new(ThreadPoints { points: Vec::new() }) };
}

struct ThreadPoint {
    name: String,
    action: Action,
    /// `None`: fire on every hit. `Some(k)`: fire when the remaining count reaches 1, then disarm.
    remaining: Option<u64>,
}

struct ThreadPoints {
    points: Vec<ThreadPoint>,
}

impl ThreadPoints {
    fn fire(&mut self, name: &str) -> Option<Action> {
        let idx = self.points.iter().position(|p| p.name == name)?;
        let point = self.points.get_mut(idx)?;
        match point.remaining {
            None => Some(point.action),
            Some(k) if k > 1 => {
                point.remaining = Some(k - 1);
                None
            }
            Some(_) => {
                let action = point.action;
                self.points.remove(idx);
                if self.points.is_empty() {
                    THREADS_ARMED.fetch_sub(1, Ordering::Relaxed);
                }
                Some(action)
            }
        }
    }

    fn clear(&mut self) {
        if !self.points.is_empty() {
            self.points.clear();
            THREADS_ARMED.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for ThreadPoints {
    fn drop(&mut self) {
        self.clear();
    }
}

fn arm(name: &str, action: Action, remaining: Option<u64>) {
    THREAD.with(|t| {
        let mut t = t.borrow_mut();
        if t.points.is_empty() {
            THREADS_ARMED.fetch_add(1, Ordering::Relaxed);
        }
        t.points.retain(|p| p.name != name);
        t.points.push(ThreadPoint {
            name: name.to_owned(),
            action,
            remaining,
        });
    });
}

/// The process-wide failpoint from [`ENV_VAR`].
struct EnvFailpoint {
    name: String,
    nth: u64,
    hits: AtomicU64,
}

impl EnvFailpoint {
    fn hit(&self, name: &str) {
        if name != self.name {
            return;
        }
        let count = self.hits.fetch_add(1, Ordering::Relaxed) + 1;
        if count == self.nth {
            eprintln!("normafs: failpoint {name} (hit {count}): aborting");
            std::process::abort();
        }
    }
}

fn env_failpoint() -> Option<&'static EnvFailpoint> {
    static ENV: OnceLock<Option<EnvFailpoint>> = OnceLock::new();
    ENV.get_or_init(|| {
        let value = std::env::var(ENV_VAR).ok()?;
        match parse_env(&value) {
            Some((name, nth)) => Some(EnvFailpoint {
                name: name.to_owned(),
                nth,
                hits: AtomicU64::new(0),
            }),
            None => {
                eprintln!("normafs: ignoring {ENV_VAR}={value:?}: expected <name>[:<n>], n >= 1");
                None
            }
        }
    })
    .as_ref()
}

/// `<name>[:<n>]` -> (name, n); `None` when the name is empty or `n` is not a positive integer.
fn parse_env(value: &str) -> Option<(&str, u64)> {
    let (name, nth) = match value.split_once(':') {
        None => (value, 1),
        Some((name, n)) => (name, n.parse::<u64>().ok().filter(|n| *n >= 1)?),
    };
    (!name.is_empty()).then_some((name, nth))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_env_forms() {
        assert_eq!(
            parse_env("atomic.before-rename"),
            Some(("atomic.before-rename", 1))
        );
        assert_eq!(
            parse_env("journal.after-append:3"),
            Some(("journal.after-append", 3))
        );
        assert_eq!(parse_env("x:0"), None);
        assert_eq!(parse_env("x:two"), None);
        assert_eq!(parse_env(""), None);
        assert_eq!(parse_env(":2"), None);
    }

    #[test]
    fn thread_override_is_per_thread_and_clearable() {
        set_thread("unit.a", Action::Error);
        let err = hit("unit.a").err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("injected failure at unit.a"));
        assert!(hit("unit.b").is_ok());
        let other = std::thread::spawn(|| hit("unit.a").is_ok()).join();
        assert!(matches!(other, Ok(true)));
        clear_thread();
        assert!(hit("unit.a").is_ok());
    }

    #[test]
    fn nth_fires_once() {
        set_thread_nth("unit.nth", 2, Action::Error);
        assert!(hit("unit.nth").is_ok());
        assert!(hit("unit.nth").is_err());
        assert!(hit("unit.nth").is_ok());
        clear_thread();
    }

    #[test]
    fn panic_action_panics() {
        let result = std::thread::spawn(|| {
            set_thread("unit.panic", Action::Panic);
            let _ = hit("unit.panic");
        })
        .join();
        assert!(result.is_err());
    }
}
