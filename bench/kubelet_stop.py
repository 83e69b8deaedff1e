#!/usr/bin/env python3
"""Kubernetes' stop, two plans: the kubelet's `preStop` sleep with `--drain-delay 0`,
against lifeguard's own `--drain-delay 5s` and no hook. No kubelet runs here, so this
plays its part as Kubernetes documents it ("Termination of Pods", the Pod Lifecycle
page, and the kubelet's killContainer): at the delete the kubelet runs the container's
`preStop` hook (the `sleep` action runs in the kubelet, outside the container's cgroup);
when it ends it sends the stop signal to the container's PID 1 and SIGKILLs the
container at the end of the grace period. A hook still running when the grace period
ends is cut, and the kubelet grants "a small, one-off grace period extension of 2
seconds": the stop signal then, the SIGKILL 2 s later. Without a hook, the stop signal
at the delete and the SIGKILL at the grace.

Each round: a cgroup with a 0.25-CPU quota holds lifeguard as PID 1 of a PID namespace
and the app (bench/spin.c: THREADS spinning threads, an HTTP server that answers
`GET /slow/MS` after MS ms and dies at once on SIGTERM). `GET /slow/1000` is sent 0.5 s
before the delete, and requests keep coming for the first second after it (the
endpoints' update in flight: a client that has not heard yet). Recorded: whether the
app got its stop signal before the SIGKILL (it dies on it, so: gone before the kill),
when, counted from the delete; how many requests were lost. (An app that ends before the
kubelet's SIGKILL got its stop signal from lifeguard, or was SIGKILLed at lifeguard's
own --grace deadline: the log says which; at a 3 s grace it can only be the first.)

    sudo bench/kubelet-stop.sh [--rounds 5] [--threads 300]
"""
import argparse
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from health_at_peak import QUOTA_US, root_and_spin, PERIOD_US, cgroup, end_round, free_port, start_in_task, version  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESTOP = 5.0  # the example's preStop sleep
EXTENSION = 2.0  # the kubelet's one-off extension for a hook cut at the grace
ENDED = "ended before the kubelet's SIGKILL"

PLANS = {
    "preStop sleep 5 + --drain-delay 0": ["--drain-delay", "0"],
    "--drain-delay 5s, no hook": ["--drain-delay", "5s"],
}


def get(port, path, out, key):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=40) as s:
            s.settimeout(40)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            out[key] = s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        out[key] = False


def kubelet(plan, grace):
    """(when the stop signal goes, when the SIGKILL goes), from the delete."""
    if not plan.startswith("preStop"):
        return 0.0, grace
    if PRESTOP < grace:
        return PRESTOP, grace
    return grace, grace + EXTENSION


def one_round(lifeguard, spin, threads, plan, grace):
    path = cgroup(f"lifeguard-kubelet-{os.getpid()}")
    app_port, ready = free_port(), free_port()
    argv = [lifeguard, "--inflight-port", str(app_port), *PLANS[plan], "--drain-quiet", "1s",
            "--drain-max", "15s", "--grace", "20s", "--listen", "off", "--ready-port", str(ready),
            "--", spin, str(threads), "serve", str(app_port)]
    proc, pid1 = start_in_task(path, argv, ready)
    try:
        app = int(open(f"/proc/{pid1}/task/{pid1}/children").read().split()[0])
        answers, clients = {}, []

        def send(key, path_):
            t = threading.Thread(target=get, args=(app_port, path_, answers, key))
            t.start()
            clients.append(t)

        send("slow", "/slow/1000")
        time.sleep(0.5)
        t0 = time.monotonic()
        term_at, kill_at = kubelet(plan, grace)
        termed = killed = False
        app_gone = None
        next_request = 0.0
        while True:
            now = time.monotonic() - t0
            if now < 1.0 and now >= next_request:
                send(f"late{next_request:.1f}", "/")
                next_request += 0.1
            if not termed and now >= term_at:
                os.kill(pid1, 15)
                termed = True
            if app_gone is None and not os.path.exists(f"/proc/{app}"):
                app_gone = now
            if now >= kill_at:
                if proc.poll() is None:
                    os.kill(pid1, 9)
                    killed = True
                break
            if proc.poll() is not None and app_gone is not None:
                break
            time.sleep(0.005)
        for t in clients:
            t.join(60)
        lost = sum(1 for ok in answers.values() if not ok)
        got_term = app_gone is not None and not (killed and app_gone >= kill_at - 0.01)
        return got_term, app_gone, lost, len(answers), killed
    finally:
        end_round(proc, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lifeguard", default=os.path.join(ROOT, "target/x86_64-unknown-linux-musl/release/lifeguard"))
    args = ap.parse_args()
    spin = root_and_spin("kubelet_stop.py")
    print(f"# {version(args.lifeguard)}; quota {QUOTA_US / PERIOD_US:.2f} CPU; app dies at once on "
          f"SIGTERM; GET /slow/1000 in flight at the delete, a request every 100 ms for 1 s after it; "
          f"--drain-quiet 1s --drain-max 15s --grace 20s", flush=True)
    rows = []
    for grace, threads in ((3, 0), (3, args.threads), (30, args.threads)):
        for plan in PLANS:
            results = []
            for i in range(args.rounds):
                r = one_round(args.lifeguard, spin, threads, plan, grace)
                results.append(r)
                got, gone, lost, sent, _ = r
                print(f"grace {grace} s, {threads} threads, {plan}, round {i + 1}: app "
                      f"{ENDED if got else 'was SIGKILLed by the kubelet'}"
                      f"{f', gone at {gone:.2f} s' if gone is not None else ''}; {lost} of {sent} "
                      f"requests lost", flush=True)
            got = [r for r in results if r[0]]
            gone = [r[1] for r in got]
            rows.append(f"| {grace} s | {threads} | {plan} | {len(got)} of {len(results)} | "
                        f"{f'{statistics.median(gone):.2f} s ({max(gone):.2f} s)' if gone else '—'} | "
                        f"{sum(r[2] for r in results)} of {sum(r[3] for r in results)} | "
                        f"{sum(1 for r in results if r[4])} |")
    print("\n| grace | spinning threads | plan | app ended before the kubelet's SIGKILL | app gone after the delete, "
          "median (max) | requests lost | rounds SIGKILLed |\n|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
