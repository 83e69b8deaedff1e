//! The lifecycle as a pure state machine (DESIGN §3): `on(event, now) -> actions` and
//! `deadline()`; no I/O, so every rule is a row in the table test below.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use crate::signals::{Rewrites, Signal, KILL, TERM};

/// How long lifeguard keeps reaping after it has sent SIGKILL before it gives up on a
/// process stuck in the kernel (uninterruptible sleep) and exits anyway: it must never
/// hang after the app is gone.
pub const KILL_WAIT: Duration = Duration::from_secs(2);

/// How often the in-flight count is sampled while the stop signal is held (DESIGN §3,
/// "Drain until idle").
pub const HOLD_SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// `now + d`, saturating instead of panicking: a deadline beyond the clock's range is
/// as good as never (the CLI caps durations, this keeps PID 1 from ever panicking).
fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(u32::MAX as u64)))
        .unwrap_or(now)
}

#[derive(Clone, Debug)]
pub struct Config {
    pub drain_delay: Duration,
    pub grace: Duration,
    pub rewrites: Rewrites,
    pub remap_exit: Vec<u8>,
    /// Signals go to the app's whole process group (the default) rather than the child.
    pub group: bool,
    /// Drain until idle (`--drain-max` with `--inflight-port`): past the drain delay the
    /// stop signal is held while requests are in flight, at most this long after the
    /// SIGTERM. `None`: the stop signal goes at the drain delay.
    pub drain_max: Option<Duration>,
}

/// What observers (the HTTP endpoint, logs) see of the lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Starting,
    Running,
    Draining,
    Stopping,
    Exited,
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
    /// The in-flight count asked for by `Action::SampleInFlight`; `None` when the sample
    /// failed, which counts as idle: a broken gauge never holds a stop (DESIGN §3).
    InFlight(Option<u64>),
}

