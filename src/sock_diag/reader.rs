//! `InFlightReader`: the socket I/O of a sample. It sends the requests of the way of
//! asking in use over a NETLINK_SOCK_DIAG socket, reads the replies within a deadline,
//! steps down the ladder when the kernel refuses a request, and counts what came back.
#![forbid(unsafe_code)]

use std::io;
use std::time::{Duration, Instant};

use netlink_packet_core::NetlinkBuffer;
use netlink_packet_sock_diag::constants::TCP_LISTEN;
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};
use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
use nix::sys::time::TimeVal;

use super::count::{count, InFlight, SockRecord};
use super::diag::{malformed, parse_reply, Progress};
use super::ladder::{is_refusal, Ask, LADDER};

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
    /// The requests of `ways[0]` for each kind of dump, built once (only the sequence
    /// number changes).
    requests: Requests,
    seq: u32,
    buf: Vec<u8>,
    /// The sockets of the last dump of each kind: the port's (`Dump::Port`), its
    /// listeners', and the namespace's (a whole-table dump, every listener, or the
    /// other listeners' connections).
    records: Vec<SockRecord>,
    listeners: Vec<SockRecord>,
    namespace: Vec<SockRecord>,
}

/// Which dump a request makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dump {
    /// The port's sockets (the sample).
    Port,
    /// The port's listeners alone.
    Listeners,
    /// Every socket of the network namespace.
    Namespace,
    /// Every listener of the network namespace.
    AllListeners,
    /// The sockets whose local or remote port is one of the other listeners'.
    Others,
}

/// The requests of one way of asking, for every kind of dump: one legacy request, or
/// the AF_INET and AF_INET6 ones, each.
struct Requests {
    port: Vec<Vec<u8>>,
    listeners: Vec<Vec<u8>>,
    namespace: Vec<Vec<u8>>,
    all_listeners: Vec<Vec<u8>>,
    /// For the last set of other listeners asked about; None where the way has no
    /// kernel-side filter.
    others: Option<(Vec<u16>, Vec<Vec<u8>>)>,
}

impl Requests {
    fn new(ask: Ask, port: u16) -> Requests {
        let unfiltered = Ask {
            filter: false,
            ..ask
        };
        Requests {
            port: ask.build(port),
            listeners: ask.build_listeners_only(port),
            namespace: unfiltered.build(port),
            all_listeners: unfiltered.build_listeners_only(port),
            others: None,
        }
    }

    fn of(&mut self, what: Dump) -> &mut [Vec<u8>] {
        match what {
            Dump::Port => &mut self.port,
            Dump::Listeners => &mut self.listeners,
            Dump::Namespace => &mut self.namespace,
            Dump::AllListeners => &mut self.all_listeners,
            Dump::Others => self.others.as_mut().map_or(&mut [], |(_, r)| r),
        }
    }
}

impl InFlightReader {
    pub fn new(port: u16) -> io::Result<Self> {
        Self::with_ways(port, &LADDER)
    }

    pub(super) fn with_ways(port: u16, ways: &'static [Ask]) -> io::Result<Self> {
        Ok(Self {
            port,
            socket: Some(open_socket()?),
            ways,
            requests: Requests::new(ways[0], port),
            seq: 0,
            buf: vec![0; RECV_BUFFER],
            records: Vec::new(),
            listeners: Vec::new(),
            namespace: Vec::new(),
        })
    }

    /// One sample: a dump of the port's TCP sockets, IPv4 and IPv6 (an IPv6 `[::]`
    /// listener takes IPv4 clients as v4-mapped IPv6 sockets, so both are needed), in one
    /// legacy request or, on a kernel that refuses it, one request per family.
    pub fn sample(&mut self) -> io::Result<InFlight> {
        self.run_down_the_ladder(Dump::Port)
            .map(|()| count(&self.records))
    }

    /// One dump of `what`, stepping down the ladder while the kernel refuses the way
    /// in use.
    fn run_down_the_ladder(&mut self, what: Dump) -> io::Result<()> {
        loop {
            match self.run(what) {
                // Refused before any dump began, so the socket is clean to ask again on.
                Err(err) if is_refusal(&err) && self.ways.len() > 1 => {
                    self.ways = &self.ways[1..];
                    self.requests = Requests::new(self.ways[0], self.port);
                }
                other => return other,
            }
        }
    }

    /// The sockets of the last sample's dump.
    pub fn records(&self) -> &[SockRecord] {
        &self.records
    }

    /// The port's listeners alone, in the way of asking in use; `records()` keeps the
    /// last full sample's sockets.
    pub fn sample_listeners(&mut self) -> io::Result<&[SockRecord]> {
        self.run_down_the_ladder(Dump::Listeners)?;
        Ok(&self.listeners)
    }

