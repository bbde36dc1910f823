//! Immutable bytes made of shared pieces: a computed file's content, whose unchanged lines
//! are shared between one version and the next instead of copied. A piece is in memory, or
//! in a [`Spool`]: an unlinked file the mount writes a large session's lines to, so that the
//! lines it keeps for the next version (and the version it serves) are not resident.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

/// An unlinked file that bytes are appended to and read back from by range (never
/// rewritten: a range once written stays what it was while any piece holds the file).
#[derive(Debug)]
pub struct Spool {
    file: File,
    dir: PathBuf,
    /// Bytes written so far.
    len: Mutex<u64>,
}

impl Spool {
    /// A new spool in `dir` (`O_TMPFILE`, or a file made and unlinked at once).
    pub fn new(dir: &Path) -> std::io::Result<Spool> {
        Ok(Spool {
            file: unlinked_file(dir)?,
            dir: dir.to_path_buf(),
            len: Mutex::new(0),
        })
    }

    /// A spool in `file` (a test's: one that refuses writes).
    #[cfg(test)]
    pub(crate) fn in_file(file: File, dir: &Path) -> Spool {
        Spool {
            file,
            dir: dir.to_path_buf(),
            len: Mutex::new(0),
        }
    }

    /// The directory it is in (where a new one for the same holder goes).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        *self.len.lock()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append `data`; where it starts.
    pub fn append(&self, data: &[u8]) -> std::io::Result<u64> {
        let mut len = self.len.lock();
        let at = *len;
        self.file.write_all_at(data, at)?;
        *len = at + data.len() as u64;
        Ok(at)
    }

    /// Append `data` on another thread while the caller goes on; [`Behind::wait`] gives the
    /// bytes back with where they start. Each write is to be waited for before the next is
    /// handed out: they then land in order.
    pub fn append_behind(self: &Arc<Spool>, data: Vec<u8>) -> Behind {
        let spool = self.clone();
        let (give, take) = std::sync::mpsc::sync_channel::<Vec<u8>>(1);
        let (done, back) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("normafs-spool".into())
            .spawn(move || {
                if let Ok(data) = take.recv() {
                    // Caught, so that the bytes come back whatever happens to the write.
                    let at = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        spool.append(&data)
                    }))
                    .unwrap_or_else(|_| Err(std::io::Error::other("the spool's writer panicked")));
                    let _ = done.send((data, at));
                }
            });
        let data = match spawned {
            Ok(_) => match give.send(data) {
                Ok(()) => return Behind::Thread(back),
                Err(std::sync::mpsc::SendError(data)) => data,
            },
            Err(e) => {
                tracing::debug!("a spool write made in place: no thread for it: {e}");
                data
            }
        };
        let at = self.append(&data);
        Behind::Done(data, at)
    }

    /// Append `[from, to)` of the spool to `out`. A read that fails (the disk) gives zeros,
    /// said once in the log: the bytes were written by this process and are not expected to
    /// go.
    fn read_into(&self, from: u64, to: u64, out: &mut Vec<u8>) {
        use std::os::fd::AsRawFd;
        let want = to.saturating_sub(from) as usize;
        let end = out.len() + want;
        out.reserve(want);
        // Read into the spare capacity, not zeroed first (reads of a version kept here ask
        // for a megabyte each).
        while out.len() < end {
            let left = end - out.len();
            let at = from + (want - left) as u64;
            let spare = &mut out.spare_capacity_mut()[..left];
            // SAFETY: pread writes at most `spare.len()` bytes into the vector's spare
            // capacity, which stays allocated for the call; only the bytes it reports
            // written are then counted as initialized.
            let n = unsafe {
                libc::pread(
                    self.file.as_raw_fd(),
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    i64::try_from(at).unwrap_or(i64::MAX),
                )
            };
            match n {
                n if n > 0 => {
                    // SAFETY: pread initialized the next `n` bytes (n <= spare capacity).
                    unsafe { out.set_len(out.len() + n as usize) };
                }
                0 => {
                    tracing::error!("reading back spooled bytes: the spool ends at {at}");
                    break;
                }
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    tracing::error!("reading back spooled bytes: {e}");
                    break;
                }
            }
        }
        out.resize(end, 0);
    }
}

/// A write to a spool made on another thread ([`Spool::append_behind`]).
pub enum Behind {
    Thread(std::sync::mpsc::Receiver<(Vec<u8>, std::io::Result<u64>)>),
    Done(Vec<u8>, std::io::Result<u64>),
}

