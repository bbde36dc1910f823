//! Filesystem errors by POSIX meaning, mapped to errno in one place.

use std::io;

use crate::store::ctl::CtlErrorKind;

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
            FsError::Os(e) => *e,
        }
    }

    /// A failed ctl command as the write that ran it fails: `EINVAL`, `EBUSY`, `EIO`, `EROFS`.
    pub fn of_ctl(kind: &CtlErrorKind, message: &str) -> FsError {
        match kind {
            CtlErrorKind::Invalid => FsError::Invalid(message.to_string()),
            CtlErrorKind::Busy => FsError::Busy(message.to_string()),
            CtlErrorKind::Io => FsError::Io(message.to_string()),
            CtlErrorKind::ReadOnly => FsError::ReadOnly,
        }
    }

    /// An expected error (logged at debug, not warn).
    pub fn is_expected(&self) -> bool {
        matches!(
            self,
            FsError::NotFound | FsError::Exists | FsError::NotEmpty
        )
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
    use crate::store::ctl::CtlErrorKind;

    #[test]
    fn a_failed_ctl_command_fails_its_write_with_the_errno_of_its_kind() {
        for (kind, errno) in [
            (CtlErrorKind::Invalid, libc::EINVAL),
            (CtlErrorKind::Busy, libc::EBUSY),
            (CtlErrorKind::Io, libc::EIO),
            (CtlErrorKind::ReadOnly, libc::EROFS),
        ] {
            assert_eq!(FsError::of_ctl(&kind, "why").errno(), errno, "{kind:?}");
        }
        assert_eq!(
            FsError::of_ctl(&CtlErrorKind::Busy, "live"),
            FsError::Busy("live".into())
        );
    }
}
