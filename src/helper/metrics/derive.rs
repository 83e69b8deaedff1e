//! From readings to a `Sample`: the scope (the task's where it reports, else the
//! container's), the limit that binds, the CPU rate over the last turn and the
//! utilization percentages. Pure: the sampler feeds it each turn's readings.
#![forbid(unsafe_code)]

use std::time::Instant;

use super::sample::{Sample, Scope};
use super::{cgroup, ecs, inflight};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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

    /// A fresh Derive's sample of `reading` alone (container scope, no traffic).
    fn first_sample(reading: &cgroup::Reading) -> Sample {
        Derive::default().next(&Reading {
            at: Instant::now(),
            cgroup: reading,
            task: None,
            task_limits: ecs::TaskLimits::default(),
            inflight: None,
        })
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
    fn no_limit_or_one_above_the_host_is_memtotal() {
        for limit in [None, Some(64 << 30)] {
            let mut reading = cgroup_reading(0);
            reading.memory_limit = limit;
            let s = first_sample(&reading);
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
        let s = first_sample(&reading);
        assert_eq!(s.cpu_usage_seconds, None);
        assert_eq!(s.cpu_limit_cores, None);
        assert_eq!(s.memory_oom_kills, None);
        assert!(s.taken.is_some());
    }
}
