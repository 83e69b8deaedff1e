#!/usr/bin/env python3
"""A stand-in for an OpenTelemetry collector's OTLP/HTTP receiver, on 127.0.0.1.

Every POST to /v1/metrics is decoded with the OpenTelemetry project's own generated
types (the opentelemetry-proto package) and printed as one line, `export {json}`,
holding what a backend would see: the path, content type and headers, the resource's
attributes, the scope, and each metric with its type, unit, temporality and points.
A body that does not decode is printed as `undecodable <reason>` and answered 400.

How it answers is set by a line on its stdin (it says `mode LINE` once taken), one of:
  ok            200 and an empty ExportMetricsServiceResponse
  status N      N with a google.rpc.Status (code 1, message 2) saying why
  partial N     200 with partial_success rejecting N data points
  slow S        200 after S seconds
  deny          403 with an AccessDeniedException, as AWS words a missing permission
Prints `ready PORT` once listening.

As CloudWatch's own OTLP endpoint (--tls NAME --sigv4 REGION --key ID=SECRET): it
serves TLS with a certificate for NAME from a CA of its own (written to --ca-out), and
checks each export's SigV4 signature with botocore's signer, an implementation
independent of lifeguard's: a wrong one is answered 403 SignatureDoesNotMatch, and
every export line carries what the check found.
"""
import argparse
import datetime
import hmac
import json
import os
import re
import ssl
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2

MODE = ["ok"]
SIGV4 = {}  # region, keys (access key id -> secret), when checking signatures


def check_sigv4(method, path, headers, body):
    """None if the request carries a valid SigV4 signature for SIGV4's region and the
    service `monitoring`, else why not. botocore recomputes the signature from the
    request as received, over the headers the Authorization header names."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    found = re.fullmatch(
        r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
        r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})", headers.get("authorization", ""))
    if not found:
        return "no SigV4 Authorization header"
    key, day, region, service, signed, signature = found.groups()
    if (region, service) != (SIGV4["region"], "monitoring"):
        return f"signed for {region}/{service}"
    if key not in SIGV4["keys"]:
        return f"unknown access key {key}"
    names = signed.split(";")
    if "host" not in names or "x-amz-date" not in names:
        return f"host and x-amz-date not signed: {signed}"
    request = AWSRequest(method=method, url=f"https://{headers['host']}{path}", data=body,
                         headers={n: headers.get(n, "") for n in names})
    request.context["timestamp"] = headers["x-amz-date"]
    signer = SigV4Auth(Credentials(key, SIGV4["keys"][key], headers.get("x-amz-security-token")),
                       "monitoring", region)
    expected = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, signature):
        return "SignatureDoesNotMatch"
    return None


def serve_tls(server, name, ca_out):
    """A CA of the stand-in's own, its certificate written to ca_out (lifeguard's
    SSL_CERT_FILE), and a server certificate for name signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    def certificate(subject, key, issuer, issuer_key, extensions):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1)))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(issuer_key, hashes.SHA256())
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "otlp stand-in CA")])
    ca = certificate(ca_name, ca_key, ca_name, ca_key, [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                       content_commitment=False, key_encipherment=False,
                       data_encipherment=False, key_agreement=False, encipher_only=False,
                       decipher_only=False), True)])
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), key,
                       ca_name, ca_key, [
        (x509.SubjectAlternativeName([x509.DNSName(name)]), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)])
    pem = serialization.Encoding.PEM
    with open(ca_out, "wb") as f:
        f.write(ca.public_bytes(pem))
    folder = tempfile.mkdtemp()
    chain, secret = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    with open(chain, "wb") as f:
        f.write(leaf.public_bytes(pem))
    with open(secret, "wb") as f:
        f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain, secret)
    server.socket = context.wrap_socket(server.socket, server_side=True)


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
        request = metrics_service_pb2.ExportMetricsServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as e:  # the decoder's verdict is the point
            print("undecodable", repr(e), flush=True)
            return self.answer(400, status_message(3, "undecodable"))
        headers = {k.lower(): v for k, v in self.headers.items()}
        export = {"path": self.path, "content_type": self.headers.get("Content-Type"),
                  "headers": headers, "bytes": len(body), "resources": []}
        if SIGV4:
            export["sigv4"] = check_sigv4("POST", self.path, headers, body) or "verified"
        for rm in request.resource_metrics:
            export["resources"].append({
                "attributes": attributes(rm.resource.attributes),
                "scopes": [{"name": sm.scope.name, "version": sm.scope.version,
                            "metrics": [metric(m) for m in sm.metrics]}
                           for sm in rm.scope_metrics]})
        print("export", json.dumps(export), flush=True)
        if SIGV4 and export["sigv4"] != "verified":
            return self.answer(403, json.dumps({"__type": "SignatureDoesNotMatch",
                                                "message": export["sigv4"]}).encode(),
                               "application/json")
        mode, _, arg = MODE[0].partition(" ")
        if mode == "deny":
            message = ("User: arn:aws:sts::123456789012:assumed-role/web-task/abc is not "
                       "authorized to perform: cloudwatch:PutMetricData")
            return self.answer(403, json.dumps({"__type": "AccessDeniedException",
                                                "message": message}).encode(),
                               "application/json")
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
    parser.add_argument("--tls", metavar="NAME")
    parser.add_argument("--ca-out")
    parser.add_argument("--sigv4", metavar="REGION")
    parser.add_argument("--key", action="append", default=[], metavar="ID=SECRET")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    if args.tls:
        serve_tls(server, args.tls, args.ca_out)
    if args.sigv4:
        SIGV4.update(region=args.sigv4, keys=dict(k.split("=", 1) for k in args.key))
    def modes():
        for line in sys.stdin:
            MODE[0] = line.strip()
            print("mode", MODE[0], flush=True)
    threading.Thread(target=modes, daemon=True).start()
    print("ready", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
