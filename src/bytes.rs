//! Immutable bytes made of shared pieces: a computed file's content, whose unchanged lines
//! are shared between one version and the next instead of copied.

use std::borrow::Cow;
use std::sync::Arc;

/// A range of a shared buffer.
#[derive(Clone, Debug)]
pub struct Piece {
    buf: Arc<Vec<u8>>,
    start: usize,
    end: usize,
}

impl Piece {
    /// `buf[start..end]` (clamped to the buffer).
    pub fn new(buf: Arc<Vec<u8>>, start: usize, end: usize) -> Piece {
        let end = end.min(buf.len());
        Piece {
            buf,
            start: start.min(end),
            end,
        }
    }

    /// A whole buffer.
    pub fn whole(buf: Vec<u8>) -> Piece {
        let end = buf.len();
        Piece::new(Arc::new(buf), 0, end)
    }
}

impl std::ops::Deref for Piece {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.end]
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
                if Arc::ptr_eq(&last.buf, &piece.buf) && last.end == piece.start {
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
        if end <= first_start + first.len() as u64 {
            let from = (offset - first_start) as usize;
            let to = (end - first_start) as usize;
            return Ok(&first[from..to]);
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
            out.extend_from_slice(&piece[from..to]);
            i += 1;
        }
    }

    /// All the bytes in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len as usize);
        for piece in &self.0.pieces {
            out.extend_from_slice(piece);
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
            Some(Piece::new(p.buf.clone(), p.start, p.start + take))
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
            let same_place = Arc::ptr_eq(&pa.buf, &pb.buf) && pa.start + ia == pb.start + jb;
            if !same_place && pa[ia..ia + n] != pb[jb..jb + n] {
                return false;
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
