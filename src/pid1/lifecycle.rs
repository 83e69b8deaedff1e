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
mod tests {
    use super::*;
    use crate::board::Busy;
    use crate::signal_names::Rewrites;
    use crate::signal_names::{parse_rewrite, HUP, INT};
    use Action::*;
    use DrainEnd::{AppExited as Exited_, Delay, DrainMax, SecondTerm};
    use Event::{AppExited, AppReady, NoChildrenLeft, Tick};

    const DRAIN: u64 = 5;
    const GRACE: u64 = 25;
    const QUIT: Signal = Signal(libc::SIGQUIT);

    fn config() -> Config {
        Config {
            drain_delay: Duration::from_secs(DRAIN),
            grace: Duration::from_secs(GRACE),
            rewrites: Rewrites::default(),
            remap_exit: vec![],
            group: true,
            drain_max: None,
            drain_quiet: Duration::from_secs(1),
            leftover_grace: Duration::from_secs(GRACE),
            stop_signal: TERM,
        }
    }

    /// Drain until quiet with `--drain-max 15s` (the default with a 5 s drain, 25 s
    /// grace) and `--drain-quiet 1s`.
    fn holding() -> Config {
        Config {
            drain_max: Some(Duration::from_secs(15)),
            ..config()
        }
    }

    fn over(after: f64, why: DrainEnd, in_flight: Option<u64>) -> Action {
        DrainOver {
            after: Duration::from_secs_f64(after),
            why,
            in_flight,
        }
    }

    fn quiet(quiet_for: f64) -> DrainEnd {
        DrainEnd::Quiet {
            quiet_for: Duration::from_secs_f64(quiet_for),
        }
    }

    fn fwd(signal: Signal) -> Action {
        Forward {
            signal,
            relay: false,
        }
    }

    fn relay(signal: Signal) -> Action {
        Forward {
            signal,
            relay: true,
        }
    }

    fn remaining(spare_app_group: bool) -> Action {
        SignalRemaining {
            signal: TERM,
            spare_app_group,
        }
    }

    /// One row: at second `at`, `event` arrives; the machine answers `actions` and is then
    /// in `phase` with its deadline at second `deadline`.
    type Row = (f64, Event, Vec<Action>, Phase, Option<f64>);

    /// The tables' second 0, shared so that rows can name instants (`look`).
    fn at(s: f64) -> Instant {
        static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *T0.get_or_init(Instant::now) + Duration::from_secs_f64(s)
    }

    fn run_table(config: Config, rows: Vec<Row>) {
        let t0 = at(0.0);
        let secs = at;
        let mut machine = Lifecycle::new(config);
        for (i, (at, event, actions, phase, deadline)) in rows.into_iter().enumerate() {
            let got = machine.on(event, secs(at));
            assert_eq!(got, actions, "row {i}: {event:?} at {at}s");
            assert_eq!(machine.phase(), phase, "row {i}: phase after {event:?}");
            // Within a microsecond: 5.1 s is not exact in binary.
            let close = match (machine.deadline(), deadline.map(secs)) {
                (Some(a), Some(b)) => a.max(b) - a.min(b) < Duration::from_micros(1),
                (a, b) => a == b,
            };
            assert!(
                close,
                "row {i}: deadline {:?}, expected {deadline:?}",
                machine.deadline().map(|d| d - t0)
            );
        }
    }

    #[test]
    fn sigterm_drains_then_relays_then_kills_at_the_grace_deadline() {
        let d = DRAIN as f64;
        let g = GRACE as f64;
        run_table(
            config(),
            vec![
                (0.0, AppReady, vec![], Phase::Running, None),
                (
                    10.0,
                    Event::Signal(TERM),
                    vec![],
                    Phase::Draining,
                    Some(10.0 + d),
                ),
                // The app keeps running and other signals still pass during the drain.
                (
                    11.0,
                    Event::Signal(HUP),
                    vec![fwd(HUP)],
                    Phase::Draining,
                    Some(10.0 + d),
                ),
                (
                    11.5,
                    Event::Signal(INT),
                    vec![fwd(INT)],
                    Phase::Draining,
                    Some(10.0 + d),
                ),
                (12.0, Tick, vec![], Phase::Draining, Some(10.0 + d)),
                (
                    10.0 + d,
                    Tick,
                    vec![over(d, Delay, None), relay(TERM)],
                    Phase::Stopping,
                    Some(10.0 + g),
                ),
                (
                    20.0,
                    Event::Signal(TERM),
                    vec![fwd(TERM)],
                    Phase::Stopping,
                    Some(10.0 + g),
                ),
                (
                    10.0 + g,
                    Tick,
                    vec![KillAll],
                    Phase::Stopping,
                    Some(12.0 + g),
                ),
                (
                    10.1 + g,
                    AppExited(AppStatus::Killed(KILL)),
                    vec![],
                    Phase::Exited,
                    Some(12.0 + g),
                ),
                (
                    10.1 + g,
                    NoChildrenLeft,
                    vec![Exit(137)],
                    Phase::Exited,
                    None,
                ),
                // Nothing is forwarded once lifeguard has exited.
                (10.2 + g, Event::Signal(HUP), vec![], Phase::Exited, None),
            ],
        );
    }

