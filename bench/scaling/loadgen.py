#!/usr/bin/env python3
"""The scaling benchmark's load: users who send a request, wait for the answer, think,
and send the next, through HAProxy; one CSV line per request.

    loadgen.py --target NAME=PORT [--target ...] --schedule '[[epoch, users], ...]'
               --until EPOCH --out requests.csv [--think 1.0] [--timeout 10] [--seed 21]

Every target gets the same schedule and the same random think times (one seeded stream
per user and target), so two fleets behind two ports see the same load. Users, not a
fixed rate: a saturated fleet slows its users down instead of growing a queue without
bound, as real clients do, so the load stays the same whether or not the fleet scales,
and a run without scaling still ends. Think times are exponential (mean --think), so
arrivals are close to random, not in lock-step.

A request is failed when it gets no complete answer with status 200 within --timeout
(connection refused or reset, HAProxy's 503 with no server up, a 502 from a server
that died, or the timeout itself). CSV columns: target, start (epoch s), latency (s),
status (the HTTP status, or the error).
"""
import argparse
import asyncio
import json
import random
import signal
import sys
import time


class Target:
    def __init__(self, name, port):
        self.name, self.port = name, port
        self.active = 0  # users allowed to send now
        self.changed = asyncio.Event()


async def one_request(port, timeout):
    t0 = time.time()
    writer = None
    try:
        async def go():
            nonlocal writer
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /work HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            await writer.drain()
            data = await reader.read()
            return data

        data = await asyncio.wait_for(go(), timeout)
        head = data.split(b"\r\n", 1)[0].split()
        status = head[1].decode() if len(head) > 1 else "empty"
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
    return t0, time.time() - t0, status


class Run:
    until = 0.0  # the end; SIGTERM moves it to now


async def user(target, index, think, timeout, seed, out):
    rng = random.Random(f"{seed}-{index}")
    while time.time() < Run.until:
        if index >= target.active:
            # Not one of the users of this moment: wait for the schedule to change.
            target.changed.clear()
            try:
                await asyncio.wait_for(target.changed.wait(), max(0.01, Run.until - time.time()))
            except asyncio.TimeoutError:
                pass
            continue
        await asyncio.sleep(min(rng.expovariate(1.0 / think), max(0.0, Run.until - time.time())))
        if index >= target.active or time.time() >= Run.until:
            continue
        t0, latency, status = await one_request(target.port, timeout)
        out.append(f"{target.name},{t0:.4f},{latency:.5f},{status}\n")


async def schedule(targets, steps):
    for at, users in steps:
        delay = at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        for t in targets:
            t.active = users
            t.changed.set()


async def main_async(a):
    targets = []
    for spec in a.target:
        name, port = spec.split("=")
        targets.append(Target(name, int(port)))
    steps = sorted(json.loads(a.schedule))
    most = max(u for _, u in steps)
    out = []
    f = open(a.out, "w")
    f.write("target,start,latency,status\n")

    async def flush():
        while True:
            await asyncio.sleep(2)
            lines, out[:] = out[:], []
            f.writelines(lines)
            f.flush()

    flusher = asyncio.create_task(flush())
    Run.until = a.until
    sched = asyncio.create_task(schedule(targets, steps))
    users = [asyncio.create_task(user(t, i, a.think, a.timeout, a.seed, out)) for t in targets for i in range(most)]

    def stop():
        # The run is over: no new request; the ones under way are dropped unrecorded
        # (they did not fail, the measurement ended).
        Run.until = time.time()
        for t in users:
            t.cancel()
        for t in targets:
            t.changed.set()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop)
    await asyncio.gather(*users, return_exceptions=True)
    sched.cancel()
    flusher.cancel()
    f.writelines(out)
    f.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", action="append", required=True)
    ap.add_argument("--schedule", required=True)
    ap.add_argument("--until", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--think", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--seed", default="21")
    a = ap.parse_args()
    asyncio.run(main_async(a))
    print("loadgen done", file=sys.stderr)


if __name__ == "__main__":
    main()
