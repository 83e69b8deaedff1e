//! The measuring half (docs/metrics.md): once a second, the app's cgroup CPU and memory (or
//! the ECS task's), and its in-flight requests, sampled on a thread of its own and
//! published on the `Board` for `/metrics` and CloudWatch.
//!
//! - `sample`: what one sample holds (`Sample`, its scope, the listener's and the app's
//!   figures)
//! - `cgroup/`: finding the cgroup and reading its files
//! - `ecs`: the task metadata endpoint
//! - `inflight/`: the listen queue and outstanding requests, from sock_diag; when a look
//!   at the port can do without the established-socket walk
//! - `netstat`: the network namespace's TCP counters
//! - `saturation`: the listener's backlog, waits and overflows, and their warnings
//! - `process_tree`: the app's processes, threads, descriptors and resident memory
//! - `prometheus`: the text exposition of a `Snapshot`
#![forbid(unsafe_code)]

mod cgroup;
pub mod ecs;
mod inflight;
pub mod netstat;
pub mod process_tree;
pub mod prometheus;
mod quota;
pub mod sample;
pub mod saturation;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::board::{Busy, Look, Phase};
use crate::faults;
use crate::helper::desk::Desk;
use crate::helper::threads::{self, Helper};
use crate::logging;
use inflight::InFlightSource;
use sample::{Sample, Scope};

/// How often the sampler runs: once a second.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How often the in-flight figure is read while a drain runs, for its hold.
pub const HOLD_INTERVAL: Duration = Duration::from_millis(100);
/// A task metadata fetch that takes longer is given up: the next one is due.
/// How often the namespace's other listeners are read outside a drain.
const OTHERS_EVERY: Duration = Duration::from_secs(30);
const METADATA_TIMEOUT: Duration = Duration::from_millis(800);
/// Task stats older than this are not used; the cgroup stands in.
const METADATA_STALE: Duration = Duration::from_millis(2500);

/// The sampler's settings (the CLI maps flags and the environment onto them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `--inflight-port`: count in-flight requests on this TCP port.
    pub inflight_port: Option<u16>,
    /// `ECS_CONTAINER_METADATA_URI_V4`: CPU and memory are the task's.
    pub ecs_metadata: Option<String>,
}

/// What one turn read, before rates: the cgroup, the task (when on ECS and fresh), the
/// in-flight count (when configured and readable).
pub struct Reading<'a> {
    pub at: Instant,
    pub cgroup: &'a cgroup::Reading,
    pub task: Option<(Instant, ecs::TaskUsage)>,
    pub task_limits: ecs::TaskLimits,
    pub inflight: Option<inflight::InFlight>,
}

/// Turns readings into samples; keeps the previous CPU usage for the rate. Pure.
#[derive(Default)]
pub struct Derive {
    previous_cpu: Option<(Scope, Instant, u64)>,
}

