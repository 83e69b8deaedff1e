//! What the in-flight tests share: the request and answer the loopback tests exchange
//! (and the recorded fixtures hold), and the shorthand for the figures they expect.
#![forbid(unsafe_code)]

use netlink_packet_sock_diag::constants::TCP_LISTEN;

use super::count::{InFlight, SockRecord, TcpInfoFields};

pub const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
pub const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";

pub const fn info(received: u64, sent: u64, recv_ms: u32, sent_ms: u32) -> TcpInfoFields {
    TcpInfoFields {
        bytes_received: received,
        bytes_sent: sent,
        last_data_recv_ms: recv_ms,
        last_data_sent_ms: sent_ms,
    }
}

/// A listening socket with `queued` connections waiting and room for `backlog`.
pub fn listener(cookie: u64, queued: u32, backlog: u32) -> SockRecord {
    SockRecord {
        local_port: 0,
        state: TCP_LISTEN,
        inode: 7,
        rqueue: queued,
        wqueue: backlog,
        cookie,
        info: None,
        ends: Default::default(),
    }
}

/// Connections waiting in the accept queue, and nothing else.
pub fn queued(n: u64) -> InFlight {
    InFlight {
        requests: n,
        accept_queue: Some(n),
    }
}

/// Accepted connections with a request outstanding, the queue empty.
pub fn serving(requests: u64) -> InFlight {
    InFlight {
        requests,
        accept_queue: Some(0),
    }
}

impl InFlight {
    pub fn with_queue(self, queue: u64) -> Self {
        InFlight {
            accept_queue: Some(queue),
            ..self
        }
    }
}
