//! The measuring half (README "Metrics"): once a second, the app's cgroup CPU and memory (or
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
pub mod sample;
pub mod saturation;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::board::Board;
use crate::faults;
use crate::helpers::{self, Helper};
use crate::lifecycle::{Busy, Look, Phase};
use crate::logging;
use inflight::InFlightSource;
use sample::{Sample, Scope};

/// How often the sampler runs: once a second.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How often the in-flight figure is read while a drain runs, for its hold.
pub const HOLD_INTERVAL: Duration = Duration::from_millis(100);
/// A task metadata fetch that takes longer is given up: the next one is due.
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
        // has none (README "Metrics").
        let (scope, cpu_ns, cpu_at, working_set) = match r.task {
            Some((at, usage)) => (Scope::Task, Some(usage.cpu_ns), at, Some(usage.working_set)),
            None => (Scope::Container, cg.cpu_usage_ns, r.at, cg.working_set()),
        };
        // The limit that binds: a local quota or cpuset, else the task's size, else the
        // machine (README "Metrics"); in task scope the task's size comes first.
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
            if self.previous_cpu.map_or(true, |(_, at, _)| at != cpu_at) {
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

/// Starts the sampler on a thread of its own (started now, before the app: helpers.rs),
/// so sampling never takes a moment from supervision: the cgroup files and the
/// sock_diag dump are synchronous reads (well under a millisecond, more with many
/// connections on the port), and the task metadata is fetched by a task of its own with
/// a timeout, so a hung endpoint costs the task-scope figures and nothing else. If the
/// thread cannot start, lifeguard runs on without samples (and a drain's hold, seeing
/// no figures, does not hold).
pub fn start(config: Config, board: Arc<Board>) {
    // The agent gives an address (169.254.170.2); a name needs the lookup thread.
    let name_lookups = config.ecs_metadata.as_deref().is_some_and(|uri| {
        uri.parse::<hyper::Uri>()
            .ok()
            .and_then(|u| u.host().map(|h| crate::http_client::address(h).is_none()))
            .unwrap_or(false)
    });
    // The task's figures outlive a restart of the sampler.
    let task = config
        .ecs_metadata
        .as_ref()
        .map(|_| Arc::new(Mutex::new(TaskState::default())));
    let started = helpers::start(Helper::Sampler, name_lookups, move || {
        let (config, task, board) = (config.clone(), task.clone(), board.clone());
        async move {
            // Aborted when this run ends, a panic included, so a restart never leaves
            // two pollers behind.
            let _poller = match (&config.ecs_metadata, &task) {
                (Some(uri), Some(shared)) => Some(AbortOnDrop(tokio::spawn(poll_task(
                    ecs::Client::new(uri, METADATA_TIMEOUT),
                    shared.clone(),
                    board.clone(),
                )))),
                _ => None,
            };
            sample_forever(config, task, board).await
        }
    });
    if let Err(reason) = started {
        logging::warn(format!("metrics off: {reason}"), &[]);
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
async fn sample_forever(config: Config, task: Option<Arc<Mutex<TaskState>>>, board: Arc<Board>) {
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
    let mut derive = Derive::default();
    let mut app_tree = process_tree::TreeReader::new();
    let mut listen_watch = saturation::Watch::default();
    let bell = board.sampler_bell.listener();
    let mut next_full = Instant::now();
    // The namespace's counters as last read; a look at a quiet namespace keeps them
    // (none of them moves without a segment: metrics/inflight/quiet.rs).
    let mut counters = netstat::TcpCounters::default();
    loop {
        let draining = board.phase() == Phase::Draining && inflight.is_some();
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
                        board.sampler_bell.clear();
                    }
                }
            }
            Err(_) => tokio::time::sleep(wait).await,
        }
        faults::point("sampler");
        let at = Instant::now();
        // A drain's hold reads every look: no shortcut then (metrics/inflight/quiet.rs).
        let may_skip = matches!(board.phase(), Phase::Starting | Phase::Running);
        let found = inflight.as_mut().map(|source| source.sample(may_skip));
        if let (Some(found), Some(source)) = (found, &inflight) {
            // The namespace's counter first, lifeguard's own accepts after: an accept in
            // between makes the look busy, never quiet (Traffic::next).
            if !source.skipped() {
                counters = netstat::read();
            }
            board.set_traffic(traffic.next(PortLook {
                at,
                found: found.map(|f| (f, source.records())),
                passive_opens: counters.passive_opens,
                own_accepts: board.counters.endpoint_accepted(),
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
        // Each file that cannot be read costs its gauge, said once (issue #6).
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
        board.set_sample(sample);
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
}

/// One look at the port: the dump's figures and sockets (None: it failed), the
/// namespace's passive opens (None: unreadable) and lifeguard's own endpoint's accepts
/// so far.
struct PortLook<'a> {
    at: Instant,
    found: Option<(inflight::InFlight, &'a [inflight::SockRecord])>,
    passive_opens: Option<u64>,
    own_accepts: u64,
}

impl Traffic {
    /// The port is busy at this look when a request is in flight, a connection is new,
    /// bytes came in on one, or the namespace accepted more connections than the port's
    /// new ones and lifeguard's own endpoint's account for (one that opened and closed
    /// between two looks). A race between the counter and the endpoint's accept can only
    /// make a look busy, never hide a request: it costs at most one `--drain-quiet`.
    fn next(&mut self, look: PortLook) -> Look {
        let Some((found, sockets)) = look.found else {
            return Look {
                taken: look.at,
                in_flight: None,
                last_busy: self.last_busy,
                busy_by: self.busy_by,
            };
        };
        let arrived = inflight::arrivals(&mut self.seen, !self.looked, sockets);
        let opened_elsewhere = match (self.opens, look.passive_opens) {
            (Some((opens, own)), Some(now)) if self.looked => {
                let explained = arrived.connections + look.own_accepts.saturating_sub(own);
                now.saturating_sub(opens) > explained
            }
            _ => false,
        };
        self.opens = look.passive_opens.map(|n| (n, look.own_accepts));
        self.looked = true;
        let busy = if found.requests > 0 {
            Busy::InFlight
        } else if arrived.connections > 0 {
            Busy::NewConnection
        } else if arrived.bytes {
            Busy::BytesIn
        } else if opened_elsewhere {
            Busy::NamespaceOpens
        } else {
            Busy::Nothing
        };
        if busy != Busy::Nothing {
            self.last_busy = Some(look.at);
            self.busy_by = busy;
        }
        Look {
            taken: look.at,
            in_flight: Some(found.requests),
            last_busy: self.last_busy,
            busy_by: self.busy_by,
        }
    }
}

/// Fetches the task's limits (until it has them) and stats, once a second.
async fn poll_task(client: ecs::Client, state: Arc<Mutex<TaskState>>, board: Arc<Board>) {
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
                board.counters.metadata_failed();
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
        // An open nothing explains: a connection opened and closed between two looks.
        let got = look(600, Some((idle, &two)), Some(53), 4);
        assert_eq!(
            (got.last_busy, got.busy_by),
            (Some(at(600)), Busy::NamespaceOpens)
        );
        // The endpoint's accept seen before the counter moved: never quiet-making debt.
        assert_eq!(
            look(700, Some((idle, &two)), Some(53), 5).last_busy,
            Some(at(600))
        );
        assert_eq!(
            look(800, Some((idle, &two)), Some(55), 5).last_busy,
            Some(at(800))
        );
        // No counter: the port's own figures still tell.
        assert_eq!(
            look(900, Some((idle, &two)), None, 5).last_busy,
            Some(at(800))
        );
        // A failed dump: no figure, last traffic kept.
        let failed = look(1000, None, Some(55), 5);
        assert_eq!((failed.in_flight, failed.last_busy), (None, Some(at(800))));
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
