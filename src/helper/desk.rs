//! The helper process's own table, where its threads meet: the app check's verdict,
//! the sampler's latest sample, the publisher's and the endpoint's counters, beside
//! the shared Board (what supervision publishes and reads). Readers take a `Snapshot`
//! of both at one instant. Nothing here is seen by supervision, so the locks here are
//! the helper threads' business alone; the shapes are their writers': the sampler's
//! `Sample` (metrics/sample.rs) and the publisher's `Outcome` (cloudwatch/outcome.rs).
#![forbid(unsafe_code)]

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::watch;

use crate::board::{Bell, HelperBoard, Look, Phase};
use crate::helper::cloudwatch::outcome::Outcome;
use crate::helper::health::{self, AppCheck, Verdict};
use crate::helper::metrics::sample::Sample;
use crate::helper::threads::{self, Helper};
use crate::signal_names::Signal;

/// Samples come every second; one older than this is left out of every snapshot.
const SAMPLE_STALE: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Desk {
    /// What supervision and the helper share.
    pub board: HelperBoard,
    /// The app check's verdict with its reason, for `/readyz`.
    check: Mutex<AppCheck>,
    sample: watch::Sender<Arc<Sample>>,
    pub counters: Counters,
    /// The ports lifeguard's own endpoint listens on (not the app's, nor a sidecar's).
    own_ports: Vec<u16>,
    /// PID 1's pending signals, for a SIGTERM that has arrived but not been read yet.
    supervisor: Option<crate::kernel::SupervisorPending>,
    /// The ECS task as OpenTelemetry names it (cloud.*, aws.ecs.*), once the task
    /// metadata has been read: an OTLP export's resource.
    task_identity: std::sync::OnceLock<Vec<(&'static str, String)>>,
}

/// The helper's own counters.
pub struct Counters {
    /// Task metadata fetches that failed (ECS only: the sampler fell back to the cgroup).
    metadata_failures: AtomicU64,
    /// PutMetricData calls by outcome (`Outcome::ALL` order); none of them is shown
    /// until publishing is on.
    cloudwatch: [AtomicU64; 4],
    cloudwatch_on: AtomicBool,
    /// The publisher runs with a client (false: it could not start, e.g. no region).
    cloudwatch_publishing: AtomicBool,
    /// ECS scale-in protection runs (`lifeguard_scale_in_protected` is shown).
    protection_on: AtomicBool,
    /// Connections lifeguard's own endpoint accepted: the drain's quiet rule tells them
    /// from the app's.
    endpoint_accepted: AtomicU64,
}

/// Everything a reader needs, read at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub phase: Phase,
    /// A SIGTERM has been read by supervision but its turn has not published the phase
    /// yet: it already counts ("/readyz answers draining at once").
    pub term_pending: bool,
    pub check: AppCheck,
    /// (signal, count) for every signal forwarded at least once, and the usual ones.
    pub forwarded: Vec<(Signal, u64)>,
    pub zombies_reaped: u64,
    pub metadata_failures: u64,
    /// (outcome, calls) for every outcome, when CloudWatch publishing is configured.
    pub cloudwatch: Option<Vec<(Outcome, u64)>>,
    /// Whether the publisher runs (configured, and started with a region).
    pub cloudwatch_publishing: bool,
    /// (helper, panics) for every helper thread that runs.
    pub helper_failures: Vec<(Helper, u64)>,
    /// Times supervision started the helper process again (it died, or hung).
    pub helper_restarts: u64,
    /// The last drain's length, from its SIGTERM to the stop signal (or the app's exit).
    pub drain_seconds: Option<f64>,
    /// Whether ECS keeps the task out of scale-in (None: `--scale-in-protection` off).
    pub scale_in_protected: Option<bool>,
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

impl Desk {
    /// `own_ports`: the endpoint's ports, whose connections are lifeguard's, not the app's;
    /// `stop`: the stop signal, whose arrival at PID 1 `/readyz` answers draining to.
    pub fn new(board: HelperBoard, own_ports: Vec<u16>, stop: Signal) -> Arc<Desk> {
        Arc::new(Desk {
            board,
            check: Mutex::new(AppCheck::Pending),
            sample: watch::Sender::new(Arc::new(Sample::default())),
            own_ports,
            supervisor: crate::kernel::SupervisorPending::open(stop),
            task_identity: std::sync::OnceLock::new(),
            counters: Counters {
                metadata_failures: AtomicU64::new(0),
                cloudwatch: std::array::from_fn(|_| AtomicU64::new(0)),
                cloudwatch_on: AtomicBool::new(false),
                cloudwatch_publishing: AtomicBool::new(false),
                protection_on: AtomicBool::new(false),
                endpoint_accepted: AtomicU64::new(0),
            },
        })
    }

    #[cfg(test)]
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_asked(Instant::now())
    }

    /// Whether the task is kept out of scale-in at `now`, where the protection runs:
    /// elsewhere (off ECS) it is no figure to show or publish, rather than a 0 forever.
    pub fn scale_in_protected(&self, now: Instant) -> Option<bool> {
        (self.counters.protection_on.load(Ordering::Relaxed))
            .then(|| self.board.scale_in_protected(now))
    }

    /// A snapshot for a question asked at `asked` (see `term_pending`).
    pub fn snapshot_asked(&self, asked: Instant) -> Snapshot {
        let phase = self.phase();
        // A sample that stopped coming (its thread gone) is no reading at all: gauges
        // frozen at their last value would steer autoscalers for good.
        let sample = self.sample.borrow().clone();
        let sample = match sample.taken {
            Some(at) if at.elapsed() > SAMPLE_STALE => Arc::new(Sample::default()),
            _ => sample,
        };
        Snapshot {
            phase,
            term_pending: self.term_pending(phase, asked),
            check: self.ready_check(),
            forwarded: forwarded(&self.board),
            zombies_reaped: self.board.zombies_reaped(),
            metadata_failures: self.counters.metadata_failures.load(Ordering::Relaxed),
            cloudwatch: self.counters.cloudwatch(),
            cloudwatch_publishing: self.counters.cloudwatch_publishing.load(Ordering::Relaxed),
            helper_failures: threads::failures(),
            helper_restarts: self.board.helper_restarts(),
            drain_seconds: self.board.drain_seconds(),
            scale_in_protected: self.scale_in_protected(asked),
            sample,
        }
    }

    /// What `/readyz` answers, without taking a whole snapshot (it is asked far more
    /// often than `/metrics`), for a probe whose request was read whole at `asked`.
    pub fn readiness(&self, asked: Instant) -> Verdict {
        let phase = self.phase();
        health::readiness(phase, &self.ready_check(), self.term_pending(phase, asked))
    }

    /// A SIGTERM supervision has read but not yet turned into a phase (only before the
    /// drain matters): supervision marks it the instant it reads it.
    ///
    /// Until then it waits in PID 1's pending set: the kernel's set is asked first,
    /// then the mark, so from the kill(2) on one of them is always true (supervision
    /// sets the mark as it takes the signal out of that set). A CI run caught a probe
    /// answered `ready` in the microseconds before PID 1 read its SIGTERM. The kernel's
    /// set is read at or after `asked`, so a probe sent after the kill(2) sees it.
    fn term_pending(&self, phase: Phase, asked: Instant) -> bool {
        matches!(phase, Phase::Starting | Phase::Running)
            && (self
                .supervisor
                .as_ref()
                .is_some_and(|pid1| pid1.term_pending(asked))
                || self.board.term_taken())
    }

    pub fn phase(&self) -> Phase {
        self.board.phase()
    }

    /// The app check's field. Supervision hears of its first pass (Starting → Running)
    /// and of every change between passing and failing (the ready port follows it).
    pub fn set_check(&self, verdict: AppCheck) {
        let passing = !matches!(verdict, AppCheck::Failing(_));
        let pending = verdict == AppCheck::Pending;
        *self
            .check
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = verdict;
        if !pending {
            self.board.set_check(passing);
        }
    }

    pub fn check(&self) -> AppCheck {
        self.check
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The app check's verdict as readiness counts it: a ready port that cannot listen
    /// (another socket took it) fails readiness of its own, whatever the app's check
    /// says, since a TCP probe of that port would reach somebody else.
    fn ready_check(&self) -> AppCheck {
        let check = self.check();
        match check {
            AppCheck::Failing(_) => check,
            _ if self.board.ready_port_failing() => AppCheck::Failing(
                "--ready-port cannot listen (taken by another socket? see lifeguard's log)".into(),
            ),
            _ => check,
        }
    }

    /// The sampler's field.
    pub fn set_sample(&self, sample: Sample) {
        self.sample.send_replace(Arc::new(sample));
    }

    /// Every new sample, for the CloudWatch publisher.
    pub fn watch_sample(&self) -> watch::Receiver<Arc<Sample>> {
        self.sample.subscribe()
    }

    /// The sampler's field: the traffic figures of its latest look at the port.
    pub fn set_traffic(&self, look: Look) {
        self.board.set_traffic(look);
    }

    /// The endpoint's ports.
    pub fn set_task_identity(&self, identity: Vec<(&'static str, String)>) {
        let _ = self.task_identity.set(identity);
    }

    /// The ECS task's identity, once read (none off ECS).
    pub fn task_identity(&self) -> &[(&'static str, String)] {
        self.task_identity.get().map_or(&[], Vec::as_slice)
    }

    pub fn own_ports(&self) -> &[u16] {
        &self.own_ports
    }

    /// The sampler's bell, for its runtime to wait on.
    pub fn sampler_bell(&self) -> io::Result<tokio::net::UnixDatagram> {
        listener(&self.board.sampler_bell)
    }
}

/// A bell's waiting side on a tokio runtime.
pub fn listener(bell: &Bell) -> io::Result<tokio::net::UnixDatagram> {
    tokio::net::UnixDatagram::from_std(bell.receiver()?)
}

/// Every signal forwarded at least once, and the usual ones always (at 0 until then):
/// a series that appears only after the first signal breaks `rate()` and `absent()` in
/// dashboards and alerts.
fn forwarded(board: &HelperBoard) -> Vec<(Signal, u64)> {
    const USUAL: [i32; 7] = [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGHUP,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGWINCH,
    ];
    board
        .forwarded()
        .filter(|(signal, count)| *count > 0 || USUAL.contains(&signal.0))
        .collect()
}

impl Counters {
    pub fn endpoint_accept(&self) {
        self.endpoint_accepted.fetch_add(1, Ordering::Relaxed);
    }

    pub fn endpoint_accepted(&self) -> u64 {
        self.endpoint_accepted.load(Ordering::Relaxed)
    }

    pub fn metadata_failed(&self) {
        self.metadata_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// CloudWatch publishing is configured: its counters are shown from now, zeros
    /// included (set before the publisher starts, so from the first scrape).
    pub fn cloudwatch_on(&self) {
        self.cloudwatch_on.store(true, Ordering::Relaxed);
    }

    pub fn protection_on(&self) {
        self.protection_on.store(true, Ordering::Relaxed);
    }

    /// Whether the publisher is running with a client.
    pub fn cloudwatch_publishing(&self, running: bool) {
        self.cloudwatch_publishing.store(running, Ordering::Relaxed);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::Board;
    use crate::signal_names;

    #[test]
    fn a_snapshot_carries_every_writers_field() {
        // Supervision's handle writes its fields; the desk reads them through the
        // helper's.
        let board = Board::new().unwrap();
        let desk = Desk::new(
            board.for_helper().unwrap(),
            Vec::new(),
            crate::signal_names::TERM,
        );
        board.set_phase(Phase::Running);
        desk.set_check(AppCheck::Passing);
        board.signal_forwarded(signal_names::TERM);
        board.signal_forwarded(signal_names::TERM);
        board.signal_forwarded(signal_names::HUP);
        board.zombie_reaped();
        let snap = desk.snapshot();
        assert_eq!(snap.phase, Phase::Running);
        assert!(snap.ready() && !snap.draining());
        let forwarded: Vec<_> = snap.forwarded.iter().filter(|(_, n)| *n > 0).collect();
        assert_eq!(
            forwarded,
            vec![&(signal_names::HUP, 1), &(signal_names::TERM, 2)]
        );
        // The usual signals are there from the start, at 0.
        let usr1 = snap.forwarded.iter().find(|(s, _)| s.0 == libc::SIGUSR1);
        assert_eq!(usr1, Some(&(Signal(libc::SIGUSR1), 0)));
        assert!(!snap.forwarded.iter().any(|(s, _)| s.0 == libc::SIGPWR));
        assert_eq!(snap.zombies_reaped, 1);
        // A SIGTERM read but not yet handled already reads as draining.
        board.set_term_taken();
        let snap = desk.snapshot();
        assert!(!snap.ready() && snap.draining());
        board.set_phase(Phase::Stopping);
        let snap = desk.snapshot();
        assert!(!snap.ready() && snap.draining());
        assert_eq!(snap.drain_seconds, None);
        board.set_drain_seconds(2.5);
        assert_eq!(desk.snapshot().drain_seconds, Some(2.5));
    }

    #[test]
    fn supervision_hears_of_each_change_of_verdict_and_of_nothing_else() {
        use nix::poll::{poll, PollFd, PollFlags};
        let board = Board::new().unwrap();
        let desk = Desk::new(
            board.for_helper().unwrap(),
            Vec::new(),
            crate::signal_names::TERM,
        );
        let rung = |bell: &Bell| {
            let mut fds = [PollFd::new(bell.fd(), PollFlags::POLLIN)];
            let rung = poll(&mut fds, 0u8).unwrap() == 1;
            bell.clear();
            rung
        };
        desk.set_check(AppCheck::Pending);
        assert!(!rung(&board.supervisor_bell), "no verdict: no news");
        desk.set_check(AppCheck::Passing);
        assert!(rung(&board.supervisor_bell) && board.check_passed());
        desk.set_check(AppCheck::Passing);
        assert!(!rung(&board.supervisor_bell));
        desk.set_check(AppCheck::Failing("no".into()));
        assert!(rung(&board.supervisor_bell) && board.check_failing());
        // Another reason, the same verdict.
        desk.set_check(AppCheck::Failing("still no".into()));
        assert!(!rung(&board.supervisor_bell));
        desk.set_check(AppCheck::Passing);
        assert!(rung(&board.supervisor_bell) && !board.check_failing());
    }

    #[test]
    fn a_sample_that_stopped_coming_is_left_out() {
        let desk = Desk::new(
            Board::new().unwrap().for_helper().unwrap(),
            Vec::new(),
            crate::signal_names::TERM,
        );
        let sample = |age: u64| Sample {
            taken: Instant::now().checked_sub(std::time::Duration::from_secs(age)),
            requests_in_flight: Some(7),
            ..Default::default()
        };
        desk.set_sample(sample(1));
        assert_eq!(desk.snapshot().sample.requests_in_flight, Some(7));
        desk.set_sample(sample(60));
        assert_eq!(desk.snapshot().sample.requests_in_flight, None);
    }
}
