//! Everything that talks to the kernel about processes and signals: the inherited signal
//! state, the blocked-signal inbox (signalfd), spawning the app, reaping, killing, and
//! walking /proc. The only module allowed `unsafe`; each use carries a SAFETY note.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::signals::{self, Signal};

// ---------------------------------------------------------------------------------------
// The signal state lifeguard was started with.

/// Bit N-1 set: signal N was blocked / ignored when lifeguard was exec'd.
static INHERITED_MASK: AtomicU64 = AtomicU64::new(0);
static INHERITED_IGNORED: AtomicU64 = AtomicU64::new(0);
static INHERITED_CAPTURED: AtomicBool = AtomicBool::new(false);

/// Runs from `.init_array`, before Rust's runtime start-up sets SIGPIPE to "ignore": it is
/// the only moment the ignored set lifeguard inherited can still be read (DESIGN §3: the
/// app gets the mask and ignored set lifeguard was started with, as under tini).
extern "C" fn capture_inherited_signal_state() {
    // The kernel's own view, reserved real-time signals included (libc hides those).
    let mask = kernel_mask(libc::SIG_BLOCK, 0).unwrap_or(0);
    let mut ignored = 0u64;
    for n in 1..=signals::MAX {
        if disposition(n) == Some(libc::SIG_IGN) {
            ignored |= bit(n);
        }
    }
    INHERITED_MASK.store(mask, Ordering::Relaxed);
    INHERITED_IGNORED.store(ignored, Ordering::Relaxed);
    INHERITED_CAPTURED.store(true, Ordering::Relaxed);
}

// The structures below are laid out by hand, as the kernel's uapi headers define them,
// for the two architectures lifeguard is built and tested for (scripts/build-static.sh;
// issue #10). Another architecture must be checked against its headers first: some differ
// (alpha, mips and sparc have their own sigaction; mips has 128 signals).
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!(
    "src/kernel.rs lays out kernel structures for Linux on x86_64 and aarch64 only: check \
     struct sigaction, the sigset size and rlimit64 in this architecture's asm/signal.h first"
);

/// The kernel's `struct sigaction` as rt_sigaction takes it: handler, flags, restorer,
/// mask. x86_64 (arch/x86/include/uapi/asm/signal.h, the !__i386__ branch) and aarch64
/// (arch/arm64/include/uapi/asm/signal.h defines SA_RESTORER "for AArch32
/// compatibility", so asm-generic/signal.h keeps `sa_restorer`) lay it out the same:
/// four 8-byte words, the mask last. libc's `struct sigaction` is the C library's own
/// (a 128-byte sigset_t, another field order on musl), not this.
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: KernelSigset,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(KernelSigaction, handler) == 0);
    assert!(offset_of!(KernelSigaction, flags) == 8);
    assert!(offset_of!(KernelSigaction, restorer) == 16);
    assert!(offset_of!(KernelSigaction, mask) == 24);
    assert!(size_of::<KernelSigaction>() == 32);
};

/// The current disposition of signal `n` (SIG_DFL, SIG_IGN or a handler), asked of the
/// kernel directly: libc refuses to report the signals it reserves, and glibc installs a
/// handler on one of them, so only the raw call sees what lifeguard inherited.
fn disposition(n: i32) -> Option<libc::sighandler_t> {
    let mut old = KernelSigaction {
        handler: 0,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: a query only: the new action is null, `old` is a live struct of the
    // kernel's layout, and SIGSET_SIZE is the kernel's sigset size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            n,
            std::ptr::null::<KernelSigaction>(),
            &mut old as *mut KernelSigaction,
            SIGSET_SIZE,
        )
    };
    (rc == 0).then_some(old.handler)
}

/// Sets signal `n` to SIG_DFL or SIG_IGN with the raw call (async-signal-safe, and not
/// refused for the reserved signals). Neither needs a restorer.
fn set_disposition(n: i32, handler: libc::sighandler_t) {
    let new = KernelSigaction {
        handler,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: `new` is a live struct of the kernel's layout; no old action is asked for.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            n,
            &new as *const KernelSigaction,
            std::ptr::null_mut::<KernelSigaction>(),
            SIGSET_SIZE,
        );
    }
}

