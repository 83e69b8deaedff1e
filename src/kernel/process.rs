//! Processes: lifeguard's own attributes (pid, subreaper, parent-death signal), spawning
//! the app with what it inherited, reaping, and sending signals.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use super::limits::{descriptor_limit, INHERITED_NOFILE};
use super::signal_inbox::{bit, inherited_signal_state, kernel_mask, set_disposition};
use super::terminal::{take_terminal_in_child, AppTerminal};
use crate::signal_names::{self, Signal};

/// Orphans of the app's descendants are re-parented to lifeguard instead of to the real
/// init, so it can reap them and kill them at the deadline (prctl(2),
/// PR_SET_CHILD_SUBREAPER).
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// tini `-p`: the kernel sends `signal` to lifeguard when its parent dies.
pub fn set_parent_death_signal(signal: Signal) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number as an unsigned long; no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal.0 as libc::c_ulong, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

// ---------------------------------------------------------------------------------------
// The app.

/// Starts COMMAND in a session and process group of its own, with the signal mask and
/// ignored set lifeguard inherited, and none of lifeguard's descriptors (all are opened
/// close-on-exec). With a terminal on stdin its group becomes the foreground one, as
/// `terminal` says.
///
/// The returned `Child` handle is dropped on purpose: lifeguard's reaper is the only
/// code that waits.
pub fn spawn_app(command: &[OsString], terminal: AppTerminal) -> io::Result<i32> {
    let (mask_bits, ignored_bits) = inherited_signal_state();
    // Dispositions put back as inherited, worked out without asking the kernel about
    // all 64 signals: exec itself turns every handler into SIG_DFL and keeps what is
    // ignored, so only two kinds differ from what lifeguard inherited — what it ignores
    // that was not ignored (SIGPIPE: Rust's start-up ignores it), and what was ignored
    // but no longer is (SIGCHLD, which lifeguard must hear; a signal the runtime gave a
    // handler, e.g. SIGSEGV's stack-overflow guard). Computed before the fork: the
    // child only makes system calls.
    let mut restore: Vec<(i32, libc::sighandler_t)> = (1..=signal_names::MAX)
        .filter(|&n| n != libc::SIGKILL && n != libc::SIGSTOP && ignored_bits & bit(n) != 0)
        .map(|n| (n, libc::SIG_IGN))
        .collect();
    if ignored_bits & bit(libc::SIGPIPE) == 0 {
        restore.push((libc::SIGPIPE, libc::SIG_DFL));
    }
    let nofile = INHERITED_NOFILE.get().copied();
    let closed: Vec<i32> = super::stdio::closed_at_start().collect();
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: the closure runs between fork and exec in the child, where only
    // async-signal-safe calls are allowed: setsid, setpgid, tcsetpgrp, ioctl (in
    // take_terminal_in_child), close and raw system calls are, and it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            take_terminal_in_child(terminal)?;
            for &(n, handler) in &restore {
                set_disposition(n, handler);
            }
            if let Some(limit) = &nofile {
                descriptor_limit(Some(limit))?;
            }
            // Closed when lifeguard started: closed for the app too.
            for &fd in &closed {
                libc::close(fd);
            }
            // Last: from here on the app's own mask applies.
            kernel_mask(libc::SIG_SETMASK, mask_bits)?;
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    Ok(child.id() as i32)
}

// ---------------------------------------------------------------------------------------
// Reaping and killing.

pub enum Reaped {
    Child {
        pid: i32,
        /// The raw wait status (lifecycle::AppStatus::from_wait decodes it).
        status: libc::c_int,
    },
    /// Children exist but none has exited.
    NoneExited,
    /// ECHILD: lifeguard has no children at all.
    NoChildren,
}

/// One `waitpid(-1, WNOHANG)`; the status stays raw (nix's `WaitStatus` cannot represent
/// a death by a real-time signal).
pub fn reap_one() -> Reaped {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            return Reaped::Child { pid, status };
        }
        if pid == 0 {
            return Reaped::NoneExited;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            _ => return Reaped::NoChildren,
        }
    }
}

/// Whether lifeguard has any child at all, exited or not (nothing is collected).
/// Everything lifeguard answers for is a child or below one (orphans are re-parented to
/// it), so without children there is nothing to look for.
pub fn has_children() -> bool {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    !matches!(
        waitid(
            Id::All,
            WaitPidFlag::WEXITED
                | WaitPidFlag::WSTOPPED
                | WaitPidFlag::WNOHANG
                | WaitPidFlag::WNOWAIT
        ),
        Err(nix::errno::Errno::ECHILD)
    )
}

/// If the app (a direct child) has stopped since last asked, by which signal. Only the
/// stop is collected (waitid with WSTOPPED alone): an exit stays for `reap_one`.
pub fn app_stopped(app: i32) -> Option<Signal> {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    match waitid(
        Id::Pid(nix::unistd::Pid::from_raw(app)),
        WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG,
    ) {
        Ok(WaitStatus::Stopped(_, signal)) => Some(Signal(signal as i32)),
        _ => None,
    }
}
