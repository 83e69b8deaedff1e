//! A snapshot's families as one OTLP `ExportMetricsServiceRequest` (opentelemetry-proto's
//! collector/metrics/v1 and metrics/v1, field numbers as the .proto files give them).
//! Pure: the resource, the families and the clock come in, bytes go out.
//!
//! Each figure keeps its Prometheus name, so a query or dashboard reads the same name
//! whichever way the figures came: Prometheus's own OTLP translation adds a unit or
//! `_total` suffix only when the name lacks it, so these names come out unchanged, and
//! backends that keep OTLP names as sent (CloudWatch's PromQL) see them as written.
//! The unit goes in the unit field (UCUM, as OpenTelemetry's conventions write it).
#![forbid(unsafe_code)]

use super::proto::Message;
use crate::helper::metrics::prometheus::{Kind, Point, Read};

/// AggregationTemporality CUMULATIVE: every counter lifeguard has counts from a fixed
/// start, and a lost export loses nothing the next one does not carry.
const CUMULATIVE: u64 = 2;

/// The unit a family's name ends with, in UCUM: `_seconds` s, `_bytes` By, `_percent` %,
/// `_cores` {cpu} (an annotation: a count of CPUs); none for a plain count or state.
pub fn unit(name: &str) -> &'static str {
    let stem = name.strip_suffix("_total").unwrap_or(name);
    [
        ("_seconds", "s"),
        ("_bytes", "By"),
        ("_percent", "%"),
        ("_cores", "{cpu}"),
    ]
    .iter()
    .find(|(suffix, _)| stem.ends_with(suffix))
    .map_or("", |(_, unit)| unit)
}

/// Whole-number figures (counts, states, bytes) go as integers, the rest as doubles:
/// decided by the unit, so a stream's value type never changes from one export to
/// the next.
fn integral(unit: &str) -> bool {
    matches!(unit, "" | "By")
}

fn key_value(key: &str, value: &str) -> Message {
    let mut any = Message::default();
    any.string(1, value);
    let mut kv = Message::default();
    kv.string(1, key).message(2, &any);
    kv
}

/// A NumberDataPoint: attributes 7, start 2, time 3, as_double 4, as_int 6.
fn number_point(point: &Point, start: Option<u64>, now: u64, int: bool) -> Message {
    let (_, labels, value) = point;
    let mut m = Message::default();
    for (key, value) in labels {
        m.message(7, &key_value(key, value));
    }
    if let Some(start) = start {
        m.fixed64(2, start);
    }
    m.fixed64(3, now);
    if int && value.fract() == 0.0 {
        // sfixed64: two's complement, little-endian, as fixed64's bytes.
        m.fixed64(6, *value as i64 as u64);
    } else {
        m.double(4, *value);
    }
    m
}

/// A HistogramDataPoint from the Prometheus points (cumulative `_bucket`s, `_sum`,
/// `_count`) and the buckets' bounds: count 4, sum 5, bucket_counts 6 (per bucket, not
/// cumulative), explicit_bounds 7 (without +Inf, which the last count stands for).
fn histogram_point(points: &[Point], bounds: &[f64], start: u64, now: u64) -> Message {
    let mut counts = Vec::new();
    let (mut sum, mut count, mut below) = (0.0, 0u64, 0u64);
    for (suffix, _, value) in points {
        match *suffix {
            "_bucket" => {
                let cumulative = *value as u64;
                counts.push(cumulative.saturating_sub(below));
                below = cumulative;
            }
            "_sum" => sum = *value,
            "_count" => count = *value as u64,
            _ => {}
        }
    }
    let mut m = Message::default();
    m.fixed64(2, start)
        .fixed64(3, now)
        .fixed64(4, count)
        .double(5, sum);
    m.packed64(6, counts.into_iter());
    m.packed64(7, bounds.iter().map(|b| b.to_bits()));
    m
}

/// A Metric: name 1, description 2, unit 3, and its data: gauge 5, sum 7, histogram 9.
pub fn metric(family: &Read, start: u64, now: u64) -> Message {
    let unit = unit(family.name);
    let mut data = Message::default();
    let field = match family.kind {
        Kind::Gauge => {
            for point in &family.points {
                data.message(1, &number_point(point, None, now, integral(unit)));
            }
            5
        }
        Kind::Counter => {
            for point in &family.points {
                data.message(1, &number_point(point, Some(start), now, integral(unit)));
            }
            data.uint(2, CUMULATIVE).bool(3, true);
            7
        }
        Kind::Histogram(bounds) => {
            data.message(1, &histogram_point(&family.points, bounds, start, now));
            data.uint(2, CUMULATIVE);
            9
        }
    };
    let mut m = Message::default();
    m.string(1, family.name).string(2, family.help);
    if !unit.is_empty() {
        m.string(3, unit);
    }
    m.message(field, &data);
    m
}

