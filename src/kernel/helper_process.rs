//! The helper process's kernel side: the shared page the Board lives on (mapped before
//! the fork, so both processes see the same memory), and the fork that starts the
//! helper in a session of its own, named `lifeguard-helper`, with no new privileges.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::AtomicU64;

use super::signal_inbox::{kernel_mask, set_disposition};
use crate::signal_names;

/// `words` zeroed 64-bit atomics on memory shared with every process forked after the
/// call (mmap(2), MAP_SHARED | MAP_ANONYMOUS), mapped for the process's whole life.
/// Atomics only, so neither process can hold anything against the other: a process
/// killed mid-write leaves words, never a held lock.
pub fn shared_words(words: usize) -> io::Result<&'static [AtomicU64]> {
    let len = words * std::mem::size_of::<AtomicU64>();
    // SAFETY: a new anonymous mapping, no address hint, no descriptor; the result is
    // checked against MAP_FAILED.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if at == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the mapping is `len` bytes, page-aligned (so aligned for AtomicU64),
    // zero-filled by the kernel (an all-zero AtomicU64 is a valid 0), and never
    // unmapped, so the slice may live for 'static. Every access goes through the
    // atomics, which is what makes sharing it with another process sound.
    Ok(unsafe { std::slice::from_raw_parts(at as *const AtomicU64, words) })
}

/// Forks the helper process and runs `body` in it; returns the helper's pid to the
/// caller (PID 1). The child gets a copy of the calling thread alone, so a lock another
/// thread held at the fork would stay held in it for ever: PID 1 runs one thread but
/// where stderr cannot be written without waiting (then a log writer thread, whose
/// writes take no lock: logging.rs), and the child takes no lock that thread could hold.
///
/// In the child, before `body`: every descriptor but the standard three and those in
/// `keep` is closed (PID 1's signalfd among them: the helper's signals are its own), a
/// session and process group of its own (so nothing sent to the app's group
/// or the terminal's foreground reaches it), the name, death with PID 1
/// (PR_SET_PDEATHSIG: outside a PID namespace nothing else would end it), no new
/// privileges (prctl(2): nothing it could exec gains any), and every signal unblocked:
/// SIGSEGV, SIGABRT and the rest at their default action, so they end it as they end
/// any process and PID 1 hears of it, but the ones an init relays (TERM, INT, HUP,
/// USR1, USR2) ignored, with SIGPIPE: PID 1 ends its helper with SIGKILL alone, and a
/// kill(-1, SIGTERM) to everything left in the namespace (where /proc shows nothing of
/// lifeguard) must not cost the last publish.
pub fn fork_helper(
    keep: &[RawFd],
    body: impl FnOnce() -> std::convert::Infallible,
) -> io::Result<i32> {
    let parent = super::kill::own_pid();
    // SAFETY: fork(2); the child is a single-threaded copy that runs ordinary Rust from
    // here: the C library (musl, glibc) takes its allocator's locks across the fork,
    // and no lock a second thread of PID 1 could hold is taken (above).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(pid);
    }
    // The child.
    close_all_but(keep);
    // SAFETY: plain system calls without pointers, or with a pointer to a constant
    // NUL-terminated name that outlives the call.
    let (session, death) = unsafe {
        let session = libc::setsid();
        let name = c"lifeguard-helper";
        libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0);
        let death = libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0);
        (session, death)
    };
    // Without a session of its own a signal to the app's group could reach it; without
    // the death signal it could outlive a lifeguard that is not PID 1 (a PID 1's
    // namespace ends with it). Either way: no helper, rather than one that misbehaves.
    if session < 0 || (death != 0 && parent != 1) {
        leave(71);
    }
    // The parent may have died between the fork and PR_SET_PDEATHSIG.
    // SAFETY: getppid takes nothing.
    if unsafe { libc::getppid() } != parent {
        leave(0);
    }
    const IGNORED: [i32; 6] = [
        libc::SIGPIPE,
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ];
    for n in 1..=signal_names::MAX {
        if n != libc::SIGKILL && n != libc::SIGSTOP {
            let action = if IGNORED.contains(&n) {
                libc::SIG_IGN
            } else {
                libc::SIG_DFL
            };
            set_disposition(n, action);
        }
    }
    let _ = kernel_mask(libc::SIG_SETMASK, 0);
    // No core file for the helper: a fault there is contained, restarted and logged,
    // and a dump of it would only fill the container's disk.
    let _ = super::limits::no_core_dumps();
    // A panic that unwinds out of the body must not unwind into PID 1's frames, copied
    // into this process by the fork (their destructors would close descriptors this
    // process no longer owns): the helper leaves instead.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    leave(70)
}

/// Closes every descriptor from 3 up but those in `keep`: the copies a fork gave the
/// helper of PID 1's own (its signalfd, its bells, its description of stderr, the
/// ready port's sockets) and of those lifeguard was started with for the app (a
/// socket-activation listener, a log pipe). A shared open file description shares its
/// status flags, so none of PID 1's may be the helper's to change; and the helper holds
/// nothing it does not use. close_range(2) (Linux 5.9) over the gaps; the listing of
/// /proc/self/fd where the kernel lacks it.
fn close_all_but(keep: &[RawFd]) {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|fd| *fd > 2).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut from: u32 = 3;
    let mut ranges = Vec::with_capacity(keep.len() + 1);
    for &fd in &keep {
        let fd = fd as u32;
        if fd > from {
            ranges.push((from, fd - 1));
        }
        from = fd + 1;
    }
    ranges.push((from, u32::MAX));
    for (first, last) in ranges {
        // SAFETY: close_range takes two integers and a flag; every descriptor it closes
        // is this process's own copy, and none of the Rust values of PID 1's that the
        // fork copied here is used or dropped in the helper (it never returns from
        // fork_helper): only those in `keep` are.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) };
        if rc != 0 {
            close_listed(first, last, &keep);
            return;
        }
    }
}

/// The fallback of `close_all_but`: every descriptor /proc/self/fd lists from `first`
/// up, but those in `keep`.
fn close_listed(first: u32, _last: u32, keep: &[RawFd]) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let open: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open {
        if fd >= first as RawFd && !keep.contains(&fd) {
            // SAFETY: as in `close_all_but` (the listing's own descriptor is closed
            // already, or fails harmlessly with EBADF).
            unsafe {
                libc::close(fd);
            }
        }
    }
}

/// Ends the helper process at once with `code`, without running destructors or
/// waiting for its threads (they may be the reason it is leaving).
pub fn leave(code: i32) -> ! {
    // SAFETY: _exit(2) ends the process; nothing after it runs.
    unsafe { libc::_exit(code) }
}
