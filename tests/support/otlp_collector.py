#!/usr/bin/env python3
"""A stand-in for an OpenTelemetry collector's OTLP/HTTP receiver, on 127.0.0.1.

Every POST to /v1/metrics is decoded with the OpenTelemetry project's own generated
types (the opentelemetry-proto package) and printed as one line, `export {json}`,
holding what a backend would see: the path, content type and headers, the resource's
attributes, the scope, and each metric with its type, unit, temporality and points.
A body that does not decode is printed as `undecodable <reason>` and answered 400.

How it answers is set by POST /_mode with a body of one of:
  ok            200 and an empty ExportMetricsServiceResponse
  status N      N with a google.rpc.Status (code 1, message 2) saying why
  partial N     200 with partial_success rejecting N data points
  slow S        200 after S seconds
Prints `ready PORT` once listening.
"""
import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2

MODE = ["ok"]


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def number(point):
    kind = point.WhichOneof("value")
    return {"attributes": attributes(point.attributes), "value_type": kind,
            "value": getattr(point, kind) if kind else None,
            "start": point.start_time_unix_nano, "time": point.time_unix_nano}


def metric(m):
    kind = m.WhichOneof("data")
    out = {"name": m.name, "unit": m.unit, "description": m.description, "type": kind}
    data = getattr(m, kind)
    if kind in ("gauge", "sum"):
        out["points"] = [number(p) for p in data.data_points]
    if kind == "sum":
        out["monotonic"] = data.is_monotonic
    if kind in ("sum", "histogram"):
        out["temporality"] = metrics_pb2.AggregationTemporality.Name(data.aggregation_temporality)
    if kind == "histogram":
        out["points"] = [{"attributes": attributes(p.attributes), "count": p.count, "sum": p.sum,
                          "bucket_counts": list(p.bucket_counts),
                          "explicit_bounds": list(p.explicit_bounds),
                          "start": p.start_time_unix_nano, "time": p.time_unix_nano}
                         for p in data.data_points]
    return out


def status_message(code, message):
    """google.rpc.Status{code = 1, message = 2}, written by hand (no googleapis here)."""
    text = message.encode()
    return bytes([0x08, code, 0x12, len(text)]) + text


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", content_type="application/x-protobuf"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/_mode":
            MODE[0] = body.decode().strip()
            return self.answer(200, b"ok\n", "text/plain")
        request = metrics_service_pb2.ExportMetricsServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as e:  # the decoder's verdict is the point
            print("undecodable", repr(e), flush=True)
            return self.answer(400, status_message(3, "undecodable"))
        export = {"path": self.path, "content_type": self.headers.get("Content-Type"),
                  "headers": {k.lower(): v for k, v in self.headers.items()},
                  "bytes": len(body), "resources": []}
        for rm in request.resource_metrics:
            export["resources"].append({
                "attributes": attributes(rm.resource.attributes),
                "scopes": [{"name": sm.scope.name, "version": sm.scope.version,
                            "metrics": [metric(m) for m in sm.metrics]}
                           for sm in rm.scope_metrics]})
        print("export", json.dumps(export), flush=True)
        mode, _, arg = MODE[0].partition(" ")
        if mode == "status":
            code = int(arg)
            return self.answer(code, status_message(14, f"the stand-in answers {code}"))
        response = metrics_service_pb2.ExportMetricsServiceResponse()
        if mode == "partial":
            response.partial_success.rejected_data_points = int(arg)
            response.partial_success.error_message = "rejected by the stand-in"
        if mode == "slow":
            time.sleep(float(arg))
        self.answer(200, response.SerializeToString())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print("ready", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
