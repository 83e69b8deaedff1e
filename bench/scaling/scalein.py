#!/usr/bin/env python3
"""The scale-in benchmark (bench/scaling/): what `--scale-in-protection` saves when ECS
scales a service in while long jobs run. Run it through `bench/scaling/run.sh --scenario
scalein` (root; it builds lifeguard and the virtualenv first). bench/README.md's section
"Scale-in with long jobs" says what it shows and what it assumes.

This file owns the run and the ECS emulation:
- the fleet: N tasks, each lifeguard as PID 1 of a PID namespace and a network namespace
  of its own (fleet.py's replicas) running server.py, behind HAProxy; beside each task,
  in its namespace, its ECS agent stand-in (ecs_agent.py) at 127.0.0.1:51678;
- the load (scalein_load.py): short requests and long jobs, the same in both runs;
- the scheduler: at the scale-in decision the desired count falls from N to N/2; then,
  every 10 s, ECS's rule for a service's scale-in with task protection: the tasks to
  stop are picked among those not protected (the agent stand-ins' state files), in one
  fixed order (a seeded shuffle, the same in both runs); if too few are unprotected it
  stops those and tries again at the next evaluation. Stopping a task = SIGTERM to its
  lifeguard (which drains and SIGKILLs at --grace, the stop timeout);
- two runs in one sitting, identical but for lifeguard's flag: `without` (no
  --scale-in-protection: every task may be picked) and `with` (--scale-in-protection).
scalein_report.py makes results.md, summary.json and scalein.png from what the runs
leave in --out (events.jsonl; logs/ with each run's requests, agent calls and logs).
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import fleet

HERE = fleet.HERE
AGENT_PORT = 51678  # the ECS agent's own port, which ECS_AGENT_URI names on EC2

CONFIGS = {
    "full": {
        "label": "full run",
        "tasks": 6, "target": 3,
        # 150 s of load before the decision: jobs last up to 120 s, so the number in
        # flight is near its steady state, and every job older than AFTER has had its
        # protection set.
        "decision": 150,
        "after": "30s",
        # The stop: 5 s not ready (HAProxy takes the task out), then until the port is
        # quiet, at most 20 s, then the app's SIGTERM; SIGKILL at 30 s, the stop timeout.
        "drain_delay": "5s", "drain_max": "20s", "grace": "30s",
        # Load: short-request users before/after the decision, jobs one every 6 s before
        # (about 15 in flight, 2.5 a task) and one every 40 s after (the load fell).
        "users": "12,6", "job_every": "6,40", "job_min": 60, "job_max": 120,
        # How long after the decision the fleet may take to reach its target before the
        # run gives up and says so.
        "max_wait": 480,
    },
    "smoke": {
        "label": "SMOKE TEST (scaled down: 4 -> 2 tasks, jobs of 20-40 s, a 10 s stop timeout; not the benchmark's figures)",
        "tasks": 4, "target": 2, "decision": 50,
        "after": "10s",
        "drain_delay": "2s", "drain_max": "5s", "grace": "10s",
        # No job after the decision: with the settle time's floor of a minute, the
        # protections clear about 100 s after it.
        "users": "6,3", "job_every": "4,0", "job_min": 20, "job_max": 40,
        "max_wait": 240,
    },
}
COMMON = {
    # The app: 8 workers, each short request waits 200 ms (a database) and burns 1 ms
    # of CPU; a long job waits on a thread of its own. No CPU quota: this benchmark is
    # about stops, not capacity.
    "workers": 8, "wait_ms": 200.0, "cost_ms": 1.0,
    "think": 1.0, "short_timeout": 10.0,
    # ECS re-evaluates a scale-in it could not finish (assumed every 10 s).
    "ecs_every": 10,
    # The same load and the same pick order in both runs.
    "load_seed": "7", "order_seed": 11,
    # HAProxy's check of /readyz: every second, one failure takes a server out.
    "check_inter": "1s", "check_fall": 1,
    # Traffic kept after the last stopped task exited, so that its failures are counted.
    "tail": 15,
}
RUNS = ("without", "with")


def config(mode):
    cfg = dict(COMMON, **CONFIGS[mode])
    cfg["mode"] = mode
    return cfg


def seconds(text):
    return float(text.rstrip("s"))


class Log:
    """events.jsonl: every decision and change of both runs, one JSON object a line."""

    def __init__(self, path):
        self.f = open(path, "w")
        self.t0 = time.time()

    def event(self, run, kind, t=None, **fields):
        t = time.time() if t is None else t
        e = {"t": round(t, 3), "run": run, "kind": kind, **fields}
        self.f.write(json.dumps(e) + "\n")
        self.f.flush()
        if kind in ("sample", "lines"):
            return  # every 5 s, or long: in the file only
        detail = " ".join(f"{k}={v}" for k, v in fields.items())
        print(f"[{t - self.t0:7.1f} s] {run}: {kind} {detail}", flush=True)


class Agent:
    """One task's ECS agent stand-in (ecs_agent.py), started inside the task's network
    namespace so that it listens on the task's own loopback."""

    def __init__(self, netns, task_id, run_dir):
        self.task_id = task_id
        self.state = os.path.join(run_dir, f"agent-{task_id}.state.json")
        self.calls = os.path.join(run_dir, f"agent-{task_id}.calls.jsonl")
        self.log = open(os.path.join(run_dir, f"agent-{task_id}.log"), "ab")
        self.proc = subprocess.Popen(
            ["nsenter", f"--net={netns.path}", sys.executable, os.path.join(HERE, "ecs_agent.py"),
             "--task", task_id, "--port", str(AGENT_PORT), "--state", self.state, "--calls", self.calls],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log, start_new_session=True, text=True,
        )
        line = self.proc.stdout.readline()  # `ready PORT`, or EOF if it died
        if not line.startswith("ready "):
            raise RuntimeError(f"the ECS agent stand-in for {task_id} did not start; see {self.log.name}")
        self.uri = f"http://127.0.0.1:{AGENT_PORT}/api/{task_id}"

    def protected(self, now):
        """Whether ECS counts the task as protected at `now`: enabled and not expired."""
        with open(self.state) as f:
            s = json.load(f)
        return bool(s["enabled"] and s["expires_at"] is not None and s["expires_at"] > now)

    def stop(self):
        fleet.stop_server(self.proc, self.log)


