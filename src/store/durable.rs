//! Durable file writes (SPEC 8.1): temp file + fsync + rename + directory fsync, and the helpers
//! that recovery and the audit use to recognise the temp files those writes leave after a crash.
//!
//! Invariants:
//! - The temp file of a write to `dir/<name>` is `dir/.<name>.tmp-<16 lowercase hex>`, created with
//!   `O_EXCL|O_NOFOLLOW|O_CLOEXEC`, so it is never an existing file or a planted symlink.
//! - Until the rename, the target is untouched; on any failure before it (including a panic from
//!   a failpoint) the temp file is removed. Only a crash can leave one behind ([`is_temp_name`]).
//! - Permissions: a new file gets mode 0644 (less the umask); [`atomic_replace`] of an existing
//!   regular file gives the new file the old one's permission bits, so a replace never widens
//!   access. Ownership is the writer's.
//! - Directory entries are made durable by fsyncing the directory after the rename or unlink.
//!   Parent directories are not created by these functions, except by [`create_dir_all_durable`].
//!
//! Failpoints (see [`failpoint`](super::failpoint)): `atomic.after-temp-write`,
//! `atomic.before-rename`, `atomic.after-rename`.

use std::ffi::{OsStr, OsString};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::failpoint;

/// Mode of files normafs creates (before the umask).
pub const FILE_MODE: u32 = 0o644;

/// Atomically and durably replaces (or creates) `path` with `bytes` (SPEC 8.1).
///
/// A reader sees either the old content or the new, never a mix; after `Ok` the new content and
/// its directory entry are on disk. If `path` is a symlink, the link itself is replaced by a
/// regular file (rename semantics); its target is not written.
pub fn atomic_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    atomic_replace_if(path, bytes, || true).map(drop)
}

/// [`atomic_replace`], but only if `unchanged()` still holds once the temp file is written and
/// synced, right before the rename; otherwise the temp file is removed, `path` is untouched and
/// the answer is `Ok(false)`. For a file that another writer replaces without a lock (the
/// runtime's `state.json`): a change it made while the new content was computed is then not
/// undone, except in the check-to-rename gap of a few microseconds.
pub fn atomic_replace_if(
    path: &Path,
    bytes: &[u8],
    unchanged: impl FnOnce() -> bool,
) -> io::Result<bool> {
    let (dir, name) = split(path)?;
    let keep_mode = regular_file_mode(path)?;
    let mut temp = write_temp(dir, name, bytes, keep_mode)?;
    if !unchanged() {
        return Ok(false);
    }
    fs::rename(temp.path(), path)?;
    temp.disarm();
    failpoint::hit("atomic.after-rename")?;
    fsync_dir(dir)?;
    Ok(true)
}

/// Durably creates `path` with `bytes`; fails with `AlreadyExists` if `path` exists (as anything,
/// including a dangling symlink), leaving it untouched.
///
/// Same temp-file discipline as [`atomic_replace`], but the final step is an exclusive rename
/// (`renameat2(RENAME_NOREPLACE)`; on a filesystem without it, `link` + unlink of the temp file),
/// so the file appears complete or not at all, and a concurrent or earlier file is never
/// overwritten. Used for tier archives: an archive path names one block's content, and an
/// existing file there belongs to someone else (the runtime, or a batch being rebuilt).
pub fn create_new_durable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (dir, name) = split(path)?;
    let mut temp = write_temp(dir, name, bytes, None)?;
    rename_noreplace(temp.path(), path)?;
    temp.disarm();
    failpoint::hit("atomic.after-rename")?;
    fsync_dir(dir)
}

/// fsyncs a directory, making the entries created, renamed or removed in it durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)?
        .sync_all()
}

/// Removes the file `path` and fsyncs its directory. A missing file is an error (`NotFound`).
pub fn remove_durable(path: &Path) -> io::Result<()> {
    let (dir, _) = split(path)?;
    fs::remove_file(path)?;
    fsync_dir(dir)
}

/// Creates `path` and any missing ancestors, fsyncing the parent of each directory it creates,
/// so the new directories survive a crash. Existing directories (or symlinks to them) are fine.
pub fn create_dir_all_durable(path: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut cur = path;
    loop {
        match fs::metadata(cur) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a directory", cur.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(cur);
                match cur.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => cur = parent,
                    _ => break,
                }
            }
            Err(e) => return Err(e),
        }
    }
    for dir in missing.into_iter().rev() {
        match fs::create_dir(dir) {
            Ok(()) => {}
            // Lost a race with another creator: fine if it made a directory.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e),
        }
        fsync_dir(parent_dir(dir))?;
    }
    Ok(())
}

