//! `view.jsonl` and `materialized.jsonl` bytes, line by line, sharing the lines that did not
//! change since the previous version (after an append almost all of them): a line is written
//! only when its [`LineKey`](super::assemble::LineKey) is new.

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::sync::Arc;

use super::assemble::{self, LineKey, Out};
use super::content::Slot;
use super::pipeline::Turn;
use crate::bytes::{Behind, Bytes, Piece, Spool};
use crate::fasthash::FastMap;
use crate::format::state::State;
use crate::format::transcript::Message;

/// Lines are written into buffers of about this size.
const CHUNK: usize = 1 << 20;

/// The size of the buffers bound for a spool: two are alive at a time (one being written,
/// one filling), together the memory of one buffer kept in memory.
const SPOOL_CHUNK: usize = CHUNK / 2;

/// The lines of the last version, in order.
#[derive(Debug, Default, Clone)]
pub struct LineCache {
    order: Vec<(LineKey, Piece)>,
    /// Where new lines are written, when not in memory (see [`LineCache::spool_to`]).
    spool: Option<Arc<Spool>>,
}

/// A spool is replaced by a new one once it holds this much more than its lines in use (the
/// lines a version no longer has stay in it until no version holds it).
const SPOOL_SLACK: u64 = 64 << 20;

impl LineCache {
    /// Write new lines to `spool` instead of memory (a mount's large session: what it keeps
    /// for the next version, and the version it serves, are then not resident). Kept once set.
    pub fn spool_to(&mut self, spool: impl FnOnce() -> Option<Spool>) {
        if self.spool.is_none() {
            self.spool = spool().map(Arc::new);
        }
    }

    /// A new spool for the next lines when the current one holds mostly lines no version
    /// in this cache has.
    fn renew_spool(&mut self) {
        let Some(sp) = &self.spool else { return };
        let live: u64 = self
            .order
            .iter()
            .filter(|(_, p)| p.is_spooled())
            .map(|(_, p)| p.len() as u64)
            .sum();
        if sp.len() > live.saturating_mul(2).saturating_add(SPOOL_SLACK) {
            match Spool::new(sp.dir()) {
                Ok(new) => self.spool = Some(Arc::new(new)),
                Err(e) => tracing::debug!("a new spool: {e}"),
            }
        }
    }

    /// Where its spool is, if it has one.
    pub fn spool_dir(&self) -> Option<&std::path::Path> {
        self.spool.as_deref().map(Spool::dir)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// How far past its place a line of the last version is looked for (a message cut or tagged
/// anew changes its line in place; a few lines may go).
const WINDOW: usize = 8;

/// Lines not found near their place before the last version is indexed whole (an append
/// makes a few new lines at the end; a compression drops a long run).
const MISSES_BEFORE_INDEX: usize = 64;

/// Finds the last version's lines for the next version, which mostly repeats it in order:
/// a line is looked for at the cursor, then a little ahead, and only after many misses in an
/// index of all of them.
struct Finder<'p> {
    prev: &'p [(LineKey, Piece)],
    at: usize,
    misses: usize,
    index: Option<FastMap<LineKey, usize>>,
}

impl Finder<'_> {
    fn find(&mut self, key: LineKey) -> Option<Piece> {
        let ahead = self.prev.get(self.at..).unwrap_or_default();
        if let Some(d) = ahead.iter().take(WINDOW + 1).position(|(k, _)| *k == key) {
            self.at += d + 1;
            return ahead.get(d).map(|(_, p)| p.clone());
        }
        if self.index.is_none() {
            // Past the last version's end, the rest is new.
            if ahead.is_empty() {
                return None;
            }
            self.misses += 1;
            if self.misses <= MISSES_BEFORE_INDEX {
                return None;
            }
            let mut index = FastMap::with_capacity_and_hasher(self.prev.len(), Default::default());
            for (i, (k, _)) in self.prev.iter().enumerate() {
                index.entry(*k).or_insert(i);
            }
            self.index = Some(index);
        }
        let i = *self.index.as_ref()?.get(&key)?;
        self.at = i + 1;
        self.prev.get(i).map(|(_, p)| p.clone())
    }
}

/// Lines in a buffer not yet given a piece: (index in the version's lines, start, end).
type Open = Vec<(usize, usize, usize)>;

