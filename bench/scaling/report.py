"""The scaling benchmark's figures: what a scenario's run measured (the real fleet,
live), what the signal models make of the held fleet's data (replayed), and the files
that show it (summary.json, results.md; run.py has plot.py draw scaling.png), and the
index of both scenarios' headlines (results.md above their folders).

Times are seconds from the load step. `problems` lists what makes the run fail (exit 1):
no scale-out, decisions out of order, a drain that did not end cleanly, a fleet that
did not come back to its minimum.
"""
import csv
import datetime as dt
import json
import os
import platform
import statistics

import model

METRICS = ("RequestsInFlight", "CpuUtilization")


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def read_requests(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            try:
                rows.append((r["target"], float(r["start"]), float(r["latency"]), r["status"]))
            except (KeyError, ValueError):
                continue
    return rows


def request_figures(rows, target, t_from=None, t_to=None):
    mine = [r for r in rows if r[0] == target and (t_from is None or r[1] >= t_from) and (t_to is None or r[1] < t_to)]
    ok = [r[2] for r in mine if r[3] == "200"]
    failed = [r for r in mine if r[3] != "200"]
    kinds = {}
    for r in failed:
        kinds[r[3]] = kinds.get(r[3], 0) + 1
    return {
        "sent": len(mine),
        "failed": len(failed),
        "failed_by_kind": kinds,
        "p50_ms": round(percentile(ok, 50) * 1000, 1) if ok else None,
        "p99_ms": round(percentile(ok, 99) * 1000, 1) if ok else None,
        "max_ms": round(max(ok) * 1000, 1) if ok else None,
    }


def first_datum_above(data, service, cfg, t_from):
    """The first datum the emulator accepted, at or after t_from, that holds a value at
    or above its alarm's threshold (an in-flight sample >= METRICS_BURST_THRESHOLD, or
    a CPU figure >= CpuPercent)."""
    thresholds = {"RequestsInFlight": cfg["threshold"], "CpuUtilization": cfg["cpu_threshold"]}
    best = None
    for d in data:
        if (d.get("dimensions") or {}).get("ServiceName") != service or d.get("name") not in thresholds:
            continue
        if d.get("received_at") is None or d["received_at"] < t_from:
            continue
        top = max((v for v, _ in model.raw_points(d)), default=None)
        if top is not None and top >= thresholds[d["name"]]:
            if best is None or d["received_at"] < best["received_at"]:
                best = {"received_at": d["received_at"], "metric": d["name"], "max": top, "timestamp": d["timestamp"]}
    return best


# The models in the order of the tables, with their rows' names.
MODEL_NAMES = {
    "lifeguard": "lifeguard, replayed on the held fleet",
    "cpu20": "AWS 20-second CPU, replayed",
    "cpu60": "AWS built-in 1-minute CPU, 3 min late, replayed",
    "late60": "AWS 1-minute, 3 min late, with in-flight for the balancer's request count, replayed",
}


def signals(cfg):
    lag = f"{cfg['late_lag'] // 60} min late"
    return [
        model.Signal("lifeguard", "lifeguard: 10 s datapoints + bursts (in-flight p50 and CPU p50)", cfg["period"], 0, list(METRICS)),
        model.Signal("cpu20", "AWS 20-second CPU (CPU p50 only)", cfg["cpu20_period"], 0, ["CpuUtilization"]),
        # What ECS's default target tracking uses: the service's CPUUtilization.
        model.Signal("cpu60", f"AWS built-in 1-minute CPU, {lag} (CPU p50 only)", cfg["late_period"], cfg["late_lag"], ["CpuUtilization"]),
        # The balancer's RequestCountPerTarget is a 1-minute metric as late; AWS has no
        # in-flight figure, so lifeguard's stands in for it: in AWS's favour.
        model.Signal(
            "late60", f"AWS 1-minute datapoints, {lag} (in-flight p50 for the request count, and CPU p50)",
            cfg["late_period"], cfg["late_lag"], list(METRICS),
        ),
    ]


def replica_counts(events, service, t0, t1, step=1.0):
    """Ready replicas of `service` counted each `step` s: ready and not told to stop."""
    changes = []
    for e in events:
        if e.get("service") != service:
            continue
        if e["kind"] == "ready":
            changes.append((e["t"], +1))
        elif e["kind"] in ("drain", "died"):
            changes.append((e["t"], -1))
    changes.sort()
    out, n, i, t = [], 0, 0, t0
    while t <= t1:
        while i < len(changes) and changes[i][0] <= t:
            n += changes[i][1]
            i += 1
        out.append((t, n))
        t += step
    return out


def analyse(cfg, out, sim, data, started, ended):
    SERVICE, HELD = cfg["service"], cfg["held_service"]
    t_step, t_step_end = sim.t_step, sim.t_step_end
    events = sim.log.events
    rel = lambda t: None if t is None else round(t - t_step, 1)
    thresholds = {"RequestsInFlight": cfg["threshold"], "CpuUtilization": cfg["cpu_threshold"]}
    problems = []

    # ---- the real fleet, live ----
    first = first_datum_above(data, SERVICE, cfg, t_step)
    alarm = next((e for e in events if e["kind"] == "alarm" and e["state"] == "ALARM" and e["alarm"] != "InFlightLow" and e["t"] >= t_step), None)
    out_policy = next((e for e in events if e["kind"] == "policy" and e["policy"].startswith("ScaleOut") and e["acted"] and e["t"] >= t_step), None)
    new_ready = next((e for e in events if e["kind"] == "ready" and e["service"] == SERVICE and e["t"] >= t_step), None)
    launches = {e["replica"]: e["t"] for e in events if e["kind"] == "launch" and e["service"] == SERVICE and not e["initial"]}
    startups = [e["after"] for e in events if e["kind"] == "ready" and e["service"] == SERVICE and e["replica"] in launches and e["t"] >= t_step]
    startup = statistics.median(startups) if startups else None
    scale_ins = [e for e in events if e["kind"] == "policy" and e["policy"] == "ScaleIn" and e["acted"]]
    scale_outs = [e for e in events if e["kind"] == "policy" and e["policy"].startswith("ScaleOut") and e["acted"]]
    drains = [e for e in events if e["kind"] == "exited" and e["service"] == SERVICE]
    deaths = [e for e in events if e["kind"] == "died"]
    settled = next((e for e in events if e["kind"] == "settled"), None)
    if first is None:
        problems.append("no datum above the threshold reached the emulator after the step")
    if alarm is None or out_policy is None:
        problems.append("the real fleet never scaled out")
    if new_ready is None:
        problems.append("no new replica became ready after the step")
    if first and alarm and new_ready and not (first["received_at"] <= alarm["t"] <= new_ready["t"]):
        problems.append("out of order: first datum, alarm, new replica ready")
    if not scale_ins:
        problems.append("the real fleet never scaled in")
    if settled is None:
        problems.append(f"the real fleet was not back at {cfg['min']} replicas with its drains done by the deadline")
    for e in drains:
        if e["code"] != 0:
            problems.append(f"{e['replica']} exited with {e['code']} after its drain")
    # Each replica in a network namespace of its own: a drain ends once the balancer has
    # stopped sending, not at --drain-max.
    late_drains = [e for e in drains if e["drain"] > cfg["drain_goal_s"]]
    for e in late_drains:
        problems.append(f"{e['replica']}'s drain took {e['drain']:.1f} s, more than the {cfg['drain_goal_s']:.0f} s goal ({e.get('drain_end')})")
    for e in deaths:
        problems.append(f"{e['replica']} died unasked (code {e['code']})")

    rows = read_requests(os.path.join(out, "requests.csv"))
    real = request_figures(rows, SERVICE)
    held = request_figures(rows, HELD)
    real_step = request_figures(rows, SERVICE, t_step, t_step_end)
    held_step = request_figures(rows, HELD, t_step, t_step_end)
    # Requests that started while a replica of the real fleet was draining (SIGTERM to
    # exit, and 2 s after): where a drain would lose them.
    windows = [(next(x["t"] for x in events if x["kind"] == "drain" and x["replica"] == e["replica"] and x["t"] <= e["t"]), e["t"] + 2) for e in drains]
    in_drains = [r for r in rows if r[0] == SERVICE and any(a <= r[1] < b for a, b in windows)]
    drain_failed = sum(1 for r in in_drains if r[3] != "200")
    if real["sent"] == 0 or held["sent"] == 0:
        problems.append("no requests were recorded")

    # ---- the held fleet, replayed through the signal models ----
    held_series = {m: model.Series.from_data(data, HELD, m) for m in METRICS}
    models = {}
    held_first = first_datum_above(data, HELD, cfg, t_step)
    for s in signals(cfg):
        fb = s.first_breach(held_series, thresholds, t_step, ended + s.lag + s.period)
        entry = {"label": s.label, "period": s.period, "lag": s.lag, "metrics": s.metrics}
        if fb:
            # The datum that crossed reached the alarm: for lifeguard when the emulator
            # accepted it; for the AWS models when their period's datapoint is delivered.
            reached = held_first["received_at"] if (s.key == "lifeguard" and held_first) else fb["available"]
            entry.update({
                "first_datum": rel(reached),
                "alarm": rel(fb["alarm"]),
                "breach": {k: v for k, v in fb["values"].items()},
                "breach_metrics": fb["metrics"],
                "breach_period": [rel(fb["period_start"]), rel(fb["period_end"])],
                "new_replica_ready": rel(fb["alarm"] + startup) if startup is not None else None,
                "after_step_ended": fb["alarm"] > t_step_end,
            })
        else:
            entry.update({"first_datum": None, "alarm": None, "new_replica_ready": None})
        models[s.key] = entry
    # The step's phase against the period boundaries decides much of each model's delay
    # (this run's step came 5 s into a minute, chosen once so that runs compare). The
    # same data, replayed with the boundaries moved by 0..59 s, gives every phase.
    for s in signals(cfg):
        alarms = []
        for offset in range(60):
            fb = s.first_breach(held_series, thresholds, t_step, ended + s.lag + s.period, float(offset))
            alarms.append(None if fb is None else round(fb["alarm"] - t_step, 1))
        found = sorted(a for a in alarms if a is not None)
        models[s.key]["phases"] = {
            "median": statistics.median(found) if found else None,
            "min": found[0] if found else None,
            "max": found[-1] if found else None,
            "none": sum(1 for a in alarms if a is None),
            "alarms": alarms,
        }
    # Samples the held fleet's lifeguards published during the step, against one per
    # second per replica (a sample lifeguard cannot take is left out, not sent as 0).
    sampled = sum(c for t, _, c in held_series["RequestsInFlight"].points if t_step <= t < t_step_end)
    sample_share = sampled / (cfg["held"] * (t_step_end - t_step))
    if models["lifeguard"]["alarm"] is None:
        problems.append("lifeguard's replayed model found no breach in the held fleet's data")
    # What a CPU alarm could see: the held fleet's CPU p50 per 10 s period of the step.
    cpu_step = [v for _, _, _, v in signals(cfg)[0].datapoints(held_series, "CpuUtilization", t_step, t_step_end) if v is not None]

    summary = {
        "mode": cfg["mode"],
        "label": cfg["label"],
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cores": os.cpu_count(), "kernel": platform.release()},
        "config": cfg,
        "t_step": t_step,
        "t_step_end": t_step_end,
        "duration_s": round(ended - started, 1),
        "live": {
            "first_datum": rel(first["received_at"]) if first else None,
            "first_datum_detail": first,
            "alarm": rel(alarm["t"]) if alarm else None,
            "alarm_name": alarm["alarm"] if alarm else None,
            "scale_out": rel(out_policy["t"]) if out_policy else None,
            "scale_out_to": out_policy["after"] if out_policy else None,
            "first_new_replica_ready": rel(new_ready["t"]) if new_ready else None,
            "startup_s": startup,
            "scale_outs": [(rel(e["t"]), e["before"], e["after"], e["by"]) for e in scale_outs],
            "scale_ins": [(rel(e["t"]), e["before"], e["after"]) for e in scale_ins],
            "drains": [(e["replica"], e["drain"], e["code"], e.get("drain_end")) for e in drains],
            "drain_goal_s": cfg["drain_goal_s"],
            "drains_over_goal": len(late_drains),
            "settled": rel(settled["t"]) if settled else None,
            "max_replicas": max((n for _, n in replica_counts(events, SERVICE, started, ended)), default=0),
        },
        "requests": {
            "real": real, "held": held, "real_step": real_step, "held_step": held_step,
            "during_drains": {"sent": len(in_drains), "failed": drain_failed},
        },
        "models": models,
        "held_samples_during_step": round(sample_share, 3),
        "held_cpu_p50_max_during_step": max(cpu_step) if cpu_step else None,
        "problems": problems,
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out, "ticks.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["t", "period_start", "inflight_p50", "cpu_p50", "alarms", "desired", "ready"])
        w.writeheader()
        w.writerows(sim.ticks)
    return summary


def fmt(v, unit=" s"):
    if v is None:
        return "—"
    return f"+{v:.0f}{unit}" if isinstance(v, (int, float)) and v >= 0 else f"{v}{unit}"


def never(m):
    """An alarm's time, or that it never went off while the data lasted."""
    return fmt(m["alarm"]) if m.get("alarm") is not None else "never"


def table(summary):
    """The two markdown tables of a scenario's results.md and bench/README.md."""
    live, models, req = summary["live"], summary["models"], summary["requests"]
    c = summary["config"]
    def phases(m):
        p = m.get("phases") or {}
        if p.get("median") is None:
            return "never, in any of the 60" if p.get("none") else "—"
        none = f", none in {p['none']} of 60" if p["none"] else ""
        return f"+{p['median']:.0f} s (+{p['min']:.0f} to +{p['max']:.0f}{none})"

    lines = [
        "| signal (what the alarm gets) | first datum above threshold reaches the alarm | alarm → scale-out | first new replica ready | alarm, over all 60 phases of the step: median (range) |",
        "|---|---|---|---|---|",
        f"| **lifeguard**, live on the real fleet: 10 s p50 + bursts | {fmt(live['first_datum'])} | {fmt(live['alarm'])} ({live['alarm_name']}, {c['min']} → {live['scale_out_to']}) | {fmt(live['first_new_replica_ready'])} | — (one run) |",
    ]
    for key, name in MODEL_NAMES.items():
        m = models.get(key)
        if m is None:
            continue
        note = " (after the step ended)" if m.get("after_step_ended") else ""
        lines.append(f"| {name} | {fmt(m['first_datum'])} | {never(m)}{note} | {fmt(m['new_replica_ready'])} | {phases(m)} |")
    r, h = req["real"], req["held"]
    drains = live["drains"]
    drain_s = ", ".join(f"{d[1]:.1f}" for d in drains) or "—"
    cpu_max = summary.get("held_cpu_p50_max_during_step")
    lines += [
        "",
        f"| over the whole run (callers give up after {c['request_timeout']:.0f} s) | real fleet (scaled on lifeguard's data) | held fleet (never scaled) |",
        "|---|---|---|",
        f"| requests (failed) | {r['sent']:,} ({r['failed']}) | {h['sent']:,} ({h['failed']}) |",
        f"| latency p50 / p99 | {r['p50_ms']:.0f} / {r['p99_ms']:.0f} ms | {h['p50_ms']:.0f} / {h['p99_ms']:.0f} ms |",
        f"| during the step: requests (failed), p99 | {req['real_step']['sent']:,} ({req['real_step']['failed']}), {req['real_step']['p99_ms']:.0f} ms | {req['held_step']['sent']:,} ({req['held_step']['failed']}), {req['held_step']['p99_ms']:.0f} ms |",
        f"| CPU p50 per 10 s during the step, highest | — | {'—' if cpu_max is None else f'{cpu_max:.0f} %'} (the CPU alarms' threshold: {c['cpu_threshold']:.0f} %) |",
        f"| replicas | {c['min']} → {live['max_replicas']} → {c['min']} | {c['held']} |",
        f"| scale-ins and drains (SIGTERM → exit, s; goal ≤ {live.get('drain_goal_s', 0):.0f} s) | {len(live['scale_ins'])}: {drain_s}; requests started during them {req['during_drains']['sent']}, failed {req['during_drains']['failed']} | — |",
        f"| in-flight samples published during the step, of one a second per replica (counted by the datums sent in it: a datum's edge either way) | — | {summary['held_samples_during_step'] * 100:.0f} % |",
    ]
    return "\n".join(lines)


def write(cfg, out, summary):
    """A scenario's results.md and summary.json (run.py draws scaling.png with plot.py:
    the plot reads this module, not the other way round)."""
    c = summary["config"]
    md = [
        f"# Scaling benchmark: {summary['label']}, {c['scenario']} scenario",
        "",
        f"{c['title'][0].upper()}{c['title'][1:]}; 8 workers a replica, each replica in a cgroup of 5 % of a core and a network namespace of its own.",
        "",
        f"{summary['date']}, {summary['machine']['cores']} cores, kernel {summary['machine']['kernel']}; "
        f"{summary['duration_s']:.0f} s. Times are from the load step ({c['users_low']} → {c['users_high']} users, "
        f"each thinking {c['think']:.0f} s on average between requests; {c['step_len']} s long). "
        "bench/README.md says what this is and what it assumes.",
        "",
        table(summary),
        "",
        "![scaling](scaling.png)",
        "",
    ]
    if summary["problems"]:
        md += ["**Problems:**", ""] + [f"- {p}" for p in summary["problems"]] + [""]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md))


