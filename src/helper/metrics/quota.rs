//! A CPU quota used up: from the cgroup's own counters (cpu.stat `nr_periods`,
//! `nr_throttled`) and the app's runnable threads, when health checks answered inside
//! the container will time out. CFS bandwidth control throttles the whole cgroup for
//! the rest of each period once the quota is spent, and a probe (lifeguard's endpoint,
//! `lifeguard --probe`, a curl) waits like any thread there; nice values do not help,
//! the limit being bandwidth, not weight. Pure: the sampler feeds it each sample's
//! counters; the thread count is read only while the quota throttles.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

/// Periods throttled out of those elapsed, over one sample, from which the quota
/// counts as saturated.
pub const SATURATED: f64 = 0.5;
/// Runnable threads per CPU of the quota from which probes starve: the example's 300
/// threads on 0.25 CPU failed 19 of 24 probes, 16 threads (64 a CPU) none.
pub const THREADS_PER_CPU: f64 = 100.0;
/// At most one warning this often.
pub const QUIET_FOR: Duration = Duration::from_secs(60);

#[derive(Clone, Debug, Default)]
pub struct QuotaWatch {
    previous: Option<(u64, u64)>,
    last_warning: Option<Instant>,
}

impl QuotaWatch {
    /// The share of periods throttled since the previous sample (None on the first,
    /// or when no period elapsed: no quota, or an idle app).
    pub fn throttled_share(&mut self, periods: Option<u64>, throttled: Option<u64>) -> Option<f64> {
        let (periods, throttled) = (periods?, throttled?);
        let share = match self.previous {
            Some((p, t)) if periods > p && throttled >= t => {
                Some((throttled - t) as f64 / (periods - p) as f64)
            }
            _ => None,
        };
        self.previous = Some((periods, throttled));
        share
    }

    /// The warning to log, if the quota is saturated by far more runnable threads than
    /// it has CPUs, and none was said in the last minute.
    pub fn warning(
        &mut self,
        share: Option<f64>,
        runnable: Option<u64>,
        quota_cores: Option<f64>,
        now: Instant,
    ) -> Option<String> {
        let (share, runnable, cores) = (share?, runnable?, quota_cores?);
        if share < SATURATED || (runnable as f64) < THREADS_PER_CPU * cores.max(0.01) {
            return None;
        }
        if self
            .last_warning
            .is_some_and(|at| now.duration_since(at) < QUIET_FOR)
        {
            return None;
        }
        self.last_warning = Some(now);
        Some(format!(
            "the CPU quota ({cores} CPU) is used up: {:.0} % of its periods throttled, with {runnable} runnable threads of the app ({:.0} per CPU of the quota); health checks answered inside the container (an HTTP probe, lifeguard --probe, an ECS container health check) will time out and may kill or pull a task for being busy: use fewer worker threads or a bigger quota, and probes that ride it out (a tcpSocket liveness probe, readiness with timeoutSeconds 3 and failureThreshold 3; docs/lifecycle.md, health checks)",
            share * 100.0,
            runnable as f64 / cores.max(0.01)
        ))
    }
}

/// Runnable threads (state `R`) among the threads of `pids`, from each thread's
/// /proc/PID/task/TID/stat (a process or thread gone meanwhile counts as not running).
pub fn runnable_threads(pids: &[i32]) -> u64 {
    let mut running = 0;
    for pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue; // gone meanwhile
        };
        for task in tasks.flatten() {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            if thread_state(&stat) == Some('R') {
                running += 1;
            }
        }
    }
    running
}

/// The state letter of a /proc stat line: the field after the command, which may hold
/// spaces and parentheses itself.
pub fn thread_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_of_periods_throttled_is_taken_between_two_samples() {
        let mut w = QuotaWatch::default();
        assert_eq!(
            w.throttled_share(Some(100), Some(10)),
            None,
            "the first sample"
        );
        assert_eq!(w.throttled_share(Some(110), Some(19)), Some(0.9));
        assert_eq!(
            w.throttled_share(Some(110), Some(19)),
            None,
            "no period elapsed"
        );
        assert_eq!(w.throttled_share(None, Some(19)), None, "no quota");
    }

    #[test]
    fn a_saturated_quota_with_many_threads_is_said_at_most_once_a_minute() {
        let t0 = Instant::now();
        let mut w = QuotaWatch::default();
        // 300 runnable threads on 0.25 CPU, 90 % of the periods throttled: said.
        let said = w.warning(Some(0.9), Some(300), Some(0.25), t0).unwrap();
        assert!(
            said.contains("300 runnable threads") && said.contains("90 %"),
            "{said}"
        );
        assert!(said.contains("tcpSocket"), "{said}");
        assert_eq!(
            w.warning(
                Some(0.9),
                Some(300),
                Some(0.25),
                t0 + Duration::from_secs(30)
            ),
            None
        );
        assert!(w
            .warning(Some(0.9), Some(300), Some(0.25), t0 + QUIET_FOR)
            .is_some());
        // 16 threads on 0.25 CPU saturate it too, but probes still got through.
        let mut w = QuotaWatch::default();
        assert_eq!(w.warning(Some(0.9), Some(16), Some(0.25), t0), None);
        // Many threads, little throttling: a large idle pool costs nothing.
        assert_eq!(w.warning(Some(0.1), Some(300), Some(0.25), t0), None);
        // No quota: nothing to saturate.
        assert_eq!(w.warning(Some(0.9), Some(300), None, t0), None);
    }

    #[test]
    fn the_state_follows_the_command_whatever_it_holds() {
        assert_eq!(thread_state("42 (spin) R 1 42 42 0"), Some('R'));
        assert_eq!(thread_state("42 (a) b (c)) S 1 42"), Some('S'));
        assert_eq!(thread_state("garbage"), None);
    }
}
