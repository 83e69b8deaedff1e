#!/usr/bin/env python3
"""A CloudWatch endpoint for lifeguard's tests: Smithy RPC-v2 CBOR in front of moto.

The AWS Rust SDK (aws-sdk-cloudwatch >= 1.100) speaks Smithy RPC v2 CBOR to CloudWatch:
    POST /service/GraniteServiceVersion20100801/operation/<Op>
    smithy-protocol: rpc-v2-cbor, body CBOR
moto has no CBOR support (moto #9195) but speaks CloudWatch's awsJson1.0 protocol (the one
boto3 >= 1.40 uses), so this front decodes the CBOR, forwards the request to a moto server
as JSON (X-Amz-Target: GraniteServiceVersion20100801.<Op>), and encodes moto's answer back
as RPC-v2 CBOR (errors as {"__type", "message"} with the HTTP status and the
x-amzn-query-error header of awsQueryCompatible services).

One command starts everything:
    python3 tests/support/cloudwatch_front.py --port 0 [--moto-port 0]
prints `moto M` then `ready P` on stdout once both listen on 127.0.0.1 (port 0: any free one).

Control and read-back, on the front's own port:
    POST /_fault   body: none | 500 | throttle | hang | close | reset | refuse | delay
                   with optional `times=N` (only the next N API requests; default all),
                   `secs=S` (refuse: listener closed for S seconds, default 5),
                   `ms=M` (delay: answer normally after M ms; hang: give up after M ms,
                   default 600000), e.g. `throttle times=1`, `refuse secs=3`, `delay ms=800`
    GET  /_fault   the fault in force, as JSON
    GET  /_data[?namespace=NS]   every datum of every PutMetricData that moto accepted, as
                   sent (StorageResolution included, which moto's backend drops; Values
                   and Counts as "values" and "counts"), plus moto's own backend records
                   under "moto_backend": moto 5.x stores a datum sent as Values/Counts as
                   one raw point per occurrence (value[i] appended counts[i] times, see
                   CloudWatchBackend.put_metric_data), and a StatisticSet as one
                   aggregated record
    GET  /_percentile?namespace=NS&name=METRIC&p=50
                   pNN of METRIC per 1-second timestamp, computed here from moto's stored
                   points, because moto computes no percentiles (it ignores
                   ExtendedStatistics). It follows CloudWatch's documented rule: raw
                   values count; a statistic set counts only when its SampleCount is 1 or
                   its Minimum equals its Maximum (then every sample in it is known), and
                   any other statistic set leaves the second with no pNN (value null).
                   Nearest rank: the smallest value with at least p % of the points at
                   or below it. Each entry: timestamp (whole epoch second), raw (points
                   from raw values), sets (statistic sets), value
    GET  /_log     every API request received: time, operation, fault applied, status,
                   access_key and session_token that signed it, bytes (the request body
                   as the client encoded it, after any gzip)
    POST /_reset   forget the recorded data and the log, clear moto's backend
    GET  /_creds   ECS-style container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI)
    GET  /_info    {"port", "moto_port"}
"""
import argparse
import base64
import datetime as dt
import gzip
import http.client
import http.server
import json
import socket
import struct
import sys
import threading
import time
import urllib.parse

import cbor2

SERVICE_TARGET = "GraniteServiceVersion20100801"
API_PREFIX = f"/service/{SERVICE_TARGET}/operation/"
ACCOUNT = "123456789012"

_service_model = None


def service_model():
    """botocore's CloudWatch model (botocore comes with moto), for output timestamps."""
    global _service_model
    if _service_model is None:
        import botocore.session

        _service_model = botocore.session.get_session().get_service_model("cloudwatch")
    return _service_model


