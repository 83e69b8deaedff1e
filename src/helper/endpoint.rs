//! The health and metrics endpoint, served by hyper on a helper thread of its own
//! (helper/threads.rs: a panic here costs a connection, or restarts the endpoint, never
//! supervision). Endpoints:
//!
//! - `GET /livez`   200 `alive` while the app runs; 503 `exited` after
//! - `GET /readyz`  200 `ready`; 503 `starting`, `draining`, or `not ready: <reason>`
//! - `GET /metrics` Prometheus text format 0.0.4
//! - anything else: 404; a method other than GET or HEAD: 405
//!
//! Limits, so a slow or hostile client costs a socket and nothing else: a request head
//! of at most 16 KiB (431 and close), 5 s to send it, idle keep-alive closed after 5 s,
//! at most 1024 connections (the least recently active one makes room for a new one;
//! fewer when the descriptor limit is lower, and running out of descriptors evicts too),
//! small socket buffers, and a connection whose answer cannot be written for 5 s (a
//! client that sends and never reads) is closed.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::time::Sleep;

use crate::faults;
use crate::helper::desk::Desk;
use crate::helper::health;
use crate::helper::metrics::prometheus;
use crate::helper::threads::{self, Helper};
use crate::logging;
// hyper answers 431 beyond its read buffer (MAX_HEAD), and starts the head timer
// whenever it waits for a head, so it is also the keep-alive idle limit.
use crate::settings::endpoint::{HEAD_TIMEOUT, MAX_HEAD, WRITE_STALL_LIMIT};

/// Serves the endpoint from the bound `listeners` (one per address) on a thread of its
/// own, started now, and takes the probes' connections off the ready port's queues
/// (`ready`, which supervision opens and closes). If the thread cannot start, lifeguard
/// runs without the endpoint, and the ready port's queue fills.
pub fn start(
    listeners: Vec<std::net::TcpListener>,
    ready: Vec<std::net::TcpListener>,
    desk: Arc<Desk>,
    cap: usize,
) {
    let started = threads::start(Helper::Endpoint, false, move || {
        // Each run (a restart after a panic included) serves copies of the listeners,
        // registered with this run's reactor (so, inside the future).
        let copies: Vec<_> = listeners.iter().map(|l| l.try_clone()).collect();
        let ready: Vec<_> = ready.iter().filter_map(|l| l.try_clone().ok()).collect();
        let desk = desk.clone();
        async move {
            let registry = Arc::new(Mutex::new(Registry::new(cap)));
            let mut accepting = tokio::task::JoinSet::new();
            for copy in copies {
                match copy.and_then(TcpListener::from_std) {
                    Ok(listener) => {
                        accepting.spawn(serve(listener, desk.clone(), registry.clone()));
                    }
                    Err(err) => logging::error(format!("endpoint unavailable: {err}"), &[]),
                }
            }
            for socket in ready {
                accepting.spawn(take_probes(socket, desk.clone()));
            }
            // A panic in an accept loop restarts the whole endpoint (helper/threads.rs); the
            // set aborts the other loops as it is dropped.
            while let Some(done) = accepting.join_next().await {
                if let Err(err) = done {
                    if err.is_panic() {
                        std::panic::resume_unwind(err.into_panic());
                    }
                }
            }
        }
    });
    if let Err(reason) = started {
        logging::warn(format!("endpoint off: {reason}"), &[]);
    }
}

/// Accepts connections until the runtime stops; at most the registry's cap at once,
/// over every listener.
async fn serve(listener: TcpListener, desk: Arc<Desk>, registry: Arc<Mutex<Registry>>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of descriptors (EMFILE/ENFILE) despite the cap: make room as the
                // cap would, then retry after a moment instead of spinning.
                logging::debug(format!("accept failed: {err}"), &[]);
                if matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    lock(&registry).evict_oldest();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        desk.counters.endpoint_accept();
        faults::point("endpoint-accept");
        let _ = stream.set_nodelay(true);
        let (id, close) = lock(&registry).admit();
        let registry = registry.clone();
        let desk = desk.clone();
        threads::spawn(async move {
            // Leaves the registry however the connection ends, a panic included.
            let _leave = Leave(registry.clone(), id);
            connection(stream, id, close, &registry, desk).await;
        });
    }
}

