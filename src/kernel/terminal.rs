//! The terminal on stdin: handing it to the app, taking it back, and following a Ctrl-Z
//! of the app's foreground group.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

use super::kill::{own_pid, send};
use super::signal_inbox::SignalInbox;
use crate::signal_names::{self, Signal};

/// How the app gets the terminal on stdin, if there is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppTerminal {
    /// stdin is not a terminal: nothing to hand over.
    None,
    /// The app's new session takes stdin's terminal as its controlling terminal
    /// (lifeguard led the terminal's session and let go of it, or the terminal was
    /// nobody's).
    OwnSession,
    /// lifeguard is a member, not the leader, of the terminal's session, in its
    /// foreground group (started from an interactive shell, or by `script -c`): a new
    /// session could not take the terminal, which stays its leader's. The app gets a
    /// process group of its own in lifeguard's session instead and becomes the
    /// foreground group, as under tini. lifeguard's own group gets the terminal back
    /// when lifeguard is done, so the shell that started it can read from it again. A
    /// lifeguard in the background (`lifeguard ... &`) takes nothing.
    ForegroundGroup,
}

/// Decides how the app gets stdin's terminal, letting go of it first where lifeguard
/// leads its session so that the app's new session can take it (job control in the app).
pub fn release_terminal(inbox: &SignalInbox) -> AppTerminal {
    let stdin = io::stdin().as_raw_fd();
    if !nix::unistd::isatty(stdin).unwrap_or(false) {
        return AppTerminal::None;
    }
    let own_session = nix::unistd::getsid(None).ok();
    let leader = own_session == Some(nix::unistd::getpid());
    let terminal_session = nix::sys::termios::tcgetsid(io::stdin()).ok();
    let in_foreground = nix::unistd::tcgetpgrp(io::stdin()).ok() == Some(nix::unistd::getpgrp());
    if terminal_session.is_some() && terminal_session == own_session && !leader && in_foreground {
        return AppTerminal::ForegroundGroup;
    }
    // SAFETY: TIOCNOTTY takes no argument; it fails harmlessly if stdin is not our
    // controlling terminal.
    let detached = unsafe { libc::ioctl(stdin, libc::TIOCNOTTY) } == 0;
    if detached && leader {
        // A session leader giving up its terminal makes the kernel send SIGHUP and
        // SIGCONT to the foreground group, i.e. to lifeguard itself.
        inbox.discard(&[signal_names::HUP, signal_names::CONT]);
    }
    AppTerminal::OwnSession
}

/// Gives the terminal's foreground back to lifeguard's own group, which had it before
/// the app took it (`ForegroundGroup` only: in the other cases lifeguard's session no
/// longer has the terminal). Without this a non-interactive shell that ran lifeguard
/// would be left in the background, stopped by SIGTTIN at its next read. Failure
/// changes nothing else.
pub fn restore_terminal(terminal: AppTerminal) {
    if terminal == AppTerminal::ForegroundGroup {
        // lifeguard, now in the background, blocks SIGTTOU, so tcsetpgrp is allowed.
        let _ = nix::unistd::tcsetpgrp(io::stdin(), nix::unistd::getpgrp());
    }
}

/// With the terminal handed to the app as a foreground group, a Ctrl-Z at the terminal
/// stops the app but not lifeguard (it is not in that group), and the shell that runs
/// lifeguard would wait for it forever. Call when the app was stopped that way: lifeguard
/// takes the terminal back for its own group and stops itself, so the shell sees its job
/// stopped. On `fg` the shell gives lifeguard's group the terminal and continues it;
/// lifeguard then hands the terminal on to the app again and continues the app's group.
/// (dumb-init likewise stops itself on TSTP.) For `AppTerminal::ForegroundGroup` only.
pub fn stop_with_app(app_group: i32) {
    let stdin = io::stdin();
    let own_group = nix::unistd::getpgrp();
    // lifeguard blocks SIGTTOU, so these are allowed from the background.
    let _ = nix::unistd::tcsetpgrp(&stdin, own_group);
    // SIGSTOP cannot be blocked: lifeguard stops here, and this returns once continued.
    let _ = send(own_pid(), Signal(libc::SIGSTOP));
    // After `bg` lifeguard's group is not the foreground one: then the terminal stays
    // the shell's.
    if nix::unistd::tcgetpgrp(&stdin).ok() == Some(own_group) {
        let _ = nix::unistd::tcsetpgrp(&stdin, nix::unistd::Pid::from_raw(app_group));
    }
    let _ = send(-app_group, Signal(libc::SIGCONT));
}

/// In the app's child process, between fork and exec: its own session (or, with
/// `ForegroundGroup`, its own group in lifeguard's session, made the terminal's
/// foreground group), and the terminal as its controlling one where it may have it.
/// Async-signal-safe system calls only, no allocation.
pub(super) fn take_terminal_in_child(terminal: AppTerminal) -> io::Result<()> {
    // SAFETY: setpgid, getpid, tcsetpgrp, setsid and ioctl(TIOCSCTTY) take integers
    // only, and are async-signal-safe (the caller is the child between fork and exec).
    unsafe {
        if terminal == AppTerminal::ForegroundGroup {
            if libc::setpgid(0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            // A background group calling tcsetpgrp gets SIGTTOU unless it is blocked
            // (tcsetpgrp(3)); every signal still is, until the last step. Failure only
            // costs job control; the app still runs.
            libc::tcsetpgrp(0, libc::getpid());
        } else {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if terminal == AppTerminal::OwnSession {
                // Failure only costs job control; the app still runs (as dumb-init).
                libc::ioctl(0, libc::TIOCSCTTY, 0);
            }
        }
    }
    Ok(())
}
