//! The readiness mirror (`lifeguard --mirror-ready-port PORT`): lifeguard as the PID 1 of
//! a small container of its own, in the app container's network namespace, answering
//! `GET /readyz` 200 exactly while a socket listens on PORT there (the app container's
//! `--ready-port`). A task (ECS) or pod gives each container a cgroup of its own under
//! the task's quota, and a sibling cgroup is one scheduling entity against the app's
//! whole group: when the app's threads use up the quota, a server inside the app's
//! cgroup gets about 1/N of it among N runnable threads and misses HTTP checks, while a
//! server in a sibling cgroup still gets its turn within milliseconds — provided its
//! answer costs microseconds. So this is one thread and one `poll(2)`, as PID 1's
//! supervision loop is: no runtime, no helper process, an answer read from one
//! kernel-filtered sock_diag dump (`look`) and written by hand (`http`).
//!
//! It never connects to PORT: a connection would be work for the app's cgroup and would
//! sit in the ready port's accept queue. It reaps what is re-parented to it, exits 0 on
//! SIGTERM (or SIGINT, SIGQUIT), and keeps the app endpoint's limits: a head of 16 KiB,
//! 5 s to send it, 5 s idle, 1024 connections, the oldest idle one closed to make room.
#![forbid(unsafe_code)]

mod http;
mod look;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::kernel;
use crate::logging;
use crate::settings::{endpoint, ListenAt, Mirror};
use crate::signal_names::{self, Signal};

use http::{Head, Route};
use look::Look;

/// Time to send a request head, which is also how long a connection may sit idle, and
/// how long an answer may wait for a client that does not read: the endpoint's.
const STALL_LIMIT: Duration = endpoint::HEAD_TIMEOUT;
/// Answers a connection may have waiting unread before its requests are left unread
/// too: a client that pipelines and never reads costs this much, not more.
const MAX_WAITING_OUTPUT: usize = 4096;
/// Connections taken off one listener's queue in one turn.
const ACCEPTS_PER_TURN: usize = 64;
/// Socket buffers asked of the kernel for the connections: room for the largest head,
/// and for many small answers.
const SEND_BUFFER: usize = 16 * 1024;

pub fn run(settings: Mirror) -> anyhow::Result<ExitCode> {
    // First, before any thread exists (the name lookup of --listen starts one).
    let mut inbox = crate::init::start(settings.pdeathsig)?;
    let listeners = bind(&settings.listen)?;
    // The C library may have unblocked its reserved signals if a thread was started
    // (the log writer, the --listen lookup): block them again, once.
    kernel::reblock_every_signal();
    let limit = kernel::raise_descriptor_limit(endpoint::MAX_DESCRIPTORS);
    let cap = (limit.saturating_sub(endpoint::RESERVED_DESCRIPTORS) as usize)
        .clamp(1, endpoint::MAX_CONNECTIONS);
    let port = settings.watched.port;
    let mut look = Look::new(settings.watched, Instant::now());
    for (_, addr) in &listeners {
        logging::info(
            "readiness mirror listening: /readyz follows the ready port",
            &[("addr", addr), ("port", &port)],
        );
    }
    let listeners: Vec<TcpListener> = listeners.into_iter().map(|(l, _)| l).collect();
    // The first look at once: a sandbox that refuses sock_diag is said at the start.
    let _ = look.take(Instant::now());
    let mut table = Table {
        conns: Vec::new(),
        cap,
        accepts_rest_until: None,
    };
    let mut signals = Vec::new();
    loop {
        logging::pump();
        let now = Instant::now();
        let wake = [table.next_deadline(), look.next_watch()]
            .into_iter()
            .flatten()
            .min();
        let mut timeout = wake.map(|at| at.saturating_duration_since(now));
        if logging::pending() {
            timeout = Some(timeout.map_or(PENDING_LOG, |t| t.min(PENDING_LOG)));
        }
        let (signalled, listening, ready) = table.wait(&inbox, &listeners, now, timeout)?;
        let now = Instant::now();
        if signalled {
            inbox.take_all(&mut signals).context("reading signals")?;
            for received in signals.drain(..) {
                let stop = Some(received.signal) == settings.pdeathsig;
                if let Some(code) = on_signal(received.signal, stop, settings.warn_on_reap) {
                    return Ok(code);
                }
            }
        }
        // The connections the wait saw first: accepting may close one to make room.
        table.serve(&ready, &mut look, now);
        for (listener, ready) in listeners.iter().zip(listening) {
            if ready {
                table.accept(listener, &mut look, now);
            }
        }
        look.watch(now);
    }
}

