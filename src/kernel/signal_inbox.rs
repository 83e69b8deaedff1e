//! Signals as the kernel sees them: the state lifeguard inherited (read in an ELF
//! constructor), the raw sigaction and sigprocmask calls libc would filter, and the
//! blocked-signal inbox (signalfd) the supervision loop reads.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::signal_names::{self, Signal};

// ---------------------------------------------------------------------------------------
// The signal state lifeguard was started with.

/// The signals whose disposition lifeguard's process changes before the app's spawn: Rust's
/// start-up ignores SIGPIPE and gives SIGSEGV and SIGBUS its stack-overflow handler,
/// `hear_children` sets SIGCHLD to its default, and the C library may take its reserved
/// real-time signals (32 to 34) for its threads (the `--listen` lookup's). A new change of
/// a disposition before the spawn belongs here (tests/inheritance.rs checks the app's).
const CHANGED: [i32; 7] = [
    libc::SIGPIPE,
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGCHLD,
    32,
    33,
    34,
];

/// Bit N-1 set: signal N was blocked / ignored when lifeguard was exec'd.
static INHERITED_MASK: AtomicU64 = AtomicU64::new(0);
static INHERITED_IGNORED: AtomicU64 = AtomicU64::new(0);
static INHERITED_CAPTURED: AtomicBool = AtomicBool::new(false);

/// Runs from `.init_array`, before Rust's runtime start-up sets SIGPIPE to "ignore" (and
/// parks /dev/null on closed standard descriptors, which it records too: stdio.rs): it is
/// the only moment the ignored set lifeguard inherited can still be read (docs/lifecycle.md: the
/// app gets the mask and ignored set lifeguard was started with, as under tini).
///
/// Of the dispositions, only those lifeguard's process changes before the app's spawn
/// are read (`CHANGED`): every other one reaches the app through fork and exec as it was
/// inherited (exec keeps what is ignored), and asking the kernel about all 64 was 64
/// system calls of every start.
extern "C" fn capture_inherited_signal_state() {
    super::stdio::capture_closed_standard_fds();
    // The kernel's own view, reserved real-time signals included (libc hides those).
    let mask = kernel_mask(libc::SIG_BLOCK, 0).unwrap_or(0);
    let mut ignored = 0u64;
    for n in CHANGED {
        if disposition(n) == Some(libc::SIG_IGN) {
            ignored |= bit(n);
        }
    }
    INHERITED_MASK.store(mask, Ordering::Relaxed);
    INHERITED_IGNORED.store(ignored, Ordering::Relaxed);
    INHERITED_CAPTURED.store(true, Ordering::Relaxed);
}

// The structures below are laid out by hand, as the kernel's uapi headers define them,
// for the two architectures lifeguard is built and tested for (scripts/build-static.sh).
// Another architecture must be checked against its headers first: some differ
// (alpha, mips and sparc have their own sigaction; mips has 128 signals).
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!(
    "src/kernel/ lays out kernel structures for Linux on x86_64 and aarch64 only: check \
     struct sigaction, the sigset size and rlimit64 in this architecture's asm/signal.h first"
);

