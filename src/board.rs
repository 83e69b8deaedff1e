//! The seam between PID 1 and the helper process, and the only thing they share: a
//! page of memory mapped before the fork (kernel::shared_words), laid out as words of
//! atomics, and three bells. Each side owns the fields it writes — supervision the
//! phase, the SIGTERM mark, the signal and reaping counters, the drain's length, the
//! helper restarts and whether the ready port listens; the helper the app check's
//! verdict, the traffic record, its heartbeat and its own verdict that it hangs — and neither can hold anything against the other: no pointer, no lock, a
//! record written under a sequence number that a reader of a torn write simply asks
//! again (a helper killed mid-write leaves the number odd, and supervision keeps the
//! look it had). Each side holds a handle of its own — `Board`, supervision's, and
//! `HelperBoard`, the helper process's — with the writes of its own fields only, so the
//! ownership is the types'. The records are defined here, in the vocabulary both sides speak
//! (the phase, a look at the traffic); neither side's own types are.
#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::kernel;
use crate::signal_names::{self, Signal};
use nix::sys::socket::MsgFlags;

fn send(fd: BorrowedFd, bytes: &[u8], flags: MsgFlags) -> nix::Result<usize> {
    nix::sys::socket::send(fd.as_raw_fd(), bytes, flags)
}

