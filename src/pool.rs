//! Threads made once for the parallel parts of making a large view: a transcript's large
//! reads are cut into pieces that the reader and these threads take in turn
//! (`format/loader.rs`), and so are the measuring of new blocks (`noa/content.rs`) and the
//! writing of a first version's lines (`noa/lines.rs`); a long timeline's second walk runs
//! on one (`noa/rebuild/split.rs`).
//!
//! A thread made for each call takes a malloc arena when it first allocates, round robin
//! among those the process has (four in a mount, see `fuse/mount.rs`), and so often shares the
//! one its caller allocates from: the two then wait for each other inside `malloc` (thousands
//! of context switches in a 200 MB first read). A thread kept keeps its arena, which the
//! next call finds it on.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The kept threads: where to hand them work.
struct Pool {
    jobs: Mutex<Sender<Job>>,
}

/// How many threads are kept: one for each core but the caller's, at most three (no caller
/// asks for more: see `format/loader.rs`, `PARALLEL_MAX`).
fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().clamp(2, 4)) - 1
}

/// The pool, made on first use; `None` when no thread could be made (the caller then makes
/// its own, as before).
fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut made = 0;
        for _ in 0..threads() {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name("normafs-helper".into())
                .spawn(move || serve(&rx));
            match spawned {
                Ok(_) => made += 1,
                Err(e) => tracing::debug!("a helper thread could not be made: {e}"),
            }
        }
        (made > 0).then(|| Pool {
            jobs: Mutex::new(tx),
        })
    })
    .as_ref()
}

