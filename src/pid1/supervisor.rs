//! The one supervision loop, on the main thread and synchronous, shaped like tini's:
//! block on the signal inbox (SIGCHLD included) and the supervisor's bell with one
//! timeout — the lifecycle's deadline —, feed the lifecycle machine, carry out its
//! actions (forward, reap, signal the rest, kill, exit). It is the only code that
//! waits for children or sends signals, and it keeps the helper process (the keeper's
//! answers). No runtime, no HTTP, netlink or DNS here, and no lock: the Board is shared
//! memory read and written with atomics (ARCHITECTURE.md).
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use crate::board::Board;
use crate::kernel::{self, AppTerminal, Descendant, ProcView, Reaped};
use crate::logging;
use crate::pid1::keeper::{Do, Keeper};
use crate::pid1::lifecycle::{Action, Actions, AppStatus, DrainEnd, Event, Lifecycle, Look, Phase};
use crate::pid1::sys::Sys;
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

pub struct Supervisor<S: Sys> {
    /// Every system call supervision makes.
    pub sys: S,
    pub lifecycle: Lifecycle,
    /// The helper process: when to start it, restart it, kill it.
    pub keeper: Keeper,
    /// Whether the app is ready only once the helper's app check says so (otherwise
    /// from its start).
    pub app_check: bool,
    /// The app's pid, which is also its process group's id: it was started with setsid.
    pub app_pid: i32,
    pub warn_on_reap: bool,
    /// Where the phase and counters are published, and the app check's and the
    /// sampler's results are read.
    pub board: Board,
    /// How the app got the terminal; with a foreground group, a Ctrl-Z that stops the
    /// app stops lifeguard too (kernel::stop_with_app).
    pub terminal: AppTerminal,
    /// The traffic figures the hold saw last, for a look that finds the board busy.
    pub last_look: Option<Look>,
    /// The senders of the signals read but not yet stepped, in order.
    pub senders: std::collections::VecDeque<i32>,
    /// lifeguard's own pid, to tell the signals it raised itself.
    pub me: i32,
    /// `--inflight-port`, for the hold's log line.
    pub inflight_port: Option<u16>,
}

impl<S: Sys> Supervisor<S> {
    /// Runs until the lifecycle says exit; returns lifeguard's exit code.
    pub fn run(mut self) -> u8 {
        // Buffers kept for the whole run: the path from a signal to its relay allocates
        // nothing (see `step`).
        let mut events = Vec::with_capacity(64);
        let mut received = Vec::with_capacity(64);
        self.senders.reserve(64);
        let mut ready_seen = false;
        if !self.app_check {
            ready_seen = true;
            events.push(Event::AppReady);
        }
        loop {
            // Signals read in the last turn go first, before anything is reaped: one that
            // came just before the app's exit is the running app's (its group, its pid),
            // and the pid is not free for reuse until it is reaped.
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
            self.keep_the_helper();
            logging::pump();
            let now = Instant::now();
            let mut timeout = self.deadline().map(|at| at.saturating_duration_since(now));
            if logging::pending() {
                timeout = Some(timeout.map_or(LOG_RETRY, |t| t.min(LOG_RETRY)));
            }
            let woke = match self.sys.wait(self.board.supervisor_bell.fd(), timeout) {
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
                // A SIGTERM still pending is marked before it leaves the kernel's set:
                // the endpoint asks that set first, then the mark, so one of them says
                // draining from the kill(2) on. Past Running it asks the kernel no more.
                if matches!(self.lifecycle.phase(), Phase::Starting | Phase::Running)
                    && self.sys.pending(signal_names::TERM)
                {
                    self.board.set_term_taken();
                }
                // take_all reads until EAGAIN, so the inbox is drained either way.
                if let Err(err) = self.sys.take_signals(&mut received) {
                    logging::error(format!("reading signals: {err}"), &[]);
                }
                // A SIGTERM just read keeps /readyz at draining until the phase that
                // follows it is published (Board::set_term_taken): marked before anything
                // else is done with it, the instant it leaves the kernel's queue.
                if received.iter().any(|r| r.signal == signal_names::TERM) {
                    self.board.set_term_taken();
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

    /// The next instant something is due: the lifecycle's, or the keeper's.
    fn deadline(&self) -> Option<Instant> {
        let keeper = self.keeper.deadline(self.board.last_beat());
        match (self.lifecycle.deadline(), keeper) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Carries out what the keeper says is due: a (re)start, the kill of a hung
    /// helper, the kill of one that would not leave.
    fn keep_the_helper(&mut self) {
        let now = Instant::now();
        if let Some(what) = self.keeper.tick(self.board.last_beat(), now) {
            self.keeper_do(what, now);
        }
    }

    fn keeper_do(&mut self, what: Do, now: Instant) {
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
                            &[("again_in", &humantime::format_duration(death.pause))],
                        );
                    }
                }
            },
            Do::Kill { pid, hung_for } => {
                let _ = self.sys.send(pid, signal_names::KILL);
                if let Some(silent) = hung_for {
                    logging::error(
                        "the helper process hangs (no heartbeat): killed, and started again",
                        &[
                            ("pid", &pid),
                            ("silent_for", &format!("{}ms", silent.as_millis())),
                        ],
                    );
                }
            }
            Do::AskToLeave => self.board.ask_helper_to_leave(),
        }
    }

