//! Filesystem errors by POSIX meaning, mapped to errno in one place.

use std::io;

use crate::store::txn::TxnError;

/// Why a filesystem operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("permission denied")]
    Access,
    #[error("operation not permitted")]
    Perm,
    #[error("read-only mount")]
    ReadOnly,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("busy: {0}")]
    Busy(String),
    #[error("I/O error: {0}")]
    Io(String),
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("file exists")]
    Exists,
    #[error("directory not empty")]
    NotEmpty,
    #[error("bad file handle")]
    BadHandle,
    #[error("name too long")]
    NameTooLong,
    #[error("too many symbolic links")]
    Loop,
    #[error("cross-device link")]
    CrossDevice,
    #[error("operation not supported")]
    NotSupported,
    /// The inode names a file that was replaced since (renamed over): the kernel looks the
    /// name up again (an `open` answered ESTALE is retried with a fresh lookup).
    #[error("stale file handle")]
    Stale,
    /// Any other errno from the backing filesystem.
    #[error("errno {0}")]
    Os(i32),
}

impl FsError {
    /// The errno answered to the kernel.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Access => libc::EACCES,
            FsError::Perm => libc::EPERM,
            FsError::ReadOnly => libc::EROFS,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::Busy(_) => libc::EBUSY,
            FsError::Io(_) => libc::EIO,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::Exists => libc::EEXIST,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::BadHandle => libc::EBADF,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::Loop => libc::ELOOP,
            FsError::CrossDevice => libc::EXDEV,
            FsError::NotSupported => libc::EOPNOTSUPP,
            FsError::Stale => libc::ESTALE,
            FsError::Os(e) => *e,
        }
    }

    /// The level a failed request is logged at: expected answers (a name not there) at
    /// debug, the backing filesystem's failures at warn, the rest (a refused request) at info.
    pub fn level(&self) -> tracing::Level {
        match self {
            FsError::NotFound | FsError::Exists | FsError::NotEmpty => tracing::Level::DEBUG,
            FsError::Io(_) | FsError::Os(_) | FsError::BadHandle => tracing::Level::WARN,
            _ => tracing::Level::INFO,
        }
    }
}

/// A failed ctl command as the write that ran it fails: `EINVAL`, `EBUSY` (the lock held, or
/// the session live), `EIO`, `EROFS`; its message is the command's.
impl From<&TxnError> for FsError {
    fn from(e: &TxnError) -> FsError {
        let message = e.to_string();
        match e {
            TxnError::Invalid(_) => FsError::Invalid(message),
            TxnError::Busy(_) | TxnError::Live(_) => FsError::Busy(message),
            TxnError::Io(_) => FsError::Io(message),
            TxnError::ReadOnly => FsError::ReadOnly,
        }
    }
}

impl From<io::Error> for FsError {
    fn from(e: io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::ENOENT) => FsError::NotFound,
            Some(libc::EACCES) => FsError::Access,
            Some(libc::EPERM) => FsError::Perm,
            Some(libc::EROFS) => FsError::ReadOnly,
            Some(libc::ENOTDIR) => FsError::NotDir,
            Some(libc::EISDIR) => FsError::IsDir,
            Some(libc::EEXIST) => FsError::Exists,
            Some(libc::ENOTEMPTY) => FsError::NotEmpty,
            Some(libc::ELOOP) => FsError::Loop,
            Some(libc::EXDEV) => FsError::CrossDevice,
            Some(libc::EINVAL) => FsError::Invalid(e.to_string()),
            Some(n) => FsError::Os(n),
            None => FsError::Io(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FsError;
    use crate::store::txn::TxnError;

    #[test]
    fn a_failed_ctl_command_fails_its_write_with_the_errno_of_its_kind() {
        for (e, errno) in [
            (TxnError::Invalid("bad".into()), libc::EINVAL),
            (TxnError::Busy("s1".into()), libc::EBUSY),
            (TxnError::Live("live".into()), libc::EBUSY),
            (TxnError::Io("disk".into()), libc::EIO),
            (TxnError::ReadOnly, libc::EROFS),
        ] {
            assert_eq!(FsError::from(&e).errno(), errno, "{e:?}");
        }
        assert_eq!(
            FsError::from(&TxnError::Live("it looks live".into())),
            FsError::Busy("it looks live".into())
        );
    }

    #[test]
    fn failures_of_the_backing_files_are_logged_louder_than_refusals() {
        use tracing::Level;
        assert_eq!(FsError::NotFound.level(), Level::DEBUG);
        assert_eq!(FsError::Access.level(), Level::INFO);
        assert_eq!(FsError::ReadOnly.level(), Level::INFO);
        assert_eq!(FsError::Io("x".into()).level(), Level::WARN);
        assert_eq!(FsError::Os(libc::ENOSPC).level(), Level::WARN);
    }
}
