//! Keeping the helper process, as a pure state machine beside the lifecycle: when to
//! start it, when a silent heartbeat means it hangs and must be killed, how long to
//! pause before starting it again, and when to let it go for good. No I/O: supervision
//! carries out what it answers and feeds it what happened; every rule is a row of the
//! table test below.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

/// The first pause before a helper that died is started again; it doubles with each
/// death that follows soon after, up to `MAX_PAUSE`, so a helper that dies at once
/// every time costs a fork every 30 s, not a hot loop.
pub const FIRST_PAUSE: Duration = Duration::from_millis(200);
pub const MAX_PAUSE: Duration = Duration::from_secs(30);
/// A helper that lived this long was healthy: the next death starts a new burst (the
/// pause back to `FIRST_PAUSE`, and a log line again).
pub const HEALTHY: Duration = Duration::from_secs(60);
/// How long after the app's spawn the first helper is forked: a command that is over
/// by then (a migration, a one-shot job, `true`) never pays for a helper process (a
/// fork, and a kill and a reap at its exit: about 0.6 ms), and a service loses nothing
/// it would notice (its endpoint answers 10 ms later; connections wait in the backlog
/// PID 1 holds).
pub const FIRST_START: Duration = Duration::from_millis(10);
/// A heartbeat older than this is a hung helper.
pub const HUNG: Duration = Duration::from_secs(10);
/// Woken this much later than it asked to be, supervision itself was not running (a
/// frozen cgroup, `docker pause`, a restored checkpoint, a host that stalled): a
/// silence of the helper's over that time is no evidence of a hang.
pub const OVERSLEPT: Duration = Duration::from_secs(1);
/// How long a killed helper may take to be reaped before a new one starts anyway: a
/// process in uninterruptible sleep (D) takes SIGKILL only when it leaves it, which may
/// be never (a hung NFS or FUSE read).
pub const REAP_WAIT: Duration = Duration::from_secs(1);
/// Killed helpers that never died that lifeguard will start new ones beside; past
/// that it goes on without a helper.
const LINGERING_MAX: usize = 4;
/// How long a helper asked to leave may take for its last publish.
pub const LEAVE_LIMIT: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Not wanted (no endpoint, check, sampler or publisher), or let go for good.
    Off,
    Up {
        pid: i32,
        since: Instant,
    },
    /// Killed (hung, or let go); its exit has not been reaped yet.
    Killed {
        pid: i32,
        /// Started again once reaped, as a helper that was up since then (None: let go).
        restart: Option<Instant>,
        /// When the kill was sent: a helper not reaped by `REAP_WAIT` after it is left
        /// to linger, and a new one starts.
        at: Instant,
    },
    /// Dead; started again at `at`.
    Down {
        at: Instant,
    },
    /// Asked to publish its last and leave; killed at `kill_at` if still there.
    Leaving {
        pid: i32,
        kill_at: Instant,
    },
}

/// What supervision is to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Do {
    /// Fork a new helper (then `started` or `start_failed`).
    Start,
    /// SIGKILL the helper.
    Kill {
        pid: i32,
        hung_for: Option<Duration>,
    },
    /// Ask the helper to publish its last and leave (Board::ask_helper_to_leave).
    AskToLeave,
}

/// What supervision may say of a death, for the log: the first of a burst is told,
/// the rest only counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Death {
    pub pause: Duration,
    pub tell: bool,
}

#[derive(Clone, Debug)]
pub struct Keeper {
    state: State,
    pause: Duration,
    /// Whether the helper has figures to publish before it leaves.
    publishes: bool,
    /// The current burst of deaths has been told.
    told: bool,
    /// Helpers killed that did not die (uninterruptible sleep): reaped whenever they do,
    /// never taken for the app's.
    lingering: Vec<i32>,
}

/// What `tick` found about a killed helper that did not die.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lingering {
    pub pid: i32,
    /// Whether a new helper starts beside it (false: too many linger already).
    pub replaced: bool,
}

