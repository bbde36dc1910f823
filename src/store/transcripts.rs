//! File-backed transcript loading (SPEC 1, 3): incremental refresh of an append-only JSONL file.
//!
//! A [`TranscriptFile`] remembers how far it has read. A refresh after growth reads only the new
//! bytes, after checking that what was seen before is still there: same file (device and
//! inode), size not smaller, the checksum of the last complete line still matching the bytes
//! at its offset, and the unterminated last line (if any) still a prefix of what follows it.
//! Any other change reparses the whole file.

use std::any::Any;
use std::fmt;
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::format::cold::ColdStore;
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
    memo: Memo,
    /// A file at least this long moves its records' cold bytes to a store in this
    /// directory when parsed whole (see [`TranscriptFile::open_storing_cold`]).
    cold: Option<(PathBuf, u64)>,
}

/// What a reader derived from the transcript and keeps for its next computation (e.g. the
/// view's [`crate::noa::view::Memo`]). It is dropped whenever the file is parsed again, so a
/// memo only ever sees the messages it was made from, plus appended ones.
#[derive(Default)]
struct Memo(Option<Box<dyn Any + Send>>);

impl Clone for Memo {
    /// A copy of the transcript starts without one.
    fn clone(&self) -> Memo {
        Memo(None)
    }
}

impl fmt::Debug for Memo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Memo(kept)"
        } else {
            "Memo(none)"
        })
    }
}

impl TranscriptFile {
    /// Load the transcript at `path`; a missing file is an empty transcript. `session` is the
    /// session id the file belongs to (for `transcript.session-mismatch`), when known.
    pub fn open(path: impl Into<PathBuf>, session: Option<&str>) -> io::Result<TranscriptFile> {
        TranscriptFile::open_storing_cold(path, session, None)
    }

