//! Bytes of a transcript kept out of memory for a mount's large transcript: a thinking
//! block's signature and a record's fields the runtime's model does not know (no rule looks
//! inside them), and the texts of text blocks and of tool results' text items (the rules
//! measure them once, when a view first projects them, and cut a long result once). They
//! are kept in memory, or in a [`ColdStore`]: an unlinked file they are moved to as the lines
//! are parsed, read back when a rule or a file needs them (`view.jsonl` a line at a time, a
//! record written back). A 100,000-message session kept some 25 MB of signatures and fields
//! resident for nothing, and its texts are most of the rest of its parse.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use parking_lot::Mutex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Shorter bytes stay in memory: their place in the store would take about as much.
pub const COLD_MIN: usize = 48;

/// A batch of moved bytes is written once it is this large (and at the end of every feed).
const BATCH: usize = 4 << 20;

/// Bytes in memory, or a range of a [`ColdStore`].
#[derive(Clone)]
pub enum Cold {
    Mem(Box<[u8]>),
    Stored {
        store: Arc<ColdStore>,
        at: u64,
        len: u32,
        /// The bytes hold [`REF_TAG`]: looked for as they were moved, so that a rule that
        /// strips a ref tag reads back only the texts that may have one.
        tagged: bool,
    },
}

/// How a ref tag Noa writes into a text begins (see `noa::content::strip_ref_tag`).
pub const REF_TAG: &[u8] = b"<noa-ref";

/// Whether `b` holds [`REF_TAG`] (one searcher for every text: building one is a cost each).
pub fn holds_ref_tag(b: &[u8]) -> bool {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(REF_TAG));
    FINDER.find(b).is_some()
}

impl Cold {
    /// The bytes (read back from the store when they are there).
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Cold::Mem(b) => Cow::Borrowed(b),
            Cold::Stored { store, at, len, .. } => Cow::Owned(store.read(*at, *len as usize)),
        }
    }

    /// Bytes `from..to` (clamped to the end), a stored range read back by itself (see
    /// `ColdStore::read_alone`).
    pub fn range(&self, from: usize, to: usize) -> Cow<'_, [u8]> {
        let to = to.min(self.len());
        let from = from.min(to);
        match self {
            Cold::Mem(b) => Cow::Borrowed(&b[from..to]),
            Cold::Stored { store, at, .. } => {
                Cow::Owned(store.read_alone(at + from as u64, to - from))
            }
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Cold::Mem(b) => b.len(),
            Cold::Stored { len, .. } => *len as usize,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for Cold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.bytes()))
    }
}

/// A string kept as [`Cold`] bytes (always UTF-8: made from a `str`).
#[derive(Clone)]
pub struct ColdStr(Cold);