impl Keeper {
    /// SIGKILL to the helper, not to be started again.
    fn kill_for_good(&mut self, pid: i32, now: Instant) -> Option<Do> {
        self.state = State::Killed {
            pid,
            restart: None,
            at: now,
        };
        Some(Do::Kill {
            pid,
            hung_for: None,
        })
    }

    /// `wanted`: whether a helper runs at all; the first is started at `start_at`.
    pub fn new(wanted: bool, publishes: bool, start_at: Instant) -> Keeper {
        Keeper {
            state: if wanted {
                State::Down { at: start_at }
            } else {
                State::Off
            },
            pause: FIRST_PAUSE,
            publishes,
            told: false,
            lingering: Vec::new(),
        }
    }

    /// The helper's pid while one runs (reaping tells it from the app's processes).
    pub fn pid(&self) -> Option<i32> {
        match self.state {
            State::Up { pid, .. } | State::Killed { pid, .. } | State::Leaving { pid, .. } => {
                Some(pid)
            }
            State::Off | State::Down { .. } => None,
        }
    }

    /// Every helper process that may still be alive: the current one and those killed
    /// that did not die. None of them, nor anything below them, is the app's.
    pub fn pids(&self) -> impl Iterator<Item = i32> + '_ {
        self.pid().into_iter().chain(self.lingering.iter().copied())
    }

    /// Whether no helper process runs or will again (none wanted, or let go for good):
    /// supervision then waits for signals alone.
    pub fn is_off(&self) -> bool {
        self.state == State::Off && self.lingering.is_empty()
    }

    /// Whether a helper process is up (not dead, hung-and-killed or leaving).
    #[cfg(test)]
    pub fn is_up(&self) -> bool {
        matches!(self.state, State::Up { .. })
    }

    /// When supervision must wake for the keeper. `last_beat`: the heartbeat's time
    /// (the Board gives none that lies in the future).
    pub fn deadline(&self, last_beat: Option<Instant>) -> Option<Instant> {
        match self.state {
            State::Up { since, .. } => Some(last_sign(since, last_beat) + HUNG),
            State::Down { at } => Some(at),
            State::Leaving { kill_at, .. } => Some(kill_at),
            State::Killed {
                restart: Some(_),
                at,
                ..
            } => Some(at + REAP_WAIT),
            State::Off | State::Killed { .. } => None,
        }
    }

    /// Time has passed: a restart due, a hung helper, a leave overdue, a killed helper
    /// that does not die. `late`: how much later than it asked supervision's own wait
    /// returned; a late wake means supervision was not running either, and the
    /// helper's silence over that time is not held against it.
    pub fn tick(&mut self, last_beat: Option<Instant>, now: Instant, late: Duration) -> Option<Do> {
        match self.state {
            State::Down { at } if now >= at => Some(Do::Start),
            State::Up { pid, .. } if late >= OVERSLEPT => {
                // It gets a look's time again, from now.
                self.state = State::Up { pid, since: now };
                None
            }
            State::Up { pid, since } => {
                let silent = now.saturating_duration_since(last_sign(since, last_beat));
                (silent >= HUNG).then(|| self.kill_hung(pid, since, silent, now))
            }
            State::Leaving { pid, kill_at } if now >= kill_at => self.kill_for_good(pid, now),
            _ => None,
        }
    }

    /// Helper `pid` has said itself that one of its threads hangs (on the Board, before
    /// it stopped beating): killed now, without waiting out `HUNG` of silence. Nothing
    /// if `pid` is not the helper that is up.
    pub fn said_hung(&mut self, pid: i32, last_beat: Option<Instant>, now: Instant) -> Option<Do> {
        let State::Up { pid: up, since } = self.state else {
            return None;
        };
        let silent = now.saturating_duration_since(last_sign(since, last_beat));
        (up == pid).then(|| self.kill_hung(pid, since, silent, now))
    }

    /// Helper `pid`, up since `since` and silent for `silent`, is hung: killed, and
    /// started again once reaped.
    fn kill_hung(&mut self, pid: i32, since: Instant, silent: Duration, now: Instant) -> Do {
        self.state = State::Killed {
            pid,
            restart: Some(since),
            at: now,
        };
        Do::Kill {
            pid,
            hung_for: Some(silent),
        }
    }

    /// The helper `tick` just called hung has a beating thread that waits for the CPU:
    /// starved at the peak (its cgroup at its quota), not hung. A new process would wait
    /// alike, spend the quota on starting and lose the sampler's state, so it is kept,
    /// and gets another look's time from `now`. Nothing if `pid` is not the one just
    /// called hung.
    pub fn spare(&mut self, pid: i32, now: Instant) {
        if let State::Killed {
            pid: killed,
            restart: Some(_),
            at,
        } = self.state
        {
            if killed == pid && at == now {
                self.state = State::Up { pid, since: now };
            }
        }
    }

    /// A killed helper not reaped within `REAP_WAIT` (stuck in uninterruptible sleep):
    /// it is left to linger, reaped whenever it dies, and a new one starts after the
    /// pause, unless too many linger already. None while there is no such helper.
    pub fn give_up_on_the_killed(&mut self, now: Instant) -> Option<Lingering> {
        let State::Killed {
            pid,
            restart: Some(since),
            at,
        } = self.state
        else {
            return None;
        };
        if now < at + REAP_WAIT {
            return None;
        }
        self.lingering.push(pid);
        let replaced = self.lingering.len() <= LINGERING_MAX;
        if replaced {
            self.schedule(now, now.saturating_duration_since(since));
        } else {
            self.state = State::Off;
        }
        Some(Lingering { pid, replaced })
    }

    pub fn started(&mut self, pid: i32, now: Instant) {
        if matches!(self.state, State::Down { .. }) {
            self.state = State::Up { pid, since: now };
        }
    }

    /// The fork failed (a pids limit, say): try again after the next pause.
    pub fn start_failed(&mut self, now: Instant) -> Death {
        self.schedule(now, Duration::ZERO)
    }

    /// The helper `pid` was reaped. None when `pid` is no helper; Some(None) for one
    /// that is not started again (let go, or one that lingered).
    pub fn exited(&mut self, pid: i32, now: Instant) -> Option<Option<Death>> {
        if let Some(at) = self.lingering.iter().position(|p| *p == pid) {
            self.lingering.swap_remove(at);
            return Some(None);
        }
        if self.pid() != Some(pid) {
            return None;
        }
        Some(match self.state {
            State::Up { since, .. } => Some(self.schedule(now, now.duration_since(since))),
            State::Killed {
                restart: Some(since),
                ..
            } => Some(self.schedule(now, now.duration_since(since))),
            _ => {
                self.state = State::Off;
                None
            }
        })
    }

    /// The app and what it left are gone, or the grace deadline came: the helper's work
    /// is over. With figures to publish it is asked to leave, and killed if it has not
    /// within `limit` (at most `LEAVE_LIMIT`: what is left of the grace deadline, so the
    /// last publish never outlasts the orchestrator's patience); otherwise it is killed
    /// at once.
    pub fn let_go(&mut self, now: Instant, limit: Duration) -> Option<Do> {
        match self.state {
            State::Up { pid, .. } if self.publishes && !limit.is_zero() => {
                self.state = State::Leaving {
                    pid,
                    kill_at: now + limit.min(LEAVE_LIMIT),
                };
                Some(Do::AskToLeave)
            }
            State::Up { pid, .. } | State::Leaving { pid, .. } if limit.is_zero() => {
                self.kill_for_good(pid, now)
            }
            State::Up { pid, .. } => self.kill_for_good(pid, now),
            State::Killed { pid, at, .. } => {
                self.state = State::Killed {
                    pid,
                    restart: None,
                    at,
                };
                None
            }
            State::Down { .. } => {
                self.state = State::Off;
                None
            }
            State::Off | State::Leaving { .. } => None,
        }
    }

    /// A death: the pause before the next start, doubled within a burst; a helper that
    /// lived `HEALTHY` starts a new burst.
    fn schedule(&mut self, now: Instant, lived: Duration) -> Death {
        if lived >= HEALTHY {
            self.pause = FIRST_PAUSE;
            self.told = false;
        }
        let death = Death {
            pause: self.pause,
            tell: !self.told,
        };
        self.told = true;
        self.state = State::Down {
            at: now + self.pause,
        };
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        death
    }
}

