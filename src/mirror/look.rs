//! What the readiness mirror sees of the app's ready port: a look at the kernel's socket
//! table (sock_diag, the port's listeners alone), kept for at most `MAX_AGE` so a burst
//! of checks costs one look, and what it says when the look changes or cannot be had.
#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::logging;
use crate::settings::MirrorPort;
use crate::sock_diag::listening::Listeners;

/// The oldest look a check is answered from: the answer follows the port within this.
pub const MAX_AGE: Duration = Duration::from_millis(100);
/// How often the port is looked at while it has never been seen and no check asks.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How long the port may go unseen from the start before the likely cause is said:
/// apps that take longer to start than this are rare, and a mirror that cannot see the
/// app's network namespace never will.
pub const UNSEEN_WARNING: Duration = Duration::from_secs(60);

/// What a look found: whether the port listens, or why that cannot be read.
type Found = Result<bool, String>;

pub struct Look {
    watched: MirrorPort,
    listeners: Listeners,
    last: Option<(Instant, Found)>,
    started: Instant,
    /// The port has listened once since the start.
    seen: bool,
    unseen_said: bool,
}

impl Look {
    pub fn new(watched: MirrorPort, now: Instant) -> Look {
        Look {
            watched,
            listeners: Listeners::new(watched.port),
            last: None,
            started: now,
            seen: false,
            unseen_said: false,
        }
    }

    /// `/readyz`: 200 while the port listens, from a look at most `MAX_AGE` old.
    pub fn readiness(&mut self, now: Instant) -> (u16, String) {
        let port = self.watched.port;
        match self.current(now) {
            Ok(true) => (200, "ready".into()),
            Ok(false) => (503, format!("not ready: nothing listens on port {port}")),
            Err(why) => (503, format!("not ready: {why}")),
        }
    }

    fn current(&mut self, now: Instant) -> Found {
        match &self.last {
            Some((at, found)) if now.saturating_duration_since(*at) <= MAX_AGE => found.clone(),
            _ => self.take(now),
        }
    }

    /// A new look, and a line where it differs from the last one.
    pub fn take(&mut self, now: Instant) -> Found {
        let watched = self.watched;
        // Once more on a failure, on a new socket: a dump cut by a throttled period
        // (its deadline is wall-clock time) is no reason for a 503.
        let found = (self.listeners.now())
            .or_else(|_| self.listeners.now())
            .map(|listening| listening.iter().any(|at| covers(watched.host, *at)))
            .map_err(|err| format!("cannot read the socket table (sock_diag netlink): {err}"));
        let port = watched.port;
        let before = self.last.as_ref().map(|(_, f)| f);
        match (before, &found) {
            (Some(Ok(was)), Ok(now)) if was == now => {}
            (None, Ok(false)) | (Some(Err(_)), Err(_)) => {}
            (_, Ok(listens)) => logging::info(
                if *listens {
                    "the app's ready port listens: /readyz answers 200"
                } else {
                    "the app's ready port does not listen: /readyz answers 503"
                },
                &[("port", &port)],
            ),
            (_, Err(why)) => logging::warn(
                format!(
                    "{why}: /readyz answers 503 until it can (a sandbox that refuses netlink \
                     sockets?)"
                ),
                &[("port", &port)],
            ),
        }
        self.seen |= found == Ok(true);
        // Checked at every look, not the watch's alone: checks that come faster than
        // the watch's second would otherwise keep it from ever being due.
        if found == Ok(false) && unseen_too_long(self.seen, self.started, now) && !self.unseen_said
        {
            self.unseen_said = true;
            logging::warn(
                format!(
                    "nothing has listened on port {port} here for {}: the mirror must share \
                     the app container's network namespace (not so in ECS bridge mode), and \
                     the app's lifeguard run with --ready-port {port}",
                    crate::seconds::human(UNSEEN_WARNING),
                ),
                &[],
            );
        }
        self.last = Some((now, found.clone()));
        found
    }

    /// When to look again with no check asking: each second while the port has never
    /// been seen, until the warning about it is said; then never.
    pub fn next_watch(&self) -> Option<Instant> {
        if self.seen || self.unseen_said {
            return None;
        }
        Some(
            self.last
                .as_ref()
                .map_or(self.started, |(at, _)| *at + WATCH_EVERY),
        )
    }

    /// The watch's turn: a look when one is due (`take` says the warning).
    pub fn watch(&mut self, now: Instant) {
        if self.next_watch().is_some_and(|due| now >= due) {
            let _ = self.take(now);
        }
    }
}

/// Whether the port, never seen since `started`, has been missing long enough to say so.
fn unseen_too_long(seen: bool, started: Instant, now: Instant) -> bool {
    !seen && now.saturating_duration_since(started) >= UNSEEN_WARNING
}

/// Whether a listener bound to `at` takes connections for `host` (None: any address):
/// the same address, or the wildcard of its family (`[::]` is dual-stack as lifeguard
/// binds it, so it covers IPv4 too).
fn covers(host: Option<IpAddr>, at: SocketAddr) -> bool {
    match host {
        None => true,
        Some(host) => {
            at.ip() == host
                || match at.ip() {
                    IpAddr::V6(any) => any.is_unspecified(),
                    IpAddr::V4(any) => any.is_unspecified() && host.is_ipv4(),
                }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_covers_its_address_and_the_wildcard_covers_its_family() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        let host = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let rows = [
            (None, "127.0.0.1:9596", true),
            (host("127.0.0.1"), "127.0.0.1:9596", true),
            (host("127.0.0.1"), "0.0.0.0:9596", true),
            (host("127.0.0.1"), "[::]:9596", true),
            (host("127.0.0.1"), "10.0.0.5:9596", false),
            (host("::1"), "0.0.0.0:9596", false),
            (host("::1"), "[::1]:9596", true),
            (host("::1"), "[::]:9596", true),
        ];
        for (host, listener, want) in rows {
            assert_eq!(covers(host, at(listener)), want, "{host:?} {listener}");
        }
    }

    #[test]
    fn an_unseen_port_is_said_after_the_warning_time_and_never_once_seen() {
        let t0 = Instant::now();
        assert!(!unseen_too_long(false, t0, t0 + UNSEEN_WARNING / 2));
        assert!(unseen_too_long(false, t0, t0 + UNSEEN_WARNING));
        assert!(!unseen_too_long(true, t0, t0 + UNSEEN_WARNING * 10));
    }

    /// Against the kernel: a listener of this test's own on a port, then gone.
    #[test]
    fn the_look_follows_a_real_listener_and_reuses_a_fresh_look() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let t0 = Instant::now();
        let mut look = Look::new(MirrorPort { host: None, port }, t0);
        assert_eq!(look.take(t0), Ok(true));
        assert_eq!(look.readiness(t0).0, 200);
        drop(listener);
        assert_eq!(
            look.readiness(t0 + MAX_AGE).0,
            200,
            "a look MAX_AGE old serves"
        );
        let (code, body) = look.readiness(t0 + MAX_AGE + Duration::from_millis(1));
        assert_eq!(
            (code, body),
            (503, format!("not ready: nothing listens on port {port}"))
        );
    }
}