#[used]
#[link_section = ".init_array"]
static CAPTURE_INHERITED_SIGNAL_STATE: extern "C" fn() = capture_inherited_signal_state;

/// (blocked, ignored) bitmasks lifeguard inherited; the defaults a plain `exec` gives
/// when the constructor did not run.
fn inherited_signal_state() -> (u64, u64) {
    if !INHERITED_CAPTURED.load(Ordering::Relaxed) {
        return (0, 0);
    }
    (
        INHERITED_MASK.load(Ordering::Relaxed),
        INHERITED_IGNORED.load(Ordering::Relaxed),
    )
}

// ---------------------------------------------------------------------------------------
// Receiving signals.

/// One signal taken from the inbox, with the sender as the kernel recorded it.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub signal: Signal,
    pub sender: i32,
}

/// Signal sets as the kernel takes them (`rt_sigprocmask`, `signalfd4`): bit N-1 for
/// signal N, all 64 of them. libc's `sigset_t` calls leave out the real-time signals the
/// C library keeps for itself (32-34 on musl, 32-33 on glibc), and a signal left out of
/// the mask keeps its default action: `kill -34` would end lifeguard and orphan the app.
/// lifeguard uses none of the libc features those signals serve (thread cancellation,
/// set*id across threads, SIGEV_THREAD timers), so it blocks and forwards them too.
pub type KernelSigset = u64;

/// The `sigsetsize` argument of the rt_* calls and signalfd4: the kernel's `sigset_t` is
/// `_NSIG / 8` = 64 / 8 bytes on x86_64 and aarch64 alike, and it refuses any other size
/// with EINVAL.
const SIGSET_SIZE: usize = std::mem::size_of::<KernelSigset>();
const _: () = assert!(SIGSET_SIZE == 8 && signals::MAX == 64);

pub const fn bit(signal: i32) -> KernelSigset {
    1 << (signal - 1)
}

/// Every signal but KILL and STOP, which cannot be blocked.
const EVERY_SIGNAL: KernelSigset = !(bit(libc::SIGKILL) | bit(libc::SIGSTOP));

/// rt_sigprocmask(how, set) on the calling thread; returns the previous mask. With
/// `how` = SIG_BLOCK and an empty set it only reads. A raw system call: it is also made
/// between fork and exec, and it must not filter the reserved signals as libc does.
fn kernel_mask(how: libc::c_int, set: KernelSigset) -> io::Result<KernelSigset> {
    let mut old: KernelSigset = 0;
    // SAFETY: both pointers are to live u64s, and the size passed is SIGSET_SIZE, the
    // kernel's sigset size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            how,
            &set as *const KernelSigset,
            &mut old as *mut KernelSigset,
            SIGSET_SIZE,
        )
    };
    if rc == 0 {
        Ok(old)
    } else {
        Err(io::Error::last_os_error())
    }
}

// The records read from the signalfd: libc's `signalfd_siginfo` (its layout is the same
// on every Linux architecture, 128 bytes, linux/signalfd.h), checked against the kernel's
// size so a libc that got it wrong fails to build rather than splitting records.
const _: () = assert!(std::mem::size_of::<libc::signalfd_siginfo>() == 128);
// rt_sigtimedwait takes the kernel's `struct __kernel_timespec`: two 64-bit words.
const _: () = assert!(std::mem::size_of::<libc::timespec>() == 16);

/// Every signal is blocked and read from a signalfd instead of running a handler: blocked
/// signals are queued even for PID 1 (which the kernel otherwise spares signals it has
/// no handler for), real-time signals queue one entry per send, and the reading happens
/// in the one supervision loop.
pub struct SignalInbox {
    fd: OwnedFd,
}

