#!/usr/bin/env python3
"""Health checks at the peak: what a probe sees of lifeguard's endpoint while the app's
threads use up a CPU quota, beside a bare TCP connect and `lifeguard --probe`.

For each number of spinning threads (bench/spin.c), a cgroup with a 0.25-CPU quota
(v1 `cpu` controller, or v2 `cpu.max`) holds lifeguard as PID 1 of a PID namespace and
the app; from outside the cgroup, /readyz is asked 4 times a second with a 1 s timeout
(Kubernetes' default) for DURATION seconds, a TCP connect to the same port 4 times a
second, and inside the cgroup `lifeguard --probe` (exec to exit) once a second.
Prints one table row per thread count.

Then what one probe costs, with no quota and the app asleep: lifeguard's CPU (summed
over every thread of PID 1 and its helper, from schedstat), its context switches (the
wake-ups) and its system calls (strace -c -f on both processes) per /readyz asked on a
new connection each time, as kubelet and the ALB ask; and `lifeguard --probe` from exec
to exit (wall time and CPU). With `--baseline PATH` every table is made for a second
binary too, in the same sitting, so a change's before and after sit side by side.
Run as root:

    sudo bench/health-at-peak.sh [--threads 2,16,300] [--duration 20] [--lifeguard PATH]
                                 [--baseline PATH] [--probes 2000]
"""
import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUOTA_US, PERIOD_US = 25_000, 100_000


def root_and_spin(script, what="cgroups, PID namespaces"):
    """Refuses to run but as root; builds bench/spin.c (the spinning app) and returns
    its path."""
    if os.geteuid() != 0:
        sys.exit(f"bench/{script}: run as root ({what})")
    spin = os.path.join(tempfile.mkdtemp(), "spin")
    subprocess.run(["gcc", "-O2", "-pthread", "-o", spin, os.path.join(ROOT, "bench/spin.c")], check=True)
    return spin


def start_in_task(path, argv, ready, stderr=subprocess.DEVNULL, settle=1.0):
    """lifeguard's `argv` as PID 1 of a PID namespace in the cgroup `path`, once the
    app has said `ready`, lifeguard's ready port `ready` listens and the quota has
    throttled for `settle` s: (the wrapper's Popen, lifeguard's pid)."""
    proc = subprocess.Popen(
        ["sh", "-c", f'echo $$ > {path}/cgroup.procs && exec "$@"', "sh",
         "unshare", "--pid", "--fork", "--kill-child", "--mount-proc"] + argv,
        stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", "the app did not start"
        deadline = time.monotonic() + 60
        while tcp_probe(ready, 3.0) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("lifeguard never found the app ready")
        time.sleep(settle)  # steady throttling
        pid1 = int(open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()[0])
    except BaseException:
        end_round(proc, path)
        raise
    return proc, pid1


def cgroup(name):
    """A fresh cgroup with the quota; its procs file and a cleanup."""
    v1 = "/sys/fs/cgroup/cpu"
    if os.path.isdir(v1) and os.path.exists(f"{v1}/cpu.cfs_quota_us"):
        path = f"{v1}/{name}"
        os.makedirs(path, exist_ok=True)
        open(f"{path}/cpu.cfs_period_us", "w").write(str(PERIOD_US))
        open(f"{path}/cpu.cfs_quota_us", "w").write(str(QUOTA_US))
    else:
        path = f"/sys/fs/cgroup/{name}"
        os.makedirs(path, exist_ok=True)
        open(f"{path}/cpu.max", "w").write(f"{QUOTA_US} {PERIOD_US}")
    return path


def remove(path):
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.1)


