#!/usr/bin/env python3
"""Benchmark lifeguard side by side with tini, dumb-init and catatonit.

Measures start-to-exit time, idle RSS, binary size, signal-forwarding latency, SIGTERM
delivery through a shell entrypoint (as PID 1) and zombie-reaping time (as PID 1).
Needs root (PID namespaces, apt-get). Usage: python3 bench/compare.py [--help]
"""
import argparse
import datetime
import os
import platform
import select
import shutil
import signal
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_DIR = "/tmp/bench-target"
RELEASE = f"{TARGET_DIR}/x86_64-unknown-linux-musl/release"
BUILD = ["cargo", "build", "--release", "--target", "x86_64-unknown-linux-musl",
         "--bin", "lifeguard", "--bin", "lifeguard-testapp"]
DEBIAN = {"tini": "/usr/bin/tini", "dumb-init": "/usr/bin/dumb-init", "catatonit": "/usr/bin/catatonit"}
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
STARTED = []  # every Popen this script started; cleanup() kills whatever is left


def median(xs):
    """Median of a list of numbers."""
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def pct(xs, p):
    """Nearest-rank percentile p (0-100)."""
    s = sorted(xs)
    return s[max(0, -(-len(s) * p // 100) - 1)]


def prepare(args):
    """Install the Debian inits and build lifeguard + testapp if they are missing."""
    missing = [pkg for pkg, path in DEBIAN.items() if not os.path.exists(path)]
    if missing:
        print(f"installing {' '.join(missing)} with apt-get", flush=True)
        subprocess.run(["apt-get", "update", "-q"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True)
    for path in (args.lifeguard, args.testapp):
        if not os.path.exists(path):
            if not path.startswith(RELEASE):
                sys.exit(f"{path} does not exist (only the default paths are built here)")
            print(f"building: CARGO_TARGET_DIR={TARGET_DIR} {' '.join(BUILD)}", flush=True)
            subprocess.run(BUILD, cwd=ROOT, check=True, env={**os.environ, "CARGO_TARGET_DIR": TARGET_DIR})


class Lines:
    """Reads lines from a child's stdout pipe, every wait bounded by a deadline."""

    def __init__(self, pipe):
        self.fd, self.buf, self.eof = pipe.fileno(), b"", False

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.fd], [], [], left)[0]:
            raise TimeoutError("no output in time")
        data = os.read(self.fd, 65536)
        self.eof = not data
        self.buf += data

    def until(self, text, timeout=10.0):
        """Consume lines up to and including the line `text`."""
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" not in self.buf:
                if self.eof:
                    raise EOFError(f"EOF before {text!r}")
                self._fill(deadline)
            line, self.buf = self.buf.split(b"\n", 1)
            if line.decode() == text:
                return

    def rest(self, timeout):
        """Everything until EOF; None if EOF did not come within timeout."""
        deadline = time.monotonic() + timeout
        try:
            while not self.eof:
                self._fill(deadline)
        except TimeoutError:
            return None
        return self.buf.decode()


def spawn(argv, pipe=False):
    """Start argv in a session of its own (never our process group), recorded for cleanup."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         stdout=subprocess.PIPE if pipe else subprocess.DEVNULL, start_new_session=True)
    STARTED.append(p)
    return p


def children(pid):
    """Direct children of pid (all its threads), from /proc."""
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def kill_tree(p):
    """SIGKILL p and all its descendants (never this script or its group), then reap p."""
    if p.poll() is None:
        todo, tree = [p.pid], []
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children(pid)
        for pid in tree:
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        print(f"warning: pid {p.pid} did not die", file=sys.stderr)
    if p.stdout:
        p.stdout.close()


def wait_for(cond, what, timeout=10.0):
    """Poll cond() every millisecond until it is truthy; return its value or raise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(0.001)
    raise TimeoutError(f"timed out waiting for {what}")


def first_child(pid):
    """The first child of pid, once it has one (the init under unshare)."""
    return wait_for(lambda: children(pid), f"a child of {pid}")[0]


def binary_info(path):
    """Size on disk and whether the ELF file has no PT_INTERP (static)."""
    with open(path, "rb") as f:
        elf = f.read()
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    types = [struct.unpack_from("<I", elf, phoff + i * phentsize)[0] for i in range(phnum)]
    return os.path.getsize(path), 3 not in types  # 3 = PT_INTERP


def bench_true(cmds, n):
    """Wall time (µs) of `INIT -- /bin/true` from spawn to reaped exit, inits round-robin."""
    names = list(cmds) + ["(no init)"]
    times = {k: [] for k in names}
    devnull = [(os.POSIX_SPAWN_OPEN, fd, "/dev/null", os.O_RDWR, 0) for fd in (0, 1, 2)]
    for i in range(n):
        for k in names[i % len(names):] + names[:i % len(names)]:  # rotate the order
            argv = ["/bin/true"] if k == "(no init)" else cmds[k](["/bin/true"])
            t0 = time.perf_counter_ns()
            pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=devnull, setsid=True)
            _, status = os.waitpid(pid, 0)
            times[k].append((time.perf_counter_ns() - t0) / 1000)
            if status != 0:
                raise RuntimeError(f"{k}: /bin/true exited with status {status}")
    return {k: (median(v), pct(v, 90)) for k, v in times.items()}


def bench_rss(cmds, runs):
    """Idle VmRSS (kB) of `INIT -- sleep 60`, read 300 ms after start; median of runs."""
    rss = {k: [] for k in cmds}
    for _ in range(runs):
        for k, cmd in cmds.items():
            p = spawn(cmd(["sleep", "60"]))
            try:
                time.sleep(0.3)  # settle time, not a correctness wait
                with open(f"/proc/{p.pid}/status") as f:
                    rss[k] += [int(l.split()[1]) for l in f if l.startswith("VmRSS:")]
            finally:
                kill_tree(p)
    return {k: median(v) for k, v in rss.items()}


def bench_latency(cmds, testapp, n):
    """SIGUSR1 to the init -> `signal USR1` printed by the app (µs); inits as plain children."""
    procs, lat = {}, {k: [] for k in cmds}
    try:
        for k, cmd in cmds.items():
            procs[k] = (p := spawn(cmd([testapp, "--exit-on", "none"]), pipe=True)), Lines(p.stdout)
            procs[k][1].until("ready")
        for _ in range(n):
            for k, (p, out) in procs.items():  # interleaved across the inits
                t0 = time.perf_counter_ns()
                os.kill(p.pid, signal.SIGUSR1)
                out.until("signal USR1", timeout=5)
                lat[k].append((time.perf_counter_ns() - t0) / 1000)
    finally:
        for p, _ in procs.values():
            kill_tree(p)
    return {k: (median(v), pct(v, 99)) for k, v in lat.items()}


def bench_shell_term(cmds, testapp, runs):
    """PID-1 INIT runs `sh -c 'app --linger 100; true'`; SIGTERM it: did the app's handler finish?"""
    script = f"{testapp} --linger 100; true"
    delivered = {k: [0, 0] for k in cmds}  # [handler finished, TERM received]
    for _ in range(runs):
        for k, cmd in cmds.items():
            p = spawn(UNSHARE + cmd(["sh", "-c", script]), pipe=True)
            try:
                out = Lines(p.stdout)
                out.until("ready")
                os.kill(first_child(p.pid), signal.SIGTERM)
                text = out.rest(timeout=10) or ""
                delivered[k][0] += "signal TERM" in text and "exiting" in text
                delivered[k][1] += "signal TERM" in text
            finally:
                kill_tree(p)
    return delivered


def namespace_has_zombie(init):
    """True while the PID namespace of init (seen through its own /proc) holds a zombie."""
    proc = f"/proc/{init}/root/proc"  # only the init, its app and their zombies live there
    for pid in filter(str.isdigit, os.listdir(proc)):
        try:
            with open(f"{proc}/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:  # reaped meanwhile
            pass
    return False


def threads():
    """System-wide thread count (4th field of /proc/loadavg): cheap, and zombies count in it."""
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[1])


def time_reaping(init, zombies, timeout=60.0):
    """SIGCONT the stopped init; seconds until it has no zombie child left."""
    before = threads()
    t0 = time.perf_counter()
    os.kill(init, signal.SIGCONT)
    slow_check = t0 + 0.02
    while (t := time.perf_counter()) - t0 < timeout:
        # Fast path: the thread count fell by `zombies` (then the check below is cheap).
        # Every 20 ms look in the namespace anyway, so processes that others start meanwhile
        # cannot hide the end; a slow look counts until it finishes. Neither lists the
        # zombies first: cached /proc dentries make each reap ~2x slower. Nor is
        # /proc/PID/task/*/children used here: it skips entries while they are reaped.
        fast = threads() <= before - zombies
        slow = not fast and t > slow_check
        if (fast or slow) and not namespace_has_zombie(init):
            return (time.perf_counter() if slow else t) - t0
        if slow:
            slow_check = time.perf_counter() + 0.02
    raise TimeoutError("the zombies were not reaped")


def bench_reap(cmds, testapp, runs, zombies):
    """PID-1 INIT: ms from SIGCONT (init held stopped until all zombies are its) to none left."""
    ms = {k: [] for k in cmds}
    for _ in range(runs):
        for k, cmd in cmds.items():
            p = spawn(UNSHARE + cmd([testapp, "--zombies", str(zombies)]), pipe=True)
            try:
                init, out = first_child(p.pid), Lines(p.stdout)
                wait_for(lambda: children(init), "the init to start the app")
                os.kill(init, signal.SIGSTOP)  # the app is still forking; nothing to reap yet
                out.until(f"zombies {zombies}", timeout=60)
                wait_for(lambda: len(children(init)) > zombies, "the zombies to be re-parented")
                ms[k].append(time_reaping(init, zombies) * 1000)
                out.until("ready")
                os.kill(init, signal.SIGINT)  # tini, like the others, forwards it to the app
                p.wait(timeout=10)
            finally:
                kill_tree(p)
    return {k: median(v) for k, v in ms.items()}


def cell(value, base, fmt="{:,.0f}"):
    """`value (ratio×)` against tini's value, or an em dash when missing."""
    if value is None:
        return "—"
    return fmt.format(value) + (f" ({value / base:.2f}×)" if base else "")


def main():
    """Parse options, run every measurement, print and save the markdown table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lifeguard", default=f"{RELEASE}/lifeguard")
    ap.add_argument("--testapp", default=f"{RELEASE}/lifeguard-testapp")
    ap.add_argument("--quick", action="store_true", help="a tenth of the runs (smoke test)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results.md"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the PID-namespace tests use unshare --pid, and apt-get may be needed")
    prepare(args)
    q = 10 if args.quick else 1
    lg, app = os.path.abspath(args.lifeguard), os.path.abspath(args.testapp)
    plain = {"lifeguard": [lg], "tini": [DEBIAN["tini"]], "dumb-init": [DEBIAN["dumb-init"]],
             "catatonit": [DEBIAN["catatonit"]]}
    cmds = {k: (lambda a, v=v: v + ["--"] + a) for k, v in plain.items()}
    # Wherever SIGTERM is involved lifeguard runs with --drain-delay 0, so its drain does
    # not dominate; tini -g (signal the whole group) is an extra row for the shell test.
    term = {**cmds, "lifeguard": lambda a: [lg, "--drain-delay", "0", "--"] + a}
    term_g = {**term, "tini -g": lambda a: [DEBIAN["tini"], "-g", "--"] + a}

    steps = [("start-to-exit of /bin/true", lambda: bench_true(cmds, 300 // q)),
             ("idle RSS", lambda: bench_rss(cmds, 5)),
             ("SIGUSR1 forwarding latency", lambda: bench_latency(cmds, app, 200 // q)),
             ("shell-entrypoint SIGTERM (PID 1)", lambda: bench_shell_term(term_g, app, 40 // q)),
             ("reaping 5000 zombies (PID 1)", lambda: bench_reap(term, app, 5 if q == 1 else 1, 5000))]
    res = []
    try:
        for title, fn in steps:
            print(f"measuring {title} ...", flush=True)
            t0 = time.monotonic()
            res.append(fn())
            print(f"  done in {time.monotonic() - t0:.1f} s: {res[-1]}", flush=True)
    finally:
        for p in STARTED:
            kill_tree(p)
    start, rss, lat, term_ok, reap = res
    info = {k: binary_info(v[0]) for k, v in plain.items()}

    n_term = 40 // q
    rows = ["| init | size (kB) | linked | `/bin/true` median µs | p90 µs | idle RSS kB "
            "| USR1 latency median µs | p99 µs | SIGTERM via `sh -c` delivered | reap 5000 zombies ms |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for k in ["lifeguard", "tini", "tini -g", "dumb-init", "catatonit", "(no init)"]:
        g = lambda d, i=None: (d.get(k) if i is None else d[k][i]) if k in d else None
        b = lambda d, i=None: d["tini"] if i is None else d["tini"][i]
        size, static = info.get(k, (None, None))
        rows.append("| " + " | ".join([
            k, cell(size and size / 1000, info["tini"][0] / 1000),
            "—" if static is None else ("static" if static else "dynamic"),
            cell(g(start, 0), b(start, 0)), cell(g(start, 1), b(start, 1)),
            cell(g(rss), b(rss)), cell(g(lat, 0), b(lat, 0)), cell(g(lat, 1), b(lat, 1)),
            "—" if k not in term_ok else f"{term_ok[k][0]}/{n_term} (TERM seen {term_ok[k][1]})",
            cell(g(reap), b(reap), "{:,.1f}")]) + " |")
    table = "\n".join(rows)
    notes = (f"Ratios in parentheses are relative to tini. N: {300 // q} interleaved runs of `/bin/true`; "
             f"RSS median of 5 after 300 ms; {200 // q} USR1 signals per init (inits as plain children, "
             f"interleaved); {n_term} SIGTERM runs per init and {5 if q == 1 else 1} reaping runs as PID 1 "
             "of `unshare --pid --fork --mount-proc`. lifeguard runs with `--drain-delay 0` in the two "
             "PID-1 tests. Delivered = the app printed both `signal TERM` and `exiting` (its 100 ms "
             "handler ran to completion); TERM seen = it printed `signal TERM` at all. Reaping: the app "
             "leaves 5000 zombies; the init is held with SIGSTOP from the moment its app starts until "
             "all are re-parented to it, then timed from SIGCONT until it has no zombie child (end "
             "seen as the /proc/loadavg thread count falling by 5000, confirmed in /proc/<init>). "
             "Timing from the app's `zombies 5000` line instead would measure /proc polling: by then "
             "the init has already reaped 20-60 % of them.")
    head = (f"# lifeguard vs tini, dumb-init, catatonit\n\n{datetime.datetime.now():%Y-%m-%d %H:%M}, "
            f"kernel {platform.release()}, {os.cpu_count()} CPUs, lifeguard `{lg}`\n")
    report = f"{head}\n{table}\n\n{notes}\n"
    print("\n" + report)
    with open(args.out, "w") as f:
        f.write(report)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
