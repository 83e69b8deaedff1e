//! When to publish and what (DESIGN §5, issue #7), as a pure machine: the 1-second
//! samples go in, batches come out. Every rule came from a failure in a real load test
//! (CONTEXT.md): one PutMetricData every interval; a burst (an in-flight sample at or
//! above the threshold) publishes at once, at most every 3 s, and every publish restarts
//! the interval; CPU and memory stay out of the first max(2 × interval, 20 s).
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

/// The shortest time between two publishes that a burst may cause.
pub const BURST_FLOOR: Duration = Duration::from_secs(3);
/// The start-up quiet period's floor: start-up bursts would fake saturation.
const QUIET_FLOOR: Duration = Duration::from_secs(20);

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
    /// The interval's 1-second samples, as a statistic set.
    Count {
        samples: u64,
        sum: f64,
        min: f64,
        max: f64,
    },
}

/// What a sample brings: in-flight only with an in-flight source; CPU and memory when
/// the sampler could read them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    pub in_flight: Option<u64>,
    pub cpu_percent: Option<f64>,
    pub memory_percent: Option<f64>,
}

#[derive(Clone, Debug)]
pub struct Plan {
    interval: Duration,
    burst_threshold: Option<u64>,
    started: Instant,
    last_publish: Option<Instant>,
    window: Window,
}

/// The samples since the last publish.
#[derive(Clone, Debug, Default)]
struct Window {
    in_flight: Option<(u64, f64, f64, f64)>,
    cpu_sum: f64,
    cpu_samples: u32,
    memory: Option<f64>,
}

impl Plan {
    pub fn new(interval: Duration, burst_threshold: Option<u64>, now: Instant) -> Plan {
        Plan {
            interval,
            burst_threshold,
            started: now,
            last_publish: None,
            window: Window::default(),
        }
    }

    /// When the next regular publish is due.
    pub fn deadline(&self) -> Instant {
        self.last_publish.unwrap_or(self.started) + self.interval
    }

    /// A 1-second sample; true when it is a burst that may be published now.
    pub fn record(&mut self, reading: Reading, now: Instant) -> bool {
        if let Some(n) = reading.in_flight {
            let n = n as f64;
            self.window.in_flight = Some(match self.window.in_flight {
                None => (1, n, n, n),
                Some((count, sum, min, max)) => (count + 1, sum + n, min.min(n), max.max(n)),
            });
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
        if let Some((samples, sum, min, max)) = window.in_flight {
            batch.push(Datum {
                name: "RequestsInFlight",
                value: Value::Count {
                    samples,
                    sum,
                    min,
                    max,
                },
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
        }
    }

    fn names(batch: &[Datum]) -> Vec<&'static str> {
        batch.iter().map(|d| d.name).collect()
    }

    #[test]
    fn every_interval_a_statistic_set_and_no_cpu_or_memory_in_the_quiet_start() {
        let t0 = Instant::now();
        let mut plan = Plan::new(Duration::from_secs(10), None, t0);
        assert_eq!(plan.deadline(), at(t0, 10.0));
        for (s, n) in [(1.0, 3), (2.0, 5), (3.0, 1)] {
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
                value: Value::Count {
                    samples: 3,
                    sum: 9.0,
                    min: 1.0,
                    max: 5.0
                }
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
        assert_eq!(
            batch[0].value,
            Value::Count {
                samples: 2,
                sum: 99.0,
                min: 49.0,
                max: 50.0
            }
        );
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
        assert_eq!(
            batch[0].value,
            Value::Count {
                samples: 3,
                sum: 240.0,
                min: 70.0,
                max: 90.0
            }
        );
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
}