impl ColdStr {
    /// The string (read back from the store when it is there).
    pub fn get(&self) -> Cow<'_, str> {
        match self.in_memory() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(utf8(self.0.bytes().into_owned())),
        }
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the string may hold a ref tag ([`REF_TAG`]), told without reading it back.
    pub fn may_hold_ref_tag(&self) -> bool {
        match &self.0 {
            Cold::Mem(b) => holds_ref_tag(b),
            Cold::Stored { tagged, .. } => *tagged,
        }
    }

    /// Bytes `from..to` of the string, which lie on character boundaries (a stored one's read
    /// back by themselves: see `ColdStore::read_alone`).
    pub fn range(&self, from: usize, to: usize) -> Cow<'_, str> {
        match self.0.range(from, to) {
            Cow::Borrowed(b) => String::from_utf8_lossy(b),
            Cow::Owned(b) => Cow::Owned(utf8(b)),
        }
    }

    /// The whole characters within bytes `from..to` of the string, and where they start (a
    /// character cut by either end is left out); `None` when the bytes are not UTF-8 (the
    /// disk changed them: read the whole string then).
    pub fn chars_within(&self, from: usize, to: usize) -> Option<(usize, String)> {
        let to = to.min(self.len());
        let from = from.min(to);
        let mut bytes = self.0.range(from, to).into_owned();
        // At most three bytes of a character begun before `from`.
        let skip = if from == 0 {
            0
        } else {
            bytes
                .iter()
                .take(3)
                .take_while(|&&b| b & 0xC0 == 0x80)
                .count()
        };
        bytes.drain(..skip);
        match String::from_utf8(bytes) {
            Ok(s) => Some((from + skip, s)),
            // A character the end cuts short: what comes before it.
            Err(e) if to < self.len() && e.utf8_error().error_len().is_none() => {
                let valid = e.utf8_error().valid_up_to();
                let mut bytes = e.into_bytes();
                bytes.truncate(valid);
                String::from_utf8(bytes).ok().map(|s| (from + skip, s))
            }
            Err(_) => None,
        }
    }

    /// The string when it is in memory (`None` when it is in a store).
    pub fn in_memory(&self) -> Option<&str> {
        match &self.0 {
            // SAFETY: a `ColdStr` in memory was made from a `str` (the `From` impls are its
            // only makers) and its bytes only ever move to a store whole.
            Cold::Mem(b) => Some(unsafe { std::str::from_utf8_unchecked(b) }),
            Cold::Stored { .. } => None,
        }
    }

    /// Move its bytes to a store (see [`ColdSink::take`]). Nothing else changes them: in
    /// memory, they are always the `str` it was made from.
    pub(crate) fn move_to(&mut self, to: &mut impl TakeCold) {
        to.take(&mut self.0);
    }
}

/// `text` as a large transcript's parse keeps it: moved to `sink`'s store (a test's).
#[cfg(test)]
pub(crate) fn moved(sink: &mut ColdSink, text: &str) -> ColdStr {
    let mut s = ColdStr::from(text);
    s.move_to(sink);
    s
}

/// Bytes read back as a string. They were written from one, so the check passes unless the
/// disk changed them (then what is not UTF-8 is replaced). Read back texts are most of what a
/// large session's first view reads, and this check is several times faster than the
/// standard library's.
fn utf8(b: Vec<u8>) -> String {
    if simdutf8::basic::from_utf8(&b).is_err() {
        return String::from_utf8_lossy(&b).into_owned();
    }
    // SAFETY: `b` was checked to be UTF-8 just above.
    unsafe { String::from_utf8_unchecked(b) }
}

impl From<String> for ColdStr {
    fn from(s: String) -> ColdStr {
        ColdStr(Cold::Mem(s.into_bytes().into_boxed_slice()))
    }
}

impl From<&str> for ColdStr {
    fn from(s: &str) -> ColdStr {
        ColdStr(Cold::Mem(s.as_bytes().into()))
    }
}

impl PartialEq for ColdStr {
    fn eq(&self, other: &ColdStr) -> bool {
        self.get() == other.get()
    }
}

impl PartialEq<str> for ColdStr {
    fn eq(&self, other: &str) -> bool {
        self.get() == other
    }
}

impl fmt::Debug for ColdStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl Serialize for ColdStr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.get())
    }
}

impl<'de> Deserialize<'de> for ColdStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(ColdStr::from)
    }
}

/// An unlinked file cold bytes are moved to, each range written once and never changed.
/// A batch the disk did not take is kept in memory instead, under the same range.
pub struct ColdStore {
    file: File,
    /// Batches not in the file, by where they start: handed to the writer thread and not
    /// written yet, or refused by the disk (kept for good).
    held: Mutex<Vec<(u64, Arc<Vec<u8>>)>>,
    /// The end of the last batch the file took.
    written: AtomicU64,
    /// Whether the disk refused a batch: ranges below `written` may then be held.
    refused: AtomicBool,
    /// Tells its ranges apart in the windows threads keep (see [`WINDOWS`]).
    id: u64,
}