/// How soon the loop wakes to write log lines stderr did not take at once.
const PENDING_LOG: Duration = Duration::from_millis(10);

/// A signal's effect: the exit code for a stop (SIGTERM, SIGINT, SIGQUIT, or `stop`:
/// the `--pdeathsig` signal); children reaped for SIGCHLD; the rest are nobody's (the
/// mirror runs no app).
fn on_signal(signal: Signal, stop: bool, warn_on_reap: bool) -> Option<ExitCode> {
    match signal {
        _ if stop => Some(stopping(signal)),
        signal_names::CHLD => {
            while let kernel::Reaped::Child { pid, .. } = kernel::reap_one() {
                if warn_on_reap {
                    logging::warn("reaped a zombie", &[("pid", &pid)]);
                } else {
                    logging::debug("reaped a zombie", &[("pid", &pid)]);
                }
            }
            None
        }
        signal_names::TERM | signal_names::INT | QUIT => Some(stopping(signal)),
        // Nobody's: the mirror runs no app.
        _ => None,
    }
}

const QUIT: Signal = Signal(libc::SIGQUIT);

fn stopping(signal: Signal) -> ExitCode {
    logging::info(
        "the readiness mirror stops",
        &[("signal", &signal.name()), ("exit_code", &0)],
    );
    ExitCode::SUCCESS
}

/// The mirror's listeners: `[::]` dual-stack by default (`0.0.0.0` where the kernel has
/// no IPv6), an address, or every address of a name. The port is all the mirror is for,
/// so any failure to listen ends it (125) naming the address.
fn bind(listen: &ListenAt) -> anyhow::Result<Vec<(TcpListener, SocketAddr)>> {
    let addrs = match listen {
        ListenAt::Any(port) => vec![SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, *port))],
        ListenAt::Addr(addr) => vec![*addr],
        ListenAt::Name { host, port } => crate::lookup::for_listen(host, *port)?,
    };
    let mut listeners = Vec::new();
    for addr in addrs {
        let (fd, addr) = match kernel::bound_socket(addr, true) {
            Err(err) if matches!(listen, ListenAt::Any(_)) && kernel::no_ipv6(&err) => {
                let v4 = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, addr.port()));
                logging::info("no IPv6 in this kernel: listening on IPv4 alone", &[]);
                (kernel::bound_socket(v4, true), v4)
            }
            bound => (bound, addr),
        };
        let listening = fd.and_then(|fd| {
            // Refinements only, before the listen (which counts: a bind can succeed
            // where the listen then fails).
            if let Err(err) = kernel::tune_buffers(&fd, http::MAX_HEAD, SEND_BUFFER) {
                logging::warn(format!("listener left untuned: {err}"), &[]);
            }
            kernel::listen(&fd)?;
            let listener = TcpListener::from(fd);
            listener.set_nonblocking(true)?;
            Ok(listener)
        });
        listeners.push((
            listening.with_context(|| format!("cannot listen on {addr}"))?,
            addr,
        ));
    }
    Ok(listeners)
}

/// One client connection.
struct Conn {
    stream: TcpStream,
    /// Bytes of requests not yet answered.
    input: Vec<u8>,
    /// Answers not yet written.
    output: Vec<u8>,
    /// When the connection began to wait for its next step: the accept, the last
    /// answer, the last progress writing one. `STALL_LIMIT` after it, it is closed.
    since: Instant,
    /// Ends once its answers are written (asked for, or the client is done sending).
    closing: bool,
    /// How much of `input` has been looked at for the end of a head.
    scanned: usize,
}

impl Conn {
    fn idle(&self) -> bool {
        self.input.is_empty() && self.output.is_empty() && !self.closing
    }

    fn events(&self) -> PollFlags {
        let mut events = PollFlags::empty();
        if !self.closing && self.output.len() < MAX_WAITING_OUTPUT {
            events |= PollFlags::POLLIN;
        }
        if !self.output.is_empty() {
            events |= PollFlags::POLLOUT;
        }
        events
    }

