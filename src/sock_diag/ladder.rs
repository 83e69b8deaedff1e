//! The ways of asking the kernel for the port's sockets, cheapest first, and when to
//! fall back from one to the next.
#![forbid(unsafe_code)]

use std::io;

use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6};
use netlink_packet_sock_diag::inet::StateFlags;

use super::diag::{
    build_legacy_request, build_legacy_request_filtered, build_request, build_request_filtered,
    Filter, FILTER_PORTS_MAX, NETLINK_HEADER_LEN,
};

/// How the reader asks for the sockets of both families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Request {
    /// One legacy `TCPDIAG_GETSOCK` dump: both families in one walk of the kernel's tables.
    Legacy,
    /// One `SOCK_DIAG_BY_FAMILY` dump per family, AF_INET then AF_INET6.
    PerFamily,
}

/// One way of asking: the request, and whether it carries the kernel-side port filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ask {
    pub(super) request: Request,
    pub(super) filter: bool,
}

impl Ask {
    /// The same requests asking for listening sockets only: the kernel then walks its
    /// listening hash alone (a few µs), not the established one (quiet.rs).
    pub(super) fn build_listeners_only(self, port: u16) -> Vec<Vec<u8>> {
        // The states word of the body: `idiag_states` of `inet_diag_req` (after the
        // four one-byte fields and the 48-byte socket id), or of `inet_diag_req_v2`
        // (after its four one-byte fields).
        let at = NETLINK_HEADER_LEN
            + match self.request {
                Request::Legacy => 52,
                Request::PerFamily => 4,
            };
        let mut requests = self.build(port);
        for request in &mut requests {
            request[at..at + 4].copy_from_slice(&StateFlags::LISTEN.bits().to_ne_bytes());
        }
        requests
    }

    /// The requests for the sockets whose local or remote port is one of `ports` (the
    /// namespace's other listeners' connections, both ends of those on loopback):
    /// None where this way has no kernel-side filter, or for more ports than one
    /// filter names (the caller then reads the whole table, or does without).
    pub(super) fn build_for_ports(self, ports: &[u16]) -> Option<Vec<Vec<u8>>> {
        if !self.filter || ports.is_empty() || ports.len() > FILTER_PORTS_MAX {
            return None;
        }
        let filter = Filter::Either(ports);
        Some(match self.request {
            Request::Legacy => vec![build_legacy_request_filtered(filter)],
            Request::PerFamily => vec![
                build_request_filtered(AF_INET, filter),
                build_request_filtered(AF_INET6, filter),
            ],
        })
    }

    pub(super) fn build(self, port: u16) -> Vec<Vec<u8>> {
        match self.request {
            Request::Legacy => vec![build_legacy_request(port, self.filter)],
            Request::PerFamily => vec![
                build_request(AF_INET, port, self.filter),
                build_request(AF_INET6, port, self.filter),
            ],
        }
    }
}

/// The ways of asking, cheapest first. A reader starts at the top and steps down one
/// each time the kernel refuses its request outright (EINVAL or EOPNOTSUPP in answer to
/// it), and stays there. A kernel before 4.16 refuses the filter (no S_EQ); one that no
/// longer takes the legacy request would refuse that (sock_diag answers EOPNOTSUPP while
/// no compat handler is registered, EINVAL to a type it does not know): dropping the
/// filter first tells the two apart, as the legacy request unfiltered still goes through
/// where only the filter was the trouble. Every way gives the same count.
pub(super) static LADDER: [Ask; 4] = [
    Ask {
        request: Request::Legacy,
        filter: true,
    },
    Ask {
        request: Request::Legacy,
        filter: false,
    },
    Ask {
        request: Request::PerFamily,
        filter: true,
    },
    Ask {
        request: Request::PerFamily,
        filter: false,
    },
];

/// The kernel refused the request itself, rather than failed while dumping.
pub(super) fn is_refusal(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_reads_cheapest_first_and_every_step_is_one_way() {
        assert_eq!(
            LADDER[0],
            Ask {
                request: Request::Legacy,
                filter: true
            }
        );
        assert_eq!(LADDER.last().unwrap().request, Request::PerFamily);
        assert!(!LADDER.last().unwrap().filter);
        for ask in LADDER {
            let requests = ask.build(8080);
            let want = if ask.request == Request::Legacy { 1 } else { 2 };
            assert_eq!(requests.len(), want, "{ask:?}");
        }
    }
}