/// How much is read at once.
const WINDOW: usize = 256 << 10;

/// The last windows of stored bytes a thread read, the one used last first: (its store's id,
/// where it starts, its bytes). Ranges are read back mostly in the order they were stored (a
/// view's lines, one record after another): [`WINDOW`] at a time rather than one `pread`
/// each. A projection measures its texts and makes its lines on several threads at once,
/// each in a part of its own: a window of its own each, without a lock to wait on (one shared
/// set of windows was a tenth of a large session's first view, much of it threads waking each
/// other). A window holds only written bytes, which never change, and a store's id is never
/// given again: a window is never stale.
const THREAD_WINDOWS: usize = 2;

thread_local! {
    static WINDOWS: std::cell::RefCell<[(u64, u64, Vec<u8>); THREAD_WINDOWS]> =
        const { std::cell::RefCell::new([(0, 0, Vec::new()), (0, 0, Vec::new())]) };
}

/// The id of the next store made (0 is no store's: an empty window's).
static NEXT_STORE: AtomicU64 = AtomicU64::new(1);

impl fmt::Debug for ColdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ColdStore")
    }
}

impl ColdStore {
    /// A new store in `dir` (see [`crate::bytes::unlinked_file`]).
    pub fn new(dir: &Path) -> io::Result<ColdStore> {
        Ok(ColdStore::in_file(crate::bytes::unlinked_file(dir)?))
    }

