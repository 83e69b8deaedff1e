#!/usr/bin/env python3
"""The scaling benchmark (bench/scaling/): from a load step to a scaling decision, end to
end, on this machine. Run it through bench/scaling/run.sh (root; it builds lifeguard and
the virtualenv first). bench/README.md says what it shows and what it assumes.

Two scenarios, one after the other in the same sitting (`--scenario cpu|worker|both`):
- `cpu`: each request burns CPU in proportion to the load (4 ms of CPU after a 500 ms
  wait), so the replica's CPU saturates with its workers;
- `worker`: each request waits 500 ms on a slow dependency and burns 0.5 ms of CPU: the
  8 workers fill, connections queue in the accept queue, and CPU stays far below any
  CPU alarm's threshold. Callers give up after 3 s, so a long queue turns into errors.

In each, two fleets of the same test server, each replica under lifeguard as PID 1 of a
PID namespace and a network namespace of its own (as an awsvpc task or a pod), behind
one HAProxy, with the same users on each:
- the live fleet (`cpu`, `worker`), scaled by an autoscaler that follows CloudWatch's
  and Application Auto Scaling's rules on lifeguard's data as the emulator holds it
  (10-second p50 alarms, bursts, step scaling +200 % out, +400 % when saturated, -25 %
  in);
- the held fleet (`cpu-held`, `worker-held`), never scaled: what a service looks like
  until its autoscaler decides. Its data is replayed afterwards through the signal
  models (lifeguard's; AWS's 20-second CPU; AWS's built-in 1-minute CPU, and the
  1-minute metrics with the in-flight figure standing in for the balancer's request
  count, both 3 minutes late) to find when each would have decided, or that it never
  does. Until a model decides, its fleet is the held one, so the held fleet's data is
  exactly what that model would have seen.

Writes into --out/<scenario>/: summary.json (every figure), results.md (the tables),
scaling.png, events.jsonl (every decision and replica change), ticks.csv (each live
evaluation), and, not kept in git, requests.csv (every request), datums.json (the
emulator's data) and logs/; and --out/results.md, both scenarios' headlines.
"""
import argparse
import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import fleet
import model

HERE = fleet.HERE
NAMESPACE = "LifeguardBench/web"