    /// Every TCP socket of the network namespace, in the states the port's dump asks
    /// for, the app's port's included: what the drain's quiet rule reads to tell other
    /// listeners' connections from the port's, where the kernel cannot filter them.
    pub fn sample_namespace(&mut self) -> io::Result<&[SockRecord]> {
        self.run(Dump::Namespace)?;
        Ok(&self.namespace)
    }

    /// The TCP sockets whose local or remote port is one of `ports` (the namespace's
    /// other listeners): their connections, both ends of those on loopback, filtered
    /// by the kernel, so the cost is its walk of the table and not a copy of every
    /// socket. None where the way in use has no kernel-side filter, or for more ports
    /// than one filter names (the caller then reads the whole table, or does without).
    pub fn sample_others(&mut self, ports: &[u16]) -> Option<io::Result<&[SockRecord]>> {
        if self
            .requests
            .others
            .as_ref()
            .is_none_or(|(asked, _)| asked != ports)
        {
            let built = self.ways[0].build_for_ports(ports);
            self.requests.others = built.map(|requests| (ports.to_vec(), requests));
        }
        self.requests.others.as_ref()?;
        Some(self.run(Dump::Others).map(|()| &self.namespace[..]))
    }

    /// The sockets of the last dump of the namespace (whole, its listeners, or the
    /// other listeners' connections).
    pub fn namespace_records(&self) -> &[SockRecord] {
        &self.namespace
    }

    /// The ports every listener of the network namespace listens on, sorted, once each:
    /// who else listens beside the app. A dump of the listening sockets alone walks the
    /// kernel's listening hash only, where reading /proc/net/tcp and tcp6 walks the
    /// established table twice over (about 10 ms a read on a busy host, against a few
    /// hundred µs).
    pub fn listening_ports(&mut self) -> io::Result<Vec<u16>> {
        self.run(Dump::AllListeners)?;
        // A bit per port, read back in order: sorted and once each in one pass over
        // 1,024 words, with no sort's code in the binary for it.
        let mut seen = [0u64; 1024];
        for record in self.namespace.iter().filter(|r| r.state == TCP_LISTEN) {
            seen[usize::from(record.local_port / 64)] |= 1 << (record.local_port % 64);
        }
        let mut ports = Vec::new();
        for (word, bits) in (0u16..).zip(seen) {
            let mut bits = bits;
            while bits != 0 {
                ports.push(word * 64 + bits.trailing_zeros() as u16);
                bits &= bits - 1;
            }
        }
        Ok(ports)
    }

    /// One dump of `what`: each of its requests in turn, every reply read, within one
    /// sample's deadline, into that kind's records. A failure costs the socket: a dump
    /// left half-read would stall the next one, so a new socket is opened for it.
    fn run(&mut self, what: Dump) -> io::Result<()> {
        let deadline = Instant::now() + SAMPLE_DEADLINE;
        let (out, port) = match what {
            Dump::Port => (&mut self.records, self.port),
            Dump::Listeners => (&mut self.listeners, self.port),
            // Port 0: every port.
            Dump::Namespace | Dump::AllListeners | Dump::Others => (&mut self.namespace, 0),
        };
        out.clear();
        if self.socket.is_none() {
            self.socket = Some(open_socket()?);
        }
        let socket = self.socket.as_ref().expect("opened above");
        let mut result = Ok(());
        for request in self.requests.of(what) {
            self.seq = self.seq.wrapping_add(1);
            result = dump_one(
                socket,
                request,
                self.seq,
                &mut self.buf,
                port,
                out,
                deadline,
            );
            if result.is_err() {
                break;
            }
        }
        if result.is_err() {
            self.socket = None;
        }
        result
    }
}