/// A full buffer being written to a spool, with its lines.
struct InFlight {
    write: Behind,
    lines: Open,
    spool: Arc<Spool>,
}

/// Buffers lines, handing out pieces once a buffer is full (or at the end). A full buffer
/// bound for a spool is written on another thread while the next one fills; its lines get
/// their pieces once it is written.
struct Writer {
    cur: Vec<u8>,
    /// Lines in `cur` not yet given a piece.
    open: Open,
    /// The version's lines in order (a written one gets its piece when its buffer is sealed).
    out: Vec<(LineKey, Option<Piece>)>,
    /// Where a full buffer goes, if not to memory (the buffer is then used again).
    spool: Option<Arc<Spool>>,
    /// The last full buffer, being written to the spool.
    behind: Option<InFlight>,
    /// A written buffer, emptied, for the next lines.
    spare: Vec<u8>,
}

impl Writer {
    /// A writer of about `expected` lines, to `spool` when given.
    fn new(spool: Option<Arc<Spool>>, expected: usize) -> Writer {
        Writer {
            cur: Vec::new(),
            open: Vec::new(),
            out: Vec::with_capacity(expected),
            spool,
            behind: None,
            spare: Vec::new(),
        }
    }

    /// Write the next line (`write` appends it to the buffer it is given).
    fn line(&mut self, key: LineKey, write: impl FnOnce(&mut Vec<u8>)) {
        let chunk = if self.spool.is_some() {
            SPOOL_CHUNK
        } else {
            CHUNK
        };
        if self.cur.capacity() == 0 {
            self.cur = std::mem::take(&mut self.spare);
            self.cur.reserve(chunk);
        }
        let start = self.cur.len();
        write(&mut self.cur);
        let end = self.cur.len();
        self.open.push((self.out.len(), start, end));
        self.out.push((key, None));
        if self.cur.len() >= chunk {
            self.seal();
        }
    }

    fn seal(&mut self) {
        if self.open.is_empty() {
            return;
        }
        self.settle();
        if let Some(sp) = &self.spool {
            let full = std::mem::take(&mut self.cur);
            self.behind = Some(InFlight {
                write: sp.append_behind(full),
                lines: std::mem::take(&mut self.open),
                spool: sp.clone(),
            });
            return;
        }
        // The next buffer is made when a line needs it (after the last, none is).
        let buf = std::mem::take(&mut self.cur);
        let lines = std::mem::take(&mut self.open);
        self.in_memory(buf, lines);
    }

    /// Wait for the buffer being written, and give its lines their pieces: in the spool, or
    /// in memory when the write failed (a full disk: the bytes are the same).
    fn settle(&mut self) {
        let Some(InFlight {
            write,
            lines,
            spool: sp,
        }) = self.behind.take()
        else {
            return;
        };
        let end = lines.iter().map(|&(_, _, e)| e).max().unwrap_or(0);
        match write.wait() {
            Some((mut buf, Ok(at))) => {
                let at = at as usize;
                for (i, start, end) in lines {
                    if let Some(slot) = self.out.get_mut(i) {
                        slot.1 = Some(Piece::spooled(sp.clone(), at + start, at + end));
                    }
                }
                buf.clear();
                self.spare = buf;
            }
            Some((buf, Err(e))) => {
                tracing::warn!("lines kept in memory: cannot spool them: {e}");
                self.in_memory(buf, lines);
            }
            None => {
                // Not expected: the writer keeps the bytes whatever befalls the write.
                tracing::error!("spooled lines lost with their writer: zeros in their place");
                self.in_memory(vec![0; end], lines);
            }
        }
    }

    /// Give `lines` pieces of `buf`, kept in memory.
    fn in_memory(&mut self, mut buf: Vec<u8>, lines: Open) {
        // A line that crossed the chunk's end doubled the buffer: give the spare back.
        buf.shrink_to_fit();
        let buf = Arc::new(buf);
        for (i, start, end) in lines {
            if let Some(slot) = self.out.get_mut(i) {
                slot.1 = Some(Piece::new(buf.clone(), start, end));
            }
        }
    }
}