# What differs between the full run and the smoke test. The full run's scaling settings
# are examples/ecs/scaling.yaml's except where noted in bench/README.md (capacity
# bounds for 2 cores, and the thresholds of this app).
CONFIGS = {
    "full": {
        "label": "full run",
        "min": 2, "max": 6, "held": 2, "think": 1.0,
        "baseline_min": 30, "step_phase": 5, "step_len": 120,
        "cooldown": 60, "reinvoke": 60, "low_periods": 6,
        "settle_max": 420,
    },
    "smoke": {
        "label": "SMOKE TEST (scaled down: 1-3 replicas, 15 s cooldowns and repeats, a 20 s low alarm at 1 in flight; not the benchmark's figures)",
        "min": 1, "max": 3, "held": 1, "think": 1.0,
        # The step 25 s after the start, wherever that falls in the minute: the runs
        # need not compare, and waiting for the phase would add 30 s on average.
        "baseline_min": 25, "step_phase": None, "step_len": 50,
        "cooldown": 15, "reinvoke": 15, "low_periods": 2,
        # The low alarm at 1 in flight, not 2: on 2 periods, the CPU step at 3 replicas
        # (about 2.5 in flight a replica, its p50 2 or 3 by the second) sent it into ALARM
        # during the step (a scale-in at +43 s, seen in CI). After the step a replica holds
        # under 1, so the scale-in comes as before.
        "low_threshold": 1,
        "settle_max": 150,
    },
}
# The two apps, and their load in each mode (users before and during the step).
SCENARIOS = {
    "cpu": {
        "title": "CPU-bound: each request burns 4 ms of CPU after its 500 ms wait",
        # 8 workers, 4 ms of CPU and a 500 ms wait a request, 5 % of a core: about 8
        # requests/s a replica at saturation (measured; the CPU quota and the workers
        # both bind there, the workers waiting longer for CPU).
        "cost_ms": 4.0,
        # About 2.2 times what the fleet's minimum serves, during the step.
        "users": {"full": (9, 54), "smoke": (5, 27)},
        "request_timeout": 10.0,
    },
    "worker": {
        "title": "worker-bound: each request waits 500 ms on a dependency and burns 0.5 ms of CPU",
        # 8 workers held 500 ms each: 16 requests/s a replica, at about a quarter of the
        # CPU quota (0.7 ms of CPU a request measured with Python's own overhead).
        "cost_ms": 0.5,
        # About 2.7 times what the fleet's minimum serves: at the minimum a request
        # would wait about 3 s in the queue, as long as its caller waits for it.
        "users": {"full": (9, 128), "smoke": (5, 64)},
        # Callers that give up: a queue long enough turns into errors (the served
        # request is then wasted work for the replica).
        "request_timeout": 3.0,
    },
}
COMMON = {
    "workers": 8, "wait_ms": 500.0, "cpu_cores": 0.05,
    # lifeguard's drain as examples/ecs/task-definition.json sets it; --drain-quiet is
    # its default, 1 s.
    "drain_delay": "5s", "drain_max": "15s", "grace": "25s", "drain_quiet_s": 1.0,
    # METRICS_BURST_THRESHOLD, and the in-flight alarm's threshold (the module's rule).
    "threshold": 8,
    # InFlightSaturatedPerTask: three times the high one, as examples/ecs/scaling.yaml's
    # 60 of 20; that alarm's policy adds 400 % instead of 200 %.
    "saturated_threshold": 24, "saturated_percent": 400,
    # InFlightLowPerTask: a quarter of the high one, as examples/ecs/scaling.yaml's 5 of 20.
    "low_threshold": 2,
    # CpuPercent as in examples/ecs/scaling.yaml.
    "cpu_threshold": 70.0,
    "period": 10, "interval": 10,
    # HAProxy's check of /readyz: every second, one failure takes a server out.
    "check_inter": "1s", "check_fall": 1,
    # The signal models replayed on the held fleet.
    "late_period": 60, "late_lag": 180, "cpu20_period": 20,
}


def scenario_config(mode, scenario):
    sc = SCENARIOS[scenario]
    cfg = dict(COMMON, **CONFIGS[mode])
    cfg.update({k: v for k, v in sc.items() if k != "users"})
    cfg["users_low"], cfg["users_high"] = sc["users"][mode]
    cfg["mode"], cfg["scenario"] = mode, scenario
    cfg["service"], cfg["held_service"] = scenario, f"{scenario}-held"
    # A drain ends when the balancer has stopped sending: the drain delay, the
    # balancer's detection of the 503 (a check interval per failure it needs), the
    # quiet time, and a second for the looks and the app's exit.
    inter = float(cfg["check_inter"].rstrip("s"))
    cfg["drain_goal_s"] = float(cfg["drain_delay"].rstrip("s")) + inter * cfg["check_fall"] + cfg["drain_quiet_s"] + 1.0
    return cfg


class Log:
    def __init__(self, path, t0):
        self.f = open(path, "w")
        self.t0 = t0
        self.events = []

    def event(self, t, kind, **fields):
        e = {"t": round(t, 3), "kind": kind, **fields}
        self.events.append(e)
        self.f.write(json.dumps(e) + "\n")
        self.f.flush()
        if kind == "policy" and not fields.get("acted"):
            return  # a repeat that changed nothing (at a bound, or in cooldown): file only
        detail = " ".join(f"{k}={v}" for k, v in fields.items())
        print(f"[{t - self.t0:7.1f} s] {kind} {detail}", flush=True)


