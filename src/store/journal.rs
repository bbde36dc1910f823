//! The ctl journal `<archive root>/ctl.jsonl` (SPEC 8.3): append-only, one compact JSON line per
//! committed ctl batch; appending and fsyncing a line is the commit point of a compress (4.4 step 5).
//!
//! Torn tail: [`append`] writes the line and its `\n` in one `write`, so a final line without a
//! newline was never completely written and is **uncommitted by definition, even if it parses**.
//! [`read`] reports its offset in `torn_tail` and does not return it as an entry; recovery cuts it
//! with [`cut_torn_tail`]. [`append`] refuses to write after a torn tail (that would glue the new
//! line onto the debris); recovery runs first under the lock.
//!
//! Reading is tolerant: a complete line that is not a valid entry is listed in `malformed` and
//! skipped; lines holding only whitespace carry nothing and are skipped silently. Lines are
//! numbered from 1.
//!
//! Failpoints: `journal.before-append`, `journal.after-write` (line written, not yet fsynced),
//! `journal.after-append`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{durable, failpoint};

/// File name of the journal inside an archive root.
pub const JOURNAL_FILE_NAME: &str = "ctl.jsonl";

/// One committed ctl batch: `{"at":…,"input":{…},"blocks":[…],"callId":"ctl-…"}`; unknown fields
/// are kept in `extra` and written back in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// When the batch ran (RFC 3339, as written by the caller).
    pub at: String,
    /// The compress input (`{"ranges":[…]}`) exactly as accepted.
    pub input: Value,
    /// The blocks the batch created, as written (normally state blocks, SPEC 2.3).
    pub blocks: Vec<Value>,
    /// `ctl-<uuid>`: the `compressCallId` of the batch's blocks and archives.
    #[serde(rename = "callId")]
    pub call_id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What [`read`] found in a journal.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JournalRead {
    /// Committed entries with their 1-based line numbers, in file order.
    pub entries: Vec<(u64, JournalEntry)>,
    /// Byte offset where an unterminated (uncommitted) last line starts.
    pub torn_tail: Option<u64>,
    /// Complete lines that are not valid entries: line number and the parse error.
    pub malformed: Vec<(u64, String)>,
}

/// Appends `entry` as one line and fsyncs it; on `Ok` the batch is committed. Creates the file
/// (mode 0644) when missing and then fsyncs its directory too. The directory must exist.
pub fn append(path: &Path, entry: &JournalEntry) -> io::Result<()> {
    let mut line = serde_json::to_vec(entry).map_err(io::Error::other)?;
    // Compact serde_json escapes newlines inside strings, so the line is a single line.
    line.push(b'\n');
    let (mut file, created) = open_for_append(path)?;
    if !created && !ends_with_newline(&mut file)? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: the last line is torn; recovery must cut it before appending",
                path.display()
            ),
        ));
    }
    failpoint::hit("journal.before-append")?;
    file.write_all(&line)?;
    failpoint::hit("journal.after-write")?;
    file.sync_all()?;
    if created {
        durable::fsync_dir(path.parent().unwrap_or(Path::new(".")))?;
    }
    failpoint::hit("journal.after-append")
}

/// Reads the journal; a missing file is an empty journal; a symbolic link is not followed.
pub fn read(path: &Path) -> io::Result<JournalRead> {
    match crate::format::read_no_follow(path) {
        Ok(bytes) => Ok(parse(&bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(JournalRead::default()),
        Err(e) => Err(e),
    }
}

/// Parses journal bytes (see the module docs for the torn-tail and malformed-line rules).
pub fn parse(bytes: &[u8]) -> JournalRead {
    let mut out = JournalRead::default();
    let mut start = 0usize;
    let mut line_no = 0u64;
    while start < bytes.len() {
        line_no += 1;
        let rest = bytes.get(start..).unwrap_or_default();
        let Some(len) = memchr::memchr(b'\n', rest) else {
            out.torn_tail = Some(start as u64);
            break;
        };
        let line = rest.get(..len).unwrap_or_default();
        if !line.iter().all(u8::is_ascii_whitespace) {
            match serde_json::from_slice::<JournalEntry>(line) {
                Ok(entry) => out.entries.push((line_no, entry)),
                Err(e) => out.malformed.push((line_no, e.to_string())),
            }
        }
        start += len + 1;
    }
    out
}

/// Truncates the journal to `offset` (the start of a torn tail from [`read`]) and fsyncs it.
/// Refuses an offset past the end or not at a line start, so it can only drop a partial line.
pub fn cut_torn_tail(path: &Path, offset: u64) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let len = file.metadata()?.len();
    let at_line_start = offset == 0 || byte_at(&mut file, offset - 1)? == Some(b'\n');
    if offset > len || !at_line_start {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: offset {offset} is not the start of a line within {len} bytes",
                path.display()
            ),
        ));
    }
    file.set_len(offset)?;
    file.sync_all()
}

/// Opens for appending, creating the file if needed; tells whether this call created it.
fn open_for_append(path: &Path) -> io::Result<(File, bool)> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .append(true)
        .mode(durable::FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    match options.clone().create_new(true).open(path) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok((options.open(path)?, false)),
        Err(e) => Err(e),
    }
}

/// True when the file is empty or its last byte is `\n`.
fn ends_with_newline(file: &mut File) -> io::Result<bool> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    Ok(byte_at(file, len - 1)? == Some(b'\n'))
}

fn byte_at(file: &mut File, offset: u64) -> io::Result<Option<u8>> {
    file.seek(SeekFrom::Start(offset))?;
    let mut byte = [0u8; 1];
    let n = file.read(&mut byte)?;
    let [b] = byte;
    Ok((n == 1).then_some(b))
}
