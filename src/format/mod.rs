//! Lossless on-disk models of the runtime's files (SPEC 2), with tolerant loaders.
//!
//! Backing files are read without following symbolic links ([`read_no_follow`],
//! [`read_under`]): a link inside the root could lead anywhere, and nothing outside the three
//! backing directories may be read (SPEC 5).

use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub mod archive;
pub mod cold;
pub mod gojson;
pub mod loader;
pub mod memory;
pub mod short;
pub mod state;
pub mod transcript;

/// The error for a symbolic link that is not followed.
fn link_error(what: &Path) -> io::Error {
    io::Error::other(format!(
        "{} is a symbolic link (not followed)",
        what.display()
    ))
}

/// Open a file for reading with `O_NOFOLLOW` and `extra` open flags; a symbolic link at the
/// last component is the [`link_error`].
fn open_no_follow(path: &Path, extra: libc::c_int) -> io::Result<fs::File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | extra)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                link_error(path.file_name().map_or(path, Path::new))
            } else {
                e
            }
        })
}

/// Read a file, refusing a symbolic link at its last component (`O_NOFOLLOW`).
pub fn read_no_follow(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = open_no_follow(path, 0)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Read a regular file and its metadata (taken from the open file, so both describe the same
/// file), refusing a symbolic link at its last component and anything that is not a regular
/// file. `O_NONBLOCK` keeps a FIFO swapped in after a listing from blocking the open.
pub fn read_regular_no_follow(path: &Path) -> io::Result<(Vec<u8>, fs::Metadata)> {
    let mut file = open_no_follow(path, libc::O_NONBLOCK)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.file_name().map_or(path, Path::new).display()
        )));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok((bytes, meta))
}

/// Fails when a component of `rel` under `base` (the last one included) is a symbolic link;
/// the error names `rel` up to that component. Stops quietly at the first missing component.
pub fn check_no_links(base: &Path, rel: &Path) -> io::Result<()> {
    let mut sub = PathBuf::new();
    for c in rel.components() {
        sub.push(c);
        match fs::symlink_metadata(base.join(&sub)) {
            Ok(m) if m.file_type().is_symlink() => return Err(link_error(&sub)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Read `base/rel` when no component of `rel` is a symbolic link (`base` itself is trusted).
pub fn read_under(base: &Path, rel: &Path) -> io::Result<Vec<u8>> {
    check_no_links(base, rel)?;
    read_no_follow(&base.join(rel))
}
