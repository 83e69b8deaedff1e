//! lifeguard's standard descriptors: parked on /dev/null when closed, and a way to write
//! to stderr that never waits for a reader.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};

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

/// If a standard descriptor is closed, park /dev/null (close-on-exec) on it: otherwise
/// the first descriptor lifeguard opens would land there and its logs would be written
/// into, say, the signalfd. The app still sees the descriptor closed.
pub fn guard_standard_descriptors() {
    for fd in 0..=2 {
        if nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_err() {
            let opened = nix::fcntl::open(
                "/dev/null",
                nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            );
            // open() returns the lowest free number, which is `fd` itself here.
            if opened.is_err() {
                break;
            }
        }
    }
}
