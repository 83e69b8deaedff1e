//! The drain's traffic rule: whether the port was busy between two looks (a request in
//! flight, a new connection, bytes in, or an accept the namespace counted that nothing
//! explains), across the looks at the port and at the namespace's other listeners.
//! Pure: the sampler feeds it each look; the hold reads the `Look` it returns.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::time::Instant;

use super::inflight;
use crate::board::{Busy, Look};

/// The traffic figures the drain's hold reads: the in-flight count and when traffic
/// last reached the port. Pure: fed each look at the port.
#[derive(Default)]
pub(super) struct Traffic {
    pub(super) last_busy: Option<Instant>,
    pub(super) busy_by: Busy,
    /// Each connection's cookie and bytes received at the last look.
    seen: HashMap<u64, u64>,
    looked: bool,
    /// The namespace's passive opens and lifeguard's own endpoint's accepts at the last
    /// look.
    opens: Option<(u64, u64)>,
    /// Opens the last look counted and could not explain, and that look's instant: the
    /// next look may explain them (see `next`).
    owed: Option<(u64, Instant)>,
}

/// One look at the port: the dump's figures and sockets (None: it failed), the
/// namespace's passive opens (None: unreadable) and lifeguard's own endpoint's accepts
/// so far.
pub(super) struct PortLook<'a> {
    pub(super) at: Instant,
    pub(super) found: Option<(inflight::InFlight, &'a [inflight::SockRecord])>,
    pub(super) passive_opens: Option<u64>,
    pub(super) own_accepts: u64,
    pub(super) others: Others,
}

/// The namespace's other listeners (besides the port and lifeguard's endpoint) at a look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Others {
    /// Nothing else listens.
    Absent,
    /// Others listen, and their connections were not read (outside a drain, or the
    /// namespace's dump failed).
    Unread,
    /// Their connections were read for the first time: the baseline, nothing new yet.
    Baseline,
    /// Their new connections since the last look.
    New(u64),
}

/// The connections of the namespace's other listeners, each as its two ends (the
/// listener's, then the client's), as the last namespace dump had them.
#[derive(Default)]
pub(super) struct OtherListeners {
    seen: std::collections::HashSet<(std::net::SocketAddr, std::net::SocketAddr)>,
    looked: bool,
}

impl OtherListeners {
    /// How many connections to `ports` `all` has that the last dump did not; the first
    /// time, the baseline. A connection is seen from either end: the listener's socket
    /// (established, or closing: a server that closes first keeps TIME_WAIT for a
    /// minute), or, for a client in the namespace, the client's (a client that closes
    /// first keeps TIME_WAIT while the server's side leaves nothing). Both ends are the
    /// same pair of addresses and ports, so a connection seen alive in one look and in
    /// TIME_WAIT in the next — from either end — counts once. A client's socket is
    /// taken only where its peer is in the namespace for sure (loopback, or its own
    /// address): one to a remote server on the same port number is not the listener's.
    pub(super) fn new_connections(
        &mut self,
        all: &[inflight::SockRecord],
        ports: &[u16],
    ) -> Others {
        use netlink_packet_sock_diag::constants::TCP_LISTEN;
        let now: std::collections::HashSet<_> = all
            .iter()
            .filter(|s| s.state != TCP_LISTEN)
            .filter_map(|s| {
                let ends = s.ends;
                if ports.contains(&s.local_port) {
                    Some((ends.local, ends.remote))
                } else if ports.contains(&ends.remote.port())
                    && (ends.remote.ip().is_loopback() || ends.remote.ip() == ends.local.ip())
                {
                    Some((ends.remote, ends.local))
                } else {
                    None
                }
            })
            .collect();
        let new = now.difference(&self.seen).count() as u64;
        let first = !std::mem::replace(&mut self.looked, true);
        self.seen = now;
        if first {
            Others::Baseline
        } else {
            Others::New(new)
        }
    }
}

