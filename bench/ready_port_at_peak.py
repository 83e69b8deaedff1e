#!/usr/bin/env python3
"""The ready port at the peak: what readiness probes see while the app's threads use up
the container's CPU quota, and how long a SIGTERM takes to act with PID 1 inside that
quota, lifeguard beside tini and dumb-init.

Probes: a cgroup with a 0.25-CPU quota (v1 `cpu` controller, or v2 `cpu.max`) holds
lifeguard as PID 1 of a PID namespace (`--ready-port`, its endpoint on), the app
(bench/spin.c, THREADS spinning threads) and, beside them, a plain `python3 -m
http.server`. From outside the cgroup, every 2 s with a 3 s timeout (the Kubernetes
example's readiness probe) for DURATION seconds: a TCP connect to the ready port, GET
/readyz, GET / on the plain server; and, as an ALB target group asks, GET /readyz every
5 s with a 4 s timeout and every 10 s with a 6 s timeout. For each: failures, the
longest run of consecutive failures (what a failure threshold must outlast), p50 and
p99 of the answers.

A SIGTERM at the peak: the same cgroup holds the wrapper as PID 1 and the app, whose
threads block SIGTERM (so the relayed signal stays pending where /proc shows it, and
only a SIGKILL ends it). SIGTERM goes to PID 1 from outside; measured from that
kill(2): when the ready port refuses (lifeguard: `--ready-port`, `--drain-delay 0`,
`--grace 5s`), when the stop signal is pending in the app (the relay), when SIGKILL is
pending in it (lifeguard's grace deadline; tini and dumb-init have none), and when the
app is gone. Wrappers interleaved, TRIALS rounds, medians. Run as root:

    sudo bench/ready-port-at-peak.sh [--threads 300] [--duration 60] [--trials 5]
                                     [--lifeguard PATH] [--only probes|sigterm]
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from health_at_peak import QUOTA_US, root_and_spin, PERIOD_US, cgroup, end_round, free_port, pct, remove, tcp_probe, version  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IN_CGROUP = 'echo $$ > {path}/cgroup.procs && exec "$@"'


def http_get(port, path, timeout):
    """Seconds to a 200 for GET `path`, or None."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(max(0.001, timeout - (time.monotonic() - start)))
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            if not s.recv(64).startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
                return None
    except OSError:
        return None
    return time.monotonic() - start


def series(interval, duration, probe, out):
    """`probe` every `interval` seconds for `duration`, each on a thread of its own (a
    slow answer must not delay the next probe: kubelet and ALB do not wait either)."""
    threads = []
    start = time.monotonic()
    i = 0
    while i * interval < duration:
        slot = len(out)
        out.append(None)

        def once(slot=slot):
            out[slot] = probe()

        t = threading.Thread(target=once)
        t.start()
        threads.append(t)
        i += 1
        time.sleep(max(0.0, start + i * interval - time.monotonic()))
    for t in threads:
        t.join()


def streak(results):
    best = run = 0
    for r in results:
        run = run + 1 if r is None else 0
        best = max(best, run)
    return best


def ms(v):
    return "—" if v is None else f"{v * 1000:,.0f} ms"


