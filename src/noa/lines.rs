//! `view.jsonl` and `materialized.jsonl` bytes, line by line, sharing the lines that did not
//! change since the previous version (after an append almost all of them): a line is written
//! only when its [`LineKey`](super::assemble::LineKey) is new.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::assemble::{self, LineKey};
use super::fasthash::FastMap;
use super::pipeline::Turn;
use crate::bytes::{Bytes, Piece};
use crate::format::state::State;
use crate::format::transcript::Message;

/// Lines are written into buffers of about this size.
const CHUNK: usize = 1 << 20;

/// The lines of one version, by key.
#[derive(Debug, Default, Clone)]
pub struct LineCache {
    lines: FastMap<LineKey, Piece>,
}

impl LineCache {
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

/// Buffers lines, handing out pieces once a buffer is full (or at the end).
struct Writer<'c> {
    cur: Vec<u8>,
    /// Lines in `cur` not yet given a piece: (index in `out`, key, start, end).
    open: Vec<(usize, LineKey, usize, usize)>,
    out: Vec<Option<Piece>>,
    /// The cache's lines, which the lines written for this version join.
    lines: &'c RefCell<FastMap<LineKey, Piece>>,
}

impl Writer<'_> {
    fn seal(&mut self) {
        if self.open.is_empty() {
            return;
        }
        // The next buffer is made when a line needs it (after the last, none is).
        let mut buf = std::mem::take(&mut self.cur);
        // A line that crossed the chunk's end doubled the buffer: give the spare back.
        buf.shrink_to_fit();
        let buf = Arc::new(buf);
        let mut lines = self.lines.borrow_mut();
        for (i, key, start, end) in self.open.drain(..) {
            let piece = Piece::new(buf.clone(), start, end);
            lines.insert(key, piece.clone());
            self.out[i] = Some(piece);
        }
    }
}

/// The JSON lines of a turn's view (`tags`: ref tags on, as `view.jsonl`). A line `cache`
/// holds is taken from it, not built; the lines built are added to it, and lines no longer
/// used are dropped from it once they outnumber the used ones.
pub fn view_lines(
    t: &Turn<'_, '_>,
    msgs: &[&Message],
    state: &State,
    tags: bool,
    cache: &mut LineCache,
) -> Bytes {
    let lines = RefCell::new(std::mem::take(&mut cache.lines));
    let mut w = Writer {
        cur: Vec::new(),
        open: Vec::new(),
        out: Vec::with_capacity(t.items.len()),
        lines: &lines,
    };
    let mut used: Vec<LineKey> = Vec::with_capacity(t.items.len());
    // The line `want` found, for the sink that follows: one lookup per line.
    let found: Cell<Option<Piece>> = Cell::new(None);
    let want = |key| match lines.borrow().get(&key) {
        Some(piece) => {
            found.set(Some(piece.clone()));
            false
        }
        None => true,
    };
    assemble::each_wanted(t, msgs, state, tags, &want, &mut |m, key| {
        used.push(key);
        match m {
            Some(m) => {
                if w.cur.capacity() == 0 {
                    w.cur.reserve(CHUNK);
                }
                let start = w.cur.len();
                m.write_line(&mut w.cur);
                let end = w.cur.len();
                w.open.push((w.out.len(), key, start, end));
                w.out.push(None);
                if w.cur.len() >= CHUNK {
                    w.seal();
                }
            }
            // Not wanted: the cache has it.
            None => w.out.push(found.take()),
        }
    });
    w.seal();
    let out = std::mem::take(&mut w.out);
    drop(w);
    cache.lines = lines.into_inner();
    if cache.lines.len() > 2 * used.len() + STALE_SLACK {
        let mut kept = FastMap::with_capacity_and_hasher(used.len(), Default::default());
        for key in used {
            if let Some(piece) = cache.lines.remove(&key) {
                kept.insert(key, piece);
            }
        }
        cache.lines = kept;
    }
    Bytes::from_pieces(out.into_iter().flatten())
}

/// Unused lines a cache may hold beyond as many as the used ones.
const STALE_SLACK: usize = 4096;
