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
//!
//! The port is held exclusively while it does not listen. Linux lets a second socket
//! bind a port another socket holds when both carry SO_REUSEADDR and neither listens
//! (`inet_bind_conflict`), and Go, Node and Python servers set it: such a server could
//! take the port and listen first, and lifeguard's own listen(2) would fail. So
//! SO_REUSEADDR is on only while the socket listens (its accepted connections inherit
//! it, and their TIME_WAIT remnants then do not stop the next listen(2)), and off while
//! it is closed, when any other bind of the port fails. The first bind is tried without
//! it; only where the port is held by TIME_WAIT connections (a container restarted in
//! the same network namespace) does it need SO_REUSEADDR, cleared right after.
#![allow(unsafe_code)]

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::sys::socket::{
    bind, setsockopt, shutdown, socket, sockopt, AddressFamily, Shutdown, SockFlag, SockType,
    SockaddrStorage,
};

/// A TCP socket bound to `addr`, not listening, close-on-exec and non-blocking.
/// `[::]` is dual-stack whatever `net.ipv6.bindv6only` says (IPV6_V6ONLY off, as Go's
/// `:PORT` listeners are): it takes IPv4 connections too, so an IPv4 probe and an
/// IPv6-only pod's probe both reach it. `reuse`: SO_REUSEADDR, kept on.
pub fn bound_socket(addr: SocketAddr, reuse: bool) -> io::Result<OwnedFd> {
    let fd = tcp_socket(addr)?;
    if reuse {
        setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    Ok(fd)
}

fn tcp_socket(addr: SocketAddr) -> io::Result<OwnedFd> {
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
    if let SocketAddr::V6(v6) = addr {
        if v6.ip().is_unspecified() {
            setsockopt(&fd, sockopt::Ipv6V6Only, &false)?;
        }
    }
    Ok(fd)
}

/// Whether a failure to make or bind an IPv6 socket means the kernel has no IPv6
/// (`ipv6.disable=1`: EAFNOSUPPORT; no IPv6 address can be had: EADDRNOTAVAIL), so
/// that a default dual-stack address falls back to IPv4 alone.
pub fn no_ipv6(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL | libc::EPROTONOSUPPORT)
    )
}

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
    /// Held exclusively (module comment): without SO_REUSEADDR, or, where TIME_WAIT
    /// connections of a previous run hold the port, with it for the bind alone.
    pub fn bind(addrs: &[SocketAddr]) -> io::Result<ReadyPort> {
        let mut sockets = Vec::with_capacity(addrs.len());
        for &addr in addrs {
            let fd = match bound_socket(addr, false) {
                Err(err) if err.raw_os_error() == Some(libc::EADDRINUSE) => {
                    let fd = bound_socket(addr, true)?;
                    setsockopt(&fd, sockopt::ReuseAddr, &false)?;
                    fd
                }
                bound => bound?,
            };
            sockets.push(fd);
        }
        Ok(ReadyPort {
            sockets,
            listening: false,
        })
    }

    /// Listens (`open`) or stops listening; nothing when it already does as asked.
    /// Returns whether it changed. A listen that fails on any socket (EADDRINUSE: the
    /// port was taken meanwhile) leaves none listening and is never recorded as open:
    /// the caller tries again. Closing switches every socket, even after one fails.
    pub fn set(&mut self, open: bool) -> io::Result<bool> {
        if open == self.listening {
            return Ok(false);
        }
        if open {
            for fd in &self.sockets {
                let listened = setsockopt(fd, sockopt::ReuseAddr, &true)
                    .map_err(io::Error::from)
                    .and_then(|()| listen(fd));
                if let Err(err) = listened {
                    let _ = self.close_all();
                    return Err(err);
                }
            }
            self.listening = true;
            return Ok(true);
        }
        self.listening = false;
        self.close_all().map(|()| true)
    }

    /// Every socket stops listening, SO_REUSEADDR off first: connections that arrive
    /// meanwhile are reset by the shutdown, and no other socket can bind the port after.
    fn close_all(&self) -> io::Result<()> {
        let mut result = Ok(());
        for fd in &self.sockets {
            let _ = setsockopt(fd, sockopt::ReuseAddr, &false);
            // ENOTCONN: it was not listening (a listen that failed).
            match shutdown(fd.as_raw_fd(), Shutdown::Read) {
                Ok(()) | Err(nix::errno::Errno::ENOTCONN) => {}
                Err(err) => result = Err(err.into()),
            }
        }
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

    /// A socket with SO_REUSEADDR (as Go, Node and Python servers bind) trying `addr`.
    fn squatter(addr: SocketAddr) -> nix::Result<OwnedFd> {
        let fd = tcp_socket(addr).unwrap();
        setsockopt(&fd, sockopt::ReuseAddr, &true).unwrap();
        bind(fd.as_raw_fd(), &SockaddrStorage::from(addr)).map(|()| fd)
    }

    #[test]
    fn no_other_socket_takes_the_port_while_it_is_closed_and_time_wait_stops_no_listen() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap();
        drop(free);
        let mut port = ReadyPort::bind(&[addr]).unwrap();
        assert_eq!(squatter(addr).err(), Some(nix::errno::Errno::EADDRINUSE));
        for _ in 0..3 {
            assert!(port.set(true).unwrap());
            // Connections accepted and closed by lifeguard's side first leave
            // TIME_WAIT sockets on the port: the next listen must not mind them.
            let copy = port.listeners().unwrap().remove(0);
            for _ in 0..3 {
                let client = TcpStream::connect(addr).unwrap();
                let (server, _) = copy.accept().unwrap();
                drop(server);
                drop(client);
            }
            assert!(port.set(false).unwrap());
            assert_eq!(squatter(addr).err(), Some(nix::errno::Errno::EADDRINUSE));
        }
        // A new run beside those TIME_WAIT sockets binds, exclusively.
        drop(port);
        let again = ReadyPort::bind(&[addr]).unwrap();
        assert_eq!(squatter(addr).err(), Some(nix::errno::Errno::EADDRINUSE));
        drop(again);
    }

    #[test]
    fn the_unspecified_ipv6_address_takes_both_families() {
        let free = std::net::TcpListener::bind("[::]:0");
        let Ok(free) = free else {
            panic!("this machine has no IPv6: the dual-stack test cannot run");
        };
        let port_no = free.local_addr().unwrap().port();
        drop(free);
        let any: SocketAddr = format!("[::]:{port_no}").parse().unwrap();
        let mut port = ReadyPort::bind(&[any]).unwrap();
        assert!(port.set(true).unwrap());
        assert!(connects(format!("127.0.0.1:{port_no}").parse().unwrap()));
        assert!(connects(format!("[::1]:{port_no}").parse().unwrap()));
    }
}