impl Derive {
    pub fn next(&mut self, r: &Reading) -> Sample {
        let cg = r.cgroup;
        // Task scope where the task reports; a local cgroup limit only where the task
        // has none (docs/metrics.md).
        let (scope, cpu_ns, cpu_at, working_set) = match r.task {
            Some((at, usage)) => (Scope::Task, Some(usage.cpu_ns), at, Some(usage.working_set)),
            None => (Scope::Container, cg.cpu_usage_ns, r.at, cg.working_set()),
        };
        // The limit that binds: a local quota or cpuset, else the task's size, else the
        // machine (docs/metrics.md); in task scope the task's size comes first.
        // A cpuset counts only where it restricts: one holding every online CPU is the
        // machine, not a limit.
        let cpuset = cg
            .cpuset_cpus
            .filter(|n| cg.online_cpus.is_none_or(|online| *n < online))
            .map(|n| n as f64);
        let local_cores = match (cg.cpu_quota_cores, cpuset) {
            (Some(q), Some(c)) => Some(q.min(c)),
            (q, c) => q.or(c),
        };
        let cpu_limit = match scope {
            Scope::Task => r.task_limits.cpu_cores.or(local_cores),
            Scope::Container => local_cores.or(r.task_limits.cpu_cores),
        }
        .or_else(|| cg.limit_cores());
        // A cgroup limit above the host's memory is no limit: the host's runs out first.
        let memory_limit = match scope {
            Scope::Task => r.task_limits.memory_bytes.or(cg.memory_limit),
            Scope::Container => cg.memory_limit.or(r.task_limits.memory_bytes),
        }
        .map(|limit| cg.memory_total.map_or(limit, |total| limit.min(total)))
        .or(cg.memory_total);
        let cpu_utilization = match (self.previous_cpu, cpu_ns, cpu_limit) {
            (Some((was_scope, was_at, was_ns)), Some(ns), Some(limit))
                if was_scope == scope && cpu_at > was_at && ns >= was_ns && limit > 0.0 =>
            {
                let rate = (ns - was_ns) as f64 / (cpu_at - was_at).as_nanos() as f64;
                Some(rate / limit * 100.0)
            }
            _ => None,
        };
        // A stale task reading (same instant as before) keeps the previous base.
        if let Some(ns) = cpu_ns {
            if self.previous_cpu.is_none_or(|(_, at, _)| at != cpu_at) {
                self.previous_cpu = Some((scope, cpu_at, ns));
            }
        }
        Sample {
            taken: Some(r.at),
            scope,
            // The counter is the cgroup's alone: switching it between task and container
            // (a metadata outage) would read as a counter reset.
            cpu_usage_seconds: cg.cpu_usage_ns.map(|ns| ns as f64 / 1e9),
            cpu_limit_cores: cpu_limit,
            cpu_utilization_percent: cpu_utilization,
            cpu_throttled_seconds: cg.cpu_throttled_ns.map(|ns| ns as f64 / 1e9),
            cpu_periods: cg.cpu_nr_periods,
            cpu_throttled_periods: cg.cpu_nr_throttled,
            memory_working_set_bytes: working_set,
            memory_limit_bytes: memory_limit,
            memory_utilization_percent: match (working_set, memory_limit) {
                (Some(ws), Some(limit)) if limit > 0 => Some(ws as f64 / limit as f64 * 100.0),
                _ => None,
            },
            memory_oom_kills: cg.oom_kills,
            requests_in_flight: r.inflight.map(|f| f.requests),
            // 0 while nothing listens yet: the series is there from the first sample.
            accept_queue_length: r.inflight.map(|f| f.accept_queue.unwrap_or(0)),
            // The listen and process-tree figures are the sampler's to add: they need no
            // rate or limit chain.
            ..Default::default()
        }
    }
}

/// Starts the sampler on a thread of its own (in the helper process),
/// so sampling never takes a moment from supervision: the cgroup files and the
/// sock_diag dump are synchronous reads (well under a millisecond, more with many
/// connections on the port), and the task metadata is fetched by a task of its own with
/// a timeout, so a hung endpoint costs the task-scope figures and nothing else. If the
/// thread cannot start, lifeguard runs on without samples (and a drain's hold, seeing
/// no figures, does not hold).
pub fn start(config: Config, desk: Arc<Desk>) {
    // The agent gives an address (169.254.170.2); a name needs the lookup thread.
    let name_lookups = config.ecs_metadata.as_deref().is_some_and(|uri| {
        uri.parse::<hyper::Uri>()
            .ok()
            .and_then(|u| {
                u.host()
                    .map(|h| crate::helper::http_client::address(h).is_none())
            })
            .unwrap_or(false)
    });
    // The task's figures outlive a restart of the sampler.
    let task = config
        .ecs_metadata
        .as_ref()
        .map(|_| Arc::new(Mutex::new(TaskState::default())));
    let started = threads::start(Helper::Sampler, name_lookups, move || {
        let (config, task, desk) = (config.clone(), task.clone(), desk.clone());
        async move {
            // Aborted when this run ends, a panic included, so a restart never leaves
            // two pollers behind.
            let _poller = match (&config.ecs_metadata, &task) {
                (Some(uri), Some(shared)) => Some(AbortOnDrop(tokio::spawn(poll_task(
                    ecs::Client::new(uri, METADATA_TIMEOUT),
                    shared.clone(),
                    desk.clone(),
                )))),
                _ => None,
            };
            sample_forever(config, task, desk).await
        }
    });
    if let Err(reason) = started {
        logging::warn(format!("metrics off: {reason}"), &[]);
    }
}

