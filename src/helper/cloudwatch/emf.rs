//! Embedded Metric Format records, pure: the plan's batch as one JSON log line that
//! CloudWatch Logs turns into the same metrics PutMetricData would have made (the
//! format AWS's own embedded-metrics libraries and Powertools write). The rules kept,
//! from the specification: a root `_aws` member with `Timestamp` (milliseconds since
//! the epoch) and `CloudWatchMetrics` alone; one metric directive with `Namespace`,
//! `Dimensions` (one dimension set: every configured dimension) and `Metrics` alone;
//! each metric definition with `Name`, `Unit` and `StorageResolution` (1: high
//! resolution) alone; every dimension and metric a member of the root, dimension values
//! strings, metric values a number or an array of at most 100 numbers.
#![forbid(unsafe_code)]

use serde_json::{json, Map, Value as Json};

use super::plan::{Datum, Value};

/// The most values one metric may carry in a record.
pub const MAX_VALUES: usize = 100;

/// The record for `batch`, one line without its newline; None for an empty batch.
pub fn record(
    namespace: &str,
    dimensions: &[(String, String)],
    batch: &[Datum],
    timestamp_ms: u64,
) -> Option<String> {
    if batch.is_empty() {
        return None;
    }
    let mut root = Map::new();
    let mut metrics = Vec::new();
    for datum in batch {
        let (unit, value) = match &datum.value {
            Value::Percent(p) => ("Percent", json!(p)),
            Value::Samples(distinct) => ("Count", json!(expand(distinct, MAX_VALUES))),
            Value::Seconds(distinct) => ("Seconds", json!(expand(distinct, MAX_VALUES))),
        };
        metrics.push(json!({"Name": datum.name, "Unit": unit, "StorageResolution": 1}));
        root.insert(datum.name.to_string(), value);
    }
    for (name, value) in dimensions {
        root.insert(name.clone(), json!(value));
    }
    let names: Vec<&str> = dimensions.iter().map(|(n, _)| n.as_str()).collect();
    root.insert(
        "_aws".to_string(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [names],
                "Metrics": metrics,
            }],
        }),
    );
    Some(Json::Object(root).to_string())
}

/// The interval's samples from their distinct values and counts, lowest first: every
/// sample while there are at most `max`; past that, `max` of them taken at even steps
/// through the sorted samples (lowest and highest included), so each percentile moves
/// by at most one step of the sorted list. (A record cannot carry counts the way
/// PutMetricData's Counts does.)
pub fn expand(distinct: &[(f64, u64)], max: usize) -> Vec<f64> {
    let total: u64 = distinct.iter().map(|(_, n)| n).sum();
    if total == 0 || max == 0 {
        return Vec::new();
    }
    let at = |index: u64| -> f64 {
        let mut seen = 0;
        for (value, count) in distinct {
            seen += count;
            if index < seen {
                return *value;
            }
        }
        distinct.last().map_or(0.0, |(v, _)| *v)
    };
    if total as usize <= max {
        return (0..total).map(at).collect();
    }
    (0..max as u64)
        .map(|i| at(i * (total - 1) / (max as u64 - 1)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn median(values: &[f64]) -> f64 {
        let mut v = values.to_vec();
        v.sort_unstable_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    #[test]
    fn the_samples_come_back_whole_up_to_the_limit_and_evenly_past_it() {
        let distinct = [(0.0, 3), (4.0, 5), (9.0, 2)];
        assert_eq!(
            expand(&distinct, 100),
            vec![0.0, 0.0, 0.0, 4.0, 4.0, 4.0, 4.0, 4.0, 9.0, 9.0]
        );
        // 86,400 samples of a day-long interval: 100 values, the extremes kept, the
        // median where the samples' is.
        let day = [(1.0, 20_000), (2.0, 30_000), (7.0, 36_400)];
        let values = expand(&day, 100);
        assert_eq!(values.len(), 100);
        assert_eq!((values[0], values[99]), (1.0, 7.0));
        assert_eq!(median(&values), 2.0);
        assert_eq!(expand(&[], 100), Vec::<f64>::new());
    }

    #[test]
    fn a_record_carries_every_datum_as_a_root_member_and_its_definition() {
        let batch = vec![
            Datum {
                name: "RequestsInFlight",
                value: Value::Samples(vec![(0.0, 2), (3.0, 8)]),
            },
            Datum {
                name: "CpuUtilization",
                value: Value::Percent(41.5),
            },
        ];
        let dims = vec![("ClusterName".to_string(), "prod".to_string())];
        let line = record("Acme/web", &dims, &batch, 1_764_000_000_123).unwrap();
        assert!(!line.contains('\n'));
        let v: Json = serde_json::from_str(&line).unwrap();
        assert_eq!(v["_aws"]["Timestamp"], 1_764_000_000_123u64);
        let directive = &v["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "Acme/web");
        assert_eq!(directive["Dimensions"], json!([["ClusterName"]]));
        assert_eq!(
            directive["Metrics"][0],
            json!({"Name": "RequestsInFlight", "Unit": "Count", "StorageResolution": 1})
        );
        assert_eq!(v["ClusterName"], "prod");
        assert_eq!(v["RequestsInFlight"].as_array().unwrap().len(), 10);
        assert_eq!(v["CpuUtilization"], 41.5);
        assert_eq!(record("Acme/web", &dims, &[], 1), None, "nothing to say");
        // No dimensions: one empty dimension set, as the libraries write it.
        let v: Json = serde_json::from_str(&record("A/b", &[], &batch, 1).unwrap()).unwrap();
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([[]]));
    }
}