/// Sends one dump request on `socket` and reads its replies (`seq`) until the kernel
/// says done, the records on `port` (0: every port) into `out`.
fn dump_one(
    socket: &Socket,
    request: &mut [u8],
    seq: u32,
    buf: &mut [u8],
    port: u16,
    out: &mut Vec<SockRecord>,
    deadline: Instant,
) -> io::Result<()> {
    NetlinkBuffer::new(&mut request[..]).set_sequence_number(seq);
    socket.send(request, 0)?;
    loop {
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "sock_diag dump took too long",
            ));
        }
        // MSG_TRUNC: the datagram's real length, to tell a truncated one.
        let len = socket.recv(&mut &mut buf[..], libc::MSG_TRUNC)?;
        if len > buf.len() {
            return Err(malformed(format!("datagram of {len} bytes truncated")));
        }
        if parse_reply(&buf[..len], port, seq, out)? == Progress::Done {
            return Ok(());
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
    use super::super::count::TcpInfoFields;
    use super::super::ladder::Request;
    use super::super::testing::{queued, serving, ANSWER, REQUEST};
    use super::*;
    use netlink_packet_sock_diag::constants::{
        TCP_CLOSE_WAIT, TCP_ESTABLISHED, TCP_LISTEN, TCP_TIME_WAIT,
    };

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

    #[test]
    fn every_listener_of_the_namespace_in_every_way_of_asking() {
        // Listeners on two other ports, one of them IPv6, and a connection that is not
        // a listener: the ports of the listeners, each once, the reader's own included.
        let own = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = own.local_addr().unwrap().port();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let other_port = other.local_addr().unwrap().port();
        let v6 = TcpListener::bind(("::1", 0)).unwrap();
        let v6_port = v6.local_addr().unwrap().port();
        let v4_too = TcpListener::bind(("127.0.0.1", v6_port)).ok();
        let client = TcpStream::connect(("127.0.0.1", other_port)).unwrap();
        let (server, _) = other.accept().unwrap();
        let client_port = client.local_addr().unwrap().port();
        for ask in LADDER {
            let mut reader =
                InFlightReader::with_ways(port, only(ask.request, ask.filter)).unwrap();
            let ports = reader.listening_ports().unwrap();
            for want in [port, other_port, v6_port] {
                assert!(ports.contains(&want), "{ask:?}: {want} not in {ports:?}");
            }
            assert!(!ports.contains(&client_port), "{ask:?}: {ports:?}");
            assert!(ports.windows(2).all(|w| w[0] < w[1]), "{ask:?}: {ports:?}");
        }
        drop((own, v6, v4_too, client, server));
    }

    #[test]
    fn the_other_listeners_connections_from_either_end_filtered_by_the_kernel() {
        // A sidecar's listener with a connection closed by its client (the client's end
        // in TIME_WAIT, the sidecar's gone) and one open; an unrelated listener with a
        // connection too. The filtered dump has the sidecar's, from both ends, and
        // nothing of the other.
        let sidecar = TcpListener::bind("127.0.0.1:0").unwrap();
        let sidecar_port = sidecar.local_addr().unwrap().port();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let other_port = other.local_addr().unwrap().port();
        let closed = TcpStream::connect(("127.0.0.1", sidecar_port)).unwrap();
        let (served, _) = sidecar.accept().unwrap();
        let client_port = closed.local_addr().unwrap().port();
        drop(closed); // the client first: its end keeps TIME_WAIT
        let mut end = [0u8; 1];
        let _ = (&served).read(&mut end);
        drop(served);
        let open = TcpStream::connect(("127.0.0.1", sidecar_port)).unwrap();
        let (open_served, _) = sidecar.accept().unwrap();
        let unrelated = TcpStream::connect(("127.0.0.1", other_port)).unwrap();
        let (unrelated_served, _) = other.accept().unwrap();
        for ask in LADDER.iter().filter(|a| a.filter) {
            let mut reader = InFlightReader::with_ways(0, only(ask.request, true)).unwrap();
            let found = eventually_others(&mut reader, sidecar_port, |found| {
                found
                    .iter()
                    .any(|r| r.state == TCP_TIME_WAIT && r.ends.local.port() == client_port)
            });
            assert!(
                found
                    .iter()
                    .all(|r| r.local_port == sidecar_port || r.ends.remote.port() == sidecar_port),
                "{ask:?}: {found:#?}"
            );
            assert!(
                !found
                    .iter()
                    .any(|r| r.local_port == other_port || r.ends.remote.port() == other_port),
                "{ask:?}: the unrelated listener's connection: {found:#?}"
            );
            // The open one from both ends, and the listener itself.
            let open_ends = found.iter().filter(|r| r.state == TCP_ESTABLISHED).count();
            assert_eq!(open_ends, 2, "{ask:?}: {found:#?}");
        }
        // Unfiltered ways cannot ask this: the caller reads the whole table, or not.
        let mut unfiltered = InFlightReader::with_ways(0, only(Request::Legacy, false)).unwrap();
        assert!(unfiltered.sample_others(&[sidecar_port]).is_none());
        drop((open, open_served, unrelated, unrelated_served));
    }

    /// Dumps the other listeners' connections until `done` says so, or 5 s pass.
    fn eventually_others(
        reader: &mut InFlightReader,
        port: u16,
        done: impl Fn(&[SockRecord]) -> bool,
    ) -> Vec<SockRecord> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let found = reader.sample_others(&[port]).unwrap().unwrap().to_vec();
            if done(&found) || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A reader that asks one way only, without fallback.
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
        for request in reader.requests.of(Dump::Port) {
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
}
