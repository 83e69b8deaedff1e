//! The seam between PID 1 and the helper process, and the only thing they share: a
//! page of memory mapped before the fork (kernel::shared_words), laid out as words of
//! atomics, and three bells. Each side owns the fields it writes — supervision the
//! phase, the SIGTERM mark, the signal and reaping counters, the drain's length and the
//! helper restarts; the helper the app check's first pass, the traffic record and its
//! heartbeat — and neither can hold anything against the other: no pointer, no lock, a
//! record written under a sequence number that a reader of a torn write simply asks
//! again (a helper killed mid-write leaves the number odd, and supervision keeps the
//! look it had). The records are defined here, in the vocabulary both sides speak
//! (the phase, a look at the traffic); neither side's own types are.
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::kernel;
use crate::signal_names::{self, Signal};

/// What observers (the HTTP endpoint, logs) see of the lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Starting,
    Running,
    Draining,
    Stopping,
    Exited,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Starting,
        Phase::Running,
        Phase::Draining,
        Phase::Stopping,
        Phase::Exited,
    ];
}

/// The sampler's latest traffic figures for the `--inflight-port`, as the hold reads
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Look {
    /// When the sample was taken.
    pub taken: Instant,
    /// Requests in flight (accept queue plus outstanding requests); `None` when the
    /// sample failed, which counts as quiet: a broken gauge never holds a stop.
    pub in_flight: Option<u64>,
    /// The latest sample that saw traffic: a request in flight, a new connection, or
    /// bytes received on one. `None`: none seen since lifeguard started.
    pub last_busy: Option<Instant>,
    /// What that sample saw, for the log (the rule does not read it).
    pub busy_by: Busy,
    /// Whether the network namespace's passive opens were held against the port (no
    /// other listener in the namespace to have taken them), for the log.
    pub namespace_counted: bool,
}

/// What made a look at the port busy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Busy {
    #[default]
    Nothing,
    /// A request in flight (accept queue or outstanding).
    InFlight,
    /// A connection the previous look did not have.
    NewConnection,
    /// Bytes received on a connection the previous look had.
    BytesIn,
    /// The network namespace accepted connections the port's new ones and lifeguard's
    /// own endpoint do not account for: one that opened and closed between two looks,
    /// or one to another listener of the namespace (a sidecar's).
    NamespaceOpens,
}

impl Busy {
    pub fn describe(self) -> &'static str {
        match self {
            Busy::Nothing => "nothing",
            Busy::InFlight => "a request in flight",
            Busy::NewConnection => "a new connection",
            Busy::BytesIn => "bytes received on a connection",
            Busy::NamespaceOpens => {
                "a connection accepted elsewhere in the network namespace, or opened and closed between two looks"
            }
        }
    }
}

impl Phase {
    fn from_word(n: u64) -> Phase {
        Phase::ALL
            .into_iter()
            .find(|p| *p as u64 == n)
            .unwrap_or(Phase::Exited)
    }
}

impl Busy {
    const ALL: [Busy; 5] = [
        Busy::Nothing,
        Busy::InFlight,
        Busy::NewConnection,
        Busy::BytesIn,
        Busy::NamespaceOpens,
    ];
}

// Where each field lives on the page, one 64-bit word each.
const PHASE: usize = 0;
const TERM_TAKEN: usize = 1;
const CHECK_PASSED: usize = 2;
const ZOMBIES_REAPED: usize = 3;
/// f64 bits; NaN: no drain yet.
const DRAIN_SECONDS: usize = 4;
const HEARTBEAT: usize = 5;
const HELPER_RESTARTS: usize = 6;
/// Supervision asks the helper to publish its last figures and leave.
const LEAVE: usize = 7;
/// The traffic record: a sequence number, odd while a write is under way, then the
/// fields. Times are nanoseconds from the Board's epoch (taken before the fork, so the
/// same instant in both processes: CLOCK_MONOTONIC is one clock for the machine);
/// optional fields are stored plus one, 0 meaning none.
const TRAFFIC_SEQ: usize = 8;
const TRAFFIC_TAKEN: usize = 9;
const TRAFFIC_IN_FLIGHT: usize = 10;
const TRAFFIC_LAST_BUSY: usize = 11;
const TRAFFIC_BUSY_BY: usize = 12;
/// One counter per signal number.
const FORWARDED: usize = 16;
const WORDS: usize = FORWARDED + signal_names::MAX as usize + 1;

pub struct Board {
    words: &'static [AtomicU64],
    epoch: Instant,
    /// Rung by the helper when supervision must look at the board (the app check's
    /// first pass).
    pub supervisor_bell: Bell,
    /// Rung by supervision when the phase changes: a drain wants figures every 100 ms.
    pub sampler_bell: Bell,
    /// Rung by supervision when the helper must leave (`LEAVE`).
    pub helper_bell: Bell,
}

/// A wake-up call between threads or processes that never blocks the caller: a
/// datagram socket pair whose one pending datagram is the ring (more are dropped while
/// one waits).
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

    /// A copy of the side to wait on, for a listener of its own (a tokio runtime's).
    pub fn receiver(&self) -> io::Result<UnixDatagram> {
        self.rx.try_clone()
    }
}