    /// [`TranscriptFile::open`], moving the cold bytes of its records (thinking signatures,
    /// unknown record fields: see [`crate::format::cold`]) to an unlinked file in `dir` when
    /// the file has at least `from` bytes when it is parsed whole: a mount's large session
    /// then keeps them out of memory.
    pub fn open_storing_cold(
        path: impl Into<PathBuf>,
        session: Option<&str>,
        cold: Option<(PathBuf, u64)>,
    ) -> io::Result<TranscriptFile> {
        let mut file = TranscriptFile {
            path: path.into(),
            session: session.map(str::to_string),
            parser: Parser::new(session),
            seen: None,
            memo: Memo::default(),
            cold,
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

    /// The number of messages from complete lines, which later appends keep as they are.
    pub fn stable_messages(&self) -> usize {
        self.parser.stable_messages()
    }

    /// Take what a reader kept with this transcript, when it is a `T`.
    pub fn take_memo<T: Any>(&mut self) -> Option<T> {
        self.memo.0.take()?.downcast::<T>().ok().map(|b| *b)
    }

    /// Keep derived data with this transcript until it is parsed again.
    pub fn keep_memo<T: Any + Send>(&mut self, memo: T) {
        self.memo.0 = Some(Box::new(memo));
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
        // The unterminated last line must still be there, as it was.
        let committed = self.parser.committed_len();
        let mut head = vec![0; self.parser.pending().len()];
        match file.read_exact_at(&mut head, committed) {
            Ok(()) if head == self.parser.pending() => {}
            Ok(()) => return self.reload(&file),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return self.reload(&file),
            Err(e) => return Err(e),
        }
        let before = self.parser.last_line();
        let mut sha = seen.last_line_sha;
        let fed = self.parser.fed_len();
        feed_from(&file, &mut self.parser, fed, &mut sha)?;
        let bytes = self.parser.fed_len() - fed;
        if bytes == 0 {
            return Ok(Refresh::Unchanged);
        }
        if self.parser.last_line() == before {
            sha = seen.last_line_sha;
        }
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
        self.memo = Memo::default();
        Refresh::Reloaded
    }

    /// Parse the whole file again.
    fn reload(&mut self, file: &File) -> io::Result<Refresh> {
        let mut parser = Parser::new(self.session.as_deref());
        if let Some((dir, from)) = &self.cold {
            if file.metadata()?.len() >= *from {
                match ColdStore::new(dir) {
                    Ok(store) => parser.store_cold_in(store),
                    Err(e) => tracing::warn!(
                        "{}: cold bytes kept in memory: no store in {}: {e}",
                        self.path.display(),
                        dir.display()
                    ),
                }
            }
        }
        let mut sha = None;
        feed_from(file, &mut parser, 0, &mut sha)?;
        parser.shrink_to_fit();
        self.parser = parser;
        self.seen = Some(Seen::new(&file.metadata()?, sha));
        self.memo = Memo::default();
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

/// The beginning of the transcript at `path`: read a chunk at a time until more than
/// `messages` messages are on complete lines, or to the end. Its first `messages` messages are
/// then the whole file's (later lines only ever add messages). For what is asked of the first
/// messages of a long transcript (`view --at`).
pub fn read_first_messages(
    path: &Path,
    session: Option<&str>,
    messages: usize,
) -> io::Result<Transcript> {
    let file = File::open(path)?;
    let mut parser = Parser::new(session);
    // Smaller than a whole read's: what is read past the messages asked for is parsed for
    // nothing.
    let mut chunk = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while parser.stable_messages() <= messages {
        let n = match file.read_at(&mut chunk, at) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let Some(read) = chunk.get(..n).filter(|r| !r.is_empty()) else {
            break;
        };
        parser.feed(read);
        at += n as u64;
    }
    Ok(parser.into_transcript())
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Bytes read and parsed at a time: a large transcript is never held whole in memory. The
/// cores that parse a chunk together wait for each other at its end: H's first read took
/// 1.68 s with 4 MiB chunks, 1.53 s with these (medians of 9 interleaved runs), at the same
/// peak RSS.
const CHUNK: usize = 16 << 20;

/// Feed `parser` the file from `offset` (where its input ends) to the end, a chunk at a time.
/// When the bytes complete a line, `sha` becomes the checksum of the last complete line,
/// computed from the very bytes parsed.
fn feed_from(
    file: &File,
    parser: &mut Parser,
    offset: u64,
    sha: &mut Option<[u8; 32]>,
) -> io::Result<()> {
    // Sized for what there is to read (one more byte sees the end): small files stay cheap.
    let left = file
        .metadata()?
        .len()
        .saturating_sub(offset)
        .saturating_add(1);
    let mut chunk = vec![0u8; usize::try_from(left).unwrap_or(CHUNK).clamp(4096, CHUNK)];
    let mut at = offset;
    // The checksum state of the unterminated line so far.
    let mut tail = Sha256::new();
    tail.update(parser.pending());
    loop {
        let n = match file.read_at(&mut chunk, at) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let Some(read) = chunk.get(..n).filter(|r| !r.is_empty()) else {
            return Ok(());
        };
        parser.feed(read);
        match memchr::memrchr(b'\n', read) {
            Some(nl) => {
                let (done, rest) = read.split_at(nl + 1);
                // The last line: from the newline before it, or from the unterminated tail.
                let body = done.get(..nl).unwrap_or_default();
                let prev = memchr::memrchr(b'\n', body);
                let mut line = match prev {
                    Some(_) => Sha256::new(),
                    None => std::mem::take(&mut tail),
                };
                let from = prev.map_or(0, |p| p + 1);
                line.update(done.get(from..).unwrap_or_default());
                *sha = Some(line.finalize().into());
                tail = Sha256::new();
                tail.update(rest);
            }
            None => tail.update(read),
        }
        at = at.saturating_add(n as u64);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// One record line of exactly `len` bytes, newline included.
    fn line(i: usize, len: usize) -> Vec<u8> {
        let head = format!(
            "{{\"uuid\":\"u{i:07}\",\"type\":\"message\",\"message\":{{\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":\""
        );
        let tail = "\"}]}}\n";
        let fill = len - head.len() - tail.len();
        let mut v = head.into_bytes();
        v.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, fill));
        v.extend_from_slice(tail.as_bytes());
        v
    }

    fn same_as_a_fresh_parse(tf: &TranscriptFile, path: &Path) {
        let bytes = fs::read(path).expect("read");
        let fresh = crate::format::loader::Transcript::parse(&bytes, Some("s"));
        assert_eq!(tf.transcript().records, fresh.records);
        assert_eq!(tf.transcript().problems(), fresh.problems());
        assert_eq!(tf.len(), bytes.len() as u64);
    }

    #[test]
    fn lines_across_read_chunks() {
        let d = tempfile::tempdir().expect("tempdir");
        let path = d.path().join("s.jsonl");
        // Lines of 1000 bytes, then one of 2000 that spans the end of the first chunk and is
        // the last complete line, then an unterminated one.
        let mut bytes = Vec::new();
        let mut i = 0;
        while bytes.len() + 1000 < CHUNK - 300 {
            bytes.extend(line(i, 1000));
            i += 1;
        }
        let spanning_at = bytes.len();
        bytes.extend(line(i, 2000));
        assert!(spanning_at < CHUNK && bytes.len() > CHUNK);
        let partial = line(i + 1, 1000);
        bytes.extend_from_slice(&partial[..400]);
        fs::write(&path, &bytes).expect("write");

        let append = |b: &[u8]| {
            let mut f = fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .expect("open");
            f.write_all(b).expect("append");
        };

        let mut tf = TranscriptFile::open(&path, Some("s")).expect("open");
        same_as_a_fresh_parse(&tf, &path);
        assert_eq!(tf.refresh().expect("refresh"), Refresh::Unchanged);

        // Appends complete the unterminated line and add more, past the next chunk boundary.
        let mut more = partial[400..].to_vec();
        for j in i + 2..i + 2 + CHUNK / 1000 + 10 {
            more.extend(line(j, 1000));
        }
        let mut grown = tf.clone();
        append(&more);
        assert!(matches!(
            grown.refresh().expect("refresh"),
            Refresh::Appended { .. }
        ));
        same_as_a_fresh_parse(&grown, &path);
        assert_eq!(grown.refresh().expect("refresh"), Refresh::Unchanged);

        // Back to the first state; then the spanning line is rewritten in place, in its part
        // before the chunk boundary, and the file grows: not an append.
        fs::write(&path, &bytes).expect("write");
        let mut tf = TranscriptFile::open(&path, Some("s")).expect("open");
        let f = fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        f.write_all_at(b"zzzz", (spanning_at + 200) as u64)
            .expect("write");
        drop(f);
        append(&more);
        assert_eq!(tf.refresh().expect("refresh"), Refresh::Reloaded);
        same_as_a_fresh_parse(&tf, &path);
    }
}