class HAProxy(fleet.HAProxy):
    """fleet.HAProxy's front (one backend, a slot per task in its network namespace,
    /readyz checked every second), with server and client timeouts longer than the
    longest job (fleet's 60 s would cut them itself), and no relay to a CloudWatch
    emulator (nothing is published here)."""

    def __init__(self, run_dir, service, slots, check_inter, check_fall, longest):
        self.dir = run_dir
        self.sock = os.path.join(run_dir, "haproxy.sock")
        timeout = f"{int(longest) + 60}s"
        port = fleet.free_port()
        self.ports = {service: port}
        lines = [
            "global", f"  stats socket {self.sock} level admin", "  maxconn 4096",
            "namespace_list", *[f"  namespace {r.netns.name}" for r in slots],
            "defaults", "  mode http", "  timeout connect 2s",
            f"  timeout client {timeout}", f"  timeout server {timeout}",
            # No retries, as an ALB: a request a server fails is failed.
            "  retries 0", "  option http-server-close",
            f"frontend {service}", f"  bind 127.0.0.1:{port}", f"  default_backend {service}",
            f"backend {service}", "  balance roundrobin", "  option httpchk GET /readyz",
            f"  default-server inter {check_inter} fall {check_fall} rise 1",
        ]
        for r in slots:
            lines.append(f"  server {r.name} 127.0.0.1:{r.app_port} namespace {r.netns.name} check port {r.lg_port} disabled")
        with open(os.path.join(run_dir, "haproxy.cfg"), "w") as f:
            f.write("\n".join(lines) + "\n")
        self.log = open(os.path.join(run_dir, "haproxy.log"), "ab")
        self.proc = subprocess.Popen(
            [shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", os.path.join(run_dir, "haproxy.cfg")],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        fleet.wait_for("HAProxy's runtime API", lambda: self.proc.poll() is not None or self._try("show info"), 15)
        if self.proc.poll() is not None:
            raise RuntimeError(f"haproxy exited; see {run_dir}/haproxy.log")


class Task(fleet.Replica):
    """A task: fleet.Replica's lifeguard and server.py, with the task's ECS environment
    (ECS_AGENT_URI at its agent stand-in) and, in the `with` run, --scale-in-protection.
    No CPU cgroup: nothing here depends on the tasks' capacity."""

    def start_task(self, cfg, lifeguard, protect, agent_uri):
        argv = [
            "nsenter", f"--net={self.netns.path}",
            "unshare", "--pid", "--fork", "--mount-proc",
            lifeguard, "-v",
            "--listen", f"127.0.0.1:{self.lg_port}",
            "--inflight-port", str(self.app_port),
            "--drain-delay", cfg["drain_delay"], "--drain-max", cfg["drain_max"], "--grace", cfg["grace"],
        ]
        if protect:
            argv += ["--scale-in-protection", cfg["after"]]
        argv += [
            "--", sys.executable, os.path.join(HERE, "server.py"),
            "--port", str(self.app_port), "--workers", str(cfg["workers"]),
            "--cost-ms", str(cfg["cost_ms"]), "--wait-ms", str(cfg["wait_ms"]),
        ]
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            # What the ECS agent sets in every task (agent 1.65.0 and later).
            "ECS_AGENT_URI": agent_uri,
        }
        self.log = open(self.log_path, "ab")
        self.log_from = self.log.tell()
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.launched = time.time()
        # lifeguard's pid as the host sees it: unshare's child (nsenter execs unshare).
        kids = fleet.wait_for(f"{self.name}'s lifeguard to start", lambda: fleet.children(self.proc.pid) or self.proc.poll() is not None, 10)
        if kids is True or self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited at once; see {self.log_path}")
        self.lifeguard_pid = kids[0]

    def lifeguard_lines(self):
        """lifeguard's own log lines of this task."""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_from)
            text = f.read().decode(errors="replace")
        return [line for line in text.splitlines() if line.startswith("lifeguard: ")]

    def metric(self, name, timeout=0.5):
        """A gauge from lifeguard's /metrics, asked on the task's own loopback; None if
        it does not answer."""
        try:
            with self.netns.socket() as s:
                s.settimeout(timeout)
                s.connect(("127.0.0.1", self.lg_port))
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError:
            return None
        for line in data.decode(errors="replace").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