impl SignalInbox {
    /// Blocks every signal in this thread (so in every thread started later) and opens
    /// the signalfd. Must run before any thread exists: a thread started earlier would
    /// keep the default dispositions and could take a signal meant for the app.
    pub fn block_all() -> io::Result<SignalInbox> {
        kernel_mask(libc::SIG_SETMASK, EVERY_SIGNAL)?;
        let set = EVERY_SIGNAL;
        // SAFETY: signalfd4 reads 8 bytes of `set`; -1 asks for a new descriptor.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_signalfd4,
                -1,
                &set as *const KernelSigset,
                SIGSET_SIZE,
                libc::SFD_NONBLOCK | libc::SFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(SignalInbox { fd })
    }

    /// Everything pending now; empty when nothing is.
    pub fn take_all(&mut self) -> io::Result<Vec<Received>> {
        const RECORD: usize = std::mem::size_of::<libc::signalfd_siginfo>();
        let mut out = Vec::new();
        // SAFETY: signalfd_siginfo is plain integers, valid when zeroed.
        let mut records: [libc::signalfd_siginfo; 16] = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: reads at most the size of `records` into it; the kernel writes
            // whole records only.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    records.as_mut_ptr().cast(),
                    RECORD * records.len(),
                )
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                return match err.kind() {
                    io::ErrorKind::WouldBlock => Ok(out),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(err),
                };
            }
            let count = n as usize / RECORD;
            out.extend(records[..count].iter().map(|info| Received {
                signal: Signal(info.ssi_signo as i32),
                sender: info.ssi_pid as i32,
            }));
            if count < records.len() {
                return Ok(out);
            }
        }
    }

    /// Throws away pending instances of `signals` (the SIGHUP and SIGCONT the kernel sends
    /// when lifeguard gives up the terminal, which must not reach the app: dumb-init #136).
    fn discard(&self, signals: &[Signal]) {
        let set: KernelSigset = signals.iter().fold(0, |set, s| set | bit(s.0));
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: pointers to the live set and zero timeout (so it never blocks); a null
        // siginfo is allowed.
        while unsafe {
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &set as *const KernelSigset,
                std::ptr::null_mut::<libc::siginfo_t>(),
                &zero as *const libc::timespec,
                SIGSET_SIZE,
            )
        } > 0
        {}
    }
}

/// Blocks every signal in the calling thread again. The C library unblocks the signals
/// it reserves when the process starts its first thread (musl and glibc both do, in
/// pthread_create), and a thread that does not block a signal may be the one the kernel
/// delivers it to, with its default action: so the first thread, and the thread that
/// started it, call this at once.
pub fn reblock_every_signal() {
    let _ = kernel_mask(libc::SIG_SETMASK, EVERY_SIGNAL);
}

/// Makes SIGCHLD lifeguard's to hear of. Inherited ignored (`env --ignore-signal=CHLD`,
/// some job runners), it would make the kernel reap lifeguard's children itself
/// (wait(2), "POSIX.1-2001 ... SIGCHLD set to SIG_IGN"): the app's exit would never be
/// reported and its status lost. The app still inherits it ignored: spawn_app puts back
/// what the constructor captured.
pub fn hear_children() {
    set_disposition(libc::SIGCHLD, libc::SIG_DFL);
}

impl SignalInbox {
    /// Hands the inbox to the runtime's reactor so the loop can await it.
    pub fn into_async(self) -> io::Result<tokio::io::unix::AsyncFd<SignalInbox>> {
        // SAFETY: the inbox owns its descriptor, so it stays open and the same for as
        // long as the AsyncFd owns the inbox, and as_raw_fd always returns it.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(self, tokio::io::Interest::READABLE)
                .map_err(|e| e.into_parts().1)
        }
    }
}