def require(cond, message):
    if not cond:
        print(f"bench/scaling: CANNOT RUN: {message}", file=sys.stderr)
        sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="the short, scaled-down version (CI)")
    ap.add_argument("--scenario", choices=("cpu", "worker", "both"), default="both", help="which app (default: both, one after the other)")
    ap.add_argument("--out", help="output directory (default bench/scaling/results, or results-smoke)")
    ap.add_argument("--lifeguard", default=os.path.join(fleet.ROOT, "target", "release", "lifeguard"))
    ap.add_argument("--report-only", metavar="DIR", help="rebuild summaries, tables and plots from a run's files in DIR")
    a = ap.parse_args()
    if a.report_only:
        return report_only(a.report_only)
    mode = "smoke" if a.smoke else "full"
    out = a.out or os.path.join(HERE, "results-smoke" if a.smoke else "results")
    require(os.geteuid() == 0, "needs root (PID and network namespaces, cgroups)")
    require(os.path.isfile(a.lifeguard), f"no lifeguard at {a.lifeguard}")
    for tool in ("haproxy", "unshare", "nsenter", "ip"):
        require(shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}") or os.path.exists(f"/sbin/{tool}"), f"`{tool}` is not installed (scripts/packages.sh test)")
    os.makedirs(out, exist_ok=True)
    lifeguard = os.path.abspath(a.lifeguard)
    scenarios = ["cpu", "worker"] if a.scenario == "both" else [a.scenario]
    summaries, failed = [], False
    for scenario in scenarios:
        summary = run_scenario(scenario_config(mode, scenario), os.path.join(out, scenario), lifeguard)
        summaries.append(summary)
        failed = failed or bool(summary["problems"])
    import report

    report.write_index(out, summaries)
    print(f"bench/scaling: done; {out}/results.md", flush=True)
    if failed:
        sys.exit(1)


def run_scenario(cfg, out, lifeguard):
    """One scenario, start to end: its fleets, its load, its report in `out`."""
    service, held = cfg["service"], cfg["held_service"]
    os.makedirs(out, exist_ok=True)
    logs = os.path.join(out, "logs")
    shutil.rmtree(logs, ignore_errors=True)
    os.makedirs(logs)

    started = time.time()
    log = Log(os.path.join(out, "events.jsonl"), started)
    print(f"bench/scaling: {cfg['label']}, scenario {cfg['scenario']} ({cfg['title']}); lifeguard {lifeguard}; output in {out}", flush=True)
    try:
        cgroups = fleet.Cgroups(f"lifeguard-scaling-{os.getpid()}")
    except (OSError, RuntimeError) as e:
        require(False, f"cannot make CPU-limited cgroups for the replicas: {e}")
    emulator = haproxy = loadgen = None
    replicas, namespaces = [], []

    def slot(name, i):
        ns = fleet.Netns(f"lgscale-{name}-{i}")
        namespaces.append(ns)
        return fleet.Replica(name, i, ns, logs)

    try:
        emulator = fleet.Emulator(logs)
        try:
            slots = {
                # Twice the maximum: a scale-out may come while replicas are still draining.
                service: [slot(service, i) for i in range(2 * cfg["max"])],
                held: [slot(held, i) for i in range(cfg["held"])],
            }
        except RuntimeError as e:
            require(False, f"cannot make the replicas' network namespaces: {e}")
        haproxy = fleet.HAProxy(logs, slots, cfg["check_inter"], cfg["check_fall"], emulator.port)
        envs = {
            s: {
                "PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
                # The contract's environment (README.md, "CloudWatch on ECS").
                "METRICS_NAMESPACE": NAMESPACE,
                "METRICS_INTERVAL": str(cfg["interval"]),
                "METRICS_DIMENSIONS": f"ClusterName=bench,ServiceName={s}",
                "METRICS_BURST_THRESHOLD": str(cfg["threshold"]),
                "AWS_ENDPOINT_URL_CLOUDWATCH": emulator.url,
                "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_EC2_METADATA_DISABLED": "true",
            }
            for s in slots
        }
        sim = Simulation(cfg, log, cgroups, emulator, haproxy, slots, envs, lifeguard)
        replicas = sim.all

        # The fleets' first replicas, ready before the load starts.
        for _ in range(cfg["min"]):
            sim.launch(service, time.time(), initial=True)
        for _ in range(cfg["held"]):
            sim.launch(held, time.time(), initial=True)
        fleet.wait_for("the first replicas to be ready", lambda: sim.poll_replicas(time.time()) or sim.all_ready(), 60, 0.1)

        # The step lands `step_phase` s into a minute, at least `baseline_min` s from now,
        # so that runs compare (the report replays every other phase as well).
        now = time.time()
        if cfg["step_phase"] is None:
            t_step = now + cfg["baseline_min"]
        else:
            t_step = math.ceil((now + cfg["baseline_min"] - cfg["step_phase"]) / 60.0) * 60.0 + cfg["step_phase"]
        t_step_end = t_step + cfg["step_len"]
        deadline = t_step_end + cfg["settle_max"]
        sim.t_step, sim.t_step_end = t_step, t_step_end
        schedule = [[now, cfg["users_low"]], [t_step, cfg["users_high"]], [t_step_end, cfg["users_low"]]]
        loadgen = subprocess.Popen(
            [
                sys.executable, os.path.join(HERE, "loadgen.py"),
                "--target", f"{service}={haproxy.ports[service]}",
                "--target", f"{held}={haproxy.ports[held]}",
                "--schedule", json.dumps(schedule),
                "--until", str(deadline + 60),
                "--out", os.path.join(out, "requests.csv"),
                "--think", str(cfg["think"]),
                "--timeout", str(cfg["request_timeout"]),
            ],
            stdin=subprocess.DEVNULL, stderr=open(os.path.join(logs, "loadgen.log"), "ab"), start_new_session=True,
        )
        log.event(now, "load", users=cfg["users_low"], step_at=round(t_step, 3), step_end=round(t_step_end, 3))
        sim.loop(deadline)
        ended = time.time()
        loadgen.send_signal(signal.SIGTERM)
        loadgen.wait(timeout=30)
        loadgen = None
        data = emulator.data(NAMESPACE)
        with open(os.path.join(out, "datums.json"), "w") as f:
            json.dump(data["data"], f)
    finally:
        if loadgen is not None and loadgen.poll() is None:
            loadgen.kill()
        for r in replicas:
            if r.proc is not None and r.poll() is None:
                r.terminate(time.time())
        for r in replicas:
            if r.proc is not None:
                try:
                    r.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    r.kill()
        if haproxy is not None:
            haproxy.stop()
        if emulator is not None:
            emulator.stop()
        for ns in namespaces:
            ns.delete()
        cgroups.remove_all()

    import plot
    import report

    summary = report.analyse(cfg, out, sim, data["data"], started, ended)
    plot.draw(cfg, out, summary)
    report.write(cfg, out, summary)
    print(f"bench/scaling: scenario {cfg['scenario']} done in {ended - started:.0f} s; {out}/results.md, {out}/scaling.png", flush=True)
    if summary["problems"]:
        print("bench/scaling: PROBLEMS:\n  " + "\n  ".join(summary["problems"]), file=sys.stderr)
    return summary


