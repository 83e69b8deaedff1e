//! The sock_diag wire format: the dump requests' bytes (per family and legacy, with the
//! kernel-side port filter), the reply parser, and the offsets read in `tcp_info`.
#![forbid(unsafe_code)]

use std::io;

use netlink_packet_core::{
    DoneBuffer, ErrorBuffer, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NlasIterator, Parseable,
    NLMSG_DONE, NLMSG_ERROR, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::constants::{
    AF_INET6, INET_DIAG_INFO, IPPROTO_TCP, SOCK_DIAG_BY_FAMILY,
};
use netlink_packet_sock_diag::inet::{
    ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags,
};
use netlink_packet_sock_diag::SockDiagMessage;

use super::count::{Ends, SockRecord, TcpInfoFields};

/// Where a dump stands after one datagram of replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Progress {
    More,
    Done,
}

/// Byte offsets in `struct tcp_info` (linux/tcp.h; the layout only ever grows at the end,
/// so a shorter reply from an older kernel is a prefix of it).
///
/// Architecture-neutral: netlink and its payloads are in host byte order, so
/// every multi-byte field here is read and written with `from_ne_bytes`/`to_ne_bytes`
/// (the ports of `inet_diag_sockid` are network order, decoded by the crate); and every
/// fixed part read by offset (`nlmsghdr`, `inet_diag_msg`, `inet_diag_req`, `tcp_info`)
/// is made of __u8/__u16/__u32/__u64 at naturally aligned offsets, so it has no padding
/// that differs between x86_64 and aarch64. The recorded fixtures of the tests were taken
/// on a little-endian x86_64 host; aarch64 Linux is little-endian too (checked there).
mod tcp_info {
    pub const LAST_DATA_SENT: usize = 44;
    pub const LAST_DATA_RECV: usize = 52;
    pub const BYTES_ACKED: usize = 120; // Linux 4.1
    pub const BYTES_RECEIVED: usize = 128; // Linux 4.1
    pub const BYTES_SENT: usize = 200; // Linux 4.19
}

/// `sizeof(struct inet_diag_msg)`: the fixed part of each reply, the attributes follow.
const INET_DIAG_MSG_LEN: usize = 72;
/// `INET_DIAG_REQ_BYTECODE` (linux/inet_diag.h): the request attribute carrying a filter.
const INET_DIAG_REQ_BYTECODE: u16 = 1;
/// `INET_DIAG_BC_S_EQ`: the socket's local port equals the operand (Linux 4.16).
const INET_DIAG_BC_S_EQ: u8 = 11;
/// `TCPDIAG_GETSOCK` (linux/inet_diag.h): the legacy dump request of TCP sockets, body a
/// `struct inet_diag_req`; the kernel stamps its replies with this type too.
const TCPDIAG_GETSOCK: u16 = 18;
/// `sizeof(struct inet_diag_req)`: family, src_len, dst_len, ext (1 byte each), then
/// `struct inet_diag_sockid` (48), `idiag_states` and `idiag_dbs` (4 each).
const INET_DIAG_REQ_LEN: usize = 60;

