//! The counting rule, pure: which of the port's sockets in one dump are requests in
//! flight, and what reached the port between two dumps. A dump's sockets come in as
//! `SockRecord`s (diag.rs parses them out of the kernel's replies).
#![forbid(unsafe_code)]

use netlink_packet_sock_diag::constants::{TCP_CLOSE_WAIT, TCP_ESTABLISHED, TCP_LISTEN};

/// One sample of the port's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// Connections waiting to be accepted plus accepted ones with a request outstanding.
    pub requests: u64,
    /// Connections waiting in the listeners' accept queues; `None` while nothing listens.
    pub accept_queue: Option<u64>,
}

/// The fields of the kernel's `struct tcp_info` that the rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfoFields {
    pub bytes_received: u64,
    /// `tcpi_bytes_sent`, or `tcpi_bytes_acked` from a kernel older than 4.19.
    pub bytes_sent: u64,
    /// Milliseconds since data last arrived.
    pub last_data_recv_ms: u32,
    /// Milliseconds since data was last sent.
    pub last_data_sent_ms: u32,
}

/// Both ends of a socket, as its dump gives them (the remote one unspecified for a
/// listener). IPv4-mapped IPv6 addresses (a `[::]` listener's IPv4 clients) are shown as
/// IPv4, so that the two ends of one loopback connection read alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ends {
    pub local: std::net::SocketAddr,
    pub remote: std::net::SocketAddr,
}

impl Default for Ends {
    fn default() -> Ends {
        let none = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        Ends {
            local: none,
            remote: none,
        }
    }
}

/// One socket of the dump, as much of it as the count needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SockRecord {
    /// `TCP_LISTEN`, `TCP_ESTABLISHED` or `TCP_CLOSE_WAIT` (the states asked for).
    pub state: u8,
    /// 0 while the connection has no socket file yet: it is still in the accept queue.
    pub inode: u32,
    /// A listener: connections in its accept queue. Else: bytes received, not yet read.
    pub rqueue: u32,
    /// A listener: its backlog. Else: bytes sent, not yet acknowledged.
    pub wqueue: u32,
    /// The kernel's socket cookie: the same socket keeps it from the accept queue to
    /// its close, and no other socket has it meanwhile.
    pub cookie: u64,
    pub info: Option<TcpInfoFields>,
    /// The socket's local port (the asked port's, unless the dump was the namespace's).
    pub local_port: u16,
    pub ends: Ends,
}

/// The in-flight figure of one dump of the port's sockets.
///
/// The kernel dumps a connection that finished the handshake but is still in the accept
/// queue twice over: in the listener's `idiag_rqueue`, and as an ESTABLISHED (or
/// CLOSE_WAIT) socket of its own whose `idiag_inode` is 0, as no socket file exists for it
/// until `accept()`. So connected sockets count only with an inode, and the queue counts
/// through the listener: each connection once (checked against real sockets in the tests).
///
/// Connections count whether or not a listener is left: an app that closed its listener to
/// drain still has the requests it accepted to answer.
pub fn count(sockets: &[SockRecord]) -> InFlight {
    let mut accept_queue: Option<u64> = None;
    let mut outstanding = 0u64;
    for socket in sockets {
        match socket.state {
            // Several listeners on the port (SO_REUSEPORT, or IPv4 beside IPv6): summed.
            TCP_LISTEN => *accept_queue.get_or_insert(0) += u64::from(socket.rqueue),
            TCP_ESTABLISHED | TCP_CLOSE_WAIT
                if socket.inode != 0 && has_request_outstanding(socket) =>
            {
                outstanding += 1
            }
            _ => {}
        }
    }
    InFlight {
        requests: accept_queue.unwrap_or(0) + outstanding,
        accept_queue,
    }
}

/// What reached the port between two dumps (the drain's "quiet" rule):
/// connections the previous dump did not have, and whether bytes came in on one it had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Arrived {
    pub connections: u64,
    pub bytes: bool,
}

