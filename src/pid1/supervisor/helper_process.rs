//! Carrying out the keeper's answers: the helper process started, restarted, killed
//! when hung, asked to leave and let go; its deaths counted and said.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

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
            self.starved_from = None;
        }
        // A helper that has said it hangs goes at once: its verdict is its own, and the
        // silence that follows would only add `keeper::HUNG` to the time without
        // sampler, publishers or endpoint (at the peak, where they matter).
        let said_hung = (self.keeper.pid())
            .filter(|&pid| self.board.helper_says_hung(pid))
            .and_then(|pid| self.keeper.said_hung(pid, last_beat, now));
        if let Some(what) = said_hung.or_else(|| self.keeper.tick(last_beat, now, late)) {
            if let Do::Kill {
                pid,
                hung_for: Some(silent),
            } = what
            {
                if self.spare_as_starved(pid, silent, now) {
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

    /// Whether the silent helper `pid` is kept, as starved of CPU rather than hung:
    /// never when it has said itself that a thread of its hangs (its beating thread,
    /// seen from here, is as starved as any at the peak), nor once a starved spell has
    /// lasted `STARVED_LIMIT` (said once); else when its beating thread waits for the
    /// CPU (`starved_not_hung`).
    fn spare_as_starved(&mut self, pid: i32, silent: Duration, now: Instant) -> bool {
        if self.board.helper_says_hung(pid) || !self.helper_starved(pid, now) {
            return false;
        }
        let from = *self.starved_from.get_or_insert(now);
        if now.saturating_duration_since(from) >= STARVED_LIMIT {
            logging::error(
                "the helper process has been starved of CPU without a heartbeat for too long: it is replaced anyway",
                &[
                    ("pid", &pid),
                    ("starved_for", &crate::seconds::measured(now - from)),
                ],
            );
            self.starved_from = None;
            return false;
        }
        self.keeper.spare(pid, now);
        if self.spared_since.is_none() {
            logging::notice(
                "the helper process has not beaten, but its thread waits for the CPU (starved at the quota, not hung): it goes on",
                &[("pid", &pid), ("silent_for", &crate::seconds::measured(silent))],
            );
        }
        self.spared_since = Some(now);
        true
    }

    /// Whether the helper's beating thread is starved rather than hung
    /// (`starved_not_hung`), from a reading now; false where /proc cannot show it.
    fn helper_starved(&mut self, pid: i32, at: Instant) -> bool {
        let Some(now) = self.sys.helper_sched(pid) else {
            return false;
        };
        starved_not_hung(pid, self.helper_sched.replace((pid, now, at)), now, at)
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

/// The longest starved spell a silent helper is kept through: past it the helper is
/// replaced anyway, in case what looked like starvation was a hang (a new helper at
/// the peak costs a start and the sampler's state, but a hung one costs every figure
/// for as long as the peak lasts). Longer than a peak's minute.
pub(super) const STARVED_LIMIT: Duration = Duration::from_secs(120);

/// Starved, not hung: the thread is not spinning (less than a second of CPU since the
/// last reading of the same helper's), and it waits for the CPU — runnable now, or
/// waiting on a run queue for at least half the time since that reading (the kernel
/// adds a wait to the figure when it ends, so a thread that wakes, waits its turn, runs
/// a moment and sleeps again shows here). Asleep, blocked, in uninterruptible sleep or
/// stopped (SIGSTOP) without such waits, it is hung (pure).
pub(super) fn starved_not_hung(
    pid: i32,
    before: Option<(i32, crate::kernel::Sched, Instant)>,
    now: crate::kernel::Sched,
    at: Instant,
) -> bool {
    let before = before.filter(|(seen, _, _)| *seen == pid);
    let ran = before.map_or(Duration::ZERO, |(_, before, _)| {
        now.ran.saturating_sub(before.ran)
    });
    if ran >= Duration::from_secs(1) {
        return false;
    }
    let mostly_waiting = before.is_some_and(|(_, before, then)| {
        let waited = now.waited.saturating_sub(before.waited);
        let span = at.saturating_duration_since(then);
        !span.is_zero() && waited >= span / 2
    });
    now.runnable || mostly_waiting
}
