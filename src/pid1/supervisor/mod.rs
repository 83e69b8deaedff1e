//! The one supervision loop, on the main thread and synchronous, shaped like tini's:
//! block on the signal inbox (SIGCHLD included) and the supervisor's bell with one
//! timeout — the lifecycle's deadline —, feed the lifecycle machine, carry out its
//! actions (forward, reap, signal the rest, kill, exit). It is the only code that
//! waits for children or sends signals, and it keeps the helper process (the keeper's
//! answers). No runtime, no HTTP, netlink or DNS here, and no lock: the Board is shared
//! memory read and written with atomics (ARCHITECTURE.md).
//!
//! Its rooms: `forwarding` (signals passed on, job control), `leftovers` (the walks of
//! what the app leaves, the deadline's kill), `helper_process` (the keeper's answers
//! carried out), `said` (the log lines); this file is the loop and its turn.
#![forbid(unsafe_code)]

mod forwarding;
mod helper_process;
mod leftovers;
mod said;

use std::time::{Duration, Instant};

use forwarding::Sent;
use said::status_text;

use crate::board::Board;
use crate::kernel::{self, AppTerminal, Reaped};
use crate::logging;
use crate::pid1::keeper::Keeper;
use crate::pid1::lifecycle::{Action, Actions, AppStatus, Event, Lifecycle, Look, Phase};
use crate::pid1::sys::Sys;
use crate::signal_names;

/// While log lines wait in the supervision thread's own queue (stderr was full), the
/// loop wakes this often to write them.
const LOG_RETRY: Duration = Duration::from_millis(50);