thread_local! {
    /// This thread is one of the kept ones: work it hands on runs on a thread of its own
    /// (queued behind the work it is doing, it would wait for itself).
    static KEPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn serve(rx: &Mutex<Receiver<Job>>) {
    KEPT.with(|k| k.set(true));
    loop {
        let job = rx.lock().recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// What one call's jobs have done: how many began and ended, and whether the call is over (a
/// job that has not begun by then does nothing).
#[derive(Default)]
struct Calls {
    state: Mutex<Progress>,
    ended: Condvar,
}

#[derive(Default)]
struct Progress {
    began: usize,
    ended: usize,
    over: bool,
}

/// Waits, when the call ends (returning or unwinding), for every job that began.
struct Over<'a>(&'a Calls);

impl Drop for Over<'_> {
    fn drop(&mut self) {
        let mut p = self.0.state.lock();
        p.over = true;
        while p.ended < p.began {
            self.0.ended.wait(&mut p);
        }
    }
}

/// One call's job for a kept thread: `work`, unless the call is over before the job begins
/// (counted begun and ended in `calls`, so that the call can wait for it).
fn job(calls: &Arc<Calls>, work: &'static (dyn Fn() + Sync)) -> Job {
    let calls = calls.clone();
    Box::new(move || {
        {
            let mut p = calls.state.lock();
            if p.over {
                return;
            }
            p.began += 1;
        }
        if catch_unwind(AssertUnwindSafe(work)).is_err() {
            tracing::debug!("a helper thread's work panicked; its caller does what is left");
        }
        calls.state.lock().ended += 1;
        calls.ended.notify_all();
    })
}

/// Run `body` on this thread while `n` kept threads run `work` (each once, as they come
/// free); return once `body` has and every `work` that began has ended. A `work` that
/// panics ends there; the caller must not count on it having done anything (`work` takes
/// what it does from shared state that tells what is left undone).
pub fn with_helpers<R>(n: usize, work: &(dyn Fn() + Sync), body: impl FnOnce() -> R) -> R {
    let Some(pool) = pool().filter(|_| n > 0 && !KEPT.with(|k| k.get())) else {
        return std::thread::scope(|scope| {
            for _ in 0..n {
                scope.spawn(work);
            }
            body()
        });
    };
    let calls = Arc::new(Calls::default());
    // SAFETY: the reference is used only by jobs that began before `over` below is dropped,
    // and its drop waits for each of them to end, on return and on unwinding alike; a job
    // that begins after it sees the call over and does not use it. So no use outlives the
    // borrow of `work`.
    let work: &'static (dyn Fn() + Sync) =
        unsafe { std::mem::transmute::<&(dyn Fn() + Sync), &'static (dyn Fn() + Sync)>(work) };
    let over = Over(&calls);
    {
        let jobs = pool.jobs.lock();
        for _ in 0..n {
            if jobs.send(job(&calls, work)).is_err() {
                break;
            }
        }
    }
    let r = body();
    drop(over);
    r
}

/// `make` of each part, in order: the parts are taken in turn by this thread and up to
/// `helpers` kept threads. A part whose helper panicked is made here afterwards (and panics
/// here, if it must).
pub fn each_part<P: Sync, T: Send>(
    parts: &[P],
    helpers: usize,
    make: impl Fn(&P) -> T + Sync,
) -> Vec<T> {
    let made: Vec<std::sync::Mutex<Option<T>>> =
        parts.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || loop {
        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (Some(part), Some(slot)) = (parts.get(k), made.get(k)) else {
            break;
        };
        let out = make(part);
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
    };
    with_helpers(helpers, &work, work);
    made.into_iter()
        .zip(parts)
        .map(|(slot, part)| {
            let out = slot.into_inner().unwrap_or_else(|e| e.into_inner());
            out.unwrap_or_else(|| make(part))
        })
        .collect()
}

/// Run `work` on a kept thread (one of its own when none can be had, or when this is a kept
/// thread) while `body` runs here, and return what each gave once both have ended: `work`'s
/// `None` when it panicked. `body` is told whether `work` runs at all: told `false` (no
/// thread could be had; `work` is then dropped unrun), it must not wait for `work`.
pub fn on_helper<'a, T, R>(
    work: impl FnOnce() -> T + Send + 'a,
    body: impl FnOnce(bool) -> R,
) -> (R, Option<T>)
where
    T: Send + 'a,
{
    let Some(pool) = pool().filter(|_| !KEPT.with(|k| k.get())) else {
        return std::thread::scope(|scope| {
            let name = "normafs-helper".to_string();
            match std::thread::Builder::new()
                .name(name)
                .spawn_scoped(scope, work)
            {
                Ok(h) => {
                    let r = body(true);
                    (r, h.join().ok())
                }
                Err(e) => {
                    tracing::debug!("no thread for a helper's work: {e}");
                    (body(false), None)
                }
            }
        });
    };
    let calls = Arc::new(Calls::default());
    let out: Mutex<Option<T>> = Mutex::new(None);
    let task = || {
        if let Ok(t) = catch_unwind(AssertUnwindSafe(work)) {
            *out.lock() = Some(t);
        }
    };
    // Taken by the job that runs it (`FnOnce` behind a `Fn`).
    let once = Mutex::new(Some(task));
    let run = || {
        if let Some(task) = once.lock().take() {
            task();
        }
    };
    let run: &(dyn Fn() + Sync) = &run;
    // SAFETY: the job uses `run` only after counting itself begun while the call was not
    // over, and the call waits for it to end (below, or in `over`'s drop when `body`
    // unwinds) before `run` and what it borrows go out of scope.
    let run: &'static (dyn Fn() + Sync) =
        unsafe { std::mem::transmute::<&(dyn Fn() + Sync), &'static (dyn Fn() + Sync)>(run) };
    let over = Over(&calls);
    let sent = pool.jobs.lock().send(job(&calls, run)).is_ok();
    let r = body(sent);
    // The work is waited for, begun or not: `body` counted on it.
    if sent {
        let mut p = calls.state.lock();
        while p.began == 0 || p.ended < p.began {
            calls.ended.wait(&mut p);
        }
    }
    drop(over);
    let t = out.lock().take();
    (r, t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_helper_that_began_ended_before_the_call_returns() {
        for n in 0..4 {
            let done = AtomicUsize::new(0);
            let began = AtomicUsize::new(0);
            let work = || {
                began.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(5));
                done.fetch_add(1, Ordering::SeqCst);
            };
            let r = with_helpers(n, &work, || 7);
            assert_eq!(r, 7);
            assert_eq!(done.load(Ordering::SeqCst), began.load(Ordering::SeqCst));
        }
    }

    #[test]
    fn each_part_gives_every_part_in_order_and_remakes_one_whose_helper_panicked() {
        let parts: Vec<usize> = (0..24).collect();
        let panicked = AtomicUsize::new(0);
        let made = each_part(&parts, threads(), |&i| {
            // Every part a kept thread takes panics there: the caller makes it again.
            if std::thread::current().name() == Some("normafs-helper") {
                panicked.fetch_add(1, Ordering::SeqCst);
                panic!("part {i} on a helper");
            }
            // The caller waits for a helper to take a part (the helpers may be busy with
            // another test's work a while).
            let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while panicked.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            i * 10
        });
        assert_eq!(made, (0..24).map(|i| i * 10).collect::<Vec<_>>());
        assert!(
            panicked.load(Ordering::SeqCst) > 0,
            "no helper took a part: the remaking was not exercised"
        );
    }

    #[test]
    fn helpers_share_the_work_with_the_caller() {
        let next = AtomicUsize::new(0);
        let sum = AtomicUsize::new(0);
        let take = || loop {
            let i = next.fetch_add(1, Ordering::SeqCst);
            if i >= 1000 {
                return;
            }
            sum.fetch_add(i, Ordering::SeqCst);
        };
        with_helpers(threads(), &take, take);
        assert_eq!(sum.load(Ordering::SeqCst), 999 * 1000 / 2);
    }

    #[test]
    fn on_helper_gives_both_results_and_none_for_a_panic() {
        let data = [1u64, 2, 3];
        let (mine, theirs) = on_helper(|| data.iter().sum::<u64>(), |running| (running, 7));
        assert_eq!(mine, (true, 7));
        assert_eq!(theirs, Some(6));
        let (mine, theirs) = on_helper(|| -> u64 { panic!("the helper's work panics") }, |_| 8);
        assert_eq!(mine, 8);
        assert_eq!(theirs, None);
    }

    /// The body may wait for the helper's work: it runs even when every kept thread is busy
    /// with other calls, and when the caller is a kept thread itself (queued behind the work
    /// it is doing, it would never run).
    #[test]
    fn on_helper_s_work_runs_whatever_thread_asks() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let nested = || {
                let flag = std::sync::Mutex::new(false);
                let told = std::sync::Condvar::new();
                let (_, theirs) = on_helper(
                    || {
                        *flag.lock().expect("lock") = true;
                        told.notify_all();
                        1
                    },
                    |running| {
                        assert!(running);
                        let mut set = flag.lock().expect("lock");
                        while !*set {
                            set = told.wait(set).expect("wait");
                        }
                    },
                );
                assert_eq!(theirs, Some(1));
            };
            // On every kept thread at once, and on this one.
            with_helpers(threads(), &nested, nested);
            let _ = tx.send(());
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_secs(20)).is_ok(),
            "a body waiting for its helper's work was never answered"
        );
    }

    #[test]
    fn a_helper_that_panics_leaves_the_pool_serving() {
        let boom = || panic!("a helper's work panics");
        with_helpers(1, &boom, || ());
        let ran = AtomicUsize::new(0);
        let count = || {
            ran.fetch_add(1, Ordering::SeqCst);
        };
        // Each call waits for the helpers that began; one that had not is skipped, so count
        // until the kept thread is seen to run work again.
        let mut calls = 0;
        while ran.load(Ordering::SeqCst) == 0 && calls < 1000 {
            with_helpers(1, &count, || {
                std::thread::sleep(std::time::Duration::from_millis(1))
            });
            calls += 1;
        }
        assert!(
            ran.load(Ordering::SeqCst) > 0,
            "the kept thread runs work again"
        );
    }
}
