//! Carrying out the keeper's answers: the helper process started, restarted, killed
//! when hung, asked to leave and let go; its deaths counted and said.
#![forbid(unsafe_code)]

use std::time::Instant;

use super::said::status_text;
use super::Supervisor;
use crate::logging;
use crate::pid1::keeper::{Do, LEAVE_LIMIT};
use crate::pid1::lifecycle::AppStatus;
use crate::pid1::sys::Sys;
use crate::signal_names;

impl<S: Sys> Supervisor<S> {
    /// Carries out what the keeper says is due: a (re)start, the kill of a hung
    /// helper, the kill of one that would not leave.
    pub(super) fn keep_the_helper(&mut self) {
        let now = Instant::now();
        let late = std::mem::take(&mut self.woke_late);
        let last_beat = self.board.last_beat();
        if self
            .spared_since
            .is_some_and(|since| last_beat.is_some_and(|beat| beat > since))
        {
            // It beats again: the starved spell is over.
            self.spared_since = None;
        }
        if let Some(what) = self.keeper.tick(last_beat, now, late) {
            if let Do::Kill {
                pid,
                hung_for: Some(silent),
            } = what
            {
                if self.helper_starved(pid) {
                    self.keeper.spare(pid, now);
                    if self.spared_since.is_none() {
                        logging::notice(
                            "the helper process has not beaten, but its thread waits for the CPU (starved at the quota, not hung): it goes on",
                            &[("pid", &pid), ("silent_for", &crate::seconds::measured(silent))],
                        );
                    }
                    self.spared_since = Some(now);
                    return;
                }
            }
            self.keeper_do(what, now);
        }
        if let Some(stuck) = self.keeper.give_up_on_the_killed(now) {
            logging::error(
                if stuck.replaced {
                    "the hung helper process has not died since its SIGKILL (uninterruptible sleep?): it is left to die when it can, and a new one starts beside it"
                } else {
                    "the hung helper process has not died since its SIGKILL, and others linger already: supervision goes on without a helper (no endpoint, app check or metrics)"
                },
                &[("pid", &stuck.pid)],
            );
        }
    }

    /// Whether the helper's beating thread is starved rather than hung
    /// (`starved_not_hung`), from a reading now; false where /proc cannot show it.
    fn helper_starved(&mut self, pid: i32) -> bool {
        let Some(now) = self.sys.helper_sched(pid) else {
            return false;
        };
        starved_not_hung(pid, self.helper_sched.replace((pid, now)), now)
    }

    pub(super) fn keeper_do(&mut self, what: Do, now: Instant) {
        match what {
            Do::Start => match self.sys.start_helper(&self.board) {
                Ok(pid) => {
                    self.keeper.started(pid, now);
                    logging::debug("helper process started", &[("pid", &pid)]);
                }
                Err(err) => {
                    let death = self.keeper.start_failed(now);
                    if death.tell {
                        logging::error(
                            format!("cannot start the helper process: {err}"),
                            &[("again_in", &crate::seconds::human(death.pause))],
                        );
                    }
                }
            },
            Do::Kill { pid, hung_for } => {
                // Its whole process group: the helper leads one of its own (setsid), so
                // anything it started goes with it.
                let _ = self.sys.send(-pid, signal_names::KILL);
                if let Some(silent) = hung_for {
                    logging::error(
                        "the helper process hangs (no heartbeat): killed; a new one starts once it is gone",
                        &[
                            ("pid", &pid),
                            ("silent_for", &crate::seconds::measured(silent)),
                        ],
                    );
                }
            }
            Do::AskToLeave => self.board.ask_helper_to_leave(),
        }
    }

    /// The helper's work is over: the app and everything it left are gone, or the
    /// deadline came. Its last publish may take what is left of the grace deadline, at
    /// most `keeper::LEAVE_LIMIT`.
    pub(super) fn let_the_helper_go(&mut self) {
        let now = Instant::now();
        let left = self
            .lifecycle
            .deadline()
            .map_or(LEAVE_LIMIT, |at| at.saturating_duration_since(now));
        if let Some(what) = self.keeper.let_go(now, left.min(LEAVE_LIMIT)) {
            self.keeper_do(what, now);
        }
    }

    /// The helper process was reaped (not the app's, not a zombie of its).
    pub(super) fn helper_exited(&mut self, pid: i32, status: AppStatus) {
        let Some(death) = self.keeper.exited(pid, Instant::now()) else {
            return;
        };
        logging::debug(
            "helper process ended",
            &[("pid", &pid), ("status", &status_text(status))],
        );
        let Some(death) = death else {
            return; // let go
        };
        self.board.helper_restarted();
        if death.tell {
            logging::error(
                "the helper process ended: supervision goes on, and it is started again (further restarts within a minute are only counted: lifeguard_helper_restarts_total)",
                &[
                    ("status", &status_text(status)),
                    ("again_in", &crate::seconds::human(death.pause)),
                ],
            );
        }
    }
}

/// Starved, not hung: the thread is runnable (waiting for a CPU, as every thread of a
/// cgroup at its quota does) and not spinning (less than a second of CPU since the last
/// reading of the same helper's). Asleep, blocked, in uninterruptible sleep or stopped
/// (SIGSTOP), it is hung (pure).
pub(super) fn starved_not_hung(
    pid: i32,
    before: Option<(i32, crate::kernel::Sched)>,
    now: crate::kernel::Sched,
) -> bool {
    let ran = match before {
        Some((seen, before)) if seen == pid => now.ran.saturating_sub(before.ran),
        _ => std::time::Duration::ZERO,
    };
    now.runnable && ran < std::time::Duration::from_secs(1)
}