impl AsRawFd for SignalInbox {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Whether `signal` has arrived and waits in the inbox, not yet read by the loop.
pub fn signal_pending(signal: Signal) -> bool {
    let mut pending: KernelSigset = 0;
    // SAFETY: writes 8 bytes into `pending`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigpending,
            &mut pending as *mut KernelSigset,
            SIGSET_SIZE,
        )
    };
    rc == 0 && pending & bit(signal.0) != 0
}

// ---------------------------------------------------------------------------------------
// Lifeguard's own process attributes.

/// The descriptor limit lifeguard was started with, when it raised its own.
static INHERITED_NOFILE: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

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
fn descriptor_limit(new: Option<&libc::rlimit>) -> io::Result<libc::rlimit> {
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

/// Sets up the endpoint's listener for bursts and for hostile clients:
/// - the longest listen backlog the host allows (somaxconn, 4096 by default; std's
///   bind asks for 128, and a second listen() on a listening socket only changes the
///   backlog), so a burst of connections while lifeguard waits for a core is queued,
///   not dropped into the client's one-second SYN retry. (Asked for as -1: nix refuses
///   numbers above the C library's SOMAXCONN, which is 128 on musl.)
/// - small kernel buffers for its connections, which inherit the listener's: health
///   requests and answers are a few hundred bytes, and a client that pipelines requests
///   without reading the answers would otherwise grow them to megabytes, charged to the
///   container's memory. (The kernel doubles the values for its bookkeeping.)
pub fn tune_listener(
    listener: &std::net::TcpListener,
    receive: usize,
    send: usize,
) -> io::Result<()> {
    use nix::sys::socket::{listen, setsockopt, sockopt, Backlog};
    setsockopt(listener, sockopt::RcvBuf, &receive)?;
    setsockopt(listener, sockopt::SndBuf, &send)?;
    listen(listener, Backlog::MAXALLOWABLE)?;
    Ok(())
}

pub fn own_pid() -> i32 {
    std::process::id() as i32
}

pub fn is_pid1() -> bool {
    own_pid() == 1
}

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

/// A way to write lifeguard's log lines to stderr that never waits for a reader, so no
/// writer thread is needed (issue #9): stderr is shared with the app, so its own file
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
        inbox.discard(&[signals::HUP, signals::CONT]);
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

/// If the app (a direct child) has stopped since last asked, by which signal. Only the
/// stop is collected (waitid with WSTOPPED alone): an exit stays for the reaper.
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
    // Dispositions put back as inherited: Rust's start-up ignores SIGPIPE and its spawn
    // resets it, and the C library may install handlers (which exec turns into SIG_DFL)
    // on signals lifeguard inherited ignored. Computed before the fork: the child only
    // makes system calls.
    let restore: Vec<(i32, libc::sighandler_t)> = (1..=signals::MAX)
        .filter(|&n| n != libc::SIGKILL && n != libc::SIGSTOP)
        .filter_map(|n| {
            let was_ignored = ignored_bits & bit(n) != 0;
            let is_ignored = disposition(n)? == libc::SIG_IGN;
            // Inherited-ignored ones always: std's spawn resets SIGPIPE before our code.
            (was_ignored || is_ignored).then_some((
                n,
                if was_ignored {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                },
            ))
        })
        .collect();
    let nofile = INHERITED_NOFILE.get().copied();
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: the closure runs between fork and exec in the child, where only
    // async-signal-safe calls are allowed: setsid, setpgid, tcsetpgrp, ioctl and raw
    // system calls are, and it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if terminal == AppTerminal::ForegroundGroup {
                if libc::setpgid(0, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                // A background group calling tcsetpgrp gets SIGTTOU unless it is
                // blocked (tcsetpgrp(3)); every signal still is, until the last step.
                // Failure only costs job control; the app still runs.
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
            for &(n, handler) in &restore {
                set_disposition(n, handler);
            }
            if let Some(limit) = &nofile {
                descriptor_limit(Some(limit))?;
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

/// kill(2) with any signal number, real-time ones included; `target` < 0 is a group.
pub fn send(target: i32, signal: Signal) -> io::Result<()> {
    // SAFETY: kill takes two integers; lifeguard never passes 0 or -1 by accident: the
    // callers name a pid or -pgid (> 1), and `kill_everything_in_namespace` is explicit.
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

/// Whether `signal`'s default action does not apply to `process`: a handler installed,
/// the signal blocked (to be read with sigwait/signalfd) or ignored: SigCgt, SigBlk and
/// SigIgn in its /proc status.
pub fn handles(process: &Descendant, signal: Signal) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", process.proc_pid)) else {
        return false;
    };
    let bits = |field: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or(0)
    };
    (bits("SigCgt:") | bits("SigBlk:") | bits("SigIgn:")) & (1 << (signal.0 - 1)) != 0
}

/// A live process below lifeguard.
#[derive(Clone, Copy, Debug)]
pub struct Descendant {
    /// Its pid and process group in lifeguard's PID namespace (what kill takes).
    pub pid: i32,
    pub pgid: i32,
    /// Its pid in the namespace /proc belongs to (what /proc paths take): the same as
    /// `pid` unless /proc is an outer namespace's.
    pub proc_pid: i32,
}

/// How the mounted /proc relates to lifeguard's PID namespace (DESIGN §3, "Whose
/// /proc"; issue #9). `unshare --pid --fork` without `--mount-proc`, and some
/// sandboxes, leave PID 1 with the host's /proc, where /proc/1 is the host's init.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcView {
    /// /proc is this namespace's.
    Own,
    /// /proc is an outer namespace's: lifeguard is `self_pid` there, and a process's
    /// pid in lifeguard's namespace is entry `depth` of its NSpid line.
    Outer { self_pid: i32, depth: usize },
    /// /proc does not show lifeguard at all (an unrelated namespace's).
    Blind,
}