fn recv(fd: BorrowedFd, buf: &mut [u8], flags: MsgFlags) -> nix::Result<usize> {
    nix::sys::socket::recv(fd.as_raw_fd(), buf, flags)
}

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
    /// sample failed: a hold that cannot see holds on (late is not quiet).
    pub in_flight: Option<u64>,
    /// The latest sample that saw traffic: a request in flight, a new connection, or
    /// bytes received on one. `None`: none seen since lifeguard started.
    pub last_busy: Option<Instant>,
    /// What that sample saw, for the log (the rule does not read it).
    pub busy_by: Busy,
    /// Whether anything has ever been seen listening on the port since lifeguard
    /// started (the Board keeps it across helper restarts; a record's writer need not
    /// set it). Never: the port may be the wrong one, and the hold cannot tell the app
    /// is idle.
    pub port_seen: bool,
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
    /// The sampler started again during the drain (its helper process died): what came
    /// since its predecessor's last look is unknown.
    SamplerRestarted,
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
            Busy::SamplerRestarted => {
                "the helper process started again during the drain: a whole --drain-quiet is looked at afresh"
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
    const ALL: [Busy; 6] = [
        Busy::Nothing,
        Busy::InFlight,
        Busy::NewConnection,
        Busy::BytesIn,
        Busy::NamespaceOpens,
        Busy::SamplerRestarted,
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
/// The app check's latest verdict fails (1) or not (0: passing, or none yet).
const CHECK_FAILING: usize = 13;
/// The ready port listens (1), does not (0), or cannot (2: its listen failed, the port
/// taken by another socket; supervision tries again).
const READY_PORT_OPEN: usize = 14;
/// The sampler has seen a listener on `--inflight-port` (once set, for good).
const PORT_SEEN: usize = 15;
/// ECS scale-in protection: when the protection the agent last confirmed lapses, as
/// nanoseconds from the epoch plus one (0: none). Written by the helper, read by
/// supervision for the stop line; kept across helper restarts, so a new helper knows
/// what its predecessor set.
const PROTECTED_UNTIL: usize = 16;
/// The helper's own verdict that one of its threads hangs: the pid of the helper
/// process that said so (0: none says it). A pid, not a flag, so that the verdict of a
/// helper that was replaced never counts against the next one.
const HELPER_HUNG: usize = 17;
/// One counter per signal number.
const FORWARDED: usize = 18;
const WORDS: usize = FORWARDED + signal_names::MAX as usize + 1;

/// What either side may read of the page. Each side writes through a handle of its own
/// (`Board`, supervision's; `HelperBoard`, the helper process's), which has the writes
/// of the fields that side owns and no others: the ownership is the types'.
#[derive(Clone, Copy)]
pub struct Page {
    words: &'static [AtomicU64],
    epoch: Instant,
}

/// Supervision's handle: the page, the bell it waits on, and the bells it rings.
pub struct Board {
    page: Page,
    /// Rung by the helper when supervision must look at the board (a change of the app
    /// check's verdict).
    pub supervisor_bell: Bell,
    /// Rung on every phase change: a drain wants figures every 100 ms.
    sampler_bell: Bell,
    /// Rung when the helper must leave (`LEAVE`).
    helper_bell: Bell,
}

/// The helper process's handle: the page, the bells its threads wait on, and the one it
/// rings.
pub struct HelperBoard {
    page: Page,
    supervisor_bell: Bell,
    /// The sampler waits on it: the phase changed.
    pub sampler_bell: Bell,
    /// The helper's main thread waits on it: asked to leave.
    pub helper_bell: Bell,
}

impl std::ops::Deref for Board {
    type Target = Page;
    fn deref(&self) -> &Page {
        &self.page
    }
}

impl std::ops::Deref for HelperBoard {
    type Target = Page;
    fn deref(&self) -> &Page {
        &self.page
    }
}

/// A wake-up call between threads or processes that never blocks the caller: a
/// datagram socket pair, each pending datagram a ring.
///
/// Every send and receive says MSG_DONTWAIT itself rather than relying on O_NONBLOCK:
/// the helper process shares these sockets' open file descriptions with PID 1 (a
/// fork's copies, and `dup`s), so a file status flag that the helper or a library of
/// its changes would change for PID 1 too, and a bell read could block supervision.
pub struct Bell {
    tx: UnixDatagram,
    rx: UnixDatagram,
}

/// Rings one `clear` takes at most. A socket pair does not hold its queue to one ring:
/// unix(7) datagram sockets let a sender queue up to `net.unix.max_dgram_qlen` (512)
/// datagrams, and the kernel skips even that check when the peer is connected back to
/// the sender, as in a pair, so a burst of rings can queue hundreds. What is left rings
/// again at once: the next wait takes the next share.
const CLEAR_AT_MOST: usize = 16;

impl Bell {
    fn new() -> io::Result<Bell> {
        // Non-blocking for the helper's runtime, which waits on its bells through epoll;
        // supervision does not rely on it (above).
        let (tx, rx) = kernel::datagram_pair()?;
        Ok(Bell { tx, rx })
    }

    /// Never waits: with the queue full, a ring is already pending.
    pub fn ring(&self) {
        let _ = send(self.tx.as_fd(), &[1], MsgFlags::MSG_DONTWAIT);
    }

    /// Takes the pending rings, at most `CLEAR_AT_MOST`, without waiting.
    pub fn clear(&self) {
        let mut buf = [0u8; 8];
        for _ in 0..CLEAR_AT_MOST {
            if recv(self.rx.as_fd(), &mut buf, MsgFlags::MSG_DONTWAIT).is_err() {
                break;
            }
        }
    }

    /// The side to wait on (poll).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }

    /// Another handle on both ends (the other side's).
    fn copy(&self) -> io::Result<Bell> {
        Ok(Bell {
            tx: self.tx.try_clone()?,
            rx: self.rx.try_clone()?,
        })
    }

    /// A copy of the side to wait on, for a listener of its own (a tokio runtime's).
    pub fn receiver(&self) -> io::Result<UnixDatagram> {
        self.rx.try_clone()
    }
}

impl Page {
    fn word(&self, at: usize) -> u64 {
        self.words[at].load(Ordering::Acquire)
    }

    fn since_epoch(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    fn at(&self, nanos: u64) -> Instant {
        self.epoch + Duration::from_nanos(nanos)
    }

    pub fn phase(&self) -> Phase {
        Phase::from_word(self.word(PHASE))
    }

    /// Whether supervision has read a SIGTERM (see `Board::set_term_taken`).
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

    /// Whether supervision keeps the ready port listening.
    pub fn ready_port_open(&self) -> bool {
        self.word(READY_PORT_OPEN) == 1
    }

    /// Whether the ready port should listen and cannot (its listen failed): not ready.
    pub fn ready_port_failing(&self) -> bool {
        self.word(READY_PORT_OPEN) == 2
    }

    /// Until when ECS holds the task out of scale-in, as far as the helper knows (the
    /// agent confirmed it; counted from the call's start, so ECS's own expiry is no
    /// earlier). None: not protected, or never asked.
    pub fn protected_until(&self) -> Option<Instant> {
        Some(self.at(self.word(PROTECTED_UNTIL).checked_sub(1)?))
    }

    /// Whether ECS holds the task out of scale-in at `now`.
    pub fn scale_in_protected(&self, now: Instant) -> bool {
        self.protected_until().is_some_and(|until| until > now)
    }

    /// Whether the app check has passed once.
    pub fn check_passed(&self) -> bool {
        self.word(CHECK_PASSED) != 0
    }

    /// Whether the app check's latest verdict fails.
    pub fn check_failing(&self) -> bool {
        self.word(CHECK_FAILING) != 0
    }

    /// Whether helper process `pid` has said that one of its threads hangs (it then
    /// stops its heartbeat on purpose): a silence supervision must not take for
    /// starvation, whatever the helper's main thread looks like from outside.
    pub fn helper_says_hung(&self, pid: i32) -> bool {
        pid > 0 && self.word(HELPER_HUNG) == pid as u64
    }

    /// When the helper last beat (None: never, or a beat that lies in the future: a
    /// helper that wrote a wrong time must not switch the watchdog off).
    pub fn last_beat(&self) -> Option<Instant> {
        let beat = self.at(self.word(HEARTBEAT).checked_sub(1)?);
        (beat <= Instant::now()).then_some(beat)
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
            port_seen: self.word(PORT_SEEN) != 0,
        }))
    }
}