    /// The helper's work is over (the app has exited, or the deadline came).
    fn let_the_helper_go(&mut self) {
        let now = Instant::now();
        if let Some(what) = self.keeper.let_go(now) {
            self.keeper_do(what, now);
        }
    }

    /// The helper process was reaped (not the app's, not a zombie of its).
    fn helper_exited(&mut self, pid: i32, status: AppStatus) {
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
                    ("again_in", &humantime::format_duration(death.pause)),
                ],
            );
        }
    }

    /// lifeguard's descendants, the helper process left out: it is not the app's.
    fn descendants(&mut self) -> Vec<Descendant> {
        let helper = self.keeper.pid();
        let mut found = self.sys.descendants();
        found.retain(|d| Some(d.pid) != helper);
        found
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
            match self.sys.reap_one() {
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
                Reaped::Child { pid, status } if Some(pid) == self.keeper.pid() => {
                    self.helper_exited(pid, AppStatus::from_wait(status));
                }
                Reaped::Child { pid, status } => {
                    let status = AppStatus::from_wait(status);
                    self.board.zombie_reaped();
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
    fn follow_a_stop_at_the_terminal(&mut self) {
        if self.terminal != AppTerminal::ForegroundGroup || self.lifecycle.phase() == Phase::Exited
        {
            return;
        }
        if let Some(signal) = self
            .sys
            .app_stopped(self.app_pid)
            .filter(|s| is_job_control(*s))
        {
            logging::info(
                "app stopped at the terminal: stopping too",
                &[("signal", &signal)],
            );
            self.sys.stop_with_app(self.app_pid);
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
                    Action::KillAll => {
                        self.let_the_helper_go();
                        self.kill_all()
                    }
                    Action::LookAtTraffic => next = Some(Event::Traffic(self.look())),
                    // At the default level: a stop that the orchestrator cuts short
                    // (Docker's 10 s) is then explained by the last line before it.
                    Action::HoldBegan {
                        in_flight,
                        at_the_latest,
                    } => logging::notice(
                        "drain delay over, the port is not quiet: holding the stop signal until it is, or --drain-max",
                        &[
                            ("in_flight", &in_flight),
                            ("port", &self.inflight_port.map_or("?".to_string(), |p| p.to_string())),
                            ("at_the_latest_in", &humantime::format_duration(Duration::from_millis(at_the_latest.as_millis() as u64))),
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
                if after == Phase::Exited {
                    self.let_the_helper_go();
                }
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
            // Which rule decided: nothing in flight and nothing new on the port, and
            // whether the namespace's counter could be held against it too (no other
            // listener beside the app's and lifeguard's).
            DrainEnd::Quiet { quiet_for } => logging::notice(
                "the port is quiet: drain over",
                &[
                    ("after", &after_ms),
                    ("quiet_for", &format!("{}ms", quiet_for.as_millis())),
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
                    self.send_then_continue(*pid, signal)
                } else {
                    self.sys.send(*pid, signal)
                };
            }
            if !remaining.is_empty() {
                self.board.signal_forwarded(signal);
            }
            return Sent::ToWhatIsLeft(remaining.len());
        }
        let target = if group { -self.app_pid } else { self.app_pid };
        let result = if is_job_control(signal) {
            self.stop_for_real(signal, group)
        } else if relay {
            self.send_then_continue(target, signal)
        } else {
            self.sys.send(target, signal)
        };
        if result.is_ok() {
            self.board.signal_forwarded(signal);
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
    fn stop_for_real(&mut self, signal: Signal, group: bool) -> std::io::Result<()> {
        let mut result = Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        let mut sent = Vec::new();
        // A member forked while the walk ran is missed by it (kill(-pgid) would not
        // miss it): walk again until a walk finds nobody new, a few times at most.
        for _ in 0..3 {
            let members: Vec<Descendant> = self
                .descendants()
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
                let deliverable = if self.sys.handles(&member, signal) {
                    signal
                } else {
                    signal_names::STOP
                };
                if self.sys.send(member.pid, deliverable).is_ok() {
                    result = Ok(());
                }
                sent.push(member.pid);
            }
        }
        result
    }

    /// Sends a stop signal, then SIGCONT: a stopped process would sit on the stop signal
    /// until the deadline's SIGKILL, and SIGCONT lets it act on it (as systemd does after
    /// its stop signal). Not when the signal itself stops (a stop signal rewritten to
    /// STOP, TSTP, TTIN or TTOU): SIGCONT would undo it.
    fn send_then_continue(&mut self, target: i32, signal: Signal) -> std::io::Result<()> {
        let sent = self.sys.send(target, signal);
        if sent.is_ok() && !is_stop(signal) {
            let _ = self.sys.send(target, signal_names::CONT);
        }
        sent
    }

    /// The live members of the app's process group (all of them are below lifeguard).
    fn group_members(&mut self) -> Vec<Descendant> {
        self.descendants()
            .into_iter()
            .filter(|d| d.pgid == self.app_pid)
            .collect()
    }

    fn signal_remaining(&mut self, signal: Signal, spare_app_group: bool) {
        // The common end: the app left nothing behind, so no walk (a cost at
        // every exit).
        if !self.sys.has_children() {
            return;
        }
        if self.sys.proc_view() == ProcView::Blind {
            // No /proc to tell the app's group from the rest: as PID 1 the kernel's view
            // reaches everyone (unless the group must be spared a second SIGTERM, when
            // the deadline's SIGKILL is what is left); as a subreaper, nobody (docs/lifecycle.md).
            if self.sys.is_pid1() && !spare_app_group {
                self.sys.signal_everything(signal);
                self.sys.signal_everything(signal_names::CONT);
                logging::info(
                    "signalled everything left in the namespace",
                    &[("signal", &signal)],
                );
            }
            return;
        }
        let mut sent = 0;
        for d in self.descendants() {
            if spare_app_group && d.pgid == self.app_pid {
                continue;
            }
            if self.send_then_continue(d.pid, signal).is_ok() {
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
        if self.sys.is_pid1() {
            self.sys.signal_everything(signal_names::KILL);
        }
        let mut killed = Vec::new();
        for _ in 0..10 {
            let found = self.descendants();
            if found.is_empty() {
                break;
            }
            for d in found {
                if self.sys.send(d.pid, signal_names::KILL).is_ok() && !killed.contains(&d.pid) {
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

#[cfg(test)]
mod tests {
    //! Supervision's turns against a scripted kernel: each wait hands the loop what one
    //! wake of poll(2) would (signals read, children exited), and the fake records every
    //! signal sent and every helper forked. No root, no child, no real signal.
    use super::*;
    use crate::kernel::{Received, Woke};
    use crate::pid1::lifecycle::Config;
    use crate::signal_names::{Rewrites, HUP, KILL, TERM};
    use std::collections::VecDeque;
    use std::io;
    use std::os::fd::BorrowedFd;

    const APP: i32 = 100;
    /// A process the app left behind, in its group.
    const LEFT: i32 = 150;
    const HELPER: i32 = 200;

    /// One wake of the loop.
    #[derive(Default)]
    struct Wake {
        signals: Vec<Signal>,
        /// (pid, raw wait status) of children that exited by this wake.
        exits: Vec<(i32, libc::c_int)>,
        /// Comes only once SIGTERM has been relayed to the app's group (until then
        /// the waits time out, as poll's would).
        after_relay: bool,
    }

    fn code(n: i32) -> libc::c_int {
        n << 8
    }

    #[derive(Default)]
    struct Fake {
        script: VecDeque<Wake>,
        pending: Vec<Signal>,
        exited: VecDeque<(i32, libc::c_int)>,
        /// Live processes below lifeguard, (pid, pgid); the helper too once forked.
        below: Vec<(i32, i32)>,
        sent: Vec<(i32, Signal)>,
        forks: Vec<i32>,
        /// What each wait was asked to sleep at most.
        timeouts: Vec<Option<Duration>>,
    }

    impl Sys for Fake {
        fn wait(&mut self, _: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<Woke> {
            self.timeouts.push(timeout);
            if !self.pending.is_empty() {
                return Ok(Woke {
                    signals: true,
                    bell: false,
                });
            }
            let relayed = self.sent.contains(&(-APP, TERM));
            if self
                .script
                .front()
                .is_some_and(|w| w.after_relay && !relayed)
            {
                std::thread::sleep(timeout.expect("a relay is due"));
                return Ok(Woke::default());
            }
            let Some(wake) = self.script.pop_front() else {
                // The script is over: time passes until the next deadline, as poll's
                // timeout would; a loop with none would wait for ever.
                let timeout = timeout.expect("the loop would wait for ever");
                std::thread::sleep(timeout);
                return Ok(Woke::default());
            };
            self.pending.extend(wake.signals);
            for (pid, status) in wake.exits {
                self.die(pid, status);
            }
            Ok(Woke {
                signals: !self.pending.is_empty(),
                bell: false,
            })
        }
        fn pending(&self, signal: Signal) -> bool {
            self.pending.contains(&signal)
        }
        fn take_signals(&mut self, out: &mut Vec<Received>) -> io::Result<()> {
            out.extend(
                self.pending
                    .drain(..)
                    .map(|signal| Received { signal, sender: 0 }),
            );
            Ok(())
        }
        fn reap_one(&mut self) -> Reaped {
            match self.exited.pop_front() {
                Some((pid, status)) => Reaped::Child { pid, status },
                None if self.below.is_empty() => Reaped::NoChildren,
                None => Reaped::NoneExited,
            }
        }
        fn send(&mut self, target: i32, signal: Signal) -> io::Result<()> {
            self.sent.push((target, signal));
            // SIGKILL is the one signal whose effect the fake plays: the helper's
            // death (the app and what it left do as their script says).
            if signal == KILL && self.forks.contains(&target) {
                self.die(target, signal.0);
            }
            Ok(())
        }
        fn signal_everything(&mut self, signal: Signal) {
            self.sent.push((-1, signal));
        }
        fn descendants(&mut self) -> Vec<Descendant> {
            self.below
                .iter()
                .map(|&(pid, pgid)| Descendant {
                    pid,
                    pgid,
                    proc_pid: pid,
                })
                .collect()
        }
        fn has_children(&mut self) -> bool {
            !self.below.is_empty()
        }
        fn proc_view(&self) -> ProcView {
            ProcView::Own
        }
        fn is_pid1(&self) -> bool {
            false
        }
        fn handles(&self, _: &Descendant, _: Signal) -> bool {
            true
        }
        fn app_stopped(&self, _: i32) -> Option<Signal> {
            None
        }
        fn stop_with_app(&mut self, _: i32) {}
        fn start_helper(&mut self, board: &Board) -> io::Result<i32> {
            let pid = HELPER + self.forks.len() as i32;
            self.forks.push(pid);
            self.below.push((pid, pid));
            board.beat();
            Ok(pid)
        }
    }

    impl Fake {
        fn die(&mut self, pid: i32, status: libc::c_int) {
            if let Some(at) = self.below.iter().position(|(p, _)| *p == pid) {
                self.below.remove(at);
                self.exited.push_back((pid, status));
                // As the kernel does: SIGCHLD, which wakes the loop.
                self.pending.push(signal_names::CHLD);
            }
        }

        fn sent_to(&self, target: i32) -> Vec<Signal> {
            self.sent
                .iter()
                .filter(|(t, _)| *t == target)
                .map(|(_, s)| *s)
                .collect()
        }
    }

    fn config(drain_delay_ms: u64) -> Config {
        Config {
            drain_delay: Duration::from_millis(drain_delay_ms),
            grace: Duration::from_secs(10),
            rewrites: Rewrites::default(),
            remap_exit: vec![],
            group: true,
            drain_max: None,
            drain_quiet: Duration::from_millis(100),
        }
    }

    /// Runs the loop over `script` (the app, and `left` behind it in its group) until
    /// it exits: the fake as it was left, and the exit code.
    fn run(config: Config, left: bool, script: Vec<Wake>) -> (Fake, u8) {
        let mut below = vec![(APP, APP)];
        if left {
            below.push((LEFT, APP));
        }
        let fake = Fake {
            script: script.into(),
            below,
            ..Default::default()
        };
        let fake = std::rc::Rc::new(std::cell::RefCell::new(fake));
        let supervisor = Supervisor {
            sys: Shared(fake.clone()),
            lifecycle: Lifecycle::new(config),
            keeper: Keeper::new(true, false, Instant::now()),
            app_check: false,
            app_pid: APP,
            warn_on_reap: false,
            board: Board::new().unwrap(),
            terminal: AppTerminal::None,
            last_look: None,
            senders: Default::default(),
            me: 1,
            inflight_port: None,
        };
        let code = supervisor.run();
        let fake = std::mem::take(&mut *fake.borrow_mut());
        (fake, code)
    }

    /// The fake, kept by the test while the supervisor owns its handle.
    struct Shared(std::rc::Rc<std::cell::RefCell<Fake>>);

    impl Sys for Shared {
        fn wait(&mut self, b: BorrowedFd<'_>, t: Option<Duration>) -> io::Result<Woke> {
            self.0.borrow_mut().wait(b, t)
        }
        fn pending(&self, signal: Signal) -> bool {
            self.0.borrow().pending(signal)
        }
        fn take_signals(&mut self, out: &mut Vec<Received>) -> io::Result<()> {
            self.0.borrow_mut().take_signals(out)
        }
        fn reap_one(&mut self) -> Reaped {
            self.0.borrow_mut().reap_one()
        }
        fn send(&mut self, target: i32, signal: Signal) -> io::Result<()> {
            self.0.borrow_mut().send(target, signal)
        }
        fn signal_everything(&mut self, signal: Signal) {
            self.0.borrow_mut().signal_everything(signal)
        }
        fn descendants(&mut self) -> Vec<Descendant> {
            self.0.borrow_mut().descendants()
        }
        fn has_children(&mut self) -> bool {
            self.0.borrow_mut().has_children()
        }
        fn proc_view(&self) -> ProcView {
            self.0.borrow().proc_view()
        }
        fn is_pid1(&self) -> bool {
            self.0.borrow().is_pid1()
        }
        fn handles(&self, d: &Descendant, s: Signal) -> bool {
            self.0.borrow().handles(d, s)
        }
        fn app_stopped(&self, app: i32) -> Option<Signal> {
            self.0.borrow().app_stopped(app)
        }
        fn stop_with_app(&mut self, app: i32) {
            self.0.borrow_mut().stop_with_app(app)
        }
        fn start_helper(&mut self, board: &Board) -> io::Result<i32> {
            self.0.borrow_mut().start_helper(board)
        }
    }

    #[test]
    fn a_signal_and_the_apps_exit_in_one_wake_relay_first_then_reap() {
        // SIGTERM with no drain delay and the app's exit, read in the same wake: the
        // signal is the running app's (its pid not yet reaped, so not reusable), so it
        // goes to the group before the reap; then the exit code is the app's.
        let (fake, code) = run(
            config(0),
            false,
            vec![Wake {
                signals: vec![TERM],
                exits: vec![(APP, code(3))],
                after_relay: false,
            }],
        );
        assert_eq!(code, 3);
        assert_eq!(fake.sent_to(-APP), vec![TERM, signal_names::CONT]);
        // The helper was forked once, and let go (killed: nothing to publish).
        assert_eq!(fake.forks, vec![HELPER]);
        assert_eq!(fake.sent_to(HELPER), vec![KILL]);
    }

    #[test]
    fn a_signal_after_the_apps_exit_goes_to_what_is_left_of_its_group_alone() {
        // The app is reaped first; its pid (and group id) may be reused: a HUP then
        // reaches the members still running one by one, never -pgid.
        let (fake, code) = run(
            config(0),
            true,
            vec![
                Wake {
                    exits: vec![(APP, code(0))],
                    ..Default::default()
                },
                Wake {
                    signals: vec![HUP],
                    ..Default::default()
                },
                Wake {
                    exits: vec![(LEFT, code(0))],
                    ..Default::default()
                },
            ],
        );
        assert_eq!(code, 0);
        assert!(fake.sent_to(LEFT).contains(&HUP), "{:?}", fake.sent);
        assert!(!fake.sent_to(-APP).contains(&HUP), "{:?}", fake.sent);
        assert!(!fake.sent_to(HELPER).contains(&HUP), "{:?}", fake.sent);
    }

    #[test]
    fn the_drain_delay_holds_the_relay_and_the_helper_is_never_signalled_but_killed() {
        let (fake, code) = run(
            config(30),
            false,
            vec![
                Wake {
                    signals: vec![TERM, HUP],
                    ..Default::default()
                },
                Wake {
                    exits: vec![(APP, code(0))],
                    after_relay: true,
                    ..Default::default()
                },
            ],
        );
        // The loop slept to the drain's end (no wake-up before), relayed, and the app
        // exited on it.
        assert_eq!(code, 0);
        let to_app = fake.sent_to(-APP);
        assert_eq!(
            &to_app[..3],
            &[HUP, TERM, signal_names::CONT],
            "{:?}",
            fake.sent
        );
        assert!(fake.timeouts[1].is_some_and(|t| t <= Duration::from_millis(30)));
        // Forwarding never reaches the helper; it is killed once the app is gone.
        assert_eq!(fake.sent_to(HELPER), vec![KILL]);
    }

    #[test]
    fn a_stop_while_the_helper_is_down_goes_on_and_never_restarts_it_after_the_exit() {
        let (fake, code) = run(
            config(0),
            false,
            vec![
                // The helper dies (a segfault), then SIGTERM comes before its restart.
                Wake {
                    exits: vec![(HELPER, libc::SIGSEGV)],
                    ..Default::default()
                },
                Wake {
                    signals: vec![TERM],
                    ..Default::default()
                },
                Wake {
                    exits: vec![(APP, code(0))],
                    ..Default::default()
                },
            ],
        );
        assert_eq!(code, 0);
        assert_eq!(fake.sent_to(-APP), vec![TERM, signal_names::CONT]);
        assert_eq!(
            fake.forks,
            vec![HELPER],
            "not restarted after the app's exit"
        );
    }
}