    fn in_file(file: File) -> ColdStore {
        ColdStore {
            file,
            held: Mutex::new(Vec::new()),
            written: AtomicU64::new(0),
            refused: AtomicBool::new(false),
            id: NEXT_STORE.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// `len` bytes from `at` when they are in a batch the disk did not take.
    fn held_range(&self, at: u64, len: usize) -> Option<Vec<u8>> {
        let held = self.held.lock();
        let (from, b) = held
            .iter()
            .find(|(from, b)| *from <= at && at + len as u64 <= from + b.len() as u64)?;
        let off = (at - from) as usize;
        Some(b[off..off + len].to_vec())
    }

    /// `len` bytes from `at`, read by themselves: a read out of the order the bytes were
    /// stored in (a cut's two ends, a text cut here and there), which a window would read
    /// far more than it needs for.
    fn read_alone(&self, at: u64, len: usize) -> Vec<u8> {
        if let Some(b) = self.held_range(at, len) {
            return b;
        }
        let mut out = vec![0; len];
        match self.file.read_exact_at(&mut out, at) {
            Ok(()) => out,
            Err(e) => {
                tracing::error!("reading back a transcript's stored bytes: {e}");
                vec![0; len]
            }
        }
    }

    /// `len` bytes from `at`. A read the disk fails gives zeros, said in the log, as a
    /// spool's ([`crate::bytes::Spool`]): the bytes were written by this process and are not
    /// expected to go.
    fn read(&self, at: u64, len: usize) -> Vec<u8> {
        if len >= WINDOW / 2 {
            // A long text (a file a tool read): read alone, without a copy through a window.
            return self.read_alone(at, len);
        }
        let end = at + len as u64;
        // Below what was written, and no batch refused, the bytes are in the file: the held
        // batches' lock is not taken.
        let in_file =
            end <= self.written.load(Ordering::Acquire) && !self.refused.load(Ordering::Acquire);
        if !in_file {
            if let Some(b) = self.held_range(at, len) {
                return b;
            }
        }
        WINDOWS.with(|w| {
            let Ok(mut w) = w.try_borrow_mut() else {
                return self.read_alone(at, len);
            };
            let covers = |(id, start, buf): &(u64, u64, Vec<u8>)| {
                *id == self.id && *start <= at && end <= *start + buf.len() as u64
            };
            match w.iter().position(covers) {
                Some(i) => w[..=i].rotate_right(1),
                None => {
                    // A new window from `at`, in place of the one used longest ago: as far as
                    // the file was written, at least the range.
                    w.rotate_right(1);
                    let upto =
                        end.max((at + WINDOW as u64).min(self.written.load(Ordering::Acquire)));
                    let (id, start, buf) = &mut w[0];
                    buf.resize((upto - at) as usize, 0);
                    if let Err(e) = self.file.read_exact_at(buf, at) {
                        tracing::error!("reading back a transcript's stored bytes: {e}");
                        buf.clear();
                        *id = 0;
                        return vec![0; len];
                    }
                    (*id, *start) = (self.id, at);
                }
            }
            let (_, start, buf) = &w[0];
            let off = (at - start) as usize;
            buf[off..off + len].to_vec()
        })
    }

    /// `batch`, to be written at `at`, readable from memory until it is.
    fn hold(&self, at: u64, batch: Vec<u8>) -> Arc<Vec<u8>> {
        let batch = Arc::new(batch);
        self.held.lock().push((at, batch.clone()));
        batch
    }

    /// Write a held batch at `at` and let it go from memory, its buffer given back to be
    /// filled again; held for good when the disk does not take it.
    fn write_held(&self, at: u64, batch: Arc<Vec<u8>>) -> Option<Vec<u8>> {
        let end = at + batch.len() as u64;
        if let Err(e) = self.file.write_all_at(&batch, at) {
            tracing::warn!(
                "transcript bytes kept in memory: the temporary directory took none: {e}"
            );
            self.refused.store(true, Ordering::Release);
            return None;
        }
        // Readable from the file before they go from memory.
        self.written.fetch_max(end, Ordering::Release);
        self.held.lock().retain(|(_, b)| !Arc::ptr_eq(b, &batch));
        // Readers copy a held range out under the lock: no one else holds it now.
        Arc::try_unwrap(batch).ok()
    }
}

/// What moves cold bytes to a store: a parser's [`ColdSink`], or a [`ColdRegion`] of it.
pub trait TakeCold {
    /// Move `c`'s bytes to the store, when there is one and it is worth it.
    fn take(&mut self, c: &mut Cold);
}

/// `b`'s length as a stored range's, when `b` is worth moving.
fn movable(b: &[u8]) -> Option<u32> {
    if b.len() < COLD_MIN {
        return None;
    }
    u32::try_from(b.len()).ok()
}

/// Where one piece of a parse shared between threads moves its cold bytes, on the thread
/// that parses it: a region of the store of its own, set aside by the sink
/// ([`ColdSink::reserve`]) as long as the piece's lines (a string is never longer than the
/// JSON that writes it). Its bytes go to the sink with the piece ([`ColdSink::fill`]).
pub struct ColdRegion {
    store: Arc<ColdStore>,
    at: u64,
    /// Its length: bytes that would go past it stay in memory.
    len: usize,
    bytes: Vec<u8>,
}

impl ColdRegion {
    pub fn new(store: Arc<ColdStore>, at: u64, len: usize) -> ColdRegion {
        ColdRegion {
            store,
            at,
            len,
            bytes: Vec::new(),
        }
    }
}

impl TakeCold for ColdRegion {
    fn take(&mut self, c: &mut Cold) {
        let Cold::Mem(b) = c else { return };
        let Some(len) = movable(b) else { return };
        if self.bytes.len() + b.len() > self.len {
            return;
        }
        let at = self.at + self.bytes.len() as u64;
        self.bytes.extend_from_slice(b);
        *c = Cold::Stored {
            store: self.store.clone(),
            at,
            len,
            tagged: holds_ref_tag(b),
        };
    }
}

/// Where a parser moves the cold bytes of the records it reads: batches written to a
/// [`ColdStore`]. A copy of a parser (`Clone`) keeps its cold bytes in memory from then on:
/// two writers would hand out the same ranges.
#[derive(Default)]
pub struct ColdSink(Option<Sink>);

struct Sink {
    store: Arc<ColdStore>,
    /// Moved bytes not written yet, and where they go.
    batch: Vec<u8>,
    batch_at: u64,
    /// Writes full batches while the parse goes on (`None`: written in place).
    writer: Option<Writer>,
}

/// A thread that writes a sink's batches (held in the store meanwhile), handing each buffer
/// back to be filled again.
struct Writer {
    to: Option<mpsc::SyncSender<(u64, Arc<Vec<u8>>)>>,
    back: mpsc::Receiver<Vec<u8>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    fn start(store: Arc<ColdStore>) -> Option<Writer> {
        // One batch waits while one is written: a slower disk holds the parse back, not more
        // memory.
        let (to, jobs) = mpsc::sync_channel::<(u64, Arc<Vec<u8>>)>(1);
        let (done, back) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("cold-writer".into())
            .spawn(move || {
                for (at, batch) in jobs {
                    if let Some(mut buffer) = store.write_held(at, batch) {
                        buffer.clear();
                        if done.send(buffer).is_err() {
                            return;
                        }
                    }
                }
            })
            .ok()?;
        Some(Writer {
            to: Some(to),
            back,
            thread: Some(thread),
        })
    }

    /// Hand `batch` over to be written at `at`; a written buffer back when there is one.
    fn send(&mut self, at: u64, batch: Arc<Vec<u8>>) -> Result<Option<Vec<u8>>, Arc<Vec<u8>>> {
        let Some(to) = &self.to else {
            return Err(batch);
        };
        if let Err(mpsc::SendError((_, batch))) = to.send((at, batch)) {
            self.to = None;
            return Err(batch);
        }
        Ok(self.back.try_recv().ok())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.to = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Clone for ColdSink {
    fn clone(&self) -> ColdSink {
        ColdSink(None)
    }
}

impl fmt::Debug for ColdSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "ColdSink(store)"
        } else {
            "ColdSink(memory)"
        })
    }
}

