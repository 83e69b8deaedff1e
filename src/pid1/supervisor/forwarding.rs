//! Passing signals on: to the app (its group, or the child alone), SIGCONT after the
//! stop signal, job-control stops made real for an orphaned process group, and a
//! Ctrl-Z at the terminal followed.
#![forbid(unsafe_code)]

use super::Supervisor;
use crate::kernel::{AppTerminal, Descendant};
use crate::logging;
use crate::pid1::lifecycle::Phase;
use crate::pid1::sys::Sys;
use crate::signal_names::{self, Signal};

/// What `forward` did, for its log line.
pub(super) enum Sent {
    /// The app is gone: to the members of its group still running, one by one.
    ToWhatIsLeft(usize),
    ToApp(std::io::Result<()>),
}

impl<S: Sys> Supervisor<S> {
    /// Sends a signal on to the app (its group, or the child alone), and SIGCONT after
    /// the stop signal. Logs nothing: `tell_forwarded` does, once every signal of the
    /// step is out.
    pub(super) fn forward(&mut self, signal: Signal, relay: bool) -> Sent {
        let group = self.lifecycle.config().group;
        if self.lifecycle.phase() == Phase::Exited {
            // The app has been reaped, so its pid (and, once its group is empty, its
            // group id) may belong to an unrelated process by now: signal the members
            // of its group still running one by one, or, with -c, nobody.
            let remaining: Vec<i32> = if group {
                self.group_members().iter().map(|d| d.pid).collect()
            } else {
                Vec::new()
            };
            for pid in &remaining {
                let _ = if relay {
                    self.send_then_continue(*pid, signal)
                } else {
                    self.sys.send(*pid, signal)
                };
            }
            if !remaining.is_empty() {
                self.board.signal_forwarded(signal);
            }
            return Sent::ToWhatIsLeft(remaining.len());
        }
        let target = if group { -self.app_pid } else { self.app_pid };
        let result = if is_job_control(signal) {
            self.stop_for_real(signal, group)
        } else if relay {
            self.send_then_continue(target, signal)
        } else {
            self.sys.send(target, signal)
        };
        if result.is_ok() {
            self.board.signal_forwarded(signal);
        }
        Sent::ToApp(result)
    }

    /// The app runs in a session of its own, so its process group is orphaned, and the
    /// kernel discards TSTP/TTIN/TTOU sent to an orphaned group's members whose default
    /// action would stop them (POSIX; kernel/signal.c, is_current_pgrp_orphaned). So
    /// each member is sent the signal itself if it catches, blocks or ignores it, and
    /// SIGSTOP otherwise, as a terminal's Ctrl-Z would stop a group that is not orphaned: behind
    /// `sh -c`, the shell stops and the app runs its handler.
    pub(super) fn stop_for_real(&mut self, signal: Signal, group: bool) -> std::io::Result<()> {
        let mut result = Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        let mut sent = Vec::new();
        // A member forked while the walk ran is missed by it (kill(-pgid) would not
        // miss it): walk again until a walk finds nobody new, a few times at most.
        for _ in 0..3 {
            let members: Vec<Descendant> = self
                .descendants()
                .into_iter()
                .filter(|d| {
                    if group {
                        d.pgid == self.app_pid
                    } else {
                        d.pid == self.app_pid
                    }
                })
                .filter(|d| !sent.contains(&d.pid))
                .collect();
            if members.is_empty() {
                break;
            }
            for member in members {
                let deliverable = if self.sys.handles(&member, signal) {
                    signal
                } else {
                    signal_names::STOP
                };
                if self.sys.send(member.pid, deliverable).is_ok() {
                    result = Ok(());
                }
                sent.push(member.pid);
            }
        }
        result
    }

    /// Sends a stop signal, then SIGCONT: a stopped process would sit on the stop signal
    /// until the deadline's SIGKILL, and SIGCONT lets it act on it (as systemd does after
    /// its stop signal). Not when the signal itself stops (a stop signal rewritten to
    /// STOP, TSTP, TTIN or TTOU): SIGCONT would undo it.
    pub(super) fn send_then_continue(
        &mut self,
        target: i32,
        signal: Signal,
    ) -> std::io::Result<()> {
        let sent = self.sys.send(target, signal);
        if sent.is_ok() && !is_stop(signal) {
            let _ = self.sys.send(target, signal_names::CONT);
        }
        sent
    }

    /// The live members of the app's process group (all of them are below lifeguard).
    pub(super) fn group_members(&mut self) -> Vec<Descendant> {
        self.descendants()
            .into_iter()
            .filter(|d| d.pgid == self.app_pid)
            .collect()
    }

    /// With the app as the terminal's foreground group, a Ctrl-Z stops the app alone:
    /// lifeguard stops with it so the shell sees its job stopped (kernel::stop_with_app).
    pub(super) fn follow_a_stop_at_the_terminal(&mut self) {
        if self.terminal != AppTerminal::ForegroundGroup || self.lifecycle.phase() == Phase::Exited
        {
            return;
        }
        if let Some(signal) = self
            .sys
            .app_stopped(self.app_pid)
            .filter(|s| is_job_control(*s))
        {
            logging::info(
                "app stopped at the terminal: stopping too",
                &[("signal", &signal)],
            );
            self.sys.stop_with_app(self.app_pid);
            logging::info("continued", &[]);
        }
    }
}

pub(super) fn is_job_control(signal: Signal) -> bool {
    [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU].contains(&signal.0)
}

pub(super) fn is_stop(signal: Signal) -> bool {
    signal.0 == libc::SIGSTOP || is_job_control(signal)
}
