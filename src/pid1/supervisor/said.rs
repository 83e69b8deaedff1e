//! Supervision's log lines: a signal received, passed on, a phase's change (the stop's
//! plan), a drain's end. Formatted only after what reaches processes has gone out.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use super::forwarding::Sent;
use super::Supervisor;
use crate::logging;
use crate::pid1::lifecycle::{AppStatus, Blindness, DrainEnd, Phase};
use crate::pid1::sys::Sys;
use crate::signal_names::Signal;

impl<S: Sys> Supervisor<S> {
    /// The hold's start, at the default level: a stop that the orchestrator cuts short
    /// (Docker's 10 s) is then explained by the last line before it.
    pub(super) fn tell_hold_began(&self, in_flight: u64, at_the_latest: Duration) {
        let what = if self.port_never_seen() {
            "drain delay over, but nothing has been seen listening on --inflight-port since lifeguard started: the drain cannot tell the app is idle, so it holds the stop signal until --drain-max (is --inflight-port the app's port?)"
        } else {
            "drain delay over, the port is not quiet: holding the stop signal until it is, or --drain-max"
        };
        logging::notice(
            what,
            &[
                ("in_flight", &in_flight),
                (
                    "port",
                    &self
                        .inflight_port
                        .map_or("?".to_string(), |p| p.to_string()),
                ),
                ("at_the_latest_in", &crate::seconds::measured(at_the_latest)),
            ],
        )
    }

    /// The hold cannot see the port: late is not quiet, so it holds on, and says why
    /// once a spell (a stop cut at --drain-max is then explained by this line).
    pub(super) fn tell_hold_blind(&self, why: Blindness, at_the_latest: Duration) {
        let what = match why {
            Blindness::Late => "draining: no fresh look at the port for 1s (helper starved, stopped or restarting): holding the stop signal until one finds it quiet, or --drain-max",
            Blindness::CannotRead => "draining: the helper cannot read the port's sockets: holding the stop signal until --drain-max",
        };
        logging::warn(
            what,
            &[("at_the_latest_in", &crate::seconds::measured(at_the_latest))],
        )
    }

    /// The log line of a signal received from `sender`.
    /// `stop`: the stop signal, said at notice level.
    pub(super) fn tell_received(signal: Signal, sender: i32, stop: bool) {
        // si_pid is 0 for a signal from outside lifeguard's PID namespace (`docker
        // stop`, the kubelet) or from the kernel itself.
        let from = if sender == 0 {
            "outside the namespace".to_string()
        } else {
            sender.to_string()
        };
        let fields: &[logging::Field] = &[("signal", &signal), ("from", &from)];
        if stop {
            logging::notice("signal received", fields);
        } else {
            logging::info("signal received", fields);
        }
    }

    pub(super) fn tell_forwarded(&self, signal: Signal, relay: bool, sent: Sent) {
        let what = if relay {
            "stop signal relayed"
        } else {
            "signal forwarded"
        };
        let level = if relay {
            logging::Level::Notice
        } else {
            logging::Level::Info
        };
        match sent {
            Sent::ToWhatIsLeft(processes) => logging::info(
                what,
                &[
                    ("signal", &signal),
                    ("to", &"what is left of the group"),
                    ("processes", &processes),
                ],
            ),
            Sent::ToApp(Ok(())) => {
                let to = if self.lifecycle.config().group {
                    "group"
                } else {
                    "child"
                };
                logging::log(
                    level,
                    what,
                    &[("signal", &signal), ("to", &to), ("pid", &self.app_pid)],
                )
            }
            // ESRCH: the app (or its whole group) is already gone; nothing to tell.
            Sent::ToApp(Err(err)) => {
                logging::debug(format!("{what}: {err}"), &[("signal", &signal)])
            }
        }
    }

