#!/usr/bin/env python3
"""The cost of lifeguard's metrics, side by side with tini, dumb-init and catatonit.

1. One sample of the shipped binary, as in a container: PID 1 of a PID and a network
   namespace of its own, supervising an app that holds 10,000 descriptors and 200
   threads and listens on --inflight-port (four connections of its own, one with a
   request it never reads), with 100, 1,000 and 10,000 TCP sockets open on the host.
   The cost is the sample's own account of itself (its -vv line `metrics: sample
   taken`: the whole sample, the look at the port, the process tree), median of
   --samples samples from the third after the app is ready. Twice per row: with a byte every 200 ms on
   one of the app's connections, so that every look walks the kernel's
   established-socket table, and without (a quiet namespace: the listeners alone).
   Beside it, one read of /proc/net/tcp and tcp6 (Python).
2. Each init's own CPU over the same window (default 300 s), summed over its threads
   (schedstat, ns): lifeguard as a plain child with its endpoint and --inflight-port
   supervising `sleep` (the row measured before the saturation figures were added), and as PID 1 of its own
   namespaces supervising `sleep` and the 10,000-descriptor, 200-thread app, quiet and
   chatty; the peers supervising `sleep`. All run at once, so they share the machine's
   noise. `--baseline PATH` adds lifeguard's rows for another binary (an older build).
   lifeguard's CPU is its PID 1's and its helper process's (`lifeguard-helper`, where
   the build has one) together.
3. Idle RssAnon and Pss of each, median of 3 readings (PID 1's; the helper's beside it).
4. A drain's looks (one every 100 ms), lifeguard's CPU over --drain-seconds of a drain
   held open by the app's own traffic (a byte every 200 ms), with the app alone in its
   network namespace and beside a sidecar that accepts a connection every 100 ms (where
   each look also reads the whole namespace's sockets, to tell the sidecar's new
   connections from the app's). `--baseline` adds the older build's rows.

As root; standard library only. `--seconds N` shortens the CPU window (a smoke test).
Writes a markdown table to bench/metrics-results.md and prints it.
"""
import argparse
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = "x86_64-unknown-linux-musl"
BENCH_TARGET = os.environ.get("CARGO_TARGET_DIR", "/tmp/bench-target")
APP_PORT = 8080

# The app of part 1 and of the heavy CPU rows: `fds` descriptors and `threads` threads
# in all, listening on `port`; "chatty" sends a byte every 200 ms on one of its own
# connections (traffic in the namespace: every look walks the established table).
APP = r'''
import os, resource, socket, sys, threading, time
fds, threads, port, chatty = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "chatty"
resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
listener = socket.socket()
listener.bind(("127.0.0.1", port))
listener.listen(1024)
clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
served = [listener.accept()[0] for _ in range(4)]
clients[0].sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
held = [os.open("/dev/null", os.O_RDONLY)
        for _ in range(fds - (len(os.listdir("/proc/self/fd")) - 1))]
stop = threading.Event()
def chat():
    while True:
        clients[1].sendall(b"x")
        served[1].recv(1)
        time.sleep(0.2)
for _ in range(threads - 2 if chatty else threads - 1):
    threading.Thread(target=stop.wait, daemon=True).start()
if chatty:
    threading.Thread(target=chat, daemon=True).start()
print("ready", flush=True)
time.sleep(10**7)
'''