/// The whole request: one ResourceMetrics (resource 1, scope_metrics 2) whose scope is
/// lifeguard (name 1, version 2). `start` and `now` are Unix nanoseconds.
pub fn request(
    resource: &[(String, String)],
    families: impl Iterator<Item = Read>,
    start: u64,
    now: u64,
) -> Vec<u8> {
    let mut scope = Message::default();
    scope
        .string(1, "lifeguard")
        .string(2, env!("CARGO_PKG_VERSION"));
    let mut scope_metrics = Message::default();
    scope_metrics.message(1, &scope);
    for family in families {
        scope_metrics.message(2, &metric(&family, start, now));
    }
    let mut attributes = Message::default();
    for (key, value) in resource {
        attributes.message(1, &key_value(key, value));
    }
    let mut resource_metrics = Message::default();
    resource_metrics
        .message(1, &attributes)
        .message(2, &scope_metrics);
    let mut request = Message::default();
    request.message(1, &resource_metrics);
    request.0
}

#[cfg(test)]
mod tests {
    use super::super::proto::{field, fields, Field};
    use super::*;

    #[test]
    fn units_come_from_the_names_suffix() {
        for (name, want) in [
            ("lifeguard_cpu_usage_seconds_total", "s"),
            ("lifeguard_response_seconds", "s"),
            ("lifeguard_memory_limit_bytes", "By"),
            ("lifeguard_cpu_utilization_percent", "%"),
            ("lifeguard_cpu_limit_cores", "{cpu}"),
            ("lifeguard_requests_in_flight", ""),
            ("lifeguard_zombies_reaped_total", ""),
        ] {
            assert_eq!(unit(name), want, "{name}");
        }
    }

    fn bytes(data: &[u8], n: u32) -> &[u8] {
        match field(data, n) {
            Some(Field::Bytes(b)) => b,
            other => panic!("field {n}: {other:?}"),
        }
    }

    #[test]
    fn a_counter_is_a_cumulative_monotonic_sum_from_the_start() {
        let family = Read {
            name: "lifeguard_zombies_reaped_total",
            kind: Kind::Counter,
            help: "Orphans reaped.",
            points: vec![("", vec![], 3.0)],
        };
        let m = metric(&family, 100, 200);
        assert_eq!(bytes(&m.0, 1), b"lifeguard_zombies_reaped_total");
        assert_eq!(field(&m.0, 3), None, "no unit for a count");
        let sum = bytes(&m.0, 7);
        assert_eq!(field(sum, 2), Some(Field::Number(CUMULATIVE)));
        assert_eq!(field(sum, 3), Some(Field::Number(1)));
        let point = bytes(sum, 1);
        assert_eq!(field(point, 2), Some(Field::Number(100)));
        assert_eq!(field(point, 3), Some(Field::Number(200)));
        assert_eq!(field(point, 6), Some(Field::Number(3)), "as_int");
    }

    #[test]
    fn a_histograms_cumulative_buckets_become_per_bucket_counts() {
        let le = |b: &str| vec![("le", b.to_string())];
        let family = Read {
            name: "lifeguard_response_seconds",
            kind: Kind::Histogram(&[0.1, 1.0]),
            help: "h",
            points: vec![
                ("_bucket", le("0.1"), 2.0),
                ("_bucket", le("1"), 5.0),
                ("_bucket", le("+Inf"), 6.0),
                ("_sum", vec![], 4.5),
                ("_count", vec![], 6.0),
            ],
        };
        let m = metric(&family, 1, 2);
        let histogram = bytes(&m.0, 9);
        let point = bytes(histogram, 1);
        assert_eq!(field(point, 4), Some(Field::Number(6)));
        assert_eq!(field(point, 5), Some(Field::Number(4.5f64.to_bits())));
        let counts: Vec<u64> = bytes(point, 6)
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(counts, [2, 3, 1]);
        let bounds: Vec<f64> = bytes(point, 7)
            .chunks(8)
            .map(|c| f64::from_bits(u64::from_le_bytes(c.try_into().unwrap())))
            .collect();
        assert_eq!(bounds, [0.1, 1.0]);
        assert!(fields(&request(&[], [family].into_iter(), 1, 2)).is_some());
    }
}
