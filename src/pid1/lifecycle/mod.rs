//! The lifecycle as a pure state machine: `on(event, now) -> actions` and `deadline()`;
//! no I/O, so every rule is a row in the table test below. The phases, the drain and
//! its hold, and the grace deadline are described in docs/lifecycle.md.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

pub use crate::board::{Look, Phase};
pub use crate::settings::Lifecycle as Config;
use crate::signal_names::{Signal, KILL, TERM};

/// How long lifeguard keeps reaping after it has sent SIGKILL before it gives up on a
/// process stuck in the kernel (uninterruptible sleep) and exits anyway: it must never
/// hang after the app is gone.
pub const KILL_WAIT: Duration = Duration::from_secs(2);

/// How often the hold looks at the sampler's latest traffic figures (the sampler takes
/// one every 100 ms while the drain runs).
pub const LOOK_EVERY: Duration = Duration::from_millis(100);

/// A hold that has seen no figure newer than this is blind: the sampler is late (starved
/// of CPU at the peak, stopped, restarting) or gone. Late is not quiet: a blind hold
/// goes on holding, to `--drain-max` at the latest, and says so once.
pub const LOOK_STALE: Duration = Duration::from_secs(1);

/// `now + d`, saturating instead of panicking: a deadline beyond the clock's range is
/// as good as never (the CLI caps durations, this keeps PID 1 from ever panicking).
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(u32::MAX as u64)))
        .unwrap_or(now)
}

/// How the app (the direct child) ended, as `waitpid` reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppStatus {
    Exited(u8),
    Killed(Signal),
}

impl AppStatus {
    /// Decodes a raw `waitpid` status (exit or death by any signal, real-time included).
    pub fn from_wait(status: libc::c_int) -> AppStatus {
        if libc::WIFSIGNALED(status) {
            AppStatus::Killed(Signal(libc::WTERMSIG(status)))
        } else {
            AppStatus::Exited(libc::WEXITSTATUS(status) as u8)
        }
    }

    /// The shell convention: the exit code, or 128+N for death by signal N.
    pub fn code(self) -> u8 {
        match self {
            AppStatus::Exited(code) => code,
            AppStatus::Killed(sig) => (128 + sig.0) as u8,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A signal lifeguard itself received (SIGCHLD is turned into reaping, not this).
    Signal(Signal),
    /// The app check passed for the first time.
    AppReady,
    AppExited(AppStatus),
    /// `waitpid` says lifeguard has no children left: nothing it answers for still runs.
    NoChildrenLeft,
    /// Nothing happened but time passed (the deadline's timer fired).
    Tick,
    /// The answer to `Action::LookAtTraffic`: the sampler's latest figures, `None` when
    /// it has published none.
    Traffic(Option<Look>),
}

/// Why the drain ended and the stop signal went (or the app went first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainEnd {
    /// The drain delay ran out (no `--inflight-port`, so no hold).
    Delay,
    /// The port was quiet: nothing in flight, and no new request for `quiet_for`.
    Quiet { quiet_for: Duration },
    /// `--drain-max` after the SIGTERM came first.
    DrainMax,
    /// A second SIGTERM.
    SecondTerm,
    /// The app exited during the drain.
    AppExited,
    /// `--drain-max` came while the hold was blind: no fresh figure to tell whether
    /// requests were still in flight.
    Blind,
}

/// Why a hold cannot see the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blindness {
    /// No figure taken in the last `LOOK_STALE` (the helper is starved, stopped,
    /// restarting or gone).
    Late,
    /// The sampler says it cannot read the port's sockets (no sock_diag).
    CannotRead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send to the app (its group, or the child alone). `relay` marks the stop signal
    /// relayed at the end of the drain, for the log.
    Forward {
        signal: Signal,
        relay: bool,
    },
    /// The app has exited: signal what is left of its group and every other descendant;
    /// `spare_app_group` when the group already got the stop signal.
    SignalRemaining {
        signal: Signal,
        spare_app_group: bool,
    },
    /// The grace deadline: SIGKILL every process lifeguard answers for.
    KillAll,
    /// Read the sampler's latest traffic figures and answer with `Event::Traffic`.
    LookAtTraffic,
    /// The drain delay is over and the port is not quiet: the stop signal is held.
    HoldBegan {
        in_flight: u64,
        /// The stop signal goes at the latest this long from now (`--drain-max`).
        at_the_latest: Duration,
    },
    /// The hold has no fresh figure (for `why`): it goes on holding, at the latest this
    /// long from now. Said once a spell.
    HoldBlind {
        why: Blindness,
        at_the_latest: Duration,
    },
    /// The drain is over, `after` its SIGTERM, for `why`; `in_flight` as last seen.
    DrainOver {
        after: Duration,
        why: DrainEnd,
        in_flight: Option<u64>,
    },
    Exit(u8),
}