    /// Reads what has arrived, answers every whole head, writes what it can. Returns
    /// whether the connection goes on.
    fn turn(&mut self, look: &mut Look, now: Instant) -> bool {
        let mut buf = [0u8; 4096];
        while !self.closing
            && self.output.len() < MAX_WAITING_OUTPUT
            && self.input.len() <= http::MAX_HEAD
        {
            match self.stream.read(&mut buf) {
                // The client is done sending: what it sent is answered, then the end.
                Ok(0) => self.closing = true,
                Ok(n) => {
                    self.input.extend_from_slice(&buf[..n]);
                    self.answer_heads(look, now);
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        // Answers and writes until neither moves: pipelined heads left waiting for room
        // are answered once the answers before them are out, not when the client next
        // sends (it may wait for them and send nothing).
        loop {
            let waiting = self.answer_heads(look, now);
            if !self.write_out(now) {
                return false;
            }
            if !(waiting && self.output.is_empty()) {
                break;
            }
        }
        // A kept connection gives back what a burst of pipelined requests made it hold.
        for buffer in [&mut self.input, &mut self.output] {
            if buffer.is_empty() && buffer.capacity() > 4096 {
                *buffer = Vec::new();
            }
        }
        !(self.closing && self.output.is_empty())
    }

    /// Writes what the socket takes now; false when the connection failed.
    fn write_out(&mut self, now: Instant) -> bool {
        while !self.output.is_empty() {
            match self.stream.write(&self.output) {
                Ok(0) => return false,
                Ok(n) => {
                    self.output.drain(..n);
                    self.since = now;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if self.closing && self.output.is_empty() {
            // The answer is out: say so before the close, so a client still sending
            // (the rest of an oversized head) reads the answer rather than a reset.
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
        }
        true
    }

    /// Every whole request head in the input, answered in order. Returns whether whole
    /// heads may still wait, for want of room for their answers.
    fn answer_heads(&mut self, look: &mut Look, now: Instant) -> bool {
        while !self.input.is_empty() {
            if self.output.len() >= MAX_WAITING_OUTPUT {
                return true;
            }
            // A head trickled in a byte at a time is parsed once it can be whole (a
            // blank line has arrived), not again at every byte.
            let from = self.scanned.saturating_sub(3);
            if self.input.len() < http::MAX_HEAD && !http::may_end_head(&self.input[from..]) {
                self.scanned = self.input.len();
                return false;
            }
            let (status, body, head_only, close, len) = match http::read_head(&self.input) {
                Head::Partial => {
                    self.scanned = self.input.len();
                    return false;
                }
                Head::Request {
                    route,
                    head_only,
                    close,
                    len,
                } => {
                    let (status, body) = match route {
                        Route::Ready => look.readiness(now),
                        Route::Live => (200, "alive".into()),
                        Route::NotFound => (404, "not found".into()),
                        Route::NotAllowed => (405, "method not allowed".into()),
                    };
                    (status, body, head_only, close, len)
                }
                Head::TooLarge => (431, "request head too large".into(), false, true, 0),
                Head::Bad => (400, "bad request".into(), false, true, 0),
            };
            http::answer(&mut self.output, status, &body, head_only, close);
            self.since = now;
            self.scanned = 0;
            if close {
                self.closing = true;
                self.input.clear();
                return false;
            }
            self.input.drain(..len);
        }
        false
    }
}

/// The open connections.
struct Table {
    conns: Vec<Conn>,
    cap: usize,
    /// Accepting rests until then after an accept failed for want of a resource (no
    /// descriptor and no connection to close for one, no memory, no buffers): the
    /// queued connection stays queued, so the listener would wake every wait and the
    /// loop spin on it.
    accepts_rest_until: Option<Instant>,
}

/// How long accepting rests after an accept failed for want of a resource: checks
/// queue meanwhile (the kernel answers their handshakes), and the loop sleeps.
const ACCEPT_REST: Duration = Duration::from_millis(100);

impl Table {
    fn next_deadline(&self) -> Option<Instant> {
        (self.conns.iter().map(|c| c.since + STALL_LIMIT))
            .chain(self.accepts_rest_until)
            .min()
    }

    /// Whether the listeners are waited on now (not while accepting rests).
    fn accepting(&self, now: Instant) -> bool {
        self.accepts_rest_until.is_none_or(|until| now >= until)
    }

    /// The loop's one wait: the signalfd, the listeners (not while accepting rests at
    /// `now`), the connections. Returns whether signals wait, which listeners have
    /// connections queued, and each connection's readiness.
    fn wait(
        &self,
        inbox: &kernel::SignalInbox,
        listeners: &[TcpListener],
        now: Instant,
        timeout: Option<Duration>,
    ) -> anyhow::Result<(bool, Vec<bool>, Vec<PollFlags>)> {
        let timeout = match timeout {
            None => PollTimeout::NONE,
            // Rounded up to the millisecond: a deadline is never woken for early.
            Some(t) => PollTimeout::try_from(t.as_nanos().div_ceil(1_000_000).min(60_000) as u64)
                .unwrap_or(PollTimeout::MAX),
        };
        let mut fds = Vec::with_capacity(1 + listeners.len() + self.conns.len());
        fds.push(PollFd::new(inbox.as_fd(), PollFlags::POLLIN));
        let listen = if self.accepting(now) {
            PollFlags::POLLIN
        } else {
            PollFlags::empty()
        };
        fds.extend(listeners.iter().map(|l| PollFd::new(l.as_fd(), listen)));
        fds.extend(
            self.conns
                .iter()
                .map(|c| PollFd::new(c.stream.as_fd(), c.events())),
        );
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            // As io::Error, whose text is the C library's: nix's own table of errno
            // descriptions would add kilobytes to the binary for this one line.
            Err(err) => return Err(io::Error::from(err)).context("waiting in poll"),
        }
        let mut revents = fds
            .iter()
            .map(|f| f.revents().unwrap_or(PollFlags::empty()));
        let signalled = revents.next().is_some_and(|r| !r.is_empty());
        let listening = revents
            .by_ref()
            .take(listeners.len())
            .map(|r| !r.is_empty())
            .collect();
        Ok((signalled, listening, revents.collect()))
    }

    /// Takes the listener's queued connections, making room at the cap by closing the
    /// connection idle longest (else the oldest): a new check is worth more than a
    /// client that holds a connection and says nothing. Each has its first turn at once:
    /// a check's request has usually arrived with it, and is answered without another
    /// wait.
    fn accept(&mut self, listener: &TcpListener, look: &mut Look, now: Instant) {
        if !self.accepting(now) {
            return;
        }
        self.accepts_rest_until = None;
        for _ in 0..ACCEPTS_PER_TURN {
            match listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let mut conn = Conn {
                        stream,
                        input: Vec::new(),
                        output: Vec::new(),
                        since: now,
                        closing: false,
                        scanned: 0,
                    };
                    // A check answered and closed in its first turn takes no room.
                    if conn.turn(look, now) {
                        if self.conns.len() >= self.cap {
                            self.evict();
                        }
                        self.conns.push(conn);
                    }
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                // Out of descriptors (EMFILE, ENFILE): a connection makes room, as at
                // the cap, or the queued one would wake every turn.
                Err(err)
                    if matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
                        && !self.conns.is_empty() =>
                {
                    self.evict()
                }
                // A connection that failed before it was taken: it is gone from the
                // queue, which is tried again next turn.
                Err(err) if err.raw_os_error() == Some(libc::ECONNABORTED) => return,
                // Out of a resource with nothing to free (EMFILE with no connection
                // open, ENFILE, ENOMEM, ENOBUFS): the connection stays queued, so
                // accepting rests a moment rather than spin on it.
                Err(_) => {
                    self.accepts_rest_until = Some(now + ACCEPT_REST);
                    return;
                }
            }
        }
    }

    fn evict(&mut self) {
        let oldest = |idle: bool| {
            (self.conns.iter().enumerate())
                .filter(|(_, c)| !idle || c.idle())
                .min_by_key(|(_, c)| c.since)
                .map(|(i, _)| i)
        };
        if let Some(i) = oldest(true).or_else(|| oldest(false)) {
            self.conns.swap_remove(i);
        }
    }

    /// Each connection's turn where the wait said it has one, then the end of those
    /// done or past their time.
    fn serve(&mut self, ready: &[PollFlags], look: &mut Look, now: Instant) {
        let mut woke = ready.iter().map(|r| !r.is_empty());
        self.conns.retain_mut(|conn| {
            (!woke.next().unwrap_or(false) || conn.turn(look, now))
                && now < conn.since + STALL_LIMIT
        });
    }
}
