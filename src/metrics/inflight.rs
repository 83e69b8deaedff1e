//! In-flight requests on the app's TCP port, read from the kernel over sock_diag netlink
//! (README "Metrics"): the listeners' accept queues plus the connections with a request outstanding.
#![forbid(unsafe_code)]

use std::io;
use std::time::{Duration, Instant};

use netlink_packet_core::{
    DoneBuffer, ErrorBuffer, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NlasIterator, Parseable,
    NLMSG_DONE, NLMSG_ERROR, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::constants::{
    AF_INET, AF_INET6, INET_DIAG_INFO, IPPROTO_TCP, SOCK_DIAG_BY_FAMILY, TCP_CLOSE_WAIT,
    TCP_ESTABLISHED, TCP_LISTEN,
};
use netlink_packet_sock_diag::inet::{
    ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags,
};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
use nix::sys::time::TimeVal;

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

/// One socket of the dump, as much of it as the count needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// What reached the port between two dumps (the drain's "quiet" rule, issue #18):
/// connections the previous dump did not have, and whether bytes came in on one it had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Arrived {
    pub connections: u64,
    pub bytes: bool,
}

/// Compares a dump with the previous one (`seen`: each connection's cookie and bytes
/// received, updated in place). The first dump (`seen` empty and `first`) is the
/// baseline: nothing counts as arrived. A connection that opened and closed between two
/// dumps is not here: the namespace's passive-open counter tells of it (metrics/mod.rs).
pub fn arrivals(
    seen: &mut std::collections::HashMap<u64, u64>,
    first: bool,
    sockets: &[SockRecord],
) -> Arrived {
    let mut arrived = Arrived::default();
    let mut now = std::collections::HashMap::with_capacity(sockets.len());
    for socket in sockets {
        if !matches!(socket.state, TCP_ESTABLISHED | TCP_CLOSE_WAIT) {
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

/// Where a dump stands after one datagram of replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    More,
    Done,
}

/// Byte offsets in `struct tcp_info` (linux/tcp.h; the layout only ever grows at the end,
/// so a shorter reply from an older kernel is a prefix of it).
///
/// Architecture-neutral (issue #10): netlink and its payloads are in host byte order, so
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
fn parse_reply(
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
    if header.socket_id.source_port != port {
        return Ok(None);
    }
    let mut info = None;
    for attribute in NlasIterator::new(&payload[INET_DIAG_MSG_LEN..]) {
        let attribute = attribute.map_err(malformed)?;
        if attribute.kind() == INET_DIAG_INFO {
            info = parse_tcp_info(attribute.value());
        }
    }
    Ok(Some(SockRecord {
        state: header.state,
        inode: header.inode,
        rqueue: header.recv_queue,
        wqueue: header.send_queue,
        // Two host-order u32s in the kernel; only equality matters here.
        cookie: u64::from_ne_bytes(header.socket_id.cookie),
        info,
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

fn malformed(err: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed sock_diag reply: {err}"),
    )
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
/// Why filter in the kernel, and why one legacy request rather than one per family (the
/// cost test below, this machine, release build, median µs per `sample()`, both
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
fn build_request(family: u8, port: u16, filter: bool) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let request = InetRequest {
        family,
        protocol: IPPROTO_TCP,
        extensions: ExtensionFlags::INFO,
        states: StateFlags::LISTEN | StateFlags::ESTABLISHED | StateFlags::CLOSE_WAIT,
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
    if filter {
        append_port_filter(&mut bytes, port);
    }
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
fn build_legacy_request(port: u16, filter: bool) -> Vec<u8> {
    let mut bytes = vec![0u8; NETLINK_HEADER_LEN + INET_DIAG_REQ_LEN];
    let body = &mut bytes[NETLINK_HEADER_LEN..];
    body[3] = ExtensionFlags::INFO.bits();
    let states = StateFlags::LISTEN | StateFlags::ESTABLISHED | StateFlags::CLOSE_WAIT;
    body[52..56].copy_from_slice(&states.bits().to_ne_bytes());
    let total = bytes.len() as u32;
    let mut header = NetlinkBuffer::new(&mut bytes[..]);
    header.set_length(total);
    header.set_message_type(TCPDIAG_GETSOCK);
    header.set_flags(NLM_F_REQUEST | NLM_F_DUMP);
    if filter {
        append_port_filter(&mut bytes, port);
    }
    bytes
}

/// `sizeof(struct nlmsghdr)`.
const NETLINK_HEADER_LEN: usize = 16;

/// Appends the `INET_DIAG_REQ_BYTECODE` attribute "local port is `port`" to a request
/// whose length is 4-byte aligned, and fixes up the message length.
fn append_port_filter(bytes: &mut Vec<u8>, port: u16) {
    let program: [u8; 8] = {
        let mut op = [INET_DIAG_BC_S_EQ, 8, 0, 0, 0, 0, 0, 0];
        op[2..4].copy_from_slice(&12u16.to_ne_bytes());
        op[6..8].copy_from_slice(&port.to_ne_bytes());
        op
    };
    let attribute_len = 4 + program.len() as u16;
    bytes.extend_from_slice(&attribute_len.to_ne_bytes());
    bytes.extend_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
    bytes.extend_from_slice(&program);
    let total = bytes.len() as u32;
    NetlinkBuffer::new(&mut bytes[..]).set_length(total);
}

/// How the reader asks for the sockets of both families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    /// One legacy `TCPDIAG_GETSOCK` dump: both families in one walk of the kernel's tables.
    Legacy,
    /// One `SOCK_DIAG_BY_FAMILY` dump per family, AF_INET then AF_INET6.
    PerFamily,
}

/// One way of asking: the request, and whether it carries the kernel-side port filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ask {
    request: Request,
    filter: bool,
}

impl Ask {
    /// The same requests asking for listening sockets only: the kernel then walks its
    /// listening hash alone (a few µs), not the established one (metrics/quiet.rs).
    fn build_listeners_only(self, port: u16) -> Vec<Vec<u8>> {
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

    fn build(self, port: u16) -> Vec<Vec<u8>> {
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
static LADDER: [Ask; 4] = [
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
fn is_refusal(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EINVAL) | Some(libc::EOPNOTSUPP)
    )
}

/// Largest datagram of a dump: the kernel fills dump replies up to 32 KiB at most
/// (`netlink_recvmsg` caps `max_recvmsg_len`), and a larger buffer lets it use that size.
const RECV_BUFFER: usize = 32 * 1024;
/// Guard for one read: dump replies are produced by the kernel inside our own send and
/// recv calls, so a read never actually waits unless the kernel misbehaves.
const RECV_TIMEOUT: Duration = Duration::from_millis(20);
/// Guard for a whole sample, both families (and any fallback within it).
const SAMPLE_DEADLINE: Duration = Duration::from_millis(100);

/// Samples the in-flight requests of one TCP port, IPv4 and IPv6.
pub struct InFlightReader {
    port: u16,
    /// Opened lazily again after a failed sample, so a dump left half-read cannot stall
    /// the next one (the kernel refuses a second dump while one is running).
    socket: Option<Socket>,
    /// The way of asking in use, `ways[0]`, and those left to fall back on.
    ways: &'static [Ask],
    /// The requests of `ways[0]`, built once; only the sequence number changes. One
    /// legacy request, or the AF_INET and AF_INET6 ones.
    requests: Vec<Vec<u8>>,
    /// The same, for the listeners alone.
    listen_requests: Vec<Vec<u8>>,
    seq: u32,
    buf: Vec<u8>,
    records: Vec<SockRecord>,
    listeners: Vec<SockRecord>,
}

impl InFlightReader {
    pub fn new(port: u16) -> io::Result<Self> {
        Self::with_ways(port, &LADDER)
    }

    fn with_ways(port: u16, ways: &'static [Ask]) -> io::Result<Self> {
        Ok(Self {
            port,
            socket: Some(open_socket()?),
            ways,
            requests: ways[0].build(port),
            listen_requests: ways[0].build_listeners_only(port),
            seq: 0,
            buf: vec![0; RECV_BUFFER],
            records: Vec::new(),
            listeners: Vec::new(),
        })
    }

    /// One sample: a dump of the port's TCP sockets, IPv4 and IPv6 (an IPv6 `[::]`
    /// listener takes IPv4 clients as v4-mapped IPv6 sockets, so both are needed), in one
    /// legacy request or, on a kernel that refuses it, one request per family.
    pub fn sample(&mut self) -> io::Result<InFlight> {
        let deadline = Instant::now() + SAMPLE_DEADLINE;
        let result = loop {
            self.records.clear();
            match self.dump_all(deadline) {
                // Refused before any dump began, so the socket is clean to ask again on.
                Err(err) if is_refusal(&err) && self.ways.len() > 1 => {
                    self.ways = &self.ways[1..];
                    self.requests = self.ways[0].build(self.port);
                    self.listen_requests = self.ways[0].build_listeners_only(self.port);
                }
                other => break other,
            }
        };
        if let Err(err) = result {
            self.socket = None;
            return Err(err);
        }
        Ok(count(&self.records))
    }

    /// The sockets of the last sample's dump.
    pub fn records(&self) -> &[SockRecord] {
        &self.records
    }

    /// The port's listeners alone, in the way of asking in use; `records()` keeps the
    /// last full sample's sockets. A failure costs the socket, as in `sample`.
    pub fn sample_listeners(&mut self) -> io::Result<&[SockRecord]> {
        let deadline = Instant::now() + SAMPLE_DEADLINE;
        self.listeners.clear();
        if let Err(err) = self.dump_each(true, deadline) {
            self.socket = None;
            return Err(err);
        }
        Ok(&self.listeners)
    }

    fn dump_all(&mut self, deadline: Instant) -> io::Result<()> {
        self.dump_each(false, deadline)
    }

    fn dump_each(&mut self, listeners_only: bool, deadline: Instant) -> io::Result<()> {
        if self.socket.is_none() {
            self.socket = Some(open_socket()?);
        }
        for index in 0..self.requests.len() {
            self.dump(index, listeners_only, deadline)?;
        }
        Ok(())
    }

    fn dump(&mut self, index: usize, listeners_only: bool, deadline: Instant) -> io::Result<()> {
        let socket = self.socket.as_ref().expect("opened by dump_all");
        self.seq = self.seq.wrapping_add(1);
        let request = match listeners_only {
            true => &mut self.listen_requests[index],
            false => &mut self.requests[index],
        };
        NetlinkBuffer::new(&mut request[..]).set_sequence_number(self.seq);
        socket.send(request, 0)?;
        loop {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "sock_diag dump took too long",
                ));
            }
            // MSG_TRUNC: the datagram's real length, to tell a truncated one.
            let len = socket.recv(&mut &mut self.buf[..], libc::MSG_TRUNC)?;
            if len > self.buf.len() {
                return Err(malformed(format!("datagram of {len} bytes truncated")));
            }
            let out = match listeners_only {
                true => &mut self.listeners,
                false => &mut self.records,
            };
            if parse_reply(&self.buf[..len], self.port, self.seq, out)? == Progress::Done {
                return Ok(());
            }
        }
    }
}

/// A NETLINK_SOCK_DIAG socket connected to the kernel. netlink-sys opens it with
/// SOCK_CLOEXEC (checked in the tests), so the app never inherits it.
fn open_socket() -> io::Result<Socket> {
    let socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let timeout = RECV_TIMEOUT.as_micros() as i64;
    setsockopt(
        &socket,
        ReceiveTimeout,
        &TimeVal::new(timeout / 1_000_000, timeout % 1_000_000),
    )?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening(rqueue: u32) -> SockRecord {
        SockRecord {
            state: TCP_LISTEN,
            inode: 7,
            rqueue,
            wqueue: 128,
            cookie: 1,
            info: None,
        }
    }

    fn connection(state: u8, inode: u32, rqueue: u32, info: TcpInfoFields) -> SockRecord {
        SockRecord {
            state,
            inode,
            rqueue,
            wqueue: 0,
            cookie: 100 + u64::from(inode),
            info: Some(info),
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

    const fn info(received: u64, sent: u64, recv_ms: u32, sent_ms: u32) -> TcpInfoFields {
        TcpInfoFields {
            bytes_received: received,
            bytes_sent: sent,
            last_data_recv_ms: recv_ms,
            last_data_sent_ms: sent_ms,
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
                        state: TCP_ESTABLISHED,
                        inode: 9,
                        rqueue: 5,
                        wqueue: 0,
                        cookie: 9,
                        info: None,
                    },
                    SockRecord {
                        state: TCP_ESTABLISHED,
                        inode: 10,
                        rqueue: 0,
                        wqueue: 0,
                        cookie: 10,
                        info: None,
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
        assert_eq!(states, (1 << 1) | (1 << 8) | (1 << 10));
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
        assert_eq!(states, (1 << 1) | (1 << 8) | (1 << 10));
        assert_eq!(&body[56..60], &[0; 4], "idiag_dbs");
        // The same filter as the per-family request's.
        assert_eq!(&filtered[76..], &build_request(AF_INET, 8080, true)[72..]);
        assert_eq!(&plain[4..], &filtered[4..76], "the same but for the length");
        assert_eq!(NetlinkBuffer::new(&plain[..]).length(), 76);
    }

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

    /// A reader that asks one way only, without fallback.
    #[test]
    fn listeners_alone_in_every_way_of_asking() {
        // A v4 and a v6 listener on one port, one queued connection and one accepted.
        let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        let v6 = TcpListener::bind(("::1", port)).unwrap();
        let queued = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let accepted = TcpStream::connect(("::1", port)).unwrap();
        let (server, _) = v6.accept().unwrap();
        for ask in LADDER {
            let mut reader =
                InFlightReader::with_ways(port, only(ask.request, ask.filter)).unwrap();
            let full = eventually(
                &mut reader,
                InFlight {
                    requests: 1,
                    accept_queue: Some(1),
                },
            );
            assert_eq!(full.accept_queue, Some(1), "{ask:?}");
            let full_records = reader.records().to_vec();
            let listeners = reader.sample_listeners().unwrap().to_vec();
            // Both listeners, with the queue, and nothing else; the full dump stands.
            assert_eq!(listeners.len(), 2, "{ask:?}: {listeners:#?}");
            assert!(listeners.iter().all(|l| l.state == TCP_LISTEN), "{ask:?}");
            assert_eq!(
                listeners.iter().map(|l| l.rqueue).sum::<u32>(),
                1,
                "{ask:?}"
            );
            assert_eq!(reader.records(), &full_records[..], "{ask:?}");
            assert!(full_records.len() > 2, "{ask:?}: {full_records:#?}");
        }
        drop((queued, accepted, server));
    }

    fn only(request: Request, filter: bool) -> &'static [Ask] {
        let at = LADDER
            .iter()
            .position(|a| *a == Ask { request, filter })
            .unwrap();
        &LADDER[at..=at]
    }

    // ---- Real sockets on loopback ----

    use std::io::{Read, Write};
    use std::net::{Shutdown, SocketAddr as NetAddr, TcpListener, TcpStream};

    const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";

    /// Samples until `want` comes, or 5 s pass; returns the last sample. The kernel's
    /// counts settle within microseconds of the calls that change them; the poll is only
    /// for safety, never a sleep standing in for an event.
    fn eventually(reader: &mut InFlightReader, want: InFlight) -> InFlight {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got = reader.sample().expect("sample");
            if got == want || Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn queued(n: u64) -> InFlight {
        InFlight {
            requests: n,
            accept_queue: Some(n),
        }
    }

    fn serving(requests: u64) -> InFlight {
        InFlight {
            requests,
            accept_queue: Some(0),
        }
    }

    /// More than one jiffy (HZ 100 at the coarsest), so "received after it last sent"
    /// is visible in tcp_info's millisecond clocks, which tick in jiffies.
    fn let_the_clock_tick() {
        std::thread::sleep(Duration::from_millis(25));
    }

    fn records_in(reader: &InFlightReader, state: u8) -> Vec<SockRecord> {
        reader
            .records
            .iter()
            .filter(|r| r.state == state)
            .copied()
            .collect()
    }

    fn queued_connections_count_once(host: &str) {
        let listener = TcpListener::bind((host, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut reader = InFlightReader::new(port).unwrap();
        assert_eq!(eventually(&mut reader, queued(0)), queued(0));
        let mut clients: Vec<TcpStream> = (0..3)
            .map(|_| TcpStream::connect(listener.local_addr().unwrap()).unwrap())
            .collect();
        // One sends its request before it is accepted: its queued socket has unread bytes.
        clients[0].write_all(REQUEST).unwrap();
        assert_eq!(eventually(&mut reader, queued(3)), queued(3));
        // The kernel quirk: each queued connection is dumped as well, as an ESTABLISHED
        // socket without an inode, and counted only once, through the listener.
        let established = records_in(&reader, TCP_ESTABLISHED);
        assert_eq!(established.len(), 3, "{established:?}");
        assert!(established.iter().all(|r| r.inode == 0), "{established:?}");
        assert!(established
            .iter()
            .any(|r| r.rqueue as usize == REQUEST.len()));
        let listeners = records_in(&reader, TCP_LISTEN);
        assert_eq!(listeners.len(), 1);
        assert_eq!(listeners[0].rqueue, 3);
        assert!(listeners[0].inode != 0);
        assert!(listeners[0].wqueue > 0, "the backlog");
        // Accepted: the inode appears; only the one with a request still counts.
        let accepted: Vec<TcpStream> = (0..3).map(|_| listener.accept().unwrap().0).collect();
        assert_eq!(eventually(&mut reader, serving(1)), serving(1));
        assert!(records_in(&reader, TCP_ESTABLISHED)
            .iter()
            .all(|r| r.inode != 0));
        drop((clients, accepted));
    }

    #[test]
    fn queued_connections_count_once_v4() {
        queued_connections_count_once("127.0.0.1");
    }

    #[test]
    fn queued_connections_count_once_v6() {
        queued_connections_count_once("::1");
    }

    fn request_lifecycle(host: &str) {
        let listener = TcpListener::bind((host, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut reader = InFlightReader::new(port).unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert_eq!(
            eventually(&mut reader, serving(0)),
            serving(0),
            "fresh connection"
        );

        client.write_all(REQUEST).unwrap();
        assert_eq!(
            eventually(&mut reader, serving(1)),
            serving(1),
            "unread request"
        );

        let mut buf = [0u8; 64];
        server.read_exact(&mut buf[..REQUEST.len()]).unwrap();
        assert_eq!(
            eventually(&mut reader, serving(1)),
            serving(1),
            "read, unanswered"
        );
        let established = records_in(&reader, TCP_ESTABLISHED);
        let server_side = established.iter().find(|r| r.inode != 0).unwrap();
        assert_eq!(server_side.rqueue, 0);
        let info = server_side.info.expect("tcp_info");
        assert_eq!(info.bytes_received, REQUEST.len() as u64);
        assert_eq!(info.bytes_sent, 0);

        let_the_clock_tick();
        server.write_all(ANSWER).unwrap();
        client.read_exact(&mut buf[..ANSWER.len()]).unwrap();
        assert_eq!(
            eventually(&mut reader, serving(0)),
            serving(0),
            "idle keep-alive"
        );

        let_the_clock_tick();
        client.write_all(REQUEST).unwrap();
        server.read_exact(&mut buf[..REQUEST.len()]).unwrap();
        assert_eq!(
            eventually(&mut reader, serving(1)),
            serving(1),
            "second request read: received after it last sent"
        );
        let info = records_in(&reader, TCP_ESTABLISHED)[0].info.unwrap();
        assert_eq!(info.bytes_sent, ANSWER.len() as u64);
        assert!(info.last_data_recv_ms < info.last_data_sent_ms, "{info:?}");

        server.write_all(ANSWER).unwrap();
        assert_eq!(
            eventually(&mut reader, serving(0)),
            serving(0),
            "answered again"
        );
    }

    #[test]
    fn request_lifecycle_v4() {
        request_lifecycle("127.0.0.1");
    }

    #[test]
    fn request_lifecycle_v6() {
        request_lifecycle("::1");
    }

    #[test]
    fn half_closed_client_close_wait() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut reader = InFlightReader::new(port).unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(REQUEST).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        assert_eq!(
            eventually(&mut reader, serving(1)),
            serving(1),
            "sent and shut"
        );
        let close_wait = records_in(&reader, TCP_CLOSE_WAIT);
        assert_eq!(close_wait.len(), 1, "{:?}", reader.records);
        assert!(close_wait[0].rqueue > 0);

        let mut request = Vec::new();
        server.read_to_end(&mut request).unwrap();
        assert_eq!(request, REQUEST);
        assert_eq!(
            eventually(&mut reader, serving(1)),
            serving(1),
            "read to the end"
        );
        assert_eq!(records_in(&reader, TCP_CLOSE_WAIT)[0].rqueue, 0);

        let_the_clock_tick();
        server.write_all(ANSWER).unwrap();
        assert_eq!(eventually(&mut reader, serving(0)), serving(0), "answered");
        assert_eq!(records_in(&reader, TCP_CLOSE_WAIT).len(), 1);
    }

    #[test]
    fn dual_stack_listener_over_v4_and_v6() {
        let listener = TcpListener::bind("[::]:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut reader = InFlightReader::new(port).unwrap();
        let mut v4 = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut v6 = TcpStream::connect(("::1", port)).unwrap();
        assert_eq!(eventually(&mut reader, queued(2)), queued(2));
        let a = listener.accept().unwrap();
        let b = listener.accept().unwrap();
        let peers: Vec<NetAddr> = vec![a.1, b.1];
        assert!(
            peers
                .iter()
                .any(|p| p.to_string().starts_with("[::ffff:127.0.0.1]")),
            "{peers:?}"
        );
        assert_eq!(eventually(&mut reader, serving(0)), serving(0));
        v4.write_all(REQUEST).unwrap();
        v6.write_all(REQUEST).unwrap();
        assert_eq!(eventually(&mut reader, serving(2)), serving(2));
    }

    #[test]
    fn nothing_listening() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut reader = InFlightReader::new(port).unwrap();
        let none = InFlight {
            requests: 0,
            accept_queue: None,
        };
        assert_eq!(reader.sample().unwrap(), none);
        assert_eq!(reader.sample().unwrap(), none, "again, on the same socket");
    }

    fn reuseport_listener(addr: std::net::SocketAddrV4) -> TcpListener {
        use nix::sys::socket::{
            bind, listen, socket, sockopt::ReusePort, AddressFamily, Backlog, SockFlag, SockType,
            SockaddrIn,
        };
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        setsockopt(&fd, ReusePort, &true).unwrap();
        bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &SockaddrIn::from(addr),
        )
        .unwrap();
        listen(&fd, Backlog::new(64).unwrap()).unwrap();
        TcpListener::from(fd)
    }

    #[test]
    fn reuseport_listeners_are_summed() {
        let first = reuseport_listener("127.0.0.1:0".parse().unwrap());
        let port = first.local_addr().unwrap().port();
        let second = reuseport_listener(std::net::SocketAddrV4::new([127, 0, 0, 1].into(), port));
        let mut reader = InFlightReader::new(port).unwrap();
        let _clients: Vec<TcpStream> = (0..6)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        assert_eq!(eventually(&mut reader, queued(6)), queued(6));
        assert_eq!(records_in(&reader, TCP_LISTEN).len(), 2);
        drop((first, second));
    }

    #[test]
    fn filtered_and_unfiltered_agree_and_other_ports_do_not_count() {
        let ours = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = ours.local_addr().unwrap().port();
        let neighbour = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut busy = TcpStream::connect(neighbour.local_addr().unwrap()).unwrap();
        busy.write_all(REQUEST).unwrap();
        let _queued_at_neighbour = TcpStream::connect(neighbour.local_addr().unwrap()).unwrap();
        let _served_at_neighbour = neighbour.accept().unwrap();
        let _client = TcpStream::connect(ours.local_addr().unwrap()).unwrap();
        let mut filtered = InFlightReader::new(port).unwrap();
        let mut unfiltered = InFlightReader::with_ways(port, only(Request::Legacy, false)).unwrap();
        assert_eq!(eventually(&mut filtered, queued(1)), queued(1));
        assert_eq!(eventually(&mut unfiltered, queued(1)), queued(1));
        let mut a = filtered.records.clone();
        let mut b = unfiltered.records.clone();
        // tcp_info clocks may differ by a tick between the two dumps.
        for r in a.iter_mut().chain(b.iter_mut()) {
            r.info = None;
        }
        assert_eq!(a, b);
    }

    /// The records of a sample, in an order independent of the dump's, clocks dropped.
    fn comparable(reader: &InFlightReader) -> Vec<SockRecord> {
        let mut records = reader.records.clone();
        for r in records.iter_mut() {
            r.info = r.info.map(|i| TcpInfoFields {
                last_data_recv_ms: 0,
                last_data_sent_ms: 0,
                ..i
            });
        }
        records.sort_by_key(|r| (r.state, r.inode, r.rqueue, r.wqueue, r.cookie));
        records
    }

    #[test]
    fn every_way_of_asking_agrees_over_both_families() {
        // On one port: 127.0.0.1 and [::1] listeners, each with one queued connection
        // and one accepted with its request unread, and one answered (idle).
        let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        let v6 = TcpListener::bind(("::1", port)).unwrap();
        let mut buf = [0u8; 64];
        let mut held = Vec::new();
        for (listener, host) in [(&v4, "127.0.0.1"), (&v6, "::1")] {
            let mut busy = TcpStream::connect((host, port)).unwrap();
            let (server, _) = listener.accept().unwrap();
            busy.write_all(REQUEST).unwrap();
            let mut idle = TcpStream::connect((host, port)).unwrap();
            let (mut answered, _) = listener.accept().unwrap();
            idle.write_all(REQUEST).unwrap();
            answered.read_exact(&mut buf[..REQUEST.len()]).unwrap();
            let_the_clock_tick();
            answered.write_all(ANSWER).unwrap();
            let queued = TcpStream::connect((host, port)).unwrap();
            held.push((busy, server, idle, answered, queued));
        }
        let want = InFlight {
            requests: 4,
            accept_queue: Some(2),
        };
        let mut readers: Vec<(Ask, InFlightReader)> = LADDER
            .iter()
            .map(|ask| {
                let reader = InFlightReader::with_ways(port, only(ask.request, ask.filter));
                (*ask, reader.unwrap())
            })
            .collect();
        for (ask, reader) in readers.iter_mut() {
            assert_eq!(eventually(reader, want), want, "{ask:?}");
        }
        let first = comparable(&readers[0].1);
        // Per family: the listener, the queued connection, the busy and the idle ones.
        assert_eq!(first.len(), 2 * 4, "{first:#?}");
        for (ask, reader) in &readers[1..] {
            assert_eq!(comparable(reader), first, "{ask:?}");
        }
        drop(held);
    }

    /// A reader whose current request the kernel refuses: its type made unknown, as a
    /// kernel without the request would answer it (EINVAL from sock_diag).
    fn refused_from(port: u16, ways: &'static [Ask]) -> InFlightReader {
        let mut reader = InFlightReader::with_ways(port, ways).unwrap();
        for request in reader.requests.iter_mut() {
            NetlinkBuffer::new(&mut request[..]).set_message_type(0x7f);
        }
        reader
    }

    #[test]
    fn a_refused_request_falls_back_down_the_ladder() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let _clients: Vec<TcpStream> = (0..2)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let mut good = InFlightReader::new(port).unwrap();
        assert_eq!(eventually(&mut good, queued(2)), queued(2));
        assert_eq!(
            good.ways[0], LADDER[0],
            "this kernel takes the legacy request"
        );
        for start in 0..LADDER.len() - 1 {
            let mut reader = refused_from(port, &LADDER[start..]);
            assert_eq!(
                reader.sample().unwrap(),
                queued(2),
                "from {:?}",
                LADDER[start]
            );
            assert_eq!(reader.ways[0], LADDER[start + 1]);
            assert_eq!(reader.sample().unwrap(), queued(2), "and it stays there");
            assert_eq!(reader.ways[0], LADDER[start + 1]);
        }
        // At the bottom: nothing left, the refusal is the sample's error.
        let mut last = refused_from(port, &LADDER[LADDER.len() - 1..]);
        let err = last.sample().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn the_netlink_socket_is_close_on_exec() {
        let reader = InFlightReader::new(1).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(reader.socket.as_ref().unwrap());
        let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let flags = fdinfo
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        assert_ne!(flags & libc::O_CLOEXEC as u32, 0, "{fdinfo}");
    }

    // ---- Recorded replies ----

    /// The raw reply datagrams of one dump, concatenated (each ends 4-byte aligned, so
    /// the concatenation is still a stream of netlink messages).
    fn raw_dump(request: &mut [u8]) -> Vec<u8> {
        let socket = open_socket().unwrap();
        NetlinkBuffer::new(&mut request[..]).set_sequence_number(1);
        socket.send(request, 0).unwrap();
        let mut all = Vec::new();
        let mut buf = vec![0; RECV_BUFFER];
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

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sock_diag");

    /// Records the fixtures below from this machine's kernel:
    /// `cargo test --bin lifeguard metrics::inflight::tests::record_fixtures -- --ignored`.
    #[test]
    #[ignore = "rewrites tests/fixtures/sock_diag"]
    fn record_fixtures() {
        let mut buf = [0u8; 64];
        // IPv4: 2 queued (one with its request already in), 1 accepted with its request
        // unread, 1 answered (idle keep-alive), 1 half-closed with its request unread.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut accepted = Vec::new();
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(TcpStream::connect(addr).unwrap());
            accepted.push(listener.accept().unwrap().0);
        }
        clients[0].write_all(REQUEST).unwrap();
        clients[1].write_all(REQUEST).unwrap();
        accepted[1].read_exact(&mut buf[..REQUEST.len()]).unwrap();
        let_the_clock_tick();
        accepted[1].write_all(ANSWER).unwrap();
        clients[2].write_all(REQUEST).unwrap();
        clients[2].shutdown(Shutdown::Write).unwrap();
        clients.push(TcpStream::connect(addr).unwrap());
        clients.push(TcpStream::connect(addr).unwrap());
        clients[4].write_all(REQUEST).unwrap();
        let mut reader = InFlightReader::new(addr.port()).unwrap();
        assert_eq!(
            eventually(&mut reader, serving(4).with_queue(2)),
            serving(4).with_queue(2)
        );
        let v4 = raw_dump(&mut build_request(AF_INET, addr.port(), true));

        // IPv6 `[::]`: 1 queued over 127.0.0.1, 1 queued over [::1], 1 accepted over
        // [::1] that has read its request and not answered.
        let listener6 = TcpListener::bind("[::]:0").unwrap();
        let port6 = listener6.local_addr().unwrap().port();
        let mut served = TcpStream::connect(("::1", port6)).unwrap();
        let (mut server6, _) = listener6.accept().unwrap();
        served.write_all(REQUEST).unwrap();
        server6.read_exact(&mut buf[..REQUEST.len()]).unwrap();
        let _q4 = TcpStream::connect(("127.0.0.1", port6)).unwrap();
        let _q6 = TcpStream::connect(("::1", port6)).unwrap();
        let mut reader6 = InFlightReader::new(port6).unwrap();
        assert_eq!(
            eventually(&mut reader6, serving(3).with_queue(2)),
            serving(3).with_queue(2)
        );
        let v6 = raw_dump(&mut build_request(AF_INET6, port6, true));

        // A filter the kernel rejects: S_EQ with a "yes" jump of 0.
        let mut bad = build_request(AF_INET, addr.port(), true);
        bad[72 + 4 + 1] = 0;
        let einval = raw_dump(&mut bad);

        std::fs::create_dir_all(FIXTURES).unwrap();
        std::fs::write(format!("{FIXTURES}/v4_queue_and_requests.bin"), v4).unwrap();
        std::fs::write(format!("{FIXTURES}/v6_dual_stack.bin"), v6).unwrap();
        std::fs::write(format!("{FIXTURES}/bad_filter_einval.bin"), einval).unwrap();
        drop((clients, accepted, served, server6));
    }

    /// Records the legacy request's fixture only, leaving the others as they are:
    /// `cargo test --bin lifeguard metrics::inflight::tests::record_legacy_fixture -- --ignored`.
    #[test]
    #[ignore = "rewrites tests/fixtures/sock_diag/legacy_both_families.bin"]
    fn record_legacy_fixture() {
        // One port, 127.0.0.1 and [::1] listeners: on each, 1 queued connection and 1
        // accepted with its request unread.
        let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        let v6 = TcpListener::bind(("::1", port)).unwrap();
        let mut held = Vec::new();
        for (listener, host) in [(&v4, "127.0.0.1"), (&v6, "::1")] {
            let mut busy = TcpStream::connect((host, port)).unwrap();
            let (server, _) = listener.accept().unwrap();
            busy.write_all(REQUEST).unwrap();
            let queued = TcpStream::connect((host, port)).unwrap();
            held.push((busy, server, queued));
        }
        let mut reader = InFlightReader::with_ways(port, only(Request::Legacy, true)).unwrap();
        let want = InFlight {
            requests: 4,
            accept_queue: Some(2),
        };
        assert_eq!(eventually(&mut reader, want), want);
        let dump = raw_dump(&mut build_legacy_request(port, true));
        std::fs::create_dir_all(FIXTURES).unwrap();
        std::fs::write(format!("{FIXTURES}/legacy_both_families.bin"), dump).unwrap();
        drop(held);
    }

    impl InFlight {
        fn with_queue(self, queue: u64) -> Self {
            InFlight {
                accept_queue: Some(queue),
                ..self
            }
        }
    }

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

    // ---- Cost ----

    fn median_micros(runs: usize, mut f: impl FnMut()) -> f64 {
        let mut times: Vec<f64> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        times[runs / 2]
    }

    /// What `ss`-less tools do: read /proc/net/tcp and tcp6 whole and pick the port's lines.
    fn proc_net_tcp_listeners(port: u16, text: &mut String) -> usize {
        let mut found = 0;
        for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
            text.clear();
            std::fs::File::open(file)
                .unwrap()
                .read_to_string(text)
                .unwrap();
            for line in text.lines().skip(1) {
                let mut fields = line.split_whitespace();
                let local = fields.nth(1).unwrap_or("");
                let local_port = local
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok());
                let state = fields.nth(1).unwrap_or("");
                let queues = fields.next().unwrap_or("");
                if local_port == Some(port) && state == "0A" && queues.contains(':') {
                    found += 1;
                }
            }
        }
        found
    }

    /// Connects `n` clients to `port` from a separate process (the descriptor limit here
    /// is 20,000 and cannot be raised without CAP_SYS_RESOURCE, so the client ends live in
    /// a python3 child with its own), and accepts them here. The child exits when its stdin
    /// closes, that is when the returned handle is dropped.
    fn connect_from_child(
        listener: &TcpListener,
        n: usize,
    ) -> (std::process::Child, Vec<TcpStream>) {
        use std::process::{Command, Stdio};
        let port = listener.local_addr().unwrap().port();
        let script = format!(
            "import socket,sys\n\
             s=[socket.create_connection(('127.0.0.1',{port})) for _ in range({n})]\n\
             print('ready',flush=True)\nsys.stdin.read()\n"
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let accepted: Vec<TcpStream> = (0..n).map(|_| listener.accept().unwrap().0).collect();
        let mut ready = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line_into(&mut ready);
        assert_eq!(ready.trim(), "ready");
        (child, accepted)
    }

    trait ReadLineInto {
        fn read_line_into(self, line: &mut String);
    }
    impl<R: Read> ReadLineInto for std::io::BufReader<R> {
        fn read_line_into(mut self, line: &mut String) {
            std::io::BufRead::read_line(&mut self, line).unwrap();
        }
    }

    /// Median cost of one `sample()` with 100, 1,000 and 10,000 established loopback
    /// pairs open (two ESTABLISHED sockets each), sampling their port and another one,
    /// each way of asking (legacy or per family, with and without the kernel filter);
    /// and of reading /proc/net/tcp{,6}. Start it with no TIME_WAIT sockets left from an
    /// earlier run (`tw` in /proc/net/sockstat; they last 60 s): they sit in the hash
    /// chains the kernel walks and lengthen every sample.
    /// `cargo test --release --bin lifeguard metrics::inflight::tests::cost -- --ignored --nocapture`
    #[test]
    #[ignore = "benchmark: opens 10,000 connections"]
    fn cost() {
        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let busy_port = busy.local_addr().unwrap().port();
        let quiet = TcpListener::bind("127.0.0.1:0").unwrap();
        let quiet_port = quiet.local_addr().unwrap().port();
        let mut held = Vec::new();
        let mut open = 0;
        let mut text = String::new();
        println!(
            "pairs  port   legacy_filtered legacy_unfiltered  per_family_filtered \
             per_family_unfiltered  (records on the port)"
        );
        for n in [100usize, 1_000, 10_000] {
            held.push(connect_from_child(&busy, n - open));
            open = n;
            for (name, port) in [("other", quiet_port), ("same", busy_port)] {
                let mut readers: Vec<InFlightReader> = LADDER
                    .iter()
                    .map(|a| InFlightReader::with_ways(port, only(a.request, a.filter)).unwrap())
                    .collect();
                let runs = if n >= 10_000 { 101 } else { 501 };
                // Warm-up, and a check they agree.
                let first = readers[0].sample().unwrap();
                for reader in readers.iter_mut() {
                    assert_eq!(reader.sample().unwrap(), first);
                }
                let micros: Vec<f64> = readers
                    .iter_mut()
                    .map(|reader| {
                        median_micros(runs, || {
                            reader.sample().unwrap();
                        })
                    })
                    .collect();
                println!(
                    "{n:>6} {name:>6} {:>15.1} {:>17.1} {:>20.1} {:>22.1}  ({})",
                    micros[0],
                    micros[1],
                    micros[2],
                    micros[3],
                    readers[0].records.len()
                );
            }
            let p = median_micros(if n >= 10_000 { 51 } else { 201 }, || {
                assert_eq!(proc_net_tcp_listeners(quiet_port, &mut text), 1);
            });
            println!("{n:>6} /proc/net/tcp+tcp6: {p:.1} us");
        }
        for (mut child, accepted) in held {
            drop(child.stdin.take());
            child.wait().unwrap();
            drop(accepted);
        }
    }
}