/// The helper's last sign of life: its last beat, or its start (`since`) if it has not
/// beaten since then.
fn last_sign(since: Instant, last_beat: Option<Instant>) -> Instant {
    last_beat.map_or(since, |b| b.max(since))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZERO: Duration = Duration::ZERO;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn starts_at_once_and_again_after_a_pause_that_doubles_within_a_burst() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        assert_eq!(k.deadline(None), Some(t0));
        assert_eq!(k.tick(None, t0, ZERO), Some(Do::Start));
        k.started(10, t0);
        assert_eq!(k.pid(), Some(10));
        // Reaping something else is not the helper's business.
        assert_eq!(k.exited(11, t0), None);
        // Dies at once, again and again: 0.2 s, 0.4 s, 0.8 s ... 30 s, told once.
        let mut now = t0 + ms(5);
        let mut pauses = Vec::new();
        let mut told = Vec::new();
        for pid in 10..22 {
            let death = k.exited(pid, now).unwrap().unwrap();
            pauses.push(death.pause);
            told.push(death.tell);
            assert_eq!(k.tick(None, now, ZERO), None, "not before the pause");
            now += death.pause;
            assert_eq!(k.deadline(None), Some(now));
            assert_eq!(k.tick(None, now, ZERO), Some(Do::Start));
            k.started(pid + 1, now);
        }
        assert_eq!(&pauses[..4], &[ms(200), ms(400), ms(800), ms(1600)]);
        assert_eq!(*pauses.last().unwrap(), MAX_PAUSE);
        assert_eq!(told.iter().filter(|t| **t).count(), 1);
        // A minute of health: the next death is a new burst.
        now += HEALTHY;
        k.tick(Some(now), now, ZERO);
        let death = k.exited(22, now).unwrap().unwrap();
        assert_eq!(
            death,
            Death {
                pause: FIRST_PAUSE,
                tell: true
            }
        );
    }

    #[test]
    fn a_starved_helper_is_spared_and_looked_at_again_a_hang_later() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(7, t0);
        let silent = t0 + HUNG;
        assert_eq!(
            k.tick(Some(t0), silent, ZERO),
            Some(Do::Kill {
                pid: 7,
                hung_for: Some(HUNG)
            })
        );
        // Its beating thread waits to run: kept, and nothing more for a look's time.
        k.spare(7, silent);
        assert!(k.is_up());
        assert_eq!(k.tick(Some(t0), silent + HUNG - ms(1), ZERO), None);
        // Still silent then (and no longer spared): killed.
        assert!(matches!(
            k.tick(Some(t0), silent + HUNG, ZERO),
            Some(Do::Kill { pid: 7, .. })
        ));
        // Another pid, or a later instant, spares nothing.
        k.spare(8, silent + HUNG);
        k.spare(7, silent + HUNG + ms(1));
        assert!(!k.is_up());
    }

    #[test]
    fn a_silent_heartbeat_is_a_hang_and_costs_a_kill_and_a_restart() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(7, t0);
        // Beats keep it alive; the deadline follows the last beat.
        let beat = t0 + Duration::from_secs(8);
        assert_eq!(k.tick(Some(beat), t0 + HUNG, ZERO), None);
        assert_eq!(k.deadline(Some(beat)), Some(beat + HUNG));
        // Silent for HUNG: killed, and started again once reaped.
        let now = beat + HUNG;
        assert_eq!(
            k.tick(Some(beat), now, ZERO),
            Some(Do::Kill {
                pid: 7,
                hung_for: Some(HUNG)
            })
        );
        assert!(!k.is_up());
        assert_eq!(
            k.deadline(Some(beat)),
            Some(now + REAP_WAIT),
            "waits for the reap, a while"
        );
        let death = k.exited(7, now + ms(1)).unwrap().unwrap();
        assert_eq!(death.pause, FIRST_PAUSE);
        assert_eq!(
            k.tick(None, now + ms(1) + FIRST_PAUSE, ZERO),
            Some(Do::Start)
        );
        // A hang after a minute of health is a new burst: the short pause again.
        let later = now + HEALTHY;
        k.started(8, later);
        let beat = later + HEALTHY;
        assert!(matches!(
            k.tick(Some(beat), beat + HUNG, ZERO),
            Some(Do::Kill { .. })
        ));
        let death = k.exited(8, beat + HUNG).unwrap().unwrap();
        assert_eq!(
            death,
            Death {
                pause: FIRST_PAUSE,
                tell: true
            }
        );
    }

    #[test]
    fn a_helper_that_says_it_hangs_is_killed_at_once_and_started_again() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(7, t0);
        let beat = t0 + Duration::from_secs(4);
        // Another pid's verdict (a helper already replaced) says nothing of this one.
        assert_eq!(k.said_hung(6, Some(beat), beat + ms(1)), None);
        assert!(k.is_up());
        // Its own: killed now, long before HUNG of silence, and started again once reaped.
        let now = beat + Duration::from_secs(1);
        assert_eq!(
            k.said_hung(7, Some(beat), now),
            Some(Do::Kill {
                pid: 7,
                hung_for: Some(Duration::from_secs(1))
            })
        );
        assert!(!k.is_up());
        assert_eq!(k.said_hung(7, Some(beat), now), None, "killed once");
        let death = k.exited(7, now + ms(1)).unwrap().unwrap();
        assert_eq!(
            k.tick(None, now + ms(1) + death.pause, ZERO),
            Some(Do::Start)
        );
    }

    #[test]
    fn a_supervisor_that_woke_late_gives_the_helper_another_look() {
        // PID 1 was frozen with its helper (docker pause): its wait returned long after
        // the look it was due for, and the old heartbeat is no evidence of a hang.
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(7, t0);
        let woke = t0 + HUNG + Duration::from_secs(60);
        assert_eq!(k.tick(Some(t0), woke, Duration::from_secs(60)), None);
        assert_eq!(k.deadline(Some(t0)), Some(woke + HUNG));
        // Still silent a look later, PID 1 on time: hung.
        assert!(matches!(
            k.tick(Some(t0), woke + HUNG, ZERO),
            Some(Do::Kill { pid: 7, .. })
        ));
        // Frozen only a little longer than a look (the case a rule on the silence
        // alone missed): judged by how late PID 1 woke, not killed.
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(8, t0);
        let woke = t0 + HUNG + ms(500);
        assert_eq!(k.tick(Some(t0), woke, ms(1500)), None);
        // On time, silent for HUNG: killed.
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(9, t0);
        assert!(matches!(
            k.tick(Some(t0), t0 + HUNG + ms(500), ms(500)),
            Some(Do::Kill { pid: 9, .. })
        ));
    }

    #[test]
    fn a_killed_helper_that_does_not_die_lingers_and_a_new_one_starts_beside_it() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(7, t0);
        let killed = t0 + HUNG;
        assert!(matches!(
            k.tick(None, killed, ZERO),
            Some(Do::Kill { pid: 7, .. })
        ));
        assert_eq!(k.deadline(None), Some(killed + REAP_WAIT));
        assert_eq!(k.give_up_on_the_killed(killed + ms(10)), None, "not yet");
        // Not reaped in time (uninterruptible sleep): it lingers, a new one follows.
        let gave_up = killed + REAP_WAIT;
        assert_eq!(
            k.give_up_on_the_killed(gave_up),
            Some(Lingering {
                pid: 7,
                replaced: true
            })
        );
        assert_eq!(k.pid(), None);
        assert_eq!(k.pids().collect::<Vec<_>>(), vec![7]);
        assert_eq!(k.tick(None, gave_up + FIRST_PAUSE, ZERO), Some(Do::Start));
        k.started(8, gave_up + FIRST_PAUSE);
        assert_eq!(k.pids().collect::<Vec<_>>(), vec![8, 7]);
        // The old one dies at last: reaped, not restarted, and the new one stays.
        assert_eq!(k.exited(7, gave_up + HUNG), Some(None));
        assert_eq!(k.pid(), Some(8));
        assert!(k.is_up());
        // A heartbeat from the future is no beat (the Board gives none): the look
        // counts from the start, and the hang is found.
        assert!(matches!(
            k.tick(None, gave_up + FIRST_PAUSE + HUNG, ZERO),
            Some(Do::Kill { pid: 8, .. })
        ));
    }

    #[test]
    fn past_a_few_lingering_helpers_supervision_goes_on_without_one() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        let mut now = t0;
        for pid in 1..=(LINGERING_MAX as i32 + 1) {
            assert_eq!(k.tick(None, now, ZERO), Some(Do::Start), "pid {pid}");
            k.started(pid, now);
            now += HUNG;
            assert!(matches!(k.tick(None, now, ZERO), Some(Do::Kill { .. })));
            now += REAP_WAIT;
            let lingering = k.give_up_on_the_killed(now).unwrap();
            assert_eq!(lingering.replaced, pid as usize <= LINGERING_MAX);
            now += MAX_PAUSE;
        }
        assert_eq!(k.tick(None, now, ZERO), None);
        assert_eq!(k.deadline(None), None);
    }

    #[test]
    fn letting_go_asks_a_publisher_to_leave_and_kills_it_if_it_stays() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, true, t0);
        k.tick(None, t0, ZERO);
        k.started(7, t0);
        assert_eq!(k.let_go(t0, LEAVE_LIMIT), Some(Do::AskToLeave));
        assert_eq!(k.deadline(None), Some(t0 + LEAVE_LIMIT));
        assert_eq!(k.tick(None, t0 + ms(100), ZERO), None);
        assert_eq!(
            k.tick(None, t0 + LEAVE_LIMIT, ZERO),
            Some(Do::Kill {
                pid: 7,
                hung_for: None
            })
        );
        // Reaped: no restart, ever.
        assert_eq!(k.exited(7, t0 + LEAVE_LIMIT), Some(None));
        assert_eq!(k.deadline(None), None);
        assert_eq!(k.pid(), None);
    }

    #[test]
    fn letting_go_kills_a_helper_with_nothing_to_publish_and_cancels_a_restart() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(7, t0);
        assert_eq!(
            k.let_go(t0, LEAVE_LIMIT),
            Some(Do::Kill {
                pid: 7,
                hung_for: None
            })
        );
        assert_eq!(k.exited(7, t0), Some(None));
        // Dead and waiting for its restart when the app goes: stays dead.
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(8, t0);
        k.exited(8, t0);
        assert_eq!(k.let_go(t0, LEAVE_LIMIT), None);
        assert_eq!(k.tick(None, t0 + MAX_PAUSE, ZERO), None);
        assert_eq!(k.deadline(None), None);
        // Killed as hung, then let go before the reap: not restarted.
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0, ZERO);
        k.started(9, t0);
        k.tick(None, t0 + HUNG, ZERO);
        k.let_go(t0 + HUNG, LEAVE_LIMIT);
        assert_eq!(k.exited(9, t0 + HUNG), Some(None));
    }

    #[test]
    fn the_last_publish_gets_what_is_left_of_the_grace_deadline_at_most() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, true, t0);
        k.tick(None, t0, ZERO);
        k.started(7, t0);
        assert_eq!(k.let_go(t0, ms(800)), Some(Do::AskToLeave));
        assert_eq!(k.deadline(None), Some(t0 + ms(800)));
        // Nothing left of it: killed at once.
        let mut k = Keeper::new(true, true, t0);
        k.tick(None, t0, ZERO);
        k.started(8, t0);
        assert_eq!(
            k.let_go(t0, ZERO),
            Some(Do::Kill {
                pid: 8,
                hung_for: None
            })
        );
    }

    #[test]
    fn not_wanted_never_starts() {
        let t0 = Instant::now();
        let mut k = Keeper::new(false, false, t0);
        assert_eq!(k.deadline(None), None);
        assert_eq!(k.tick(None, t0 + HUNG, ZERO), None);
        assert_eq!(k.let_go(t0, LEAVE_LIMIT), None);
    }
}