/// How often the ready port's queue is emptied: once a second, and every 50 ms while
/// probes keep coming (a look that found `BUSY_QUEUE` or more), so that a burst never
/// fills the queue (4096) and a probe never waits for a SYN to be sent again.
const PROBES_EVERY: Duration = Duration::from_secs(1);
const PROBES_BUSY_EVERY: Duration = Duration::from_millis(50);
const BUSY_QUEUE: usize = 16;
/// Connections taken off the ready port's queue in one go before the runtime's other
/// tasks get a turn.
const PROBES_AT_ONCE: usize = 4096;

/// The ready port's probes: a TCP probe has its answer when the kernel completes the
/// handshake, and its connection then waits in the accept queue until it is taken off
/// and closed here. On a timer, not on a wake-up from the socket: a socket that stops
/// listening wakes whoever waits on it, and the one who stops it is PID 1 in its
/// SIGTERM's turn; with the app's threads using up the CPU quota, a task woken there
/// takes the CPU from PID 1 before its relay, which then waited seconds for its turn
/// again (bench/ready_port_at_peak.py). A timer wakes nobody but this thread.
async fn take_probes(socket: std::net::TcpListener, desk: Arc<Desk>) {
    let _ = socket.set_nonblocking(true);
    loop {
        let taken = if desk.board.ready_port_open() {
            take_queue(&socket)
        } else {
            0
        };
        let next = if taken >= BUSY_QUEUE {
            PROBES_BUSY_EVERY
        } else {
            PROBES_EVERY
        };
        tokio::time::sleep(next).await;
    }
}

/// Accepts and closes what waits in the ready port's queue (at most `PROBES_AT_ONCE`);
/// how many.
fn take_queue(socket: &std::net::TcpListener) -> usize {
    let mut taken = 0;
    while taken < PROBES_AT_ONCE {
        match socket.accept() {
            // Closed, never reset: a reset that reaches a probe before its connect(2)
            // has returned to it fails that connect with ECONNRESET (seen on loopback).
            Ok((stream, _)) => {
                drop(stream);
                taken += 1;
            }
            // Empty (WouldBlock), not listening (EINVAL), out of descriptors: the next
            // look tries again.
            Err(_) => break,
        }
    }
    taken
}

/// Takes a connection out of the registry when its task ends.
struct Leave(Arc<Mutex<Registry>>, u64);