/// The JSON lines of a turn's view (`tags`: ref tags on, as `view.jsonl`). A line the last
/// version in `cache` has is taken from it, not built; the cache then holds this version.
pub fn view_lines(
    t: &Turn<'_, '_>,
    msgs: &[&Message],
    state: &State,
    tags: bool,
    cache: &mut LineCache,
) -> Bytes {
    let pairs = assemble::ToolPairs::of(t);
    cached_lines(
        cache,
        t.items.len(),
        &|at| assemble::message_start_from(t, at),
        &|range, want, sink| {
            let part = assemble::Part {
                range,
                pairs: &pairs,
            };
            assemble::each_wanted_in(t, msgs, state, tags, part, want, &mut |m, key| sink(m, key));
        },
    )
}

/// The JSON lines of the messages as they are (the materialized history of a session without
/// live blocks), message `i` with the refs `slots_of(i)`, reusing the lines `cache` has.
pub fn verbatim_lines(
    msgs: &[&Message],
    slots_of: impl Fn(usize) -> Vec<Slot> + Sync,
    cache: &mut LineCache,
) -> Bytes {
    cached_lines(cache, msgs.len(), &|at| at, &|range, want, sink| {
        for (i, m) in msgs.iter().enumerate().take(range.end).skip(range.start) {
            let slots = slots_of(i);
            let key = assemble::verbatim_key(i, &slots);
            let out = want(key).then(|| assemble::verbatim_out(m, slots));
            sink(out, key);
        }
    })
}

/// What makes a file's lines: the lines of its items in `range`, in order, each with its key.
/// It asks `want` whether a key's line is to be built (a line of the last version is taken
/// instead) and gives the sink the built line, or `None` for one not wanted.
type Make<'m> = dyn Fn(Range<usize>, &dyn Fn(LineKey) -> bool, &mut dyn FnMut(Option<Out<'_>>, LineKey))
    + Sync
    + 'm;

/// The lines `make` gives for `expected` items; a line of the last version in `cache` is
/// taken from it, not built, and the cache then holds this version. A large first version
/// is made in parts at once (`split(at)`: where a part may begin, at `at` or after).
fn cached_lines(
    cache: &mut LineCache,
    expected: usize,
    split: &(dyn Fn(usize) -> usize + Sync),
    make: &Make<'_>,
) -> Bytes {
    cache.renew_spool();
    let prev = std::mem::take(&mut cache.order);
    let spool = cache.spool.clone();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Only a first version: the next ones take most lines from this one, in order.
    let w = if prev.is_empty() && expected >= MADE_IN_PARTS && cores > 1 {
        // Parts of whole messages, taken in turn by a thread a core, up to PART_THREADS (a
        // part's time varies: older messages are cut, and their texts read from their ends).
        let mut bounds = vec![0];
        for k in 1..PARTS {
            let at = split(expected * k / PARTS).min(expected);
            if at > *bounds.last().unwrap_or(&0) {
                bounds.push(at);
            }
        }
        bounds.push(expected);
        let parts: Vec<Range<usize>> = bounds.windows(2).map(|b| b[0]..b[1]).collect();
        let made =
            crate::pool::each_part(&parts, cores.min(PART_THREADS).saturating_sub(1), |range| {
                let w = Writer::new(spool.clone(), range.len());
                whole(lines_into(make, range.clone(), &[], w))
            });
        let mut w = Writer::new(None, expected);
        for part in made {
            w.out.extend(part.out);
        }
        w
    } else {
        let w = Writer::new(spool, expected);
        whole(lines_into(make, 0..expected, &prev, w))
    };
    drop(prev);
    let order: Vec<(LineKey, Piece)> = w
        .out
        .into_iter()
        .filter_map(|(k, p)| p.map(|p| (k, p)))
        .collect();
    let bytes = Bytes::from_pieces(order.iter().map(|(_, p)| p.clone()));
    cache.order = order;
    bytes
}

/// From this many items on, a first version's lines are made in parts on several cores at
/// once (half the time of a large session's first view went to its lines, on one core).
/// (Tests make small sessions in parts too.)
const MADE_IN_PARTS: usize = if cfg!(test) { 64 } else { 20_000 };

/// How many parts, and at most how many threads make them.
const PARTS: usize = 16;
const PART_THREADS: usize = 4;

