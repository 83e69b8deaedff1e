#!/usr/bin/env python3
"""The scaling benchmark's test server: bounded concurrency and a fixed CPU cost per request.

The shape of the app in the ECS findings: a fixed pool of workers (no more requests are
served at once than there are workers; the rest wait in the kernel's accept queue, where
lifeguard's --inflight-port still counts them), and each request burns the same number
of milliseconds of CPU before it is answered. Run under a CPU quota (the benchmark puts
each replica in a cgroup of its own), so one replica's capacity is quota / cost, as for
an ECS task with a fraction of a vCPU.

Each request also waits --wait-ms first, holding its worker, as a web request waits on
its database: without it a request of a few milliseconds is almost never in flight
when it is sampled (Little's law: in flight = rate × time in the server), so the
in-flight p50 would read 0 at anything short of saturation and no low threshold could
tell a busy fleet from an idle one. The wait makes in-flight grow with the load, as it
does for the services the alarms are written for; the CPU cost still sets the capacity.

    server.py --port P [--workers 8] [--cost-ms 4] [--wait-ms 500]

Every path answers `200 ok` after the burn (HTTP/1.1, Connection: close), except
`/job/SECONDS` (the scale-in benchmark's long jobs, scalein.py): held on a thread of its
own, not a worker, for SECONDS of wall time, then answered `200 ok`. On SIGTERM the
listening socket is shut, requests already accepted are finished — long jobs included,
however long they still take, as a good app does — and it exits 0 (lifeguard relays the
SIGTERM only after its drain, so normally none are left; a job still running is cut by
lifeguard's SIGKILL at --grace, not by the app).
Standard library only: it runs on the interpreter the benchmark runs on.
"""
import argparse
import signal
import socket
import sys
import threading
import time

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"


def burn(seconds):
    """Spend `seconds` of this thread's own CPU time. Measured with thread_time so that
    the cost is CPU actually used, whatever the quota's throttling or the GIL makes the
    wall time: a fixed CPU cost, not a fixed delay."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for _ in range(200):
            x += 1
    return x


def read_head(conn):
    """The request head (up to the blank line), or None when the peer sent nothing
    (a TCP readiness check connects and closes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
        if len(data) > 65536:
            return None
    return data


JOB_PREFIX = b"GET /job/"
# The long jobs under way (threads), which the exit waits for.
jobs = set()
jobs_lock = threading.Lock()


def job(conn, seconds):
    """A long job: holds its connection `seconds` (a wait, not CPU), then answers."""
    try:
        time.sleep(seconds)
        conn.sendall(RESPONSE)
    except OSError:
        pass
    finally:
        conn.close()
        with jobs_lock:
            jobs.discard(threading.current_thread())


def job_seconds(head):
    """SECONDS of a `GET /job/SECONDS` request, else None."""
    if not head.startswith(JOB_PREFIX):
        return None
    path = head[len(JOB_PREFIX):].split(b" ", 1)[0].split(b"?", 1)[0]
    try:
        return float(path)
    except ValueError:
        return None


def worker(listener, cost, wait, stopping):
    while not stopping.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            return  # the listener was shut (SIGTERM)
        handed_off = False
        try:
            conn.settimeout(10)
            head = read_head(conn)
            if head is None:
                continue
            seconds = job_seconds(head)
            if seconds is not None:
                # A thread per job, so that jobs never take the workers that short
                # requests need; non-daemon, and waited for at the exit.
                t = threading.Thread(target=job, args=(conn, seconds))
                with jobs_lock:
                    jobs.add(t)
                t.start()
                handed_off = True
                continue
            time.sleep(wait)
            burn(cost)
            conn.sendall(RESPONSE)
        except OSError:
            pass
        finally:
            if not handed_off:
                conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--cost-ms", type=float, default=4.0)
    ap.add_argument("--wait-ms", type=float, default=500.0)
    ap.add_argument("--backlog", type=int, default=512)
    a = ap.parse_args()

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", a.port))
    # A deep accept queue, as a real server's: a saturated replica queues requests
    # (counted in flight by lifeguard) rather than refusing connections.
    listener.listen(a.backlog)
    stopping = threading.Event()

    def on_term(signum, frame):
        stopping.set()
        try:
            # shutdown, not close: it wakes the workers blocked in accept().
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    threads = [
        threading.Thread(target=worker, args=(listener, a.cost_ms / 1000.0, a.wait_ms / 1000.0, stopping), daemon=True)
        for _ in range(a.workers)
    ]
    for t in threads:
        t.start()
    print(f"listening 127.0.0.1:{a.port} workers={a.workers} cost={a.cost_ms}ms wait={a.wait_ms}ms", flush=True)
    while not stopping.is_set():
        stopping.wait(1.0)
    for t in threads:
        t.join(timeout=15)
    # Long jobs are finished, however long that takes: the app does not cut them
    # itself (lifeguard's SIGKILL at --grace does, if they outlast it).
    while True:
        with jobs_lock:
            left = list(jobs)
        if not left:
            break
        print(f"SIGTERM: finishing {len(left)} long job(s)", flush=True)
        for t in left:
            t.join()
    listener.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