impl ColdSink {
    /// Move cold bytes to `store` from now on.
    pub fn to(store: ColdStore) -> ColdSink {
        ColdSink(Some(Sink {
            store: Arc::new(store),
            batch: Vec::new(),
            batch_at: 0,
            writer: None,
        }))
    }

    /// Set `len` bytes of the store aside for [`ColdRegion`]s, after every byte moved so far;
    /// where they start (`None` when there is no store: nothing is moved then).
    pub fn reserve(&mut self, len: u64) -> Option<(Arc<ColdStore>, u64)> {
        let s = self.0.as_mut()?;
        if !s.batch.is_empty() {
            s.hand_over();
        }
        let at = s.batch_at;
        s.batch_at += len;
        Some((s.store.clone(), at))
    }

    /// Hand a region's bytes over to be written (in the order the regions were set aside):
    /// its ranges are readable after this.
    pub fn fill(&mut self, region: ColdRegion) {
        let Some(s) = &mut self.0 else { return };
        if region.bytes.is_empty() {
            return;
        }
        let back = s.send(region.at, region.bytes);
        if s.batch.capacity() == 0 {
            if let Some(b) = back {
                s.batch = b;
                s.trim();
            }
        }
    }
}

impl TakeCold for ColdSink {
    /// Its range is readable once the batch is handed over ([`ColdSink::flush`]).
    fn take(&mut self, c: &mut Cold) {
        let Some(s) = &mut self.0 else { return };
        let Cold::Mem(b) = c else { return };
        let Some(len) = movable(b) else { return };
        let at = s.batch_at + s.batch.len() as u64;
        if s.batch.capacity() == 0 {
            s.batch.reserve_exact(BATCH + BATCH / 4);
        }
        s.batch.extend_from_slice(b);
        *c = Cold::Stored {
            store: s.store.clone(),
            at,
            len,
            tagged: holds_ref_tag(b),
        };
        if s.batch.len() >= BATCH {
            s.hand_over();
        }
    }
}

