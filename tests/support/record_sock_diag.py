#!/usr/bin/env python3
"""Records the sock_diag replies of tests/fixtures/sock_diag from this machine's kernel.

Each fixture is the raw reply datagrams of one dump, concatenated, as the kernel sent
them for a request of the kind lifeguard sends (src/sock_diag/diag.rs), on
loopback sockets set up here in a known state:

  v4_queue_and_requests.bin   per-family AF_INET request, port filter: 2 queued
                              connections (one with its request already in), 1 accepted
                              with its request unread, 1 answered (idle keep-alive),
                              1 half-closed by the client with its request unread
  v6_dual_stack.bin           per-family AF_INET6 request, port filter, `[::]` listener:
                              1 queued over 127.0.0.1, 1 queued over [::1], 1 accepted
                              over [::1] that has read its request and not answered
  legacy_both_families.bin    legacy TCPDIAG_GETSOCK request, port filter, 127.0.0.1 and
                              [::1] listeners on one port: on each, 1 queued and 1
                              accepted with its request unread
  bad_filter_einval.bin       a filter the kernel rejects (S_EQ with a "yes" jump of 0):
                              the kernel's EINVAL

The request bytes are built here with struct.pack, field by field as the kernel's
headers lay them out (linux/netlink.h, linux/inet_diag.h), in host byte order as
netlink wants; the unit tests of diag.rs check lifeguard's own request bytes against
the same layout. A dump is recorded once the port's sockets are as described (each
one's state, whether it has a socket file yet, its unread bytes), polled for up to 5 s:
the kernel settles within microseconds; the poll is only for safety.

    python3 tests/support/record_sock_diag.py [--out DIR] [FIXTURE ...]

FIXTURE is one of the file names above without `.bin` (all four when none is named);
DIR is tests/fixtures/sock_diag unless given. No root needed; standard library only.
"""
import argparse
import os
import socket
import struct
import time

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "fixtures", "sock_diag")

# What the loopback clients send and the server answers (the unit tests check the
# recorded byte counts against these lengths).
REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
# The backlog the unit tests expect to find in the listener's `idiag_wqueue`.
BACKLOG = 128

NETLINK_SOCK_DIAG = 4
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
TCPDIAG_GETSOCK = 18
SOCK_DIAG_BY_FAMILY = 20
IPPROTO_TCP = 6
INET_DIAG_INFO = 2
INET_DIAG_REQ_BYTECODE = 1
INET_DIAG_BC_S_EQ = 11
TCP_ESTABLISHED, TCP_CLOSE_WAIT, TCP_LISTEN = 1, 8, 10
# The states lifeguard asks for, and tcp_info with each socket.
STATES = (1 << TCP_ESTABLISHED) | (1 << TCP_CLOSE_WAIT) | (1 << TCP_LISTEN)
EXT_INFO = 1 << (INET_DIAG_INFO - 1)
# `struct inet_diag_sockid`: ports, two 16-byte addresses, interface, cookie. All zero:
# no address or port condition in a dump.
ANY_SOCKET = bytes(48)
SEQ = 1


def netlink_message(kind, body):
    """`struct nlmsghdr` (length, type, flags, sequence number, port id 0) and the body."""
    return struct.pack("=IHHII", 16 + len(body), kind, NLM_F_REQUEST | NLM_F_DUMP, SEQ, 0) + body


def port_filter(port):
    """The `INET_DIAG_REQ_BYTECODE` attribute "local port is PORT": an S_EQ op whose "yes"
    lands on the end of the program and whose "no" jumps past it, then the operand op
    holding the port."""
    program = struct.pack("=BBH", INET_DIAG_BC_S_EQ, 8, 12) + struct.pack("=BBH", 0, 0, port)
    return struct.pack("=HH", 4 + len(program), INET_DIAG_REQ_BYTECODE) + program


def per_family_request(family, port):
    """`inet_diag_req_v2`: family, protocol, extensions, pad, states, socket id."""
    body = struct.pack("=BBBBI", family, IPPROTO_TCP, EXT_INFO, 0, STATES) + ANY_SOCKET
    return netlink_message(SOCK_DIAG_BY_FAMILY, body + port_filter(port))


def legacy_request(port):
    """`inet_diag_req`: family (AF_UNSPEC), source and destination lengths, extensions,
    socket id, states, `idiag_dbs`."""
    body = struct.pack("=BBBB", 0, 0, 0, EXT_INFO) + ANY_SOCKET + struct.pack("=II", STATES, 0)
    return netlink_message(TCPDIAG_GETSOCK, body + port_filter(port))


def messages(data):
    """(type, sequence number, payload) of each netlink message in a stream of them."""
    at = 0
    while at + 16 <= len(data):
        length, kind, _, seq, _ = struct.unpack_from("=IHHII", data, at)
        if length < 16:
            return
        yield kind, seq, data[at + 16:at + length]
        at += (length + 3) & ~3