def run_once(run, cfg, out, lifeguard, log):
    """One run (`without` or `with`): a fresh fleet, the load, the scale-in, teardown."""
    protect = run == "with"
    run_dir = os.path.join(out, "logs", run)
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    service = f"scalein-{run}"
    namespaces, tasks, agents = [], [], {}
    haproxy = load = None
    try:
        for i in range(cfg["tasks"]):
            ns = fleet.Netns(f"lgscalein-{run}-{i}")
            namespaces.append(ns)
            tasks.append(Task(service, i, ns, run_dir))
        haproxy = HAProxy(run_dir, service, tasks, cfg["check_inter"], cfg["check_fall"], cfg["job_max"])
        for t in tasks:
            agents[t.slot] = Agent(t.netns, f"task-{run}-{t.slot}", run_dir)
            t.start_task(cfg, lifeguard, protect, agents[t.slot].uri)
            log.event(run, "launch", task=t.name, agent=agents[t.slot].uri, protect=protect)

        def poll_ready():
            for t in tasks:
                if t.ready is None and t.readyz():
                    t.ready = time.time()
                    haproxy.enable(t)
                    log.event(run, "ready", task=t.name, after=round(t.ready - t.launched, 3))
                if t.poll() is not None:
                    raise RuntimeError(f"{t.name} exited (code {t.exit_code}) before the scale-in; see {t.log_path}")
            return all(t.ready is not None for t in tasks)

        fleet.wait_for("every task to be ready", poll_ready, 60, 0.1)

        t0 = time.time() + 1.0
        t_decision = t0 + cfg["decision"]
        deadline = t_decision + cfg["max_wait"]
        load = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "scalein_load.py"),
             "--port", str(haproxy.ports[service]), "--t0", str(t0), "--decision", str(cfg["decision"]),
             "--until", str(deadline + cfg["tail"] + 60), "--out", os.path.join(run_dir, "requests.csv"),
             "--users", cfg["users"], "--think", str(cfg["think"]), "--timeout", str(cfg["short_timeout"]),
             "--job-every", cfg["job_every"], "--job-min", str(cfg["job_min"]), "--job-max", str(cfg["job_max"]),
             "--seed", cfg["load_seed"]],
            stdin=subprocess.DEVNULL, stderr=open(os.path.join(run_dir, "load.log"), "ab"), start_new_session=True,
        )
        log.event(run, "load", t0=round(t0, 3), decision=round(t_decision, 3), deadline=round(deadline, 3))
        ecs = Scheduler(run, cfg, log, tasks, agents)
        ecs.loop(t_decision, deadline)
        ended = time.time()
        load.send_signal(signal.SIGTERM)
        load.wait(timeout=30)
        load = None
        for t in tasks:
            log.event(run, "lines", task=t.name, lines=[
                line for line in t.lifeguard_lines()
                if "scale-in protection" in line or "draining" in line or "drain" in line or "grace" in line or "SIGKILL" in line or "exited" in line
            ])
        log.event(run, "end", t0=round(t0, 3), decision=round(t_decision, 3), ended=round(ended, 3))
    finally:
        if load is not None and load.poll() is None:
            load.kill()
        # The measurement is over: the tasks left are killed, not drained (their jobs'
        # clients are gone, and a drain would wait out --grace for nothing).
        for t in tasks:
            t.kill()
        for a in agents.values():
            a.stop()
        if haproxy is not None:
            haproxy.stop()
        for ns in namespaces:
            ns.delete()


