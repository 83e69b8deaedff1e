#!/usr/bin/env python3
"""Benchmark lifeguard side by side with tini, tini-static, dumb-init and catatonit.

Measures start-to-exit time, idle RSS, binary size, signal-forwarding latency, SIGTERM
delivery through a shell entrypoint (as PID 1) and zombie-reaping time (as PID 1).
Needs root (PID namespaces, apt-get). Usage: python3 bench/compare.py [--help]
"""
import argparse
import contextlib
import ctypes
import datetime
import os
import platform
import select
import signal
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_DIR = "/tmp/bench-target"
RELEASE = f"{TARGET_DIR}/x86_64-unknown-linux-musl/release"
BUILD = ["cargo", "build", "--release", "--target", "x86_64-unknown-linux-musl",
         "--bin", "lifeguard", "--bin", "lifeguard-testapp"]
DEBIAN = {"tini": "/usr/bin/tini", "tini-static": "/usr/bin/tini-static",
          "dumb-init": "/usr/bin/dumb-init", "catatonit": "/usr/bin/catatonit"}
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
STARTED = []  # every Popen this script started; main() kills whatever is left at the end


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
        """Wrap the read end of a pipe."""
        self.fd, self.buf, self.eof = pipe.fileno(), b"", False

    def _fill(self, deadline):
        """Append one read to the buffer, or raise TimeoutError at the deadline."""
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


def become_subreaper():
    """Make orphans of what this script starts re-parent to it (reaped at the end), not to PID 1."""
    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        print("warning: could not become a subreaper", file=sys.stderr)


def reap_orphans():
    """Reap every child left (killed orphans re-parented to this script), for up to 5 s."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.01)
        except ChildProcessError:
            return
    print("warning: some children did not exit", file=sys.stderr)


def kill_tree(p):
    """SIGKILL p and all its descendants (never this script), then reap p."""
    todo = [p.pid] if p.poll() is None else []
    while todo:
        pid = todo.pop()
        todo += children(pid)  # before the kill, while they are still its children
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
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
    return {k: (statistics.median(v), pct(v, 90)) for k, v in times.items()}


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
    return {k: statistics.median(v) for k, v in rss.items()}


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
    return {k: (statistics.median(v), pct(v, 99)) for k, v in lat.items()}


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


def cpu_ns(pid):
    """CPU time (ns) pid's threads have run, from /proc/PID/task/*/schedstat, once all sleep."""
    tasks = [f"/proc/{pid}/task/{tid}" for tid in os.listdir(f"/proc/{pid}/task")]
    asleep = lambda: all(open(f"{t}/stat").read().rsplit(")", 1)[1].split()[0] in "STD" for t in tasks)
    wait_for(asleep, f"pid {pid} to sleep")  # the counter is brought up to date when it stops
    return sum(int(open(f"{t}/schedstat").read().split()[0]) for t in tasks)


def time_reaping(init, zombies, timeout=60.0):
    """SIGCONT the stopped init; (wall s, init CPU s) until it has no zombie child left."""
    before, cpu = threads(), cpu_ns(init)
    t0 = time.perf_counter()
    os.kill(init, signal.SIGCONT)
    slow_check = t0 + 0.02
    while (t := time.perf_counter()) - t0 < timeout:
        # Fast: the thread count fell by `zombies`. Slow, every 20 ms, in case others' processes
        # mask that: list the namespace (costly while the zombies are many; counts till done).
        # See bench/README.md for why not /proc/PID/task/*/children or listing up front.
        fast = threads() <= before - zombies
        slow = not fast and t > slow_check
        if (fast or slow) and not namespace_has_zombie(init):
            wall = (time.perf_counter() if slow else t) - t0
            return wall, (cpu_ns(init) - cpu) / 1e9
        if slow:
            slow_check = time.perf_counter() + 0.02
    raise TimeoutError("the zombies were not reaped")


def bench_reap(cmds, testapp, runs, zombies):
    """PID-1 INIT: ms from SIGCONT (init held stopped until all zombies are its) to none left."""
    ms = {k: ([], []) for k in cmds}  # wall, CPU
    for _ in range(runs):
        for k, cmd in cmds.items():
            p = spawn(UNSHARE + cmd([testapp, "--zombies", str(zombies)]), pipe=True)
            try:
                init, out = first_child(p.pid), Lines(p.stdout)
                wait_for(lambda: children(init), "the init to start the app")
                os.kill(init, signal.SIGSTOP)  # the app is still forking; nothing to reap yet
                out.until(f"zombies {zombies}", timeout=60)
                wait_for(lambda: len(children(init)) > zombies, "the zombies to be re-parented")
                for series, seconds in zip(ms[k], time_reaping(init, zombies)):
                    series.append(seconds * 1000)
                out.until("ready")
                os.kill(init, signal.SIGINT)  # tini, like the others, forwards it to the app
                p.wait(timeout=10)
            finally:
                kill_tree(p)
    return {k: (statistics.median(wall), statistics.median(cpu)) for k, (wall, cpu) in ms.items()}


