//! What one sample holds: the sampler's figures as `/metrics` and the CloudWatch
//! publisher read them off the Board. Plain data, no behaviour.
#![forbid(unsafe_code)]

use std::time::Instant;

/// Whose CPU and memory a sample describes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// The cgroup lifeguard and the app run in.
    #[default]
    Container,
    /// The whole ECS task (metadata endpoint).
    Task,
}

/// One sample; a gauge that could not be read is `None` and left out of `/metrics`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// When it was taken; `None` until the first sample.
    pub taken: Option<Instant>,
    pub scope: Scope,
    pub cpu_usage_seconds: Option<f64>,
    pub cpu_limit_cores: Option<f64>,
    /// Usage rate over the last interval ÷ the limit; needs two samples.
    pub cpu_utilization_percent: Option<f64>,
    pub cpu_throttled_seconds: Option<f64>,
    /// cpu.stat nr_periods and nr_throttled: quota periods elapsed, and those in which
    /// the quota ran out.
    pub cpu_periods: Option<u64>,
    pub cpu_throttled_periods: Option<u64>,
    pub memory_working_set_bytes: Option<u64>,
    pub memory_limit_bytes: Option<u64>,
    pub memory_utilization_percent: Option<f64>,
    pub memory_oom_kills: Option<u64>,
    pub requests_in_flight: Option<u64>,
    pub accept_queue_length: Option<u64>,
    /// The oldest request received and not yet answered: its age (0 when none waits).
    pub request_oldest_seconds: Option<f64>,
    /// The response times sampled since the sampler started.
    pub responses: Option<super::inflight::ResponseTimes>,
    /// Whether anything listens on `--inflight-port` (None: no port, or no dump).
    pub inflight_port_listening: Option<bool>,
    /// The listener on `--inflight-port` and the network namespace's TCP counters.
    pub listen: ListenFigures,
    /// The app's process tree (lifeguard's descendants).
    pub app: AppFigures,
}

/// The saturation figures of the port and of its network namespace (with
/// `--inflight-port`); each `None` when it could not be read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ListenFigures {
    /// The listeners' backlogs, summed (absent while nothing listens).
    pub backlog: Option<u64>,
    /// How long the oldest connection in the accept queue has waited since its
    /// handshake completed; 0 when the queue is empty.
    pub oldest_queued_seconds: Option<f64>,
    /// The namespace's `TcpExt: ListenOverflows`, `ListenDrops` and `Tcp: PassiveOpens`.
    pub overflows: Option<u64>,
    pub drops: Option<u64>,
    pub passive_opens: Option<u64>,
}

/// The app's process tree in one sample; a figure that could not be read whole (a
/// process it may not read) is `None`, never a partial sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppFigures {
    pub processes: Option<u64>,
    pub threads: Option<u64>,
    /// Runnable threads (state R), read only while the quota throttles (0 otherwise).
    pub threads_running: Option<u64>,
    pub open_fds: Option<u64>,
    /// The smallest soft descriptor limit among the tree's processes.
    pub max_fds: Option<u64>,
    pub resident_bytes: Option<u64>,
}
