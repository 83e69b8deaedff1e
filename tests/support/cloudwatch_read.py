#!/usr/bin/env python3
"""Read back what was published to the test CloudWatch (cloudwatch_front.py + moto).

    python3 tests/support/cloudwatch_read.py --moto-port M [--front-port P] --namespace NS

Prints one JSON object on stdout:
  "data":         (with --front-port) every datum the front accepted, as the client sent
                  it: name, dimensions {K: V}, unit, storage_resolution, value or
                  statistic_values {SampleCount, Sum, Minimum, Maximum}, timestamp (epoch
                  seconds) and timestamp_iso; moto's backend drops StorageResolution, so
                  this is the place to check it
  "list_metrics": ListMetrics through the CloudWatch API (boto3 -> moto, awsJson1.0)
  "statistics":   GetMetricStatistics (Period 1, SampleCount/Sum/Minimum/Maximum/Average)
                  for every metric ListMetrics found, over the last --hours hours

boto3 >= 1.40 picks CloudWatch's `json` protocol (first of the model's protocols that
botocore ranks highest), which moto 5.x answers; nothing leaves 127.0.0.1.
"""
import argparse
import datetime as dt
import json
import sys
import urllib.parse
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moto-port", type=int, required=True)
    ap.add_argument("--front-port", type=int)
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--hours", type=float, default=3.0)
    a = ap.parse_args()

    import boto3
    from botocore.config import Config

    cw = boto3.client(
        "cloudwatch",
        endpoint_url=f"http://127.0.0.1:{a.moto_port}",
        region_name=a.region,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"max_attempts": 1}, connect_timeout=5, read_timeout=10),
    )
    out = {"namespace": a.namespace}
    if a.front_port:
        url = f"http://127.0.0.1:{a.front_port}/_data?namespace={urllib.parse.quote(a.namespace)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            out["data"] = json.load(r)["data"]

    metrics, seen = [], set()
    for page in cw.get_paginator("list_metrics").paginate(Namespace=a.namespace):
        for m in page["Metrics"]:
            # moto lists a metric once per datum received: keep one of each.
            key = (m["MetricName"], tuple(sorted((d["Name"], d["Value"]) for d in m.get("Dimensions", []))))
            if key not in seen:
                seen.add(key)
                metrics.append(m)
    out["list_metrics"] = [
        {"name": m["MetricName"], "dimensions": {d["Name"]: d["Value"] for d in m.get("Dimensions", [])}}
        for m in metrics
    ]

    # Whole seconds: moto counts a query's 1-second periods from its StartTime, and
    # CloudWatch's own buckets start on whole seconds; a StartTime of .031 would put a
    # datum sent at .010 past the second into the period before the one the tests look in.
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    stats = []
    for m in metrics:
        r = cw.get_metric_statistics(
            Namespace=a.namespace,
            MetricName=m["MetricName"],
            Dimensions=m.get("Dimensions", []),
            StartTime=now - dt.timedelta(hours=a.hours),
            EndTime=now + dt.timedelta(minutes=5),
            Period=1,
            Statistics=["SampleCount", "Sum", "Minimum", "Maximum", "Average"],
        )
        points = []
        for p in sorted(r["Datapoints"], key=lambda p: p["Timestamp"]):
            p = dict(p)
            p["Timestamp"] = p["Timestamp"].timestamp()
            points.append(p)
        stats.append(
            {
                "name": m["MetricName"],
                "dimensions": {d["Name"]: d["Value"] for d in m.get("Dimensions", [])},
                "datapoints": points,
            }
        )
    out["statistics"] = stats
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