def report_only(out):
    """The reports again from what a run left in each scenario's folder (events.jsonl,
    ticks.csv, requests.csv, datums.json, and summary.json for the settings and times):
    after changing report.py or plot.py, no need to run the load again."""
    import types

    import plot
    import report

    summaries = []
    for scenario in SCENARIOS:
        folder = os.path.join(out, scenario)
        if not os.path.isfile(os.path.join(folder, "summary.json")):
            continue
        with open(os.path.join(folder, "summary.json")) as f:
            old = json.load(f)
        with open(os.path.join(folder, "events.jsonl")) as f:
            events = [json.loads(line) for line in f if line.strip()]
        with open(os.path.join(folder, "ticks.csv")) as f:
            ticks = list(csv.DictReader(f))
        with open(os.path.join(folder, "datums.json")) as f:
            data = json.load(f)
        # The settings as this file has them now (a report change may add one), with
        # the run's own loads and mode.
        cfg = dict(scenario_config(old["config"]["mode"], scenario), **{k: old["config"][k] for k in ("users_low", "users_high")})
        started = events[0]["t"] if events else old["t_step"]
        sim = types.SimpleNamespace(
            t_step=old["t_step"], t_step_end=old["t_step_end"], ticks=ticks,
            log=types.SimpleNamespace(events=events),
        )
        summary = report.analyse(cfg, folder, sim, data, started - 0.7, started - 0.7 + old["duration_s"])
        summary["date"] = old["date"]
        plot.draw(cfg, folder, summary)
        report.write(cfg, folder, summary)
        summaries.append(summary)
    report.write_index(out, summaries)
    print(f"bench/scaling: reports rebuilt in {out}", flush=True)