impl Board {
    /// Maps the page; call it before the helper is forked.
    pub fn new() -> io::Result<Board> {
        let page = Page {
            words: kernel::shared_words(WORDS)?,
            // Some way back, so an instant taken a little before the Board (a last
            // busy look carried over) still has a place on its clock.
            epoch: (1..=3600)
                .rev()
                .find_map(|s| Instant::now().checked_sub(Duration::from_secs(s)))
                .unwrap_or_else(Instant::now),
        };
        page.words[PHASE].store(Phase::Starting as u64, Ordering::Relaxed);
        page.words[DRAIN_SECONDS].store(f64::NAN.to_bits(), Ordering::Relaxed);
        Ok(Board {
            page,
            supervisor_bell: Bell::new()?,
            sampler_bell: Bell::new()?,
            helper_bell: Bell::new()?,
        })
    }

    /// The helper process's handle on the same page and bells: its own descriptors of
    /// the bells (made here, so a failure is supervision's to report).
    pub fn for_helper(&self) -> io::Result<HelperBoard> {
        Ok(HelperBoard {
            page: self.page,
            supervisor_bell: self.supervisor_bell.copy()?,
            sampler_bell: self.sampler_bell.copy()?,
            helper_bell: self.helper_bell.copy()?,
        })
    }

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

    /// The ready port listens, or not (the helper takes connections off its queue while
    /// it does).
    pub fn set_ready_port(&self, open: bool) {
        self.words[READY_PORT_OPEN].store(u64::from(open), Ordering::Release);
    }

    /// The ready port should listen and its listen failed: `/readyz` is not ready.
    pub fn set_ready_port_failing(&self) {
        self.words[READY_PORT_OPEN].store(2, Ordering::Release);
    }
}

