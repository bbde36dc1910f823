//! A version's bytes kept on disk instead of in memory: an unlinked temporary file, read back
//! a range at a time, gone when dropped. What an inode stands for must stay readable until the
//! kernel forgets it (the kernel may drop its pages and read them again whenever it likes),
//! and the daemon keeps no more of it in memory than its budget allows.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::bytes::Bytes;

/// A version's bytes in an unlinked temporary file.
#[derive(Debug)]
pub struct Spilled {
    file: File,
    len: u64,
}

impl Spilled {
    /// Write `data` to a new unlinked file in `dir`.
    pub fn write(dir: &Path, data: &Bytes) -> std::io::Result<Spilled> {
        let mut file = unlinked_file(dir)?;
        for piece in data.pieces() {
            file.write_all(piece)?;
        }
        Ok(Spilled {
            file,
            len: data.len(),
        })
    }

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
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    /// All of it (a caller that compares versions).
    pub fn bytes(&self) -> std::io::Result<Bytes> {
        let mut buf = vec![0u8; self.len as usize];
        self.file.read_exact_at(&mut buf, 0)?;
        Ok(Bytes::from_pieces([crate::bytes::Piece::whole(buf)]))
    }
}

/// A new file in `dir` that no name leads to (`O_TMPFILE`; where the filesystem lacks it, a
/// file made and unlinked at once).
fn unlinked_file(dir: &Path) -> std::io::Result<File> {
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

#[cfg(test)]
mod tests {
    use super::Spilled;
    use crate::bytes::{Bytes, Piece};

    #[test]
    fn spilled_bytes_read_back_by_range() {
        let dir = std::env::temp_dir();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let b = Bytes::from_pieces([
            Piece::whole(data[..40_000].to_vec()),
            Piece::whole(data[40_000..].to_vec()),
        ]);
        let s = Spilled::write(&dir, &b).expect("spill");
        assert_eq!(s.len(), 100_000);
        assert_eq!(s.read(39_990, 20).expect("read"), data[39_990..40_010]);
        assert_eq!(
            s.read(99_990, 4096).expect("read at the end"),
            data[99_990..]
        );
        assert!(s.read(100_000, 10).expect("past the end").is_empty());
        assert_eq!(s.bytes().expect("all").to_vec(), data);
    }
}
