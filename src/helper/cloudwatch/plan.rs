//! When to publish and what, as a pure machine: the 1-second samples go in, batches come
//! out. Every timing rule came from a failure in a real load test: one PutMetricData
//! every interval; a burst (an in-flight sample at or above the threshold) publishes at
//! once, at most every 3 s, and every publish restarts the interval; CPU and memory stay
//! out of the first max(2 × interval, 20 s).
//!
//! `RequestsInFlight` goes out as raw samples (each distinct value with how often it was
//! sampled), never as a statistic set: CloudWatch computes percentiles only from raw
//! values, and from a statistic set only when SampleCount is 1 or Minimum equals
//! Maximum. The scaling alarms take the p50, so a statistic set would leave them without
//! data exactly when the load changes inside an interval.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The shortest time between two publishes that a burst may cause.
pub const BURST_FLOOR: Duration = Duration::from_secs(3);
/// The start-up quiet period's floor: start-up bursts would fake saturation.
const QUIET_FLOOR: Duration = Duration::from_secs(20);
/// PutMetricData takes at most 150 distinct values for a metric in one request (the
/// API reference words it per datum and per request alike: one datum of at most 150
/// is right under both readings).
pub const MAX_VALUES: usize = 150;

/// One metric of a batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Datum {
    pub name: &'static str,
    pub value: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A percentage, rounded to 2 decimals and capped at 100.
    Percent(f64),
    /// The interval's 1-second samples as raw values: each distinct value, lowest
    /// first, with how often it was sampled; at most `MAX_VALUES` pairs (see `fit`).
    Samples(Vec<(f64, u64)>),
    /// The same, of a figure in seconds.
    Seconds(Vec<(f64, u64)>),
}

/// What a sample brings: in-flight only with an in-flight source; CPU and memory when
/// the sampler could read them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    pub in_flight: Option<u64>,
    pub cpu_percent: Option<f64>,
    pub memory_percent: Option<f64>,
    /// The oldest waiting request's age, in seconds.
    pub oldest_request_age: Option<f64>,
    /// Whether ECS keeps the task out of scale-in (with `--scale-in-protection`).
    pub scale_in_protected: Option<bool>,
}

#[derive(Clone, Debug)]
pub struct Plan {
    interval: Duration,
    burst_threshold: Option<u64>,
    /// Whether `OldestRequestAge` is published (`METRICS_EXTRA`).
    oldest_request_age: bool,
    /// Whether `ScaleInProtected` is published (`METRICS_EXTRA`).
    scale_in_protected: bool,
    started: Instant,
    last_publish: Option<Instant>,
    window: Window,
}

/// The samples since the last publish.
#[derive(Clone, Debug, Default)]
struct Window {
    /// In-flight value → how many samples had it. Bounded by the distinct values, not
    /// by the interval's length (a 24-hour interval of a steady load is one entry).
    in_flight: BTreeMap<u64, u64>,
    /// The oldest request's age in milliseconds → how many samples had it.
    oldest_request_ms: BTreeMap<u64, u64>,
    /// Samples taken unprotected and protected.
    protected: [u64; 2],
    cpu_sum: f64,
    cpu_samples: u32,
    memory: Option<f64>,
}

impl Plan {
    pub fn new(interval: Duration, burst_threshold: Option<u64>, now: Instant) -> Plan {
        Plan {
            interval,
            burst_threshold,
            oldest_request_age: false,
            scale_in_protected: false,
            started: now,
            last_publish: None,
            window: Window::default(),
        }
    }

    /// Publishes `OldestRequestAge` too.
    pub fn with_oldest_request_age(mut self, on: bool) -> Plan {
        self.oldest_request_age = on;
        self
    }

    /// Publishes `ScaleInProtected` too.
    pub fn with_scale_in_protected(mut self, on: bool) -> Plan {
        self.scale_in_protected = on;
        self
    }

    /// When the next regular publish is due.
    pub fn deadline(&self) -> Instant {
        self.last_publish.unwrap_or(self.started) + self.interval
    }