/// Appends the records on `port` found in one datagram of sock_diag replies to `out`, and
/// tells whether the dump is over. Messages of another sequence number (a dump given up
/// earlier) are skipped; a kernel error ends the dump as an error.
///
/// The fixed header goes through the crate's `InetResponseHeader`; the attributes are
/// walked with the crate's `NlasIterator` but `tcp_info` is read here, by offset: the
/// crate's `TcpInfo` rejects the shorter `tcp_info` of kernels before 5.x (and without its
/// `rich_nlas` feature copies every attribute into a `Vec`), while this reads a prefix
/// without allocating.
pub(super) fn parse_reply(
    datagram: &[u8],
    port: u16,
    seq: u32,
    out: &mut Vec<SockRecord>,
) -> io::Result<Progress> {
    let mut rest = datagram;
    while !rest.is_empty() {
        let message = NetlinkBuffer::new_checked(rest).map_err(malformed)?;
        let length = message.length() as usize;
        if message.sequence_number() == seq {
            let payload = message.payload();
            match message.message_type() {
                NLMSG_DONE => {
                    // A dump's DONE carries 0, or the error that cut it short.
                    let code = DoneBuffer::new_checked(payload).map_err(malformed)?.code();
                    if code < 0 {
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                    return Ok(Progress::Done);
                }
                NLMSG_ERROR => {
                    let error = ErrorBuffer::new_checked(payload).map_err(malformed)?;
                    if let Some(code) = error.code() {
                        return Err(io::Error::from_raw_os_error(-code.get()));
                    }
                }
                // The same `inet_diag_msg` under either request's type.
                SOCK_DIAG_BY_FAMILY | TCPDIAG_GETSOCK => {
                    if let Some(record) = parse_socket(payload, port)? {
                        out.push(record);
                    }
                }
                _ => {}
            }
        }
        // Messages are 4-byte aligned within a datagram.
        let step = (length + 3) & !3;
        rest = rest.get(step..).unwrap_or_default();
    }
    Ok(Progress::More)
}

/// One `inet_diag_msg` with its attributes; `None` when the socket is on another port.
fn parse_socket(payload: &[u8], port: u16) -> io::Result<Option<SockRecord>> {
    if payload.len() < INET_DIAG_MSG_LEN {
        return Err(malformed(format!(
            "inet_diag_msg of {} bytes",
            payload.len()
        )));
    }
    let header = InetResponseHeader::parse(&payload[..INET_DIAG_MSG_LEN]).map_err(malformed)?;
    // Port 0: every port (a dump of the whole namespace).
    if port != 0 && header.socket_id.source_port != port {
        return Ok(None);
    }
    let mut info = None;
    for attribute in NlasIterator::new(&payload[INET_DIAG_MSG_LEN..]) {
        let attribute = attribute.map_err(malformed)?;
        if attribute.kind() == INET_DIAG_INFO {
            info = parse_tcp_info(attribute.value());
        }
    }
    let id = &header.socket_id;
    Ok(Some(SockRecord {
        state: header.state,
        inode: header.inode,
        rqueue: header.recv_queue,
        wqueue: header.send_queue,
        // Two host-order u32s in the kernel; only equality matters here.
        cookie: u64::from_ne_bytes(id.cookie),
        info,
        local_port: id.source_port,
        ends: Ends {
            local: std::net::SocketAddr::new(id.source_address.to_canonical(), id.source_port),
            remote: std::net::SocketAddr::new(
                id.destination_address.to_canonical(),
                id.destination_port,
            ),
        },
    }))
}

fn parse_tcp_info(value: &[u8]) -> Option<TcpInfoFields> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(value.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(value.get(at..at + 8)?.try_into().ok()?))
    };
    Some(TcpInfoFields {
        last_data_sent_ms: u32_at(tcp_info::LAST_DATA_SENT)?,
        last_data_recv_ms: u32_at(tcp_info::LAST_DATA_RECV)?,
        // Before 4.1 neither exists: 0 leaves the decision to the queue and the clocks.
        bytes_received: u64_at(tcp_info::BYTES_RECEIVED).unwrap_or(0),
        bytes_sent: u64_at(tcp_info::BYTES_SENT)
            .or_else(|| u64_at(tcp_info::BYTES_ACKED))
            .unwrap_or(0),
    })
}

pub(super) fn malformed(err: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed sock_diag reply: {err}"),
    )
}

/// The states a dump asks for: those the count reads (LISTEN, ESTABLISHED, CLOSE_WAIT),
/// and the closing ones, in which a connection to the port that opened and closed
/// between two looks is still found (a server that closes first keeps TIME_WAIT for a
/// minute): the drain's quiet rule counts such a connection as the port's own, where
/// the network namespace's counter cannot tell it from a sidecar's.
pub(super) fn dump_states() -> StateFlags {
    StateFlags::LISTEN
        | StateFlags::ESTABLISHED
        | StateFlags::CLOSE_WAIT
        | StateFlags::FIN_WAIT1
        | StateFlags::FIN_WAIT2
        | StateFlags::TIME_WAIT
        | StateFlags::LAST_ACK
        | StateFlags::CLOSING
}