    /// Says the phase changed (queued: the loop writes its lines at the end of the
    /// turn, so this still comes before the lines of the actions it led to).
    pub(super) fn tell_phase(&self, before: Phase, after: Phase) {
        match after {
            Phase::Running => logging::info("app ready", &[]),
            Phase::Draining => {
                // The stop's plan, from this SIGTERM: an orchestrator that kills before
                // `sigkill_at` (Docker's 10 s) leaves this line as the last word, and it
                // says why there was no "grace deadline reached".
                let config = self.lifecycle.config();
                let plus = |d: Duration| format!("+{}", crate::seconds::human(d));
                let (what, relay_by) = match config.drain_max {
                    Some(max) => (
                        "draining: not ready; the stop signal is relayed once the port is quiet after the drain delay, by relay_by at the latest; what still runs at sigkill_at gets SIGKILL",
                        max,
                    ),
                    None => (
                        "draining: not ready; the stop signal is relayed after the drain delay, at relay_by; what still runs at sigkill_at gets SIGKILL",
                        config.drain_delay,
                    ),
                };
                let mut fields: Vec<logging::Field> = Vec::with_capacity(4);
                let (delay, relay_by, kill) = (
                    crate::seconds::human(config.drain_delay).to_string(),
                    plus(relay_by),
                    plus(config.grace),
                );
                fields.push(("delay", &delay));
                fields.push(("relay_by", &relay_by));
                fields.push(("sigkill_at", &kill));
                if self.ready_port.is_some() {
                    fields.push(("ready_port", &"closed"));
                }
                // Read off the Board, where the helper writes the expiry the agent
                // confirmed: true even if the helper is gone, as ECS's own expiry is.
                let protected = self.board.scale_in_protected(Instant::now());
                if self.scale_in_protection {
                    fields.push(("scale_in_protected", if protected { &"yes" } else { &"no" }));
                }
                logging::notice(what, &fields);
            }
            // A stop with no drain (a drain delay of 0 and no --inflight-port): the stop
            // signal goes at once, and the plan still has its deadline to say, for the
            // same reason as the draining line's.
            Phase::Stopping if matches!(before, Phase::Starting | Phase::Running) => {
                let kill = format!("+{}", crate::seconds::human(self.lifecycle.config().grace));
                logging::notice(
                    "stopping: no drain delay, the stop signal is relayed at once; what still runs at sigkill_at gets SIGKILL",
                    &[("delay", &"0s"), ("sigkill_at", &kill)],
                );
            }
            _ => logging::debug(
                "phase",
                &[
                    ("from", &format!("{before:?}")),
                    ("to", &format!("{after:?}")),
                ],
            ),
        }
    }

    pub(super) fn drain_over(&mut self, after: Duration, why: DrainEnd, in_flight: Option<u64>) {
        self.board.set_drain_seconds(after.as_secs_f64());
        let after_ms = format!("{}ms", after.as_millis());
        let in_flight = in_flight.map_or_else(|| "unknown".to_string(), |n| n.to_string());
        match why {
            DrainEnd::Delay => logging::notice("drain delay over", &[("after", &after_ms)]),
            // Which rule decided: nothing in flight and nothing new on the port, and
            // whether the namespace's counter could be held against it too (no other
            // listener beside the app's and lifeguard's).
            DrainEnd::Quiet { quiet_for } => logging::notice(
                "the port is quiet: drain over",
                &[
                    ("after", &after_ms),
                    ("quiet_for", &crate::seconds::measured(quiet_for)),
                    (
                        "seen_by",
                        &if self.last_look.is_none_or(|l| l.namespace_counted) {
                            "the port's sockets and the namespace's accepts"
                        } else {
                            "the port's sockets (other listeners share the namespace)"
                        },
                    ),
                ],
            ),
            DrainEnd::DrainMax if in_flight != "0" => logging::warn(
                "--drain-max reached with requests still in flight: relaying the stop signal anyway",
                &[("after", &after_ms), ("in_flight", &in_flight)],
            ),
            DrainEnd::DrainMax if self.port_never_seen() => logging::warn(
                "--drain-max reached: nothing was ever seen listening on --inflight-port, so the drain could not tell the app was idle; relaying the stop signal (is --inflight-port the app's port?)",
                &[
                    ("after", &after_ms),
                    ("port", &self.inflight_port.map_or("?".to_string(), |p| p.to_string())),
                ],
            ),
            DrainEnd::DrainMax => {
                // Nothing in flight, but the port never stayed quiet: say what kept it
                // busy (a sidecar's connections in the same network namespace, say).
                let by = self.last_look.map_or("nothing", |l| l.busy_by.describe());
                logging::notice(
                    "--drain-max reached: the port was never quiet for --drain-quiet",
                    &[("after", &after_ms), ("last_busy_by", &by)],
                )
            }
            DrainEnd::SecondTerm => logging::notice(
                format!(
                    "second {}: drain cut short",
                    self.lifecycle.config().stop_signal
                ),
                &[("after", &after_ms), ("in_flight", &in_flight)],
            ),
            DrainEnd::AppExited => logging::notice(
                "the app exited during the drain",
                &[("after", &after_ms), ("in_flight", &in_flight)],
            ),
            DrainEnd::Blind => logging::warn(
                "--drain-max reached without a fresh look at the port: relaying the stop signal",
                &[("after", &after_ms), ("last_in_flight", &in_flight)],
            ),
        }
    }
}

pub(super) fn status_text(status: AppStatus) -> String {
    match status {
        AppStatus::Exited(code) => format!("exit {code}"),
        AppStatus::Killed(sig) => format!("killed by {sig}"),
    }
}