def to_json_value(v):
    """CBOR-decoded value -> awsJson value (timestamps as epoch seconds, blobs base64)."""
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return v.timestamp()
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode()
    if isinstance(v, dict):
        return {k: to_json_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [to_json_value(x) for x in v]
    if isinstance(v, cbor2.CBORTag):
        return to_json_value(v.value)
    return v


def from_json_value(v, shape):
    """awsJson value -> CBOR value following the botocore output shape (timestamps as
    datetimes, encoded as tag 1 epoch by cbor2 with datetime_as_timestamp)."""
    if shape is None or v is None:
        return v
    t = shape.type_name
    if t == "structure" and isinstance(v, dict):
        return {k: from_json_value(x, shape.members.get(k)) for k, x in v.items()}
    if t == "list" and isinstance(v, list):
        return [from_json_value(x, shape.member) for x in v]
    if t == "map" and isinstance(v, dict):
        return {k: from_json_value(x, shape.value) for k, x in v.items()}
    if t == "timestamp":
        if isinstance(v, (int, float)):
            return dt.datetime.fromtimestamp(v, tz=dt.timezone.utc)
        if isinstance(v, str):
            return dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    if t == "blob" and isinstance(v, str):
        return base64.b64decode(v)
    if t in ("double", "float") and isinstance(v, int):
        return float(v)
    return v


def cbor_bytes(obj):
    return cbor2.dumps(obj, datetime_as_timestamp=True, timezone=dt.timezone.utc)


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.fault = {"mode": "none", "times": None, "secs": 5.0, "ms": None}
        self.fault_changed = threading.Event()
        self.data = []  # datums of accepted PutMetricData calls
        self.log = []
        self.port = None
        self.moto_port = None
        self.server = None
        self.refusing = False

    def take_fault(self):
        """The fault to apply to this API request (counts down `times`)."""
        with self.lock:
            f = dict(self.fault)
            if f["mode"] == "none":
                return f
            if f["times"] is not None:
                self.fault["times"] -= 1
                if self.fault["times"] <= 0:
                    self.fault = {"mode": "none", "times": None, "secs": 5.0, "ms": None}
            return f


STATE = State()


def parse_fault(body):
    words = body.split()
    if not words:
        raise ValueError("empty fault")
    mode = words[0].lower()
    if mode not in ("none", "500", "throttle", "hang", "close", "reset", "refuse", "delay"):
        raise ValueError(f"unknown fault {mode!r}")
    f = {"mode": mode, "times": None, "secs": 5.0, "ms": None}
    for w in words[1:]:
        k, _, v = w.partition("=")
        if k == "times":
            f["times"] = int(v)
        elif k == "secs":
            f["secs"] = float(v)
        elif k == "ms":
            f["ms"] = float(v)
        else:
            raise ValueError(f"unknown fault option {w!r}")
    return f


def normalize_datum(namespace, d, received_at):
    ts = d.get("Timestamp")
    if isinstance(ts, dt.datetime):
        ts_epoch = ts.timestamp()
    elif isinstance(ts, (int, float)):
        ts_epoch = float(ts)
    else:
        ts_epoch = None
    out = {
        "namespace": namespace,
        "name": d.get("MetricName"),
        "dimensions": {x.get("Name"): x.get("Value") for x in d.get("Dimensions") or []},
        "unit": d.get("Unit"),
        "storage_resolution": d.get("StorageResolution"),
        "value": d.get("Value"),
        "statistic_values": d.get("StatisticValues"),
        "timestamp": ts_epoch,
        "timestamp_iso": (
            dt.datetime.fromtimestamp(ts_epoch, tz=dt.timezone.utc).isoformat(timespec="milliseconds")
            if ts_epoch is not None
            else None
        ),
        "received_at": received_at,
    }
    if d.get("Values") is not None:
        out["values"] = d.get("Values")
        out["counts"] = d.get("Counts")
    return out


def moto_backend_records(namespace):
    """moto's own view (in-process backend): what GetMetricStatistics works from."""
    try:
        from moto.cloudwatch.models import MetricAggregatedDatum, cloudwatch_backends
    except Exception as e:  # pragma: no cover
        return {"error": str(e)}
    out = []
    for account, regions in cloudwatch_backends.items():
        for region, backend in regions.items():
            for m in backend.metric_data:
                if namespace and m.namespace != namespace:
                    continue
                r = {
                    "account": account,
                    "region": region,
                    "namespace": m.namespace,
                    "name": m.name,
                    "dimensions": {d.name: d.value for d in m.dimensions},
                    "unit": m.unit,
                    "timestamp": m.timestamp.timestamp() if m.timestamp else None,
                }
                if isinstance(m, MetricAggregatedDatum):
                    r["statistic_values"] = {
                        "SampleCount": m.sample_count,
                        "Sum": m.sum,
                        "Minimum": m.min,
                        "Maximum": m.max,
                    }
                else:
                    r["value"] = m.value
                out.append(r)
    return out


def percentiles(namespace, name, p):
    """pNN per 1-second timestamp from moto's stored points (see the module note)."""
    try:
        from moto.cloudwatch.models import MetricAggregatedDatum, cloudwatch_backends
    except Exception as e:  # pragma: no cover
        return {"error": str(e)}
    seconds = {}
    for _, regions in cloudwatch_backends.items():
        for _, backend in regions.items():
            for m in backend.metric_data:
                if m.namespace != namespace or m.name != name:
                    continue
                second = int(m.timestamp.timestamp())
                entry = seconds.setdefault(second, {"values": [], "raw": 0, "sets": 0, "unknown": False})
                if isinstance(m, MetricAggregatedDatum):
                    entry["sets"] += 1
                    if m.sample_count == 1 or m.min == m.max:
                        entry["values"].extend([m.min] * int(m.sample_count))
                    else:
                        entry["unknown"] = True
                else:
                    entry["raw"] += 1
                    entry["values"].append(m.value)
    out = []
    for second in sorted(seconds):
        e = seconds[second]
        values = sorted(e["values"])
        value = None
        if values and not e["unknown"]:
            rank = max(1, -(-len(values) * p // 100))  # ceil(n * p / 100)
            value = values[int(rank) - 1]
        out.append({"timestamp": second, "raw": e["raw"], "sets": e["sets"], "value": value})
    return out


def over_the_value_limit(params):
    """CloudWatch refuses a datum with more than 150 Values; moto does not check it."""
    for i, d in enumerate(params.get("MetricData") or [], start=1):
        if len(d.get("Values") or []) > 150:
            return f"MetricData.member.{i}.Values has {len(d['Values'])} values; at most 150 are allowed"
    return None


def error_body(type_id, message):
    return cbor_bytes({"__type": type_id, "message": message})


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cloudwatch-front"

    def setup(self):
        super().setup()
        # Headers and body go out in two writes: without TCP_NODELAY the client's delayed
        # ACK adds ~40 ms to every call on a kept-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("front: " + fmt % args + "\n")

    def reply(self, status, body=b"", headers=(), content_type="application/cbor"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def reply_json(self, obj, status=200):
        self.reply(status, (json.dumps(obj, indent=1) + "\n").encode(), content_type="application/json")

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            body = gzip.decompress(body)
        return body

    # ---- control ----
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        if url.path == "/_fault":
            with STATE.lock:
                return self.reply_json(STATE.fault)
        if url.path == "/_data":
            ns = (q.get("namespace") or [None])[0]
            with STATE.lock:
                data = [d for d in STATE.data if ns is None or d["namespace"] == ns]
            return self.reply_json({"namespace": ns, "data": data, "moto_backend": moto_backend_records(ns)})
        if url.path == "/_percentile":
            ns = (q.get("namespace") or [""])[0]
            name = (q.get("name") or [""])[0]
            p = float((q.get("p") or ["50"])[0])
            return self.reply_json(percentiles(ns, name, p))
        if url.path == "/_log":
            with STATE.lock:
                return self.reply_json(list(STATE.log))
        if url.path == "/_info":
            return self.reply_json({"port": STATE.port, "moto_port": STATE.moto_port})
        if url.path == "/_creds":
            exp = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
            return self.reply_json(
                {
                    "AccessKeyId": "ASIAFRONTTEST",
                    "SecretAccessKey": "front-secret",
                    "Token": "front-session-token",
                    "Expiration": exp.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/front",
                }
            )
        return self.reply_json({"error": "not found"}, 404)

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith(API_PREFIX):
            return self.api(url.path[len(API_PREFIX):])
        body = self.read_body()
        if url.path == "/_fault":
            try:
                f = parse_fault(body.decode())
            except ValueError as e:
                return self.reply_json({"error": str(e)}, 400)
            with STATE.lock:
                STATE.fault = f
            STATE.fault_changed.set()
            STATE.fault_changed = threading.Event()
            self.reply_json(f)
            if f["mode"] == "refuse" and f["times"] is None:
                threading.Thread(target=refuse_for, args=(f["secs"],), daemon=True).start()
            return None
        if url.path == "/_reset":
            with STATE.lock:
                STATE.data.clear()
                STATE.log.clear()
            try:
                from moto.cloudwatch.models import cloudwatch_backends

                cloudwatch_backends.reset()
            except Exception:
                pass
            return self.reply_json({"reset": True})
        return self.reply_json({"error": "not found"}, 404)

    # ---- the CloudWatch API ----
    def api(self, op):
        t0 = time.time()
        auth = self.headers.get("Authorization") or ""
        key = auth.partition("Credential=")[2].partition("/")[0] or None
        entry = {
            "time": t0,
            "operation": op,
            "fault": None,
            "status": None,
            "access_key": key,  # which credentials signed it (the chain's choice)
            "session_token": self.headers.get("X-Amz-Security-Token"),
        }
        with STATE.lock:
            STATE.log.append(entry)
        fault = STATE.take_fault()
        mode = fault["mode"]
        entry["fault"] = mode
        if mode in ("close", "reset", "refuse"):
            # refuse with times=N: per request, as close (the listener stays up).
            if mode == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            entry["status"] = "closed"
            try:
                self.connection.shutdown(socket.SHUT_RDWR) if mode != "reset" else None
            except OSError:
                pass
            return None
        body = self.read_body()
        entry["bytes"] = len(body)
        if mode == "hang":
            # Accept the request, never answer (until the fault changes or ms elapse).
            ev = STATE.fault_changed
            ev.wait((fault["ms"] or 600000) / 1000)
            self.close_connection = True
            entry["status"] = "hung"
            return None
        if mode == "delay":
            time.sleep((fault["ms"] or 0) / 1000)
        if mode == "500":
            entry["status"] = 500
            return self.reply(
                500,
                error_body("com.amazon.coral.service#InternalFailure", "injected internal failure"),
                [("smithy-protocol", "rpc-v2-cbor"), ("x-amzn-query-error", "InternalFailure;Receiver")],
            )
        if mode == "throttle":
            entry["status"] = 400
            return self.reply(
                400,
                error_body("com.amazon.coral.availability#ThrottlingException", "Rate exceeded"),
                [("smithy-protocol", "rpc-v2-cbor"), ("x-amzn-query-error", "Throttling;Sender")],
            )
        if (self.headers.get("smithy-protocol") or "") != "rpc-v2-cbor":
            entry["status"] = 400
            return self.reply(
                400,
                error_body("com.amazon.coral.service#UnknownOperationException", "smithy-protocol header missing"),
                [("smithy-protocol", "rpc-v2-cbor")],
            )
        try:
            params = cbor2.loads(body) if body else {}
        except Exception as e:
            entry["status"] = 400
            return self.reply(
                400,
                error_body("com.amazon.coral.service#SerializationException", f"bad CBOR: {e}"),
                [("smithy-protocol", "rpc-v2-cbor")],
            )
        too_many = over_the_value_limit(params) if op == "PutMetricData" else None
        if too_many:
            entry["status"] = 400
            return self.reply(
                400,
                error_body("com.amazonaws.cloudwatch#InvalidParameterValue", too_many),
                [("smithy-protocol", "rpc-v2-cbor"), ("x-amzn-query-error", "InvalidParameterValue;Sender")],
            )
        status, headers, resp = self.forward(op, to_json_value(params))
        entry["status"] = status
        if status == 200:
            if op == "PutMetricData":
                now = time.time()
                with STATE.lock:
                    for d in params.get("MetricData") or []:
                        STATE.data.append(normalize_datum(params.get("Namespace"), d, now))
            try:
                out_shape = service_model().operation_model(op).output_shape
            except Exception:
                out_shape = None
            obj = json.loads(resp) if resp.strip() else {}
            return self.reply(200, cbor_bytes(from_json_value(obj, out_shape)), [("smithy-protocol", "rpc-v2-cbor")])
        # An error from moto: awsJson {"__type", "message"} -> RPC v2 CBOR error.
        try:
            err = json.loads(resp)
        except Exception:
            err = {"__type": "InternalFailure", "message": resp.decode(errors="replace")}
        type_id = err.get("__type") or "InternalFailure"
        code = type_id.split("#")[-1]
        message = err.get("message") or err.get("Message") or ""
        out_headers = [("smithy-protocol", "rpc-v2-cbor")]
        qe = headers.get("x-amzn-query-error")
        if not qe:
            qe = f"{code};{'Receiver' if status >= 500 else 'Sender'}"
        out_headers.append(("x-amzn-query-error", qe))
        if "#" not in type_id:
            type_id = f"com.amazonaws.cloudwatch#{type_id}"
        return self.reply(status, error_body(type_id, message), out_headers)

    def forward(self, op, params):
        conn = http.client.HTTPConnection("127.0.0.1", STATE.moto_port, timeout=30)
        headers = {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": f"{SERVICE_TARGET}.{op}",
            # moto routes on the SigV4 credential scope (service `monitoring`, region).
            "Authorization": self.headers.get("Authorization")
            or "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/monitoring/aws4_request, "
            "SignedHeaders=host, Signature=0",
        }
        if self.headers.get("X-Amz-Date"):
            headers["X-Amz-Date"] = self.headers["X-Amz-Date"]
        try:
            conn.request("POST", "/", body=json.dumps(params), headers=headers)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    verbose = False


def serve(port):
    srv = Server(("127.0.0.1", port), Handler)
    STATE.server = srv
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return srv


def refuse_for(secs):
    """Close the listening socket for `secs` (connections are refused), then listen again."""
    srv = STATE.server
    STATE.refusing = True
    srv.shutdown()
    srv.server_close()
    deadline = time.time() + secs
    while time.time() < deadline:
        time.sleep(0.05)
        with STATE.lock:
            if STATE.fault["mode"] != "refuse":
                break
    with STATE.lock:
        if STATE.fault["mode"] == "refuse":
            STATE.fault = {"mode": "none", "times": None, "secs": 5.0, "ms": None}
    for _ in range(100):
        try:
            serve(STATE.port)
            break
        except OSError:
            time.sleep(0.05)
    STATE.refusing = False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0, help="front port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--moto-port", type=int, default=0, help="moto server port on 127.0.0.1 (0: any free port)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()

    import logging

    if not a.verbose:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.server import ThreadedMotoServer

    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=a.moto_port, verbose=False)
    moto.start()
    STATE.moto_port = moto.get_host_and_port()[1]
    service_model()  # load botocore's model before the first request
    # moto loads its CloudWatch code on the first request (~0.5 s): do it now, so that the
    # first call of a test does not pay it against the client's timeouts.
    Handler.forward(
        type("Warm", (), {"headers": {}})(), "ListMetrics", {"Namespace": "cloudwatch-front/warm-up"}
    )
    Server.verbose = a.verbose
    srv = serve(a.port)
    STATE.port = srv.server_address[1]
    print(f"moto {STATE.moto_port}", flush=True)
    print(f"ready {STATE.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
