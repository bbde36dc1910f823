//! A version's bytes kept on disk instead of in memory: a range of an unlinked temporary file
//! shared with other versions, read back a range at a time, its blocks given back when it is
//! dropped. What an inode stands for must stay readable until the kernel forgets it (the
//! kernel may drop its pages and read them again whenever it likes), and the daemon keeps no
//! more of it in memory than its budget allows.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::bytes::Bytes;

/// Versions are written one after another into one unlinked file, each at a page boundary,
/// until it spans this much; then a new file is begun (the old one is closed when the last
/// version in it is let go). One file for thousands of versions: making a file costs the
/// filesystem far more than writing a few pages (a cold `grep -r` of a thousand sessions
/// spills ten thousand versions).
const SPAN: u64 = 1 << 30;

/// Where versions are spilled: the file being filled, and where its free end is.
#[derive(Debug)]
pub struct Spills {
    dir: PathBuf,
    filling: Mutex<Option<(Arc<File>, u64)>>,
}

/// A version's bytes in a range of an unlinked file; the range's blocks are given back to
/// the filesystem when it is dropped.
#[derive(Debug)]
pub struct Spilled {
    file: Arc<File>,
    offset: u64,
    len: u64,
}

impl Spills {
    /// Spill to unlinked files in `dir`.
    pub fn new(dir: PathBuf) -> Spills {
        Spills {
            dir,
            filling: Mutex::new(None),
        }
    }

    /// Where the files are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Write `data` to a range of the file being filled.
    pub fn write(&self, data: &Bytes) -> std::io::Result<Spilled> {
        let len = data.len();
        let (file, offset) = {
            let mut f = self.filling.lock();
            let room = f
                .as_ref()
                .is_some_and(|(_, end)| end.saturating_add(len) <= SPAN);
            if !room {
                *f = Some((Arc::new(crate::bytes::unlinked_file(&self.dir)?), 0));
            }
            let Some((file, end)) = f.as_mut() else {
                return Err(std::io::Error::other("no spill file"));
            };
            let at = *end;
            *end = at.saturating_add(len.next_multiple_of(PAGE));
            (file.clone(), at)
        };
        let spilled = Spilled { file, offset, len };
        let mut at = offset;
        data.each_piece(|b| {
            spilled.file.write_all_at(b, at)?;
            at += b.len() as u64;
            Ok(())
        })?;
        Ok(spilled)
    }
}

/// Ranges begin at page boundaries, so that the blocks of one are given back whole.
const PAGE: u64 = 4096;

impl Drop for Spilled {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        let span = self.len.next_multiple_of(PAGE);
        if span == 0 {
            return;
        }
        // SAFETY: fallocate on a descriptor this value holds open, with plain integers.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                self.offset as libc::off_t,
                span as libc::off_t,
            )
        };
        if r != 0 {
            // A filesystem without holes keeps the blocks until the whole file is closed.
            tracing::trace!(
                "spilled range not given back: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

impl Spilled {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Up to `size` bytes from `offset` (fewer only at the end).
    pub fn read(&self, offset: u64, size: u32) -> std::io::Result<Vec<u8>> {
        let end = self.len.min(offset.saturating_add(u64::from(size)));
        let mut buf = vec![0u8; end.saturating_sub(offset) as usize];
        self.file.read_exact_at(&mut buf, self.offset + offset)?;
        Ok(buf)
    }

    /// All of it (a caller that compares versions).
    pub fn bytes(&self) -> std::io::Result<Bytes> {
        let mut buf = vec![0u8; self.len as usize];
        self.file.read_exact_at(&mut buf, self.offset)?;
        Ok(Bytes::from_pieces([crate::bytes::Piece::whole(buf)]))
    }
}

#[cfg(test)]
mod tests {
    use super::Spills;
    use crate::bytes::{Bytes, Piece};

    #[test]
    fn spilled_bytes_read_back_by_range() {
        let spills = Spills::new(std::env::temp_dir());
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let b = Bytes::from_pieces([
            Piece::whole(data[..40_000].to_vec()),
            Piece::whole(data[40_000..].to_vec()),
        ]);
        let before = spills.write(&b).expect("spill before");
        let s = spills.write(&b).expect("spill");
        let after = spills.write(&Bytes::from_pieces([Piece::whole(vec![7u8; 5000])]));
        drop(before);
        assert_eq!(s.len(), 100_000);
        assert_eq!(s.read(39_990, 20).expect("read"), data[39_990..40_010]);
        assert_eq!(
            s.read(99_990, 4096).expect("read at the end"),
            data[99_990..]
        );
        assert!(s.read(100_000, 10).expect("past the end").is_empty());
        assert_eq!(s.bytes().expect("all").to_vec(), data);
        assert_eq!(
            after.expect("spill after").bytes().expect("all").to_vec(),
            vec![7u8; 5000],
            "a neighbour's range is its own, and letting one go leaves the others whole"
        );
    }
}
