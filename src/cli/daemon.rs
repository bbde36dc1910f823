//! `normafs mount --daemon`: the command returns once the mount is up (exit 0) or has failed
//! (the failure's line and exit status), and a process of its own serves the mount. The
//! serving process is this binary again, started without `--daemon` in a new session (no
//! terminal), its stdio on `/dev/null` or the log file; it reports through a pipe whose
//! number it finds in `NORMAFS_READY_FD`. (Starting a fresh process, rather than forking
//! this one, keeps the mount's threads out of a fork.)

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::CliError;

const READY_ENV: &str = "NORMAFS_READY_FD";

/// The pipe to the waiting `--daemon` command, when this process serves for one.
fn ready_pipe() -> &'static Mutex<Option<File>> {
    static PIPE: OnceLock<Mutex<Option<File>>> = OnceLock::new();
    PIPE.get_or_init(|| {
        let fd = std::env::var(READY_ENV)
            .ok()
            .and_then(|v| v.parse::<RawFd>().ok())
            .filter(|&fd| fd > 2 && valid_fd(fd));
        std::env::remove_var(READY_ENV);
        if let Some(fd) = fd {
            // Not for the programs we start (fusermount3 stays under auto_unmount: the
            // waiting command would never see the pipe close).
            // SAFETY: sets a flag on our own descriptor.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        // SAFETY: the descriptor was handed to us by the parent for this use only, and is
        // checked to be open; nothing else in this process owns it.
        Mutex::new(fd.map(|fd| File::from(unsafe { OwnedFd::from_raw_fd(fd) })))
    })
}

fn valid_fd(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only queries the descriptor's flags.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// This process serves a mount for a waiting `--daemon` command.
pub fn is_served() -> bool {
    ready_pipe().lock().is_some()
}

/// Tell the waiting command the mount is up (`line` is what it prints), and let it go.
pub fn ready(line: &str) {
    if let Some(mut f) = ready_pipe().lock().take() {
        let _ = write!(f, "ok\t{line}\0");
    }
}

/// Tell the waiting command the mount failed (its exit status and line).
pub fn failed(e: &CliError) {
    if let Some(mut f) = ready_pipe().lock().take() {
        let _ = write!(f, "err\t{}\t{}\0", e.code, e.message);
    }
}

/// Start the serving process with `args` (the command line without `--daemon`) and wait
/// until it says whether it mounted.
pub fn run(args: &[OsString], log_file: Option<&Path>) -> Result<i32, CliError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills two descriptors, which are owned below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(CliError::new(format!(
            "cannot start the daemon: pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: fresh descriptors from pipe2, owned once each.
    let (mut rd, wr) = unsafe {
        (
            File::from(OwnedFd::from_raw_fd(fds[0])),
            OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let stderr = match log_file {
        Some(p) => Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| {
                    CliError::new(format!("cannot open the log file {}: {e}", p.display()))
                })?,
        ),
        None => Stdio::null(),
    };
    let exe = std::env::current_exe()
        .map_err(|e| CliError::new(format!("cannot start the daemon: {e}")))?;
    let wfd = wr.as_raw_fd();
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env(READY_ENV, wfd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // SAFETY: between fork and exec only setsid(2) and fcntl(2) run, both async-signal-safe:
    // the server leaves the terminal's session and inherits its end of the pipe.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            let flags = libc::fcntl(wfd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(wfd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| CliError::new(format!("cannot start the daemon: {e}")))?;
    drop(wr);
    // One message, ended by NUL (or by the server's end).
    let mut said = Vec::new();
    let mut byte = [0u8; 1];
    while let Ok(1) = rd.read(&mut byte) {
        if byte[0] == 0 {
            break;
        }
        said.push(byte[0]);
    }
    let said = String::from_utf8_lossy(&said);
    let mut parts = said.splitn(3, '\t');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("ok"), Some(l), _) => {
            eprintln!("{l}");
            Ok(0)
        }
        (Some("err"), Some(code), Some(message)) => {
            let _ = child.wait();
            Err(CliError {
                message: message.to_string(),
                code: code.parse().unwrap_or(2),
            })
        }
        _ => {
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            Err(CliError::new(format!(
                "the mount process ended before mounting ({status}){}",
                log_file.map_or(String::new(), |p| format!("; see {}", p.display()))
            )))
        }
    }
}