class Scheduler:
    """ECS's side: the desired count, the pick among unprotected tasks, the stops, and
    the samples of every task's protection for the report."""

    def __init__(self, run, cfg, log, tasks, agents):
        self.run, self.cfg, self.log, self.tasks, self.agents = run, cfg, log, tasks, agents
        self.desired = cfg["tasks"]
        # The pick order: one seeded shuffle of the slots, the same in both runs (ECS
        # spreads a Fargate service's scale-in across Availability Zones and otherwise
        # does not document its choice; all tasks here are in one "zone").
        self.order = random.Random(cfg["order_seed"]).sample(range(cfg["tasks"]), cfg["tasks"])
        log.event(run, "order", order=[tasks[i].name for i in self.order])
        self.reached = None

    def running(self):
        """Tasks the service counts: not told to stop."""
        return [t for t in self.tasks if t.term_sent is None]

    def protected(self, now):
        return {t.slot: self.agents[t.slot].protected(now) for t in self.tasks}

    def evaluate(self, now):
        prot = self.protected(now)
        running = self.running()
        excess = len(running) - self.desired
        stopped = []
        if excess > 0:
            picks = [self.tasks[i] for i in self.order if self.tasks[i].term_sent is None and not prot[i]][:excess]
            for t in picks:
                t.terminate(now)
                stopped.append(t.name)
        self.log.event(
            self.run, "evaluate", t=now, desired=self.desired, running=len(running), excess=max(excess, 0),
            stopped=stopped, protected=[self.tasks[i].name for i in sorted(prot) if prot[i] and self.tasks[i].term_sent in (None, now)],
            short_of=max(excess, 0) - len(stopped),
        )
        if self.reached is None and len(self.running()) == self.desired:
            self.reached = now
            self.log.event(self.run, "target", t=now, desired=self.desired)

    def sample(self, now):
        """Each live task's protection, as its agent and as lifeguard's gauge say."""
        prot = self.protected(now)
        gauges = {t.name: t.metric("lifeguard_scale_in_protected") for t in self.tasks if t.exit_code is None}
        self.log.event(
            self.run, "sample", t=now,
            agent={t.name: prot[t.slot] for t in self.tasks if t.exit_code is None},
            gauge=gauges,
        )

    def loop(self, t_decision, deadline):
        next_sample = time.time()
        next_eval = t_decision
        while True:
            now = time.time()
            for t in self.tasks:
                if t.proc is not None and t.exit_code is None and t.poll() is not None:
                    if t.term_sent is None:
                        raise RuntimeError(f"{t.name} exited (code {t.exit_code}) without being stopped; see {t.log_path}")
                    self.log.event(self.run, "exited", t=t.exited, task=t.name, code=t.exit_code,
                                   after_sigterm=round(t.exited - t.term_sent, 3), drain_end=t.drain_end())
            if now >= next_sample:
                self.sample(now)
                next_sample += 5.0
            if now >= next_eval:
                if self.desired == self.cfg["tasks"]:
                    self.desired = self.cfg["target"]
                    self.log.event(self.run, "decision", t=now, desired=self.desired)
                self.evaluate(now)
                next_eval += self.cfg["ecs_every"]
            stopping = [t for t in self.tasks if t.term_sent is not None and t.exit_code is None]
            if self.reached is not None and not stopping:
                last_exit = max(t.exited for t in self.tasks if t.exited)
                if now >= last_exit + self.cfg["tail"]:
                    return
            if now >= deadline:
                self.log.event(self.run, "deadline", running=len(self.running()), desired=self.desired, stopping=len(stopping))
                return
            time.sleep(0.1)


