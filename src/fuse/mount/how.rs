//! How to mount: the mount(2) and umount(2) calls or `fusermount3`, the checks of the device
//! and the mountpoint, and the advice for a mount that is gone.

use super::*;

pub(super) fn c_path(p: &Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the mount point"))
}

/// As root: open `/dev/fuse` and mount it at `mnt` with mount(2), as type `fuse.normafs` —
/// the type `fusermount3`'s mounts get, which `/proc/mounts`, `findmnt -t fuse.normafs` and
/// `umount -t fuse.normafs` name — with the options fuser's own mount would give (the caller's
/// ids, `default_permissions`, `nosuid`, `nodev`, `noatime`; `noexec` and `allow_other` when
/// asked). The descriptor serves the session.
pub(super) fn mount_syscall(
    mnt: &Path,
    source: &str,
    no_exec: bool,
    allow_other: bool,
    read_only: bool,
) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")?;
    let mode = std::fs::metadata(mnt)?.mode() & libc::S_IFMT;
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={mode:o},user_id={uid},group_id={gid},default_permissions",
        dev.as_raw_fd()
    );
    if allow_other {
        data.push_str(",allow_other");
    }
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOATIME;
    if no_exec {
        flags |= libc::MS_NOEXEC;
    }
    if read_only {
        flags |= libc::MS_RDONLY;
    }
    let target = c_path(mnt)?;
    let data = std::ffi::CString::new(data).map_err(|_| io::Error::other("mount data"))?;
    let source = std::ffi::CString::new(source).map_err(|_| io::Error::other("mount source"))?;
    // SAFETY: valid C strings for the call's duration; `data` is the FUSE mount data string.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            c"fuse.normafs".as_ptr(),
            flags,
            data.as_ptr().cast(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(dev.into())
}

/// Unmount our mount(2) mount at `p` (already gone: nothing to do).
pub(super) fn unmount_syscall(p: &Path) -> io::Result<()> {
    let c = c_path(p)?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), 0) } < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Ok(())
}

pub(super) fn lazy_unmount(p: &Path) -> io::Result<()> {
    let c = c_path(p)?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Ok(())
}

/// Whether this process may mount FUSE itself (mount(2) needs CAP_SYS_ADMIN; as root we
/// have it).
pub(in crate::fuse) fn privileged() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// How to mount: mount(2) as root, else (or for `auto_unmount`) through `fusermount3`; the
/// second value is whether `/dev/fuse` opens for us (each worker's clone of the descriptor
/// opens it). Neither possible is one line naming the cause.
pub(super) fn how_to_mount(opts: &MountOptions) -> io::Result<(Option<PathBuf>, bool)> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop);
    if let Err(e) = &dev {
        if e.kind() == io::ErrorKind::NotFound {
            return Err(io::Error::new(
                e.kind(),
                "FUSE is not available: /dev/fuse does not exist (load the fuse kernel module: \
                 modprobe fuse; in a container, pass the device in)",
            ));
        }
    }
    let opens = dev.is_ok();
    if privileged() && !opts.auto_unmount {
        return match dev {
            Ok(()) => Ok((None, true)),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("FUSE is not available: cannot open /dev/fuse ({e})"),
            )),
        };
    }
    if let Some(bin) = helper::find() {
        if opts.auto_unmount && !opts.allow_other && !privileged() && !user_allow_other() {
            // fusermount3 looks at the mount as root to see that it is dead; the kernel lets
            // root into an ordinary user's mount only with allow_other.
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "-o auto_unmount: for an ordinary user's mount fusermount3 needs the line \
                 `user_allow_other` in /etc/fuse.conf (it checks the dead mount as root); an \
                 administrator adds it, or mount without auto_unmount",
            ));
        }
        if opts.allow_other && !privileged() && !user_allow_other() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "-o allow_other: /etc/fuse.conf does not have the line `user_allow_other`, which \
                 lets ordinary users open their mounts to others (an administrator adds it; or \
                 mount without allow_other)",
            ));
        }
        return Ok((Some(bin), opens));
    }
    let why = if opts.auto_unmount {
        "-o auto_unmount needs fusermount3".to_string()
    } else {
        match dev {
            Ok(()) => "an ordinary user cannot call mount(2) (it needs CAP_SYS_ADMIN)".to_string(),
            Err(e) => format!("cannot open /dev/fuse ({e})"),
        }
    };
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "cannot mount: {why}, and fusermount3, which mounts FUSE for ordinary users, is not \
             installed (Debian/Ubuntu: apt install fuse3; or set FUSERMOUNT_PATH)"
        ),
    ))
}

