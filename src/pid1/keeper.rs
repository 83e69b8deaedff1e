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
/// Past a look's due time by this much, supervision itself was not running (frozen):
/// a silence then is not the helper's fault.
pub const OVERSLEPT: Duration = Duration::from_secs(2);
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
}

impl Keeper {
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

    /// Whether a helper process is up (not dead, hung-and-killed or leaving).
    #[cfg(test)]
    pub fn is_up(&self) -> bool {
        matches!(self.state, State::Up { .. })
    }

    /// When supervision must wake for the keeper. `last_beat`: the heartbeat's time.
    pub fn deadline(&self, last_beat: Option<Instant>) -> Option<Instant> {
        match self.state {
            State::Up { since, .. } => Some(last_beat.map_or(since, |b| b.max(since)) + HUNG),
            State::Down { at } => Some(at),
            State::Leaving { kill_at, .. } => Some(kill_at),
            State::Off | State::Killed { .. } => None,
        }
    }

    /// Time has passed: a restart due, a hung helper, a leave overdue.
    pub fn tick(&mut self, last_beat: Option<Instant>, now: Instant) -> Option<Do> {
        match self.state {
            State::Down { at } if now >= at => Some(Do::Start),
            State::Up { pid, since } => {
                let beat = last_beat.map_or(since, |b| b.max(since));
                let silent = now.saturating_duration_since(beat);
                if silent >= HUNG + OVERSLEPT {
                    // Supervision woke long after the look was due: it did not run
                    // either (a frozen cgroup, `docker pause`, a restored checkpoint),
                    // so the silence is not the helper's. It gets a look's time again.
                    self.state = State::Up { pid, since: now };
                    return None;
                }
                (silent >= HUNG).then(|| {
                    self.state = State::Killed {
                        pid,
                        restart: Some(since),
                    };
                    Do::Kill {
                        pid,
                        hung_for: Some(silent),
                    }
                })
            }
            State::Leaving { pid, kill_at } if now >= kill_at => {
                self.state = State::Killed { pid, restart: None };
                Some(Do::Kill {
                    pid,
                    hung_for: None,
                })
            }
            _ => None,
        }
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

    /// The helper `pid` was reaped. None when `pid` is not the helper.
    pub fn exited(&mut self, pid: i32, now: Instant) -> Option<Option<Death>> {
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

    /// The app is gone, or the grace deadline came: the helper's work is over. With
    /// figures to publish it is asked to leave (and killed if it does not within
    /// `LEAVE_LIMIT`); otherwise it is killed at once.
    pub fn let_go(&mut self, now: Instant) -> Option<Do> {
        match self.state {
            State::Up { pid, .. } if self.publishes => {
                self.state = State::Leaving {
                    pid,
                    kill_at: now + LEAVE_LIMIT,
                };
                Some(Do::AskToLeave)
            }
            State::Up { pid, .. } => {
                self.state = State::Killed { pid, restart: None };
                Some(Do::Kill {
                    pid,
                    hung_for: None,
                })
            }
            State::Killed { pid, .. } => {
                self.state = State::Killed { pid, restart: None };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn starts_at_once_and_again_after_a_pause_that_doubles_within_a_burst() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        assert_eq!(k.deadline(None), Some(t0));
        assert_eq!(k.tick(None, t0), Some(Do::Start));
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
            assert_eq!(k.tick(None, now), None, "not before the pause");
            now += death.pause;
            assert_eq!(k.deadline(None), Some(now));
            assert_eq!(k.tick(None, now), Some(Do::Start));
            k.started(pid + 1, now);
        }
        assert_eq!(&pauses[..4], &[ms(200), ms(400), ms(800), ms(1600)]);
        assert_eq!(*pauses.last().unwrap(), MAX_PAUSE);
        assert_eq!(told.iter().filter(|t| **t).count(), 1);
        // A minute of health: the next death is a new burst.
        now += HEALTHY;
        k.tick(Some(now), now);
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
    fn a_silent_heartbeat_is_a_hang_and_costs_a_kill_and_a_restart() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0);
        k.started(7, t0);
        // Beats keep it alive; the deadline follows the last beat.
        let beat = t0 + Duration::from_secs(8);
        assert_eq!(k.tick(Some(beat), t0 + HUNG), None);
        assert_eq!(k.deadline(Some(beat)), Some(beat + HUNG));
        // Silent for HUNG: killed, and started again once reaped.
        let now = beat + HUNG;
        assert_eq!(
            k.tick(Some(beat), now),
            Some(Do::Kill {
                pid: 7,
                hung_for: Some(HUNG)
            })
        );
        assert!(!k.is_up());
        assert_eq!(k.deadline(Some(beat)), None, "waits for the reap");
        let death = k.exited(7, now + ms(1)).unwrap().unwrap();
        assert_eq!(death.pause, FIRST_PAUSE);
        assert_eq!(k.tick(None, now + ms(1) + FIRST_PAUSE), Some(Do::Start));
        // A hang after a minute of health is a new burst: the short pause again.
        let later = now + HEALTHY;
        k.started(8, later);
        let beat = later + HEALTHY;
        assert!(matches!(
            k.tick(Some(beat), beat + HUNG),
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
    fn a_supervisor_that_overslept_gives_the_helper_another_look() {
        // PID 1 was frozen with its helper (docker pause): it wakes far past the look
        // it was due for, and the old heartbeat is no evidence of a hang.
        let t0 = Instant::now();
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0);
        k.started(7, t0);
        let woke = t0 + HUNG + OVERSLEPT + Duration::from_secs(60);
        assert_eq!(k.tick(Some(t0), woke), None);
        assert_eq!(k.deadline(Some(t0)), Some(woke + HUNG));
        // Still silent a look later: hung.
        assert!(matches!(
            k.tick(Some(t0), woke + HUNG),
            Some(Do::Kill { pid: 7, .. })
        ));
    }

    #[test]
    fn letting_go_asks_a_publisher_to_leave_and_kills_it_if_it_stays() {
        let t0 = Instant::now();
        let mut k = Keeper::new(true, true, t0);
        k.tick(None, t0);
        k.started(7, t0);
        assert_eq!(k.let_go(t0), Some(Do::AskToLeave));
        assert_eq!(k.deadline(None), Some(t0 + LEAVE_LIMIT));
        assert_eq!(k.tick(None, t0 + ms(100)), None);
        assert_eq!(
            k.tick(None, t0 + LEAVE_LIMIT),
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
        k.tick(None, t0);
        k.started(7, t0);
        assert_eq!(
            k.let_go(t0),
            Some(Do::Kill {
                pid: 7,
                hung_for: None
            })
        );
        assert_eq!(k.exited(7, t0), Some(None));
        // Dead and waiting for its restart when the app goes: stays dead.
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0);
        k.started(8, t0);
        k.exited(8, t0);
        assert_eq!(k.let_go(t0), None);
        assert_eq!(k.tick(None, t0 + MAX_PAUSE), None);
        assert_eq!(k.deadline(None), None);
        // Killed as hung, then let go before the reap: not restarted.
        let mut k = Keeper::new(true, false, t0);
        k.tick(None, t0);
        k.started(9, t0);
        k.tick(None, t0 + HUNG);
        k.let_go(t0 + HUNG);
        assert_eq!(k.exited(9, t0 + HUNG), Some(None));
    }

    #[test]
    fn not_wanted_never_starts() {
        let t0 = Instant::now();
        let mut k = Keeper::new(false, false, t0);
        assert_eq!(k.deadline(None), None);
        assert_eq!(k.tick(None, t0 + HUNG), None);
        assert_eq!(k.let_go(t0), None);
    }
}