    /// A 1-second sample; true when it is a burst that may be published now.
    pub fn record(&mut self, reading: Reading, now: Instant) -> bool {
        if let Some(n) = reading.in_flight {
            *self.window.in_flight.entry(n).or_insert(0) += 1;
        }
        if let (true, Some(age)) = (self.oldest_request_age, reading.oldest_request_age) {
            let ms = (age * 1000.0).round() as u64;
            *self.window.oldest_request_ms.entry(ms).or_insert(0) += 1;
        }
        if let (true, Some(protected)) = (self.scale_in_protected, reading.scale_in_protected) {
            self.window.protected[usize::from(protected)] += 1;
        }
        if let Some(cpu) = reading.cpu_percent {
            self.window.cpu_sum += cpu;
            self.window.cpu_samples += 1;
        }
        if reading.memory_percent.is_some() {
            self.window.memory = reading.memory_percent;
        }
        let burst = matches!(
            (reading.in_flight, self.burst_threshold),
            (Some(n), Some(threshold)) if n >= threshold
        );
        let since = self
            .last_publish
            .map_or(Duration::MAX, |last| now.saturating_duration_since(last));
        burst && since >= BURST_FLOOR
    }

    /// Whether the regular publish is due.
    #[cfg(test)]
    pub fn due(&self, now: Instant) -> bool {
        now >= self.deadline()
    }

    /// Publishes: the window as a batch (empty when it held nothing), and the interval
    /// starts again.
    pub fn take(&mut self, now: Instant) -> Vec<Datum> {
        let window = std::mem::take(&mut self.window);
        self.last_publish = Some(now);
        let mut batch = Vec::new();
        if !window.in_flight.is_empty() {
            let distinct = window
                .in_flight
                .iter()
                .map(|(value, count)| (*value as f64, *count))
                .collect();
            batch.push(Datum {
                name: "RequestsInFlight",
                value: Value::Samples(fit(distinct, MAX_VALUES)),
            });
        }
        if !window.oldest_request_ms.is_empty() {
            let distinct = (window.oldest_request_ms.iter())
                .map(|(ms, count)| (*ms as f64 / 1000.0, *count))
                .collect();
            batch.push(Datum {
                name: "OldestRequestAge",
                value: Value::Seconds(fit(distinct, MAX_VALUES)),
            });
        }
        if window.protected != [0, 0] {
            // 0 and 1 with their counts: the Average is the share of the interval the
            // task was protected, the Maximum whether it was at all.
            let distinct = (0..2)
                .filter(|&i| window.protected[i] > 0)
                .map(|i| (i as f64, window.protected[i]))
                .collect();
            batch.push(Datum {
                name: "ScaleInProtected",
                value: Value::Samples(distinct),
            });
        }
        let quiet = QUIET_FLOOR.max(self.interval * 2);
        if now.saturating_duration_since(self.started) >= quiet {
            if window.cpu_samples > 0 {
                batch.push(Datum {
                    name: "CpuUtilization",
                    value: Value::Percent(percent(window.cpu_sum / window.cpu_samples as f64)),
                });
            }
            if let Some(memory) = window.memory {
                batch.push(Datum {
                    name: "MemoryUtilization",
                    value: Value::Percent(percent(memory)),
                });
            }
        }
        batch
    }
}

/// The distinct values (ascending, each with its count) in at most `max` pairs.
///
/// Up to `max` they go out as they are. A 10-second interval has about 10 samples, so
/// only an interval longer than `max` seconds can have more distinct values; those are
/// merged rather than split over several datums (the request-wide reading of the limit
/// would refuse a split) or over several calls (one call per interval). The lowest and
/// the highest value stay as they are; the ones between are cut into `max` − 2 runs of
/// neighbours, each sent as its count-weighted mean with the run's total count. So
/// SampleCount, Sum, Average, Minimum and Maximum stay exact, and a percentile is off by
/// at most the width of the run it falls in.
pub fn fit(distinct: Vec<(f64, u64)>, max: usize) -> Vec<(f64, u64)> {
    debug_assert!(max >= 3, "the lowest, the highest and one run between");
    let n = distinct.len();
    if n <= max {
        return distinct;
    }
    let inner = &distinct[1..n - 1];
    let runs = max - 2;
    let mut out = Vec::with_capacity(max);
    out.push(distinct[0]);
    for run in 0..runs {
        // More values between than runs: every run gets at least one.
        let run = &inner[run * inner.len() / runs..(run + 1) * inner.len() / runs];
        let count: u64 = run.iter().map(|(_, c)| c).sum();
        let sum: f64 = run.iter().map(|(v, c)| v * *c as f64).sum();
        out.push((sum / count as f64, count));
    }
    out.push(distinct[n - 1]);
    out
}

