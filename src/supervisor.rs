//! The one supervision loop, on the main thread and synchronous, shaped like tini's:
//! block on the signal inbox (SIGCHLD included) and the supervisor's bell with one
//! timeout — the lifecycle's deadline —, feed the lifecycle machine, carry out its
//! actions (forward, reap, signal the rest, kill, exit). It is the only code that
//! waits for children or sends signals. No runtime, no HTTP, netlink or DNS here, and
//! nothing a helper holds: the Board is read with atomics and `try_lock`
//! (ARCHITECTURE.md).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::board::Board;
use crate::kernel::{self, AppTerminal, Descendant, ProcView, Reaped, SignalInbox};
use crate::lifecycle::{Action, Actions, AppStatus, DrainEnd, Event, Lifecycle, Look, Phase};
use crate::logging;
use crate::signal_names::{self, Signal};

/// What `forward` did, for its log line.
enum Sent {
    /// The app is gone: to the members of its group still running, one by one.
    ToWhatIsLeft(usize),
    ToApp(std::io::Result<()>),
}

/// While log lines wait in the supervision thread's own queue (stderr was full), the
/// loop wakes this often to write them.
const LOG_RETRY: Duration = Duration::from_millis(50);

pub struct Supervisor {
    pub lifecycle: Lifecycle,
    /// The app's pid, which is also its process group's id: it was started with setsid.
    pub app_pid: i32,
    pub warn_on_reap: bool,
    /// Where the phase and counters are published, and the app check's and the
    /// sampler's results are read.
    pub board: Arc<Board>,
    /// How the app got the terminal; with a foreground group, a Ctrl-Z that stops the
    /// app stops lifeguard too (kernel::stop_with_app).
    pub terminal: AppTerminal,
    /// The traffic figures the hold saw last, for a look that finds the board busy.
    pub last_look: Option<Look>,
    /// The senders of the signals read but not yet stepped, in order.
    pub senders: std::collections::VecDeque<i32>,
    /// lifeguard's own pid, to tell the signals it raised itself.
    pub me: i32,
}

impl Supervisor {
    /// Runs until the lifecycle says exit; returns lifeguard's exit code.
    pub fn run(mut self, mut inbox: SignalInbox) -> u8 {
        // Buffers kept for the whole run: the path from a signal to its relay allocates
        // nothing (see `step`).
        let mut events = Vec::with_capacity(64);
        let mut received = Vec::with_capacity(64);
        self.senders.reserve(64);
        let mut ready_seen = false;
        loop {
            // Signals read in the last turn go first, before anything is reaped: one that
            // came just before the app's exit is the running app's (its group, its pid),
            // and the pid is not free for reuse until it is reaped (issue #9).
            for event in events.drain(..) {
                if let Some(code) = self.step(event) {
                    return code;
                }
            }
            self.follow_a_stop_at_the_terminal();
            self.reap(&mut events);
            for event in events.drain(..) {
                if let Some(code) = self.step(event) {
                    return code;
                }
            }
            if !ready_seen && self.board.check_passed() {
                ready_seen = true;
                if let Some(code) = self.step(Event::AppReady) {
                    return code;
                }
            }
            logging::pump();
            let now = Instant::now();
            let mut timeout = self
                .lifecycle
                .deadline()
                .map(|at| at.saturating_duration_since(now));
            if logging::pending() {
                timeout = Some(timeout.map_or(LOG_RETRY, |t| t.min(LOG_RETRY)));
            }
            let woke = match inbox.wait(self.board.supervisor_bell.fd(), timeout) {
                Ok(woke) => woke,
                Err(err) => {
                    // poll(2) fails only on bad arguments or no memory: say so, and go
                    // on as if the timeout had passed rather than spin.
                    logging::error(format!("waiting for signals: {err}"), &[]);
                    std::thread::sleep(LOG_RETRY);
                    kernel::Woke::default()
                }
            };
            if woke.bell {
                self.board.supervisor_bell.clear();
            }
            if woke.signals {
                // A SIGTERM about to leave the kernel's queue keeps /readyz at draining
                // until the phase that follows it is published (Board::term_taken). Once
                // it is handled the phase is past Running, so this asks the kernel no more.
                if matches!(self.lifecycle.phase(), Phase::Starting | Phase::Running)
                    && kernel::signal_pending(signal_names::TERM)
                {
                    self.board.set_term_taken();
                }
                // take_all reads until EAGAIN, so the inbox is drained either way.
                if let Err(err) = inbox.take_all(&mut received) {
                    logging::error(format!("reading signals: {err}"), &[]);
                }
                crate::faults::point("signals-taken");
                self.received(received.drain(..), &mut events);
            }
            if self
                .lifecycle
                .deadline()
                .is_some_and(|at| at <= Instant::now())
            {
                events.push(Event::Tick);
            }
        }
    }