def end_round(proc, path):
    """Kills the round's wrapper, lifts the quota so that what was SIGKILLed can finish
    exiting, and removes the cgroup."""
    proc.kill()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    for f, v in (("cpu.cfs_quota_us", "-1"), ("cpu.max", "max")):
        try:
            open(f"{path}/{f}", "w").write(v)
        except OSError:
            pass
    remove(path)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_probe(port, timeout):
    """Seconds to a /readyz answer, or None on a timeout or error."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(max(0.001, timeout - (time.monotonic() - start)))
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = s.recv(4096)
            if not data.startswith(b"HTTP/1.1 200"):
                return None
    except OSError:
        return None
    return time.monotonic() - start


def tcp_probe(port, timeout):
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            pass
    except OSError:
        return None
    return time.monotonic() - start


def every(interval, duration, f, out):
    end = time.monotonic() + duration
    while time.monotonic() < end:
        t = time.monotonic()
        out.append(f())
        time.sleep(max(0.0, interval - (time.monotonic() - t)))


def pct(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def ms(v):
    return "—" if v is None else f"{v * 1000:,.0f} ms"


def run(lifeguard, spin, threads, duration):
    path = cgroup(f"lifeguard-peak-{os.getpid()}-{threads}")
    port = free_port()
    # Into the cgroup first, then the namespace: lifeguard and the app are inside.
    cmd = [
        "sh", "-c", f'echo $$ > {path}/cgroup.procs && exec "$@"', "sh",
        "unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
        lifeguard, "--drain-delay", "0", "--listen", f"127.0.0.1:{port}", "--", spin, str(threads),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", "the app did not start"
        deadline = time.monotonic() + 30
        while tcp_probe(port, 1.0) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("lifeguard's endpoint never listened")
            time.sleep(0.1)
        time.sleep(2)  # the quota reaches its steady throttling
        http, tcp, probe = [], [], []

        def probe_once():
            start = time.monotonic()
            r = subprocess.run(
                ["sh", "-c", f'echo $$ > {path}/cgroup.procs && exec "$@"', "sh",
                 lifeguard, "--probe", f"http://127.0.0.1:{port}/readyz", "--probe-timeout", "1s"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return time.monotonic() - start if r.returncode == 0 else None

        workers = [
            threading.Thread(target=every, args=(0.25, duration, lambda: http_probe(port, 1.0), http)),
            threading.Thread(target=every, args=(0.25, duration, lambda: tcp_probe(port, 1.0), tcp)),
            threading.Thread(target=every, args=(1.0, duration, probe_once, probe)),
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        remove(path)
    ok = [v for v in http if v is not None]
    tcp_ok = [v for v in tcp if v is not None]
    probe_ok = [v for v in probe if v is not None]
    return (
        f"| {threads} | {len(http) - len(ok)} of {len(http)} | {ms(pct(ok, 0.5))} | {ms(pct(ok, 0.99))} "
        f"| {len(tcp_ok)} of {len(tcp)}, max {ms(max(tcp_ok) if tcp_ok else None)} "
        f"| {len(probe) - len(probe_ok)} of {len(probe)} failed, p50 {ms(pct(probe_ok, 0.5))} |"
    )


def tasks_of(pids):
    return [f"/proc/{p}/task/{t}" for p in pids for t in os.listdir(f"/proc/{p}/task")]


def cpu_and_switches(pids):
    """CPU nanoseconds and context switches so far, over every thread of `pids`."""
    cpu = switches = 0
    for task in tasks_of(pids):
        try:
            cpu += int(open(f"{task}/schedstat").read().split()[0])
            for line in open(f"{task}/status"):
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
        except OSError:
            pass  # a thread that ended between the listing and the read
    return cpu, switches


def lifeguard_pids(unshare_pid):
    """PID 1 of the namespace (unshare's child) and, where there is one, its helper."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = open(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read().split()
        if children:
            pid1 = children[0]
            kids = open(f"/proc/{pid1}/task/{pid1}/children").read().split()
            helpers = [k for k in kids if open(f"/proc/{k}/comm").read().startswith("lifeguard-helpe")]  # comm keeps 15 characters
            # The helper is forked 10 ms after the app; a build without one has two kids
            # (the app) and no helper, which is its whole answer.
            if helpers or (kids and time.monotonic() > deadline - 8):
                return [pid1] + helpers
        time.sleep(0.05)
    raise RuntimeError("lifeguard's processes did not show")


def exec_cost(cmd, runs):
    """Median wall time and mean CPU (user + system) of `cmd`, exec to exit, in seconds."""
    walls = []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(runs):
        t = time.monotonic()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        walls.append(time.monotonic() - t)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return statistics.median(walls), cpu / runs


def cost(lifeguard, probes):
    """One row of the cost table for `lifeguard`."""
    port = free_port()
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
         lifeguard, "--drain-delay", "0", "--listen", f"127.0.0.1:{port}", "--", "sleep", "1000000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while http_probe(port, 1.0) is None:
            if time.monotonic() > deadline:
                raise RuntimeError("lifeguard's endpoint never answered")
            time.sleep(0.1)
        pids = lifeguard_pids(proc.pid)
        for _ in range(50):  # warm
            http_probe(port, 1.0)
        cpu0, sw0 = cpu_and_switches(pids)
        failed = sum(http_probe(port, 1.0) is None for _ in range(probes))
        cpu1, sw1 = cpu_and_switches(pids)
        # System calls: strace on both processes for a tenth of the probes.
        traced = max(100, probes // 10)
        out = tempfile.mktemp()
        st = subprocess.Popen(["strace", "-c", "-f", "-o", out] + [a for p in pids for a in ("-p", p)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # strace attaches; nothing to wait on but its ptrace
        for _ in range(traced):
            http_probe(port, 1.0)
        st.terminate()
        st.wait(10)
        calls = 0
        for line in open(out):
            words = line.split()
            if words and words[-1] == "total":
                calls = int(words[3] if len(words) >= 5 else words[2])
        os.unlink(out)
        # `lifeguard --probe`, exec to exit, against the same endpoint.
        probe_wall, probe_cpu = exec_cost([lifeguard, "--probe", f"http://127.0.0.1:{port}/readyz"], probes // 10)
    finally:
        proc.kill()  # unshare --kill-child takes lifeguard and the app with it
        proc.wait()
    return (
        f"| {(cpu1 - cpu0) / probes / 1000:.0f} µs | {(sw1 - sw0) / probes:.1f} "
        f"| {calls / traced:.1f} | {failed} of {probes} "
        f"| {probe_wall * 1000:.2f} ms | {probe_cpu * 1000:.2f} ms |"
    )


def version(lifeguard):
    return subprocess.run([lifeguard, "--version"], capture_output=True, text=True).stdout.strip() or lifeguard


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="2,16,300")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--lifeguard", default=os.path.join(ROOT, "target/release/lifeguard"))
    ap.add_argument("--baseline", help="another lifeguard binary measured beside it")
    ap.add_argument("--probes", type=int, default=2000)
    args = ap.parse_args()
    spin = root_and_spin("health_at_peak.py")
    if not os.path.exists(args.lifeguard):
        subprocess.run(["cargo", "build", "--release", "--bin", "lifeguard"], cwd=ROOT, check=True)
    if subprocess.run(["sh", "-c", "command -v strace"], stdout=subprocess.DEVNULL).returncode != 0:
        sys.exit("bench/health_at_peak.py: strace is missing (scripts/packages.sh bench installs it)")
    binaries = [("", args.lifeguard)] + ([("baseline ", args.baseline)] if args.baseline else [])
    for label, lifeguard in binaries:
        print(f"# {label}lifeguard {version(lifeguard)}")
        print(f"# quota {QUOTA_US / PERIOD_US:.2f} CPU, /readyz and TCP 4/s with a 1 s timeout, "
              f"`lifeguard --probe` inside the cgroup 1/s, {args.duration:.0f} s each")
        print("| runnable app threads | HTTP /readyz failed | p50 | p99 | TCP connect ok | lifeguard --probe |")
        print("|---|---|---|---|---|---|")
        for n in [int(t) for t in args.threads.split(",")]:
            print(run(lifeguard, spin, n, args.duration), flush=True)
        print()
    print(f"# one probe's cost, no quota, the app asleep: {args.probes} /readyz on a new connection each; "
          f"`lifeguard --probe` {args.probes // 10} times")
    print("| build | lifeguard CPU per /readyz | context switches per /readyz | system calls per /readyz "
          "| failed | `--probe` exec to exit, p50 | `--probe` CPU |")
    print("|---|---|---|---|---|---|---|")
    for label, lifeguard in binaries:
        print(f"| {label or 'this '}build " + cost(lifeguard, args.probes), flush=True)
    floor = subprocess.run(["sh", "-c", "command -v tini-static"], capture_output=True, text=True).stdout.strip()
    if floor:
        walls, cpu = exec_cost([floor, "--version"], args.probes // 10)
        print(f"\nThe floor for any static binary's exec to exit, `tini-static --version`: "
              f"p50 {walls * 1000:.2f} ms, CPU {cpu * 1000:.2f} ms.")


if __name__ == "__main__":
    main()
