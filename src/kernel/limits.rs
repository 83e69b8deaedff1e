//! lifeguard's descriptor limit (raised for the endpoint, given back to the app) and the
//! endpoint's listener tuning.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;

// ---------------------------------------------------------------------------------------
// Lifeguard's own process attributes.

/// The descriptor limit lifeguard was started with, when it raised its own.
pub(super) static INHERITED_NOFILE: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

// prlimit64 takes the kernel's `struct rlimit64`, two __u64 (linux/resource.h); libc's
// `rlimit` is that on 64-bit Linux (rlim_t is 64 bits on x86_64 and aarch64).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<libc::rlimit>() == 16);
    assert!(offset_of!(libc::rlimit, rlim_cur) == 0 && offset_of!(libc::rlimit, rlim_max) == 8);
};

/// prlimit64 on lifeguard itself (pid 0): sets `new` if given, returns the old limit.
/// The raw system call, because it is also made between fork and exec, where only
/// async-signal-safe code may run (musl's setrlimit signals every thread).
pub(super) fn descriptor_limit(new: Option<&libc::rlimit>) -> io::Result<libc::rlimit> {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let new_ptr = new.map_or(std::ptr::null(), |n| n as *const libc::rlimit);
    // SAFETY: pointers to live rlimit structs (or null for "no change").
    let rc = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            libc::RLIMIT_NOFILE,
            new_ptr,
            &mut old as *mut libc::rlimit,
        )
    };
    if rc == 0 {
        Ok(old)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// No core files for this process (its soft RLIMIT_CORE to 0).
pub(super) fn no_core_dumps() -> io::Result<()> {
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: libc::RLIM_INFINITY,
    };
    let mut old = none;
    // SAFETY: prlimit64 on this process: reads the old limit into `old` first, so the
    // hard limit can be kept.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            libc::RLIMIT_CORE,
            std::ptr::null::<libc::rlimit>(),
            &mut old as *mut libc::rlimit,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let new = libc::rlimit {
        rlim_cur: 0,
        rlim_max: old.rlim_max,
    };
    // SAFETY: a pointer to the live `new`; no old value asked for.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            libc::RLIMIT_CORE,
            &new as *const libc::rlimit,
            std::ptr::null_mut::<libc::rlimit>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Raises lifeguard's soft descriptor limit to at least `wanted` (within the hard
/// limit): the endpoint may hold 1024 connections and the common soft limit is 1024.
/// The app gets the original limit back (`spawn_app`). Returns the soft limit now.
pub fn raise_descriptor_limit(wanted: u64) -> u64 {
    let Ok(original) = descriptor_limit(None) else {
        return wanted;
    };
    let target = wanted.min(original.rlim_max);
    if original.rlim_cur >= target {
        return original.rlim_cur;
    }
    let raised = libc::rlimit {
        rlim_cur: target,
        rlim_max: original.rlim_max,
    };
    if descriptor_limit(Some(&raised)).is_ok() {
        let _ = INHERITED_NOFILE.set(original);
        return target;
    }
    original.rlim_cur
}

/// A connected pair of unix datagram sockets, non-blocking and close-on-exec from the
/// start: one socketpair(2), where std's pair and two `set_nonblocking` take three more
/// system calls of every start.
pub fn datagram_pair() -> io::Result<(UnixDatagram, UnixDatagram)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let (a, b) = socketpair(AddressFamily::Unix, SockType::Datagram, None, flags)?;
    Ok((UnixDatagram::from(a), UnixDatagram::from(b)))
}

/// Small kernel buffers for a listener's connections, which inherit the listener's:
/// health requests and answers are a few hundred bytes, and a client that pipelines
/// requests without reading the answers would otherwise grow them to megabytes, charged
/// to the container's memory. (The kernel doubles the values for its bookkeeping.) Set
/// before `listen`: tcp(7) says a connection's buffer sizes must be set before
/// listen(2) to take effect, the window scale being fixed at the handshake.
pub fn tune_buffers(socket: &impl AsFd, receive: usize, send: usize) -> io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    setsockopt(socket, sockopt::RcvBuf, &receive)?;
    setsockopt(socket, sockopt::SndBuf, &send)?;
    Ok(())
}

/// listen(2) on a bound socket, with the longest backlog the host allows (somaxconn,
/// 4096 by default since Linux 5.4), so a burst of connections while lifeguard waits for
/// a core is queued, not dropped into the client's one-second SYN retry. (Asked for as
/// -1: nix refuses numbers above the C library's SOMAXCONN, which is 128 on musl.) It
/// can fail where the bind did not: two sockets bound to one port with SO_REUSEADDR
/// (two lifeguards, or one and the mirror, starting at once) are both let bind, and
/// only the first to listen may (EADDRINUSE for the other).
pub fn listen(socket: &impl AsFd) -> io::Result<()> {
    nix::sys::socket::listen(socket, nix::sys::socket::Backlog::MAXALLOWABLE)?;
    Ok(())
}