/// Decided once, on first use (nothing at start-up pays for it).
pub fn proc_view() -> ProcView {
    static VIEW: std::sync::OnceLock<ProcView> = std::sync::OnceLock::new();
    *VIEW.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok();
        let seen = std::fs::read_link("/proc/self").ok();
        decide_proc_view(
            own_pid(),
            seen.as_deref().and_then(|p| p.to_str()?.parse().ok()),
            status.as_deref(),
        )
    })
}

/// The pure rule: `seen` is what /proc/self points to, `status` /proc/self/status.
fn decide_proc_view(own: i32, seen: Option<i32>, status: Option<&str>) -> ProcView {
    match seen {
        Some(pid) if pid == own => ProcView::Own,
        Some(self_pid) => match status.and_then(|s| ns_ids(s, "NSpid:")) {
            // The innermost entry is lifeguard's own namespace.
            Some(ids) if ids.last() == Some(&own) => ProcView::Outer {
                self_pid,
                depth: ids.len() - 1,
            },
            _ => ProcView::Blind,
        },
        None => ProcView::Blind,
    }
}

/// The ids of an `NSpid:`/`NSpgid:` line of a /proc status: outermost first.
fn ns_ids(status: &str, field: &str) -> Option<Vec<i32>> {
    let line = status.lines().find_map(|l| l.strip_prefix(field))?;
    line.split_whitespace().map(|id| id.parse().ok()).collect()
}

