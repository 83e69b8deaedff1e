"""The scaling benchmark's picture (scaling.png): load, in-flight p50, CPU p50 and
replicas over time from the load step, one line per signal, as each alarm saw them.

Every datapoint is drawn at the time it reached its alarm, not at the time it
describes: that is the difference between the signals. matplotlib comes from the
benchmark's own virtualenv (bench/scaling/requirements.txt).
"""
import csv
import json
import os

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

import model  # noqa: E402
import report  # noqa: E402

COLORS = {"lifeguard": "#1f77b4", "held": "#7fb2dc", "cpu20": "#2ca02c", "cpu60": "#9467bd", "late60": "#d62728", "load": "#555555"}
# The replayed AWS models' short names in the legends.
AWS = {"cpu20": "AWS 20 s CPU", "cpu60": "AWS 1 min CPU, 3 min late", "late60": "AWS 1 min, 3 min late"}


def binned(rows, target, t0, t1, width):
    """Completed requests/s, p99 latency (ms) and failed requests/s per `width` s."""
    bins = {}
    for tgt, start, latency, status in rows:
        if tgt != target or not (t0 <= start < t1):
            continue
        b = int((start + latency - t0) // width)
        bins.setdefault(b, []).append((latency, status))
    xs, rate, p99, failed = [], [], [], []
    for b in range(int((t1 - t0) // width) + 1):
        items = bins.get(b, [])
        ok = [lat for lat, st in items if st == "200"]
        xs.append(b * width + width / 2)
        rate.append(len(ok) / width)
        p99.append(report.percentile(ok, 99) * 1000 if ok else None)
        failed.append((len(items) - len(ok)) / width)
    return xs, rate, p99, failed


def steps(points, hold):
    """(x, y) pairs for a step line drawn `where="post"`: each datapoint holds from the
    moment its alarm got it until the next one arrives (the last one for `hold` s).
    None values left out."""
    xs = [x for x, y in points if y is not None]
    ys = [y for x, y in points if y is not None]
    if xs:
        xs.append(xs[-1] + hold)
        ys.append(ys[-1])
    return xs, ys


def draw(cfg, out, summary):
    SERVICE, HELD = cfg["service"], cfg["held_service"]
    t_step, t_step_end = summary["t_step"], summary["t_step_end"]
    with open(os.path.join(out, "datums.json")) as f:
        data = json.load(f)
    rows = report.read_requests(os.path.join(out, "requests.csv"))
    with open(os.path.join(out, "events.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(out, "ticks.csv")) as f:
        ticks = list(csv.DictReader(f))
    start = min(r[1] for r in rows) if rows else t_step - 60
    end = max(r[1] + r[2] for r in rows) if rows else t_step_end + 60
    late = max((summary["models"][k].get("alarm") or 0) for k in AWS)
    x_max = max(end - t_step, late + 20)
    x_min = start - t_step
    rel = lambda t: t - t_step

    fig, axes = plt.subplots(5, 1, figsize=(11, 13), sharex=True, gridspec_kw={"height_ratios": [1.1, 0.9, 1.2, 1.0, 1.1]})
    ax_load, ax_lat, ax_inf, ax_cpu, ax_rep = axes

    # Load: the users' demand (users ÷ (think time + the unloaded latency), what they
    # would send to a fleet that keeps up), and what each fleet completed.
    unloaded = report.percentile([r[2] for r in rows if r[1] < t_step and r[3] == "200"], 50) or 0.0
    users = [(x_min, cfg["users_low"]), (0, cfg["users_high"]), (t_step_end - t_step, cfg["users_low"]), (x_max, cfg["users_low"])]
    ax_load.step(
        [u[0] for u in users], [u[1] / (cfg["think"] + unloaded) for u in users], where="post", color=COLORS["load"], ls="--",
        label=f"demand: {cfg['users_low']} → {cfg['users_high']} users ÷ (think {cfg['think']:.0f} s + {unloaded:.2f} s)",
    )
    for target, color, name in ((SERVICE, COLORS["lifeguard"], "completed, real fleet (scaled on lifeguard)"), (HELD, COLORS["late60"], "completed, held fleet (never scaled)")):
        xs, rate, p99, failed = binned(rows, target, start, end, 5)
        ax_load.plot([x + start - t_step for x in xs], rate, color=color, lw=1.2, label=name)
        if any(failed):
            ax_load.plot([x + start - t_step for x in xs], failed, color=color, lw=1.0, ls=":", label=name.replace("completed", "failed"))
        xs, rate, p99, _ = binned(rows, target, start, end, 10)
        ax_lat.plot([x + start - t_step for x, v in zip(xs, p99) if v is not None], [v for v in p99 if v is not None], color=color, lw=1.2, label=name.replace("completed, ", ""))
    ax_load.set_ylabel("requests/s")
    ax_load.set_ylim(0, ax_load.get_ylim()[1] * 1.35)
    ax_load.legend(loc="upper right", fontsize=8, ncol=2)
    ax_lat.set_ylabel("p99 latency (ms)\nper 10 s")
    ax_lat.set_yscale("log")
    ax_lat.legend(loc="upper right", fontsize=8)

    # In-flight and CPU p50 per signal, each point at the time its alarm got it.
    held = {m: model.Series.from_data(data, HELD, m) for m in report.METRICS}
    t_from, t_to = start, end
    live = [(rel(float(t["t"])), float(t["inflight_p50"]) if t["inflight_p50"] not in ("", "None") else None) for t in ticks]
    live_cpu = [(rel(float(t["t"])), float(t["cpu_p50"]) if t["cpu_p50"] not in ("", "None") else None) for t in ticks]
    sig = {s.key: s for s in report.signals(cfg)}
    for key, metric, ax in (("lifeguard", "RequestsInFlight", ax_inf), ("lifeguard", "CpuUtilization", ax_cpu)):
        pts = live if metric == "RequestsInFlight" else live_cpu
        xs, ys = steps(pts, cfg["period"])
        ax.step(xs, ys, where="post", color=COLORS["lifeguard"], lw=1.6, label="lifeguard 10 s, live (real fleet)")
        dp = sig["lifeguard"].datapoints(held, metric, t_from, t_to)
        xs, ys = steps([(rel(a + model.EVAL_DELAY), v) for _, _, a, v in dp], sig["lifeguard"].period)
        ax.step(xs, ys, where="post", color=COLORS["held"], lw=1.0, ls=":", label="lifeguard 10 s, held fleet (replayed)")
    # The 1-minute CPU datapoints are the same for both 1-minute models: drawn once.
    for key, metric, ax in (("cpu20", "CpuUtilization", ax_cpu), ("late60", "RequestsInFlight", ax_inf), ("cpu60", "CpuUtilization", ax_cpu)):
        dp = sig[key].datapoints(held, metric, t_from, t_to)
        xs, ys = steps([(rel(a + model.EVAL_DELAY), v) for _, _, a, v in dp], sig[key].period)
        label = "AWS 1 min, 3 min late" if key != "cpu20" else AWS[key]
        ax.step(xs, ys, where="post", color=COLORS["late60" if key == "cpu60" else key], lw=1.6, label=f"{label} (held fleet, replayed)")
    ax_inf.axhline(cfg["threshold"], color="black", lw=0.8, ls="--")
    ax_inf.text(x_max, cfg["threshold"], f" high {cfg['threshold']}", va="center", fontsize=8)
    ax_inf.set_ylabel("RequestsInFlight p50\nper task")
    ax_inf.set_ylim(0, ax_inf.get_ylim()[1] * 1.45)  # room for the legend above the lines
    ax_inf.legend(loc="upper right", fontsize=8, ncol=2)
    ax_cpu.axhline(cfg["cpu_threshold"], color="black", lw=0.8, ls="--")
    ax_cpu.text(x_max, cfg["cpu_threshold"], f" {cfg['cpu_threshold']:.0f} %", va="center", fontsize=8)
    ax_cpu.set_ylabel("CpuUtilization p50\n(% of the task's limit)")
    ax_cpu.set_ylim(0, 150)
    ax_cpu.set_yticks([0, 20, 40, 60, 80, 100])
    ax_cpu.legend(loc="upper right", fontsize=8, ncol=2)

    # Replicas: the real fleet's ready count; for the replayed models, what they would
    # have had (the minimum until their alarm, then the scale-out once the new replicas
    # are ready, startup as measured here). Their scale-in is not modelled.
    counts = report.replica_counts(events, SERVICE, start, end, 0.5)
    ax_rep.step([rel(t) for t, _ in counts], [n for _, n in counts], where="post", color=COLORS["lifeguard"], lw=1.8, label="lifeguard: real fleet, ready replicas")
    startup = summary["live"]["startup_s"] or 0
    for key in AWS:
        m = summary["models"][key]
        if m.get("alarm") is None:
            continue
        target = model.Target(cfg["min"], cfg["max"], cfg["min"], cfg["cooldown"])
        after = target.scale_out(t_step + m["alarm"]) or cfg["min"]
        ready_at = m["alarm"] + startup
        xs = [x_min, ready_at, ready_at, max(ready_at + 15, x_max)]
        ys = [cfg["min"], cfg["min"], after, after]
        ax_rep.plot(xs, ys, color=COLORS[key], lw=1.4, ls="--", label=f"{AWS[key]}: would have (scale-out only)")
    ax_rep.set_ylabel("replicas")
    ax_rep.set_ylim(0, cfg["max"] * 1.6)
    ax_rep.set_yticks(range(0, cfg["max"] + 1))
    ax_rep.legend(loc="upper right", fontsize=8, ncol=2)
    ax_rep.set_xlabel("seconds from the load step")

    # The step, and each signal's alarm.
    marks = [("lifeguard", summary["live"]["alarm"])] + [(k, summary["models"][k].get("alarm")) for k in AWS]
    for ax in axes:
        ax.axvspan(0, t_step_end - t_step, color="#f3e6c4", alpha=0.5, lw=0)
        for key, t in marks:
            if t is not None:
                ax.axvline(t, color=COLORS[key], lw=0.9, ls="-.")
        ax.grid(True, alpha=0.3)
        ax.set_xlim(x_min, x_max)
    for key, t in marks:
        if t is not None:
            # lifeguard's label left of its line, the others right: they may coincide.
            side = "right" if key == "lifeguard" else "left"
            ax_rep.annotate(f" alarm +{t:.0f} s ", (t, 0.2), color=COLORS[key], fontsize=8, rotation=90, va="bottom", ha=side)
    title = f"Scale-out from a load step, {cfg['scenario']} scenario: lifeguard's 10 s data against AWS's 20 s CPU and 1-minute metrics"
    never = [AWS[k] for k in AWS if summary["models"][k].get("alarm") is None]
    if never:
        title += "\nNever decided: " + ", ".join(never)
    if summary["mode"] != "full":
        title = "SMOKE TEST (scaled down, not the benchmark's figures)\n" + title
    fig.suptitle(title, fontsize=11)
    fig.text(0.5, 0.005, "Shaded: the load step. A simulation of AWS's control loop (documented rules, measured delays) on this machine, not AWS itself; bench/README.md.", ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.015, 1, 0.98))
    fig.savefig(os.path.join(out, "scaling.png"), dpi=90)
    plt.close(fig)