/// What one event asks for, in order: at most a handful (a late wake-up takes every due
/// step at once), held inline: the machine allocates nothing, so a relayed signal waits
/// for no allocator (a first allocation of its size can cost a page fault).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Actions {
    items: [Option<Action>; Actions::CAPACITY],
    len: usize,
}

impl Actions {
    /// More than any event produces: the longest answer, a wake-up long after the drain
    /// delay with a hold, is four.
    pub const CAPACITY: usize = 8;

    fn push(&mut self, action: Action) {
        // More would be a bug of the machine's, which the table tests (debug builds)
        // catch here.
        debug_assert!(self.len < Self::CAPACITY, "more actions than Actions holds");
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = Some(action);
            self.len += 1;
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = Action> + '_ {
        self.items[..self.len].iter().flatten().copied()
    }
}

impl PartialEq<Vec<Action>> for Actions {
    fn eq(&self, other: &Vec<Action>) -> bool {
        self.iter().eq(other.iter().copied())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Starting,
    Running,
    Draining {
        term_at: Instant,
        relay_at: Instant,
        kill_at: Instant,
    },
    /// Drain until quiet: the drain delay is over (at `since`) and the stop signal
    /// waits for the port to be quiet, or for `cap_at` (`--drain-max` after the
    /// SIGTERM). `left` is the latest in-flight count seen (the hold is announced with
    /// the first); `blind`, why the hold cannot see the port now, once said.
    Holding {
        term_at: Instant,
        since: Instant,
        look_at: Instant,
        cap_at: Instant,
        kill_at: Instant,
        left: Option<u64>,
        blind: Option<Blindness>,
    },
    /// Stop signal relayed; waiting for the app. After `killed`, `kill_at` is when
    /// lifeguard gives up waiting for it.
    Stopping {
        kill_at: Instant,
        killed: bool,
    },
    /// The app has exited with `code`; waiting for the rest of what it started.
    Reaping {
        code: u8,
        kill_at: Instant,
        killed: bool,
        stop_relayed: bool,
    },
    Exited(u8),
}

#[derive(Debug)]
pub struct Lifecycle {
    config: Config,
    state: State,
}

impl Lifecycle {
    pub fn new(config: Config) -> Self {
        Lifecycle {
            config,
            state: State::Starting,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn phase(&self) -> Phase {
        match self.state {
            State::Starting => Phase::Starting,
            State::Running => Phase::Running,
            State::Draining { .. } | State::Holding { .. } => Phase::Draining,
            State::Stopping { .. } => Phase::Stopping,
            State::Reaping { .. } | State::Exited(_) => Phase::Exited,
        }
    }

    /// When the next time-driven step is due, if any; the loop sleeps until then.
    pub fn deadline(&self) -> Option<Instant> {
        match self.state {
            State::Draining { relay_at, .. } => Some(relay_at),
            State::Holding {
                look_at, cap_at, ..
            } => Some(look_at.min(cap_at)),
            State::Stopping { kill_at, .. } | State::Reaping { kill_at, .. } => Some(kill_at),
            _ => None,
        }
    }

    pub fn on(&mut self, event: Event, now: Instant) -> Actions {
        let mut actions = Actions::default();
        match event {
            Event::Signal(signal) if signal == self.config.stop_signal => {
                self.on_term(now, &mut actions)
            }
            Event::Signal(signal) => self.forward(signal, false, &mut actions),
            Event::AppReady => {
                if self.state == State::Starting {
                    self.state = State::Running;
                }
            }
            Event::AppExited(status) => self.on_app_exit(status, now, &mut actions),
            Event::NoChildrenLeft => {
                if let State::Reaping { code, .. } = self.state {
                    self.exit(code, &mut actions);
                }
            }
            Event::Tick => {}
            Event::Traffic(look) => self.on_traffic(look, now, &mut actions),
        }
        self.advance(now, &mut actions);
        actions
    }

    fn on_term(&mut self, now: Instant, actions: &mut Actions) {
        match self.state {
            State::Starting | State::Running => {
                self.state = State::Draining {
                    term_at: now,
                    relay_at: after(now, self.config.drain_delay),
                    kill_at: after(now, self.config.grace),
                };
                // A zero drain relays (or starts holding) in `advance`, in this step.
            }
            // A second stop signal cuts the drain short.
            State::Draining { .. } | State::Holding { .. } => {
                self.end_drain(DrainEnd::SecondTerm, now, actions)
            }
            // Past the drain every stop signal is passed on like any other signal.
            State::Stopping { .. } | State::Reaping { .. } => {
                self.forward(self.config.stop_signal, false, actions)
            }
            State::Exited(_) => {}
        }
    }

    fn on_app_exit(&mut self, status: AppStatus, now: Instant, actions: &mut Actions) {
        let (kill_at, killed, stop_relayed) = match self.state {
            State::Starting | State::Running => (after(now, self.config.grace), false, false),
            State::Draining {
                term_at, kill_at, ..
            }
            | State::Holding {
                term_at, kill_at, ..
            } => {
                actions.push(Action::DrainOver {
                    after: now.saturating_duration_since(term_at),
                    why: DrainEnd::AppExited,
                    in_flight: self.left(),
                });
                (kill_at, false, false)
            }
            State::Stopping { kill_at, killed } => (kill_at, killed, true),
            State::Reaping { .. } | State::Exited(_) => return,
        };
        if !killed {
            actions.push(Action::SignalRemaining {
                signal: TERM,
                spare_app_group: stop_relayed && self.config.group,
            });
        }
        // What the app left has a bound of its own, within the grace deadline's.
        let kill_at = if killed {
            kill_at
        } else {
            kill_at.min(after(now, self.config.leftover_grace))
        };
        self.state = State::Reaping {
            code: self.remapped(status.code()),
            kill_at,
            killed,
            stop_relayed,
        };
    }

    /// `--remap-exit`: the codes it names are reported as 0.
    fn remapped(&self, code: u8) -> u8 {
        if self.config.remap_exit.contains(&code) {
            0
        } else {
            code
        }
    }

    /// The latest in-flight count the hold saw.
    fn left(&self) -> Option<u64> {
        match self.state {
            State::Holding { left, .. } => left,
            _ => None,
        }
    }

    /// The drain delay is over: relay the stop signal, or with `--inflight-port` hold
    /// it and look at the port first.
    fn drain_delay_over(&mut self, now: Instant, actions: &mut Actions) {
        let State::Draining {
            term_at, kill_at, ..
        } = self.state
        else {
            return;
        };
        match self.config.drain_max {
            Some(max) => {
                actions.push(Action::LookAtTraffic);
                self.state = State::Holding {
                    term_at,
                    since: now,
                    look_at: after(now, LOOK_EVERY),
                    cap_at: after(term_at, max),
                    kill_at,
                    left: None,
                    blind: None,
                };
            }
            None => self.end_drain(DrainEnd::Delay, now, actions),
        }
    }

    /// The hold's rule: relay at the first look that finds the port quiet — nothing in
    /// flight and no new request for `drain_quiet`. A hold without a fresh figure (the
    /// sampler late, stopped or gone, or unable to read the port) is blind and goes on
    /// holding: a request may still be in flight, and `--drain-max` bounds it.
    fn on_traffic(&mut self, look: Option<Look>, now: Instant, actions: &mut Actions) {
        let State::Holding {
            since,
            left: seen_before,
            cap_at,
            blind,
            ..
        } = self.state
        else {
            return; // an answer that came after the hold ended
        };
        // Only figures taken during the hold count: an older sample may predate a
        // request that came since; and none older than LOOK_STALE.
        let fresh = look
            .filter(|l| l.taken >= since && now.saturating_duration_since(l.taken) < LOOK_STALE);
        let why = match fresh {
            Some(Look {
                in_flight: None, ..
            }) => Some(Blindness::CannotRead),
            Some(_) => None,
            // The hold's first LOOK_STALE is the sampler's time to answer.
            None if now.saturating_duration_since(since) >= LOOK_STALE => Some(Blindness::Late),
            None => return,
        };
        if let State::Holding {
            blind: ref mut b, ..
        } = self.state
        {
            *b = why;
        }
        let (Some(look), None) = (fresh, why) else {
            if let (Some(why), true) = (why, blind != why) {
                actions.push(Action::HoldBlind {
                    why,
                    at_the_latest: cap_at.saturating_duration_since(now),
                });
            }
            return;
        };
        let in_flight = look.in_flight.unwrap_or_default();
        if let State::Holding { ref mut left, .. } = self.state {
            *left = Some(in_flight);
        }
        let quiet_for = look
            .last_busy
            .map(|busy| look.taken.saturating_duration_since(busy));
        // A port never seen listening may be the wrong one: nothing in flight there
        // says nothing of the app's requests, so the hold goes on (to --drain-max).
        if in_flight == 0
            && look.port_seen
            && quiet_for.is_none_or(|q| q >= self.config.drain_quiet)
        {
            let quiet_for = quiet_for.unwrap_or(self.config.drain_quiet);
            self.end_drain(DrainEnd::Quiet { quiet_for }, now, actions);
            return;
        }
        if seen_before.is_none() {
            // The hold's first figures: it is announced once.
            let at_the_latest = cap_at.saturating_duration_since(now);
            actions.push(Action::HoldBegan {
                in_flight,
                at_the_latest,
            });
        }
    }

    /// Ends the drain now for `why`: the stop signal is relayed.
    fn end_drain(&mut self, why: DrainEnd, now: Instant, actions: &mut Actions) {
        let (term_at, kill_at) = match self.state {
            State::Draining {
                term_at, kill_at, ..
            }
            | State::Holding {
                term_at, kill_at, ..
            } => (term_at, kill_at),
            _ => return,
        };
        actions.push(Action::DrainOver {
            after: now.saturating_duration_since(term_at),
            why,
            in_flight: self.left(),
        });
        self.forward(self.config.stop_signal, true, actions);
        self.state = State::Stopping {
            kill_at,
            killed: false,
        };
    }

    fn forward(&self, received: Signal, relay: bool, actions: &mut Actions) {
        let running = !matches!(self.state, State::Exited(_));
        if let (true, Some(signal)) = (running, self.config.rewrites.apply(received)) {
            actions.push(Action::Forward { signal, relay });
        }
    }

    fn exit(&mut self, code: u8, actions: &mut Actions) {
        self.state = State::Exited(code);
        actions.push(Action::Exit(code));
    }

    /// Takes every step whose time has come; several can be due at once when the loop
    /// woke late (e.g. the container was paused).
    fn advance(&mut self, now: Instant, actions: &mut Actions) {
        while let Some(due) = self.deadline().filter(|due| *due <= now) {
            match self.state {
                State::Draining { .. } => self.drain_delay_over(now, actions),
                State::Holding { cap_at, blind, .. } if due == cap_at => {
                    let why = if blind.is_some() {
                        DrainEnd::Blind
                    } else {
                        DrainEnd::DrainMax
                    };
                    self.end_drain(why, now, actions)
                }
                State::Holding {
                    ref mut look_at, ..
                } => {
                    *look_at = after(due.max(now), LOOK_EVERY);
                    actions.push(Action::LookAtTraffic);
                    // One look per wake-up: the answer decides the rest.
                    break;
                }
                State::Stopping { killed: false, .. } => {
                    actions.push(Action::KillAll);
                    self.state = State::Stopping {
                        kill_at: after(due.max(now), KILL_WAIT),
                        killed: true,
                    };
                }
                // SIGKILL did not take the app within KILL_WAIT: report it as killed.
                State::Stopping { killed: true, .. } => {
                    let code = self.remapped(AppStatus::Killed(KILL).code());
                    self.exit(code, actions);
                }
                State::Reaping {
                    code,
                    killed: false,
                    stop_relayed,
                    ..
                } => {
                    actions.push(Action::KillAll);
                    self.state = State::Reaping {
                        code,
                        kill_at: after(now, KILL_WAIT),
                        killed: true,
                        stop_relayed,
                    };
                }
                State::Reaping { code, .. } => self.exit(code, actions),
                State::Starting | State::Running | State::Exited(_) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests;