impl Traffic {
    /// The port is busy at this look when a request is in flight, a connection is new
    /// (established, or already closing: a server that closes first keeps TIME_WAIT),
    /// bytes came in on one, or the namespace accepted more connections than the tables
    /// explain: the port's new ones, lifeguard's endpoint's accepts and — beside other
    /// listeners (a sidecar's, a mesh proxy's) — theirs, seen in the namespace's socket
    /// table. Without that table the counter is not held against the port
    /// (docs/lifecycle.md says which way that leans).
    ///
    /// Every explanation is read before the counter (the dumps, then the endpoint's
    /// accepts), so nothing is explained before the kernel has counted it, and a surplus
    /// can only be a connection an earlier look counted: one that arrived between a
    /// look's reads, or that the endpoint accepted a moment after its count. So opens a
    /// look cannot explain are owed for one look: they mark the look busy at once, and
    /// the next look either explains them (the mark is taken back) or not (busy again,
    /// at that look). The surplus pays that debt alone and is never carried further: a
    /// credit could hide an app's request.
    pub(super) fn next(&mut self, look: PortLook) -> Look {
        let counted = look.others != Others::Unread;
        let Some((found, sockets)) = look.found else {
            return self.report(look.at, None, counted);
        };
        let arrived = inflight::arrivals(&mut self.seen, !self.looked, sockets);
        // Opens counted since the last look less those explained (negative: a surplus).
        let unexplained = match (self.opens, look.passive_opens) {
            (Some((opens, own)), Some(now)) if self.looked && counted => {
                let explained = arrived.connections
                    + look.own_accepts.saturating_sub(own)
                    + match look.others {
                        Others::New(n) => n,
                        _ => 0,
                    };
                Some(now.saturating_sub(opens) as i64 - explained as i64)
            }
            _ => None,
        };
        self.opens = look.passive_opens.map(|n| (n, look.own_accepts));
        self.looked = true;
        // A first table (a drain beginning, or other listeners than before) is their
        // baseline: the opens since the look before it are never explained by a later one.
        let first_table = look.others == Others::Baseline;
        let owed = self.owed.take().map_or(0, |(n, _)| n);
        let mut still_owed = match unexplained {
            Some(net) if net < 0 => owed.saturating_sub(net.unsigned_abs()),
            _ => owed,
        };
        match unexplained.filter(|n| *n > 0) {
            Some(net) if first_table => still_owed += net as u64,
            Some(net) => self.owed = Some((net as u64, look.at)),
            None => {}
        }
        let busy = if found.requests > 0 {
            Busy::InFlight
        } else if arrived.connections > 0 {
            Busy::NewConnection
        } else if arrived.bytes {
            Busy::BytesIn
        } else if still_owed > 0 {
            Busy::NamespaceOpens
        } else {
            Busy::Nothing
        };
        if busy != Busy::Nothing {
            self.last_busy = Some(look.at);
            self.busy_by = busy;
        }
        self.report(look.at, Some(found.requests), counted)
    }