/// Why a hold of the stop signal ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldEnd {
    /// A sample read zero (or failed).
    Idle,
    /// `--drain-max` after the SIGTERM came with requests still in flight.
    DrainMax,
    /// A second SIGTERM.
    SecondTerm,
    /// The app exited while the stop signal was held.
    AppExited,
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
    /// Count the requests in flight now and answer with `Event::InFlight`.
    SampleInFlight,
    /// The drain delay ended with `in_flight` requests: the stop signal is held.
    HoldBegan {
        in_flight: u64,
    },
    /// The hold ended after `held`, with `left` requests in flight at the last sample.
    HoldEnded {
        held: Duration,
        left: u64,
        why: HoldEnd,
    },
    Exit(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Starting,
    Running,
    Draining {
        relay_at: Instant,
        kill_at: Instant,
    },
    /// Drain until idle: the drain delay is over, the stop signal waits for a sample
    /// that reads zero, or for `cap_at` (`--drain-max` after the SIGTERM). `began` is
    /// when the first busy sample came and what it read (None: the first sample is
    /// still to be answered); `left` the latest count.
    Holding {
        sample_at: Instant,
        cap_at: Instant,
        kill_at: Instant,
        began: Option<Instant>,
        left: u64,
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
                sample_at, cap_at, ..
            } => Some(sample_at.min(cap_at)),
            State::Stopping { kill_at, .. } | State::Reaping { kill_at, .. } => Some(kill_at),
            _ => None,
        }
    }

    pub fn on(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        match event {
            Event::Signal(TERM) => self.on_term(now, &mut actions),
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
            Event::InFlight(count) => self.on_in_flight(count.unwrap_or(0), now, &mut actions),
        }
        self.advance(now, &mut actions);
        actions
    }

    fn on_term(&mut self, now: Instant, actions: &mut Vec<Action>) {
        match self.state {
            State::Starting | State::Running => {
                let kill_at = after(now, self.config.grace);
                self.state = State::Draining {
                    relay_at: after(now, self.config.drain_delay),
                    kill_at,
                };
                // A zero drain relays in `advance`, in this same step.
            }
            // A second SIGTERM cuts the drain short.
            State::Draining { kill_at, .. } => self.relay_stop(kill_at, actions),
            State::Holding { kill_at, .. } => {
                self.end_hold(HoldEnd::SecondTerm, now, actions);
                self.relay_stop(kill_at, actions);
            }
            // Past the drain every SIGTERM is passed on like any other signal.
            State::Stopping { .. } | State::Reaping { .. } => self.forward(TERM, false, actions),
            State::Exited(_) => {}
        }
    }

    fn on_app_exit(&mut self, status: AppStatus, now: Instant, actions: &mut Vec<Action>) {
        self.end_hold(HoldEnd::AppExited, now, actions);
        let code = status.code();
        let code = if self.config.remap_exit.contains(&code) {
            0
        } else {
            code
        };
        let (kill_at, killed, stop_relayed) = match self.state {
            State::Starting | State::Running => (after(now, self.config.grace), false, false),
            State::Draining { kill_at, .. } | State::Holding { kill_at, .. } => {
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
        self.state = State::Reaping {
            code,
            kill_at,
            killed,
            stop_relayed,
        };
    }

    /// The drain delay is over: relay the stop signal, or with drain until idle, first
    /// ask how many requests are in flight. `term_at` is when the SIGTERM came.
    fn drain_delay_over(
        &mut self,
        term_at: Instant,
        kill_at: Instant,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        match self.config.drain_max {
            Some(max) => {
                actions.push(Action::SampleInFlight);
                self.state = State::Holding {
                    sample_at: after(now, HOLD_SAMPLE_EVERY),
                    cap_at: after(term_at, max),
                    kill_at,
                    began: None,
                    left: 0,
                };
            }
            None => self.relay_stop(kill_at, actions),
        }
    }

    fn on_in_flight(&mut self, count: u64, now: Instant, actions: &mut Vec<Action>) {
        let State::Holding {
            sample_at,
            cap_at,
            kill_at,
            began,
            ..
        } = self.state
        else {
            return; // an answer that came after the hold ended
        };
        if count == 0 {
            if began.is_some() {
                self.state = State::Holding {
                    sample_at,
                    cap_at,
                    kill_at,
                    began,
                    left: 0,
                };
                self.end_hold(HoldEnd::Idle, now, actions);
            }
            self.relay_stop(kill_at, actions);
            return;
        }
        if began.is_none() {
            actions.push(Action::HoldBegan { in_flight: count });
        }
        self.state = State::Holding {
            sample_at,
            cap_at,
            kill_at,
            began: began.or(Some(now)),
            left: count,
        };
    }

    /// Reports the end of a hold that had begun (a busy sample came); nothing otherwise.
    fn end_hold(&mut self, why: HoldEnd, now: Instant, actions: &mut Vec<Action>) {
        if let State::Holding {
            began: Some(began),
            left,
            ..
        } = self.state
        {
            actions.push(Action::HoldEnded {
                held: now.saturating_duration_since(began),
                left,
                why,
            });
        }
    }

    fn relay_stop(&mut self, kill_at: Instant, actions: &mut Vec<Action>) {
        self.forward(TERM, true, actions);
        self.state = State::Stopping {
            kill_at,
            killed: false,
        };
    }

    fn forward(&self, received: Signal, relay: bool, actions: &mut Vec<Action>) {
        let running = !matches!(self.state, State::Exited(_));
        if let (true, Some(signal)) = (running, self.config.rewrites.apply(received)) {
            actions.push(Action::Forward { signal, relay });
        }
    }

    fn exit(&mut self, code: u8, actions: &mut Vec<Action>) {
        self.state = State::Exited(code);
        actions.push(Action::Exit(code));
    }

    /// Takes every step whose time has come; several can be due at once when the loop
    /// woke late (e.g. the container was paused).
    fn advance(&mut self, now: Instant, actions: &mut Vec<Action>) {
        while let Some(due) = self.deadline().filter(|due| *due <= now) {
            match self.state {
                State::Draining { kill_at, relay_at } => {
                    let term_at = relay_at
                        .checked_sub(self.config.drain_delay)
                        .unwrap_or(relay_at);
                    self.drain_delay_over(term_at, kill_at, now, actions)
                }
                State::Holding {
                    cap_at, kill_at, ..
                } if due == cap_at => {
                    self.end_hold(HoldEnd::DrainMax, now, actions);
                    self.relay_stop(kill_at, actions);
                }
                State::Holding {
                    cap_at,
                    kill_at,
                    began,
                    left,
                    ..
                } => {
                    actions.push(Action::SampleInFlight);
                    self.state = State::Holding {
                        sample_at: after(due.max(now), HOLD_SAMPLE_EVERY),
                        cap_at,
                        kill_at,
                        began,
                        left,
                    };
                    // One sample per wake-up: the answer decides the rest.
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
                    let code = AppStatus::Killed(KILL).code();
                    let code = if self.config.remap_exit.contains(&code) {
                        0
                    } else {
                        code
                    };
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
    use crate::signals::{parse_rewrite, HUP, INT};
    use Action::*;
    use Event::{AppExited, AppReady, InFlight, NoChildrenLeft, Tick};

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
        }
    }

    /// Drain until idle with `--drain-max 15s` (the default with a 5 s drain, 25 s grace).
    fn holding() -> Config {
        Config {
            drain_max: Some(Duration::from_secs(15)),
            ..config()
        }
    }

    fn ended(held: f64, left: u64, why: HoldEnd) -> Action {
        HoldEnded {
            held: Duration::from_secs_f64(held),
            left,
            why,
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

    fn run_table(config: Config, rows: Vec<Row>) {
        let t0 = Instant::now();
        let secs = |s: f64| t0 + Duration::from_secs_f64(s);
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
                    vec![relay(TERM)],
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
                    vec![relay(TERM)],
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

    #[test]
    fn hold_idle_at_the_delay_relays_on_the_first_sample() {
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![SampleInFlight], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    InFlight(Some(0)),
                    vec![relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
                ),
                // A late answer changes nothing.
                (5.1, InFlight(Some(4)), vec![], Phase::Stopping, Some(25.0)),
            ],
        );
    }

    #[test]
    fn hold_busy_then_idle_samples_every_100ms_and_relays_at_zero() {
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                // The balancer stopped sending: nothing is relayed while requests run.
                (5.0, Tick, vec![SampleInFlight], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    InFlight(Some(3)),
                    vec![HoldBegan { in_flight: 3 }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (5.1, Tick, vec![SampleInFlight], Phase::Draining, Some(5.2)),
                (5.1, InFlight(Some(1)), vec![], Phase::Draining, Some(5.2)),
                // SIGINT is never held; other signals pass as ever.
                (
                    5.15,
                    Event::Signal(INT),
                    vec![fwd(INT)],
                    Phase::Draining,
                    Some(5.2),
                ),
                (5.2, Tick, vec![SampleInFlight], Phase::Draining, Some(5.3)),
                (
                    5.25,
                    InFlight(Some(0)),
                    vec![ended(0.25, 0, HoldEnd::Idle), relay(TERM)],
                    Phase::Stopping,
                    Some(25.0),
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
                (5.0, Tick, vec![SampleInFlight], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    InFlight(Some(2)),
                    vec![HoldBegan { in_flight: 2 }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (
                    14.95,
                    Tick,
                    vec![SampleInFlight],
                    Phase::Draining,
                    Some(15.0),
                ),
                (
                    14.95,
                    InFlight(Some(1)),
                    vec![],
                    Phase::Draining,
                    Some(15.0),
                ),
                (
                    15.0,
                    Tick,
                    vec![ended(10.0, 1, HoldEnd::DrainMax), relay(TERM)],
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
                (5.0, Tick, vec![SampleInFlight], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    InFlight(Some(9)),
                    vec![HoldBegan { in_flight: 9 }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (
                    6.0,
                    Event::Signal(TERM),
                    vec![ended(1.0, 9, HoldEnd::SecondTerm), relay(TERM)],
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
                (5.0, Tick, vec![SampleInFlight], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    InFlight(Some(1)),
                    vec![HoldBegan { in_flight: 1 }],
                    Phase::Draining,
                    Some(5.1),
                ),
                (
                    7.0,
                    AppExited(AppStatus::Killed(KILL)),
                    vec![ended(2.0, 1, HoldEnd::AppExited), remaining(false)],
                    Phase::Exited,
                    Some(25.0),
                ),
                (7.0, InFlight(Some(0)), vec![], Phase::Exited, Some(25.0)),
                (7.0, NoChildrenLeft, vec![Exit(137)], Phase::Exited, None),
            ],
        );
    }

    #[test]
    fn hold_a_failed_sample_counts_as_idle() {
        run_table(
            holding(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (5.0, Tick, vec![SampleInFlight], Phase::Draining, Some(5.1)),
                (
                    5.0,
                    InFlight(None),
                    vec![relay(TERM)],
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
                    vec![SampleInFlight, relay(TERM), KillAll],
                    Phase::Stopping,
                    Some(32.0),
                ),
                (30.0, InFlight(Some(5)), vec![], Phase::Stopping, Some(32.0)),
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
                vec![relay(TERM)],
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
                (5.0, Tick, vec![relay(QUIT)], Phase::Stopping, Some(25.0)),
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
    fn app_exit_during_the_drain_keeps_the_deadline_already_running() {
        run_table(
            config(),
            vec![
                (0.0, Event::Signal(TERM), vec![], Phase::Draining, Some(5.0)),
                (
                    1.0,
                    AppExited(AppStatus::Killed(TERM)),
                    vec![remaining(false)],
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
                    vec![relay(TERM)],
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
                    vec![relay(TERM), KillAll],
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
        let mut machine = Lifecycle::new(cfg);
        let now = Instant::now();
        assert_eq!(machine.on(Event::Signal(TERM), now), vec![]);
        assert_eq!(
            machine.on(AppExited(AppStatus::Exited(0)), now),
            vec![remaining(false)]
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