/// Every live descendant of lifeguard. Walks the kernel's child lists
/// (/proc/PID/task/TID/children) down from lifeguard, so the cost is the size of the
/// tree, not of the host's process table; with an outer namespace's /proc the walk
/// starts at /proc/self and each pid is translated through NSpid/NSpgid; with a /proc
/// that does not show lifeguard there is nothing to walk (as PID 1, `kill(-1)` still
/// reaches the namespace). Falls back to a full /proc scan on kernels built without
/// child lists (CONFIG_PROC_CHILDREN), and only with lifeguard's own /proc.
pub fn descendants() -> Vec<Descendant> {
    let (start, depth) = match proc_view() {
        ProcView::Own => (own_pid(), None),
        ProcView::Outer { self_pid, depth } => (self_pid, Some(depth)),
        ProcView::Blind => return Vec::new(),
    };
    let Some(mut frontier) = children_of(start) else {
        return match depth {
            None => descendants_by_scan(start),
            Some(_) => Vec::new(),
        };
    };
    let mut found = Vec::new();
    while let Some(proc_pid) = frontier.pop() {
        // Zombies stay in: a process whose main thread has exited shows as a zombie
        // while its other threads still run, and must be killed too (a signal to a real
        // zombie is harmless).
        let ids = match depth {
            None => procfs::process::Process::new(proc_pid)
                .and_then(|p| p.stat())
                .ok()
                .map(|stat| (proc_pid, stat.pgrp)),
            Some(depth) => std::fs::read_to_string(format!("/proc/{proc_pid}/status"))
                .ok()
                .and_then(|status| {
                    let pid = *ns_ids(&status, "NSpid:")?.get(depth)?;
                    let pgid = *ns_ids(&status, "NSpgid:")?.get(depth)?;
                    Some((pid, pgid))
                }),
        };
        let Some((pid, pgid)) = ids else {
            continue; // gone meanwhile
        };
        found.push(Descendant {
            pid,
            pgid,
            proc_pid,
        });
        frontier.extend(children_of(proc_pid).unwrap_or_default());
    }
    found
}

/// Children of every thread of `pid`: orphans re-parented to a subreaper may hang on any
/// of its threads. None when the kernel has no child lists.
fn children_of(pid: i32) -> Option<Vec<i32>> {
    let tasks = procfs::process::Process::new(pid).ok()?.tasks().ok()?;
    let mut out = Vec::new();
    for task in tasks.flatten() {
        match task.children() {
            Ok(children) => out.extend(children.into_iter().map(|c| c as i32)),
            Err(procfs::ProcError::NotFound(_)) if task.tid == pid => return None,
            Err(_) => {}
        }
    }
    Some(out)
}

fn descendants_by_scan(me: i32) -> Vec<Descendant> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    let table: Vec<(i32, i32, i32)> = all
        .filter_map(|p| p.ok()?.stat().ok())
        .map(|s| (s.pid, s.ppid, s.pgrp))
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![me];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid, pgid) in &table {
            if ppid == parent && pid != me {
                found.push(Descendant {
                    pid,
                    pgid,
                    proc_pid: pid,
                });
                frontier.push(pid);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whose_proc_is_decided_from_self_and_nspid() {
        let status = "Name:\tlifeguard\nNSpid:\t48213\t1\nNSpgid:\t48213\t1\n";
        // /proc/self is lifeguard itself: its own /proc.
        assert_eq!(decide_proc_view(1, Some(1), Some(status)), ProcView::Own);
        // The host's /proc: lifeguard is 48213 there, and 1 in its namespace.
        assert_eq!(
            decide_proc_view(1, Some(48213), Some(status)),
            ProcView::Outer {
                self_pid: 48213,
                depth: 1
            }
        );
        // Three levels deep.
        let nested = "NSpid:\t900\t40\t7\n";
        assert_eq!(
            decide_proc_view(7, Some(900), Some(nested)),
            ProcView::Outer {
                self_pid: 900,
                depth: 2
            }
        );
        // A /proc where "self" is somebody else's view, or missing: blind.
        assert_eq!(
            decide_proc_view(7, Some(5), Some("NSpid:\t5\n")),
            ProcView::Blind
        );
        assert_eq!(decide_proc_view(7, None, None), ProcView::Blind);
        assert_eq!(decide_proc_view(7, Some(5), None), ProcView::Blind);
    }

    #[test]
    fn ns_id_lines_parse_outermost_first() {
        assert_eq!(ns_ids("NSpid:\t12\t3\n", "NSpid:"), Some(vec![12, 3]));
        assert_eq!(ns_ids("NSpid:\t12 x\n", "NSpid:"), None);
        assert_eq!(ns_ids("Pid:\t12\n", "NSpid:"), None);
    }
}
