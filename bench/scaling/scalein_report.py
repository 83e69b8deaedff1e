"""The scale-in benchmark's report (scalein.py calls it after both runs, or alone with
`scalein.py --report-only DIR`): from what the runs left in DIR — config.json,
events.jsonl, and logs/<run>/ (requests.csv, the agent stand-ins' calls) — it writes
summary.json (every figure), results.md (the tables) and scalein.png, and returns the
problems found (a run that never reached its target, a call after a SIGTERM, a job cut
that no stop explains), which make the run fail loudly.
"""
import csv
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

RUNS = ("without", "with")
COLORS = {"without": "#d62728", "with": "#1f77b4"}
NAMES = {"without": "without protection", "with": "with --scale-in-protection"}


def load(out):
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(out, "events.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    runs = {}
    for run in RUNS:
        ev = [e for e in events if e["run"] == run]
        if not ev:
            continue
        d = os.path.join(out, "logs", run)
        with open(os.path.join(d, "requests.csv")) as f:
            rows = [dict(r, start=float(r["start"]), end=float(r["end"])) for r in csv.DictReader(f)]
        calls = []
        for path in glob.glob(os.path.join(d, "agent-*.calls.jsonl")):
            with open(path) as f:
                calls += [json.loads(line) for line in f if line.strip()]
        calls.sort(key=lambda c: c["t"])
        runs[run] = {"events": ev, "rows": rows, "calls": calls}
    return cfg, runs


def one(e, kind):
    found = [x for x in e if x["kind"] == kind]
    return found[0] if found else None


def protected_spans(calls, task, end):
    """[(from, to)] while the agent held the task protected, from its calls: set by a
    PUT true, until the next PUT false or the expiry, whichever first."""
    spans, since, until = [], None, None
    for c in calls:
        if c["task"] != task or c["method"] != "PUT" or c["status"] != 200:
            continue
        enabled = c["answer"]["protection"]["ProtectionEnabled"]
        if since is not None and until <= c["t"]:
            spans.append((since, until))  # lapsed before this call
            since = None
        if enabled:
            since = since if since is not None else c["t"]
            until = c["t"] + 60.0 * json.loads(c["body"]).get("ExpiresInMinutes", 120)
        elif since is not None:
            spans.append((since, c["t"]))
            since = None
    if since is not None:
        spans.append((since, min(until, end)))
    return spans


def analyse(cfg, run, data):
    ev, rows, calls = data["events"], data["rows"], data["calls"]
    load_ev, end_ev = one(ev, "load"), one(ev, "end")
    t0, decision, ended = load_ev["t0"], load_ev["decision"], end_ev["ended"] if end_ev else ev[-1]["t"]
    rel = lambda t: None if t is None else round(t - decision, 1)
    problems = []
    tasks = [e["task"] for e in ev if e["kind"] == "launch"]
    agent_of = {e["task"]: e["agent"].rsplit("/", 1)[-1] for e in ev if e["kind"] == "launch"}
    stops = {}
    for e in ev:
        if e["kind"] == "evaluate":
            for name in e["stopped"]:
                stops[name] = e["t"]
    exits = {e["task"]: e for e in ev if e["kind"] == "exited"}
    target = one(ev, "target")
    deadline = one(ev, "deadline")
    if deadline is not None:
        problems.append(f"{run}: the fleet had not reached {cfg['target']} tasks {cfg['max_wait']} s after the decision")
    for name in stops:
        if name not in exits:
            problems.append(f"{run}: {name} was stopped and had not exited when the run ended")
    last_exit = max((e["t"] for e in exits.values()), default=None)
    short_of = [e for e in ev if e["kind"] == "evaluate" and e["short_of"] > 0]

    jobs = [r for r in rows if r["kind"] == "job"]
    shorts = [r for r in rows if r["kind"] == "short"]
    cut = [r for r in jobs if r["status"] not in ("200", "unfinished")]
    # Each cut job is put down to the stopped tasks whose exit (the SIGKILL at the stop
    # timeout, or the app's own end) came within 3 s of the job's end. Tasks stopped
    # together exit together, and the client cannot tell which of them served the job:
    # such a cut counts for the group ("shared" in the per-task table).
    for r in cut:
        r["tasks"] = sorted(name for name, e in exits.items() if abs(e["t"] - r["end"]) <= 3.0)
        if not r["tasks"]:
            problems.append(f"{run}: job {r['id']} (status {r['status']}) was cut at +{r['end'] - decision:.1f} s, when no stopped task exited")
    short_failed = [r for r in shorts if r["status"] != "200"]
    in_flight_at_decision = sum(1 for r in jobs if r["start"] <= decision < r["end"])

    # The agent stand-ins' calls, and none after a task's SIGTERM (lifeguard's claim).
    by = {"GET": 0, "set": 0, "renew": 0, "clear": 0, "other": 0}
    state = {}
    for c in calls:
        if c["method"] == "GET":
            by["GET"] += 1
            continue
        try:
            enabled = json.loads(c["body"]).get("ProtectionEnabled")
        except ValueError:
            enabled = None
        was = state.get(c["task"])
        if enabled is True:
            by["renew" if was is not None and was > c["t"] else "set"] += 1
            state[c["task"]] = c["t"] + 60.0 * json.loads(c["body"]).get("ExpiresInMinutes", 120)
        elif enabled is False:
            by["clear"] += 1
            state[c["task"]] = None
        else:
            by["other"] += 1
    task_of_agent = {v: k for k, v in agent_of.items()}
    for c in calls:
        name = task_of_agent.get(c["task"])
        if name in stops and c["t"] > stops[name]:
            problems.append(f"{run}: {name}'s agent got a {c['method']} {c['body'] or ''} {c['t'] - stops[name]:.1f} s after its SIGTERM")

    # lifeguard's own lines: the stop line's scale_in_protected, and the set/cleared.
    lines = {e["task"]: e["lines"] for e in ev if e["kind"] == "lines"}
    stop_line = {}
    for name, ls in lines.items():
        for line in ls:
            if line.startswith("lifeguard: draining: not ready"):
                field = [w for w in line.split() if w.startswith("scale_in_protected=")]
                stop_line[name] = field[0].split("=", 1)[1] if field else "(no field)"
    said = {
        "set": sum(1 for ls in lines.values() for line in ls if "scale-in protection set" in line),
        "cleared": sum(1 for ls in lines.values() for line in ls if "scale-in protection cleared" in line),
    }
    # lifeguard's gauge against the agent's state, at each 5 s sample of a live task.
    agree = disagree = 0
    for e in ev:
        if e["kind"] == "sample":
            for name, g in e["gauge"].items():
                if g is None:
                    continue
                if bool(g) == e["agent"].get(name):
                    agree += 1
                else:
                    disagree += 1

    per_task = []
    for name in tasks:
        x = exits.get(name)
        task_cut = [r for r in cut if name in r["tasks"]]
        shared = sorted({n for r in task_cut for n in r["tasks"]} - {name})
        per_task.append({
            "task": name,
            "stopped": rel(stops.get(name)),
            "exited": rel(x["t"]) if x else None,
            "sigterm_to_exit_s": x["after_sigterm"] if x else None,
            "code": x["code"] if x else None,
            "drain_end": x["drain_end"] if x else None,
            "stop_line_scale_in_protected": stop_line.get(name),
            "jobs_cut_at_its_exit": len(task_cut),
            "exit_shared_with": shared,
            "protected_spans": [(rel(a), rel(b)) for a, b in protected_spans(calls, agent_of[name], ended)],
        })
    return {
        "run": run,
        "protection": run == "with",
        "t0": t0, "decision": decision, "ended": ended,
        "jobs": {
            "started": len(jobs),
            "started_before_decision": sum(1 for r in jobs if r["start"] < decision),
            "in_flight_at_decision": in_flight_at_decision,
            "completed": sum(1 for r in jobs if r["status"] == "200"),
            "cut": len(cut),
            "cut_status": {s: sum(1 for r in cut if r["status"] == s) for s in sorted({r["status"] for r in cut})},
            "unfinished_at_end": sum(1 for r in jobs if r["status"] == "unfinished"),
        },
        "short": {
            "total": len(shorts), "failed": len(short_failed),
            "failed_status": {s: sum(1 for r in short_failed if r["status"] == s) for s in sorted({r["status"] for r in short_failed})},
        },
        "decision_to_target_s": rel(target["t"]) if target else None,
        "decision_to_last_exit_s": rel(last_exit),
        "evaluations_short_of_unprotected": len(short_of),
        "agent_calls": by,
        "agent_calls_total": len(calls),
        "lifeguard_said": said,
        "gauge_vs_agent": {"agree": agree, "disagree": disagree},
        "tasks": per_task,
        "problems": problems,
    }


def fmt_s(v):
    return "—" if v is None else f"{v:.1f} s"


def write_md(cfg, out, summary):
    s = {r["run"]: r for r in summary["runs"]}
    cols = [r for r in RUNS if r in s]
    smoke = cfg["mode"] != "full"
    lines = []
    if smoke:
        lines += [f"**{cfg['label']}**", ""]
    lines += [
        f"# Scale-in with long jobs: {cfg['tasks']} → {cfg['target']} tasks, without and with `--scale-in-protection {cfg['after']}`",
        "",
        f"{summary['date']}, {summary['lifeguard']}, both runs in one sitting with the same load "
        f"(seed {cfg['load_seed']}) and the same pick order (seed {cfg['order_seed']}). Stop: `--drain-delay {cfg['drain_delay']} "
        f"--drain-max {cfg['drain_max']} --grace {cfg['grace']}` (the stop timeout); jobs {cfg['job_min']}–{cfg['job_max']} s, "
        f"one every {cfg['job_every'].split(',')[0]} s before the decision and " + (f"every {cfg['job_every'].split(',')[1]} s after; " if float(cfg['job_every'].split(',')[1]) > 0 else "none after; ") +
        f"short requests from {cfg['users'].split(',')[0]} users before, {cfg['users'].split(',')[1]} after (think {cfg['think']:.0f} s). "
        f"The decision comes {cfg['decision']} s after the load starts; ECS re-evaluates every {cfg['ecs_every']} s. "
        "Times are seconds from the scale-in decision. bench/README.md says what is emulated and assumed.",
        "",
        "| | " + " | ".join(NAMES[r] for r in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]

    def row(label, f):
        lines.append(f"| {label} | " + " | ".join(f(s[r]) for r in cols) + " |")

    row("jobs started (before the decision; in flight at it)", lambda r: f"{r['jobs']['started']} ({r['jobs']['started_before_decision']}; {r['jobs']['in_flight_at_decision']})")
    row("**jobs cut** (no complete answer)", lambda r: f"**{r['jobs']['cut']}**" + (f" ({', '.join(f'{n} {k}' for k, n in r['jobs']['cut_status'].items())})" if r["jobs"]["cut"] else ""))
    row("jobs completed / still running on the kept tasks at the end", lambda r: f"{r['jobs']['completed']} / {r['jobs']['unfinished_at_end']}")
    row("short requests failed / total", lambda r: f"{r['short']['failed']} / {r['short']['total']:,}")
    row("decision → fleet at the target count", lambda r: fmt_s(r["decision_to_target_s"]))
    row("decision → last stopped task exited", lambda r: fmt_s(r["decision_to_last_exit_s"]))
    row("ECS evaluations short of unprotected tasks", lambda r: str(r["evaluations_short_of_unprotected"]))
    row("agent calls: GET / set / renew / clear", lambda r: "{GET} / {set} / {renew} / {clear}".format(**r["agent_calls"]))
    row("lifeguard said: protection set / cleared", lambda r: f"{r['lifeguard_said']['set']} / {r['lifeguard_said']['cleared']}")
    row("`lifeguard_scale_in_protected` against the agent, 5 s samples: agree / disagree", lambda r: f"{r['gauge_vs_agent']['agree']} / {r['gauge_vs_agent']['disagree']}" if r["protection"] else "— (no gauge)")
    lines += ["", "Per task (times from the decision; protected: while the agent held the task protected):", ""]
    for r in cols:
        lines += [f"**{NAMES[r]}**", "", "| task | protected | SIGTERM | exited (after SIGTERM) | how the drain ended | stop line `scale_in_protected` | jobs cut at its exit |", "|---|---|---|---|---|---|---|"]
        for t in s[r]["tasks"]:
            spans = ", ".join(f"{a:+.0f}…{b:+.0f}" for a, b in t["protected_spans"]) or "never"
            exited = f"{t['exited']:+.1f} s ({t['sigterm_to_exit_s']:.1f} s, code {t['code']})" if t["exited"] is not None else "kept"
            stopped = f"{t['stopped']:+.1f} s" if t["stopped"] is not None else "—"
            cut = str(t["jobs_cut_at_its_exit"])
            if t["exit_shared_with"] and t["jobs_cut_at_its_exit"]:
                cut += " (exited with " + ", ".join(x.rsplit("-", 1)[-1] for x in t["exit_shared_with"]) + ": shared)"
            line = t["stop_line_scale_in_protected"] or "—"
            if line == "(no field)" and r == "without":
                line = "(no field: protection off)"
            lines.append(f"| {t['task']} | {spans} | {stopped} | {exited} | {t['drain_end'] or '—'} | {line} | {cut} |")
        lines.append("")
    if summary["problems"]:
        lines += ["**Problems:**", ""] + [f"- {p}" for p in summary["problems"]] + [""]
    lines += ["![tasks, protection and jobs over time, both runs](scalein.png)", ""]
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines))


