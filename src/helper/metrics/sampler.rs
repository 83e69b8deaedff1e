//! The sampler's loop and its state: once a second a full sample (the cgroup, the
//! task's figures, the app's process tree, the listener) derived into a `Sample` on the
//! Desk; before it, and every 100 ms while a drain runs, a look at the port whose
//! traffic figures the drain's hold reads off the Board.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::derive::{Derive, Reading};
use super::inflight::{Ages, InFlight, InFlightSource, ResponseTimes};
use super::sample::Sample;
use super::task::TaskState;
use super::traffic::{OtherListeners, Others, PortLook, Traffic};
use super::{cgroup, ecs, netstat, process_tree, quota, saturation};
use super::{HOLD_INTERVAL, INTERVAL};
use crate::board::{Busy, Phase};
use crate::faults;
use crate::helper::desk::Desk;
use crate::logging;
use crate::settings::Metrics;

/// How often the namespace's other listeners are read outside a drain.
const OTHERS_EVERY: Duration = Duration::from_secs(30);

/// Samples once a second; while a drain runs, the in-flight figure every 100 ms for the
/// hold (the supervisor rings the sampler's bell when the phase changes, so the first
/// of those comes at once).
pub(super) async fn sample_forever(
    config: Metrics,
    task: Option<Arc<Mutex<TaskState>>>,
    desk: Arc<Desk>,
) {
    let mut sampler = Sampler::new(config, task, desk);
    loop {
        let draining = sampler.draining();
        sampler.wait(draining).await;
        faults::point("sampler");
        let at = Instant::now();
        let found = sampler.look_at_port(at, draining);
        let looked = at.elapsed();
        if sampler.full_due(at) {
            sampler.take_sample(at, found, looked);
        }
    }
}

/// What the sampler keeps from one look to the next.
struct Sampler {
    config: Metrics,
    /// The task's figures as its poller last fetched them (on ECS).
    task: Option<Arc<Mutex<TaskState>>>,
    desk: Arc<Desk>,
    cgroup: cgroup::Cgroup,
    inflight: Option<InFlightSource>,
    traffic: Traffic,
    derive: Derive,
    app_tree: process_tree::TreeReader,
    listen_watch: saturation::Watch,
    port_watch: crate::sock_diag::listening::PortWatch,
    quota_watch: quota::QuotaWatch,
    /// The namespace's other listeners, and when they were read.
    others: Option<(Instant, Vec<u16>)>,
    /// Whether the last look was a drain's.
    was_draining: bool,
    other_listeners: OtherListeners,
    /// Rung by the supervisor when the phase changes.
    bell: std::io::Result<tokio::net::UnixDatagram>,
    /// When the next full sample is due.
    next_full: Instant,
    /// The namespace's counters as last read; a look at a quiet namespace keeps them
    /// (none of them moves without a segment: metrics/inflight/quiet.rs).
    counters: netstat::TcpCounters,
    /// The port's requests' ages across dumps, and the response times sampled so far.
    ages: Ages,
    responses: ResponseTimes,
}

impl Sampler {
    fn new(config: Metrics, task: Option<Arc<Mutex<TaskState>>>, desk: Arc<Desk>) -> Sampler {
        let cgroup = cgroup::discover();
        // Outside a container the cgroup is whatever lifeguard was started in (a login
        // session's, a CI job's): its figures are not the app's alone.
        let whose = if crate::kernel::is_pid1() {
            "the container's"
        } else {
            "the cgroup lifeguard runs in, which may hold more than the app (not PID 1)"
        };
        logging::info(
            "metrics: sampling",
            &[("cgroup", &cgroup.summary()), ("figures", &whose)],
        );
        logging::debug(
            "metrics: cgroup controllers",
            &[("found", &cgroup.describe())],
        );
        let inflight = config.inflight_port.map(InFlightSource::new);
        let mut traffic = Traffic::default();
        // A sampler that starts during a drain (its helper process died, and a new one
        // was started) cannot know what reached the port since its predecessor's last
        // look, nor read whatever record that one left (a helper killed mid-write leaves
        // it torn): the port counts as busy from this start, and the hold sees a whole
        // --drain-quiet afresh before it calls the port quiet.
        if desk.phase() == Phase::Draining {
            traffic.last_busy = Some(Instant::now());
            traffic.busy_by = Busy::SamplerRestarted;
        }
        Sampler {
            cgroup,
            inflight,
            traffic,
            derive: Derive::default(),
            app_tree: process_tree::TreeReader::new(),
            listen_watch: saturation::Watch::default(),
            port_watch: crate::sock_diag::listening::PortWatch::default(),
            quota_watch: quota::QuotaWatch::default(),
            others: None,
            was_draining: false,
            other_listeners: OtherListeners::default(),
            bell: desk.sampler_bell(),
            next_full: Instant::now(),
            counters: netstat::TcpCounters::default(),
            ages: Ages::default(),
            responses: ResponseTimes::default(),
            config,
            task,
            desk,
        }
    }