impl Drop for Leave {
    fn drop(&mut self) {
        lock(&self.0).conns.remove(&self.1);
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    id: u64,
    close: Arc<Notify>,
    registry: &Arc<Mutex<Registry>>,
    desk: Arc<Desk>,
) {
    let touched = registry.clone();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        if let Some(conn) = lock(&touched).conns.get_mut(&id) {
            conn.last_active = Instant::now();
        }
        let desk = desk.clone();
        async move {
            // The request is read whole: anything sent before it, a SIGTERM's kill(2)
            // included, is already in the kernel's tables. A question about PID 1's
            // pending signals is answered by a reading made after this instant; one
            // yield first lets the other connections that woke with this one be read
            // too, so the burst shares one reading (Desk::readiness).
            let asked = Instant::now();
            if asks_the_phase(&request) {
                YieldOnce(false).await;
            }
            Ok::<_, Infallible>(respond(&request, &desk, asked))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        // A client may send its request and shut down its side at once
        // (`curl`-like one-shots, HTTP/1.0 tools); it still gets its answer.
        .half_close(true)
        .serve_connection(TokioIo::new(StallLimit::new(stream)), service);
    tokio::select! {
        _ = conn => {}
        // Evicted to make room: dropping the connection closes the socket.
        _ = close.notified() => {}
    }
}

/// Lets every other task that is ready run first, once: woken by its own poll, a task
/// goes to the back of the runtime's queue. (tokio's `yield_now` does the same with
/// more machinery: 4 kB more of the build without the SDK, whose goal is 1.5 MB.)
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Whether the answer says whether a SIGTERM has arrived (`/readyz`, `/metrics`).
fn asks_the_phase(request: &Request<Incoming>) -> bool {
    matches!(request.uri().path(), "/readyz" | "/metrics")
}

fn respond(request: &Request<Incoming>, desk: &Desk, asked: Instant) -> Response<Full<Bytes>> {
    faults::point("endpoint-request");
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed".into());
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match request.uri().path() {
        "/livez" => verdict(health::liveness(desk.phase())),
        "/readyz" => verdict(desk.readiness(asked)),
        "/metrics" => {
            let mut response = Response::new(Full::new(Bytes::from(prometheus::encode(
                &desk.snapshot_asked(asked),
            ))));
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        _ => text(StatusCode::NOT_FOUND, "not found".into()),
    }
}

fn verdict((code, body): health::Verdict) -> Response<Full<Bytes>> {
    text(
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body,
    )
}

fn text(status: StatusCode, mut body: String) -> Response<Full<Bytes>> {
    body.push('\n');
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A stream whose writes fail once they have made no progress for
/// `WRITE_STALL_LIMIT`: hyper bounds the time to read a head but has no write timeout,
/// so a client that pipelines requests and never reads would hold its connection for
/// good.
struct StallLimit<S> {
    inner: S,
    stalled_since: Option<Pin<Box<Sleep>>>,
}

impl<S> StallLimit<S> {
    fn new(inner: S) -> Self {
        StallLimit {
            inner,
            stalled_since: None,
        }
    }

    /// Passes a finished write through (progress: the clock stops); while the write is
    /// pending, runs the clock and turns its expiry into an error.
    fn limit<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled_since = None;
            return poll;
        }
        let clock = self
            .stalled_since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_STALL_LIMIT)));
        match clock.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallLimit<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallLimit<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.limit(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.limit(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.limit(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.limit(cx, poll)
    }
}

/// The registry, whatever a panicking connection task left it in (a poisoned lock
/// holds a consistent map: every change to it is one call).
fn lock(registry: &Mutex<Registry>) -> std::sync::MutexGuard<'_, Registry> {
    registry
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Open connections, to cap their number.
struct Registry {
    cap: usize,
    next_id: u64,
    conns: HashMap<u64, Conn>,
}

struct Conn {
    last_active: Instant,
    close: Arc<Notify>,
}

impl Registry {
    fn new(cap: usize) -> Self {
        Registry {
            cap: cap.max(1),
            next_id: 0,
            conns: HashMap::new(),
        }
    }

    /// Registers a new connection; at the cap, first evicts the least recently active.
    fn admit(&mut self) -> (u64, Arc<Notify>) {
        if self.conns.len() >= self.cap {
            self.evict_oldest();
        }
        self.next_id += 1;
        let close = Arc::new(Notify::new());
        self.conns.insert(
            self.next_id,
            Conn {
                last_active: Instant::now(),
                close: close.clone(),
            },
        );
        (self.next_id, close)
    }

    /// Tells the least recently active connection to close, and forgets it.
    fn evict_oldest(&mut self) {
        let oldest = self
            .conns
            .iter()
            .min_by_key(|(_, c)| c.last_active)
            .map(|(id, _)| *id);
        if let Some(conn) = oldest.and_then(|id| self.conns.remove(&id)) {
            // notify_one keeps a permit if the task is not waiting yet.
            conn.close.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::endpoint::MAX_CONNECTIONS;

    #[test]
    fn the_least_recently_active_connection_makes_room() {
        let mut registry = Registry::new(MAX_CONNECTIONS);
        let mut closers = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            closers.push(registry.admit());
        }
        // The first one was active just now; the second is the oldest.
        registry.conns.get_mut(&closers[0].0).unwrap().last_active = Instant::now();
        let _ = registry.admit();
        assert_eq!(registry.conns.len(), MAX_CONNECTIONS);
        assert!(!registry.conns.contains_key(&closers[1].0));
        assert!(registry.conns.contains_key(&closers[0].0));
        // Its task is told to close (the permit waits for it).
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(1), closers[1].1.notified())
                .await
                .expect("close sent");
        });
    }
}
