#!/usr/bin/env python3
"""The drain at the peak: a SIGTERM while the app's threads use up the container's CPU
quota and a slow request is in flight. The drain's looks at the port come from
lifeguard's helper process, which shares that quota, so at the peak they come late;
late is not quiet, and the request must be answered before the stop signal is relayed.

Each round: a cgroup with a 0.25-CPU quota (v1 `cpu`, or v2 `cpu.max`) holds lifeguard
as PID 1 of a PID namespace (`--inflight-port`, `--drain-delay 0`, `--drain-quiet 1s`,
`--drain-max 20s`, `--grace 25s`, the endpoint off, `--ready-port` to see readiness from
outside) and the app: bench/spin.c with THREADS spinning threads and an HTTP server that
answers `GET /slow/MS` after MS ms and dies at once on SIGTERM. Once the ready port
listens and the quota has throttled for 2 s, a client sends `GET /slow/SLOW`; 0.5 s
later SIGTERM goes to PID 1. Recorded: whether the request was answered (200) or lost;
when lifeguard relayed the stop signal, by its own log (the drain's end line: `after`,
counted from the instant its wait returned with the SIGTERM) and why; and how long from
the kill(2) until lifeguard exited (the stop), against --drain-max.
Run in a network namespace of its own (the drain reads the namespace's counters), as
root:

    sudo bench/drain-at-peak.sh [--threads 300] [--rounds 10] [--slow 3000]
                                [--lifeguard PATH] [--label NAME]
"""
import argparse
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from health_at_peak import QUOTA_US, root_and_spin, PERIOD_US, cgroup, end_round, free_port, start_in_task, version  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRAIN_MAX = 20.0


def request(port, slow_ms, out):
    """GET /slow/SLOW: out['status'] is 200 when answered, else what happened."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.settimeout(60)
            s.sendall(f"GET /slow/{slow_ms} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            data = s.recv(64)
            out["status"] = 200 if data.startswith(b"HTTP/1.1 200") else f"empty reply {data!r}"
    except OSError as e:
        out["status"] = f"error: {e}"
    out["at"] = time.monotonic()


def one_round(lifeguard, spin, threads, slow_ms):
    path = cgroup(f"lifeguard-drain-{os.getpid()}")
    app_port, ready = free_port(), free_port()
    argv = [lifeguard, "-v", "--inflight-port", str(app_port), "--drain-delay", "0",
            "--drain-quiet", "1s", "--drain-max", f"{DRAIN_MAX:.0f}s", "--grace", "25s",
            "--listen", "off", "--ready-port", str(ready), "--",
            spin, str(threads), "serve", str(app_port)]
    log = tempfile.TemporaryFile()
    proc, pid1 = start_in_task(path, argv, ready, stderr=log, settle=2.0)
    try:
        answer = {}
        client = threading.Thread(target=request, args=(app_port, slow_ms, answer))
        client.start()
        time.sleep(0.5)  # the scenario: the request is in flight at the SIGTERM
        t0 = time.monotonic()
        os.kill(pid1, 15)
        proc.wait(60)
        stopped = time.monotonic() - t0
        client.join(60)
        log.seek(0)
        said = log.read().decode(errors="replace")
        blind = "no fresh look at the port" in said
        relay = None
        for line in said.splitlines():
            m = re.search(r"(drain over|--drain-max reached|the app exited during the drain).*? after=(\d+)ms", line)
            if m:
                why = ("no figures (0.2.0: relayed)" if "unavailable" in line else "quiet" if "quiet" in line
                       else "--drain-max" if "--drain-max" in line else "the app exited")
                relay = (float(m.group(2)) / 1000, why)
        return answer.get("status"), stopped, blind, relay
    finally:
        end_round(proc, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--slow", type=int, default=3000, help="the request's length, ms")
    ap.add_argument("--lifeguard", default=os.path.join(ROOT, "target/x86_64-unknown-linux-musl/release/lifeguard"))
    ap.add_argument("--label", default="lifeguard")
    args = ap.parse_args()
    spin = root_and_spin("drain_at_peak.py")
    print(f"# {args.label}: {version(args.lifeguard)}; quota {QUOTA_US / PERIOD_US:.2f} CPU, "
          f"{args.threads} spinning app threads, GET /slow/{args.slow} in flight at the SIGTERM, "
          f"--drain-max {DRAIN_MAX:.0f}s", flush=True)
    results = []
    for i in range(args.rounds):
        status, stopped, blind, relay = one_round(args.lifeguard, spin, args.threads, args.slow)
        results.append((status, stopped, blind, relay))
        said = f"relayed at {relay[0]:.2f} s ({relay[1]})" if relay else "no drain line"
        print(f"round {i + 1}: request {status}, {said}, lifeguard exited {stopped:.2f} s "
              f"after the kill{', the drain was blind a while' if blind else ''}", flush=True)
    lost = sum(1 for r in results if r[0] != 200)
    stops = [r[1] for r in results]
    relays = [r[3][0] for r in results if r[3]]
    at_max = sum(1 for r in results if r[3] and r[3][1] == "--drain-max")
    med = lambda v: f"{statistics.median(v):.2f} s" if v else "—"  # noqa: E731
    print(f"\n| {args.label} | rounds | requests lost | relayed, median (max) | relayed at --drain-max | "
          f"exited after the kill, median (max) | rounds with a blind spell |\n"
          f"|---|---|---|---|---|---|---|\n"
          f"| {args.label} | {len(results)} | {lost} | {med(relays)} ({max(relays, default=0):.2f} s) | "
          f"{at_max} | {med(stops)} ({max(stops):.2f} s) | {sum(1 for r in results if r[2])} |")


if __name__ == "__main__":
    main()