    fn received(
        &mut self,
        received: impl Iterator<Item = kernel::Received>,
        events: &mut Vec<Event>,
    ) {
        for kernel::Received { signal, sender } in received {
            if signal == signal_names::CHLD {
                continue; // reaping happens on every turn of the loop
            }
            if sender == self.me {
                // Raised by lifeguard's own doing (SIGPIPE from a write to a closed
                // stderr): not the orchestrator's, so not the app's business.
                logging::debug(
                    "ignored a signal lifeguard raised itself",
                    &[("signal", &signal)],
                );
                continue;
            }
            // Said by `step`, after the signal has been passed on.
            self.senders.push_back(sender);
            events.push(Event::Signal(signal));
        }
    }

    /// The log line of a signal received from `sender`.
    fn tell_received(signal: Signal, sender: i32) {
        // si_pid is 0 for a signal from outside lifeguard's PID namespace (`docker
        // stop`, the kubelet) or from the kernel itself.
        let from = if sender == 0 {
            "outside the namespace".to_string()
        } else {
            sender.to_string()
        };
        let fields: &[logging::Field] = &[("signal", &signal), ("from", &from)];
        if signal == signal_names::TERM {
            logging::notice("signal received", fields);
        } else {
            logging::info("signal received", fields);
        }
    }

    /// Takes every exited child until none is left to take.
    fn reap(&mut self, events: &mut Vec<Event>) {
        loop {
            match kernel::reap_one() {
                Reaped::Child { pid, status } if pid == self.app_pid => {
                    let status = AppStatus::from_wait(status);
                    logging::notice(
                        "app exited",
                        &[
                            ("pid", &pid),
                            ("status", &status_text(status)),
                            ("code", &status.code()),
                        ],
                    );
                    events.push(Event::AppExited(status));
                }
                Reaped::Child { pid, status } => {
                    let status = AppStatus::from_wait(status);
                    self.board.counters.zombie_reaped();
                    if self.warn_on_reap {
                        logging::warn(
                            "reaped zombie",
                            &[("pid", &pid), ("status", &status_text(status))],
                        );
                    }
                }
                Reaped::NoneExited => break,
                Reaped::NoChildren => {
                    events.push(Event::NoChildrenLeft);
                    break;
                }
            }
        }
    }

    /// With the app as the terminal's foreground group, a Ctrl-Z stops the app alone:
    /// lifeguard stops with it so the shell sees its job stopped (kernel::stop_with_app).
    fn follow_a_stop_at_the_terminal(&self) {
        if self.terminal != AppTerminal::ForegroundGroup || self.lifecycle.phase() == Phase::Exited
        {
            return;
        }
        if let Some(signal) = kernel::app_stopped(self.app_pid).filter(|s| is_job_control(*s)) {
            logging::info(
                "app stopped at the terminal: stopping too",
                &[("signal", &signal)],
            );
            kernel::stop_with_app(self.app_pid);
            logging::info("continued", &[]);
        }
    }

    /// Feeds one event to the machine and carries out what it answers, including the
    /// events its actions answer with (a look at the traffic figures). What reaches
    /// processes goes first, and only then is anything formatted for the log: a relayed
    /// signal's latency is the code run before its kill(2), and on the first signal of
    /// a process every page of that code is touched for the first time.
    fn step(&mut self, event: Event) -> Option<u8> {
        let mut exit = None;
        let mut next = Some(event);
        while let Some(event) = next.take() {
            let before = self.lifecycle.phase();
            let actions = self.lifecycle.on(event, Instant::now());
            let after = self.lifecycle.phase();
            let mut sent: [Option<Sent>; Actions::CAPACITY] = Default::default();
            for (slot, action) in sent.iter_mut().zip(actions.iter()) {
                if let Action::Forward { signal, relay } = action {
                    *slot = Some(self.forward(signal, relay));
                }
            }
            if sent.iter().any(Option::is_some) {
                // The app was just woken by the signal, often onto this very CPU (the
                // scheduler keeps a wakee near its waker), where it would wait for
                // lifeguard's logging to finish: let it run its handler first.
                std::thread::yield_now();
            }
            if let Event::Signal(signal) = event {
                if let Some(sender) = self.senders.pop_front() {
                    Self::tell_received(signal, sender);
                }
            }
            if after != before {
                self.tell_phase(before, after);
            }
            for (action, sent) in actions.iter().zip(sent) {
                match action {
                    Action::Forward { signal, relay } => {
                        if let Some(sent) = sent {
                            self.tell_forwarded(signal, relay, sent);
                        }
                    }
                    Action::SignalRemaining {
                        signal,
                        spare_app_group,
                    } => self.signal_remaining(signal, spare_app_group),
                    Action::KillAll => self.kill_all(),
                    Action::LookAtTraffic => next = Some(Event::Traffic(self.look())),
                    Action::HoldBegan { in_flight } => logging::info(
                        "drain delay over, the port is not quiet: holding the stop signal",
                        &[
                            ("in_flight", &in_flight),
                            ("until", &"quiet or --drain-max"),
                        ],
                    ),
                    Action::DrainOver {
                        after,
                        why,
                        in_flight,
                    } => self.drain_over(after, why, in_flight),
                    Action::Exit(code) => exit = Some(code),
                }
            }
            // After the signals went out: the phase's publication (a bell to the
            // sampler) is not worth a microsecond of the relay.
            if after != before {
                self.board.set_phase(after);
            }
        }
        exit
    }

