//! The one read side of supervision: each writer (the supervisor, the app check, the
//! sampler) owns a field of the `Board`, and readers (the endpoint, the CloudWatch
//! publisher) take a `Snapshot` of all of it at once (issue #6). It also owns the
//! shapes it holds: the sampler's `Sample` and the publisher's `Outcome`.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use std::time::Instant;

use crate::health::{self, AppCheck, Verdict};
use crate::kernel;
use crate::lifecycle::Phase;
use crate::signals::{self, Signal};

/// Samples come every second; one older than this is left out of every snapshot.
const SAMPLE_STALE: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Board {
    phase: watch::Sender<Phase>,
    check: watch::Sender<AppCheck>,
    sample: watch::Sender<Arc<Sample>>,
    pub counters: Counters,
}

/// Counters, lock-free so that counting never holds up supervision.
pub struct Counters {
    forwarded: [AtomicU64; signals::MAX as usize + 1],
    zombies_reaped: AtomicU64,
    /// Task metadata fetches that failed (ECS only: the sampler fell back to the cgroup).
    metadata_failures: AtomicU64,
    /// PutMetricData calls by outcome (cloudwatch::Outcome::ALL order); None of them
    /// is shown until publishing is on.
    cloudwatch: [AtomicU64; 4],
    cloudwatch_on: AtomicBool,
}

/// Everything a reader needs, read at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub phase: Phase,
    /// A SIGTERM has arrived but the loop has not read it yet: it already counts
    /// (DESIGN §3, "/readyz answers draining at once").
    pub term_pending: bool,
    pub check: AppCheck,
    /// (signal, count) for every signal forwarded at least once.
    pub forwarded: Vec<(Signal, u64)>,
    pub zombies_reaped: u64,
    pub metadata_failures: u64,
    /// (outcome, calls) for every outcome, when CloudWatch publishing is on.
    pub cloudwatch: Option<Vec<(Outcome, u64)>>,
    pub sample: Arc<Sample>,
}

impl Snapshot {
    /// What `/readyz` answers.
    pub fn readiness(&self) -> Verdict {
        health::readiness(self.phase, &self.check, self.term_pending)
    }

    pub fn ready(&self) -> bool {
        self.readiness().0 == 200
    }

    /// From the instant SIGTERM arrives until the app has exited.
    pub fn draining(&self) -> bool {
        matches!(self.phase, Phase::Draining | Phase::Stopping) || self.term_pending
    }
}

impl Board {
    pub fn new() -> Arc<Board> {
        Arc::new(Board {
            phase: watch::Sender::new(Phase::Starting),
            check: watch::Sender::new(AppCheck::Pending),
            sample: watch::Sender::new(Arc::new(Sample::default())),
            counters: Counters {
                forwarded: std::array::from_fn(|_| AtomicU64::new(0)),
                zombies_reaped: AtomicU64::new(0),
                metadata_failures: AtomicU64::new(0),
                cloudwatch: std::array::from_fn(|_| AtomicU64::new(0)),
                cloudwatch_on: AtomicBool::new(false),
            },
        })
    }

    pub fn snapshot(&self) -> Snapshot {
        let phase = *self.phase.borrow();
        // A sample that stopped coming (its thread gone) is no reading at all: gauges
        // frozen at their last value would steer autoscalers for good.
        let sample = self.sample.borrow().clone();
        let sample = match sample.taken {
            Some(at) if at.elapsed() > SAMPLE_STALE => Arc::new(Sample::default()),
            _ => sample,
        };
        Snapshot {
            phase,
            term_pending: term_pending(phase),
            check: self.check.borrow().clone(),
            forwarded: self.counters.forwarded(),
            zombies_reaped: self.counters.zombies_reaped.load(Ordering::Relaxed),
            metadata_failures: self.counters.metadata_failures.load(Ordering::Relaxed),
            cloudwatch: self.counters.cloudwatch(),
            sample,
        }
    }

    /// What `/readyz` answers, without taking a whole snapshot (it is asked far more
    /// often than `/metrics`).
    pub fn readiness(&self) -> Verdict {
        let phase = *self.phase.borrow();
        health::readiness(phase, &self.check.borrow(), term_pending(phase))
    }

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// The supervisor's field.
    pub fn set_phase(&self, phase: Phase) {
        self.phase.send_replace(phase);
    }