/// The dump request for one address family: `inet_diag_req_v2` for TCP sockets in the
/// states the count reads, with `tcp_info`, and with `filter` a kernel-side filter on the
/// local port.
///
/// The crate's `InetRequest` has no room for attributes, so the crate emits the netlink
/// header and the fixed request and the `INET_DIAG_REQ_BYTECODE` attribute is appended
/// here, plain bytes, with the message length fixed up. The program is one
/// `inet_diag_bc_op { code: S_EQ, yes: 8, no: 12 }` followed by the operand op whose `no`
/// holds the port in host order: "yes" lands exactly on the end of the program (accept),
/// "no" jumps 4 bytes past it (reject). The same filter `ss 'sport = :PORT'` sends.
///
/// Why filter in the kernel, and why one legacy request rather than one per family
/// (bench/sock_diag_ways.rs, this machine, release build, median µs per `sample()`, both
/// families; N loopback pairs = 2N ESTABLISHED sockets, no TIME_WAIT left over):
///
/// | pairs  | port      | legacy, filtered | legacy, unfiltered | per family, filtered | per family, unfiltered | /proc/net/tcp{,6} |
/// |--------|-----------|-----------------:|-------------------:|---------------------:|-----------------------:|------------------:|
/// | 100    | elsewhere |              170 |                270 |                  350 |                    440 |             6,900 |
/// | 100    | on it     |              240 |                290 |                  420 |                    470 |                   |
/// | 1,000  | elsewhere |              260 |              1,270 |                  495 |                  1,520 |             9,800 |
/// | 1,000  | on it     |              780 |              1,280 |                1,015 |                  1,530 |                   |
/// | 10,000 | elsewhere |            1,190 |             18,000 |                2,200 |                 19,000 |            41,000 |
/// | 10,000 | on it     |           10,100 |             18,100 |               11,600 |                 19,400 |                   |
///
/// Unfiltered, every socket of the network namespace is copied out with its tcp_info
/// and parsed here. The floor is the kernel walking its whole listening and established
/// hash tables (262,144 established buckets here, shared by all namespaces unless
/// `tcp_child_ehash_entries` is set, and every TIME_WAIT socket in them): once for the
/// legacy request, once per family otherwise, so the legacy request halves it.
/// What a request's kernel-side filter keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Filter<'a> {
    /// Every socket.
    None,
    /// Sockets whose local port is this one.
    Local(u16),
    /// Sockets whose local or remote port is one of these (the other listeners').
    Either(&'a [u16]),
}

impl Filter<'_> {
    fn append(self, bytes: &mut Vec<u8>) {
        match self {
            Filter::None => {}
            Filter::Local(port) => append_port_filter(bytes, port),
            Filter::Either(ports) => append_ports_filter(bytes, ports),
        }
    }
}

pub(super) fn build_request(family: u8, port: u16, filter: bool) -> Vec<u8> {
    build_request_filtered(
        family,
        if filter {
            Filter::Local(port)
        } else {
            Filter::None
        },
    )
}

pub(super) fn build_request_filtered(family: u8, filter: Filter) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let request = InetRequest {
        family,
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::INFO,
        states: dump_states(),
        socket_id: if family == AF_INET6 {
            SocketId::new_v6()
        } else {
            SocketId::new_v4()
        },
    };
    let mut message = NetlinkMessage::new(header, SockDiagMessage::InetRequest(request).into());
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    filter.append(&mut bytes);
    bytes
}

/// The legacy dump request, both families at once: a netlink header of type
/// `TCPDIAG_GETSOCK` and a `struct inet_diag_req`, plain bytes (the crate has no type for
/// it), asking for the same states and `tcp_info`, with the same filter when `filter`.
///
/// The kernel (net/ipv4/inet_diag.c, `inet_diag_rcv_msg_compat` and
/// `inet_diag_dump_compat`, since 3.3) turns it into an `inet_diag_req_v2` of protocol TCP
/// and family AF_UNSPEC, taking `idiag_ext`, `idiag_states` and the socket id from the
/// request and the bytecode from its attributes: the TCP dump then walks the listening
/// and established hash tables once and keeps sockets of either family, where two
/// per-family requests walk both tables twice. The replies are the same `inet_diag_msg`
/// with its attributes, only typed `TCPDIAG_GETSOCK` (the kernel copies the request's type).
/// `idiag_family` is left AF_UNSPEC (the kernel ignores it in a dump), as are the socket id
/// (no address or port condition) and `idiag_dbs` (unused).
pub(super) fn build_legacy_request(port: u16, filter: bool) -> Vec<u8> {
    build_legacy_request_filtered(if filter {
        Filter::Local(port)
    } else {
        Filter::None
    })
}