/// The helper could not open `/dev/fuse` (it opens it as the user): say the device's mode,
/// which is the cause on machines that keep it 0600.
pub(super) fn explain_device(e: io::Error, dev_opens: bool) -> io::Error {
    use std::os::unix::fs::PermissionsExt;
    if dev_opens || !e.to_string().contains("/dev/fuse") {
        return e;
    }
    let mode = std::fs::metadata("/dev/fuse").map_or(0, |m| m.permissions().mode() & 0o777);
    io::Error::new(
        e.kind(),
        format!(
            "{e} (/dev/fuse is mode {mode:04o} here; ordinary users need 0666, its usual mode: \
             an administrator runs `chmod 0666 /dev/fuse` or adds a udev rule)"
        ),
    )
}

/// `/etc/fuse.conf` has `user_allow_other`.
pub(super) fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf").is_ok_and(|t| {
        t.lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .any(|l| l == "user_allow_other")
    })
}

/// What to say of a mount point whose FUSE daemon is gone: the command that clears it.
pub(super) fn dead_mount_advice(mnt: &Path) -> String {
    let m = mnt.display();
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let cmd = if root {
        format!("umount -l '{m}'")
    } else {
        format!("fusermount3 -u '{m}'")
    };
    format!("is a mount whose normafs process is gone (Transport endpoint is not connected): run `{cmd}`, then mount again")
}

/// What is mounted at `mnt` now, from `/proc/self/mountinfo`: the source and the type.
pub(super) fn mounted_at(mnt: &Path) -> Option<(String, String)> {
    let canon = mnt.canonicalize().ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // Fields: id parent dev root MOUNTPOINT opts [optional…] - TYPE SOURCE superopts; spaces
    // and the like in paths are octal escapes.
    let unescape = |f: &str| {
        let b = f.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let oct = b.get(i + 1..i + 4).and_then(|d| {
                std::str::from_utf8(d)
                    .ok()
                    .and_then(|d| u8::from_str_radix(d, 8).ok())
            });
            match (b[i], oct) {
                (b'\\', Some(c)) => {
                    out.push(c);
                    i += 4;
                }
                (c, _) => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let at = unescape(fields.get(4)?);
        if Path::new(&at) != canon {
            return None;
        }
        let dash = fields.iter().position(|f| *f == "-")?;
        Some((
            unescape(fields.get(dash + 2)?),
            fields.get(dash + 1)?.to_string(),
        ))
    })
}

/// The mount point exists, is an empty directory, and is not inside a backing directory.
pub(super) fn check_mountpoint(paths: &RootPaths, mnt: &Path) -> io::Result<PathBuf> {
    let bad = |kind: io::ErrorKind, what: &str| {
        io::Error::new(kind, format!("mount point {} {what}", mnt.display()))
    };
    let meta = std::fs::metadata(mnt).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => bad(e.kind(), "does not exist"),
        // A mount whose daemon died (kill -9, a crash): the kernel still holds it.
        _ if e.raw_os_error() == Some(libc::ENOTCONN) => bad(e.kind(), &dead_mount_advice(mnt)),
        _ => bad(e.kind(), &format!("cannot be used: {e}")),
    })?;
    if !meta.is_dir() {
        return Err(bad(io::ErrorKind::InvalidInput, "is not a directory"));
    }
    let mut rd = std::fs::read_dir(mnt).map_err(|e| match e.raw_os_error() {
        // A dead mount whose attributes the kernel still had.
        Some(libc::ENOTCONN) => bad(e.kind(), &dead_mount_advice(mnt)),
        _ => bad(e.kind(), &format!("cannot be read: {e}")),
    })?;
    if rd.next().is_some() {
        if let Some((source, kind)) = mounted_at(mnt) {
            // SAFETY: geteuid cannot fail.
            let root = unsafe { libc::geteuid() } == 0;
            let m = mnt.display();
            let cmd = if root {
                format!("umount '{m}'")
            } else {
                format!("fusermount3 -u '{m}'")
            };
            return Err(bad(
                io::ErrorKind::InvalidInput,
                &format!("is already a mount ({source}, type {kind}): `{cmd}` unmounts it"),
            ));
        }
        return Err(bad(io::ErrorKind::InvalidInput, "is not empty"));
    }
    let canon = mnt.canonicalize()?;
    for (label, dir) in [
        ("transcripts", &paths.transcripts),
        ("memory", &paths.memory),
        ("archives", &paths.archives),
    ] {
        if let Ok(d) = dir.canonicalize() {
            if canon.starts_with(&d) {
                return Err(bad(
                    io::ErrorKind::InvalidInput,
                    &format!("is inside the {label} directory {}", d.display()),
                ));
            }
        }
    }
    Ok(canon)
}