def draw(cfg, out, summary, runs):
    s = {r["run"]: r for r in summary["runs"]}
    cols = [r for r in RUNS if r in s]
    fig, axes = plt.subplots(3, 1, figsize=(11, 11), sharex=True, gridspec_kw={"height_ratios": [1.0, 1.0, 1.5]})
    ax_tasks, ax_jobs, ax_gantt = axes
    x_min = -cfg["decision"]
    x_max = max(r["ended"] - r["decision"] for r in s.values())
    for run in cols:
        r, ev, rows = s[run], runs[run]["events"], runs[run]["rows"]
        d, color = r["decision"], COLORS[run]
        # Tasks the service counts (not told to stop) and tasks alive (not exited).
        stops = sorted(e["t"] - d for e in ev if e["kind"] == "evaluate" for _ in e["stopped"])
        exits = sorted(e["t"] - d for e in ev if e["kind"] == "exited")
        for times, ls, what in ((stops, "-", "counted by the service"), (exits, ":", "alive (not exited)")):
            xs, ys, n = [x_min], [cfg["tasks"]], cfg["tasks"]
            for t in times:
                n -= 1
                xs.append(t)
                ys.append(n)
            xs.append(x_max)
            ys.append(n)
            ax_tasks.step(xs, ys, where="post", color=color, ls=ls, lw=1.8, label=f"{NAMES[run]}: tasks {what}")
        if r["protection"]:
            samples = [e for e in ev if e["kind"] == "sample"]
            ax_tasks.step([e["t"] - d for e in samples], [sum(1 for v in e["agent"].values() if v) for e in samples], where="post", color=color, ls="--", lw=1.2, label=f"{NAMES[run]}: tasks protected (agent, 5 s samples)")
        # Jobs in flight, as the clients see them, and each cut at its end.
        jobs = [x for x in rows if x["kind"] == "job"]
        grid = [x_min + i for i in range(int(x_max - x_min) + 1)]
        ax_jobs.plot(grid, [sum(1 for j in jobs if j["start"] - d <= t < j["end"] - d) for t in grid], color=color, lw=1.4, label=f"{NAMES[run]}: jobs in flight")
        cut = sorted(j["end"] - d for j in jobs if j["status"] not in ("200", "unfinished"))
        if cut:
            ax_jobs.step([x_min] + cut + [x_max], [0] + list(range(1, len(cut) + 1)) + [len(cut)], where="post", color=color, ls="--", lw=1.8, label=f"{NAMES[run]}: jobs cut, cumulative ({len(cut)})")
        else:
            ax_jobs.plot([x_min, x_max], [0, 0], color=color, ls="--", lw=1.8, label=f"{NAMES[run]}: jobs cut, cumulative (0)")
        failed = sorted(x["end"] - d for x in rows if x["kind"] == "short" and x["status"] != "200")
        if failed:
            ax_jobs.plot(failed, [0.3] * len(failed), "|", color=color, ms=8, label=f"{NAMES[run]}: short requests failed ({len(failed)})")
    ax_tasks.set_ylabel("tasks")
    ax_tasks.set_ylim(0, cfg["tasks"] * 1.9)
    ax_tasks.axhline(cfg["target"], color="black", lw=0.8, ls="--")
    ax_tasks.text(x_max, cfg["target"], f" target {cfg['target']}", va="center", fontsize=8)
    ax_tasks.legend(loc="upper right", fontsize=8, ncol=2)
    ax_jobs.set_ylabel("jobs")
    ax_jobs.set_ylim(0, ax_jobs.get_ylim()[1] * 1.5)
    ax_jobs.legend(loc="upper right", fontsize=8, ncol=2)

    # Per task: protected spans (bars), SIGTERM (triangle), exit (x), cut jobs (count).
    labels, y = [], 0
    for run in cols:
        r, color = s[run], COLORS[run]
        for t in r["tasks"]:
            for a, b in t["protected_spans"]:
                ax_gantt.barh(y, b - a, left=a, height=0.6, color=color, alpha=0.35, lw=0)
            if t["stopped"] is not None:
                ax_gantt.plot(t["stopped"], y, ">", color=color, ms=7)
                ax_gantt.plot([t["stopped"], t["exited"] if t["exited"] is not None else x_max], [y, y], color=color, lw=1.0)
            if t["exited"] is not None:
                ax_gantt.plot(t["exited"], y, "x", color="black", ms=7)
                # Once per group of tasks that exited together (the cuts are theirs jointly).
                if t["jobs_cut_at_its_exit"] and all(t["task"] < x for x in t["exit_shared_with"]):
                    group = ", ".join([t["task"].rsplit("-", 1)[-1]] + [x.rsplit("-", 1)[-1] for x in t["exit_shared_with"]])
                    shared = f" at the exits of {group}" if t["exit_shared_with"] else ""
                    ax_gantt.annotate(f" {t['jobs_cut_at_its_exit']} jobs cut{shared}", (t["exited"], y), fontsize=8, va="center")
            labels.append(f"{'with' if r['protection'] else 'without'}: {t['task'].rsplit('-', 1)[-1]}")
            y += 1
        y += 0.6
    ax_gantt.set_yticks([i if i < len(s[cols[0]]["tasks"]) else i + 0.6 for i in range(len(labels))])
    ax_gantt.set_yticklabels(labels, fontsize=8)
    ax_gantt.set_ylim(y - 0.6 + 0.4, -0.6)  # every task's row, drawn or not; the first at the top
    ax_gantt.set_ylabel("task (run: slot)")
    ax_gantt.set_xlabel("seconds from the scale-in decision")
    ax_gantt.plot([], [], ">", color="gray", label="SIGTERM (ECS stops it)")
    ax_gantt.plot([], [], "x", color="black", label="exited")
    ax_gantt.barh([], [], color="gray", alpha=0.35, label="protected (agent's state)")
    ax_gantt.legend(loc="lower right", fontsize=8)
    for ax in axes:
        ax.axvline(0, color="black", lw=0.9, ls="-.")
        for run in cols:
            for v in (s[run]["decision_to_target_s"], s[run]["decision_to_last_exit_s"]):
                if v is not None:
                    ax.axvline(v, color=COLORS[run], lw=0.8, ls="-.", alpha=0.7)
        ax.grid(True, alpha=0.3)
        ax.set_xlim(x_min, x_max)
    title = (f"Scale-in {cfg['tasks']} → {cfg['target']} tasks with long jobs ({cfg['job_min']}–{cfg['job_max']} s, stop timeout {cfg['grace']}): "
             f"without and with --scale-in-protection {cfg['after']}")
    if cfg["mode"] != "full":
        title = "SMOKE TEST (scaled down, not the benchmark's figures)\n" + title
    fig.suptitle(title, fontsize=11)
    fig.text(0.5, 0.005, "Dash-dot: the decision (black), and per run the fleet at its target and the last stopped task's exit. ECS emulated on this machine; bench/README.md.", ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.015, 1, 0.98))
    fig.savefig(os.path.join(out, "scalein.png"), dpi=90)
    plt.close(fig)


def report(out):
    cfg, runs = load(out)
    summary = {
        "date": cfg.get("date"), "lifeguard": cfg.get("lifeguard"), "mode": cfg["mode"],
        "config": {k: v for k, v in cfg.items() if k not in ("date", "lifeguard")},
        "runs": [analyse(cfg, run, runs[run]) for run in RUNS if run in runs],
    }
    summary["problems"] = [p for r in summary["runs"] for p in r["problems"]]
    if len(summary["runs"]) != len(RUNS):
        summary["problems"].append("a run is missing from events.jsonl")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    write_md(cfg, out, summary)
    draw(cfg, out, summary, runs)
    return summary["problems"]