impl Board {
    /// Another handle on the same page and bells (the helper's, in its process).
    pub fn duplicate(&self) -> io::Result<Board> {
        let copy = |bell: &Bell| {
            Ok::<_, io::Error>(Bell {
                tx: bell.tx.try_clone()?,
                rx: bell.rx.try_clone()?,
            })
        };
        Ok(Board {
            words: self.words,
            epoch: self.epoch,
            supervisor_bell: copy(&self.supervisor_bell)?,
            sampler_bell: copy(&self.sampler_bell)?,
            helper_bell: copy(&self.helper_bell)?,
        })
    }

    /// Maps the page; call it before the helper is forked.
    pub fn new() -> io::Result<Board> {
        let board = Board {
            words: kernel::shared_words(WORDS)?,
            // Some way back, so an instant taken a little before the Board (a last
            // busy look carried over) still has a place on its clock.
            epoch: (1..=3600)
                .rev()
                .find_map(|s| Instant::now().checked_sub(Duration::from_secs(s)))
                .unwrap_or_else(Instant::now),
            supervisor_bell: Bell::new()?,
            sampler_bell: Bell::new()?,
            helper_bell: Bell::new()?,
        };
        board.words[PHASE].store(Phase::Starting as u64, Ordering::Relaxed);
        board.words[DRAIN_SECONDS].store(f64::NAN.to_bits(), Ordering::Relaxed);
        Ok(board)
    }

    fn word(&self, at: usize) -> u64 {
        self.words[at].load(Ordering::Acquire)
    }

