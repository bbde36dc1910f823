//! `view.jsonl` and `materialized.jsonl` bytes, line by line, sharing the lines that did not
//! change since the previous version (after an append almost all of them): a line is written
//! only when its [`LineKey`](super::assemble::LineKey) is new.

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
struct Writer {
    cur: Vec<u8>,
    /// Lines in `cur` not yet given a piece: (index in `out`, key, start, end).
    open: Vec<(usize, LineKey, usize, usize)>,
    out: Vec<Option<Piece>>,
    next: LineCache,
}

impl Writer {
    fn seal(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let mut buf = std::mem::replace(&mut self.cur, Vec::with_capacity(CHUNK));
        // A line that crossed the chunk's end doubled the buffer: give the spare back.
        buf.shrink_to_fit();
        let buf = Arc::new(buf);
        for (i, key, start, end) in self.open.drain(..) {
            let piece = Piece::new(buf.clone(), start, end);
            self.next.lines.insert(key, piece.clone());
            self.out[i] = Some(piece);
        }
    }
}

/// The JSON lines of a turn's view (`tags`: ref tags on, as `view.jsonl`), reusing `prev`'s
/// lines (a line `prev` has is not even built); also the cache for the next version.
pub fn view_lines(
    t: &Turn<'_, '_>,
    msgs: &[&Message],
    state: &State,
    tags: bool,
    prev: Option<&LineCache>,
) -> (Bytes, LineCache) {
    let mut w = Writer {
        cur: Vec::with_capacity(CHUNK),
        open: Vec::new(),
        out: Vec::with_capacity(t.items.len()),
        next: LineCache {
            lines: FastMap::with_capacity_and_hasher(
                prev.map_or(0, LineCache::len),
                Default::default(),
            ),
        },
    };
    let known = |key: LineKey| prev.is_some_and(|p| p.lines.contains_key(&key));
    assemble::each_wanted(t, msgs, state, tags, &|key| !known(key), &mut |m, key| {
        let cached = prev
            .and_then(|p| p.lines.get(&key))
            .or_else(|| w.next.lines.get(&key));
        if let Some(piece) = cached.cloned() {
            w.next.lines.insert(key, piece.clone());
            w.out.push(Some(piece));
            return;
        }
        // Not cached, so wanted: built.
        let Some(m) = m else { return };
        let start = w.cur.len();
        m.write_line(&mut w.cur);
        let end = w.cur.len();
        w.open.push((w.out.len(), key, start, end));
        w.out.push(None);
        if w.cur.len() >= CHUNK {
            w.seal();
        }
    });
    w.seal();
    let bytes = Bytes::from_pieces(w.out.into_iter().flatten());
    (bytes, w.next)
}