/// The kernel's `struct sigaction` as rt_sigaction takes it: handler, flags, restorer,
/// mask. x86_64 (arch/x86/include/uapi/asm/signal.h, the !__i386__ branch) and aarch64
/// (arch/arm64/include/uapi/asm/signal.h defines SA_RESTORER "for AArch32
/// compatibility", so asm-generic/signal.h keeps `sa_restorer`) lay it out the same:
/// four 8-byte words, the mask last. libc's `struct sigaction` is the C library's own
/// (a 128-byte sigset_t, another field order on musl), not this.
#[repr(C)]
pub(super) struct KernelSigaction {
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
pub(super) fn disposition(n: i32) -> Option<libc::sighandler_t> {
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
pub(super) fn set_disposition(n: i32, handler: libc::sighandler_t) {
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
pub(super) fn inherited_signal_state() -> (u64, u64) {
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
pub(super) const SIGSET_SIZE: usize = std::mem::size_of::<KernelSigset>();
const _: () = assert!(SIGSET_SIZE == 8 && signal_names::MAX == 64);

pub const fn bit(signal: i32) -> KernelSigset {
    1 << (signal - 1)
}

/// Every signal but KILL and STOP, which cannot be blocked.
pub(super) const EVERY_SIGNAL: KernelSigset = !(bit(libc::SIGKILL) | bit(libc::SIGSTOP));

/// rt_sigprocmask(how, set) on the calling thread; returns the previous mask. With
/// `how` = SIG_BLOCK and an empty set it only reads. A raw system call: it is also made
/// between fork and exec, and it must not filter the reserved signals as libc does.
pub(super) fn kernel_mask(how: libc::c_int, set: KernelSigset) -> io::Result<KernelSigset> {
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

    /// Everything pending now, appended to `out` (a buffer the caller keeps, so that
    /// reading a signal allocates nothing); nothing when nothing is.
    pub fn take_all(&mut self, out: &mut Vec<Received>) -> io::Result<()> {
        const RECORD: usize = std::mem::size_of::<libc::signalfd_siginfo>();
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
                    io::ErrorKind::WouldBlock => Ok(()),
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
                return Ok(());
            }
        }
    }

    /// Throws away pending instances of `signals` (the SIGHUP and SIGCONT the kernel sends
    /// when lifeguard gives up the terminal, which must not reach the app: dumb-init #136).
    pub(super) fn discard(&self, signals: &[Signal]) {
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

/// Starts a thread named `name` that blocks every signal again before `work` runs
/// (`reblock_every_signal` says why). Every thread of lifeguard's starts here, boxed:
/// one copy of std's thread start in the binary, not one per closure.
pub fn spawn_thread(
    name: &str,
    work: Box<dyn FnOnce() + Send>,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            reblock_every_signal();
            work()
        })
}

/// Makes SIGCHLD lifeguard's to hear of. Inherited ignored (`env --ignore-signal=CHLD`,
/// some job runners), it would make the kernel reap lifeguard's children itself
/// (wait(2), "POSIX.1-2001 ... SIGCHLD set to SIG_IGN"): the app's exit would never be
/// reported and its status lost. The app still inherits it ignored: spawn_app puts back
/// what the constructor captured.
pub fn hear_children() {
    set_disposition(libc::SIGCHLD, libc::SIG_DFL);
}

/// What ended a wait of the supervision loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Woke {
    /// Signals are waiting in the inbox.
    pub signals: bool,
    /// The other descriptor (a bell) is readable.
    pub bell: bool,
}

impl SignalInbox {
    /// Blocks until a signal arrives, `bell` is readable, or `timeout` has passed (None:
    /// no timeout): the supervision loop's one wait. The timeout is rounded up to the
    /// millisecond, so a deadline is never woken for early.
    pub fn wait(&self, bell: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<Woke> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let timeout = match timeout {
            None => PollTimeout::NONE,
            Some(t) => {
                let ms = t.as_nanos().div_ceil(1_000_000);
                PollTimeout::try_from(ms.min(i32::MAX as u128) as u64).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [
            PollFd::new(self.fd.as_fd(), PollFlags::POLLIN),
            PollFd::new(bell, PollFlags::POLLIN),
        ];
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(Woke::default()),
            Err(err) => return Err(err.into()),
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        Ok(Woke {
            signals: ready(&fds[0]),
            bell: ready(&fds[1]),
        })
    }
}

impl SignalInbox {
    /// The loop's wait where nothing but signals is waited for (no helper process, so
    /// no bell): rt_sigtimedwait on every signal, which takes the signal out of the
    /// pending set in the same call that waits for it — one system call where a poll
    /// and a read of the signalfd take two, on the path from a signal to its relay.
    /// None when `timeout` passed (or a stop and continue interrupted the wait). Only
    /// where nobody reads readiness: the poll leaves a SIGTERM pending until the loop
    /// has marked it for `/readyz` (supervisor.rs), this takes it at once.
    pub fn wait_for_signal(&self, timeout: Option<Duration>) -> io::Result<Option<Received>> {
        let set: KernelSigset = EVERY_SIGNAL;
        // Rounded up to the microsecond's nanosecond, as poll's to the millisecond: a
        // deadline is never woken for early.
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i64::MAX as u64) as _,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        // SAFETY: zeroed siginfo_t is valid plain data for the kernel to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: pointers to the live set, siginfo and timeout (or null: no timeout);
        // SIGSET_SIZE is the kernel's sigset size.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &set as *const KernelSigset,
                &mut info as *mut libc::siginfo_t,
                ts.as_ref()
                    .map_or(std::ptr::null(), |t| t as *const libc::timespec),
                SIGSET_SIZE,
            )
        };
        if rc > 0 {
            // SAFETY: for a signal sent by kill(2) or the kernel the union holds the
            // sender's pid there (0 when there is none); reading it is reading plain
            // integers the kernel wrote.
            let sender = unsafe { info.si_pid() };
            return Ok(Some(Received {
                signal: Signal(rc as i32),
                sender,
            }));
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(io::Error::last_os_error()),
        }
    }
}

/// For a loop that waits on more than the one bell `wait` takes (the readiness mirror's
/// connections).
impl AsFd for SignalInbox {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
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
