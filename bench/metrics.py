#!/usr/bin/env python3
"""The cost of lifeguard's metrics, side by side with tini, dumb-init and catatonit.

1. One sample (the cgroup files plus one sock_diag dump) with 100, 1,000 and 10,000 TCP
   sockets open on the host, against parsing /proc/net/tcp{,6}: the ignored unit test
   `metrics::tests::bench_one_sample`, in a release build.
2. Each init's own CPU over the same window (default 300 s) while it supervises
   `sleep`: lifeguard with its endpoint on and `--inflight-port` (sampling once a
   second), the peers as they are. All run at once, so they share the machine's noise.
3. Idle RssAnon and Pss of each init with the same setup, median of 3 readings.

As root; standard library only. `--seconds N` shortens the CPU window (a smoke test).
Writes a markdown table to bench/metrics-results.md and prints it.
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = "x86_64-unknown-linux-musl"
BENCH_TARGET = "/tmp/bench-target"


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


def sample_cost():
    out = subprocess.run(
        ["cargo", "test", "--release", "--bin", "lifeguard", "bench_one_sample",
         "--", "--ignored", "--nocapture"],
        cwd=ROOT, capture_output=True, text=True,
    )
    rows = [l for l in out.stdout.splitlines() if l.count("|") == 3 and l[:1].isdigit()]
    if not rows:
        sys.exit(f"bench_one_sample printed nothing:\n{out.stdout}\n{out.stderr}")
    return rows


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime: fields 14 and 15 of stat, 12 and 13 after the comm.
    return int(fields[11]) + int(fields[12])


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


def inits(lifeguard):
    port, app_port = free_port(), free_port()
    rows = [(
        "lifeguard (endpoint, --inflight-port)",
        [lifeguard, "--listen", f"127.0.0.1:{port}", "--inflight-port", str(app_port),
         "--drain-delay", "0", "--"],
    ), ("lifeguard --listen off", [lifeguard, "--listen", "off", "--drain-delay", "0", "--"])]
    for name, argv in [("tini", ["tini", "--"]), ("tini-static", ["tini-static", "--"]),
                       ("dumb-init", ["dumb-init"]), ("catatonit", ["catatonit", "--"])]:
        if shutil.which(argv[0]):
            rows.append((name, [shutil.which(argv[0])] + argv[1:]))
        else:
            print(f"note: {argv[0]} not installed (apt-get install tini dumb-init catatonit)",
                  file=sys.stderr)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "metrics-results.md"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/metrics.py: run as root (the sample bench raises its descriptor limit)")
    lifeguard = lifeguard_binary()
    costs = sample_cost()
    started = []
    try:
        for name, argv in inits(lifeguard):
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("LIFEGUARD_", "TINI_", "DUMB_INIT_"))}
            p = subprocess.Popen(argv + ["sleep", str(args.seconds + 60)], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
            started.append((name, p))
        time.sleep(3)  # past start-up: the sampler has taken its first samples
        memory = {}
        for _ in range(3):
            for name, p in started:
                memory.setdefault(name, []).append((status_kb(p.pid, "RssAnon"), pss_kb(p.pid)))
            time.sleep(1)
        first = {name: cpu_ticks(p.pid) for name, p in started}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - t0
        last = {name: cpu_ticks(p.pid) for name, p in started}
    finally:
        for _, p in started:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    hz = os.sysconf("SC_CLK_TCK")
    lines = [
        "# lifeguard's metrics: cost side by side",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')}, kernel {os.uname().release}, "
        f"{os.cpu_count()} CPUs, CPU window {elapsed:.0f} s",
        "",
        "## One sample (cgroup files + one sock_diag dump), release build",
        "",
        "| TCP sockets on the host | one sample µs (median of 200) | sock_diag alone µs | /proc/net/tcp{,6} µs |",
        "|---|---|---|---|",
    ] + [f"| {r} |" for r in costs] + [
        "",
        "## Own CPU and idle memory, supervising `sleep`",
        "",
        "| init | CPU ms over the window | % of one core | RssAnon kB | Pss kB |",
        "|---|---|---|---|---|",
    ]
    for name, _ in started:
        ms = (last[name] - first[name]) * 1000 / hz
        rss = statistics.median(m[0] for m in memory[name] if m[0] is not None)
        pss = statistics.median(m[1] for m in memory[name] if m[1] is not None)
        lines.append(f"| {name} | {ms:.0f} | {ms / 10 / elapsed:.4f} | {rss:.0f} | {pss:.0f} |")
    lines += ["", "CPU ticks are 1/%d s: a figure of 0 means under one tick." % hz, ""]
    text = "\n".join(lines)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