class Simulation:
    """The live part: the real fleet's replicas, HAProxy's slots, and the autoscaler
    that reads lifeguard's data from the emulator every 10-second period."""

    def __init__(self, cfg, log, cgroups, emulator, haproxy, slots, envs, lifeguard):
        self.cfg, self.log, self.cgroups, self.emulator, self.haproxy = cfg, log, cgroups, emulator, haproxy
        self.slots, self.envs, self.lifeguard = slots, envs, lifeguard
        self.service = cfg["service"]
        self.all = []  # every replica ever started
        self.t_step = self.t_step_end = None
        self.target = model.Target(cfg["min"], cfg["max"], cfg["min"], cfg["cooldown"])
        r = cfg["reinvoke"]
        self.alarms = {
            "InFlightHigh": model.Alarm("InFlightHigh", "RequestsInFlight", cfg["threshold"], True, 1, "ScaleOut", r),
            "InFlightSaturated": model.Alarm("InFlightSaturated", "RequestsInFlight", cfg["saturated_threshold"], True, 1, "ScaleOutSaturated", r),
            "CpuHigh": model.Alarm("CpuHigh", "CpuUtilization", cfg["cpu_threshold"], True, 1, "ScaleOut", r),
            "InFlightLow": model.Alarm("InFlightLow", "RequestsInFlight", cfg["low_threshold"], False, cfg["low_periods"], "ScaleIn", r),
        }
        self.history = []  # (period start, in-flight p50, cpu p50)
        self.ticks = []

    # ---- replicas ----
    def running(self, service):
        """Replicas counted in the service (launched, not told to stop)."""
        return [r for r in self.all if r.service == service and r.term_sent is None and r.exit_code is None]

    def all_ready(self):
        return all(r.ready is not None for r in self.all)

    def launch(self, service, now, initial=False):
        busy = {r.slot for r in self.all if r.service == service and r.exit_code is None}
        free = [s for s in self.slots[service] if s.slot not in busy]
        if not free:
            raise RuntimeError(f"no free slot in {service}")
        old = free[0]
        # A fresh Replica object per launch (a slot is reused after a scale-in).
        r = fleet.Replica(service, old.slot, old.netns, os.path.dirname(old.log_path))
        r.start(self.cgroups, self.cfg, self.envs[service], self.lifeguard, now)
        self.all.append(r)
        self.log.event(now, "launch", service=service, replica=r.name, initial=initial)
        return r

    def poll_replicas(self, now):
        for r in self.all:
            if r.ready is None and r.term_sent is None and r.exit_code is None and r.readyz():
                r.ready = time.time()
                self.haproxy.enable(r)
                self.log.event(r.ready, "ready", service=r.service, replica=r.name, after=round(r.ready - r.launched, 3))
            if r.term_sent is not None and r.exit_code is None and r.poll() is not None:
                self.haproxy.disable(r)
                self.cgroups.remove(r.name)
                self.log.event(
                    r.exited, "exited", service=r.service, replica=r.name, code=r.exit_code,
                    drain=round(r.exited - r.term_sent, 3), drain_end=r.drain_end(),
                )
            elif r.term_sent is None and r.exit_code is None and r.poll() is not None:
                self.log.event(time.time(), "died", service=r.service, replica=r.name, code=r.exit_code)
        return False

    def reconcile(self, now):
        """Makes the real fleet's running count the desired count: new replicas start
        at once; a scale-in drains the newest (SIGTERM to its lifeguard; its /readyz
        goes 503 and HAProxy's check takes it out)."""
        running = self.running(self.service)
        for _ in range(self.target.desired - len(running)):
            self.launch(self.service, now)
        if len(running) > self.target.desired:
            for r in sorted(running, key=lambda r: r.launched, reverse=True)[: len(running) - self.target.desired]:
                r.terminate(now)
                self.log.event(now, "drain", service=self.service, replica=r.name)

    # ---- the autoscaler ----
    def evaluate(self, now, nominal, boundary):
        """One evaluation: `now` the wall time (events), `nominal` the evaluation's
        scheduled time, which the alarms' repeats and the cooldowns count from, as
        CloudWatch's and Application Auto Scaling's own clocks would (the fetch's few
        milliseconds must not push a once-a-minute repeat to the next period)."""
        period = self.cfg["period"]
        data = self.emulator.data(NAMESPACE)["data"]
        series = {m: model.Series.from_data(data, self.service, m) for m in ("RequestsInFlight", "CpuUtilization")}
        start = boundary - period
        inflight = series["RequestsInFlight"].datapoint(start, period)
        cpu = series["CpuUtilization"].datapoint(start, period)
        self.history.append((start, inflight, cpu))
        low_n = self.cfg["low_periods"]
        latest_low = [h[1] for h in self.history[-low_n:]]
        states_before = {k: a.state for k, a in self.alarms.items()}
        invoked = []
        if self.alarms["InFlightHigh"].evaluate(nominal, [inflight]):
            invoked.append("InFlightHigh")
        if self.alarms["InFlightSaturated"].evaluate(nominal, [inflight]):
            invoked.append("InFlightSaturated")
        if self.alarms["CpuHigh"].evaluate(nominal, [cpu]):
            invoked.append("CpuHigh")
        if self.alarms["InFlightLow"].evaluate(nominal, latest_low):
            invoked.append("InFlightLow")
        for k, a in self.alarms.items():
            if a.state != states_before[k]:
                self.log.event(now, "alarm", service=self.service, alarm=k, state=a.state, inflight_p50=inflight, cpu_p50=cpu, period_start=start)
        before = self.target.desired
        # Both directions invoked at once: Application Auto Scaling takes the policy
        # that leaves the larger capacity, the scale-out (examples/ecs/scaling.yaml).
        outs = [k for k in invoked if self.alarms[k].policy.startswith("ScaleOut")]
        ins = [k for k in invoked if self.alarms[k].policy == "ScaleIn"]
        if outs:
            # Of two out policies the larger capacity wins: the saturated step's.
            saturated = any(self.alarms[k].policy == "ScaleOutSaturated" for k in outs)
            policy = "ScaleOutSaturated" if saturated else "ScaleOut"
            new = self.target.scale_out(nominal, self.cfg["saturated_percent"] if saturated else None)
            self.log.event(now, "policy", service=self.service, policy=policy, by=",".join(outs), before=before, after=self.target.desired, acted=new is not None)
        elif ins:
            new = self.target.scale_in(nominal)
            self.log.event(now, "policy", service=self.service, policy="ScaleIn", by=",".join(ins), before=before, after=self.target.desired, acted=new is not None)
        self.reconcile(now)
        ready = sum(1 for r in self.running(self.service) if r.ready is not None)
        self.ticks.append({
            "t": round(now, 3), "period_start": start, "inflight_p50": inflight, "cpu_p50": cpu,
            "alarms": ";".join(k for k, a in self.alarms.items() if a.state == "ALARM"),
            "desired": self.target.desired, "ready": ready,
        })

    def settled(self, now):
        """After the step: back at the minimum, every drain finished, and a few seconds
        of traffic after the last one (so its failures, if any, are counted)."""
        if now < self.t_step_end + 15 or self.target.desired != self.cfg["min"]:
            return False
        mine = [r for r in self.all if r.service == self.service]
        if any(r.term_sent is not None and r.exit_code is None for r in mine):
            return False
        last_exit = max((r.exited for r in mine if r.exited), default=0)
        return now >= last_exit + 5

    def loop(self, deadline):
        period = self.cfg["period"]
        next_tick = model.period_start(time.time(), period) + period + model.EVAL_DELAY
        while True:
            now = time.time()
            self.poll_replicas(now)
            if now >= next_tick:
                self.evaluate(now, next_tick, next_tick - model.EVAL_DELAY)
                next_tick += period
                while next_tick < time.time():  # a slow evaluation skips no boundary silently
                    self.log.event(time.time(), "late-evaluation", boundary=next_tick - model.EVAL_DELAY)
                    next_tick += period
            if self.t_step_end is not None and self.settled(now):
                self.log.event(now, "settled", service=self.service, desired=self.target.desired)
                return
            if now >= deadline:
                self.log.event(now, "deadline", service=self.service, desired=self.target.desired)
                return
            time.sleep(0.1)


if __name__ == "__main__":
    main()
