#!/usr/bin/env python3
"""The scale-in benchmark's stand-in for one task's ECS agent: its task-protection
endpoint, and nothing else.

    ecs_agent.py --task ID --port 51678 --state FILE --calls FILE

Started inside the task's network namespace (`nsenter --net=...`) by scalein.py, so it
listens where the task's lifeguard finds it, `ECS_AGENT_URI=http://127.0.0.1:51678/api/ID`,
on that namespace's loopback only. It owns the task's protection as ECS keeps it:

- `GET /api/ID/task-protection/v1/state`: the state now;
- `PUT` the same path, `{"ProtectionEnabled":true,"ExpiresInMinutes":M}`: protected until
  now + M real minutes (ECS's default, 120, when M is absent; 1 to 2880 taken);
  `{"ProtectionEnabled":false}`: cleared.

Answers as the real agent writes them: `{"protection":{"ExpirationDate","ProtectionEnabled",
"TaskArn"}}`, or `{"error":{"Arn","Code","Message"}}` with status 400 for a request it
cannot take. A protection lapses at its expiry without a call, as ECS's does: the state
file holds the expiry, and whoever reads it (the GET here, scalein.py's scheduler) compares
it with the wall clock.

Two files, which scalein.py's scheduler reads from outside the namespace (files are
visible across network namespaces):
- --state: `{"task", "enabled", "expires_at"}` (epoch seconds), replaced atomically
  (written beside and renamed) after every change;
- --calls: one JSON line per call: time, method, body, the status and answer given.
Prints `ready PORT` on stdout once it listens. Standard library only.
"""
import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# ECS's bounds and default for ExpiresInMinutes (UpdateTaskProtection).
DEFAULT_MINUTES, MIN_MINUTES, MAX_MINUTES = 120, 1, 2880


class Task:
    """One task's protection, its two files, and the lock around them (the server
    answers each connection on a thread of its own)."""

    def __init__(self, task, state_path, calls_path):
        self.task = task
        self.arn = f"arn:aws:ecs:us-east-1:111122223333:task/bench/{task}"
        self.state_path, self.calls_path = state_path, calls_path
        self.enabled, self.expires_at = False, None
        self.lock = threading.Lock()
        self.calls = open(calls_path, "a")
        self.write_state()

    def current(self, now):
        """(enabled, expires_at) at `now`: a protection past its expiry has lapsed."""
        if self.enabled and self.expires_at is not None and self.expires_at <= now:
            self.enabled, self.expires_at = False, None
            self.write_state()
        return self.enabled, self.expires_at

    def write_state(self):
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"task": self.task, "enabled": self.enabled, "expires_at": self.expires_at}, f)
        os.replace(tmp, self.state_path)

    def protection(self, now):
        enabled, expires_at = self.current(now)
        date = None
        if enabled:
            date = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(expires_at)) + f".{int(expires_at * 1000) % 1000:03d}Z"
        return {"protection": {"ExpirationDate": date, "ProtectionEnabled": enabled, "TaskArn": self.arn}}

    def error(self, code, message):
        return {"error": {"Arn": self.arn, "Code": code, "Message": message}}

    def handle(self, method, body):
        """The answer to one call (status, document), the state changed and the call
        recorded under the lock."""
        with self.lock:
            now = time.time()
            if method == "GET":
                status, doc = 200, self.protection(now)
            else:
                status, doc = self.put(now, body)
            self.calls.write(json.dumps({
                "t": round(now, 3), "task": self.task, "method": method, "body": body,
                "status": status, "answer": doc,
            }) + "\n")
            self.calls.flush()
            return status, doc

    def put(self, now, body):
        try:
            ask = json.loads(body)
            if not isinstance(ask, dict):
                raise ValueError("not an object")
        except ValueError as e:
            return 400, self.error("InvalidParameterException", f"the body is not a JSON object: {e}")
        enabled = ask.get("ProtectionEnabled")
        if not isinstance(enabled, bool):
            return 400, self.error("InvalidParameterException", "ProtectionEnabled is required")
        if enabled:
            minutes = ask.get("ExpiresInMinutes", DEFAULT_MINUTES)
            if not isinstance(minutes, int) or not MIN_MINUTES <= minutes <= MAX_MINUTES:
                return 400, self.error("InvalidParameterException", f"ExpiresInMinutes must be {MIN_MINUTES} to {MAX_MINUTES}")
            self.enabled, self.expires_at = True, now + 60.0 * minutes
        else:
            self.enabled, self.expires_at = False, None
        self.write_state()
        return 200, self.protection(now)


def handler_for(task):
    path = f"/api/{task.task}/task-protection/v1/state"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, doc):
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path != path:
                return self.answer(404, {"error": {"Code": "NotFound", "Message": f"no such path {self.path}"}})
            self.answer(*task.handle("GET", None))

        def do_PUT(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode(errors="replace") if length else ""
            if self.path != path:
                return self.answer(404, {"error": {"Code": "NotFound", "Message": f"no such path {self.path}"}})
            self.answer(*task.handle("PUT", body))

        def log_message(self, fmt, *args):
            pass  # every call is in --calls already

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--port", type=int, default=51678)
    ap.add_argument("--state", required=True)
    ap.add_argument("--calls", required=True)
    a = ap.parse_args()
    task = Task(a.task, a.state, a.calls)
    # 127.0.0.1 of the namespace it was started in: the task's own loopback.
    server = ThreadingHTTPServer(("127.0.0.1", a.port), handler_for(task))
    server.daemon_threads = True
    print(f"ready {a.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