/// Rounded to 2 decimals and capped at 100 (a task can burst past its CPU limit on
/// EC2; the alarm's scale is the limit).
fn percent(value: f64) -> f64 {
    ((value.clamp(0.0, 100.0)) * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, secs: f64) -> Instant {
        t0 + Duration::from_secs_f64(secs)
    }

    fn sample(in_flight: u64, cpu: f64, memory: f64) -> Reading {
        Reading {
            in_flight: Some(in_flight),
            cpu_percent: Some(cpu),
            memory_percent: Some(memory),
            oldest_request_age: None,
            scale_in_protected: None,
        }
    }

    fn names(batch: &[Datum]) -> Vec<&'static str> {
        batch.iter().map(|d| d.name).collect()
    }

    fn samples(pairs: &[(f64, u64)]) -> Value {
        Value::Samples(pairs.to_vec())
    }

    /// Every sample, one by one, from (value, count) pairs.
    fn expand(pairs: &[(f64, u64)]) -> Vec<f64> {
        pairs
            .iter()
            .flat_map(|(v, c)| std::iter::repeat_n(*v, *c as usize))
            .collect()
    }

    /// The nearest-rank percentile of ascending `sorted`.
    fn percentile(sorted: &[f64], p: f64) -> f64 {
        let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
        sorted[rank - 1]
    }

    #[test]
    fn scale_in_protection_goes_out_only_on_request_as_zeros_and_ones() {
        let t0 = Instant::now();
        let protected = |on: bool| Reading {
            in_flight: Some(1),
            scale_in_protected: Some(on),
            ..Default::default()
        };
        let mut off = Plan::new(Duration::from_secs(10), None, t0);
        off.record(protected(true), at(t0, 1.0));
        assert_eq!(names(&off.take(at(t0, 10.0))), ["RequestsInFlight"]);
        let mut on = Plan::new(Duration::from_secs(10), None, t0).with_scale_in_protected(true);
        for (s, p) in [(1.0, false), (2.0, true), (3.0, true), (4.0, true)] {
            on.record(protected(p), at(t0, s));
        }
        let batch = on.take(at(t0, 10.0));
        assert_eq!(names(&batch), ["RequestsInFlight", "ScaleInProtected"]);
        assert_eq!(batch[1].value, samples(&[(0.0, 1), (1.0, 3)]));
        // Protected all along: the one value.
        for s in 11..=15 {
            on.record(protected(true), at(t0, s as f64));
        }
        assert_eq!(on.take(at(t0, 20.0))[1].value, samples(&[(1.0, 5)]));
        // No sample knew (no reading of it): nothing sent.
        on.record(Reading::default(), at(t0, 21.0));
        assert!(on
            .take(at(t0, 30.0))
            .iter()
            .all(|d| d.name != "ScaleInProtected"));
    }

    #[test]
    fn the_oldest_request_age_goes_out_only_on_request_as_raw_seconds() {
        let t0 = Instant::now();
        let aged = |age: f64| Reading {
            in_flight: Some(1),
            oldest_request_age: Some(age),
            ..Default::default()
        };
        let mut off = Plan::new(Duration::from_secs(10), None, t0);
        off.record(aged(2.0), at(t0, 1.0));
        assert_eq!(names(&off.take(at(t0, 10.0))), ["RequestsInFlight"]);
        let mut on = Plan::new(Duration::from_secs(10), None, t0).with_oldest_request_age(true);
        for (s, age) in [(1.0, 0.0), (2.0, 2.0004), (3.0, 2.0), (4.0, 0.25)] {
            on.record(aged(age), at(t0, s));
        }
        let batch = on.take(at(t0, 10.0));
        assert_eq!(names(&batch), ["RequestsInFlight", "OldestRequestAge"]);
        // To the millisecond: 2.0004 and 2.0 are one value sampled twice.
        assert_eq!(
            batch[1].value,
            Value::Seconds(vec![(0.0, 1), (0.25, 1), (2.0, 2)])
        );
    }

    #[test]
    fn every_interval_the_raw_samples_and_no_cpu_or_memory_in_the_quiet_start() {
        let t0 = Instant::now();
        let mut plan = Plan::new(Duration::from_secs(10), None, t0);
        assert_eq!(plan.deadline(), at(t0, 10.0));
        for (s, n) in [(1.0, 3), (2.0, 5), (3.0, 1), (4.0, 5), (5.0, 3), (6.0, 5)] {
            assert!(!plan.record(sample(n, 90.0, 40.0), at(t0, s)));
        }
        assert!(!plan.due(at(t0, 9.9)));
        // The first 20 s (max(2 × 10 s, 20 s)): in-flight only.
        assert!(plan.due(at(t0, 10.0)));
        let batch = plan.take(at(t0, 10.0));
        assert_eq!(
            batch,
            vec![Datum {
                name: "RequestsInFlight",
                // Each distinct value once, lowest first, with how often it was seen.
                value: samples(&[(1.0, 1), (3.0, 2), (5.0, 3)])
            }]
        );
        assert_eq!(plan.deadline(), at(t0, 20.0));
        plan.record(sample(2, 50.0, 41.0), at(t0, 15.0));
        plan.record(sample(2, 70.123, 42.555), at(t0, 16.0));
        let batch = plan.take(at(t0, 20.0));
        assert_eq!(
            names(&batch),
            ["RequestsInFlight", "CpuUtilization", "MemoryUtilization"]
        );
        assert_eq!(batch[0].value, samples(&[(2.0, 2)]));
        // The interval's mean CPU, the latest memory, 2 decimals.
        assert_eq!(batch[1].value, Value::Percent(60.06));
        assert_eq!(batch[2].value, Value::Percent(42.56));
    }

    #[test]
    fn a_long_interval_stays_quiet_for_two_intervals() {
        let t0 = Instant::now();
        let mut plan = Plan::new(Duration::from_secs(30), None, t0);
        plan.record(sample(1, 10.0, 10.0), at(t0, 29.0));
        assert_eq!(names(&plan.take(at(t0, 30.0))), ["RequestsInFlight"]);
        plan.record(sample(1, 10.0, 10.0), at(t0, 59.0));
        assert_eq!(
            names(&plan.take(at(t0, 60.0))),
            ["RequestsInFlight", "CpuUtilization", "MemoryUtilization"]
        );
    }

    #[test]
    fn a_burst_publishes_at_once_at_most_every_3_s_and_restarts_the_interval() {
        let t0 = Instant::now();
        let mut plan = Plan::new(Duration::from_secs(10), Some(50), t0);
        assert!(!plan.record(sample(49, 0.0, 0.0), at(t0, 1.0)));
        // At the threshold: at once (nothing published yet).
        assert!(plan.record(sample(50, 0.0, 0.0), at(t0, 2.0)));
        let batch = plan.take(at(t0, 2.0));
        assert_eq!(batch[0].value, samples(&[(49.0, 1), (50.0, 1)]));
        assert_eq!(
            plan.deadline(),
            at(t0, 12.0),
            "a publish restarts the interval"
        );
        // 1 s and 2 s later: under the 3 s floor.
        assert!(!plan.record(sample(80, 0.0, 0.0), at(t0, 3.0)));
        assert!(!plan.record(sample(90, 0.0, 0.0), at(t0, 4.0)));
        assert!(plan.record(sample(70, 0.0, 0.0), at(t0, 5.0)));
        let batch = plan.take(at(t0, 5.0));
        // A burst goes out as raw samples too.
        assert_eq!(batch[0].value, samples(&[(70.0, 1), (80.0, 1), (90.0, 1)]));
        assert_eq!(plan.deadline(), at(t0, 15.0));
    }

    #[test]
    fn without_an_in_flight_source_no_requests_datum_and_no_burst() {
        let t0 = Instant::now();
        let mut plan = Plan::new(Duration::from_secs(10), Some(1), t0);
        let reading = Reading {
            in_flight: None,
            cpu_percent: Some(250.0),
            memory_percent: Some(12.0),
            oldest_request_age: None,
            scale_in_protected: None,
        };
        assert!(!plan.record(reading, at(t0, 21.0)));
        let batch = plan.take(at(t0, 21.0));
        assert_eq!(names(&batch), ["CpuUtilization", "MemoryUtilization"]);
        assert_eq!(batch[0].value, Value::Percent(100.0), "capped at 100");
    }

    #[test]
    fn a_publish_takes_what_the_window_holds_and_empties_it() {
        let t0 = Instant::now();
        let mut plan = Plan::new(Duration::from_secs(10), None, t0);
        plan.record(sample(4, 1.0, 1.0), at(t0, 3.0));
        assert_eq!(names(&plan.take(at(t0, 3.5))), ["RequestsInFlight"]);
        assert!(plan.take(at(t0, 3.6)).is_empty());
    }

    #[test]
    fn a_whole_day_of_samples_is_at_most_150_values() {
        // A 24-hour interval (the longest METRICS_INTERVAL) with a sawtooth load:
        // 86,400 samples over 1,000 distinct values.
        let t0 = Instant::now();
        let mut plan = Plan::new(Duration::from_secs(86_400), None, t0);
        let mut all = Vec::new();
        for s in 0..86_400u64 {
            let n = s % 1000;
            plan.record(sample(n, 0.0, 0.0), at(t0, s as f64));
            all.push(n as f64);
        }
        all.sort_unstable_by(f64::total_cmp);
        let batch = plan.take(at(t0, 86_400.0));
        let Value::Samples(pairs) = &batch[0].value else {
            panic!("{batch:?}")
        };
        assert_eq!(pairs.len(), MAX_VALUES);
        let sent = expand(pairs);
        assert_eq!(sent.len(), all.len(), "SampleCount");
        let (was, is) = (all.iter().sum::<f64>(), sent.iter().sum::<f64>());
        assert!(
            (was - is).abs() < 1e-6 * was,
            "Sum: {was} sampled, {is} sent"
        );
        assert_eq!(
            (sent[0], sent[sent.len() - 1]),
            (0.0, 999.0),
            "Minimum, Maximum"
        );
        // 998 values between, in 148 runs of 6 or 7 neighbours: a percentile moves by
        // at most a run's width (6).
        for p in [10.0, 50.0, 90.0, 99.0] {
            let (was, is) = (percentile(&all, p), percentile(&sent, p));
            assert!((was - is).abs() <= 6.0, "p{p}: {was} sampled, {is} sent");
        }
    }

    #[test]
    fn fit_keeps_up_to_max_values_and_merges_neighbours_beyond() {
        type Pairs = &'static [(f64, u64)];
        // (distinct values in, at most, what goes out)
        let table: &[(Pairs, usize, Pairs)] = &[
            (&[], 5, &[]),
            (&[(7.0, 10)], 5, &[(7.0, 10)]),
            (
                &[(1.0, 1), (2.0, 1), (3.0, 1), (4.0, 1), (5.0, 1)],
                5,
                &[(1.0, 1), (2.0, 1), (3.0, 1), (4.0, 1), (5.0, 1)],
            ),
            // One too many: two neighbours between become one, at their mean.
            (
                &[(1.0, 1), (2.0, 1), (3.0, 3), (4.0, 1), (5.0, 1), (6.0, 1)],
                5,
                &[(1.0, 1), (2.0, 1), (3.0, 3), (4.5, 2), (6.0, 1)],
            ),
            // Lowest and highest stay as they are, whatever their counts.
            (
                &[
                    (0.0, 9),
                    (10.0, 1),
                    (11.0, 1),
                    (12.0, 1),
                    (13.0, 1),
                    (14.0, 1),
                    (100.0, 2),
                ],
                4,
                &[(0.0, 9), (10.5, 2), (13.0, 3), (100.0, 2)],
            ),
        ];
        for (input, max, expected) in table {
            let out = fit(input.to_vec(), *max);
            assert_eq!(out, expected.to_vec(), "{input:?} into {max}");
            let (was, is) = (expand(input), expand(&out));
            assert_eq!(was.len(), is.len(), "SampleCount of {input:?}");
            assert_eq!(
                was.iter().sum::<f64>(),
                is.iter().sum::<f64>(),
                "Sum of {input:?}"
            );
            assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "{out:?} ascending");
        }
    }
}
