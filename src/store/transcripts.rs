//! File-backed transcript loading (SPEC 1, 3): incremental refresh of an append-only JSONL file.
//!
//! A [`TranscriptFile`] remembers how far it has read. A refresh after growth reads only the new
//! bytes, after checking that what was seen before is still there: same file (device and
//! inode), size not smaller, the checksum of the last complete line still matching the bytes
//! at its offset, and the unterminated last line (if any) still a prefix of what follows it.
//! Any other change reparses the whole file.

use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::format::loader::{Parser, Transcript};

/// What a [`TranscriptFile::refresh`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// Nothing changed.
    Unchanged,
    /// The file grew; `bytes` new bytes were parsed. Records before the previous unterminated
    /// last line are unchanged; later ones may have been added or replaced.
    Appended { bytes: u64 },
    /// The file was replaced, shrank, rewritten or removed: everything was parsed again.
    Reloaded,
}

/// What identifies the file contents last read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    /// SHA-256 of the last complete line (newline included), at `Parser::last_line`.
    last_line_sha: Option<[u8; 32]>,
}

impl Seen {
    fn new(meta: &Metadata, last_line_sha: Option<[u8; 32]>) -> Seen {
        Seen {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            last_line_sha,
        }
    }
}

/// A transcript file on disk and its parsed contents, kept up to date by [`refresh`].
///
/// [`refresh`]: TranscriptFile::refresh
#[derive(Debug, Clone)]
pub struct TranscriptFile {
    path: PathBuf,
    session: Option<String>,
    parser: Parser,
    /// `None` while the file does not exist (an empty transcript).
    seen: Option<Seen>,
}

impl TranscriptFile {
    /// Load the transcript at `path`; a missing file is an empty transcript. `session` is the
    /// session id the file belongs to (for `transcript.session-mismatch`), when known.
    pub fn open(path: impl Into<PathBuf>, session: Option<&str>) -> io::Result<TranscriptFile> {
        let mut file = TranscriptFile {
            path: path.into(),
            session: session.map(str::to_string),
            parser: Parser::new(session),
            seen: None,
        };
        file.refresh()?;
        Ok(file)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The transcript as of the last refresh.
    pub fn transcript(&self) -> &Transcript {
        self.parser.transcript()
    }

    pub fn into_transcript(self) -> Transcript {
        self.parser.into_transcript()
    }

    /// Bytes read so far (the file size at the last refresh, or what was read of it).
    pub fn len(&self) -> u64 {
        self.parser.fed_len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the file existed at the last refresh.
    pub fn exists(&self) -> bool {
        self.seen.is_some()
    }

    /// Bring the transcript up to date with the file.
    pub fn refresh(&mut self) -> io::Result<Refresh> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(self.set_missing()),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        let Some(seen) = &self.seen else {
            return self.reload(&file);
        };
        let fed = self.parser.fed_len();
        let same_file = seen.dev == meta.dev() && seen.ino == meta.ino();
        let touched_in_place = meta.len() == fed && seen.mtime != (meta.mtime(), meta.mtime_nsec());
        if !same_file || meta.len() < fed || touched_in_place || !self.last_line_matches(&file)? {
            return self.reload(&file);
        }
        let committed = self.parser.committed_len();
        let buf = read_from(&file, committed)?;
        let Some(new) = buf.strip_prefix(self.parser.pending()) else {
            // The unterminated last line was rewritten, or the file shrank meanwhile.
            return self.reload(&file);
        };
        if new.is_empty() {
            return Ok(Refresh::Unchanged);
        }
        let bytes = new.len() as u64;
        let before = self.parser.last_line();
        self.parser.feed(new);
        let sha = match self.parser.last_line() {
            after if after == before => seen.last_line_sha,
            after => line_sha(&buf, committed, after),
        };
        self.seen = Some(Seen::new(&file.metadata()?, sha));
        Ok(Refresh::Appended { bytes })
    }

    /// The file does not exist: an empty transcript.
    fn set_missing(&mut self) -> Refresh {
        if self.seen.is_none() && self.parser.fed_len() == 0 {
            return Refresh::Unchanged;
        }
        self.parser = Parser::new(self.session.as_deref());
        self.seen = None;
        Refresh::Reloaded
    }

    /// Parse the whole file again.
    fn reload(&mut self, file: &File) -> io::Result<Refresh> {
        let buf = read_from(file, 0)?;
        let mut parser = Parser::new(self.session.as_deref());
        parser.feed(&buf);
        let sha = line_sha(&buf, 0, parser.last_line());
        self.parser = parser;
        self.seen = Some(Seen::new(&file.metadata()?, sha));
        Ok(Refresh::Reloaded)
    }

    /// Whether the last complete line seen is still at its offset, unchanged.
    fn last_line_matches(&self, file: &File) -> io::Result<bool> {
        let (Some((offset, len)), Some(seen)) = (self.parser.last_line(), &self.seen) else {
            return Ok(true);
        };
        let Ok(len) = usize::try_from(len) else {
            return Ok(false);
        };
        let mut line = vec![0; len];
        match file.read_exact_at(&mut line, offset) {
            Ok(()) => Ok(Some(sha256(&line)) == seen.last_line_sha),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The checksum of the line `span` (file offset, length), read from `buf` that starts at file
/// offset `buf_start`.
fn line_sha(buf: &[u8], buf_start: u64, span: Option<(u64, u64)>) -> Option<[u8; 32]> {
    let (offset, len) = span?;
    let start = usize::try_from(offset.checked_sub(buf_start)?).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    buf.get(start..end).map(sha256)
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Read from `offset` to the end of the file.
fn read_from(file: &File, offset: u64) -> io::Result<Vec<u8>> {
    let hint = file.metadata()?.len().saturating_sub(offset);
    let mut buf = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    let mut chunk = vec![0u8; 1 << 16];
    let mut at = offset;
    loop {
        let n = match file.read_at(&mut chunk, at) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let Some(read) = chunk.get(..n) else {
            break;
        };
        if read.is_empty() {
            break;
        }
        buf.extend_from_slice(read);
        at = at.saturating_add(n as u64);
    }
    Ok(buf)
}

/// The sidechain transcripts of session `sid`: `<dir>/<sid>/subagents/agent-<aid>.jsonl`, as
/// `(aid, path)` sorted by aid. Other entries, symbolic links included, are ignored; a missing
/// directory, or one reached through a symbolic link, has none.
pub fn sidechain_paths(transcripts_dir: &Path, sid: &str) -> io::Result<Vec<(String, PathBuf)>> {
    if sid.is_empty() || sid == "." || sid == ".." || sid.contains(['/', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a session id: {sid:?}"),
        ));
    }
    // Neither `<sid>/` nor `subagents/` is followed when it is a symbolic link.
    if crate::format::check_no_links(transcripts_dir, &Path::new(sid).join("subagents")).is_err() {
        return Ok(Vec::new());
    }
    let dir = transcripts_dir.join(sid).join("subagents");
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(aid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("agent-"))
            .and_then(|n| n.strip_suffix(".jsonl"))
        else {
            continue;
        };
        let path = entry.path();
        // A symbolic link is not followed (its own type, not its target's).
        if aid.is_empty() || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        found.push((aid.to_string(), path));
    }
    found.sort();
    Ok(found)
}