pub(super) fn build_legacy_request_filtered(filter: Filter) -> Vec<u8> {
    let mut bytes = vec![0u8; NETLINK_HEADER_LEN + INET_DIAG_REQ_LEN];
    let body = &mut bytes[NETLINK_HEADER_LEN..];
    body[3] = ExtensionFlags::INFO.bits();
    let states = dump_states();
    body[52..56].copy_from_slice(&states.bits().to_ne_bytes());
    let total = bytes.len() as u32;
    let mut header = NetlinkBuffer::new(&mut bytes[..]);
    header.set_length(total);
    header.set_message_type(TCPDIAG_GETSOCK);
    header.set_flags(NLM_F_REQUEST | NLM_F_DUMP);
    filter.append(&mut bytes);
    bytes
}

/// `INET_DIAG_BC_D_EQ`: the socket's remote port equals the operand (Linux 4.16).
const INET_DIAG_BC_D_EQ: u8 = 12;
/// `INET_DIAG_BC_JMP`: jump by the op's `no`, always.
const INET_DIAG_BC_JMP: u8 = 1;

/// The most ports one request's filter names (24 bytes of program each).
pub(super) const FILTER_PORTS_MAX: usize = 256;

/// Appends the `INET_DIAG_REQ_BYTECODE` attribute "the local or the remote port is one
/// of `ports`" to a request, and fixes up the message length.
///
/// A comparison's `yes` is one byte in the kernel's `struct inet_diag_bc_op` (code,
/// yes, no: 1, 1, 2 bytes), too short to reach the end of a long program, so each
/// comparison (S_EQ or D_EQ with its operand op, 8 bytes) is followed by a JMP (4
/// bytes) whose two-byte `no` reaches the end (accept): a match steps onto the JMP
/// (`yes` 8), a miss over it onto the next comparison (`no` 12), and the last miss past
/// the end (`no` 16: reject). Every op lies on the chain of `yes` jumps from the start,
/// as the kernel's audit (`inet_diag_bc_audit`, `valid_cc`) requires of jump targets.
pub(super) fn append_ports_filter(bytes: &mut Vec<u8>, ports: &[u16]) {
    let tests: Vec<(u8, u16)> = ports
        .iter()
        .flat_map(|&p| [(INET_DIAG_BC_S_EQ, p), (INET_DIAG_BC_D_EQ, p)])
        .collect();
    let len = tests.len() * 12;
    let mut program = Vec::with_capacity(len);
    for (i, (code, port)) in tests.iter().enumerate() {
        let last = i + 1 == tests.len();
        let mut compare = [*code, 8, 0, 0, 0, 0, 0, 0];
        compare[2..4].copy_from_slice(&(if last { 16u16 } else { 12 }).to_ne_bytes());
        compare[6..8].copy_from_slice(&port.to_ne_bytes());
        program.extend_from_slice(&compare);
        // The JMP, 8 bytes into this comparison's 12: to the end.
        let to_end = (len - (i * 12 + 8)) as u16;
        let mut jump = [INET_DIAG_BC_JMP, 4, 0, 0];
        jump[2..4].copy_from_slice(&to_end.to_ne_bytes());
        program.extend_from_slice(&jump);
    }
    append_bytecode(bytes, &program);
}

/// Appends `program` as the request's `INET_DIAG_REQ_BYTECODE` attribute, and sets the
/// message's length to its new end.
fn append_bytecode(bytes: &mut Vec<u8>, program: &[u8]) {
    let attribute_len = 4 + program.len() as u16;
    bytes.extend_from_slice(&attribute_len.to_ne_bytes());
    bytes.extend_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
    bytes.extend_from_slice(program);
    let total = bytes.len() as u32;
    NetlinkBuffer::new(&mut bytes[..]).set_length(total);
}

/// `sizeof(struct nlmsghdr)`.
pub(super) const NETLINK_HEADER_LEN: usize = 16;

/// Appends the `INET_DIAG_REQ_BYTECODE` attribute "local port is `port`" to a request
/// whose length is 4-byte aligned, and fixes up the message length.
fn append_port_filter(bytes: &mut Vec<u8>, port: u16) {
    let program: [u8; 8] = {
        let mut op = [INET_DIAG_BC_S_EQ, 8, 0, 0, 0, 0, 0, 0];
        op[2..4].copy_from_slice(&12u16.to_ne_bytes());
        op[6..8].copy_from_slice(&port.to_ne_bytes());
        op
    };
    append_bytecode(bytes, &program);
}

