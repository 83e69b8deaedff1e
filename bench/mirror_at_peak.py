#!/usr/bin/env python3
"""The readiness mirror at the peak: an ALB's HTTP checks of a task whose app uses up
its CPU quota, answered by the mirror from a sibling cgroup beside lifeguard's own
/readyz in the app's cgroup; the time a new task needs to be healthy with the ECS
example's old and new target-group settings; and how late the helper's figures are at
the same peak.

A task as ECS (awsvpc, Fargate) and Kubernetes lay it out: a parent cgroup with the
task's quota (0.25 CPU: v1 `cpu.cfs_quota_us`, or v2 `cpu.max`), and a cgroup for each
container under it: `app` (cpu.shares 1024) holds lifeguard (`--ready-port`, its
endpoint on, `--inflight-port` on a listener of this script's, CloudWatch as EMF
records on stdout every 10 s) and the app (bench/spin.c, THREADS spinning threads);
`mirror` holds `lifeguard --mirror-ready-port`, at cpu.shares 64 (the example's ECS
`cpu`) and then 2 (ECS's value for a container without `cpu`).

For DURATION seconds at each share, from outside the task: GET /readyz of the mirror
and of lifeguard's endpoint every 5 s with a 2 s timeout (the example's target group),
and of the mirror every 0.5 s too: failures, the longest run of them, p50, p99.
Meanwhile, every 5 s, /metrics is scraped and its `lifeguard_cpu_usage_seconds_total`
held against the app cgroup's own cpuacct.usage read when the answer arrives: their
difference over the task's 0.25 CPU/s is the age of the newest sample the scrape saw;
and each EMF record's distance from the one before (10 s when on time) and the number
of 1-second in-flight samples in it (10 when none was missed).

A new task: lifeguard and the mirror started with the app idle (a new task takes no
traffic before it is healthy), checked as an ALB does from the moment it is registered
(at once, then every interval): healthy after HEALTHY checks in a row. Old settings:
lifeguard's /readyz on 9595, every 10 s, 6 s timeout, 2 in a row; new: the mirror's,
every 5 s, 2 s timeout, 2 in a row. TRIALS each, with a random phase of the first
check within one interval (the balancer's checks are not aligned with the task's start).

    sudo bench/mirror-at-peak.sh [--threads 300] [--duration 300] [--trials 5]
                                 [--lifeguard PATH] [--shares 64,2]
"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from health_at_peak import QUOTA_US, root_and_spin, PERIOD_US, cgroup, free_port, pct, remove, version  # noqa: E402
from ready_port_at_peak import ms, series, streak  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPUACCT = "/sys/fs/cgroup/cpuacct"


def get(port, path, timeout):
    """(seconds, body) for a 200, or None: a new connection each time, as a balancer's."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(max(0.001, timeout - (time.monotonic() - start)))
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return None
    took = time.monotonic() - start
    if took >= timeout or not data.startswith(b"HTTP/1.1 200"):
        return None
    return took, data.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")


