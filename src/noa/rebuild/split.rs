//! A long history's requests made on two threads. Most of a timeline's work is what each
//! request showed (its view measured, its nudge decided and written), and a request
//! depends on those before it only through the state and the nudges' pacing — and the
//! pacing starts again at every replayed Compress call. So the history is split right after
//! a call: this thread makes every request before it; another replays up to it for the
//! states only (no nudge is decided: much cheaper), then makes every request after it, from
//! that state and a fresh pacing. Where to split is found by the other thread (the first
//! call replayed past the share of the requests this thread keeps); this thread waits for
//! it only if it gets there first. Debug builds check the result against the walk made on
//! one thread.

use std::sync::{Condvar, Mutex};

use super::*;

/// The share of the requests this thread makes (the other first walks that far for the
/// states only, which costs about two thirds of making the requests).
const KEPT: f64 = 0.72;

/// Fewer requests than this are made on one thread (debug builds split any history with a
/// call where one may split, to check the split).
const MIN_REQUESTS: usize = if cfg!(debug_assertions) { 1 } else { 1024 };

type Events<'e, 'j> = &'e [((usize, u8, usize, u8), Event<'j>)];

/// Where to split, once the other thread knows: `Some(Some(i))` before event `i`,
/// `Some(None)` nowhere.
struct Decided {
    at: Mutex<Option<Option<usize>>>,
    told: Condvar,
}

impl Decided {
    fn tell(&self, at: Option<usize>) {
        let mut slot = self.at.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(at);
            self.told.notify_all();
        }
    }

    fn wait(&self) -> Option<usize> {
        let mut slot = self.at.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(at) = *slot {
                return at;
            }
            slot = self.told.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Tells "nowhere" if the other thread ends (or panics) before it told anything.
struct Teller<'d>(&'d Decided);

impl Drop for Teller<'_> {
    fn drop(&mut self) {
        self.0.tell(None);
    }
}

/// The replay of `events` made on two threads, or `None` when the history is too short or
/// has no call where it may split (the caller then walks it on one).
pub(super) fn replay(
    ctx: &Ctx<'_, '_>,
    events: Events<'_, '_>,
    mode: Mode,
) -> Option<(Rebuilt, History)> {
    let requests = events
        .iter()
        .filter(|(_, e)| matches!(e, Event::Request))
        .count();
    if requests < MIN_REQUESTS {
        return None;
    }
    // A split may come after the first call past the kept share.
    let from = events
        .iter()
        .enumerate()
        .filter(|(_, (_, e))| matches!(e, Event::Request))
        .nth(((requests as f64) * KEPT) as usize)
        .map(|(i, _)| i)?;
    if !events[from..]
        .iter()
        .any(|(_, e)| matches!(e, Event::Call { .. }))
    {
        return None;
    }
    let decided = Decided {
        at: Mutex::new(None),
        told: Condvar::new(),
    };
    let decided = &decided;
    let theirs = move || {
        let teller = Teller(decided);
        let states = Mode {
            requests: false,
            pacing: ctx.at_request,
            ..mode
        };
        let mut walk = Walk::new(ctx, states);
        for (i, (key, ev)) in events.iter().enumerate() {
            let replayed = walk.out.replayed;
            walk.step(ctx, *key, ev);
            if i >= from && walk.out.replayed > replayed {
                // Right after a call that was replayed: the pacing starts again.
                teller.0.tell(Some(i + 1));
                return Some(rest(ctx, walk, &events[i + 1..], mode));
            }
        }
        None
    };
    let mine = |running: bool| {
        if !running {
            decided.tell(None);
        }
        let mut walk = Walk::new(ctx, mode);
        let mut split = None;
        for (i, (key, ev)) in events.iter().enumerate() {
            if i >= from && split.is_none() {
                split = Some(decided.wait());
            }
            if split.flatten().is_some_and(|at| i >= at) {
                break;
            }
            walk.step(ctx, *key, ev);
        }
        (walk, split.flatten())
    };
    // The other walk on a kept thread: one made for it would share this one's malloc arena.
    let ((mut mine, split), theirs) = crate::pool::on_helper(theirs, mine);
    let theirs = theirs.flatten();
    let done = match (split, theirs) {
        (Some(_), Some(theirs)) => join(mine, theirs),
        // Split where the other thread then failed: this one goes on from there.
        (Some(at), None) => {
            for (key, ev) in &events[at..] {
                mine.step(ctx, *key, ev);
            }
            mine.finish()
        }
        // Nowhere to split: this walk went to the end.
        (None, _) => mine.finish(),
    };
    #[cfg(debug_assertions)]
    {
        let mut walk = Walk::new(ctx, mode);
        for (key, ev) in events {
            walk.step(ctx, *key, ev);
        }
        let (out, seen) = walk.finish();
        let (o, h) = &done;
        assert_eq!(
            h.requests, seen.requests,
            "a split history's requests differ"
        );
        assert_eq!(h.made, seen.made, "a split history's calls differ");
        assert_eq!(
            h.skipped, seen.skipped,
            "a split history's skipped calls differ"
        );
        assert_eq!(h.states, seen.states, "a split history's states differ");
        assert_eq!(o.state, out.state, "a split history's final state differs");
        assert_eq!(o.replayed, out.replayed, "a split history's calls differ");
    }
    Some(done)
}

/// The other thread's walk from the split on: requests made as `mode` asks, over the state
/// `before` replayed to (and the states it captured), with a fresh pacing; what it made
/// from there.
fn rest<'c, 'a>(
    ctx: &Ctx<'c, 'a>,
    before: Walk<'c, 'a>,
    events: Events<'_, '_>,
    mode: Mode,
) -> (Rebuilt, History) {
    let mut walk = Walk::new(ctx, mode);
    walk.out.state = before.out.state;
    walk.seen.states = before.seen.states;
    walk.captured = before.captured;
    for (key, ev) in events {
        walk.step(ctx, *key, ev);
    }
    walk.finish()
}

/// This thread's walk up to the split followed by what the other made after it.
fn join(mine: Walk<'_, '_>, (theirs, their_seen): (Rebuilt, History)) -> (Rebuilt, History) {
    let Walk {
        mut out,
        mut seen,
        captured,
        growing,
        ..
    } = mine;
    seen.split_at = Some(seen.requests.len());
    seen.requests.extend(their_seen.requests);
    seen.made.extend(their_seen.made);
    for (k, state) in their_seen.states.into_iter().enumerate() {
        if !captured.get(k).copied().unwrap_or(false) {
            seen.states[k] = state;
        }
    }
    out.skipped.extend(theirs.skipped);
    out.replayed += theirs.replayed;
    out.archives.extend(theirs.archives);
    out.state = theirs.state;
    seen.grown = growing.grown + their_seen.grown;
    seen.whole = growing.whole + their_seen.whole;
    finished(out, seen)
}