def probes(lifeguard, spin, threads, duration):
    path = cgroup(f"lifeguard-ready-{os.getpid()}")
    port, ready, plain = free_port(), free_port(), free_port()
    # The plain server first: started once the app spins, it would take a minute to
    # import its modules on its share of the quota.
    server = subprocess.Popen(
        ["sh", "-c", IN_CGROUP.format(path=path), "sh",
         sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(plain)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    proc = None
    try:
        deadline = time.monotonic() + 30
        while http_get(plain, "/", 3.0) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the plain server never answered")
            time.sleep(0.1)
        proc = subprocess.Popen(
            ["sh", "-c", IN_CGROUP.format(path=path), "sh",
             "unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
             lifeguard, "--drain-delay", "0", "--listen", f"127.0.0.1:{port}", "--ready-port", str(ready),
             "--", spin, str(threads)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout.readline().strip() == "ready", "the app did not start"
        deadline = time.monotonic() + 60
        while tcp_probe(ready, 1.0) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("the ready port never listened")
            time.sleep(0.2)
        time.sleep(2)  # the quota reaches its steady throttling
        kinds = [
            ("ready port, TCP connect (`tcpSocket`), every 2 s, 3 s timeout", 2, lambda: tcp_probe(ready, 3.0)),
            ("lifeguard `/readyz`, every 2 s, 3 s timeout", 2, lambda: http_get(port, "/readyz", 3.0)),
            ("plain `python3 -m http.server` in the cgroup, every 2 s, 3 s timeout", 2, lambda: http_get(plain, "/", 3.0)),
            ("lifeguard `/readyz`, every 5 s, 4 s timeout (ALB)", 5, lambda: http_get(port, "/readyz", 4.0)),
            ("lifeguard `/readyz`, every 10 s, 6 s timeout (ALB)", 10, lambda: http_get(port, "/readyz", 6.0)),
        ]
        results = [[] for _ in kinds]
        workers = [threading.Thread(target=series, args=(interval, duration, f, out))
                   for (_, interval, f), out in zip(kinds, results)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        if proc:
            proc.terminate()
        server.kill()
        for p in filter(None, (proc, server)):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        remove(path)
    rows = []
    for (name, interval, _), out in zip(kinds, results):
        ok = [v for v in out if v is not None]
        rows.append(f"| {name} | {len(out) - len(ok)} of {len(out)} | {streak(out)} ({streak(out) * interval} s) "
                    f"| {ms(pct(ok, 0.5))} | {ms(pct(ok, 0.99))} |")
    return rows


def status_mask(pid, field, tid=None):
    where = f"/proc/{pid}/task/{tid}/status" if tid else f"/proc/{pid}/status"
    try:
        for line in open(where):
            if line.startswith(field):
                return int(line.split()[1], 16)
    except OSError:
        return None
    return 0


def find_app(unshare_pid, deadline):
    """The app: PID 1's child that is not lifeguard's helper."""
    while time.monotonic() < deadline:
        try:
            pid1 = open(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read().split()[0]
            for kid in open(f"/proc/{pid1}/task/{pid1}/children").read().split():
                if not open(f"/proc/{kid}/comm").read().startswith("lifeguard-helpe"):
                    return int(pid1), int(kid)
        except (OSError, IndexError):
            pass
        time.sleep(0.01)
    raise RuntimeError("the app did not show")


def sigterm_trial(name, argv, spin, threads, ready, limit):
    """One SIGTERM at the peak: seconds from the kill(2) to each event (None: not seen)."""
    path = cgroup(f"lifeguard-term-{os.getpid()}")
    proc = subprocess.Popen(
        ["sh", "-c", IN_CGROUP.format(path=path), "sh",
         "unshare", "--pid", "--fork", "--kill-child", "--mount-proc"] + argv + [spin, str(threads), "block-term"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen = {}
    try:
        assert proc.stdout.readline().strip() == "ready", f"{name}: the app did not start"
        pid1, app = find_app(proc.pid, time.monotonic() + 30)
        if ready:
            deadline = time.monotonic() + 30
            while tcp_probe(ready, 3.0) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("the ready port never listened")
        time.sleep(2)  # steady throttling
        stop = threading.Event()

        def watch_port():
            # A probe every 10 ms: a tight loop would fill the port's queue while the
            # helper that empties it is starved, and PID 1's shutdown(2) would then
            # spend its turn resetting thousands of queued connections.
            while not stop.is_set():
                try:
                    with socket.create_connection(("127.0.0.1", ready), timeout=1):
                        pass
                except ConnectionRefusedError:
                    seen.setdefault("refused", time.monotonic())
                    return
                except OSError:
                    pass
                time.sleep(0.01)

        # A spinning thread: it takes a pending SIGKILL only once it runs again (the
        # main thread, asleep in pause(), takes it at once and leaves a zombie leader).
        spinner = max(int(t) for t in os.listdir(f"/proc/{app}/task"))

        def watch_app():
            while not stop.is_set():
                pending = status_mask(app, "ShdPnd:")
                kill = status_mask(app, "SigPnd:", tid=spinner)
                threads_left = status_mask(app, "Threads:")
                now = time.monotonic()
                if pending is not None and pending & (1 << 14):
                    seen.setdefault("relayed", now)
                if kill is not None and kill & (1 << 8):
                    seen.setdefault("sigkill", now)
                # Gone: reaped, or no thread left but a zombie leader ("Threads:" is
                # read as hex here, which is the same for 0 and 1).
                if threads_left is None or threads_left <= 1 and not os.path.exists(f"/proc/{app}/task/{spinner}"):
                    seen.setdefault("gone", now)
                    return
                time.sleep(0.0002)

        watchers = [threading.Thread(target=watch_app)]
        if ready:
            watchers.append(threading.Thread(target=watch_port))
        for w in watchers:
            w.start()
        t0 = time.monotonic()
        os.kill(pid1, 15)
        deadline = t0 + limit
        while time.monotonic() < deadline and any(w.is_alive() for w in watchers):
            time.sleep(0.01)
        stop.set()
        for w in watchers:
            w.join()
        return {k: v - t0 for k, v in seen.items()}
    finally:
        end_round(proc, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=300)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--lifeguard", default=os.path.join(ROOT, "target/x86_64-unknown-linux-musl/release/lifeguard"))
    ap.add_argument("--only", choices=["probes", "sigterm"], help="one of the two parts")
    args = ap.parse_args()
    spin = root_and_spin("ready_port_at_peak.py")
    print(f"# lifeguard {version(args.lifeguard)}; quota {QUOTA_US / PERIOD_US:.2f} CPU, "
          f"{args.threads} spinning app threads")
    if args.only != "sigterm":
        print(f"\n## Readiness probes at the peak, {args.duration:.0f} s\n")
        print("| probe | failed | longest run of failures | p50 | p99 |")
        print("|---|---|---|---|---|")
        for row in probes(args.lifeguard, spin, args.threads, args.duration):
            print(row, flush=True)
    if args.only == "probes":
        return

    ready = free_port()
    wrappers = [
        ("lifeguard", [args.lifeguard, "--drain-delay", "0", "--grace", "5s", "--listen", "off",
                       "--ready-port", str(ready), "--"], ready),
        ("tini", [shutil.which("tini") or "tini", "-s", "--"], None),
        ("dumb-init", [shutil.which("dumb-init") or "dumb-init"], None),
    ]
    results = {name: [] for name, _, _ in wrappers}
    for _ in range(args.trials):
        for name, argv, port in wrappers:
            # tini and dumb-init have no deadline: the harness ends them after 10 s.
            limit = 30 if port else 10
            results[name].append(sigterm_trial(name, argv, spin, args.threads, port, limit))
    print(f"\n## A SIGTERM with PID 1 inside the saturated quota, median of {args.trials} "
          f"(min–max), from the kill(2)\n")
    print("| PID 1 | the ready port refuses | the stop signal pending in the app | "
          "SIGKILL pending in the app (grace 5 s) | the app gone |")
    print("|---|---|---|---|---|")

    def cell(trials, key, applies=True):
        if not applies:
            return "—"
        got = [t[key] for t in trials if key in t]
        if not got:
            return "never"
        missing = len(trials) - len(got)
        text = f"{ms(statistics.median(got))} ({ms(min(got))}–{ms(max(got))})"
        return text + (f", {missing} of {len(trials)} not within the trial" if missing else "")

    for name, _, port in wrappers:
        trials = results[name]
        print(f"| {name} | {cell(trials, 'refused', port is not None)} | {cell(trials, 'relayed')} "
              f"| {cell(trials, 'sigkill', port is not None)} | {cell(trials, 'gone')} |", flush=True)


if __name__ == "__main__":
    main()