    fn since_epoch(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    fn at(&self, nanos: u64) -> Instant {
        self.epoch + Duration::from_nanos(nanos)
    }

    // Supervision's fields.

    /// The sampler hears of the change at once (a drain wants its figures every 100 ms
    /// from now).
    pub fn set_phase(&self, phase: Phase) {
        self.words[PHASE].store(phase as u64, Ordering::Release);
        self.sampler_bell.ring();
    }

    /// A SIGTERM has just been read, before the turn that handles it publishes the
    /// phase: `/readyz` says draining from here on.
    pub fn set_term_taken(&self) {
        self.words[TERM_TAKEN].store(1, Ordering::SeqCst);
    }

    pub fn signal_forwarded(&self, signal: Signal) {
        if let Some(slot) = self.words.get(FORWARDED + signal.0 as usize) {
            if signal.0 > 0 {
                slot.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn zombie_reaped(&self) {
        self.words[ZOMBIES_REAPED].fetch_add(1, Ordering::Relaxed);
    }

    /// The drain that just ended took `seconds`.
    pub fn set_drain_seconds(&self, seconds: f64) {
        self.words[DRAIN_SECONDS].store(seconds.to_bits(), Ordering::Relaxed);
    }

    pub fn helper_restarted(&self) {
        self.words[HELPER_RESTARTS].fetch_add(1, Ordering::Relaxed);
    }

    /// Asks the helper to publish its last figures and leave.
    pub fn ask_helper_to_leave(&self) {
        self.words[LEAVE].store(1, Ordering::Release);
        self.helper_bell.ring();
    }

    /// Whether the app check has passed once.
    pub fn check_passed(&self) -> bool {
        self.word(CHECK_PASSED) != 0
    }

    /// When the helper last beat (None: never).
    pub fn last_beat(&self) -> Option<Instant> {
        self.word(HEARTBEAT).checked_sub(1).map(|n| self.at(n))
    }

    /// The latest traffic figures, for the hold; `Err` when the record is being
    /// written this instant, or was left half-written by a helper that died (the
    /// caller keeps the look it had: supervision never waits).
    pub fn traffic(&self) -> Result<Option<Look>, ()> {
        let before = self.words[TRAFFIC_SEQ].load(Ordering::Acquire);
        if before % 2 == 1 {
            return Err(());
        }
        let taken = self.words[TRAFFIC_TAKEN].load(Ordering::Relaxed);
        let in_flight = self.words[TRAFFIC_IN_FLIGHT].load(Ordering::Relaxed);
        let last_busy = self.words[TRAFFIC_LAST_BUSY].load(Ordering::Relaxed);
        let busy_word = self.words[TRAFFIC_BUSY_BY].load(Ordering::Relaxed);
        let (busy_by, namespace_counted) = (busy_word & 0xff, busy_word & 0x100 != 0);
        fence(Ordering::Acquire);
        if self.words[TRAFFIC_SEQ].load(Ordering::Relaxed) != before {
            return Err(());
        }
        if before == 0 {
            return Ok(None); // never written
        }
        Ok(Some(Look {
            taken: self.at(taken),
            in_flight: in_flight.checked_sub(1),
            last_busy: last_busy.checked_sub(1).map(|n| self.at(n)),
            busy_by: Busy::ALL.get(busy_by as usize).copied().unwrap_or_default(),
            namespace_counted,
        }))
    }

    // The helper's fields.

    pub fn phase(&self) -> Phase {
        Phase::from_word(self.word(PHASE))
    }

    /// Whether supervision has read a SIGTERM (see `set_term_taken`).
    pub fn term_taken(&self) -> bool {
        self.words[TERM_TAKEN].load(Ordering::SeqCst) != 0
    }

    /// (signal, count) for every signal number.
    pub fn forwarded(&self) -> impl Iterator<Item = (Signal, u64)> + '_ {
        (1..=signal_names::MAX).map(|n| (Signal(n), self.word(FORWARDED + n as usize)))
    }

    pub fn zombies_reaped(&self) -> u64 {
        self.word(ZOMBIES_REAPED)
    }

    /// The last drain's length, from its SIGTERM to the stop signal (or the app's exit).
    pub fn drain_seconds(&self) -> Option<f64> {
        let seconds = f64::from_bits(self.word(DRAIN_SECONDS));
        (!seconds.is_nan()).then_some(seconds)
    }

    pub fn helper_restarts(&self) -> u64 {
        self.word(HELPER_RESTARTS)
    }

    /// Whether supervision has asked the helper to leave.
    pub fn leave_asked(&self) -> bool {
        self.word(LEAVE) != 0
    }

    /// The app check passed; the first pass wakes supervision (Starting → Running).
    pub fn set_check_passed(&self) {
        if self.words[CHECK_PASSED].swap(1, Ordering::AcqRel) == 0 {
            self.supervisor_bell.ring();
        }
    }

    /// The helper is well: its threads turn.
    pub fn beat(&self) {
        let now = self.since_epoch(Instant::now()) + 1;
        self.words[HEARTBEAT].store(now, Ordering::Release);
    }

    /// The traffic figures of the sampler's latest look (one writer: the sampler).
    pub fn set_traffic(&self, look: Look) {
        let seq = &self.words[TRAFFIC_SEQ];
        // Even again if a writer died mid-write (the previous helper).
        let even = (seq.load(Ordering::Relaxed) + 1) & !1;
        seq.store(even + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let store = |at: usize, value: u64| self.words[at].store(value, Ordering::Relaxed);
        store(TRAFFIC_TAKEN, self.since_epoch(look.taken));
        store(
            TRAFFIC_IN_FLIGHT,
            look.in_flight.map_or(0, |n| n.saturating_add(1)),
        );
        store(
            TRAFFIC_LAST_BUSY,
            look.last_busy.map_or(0, |at| self.since_epoch(at) + 1),
        );
        store(
            TRAFFIC_BUSY_BY,
            look.busy_by as u64 | (u64::from(look.namespace_counted) << 8),
        );
        seq.store(even + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sides_fields_read_back_on_the_other() {
        let board = Board::new().unwrap();
        assert_eq!(board.phase(), Phase::Starting);
        board.set_phase(Phase::Running);
        assert_eq!(board.phase(), Phase::Running);
        board.signal_forwarded(signal_names::TERM);
        board.signal_forwarded(signal_names::TERM);
        board.signal_forwarded(signal_names::HUP);
        let forwarded: Vec<_> = board.forwarded().filter(|(_, n)| *n > 0).collect();
        assert_eq!(
            forwarded,
            vec![(signal_names::HUP, 1), (signal_names::TERM, 2)]
        );
        board.zombie_reaped();
        assert_eq!(board.zombies_reaped(), 1);
        assert_eq!(board.drain_seconds(), None);
        board.set_drain_seconds(2.5);
        assert_eq!(board.drain_seconds(), Some(2.5));
        assert!(!board.term_taken());
        board.set_term_taken();
        assert!(board.term_taken());
        assert!(!board.leave_asked());
        board.ask_helper_to_leave();
        assert!(board.leave_asked());
    }

    #[test]
    fn the_traffic_record_round_trips_and_a_torn_write_is_refused() {
        let board = Board::new().unwrap();
        assert_eq!(board.traffic(), Ok(None));
        let now = Instant::now();
        let look = Look {
            taken: now,
            in_flight: Some(0),
            last_busy: Some(now - Duration::from_millis(300)),
            busy_by: Busy::NewConnection,
            namespace_counted: true,
        };
        board.set_traffic(look);
        let back = board.traffic().unwrap().unwrap();
        assert_eq!(back.in_flight, Some(0));
        assert_eq!(back.busy_by, Busy::NewConnection);
        let close =
            |a: Instant, b: Instant| a.max(b).duration_since(a.min(b)) < Duration::from_micros(1);
        assert!(close(back.taken, now));
        assert!(close(
            back.last_busy.unwrap(),
            now - Duration::from_millis(300)
        ));
        // A writer that died mid-write: the sequence stays odd, the reader is refused
        // (and keeps its last look); the next writer makes it whole again.
        board.words[TRAFFIC_SEQ].fetch_add(1, Ordering::Relaxed);
        assert_eq!(board.traffic(), Err(()));
        board.set_traffic(Look {
            in_flight: None,
            last_busy: None,
            ..look
        });
        let back = board.traffic().unwrap().unwrap();
        assert_eq!((back.in_flight, back.last_busy), (None, None));
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
        board.set_check_passed();
        assert!(rung(&board.supervisor_bell) && board.check_passed());
        board.supervisor_bell.clear();
        board.set_check_passed();
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
}