    /// Whether the port is looked at for a drain's hold: every 100 ms, not once a second.
    fn draining(&self) -> bool {
        self.desk.phase() == Phase::Draining && self.inflight.is_some()
    }

    /// Until the next full sample, or while draining the next look at the port; the bell
    /// (a phase change) ends the wait at once.
    async fn wait(&self, draining: bool) {
        let now = Instant::now();
        let wait = if draining {
            HOLD_INTERVAL.min(self.next_full.saturating_duration_since(now))
        } else {
            self.next_full.saturating_duration_since(now)
        };
        match &self.bell {
            Ok(bell) => {
                let mut ring = [0u8; 8];
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = bell.recv(&mut ring) => {
                        self.desk.board.sampler_bell.clear();
                    }
                }
            }
            Err(_) => tokio::time::sleep(wait).await,
        }
    }

    /// One look at the port: its dump (None: no `--inflight-port`; Some(None): the dump
    /// failed), who else listens beside it, and the traffic figures on the Board.
    fn look_at_port(&mut self, at: Instant, draining: bool) -> Option<Option<InFlight>> {
        // A drain's hold reads every look: no shortcut then (metrics/inflight/quiet.rs).
        let may_skip = matches!(self.desk.phase(), Phase::Starting | Phase::Running);
        let found = self.inflight.as_mut().map(|source| source.sample(may_skip));
        self.age_requests(found);
        // Who else listens in the namespace: a dump of its listeners when a drain begins
        // and every half minute.
        let drain_began = draining && !self.was_draining;
        self.was_draining = draining;
        if self.inflight.is_some()
            && (drain_began
                || self
                    .others
                    .as_ref()
                    .is_none_or(|(at, _)| at.elapsed() > OTHERS_EVERY))
        {
            self.list_others(drain_began);
        }
        let beside = self.beside(draining);
        self.publish_look(at, found, beside);
        found
    }

    /// The requests' ages from this look's dump: its clocks are "so long ago" as of the
    /// dump, just done. A look that did without the dump changes nothing (no segment
    /// moved: the same requests wait, and no answer went out).
    fn age_requests(&mut self, found: Option<Option<InFlight>>) {
        let Some(source) = &self.inflight else {
            return;
        };
        match found {
            Some(Some(_)) if !source.skipped() => {
                self.ages
                    .dumped(Instant::now(), source.records(), &mut self.responses)
            }
            Some(None) => self.ages.forget(),
            _ => {}
        }
    }

    /// The namespace's listeners other than the port and lifeguard's endpoint, read
    /// afresh.
    fn list_others(&mut self, drain_began: bool) {
        let mine: Vec<u16> = self
            .config
            .inflight_port
            .into_iter()
            .chain(self.desk.own_ports().iter().copied())
            .collect();
        // A dump of the listening sockets alone: a walk of the kernel's listening
        // hash, cheap on a host's namespace too.
        let listening: Vec<u16> = self
            .inflight
            .as_mut()
            .and_then(|source| source.listening_ports())
            // Not dumped: no other listener known, and the namespace's counter
            // stands alone (the rule leans toward holding).
            .unwrap_or_default()
            .into_iter()
            .filter(|p| !mine.contains(p))
            .collect();
        if drain_began && !listening.is_empty() {
            logging::info(
                "draining beside other listeners in the network namespace: their new connections, seen in the namespace's socket table, are told from the port's",
                &[(
                    "listening",
                    &listening.iter().map(u16::to_string).collect::<Vec<_>>().join(","),
                )],
            );
        }
        // Another set of listeners: their table starts again from a baseline (a
        // listener new to the list would bring all of its old connections as new).
        if self
            .others
            .as_ref()
            .is_none_or(|(_, before)| *before != listening)
        {
            self.other_listeners = OtherListeners::default();
        }
        self.others = Some((Instant::now(), listening));
    }

    /// During a drain beside other listeners, the new connections on theirs (a dump of
    /// the whole namespace): the namespace's accepts they explain are not the port's.
    fn beside(&mut self, draining: bool) -> Others {
        let other_ports = self.others.as_ref().map_or(&[][..], |(_, p)| p.as_slice());
        if other_ports.is_empty() || !draining {
            // No table to read: the next one is a baseline again.
            self.other_listeners = OtherListeners::default();
            if other_ports.is_empty() {
                Others::Absent
            } else {
                Others::Unread
            }
        } else {
            self.inflight
                .as_mut()
                .and_then(|source| source.others(other_ports))
                .map_or(Others::Unread, |theirs| {
                    self.other_listeners.new_connections(theirs, other_ports)
                })
        }
    }

    /// The look on the Board: whether the port has been seen listening, and the traffic
    /// figures the drain's hold reads.
    fn publish_look(&mut self, at: Instant, found: Option<Option<InFlight>>, beside: Others) {
        if found.flatten().is_some_and(|f| f.accept_queue.is_some()) {
            // A listener on the port: the hold may take it as the app's (kept for good).
            self.desk.board.set_port_seen();
        }
        if let (Some(found), Some(source)) = (found, &self.inflight) {
            // Everything that explains the namespace's accepts (the dumps above,
            // lifeguard's own accepts here) is read before the counter: Traffic::next.
            let own_accepts = self.desk.counters.endpoint_accepted();
            if !source.skipped() {
                self.counters = netstat::read();
            }
            self.desk.set_traffic(self.traffic.next(PortLook {
                at,
                found: found.map(|f| (f, source.records())),
                passive_opens: self.counters.passive_opens,
                own_accepts,
                others: beside,
            }));
        }
    }

    /// Whether the full sample is due at this look, and if so the next one's time: a
    /// second on, or a second from now when the last one ran late.
    fn full_due(&mut self, at: Instant) -> bool {
        if at < self.next_full {
            return false;
        }
        self.next_full += INTERVAL;
        if self.next_full <= at {
            self.next_full = at + INTERVAL;
        }
        true
    }

    /// The full sample: the cgroup, the task, the process tree and this look's dump
    /// derived into a `Sample`, the warnings due, and the sample on the Desk.
    fn take_sample(&mut self, at: Instant, found: Option<Option<InFlight>>, looked: Duration) {
        let reading = self.read_cgroup();
        let (task_usage, task_limits) = match &self.task {
            Some(state) => state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .fresh(at),
            None => (None, ecs::TaskLimits::default()),
        };
        let tree_started = Instant::now();
        let tree = self.app_tree.read();
        let tree_took = tree_started.elapsed();
        let mut sample = self.derive.next(&Reading {
            at,
            cgroup: &reading,
            task: task_usage,
            task_limits,
            inflight: found.flatten(),
        });
        sample.app = tree.figures;
        if found.is_some() {
            // Only from a dump that was read: the responses since the sampler started,
            // and the oldest waiting request's age now.
            sample.responses = Some(self.responses);
            sample.request_oldest_seconds = found
                .flatten()
                .map(|_| self.ages.oldest(Instant::now()).as_secs_f64());
        }
        self.watch_quota(at, &reading, &tree.pids, &mut sample);
        self.watch_port(at, found, &mut sample);
        self.watch_listener(at, &mut sample);
        for process in &tree.crossed {
            logging::warn(process_tree::select_warning(process), &[]);
        }
        self.publish_sample(at, sample, looked, tree_took);
    }

    fn read_cgroup(&mut self) -> cgroup::Reading {
        let reading = self.cgroup.read();
        // Each file that cannot be read costs its gauge, said once.
        for failure in &reading.new_failures {
            logging::warn(
                format!("metrics: {} unavailable: {}", failure.field, failure.reason),
                &[("path", &failure.path.display())],
            );
        }
        reading
    }

    fn watch_quota(
        &mut self,
        at: Instant,
        reading: &cgroup::Reading,
        pids: &[i32],
        sample: &mut Sample,
    ) {
        // Runnable threads cost a read per thread: counted only while the quota throttles.
        let share = self
            .quota_watch
            .throttled_share(reading.cpu_nr_periods, reading.cpu_nr_throttled);
        if share.is_some_and(|s| s > 0.0) {
            sample.app.threads_running = Some(quota::runnable_threads(pids));
            if let Some(warning) = self.quota_watch.warning(
                share,
                sample.app.threads_running,
                reading.cpu_quota_cores,
                at,
            ) {
                logging::warn(warning, &[]);
            }
        } else if share.is_some() {
            sample.app.threads_running = Some(0).filter(|_| sample.app.threads.is_some());
        }
    }

    fn watch_port(&mut self, at: Instant, found: Option<Option<InFlight>>, sample: &mut Sample) {
        if let (Some(found), Some(port)) = (&found, self.config.inflight_port) {
            // A dump that was read says whether the port has a listener.
            let listening = found.map(|f| f.accept_queue.is_some());
            sample.inflight_port_listening = listening;
            let phase = self.desk.phase();
            let miss = self.port_watch.next(
                listening,
                phase == Phase::Running,
                phase == Phase::Starting,
                matches!(phase, Phase::Draining | Phase::Stopping),
                at,
            );
            if let Some(miss) = miss {
                let here = self
                    .inflight
                    .as_mut()
                    .and_then(|source| source.listening_ports());
                logging::warn(port_missing(port, miss, here), &[]);
            }
        }
    }

    fn watch_listener(&mut self, at: Instant, sample: &mut Sample) {
        if let (Some(source), Some(port)) = (&self.inflight, self.config.inflight_port) {
            // The listener as this sample's dump found it (none when it failed).
            let listener = saturation::listener(source.records());
            for warning in
                self.listen_watch
                    .next(at, port, listener.as_ref(), self.counters.listen_overflows)
            {
                logging::warn(warning, &[]);
            }
            sample.listen = saturation::figures(listener.as_ref(), &self.counters);
        }
    }

    fn publish_sample(&self, at: Instant, sample: Sample, looked: Duration, tree_took: Duration) {
        let figure = |n: Option<u64>| n.map_or("none".to_string(), |n| n.to_string());
        let (in_flight, queue) = (
            figure(sample.requests_in_flight),
            figure(sample.accept_queue_length),
        );
        self.desk.set_sample(sample);
        if !logging::enabled(logging::Level::Debug) {
            return;
        }
        // What one sample costs and found, for bench/metrics.py (and anyone wondering,
        // at -vv).
        logging::debug(
            "metrics: sample taken",
            &[
                ("in_flight", &in_flight),
                ("queue", &queue),
                ("us", &at.elapsed().as_micros()),
                ("port_us", &looked.as_micros()),
                (
                    "port",
                    &match &self.inflight {
                        None => "off",
                        Some(source) if source.skipped() => "listeners",
                        Some(_) => "dumped",
                    },
                ),
                ("tree_us", &tree_took.as_micros()),
            ],
        );
    }
}

