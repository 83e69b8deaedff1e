//! `/metrics`: a `Snapshot` in the Prometheus text format 0.0.4, written from one table
//! of metric families (name, type, help, how to read it from the snapshot).
//!
//! Written by hand rather than with `prometheus-client`: its text encoder writes
//! OpenMetrics (`# EOF`, counter TYPE lines without the `_total` suffix), which a 0.0.4
//! parser reads as a different, untyped family; and the table below is all lifeguard
//! needs (docs/metrics.md).
#![forbid(unsafe_code)]

use std::fmt::Write as _;

use super::inflight::RESPONSE_BUCKETS;
use crate::helper::desk::Snapshot;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Gauge,
    Counter,
    /// Points named `_bucket` (with `le`), `_sum` and `_count`; the buckets' upper
    /// bounds, +Inf left out (OTLP sends them as numbers, not as `le` text).
    Histogram(&'static [f64]),
}

/// A sample's suffix to the family's name (a histogram's `_bucket`, `_sum`, `_count`;
/// empty for the others), its labels and value.
pub type Point = (&'static str, Vec<(&'static str, String)>, f64);

struct Family {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    /// No points: the family is left out (a gauge lifeguard could not read is absent,
    /// not zero).
    read: fn(&Snapshot) -> Vec<Point>,
}

fn one(value: Option<f64>) -> Vec<Point> {
    value.map(|v| ("", Vec::new(), v)).into_iter().collect()
}

/// A histogram's points: each bucket's cumulative count by its upper bound, `+Inf` last
/// (the count), then the sum and the count.
fn histogram(bounds: &[f64], cumulative: impl Iterator<Item = u64>, sum: f64) -> Vec<Point> {
    let mut points: Vec<Point> = bounds
        .iter()
        .map(|b| number(*b))
        .chain(["+Inf".to_string()])
        .zip(cumulative)
        .map(|(le, n)| ("_bucket", vec![("le", le)], n as f64))
        .collect();
    let count = points.last().map_or(0.0, |p| p.2);
    points.push(("_sum", Vec::new(), sum));
    points.push(("_count", Vec::new(), count));
    points
}

fn flag(on: bool) -> f64 {
    if on {
        1.0
    } else {
        0.0
    }
}