/// Compares a dump with the previous one (`seen`: each connection's cookie and bytes
/// received, updated in place). The first dump (`seen` empty and `first`) is the
/// baseline: nothing counts as arrived. A connection that opened and closed between two
/// dumps is not here: the namespace's passive-open counter tells of it
/// (metrics/traffic.rs).
pub fn arrivals(
    seen: &mut std::collections::HashMap<u64, u64>,
    first: bool,
    sockets: &[SockRecord],
) -> Arrived {
    let mut arrived = Arrived::default();
    let mut now = std::collections::HashMap::with_capacity(sockets.len());
    for socket in sockets {
        // Every connection state counts for arrivals: one already closing (TIME_WAIT,
        // FIN_WAIT, LAST_ACK, CLOSING) reached the port since the last look as surely
        // as an established one.
        if socket.state == TCP_LISTEN {
            continue;
        }
        let received = socket.info.map_or(0, |i| i.bytes_received);
        match seen.get(&socket.cookie) {
            None => arrived.connections += 1,
            Some(before) if received > *before => arrived.bytes = true,
            Some(_) => {}
        }
        now.insert(socket.cookie, received);
    }
    *seen = now;
    if first {
        Arrived::default()
    } else {
        arrived
    }
}

/// A request is outstanding when the app has bytes it has not read, or has read some and
/// answered none, or data came in after it last answered. An idle keep-alive connection
/// (its last answer sent after its last request came) has none. A client that sent its
/// request and shut its side (CLOSE_WAIT) is judged the same way.
///
/// Limits of reading this from outside the app: the clocks tick in jiffies, so a request
/// read within a jiffy of the previous answer on the same connection goes unseen; and the
/// unread count includes a FIN, so a half-closed connection whose app has answered but not
/// yet read the end of stream still counts.
fn has_request_outstanding(socket: &SockRecord) -> bool {
    if socket.rqueue > 0 {
        return true;
    }
    match socket.info {
        // Both are "milliseconds ago": smaller is more recent.
        Some(info) => {
            (info.bytes_received > 0 && info.bytes_sent == 0)
                || info.last_data_recv_ms < info.last_data_sent_ms
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::info;
    use super::*;

    fn listening(rqueue: u32) -> SockRecord {
        SockRecord {
            local_port: 0,
            state: TCP_LISTEN,
            inode: 7,
            rqueue,
            wqueue: 128,
            cookie: 1,
            info: None,
            ends: Default::default(),
        }
    }

    fn connection(state: u8, inode: u32, rqueue: u32, info: TcpInfoFields) -> SockRecord {
        SockRecord {
            local_port: 0,
            state,
            inode,
            rqueue,
            wqueue: 0,
            cookie: 100 + u64::from(inode),
            info: Some(info),
            ends: Default::default(),
        }
    }

    #[test]
    fn arrivals_table() {
        let mut seen = std::collections::HashMap::new();
        let conn = |cookie: u64, received: u64| SockRecord {
            cookie,
            ..connection(TCP_ESTABLISHED, 9, 0, info(received, 10, 5, 5))
        };
        let arrived = |connections, bytes| Arrived { connections, bytes };
        // (dump, first, what arrived since the previous dump)
        let rows: Vec<(Vec<SockRecord>, bool, Arrived)> = vec![
            (vec![listening(0), conn(1, 50)], true, arrived(0, false)),
            (vec![listening(0), conn(1, 50)], false, arrived(0, false)),
            // Bytes on a known connection: a request on a keep-alive connection.
            (vec![listening(0), conn(1, 90)], false, arrived(0, true)),
            // A new connection, with or without bytes yet.
            (vec![conn(1, 90), conn(2, 0)], false, arrived(1, false)),
            (
                vec![conn(1, 90), conn(2, 0), conn(3, 40)],
                false,
                arrived(1, false),
            ),
            // One closed: nothing arrived.
            (vec![conn(2, 0), conn(3, 40)], false, arrived(0, false)),
            // A queued one (no inode yet) is a connection too; listeners are not.
            (
                vec![
                    listening(1),
                    conn(2, 0),
                    conn(3, 40),
                    SockRecord {
                        inode: 0,
                        ..conn(4, 0)
                    },
                ],
                false,
                arrived(1, false),
            ),
        ];
        for (i, (dump, first, want)) in rows.into_iter().enumerate() {
            assert_eq!(arrivals(&mut seen, first, &dump), want, "row {i}");
        }
    }

    const FRESH: TcpInfoFields = info(0, 0, 5, 5);
    const READ_UNANSWERED: TcpInfoFields = info(78, 0, 3, 9);
    const ANSWERED: TcpInfoFields = info(78, 512, 9, 3);
    const SECOND_REQUEST: TcpInfoFields = info(156, 512, 1, 3);
    const SAME_MS: TcpInfoFields = info(156, 512, 3, 3);

    #[test]
    fn count_table() {
        let none = InFlight {
            requests: 0,
            accept_queue: None,
        };
        let cases: Vec<(&str, Vec<SockRecord>, InFlight)> =
            vec![
            ("nothing on the port", vec![], none),
            (
                "an idle listener",
                vec![listening(0)],
                InFlight {
                    requests: 0,
                    accept_queue: Some(0),
                },
            ),
            (
                "queued connections count once: through the listener, not their inode-0 sockets",
                vec![
                    listening(2),
                    connection(TCP_ESTABLISHED, 0, 78, FRESH),
                    connection(TCP_ESTABLISHED, 0, 0, FRESH),
                ],
                InFlight {
                    requests: 2,
                    accept_queue: Some(2),
                },
            ),
            (
                "unread bytes",
                vec![listening(0), connection(TCP_ESTABLISHED, 9, 78, FRESH)],
                InFlight {
                    requests: 1,
                    accept_queue: Some(0),
                },
            ),
            (
                "read and not answered",
                vec![listening(0), connection(TCP_ESTABLISHED, 9, 0, READ_UNANSWERED)],
                InFlight {
                    requests: 1,
                    accept_queue: Some(0),
                },
            ),
            (
                "answered: idle keep-alive",
                vec![listening(0), connection(TCP_ESTABLISHED, 9, 0, ANSWERED)],
                InFlight {
                    requests: 0,
                    accept_queue: Some(0),
                },
            ),
            (
                "a second request read after the first answer",
                vec![listening(0), connection(TCP_ESTABLISHED, 9, 0, SECOND_REQUEST)],
                InFlight {
                    requests: 1,
                    accept_queue: Some(0),
                },
            ),
            (
                "received and sent in the same millisecond: answered",
                vec![listening(0), connection(TCP_ESTABLISHED, 9, 0, SAME_MS)],
                InFlight {
                    requests: 0,
                    accept_queue: Some(0),
                },
            ),
            (
                "a fresh accepted connection that sent nothing",
                vec![listening(0), connection(TCP_ESTABLISHED, 9, 0, FRESH)],
                InFlight {
                    requests: 0,
                    accept_queue: Some(0),
                },
            ),
            (
                "half-closed by the client: CLOSE_WAIT follows the same rule",
                vec![
                    listening(0),
                    connection(TCP_CLOSE_WAIT, 9, 78, FRESH),
                    connection(TCP_CLOSE_WAIT, 10, 0, READ_UNANSWERED),
                    connection(TCP_CLOSE_WAIT, 11, 0, ANSWERED),
                ],
                InFlight {
                    requests: 2,
                    accept_queue: Some(0),
                },
            ),
            (
                "SO_REUSEPORT and v4 beside v6: queues summed",
                vec![listening(3), listening(4), listening(0)],
                InFlight {
                    requests: 7,
                    accept_queue: Some(7),
                },
            ),
            (
                "listener closed to drain: accepted requests still count",
                vec![connection(TCP_ESTABLISHED, 9, 0, READ_UNANSWERED)],
                InFlight {
                    requests: 1,
                    accept_queue: None,
                },
            ),
            (
                "no tcp_info: only unread bytes tell",
                vec![
                    listening(1),
                    SockRecord {
                        local_port: 0,
                        state: TCP_ESTABLISHED,
                        inode: 9,
                        rqueue: 5,
                        wqueue: 0,
                        cookie: 9,
                        info: None,
                        ends: Default::default(),
                    },
                    SockRecord {
                        local_port: 0,
                        state: TCP_ESTABLISHED,
                        inode: 10,
                        rqueue: 0,
                        wqueue: 0,
                        cookie: 10,
                        info: None,
                        ends: Default::default(),
                    },
                ],
                InFlight {
                    requests: 2,
                    accept_queue: Some(1),
                },
            ),
        ];
        for (name, sockets, want) in cases {
            assert_eq!(count(&sockets), want, "{name}");
        }
    }
}
