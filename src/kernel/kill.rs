//! Who lifeguard is and sending signals: its own pid, and kill(2) with any signal
//! number. A leaf: every other part of the kernel module may use it.
#![allow(unsafe_code)]

use std::io;

use crate::signal_names::Signal;

/// lifeguard's pid: the supervisor's. Read once and kept, so the helper process,
/// forked after the first call, still sees its parent's (every caller of this one
/// means lifeguard as the app's parent: the walk of its descendants, `is_pid1`).
/// PID 1 calls it before the first fork (pid1::supervise).
pub fn own_pid() -> i32 {
    static PID: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *PID.get_or_init(|| std::process::id() as i32)
}

pub fn is_pid1() -> bool {
    own_pid() == 1
}

/// kill(2) with any signal number, real-time ones included; `target` < 0 is a group.
pub fn send(target: i32, signal: Signal) -> io::Result<()> {
    // SAFETY: kill takes two integers; lifeguard never passes 0 or -1 by accident: the
    // callers name a pid or -pgid (> 1), and `signal_everything_in_namespace` is explicit.
    let rc = unsafe { libc::kill(target, signal.0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// As PID 1, `kill(-1, signal)` reaches every other process of the PID namespace: the
/// kernel's own view, whatever /proc shows.
pub fn signal_everything_in_namespace(signal: Signal) {
    debug_assert!(is_pid1());
    // SAFETY: see `send`; -1 is meant here and only ever called as PID 1.
    unsafe {
        libc::kill(-1, signal.0);
    }
}