    /// The look as the hold reads it: opens still owed count as busy at their look.
    fn report(&self, taken: Instant, in_flight: Option<u64>, counted: bool) -> Look {
        let (last_busy, busy_by) = match self.owed {
            Some((_, at)) if self.last_busy.is_none_or(|busy| busy < at) => {
                (Some(at), Busy::NamespaceOpens)
            }
            _ => (self.last_busy, self.busy_by),
        };
        Look {
            taken,
            in_flight,
            last_busy,
            busy_by,
            namespace_counted: counted,
            port_seen: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn traffic_is_busy_on_requests_new_connections_bytes_and_unexplained_opens() {
        use inflight::{InFlight, SockRecord, TcpInfoFields};
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let conn = |cookie: u64, received: u64| SockRecord {
            local_port: 0,
            state: 1, // TCP_ESTABLISHED
            inode: 9,
            rqueue: 0,
            wqueue: 0,
            cookie,
            info: Some(TcpInfoFields {
                bytes_received: received,
                bytes_sent: 10,
                last_data_recv_ms: 9,
                last_data_sent_ms: 3,
            }),
            ends: Default::default(),
        };
        let idle = InFlight {
            requests: 0,
            accept_queue: Some(0),
        };
        let busy = InFlight {
            requests: 2,
            accept_queue: Some(1),
        };
        let mut traffic = Traffic::default();
        let mut look = |ms, found: Option<(InFlight, &[SockRecord])>, opens, own| {
            traffic.next(PortLook {
                at: at(ms),
                found,
                passive_opens: opens,
                own_accepts: own,
                others: Others::Absent,
            })
        };
        let keep = [conn(1, 100)];
        // The first look is the baseline: an idle connection already there is no news.
        assert_eq!(look(0, Some((idle, &keep)), Some(50), 3).last_busy, None);
        assert_eq!(look(100, Some((idle, &keep)), Some(50), 3).last_busy, None);
        // Bytes on it: a request came and went between two looks.
        let more = [conn(1, 180)];
        assert_eq!(
            look(200, Some((idle, &more)), Some(50), 3).last_busy,
            Some(at(200))
        );
        // A request in flight.
        let got = look(300, Some((busy, &more)), Some(50), 3);
        assert_eq!((got.in_flight, got.last_busy), (Some(2), Some(at(300))));
        // A new connection: it explains its own passive open.
        let two = [conn(1, 180), conn(2, 0)];
        assert_eq!(
            look(400, Some((idle, &two)), Some(51), 3).last_busy,
            Some(at(400))
        );
        // lifeguard's own endpoint (a health check) explains the next open: quiet.
        assert_eq!(
            look(500, Some((idle, &two)), Some(52), 4).last_busy,
            Some(at(400))
        );
        // An open nothing explains (a connection opened and closed between two looks, or
        // one the endpoint accepts a moment later): busy at once, and owed.
        let got = look(600, Some((idle, &two)), Some(53), 4);
        assert_eq!(
            (got.last_busy, got.busy_by),
            (Some(at(600)), Busy::NamespaceOpens)
        );
        // The endpoint's accept of it, read at the next look: the mark is taken back.
        let got = look(700, Some((idle, &two)), Some(53), 5);
        assert_eq!(
            (got.last_busy, got.busy_by),
            (Some(at(400)), Busy::NewConnection)
        );
        // Two opens never explained: busy at their look, and again at the next.
        assert_eq!(
            look(800, Some((idle, &two)), Some(55), 5).last_busy,
            Some(at(800))
        );
        let got = look(900, Some((idle, &two)), Some(55), 5);
        assert_eq!(
            (got.last_busy, got.busy_by),
            (Some(at(900)), Busy::NamespaceOpens)
        );
        // A surplus pays the debt and nothing more: one owed at 1000, a surplus of two
        // at 1100 (the second is dropped, not kept as a credit), so the open at 1200 is
        // busy at its look and at the next.
        assert_eq!(
            look(1000, Some((idle, &two)), Some(56), 5).last_busy,
            Some(at(1000))
        );
        assert_eq!(
            look(1100, Some((idle, &two)), Some(56), 7).last_busy,
            Some(at(900))
        );
        assert_eq!(
            look(1200, Some((idle, &two)), Some(57), 7).last_busy,
            Some(at(1200))
        );
        assert_eq!(
            look(1300, Some((idle, &two)), Some(57), 7).last_busy,
            Some(at(1300))
        );
        // No counter: the port's own figures still tell, and nothing is owed.
        assert_eq!(
            look(1400, Some((idle, &two)), None, 7).last_busy,
            Some(at(1300))
        );
        // A failed dump: no figure, last traffic kept.
        let failed = look(1500, None, Some(57), 7);
        assert_eq!((failed.in_flight, failed.last_busy), (None, Some(at(1300))));
    }

    #[test]
    fn beside_other_listeners_their_connections_explain_opens_a_look_late() {
        use inflight::InFlight;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let idle = InFlight {
            requests: 0,
            accept_queue: Some(0),
        };
        let mut traffic = Traffic::default();
        // (ms, the namespace's passive opens, what the namespace's table said of the
        // other listeners: unread outside a drain).
        let mut look = |ms, opens, others| {
            traffic.next(PortLook {
                at: at(ms),
                found: Some((idle, &[])),
                passive_opens: Some(opens),
                own_accepts: 0,
                others,
            })
        };
        // Running: the counter is not held against the port.
        assert_eq!(look(0, 10, Others::Unread).last_busy, None);
        assert_eq!(look(1000, 20, Others::Unread).last_busy, None);
        // The drain's first table is a baseline: what opened since the last look cannot
        // be explained later, so it is busy at once and not owed.
        assert_eq!(look(1100, 21, Others::Baseline).last_busy, Some(at(1100)));
        assert_eq!(look(1200, 21, Others::New(0)).last_busy, Some(at(1100)));
        // The sidecar's accepts, each in the table of the look that counted it: quiet.
        assert_eq!(look(1300, 22, Others::New(1)).last_busy, Some(at(1100)));
        // One accepted between the dump and the counter's read: busy for a look, then
        // explained by the next dump, and the mark goes.
        assert_eq!(look(1400, 24, Others::New(1)).last_busy, Some(at(1400)));
        let got = look(1500, 25, Others::New(2));
        assert_eq!(
            (got.last_busy, got.namespace_counted),
            (Some(at(1100)), true)
        );
        // A sidecar's late one, then the app's connection opened and closed between two
        // looks as the late one is explained: the debt is not paid, busy at the later
        // look (where the app's open may have been).
        assert_eq!(look(1600, 26, Others::New(0)).last_busy, Some(at(1600)));
        assert_eq!(look(1700, 27, Others::New(1)).last_busy, Some(at(1700)));
        assert_eq!(look(1800, 27, Others::New(0)).last_busy, Some(at(1700)));
    }

    #[test]
    fn another_listeners_connection_counts_once_whichever_end_is_seen() {
        use inflight::{Ends, SockRecord};
        use netlink_packet_sock_diag::constants::{TCP_ESTABLISHED, TCP_LISTEN, TCP_TIME_WAIT};
        let addr = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        let sock = |state, local: &str, remote: &str| SockRecord {
            state,
            local_port: addr(local).port(),
            ends: Ends {
                local: addr(local),
                remote: addr(remote),
            },
            ..Default::default()
        };
        let sidecar = [8125];
        let mut others = OtherListeners::default();
        let listener = sock(TCP_LISTEN, "127.0.0.1:8125", "0.0.0.0:0");
        assert_eq!(
            others.new_connections(&[listener], &sidecar),
            Others::Baseline
        );
        // Open, both ends seen: one connection.
        let server = sock(TCP_ESTABLISHED, "127.0.0.1:8125", "127.0.0.1:40001");
        let client = sock(TCP_ESTABLISHED, "127.0.0.1:40001", "127.0.0.1:8125");
        assert_eq!(
            others.new_connections(&[listener, server, client], &sidecar),
            Others::New(1)
        );
        // Its client closed first: the client's end in TIME_WAIT, the server's gone.
        let closed = sock(TCP_TIME_WAIT, "127.0.0.1:40001", "127.0.0.1:8125");
        assert_eq!(
            others.new_connections(&[listener, closed], &sidecar),
            Others::New(0)
        );
        // One opened and closed between two looks, seen only by its client's TIME_WAIT
        // (a [::] listener's v4 client, canonical on both ends): new.
        let short = sock(TCP_TIME_WAIT, "127.0.0.1:40002", "127.0.0.1:8125");
        assert_eq!(
            others.new_connections(&[listener, closed, short], &sidecar),
            Others::New(1)
        );
        // A call out to a remote server on the same port number is not the sidecar's.
        let outbound = sock(TCP_ESTABLISHED, "10.0.0.5:40003", "10.1.2.3:8125");
        assert_eq!(
            others.new_connections(&[listener, closed, short, outbound], &sidecar),
            Others::New(0)
        );
        // From the pod's own address to itself: the sidecar's.
        let own = sock(TCP_TIME_WAIT, "10.0.0.5:40004", "10.0.0.5:8125");
        assert_eq!(
            others.new_connections(&[listener, own], &sidecar),
            Others::New(1)
        );
    }
}