impl ColdSink {
    /// Hand the moved bytes over to be written: every range handed out is readable after
    /// this (from memory until the writer thread has written it).
    pub fn flush(&mut self) {
        let Some(s) = &mut self.0 else { return };
        if !s.batch.is_empty() {
            s.hand_over();
        }
    }
}

impl Sink {
    /// The batch to the writer thread (started at the first), or written here when there is
    /// none; the batch then filled again is a buffer written before (a new one each time
    /// would be new pages to fault in, as large as the batch).
    fn hand_over(&mut self) {
        let at = self.batch_at;
        self.batch_at += self.batch.len() as u64;
        let batch = std::mem::take(&mut self.batch);
        self.batch = self.send(at, batch).unwrap_or_default();
        self.trim();
    }

    /// Bytes to be written at `at`, held until they are; a written buffer back (empty) when
    /// there is one.
    fn send(&mut self, at: u64, bytes: Vec<u8>) -> Option<Vec<u8>> {
        if self.writer.is_none() {
            self.writer = Writer::start(self.store.clone());
        }
        let held = self.store.hold(at, bytes);
        let sent = match self.writer.as_mut() {
            Some(w) => w.send(at, held),
            None => Err(held),
        };
        let mut back = match sent {
            Ok(back) => back,
            Err(held) => self.store.write_held(at, held),
        };
        if let Some(b) = &mut back {
            b.clear();
        }
        back
    }

    /// A buffer grown for one long text is not kept.
    fn trim(&mut self) {
        if self.batch.capacity() > 2 * BATCH {
            self.batch = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store whose file cannot be written (opened read-only): every batch is held.
    fn refusing(dir: &Path) -> ColdStore {
        let path = dir.join("ro");
        std::fs::write(&path, b"").expect("write");
        ColdStore::in_file(File::open(&path).expect("open"))
    }

    #[test]
    fn moved_strings_read_back_as_they_were() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sink = ColdSink::to(ColdStore::new(dir.path()).expect("store"));
        let long: Vec<String> = (0..2000)
            .map(|i| format!("signature {i} {}", "é字".repeat(i % 97 + 20)))
            .collect();
        let mut kept: Vec<ColdStr> = long.iter().map(|t| moved(&mut sink, t)).collect();
        kept.push(moved(&mut sink, "short"));
        sink.flush();
        for (k, t) in kept
            .iter()
            .zip(long.iter().map(String::as_str).chain(["short"]))
        {
            assert_eq!(k.get(), t);
            assert_eq!(k.len(), t.len());
        }
        // Backwards and by strides too: a window read for one range serves only its own.
        for (k, t) in kept.iter().zip(&long).rev().step_by(7) {
            assert_eq!(k.get(), t.as_str());
        }
        assert!(matches!(kept[0].0, Cold::Stored { .. }));
        assert!(matches!(kept.last().map(|k| &k.0), Some(Cold::Mem(_))));
        // A copy of the sink keeps what it is given in memory.
        let mut copy = sink.clone();
        assert!(matches!(moved(&mut copy, &long[5]).0, Cold::Mem(_)));
    }

    /// Two stores hold different bytes at the same places: read in turn, on one thread and on
    /// several, each string reads back from its own store (a thread's windows tell stores
    /// apart).
    #[test]
    fn strings_of_two_stores_read_in_turn_read_back_from_their_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let texts = |tag: &str| -> Vec<String> {
            (0..3000)
                .map(|i| format!("{tag} {i:04} {}", "ab".repeat(i % 50 + 40)))
                .collect()
        };
        let (a, b) = (texts("one"), texts("two"));
        let stored = |texts: &[String]| {
            let mut sink = ColdSink::to(ColdStore::new(dir.path()).expect("store"));
            let kept: Vec<ColdStr> = texts.iter().map(|t| moved(&mut sink, t)).collect();
            sink.flush();
            kept
        };
        let (ka, kb) = (stored(&a), stored(&b));
        let place = |k: &ColdStr| match k.0 {
            Cold::Stored { at, .. } => Some(at),
            Cold::Mem(_) => None,
        };
        assert!(place(&ka[2999]).is_some_and(|at| at > 0));
        assert!((0..a.len()).all(|i| place(&ka[i]) == place(&kb[i])));
        let check = |from: usize| {
            for i in (from..a.len()).step_by(3) {
                assert_eq!(ka[i].get(), a[i].as_str());
                assert_eq!(kb[i].get(), b[i].as_str());
            }
        };
        check(0);
        std::thread::scope(|s| {
            for from in 0..3 {
                s.spawn(move || check(from));
            }
        });
    }