/// True for the name of a temp file left by a durable write: normafs's `.<name>.tmp-<hex>`,
/// or the runtime's `.noa-*.tmp` (archives) and `.noa-state-*.tmp` (state).
pub fn is_temp_name(name: &str) -> bool {
    temp_target_name(name).is_some() || is_runtime_temp(name)
}

/// The runtime's temp files: `.noa-<random>.tmp`, `.noa-state-<random>.tmp`.
pub fn is_runtime_temp(name: &str) -> bool {
    name.len() > ".noa-.tmp".len() && name.starts_with(".noa-") && name.ends_with(".tmp")
}

/// For a temp file name `.<name>.tmp-<hex>`, the `<name>` it was going to replace.
///
/// `<hex>` is accepted at any non-zero length and in either case, so temp files of other
/// versions are still recognised; the last `.tmp-` in the name is the separator.
pub fn temp_target_name(name: &str) -> Option<&str> {
    let rest = name.strip_prefix('.')?;
    let (target, hex) = rest.rsplit_once(".tmp-")?;
    let valid = !target.is_empty() && !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then_some(target)
}

/// A path's directory and file name; a bare file name lives in `.`.
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} does not name a file", path.display()),
        )
    })?;
    Ok((parent_dir(path), name))
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Permission bits of `path` when it is a regular file (not following a symlink).
fn regular_file_mode(path: &Path) -> io::Result<Option<u32>> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_file() => Ok(Some(meta.permissions().mode() & 0o777)),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to a fresh temp file beside `dir/name` and fsyncs it. The returned guard
/// removes the file on drop unless disarmed.
fn write_temp(dir: &Path, name: &OsStr, bytes: &[u8], mode: Option<u32>) -> io::Result<TempFile> {
    let path = dir.join(temp_name(name));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)?;
    let guard = TempFile { path, armed: true };
    file.write_all(bytes)?;
    failpoint::hit("atomic.after-temp-write")?;
    if let Some(mode) = mode {
        file.set_permissions(fs::Permissions::from_mode(mode))?;
    }
    file.sync_all()?;
    failpoint::hit("atomic.before-rename")?;
    Ok(guard)
}

fn temp_name(name: &OsStr) -> OsString {
    let random = uuid::Uuid::new_v4().simple().to_string();
    let hex = random.get(..16).unwrap_or(&random);
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(".tmp-");
    temp.push(hex);
    temp
}

/// A temp file that is removed when dropped, unless [`TempFile::disarm`]ed after the rename.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl TempFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            // Best effort: the target is untouched either way, and a leftover temp file is
            // recognised by `is_temp_name` and cleared by recovery.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Renames `from` to `to`, failing with `AlreadyExists` if `to` exists. On success `from` no
/// longer exists.
#[cfg(target_os = "linux")]
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_from = std::ffi::CString::new(from.as_os_str().as_bytes())?;
    let c_to = std::ffi::CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            c_from.as_ptr(),
            libc::AT_FDCWD,
            c_to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // The filesystem (or kernel) does not support the flag.
        Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => {
            link_then_unlink(from, to)
        }
        _ => Err(err),
    }
}

#[cfg(not(target_os = "linux"))]
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    link_then_unlink(from, to)
}

/// `link` fails atomically when `to` exists; the temp name is then dropped. If that unlink fails
/// the target is still complete and the temp file is recognisable debris, so it is not an error.
fn link_then_unlink(from: &Path, to: &Path) -> io::Result<()> {
    fs::hard_link(from, to)?;
    let _ = fs::remove_file(from);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_round_trip() {
        let temp = temp_name(OsStr::new("state.json"));
        let temp = temp.to_str().unwrap_or_default();
        assert!(temp.starts_with(".state.json.tmp-"));
        assert_eq!(temp.len(), ".state.json.tmp-".len() + 16);
        assert_eq!(temp_target_name(temp), Some("state.json"));
    }

    #[test]
    fn temp_name_recognition() {
        assert_eq!(temp_target_name(".a.md.tmp-00ff"), Some("a.md"));
        assert_eq!(temp_target_name(".x.tmp-1.tmp-ab"), Some("x.tmp-1"));
        assert!(!is_temp_name("a.md.tmp-00ff"));
        assert!(!is_temp_name(".a.md.tmp-"));
        assert!(!is_temp_name(".a.md.tmp-xyz"));
        assert!(!is_temp_name("..tmp-ab"));
        assert!(!is_temp_name(".normafs.lock"));
    }
}