impl HelperBoard {
    /// The bells' descriptors, both ends of each: what the helper process keeps of
    /// those a fork gives it.
    pub fn fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        [&self.supervisor_bell, &self.sampler_bell, &self.helper_bell]
            .into_iter()
            .flat_map(|bell| [bell.tx.as_raw_fd(), bell.rx.as_raw_fd()])
    }

    /// The app check's verdict. Supervision hears of every change (the ready port
    /// follows it) and of the first pass (Starting → Running).
    pub fn set_check(&self, passing: bool) {
        let failing = u64::from(!passing);
        let changed = self.words[CHECK_FAILING].swap(failing, Ordering::AcqRel) != failing;
        let first_pass = passing && self.words[CHECK_PASSED].swap(1, Ordering::AcqRel) == 0;
        if changed || first_pass {
            self.supervisor_bell.ring();
        }
    }

    /// The helper's verdict on itself: one of its threads hangs (its pid on the page),
    /// or none does (0).
    pub fn say_hung(&self, hung: bool) {
        let word = if hung {
            u64::from(std::process::id())
        } else {
            0
        };
        if self.word(HELPER_HUNG) != word {
            self.words[HELPER_HUNG].store(word, Ordering::Release);
            // Supervision acts on it at once (it kills a helper that says it hangs).
            if hung {
                self.supervisor_bell.ring();
            }
        }
    }

    /// The helper is well: its threads turn.
    pub fn beat(&self) {
        let now = self.since_epoch(Instant::now()) + 1;
        self.words[HEARTBEAT].store(now, Ordering::Release);
    }

    /// The scale-in protection the agent confirmed, until when (None: cleared).
    pub fn set_protected_until(&self, until: Option<Instant>) {
        let word = until.map_or(0, |at| self.since_epoch(at) + 1);
        self.words[PROTECTED_UNTIL].store(word, Ordering::Release);
    }

    /// The sampler saw a listener on the port (kept for good, across helper restarts).
    pub fn set_port_seen(&self) {
        if self.word(PORT_SEEN) == 0 {
            self.words[PORT_SEEN].store(1, Ordering::Release);
        }
    }

    /// The traffic figures of the sampler's latest look (one writer: the sampler);
    /// `port_seen` is the Board's own (`set_port_seen`).
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
        let helper = board.for_helper().unwrap();
        assert_eq!(helper.phase(), Phase::Starting);
        board.set_phase(Phase::Running);
        assert_eq!(helper.phase(), Phase::Running);
        board.signal_forwarded(signal_names::TERM);
        board.signal_forwarded(signal_names::TERM);
        board.signal_forwarded(signal_names::HUP);
        let forwarded: Vec<_> = helper.forwarded().filter(|(_, n)| *n > 0).collect();
        assert_eq!(
            forwarded,
            vec![(signal_names::HUP, 1), (signal_names::TERM, 2)]
        );
        board.zombie_reaped();
        assert_eq!(helper.zombies_reaped(), 1);
        assert_eq!(helper.drain_seconds(), None);
        board.set_drain_seconds(2.5);
        assert_eq!(helper.drain_seconds(), Some(2.5));
        assert!(!helper.term_taken());
        board.set_term_taken();
        assert!(helper.term_taken());
        assert!(!helper.leave_asked());
        board.ask_helper_to_leave();
        assert!(helper.leave_asked());
        assert!(!helper.ready_port_open());
        board.set_ready_port(true);
        assert!(helper.ready_port_open());
    }

    #[test]
    fn a_heartbeat_from_the_future_is_no_heartbeat() {
        let board = Board::new().unwrap();
        assert_eq!(board.last_beat(), None);
        board.for_helper().unwrap().beat();
        assert!(board.last_beat().is_some_and(|b| b <= Instant::now()));
        let later = board.since_epoch(Instant::now() + Duration::from_secs(3600)) + 1;
        board.words[HEARTBEAT].store(later, Ordering::Release);
        assert_eq!(board.last_beat(), None);
    }

    #[test]
    fn the_traffic_record_round_trips_and_a_torn_write_is_refused() {
        let board = Board::new().unwrap();
        let helper = board.for_helper().unwrap();
        assert_eq!(board.traffic(), Ok(None));
        let now = Instant::now();
        let look = Look {
            taken: now,
            in_flight: Some(0),
            last_busy: Some(now - Duration::from_millis(300)),
            busy_by: Busy::NewConnection,
            namespace_counted: true,
            port_seen: false,
        };
        helper.set_traffic(look);
        let back = board.traffic().unwrap().unwrap();
        assert_eq!(back.in_flight, Some(0));
        assert_eq!(back.busy_by, Busy::NewConnection);
        assert!(!back.port_seen);
        helper.set_port_seen();
        assert!(board.traffic().unwrap().unwrap().port_seen);
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
        helper.set_traffic(Look {
            in_flight: None,
            last_busy: None,
            ..look
        });
        let back = board.traffic().unwrap().unwrap();
        assert_eq!((back.in_flight, back.last_busy), (None, None));
    }

    #[test]
    fn bells_ring_once_per_wait_and_the_check_rings_on_each_change() {
        use nix::poll::{poll, PollFd, PollFlags};
        let board = Board::new().unwrap();
        let helper = board.for_helper().unwrap();
        let rung = |bell: &Bell| {
            let mut fds = [PollFd::new(bell.fd(), PollFlags::POLLIN)];
            poll(&mut fds, 0u8).unwrap() == 1
        };
        assert!(!rung(&board.supervisor_bell));
        helper.set_check(true);
        assert!(rung(&board.supervisor_bell) && board.check_passed());
        board.supervisor_bell.clear();
        helper.set_check(true);
        assert!(!rung(&board.supervisor_bell), "a pass again is no news");
        // Every change of verdict rings (the ready port follows it); the first pass
        // stays known.
        helper.set_check(false);
        assert!(rung(&board.supervisor_bell) && board.check_failing());
        board.supervisor_bell.clear();
        helper.set_check(false);
        assert!(!rung(&board.supervisor_bell));
        helper.set_check(true);
        assert!(rung(&board.supervisor_bell) && !board.check_failing());
        assert!(board.check_passed());
        board.supervisor_bell.clear();
        // Many rings never block the caller, and one clear takes a bounded share of
        // them: the rest ring again, and a few more clears take them all.
        for _ in 0..100_000 {
            board.set_phase(Phase::Draining);
        }
        assert!(rung(&helper.sampler_bell));
        let mut clears = 0;
        while rung(&helper.sampler_bell) {
            helper.sampler_bell.clear();
            clears += 1;
            assert!(clears <= 100_000 / CLEAR_AT_MOST + 1, "clear is unbounded");
        }
        assert!(
            clears > 1,
            "a burst queues more than one ring ({clears} clears)"
        );
        assert_eq!(helper.phase(), Phase::Draining);
        // A copy of the descriptions made blocking (as a helper library might) changes
        // nothing for the bell: ring and clear still never wait.
        let copy = board.for_helper().unwrap();
        copy.sampler_bell.rx.set_nonblocking(false).unwrap();
        copy.sampler_bell.tx.set_nonblocking(false).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            helper.sampler_bell.clear();
            helper.sampler_bell.clear();
            for _ in 0..100_000 {
                board.sampler_bell.ring();
            }
            helper.sampler_bell.clear();
            let _ = done.send(());
        });
        assert!(
            finished
                .recv_timeout(std::time::Duration::from_secs(10))
                .is_ok(),
            "a bell blocked once a copy of its descriptions was made blocking"
        );
    }
}