/// The warning for `--inflight-port` without a listener, naming what does listen
/// (`here`: None when the namespace's listeners could not be dumped).
fn port_missing(
    port: u16,
    miss: crate::sock_diag::listening::Miss,
    here: Option<Vec<u16>>,
) -> String {
    let here = match here {
        None => "unknown".to_string(),
        Some(here) if here.is_empty() => "nothing".to_string(),
        Some(here) => here
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    };
    match miss {
        crate::sock_diag::listening::Miss::WhileRunning(for_) => format!(
            "nothing listens on --inflight-port {port} ({} since the app was ready): the drain cannot see the app's requests there; listening in this network namespace: {here} (lifeguard's endpoint among them). Is --inflight-port the app's port?",
            crate::seconds::human(Duration::from_secs(for_.as_secs()))
        ),
        crate::sock_diag::listening::Miss::WhileStarting(for_) => format!(
            "nothing listens on --inflight-port {port} {} after the app started, and with --inflight-port and no other check the app is ready only once it does: /readyz says starting, and the ready port is closed; listening in this network namespace: {here} (lifeguard's endpoint among them). Is --inflight-port the app's port?",
            crate::seconds::human(Duration::from_secs(for_.as_secs()))
        ),
        crate::sock_diag::listening::Miss::AtDrain => format!(
            "draining, but nothing has listened on --inflight-port {port} since lifeguard started: the drain's hold cannot tell the app is idle and holds the stop signal until --drain-max; listening in this network namespace: {here}"
        ),
    }
}