const FAMILIES: &[Family] = &[
    Family {
        name: "lifeguard_ready",
        kind: Kind::Gauge,
        help: "1 while /readyz answers 200.",
        read: |s| one(Some(flag(s.ready()))),
    },
    Family {
        name: "lifeguard_draining",
        kind: Kind::Gauge,
        help: "1 from the instant SIGTERM arrives until the app has exited.",
        read: |s| one(Some(flag(s.draining()))),
    },
    Family {
        name: "lifeguard_signals_forwarded_total",
        kind: Kind::Counter,
        help: "Signals sent to the app, after rewriting, by signal.",
        read: |s| {
            s.forwarded
                .iter()
                .map(|(signal, n)| ("", vec![("signal", signal.to_string())], *n as f64))
                .collect()
        },
    },
    Family {
        name: "lifeguard_zombies_reaped_total",
        kind: Kind::Counter,
        help: "Orphaned processes reaped (the app itself not counted).",
        read: |s| one(Some(s.zombies_reaped as f64)),
    },
    Family {
        name: "lifeguard_cpu_usage_seconds_total",
        kind: Kind::Counter,
        help: "CPU time used by the app's cgroup (on ECS: the task), in seconds.",
        read: |s| one(s.sample.cpu_usage_seconds),
    },
    Family {
        name: "lifeguard_cpu_limit_cores",
        kind: Kind::Gauge,
        help: "CPU limit in cores: the smallest of the CFS quota, the cpuset and the online CPUs (on ECS: the task's vCPUs).",
        read: |s| one(s.sample.cpu_limit_cores),
    },
    Family {
        name: "lifeguard_cpu_utilization_percent",
        kind: Kind::Gauge,
        help: "CPU usage rate over the last second as a percentage of the CPU limit.",
        read: |s| one(s.sample.cpu_utilization_percent),
    },
    Family {
        name: "lifeguard_cpu_throttled_seconds_total",
        kind: Kind::Counter,
        help: "Time the app's cgroup was held back by its CFS quota, in seconds.",
        read: |s| one(s.sample.cpu_throttled_seconds),
    },
    Family {
        name: "lifeguard_cpu_periods_total",
        kind: Kind::Counter,
        help: "CPU quota enforcement periods elapsed with the app runnable (cgroup cpu.stat nr_periods).",
        read: |s| one(s.sample.cpu_periods.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_cpu_throttled_periods_total",
        kind: Kind::Counter,
        help: "Periods in which the CPU quota ran out and the cgroup was throttled (cpu.stat nr_throttled); against lifeguard_cpu_periods_total, the share of a saturated quota.",
        read: |s| one(s.sample.cpu_throttled_periods.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_memory_working_set_bytes",
        kind: Kind::Gauge,
        help: "Memory usage minus inactive file cache, clamped at 0 (cAdvisor's working set).",
        read: |s| one(s.sample.memory_working_set_bytes.map(|b| b as f64)),
    },
    Family {
        name: "lifeguard_memory_limit_bytes",
        kind: Kind::Gauge,
        help: "Memory limit: the cgroup's (on ECS: the task's), else the host's MemTotal.",
        read: |s| one(s.sample.memory_limit_bytes.map(|b| b as f64)),
    },
    Family {
        name: "lifeguard_memory_utilization_percent",
        kind: Kind::Gauge,
        help: "Working set as a percentage of the memory limit.",
        read: |s| one(s.sample.memory_utilization_percent),
    },
    Family {
        name: "lifeguard_memory_oom_kills_total",
        kind: Kind::Counter,
        help: "Processes the kernel's OOM killer ended in the app's cgroup.",
        read: |s| one(s.sample.memory_oom_kills.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_requests_in_flight",
        kind: Kind::Gauge,
        help: "Requests in flight on --inflight-port: the accept queue plus connections with a request outstanding.",
        read: |s| one(s.sample.requests_in_flight.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_inflight_port_listening",
        kind: Kind::Gauge,
        help: "1 while something listens on --inflight-port, 0 while nothing does (a wrong port: the drain cannot see the app's requests).",
        read: |s| one(s.sample.inflight_port_listening.map(flag)),
    },
    Family {
        name: "lifeguard_accept_queue_length",
        kind: Kind::Gauge,
        help: "Connections waiting in the accept queue of the listener on --inflight-port.",
        read: |s| one(s.sample.accept_queue_length.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_listen_backlog",
        kind: Kind::Gauge,
        help: "Backlog of the listener on --inflight-port (summed over its listeners): connections its accept queue holds before the kernel drops new ones.",
        read: |s| one(s.sample.listen.backlog.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_accept_queue_oldest_seconds",
        kind: Kind::Gauge,
        help: "How long the oldest connection in the accept queue of --inflight-port has waited since its handshake; 0 when none waits.",
        read: |s| one(s.sample.listen.oldest_queued_seconds),
    },
    Family {
        name: "lifeguard_request_oldest_seconds",
        kind: Kind::Gauge,
        help: "Age of the oldest request on --inflight-port received and not yet answered (data in after the connection last sent), from the kernel's per-connection clocks; 0 when none waits.",
        read: |s| one(s.sample.request_oldest_seconds),
    },
    Family {
        name: "lifeguard_response_seconds",
        kind: Kind::Histogram(&RESPONSE_BUCKETS),
        help: "Sampled response times on --inflight-port: per connection and look, the last answer sent since the previous look, from its request's last byte in to its last byte out (docs/metrics.md: what it cannot see).",
        read: |s| match &s.sample.responses {
            Some(r) => histogram(&RESPONSE_BUCKETS, r.cumulative(), r.sum_seconds),
            None => Vec::new(),
        },
    },
    Family {
        name: "lifeguard_listen_overflows_total",
        kind: Kind::Counter,
        help: "Connections dropped because an accept queue was full, in lifeguard's network namespace (TcpExt ListenOverflows).",
        read: |s| one(s.sample.listen.overflows.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_listen_drops_total",
        kind: Kind::Counter,
        help: "Connections dropped at a listener for any reason, overflows included, in lifeguard's network namespace (TcpExt ListenDrops).",
        read: |s| one(s.sample.listen.drops.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_connections_accepted_total",
        kind: Kind::Counter,
        help: "TCP connections accepted in lifeguard's network namespace, lifeguard's own endpoint included (Tcp PassiveOpens); one per request means no keep-alive.",
        read: |s| one(s.sample.listen.passive_opens.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_app_processes",
        kind: Kind::Gauge,
        help: "Processes in the app's tree (lifeguard's descendants), zombies included.",
        read: |s| one(s.sample.app.processes.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_app_threads",
        kind: Kind::Gauge,
        help: "Threads of the app's processes, summed (Threads in /proc/PID/status).",
        read: |s| one(s.sample.app.threads.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_app_threads_running",
        kind: Kind::Gauge,
        help: "Runnable threads of the app's processes (state R), counted while the CPU quota throttles (0 otherwise): far more than the quota's CPUs starve every server in the container, health checks included.",
        read: |s| one(s.sample.app.threads_running.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_app_open_fds",
        kind: Kind::Gauge,
        help: "Open file descriptors of the app's processes, summed.",
        read: |s| one(s.sample.app.open_fds.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_app_max_fds",
        kind: Kind::Gauge,
        help: "The smallest soft descriptor limit (RLIMIT_NOFILE) among the app's processes: the first any of them can hit.",
        read: |s| one(s.sample.app.max_fds.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_app_resident_memory_bytes",
        kind: Kind::Gauge,
        help: "Resident memory of the app's processes, summed (VmRSS; pages shared between processes count once per process).",
        read: |s| one(s.sample.app.resident_bytes.map(|n| n as f64)),
    },
    Family {
        name: "lifeguard_task_metadata_failures_total",
        kind: Kind::Counter,
        help: "ECS task metadata fetches that failed (the cgroup stood in).",
        read: |s| match s.metadata_failures {
            0 => Vec::new(),
            n => one(Some(n as f64)),
        },
    },
    Family {
        name: "lifeguard_cloudwatch_requests_total",
        kind: Kind::Counter,
        help: "PutMetricData calls by result (ok, throttled, timeout, error), once CloudWatch publishing is on.",
        read: |s| {
            s.cloudwatch
                .iter()
                .flatten()
                .map(|(outcome, n)| ("", vec![("result", outcome.label().to_string())], *n as f64))
                .collect()
        },
    },
    Family {
        name: "lifeguard_cloudwatch_publishing",
        kind: Kind::Gauge,
        help: "1 while CloudWatch publishing runs; 0 when METRICS_NAMESPACE is set but it could not start (no AWS region) or is being restarted.",
        read: |s| match s.cloudwatch {
            Some(_) => one(Some(flag(s.cloudwatch_publishing))),
            None => Vec::new(),
        },
    },
    Family {
        name: "lifeguard_drain_seconds",
        kind: Kind::Gauge,
        help: "How long the last drain took, from its SIGTERM to the stop signal relayed (or the app's exit).",
        read: |s| one(s.drain_seconds),
    },
    Family {
        name: "lifeguard_scale_in_protected",
        kind: Kind::Gauge,
        help: "1 while ECS keeps this task out of scale-in (--scale-in-protection: a request has been in flight longer than AFTER), 0 otherwise.",
        read: |s| one(s.scale_in_protected.map(flag)),
    },
    Family {
        name: "lifeguard_helper_failures_total",
        kind: Kind::Counter,
        help: "Panics of each helper thread (endpoint, app-check, sampler, cloudwatch, scale-in); each is restarted, supervision goes on.",
        read: |s| {
            s.helper_failures
                .iter()
                .map(|(helper, n)| ("", vec![("helper", helper.name().to_string())], *n as f64))
                .collect()
        },
    },
    Family {
        name: "lifeguard_helper_restarts_total",
        kind: Kind::Counter,
        help: "Times supervision started the helper process (this endpoint's) again after it died or hung; signals, reaping and the drain went on meanwhile.",
        read: |s| one(Some(s.helper_restarts as f64)),
    },
    Family {
        name: "lifeguard_build_info",
        kind: Kind::Gauge,
        help: "Always 1; the version of lifeguard and the commit it was built from as labels.",
        read: |_| {
            vec![(
                "",
                vec![
                    ("version", env!("CARGO_PKG_VERSION").to_string()),
                    ("commit", env!("BUILT_COMMIT").to_string()),
                ],
                1.0,
            )]
        },
    },
];

/// One family as read from a snapshot, for the other ways out (OTLP): the same table,
/// so every figure has one name and one meaning wherever it goes.
pub struct Read {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub points: Vec<Point>,
}

/// Every family with points in `snapshot`, in the table's order.
pub fn families(snapshot: &Snapshot) -> impl Iterator<Item = Read> + '_ {
    FAMILIES.iter().filter_map(move |family| {
        let points = (family.read)(snapshot);
        (!points.is_empty()).then_some(Read {
            name: family.name,
            kind: family.kind,
            help: family.help,
            points,
        })
    })
}

/// The whole exposition.
pub fn encode(snapshot: &Snapshot) -> String {
    let mut out = String::with_capacity(4096);
    for family in families(snapshot) {
        let points = family.points;
        let kind = match family.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram(_) => "histogram",
        };
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} {kind}", family.name);
        for (suffix, labels, value) in points {
            out.push_str(family.name);
            out.push_str(suffix);
            if !labels.is_empty() {
                out.push('{');
                for (i, (name, value)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{name}=\"");
                    escape_label(&mut out, value);
                    out.push('"');
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", number(value));
        }
    }
    out
}

/// Label values escape backslash, double quote and newline (text format 0.0.4).
fn escape_label(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Whole numbers without a fraction, others in Rust's shortest round-trip form; the
/// parser's spellings for the non-finite.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else if value.abs() >= 1e15 || value.abs() < 1e-6 {
        // Rust's plain form spells 1e300 with 300 digits.
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::Phase;
    use crate::helper::desk::Desk;
    use crate::helper::health::AppCheck;
    use crate::helper::metrics::sample::{AppFigures, ListenFigures, Sample};
    use crate::signal_names::{Signal, TERM};

    #[test]
    fn lifecycle_families_are_always_there() {
        let board = crate::board::Board::new().unwrap();
        let desk = Desk::new(
            board.for_helper().unwrap(),
            Vec::new(),
            crate::signal_names::TERM,
        );
        board.set_phase(Phase::Running);
        desk.set_check(AppCheck::Passing);
        board.signal_forwarded(TERM);
        board.signal_forwarded(TERM);
        board.signal_forwarded(Signal(libc::SIGHUP));
        board.zombie_reaped();
        let text = encode(&desk.snapshot());
        for line in [
            "# TYPE lifeguard_ready gauge",
            "lifeguard_ready 1",
            "lifeguard_draining 0",
            "# TYPE lifeguard_signals_forwarded_total counter",
            "lifeguard_signals_forwarded_total{signal=\"SIGTERM\"} 2",
            "lifeguard_signals_forwarded_total{signal=\"SIGHUP\"} 1",
            "lifeguard_zombies_reaped_total 1",
            &format!(
                "lifeguard_build_info{{version=\"{}\",commit=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION"),
                env!("BUILT_COMMIT")
            ),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // Nothing sampled yet: no resource gauges at all, not zeros.
        assert!(!text.contains("lifeguard_cpu"), "{text}");
        assert!(!text.contains("lifeguard_requests_in_flight"), "{text}");
        assert!(!text.contains("lifeguard_app_"), "{text}");
        assert!(!text.contains("lifeguard_listen_"), "{text}");
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn every_sampled_gauge_is_written_with_help_and_type() {
        let desk = Desk::new(
            crate::board::Board::new().unwrap().for_helper().unwrap(),
            Vec::new(),
            crate::signal_names::TERM,
        );
        desk.set_sample(Sample {
            taken: Some(std::time::Instant::now()),
            cpu_usage_seconds: Some(12.5),
            cpu_limit_cores: Some(0.5),
            cpu_utilization_percent: Some(99.87),
            cpu_throttled_seconds: Some(3.25),
            memory_working_set_bytes: Some(268435456),
            memory_limit_bytes: Some(536870912),
            memory_utilization_percent: Some(50.0),
            memory_oom_kills: Some(0),
            requests_in_flight: Some(7),
            accept_queue_length: Some(3),
            request_oldest_seconds: Some(1.75),
            responses: Some({
                let mut r = crate::helper::metrics::inflight::ResponseTimes::default();
                for ms in [12, 200, 200, 2000] {
                    r.record(std::time::Duration::from_millis(ms));
                }
                r
            }),
            listen: ListenFigures {
                backlog: Some(5),
                oldest_queued_seconds: Some(2.5),
                overflows: Some(17),
                drops: Some(19),
                passive_opens: Some(3816),
            },
            app: AppFigures {
                processes: Some(3),
                threads: Some(205),
                open_fds: Some(10_012),
                max_fds: Some(1024),
                resident_bytes: Some(52_428_800),
                threads_running: None,
            },
            ..Default::default()
        });
        let text = encode(&desk.snapshot());
        for (name, kind, value) in [
            ("lifeguard_cpu_usage_seconds_total", "counter", "12.5"),
            ("lifeguard_cpu_limit_cores", "gauge", "0.5"),
            ("lifeguard_cpu_utilization_percent", "gauge", "99.87"),
            ("lifeguard_cpu_throttled_seconds_total", "counter", "3.25"),
            ("lifeguard_memory_working_set_bytes", "gauge", "268435456"),
            ("lifeguard_memory_limit_bytes", "gauge", "536870912"),
            ("lifeguard_memory_utilization_percent", "gauge", "50"),
            ("lifeguard_memory_oom_kills_total", "counter", "0"),
            ("lifeguard_requests_in_flight", "gauge", "7"),
            ("lifeguard_accept_queue_length", "gauge", "3"),
            ("lifeguard_listen_backlog", "gauge", "5"),
            ("lifeguard_accept_queue_oldest_seconds", "gauge", "2.5"),
            ("lifeguard_listen_overflows_total", "counter", "17"),
            ("lifeguard_listen_drops_total", "counter", "19"),
            ("lifeguard_connections_accepted_total", "counter", "3816"),
            ("lifeguard_app_processes", "gauge", "3"),
            ("lifeguard_app_threads", "gauge", "205"),
            ("lifeguard_app_open_fds", "gauge", "10012"),
            ("lifeguard_app_max_fds", "gauge", "1024"),
            ("lifeguard_app_resident_memory_bytes", "gauge", "52428800"),
            ("lifeguard_request_oldest_seconds", "gauge", "1.75"),
            ("lifeguard_response_seconds_count", "histogram", "4"),
            ("lifeguard_response_seconds_sum", "histogram", "2.412"),
        ] {
            let name = match kind {
                "histogram" => {
                    let family = name.trim_end_matches("_count").trim_end_matches("_sum");
                    assert!(text.contains(&format!("# TYPE {family} histogram\n")));
                    assert!(
                        text.contains(&format!("\n{name} {value}\n")),
                        "{name} {value}\n{text}"
                    );
                    continue;
                }
                _ => name,
            };
            assert!(text.contains(&format!("# HELP {name} ")), "{name}\n{text}");
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
            assert!(
                text.contains(&format!("\n{name} {value}\n")),
                "{name} {value}\n{text}"
            );
        }
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_up_to_inf_then_sum_and_count() {
        let points = histogram(&[0.5, 1.0], [1, 3, 4].into_iter(), 2.25);
        let lines: Vec<String> = points
            .iter()
            .map(|(suffix, labels, v)| {
                let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{suffix}{{{}}} {v}", labels.join(","))
            })
            .collect();
        assert_eq!(
            lines,
            [
                "_bucket{le=0.5} 1",
                "_bucket{le=1} 3",
                "_bucket{le=+Inf} 4",
                "_sum{} 2.25",
                "_count{} 4"
            ]
        );
    }

    #[test]
    fn label_values_and_numbers_are_escaped_and_spelled_as_the_parser_wants() {
        let mut out = String::new();
        escape_label(&mut out, "a\\b\"c\nd");
        assert_eq!(out, "a\\\\b\\\"c\\nd");
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.125), "0.125");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(1e300), "1e300");
        assert_eq!(number(2.5e-9), "2.5e-9");
    }
}