impl Behind {
    /// The bytes handed out, and where they start in the spool (or why they are not in it).
    /// `None`: the bytes are lost with the thread that held them.
    pub fn wait(self) -> Option<(Vec<u8>, std::io::Result<u64>)> {
        match self {
            Behind::Thread(back) => back.recv().ok(),
            Behind::Done(data, at) => Some((data, at)),
        }
    }
}

/// A new file in `dir` that no name leads to (`O_TMPFILE`; where the filesystem lacks it, a
/// file made and unlinked at once).
pub fn unlinked_file(dir: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .mode(0o600)
        .open(dir)
    {
        Ok(f) => Ok(f),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
            for n in 0..64u32 {
                let p = dir.join(format!(
                    ".normafs-spill-{}-{}-{n}",
                    std::process::id(),
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.subsec_nanos())
                ));
                match std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&p)
                {
                    Ok(f) => {
                        std::fs::remove_file(&p)?;
                        return Ok(f);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// Where a piece's bytes are.
#[derive(Clone, Debug)]
enum Buf {
    Mem(Arc<Vec<u8>>),
    Spooled(Arc<Spool>),
}

impl Buf {
    fn same(&self, other: &Buf) -> bool {
        match (self, other) {
            (Buf::Mem(a), Buf::Mem(b)) => Arc::ptr_eq(a, b),
            (Buf::Spooled(a), Buf::Spooled(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// A range of a shared buffer, in memory or spooled.
#[derive(Clone, Debug)]
pub struct Piece {
    buf: Buf,
    start: usize,
    end: usize,
}

impl Piece {
    /// `buf[start..end]` (clamped to the buffer).
    pub fn new(buf: Arc<Vec<u8>>, start: usize, end: usize) -> Piece {
        let end = end.min(buf.len());
        Piece {
            buf: Buf::Mem(buf),
            start: start.min(end),
            end,
        }
    }

    /// A whole buffer.
    pub fn whole(buf: Vec<u8>) -> Piece {
        let end = buf.len();
        Piece::new(Arc::new(buf), 0, end)
    }

    /// `[start, end)` of `spool` (clamped to what was written).
    pub fn spooled(spool: Arc<Spool>, start: usize, end: usize) -> Piece {
        let end = end.min(spool.len() as usize);
        Piece {
            buf: Buf::Spooled(spool),
            start: start.min(end),
            end,
        }
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// The bytes, when in memory.
    pub fn in_memory(&self) -> Option<&[u8]> {
        match &self.buf {
            Buf::Mem(b) => Some(&b[self.start..self.end]),
            Buf::Spooled(_) => None,
        }
    }

    /// Whether the bytes are in a spool.
    pub fn is_spooled(&self) -> bool {
        matches!(self.buf, Buf::Spooled(_))
    }

    /// The bytes: borrowed when in memory, read back when spooled.
    pub fn bytes(&self) -> Cow<'_, [u8]> {
        match &self.buf {
            Buf::Mem(b) => Cow::Borrowed(&b[self.start..self.end]),
            Buf::Spooled(_) => {
                let mut out = Vec::with_capacity(self.len());
                self.append_range(0, self.len(), &mut out);
                Cow::Owned(out)
            }
        }
    }

    /// Append bytes `[from, to)` of the piece to `out`.
    pub fn append_range(&self, from: usize, to: usize, out: &mut Vec<u8>) {
        let to = to.min(self.len());
        let from = from.min(to);
        match &self.buf {
            Buf::Mem(b) => out.extend_from_slice(&b[self.start + from..self.start + to]),
            Buf::Spooled(s) => {
                s.read_into((self.start + from) as u64, (self.start + to) as u64, out);
            }
        }
    }
}

/// Bytes as a sequence of shared pieces. Cloning is a reference count.
#[derive(Clone, Default)]
pub struct Bytes(Arc<Pieces>);

#[derive(Default)]
struct Pieces {
    pieces: Vec<Piece>,
    /// Where each piece starts.
    starts: Vec<u64>,
    len: u64,
}

impl Bytes {
    /// Bytes of the given pieces, in order (empty pieces are dropped).
    pub fn from_pieces(pieces: impl IntoIterator<Item = Piece>) -> Bytes {
        let mut p = Pieces::default();
        for piece in pieces {
            if piece.is_empty() {
                continue;
            }
            // A piece that continues the previous one in the same buffer joins it: reads
            // then borrow instead of copying across piece boundaries.
            if let Some(last) = p.pieces.last_mut() {
                if last.buf.same(&piece.buf) && last.end == piece.start {
                    last.end = piece.end;
                    p.len += piece.len() as u64;
                    continue;
                }
            }
            p.starts.push(p.len);
            p.len += piece.len() as u64;
            p.pieces.push(piece);
        }
        Bytes(Arc::new(p))
    }

    pub fn len(&self) -> u64 {
        self.0.len
    }

    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Whether another holder (a cache, a reader) has these bytes too: letting go of this
    /// one frees nothing now.
    pub fn shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    /// The bytes held in memory (the rest is spooled).
    pub fn resident_len(&self) -> u64 {
        self.0
            .pieces
            .iter()
            .filter(|p| !p.is_spooled())
            .map(|p| p.len() as u64)
            .sum()
    }

    /// The bytes in order, in slices: a piece in memory whole, a spooled one read back a
    /// chunk at a time.
    pub fn each_piece(&self, f: impl FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
        self.each_slice_upto(self.len(), f)
    }

    /// [`Bytes::each_piece`] of the first `len` bytes.
    pub fn each_slice_upto(
        &self,
        len: u64,
        mut f: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        const CHUNK: usize = 1 << 20;
        let mut left = len;
        let mut scratch = Vec::new();
        for p in &self.0.pieces {
            if left == 0 {
                break;
            }
            let take = (p.len() as u64).min(left) as usize;
            left -= take as u64;
            if let Some(mem) = p.in_memory() {
                f(&mem[..take])?;
                continue;
            }
            let mut at = 0;
            while at < take {
                let to = (at + CHUNK).min(take);
                scratch.clear();
                p.append_range(at, to, &mut scratch);
                f(&scratch)?;
                at = to;
            }
        }
        Ok(())
    }

    /// The pieces, in order.
    pub fn pieces(&self) -> &[Piece] {
        &self.0.pieces
    }

    /// At most `size` bytes from `offset` (fewer at the end; none past it): borrowed when
    /// they lie in one piece.
    pub fn window(&self, offset: u64, size: u32) -> Cow<'_, [u8]> {
        match self.locate(offset, size) {
            Ok(b) => Cow::Borrowed(b),
            Err((i, end)) => {
                let mut out = Vec::with_capacity((end - offset) as usize);
                self.gather(i, offset, end, &mut out);
                Cow::Owned(out)
            }
        }
    }

    /// As [`Bytes::window`], with the bytes of a window across pieces copied into `scratch`
    /// (whose capacity a reader keeps for its next read) instead of a new buffer.
    pub fn window_in<'a>(&'a self, offset: u64, size: u32, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        match self.locate(offset, size) {
            Ok(b) => b,
            Err((i, end)) => {
                scratch.clear();
                self.gather(i, offset, end, scratch);
                scratch
            }
        }
    }

    /// The window's bytes when they lie in one piece; else the piece it starts in and where
    /// it ends.
    fn locate(&self, offset: u64, size: u32) -> Result<&[u8], (usize, u64)> {
        let p = &self.0;
        if offset >= p.len || size == 0 {
            return Ok(&[]);
        }
        let end = offset.saturating_add(u64::from(size)).min(p.len);
        // The piece holding `offset`: the last start at or before it.
        let i = p.starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let first_start = p.starts[i];
        let first = &p.pieces[i];
        if let Some(mem) = first.in_memory() {
            if end <= first_start + first.len() as u64 {
                let from = (offset - first_start) as usize;
                let to = (end - first_start) as usize;
                return Ok(&mem[from..to]);
            }
        }
        Err((i, end))
    }

    /// Append the bytes from `offset` to `end`, which start in piece `i`.
    fn gather(&self, mut i: usize, offset: u64, end: u64, out: &mut Vec<u8>) {
        let p = &self.0;
        while i < p.pieces.len() && p.starts[i] < end {
            let piece = &p.pieces[i];
            let start = p.starts[i];
            let from = (offset.saturating_sub(start) as usize).min(piece.len());
            let to = ((end - start) as usize).min(piece.len());
            piece.append_range(from, to, out);
            i += 1;
        }
    }

    /// All the bytes in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len as usize);
        for piece in &self.0.pieces {
            piece.append_range(0, piece.len(), &mut out);
        }
        out
    }

    /// The first `len` bytes (all of them when there are fewer), sharing the pieces.
    pub fn prefix(&self, len: u64) -> Bytes {
        if len >= self.len() {
            return self.clone();
        }
        let mut left = len;
        let pieces = self.0.pieces.iter().map_while(|p| {
            if left == 0 {
                return None;
            }
            let take = (p.len() as u64).min(left) as usize;
            left -= take as u64;
            Some(Piece {
                buf: p.buf.clone(),
                start: p.start,
                end: p.start + take,
            })
        });
        Bytes::from_pieces(pieces.collect::<Vec<_>>())
    }

    /// Whether `self` begins with all of `prefix`. Pieces both share (a version's unchanged
    /// lines are the previous version's) are equal without a look at their bytes.
    pub fn starts_with(&self, prefix: &Bytes) -> bool {
        if prefix.len() > self.len() {
            return false;
        }
        let (a, b) = (&self.0.pieces, &prefix.0.pieces);
        // Cursors: a piece and how far into it.
        let (mut i, mut ia, mut j, mut jb) = (0, 0, 0, 0);
        while j < b.len() {
            let (Some(pa), Some(pb)) = (a.get(i), b.get(j)) else {
                return false;
            };
            let n = (pa.len() - ia).min(pb.len() - jb);
            let same_place = pa.buf.same(&pb.buf) && pa.start + ia == pb.start + jb;
            if !same_place {
                let (mut x, mut y) = (Vec::new(), Vec::new());
                pa.append_range(ia, ia + n, &mut x);
                pb.append_range(jb, jb + n, &mut y);
                if x != y {
                    return false;
                }
            }
            ia += n;
            jb += n;
            if ia == pa.len() {
                (i, ia) = (i + 1, 0);
            }
            if jb == pb.len() {
                (j, jb) = (j + 1, 0);
            }
        }
        true
    }

    /// Whether two values share their pieces (no comparison of bytes).
    pub fn ptr_eq(a: &Bytes, b: &Bytes) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes::from_pieces([Piece::whole(v)])
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        self.len() == other.len() && (Bytes::ptr_eq(self, other) || self.to_vec() == other.to_vec())
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "Bytes({} bytes in {} pieces)",
            self.len(),
            self.0.pieces.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_span_pieces() {
        let b =
            Bytes::from_pieces(["ab", "", "cde", "f"].map(|s| Piece::whole(s.as_bytes().to_vec())));
        assert_eq!(b.len(), 6);
        assert_eq!(&*b.window(0, 2), b"ab");
        assert!(matches!(b.window(2, 3), Cow::Borrowed(_)));
        assert_eq!(&*b.window(1, 4), b"bcde");
        assert_eq!(&*b.window(1, 100), b"bcdef");
        assert_eq!(&*b.window(5, 1), b"f");
        assert_eq!(&*b.window(6, 1), b"");
        assert_eq!(&*b.window(99, 1), b"");
        assert_eq!(b.to_vec(), b"abcdef");
        assert_eq!(b, Bytes::from(b"abcdef".to_vec()));
        assert_eq!(b.prefix(0).to_vec(), b"");
        assert_eq!(b.prefix(4).to_vec(), b"abcd");
        assert_eq!(b.prefix(5).to_vec(), b"abcde");
        assert_eq!(b.prefix(60).to_vec(), b"abcdef");
        assert!(Bytes::default().is_empty());
        let buf = Arc::new(b"0123456789".to_vec());
        let joined = Bytes::from_pieces([
            Piece::new(buf.clone(), 0, 3),
            Piece::new(buf.clone(), 3, 7),
            Piece::new(buf.clone(), 8, 10),
        ]);
        assert_eq!(
            joined.pieces().len(),
            2,
            "contiguous ranges of one buffer join"
        );
        assert_eq!(joined.to_vec(), b"012345689");
        assert!(matches!(joined.window(1, 5), Cow::Borrowed(b"12345")));
    }

    /// Spooled pieces read as the same bytes in memory would: windows within and across
    /// pieces of both kinds, the whole, a prefix, `starts_with`, the slices in order; and
    /// ranges of one spool that follow each other join.
    #[test]
    fn spooled_pieces_read_as_the_same_bytes_in_memory() {
        let spool = Arc::new(Spool::new(&std::env::temp_dir()).expect("spool"));
        let text: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let at = spool.append(&text[..2_500_000]).expect("append") as usize;
        assert_eq!(at, 0);
        let at2 = spool.append(b"tail").expect("append") as usize;
        assert_eq!(at2, 2_500_000);
        let spooled = Bytes::from_pieces([
            Piece::spooled(spool.clone(), 0, 1_000_000),
            Piece::spooled(spool.clone(), 1_000_000, 2_500_000),
            Piece::whole(text[2_500_000..].to_vec()),
            Piece::spooled(spool.clone(), at2, at2 + 4),
        ]);
        let mut want = text.clone();
        want.extend_from_slice(b"tail");
        let memory = Bytes::from(want.clone());
        assert_eq!(
            spooled.pieces().len(),
            3,
            "following ranges of one spool join"
        );
        assert_eq!(spooled.len(), want.len() as u64);
        assert_eq!(spooled.resident_len(), 500_000);
        assert_eq!(spooled.to_vec(), want);
        assert_eq!(spooled, memory);
        for (off, size) in [
            (0u64, 10u32),
            (999_990, 20),
            (2_499_990, 20),
            (2_999_999, 3),
            (3_000_002, 100),
            (1_234_567, 1 << 20),
            (3_000_004, 1),
        ] {
            let mut scratch = Vec::new();
            assert_eq!(
                spooled.window_in(off, size, &mut scratch),
                &*memory.window(off, size),
                "window at {off} of {size}"
            );
            assert_eq!(&*spooled.window(off, size), &*memory.window(off, size));
        }
        assert!(spooled.starts_with(&memory.prefix(2_600_000)));
        assert!(memory.starts_with(&spooled.prefix(2_600_000)));
        assert_eq!(spooled.prefix(1_500_000).to_vec(), &want[..1_500_000]);
        let mut slices = Vec::new();
        spooled
            .each_piece(|b| {
                slices.extend_from_slice(b);
                Ok(())
            })
            .expect("slices");
        assert_eq!(slices, want);
        let mut first = Vec::new();
        spooled
            .each_slice_upto(1_700_000, |b| {
                assert!(b.len() <= 1 << 20, "read back a chunk at a time");
                first.extend_from_slice(b);
                Ok(())
            })
            .expect("slices");
        assert_eq!(first, &want[..1_700_000]);
    }

    /// A spooled range is read after what a reused buffer holds, never as what its spare
    /// capacity held before; a range is cut at the spool's end.
    #[test]
    fn spooled_reads_append_to_a_reused_buffer() {
        let spool = Arc::new(Spool::new(&std::env::temp_dir()).expect("spool"));
        let at = spool.append(b"0123456789").expect("append") as usize;
        let mut out = b"kept".to_vec();
        out.extend_from_slice(&[0xff; 60]);
        out.truncate(4);
        Piece::spooled(spool.clone(), at + 2, at + 6).append_range(0, 4, &mut out);
        assert_eq!(out, b"kept2345");
        Piece::spooled(spool.clone(), at + 8, at + 14).append_range(0, 6, &mut out);
        assert_eq!(out, b"kept234589");
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let at = spool.append(&big).expect("append") as usize;
        let mut out = vec![0xee; 5];
        Piece::spooled(spool, at, at + big.len()).append_range(7, 2_000_007, &mut out);
        assert_eq!(&out[..5], &[0xee; 5]);
        assert_eq!(&out[5..], &big[7..2_000_007]);
    }

    #[test]
    fn a_prefix_is_found_across_pieces_shared_or_copied() {
        let buf = Arc::new(b"line one\nline two\n".to_vec());
        let old = Bytes::from_pieces([
            Piece::new(buf.clone(), 0, 9),
            Piece::new(buf.clone(), 9, 18),
        ]);
        // The next version shares the old lines, joined differently, and adds one.
        let newer = Bytes::from_pieces([
            Piece::new(buf.clone(), 0, 18),
            Piece::whole(b"line three\n".to_vec()),
        ]);
        assert!(newer.starts_with(&old));
        assert!(newer.starts_with(&newer));
        assert!(!old.starts_with(&newer), "longer than the bytes");
        // Equal bytes in other buffers, split elsewhere.
        let copied = Bytes::from_pieces(
            ["line o", "ne\nline two\nmore"].map(|s| Piece::whole(s.as_bytes().to_vec())),
        );
        assert!(copied.starts_with(&old));
        let changed = Bytes::from_pieces(
            ["line one\nline 2wo\nmore"].map(|s| Piece::whole(s.as_bytes().to_vec())),
        );
        assert!(!changed.starts_with(&old));
        assert!(old.starts_with(&Bytes::default()));
    }
}