/// The warning for `--inflight-port` without a listener, naming what does listen
/// (`here`: None when the namespace's listeners could not be dumped).
fn port_missing(port: u16, miss: inflight::listening::Miss, here: Option<Vec<u16>>) -> String {
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
        inflight::listening::Miss::WhileRunning(for_) => format!(
            "nothing listens on --inflight-port {port} ({} since the app was ready): the drain cannot see the app's requests, and a stop would be relayed at its first look; listening in this network namespace: {here} (lifeguard's endpoint among them). Is --inflight-port the app's port?",
            humantime::format_duration(Duration::from_secs(for_.as_secs()))
        ),
        inflight::listening::Miss::AtDrain => format!(
            "draining, but nothing has listened on --inflight-port {port} since lifeguard started: the drain's hold sees no request and relays at once; listening in this network namespace: {here}"
        ),
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The latest from the task metadata endpoint.
#[derive(Default)]
struct TaskState {
    limits: ecs::TaskLimits,
    usage: Option<(Instant, ecs::TaskUsage)>,
}

/// Samples once a second; while a drain runs, the in-flight figure every 100 ms for the
/// hold (the supervisor rings the sampler's bell when the phase changes, so the first
/// of those comes at once).
async fn sample_forever(config: Config, task: Option<Arc<Mutex<TaskState>>>, desk: Arc<Desk>) {
    let mut cgroup = cgroup::discover();
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
    let mut inflight = config.inflight_port.map(InFlightSource::new);
    let mut traffic = Traffic::default();
    // A sampler in a helper started again mid-drain carries on from the last look the
    // previous one posted: its first look must not read as a port quiet for ever.
    if let Ok(Some(last)) = desk.board.traffic() {
        traffic.last_busy = last.last_busy;
        traffic.busy_by = last.busy_by;
    }
    let mut derive = Derive::default();
    let mut app_tree = process_tree::TreeReader::new();
    let mut listen_watch = saturation::Watch::default();
    let mut port_watch = inflight::listening::PortWatch::default();
    let mut quota_watch = quota::QuotaWatch::default();
    // The namespace's other listeners, and when they were read; whether the last look
    // was a drain's.
    let mut others: Option<(Instant, Vec<u16>)> = None;
    let mut was_draining = false;
    let mut other_listeners = OtherListeners::default();
    let bell = desk.sampler_bell();
    let mut next_full = Instant::now();
    // The namespace's counters as last read; a look at a quiet namespace keeps them
    // (none of them moves without a segment: metrics/inflight/quiet.rs).
    let mut counters = netstat::TcpCounters::default();
    loop {
        let draining = desk.phase() == Phase::Draining && inflight.is_some();
        let now = Instant::now();
        let wait = if draining {
            HOLD_INTERVAL.min(next_full.saturating_duration_since(now))
        } else {
            next_full.saturating_duration_since(now)
        };
        match &bell {
            Ok(bell) => {
                let mut ring = [0u8; 8];
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = bell.recv(&mut ring) => {
                        desk.board.sampler_bell.clear();
                    }
                }
            }
            Err(_) => tokio::time::sleep(wait).await,
        }
        faults::point("sampler");
        let at = Instant::now();
        // A drain's hold reads every look: no shortcut then (metrics/inflight/quiet.rs).
        let may_skip = matches!(desk.phase(), Phase::Starting | Phase::Running);
        let found = inflight.as_mut().map(|source| source.sample(may_skip));
        // Who else listens in the namespace: a dump of its listeners when a drain begins
        // and every half minute.
        let drain_began = draining && !was_draining;
        was_draining = draining;
        if inflight.is_some()
            && (drain_began
                || others
                    .as_ref()
                    .is_none_or(|(at, _)| at.elapsed() > OTHERS_EVERY))
        {
            let mine: Vec<u16> = config
                .inflight_port
                .into_iter()
                .chain(desk.own_ports().iter().copied())
                .collect();
            // A namespace as small as a pod's or a task's is read whole; a host's (replicas
            // under --network host) is not: reading it every look would cost the app's
            // cgroup more CPU than the app, so there the counter stands alone, as it
            // always did (the rule leans toward holding).
            let small = inflight::listening::tcp_sockets_here()
                .is_some_and(|n| n <= inflight::listening::ATTRIBUTION_MAX);
            let listening: Vec<u16> = if small {
                inflight
                    .as_mut()
                    .and_then(|source| source.listening_ports())
                    // Not dumped: no other listener known, and the namespace's counter
                    // stands alone (the rule leans toward holding).
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|p| !mine.contains(p))
                    .collect()
            } else {
                Vec::new()
            };
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
            if others
                .as_ref()
                .is_none_or(|(_, before)| *before != listening)
            {
                other_listeners = OtherListeners::default();
            }
            others = Some((Instant::now(), listening));
        }
        // During a drain beside other listeners, the new connections on theirs (a dump of
        // the whole namespace): the namespace's accepts they explain are not the port's.
        let other_ports = others.as_ref().map_or(&[][..], |(_, p)| p.as_slice());
        let beside = if other_ports.is_empty() || !draining {
            // No table to read: the next one is a baseline again.
            other_listeners = OtherListeners::default();
            if other_ports.is_empty() {
                Others::Absent
            } else {
                Others::Unread
            }
        } else {
            inflight
                .as_mut()
                .and_then(|source| source.namespace())
                .map_or(Others::Unread, |all| {
                    other_listeners.new_connections(all, other_ports)
                })
        };
        if let (Some(found), Some(source)) = (found, &inflight) {
            // Everything that explains the namespace's accepts (the dumps above,
            // lifeguard's own accepts here) is read before the counter: Traffic::next.
            let own_accepts = desk.counters.endpoint_accepted();
            if !source.skipped() {
                counters = netstat::read();
            }
            desk.set_traffic(traffic.next(PortLook {
                at,
                found: found.map(|f| (f, source.records())),
                passive_opens: counters.passive_opens,
                own_accepts,
                others: beside,
            }));
        }
        let looked = at.elapsed();
        if at < next_full {
            continue;
        }
        next_full += INTERVAL;
        if next_full <= at {
            next_full = at + INTERVAL;
        }
        let reading = cgroup.read();
        // Each file that cannot be read costs its gauge, said once.
        for failure in &reading.new_failures {
            logging::warn(
                format!("metrics: {} unavailable: {}", failure.field, failure.reason),
                &[("path", &failure.path.display())],
            );
        }
        let (task_usage, task_limits) = match &task {
            Some(state) => {
                let state = state
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let fresh = state
                    .usage
                    .filter(|(t, _)| at.duration_since(*t) < METADATA_STALE);
                (fresh, state.limits)
            }
            None => (None, ecs::TaskLimits::default()),
        };
        let tree_started = Instant::now();
        let tree = app_tree.read();
        let tree_took = tree_started.elapsed();
        let mut sample = derive.next(&Reading {
            at,
            cgroup: &reading,
            task: task_usage,
            task_limits,
            inflight: found.flatten(),
        });
        sample.app = tree.figures;
        // Runnable threads cost a read per thread: counted only while the quota throttles.
        let share = quota_watch.throttled_share(reading.cpu_nr_periods, reading.cpu_nr_throttled);
        if share.is_some_and(|s| s > 0.0) {
            sample.app.threads_running = Some(quota::runnable_threads(&tree.pids));
            if let Some(warning) = quota_watch.warning(
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
        if let (Some(found), Some(port)) = (&found, config.inflight_port) {
            // A dump that was read says whether the port has a listener.
            let listening = found.map(|f| f.accept_queue.is_some());
            sample.inflight_port_listening = listening;
            let phase = desk.phase();
            let miss = port_watch.next(
                listening,
                phase == Phase::Running,
                matches!(phase, Phase::Draining | Phase::Stopping),
                at,
            );
            if let Some(miss) = miss {
                let here = inflight
                    .as_mut()
                    .and_then(|source| source.listening_ports());
                logging::warn(port_missing(port, miss, here), &[]);
            }
        }
        if let (Some(source), Some(port)) = (&inflight, config.inflight_port) {
            // The listener as this sample's dump found it (none when it failed).
            let listener = saturation::listener(source.records());
            for warning in listen_watch.next(at, port, listener.as_ref(), counters.listen_overflows)
            {
                logging::warn(warning, &[]);
            }
            sample.listen = saturation::figures(listener.as_ref(), &counters);
        }
        for process in &tree.crossed {
            logging::warn(process_tree::select_warning(process), &[]);
        }
        let figure = |n: Option<u64>| n.map_or("none".to_string(), |n| n.to_string());
        let (in_flight, queue) = (
            figure(sample.requests_in_flight),
            figure(sample.accept_queue_length),
        );
        desk.set_sample(sample);
        if !logging::enabled(logging::Level::Debug) {
            continue;
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
                    &match &inflight {
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

/// The traffic figures the drain's hold reads: the in-flight count and when traffic
/// last reached the port. Pure: fed each look at the port.
#[derive(Default)]
struct Traffic {
    last_busy: Option<Instant>,
    busy_by: Busy,
    /// Each connection's cookie and bytes received at the last look.
    seen: HashMap<u64, u64>,
    looked: bool,
    /// The namespace's passive opens and lifeguard's own endpoint's accepts at the last
    /// look.
    opens: Option<(u64, u64)>,
    /// Opens the last look counted and could not explain, and that look's instant: the
    /// next look may explain them (see `next`).
    owed: Option<(u64, Instant)>,
}

/// One look at the port: the dump's figures and sockets (None: it failed), the
/// namespace's passive opens (None: unreadable) and lifeguard's own endpoint's accepts
/// so far.
struct PortLook<'a> {
    at: Instant,
    found: Option<(inflight::InFlight, &'a [inflight::SockRecord])>,
    passive_opens: Option<u64>,
    own_accepts: u64,
    others: Others,
}

/// The namespace's other listeners (besides the port and lifeguard's endpoint) at a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Others {
    /// Nothing else listens.
    Absent,
    /// Others listen, and their connections were not read (outside a drain, or the
    /// namespace's dump failed).
    Unread,
    /// Their connections were read for the first time: the baseline, nothing new yet.
    Baseline,
    /// Their new connections since the last look.
    New(u64),
}

/// The connections of the namespace's other listeners, by cookie, as the last
/// namespace dump had them.
#[derive(Default)]
struct OtherListeners {
    seen: std::collections::HashSet<u64>,
    looked: bool,
}

impl OtherListeners {
    /// How many connections on `ports` (established or already closing) `all` has that
    /// the last dump did not; the first time, the baseline.
    fn new_connections(&mut self, all: &[inflight::SockRecord], ports: &[u16]) -> Others {
        let now: std::collections::HashSet<u64> = all
            .iter()
            .filter(|s| s.state != netlink_packet_sock_diag::constants::TCP_LISTEN)
            .filter(|s| ports.contains(&s.local_port))
            .map(|s| s.cookie)
            .collect();
        let new = now.difference(&self.seen).count() as u64;
        let first = !std::mem::replace(&mut self.looked, true);
        self.seen = now;
        if first {
            Others::Baseline
        } else {
            Others::New(new)
        }
    }
}

impl Traffic {
    /// The port is busy at this look when a request is in flight, a connection is new
    /// (established, or already closing: a server that closes first keeps TIME_WAIT),
    /// bytes came in on one, or the namespace accepted more connections than the tables
    /// explain: the port's new ones, lifeguard's endpoint's accepts and — beside other
    /// listeners (a sidecar's, a mesh proxy's) — theirs, seen in the namespace's socket
    /// table. Without that table the counter is not held against the port
    /// (docs/lifecycle.md says which way that leans).
    ///
    /// Every explanation is read before the counter (the dumps, then the endpoint's
    /// accepts), so nothing is explained before the kernel has counted it, and a surplus
    /// can only be a connection an earlier look counted: one that arrived between a
    /// look's reads, or that the endpoint accepted a moment after its count. So opens a
    /// look cannot explain are owed for one look: they mark the look busy at once, and
    /// the next look either explains them (the mark is taken back) or not (busy again,
    /// at that look). The surplus pays that debt alone and is never carried further: a
    /// credit could hide an app's request.
    fn next(&mut self, look: PortLook) -> Look {
        let counted = look.others != Others::Unread;
        let Some((found, sockets)) = look.found else {
            return self.report(look.at, None, counted);
        };
        let arrived = inflight::arrivals(&mut self.seen, !self.looked, sockets);
        // Opens counted since the last look less those explained (negative: a surplus).
        let unexplained = match (self.opens, look.passive_opens) {
            (Some((opens, own)), Some(now)) if self.looked && counted => {
                let explained = arrived.connections
                    + look.own_accepts.saturating_sub(own)
                    + match look.others {
                        Others::New(n) => n,
                        _ => 0,
                    };
                Some(now.saturating_sub(opens) as i64 - explained as i64)
            }
            _ => None,
        };
        self.opens = look.passive_opens.map(|n| (n, look.own_accepts));
        self.looked = true;
        // A first table (a drain beginning, or other listeners than before) is their
        // baseline: the opens since the look before it are never explained by a later one.
        let first_table = look.others == Others::Baseline;
        let owed = self.owed.take().map_or(0, |(n, _)| n);
        let mut still_owed = match unexplained {
            Some(net) if net < 0 => owed.saturating_sub(net.unsigned_abs()),
            _ => owed,
        };
        match unexplained.filter(|n| *n > 0) {
            Some(net) if first_table => still_owed += net as u64,
            Some(net) => self.owed = Some((net as u64, look.at)),
            None => {}
        }
        let busy = if found.requests > 0 {
            Busy::InFlight
        } else if arrived.connections > 0 {
            Busy::NewConnection
        } else if arrived.bytes {
            Busy::BytesIn
        } else if still_owed > 0 {
            Busy::NamespaceOpens
        } else {
            Busy::Nothing
        };
        if busy != Busy::Nothing {
            self.last_busy = Some(look.at);
            self.busy_by = busy;
        }
        self.report(look.at, Some(found.requests), counted)
    }

    /// The look as the hold reads it: opens still owed count as busy at their look.
    fn report(&self, taken: Instant, in_flight: Option<u64>, counted: bool) -> Look {
        let (last_busy, busy_by) = match self.owed {
            Some((_, at)) if self.last_busy.is_none_or(|busy| busy < at) => {
                (Some(at), Busy::NamespaceOpens)
            }
            _ => (self.last_busy, self.busy_by),
        };
        Look {
            taken,
            in_flight,
            last_busy,
            busy_by,
            namespace_counted: counted,
        }
    }
}

/// Fetches the task's limits (until it has them) and stats, once a second.
async fn poll_task(client: ecs::Client, state: Arc<Mutex<TaskState>>, desk: Arc<Desk>) {
    let mut have_limits = false;
    let mut failing = false;
    let mut ticker = tokio::time::interval(INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let mut result = Ok(());
        if !have_limits {
            match client.limits().await {
                Ok(limits) => {
                    logging::info(
                        "metrics: ECS task limits",
                        &[
                            (
                                "cpu",
                                &limits.cpu_cores.map_or("none".into(), |c| c.to_string()),
                            ),
                            (
                                "memory",
                                &limits.memory_bytes.map_or("none".into(), |m| m.to_string()),
                            ),
                        ],
                    );
                    state
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .limits = limits;
                    have_limits = true;
                }
                Err(reason) => result = Err(reason),
            }
        }
        if result.is_ok() {
            match client.usage().await {
                Ok(usage) => {
                    state
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .usage = Some((Instant::now(), usage))
                }
                Err(reason) => result = Err(reason),
            }
        }
        match result {
            Ok(()) if failing => {
                failing = false;
                logging::info("metrics: task metadata readable again", &[]);
            }
            Ok(()) => {}
            Err(reason) => {
                desk.counters.metadata_failed();
                if !std::mem::replace(&mut failing, true) {
                    logging::warn(
                        format!(
                            "task metadata unavailable, using the container's cgroup: {reason}"
                        ),
                        &[],
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cgroup_reading(cpu_ns: u64) -> cgroup::Reading {
        cgroup::Reading {
            cpu_usage_ns: Some(cpu_ns),
            cpu_quota_cores: Some(0.5),
            cpuset_cpus: Some(2),
            online_cpus: Some(2),
            cpu_throttled_ns: Some(3_000_000_000),
            memory_usage: Some(300 << 20),
            memory_inactive_file: Some(44 << 20),
            memory_limit: Some(512 << 20),
            memory_total: Some(24 << 30),
            oom_kills: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn container_scope_rates_and_percentages() {
        let t0 = Instant::now();
        let mut derive = Derive::default();
        let first = cgroup_reading(10_000_000_000);
        let s = derive.next(&Reading {
            at: t0,
            cgroup: &first,
            task: None,
            task_limits: ecs::TaskLimits::default(),
            inflight: None,
        });
        assert_eq!(s.scope, Scope::Container);
        assert_eq!(s.cpu_usage_seconds, Some(10.0));
        assert_eq!(s.cpu_limit_cores, Some(0.5));
        assert_eq!(s.cpu_utilization_percent, None, "one sample has no rate");
        assert_eq!(s.cpu_throttled_seconds, Some(3.0));
        assert_eq!(s.memory_working_set_bytes, Some(256 << 20));
        assert_eq!(s.memory_limit_bytes, Some(512 << 20));
        assert_eq!(s.memory_utilization_percent, Some(50.0));
        assert_eq!(s.memory_oom_kills, Some(1));
        assert_eq!(s.requests_in_flight, None);
        // 0.25 s of CPU in 1 s against a 0.5-core limit: 50 %.
        let second = cgroup_reading(10_250_000_000);
        let s = derive.next(&Reading {
            at: t0 + Duration::from_secs(1),
            cgroup: &second,
            task: None,
            task_limits: ecs::TaskLimits::default(),
            inflight: Some(inflight::InFlight {
                requests: 7,
                accept_queue: Some(3),
            }),
        });
        assert!((s.cpu_utilization_percent.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(
            (s.requests_in_flight, s.accept_queue_length),
            (Some(7), Some(3))
        );
    }

    #[test]
    fn traffic_is_busy_on_requests_new_connections_bytes_and_unexplained_opens() {
        use inflight::{InFlight, SockRecord, TcpInfoFields};
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let conn = |cookie: u64, received: u64| SockRecord {
            local_port: 0,
            state: 1, // TCP_ESTABLISHED
            inode: 9,
            rqueue: 0,
            wqueue: 0,
            cookie,
            info: Some(TcpInfoFields {
                bytes_received: received,
                bytes_sent: 10,
                last_data_recv_ms: 9,
                last_data_sent_ms: 3,
            }),
        };
        let idle = InFlight {
            requests: 0,
            accept_queue: Some(0),
        };
        let busy = InFlight {
            requests: 2,
            accept_queue: Some(1),
        };
        let mut traffic = Traffic::default();
        let mut look = |ms, found: Option<(InFlight, &[SockRecord])>, opens, own| {
            traffic.next(PortLook {
                at: at(ms),
                found,
                passive_opens: opens,
                own_accepts: own,
                others: Others::Absent,
            })
        };
        let keep = [conn(1, 100)];
        // The first look is the baseline: an idle connection already there is no news.
        assert_eq!(look(0, Some((idle, &keep)), Some(50), 3).last_busy, None);
        assert_eq!(look(100, Some((idle, &keep)), Some(50), 3).last_busy, None);
        // Bytes on it: a request came and went between two looks.
        let more = [conn(1, 180)];
        assert_eq!(
            look(200, Some((idle, &more)), Some(50), 3).last_busy,
            Some(at(200))
        );
        // A request in flight.
        let got = look(300, Some((busy, &more)), Some(50), 3);
        assert_eq!((got.in_flight, got.last_busy), (Some(2), Some(at(300))));
        // A new connection: it explains its own passive open.
        let two = [conn(1, 180), conn(2, 0)];
        assert_eq!(
            look(400, Some((idle, &two)), Some(51), 3).last_busy,
            Some(at(400))
        );
        // lifeguard's own endpoint (a health check) explains the next open: quiet.
        assert_eq!(
            look(500, Some((idle, &two)), Some(52), 4).last_busy,
            Some(at(400))
        );
        // An open nothing explains (a connection opened and closed between two looks, or
        // one the endpoint accepts a moment later): busy at once, and owed.
        let got = look(600, Some((idle, &two)), Some(53), 4);
        assert_eq!(
            (got.last_busy, got.busy_by),
            (Some(at(600)), Busy::NamespaceOpens)
        );
        // The endpoint's accept of it, read at the next look: the mark is taken back.
        let got = look(700, Some((idle, &two)), Some(53), 5);
        assert_eq!(
            (got.last_busy, got.busy_by),
            (Some(at(400)), Busy::NewConnection)
        );
        // Two opens never explained: busy at their look, and again at the next.
        assert_eq!(
            look(800, Some((idle, &two)), Some(55), 5).last_busy,
            Some(at(800))
        );
        let got = look(900, Some((idle, &two)), Some(55), 5);
        assert_eq!(
            (got.last_busy, got.busy_by),
            (Some(at(900)), Busy::NamespaceOpens)
        );
        // A surplus pays the debt and nothing more: one owed at 1000, a surplus of two
        // at 1100 (the second is dropped, not kept as a credit), so the open at 1200 is
        // busy at its look and at the next.
        assert_eq!(
            look(1000, Some((idle, &two)), Some(56), 5).last_busy,
            Some(at(1000))
        );
        assert_eq!(
            look(1100, Some((idle, &two)), Some(56), 7).last_busy,
            Some(at(900))
        );
        assert_eq!(
            look(1200, Some((idle, &two)), Some(57), 7).last_busy,
            Some(at(1200))
        );
        assert_eq!(
            look(1300, Some((idle, &two)), Some(57), 7).last_busy,
            Some(at(1300))
        );
        // No counter: the port's own figures still tell, and nothing is owed.
        assert_eq!(
            look(1400, Some((idle, &two)), None, 7).last_busy,
            Some(at(1300))
        );
        // A failed dump: no figure, last traffic kept.
        let failed = look(1500, None, Some(57), 7);
        assert_eq!((failed.in_flight, failed.last_busy), (None, Some(at(1300))));
    }

    #[test]
    fn beside_other_listeners_their_connections_explain_opens_a_look_late() {
        use inflight::InFlight;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let idle = InFlight {
            requests: 0,
            accept_queue: Some(0),
        };
        let mut traffic = Traffic::default();
        // (ms, the namespace's passive opens, what the namespace's table said of the
        // other listeners: unread outside a drain).
        let mut look = |ms, opens, others| {
            traffic.next(PortLook {
                at: at(ms),
                found: Some((idle, &[])),
                passive_opens: Some(opens),
                own_accepts: 0,
                others,
            })
        };
        // Running: the counter is not held against the port.
        assert_eq!(look(0, 10, Others::Unread).last_busy, None);
        assert_eq!(look(1000, 20, Others::Unread).last_busy, None);
        // The drain's first table is a baseline: what opened since the last look cannot
        // be explained later, so it is busy at once and not owed.
        assert_eq!(look(1100, 21, Others::Baseline).last_busy, Some(at(1100)));
        assert_eq!(look(1200, 21, Others::New(0)).last_busy, Some(at(1100)));
        // The sidecar's accepts, each in the table of the look that counted it: quiet.
        assert_eq!(look(1300, 22, Others::New(1)).last_busy, Some(at(1100)));
        // One accepted between the dump and the counter's read: busy for a look, then
        // explained by the next dump, and the mark goes.
        assert_eq!(look(1400, 24, Others::New(1)).last_busy, Some(at(1400)));
        let got = look(1500, 25, Others::New(2));
        assert_eq!(
            (got.last_busy, got.namespace_counted),
            (Some(at(1100)), true)
        );
        // A sidecar's late one, then the app's connection opened and closed between two
        // looks as the late one is explained: the debt is not paid, busy at the later
        // look (where the app's open may have been).
        assert_eq!(look(1600, 26, Others::New(0)).last_busy, Some(at(1600)));
        assert_eq!(look(1700, 27, Others::New(1)).last_busy, Some(at(1700)));
        assert_eq!(look(1800, 27, Others::New(0)).last_busy, Some(at(1700)));
    }

    #[test]
    fn no_limit_or_one_above_the_host_is_memtotal() {
        for limit in [None, Some(64 << 30)] {
            let mut reading = cgroup_reading(0);
            reading.memory_limit = limit;
            let s = Derive::default().next(&Reading {
                at: Instant::now(),
                cgroup: &reading,
                task: None,
                task_limits: ecs::TaskLimits::default(),
                inflight: None,
            });
            assert_eq!(s.memory_limit_bytes, Some(24 << 30), "{limit:?}");
        }
    }

    #[test]
    fn task_scope_uses_task_limits_and_falls_back_per_limit() {
        let t0 = Instant::now();
        let reading = cgroup_reading(0);
        let mut derive = Derive::default();
        let usage = |cpu_ns| ecs::TaskUsage {
            cpu_ns,
            working_set: 128 << 20,
            containers: 2,
        };
        // The task has a CPU size but no memory size: memory limit from the cgroup.
        let limits = ecs::TaskLimits {
            cpu_cores: Some(0.25),
            memory_bytes: None,
        };
        let s = derive.next(&Reading {
            at: t0,
            cgroup: &reading,
            task: Some((t0, usage(1_000_000_000))),
            task_limits: limits,
            inflight: None,
        });
        assert_eq!(s.scope, Scope::Task);
        assert_eq!(s.cpu_limit_cores, Some(0.25));
        assert_eq!(s.memory_limit_bytes, Some(512 << 20));
        assert_eq!(s.memory_utilization_percent, Some(25.0));
        let later = t0 + Duration::from_millis(500);
        let s = derive.next(&Reading {
            at: later,
            cgroup: &reading,
            task: Some((later, usage(1_100_000_000))),
            task_limits: limits,
            inflight: None,
        });
        // 0.1 s in 0.5 s = 0.2 cores of 0.25: 80 %.
        assert!((s.cpu_utilization_percent.unwrap() - 80.0).abs() < 1e-9);
        // The task stops answering: container scope, and no rate across the switch.
        let s = derive.next(&Reading {
            at: later + Duration::from_secs(1),
            cgroup: &reading,
            task: None,
            task_limits: limits,
            inflight: None,
        });
        assert_eq!(s.scope, Scope::Container);
        assert_eq!(s.cpu_utilization_percent, None);
        assert_eq!(s.cpu_limit_cores, Some(0.5));
        // Without a local quota or cpuset, the task's size still beats the machine's
        // CPUs, and its memory the host's; the usage counter is the cgroup's throughout.
        let mut unlimited = cgroup_reading(7_000_000_000);
        unlimited.cpu_quota_cores = None;
        unlimited.cpuset_cpus = None;
        unlimited.memory_limit = None;
        let both = ecs::TaskLimits {
            cpu_cores: Some(0.25),
            memory_bytes: Some(1 << 30),
        };
        let s = derive.next(&Reading {
            at: later + Duration::from_secs(2),
            cgroup: &unlimited,
            task: None,
            task_limits: both,
            inflight: None,
        });
        assert_eq!(s.cpu_limit_cores, Some(0.25));
        assert_eq!(s.memory_limit_bytes, Some(1 << 30));
        assert_eq!(s.cpu_usage_seconds, Some(7.0));
    }

    #[test]
    fn missing_files_cost_only_their_gauges() {
        let reading = cgroup::Reading {
            memory_usage: Some(10),
            ..Default::default()
        };
        let s = Derive::default().next(&Reading {
            at: Instant::now(),
            cgroup: &reading,
            task: None,
            task_limits: ecs::TaskLimits::default(),
            inflight: None,
        });
        assert_eq!(s.cpu_usage_seconds, None);
        assert_eq!(s.cpu_limit_cores, None);
        assert_eq!(s.memory_oom_kills, None);
        assert!(s.taken.is_some());
    }
}
