//! The foreground process's signals: SIGINT, SIGTERM and SIGHUP end a mount cleanly;
//! SIGUSR1 prints what the mount did so far (requests by kind, computations) to stderr.

use super::MountHandle;

fn exit_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialize and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        set
    }
}

/// Block SIGINT, SIGTERM, SIGHUP (and SIGUSR1) in this thread and every thread it starts later, so that
/// [`wait_for_exit`] receives them. Call before mounting.
pub fn block_exit_signals() {
    let set = exit_signals();
    // SAFETY: a valid set; changes only this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// Wait until an exit signal arrives (its number) or the mount ends by itself (`None`).
pub fn wait_for_exit(h: &MountHandle) -> Option<i32> {
    let set = exit_signals();
    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: 200_000_000,
    };
    loop {
        // SAFETY: valid set and timeout; no siginfo wanted.
        let s = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        if s == libc::SIGUSR1 {
            report_on(h, &mut std::io::stderr());
            continue;
        }
        if s > 0 {
            return Some(s);
        }
        if h.is_finished() {
            return None;
        }
    }
}

/// Write the mount's report line (see [`MountHandle::report`]) to `out`.
pub fn report_on(h: &MountHandle, out: &mut dyn std::io::Write) {
    let _ = writeln!(out, "{}", h.report());
}
