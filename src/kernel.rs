//! Everything that talks to the kernel about processes and signals: the inherited signal
//! state, the blocked-signal inbox (signalfd), spawning the app, reaping, killing, and
//! walking /proc. The only module allowed `unsafe`; each use carries a SAFETY note.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::lifecycle::AppStatus;
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
    let mut mask = 0u64;
    let mut ignored = 0u64;
    // SAFETY: sigset_t is plain data that sigemptyset initialises; pthread_sigmask with a
    // null new set only reads the current mask into `current`.
    unsafe {
        let mut current: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut current);
        if libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut current) == 0 {
            for n in 1..=signals::MAX {
                if libc::sigismember(&current, n) == 1 {
                    mask |= 1 << (n - 1);
                }
            }
        }
    }
    for n in 1..=signals::MAX {
        // SAFETY: a query only: the new action is null, `old` is written by the kernel.
        let disposition = unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            (libc::sigaction(n, std::ptr::null(), &mut old) == 0).then_some(old.sa_sigaction)
        };
        if disposition == Some(libc::SIG_IGN) {
            ignored |= 1 << (n - 1);
        }
    }
    INHERITED_MASK.store(mask, Ordering::Relaxed);
    INHERITED_IGNORED.store(ignored, Ordering::Relaxed);
    INHERITED_CAPTURED.store(true, Ordering::Relaxed);
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

/// Every signal is blocked and read from a signalfd instead of running a handler: blocked
/// signals are queued even for PID 1 (which the kernel otherwise spares signals it has
/// no handler for), real-time signals queue one entry per send, and the reading happens
/// in the one supervision loop.
pub struct SignalInbox {
    fd: SignalFd,
}

impl SignalInbox {
    /// Blocks every signal in this thread (so in every thread started later) and opens
    /// the signalfd. Must run before any thread exists: a thread started earlier would
    /// keep the default dispositions and could take a signal meant for the app.
    pub fn block_all() -> io::Result<SignalInbox> {
        let all = SigSet::all();
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&all), None)?;
        let fd = SignalFd::with_flags(&all, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(SignalInbox { fd })
    }

    /// Everything pending now; empty when nothing is.
    pub fn take_all(&mut self) -> io::Result<Vec<Received>> {
        let mut out = Vec::new();
        while let Some(info) = self.fd.read_signal()? {
            out.push(Received {
                signal: Signal(info.ssi_signo as i32),
                sender: info.ssi_pid as i32,
            });
        }
        Ok(out)
    }

    /// Throws away pending instances of `signals` (the SIGHUP and SIGCONT the kernel sends
    /// when lifeguard gives up the terminal, which must not reach the app: dumb-init #136).
    fn discard(&self, signals: &[Signal]) {
        let set = raw_sigset(signals.iter().copied());
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `set` is a valid initialised sigset; a null siginfo is allowed; the
        // timeout is zero so the call never blocks.
        while unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) } > 0 {}
    }
}

impl SignalInbox {
    /// Hands the inbox to the runtime's reactor so the loop can await it.
    pub fn into_async(self) -> io::Result<tokio::io::unix::AsyncFd<SignalInbox>> {
        // SAFETY: the SignalFd owns its descriptor, so it stays open and the same for as
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

/// A C `sigset_t` holding exactly `signals`.
fn raw_sigset(signals: impl IntoIterator<Item = Signal>) -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the zeroed set; sigaddset flips one bit and
    // rejects out-of-range numbers with EINVAL, which cannot happen for 1..=64.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in signals {
            libc::sigaddset(&mut set, sig.0);
        }
        set
    }
}

/// Whether `signal` has arrived and waits in the inbox, not yet read by the loop.
pub fn signal_pending(signal: Signal) -> bool {
    // SAFETY: sigpending writes the pending set into the initialised `set`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigpending(&mut set) == 0 && libc::sigismember(&set, signal.0) == 1
    }
}

// ---------------------------------------------------------------------------------------
// Lifeguard's own process attributes.

/// The descriptor limit lifeguard was started with, when it raised its own.
static INHERITED_NOFILE: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