#[cfg(test)]
mod tests {
    use super::super::count::{count, InFlight};
    use super::super::testing::{info, serving, ANSWER, REQUEST};
    use super::*;
    use netlink_packet_sock_diag::constants::{
        AF_INET, TCP_CLOSE_WAIT, TCP_ESTABLISHED, TCP_LISTEN,
    };
    use std::net::TcpListener;

    #[test]
    fn tcp_info_prefixes_of_older_kernels() {
        let mut full = vec![0u8; 232];
        full[44..48].copy_from_slice(&10u32.to_ne_bytes());
        full[52..56].copy_from_slice(&20u32.to_ne_bytes());
        full[120..128].copy_from_slice(&100u64.to_ne_bytes());
        full[128..136].copy_from_slice(&78u64.to_ne_bytes());
        full[200..208].copy_from_slice(&300u64.to_ne_bytes());
        assert_eq!(parse_tcp_info(&full), Some(info(78, 300, 20, 10)));
        // Before 4.19: no bytes_sent, bytes_acked stands in.
        assert_eq!(parse_tcp_info(&full[..192]), Some(info(78, 100, 20, 10)));
        // Before 4.1: the clocks only.
        assert_eq!(parse_tcp_info(&full[..104]), Some(info(0, 0, 20, 10)));
        assert_eq!(parse_tcp_info(&full[..40]), None);
    }

    #[test]
    fn tcp_info_offsets_match_the_c_struct() {
        use std::mem::offset_of;
        assert_eq!(
            offset_of!(libc::tcp_info, tcpi_last_data_sent),
            tcp_info::LAST_DATA_SENT
        );
        assert_eq!(
            offset_of!(libc::tcp_info, tcpi_last_data_recv),
            tcp_info::LAST_DATA_RECV
        );
    }

    #[test]
    fn request_carries_the_port_filter() {
        let plain = build_request(AF_INET, 8080, false);
        let filtered = build_request(AF_INET6, 8080, true);
        // nlmsghdr (16) + inet_diag_req_v2 (56), then nlattr (4) + two ops (8).
        assert_eq!(plain.len(), 72);
        assert_eq!(filtered.len(), 84);
        assert_eq!(NetlinkBuffer::new(&filtered[..]).length(), 84);
        assert_eq!(
            NetlinkBuffer::new(&filtered[..]).message_type(),
            SOCK_DIAG_BY_FAMILY
        );
        assert_eq!(filtered[16], AF_INET6);
        assert_eq!(filtered[17], IPPROTO_TCP);
        assert_eq!(filtered[18], 1 << (INET_DIAG_INFO - 1));
        let states = u32::from_ne_bytes(filtered[20..24].try_into().unwrap());
        assert_eq!(states, dump_states().bits());
        assert_eq!(
            &filtered[72..84],
            &[12, 0, 1, 0, 11, 8, 12, 0, 0, 0, 0x90, 0x1f][..],
            "nlattr {{12, BYTECODE}}, op {{S_EQ, 8, 12}}, op {{0, 0, 8080}}"
        );
    }

    #[test]
    fn legacy_request_layout() {
        let plain = build_legacy_request(8080, false);
        let filtered = build_legacy_request(8080, true);
        // nlmsghdr (16) + inet_diag_req (60), then nlattr (4) + two ops (8).
        assert_eq!(plain.len(), 76);
        assert_eq!(filtered.len(), 88);
        let header = NetlinkBuffer::new(&filtered[..]);
        assert_eq!(header.length(), 88);
        assert_eq!(header.message_type(), TCPDIAG_GETSOCK);
        assert_eq!(header.flags(), NLM_F_REQUEST | NLM_F_DUMP);
        let body = &filtered[16..76];
        assert_eq!(
            &body[0..3],
            &[0, 0, 0],
            "family AF_UNSPEC, no address lengths"
        );
        assert_eq!(body[3], 1 << (INET_DIAG_INFO - 1));
        assert!(body[4..52].iter().all(|&b| b == 0), "any socket id");
        let states = u32::from_ne_bytes(body[52..56].try_into().unwrap());
        assert_eq!(states, dump_states().bits());
        assert_eq!(&body[56..60], &[0; 4], "idiag_dbs");
        // The same filter as the per-family request's.
        assert_eq!(&filtered[76..], &build_request(AF_INET, 8080, true)[72..]);
        assert_eq!(&plain[4..], &filtered[4..76], "the same but for the length");
        assert_eq!(NetlinkBuffer::new(&plain[..]).length(), 76);
    }