    /// A range of a stored string reads back alone, and the whole characters within any bytes
    /// of it are told with where they start, in memory as on disk.
    #[test]
    fn parts_of_a_string_read_back_by_their_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sink = ColdSink::to(ColdStore::new(dir.path()).expect("store"));
        let text = format!("{}a日本😀é", "x".repeat(5000));
        let on_disk = moved(&mut sink, &text);
        sink.flush();
        assert!(matches!(on_disk.0, Cold::Stored { .. }));
        let x = 5000;
        for s in [&on_disk, &ColdStr::from(text.as_str())] {
            assert_eq!(s.range(x, x + 7), "a日本");
            assert_eq!(s.range(x + 7, 1 << 20), "😀é");
            // Cut inside 日 at the start, inside 😀 at the end.
            assert_eq!(
                s.chars_within(x + 2, x + 9),
                Some((x + 4, "本".to_string()))
            );
            assert_eq!(
                s.chars_within(x + 3, x + 10),
                Some((x + 4, "本".to_string()))
            );
            assert_eq!(s.chars_within(x, x + 12), Some((x, "a日本😀".to_string())));
            assert_eq!(
                s.chars_within(x + 8, text.len()),
                Some((x + 11, "é".to_string()))
            );
            assert_eq!(s.chars_within(0, 3), Some((0, "xxx".to_string())));
        }
    }

    /// Batches past the first go to the writer thread: every range reads back once flushed,
    /// written or (the disk refusing them) held.
    #[test]
    fn batches_written_while_the_parse_goes_on_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        for store in [
            ColdStore::new(dir.path()).expect("store"),
            refusing(dir.path()),
        ] {
            let mut sink = ColdSink::to(store);
            // Some 13 MB: three batches and more, and one text longer than a batch.
            let mut texts: Vec<String> = (0..3000)
                .map(|i| format!("{i:05} {}", "결과 ".repeat(i % 500 + 300)))
                .collect();
            texts.insert(1500, "x".repeat(BATCH + 17));
            let kept: Vec<ColdStr> = texts.iter().map(|t| moved(&mut sink, t)).collect();
            sink.flush();
            for (k, t) in kept.iter().zip(&texts).rev() {
                assert_eq!(k.get(), t.as_str());
            }
            // More after a flush, as an append adds.
            let more = moved(&mut sink, &texts[7]);
            sink.flush();
            assert_eq!(more.get(), texts[7].as_str());
        }
    }

    #[test]
    fn a_batch_the_disk_refuses_is_kept_in_memory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sink = ColdSink::to(refusing(dir.path()));
        let texts: Vec<String> = (0..50).map(|i| format!("{i}").repeat(60)).collect();
        let kept: Vec<ColdStr> = texts.iter().map(|t| moved(&mut sink, t)).collect();
        sink.flush();
        let more = moved(&mut sink, &"x".repeat(100));
        sink.flush();
        for (k, t) in kept.iter().zip(&texts) {
            assert_eq!(k.get(), t.as_str());
        }
        assert_eq!(more.get(), "x".repeat(100));
    }
}