/// Raises lifeguard's soft descriptor limit to at least `wanted` (within the hard
/// limit): the endpoint may hold 1024 connections and the common soft limit is 1024.
/// The app gets the original limit back (`spawn_app`).
pub fn raise_descriptor_limit(wanted: u64) {
    let Ok((soft, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    else {
        return;
    };
    let target = wanted.min(hard);
    if soft >= target {
        return;
    }
    if nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, target, hard)
        .is_ok()
    {
        let _ = INHERITED_NOFILE.set(libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        });
    }
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

/// Whether stdin is a terminal; if so, lifeguard lets go of it so that the app's new
/// session can take it as its controlling terminal and job control works in the app.
pub fn release_terminal(inbox: &SignalInbox) -> bool {
    let stdin = io::stdin();
    if !nix::unistd::isatty(stdin.as_raw_fd()).unwrap_or(false) {
        return false;
    }
    let leader = nix::unistd::getsid(None).ok() == Some(nix::unistd::getpid());
    // SAFETY: TIOCNOTTY takes no argument; it fails harmlessly if stdin is not our
    // controlling terminal.
    let detached = unsafe { libc::ioctl(stdin.as_raw_fd(), libc::TIOCNOTTY) } == 0;
    if detached && leader {
        // A session leader giving up its terminal makes the kernel send SIGHUP and
        // SIGCONT to the foreground group, i.e. to lifeguard itself.
        inbox.discard(&[signals::HUP, signals::CONT]);
    }
    true
}

// ---------------------------------------------------------------------------------------
// The app.

/// Starts COMMAND in a session and process group of its own, with the signal mask and
/// ignored set lifeguard inherited, and none of lifeguard's descriptors (all are opened
/// close-on-exec). With `take_terminal`, stdin's terminal becomes its controlling
/// terminal, so its group is the foreground one.
///
/// The returned `Child` handle is dropped on purpose: lifeguard's reaper is the only
/// code that waits.
pub fn spawn_app(command: &[OsString], take_terminal: bool) -> io::Result<i32> {
    let (mask_bits, ignored_bits) = inherited_signal_state();
    let nofile = INHERITED_NOFILE.get().copied();
    let mask = raw_sigset(
        (1..=signals::MAX)
            .filter(|n| mask_bits & (1 << (n - 1)) != 0)
            .map(Signal),
    );
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: the closure runs between fork and exec in the child, where only
    // async-signal-safe calls are allowed: setsid, ioctl, sigaction, sigprocmask
    // and setrlimit are, and it allocates nothing (the mask was built before the fork).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if take_terminal {
                // Failure only costs job control; the app still runs (as dumb-init).
                libc::ioctl(0, libc::TIOCSCTTY, 0);
            }
            for n in 1..=signals::MAX {
                if n == libc::SIGKILL || n == libc::SIGSTOP {
                    continue;
                }
                let disposition = if ignored_bits & (1 << (n - 1)) != 0 {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                };
                // Errors are for numbers the C library reserves; nothing to restore.
                libc::signal(n, disposition);
            }
            if let Some(limit) = &nofile {
                libc::setrlimit(libc::RLIMIT_NOFILE, limit);
            }
            if libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
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
        status: AppStatus,
    },
    /// Children exist but none has exited.
    NoneExited,
    /// ECHILD: lifeguard has no children at all.
    NoChildren,
}

/// One `waitpid(-1, WNOHANG)`. Decoded by hand: nix's `WaitStatus` cannot represent a
/// death by a real-time signal.
pub fn reap_one() -> Reaped {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            let status = if libc::WIFSIGNALED(status) {
                AppStatus::Killed(Signal(libc::WTERMSIG(status)))
            } else {
                AppStatus::Exited(libc::WEXITSTATUS(status) as u8)
            };
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

/// As PID 1, `kill(-1, SIGKILL)` reaches every other process of the PID namespace.
pub fn kill_everything_in_namespace() {
    debug_assert!(is_pid1());
    // SAFETY: see `send`; -1 is meant here and only ever called as PID 1.
    unsafe {
        libc::kill(-1, libc::SIGKILL);
    }
}

/// Whether `pid` takes `signal` itself: a handler installed or the signal blocked (to be
/// read with sigwait/signalfd): SigCgt and SigBlk in /proc/PID/status.
pub fn handles(pid: i32, signal: Signal) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let bits = |field: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or(0)
    };
    (bits("SigCgt:") | bits("SigBlk:")) & (1 << (signal.0 - 1)) != 0
}

/// A live process below lifeguard.
#[derive(Clone, Copy, Debug)]
pub struct Descendant {
    pub pid: i32,
    pub pgid: i32,
}

/// Every live descendant of lifeguard. Walks the kernel's child lists
/// (/proc/PID/task/TID/children) down from lifeguard, so the cost is the size of the
/// tree, not of the host's process table; falls back to a full /proc scan on kernels
/// built without those lists (CONFIG_PROC_CHILDREN).
pub fn descendants() -> Vec<Descendant> {
    let me = own_pid();
    let Some(mut frontier) = children_of(me) else {
        return descendants_by_scan(me);
    };
    let mut found = Vec::new();
    while let Some(pid) = frontier.pop() {
        let Ok(stat) = procfs::process::Process::new(pid).and_then(|p| p.stat()) else {
            continue; // gone meanwhile
        };
        if stat.state == 'Z' {
            continue; // dead already; the reaper takes it
        }
        found.push(Descendant {
            pid,
            pgid: stat.pgrp,
        });
        frontier.extend(children_of(pid).unwrap_or_default());
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
        .filter(|s| s.state != 'Z')
        .map(|s| (s.pid, s.ppid, s.pgrp))
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![me];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid, pgid) in &table {
            if ppid == parent && pid != me {
                found.push(Descendant { pid, pgid });
                frontier.push(pid);
            }
        }
    }
    found
}
