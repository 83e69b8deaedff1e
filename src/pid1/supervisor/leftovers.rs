//! What the app leaves behind: the walks of lifeguard's descendants (the helper
//! processes' subtrees left out), the stop signal to what is left after the app's exit,
//! and the grace deadline's SIGKILL.
#![forbid(unsafe_code)]

use std::time::Duration;

use super::Supervisor;
use crate::kernel::{Descendant, ProcView};
use crate::logging;
use crate::pid1::sys::Sys;
use crate::signal_names::{self, Signal};

impl<S: Sys> Supervisor<S> {
    /// lifeguard's descendants, each helper process and everything below it left out:
    /// they are not the app's.
    pub(super) fn descendants(&mut self) -> Vec<Descendant> {
        let helpers: Vec<i32> = self.keeper.pids().collect();
        self.sys.descendants(&helpers)
    }

    /// Whether anything but the helper processes is left among lifeguard's children;
    /// `None` where /proc cannot tell (the kernel's count includes the helper).
    pub(super) fn app_left_children(&mut self) -> Option<bool> {
        let helpers: Vec<i32> = self.keeper.pids().collect();
        self.sys.children_besides(&helpers)
    }

    pub(super) fn signal_remaining(&mut self, signal: Signal, spare_app_group: bool) {
        // The common end: the app left nothing behind (the helper process is not the
        // app's), so no walk (a cost at every exit). Where /proc cannot tell, go on.
        if self.app_left_children() == Some(false) {
            return;
        }
        if self.sys.proc_view() == ProcView::Blind {
            // No /proc to tell the app's group from the rest: as PID 1 the kernel's view
            // reaches everyone (unless the group must be spared a second SIGTERM, when
            // the deadline's SIGKILL is what is left); as a subreaper, nobody (docs/lifecycle.md).
            if self.sys.is_pid1() && !spare_app_group {
                self.sys.signal_everything(signal);
                self.sys.signal_everything(signal_names::CONT);
                logging::notice(
                    "signalled everything left in the namespace; what still runs then gets SIGKILL",
                    &[("signal", &signal), ("sigkill_in", &self.kill_in())],
                );
            }
            return;
        }
        let mut sent = 0;
        for d in self.descendants() {
            if spare_app_group && d.pgid == self.app_pid {
                continue;
            }
            if self.send_then_continue(d.pid, signal).is_ok() {
                sent += 1;
            }
        }
        if sent > 0 {
            // Said at the default level: lifeguard now waits for these, and a restart
            // that seems slow is explained here.
            logging::notice(
                "signalled what the app left running; what still runs then gets SIGKILL",
                &[
                    ("signal", &signal),
                    ("processes", &sent),
                    ("sigkill_in", &self.kill_in()),
                ],
            );
        }
    }

    /// How long until the lifecycle's next deadline (the leftovers' SIGKILL), for the log.
    fn kill_in(&self) -> String {
        let left = self.lifecycle.deadline().map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(std::time::Instant::now())
        });
        // To the nearest 100 ms: the turn that says it came a moment after the exit.
        let tenths = (left.as_millis() as u64 + 50) / 100;
        crate::seconds::human(Duration::from_millis(tenths * 100)).to_string()
    }

    /// The grace deadline: SIGKILL to everything lifeguard answers for. As PID 1,
    /// `kill(-1)` is the kernel's own view of the namespace and no walk can add to it
    /// (one walk names them for the log where /proc is another namespace's, and none
    /// with lifeguard's own /proc, where nothing but the log would read it). As a
    /// subreaper the descendants are walked again while a walk finds somebody new (one
    /// forked while the previous walk ran), at most 10 times; zombies are passed over
    /// (nothing to kill, and they stay until reaped).
    pub(super) fn kill_all(&mut self) {
        if self.sys.is_pid1() {
            // Named for the log only where /proc is another namespace's (the walk there
            // reads lifeguard's own tree, through its pid in that /proc): taken before
            // the kill, while they still run.
            let named: Option<Vec<i32>> = (self.sys.proc_view() != ProcView::Own).then(|| {
                let mut pids: Vec<i32> = (self.descendants().into_iter())
                    .filter(|d| !d.zombie)
                    .map(|d| d.pid)
                    .collect();
                pids.sort_unstable();
                pids
            });
            self.sys.signal_everything(signal_names::KILL);
            match named {
                None => logging::warn(
                    "grace deadline reached: SIGKILL to every process left in the namespace",
                    &[],
                ),
                Some(pids) => logging::warn(
                    "grace deadline reached: killed what still ran",
                    &[
                        ("processes", &pids.len()),
                        ("pids", &logging::Joined(&pids)),
                    ],
                ),
            }
            return;
        }
        let mut killed: Vec<i32> = Vec::new();
        for _ in 0..10 {
            let mut new = false;
            for d in self.descendants() {
                if d.zombie || killed.binary_search(&d.pid).is_ok() {
                    continue;
                }
                if self.sys.send(d.pid, signal_names::KILL).is_ok() {
                    let at = killed.partition_point(|p| *p < d.pid);
                    killed.insert(at, d.pid);
                    new = true;
                }
            }
            if !new {
                break;
            }
        }
        logging::warn(
            "grace deadline reached: killed what still ran",
            &[
                ("processes", &killed.len()),
                ("pids", &logging::Joined(&killed)),
            ],
        );
    }
}
