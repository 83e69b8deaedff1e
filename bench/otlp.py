#!/usr/bin/env python3
"""OTLP beside EMF, measured: the bytes of one export and lifeguard's CPU per export, at
a 1 s and a 10 s interval, in the same run. EMF records go to lifeguard's stdout (read
here, as the log driver would); OTLP exports go to the tests' collector stand-in
(tests/support/otlp_collector.py, on 127.0.0.1), which decodes each and says its size.
"OTLP, CloudWatch" is the same stand-in playing CloudWatch's own endpoint by its name
(resolved to 127.0.0.1 in lifeguard's own mount namespace), over TLS, checking each
export's SigV4 signature: what signing and a TLS handshake per export add. Needs root
(unshare --mount).

Each setting runs for --seconds; the CPU per export is the publisher thread's own
(`cloudwatch` in the helper process, which reads the snapshot, encodes, sends and
judges the answer; from its schedstat) divided by the exports, so the sampler's noise
stays out of it. Run scripts/test.sh once first (or install
tests/support/requirements.txt into target/test-venv) for the collector's packages.

    python3 bench/otlp.py [--seconds 60]

Writes bench/otlp-results.md and prints it.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from metrics import free_port, helper_pids, lifeguard_binary  # noqa: E402

VENV_PYTHON = os.path.join(ROOT, "target", "test-venv", "bin", "python3")


CLOUDWATCH = "monitoring.us-east-1.amazonaws.com"
KEY_ID, SECRET = "AKIALIFEGUARDBENCH", "bench-secret"


def start_collector(*args):
    python = VENV_PYTHON if os.path.exists(VENV_PYTHON) else sys.executable
    collector = subprocess.Popen(
        [python, os.path.join(ROOT, "tests", "support", "otlp_collector.py"), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = collector.stdout.readline()
    if not line.startswith("ready "):
        sys.exit("the OTLP collector stand-in did not start (pip install -r tests/support/requirements.txt)")
    sizes = []

    def read():
        for line in collector.stdout:
            if line.startswith("export "):
                export = json.loads(line[len("export "):])
                # As CloudWatch: only what it would take (a signature botocore finds right).
                if export.get("sigv4", "verified") == "verified":
                    sizes.append(export["bytes"])
    threading.Thread(target=read, daemon=True).start()
    return collector, int(line.split()[1]), sizes


def publisher_cpu_ns(pid):
    """The CPU of the helper's publisher thread (named `cloudwatch` whatever the sink)."""
    total = 0
    for helper in helper_pids(pid):
        for tid in os.listdir(f"/proc/{helper}/task"):
            try:
                with open(f"/proc/{helper}/task/{tid}/comm") as f:
                    if f.read().strip() != "cloudwatch":
                        continue
                with open(f"/proc/{helper}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except OSError:
                pass
    return total


def run(lifeguard, env, seconds, stdout_sizes=None, wrapper=()):
    """lifeguard (through `wrapper`, which execs it) over an idle app for `seconds`;
    its publisher thread's CPU in ns."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("LIFEGUARD_", "TINI_", "DUMB_INIT_", "AWS_", "METRICS_", "OTEL_"))}
    app_port = free_port()
    p = subprocess.Popen(
        [*wrapper, lifeguard, "--listen", f"127.0.0.1:{free_port()}", "--inflight-port", str(app_port),
         "--drain-delay", "0", "--", "sleep", "100000"],
        env={**base, **env}, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True)

    def read():
        for line in p.stdout:
            if stdout_sizes is not None and line.startswith(b"{"):
                stdout_sizes.append(len(line))
    threading.Thread(target=read, daemon=True).start()
    time.sleep(seconds)
    used = publisher_cpu_ns(p.pid)
    os.killpg(p.pid, 9)
    p.wait()
    return used


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "otlp-results.md"))
    args = ap.parse_args()
    lifeguard = lifeguard_binary()
    collector, port, otlp_sizes = start_collector()
    folder = tempfile.mkdtemp()
    ca, hosts = os.path.join(folder, "ca.pem"), os.path.join(folder, "hosts")
    with open(hosts, "w") as f:
        f.write(f"127.0.0.1 localhost\n127.0.0.1 {CLOUDWATCH}\n")
    cloudwatch, cw_port, cw_sizes = start_collector(
        "--tls", CLOUDWATCH, "--ca-out", ca, "--sigv4", "us-east-1", "--key", f"{KEY_ID}={SECRET}")
    as_cloudwatch = ("unshare", "--mount", "sh", "-c",
                     f"mount --bind {hosts} /etc/hosts && exec \"$@\"", "sh")
    rows = []
    try:
        for interval in (1, 10):
            emf_sizes = []
            emf = run(lifeguard, {"METRICS_SINK": "emf", "METRICS_NAMESPACE": "Bench/otlp",
                                  "METRICS_INTERVAL": str(interval)}, args.seconds, emf_sizes)
            before = len(otlp_sizes)
            otlp = run(lifeguard, {"METRICS_SINK": "otlp", "METRICS_INTERVAL": str(interval),
                                   "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"},
                       args.seconds)
            sent = otlp_sizes[before:]
            before = len(cw_sizes)
            signed = run(lifeguard, {
                "METRICS_SINK": "otlp", "METRICS_INTERVAL": str(interval),
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"https://{CLOUDWATCH}:{cw_port}/v1/metrics",
                "SSL_CERT_FILE": ca, "AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_EC2_METADATA_DISABLED": "true"}, args.seconds, wrapper=as_cloudwatch)
            signed_sent = cw_sizes[before:]
            for name, used, sizes in (("EMF", emf, emf_sizes), ("OTLP", otlp, sent),
                                      ("OTLP, CloudWatch (TLS, SigV4)", signed, signed_sent)):
                per = used / len(sizes) / 1e6 if sizes else float("nan")
                rows.append(f"| {name} | {interval} s | {len(sizes)} | {median(sizes):,} | "
                            f"{used / 1e6:.1f} | {per:.3f} |")
    finally:
        os.killpg(collector.pid, 9)
        os.killpg(cloudwatch.pid, 9)
    size = os.path.getsize(lifeguard)
    text = "\n".join([
        "# OTLP beside EMF: bytes and CPU per export",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')}, kernel {platform.release()}, {os.cpu_count()} CPUs; "
        f"binary {size:,} bytes; {args.seconds} s per setting, an idle app, every family on",
        "",
        "| sink | interval | exports | bytes per export (median) | publisher CPU ms | CPU ms per export |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "EMF carries the CloudWatch scaling figures (in flight, CPU, memory); OTLP carries "
        "every family of /metrics, each with its description, and its resource. The CPU is "
        "the publisher thread's alone (the sampler, which every sink shares, is left out), "
        "including its idle turns between exports. To CloudWatch each export also makes a "
        "TLS connection (one per export, as every lifeguard client call) and signs the "
        "request; the stand-in answers only exports whose signature botocore finds right.",
        "",
    ])
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