    /// The sampler's latest traffic figures, read without waiting: if the sampler is
    /// writing them this instant, the previous ones (the next look is 100 ms away).
    fn look(&mut self) -> Option<Look> {
        if let Ok(look) = self.board.traffic() {
            self.last_look = look;
        }
        self.last_look
    }

    fn drain_over(&mut self, after: Duration, why: DrainEnd, in_flight: Option<u64>) {
        self.board.set_drain_seconds(after.as_secs_f64());
        let after_ms = format!("{}ms", after.as_millis());
        let in_flight = in_flight.map_or_else(|| "unknown".to_string(), |n| n.to_string());
        match why {
            DrainEnd::Delay => logging::notice("drain delay over", &[("after", &after_ms)]),
            DrainEnd::Quiet { quiet_for } => logging::notice(
                "the port is quiet: drain over",
                &[
                    ("after", &after_ms),
                    ("quiet_for", &format!("{}ms", quiet_for.as_millis())),
                ],
            ),
            DrainEnd::DrainMax if in_flight != "0" => logging::warn(
                "--drain-max reached with requests still in flight: relaying the stop signal anyway",
                &[("after", &after_ms), ("in_flight", &in_flight)],
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
                "second SIGTERM: drain cut short",
                &[("after", &after_ms), ("in_flight", &in_flight)],
            ),
            DrainEnd::AppExited => logging::notice(
                "the app exited during the drain",
                &[("after", &after_ms), ("in_flight", &in_flight)],
            ),
            DrainEnd::GaugeFailed => logging::warn(
                "in-flight figures unavailable: drain over (a broken gauge never holds a stop)",
                &[("after", &after_ms)],
            ),
        }
    }

    /// Says the phase changed (queued: the loop writes its lines at the end of the
    /// turn, so this still comes before the lines of the actions it led to).
    fn tell_phase(&self, before: Phase, after: Phase) {
        match after {
            Phase::Running => logging::info("app ready", &[]),
            Phase::Draining => logging::notice(
                "draining: not ready, stop signal relayed after the drain delay",
                &[(
                    "delay",
                    &humantime::format_duration(self.lifecycle.config().drain_delay),
                )],
            ),
            _ => logging::debug(
                "phase",
                &[
                    ("from", &format!("{before:?}")),
                    ("to", &format!("{after:?}")),
                ],
            ),
        }
    }

    /// Sends a signal on to the app (its group, or the child alone), and SIGCONT after
    /// the stop signal. Logs nothing: `tell_forwarded` does, once every signal of the
    /// step is out.
    fn forward(&mut self, signal: Signal, relay: bool) -> Sent {
        let group = self.lifecycle.config().group;
        if self.lifecycle.phase() == Phase::Exited {
            // The app has been reaped, so its pid (and, once its group is empty, its
            // group id) may belong to an unrelated process by now: signal the members
            // of its group still running one by one, or, with -c, nobody.
            let remaining: Vec<i32> = if group {
                self.group_members().iter().map(|d| d.pid).collect()
            } else {
                Vec::new()
            };
            for pid in &remaining {
                let _ = if relay {
                    send_then_continue(*pid, signal)
                } else {
                    kernel::send(*pid, signal)
                };
            }
            if !remaining.is_empty() {
                self.board.counters.signal_forwarded(signal);
            }
            return Sent::ToWhatIsLeft(remaining.len());
        }
        let target = if group { -self.app_pid } else { self.app_pid };
        let result = if is_job_control(signal) {
            self.stop_for_real(signal, group)
        } else if relay {
            send_then_continue(target, signal)
        } else {
            kernel::send(target, signal)
        };
        if result.is_ok() {
            self.board.counters.signal_forwarded(signal);
        }
        Sent::ToApp(result)
    }

