//! Where supervision and the helpers meet, without ever waiting for each other: each
//! writer owns its fields (the supervisor the phase and counters, the app check its
//! verdict, the sampler its sample and traffic figures), readers take a `Snapshot`.
//! What the supervision thread touches here is atomics, a `try_lock` that never
//! waits, and two bells (a datagram socket pair each): helpers ring the supervisor's
//! when it must look (the app check passed), the supervisor rings the sampler's when
//! the phase changes (a drain wants figures every 100 ms). The shapes it holds are their
//! writers': the sampler's `Sample` (metrics/sample.rs) and the publisher's `Outcome`
//! (cloudwatch/outcome.rs).
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::cloudwatch::outcome::Outcome;
use crate::health::{self, AppCheck, Verdict};
use crate::helpers::{self, Helper};
use crate::kernel;
use crate::lifecycle::{Look, Phase};
use crate::metrics::sample::Sample;
use crate::signal_names::{self, Signal};

/// Samples come every second; one older than this is left out of every snapshot.
const SAMPLE_STALE: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Board {
    phase: AtomicU8,
    /// The app check's verdict with its reason, for `/readyz` (helpers only).
    check: Mutex<AppCheck>,
    /// The app check has passed once: what supervision needs of it.
    check_passed: AtomicBool,
    sample: watch::Sender<Arc<Sample>>,
    /// The sampler's latest traffic figures, for the drain's hold.
    traffic: Mutex<Option<Look>>,
    /// Seconds from the last drain's SIGTERM to its end (f64 bits; NaN: none yet).
    drain_seconds: AtomicU64,
    /// Set by supervision just before it takes a pending SIGTERM out of the kernel's
    /// queue, so that `/readyz` says draining from the instant the signal arrives: once
    /// taken it is no longer pending, and the phase is published only after the turn
    /// that handles it (a CI run caught the gap, with the main thread preempted there).
    term_taken: AtomicBool,
    pub counters: Counters,
    /// Rung by helpers when supervision must look at the board.
    pub supervisor_bell: Bell,
    /// Rung by supervision when the phase changes.
    pub sampler_bell: Bell,
}

/// A wake-up call between threads that never blocks the caller: a datagram socket
/// pair whose one pending datagram is the ring (more are dropped while one waits).
pub struct Bell {
    tx: UnixDatagram,
    rx: UnixDatagram,
}

impl Bell {
    fn new() -> io::Result<Bell> {
        let (tx, rx) = UnixDatagram::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        Ok(Bell { tx, rx })
    }

    /// Never waits: a full queue means a ring is already pending.
    pub fn ring(&self) {
        let _ = self.tx.send(&[1]);
    }

    /// Takes every pending ring.
    pub fn clear(&self) {
        let mut buf = [0u8; 8];
        while self.rx.recv(&mut buf).is_ok() {}
    }

    /// The side to wait on (poll).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }

    /// A copy of the side to wait on, for a tokio runtime (one per helper run).
    pub fn listener(&self) -> io::Result<tokio::net::UnixDatagram> {
        tokio::net::UnixDatagram::from_std(self.rx.try_clone()?)
    }
}

/// Counters, lock-free so that counting never holds up supervision.
pub struct Counters {
    forwarded: [AtomicU64; signal_names::MAX as usize + 1],
    zombies_reaped: AtomicU64,
    /// Task metadata fetches that failed (ECS only: the sampler fell back to the cgroup).
    metadata_failures: AtomicU64,
    /// PutMetricData calls by outcome (`Outcome::ALL` order); None of them
    /// is shown until publishing is on.
    cloudwatch: [AtomicU64; 4],
    cloudwatch_on: AtomicBool,
    /// The publisher runs with a client (false: it could not start, e.g. no region).
    cloudwatch_publishing: AtomicBool,
    /// Connections lifeguard's own endpoint accepted: the drain's quiet rule tells them
    /// from the app's.
    endpoint_accepted: AtomicU64,
}