    pub fn watch_phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// The app check's field.
    pub fn set_check(&self, verdict: AppCheck) {
        self.check.send_replace(verdict);
    }

    pub fn check(&self) -> AppCheck {
        self.check.borrow().clone()
    }

    pub fn watch_check(&self) -> watch::Receiver<AppCheck> {
        self.check.subscribe()
    }

    /// The sampler's field.
    pub fn set_sample(&self, sample: Sample) {
        self.sample.send_replace(Arc::new(sample));
    }

    /// Every new sample, for the CloudWatch publisher.
    pub fn watch_sample(&self) -> watch::Receiver<Arc<Sample>> {
        self.sample.subscribe()
    }
}

/// A SIGTERM has arrived that the loop has not read yet (only before the drain matters).
fn term_pending(phase: Phase) -> bool {
    matches!(phase, Phase::Starting | Phase::Running) && kernel::signal_pending(signals::TERM)
}

impl Counters {
    pub fn signal_forwarded(&self, signal: Signal) {
        if let Some(slot) = self.forwarded.get(signal.0 as usize) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn zombie_reaped(&self) {
        self.zombies_reaped.fetch_add(1, Ordering::Relaxed);
    }

    pub fn metadata_failed(&self) {
        self.metadata_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// CloudWatch publishing is on: its counters are shown from now, zeros included.
    pub fn cloudwatch_on(&self) {
        self.cloudwatch_on.store(true, Ordering::Relaxed);
    }

    pub fn cloudwatch_request(&self, outcome: Outcome) {
        let slot = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        self.cloudwatch[slot].fetch_add(1, Ordering::Relaxed);
    }

    fn cloudwatch(&self) -> Option<Vec<(Outcome, u64)>> {
        self.cloudwatch_on.load(Ordering::Relaxed).then(|| {
            Outcome::ALL
                .iter()
                .zip(&self.cloudwatch)
                .map(|(o, n)| (*o, n.load(Ordering::Relaxed)))
                .collect()
        })
    }

    fn forwarded(&self) -> Vec<(Signal, u64)> {
        (1..=signals::MAX)
            .map(|n| {
                (
                    Signal(n),
                    self.forwarded[n as usize].load(Ordering::Relaxed),
                )
            })
            .filter(|(_, count)| *count > 0)
            .collect()
    }
}

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
    pub memory_working_set_bytes: Option<u64>,
    pub memory_limit_bytes: Option<u64>,
    pub memory_utilization_percent: Option<f64>,
    pub memory_oom_kills: Option<u64>,
    pub requests_in_flight: Option<u64>,
    pub accept_queue_length: Option<u64>,
}

/// How a call ended, as `lifeguard_cloudwatch_requests_total{result}` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Throttled,
    Timeout,
    Error,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Ok,
        Outcome::Throttled,
        Outcome::Timeout,
        Outcome::Error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Throttled => "throttled",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_carries_every_writers_field() {
        let board = Board::new();
        board.set_phase(Phase::Running);
        board.set_check(AppCheck::Passing);
        board.counters.signal_forwarded(signals::TERM);
        board.counters.signal_forwarded(signals::TERM);
        board.counters.signal_forwarded(signals::HUP);
        board.counters.zombie_reaped();
        let snap = board.snapshot();
        assert_eq!(snap.phase, Phase::Running);
        assert!(snap.ready() && !snap.draining());
        assert_eq!(snap.forwarded, vec![(signals::HUP, 1), (signals::TERM, 2)]);
        assert_eq!(snap.zombies_reaped, 1);
        board.set_phase(Phase::Stopping);
        let snap = board.snapshot();
        assert!(!snap.ready() && snap.draining());
    }

    #[test]
    fn a_sample_that_stopped_coming_is_left_out() {
        let board = Board::new();
        let sample = |age: u64| Sample {
            taken: Instant::now().checked_sub(std::time::Duration::from_secs(age)),
            requests_in_flight: Some(7),
            ..Default::default()
        };
        board.set_sample(sample(1));
        assert_eq!(board.snapshot().sample.requests_in_flight, Some(7));
        board.set_sample(sample(60));
        assert_eq!(board.snapshot().sample.requests_in_flight, None);
    }
}