def cell(value, base):
    """A table cell: text as is, a number with its ratio to tini's, or a dash."""
    if value is None or isinstance(value, str):
        return value or "—"
    text = f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    return text + (f" ({value / base:.2f}×)" if isinstance(base, (int, float)) and base else "")


def report(results, info, runs, lifeguard):
    """The markdown report: header, one row per init, notes."""
    start, rss, lat, term, reap = results
    cols = {"size kB": {k: size / 1000 for k, (size, _) in info.items()},
            "linked": {k: "static" if static else "dynamic" for k, (_, static) in info.items()},
            "`/bin/true` median µs": {k: v[0] for k, v in start.items()},
            "p90 µs": {k: v[1] for k, v in start.items()},
            "idle RSS kB": rss,
            "USR1 latency median µs": {k: v[0] for k, v in lat.items()},
            "p99 µs": {k: v[1] for k, v in lat.items()},
            "SIGTERM via `sh -c`: handler finished": {
                k: f"{v[0]}/{runs['term']} (TERM seen {v[1]})" for k, v in term.items()},
            "reap 20000 zombies: wall ms": {k: v[0] for k, v in reap.items()},
            "init CPU ms": {k: v[1] for k, v in reap.items()}}
    rows = ["| init | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    order = ["lifeguard", "lifeguard --listen off", "tini", "tini-static", "tini -g", "dumb-init",
             "catatonit"]
    for k in [k for k in order + ["(no init)"] if any(k in c for c in cols.values())]:
        rows.append(f"| {k} | " + " | ".join(cell(c.get(k), c.get("tini")) for c in cols.values()) + " |")
    table = "\n".join(rows)
    return (f"# lifeguard vs tini, dumb-init, catatonit\n\n{datetime.datetime.now():%Y-%m-%d %H:%M}, "
            f"kernel {platform.release()}, {os.cpu_count()} CPUs, lifeguard `{lifeguard}`\n\n{table}\n\n"
            f"Ratios in parentheses are relative to tini. Runs per init: {runs['true']} of `/bin/true` "
            f"(interleaved), 5 for RSS, {runs['latency']} USR1 signals (plain children), {runs['term']} "
            f"SIGTERM runs and {runs['reap']} reaping runs (PID 1 of `unshare --pid --fork --mount-proc`, "
            "lifeguard with `--drain-delay 0`). Handler finished = the app printed `signal TERM` and, "
            "100 ms later, `exiting`. Reaping: the init is held stopped until all 20000 zombies are "
            "its children, then timed from SIGCONT. Method and caveats: bench/README.md.\n")


def main():
    """Parse options, run every measurement, print and save the markdown report."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lifeguard", default=f"{RELEASE}/lifeguard")
    ap.add_argument("--testapp", default=f"{RELEASE}/lifeguard-testapp")
    ap.add_argument("--quick", action="store_true", help="a tenth of the runs (smoke test)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results.md"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the PID-namespace tests use unshare --pid, and apt-get may be needed")
    prepare(args)
    become_subreaper()
    q = 10 if args.quick else 1
    runs = {"true": 300 // q, "latency": 200 // q, "term": 40 // q, "reap": 5 if q == 1 else 1}
    lg, app = os.path.abspath(args.lifeguard), os.path.abspath(args.testapp)
    plain = {"lifeguard": [lg], "tini": [DEBIAN["tini"]], "tini-static": [DEBIAN["tini-static"]],
             "dumb-init": [DEBIAN["dumb-init"]], "catatonit": [DEBIAN["catatonit"]]}
    if "--listen" in subprocess.run([lg, "--help"], capture_output=True, text=True).stdout:
        plain["lifeguard --listen off"] = [lg, "--listen", "off"]  # without its HTTP endpoint
    cmds = {k: (lambda a, v=v: v + ["--"] + a) for k, v in plain.items()}
    # In the PID-1 tests (SIGTERM, SIGINT) lifeguard runs with --drain-delay 0, so its drain
    # does not dominate; tini -g (signal the whole group) is an extra row for the shell test.
    term = {k: (lambda a, v=v: v + ["--drain-delay", "0", "--"] + a) if k.startswith("lifeguard")
            else cmds[k] for k, v in plain.items()}
    steps = [("start-to-exit of /bin/true", lambda: bench_true(cmds, runs["true"])),
             ("idle RSS", lambda: bench_rss(cmds, 5)),
             ("SIGUSR1 forwarding latency", lambda: bench_latency(cmds, app, runs["latency"])),
             ("shell-entrypoint SIGTERM (PID 1)", lambda: bench_shell_term(
                 {**term, "tini -g": lambda a: [DEBIAN["tini"], "-g", "--"] + a}, app, runs["term"])),
             ("reaping 20000 zombies (PID 1)", lambda: bench_reap(term, app, runs["reap"], 20000))]
    results = []
    try:
        for title, fn in steps:
            print(f"measuring {title} ...", flush=True)
            t0 = time.monotonic()
            results.append(fn())
            print(f"  done in {time.monotonic() - t0:.1f} s: {results[-1]}", flush=True)
    finally:
        for p in STARTED:
            kill_tree(p)
        reap_orphans()
    text = report(results, {k: binary_info(v[0]) for k, v in plain.items()}, runs, lg)
    print("\n" + text)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
