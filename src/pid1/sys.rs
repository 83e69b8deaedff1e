//! The system calls supervision makes, behind one small trait, so that its turns are
//! unit-tested without root, children or signals (as the lifecycle is, and as tokio
//! tests its process code against a fake): `Kernel` is the real one, over
//! `crate::kernel`; the supervisor's tests bring a scripted one.
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;

use super::HelperProcess;
use crate::board::Board;
use crate::kernel::{self, Descendant, ProcView, Reaped, Received, SignalInbox, Woke};
use crate::signal_names::Signal;

pub trait Sys {
    /// The loop's one wait: a signal, the bell, or the timeout.
    fn wait(&mut self, bell: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<Woke>;
    /// The loop's wait with no helper process (no bell): a signal, taken in the same
    /// call, or None at the timeout.
    fn wait_for_signal(&mut self, timeout: Option<Duration>) -> io::Result<Option<Received>>;
    /// Whether `signal` waits in the inbox, not yet read.
    fn pending(&self, signal: Signal) -> bool;
    /// Every signal pending, appended to `out`.
    fn take_signals(&mut self, out: &mut Vec<Received>) -> io::Result<()>;
    fn reap_one(&mut self) -> Reaped;
    fn send(&mut self, target: i32, signal: Signal) -> io::Result<()>;
    /// kill(-1, signal): as PID 1, everything else in the namespace.
    fn signal_everything(&mut self, signal: Signal);
    /// lifeguard's descendants, but those in `prune` and everything below them.
    fn descendants(&mut self, prune: &[i32]) -> Vec<Descendant>;
    /// Whether lifeguard has a child besides those in `besides`; `None`: cannot be told
    /// (a /proc without lifeguard, or an outer one without child lists).
    fn children_besides(&mut self, besides: &[i32]) -> Option<bool>;
    fn proc_view(&self) -> ProcView;
    fn is_pid1(&self) -> bool;
    /// Whether `process` catches, blocks or ignores `signal`.
    fn handles(&self, process: &Descendant, signal: Signal) -> bool;
    /// The stop signal that stopped the app, if it is stopped.
    fn app_stopped(&self, app: i32) -> Option<Signal>;
    fn stop_with_app(&mut self, app: i32);
    /// Forks a new helper process on `board`; its pid.
    fn start_helper(&mut self, board: &Board) -> io::Result<i32>;
    /// Makes the ready port listen (`open`) or refuse; only called on a change.
    fn set_ready_port(&mut self, open: bool) -> io::Result<()>;
    /// The scheduling figures of the helper process `pid`'s main thread (the one that
    /// beats), where this /proc can show them; None otherwise.
    fn helper_sched(&self, pid: i32) -> Option<kernel::Sched>;
}

/// The real kernel. Owns the signal inbox and what a helper process runs.
pub struct Kernel {
    pub inbox: SignalInbox,
    pub helper: Box<dyn HelperProcess>,
    /// `--ready-port`'s sockets.
    pub ready_port: Option<kernel::ReadyPort>,
}

impl Sys for Kernel {
    fn wait(&mut self, bell: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<Woke> {
        self.inbox.wait(bell, timeout)
    }

    fn wait_for_signal(&mut self, timeout: Option<Duration>) -> io::Result<Option<Received>> {
        self.inbox.wait_for_signal(timeout)
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

    fn descendants(&mut self, prune: &[i32]) -> Vec<Descendant> {
        kernel::descendants(prune)
    }

    fn children_besides(&mut self, besides: &[i32]) -> Option<bool> {
        kernel::children_besides(besides)
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
        let copy = board.for_helper()?;
        // What the helper will read of lifeguard, decided here in PID 1 (a run that
        // never forks a helper never reads it): a fork copies it, and the helper could
        // not (its pid and /proc/self are its own).
        let _ = kernel::proc_view();
        let helper = &*self.helper;
        // What the helper keeps of the descriptors a fork gives it: its own handles on
        // the Board's bells and its sockets. Everything else is PID 1's, or the app's
        // (closed in the helper).
        let keep: Vec<RawFd> = copy.fds().chain(helper.keeps()).collect();
        kernel::fork_helper(&keep, move || helper.run(copy))
    }

    fn set_ready_port(&mut self, open: bool) -> io::Result<()> {
        match &mut self.ready_port {
            Some(port) => port.set(open).map(drop),
            None => Ok(()),
        }
    }

    fn helper_sched(&self, pid: i32) -> Option<kernel::Sched> {
        // By pid only in lifeguard's own /proc; elsewhere the pid is another's.
        (kernel::proc_view() == ProcView::Own)
            .then(|| kernel::main_thread_of(pid))
            .flatten()
    }
}
