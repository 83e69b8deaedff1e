//! lifeguard's standard descriptors: which were closed at its start (std parks /dev/null
//! on them; the app gets them closed again), and a way to write to stderr that never
//! waits for a reader.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU8, Ordering};

/// A way to write lifeguard's log lines to stderr that never waits for a reader, so no
/// writer thread is needed: stderr is shared with the app, so its own file
/// description must not change.
pub enum QuickStderr {
    /// A pipe, FIFO or terminal: a description of lifeguard's own, opened again
    /// through /proc/self/fd/2 with O_NONBLOCK (the app's stays blocking).
    Reopened(OwnedFd),
    /// A socket (journald's stream, say): every send with MSG_DONTWAIT.
    Socket,
    /// A regular file or a device such as /dev/null: a write never waits for a reader.
    Plain,
}

impl QuickStderr {
    /// None when stderr is a pipe or terminal that cannot be opened again (no /proc,
    /// or nobody reading it any more): then only a thread can write without stalling
    /// supervision.
    pub fn open() -> Option<QuickStderr> {
        use nix::sys::stat::{fstat, SFlag};
        let mode = SFlag::from_bits_truncate(fstat(2).ok()?.st_mode) & SFlag::S_IFMT;
        let terminal = nix::unistd::isatty(2).unwrap_or(false);
        if mode == SFlag::S_IFSOCK {
            return Some(QuickStderr::Socket);
        }
        if mode == SFlag::S_IFIFO || terminal {
            use nix::fcntl::OFlag;
            let flags = OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
            let fd =
                nix::fcntl::open("/proc/self/fd/2", flags, nix::sys::stat::Mode::empty()).ok()?;
            // SAFETY: a fresh descriptor that nothing else owns.
            return Some(QuickStderr::Reopened(unsafe { OwnedFd::from_raw_fd(fd) }));
        }
        Some(QuickStderr::Plain)
    }

    /// One write that does not wait: WouldBlock when the reader is behind.
    pub fn write(&self, bytes: &[u8]) -> io::Result<usize> {
        use nix::sys::socket::{send, MsgFlags};
        let written = match self {
            QuickStderr::Reopened(fd) => nix::unistd::write(fd, bytes),
            QuickStderr::Socket => send(2, bytes, MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL),
            QuickStderr::Plain => nix::unistd::write(io::stderr(), bytes),
        };
        written.map_err(io::Error::from)
    }
}

/// All of `bytes` to `fd` with write(2), one call unless the kernel takes part (a pipe
/// takes up to PIPE_BUF whole), again after EINTR. Straight on the descriptor, not
/// through std's stdout or stderr lock: a thread stuck in a write to a stalled reader
/// would hold that lock, and a helper forked meanwhile would inherit it held, for good.
pub fn write_whole(fd: BorrowedFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => bytes = &bytes[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Bit N set: standard descriptor N (0, 1, 2) was closed when lifeguard was exec'd.
static CLOSED_AT_START: AtomicU8 = AtomicU8::new(0);

/// Run from the ELF constructor (signal_inbox.rs), before Rust's runtime start-up: std
/// parks /dev/null on a closed standard descriptor before `main` (so that the first file
/// it opens cannot land there and a log line go into it), and only this early can
/// lifeguard still see which were closed, to keep them closed for the app.
pub(super) fn capture_closed_standard_fds() {
    let mut closed = 0u8;
    for fd in 0..=2 {
        // SAFETY: F_GETFD takes no pointer; EBADF says the descriptor is not open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            closed |= 1 << fd;
        }
    }
    CLOSED_AT_START.store(closed, Ordering::Relaxed);
}

/// The standard descriptors closed when lifeguard started (std's /dev/null stands on
/// them now), for the app's start to close again: it sees them as lifeguard's parent
/// left them, as under tini.
pub(super) fn closed_at_start() -> impl Iterator<Item = i32> {
    let closed = CLOSED_AT_START.load(Ordering::Relaxed);
    (0..=2).filter(move |fd| closed & (1 << fd) != 0)
}
