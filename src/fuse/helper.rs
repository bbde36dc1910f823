//! Mounting through `fusermount3`, the setuid program of the fuse3 package that mounts FUSE
//! for an ordinary user: it opens `/dev/fuse`, calls mount(2) with the checks its
//! `/etc/fuse.conf` allows, and sends the device descriptor back over a socket whose number
//! it finds in `_FUSE_COMMFD`. Unmounting goes back through it (`fusermount3 -u`).

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The helper to use: `$FUSERMOUNT_PATH` when set, else `fusermount3` (then the fuse 2
/// `fusermount`) found on `PATH` or in `/bin`, `/usr/bin`.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FUSERMOUNT_PATH").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/bin", "/usr/bin"].map(PathBuf::from));
    for name in ["fusermount3", "fusermount"] {
        if let Some(p) = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file()) {
            return Some(p);
        }
    }
    None
}

/// Under `auto_unmount` the helper stays after mounting, holding the other end of our socket:
/// when this process ends (even by `kill -9`) the socket closes and the helper unmounts.
/// Dropping the keeper closes the socket and waits for the helper.
#[derive(Default)]
pub struct Keeper(Option<(Child, UnixStream)>);

impl Keeper {
    /// Whether a helper will unmount when this process ends.
    pub fn auto_unmount(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if let Some((mut child, sock)) = self.0.take() {
            drop(sock);
            let _ = child.wait();
        }
    }
}

/// Have `helper` mount FUSE at `mnt` with the comma-separated `options`: the mount's
/// `/dev/fuse` descriptor, and the helper when `auto_unmount` is among them.
pub fn mount(helper: &Path, mnt: &Path, options: &str) -> io::Result<(OwnedFd, Keeper)> {
    let (ours, theirs) = UnixStream::pair()?;
    let fd: RawFd = theirs.as_raw_fd();
    let mut cmd = Command::new(helper);
    cmd.arg("-o")
        .arg(options)
        .arg("--")
        .arg(mnt)
        .env("_FUSE_COMMFD", fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec only fcntl(2) runs, which is async-signal-safe; it lets
    // the helper inherit its end of the socket.
    unsafe {
        cmd.pre_exec(move || {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let name = helper.file_name().map_or_else(
        || helper.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut child = cmd
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {}: {e}", helper.display())))?;
    drop(theirs);
    match receive_fd(&ours) {
        Ok(dev) if options.split(',').any(|o| o == "auto_unmount") => {
            let ours = last_to_close(ours);
            // The helper keeps running; what it says later goes to the log.
            if let Some(mut err) = child.stderr.take() {
                let _ = std::thread::Builder::new()
                    .name("normafs-fusermount".into())
                    .spawn(move || {
                        let mut s = String::new();
                        let _ = err.read_to_string(&mut s);
                        for l in s.lines().filter(|l| !l.trim().is_empty()) {
                            tracing::info!("{name}: {l}");
                        }
                    });
            }
            Ok((dev, Keeper(Some((child, ours)))))
        }
        Ok(dev) => {
            let _ = child.wait();
            Ok((dev, Keeper(None)))
        }
        Err(e) => {
            drop(ours);
            let out = child.wait_with_output()?;
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.lines().map(str::trim).find(|l| !l.is_empty());
            Err(io::Error::other(match said {
                Some(l) => l.to_string(),
                None => format!("{name} did not mount ({e}; {})", out.status),
            }))
        }
    }
}

/// Have `helper` unmount `mnt`; `lazy` detaches a busy mount (`-z`).
pub fn unmount(helper: &Path, mnt: &Path, lazy: bool) -> io::Result<()> {
    let mut cmd = Command::new(helper);
    cmd.arg("-u").arg("-q");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg("--")
        .arg(mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    Err(io::Error::other(
        said.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map_or_else(
                || format!("{} -u failed ({})", helper.display(), out.status),
                str::to_string,
            ),
    ))
}

/// `sock` moved to a high descriptor number. A process's descriptors are closed in order
/// when it ends, and the helper looks at the mount as soon as this socket closes: the FUSE
/// descriptors must be closed by then, or the mount does not yet look dead to it.
fn last_to_close(sock: UnixStream) -> UnixStream {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(4096) as libc::c_int
    } else {
        1024
    };
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor, owned below; the old one is dropped.
    let fd = unsafe { libc::fcntl(sock.as_raw_fd(), libc::F_DUPFD_CLOEXEC, (top - 64).max(3)) };
    if fd < 0 {
        return sock;
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    unsafe { UnixStream::from_raw_fd(fd) }
}

/// The descriptor sent with `SCM_RIGHTS` over `sock` (one byte of data beside it).
fn receive_fd(sock: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // Room for one control message carrying one descriptor (aligned for cmsghdr).
    let mut space = [0u64; 8];
    // SAFETY: an all-zero msghdr is a valid empty one; its pointers are set below to buffers
    // that outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as _;
    let n = loop {
        // SAFETY: msg points at live buffers of the sizes it states.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the helper closed the socket",
        ));
    }
    // SAFETY: msg was filled by recvmsg; CMSG_FIRSTHDR returns null or a header inside it.
    let c = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    // SAFETY: c is non-null and points inside `space`; for SCM_RIGHTS its data is a RawFd.
    unsafe {
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the helper sent no descriptor",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
        if fd < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the helper sent a bad descriptor",
            ));
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