/// Everything a reader needs, read at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub phase: Phase,
    /// A SIGTERM has arrived but the loop has not read it yet: it already counts
    /// ("/readyz answers draining at once").
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
    /// (helper, panics) for every helper that runs.
    pub helper_failures: Vec<(Helper, u64)>,
    /// The last drain's length, from its SIGTERM to the stop signal (or the app's exit).
    pub drain_seconds: Option<f64>,
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
    pub fn new() -> io::Result<Arc<Board>> {
        Ok(Arc::new(Board {
            phase: AtomicU8::new(Phase::Starting as u8),
            check: Mutex::new(AppCheck::Pending),
            check_passed: AtomicBool::new(false),
            sample: watch::Sender::new(Arc::new(Sample::default())),
            traffic: Mutex::new(None),
            drain_seconds: AtomicU64::new(f64::NAN.to_bits()),
            term_taken: AtomicBool::new(false),
            counters: Counters {
                forwarded: std::array::from_fn(|_| AtomicU64::new(0)),
                zombies_reaped: AtomicU64::new(0),
                metadata_failures: AtomicU64::new(0),
                cloudwatch: std::array::from_fn(|_| AtomicU64::new(0)),
                cloudwatch_on: AtomicBool::new(false),
                cloudwatch_publishing: AtomicBool::new(false),
                endpoint_accepted: AtomicU64::new(0),
            },
            supervisor_bell: Bell::new()?,
            sampler_bell: Bell::new()?,
        }))
    }

    pub fn snapshot(&self) -> Snapshot {
        let phase = self.phase();
        // A sample that stopped coming (its thread gone) is no reading at all: gauges
        // frozen at their last value would steer autoscalers for good.
        let sample = self.sample.borrow().clone();
        let sample = match sample.taken {
            Some(at) if at.elapsed() > SAMPLE_STALE => Arc::new(Sample::default()),
            _ => sample,
        };
        let drain = f64::from_bits(self.drain_seconds.load(Ordering::Relaxed));
        Snapshot {
            phase,
            term_pending: self.term_pending(phase),
            check: self.check(),
            forwarded: self.counters.forwarded(),
            zombies_reaped: self.counters.zombies_reaped.load(Ordering::Relaxed),
            metadata_failures: self.counters.metadata_failures.load(Ordering::Relaxed),
            cloudwatch: self.counters.cloudwatch(),
            cloudwatch_publishing: self.counters.cloudwatch_publishing.load(Ordering::Relaxed),
            helper_failures: helpers::failures(),
            drain_seconds: (!drain.is_nan()).then_some(drain),
            sample,
        }
    }

    /// What `/readyz` answers, without taking a whole snapshot (it is asked far more
    /// often than `/metrics`).
    pub fn readiness(&self) -> Verdict {
        let phase = self.phase();
        health::readiness(phase, &self.check(), self.term_pending(phase))
    }

    /// A SIGTERM has arrived that the loop has not handled yet (only before the drain
    /// matters). The kernel's pending set is read before the flag: supervision sets the
    /// flag before it takes the signal, so a SIGTERM no longer pending has set it.
    fn term_pending(&self, phase: Phase) -> bool {
        matches!(phase, Phase::Starting | Phase::Running)
            && (kernel::signal_pending(signal_names::TERM)
                || self.term_taken.load(Ordering::SeqCst))
    }

    /// The supervisor's field: it is about to take the pending signals, a SIGTERM among
    /// them (see `term_taken`).
    pub fn set_term_taken(&self) {
        self.term_taken.store(true, Ordering::SeqCst);
    }

    pub fn phase(&self) -> Phase {
        let n = self.phase.load(Ordering::Acquire);
        Phase::ALL
            .into_iter()
            .find(|p| *p as u8 == n)
            .unwrap_or(Phase::Exited)
    }

    /// The supervisor's field. The sampler hears of the change at once (a drain wants
    /// its figures every 100 ms from now).
    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
        self.sampler_bell.ring();
    }

    /// The supervisor's field: the drain that just ended took `seconds`.
    pub fn set_drain_seconds(&self, seconds: f64) {
        self.drain_seconds
            .store(seconds.to_bits(), Ordering::Relaxed);
    }

    /// The app check's field. Its first pass wakes supervision (Starting → Running).
    pub fn set_check(&self, verdict: AppCheck) {
        let passing = verdict == AppCheck::Passing;
        *self
            .check
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = verdict;
        if passing && !self.check_passed.swap(true, Ordering::AcqRel) {
            self.supervisor_bell.ring();
        }
    }

    pub fn check(&self) -> AppCheck {
        self.check
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether the app check has passed once (supervision's read: an atomic).
    pub fn check_passed(&self) -> bool {
        self.check_passed.load(Ordering::Acquire)
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
        *self
            .traffic
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(look);
    }

    /// The latest traffic figures, for the hold; `Err` when the sampler is writing
    /// them this instant (supervision never waits: it asks again at its next look).
    pub fn traffic(&self) -> Result<Option<Look>, ()> {
        match self.traffic.try_lock() {
            Ok(look) => Ok(*look),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Ok(*poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => Err(()),
        }
    }
}

impl Counters {
    pub fn signal_forwarded(&self, signal: Signal) {
        if let Some(slot) = self.forwarded.get(signal.0 as usize) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn endpoint_accept(&self) {
        self.endpoint_accepted.fetch_add(1, Ordering::Relaxed);
    }

    pub fn endpoint_accepted(&self) -> u64 {
        self.endpoint_accepted.load(Ordering::Relaxed)
    }

    pub fn zombie_reaped(&self) {
        self.zombies_reaped.fetch_add(1, Ordering::Relaxed);
    }

    pub fn metadata_failed(&self) {
        self.metadata_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// CloudWatch publishing is configured: its counters are shown from now, zeros
    /// included (set before the app starts, so from the first scrape).
    pub fn cloudwatch_on(&self) {
        self.cloudwatch_on.store(true, Ordering::Relaxed);
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

    /// Every signal forwarded at least once, and the usual ones always (at 0 until
    /// then): a series that appears only after the first signal breaks `rate()` and
    /// `absent()` in dashboards and alerts.
    fn forwarded(&self) -> Vec<(Signal, u64)> {
        const USUAL: [i32; 7] = [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGWINCH,
        ];
        (1..=signal_names::MAX)
            .map(|n| {
                (
                    Signal(n),
                    self.forwarded[n as usize].load(Ordering::Relaxed),
                )
            })
            .filter(|(signal, count)| *count > 0 || USUAL.contains(&signal.0))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_snapshot_carries_every_writers_field() {
        let board = Board::new().unwrap();
        board.set_phase(Phase::Running);
        board.set_check(AppCheck::Passing);
        board.counters.signal_forwarded(signal_names::TERM);
        board.counters.signal_forwarded(signal_names::TERM);
        board.counters.signal_forwarded(signal_names::HUP);
        board.counters.zombie_reaped();
        let snap = board.snapshot();
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
        board.set_phase(Phase::Stopping);
        let snap = board.snapshot();
        assert!(!snap.ready() && snap.draining());
        assert_eq!(snap.drain_seconds, None);
        board.set_drain_seconds(2.5);
        assert_eq!(board.snapshot().drain_seconds, Some(2.5));
    }

    #[test]
    fn bells_ring_once_per_wait_and_the_check_rings_on_its_first_pass() {
        use nix::poll::{poll, PollFd, PollFlags};
        let board = Board::new().unwrap();
        let rung = |bell: &Bell| {
            let mut fds = [PollFd::new(bell.fd(), PollFlags::POLLIN)];
            poll(&mut fds, 0u8).unwrap() == 1
        };
        assert!(!rung(&board.supervisor_bell));
        board.set_check(AppCheck::Failing("no".into()));
        assert!(
            !rung(&board.supervisor_bell),
            "a failure is no news to supervision"
        );
        board.set_check(AppCheck::Passing);
        assert!(rung(&board.supervisor_bell) && board.check_passed());
        board.supervisor_bell.clear();
        assert!(!rung(&board.supervisor_bell));
        board.set_check(AppCheck::Passing);
        assert!(!rung(&board.supervisor_bell), "only the first pass rings");
        // Many rings, one wake-up, never a blocked caller.
        for _ in 0..100_000 {
            board.set_phase(Phase::Draining);
        }
        assert!(rung(&board.sampler_bell));
        board.sampler_bell.clear();
        assert!(!rung(&board.sampler_bell));
        assert_eq!(board.phase(), Phase::Draining);
    }

    #[test]
    fn a_sample_that_stopped_coming_is_left_out() {
        let board = Board::new().unwrap();
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
