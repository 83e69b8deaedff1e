#!/usr/bin/env python3
"""The scale-in benchmark's load (scalein.py runs it): short requests and long jobs
through HAProxy, the same in every run of a seed; one CSV line per request.

    scalein_load.py --port P --t0 EPOCH --decision S --until EPOCH --out requests.csv
                    [--users 12,6] [--think 1.0] [--timeout 10]
                    [--job-every 6,40] [--job-min 60] [--job-max 120] [--seed 7]

Two kinds, each with its rate before and after the scale-in decision (`--decision` s
after `--t0`): the load falls at the decision, which is why a service scales in.
- short: users who send `GET /work`, wait for the answer and think (exponential,
  --think on average), as bench/scaling/loadgen.py's; a request fails with no complete
  `200 ok` within --timeout;
- job: `GET /job/SECONDS`, arriving as a Poisson stream (one every --job-every s on
  average), SECONDS uniform in [--job-min, --job-max]. Arrival times and lengths are
  drawn from --seed up front, so every run of a seed sends the same jobs at the same
  offsets from --t0. A job is cut when it gets no complete `200 ok` (a reset, an early
  close, HAProxy's 502 when its server was killed); it waits SECONDS + 60 s at most.

CSV columns: kind, id, start (epoch s), end (epoch s), status (the HTTP status or the
error), seconds (a job's length asked, else empty). On SIGTERM the run ends: short
requests under way are dropped unrecorded (the measurement ended, they did not fail),
jobs under way are written with status `unfinished`.
"""
import argparse
import asyncio
import random
import signal
import sys
import time


async def one_request(port, path, timeout):
    """(start, end, status) of one request on a connection of its own."""
    t0 = time.time()
    writer = None
    try:
        async def go():
            nonlocal writer
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            return await reader.read()

        data = await asyncio.wait_for(go(), timeout)
        head = data.split(b"\r\n", 1)[0].split()
        status = head[1].decode() if len(head) > 1 else "closed"
        if status == "200" and not data.endswith(b"ok\n"):
            status = "truncated"
    except asyncio.TimeoutError:
        status = "timeout"
    except ConnectionRefusedError:
        status = "refused"
    except ConnectionResetError:
        status = "reset"
    except OSError as e:
        status = f"error-{e.errno}"
    finally:
        if writer is not None:
            writer.close()
    return t0, time.time(), status


def job_plan(seed, decision, until_s, every, lo, hi):
    """[(offset from t0, seconds)] of every job: Poisson arrivals at one per every[0] s
    before the decision and every[1] s after (0: none), lengths uniform in [lo, hi]."""
    rng = random.Random(f"jobs-{seed}")
    plan, t = [], 0.0
    while True:
        mean = every[0] if t < decision else every[1]
        if mean <= 0:
            if t < decision:
                t = decision
                continue
            break
        gap = rng.expovariate(1.0 / mean)
        # A gap drawn at the old rate that crosses the decision is drawn again from it
        # at the new rate (memoryless, so the stream stays Poisson on both sides).
        if t < decision <= t + gap:
            t = decision
            continue
        t += gap
        if t >= until_s:
            break
        plan.append((round(t, 3), round(rng.uniform(lo, hi), 1)))
    return plan


class Run:
    until = 0.0  # the end; SIGTERM moves it to now


async def user(index, a, users_at, out):
    rng = random.Random(f"short-{a.seed}-{index}")
    while time.time() < Run.until:
        if index >= users_at(time.time()):
            # Not one of the users of this moment (after the decision, fewer): idle
            # until the run ends.
            await asyncio.sleep(max(0.0, min(1.0, Run.until - time.time())))
            continue
        await asyncio.sleep(min(rng.expovariate(1.0 / a.think), max(0.0, Run.until - time.time())))
        if index >= users_at(time.time()) or time.time() >= Run.until:
            continue
        start, end, status = await one_request(a.port, "/work", a.timeout)
        out.append(f"short,{index},{start:.4f},{end:.4f},{status},\n")


async def job(index, at, seconds, a, out, pending):
    delay = at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    if time.time() >= Run.until:
        return
    pending[index] = (time.time(), seconds)
    start, end, status = await one_request(a.port, f"/job/{seconds}", seconds + 60.0)
    del pending[index]
    out.append(f"job,{index},{start:.4f},{end:.4f},{status},{seconds}\n")


async def main_async(a):
    users = [int(x) for x in a.users.split(",")]
    every = [float(x) for x in a.job_every.split(",")]
    t_decision = a.t0 + a.decision
    users_at = lambda now: users[0] if now < t_decision else users[1]
    plan = job_plan(a.seed, a.decision, a.until - a.t0, every, a.job_min, a.job_max)
    out, pending = [], {}
    f = open(a.out, "w")
    f.write("kind,id,start,end,status,seconds\n")

    async def flush():
        while True:
            await asyncio.sleep(2)
            lines, out[:] = out[:], []
            f.writelines(lines)
            f.flush()

    flusher = asyncio.create_task(flush())
    Run.until = a.until
    tasks = [asyncio.create_task(user(i, a, users_at, out)) for i in range(max(users))]
    tasks += [asyncio.create_task(job(i, a.t0 + at, s, a, out, pending)) for i, (at, s) in enumerate(plan)]

    def stop():
        Run.until = time.time()
        for t in tasks:
            t.cancel()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop)
    await asyncio.gather(*tasks, return_exceptions=True)
    flusher.cancel()
    now = time.time()
    for index, (start, seconds) in sorted(pending.items()):
        out.append(f"job,{index},{start:.4f},{now:.4f},unfinished,{seconds}\n")
    f.writelines(out)
    f.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--t0", type=float, required=True)
    ap.add_argument("--decision", type=float, required=True, help="s after --t0")
    ap.add_argument("--until", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--users", default="12,6")
    ap.add_argument("--think", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--job-every", default="6,40")
    ap.add_argument("--job-min", type=float, default=60.0)
    ap.add_argument("--job-max", type=float, default=120.0)
    ap.add_argument("--seed", default="7")
    a = ap.parse_args()
    asyncio.run(main_async(a))
    print("scalein_load done", file=sys.stderr)


if __name__ == "__main__":
    main()