/// The lines `make` gives for `range`: written into `w`, or taken from `prev` where it has
/// them.
fn lines_into(
    make: &Make<'_>,
    range: Range<usize>,
    prev: &[(LineKey, Piece)],
    mut w: Writer,
) -> Writer {
    let finder = RefCell::new(Finder {
        prev,
        at: 0,
        misses: 0,
        index: None,
    });
    // The line `want` found, for the sink that follows: one lookup per line.
    let found: Cell<Option<Piece>> = Cell::new(None);
    let want = |key| match finder.borrow_mut().find(key) {
        Some(piece) => {
            found.set(Some(piece));
            false
        }
        None => true,
    };
    make(range, &want, &mut |m, key| match m {
        Some(m) => {
            w.line(key, |buf| m.write_line(buf));
        }
        // Not wanted: the last version has it.
        None => w.out.push((key, found.take())),
    });
    w
}

/// `w` with every line it wrote given its piece.
fn whole(mut w: Writer) -> Writer {
    w.seal();
    w.settle();
    w
}

/// A file made a part at a time, into buffers of about [`CHUNK`] bytes (half that for a
/// spool), written to a spool when there is one (`view.md` of a large session: it is not held whole while it is made, nor
/// after).
pub struct Chunks {
    w: Writer,
}

impl Chunks {
    pub fn new(spool: Option<Arc<Spool>>) -> Chunks {
        Chunks {
            w: Writer::new(spool, 0),
        }
    }

    /// Append `part`.
    pub fn push(&mut self, part: &[u8]) {
        self.w.line(0, |buf| buf.extend_from_slice(part));
    }

    /// The bytes: `head`, then the parts pushed.
    pub fn finish(mut self, head: Vec<u8>) -> Bytes {
        self.w.seal();
        self.w.settle();
        let parts = self.w.out.into_iter().filter_map(|(_, p)| p);
        Bytes::from_pieces(std::iter::once(Piece::whole(head)).chain(parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of every length up to past a buffer's size, CJK among them.
    fn lines() -> Vec<Vec<u8>> {
        (0..600usize)
            .map(|i| {
                let body = format!("{{\"n\":{i},\"t\":\"行{}\"}}\n", "x".repeat(i * 7 % 9_000));
                let mut b = body.into_bytes();
                if i == 300 {
                    // One line longer than a buffer.
                    b.extend(std::iter::repeat_n(b'y', CHUNK + 17));
                }
                b
            })
            .collect()
    }

    /// Write `lines` through a writer to `spool`; each line's piece read back.
    fn written(spool: Option<Arc<Spool>>, lines: &[Vec<u8>]) -> Vec<(bool, Vec<u8>)> {
        let mut w = Writer::new(spool, lines.len());
        for (i, l) in lines.iter().enumerate() {
            w.line(i as LineKey, |buf| buf.extend_from_slice(l));
        }
        w.seal();
        w.settle();
        w.out
            .iter()
            .map(|(_, p)| {
                let p = p.as_ref().expect("every line has its piece");
                let mut b = Vec::new();
                p.append_range(0, p.len(), &mut b);
                (p.is_spooled(), b)
            })
            .collect()
    }

    #[test]
    fn lines_written_behind_to_a_spool_read_back_the_same() {
        let lines = lines();
        let spool = Arc::new(Spool::new(&std::env::temp_dir()).expect("spool"));
        let got = written(Some(spool.clone()), &lines);
        assert_eq!(got.len(), lines.len());
        for ((spooled, b), l) in got.iter().zip(&lines) {
            assert!(spooled, "a line left in memory");
            assert_eq!(b, l);
        }
        let total: usize = lines.iter().map(Vec::len).sum();
        assert_eq!(
            spool.len() as usize,
            total,
            "every line is in the spool once"
        );
    }

    #[test]
    fn lines_a_spool_refuses_are_kept_in_memory() {
        let lines = lines();
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("ro");
        std::fs::write(&path, b"").expect("file");
        let ro = std::fs::File::open(&path).expect("open");
        let spool = Arc::new(Spool::in_file(ro, dir.path()));
        let got = written(Some(spool.clone()), &lines);
        for ((spooled, b), l) in got.iter().zip(&lines) {
            assert!(!spooled, "a line in a spool that refused it");
            assert_eq!(b, l);
        }
        assert_eq!(spool.len(), 0);
        // Without a spool, the same bytes.
        let mem = written(None, &lines);
        assert_eq!(mem, got);
    }
}