class Task:
    """The parent cgroup with the quota, a child per container; in cpuacct too on v1,
    where it is mounted apart, so that lifeguard samples the app's own group."""

    def __init__(self, name):
        self.parent = cgroup(name)
        self.v2 = not self.parent.startswith("/sys/fs/cgroup/cpu/")
        self.name = name
        self.children = []

    def container(self, name, shares):
        path = os.path.join(self.parent, name)
        os.makedirs(path, exist_ok=True)
        if self.v2:
            open(f"{path}/cpu.weight", "w").write(str(1 + ((max(shares, 2) - 2) * 9999) // 262142))
        else:
            open(f"{path}/cpu.shares", "w").write(str(shares))
        dirs = [path]
        if not self.v2 and os.path.isdir(CPUACCT) and not os.path.samefile(CPUACCT, "/sys/fs/cgroup/cpu"):
            acct = os.path.join(CPUACCT, self.name, name)
            os.makedirs(acct, exist_ok=True)
            dirs.append(acct)
        self.children.append(dirs)
        return dirs

    def usage(self, dirs):
        """The group's CPU seconds so far, as lifeguard reads them."""
        if self.v2:
            for line in open(f"{dirs[0]}/cpu.stat"):
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        return int(open(f"{dirs[-1]}/cpuacct.usage").read()) / 1e9

    def throttled(self):
        for line in open(f"{self.parent}/cpu.stat"):
            if line.startswith("nr_throttled "):
                return int(line.split()[1])
        return 0

    def remove(self):
        for f, v in (("cpu.cfs_quota_us", "-1"), ("cpu.max", "max")):
            try:
                open(f"{self.parent}/{f}", "w").write(v)
            except OSError:
                pass
        for dirs in self.children:
            for d in dirs:
                remove(d)
        if not self.v2:
            remove(os.path.join(CPUACCT, self.name))
        remove(self.parent)


def start_in(dirs, argv, **kw):
    moves = "".join(f"echo $$ > {d}/cgroup.procs && " for d in dirs)
    return subprocess.Popen(["sh", "-c", moves + 'exec "$@"', "sh"] + argv, **kw)


def wait_for(what, cond, limit=60):
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {limit} s")
        time.sleep(0.1)


def peak(lifeguard, spin, threads, duration, shares):
    task = Task(f"lifeguard-mirror-bench-{os.getpid()}")
    app_dirs = task.container("app", 1024)
    mirror_dirs = task.container("mirror", shares)
    endpoint, ready, mirror = free_port(), free_port(), free_port()
    # The app's "port": a listener of this script's, so lifeguard is ready and samples a
    # real socket every second (in flight 0: nobody connects).
    app_port = socket.socket()
    app_port.bind(("127.0.0.1", 0))
    app_port.listen()
    env = dict(os.environ, METRICS_NAMESPACE="Bench/mirror", METRICS_SINK="emf",
               METRICS_INTERVAL="10", AWS_REGION="us-east-1")
    procs = []
    records = []
    try:
        procs.append(start_in(mirror_dirs, [lifeguard, "--mirror-ready-port", str(ready),
                                            "--listen", f"127.0.0.1:{mirror}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # As PID 1 of a PID namespace of its own, which dies with it: nothing of the app
        # outlives the round (a SIGKILLed subreaper would leave 300 threads spinning).
        app = start_in(app_dirs, ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
                                  lifeguard, "--drain-delay", "0", "--listen", f"127.0.0.1:{endpoint}",
                                  "--ready-port", str(ready), "--inflight-port",
                                  str(app_port.getsockname()[1]), "--", spin, str(threads)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        procs.append(app)
        assert app.stdout.readline().strip() == "ready", "the app did not start"
        said = []

        def read_log():
            # The helper's watchdog at the peak: a restart, or a thread said starved.
            for line in app.stderr:
                if "the helper process hangs" in line or "starved of CPU" in line \
                        or "stops its heartbeat" in line:
                    said.append(line.strip())

        threading.Thread(target=read_log, daemon=True).start()

        def read_records():
            for line in app.stdout:
                if line.startswith("{"):
                    records.append((time.time(), json.loads(line)))

        reader = threading.Thread(target=read_records, daemon=True)
        reader.start()
        wait_for("the mirror to answer 200", lambda: get(mirror, "/readyz", 2.0) is not None)
        time.sleep(2)  # the quota reaches its steady throttling
        throttled = task.throttled()
        kinds = [
            ("the mirror, every 5 s, 2 s timeout (the example's target group)", 5, lambda: get(mirror, "/readyz", 2.0)),
            ("lifeguard's `/readyz` in the app's cgroup, every 5 s, 2 s timeout", 5, lambda: get(endpoint, "/readyz", 2.0)),
            ("the mirror, every 0.5 s, 2 s timeout", 0.5, lambda: get(mirror, "/readyz", 2.0)),
        ]
        results = [[] for _ in kinds]
        ages = []

        def scrape():
            got = get(endpoint, "/metrics", 10.0)
            now_usage = task.usage(app_dirs)
            if got is None:
                return None
            for line in got[1].splitlines():
                if line.startswith("lifeguard_cpu_usage_seconds_total "):
                    reported = float(line.split()[1])
                    ages.append((now_usage - reported) / (QUOTA_US / PERIOD_US))
            return got

        workers = [threading.Thread(target=series, args=(interval, duration, f, out))
                   for (_, interval, f), out in zip(kinds, results)]
        workers.append(threading.Thread(target=series, args=(5, duration, scrape, [])))
        first_record = len(records)
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        throttled = task.throttled() - throttled
    finally:
        for p in procs:
            p.kill()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        app_port.close()
        task.remove()
    rows = []
    for (name, interval, _), out in zip(kinds, results):
        ok = [v[0] for v in out if v is not None]
        rows.append(f"| {name} | {len(out) - len(ok)} of {len(out)} | {streak(out)} "
                    f"| {ms(pct(ok, 0.5))} | {ms(pct(ok, 0.99))} |")
    emf = records[first_record:]
    gaps = [(b[1]["_aws"]["Timestamp"] - a[1]["_aws"]["Timestamp"]) / 1000 for a, b in zip(emf, emf[1:])]
    samples = [len(r["RequestsInFlight"]) if isinstance(r.get("RequestsInFlight"), list) else 1
               for _, r in emf if "RequestsInFlight" in r]
    late = [arrived - r["_aws"]["Timestamp"] / 1000 for arrived, r in emf]
    lateness = {
        "restarts": sum("the helper process hangs" in l for l in said),
        "starved": [l for l in said if "starved of CPU" in l],
        "throttled": throttled,
        "ages": ages,
        "gaps": gaps,
        "samples": samples,
        "late": late,
    }
    return rows, lateness


def new_task(lifeguard, old, trials):
    """Seconds from a task's start to healthy under an ALB's rule, `trials` times."""
    interval, timeout, healthy, which = old
    out = []
    for _ in range(trials):
        endpoint, ready, mirror = free_port(), free_port(), free_port()
        port = endpoint if which == "lifeguard" else mirror
        procs = []
        try:
            t0 = time.monotonic()
            procs.append(subprocess.Popen([lifeguard, "--mirror-ready-port", str(ready), "--listen",
                                           f"127.0.0.1:{mirror}"], stderr=subprocess.DEVNULL))
            procs.append(subprocess.Popen([lifeguard, "--drain-delay", "0", "--grace", "2s", "--listen",
                                           f"127.0.0.1:{endpoint}", "--ready-port", str(ready), "--",
                                           "sleep", "3600"], stderr=subprocess.DEVNULL))
            # The first check within one interval of the registration.
            time.sleep(random.uniform(0, interval))
            run = 0
            while True:
                at = time.monotonic()
                run = run + 1 if get(port, "/readyz", timeout) is not None else 0
                if run >= healthy:
                    out.append(time.monotonic() - t0)
                    break
                time.sleep(max(0.0, at + interval - time.monotonic()))
        finally:
            for p in procs:
                p.terminate()
                p.wait()
    return out


def cpu_seconds(pids):
    """utime + stime of `pids`, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def helper_of(pid):
    for child in open(f"/proc/{pid}/task/{pid}/children").read().split():
        if open(f"/proc/{child}/comm").read().startswith("lifeguard-helpe"):
            return int(child)
    return None


def check_cost(lifeguard, n):
    """CPU per `/readyz` on a new connection, no quota, the app asleep: the mirror's
    process against lifeguard's helper (which serves the endpoint)."""
    endpoint, ready, mirror = free_port(), free_port(), free_port()
    procs = [subprocess.Popen([lifeguard, "--mirror-ready-port", str(ready), "--listen",
                               f"127.0.0.1:{mirror}"], stderr=subprocess.DEVNULL),
             subprocess.Popen([lifeguard, "--drain-delay", "0", "--grace", "2s", "--listen",
                               f"127.0.0.1:{endpoint}", "--ready-port", str(ready), "--", "sleep", "3600"],
                              stderr=subprocess.DEVNULL)]
    try:
        wait_for("the mirror to answer 200", lambda: get(mirror, "/readyz", 2.0) is not None)
        wait_for("the helper", lambda: helper_of(procs[1].pid) is not None)
        out = []
        for port, pids in ((mirror, [procs[0].pid]), (endpoint, [procs[1].pid, helper_of(procs[1].pid)])):
            before = cpu_seconds(pids)
            for _ in range(n):
                assert get(port, "/readyz", 2.0) is not None
            out.append((cpu_seconds(pids) - before) / n)
        return out
    finally:
        for p in procs:
            p.terminate()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=300)
    ap.add_argument("--duration", type=float, default=300)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--shares", default="64,2")
    ap.add_argument("--lifeguard", default=os.path.join(ROOT, "target/x86_64-unknown-linux-musl/release/lifeguard"))
    args = ap.parse_args()
    spin = root_and_spin("mirror_at_peak.py", "cgroups")
    print(f"# lifeguard {version(args.lifeguard)}; a task of {QUOTA_US / PERIOD_US:.2f} CPU, "
          f"{args.threads} spinning app threads, {args.duration:.0f} s at each share", flush=True)
    for shares in [int(s) for s in args.shares.split(",")]:
        rows, late = peak(args.lifeguard, spin, args.threads, args.duration, shares)
        print(f"\n## The mirror at cpu.shares {shares} (throttled {late['throttled']} times)\n")
        print("| check | failed | longest run of failures | p50 | p99 |")
        print("|---|---|---|---|---|")
        for row in rows:
            print(row)
        a, g, s, lt = late["ages"], late["gaps"], late["samples"], late["late"]
        print(f"\nHow late the helper's figures are at this peak: the newest sample a scrape of "
              f"/metrics saw was p50 {pct(a, 0.5) or 0:.1f} s, max {max(a, default=0):.1f} s old "
              f"({len(a)} scrapes that answered within 10 s); EMF records every "
              f"p50 {pct(g, 0.5) or 0:.1f} s, max {max(g, default=0):.1f} s (10 s on time; {len(g) + 1} records), "
              f"each with p50 {pct(s, 0.5) or 0:.0f}, min {min(s, default=0)} of 10 one-second in-flight samples; "
              f"a record reached stdout's reader p50 {(pct(lt, 0.5) or 0) * 1000:.0f} ms after its timestamp.",
              flush=True)
        print(f"\nThe helper's watchdog at this peak: {late['restarts']} helper restarts; "
              f"{len(late['starved'])} spells of a starved thread said"
              + "".join(f"\n- `{l}`" for l in late["starved"][:5]), flush=True)
    n = 5000
    mirror_cost, endpoint_cost = check_cost(args.lifeguard, n)
    print(f"\n## CPU per check, {n} GET /readyz on new connections, no quota\n")
    print("| who answers | CPU per check |")
    print("|---|---|")
    print(f"| the readiness mirror | {mirror_cost * 1e6:.0f} µs |")
    print(f"| lifeguard's endpoint (PID 1 and its helper) | {endpoint_cost * 1e6:.0f} µs |", flush=True)
    print(f"\n## A new task's time to healthy, median of {args.trials} (min–max), from its start\n")
    print("| target group | checks | time to healthy | a dead task pulled after |")
    print("|---|---|---|---|")
    for label, setting, unhealthy in [
        ("old: lifeguard's /readyz on 9595", (10, 6, 2, "lifeguard"), 3),
        ("new: the mirror's /readyz on 9597", (5, 2, 2, "mirror"), 2),
    ]:
        took = new_task(args.lifeguard, setting, args.trials)
        interval, timeout, healthy, _ = setting
        print(f"| {label} | every {interval} s, {timeout} s timeout, healthy {healthy}, unhealthy {unhealthy} "
              f"| {statistics.median(took):.1f} s ({min(took):.1f}–{max(took):.1f}) "
              f"| {interval * unhealthy} s |", flush=True)


if __name__ == "__main__":
    main()
