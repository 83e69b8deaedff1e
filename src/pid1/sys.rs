//! The system calls supervision makes, behind one small trait, so that its turns are
//! unit-tested without root, children or signals (as the lifecycle is, and as tokio
//! tests its process code against a fake): `Kernel` is the real one, over
//! `crate::kernel`; the supervisor's tests bring a scripted one.
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use crate::board::Board;
use crate::helper;
use crate::kernel::{self, Descendant, ProcView, Reaped, Received, SignalInbox, Woke};
use crate::signal_names::Signal;

pub trait Sys {
    /// The loop's one wait: a signal, the bell, or the timeout.
    fn wait(&mut self, bell: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<Woke>;
    /// Whether `signal` waits in the inbox, not yet read.
    fn pending(&self, signal: Signal) -> bool;
    /// Every signal pending, appended to `out`.
    fn take_signals(&mut self, out: &mut Vec<Received>) -> io::Result<()>;
    fn reap_one(&mut self) -> Reaped;
    fn send(&mut self, target: i32, signal: Signal) -> io::Result<()>;
    /// kill(-1, signal): as PID 1, everything else in the namespace.
    fn signal_everything(&mut self, signal: Signal);
    fn descendants(&mut self) -> Vec<Descendant>;
    fn has_children(&mut self) -> bool;
    fn proc_view(&self) -> ProcView;
    fn is_pid1(&self) -> bool;
    /// Whether `process` catches, blocks or ignores `signal`.
    fn handles(&self, process: &Descendant, signal: Signal) -> bool;
    /// The stop signal that stopped the app, if it is stopped.
    fn app_stopped(&self, app: i32) -> Option<Signal>;
    fn stop_with_app(&mut self, app: i32);
    /// Forks a new helper process on `board`; its pid.
    fn start_helper(&mut self, board: &Board) -> io::Result<i32>;
}

/// The real kernel. Owns the signal inbox and what a helper process runs.
pub struct Kernel {
    pub inbox: SignalInbox,
    pub plan: helper::Plan,
}

impl Sys for Kernel {
    fn wait(&mut self, bell: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<Woke> {
        self.inbox.wait(bell, timeout)
    }

    fn pending(&self, signal: Signal) -> bool {
        kernel::signal_pending(signal)
    }

    fn take_signals(&mut self, out: &mut Vec<Received>) -> io::Result<()> {
        self.inbox.take_all(out)
    }

    fn reap_one(&mut self) -> Reaped {
        kernel::reap_one()
    }

    fn send(&mut self, target: i32, signal: Signal) -> io::Result<()> {
        kernel::send(target, signal)
    }

    fn signal_everything(&mut self, signal: Signal) {
        kernel::signal_everything_in_namespace(signal)
    }

    fn descendants(&mut self) -> Vec<Descendant> {
        kernel::descendants()
    }

    fn has_children(&mut self) -> bool {
        kernel::has_children()
    }

    fn proc_view(&self) -> ProcView {
        kernel::proc_view()
    }

    fn is_pid1(&self) -> bool {
        kernel::is_pid1()
    }

    fn handles(&self, process: &Descendant, signal: Signal) -> bool {
        kernel::handles(process, signal)
    }

    fn app_stopped(&self, app: i32) -> Option<Signal> {
        kernel::app_stopped(app)
    }

    fn stop_with_app(&mut self, app: i32) {
        kernel::stop_with_app(app)
    }

    fn start_helper(&mut self, board: &Board) -> io::Result<i32> {
        // The child's own handle on the page and bells, made here so a failure is
        // PID 1's to report.
        let copy = board.duplicate()?;
        // What the helper will read of lifeguard, decided here in PID 1 (a run that
        // never forks a helper never reads it): a fork copies it, and the helper could
        // not (its pid and /proc/self are its own).
        let _ = kernel::proc_view();
        let plan = &self.plan;
        kernel::fork_helper(self.inbox.as_raw_fd(), move || helper::run(plan, copy))
    }
}