# Part 4's app: a byte every 200 ms on its own connection (the drain never turns
# quiet), and with "sidecar", another listener in the namespace that accepts a
# connection every 100 ms and closes it first.
DRAIN_APP = r'''
import socket, sys, threading, time
port, sidecar = int(sys.argv[1]), sys.argv[2] == "sidecar"
listener = socket.socket()
listener.bind(("127.0.0.1", port))
listener.listen(128)
client = socket.create_connection(("127.0.0.1", port))
served = listener.accept()[0]
def chat():
    while True:
        client.sendall(b"x")
        served.recv(1)
        time.sleep(0.2)
threading.Thread(target=chat, daemon=True).start()
if sidecar:
    side = socket.socket()
    side.bind(("127.0.0.1", 9000))
    side.listen(128)
    def accept():
        while True:
            side.accept()[0].close()
    def connect():
        while True:
            c = socket.create_connection(("127.0.0.1", 9000))
            c.recv(1)
            c.close()
            time.sleep(0.1)
    threading.Thread(target=accept, daemon=True).start()
    threading.Thread(target=connect, daemon=True).start()
print("ready", flush=True)
time.sleep(10**7)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lifeguard_binary():
    path = os.path.join(BENCH_TARGET, TARGET, "release", "lifeguard")
    subprocess.run(
        ["cargo", "build", "--release", "--target", TARGET, "--bin", "lifeguard"],
        cwd=ROOT,
        env={**os.environ, "CARGO_TARGET_DIR": BENCH_TARGET},
        check=True,
    )
    return path


def in_container(argv):
    """PID 1 of a new PID namespace with its own /proc and network namespace (lo up)."""
    return ["unshare", "--pid", "--fork", "--mount-proc", "--net",
            "sh", "-c", 'ip link set lo up && exec "$@"', "sh"] + argv


def app_argv(fds, threads, chatty):
    return ["python3", "-c", APP, str(fds), str(threads), str(APP_PORT),
            "chatty" if chatty else "quiet"]


def lifeguard_pid(p, contained):
    """lifeguard's pid: the process itself, or unshare's child (sh exec'd it)."""
    if not contained:
        return p.pid
    until = time.monotonic() + 10
    while time.monotonic() < until:
        try:
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                children = f.read().split()
            if children:
                return int(children[0])
        except OSError:
            pass
        time.sleep(0.01)
    sys.exit("bench/metrics.py: unshare started nothing")


class Env:
    """Everything started here: killed with its descendants on the way out."""

    def __init__(self):
        self.started = []

    def start(self, argv, **kw):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LIFEGUARD_", "TINI_", "DUMB_INIT_"))}
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                             start_new_session=True, **kw)
        self.started.append(p)
        return p

    def stop(self, p):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # As PID 1 of its namespace, lifeguard's death ends everything in it.
        p.wait()

    def close(self):
        for p in self.started:
            if p.poll() is None:
                self.stop(p)


def host_sockets(n, held, server):
    """Established pairs on the host, `n` sockets in all."""
    addr = server.getsockname()
    while len(held) < n:
        client = socket.create_connection(addr)
        accepted, _ = server.accept()
        held += [client, accepted]


def sample_lines(env, lg, chatty, wanted):
    """Runs lifeguard -vv on the app in a container; the fields of `wanted` sample lines
    after the first three."""
    argv = in_container([lg, "-vv", "--listen", "127.0.0.1:9595", "--inflight-port",
                         str(APP_PORT), "--drain-delay", "0", "--"]
                        + app_argv(10_000, 200, chatty))
    p = env.start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = threading.Event()

    def app_output():
        for line in p.stdout:
            if line.strip() == "ready":
                ready.set()

    threading.Thread(target=app_output, daemon=True).start()
    samples = []
    deadline = time.monotonic() + 60 + 2 * wanted
    seen = 0
    for line in p.stderr:
        if "metrics: sample taken" not in line or not ready.is_set():
            continue
        seen += 1
        if seen > 2:
            fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
            samples.append(fields)
        if len(samples) >= wanted or time.monotonic() > deadline:
            break
    env.stop(p)
    if len(samples) < wanted:
        sys.exit(f"bench/metrics.py: only {len(samples)} samples")
    return samples


def sample_cost(env, lg, wanted):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4096)
    held = []
    rows = []
    for n in [100, 1_000, 10_000]:
        host_sockets(n, held, server)
        row = [f"{n:,}"]
        for chatty in [True, False]:
            got = sample_lines(env, lg, chatty, wanted)
            med = lambda k: statistics.median(int(s[k]) for s in got)
            ways = {s.get("port") for s in got}
            row += [f"{med('us'):.0f}", f"{med('port_us'):.0f}", f"{med('tree_us'):.0f}",
                    "/".join(sorted(ways))]
        times = []
        for _ in range(20):
            t = time.perf_counter()
            for name in ["/proc/net/tcp", "/proc/net/tcp6"]:
                with open(name, "rb") as f:
                    f.read()
            times.append(time.perf_counter() - t)
        row.append(f"{statistics.median(times) * 1e6:.0f}")
        rows.append(row)
    for s in held:
        s.close()
    server.close()
    return rows


def helper_pids(pid):
    """lifeguard's helper process, where the build has one: a child named
    `lifeguard-helpe` (the kernel keeps 15 characters of a name)."""
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                for child in f.read().split():
                    try:
                        with open(f"/proc/{child}/comm") as c:
                            if c.read().strip() == "lifeguard-helpe":
                                found.append(int(child))
                    except OSError:
                        pass
    except OSError:
        pass
    return found


def thread_cpu_ns(pid):
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def cpu_ns(pid):
    """An init's CPU, all its threads; lifeguard's with its helper process's."""
    return thread_cpu_ns(pid) + sum(thread_cpu_ns(h) for h in helper_pids(pid))


def drain_cost(env, lifeguards, seconds):
    """Part 4: rows of (build, namespace, CPU ms per second of the drain)."""
    rows = []
    for label, lg in lifeguards:
        for sidecar in (False, True):
            argv = in_container([lg, "--listen", "127.0.0.1:9595", "--inflight-port",
                                 str(APP_PORT), "--drain-delay", f"{seconds + 30}s",
                                 "--grace", f"{seconds + 60}s", "--"]
                                + ["python3", "-c", DRAIN_APP, str(APP_PORT),
                                   "sidecar" if sidecar else "alone"])
            p = env.start(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if p.stdout.readline().strip() != "ready":
                sys.exit("bench/metrics.py: the drain app did not start")
            pid = lifeguard_pid(p, True)
            time.sleep(5)  # past the quiet start; the helper is up
            os.kill(pid, signal.SIGTERM)
            time.sleep(2)  # the drain's looks are under way
            first, t0 = cpu_ns(pid), time.monotonic()
            time.sleep(seconds)
            ms = (cpu_ns(pid) - first) / 1e6 / (time.monotonic() - t0)
            env.stop(p)
            rows.append((label.rstrip(": ") or "this build",
                         "beside a sidecar (a new connection every 100 ms)" if sidecar
                         else "the app alone", f"{ms:.2f}"))
    return rows


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def inits(lifeguards, seconds):
    """(name, argv, in a container) for every row of part 2."""
    sleep = ["sleep", str(seconds + 120)]
    rows = []
    for label, lg in lifeguards:
        port, app_port = free_port(), free_port()
        rows += [
            (f"{label}plain child, endpoint and --inflight-port, `sleep`",
             [lg, "--listen", f"127.0.0.1:{port}", "--inflight-port", str(app_port),
              "--drain-delay", "0", "--"] + sleep, False),
            (f"{label}PID 1 of its own namespaces, `sleep`",
             in_container([lg, "--listen", "127.0.0.1:9595", "--inflight-port",
                           str(APP_PORT), "--drain-delay", "0", "--"] + sleep), True),
            (f"{label}PID 1, app with 10,000 fds and 200 threads, quiet",
             in_container([lg, "--listen", "127.0.0.1:9595", "--inflight-port",
                           str(APP_PORT), "--drain-delay", "0", "--"]
                          + app_argv(10_000, 200, False)), True),
            (f"{label}PID 1, the same app, a byte every 200 ms",
             in_container([lg, "--listen", "127.0.0.1:9595", "--inflight-port",
                           str(APP_PORT), "--drain-delay", "0", "--"]
                          + app_argv(10_000, 200, True)), True),
        ]
    lg = lifeguards[0][1]
    rows.append(("lifeguard --listen off, `sleep`",
                 [lg, "--listen", "off", "--drain-delay", "0", "--"] + sleep, False))
    for name, argv in [("tini", ["tini", "--"]), ("tini-static", ["tini-static", "--"]),
                       ("dumb-init", ["dumb-init"]), ("catatonit", ["catatonit", "--"])]:
        if shutil.which(argv[0]):
            rows.append((name, [shutil.which(argv[0])] + argv[1:] + sleep, False))
        else:
            print(f"note: {argv[0]} not installed (apt-get install tini dumb-init catatonit)",
                  file=sys.stderr)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--drain-seconds", type=int, default=20)
    ap.add_argument("--lifeguard", help="the binary to measure (default: build it)")
    ap.add_argument("--baseline", help="another lifeguard binary, for its CPU rows")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "metrics-results.md"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/metrics.py: run as root (namespaces, and thousands of sockets)")
    lifeguard = args.lifeguard or lifeguard_binary()
    env = Env()
    started = []
    try:
        costs = sample_cost(env, lifeguard, args.samples)
        lifeguards = [("", lifeguard)]
        if args.baseline:
            lifeguards.append(("baseline: ", args.baseline))
        for name, argv, contained in inits(lifeguards, args.seconds):
            p = env.start(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            started.append((name, p, lifeguard_pid(p, contained)))
        time.sleep(5)  # past start-up: the app holds its descriptors, samples are taken
        memory = {}
        for _ in range(3):
            for name, _, pid in started:
                helper = sum(status_kb(h, "RssAnon") or 0 for h in helper_pids(pid))
                memory.setdefault(name, []).append((status_kb(pid, "RssAnon"), pss_kb(pid), helper))
            time.sleep(1)
        first = {name: cpu_ns(pid) for name, _, pid in started}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - t0
        last = {name: cpu_ns(pid) for name, _, pid in started}
        for _, p, _ in started:
            env.stop(p)
        drains = drain_cost(env, lifeguards, args.drain_seconds)
    finally:
        env.close()
    lines = [
        "# lifeguard's metrics: cost side by side",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')}, kernel {os.uname().release}, "
        f"{os.cpu_count()} CPUs, CPU window {elapsed:.0f} s",
        "",
        "## One sample, release build, PID 1 of its own namespaces, an app with 10,000 "
        "descriptors and 200 threads",
        "",
        f"Medians of {args.samples} samples, µs, from lifeguard's own `metrics: sample "
        "taken` lines. *Walk*: traffic in the namespace, every look dumps the port's "
        "sockets (the kernel walks its established-socket table). *Quiet*: no segment "
        "since the last walk, the listeners alone. `port`: how the looks went.",
        "",
        "| TCP sockets on the host | walk: sample | look at the port | process tree | port "
        "| quiet: sample | look at the port | process tree | port | /proc/net/tcp{,6} read |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ] + [f"| {' | '.join(r)} |" for r in costs] + [
        "",
        "## Own CPU and idle memory",
        "",
        "| init | CPU ms over the window | % of one core | RssAnon kB (PID 1 + helper) | Pss kB (PID 1) |",
        "|---|---|---|---|---|",
    ]
    for name, _, _ in started:
        ms = (last[name] - first[name]) / 1e6
        rss = statistics.median(m[0] for m in memory[name] if m[0] is not None)
        pss = statistics.median(m[1] for m in memory[name] if m[1] is not None)
        helper = statistics.median(m[2] for m in memory[name])
        rss_text = f"{rss:.0f} + {helper:.0f}" if helper else f"{rss:.0f}"
        lines.append(f"| {name} | {ms:.1f} | {ms / 10 / elapsed:.4f} | {rss_text} | {pss:.0f} |")
    lines += ["", "CPU from /proc/PID/task/*/schedstat (nanoseconds on the CPU), all threads, "
              "lifeguard's with its helper process's.",
              "",
              f"## A drain's looks: lifeguard's CPU over {args.drain_seconds} s of a drain",
              "",
              "The app's own connection carries a byte every 200 ms, so the drain never turns "
              "quiet and every look (one every 100 ms) dumps the port's sockets. Beside a "
              "sidecar that accepts a connection every 100 ms, a build that tells the "
              "sidecar's connections from the app's also dumps the whole namespace at each look.",
              "",
              "| build | namespace | CPU ms per second of the drain |",
              "|---|---|---|",
              ] + [f"| {b} | {n} | {ms} |" for b, n, ms in drains] + [""]
    text = "\n".join(lines)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