def require(cond, message):
    if not cond:
        print(f"bench/scaling/scalein: CANNOT RUN: {message}", file=sys.stderr)
        sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="the short, scaled-down version")
    ap.add_argument("--out", help="output directory (default bench/scaling/results/scalein, or results-smoke/scalein)")
    ap.add_argument("--lifeguard", default=os.path.join(fleet.ROOT, "target", "release", "lifeguard"))
    ap.add_argument("--report-only", metavar="DIR", help="rebuild results.md, summary.json and the plot from a run's files in DIR")
    a = ap.parse_args()
    import scalein_report

    if a.report_only:
        scalein_report.report(a.report_only)
        return
    mode = "smoke" if a.smoke else "full"
    cfg = config(mode)
    out = a.out or os.path.join(HERE, "results-smoke" if a.smoke else "results", "scalein")
    require(os.geteuid() == 0, "needs root (PID and network namespaces)")
    require(os.path.isfile(a.lifeguard), f"no lifeguard at {a.lifeguard}")
    for tool in ("haproxy", "unshare", "nsenter", "ip"):
        require(shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}") or os.path.exists(f"/sbin/{tool}"), f"`{tool}` is not installed")
    os.makedirs(out, exist_ok=True)
    lifeguard = os.path.abspath(a.lifeguard)
    version = subprocess.run([lifeguard, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({**cfg, "lifeguard": version, "date": time.strftime("%Y-%m-%d")}, f, indent=1)
    log = Log(os.path.join(out, "events.jsonl"))
    print(f"bench/scaling/scalein: {cfg['label']}; {version}; output in {out}", flush=True)
    for run in RUNS:
        run_once(run, cfg, out, lifeguard, log)
    problems = scalein_report.report(out)
    print(f"bench/scaling/scalein: done; {out}/results.md, {out}/scalein.png", flush=True)
    if problems:
        print("bench/scaling/scalein: PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