def headline(summary):
    """One row of the index: when each signal decides, and what the callers got."""
    live, models, req = summary["live"], summary["models"], summary["requests"]
    c = summary["config"]
    drains = [d[1] for d in live["drains"]]
    return (
        f"| [{c['scenario']}]({c['scenario']}/results.md) | {fmt(live['alarm'])} | {never(models['cpu20'])} | {never(models['cpu60'])} "
        f"| {never(models['late60'])} | {req['real_step']['failed']} of {req['real_step']['sent']:,}, p99 {req['real_step']['p99_ms'] / 1000:.1f} s "
        f"| {req['held_step']['failed']} of {req['held_step']['sent']:,}, p99 {req['held_step']['p99_ms'] / 1000:.1f} s "
        f"| {(f'{min(drains):.1f}–{max(drains):.1f} s' if drains else '—')}, {req['during_drains']['failed']} failed |"
    )


def write_index(out, summaries):
    """results.md above the scenarios' folders: both headlines side by side."""
    if not summaries:
        return
    s0 = summaries[0]
    lines = [
        f"# Scaling benchmark: {s0['label']}",
        "",
        f"{s0['date']}, {s0['machine']['cores']} cores. Each scenario's folder has its tables, plot and data; "
        "bench/README.md says what this is and what it assumes. Times are from the load step; "
        "\"never\": no datapoint of that signal crossed its alarm's threshold while the data lasted.",
        "",
        "| scenario | lifeguard's in-flight alarm (live) | AWS 20 s CPU | AWS 1-minute CPU, 3 min late | AWS 1-minute with in-flight for request count, 3 min late | during the step, scaled on lifeguard: failed, p99 | never scaled: failed, p99 | scale-in drains, failed during them |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [headline(s) for s in summaries]
    lines += [""] + [f"![{s['config']['scenario']}]({s['config']['scenario']}/scaling.png)" for s in summaries] + [""]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines))