    // ---- The requests, on this machine's kernel ----

    /// The raw reply datagrams of one dump, concatenated (each ends 4-byte aligned, so
    /// the concatenation is still a stream of netlink messages).
    fn raw_dump(request: &mut [u8]) -> Vec<u8> {
        use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};
        let socket = Socket::new(NETLINK_SOCK_DIAG).unwrap();
        socket.connect(&SocketAddr::new(0, 0)).unwrap();
        NetlinkBuffer::new(&mut request[..]).set_sequence_number(1);
        socket.send(request, 0).unwrap();
        let mut all = Vec::new();
        let mut buf = vec![0; 32 * 1024];
        loop {
            let n = socket.recv(&mut &mut buf[..], 0).unwrap();
            all.extend_from_slice(&buf[..n]);
            match parse_reply(&buf[..n], 0, 1, &mut Vec::new()) {
                Ok(Progress::More) => {}
                Ok(Progress::Done) | Err(_) => return all,
            }
        }
    }

    /// The local port of the first socket in a recorded dump (ports are ephemeral).
    fn first_port(dump: &[u8]) -> u16 {
        let message = NetlinkBuffer::new_checked(dump).unwrap();
        InetResponseHeader::parse(&message.payload()[..INET_DIAG_MSG_LEN])
            .unwrap()
            .socket_id
            .source_port
    }

    fn parse_all(dump: &[u8], port: u16) -> io::Result<(Progress, Vec<SockRecord>)> {
        let mut records = Vec::new();
        let progress = parse_reply(dump, port, 1, &mut records)?;
        Ok((progress, records))
    }

    #[test]
    fn the_kernel_filter_drops_other_ports() {
        let ours = TcpListener::bind("127.0.0.1:0").unwrap();
        let neighbour = TcpListener::bind("127.0.0.1:0").unwrap();
        let (port, other) = (
            ours.local_addr().unwrap().port(),
            neighbour.local_addr().unwrap().port(),
        );
        let filtered = raw_dump(&mut build_request(AF_INET, port, true));
        let unfiltered = raw_dump(&mut build_request(AF_INET, port, false));
        assert_eq!(parse_all(&filtered, port).unwrap().1.len(), 1);
        assert_eq!(
            parse_all(&filtered, other).unwrap().1.len(),
            0,
            "filtered in the kernel"
        );
        assert_eq!(parse_all(&unfiltered, other).unwrap().1.len(), 1);
        let legacy = raw_dump(&mut build_legacy_request(port, true));
        assert_eq!(parse_all(&legacy, port).unwrap().1.len(), 1);
        assert_eq!(parse_all(&legacy, other).unwrap().1.len(), 0);
        let legacy = raw_dump(&mut build_legacy_request(port, false));
        assert_eq!(parse_all(&legacy, other).unwrap().1.len(), 1);
    }

    // ---- Recorded replies (tests/fixtures/sock_diag, README there) ----

    // The fixtures are little-endian host-order bytes (recorded on x86_64); aarch64 Linux
    // is little-endian as well, and a big-endian target would have to record its own.
    const _: () = assert!(cfg!(target_endian = "little"));
    const V4: &[u8] = include_bytes!("../../tests/fixtures/sock_diag/v4_queue_and_requests.bin");
    const V6: &[u8] = include_bytes!("../../tests/fixtures/sock_diag/v6_dual_stack.bin");
    const EINVAL: &[u8] = include_bytes!("../../tests/fixtures/sock_diag/bad_filter_einval.bin");

    #[test]
    fn parses_a_recorded_ipv4_dump() {
        let port = first_port(V4);
        let (progress, records) = parse_all(V4, port).unwrap();
        assert_eq!(progress, Progress::Done);
        assert_eq!(records.len(), 6, "{records:#?}");
        assert_eq!(records_with(&records, TCP_LISTEN).len(), 1);
        assert_eq!(records_with(&records, TCP_LISTEN)[0].rqueue, 2);
        assert_eq!(records_with(&records, TCP_LISTEN)[0].wqueue, 128);
        // The queued pair, dumped as ESTABLISHED without an inode, one with its request.
        let queued: Vec<_> = records.iter().filter(|r| r.inode == 0).collect();
        assert_eq!(queued.len(), 2);
        assert!(queued.iter().all(|r| r.state == TCP_ESTABLISHED));
        assert_eq!(
            queued.iter().map(|r| r.rqueue).max(),
            Some(REQUEST.len() as u32)
        );
        // The half-closed one: its request and the FIN unread.
        let close_wait = records_with(&records, TCP_CLOSE_WAIT);
        assert_eq!(close_wait.len(), 1);
        assert_eq!(close_wait[0].rqueue, REQUEST.len() as u32 + 1);
        // The answered one.
        let idle: Vec<_> = records
            .iter()
            .filter(|r| r.info.is_some_and(|i| i.bytes_sent == ANSWER.len() as u64))
            .collect();
        assert_eq!(idle.len(), 1);
        assert_eq!(idle[0].info.unwrap().bytes_received, REQUEST.len() as u64);
        assert!(records.iter().all(|r| r.info.is_some()));
        assert_eq!(count(&records), serving(4).with_queue(2));
        // Records of another port are left out (the reader's fallback without the filter).
        assert_eq!(parse_all(V4, port.wrapping_add(1)).unwrap().1, vec![]);
        // A stale dump (another sequence number) is skipped whole, DONE included.
        let mut records = Vec::new();
        assert_eq!(
            parse_reply(V4, port, 2, &mut records).unwrap(),
            Progress::More
        );
        assert_eq!(records, vec![]);
    }

    #[test]
    fn parses_a_recorded_dual_stack_ipv6_dump() {
        let port = first_port(V6);
        let (progress, records) = parse_all(V6, port).unwrap();
        assert_eq!(progress, Progress::Done);
        assert_eq!(records.len(), 4, "{records:#?}");
        assert_eq!(count(&records), serving(3).with_queue(2));
    }

    const LEGACY: &[u8] = include_bytes!("../../tests/fixtures/sock_diag/legacy_both_families.bin");

    #[test]
    fn parses_a_recorded_legacy_dump_of_both_families() {
        let port = first_port(LEGACY);
        let (progress, records) = parse_all(LEGACY, port).unwrap();
        assert_eq!(progress, Progress::Done);
        assert_eq!(records.len(), 6, "{records:#?}");
        assert_eq!(records_with(&records, TCP_LISTEN).len(), 2);
        assert!(records.iter().all(|r| r.info.is_some()));
        assert_eq!(
            count(&records),
            InFlight {
                requests: 4,
                accept_queue: Some(2),
            }
        );
        // One dump, both families, every socket message typed as the request was.
        let mut families = Vec::new();
        let mut rest = LEGACY;
        while let Ok(message) = NetlinkBuffer::new_checked(rest) {
            if message.message_type() == NLMSG_DONE {
                break;
            }
            assert_eq!(message.message_type(), TCPDIAG_GETSOCK);
            families.push(message.payload()[0]);
            rest = &rest[(message.length() as usize + 3) & !3..];
        }
        families.dedup();
        families.sort();
        families.dedup();
        assert_eq!(families, vec![AF_INET, AF_INET6]);
    }

    #[test]
    fn a_kernel_error_is_an_io_error() {
        let err = parse_all(EINVAL, 1).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn damaged_replies_are_errors_not_panics() {
        let port = first_port(V4);
        for len in 0..V4.len() {
            // A cut anywhere: an error, or fewer records, never a panic.
            let _ = parse_all(&V4[..len], port);
        }
        let mut lying = V4.to_vec();
        lying[0..4].copy_from_slice(&(V4.len() as u32 + 4).to_ne_bytes());
        assert!(parse_all(&lying, port).is_err());
        let mut short_msg = V4.to_vec();
        short_msg[0..4].copy_from_slice(&40u32.to_ne_bytes());
        assert!(parse_all(&short_msg, port).is_err());
    }

    fn records_with(records: &[SockRecord], state: u8) -> Vec<SockRecord> {
        records
            .iter()
            .filter(|r| r.state == state)
            .copied()
            .collect()
    }
}