    fn tell_forwarded(&self, signal: Signal, relay: bool, sent: Sent) {
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

    /// The app runs in a session of its own, so its process group is orphaned, and the
    /// kernel discards TSTP/TTIN/TTOU sent to an orphaned group's members whose default
    /// action would stop them (POSIX; kernel/signal.c, is_current_pgrp_orphaned). So
    /// each member is sent the signal itself if it catches, blocks or ignores it, and
    /// SIGSTOP otherwise, as a terminal's Ctrl-Z would stop a group that is not orphaned: behind
    /// `sh -c`, the shell stops and the app runs its handler.
    fn stop_for_real(&self, signal: Signal, group: bool) -> std::io::Result<()> {
        let mut result = Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        let mut sent = Vec::new();
        // A member forked while the walk ran is missed by it (kill(-pgid) would not
        // miss it): walk again until a walk finds nobody new, a few times at most.
        for _ in 0..3 {
            let members: Vec<Descendant> = kernel::descendants()
                .into_iter()
                .filter(|d| {
                    if group {
                        d.pgid == self.app_pid
                    } else {
                        d.pid == self.app_pid
                    }
                })
                .filter(|d| !sent.contains(&d.pid))
                .collect();
            if members.is_empty() {
                break;
            }
            for member in members {
                let deliverable = if kernel::handles(&member, signal) {
                    signal
                } else {
                    signal_names::STOP
                };
                if kernel::send(member.pid, deliverable).is_ok() {
                    result = Ok(());
                }
                sent.push(member.pid);
            }
        }
        result
    }

    /// The live members of the app's process group (all of them are below lifeguard).
    fn group_members(&self) -> Vec<Descendant> {
        kernel::descendants()
            .into_iter()
            .filter(|d| d.pgid == self.app_pid)
            .collect()
    }

    fn signal_remaining(&mut self, signal: Signal, spare_app_group: bool) {
        // The common end: the app left nothing behind, so no walk (issue #9: a cost at
        // every exit).
        if !kernel::has_children() {
            return;
        }
        if kernel::proc_view() == ProcView::Blind {
            // No /proc to tell the app's group from the rest: as PID 1 the kernel's view
            // reaches everyone (unless the group must be spared a second SIGTERM, when
            // the deadline's SIGKILL is what is left); as a subreaper, nobody (README).
            if kernel::is_pid1() && !spare_app_group {
                kernel::signal_everything_in_namespace(signal);
                kernel::signal_everything_in_namespace(signal_names::CONT);
                logging::info(
                    "signalled everything left in the namespace",
                    &[("signal", &signal)],
                );
            }
            return;
        }
        let mut sent = 0;
        for d in kernel::descendants() {
            if spare_app_group && d.pgid == self.app_pid {
                continue;
            }
            if send_then_continue(d.pid, signal).is_ok() {
                sent += 1;
            }
        }
        if sent > 0 {
            logging::info(
                "signalled what the app left running",
                &[("signal", &signal), ("processes", &sent)],
            );
        }
    }

    /// The grace deadline: SIGKILL to everything lifeguard answers for. Repeated walks
    /// catch processes forked while the previous walk ran.
    fn kill_all(&mut self) {
        if kernel::is_pid1() {
            kernel::signal_everything_in_namespace(signal_names::KILL);
        }
        let mut killed = Vec::new();
        for _ in 0..10 {
            let found = kernel::descendants();
            if found.is_empty() {
                break;
            }
            for d in found {
                if kernel::send(d.pid, signal_names::KILL).is_ok() && !killed.contains(&d.pid) {
                    killed.push(d.pid);
                }
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

/// Sends a stop signal, then SIGCONT: a stopped process would sit on the stop signal
/// until the deadline's SIGKILL, and SIGCONT lets it act on it (as systemd does after
/// its stop signal). Not when the signal itself stops (a stop signal rewritten to STOP,
/// TSTP, TTIN or TTOU): SIGCONT would undo it.
fn send_then_continue(target: i32, signal: Signal) -> std::io::Result<()> {
    let sent = kernel::send(target, signal);
    if sent.is_ok() && !is_stop(signal) {
        let _ = kernel::send(target, signal_names::CONT);
    }
    sent
}

fn status_text(status: AppStatus) -> String {
    match status {
        AppStatus::Exited(code) => format!("exit {code}"),
        AppStatus::Killed(sig) => format!("killed by {sig}"),
    }
}

fn is_job_control(signal: Signal) -> bool {
    [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU].contains(&signal.0)
}

fn is_stop(signal: Signal) -> bool {
    signal.0 == libc::SIGSTOP || is_job_control(signal)
}