/// How often a ready port whose listen failed is tried again.
const READY_RETRY: Duration = Duration::from_secs(1);

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
    /// `--ready-port`, and whether it listens now.
    pub ready_port: Option<u16>,
    /// `--scale-in-protection` is on: the stop line says whether ECS held the task.
    pub scale_in_protection: bool,
    pub ready_open: bool,
    /// A listen of the ready port failed (the port taken meanwhile): when to try again.
    /// Never recorded as open meanwhile, and `/readyz` is not ready.
    pub ready_retry: Option<Instant>,
    /// How much later than it asked the loop's last wait returned (the keeper does not
    /// hold a silence over that time against the helper).
    pub woke_late: Duration,
    /// A signal lifeguard raised itself has been logged (once is enough).
    pub told_own_signal: bool,
    /// The helper's beating thread as last read, when its silence was judged, and when.
    pub helper_sched: Option<(i32, crate::kernel::Sched, Instant)>,
    /// When a silent helper was last kept as starved (said once a spell).
    pub spared_since: Option<Instant>,
    /// When the spell of starvation began (bounded by `STARVED_LIMIT`).
    pub starved_from: Option<Instant>,
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
            events.push((Event::AppReady, Instant::now()));
        }
        loop {
            // Signals read in the last turn go first, before anything is reaped: one that
            // came just before the app's exit is the running app's (its group, its pid),
            // and the pid is not free for reuse until it is reaped.
            for (event, at) in events.drain(..) {
                if let Some(code) = self.step(event, at) {
                    return code;
                }
            }
            self.follow_a_stop_at_the_terminal();
            self.reap(&mut events);
            for (event, at) in events.drain(..) {
                if let Some(code) = self.step(event, at) {
                    return code;
                }
            }
            if !ready_seen && self.board.check_passed() {
                ready_seen = true;
                if let Some(code) = self.step(Event::AppReady, Instant::now()) {
                    return code;
                }
            }
            self.follow_readiness();
            // The helper stays until supervision has nothing else to wait for: /livez
            // answers `exited` and the last figures can be scraped while what the app
            // left is stopped. Where /proc cannot tell the helper from what the app left
            // (a /proc of another namespace without child lists, or none), it goes at
            // once: the helper must never be what lifeguard waits for.
            if self.lifecycle.phase() == Phase::Exited
                && self.keeper.pid().is_some()
                && self.app_left_children() != Some(true)
            {
                self.let_the_helper_go();
            }
            self.keep_the_helper();
            logging::pump();
            let now = Instant::now();
            let mut timeout = self.deadline().map(|at| at.saturating_duration_since(now));
            if logging::pending() {
                timeout = Some(timeout.map_or(LOG_RETRY, |t| t.min(LOG_RETRY)));
            }
            let due = timeout.and_then(|t| now.checked_add(t));
            // With no helper process nobody rings the bell or reads readiness: the wait
            // takes the signal in the same call (kernel::SignalInbox::wait_for_signal).
            let alone = self.keeper.is_off();
            let woke = if alone {
                self.sys.wait_for_signal(timeout).map(|got| {
                    let signals = got.is_some();
                    received.extend(got);
                    kernel::Woke {
                        signals,
                        bell: false,
                    }
                })
            } else {
                self.sys.wait(self.board.supervisor_bell.fd(), timeout)
            };
            // A signal's time is when the wait returned: the drain delay and the grace
            // deadline count from the SIGTERM's arrival. In a container whose app uses up
            // the CPU quota, PID 1 may be scheduled again only seconds after this first
            // instant back (bench/ready_port_at_peak.py); the orchestrator's own timer
            // started at the kill(2), and lifeguard's SIGKILL must still come before it.
            let woke_at = Instant::now();
            self.woke_late =
                due.map_or(Duration::ZERO, |due| woke_at.saturating_duration_since(due));
            let woke = match woke {
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
                // A stop signal (SIGTERM unless --stop-signal) still pending is marked
                // before it leaves the kernel's set:
                // the endpoint asks that set first, then the mark, so one of them says
                // draining from the kill(2) on. Past Running it asks the kernel no more.
                // The ready port stops listening in the same instant, before anything
                // else is done: new probes are refused from here on.
                if !alone
                    && matches!(self.lifecycle.phase(), Phase::Starting | Phase::Running)
                    && self.sys.pending(self.lifecycle.config().stop_signal)
                {
                    self.board.set_term_taken();
                    self.ready_port_to(false);
                }
                // take_all reads until EAGAIN, so the inbox is drained either way (alone,
                // each wait takes one, and the next returns at once while more wait).
                if !alone {
                    if let Err(err) = self.sys.take_signals(&mut received) {
                        logging::error(format!("reading signals: {err}"), &[]);
                    }
                }
                // A SIGTERM just read keeps /readyz at draining until the phase that
                // follows it is published (Board::set_term_taken): marked before anything
                // else is done with it, the instant it leaves the kernel's queue.
                let stop = self.lifecycle.config().stop_signal;
                if received.iter().any(|r| r.signal == stop) {
                    self.board.set_term_taken();
                    self.ready_port_to(false);
                }
                crate::faults::point("signals-taken");
                self.received(received.drain(..), woke_at, &mut events);
            }
            let now = Instant::now();
            if self.lifecycle.deadline().is_some_and(|at| at <= now) {
                events.push((Event::Tick, now));
            }
        }
    }

    /// Whether the ready port should listen: exactly while `/readyz` would answer 200 —
    /// the app ready (Running), no SIGTERM read, the app check's latest verdict not
    /// failing.
    fn ready_wanted(&self) -> bool {
        self.lifecycle.phase() == Phase::Running
            && !self.board.term_taken()
            && !self.board.check_failing()
    }

    /// Opens or closes the ready port as readiness now says, and says so.
    fn follow_readiness(&mut self) {
        let open = self.ready_wanted();
        if !self.ready_port_to(open) {
            return;
        }
        let port = self.ready_port.unwrap_or_default();
        if open {
            logging::info("ready port listening", &[("port", &port)]);
        } else {
            let stop = self.lifecycle.config().stop_signal.to_string();
            let why = match self.lifecycle.phase() {
                Phase::Running if self.board.check_failing() => "the app check fails",
                Phase::Running | Phase::Draining | Phase::Stopping => stop.as_str(),
                _ => "the app has exited",
            };
            logging::info("ready port closed", &[("port", &port), ("why", &why)]);
        }
    }

    /// Makes the ready port listen or refuse, if it is configured and not so already;
    /// whether it changed. Nothing is formatted here on the way to closing: the
    /// SIGTERM's turn calls it first. A listen that fails is not a change: the port
    /// stays closed, `/readyz` says not ready, and the loop tries again each second
    /// (`READY_RETRY`), the failure said once a spell.
    fn ready_port_to(&mut self, open: bool) -> bool {
        if self.ready_port.is_none() || self.ready_open == open {
            if !open {
                self.ready_retry = None;
            }
            return false;
        }
        match self.sys.set_ready_port(open) {
            Err(err) if open => {
                if self.ready_retry.is_none() {
                    logging::error(
                        "cannot listen on --ready-port: not ready until it does, trying again every second",
                        &[("port", &self.ready_port.unwrap_or_default()), ("error", &err)],
                    );
                }
                self.board.set_ready_port_failing();
                self.ready_retry = Some(Instant::now() + READY_RETRY);
                false
            }
            done => {
                if let Err(err) = done {
                    logging::error(format!("cannot close the ready port: {err}"), &[]);
                }
                self.ready_open = open;
                self.ready_retry = None;
                self.board.set_ready_port(open);
                true
            }
        }
    }

    /// The next instant something is due: the lifecycle's, the keeper's, or another
    /// try at the ready port's listen.
    fn deadline(&self) -> Option<Instant> {
        let keeper = self.keeper.deadline(self.board.last_beat());
        [self.lifecycle.deadline(), keeper, self.ready_retry]
            .into_iter()
            .flatten()
            .min()
    }

    fn received(
        &mut self,
        received: impl Iterator<Item = kernel::Received>,
        at: Instant,
        events: &mut Vec<(Event, Instant)>,
    ) {
        for kernel::Received { signal, sender } in received {
            if signal == signal_names::CHLD {
                continue; // reaping happens on every turn of the loop
            }
            if sender == self.me {
                // Raised by lifeguard's own doing (SIGPIPE from a write to a closed
                // stderr): not the orchestrator's, so not the app's business. Said
                // once: a line about it would be written to that same stderr, raise
                // another, and keep the loop turning for ever (and, being the thread's
                // own, it would be taken before any signal sent to the process).
                if !std::mem::replace(&mut self.told_own_signal, true) {
                    logging::debug(
                        "ignored a signal lifeguard raised itself (said once)",
                        &[("signal", &signal)],
                    );
                }
                continue;
            }
            // Said by `step`, after the signal has been passed on.
            self.senders.push_back(sender);
            events.push((Event::Signal(signal), at));
        }
    }

    /// Takes every exited child until none is left to take.
    fn reap(&mut self, events: &mut Vec<(Event, Instant)>) {
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
                    events.push((Event::AppExited(status), Instant::now()));
                }
                Reaped::Child { pid, status } if self.keeper.pids().any(|p| p == pid) => {
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
                    events.push((Event::NoChildrenLeft, Instant::now()));
                    break;
                }
            }
        }
    }

    /// Feeds one event to the machine and carries out what it answers, including the
    /// events its actions answer with (a look at the traffic figures). What reaches
    /// processes goes first, and only then is anything formatted for the log: a relayed
    /// signal's latency is the code run before its kill(2), and on the first signal of
    /// a process every page of that code is touched for the first time.
    fn step(&mut self, event: Event, at: Instant) -> Option<u8> {
        let mut exit = None;
        let mut next = Some((event, at));
        while let Some((event, at)) = next.take() {
            let before = self.lifecycle.phase();
            let actions = self.lifecycle.on(event, at);
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
                    let stop = signal == self.lifecycle.config().stop_signal;
                    Self::tell_received(signal, sender, stop);
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
                    Action::LookAtTraffic => {
                        next = Some((Event::Traffic(self.look()), Instant::now()))
                    }
                    Action::HoldBegan {
                        in_flight,
                        at_the_latest,
                    } => self.tell_hold_began(in_flight, at_the_latest),
                    Action::HoldBlind { why, at_the_latest } => {
                        self.tell_hold_blind(why, at_the_latest)
                    }
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

    /// Whether the hold's figures say nothing has ever listened on `--inflight-port`.
    fn port_never_seen(&self) -> bool {
        self.last_look.is_some_and(|l| !l.port_seen)
    }

    /// The sampler's latest traffic figures, read without waiting: if the sampler is
    /// writing them this instant, the previous ones (the next look is 100 ms away).
    fn look(&mut self) -> Option<Look> {
        if let Ok(look) = self.board.traffic() {
            self.last_look = look;
        }
        self.last_look
    }
}

#[cfg(test)]
mod tests;
