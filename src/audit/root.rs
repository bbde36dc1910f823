//! The root's audit: its memory directory, the names in its backing directories, and every
//! session (on helper threads, each with a stack of its own).

use super::*;

/// Audit the memory directory into `a` (the rules: [`memory::check`], [`memory::check_index`]).
pub fn audit_memory(a: &mut Audit, dir: &Path) {
    for p in memory::audit(dir) {
        let path = if p.file_name.is_empty() {
            "memory".to_string()
        } else {
            format!("memory/{}", p.file_name)
        };
        a.push(
            p.kind.severity(),
            p.kind.code(),
            path,
            p.line.map(|l| l as u64),
            p.message,
        );
    }
}

/// Audit bad names found by discovery into `a`.
pub fn audit_names(a: &mut Audit, d: &Discovery) {
    for b in &d.bad_names {
        a.push(
            Severity::Warn,
            "root.bad-name",
            b.path_rel.clone(),
            None,
            b.reason.clone(),
        );
    }
}

/// How a root is audited: how paths are shown, on how many threads, and whether each
/// session's boundedness is replayed too.
#[derive(Debug, Clone, Copy)]
pub struct How {
    pub style: PathStyle,
    /// At most this many threads (1: all on the calling thread). The findings do not depend
    /// on it: each session's are kept apart and joined in session order before the (stable)
    /// sort, as one thread would have pushed them.
    pub threads: usize,
    /// Each session's boundedness too (see `bounds.rs`), replayed from the files its audit
    /// read.
    pub bounds: bool,
}

impl How {
    /// Paths shown in `style`, a thread a core, no boundedness.
    pub fn new(style: PathStyle) -> How {
        How {
            style,
            threads: helpers(),
            bounds: false,
        }
    }
}

/// The stack of an audit helper thread: that of a main thread on Linux.
pub(super) const HELPER_STACK: usize = 8 << 20;

/// How many helper threads an audit may use: one a core.
pub(super) fn helpers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Audit a whole root: every session, the memory directory, bad names, as `how` says.
/// Sessions are loaded and audited on `how.threads` threads. `progress` is called on the
/// calling thread, after each session, with the number done so far.
pub fn audit_root(
    paths: &RootPaths,
    d: &Discovery,
    cfg: &Config,
    how: How,
    progress: &mut dyn FnMut(usize, usize),
) -> Audit {
    audit_root_with(paths, d, cfg, how, &|_| None, progress)
}

/// [`audit_root`] with the findings of the sessions the caller found already (`found` gives
/// a session's findings, sorted, as [`audit_session_in`] finds them, or `None`): those
/// sessions are not loaded again. Not with `how.bounds` (it replays the files it loads).
pub fn audit_root_with(
    paths: &RootPaths,
    d: &Discovery,
    cfg: &Config,
    how: How,
    found: &(dyn Fn(&str) -> Option<Audit> + Sync),
    progress: &mut dyn FnMut(usize, usize),
) -> Audit {
    let How {
        style,
        threads,
        bounds,
    } = how;
    let mut a = Audit::default();
    audit_names(&mut a, d);
    audit_memory(&mut a, &paths.memory);
    let now = chrono::Utc::now();
    let one = |sid: &str| {
        if !bounds {
            if let Some(a) = found(sid) {
                return a;
            }
        }
        let s = crate::store::session::load(paths, sid);
        let mut a = Audit::default();
        let noa = cfg.for_session(sid);
        audit_session_in(&mut a, &s, &noa, style, paths);
        if bounds {
            audit_bounds_in(&mut a, &s, &noa, style, paths, now);
        }
        a
    };
    let total = d.sessions.len();
    let threads = threads.clamp(1, total.max(1));
    if threads == 1 {
        for (i, sid) in d.sessions.iter().enumerate() {
            a.absorb(one(sid));
            progress(i + 1, total);
        }
    } else {
        let mut per_session: Vec<Audit> = vec![Audit::default(); total];
        let next = std::sync::atomic::AtomicUsize::new(0);
        let take = || {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            d.sessions.get(i).map(|sid| (i, sid))
        };
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::channel();
            // `threads - 1` helpers; the calling thread is the last worker, so that it does
            // not sit waiting for results on a core the helpers could use. A helper that
            // cannot be started leaves its share to the others. Helpers get the stack a main
            // thread has, so that no input that one thread can audit overflows theirs.
            for _ in 1..threads {
                let (tx, take, one) = (tx.clone(), &take, &one);
                let helper = std::thread::Builder::new()
                    .name("audit".into())
                    .stack_size(HELPER_STACK);
                let _ = helper.spawn_scoped(scope, move || {
                    while let Some((i, sid)) = take() {
                        if tx.send((i, one(sid))).is_err() {
                            break;
                        }
                    }
                });
            }
            // The helpers hold the only senders left: `rx` ends when they are done.
            drop(tx);
            let mut done = 0;
            let mut record = |i: usize, part: Audit| {
                if let Some(slot) = per_session.get_mut(i) {
                    *slot = part;
                }
                done += 1;
                progress(done, total);
            };
            while let Some((i, sid)) = take() {
                record(i, one(sid));
                while let Ok((i, part)) = rx.try_recv() {
                    record(i, part);
                }
            }
            for (i, part) in rx {
                record(i, part);
            }
        });
        for part in per_session {
            a.absorb(part);
        }
    }
    a.sort();
    a
}