def raw_dump(request):
    """The reply datagrams of one dump, concatenated (each ends 4-byte aligned, so the
    concatenation is still a stream of netlink messages), up to its DONE or error."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as diag:
        diag.bind((0, 0))
        diag.settimeout(1)
        diag.sendto(request, (0, 0))
        replies = b""
        while True:
            datagram = diag.recv(32 * 1024)
            replies += datagram
            for kind, seq, payload in messages(datagram):
                if seq == SEQ and (kind == NLMSG_DONE or
                                   (kind == NLMSG_ERROR and struct.unpack_from("=i", payload)[0])):
                    return replies


def sockets(replies):
    """(state, has a socket file, unread bytes) of each socket in a dump, sorted."""
    found = []
    for kind, _, payload in messages(replies):
        if kind in (SOCK_DIAG_BY_FAMILY, TCPDIAG_GETSOCK) and len(payload) >= 72:
            state = payload[1]
            rqueue, _, _, inode = struct.unpack_from("=IIII", payload, 56)
            found.append((state, inode != 0, rqueue))
    return sorted(found)


def settled_dump(request, want):
    """The dump, once the port's sockets are `want`."""
    deadline = time.monotonic() + 5
    while True:
        replies = raw_dump(request)
        got = sockets(replies)
        if got == sorted(want):
            return replies
        if time.monotonic() > deadline:
            raise SystemExit(f"the sockets did not settle: want {sorted(want)}, got {got}")
        time.sleep(0.001)


def listener(family, host, port=0):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, port))
    s.listen(BACKLOG)
    return s


def read_exactly(conn, n):
    data = b""
    while len(data) < n:
        data += conn.recv(n - len(data))


def let_the_clock_tick():
    """More than one jiffy (HZ 100 at the coarsest), so "received after it last sent" is
    visible in tcp_info's millisecond clocks, which tick in jiffies."""
    time.sleep(0.025)


def v4_queue_and_requests(held):
    lst = listener(socket.AF_INET, "127.0.0.1")
    addr = lst.getsockname()
    clients, accepted = [], []
    for _ in range(3):
        clients.append(socket.create_connection(addr))
        accepted.append(lst.accept()[0])
    clients[0].sendall(REQUEST)
    clients[1].sendall(REQUEST)
    read_exactly(accepted[1], len(REQUEST))
    let_the_clock_tick()
    accepted[1].sendall(ANSWER)
    clients[2].sendall(REQUEST)
    clients[2].shutdown(socket.SHUT_WR)
    clients.append(socket.create_connection(addr))
    clients.append(socket.create_connection(addr))
    clients[4].sendall(REQUEST)
    held += [lst, *clients, *accepted]
    return settled_dump(per_family_request(socket.AF_INET, addr[1]), [
        (TCP_LISTEN, True, 2),
        (TCP_ESTABLISHED, False, 0),
        (TCP_ESTABLISHED, False, len(REQUEST)),
        (TCP_ESTABLISHED, True, len(REQUEST)),
        (TCP_ESTABLISHED, True, 0),
        # The request and the FIN.
        (TCP_CLOSE_WAIT, True, len(REQUEST) + 1),
    ])


def v6_dual_stack(held):
    lst = listener(socket.AF_INET6, "::")
    port = lst.getsockname()[1]
    served = socket.create_connection(("::1", port))
    server = lst.accept()[0]
    served.sendall(REQUEST)
    read_exactly(server, len(REQUEST))
    queued = [socket.create_connection((host, port)) for host in ("127.0.0.1", "::1")]
    held += [lst, served, server, *queued]
    return settled_dump(per_family_request(socket.AF_INET6, port), [
        (TCP_LISTEN, True, 2),
        (TCP_ESTABLISHED, True, 0),
        (TCP_ESTABLISHED, False, 0),
        (TCP_ESTABLISHED, False, 0),
    ])


def legacy_both_families(held):
    v4 = listener(socket.AF_INET, "127.0.0.1")
    port = v4.getsockname()[1]
    v6 = listener(socket.AF_INET6, "::1", port)
    held += [v4, v6]
    for lst, host in ((v4, "127.0.0.1"), (v6, "::1")):
        busy = socket.create_connection((host, port))
        server = lst.accept()[0]
        busy.sendall(REQUEST)
        held += [busy, server, socket.create_connection((host, port))]
    return settled_dump(legacy_request(port), [
        (TCP_LISTEN, True, 1),
        (TCP_LISTEN, True, 1),
        (TCP_ESTABLISHED, True, len(REQUEST)),
        (TCP_ESTABLISHED, True, len(REQUEST)),
        (TCP_ESTABLISHED, False, 0),
        (TCP_ESTABLISHED, False, 0),
    ])


def bad_filter_einval(held):
    lst = listener(socket.AF_INET, "127.0.0.1")
    held.append(lst)
    request = bytearray(per_family_request(socket.AF_INET, lst.getsockname()[1]))
    # The S_EQ op's "yes" jump (after the 72-byte request and the 4-byte attribute
    # header, its second byte): 0 never ends the program, so the kernel refuses it.
    request[72 + 4 + 1] = 0
    return raw_dump(bytes(request))


RECORDERS = [v4_queue_and_requests, v6_dual_stack, legacy_both_families, bad_filter_einval]


def main():
    names = [r.__name__ for r in RECORDERS]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=FIXTURES, help="where the .bin files go")
    parser.add_argument("fixtures", nargs="*", metavar="FIXTURE",
                        help=", ".join(names) + " (all when none is named)")
    args = parser.parse_args()
    for name in args.fixtures:
        if name not in names:
            parser.error(f"no fixture {name}: one of {', '.join(names)}")
    os.makedirs(args.out, exist_ok=True)
    for record in RECORDERS:
        if args.fixtures and record.__name__ not in args.fixtures:
            continue
        held = []
        try:
            replies = record(held)
        finally:
            for s in held:
                s.close()
        path = os.path.join(args.out, record.__name__ + ".bin")
        with open(path, "wb") as f:
            f.write(replies)
        print(f"{path}: {len(replies)} bytes")


if __name__ == "__main__":
    main()
