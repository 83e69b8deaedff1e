#!/usr/bin/env python3
"""The request-age test's app (tests/request_age.rs): an HTTP/1.1 server on
127.0.0.1:PORT whose `GET /work?ms=N` answers after N ms, keep-alive unless the client
says `Connection: close`. Each request's own service time, from its request read to its
answer written, goes to LOG as one line: `<asked ms> <served ms>`: the truth lifeguard's
figures, read from the kernel, are checked against.

    timed_app.py PORT LOG
"""
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, log_path = int(sys.argv[1]), sys.argv[2]
log = open(log_path, "a", buffering=1)
log_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        started = time.monotonic()
        asked = int(self.path.partition("ms=")[2] or 0)
        time.sleep(asked / 1000)
        body = b"done\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        served = (time.monotonic() - started) * 1000
        with log_lock:
            log.write(f"{asked} {served:.3f}\n")

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    request_queue_size = 1024
    daemon_threads = True


Server(("127.0.0.1", port), Handler).serve_forever()
