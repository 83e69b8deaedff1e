//! The lifecycle as a table: each row an event at a time, the actions it gives, the phase
//! and the deadline after it.

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