    #[test]
    fn a_second_sigterm_relays_at_once_and_the_app_exit_ends_it() {
        run_table(
            config(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (
                    1.0,
                    Event::Signal(TERM),
                    vec![over(1.0, SecondTerm, None), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
                (
                    2.0,
                    AppExited(AppStatus::Exited(0)),
                    vec![remaining(true)],
                    Phase::Exited,
                    Some(25.0),
                ),
                (2.1, NoChildrenLeft, vec![Exit(0)], Phase::Exited, None),
            ],
        );
    }

    /// The sampler's figures taken at second `taken`: `in_flight` (None: the sample
    /// failed), traffic last seen at second `busy`.
    fn look(taken: f64, in_flight: Option<u64>, busy: Option<f64>) -> Event {
        Event::Traffic(Some(Look {
            taken: at(taken),
            in_flight,
            last_busy: busy.map(at),
            busy_by: Busy::InFlight,
            namespace_counted: true,
            port_seen: true,
        }))
    }

    #[test]
    fn hold_a_port_quiet_for_long_relays_at_the_first_fresh_look() {
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                // A figure from before the hold does not count: a request may have come
                // since.
                (
                    5.0,
                    look(4.5, Some(0), None),
                    vec![],
                    Phase::Draining,
                    Some(5.1),
                ),
                (5.1, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.2)),
                (
                    5.1,
                    look(5.05, Some(0), Some(2.0)),
                    vec![over(5.1, quiet(3.05), Some(0)), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
                // A late answer changes nothing.
                (
                    5.2,
                    look(5.15, Some(4), Some(5.15)),
                    vec![],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn hold_one_zero_sample_between_requests_is_not_quiet() {
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                // Nothing in flight, but a request came 0.3 s ago: the balancer still
                // sends.
                (
                    5.0,
                    look(5.0, Some(0), Some(4.7)),
                    vec![HoldBegan {
                        in_flight: 0,
                        at_the_latest: Duration::from_secs(10),
                    }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (5.1, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.2)),
                (
                    5.1,
                    look(5.1, Some(1), Some(5.1)),
                    vec![],
                    Phase::Draining,
                    Some(5.2),
                ),
                // SIGINT is never held; other signals pass as ever.
                (
                    5.15,
                    Event::Signal(INT),
                    vec![fwd(INT)],
                    Phase::Draining,
                    Some(5.2),
                ),
                (5.2, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.3)),
                (
                    5.2,
                    look(5.2, Some(0), Some(5.1)),
                    vec![],
                    Phase::Draining,
                    Some(5.3),
                ),
                (6.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(6.1)),
                (
                    6.0,
                    look(6.0, Some(0), Some(5.1)),
                    vec![],
                    Phase::Draining,
                    Some(6.1),
                ),
                (6.1, Tick, vec![LookAtTraffic], Phase::Draining, Some(6.2)),
                // Quiet for the whole --drain-quiet: relay.
                (
                    6.12,
                    look(6.1, Some(0), Some(5.1)),
                    vec![over(6.12, quiet(1.0), Some(0)), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn hold_with_drain_quiet_zero_relays_at_the_first_zero_sample() {
        let mut cfg = holding();
        cfg.drain_quiet = Duration::ZERO;
        run_table(
            cfg,
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    look(5.0, Some(2), Some(5.0)),
                    vec![HoldBegan {
                        in_flight: 2,
                        at_the_latest: Duration::from_secs(10),
                    }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (5.1, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.2)),
                (
                    5.1,
                    look(5.1, Some(0), Some(5.1)),
                    vec![over(5.1, quiet(0.0), Some(0)), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn hold_zero_drain_delay_relays_as_soon_as_the_traffic_has_stopped() {
        let mut cfg = holding();
        cfg.drain_delay = Duration::ZERO;
        run_table(
            cfg,
            vec![
                (
                    10.0,
                    Event::Signal(TERM),
                    vec![LookAtTraffic],
                    Phase::Draining,
                    Some(10.1),
                ),
                (
                    10.0,
                    look(9.5, Some(0), Some(1.0)),
                    vec![],
                    Phase::Draining,
                    Some(10.1),
                ),
                (10.1, Tick, vec![LookAtTraffic], Phase::Draining, Some(10.2)),
                (
                    10.1,
                    look(10.01, Some(0), Some(1.0)),
                    vec![over(0.1, quiet(9.01), Some(0)), relay(TERM)],
                    Phase::Stopping,
                    Some(35.0),
                ),
            ],
        );
    }

    #[test]
    fn hold_busy_to_the_cap_relays_at_drain_max() {
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    look(5.0, Some(2), Some(5.0)),
                    vec![HoldBegan {
                        in_flight: 2,
                        at_the_latest: Duration::from_secs(10),
                    }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (
                    14.95,
                    Tick,
                    vec![LookAtTraffic],
                    Phase::Draining,
                    Some(15.0),
                ),
                (
                    14.95,
                    look(14.9, Some(1), Some(14.9)),
                    vec![],
                    Phase::Draining,
                    Some(15.0),
                ),
                (
                    15.0,
                    Tick,
                    vec![over(15.0, DrainMax, Some(1)), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
                (25.0, Tick, vec![KillAll], Phase::Stopping, Some(27.0)),
            ],
        );
    }

    #[test]
    fn hold_second_sigterm_relays_at_once() {
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    look(5.0, Some(9), Some(5.0)),
                    vec![HoldBegan {
                        in_flight: 9,
                        at_the_latest: Duration::from_secs(10),
                    }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (
                    6.0,
                    Event::Signal(TERM),
                    vec![over(6.0, SecondTerm, Some(9)), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn hold_app_exit_keeps_the_grace_deadline() {
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    look(5.0, Some(1), Some(5.0)),
                    vec![HoldBegan {
                        in_flight: 1,
                        at_the_latest: Duration::from_secs(10),
                    }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (
                    7.0,
                    AppExited(AppStatus::Killed(KILL)),
                    vec![over(7.0, Exited_, Some(1)), remaining(false)],
                    Phase::Exited,
                    Some(25.0),
                ),
                (
                    7.0,
                    look(7.0, Some(0), None),
                    vec![],
                    Phase::Exited,
                    Some(25.0),
                ),
                (7.0, NoChildrenLeft, vec![Exit(137)], Phase::Exited, None),
            ],
        );
    }

    #[test]
    fn hold_a_port_never_seen_listening_holds_to_drain_max() {
        // A wrong --inflight-port: nothing in flight and nothing new there for ever, but
        // that says nothing of the app's requests. The hold goes on to --drain-max.
        let unseen = |taken: f64| match look(taken, Some(0), None) {
            Event::Traffic(Some(l)) => Event::Traffic(Some(Look {
                port_seen: false,
                ..l
            })),
            other => other,
        };
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    unseen(5.0),
                    vec![HoldBegan {
                        in_flight: 0,
                        at_the_latest: Duration::from_secs(10),
                    }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (10.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(10.1)),
                (10.0, unseen(10.0), vec![], Phase::Draining, Some(10.1)),
                (14.9, Tick, vec![LookAtTraffic], Phase::Draining, Some(15.0)),
                (14.9, unseen(14.9), vec![], Phase::Draining, Some(15.0)),
                (
                    15.0,
                    Tick,
                    vec![over(15.0, DrainMax, Some(0)), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn hold_a_sampler_that_cannot_read_holds_and_says_why_once() {
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    look(5.0, None, Some(4.9)),
                    vec![HoldBlind {
                        why: Blindness::CannotRead,
                        at_the_latest: Duration::from_secs(10),
                    }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (5.1, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.2)),
                (
                    5.1,
                    look(5.1, None, Some(4.9)),
                    vec![],
                    Phase::Draining,
                    Some(5.2),
                ),
                (
                    14.95,
                    Tick,
                    vec![LookAtTraffic],
                    Phase::Draining,
                    Some(15.0),
                ),
                (
                    14.95,
                    look(14.9, None, None),
                    vec![],
                    Phase::Draining,
                    Some(15.0),
                ),
                (
                    15.0,
                    Tick,
                    vec![over(15.0, DrainEnd::Blind, None), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn hold_a_late_sampler_holds_until_a_fresh_look_finds_the_port_quiet() {
        // Late is not quiet: no figure at all, then none newer than the hold. Blind
        // after LOOK_STALE, said once; the hold goes on.
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    Event::Traffic(None),
                    vec![],
                    Phase::Draining,
                    Some(5.1),
                ),
                (5.9, Tick, vec![LookAtTraffic], Phase::Draining, Some(6.0)),
                (
                    5.9,
                    look(3.0, Some(3), Some(3.0)),
                    vec![],
                    Phase::Draining,
                    Some(6.0),
                ),
                (6.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(6.1)),
                (
                    6.0,
                    look(3.0, Some(3), Some(3.0)),
                    vec![HoldBlind {
                        why: Blindness::Late,
                        at_the_latest: Duration::from_secs(9),
                    }],
                    Phase::Draining,
                    Some(6.1),
                ),
                (8.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(8.1)),
                (
                    8.0,
                    look(3.0, Some(3), Some(3.0)),
                    vec![],
                    Phase::Draining,
                    Some(8.1),
                ),
                // The sampler is back: a request still in flight. Announced, held.
                (9.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(9.1)),
                (
                    9.0,
                    look(8.95, Some(1), Some(8.95)),
                    vec![HoldBegan {
                        in_flight: 1,
                        at_the_latest: Duration::from_secs(6),
                    }],
                    Phase::Draining,
                    Some(9.1),
                ),
                (11.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(11.1)),
                (
                    11.0,
                    look(10.95, Some(0), Some(9.5)),
                    vec![over(11.0, quiet(1.45), Some(0)), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
        // Figures that were coming stop coming: the last one goes stale; blind to the
        // cap, where the stop goes with the blindness said.
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![LookAtTraffic], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    look(5.0, Some(3), Some(5.0)),
                    vec![HoldBegan {
                        in_flight: 3,
                        at_the_latest: Duration::from_secs(10),
                    }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (6.1, Tick, vec![LookAtTraffic], Phase::Draining, Some(6.2)),
                (
                    6.1,
                    look(5.0, Some(3), Some(5.0)),
                    vec![HoldBlind {
                        why: Blindness::Late,
                        at_the_latest: Duration::from_secs_f64(8.9),
                    }],
                    Phase::Draining,
                    Some(6.2),
                ),
                (
                    14.95,
                    Tick,
                    vec![LookAtTraffic],
                    Phase::Draining,
                    Some(15.0),
                ),
                (
                    14.95,
                    look(5.0, Some(3), Some(5.0)),
                    vec![],
                    Phase::Draining,
                    Some(15.0),
                ),
                (
                    15.0,
                    Tick,
                    vec![over(15.0, DrainEnd::Blind, Some(3)), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn hold_a_late_wakeup_takes_every_due_step_and_the_deadline_still_kills() {
        // The container was paused from 1 s to 30 s: drain, cap and grace are all past.
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (
                    30.0,
                    Tick,
                    vec![
                        LookAtTraffic,
                        over(30.0, DrainMax, None),
                        relay(TERM),
                        KillAll,
                    ],
                    Phase::Stopping,
                    Some(32.0),
                ),
                (
                    30.0,
                    look(30.0, Some(5), Some(30.0)),
                    vec![],
                    Phase::Stopping,
                    Some(32.0),
                ),
            ],
        );
    }

    #[test]
    fn zero_drain_relays_in_the_same_step() {
        let mut cfg = config();
        cfg.drain_delay = Duration::ZERO;
        run_table(
            cfg,
            vec![(
                3.0,
                Event::Signal(TERM),
                vec![over(0.0, Delay, None), relay(TERM)],
                Phase::Stopping,
                Some(28.0),
            )],
        );
    }

    #[test]
    fn rewrites_apply_to_forwarding_and_to_the_relayed_stop_signal() {
        let mut cfg = config();
        cfg.rewrites = Rewrites::new(vec![
            parse_rewrite("TERM:QUIT").unwrap(),
            parse_rewrite("HUP:DROP").unwrap(),
        ]);
        run_table(
            cfg,
            vec![
                (0.0, Event::Signal(HUP), vec![], Phase::Starting, None),
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (
                    5.0,
                    Tick,
                    vec![over(5.0, Delay, None), relay(QUIT)],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn another_stop_signal_begins_the_stop_and_sigterm_is_then_forwarded_at_once() {
        // STOPSIGNAL SIGQUIT (nginx's graceful stop): --stop-signal QUIT.
        let mut cfg = config();
        cfg.stop_signal = QUIT;
        run_table(
            cfg.clone(),
            vec![
                (0.0, AppReady, vec![], Phase::Running, None),
                // SIGTERM is any other signal now: passed on at once, no drain.
                (
                    1.0,
                    Event::Signal(TERM),
                    vec![fwd(TERM)],
                    Phase::Running,
                    None,
                ),
                (2.0, Event::Signal(QUIT), vec![], Phase::Draining, Some(7.0)),
                (
                    7.0,
                    Tick,
                    vec![over(5.0, Delay, None), relay(QUIT)],
                    Phase::Stopping,
                    Some(27.0),
                ),
                // Past the drain it is passed on like any other.
                (
                    8.0,
                    Event::Signal(QUIT),
                    vec![fwd(QUIT)],
                    Phase::Stopping,
                    Some(27.0),
                ),
            ],
        );
        // A second one cuts the drain short; --rewrite applies to what is relayed.
        cfg.rewrites = Rewrites::new(vec![parse_rewrite("QUIT:TERM").unwrap()]);
        run_table(
            cfg,
            vec![
                (0.0, Event::Signal(QUIT), vec![], Phase::Draining, Some(5.0)),
                (
                    1.0,
                    Event::Signal(QUIT),
                    vec![over(1.0, SecondTerm, None), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn app_exit_while_running_terms_the_rest_and_waits_the_grace_from_the_exit() {
        run_table(
            config(),
            vec![
                (0.0, AppReady, vec![], Phase::Running, None),
                (
                    7.0,
                    AppExited(AppStatus::Exited(3)),
                    vec![remaining(false)],
                    Phase::Exited,
                    Some(32.0),
                ),
                // A signal now goes to whatever is left of the group.
                (
                    8.0,
                    Event::Signal(HUP),
                    vec![fwd(HUP)],
                    Phase::Exited,
                    Some(32.0),
                ),
                // A SIGTERM after the exit does not move the deadline.
                (
                    9.0,
                    Event::Signal(TERM),
                    vec![fwd(TERM)],
                    Phase::Exited,
                    Some(32.0),
                ),
                (32.0, Tick, vec![KillAll], Phase::Exited, Some(34.0)),
                (32.5, NoChildrenLeft, vec![Exit(3)], Phase::Exited, None),
            ],
        );
    }

    #[test]
    fn what_the_app_left_gets_the_leftover_grace_within_the_grace_deadline() {
        // --leftover-grace 3s: an exit while running kills what is left 3 s on, not 25;
        // an exit during the drain, 3 s on or at the grace deadline, whichever is first.
        let short = Config {
            leftover_grace: Duration::from_secs(3),
            ..config()
        };
        run_table(
            short.clone(),
            vec![
                (0.0, AppReady, vec![], Phase::Running, None),
                (
                    7.0,
                    AppExited(AppStatus::Exited(3)),
                    vec![remaining(false)],
                    Phase::Exited,
                    Some(10.0),
                ),
                (10.0, Tick, vec![KillAll], Phase::Exited, Some(12.0)),
                (10.5, NoChildrenLeft, vec![Exit(3)], Phase::Exited, None),
            ],
        );
        run_table(
            short,
            vec![
                (0.0, AppReady, vec![], Phase::Running, None),
                (1.0, Event::Signal(TERM), vec![], Phase::Draining, Some(6.0)),
                (
                    6.0,
                    Tick,
                    vec![over(5.0, Delay, None), relay(TERM)],
                    Phase::Stopping,
                    Some(26.0),
                ),
                (
                    24.0,
                    AppExited(AppStatus::Exited(0)),
                    vec![remaining(true)],
                    Phase::Exited,
                    Some(26.0),
                ),
                (26.0, Tick, vec![KillAll], Phase::Exited, Some(28.0)),
            ],
        );
    }

    #[test]
    fn app_exit_during_the_drain_keeps_the_deadline_already_running() {
        run_table(
            config(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (
                    1.0,
                    AppExited(AppStatus::Killed(TERM)),
                    vec![over(1.0, Exited_, None), remaining(false)],
                    Phase::Exited,
                    Some(25.0),
                ),
                (1.0, NoChildrenLeft, vec![Exit(143)], Phase::Exited, None),
            ],
        );
    }

    #[test]
    fn single_child_mode_terms_the_whole_group_after_the_exit() {
        let mut cfg = config();
        cfg.group = false;
        cfg.drain_delay = Duration::ZERO;
        run_table(
            cfg,
            vec![
                (
                    0.0,
                    Event::Signal(TERM),
                    vec![over(0.0, Delay, None), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
                (
                    1.0,
                    AppExited(AppStatus::Exited(0)),
                    vec![remaining(false)],
                    Phase::Exited,
                    Some(25.0),
                ),
            ],
        );
    }

    #[test]
    fn survivors_of_sigkill_do_not_hold_lifeguard_forever() {
        run_table(
            config(),
            vec![
                (
                    0.0,
                    AppExited(AppStatus::Exited(0)),
                    vec![remaining(false)],
                    Phase::Exited,
                    Some(25.0),
                ),
                (25.0, Tick, vec![KillAll], Phase::Exited, Some(27.0)),
                (27.0, Tick, vec![Exit(0)], Phase::Exited, None),
            ],
        );
        // The app itself unkillable (stuck in the kernel): exit as killed.
        run_table(
            config(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (
                    30.0,
                    Tick,
                    vec![over(30.0, Delay, None), relay(TERM), KillAll],
                    Phase::Stopping,
                    Some(32.0),
                ),
                (32.0, Tick, vec![Exit(137)], Phase::Exited, None),
            ],
        );
    }

    #[test]
    fn remapped_exit_codes_become_zero() {
        let mut cfg = config();
        cfg.remap_exit = vec![143, 3];
        run_table(
            cfg.clone(),
            vec![
                (
                    0.0,
                    AppExited(AppStatus::Killed(TERM)),
                    vec![remaining(false)],
                    Phase::Exited,
                    Some(25.0),
                ),
                (0.0, NoChildrenLeft, vec![Exit(0)], Phase::Exited, None),
            ],
        );
        run_table(
            cfg,
            vec![
                (
                    0.0,
                    AppExited(AppStatus::Exited(4)),
                    vec![remaining(false)],
                    Phase::Exited,
                    Some(25.0),
                ),
                (0.0, NoChildrenLeft, vec![Exit(4)], Phase::Exited, None),
            ],
        );
    }

    #[test]
    fn no_children_left_before_the_app_exits_changes_nothing() {
        run_table(
            config(),
            vec![
                (0.0, NoChildrenLeft, vec![], Phase::Starting, None),
                (0.0, AppReady, vec![], Phase::Running, None),
                (1.0, AppReady, vec![], Phase::Running, None),
            ],
        );
    }

    #[test]
    fn huge_durations_never_panic() {
        let mut cfg = config();
        cfg.grace = Duration::MAX;
        cfg.drain_delay = Duration::MAX / 2;
        cfg.leftover_grace = Duration::MAX;
        let mut machine = Lifecycle::new(cfg);
        let now = Instant::now();
        assert_eq!(machine.on(Event::Signal(TERM), now), vec![]);
        assert_eq!(
            machine.on(AppExited(AppStatus::Exited(0)), now),
            vec![over(0.0, Exited_, None), remaining(false)]
        );
        assert!(machine.deadline().unwrap() > now + Duration::from_secs(86400 * 365));
    }

    #[test]
    fn wait_statuses_decode_exits_and_every_signal() {
        assert_eq!(AppStatus::from_wait(3 << 8), AppStatus::Exited(3));
        assert_eq!(AppStatus::from_wait(9), AppStatus::Killed(KILL));
        assert_eq!(AppStatus::from_wait(64), AppStatus::Killed(Signal(64)));
        assert_eq!(
            AppStatus::from_wait(0x80 | 11),
            AppStatus::Killed(Signal(11))
        );
    }

    #[test]
    fn app_status_codes_follow_the_shell_convention() {
        assert_eq!(AppStatus::Exited(0).code(), 0);
        assert_eq!(AppStatus::Exited(255).code(), 255);
        assert_eq!(AppStatus::Killed(KILL).code(), 137);
        assert_eq!(AppStatus::Killed(Signal(64)).code(), 192);
    }
}
