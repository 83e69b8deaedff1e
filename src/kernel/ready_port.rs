//! The ready port's sockets (`--ready-port`): bound by PID 1 before the app starts, and
//! listening exactly while the app is ready. A TCP probe of it is answered by the
//! kernel alone (the handshake needs no process to be scheduled), so it holds while the
//! app's threads use up the container's CPU quota and no server in it gets a turn.
//!
//! One socket is switched rather than a socket closed and opened again: `listen(2)`
//! opens it, `shutdown(SHUT_RD)` on a listening socket stops it listening at once (the
//! kernel's `inet_shutdown` disconnects a TCP_LISTEN socket: new connections are
//! refused with a reset, those still queued are reset too) and leaves it bound, its
//! port held (an explicit bind locks the port, `SOCK_BINDPORT_LOCK`), so it can listen
//! again. Both act on the socket, not the descriptor: the copy the helper process
//! holds to take connections off the queue cannot keep it open.
#![allow(unsafe_code)]

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::sys::socket::{
    bind, setsockopt, shutdown, socket, sockopt, AddressFamily, Shutdown, SockFlag, SockType,
    SockaddrStorage,
};

/// The accept queue asked of the kernel for each socket (it caps it at
/// `net.core.somaxconn`, 4096 by default since Linux 5.4, 128 before). The helper
/// process takes the probes' connections off the queue (helper/endpoint.rs); while no helper
/// runs — its longest restart pause is 30 s, and a hung one is noticed after 10 s — they
/// wait there, and a full queue would drop the next probes' SYNs (the probes time out).
/// 4096 holds 40 s of a hundred probes a second, and a burst between two of the
/// helper's looks.
pub const READY_BACKLOG: i32 = 4096;

/// The ready port's sockets, one per address of `--listen`'s host, and whether they
/// listen.
pub struct ReadyPort {
    sockets: Vec<OwnedFd>,
    listening: bool,
}

impl ReadyPort {
    /// Binds one socket per address, not listening: a probe is refused until `set(true)`.
    /// SO_REUSEADDR as std's listeners have it, so a container restarted in the same
    /// network namespace (a pod's) binds at once beside the previous one's TIME_WAIT
    /// connections.
    pub fn bind(addrs: &[SocketAddr]) -> io::Result<ReadyPort> {
        let mut sockets = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let family = match addr {
                SocketAddr::V4(_) => AddressFamily::Inet,
                SocketAddr::V6(_) => AddressFamily::Inet6,
            };
            let fd = socket(
                family,
                SockType::Stream,
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
                None,
            )?;
            setsockopt(&fd, sockopt::ReuseAddr, &true)?;
            bind(fd.as_raw_fd(), &SockaddrStorage::from(*addr))?;
            sockets.push(fd);
        }
        Ok(ReadyPort {
            sockets,
            listening: false,
        })
    }

    /// Listens (`open`) or stops listening; nothing when it already does as asked.
    /// Returns whether it changed. Every socket is switched, even after one fails.
    pub fn set(&mut self, open: bool) -> io::Result<bool> {
        if open == self.listening {
            return Ok(false);
        }
        let mut result = Ok(true);
        for fd in &self.sockets {
            let done = if open {
                listen(fd)
            } else {
                shutdown(fd.as_raw_fd(), Shutdown::Read).map_err(io::Error::from)
            };
            if let Err(err) = done {
                result = Err(err);
            }
        }
        self.listening = open;
        result
    }

    /// Copies of the sockets for the helper process, which takes the connections off
    /// their queues (a std listener over each: accept works while it listens, and fails
    /// with EINVAL while it does not).
    pub fn listeners(&self) -> io::Result<Vec<std::net::TcpListener>> {
        self.sockets
            .iter()
            .map(|fd| {
                let copy = fd.try_clone()?;
                // SAFETY: `copy` is a fresh descriptor of a TCP socket that nothing else
                // owns; the listener takes it over.
                Ok(unsafe { std::net::TcpListener::from_raw_fd(into_raw(copy)) })
            })
            .collect()
    }
}

/// listen(2) with `READY_BACKLOG`: nix's `Backlog` refuses anything above the C
/// library's SOMAXCONN constant (128 in some), though the kernel caps it itself.
fn listen(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: listen takes a descriptor this process owns and an integer.
    if unsafe { libc::listen(fd.as_raw_fd(), READY_BACKLOG) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn into_raw(fd: OwnedFd) -> i32 {
    std::os::fd::IntoRawFd::into_raw_fd(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;
    use std::time::Duration;

    fn connects(addr: SocketAddr) -> bool {
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
    }

    #[test]
    fn refused_until_open_and_again_once_closed_and_the_port_is_kept() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap();
        drop(free);
        let mut port = ReadyPort::bind(&[addr]).unwrap();
        assert!(!connects(addr), "bound, not listening: refused");
        assert!(port.set(true).unwrap());
        assert!(!port.set(true).unwrap(), "already listening: no change");
        assert!(connects(addr));
        // The helper's copy takes connections off the queue while it listens.
        let copy = port.listeners().unwrap().remove(0);
        copy.set_nonblocking(true).unwrap();
        assert!(copy.accept().is_ok());
        assert!(port.set(false).unwrap());
        assert!(!connects(addr), "shut: refused");
        // Its copy cannot accept, and does not keep it listening.
        assert_eq!(
            copy.accept().unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        // Still bound: a socket without SO_REUSEADDR cannot take the port, and it
        // listens again.
        let other = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        let taken = bind(other.as_raw_fd(), &SockaddrStorage::from(addr));
        assert_eq!(taken, Err(nix::errno::Errno::EADDRINUSE));
        assert!(port.set(true).unwrap());
        assert!(connects(addr));
    }
}
