//! CloudWatch publishing against a real CloudWatch emulator: moto
//! (PyPI) behind tests/support/cloudwatch_front.py, which speaks the Rust SDK's Smithy
//! RPC-v2 CBOR, records every datum as sent, and injects faults. Every rule of the
//! contract is checked on what arrives: cadence, dimensions, resolution, units,
//! rounding, RequestsInFlight as raw samples whose p50 is the median lifeguard sampled
//! under a load that changes inside the interval, the quiet start, bursts and their
//! 3-second floor, and the outages, each with a signal still forwarded at once and the
//! exit on time.
mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cloudwatch::*;
use common::*;

/// A namespace of this test's own.
fn namespace(test: &str) -> String {
    format!("LifeguardTest/{test}-{}", std::process::id())
}

/// lifeguard (PID 1) publishing to `emulator`, its endpoint on, supervising the testapp;
/// `env` adds or overrides variables.
fn start_publishing(emulator: &Emulator, flags: &[&str], env: &[(&str, &str)]) -> (Run, u16) {
    let port = free_port();
    let listen = listen_flag(port);
    let mut all = vec!["-v", "--listen", &listen, "--drain-delay", "0"];
    all.extend_from_slice(flags);
    let endpoint = emulator.url();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let run = start_with(Mode::Pid1, &args(&all, &[]), move |cmd| {
        cmd.env("AWS_ENDPOINT_URL_CLOUDWATCH", &endpoint)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "AKIDLIFEGUARDTEST")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            // Never ask the instance metadata address: loopback only.
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", "/nonexistent")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_ENDPOINT_URL");
        for (k, v) in &env {
            if v.is_empty() {
                cmd.env_remove(k);
            } else {
                cmd.env(k, v);
            }
        }
    });
    run.ready();
    (run, port)
}

/// A listener the test holds without accepting, with `n` connections queued: the
/// in-flight figure of its port is then `n` for as long as the test wants.
fn queued(n: usize) -> (TcpListener, Vec<std::net::TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let clients = (0..n)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    (listener, clients)
}

#[test]
fn every_interval_high_resolution_raw_samples_with_the_dimensions() {
    let emulator = Emulator::start();
    let ns = namespace("cadence");
    let (listener, _clients) = queued(3);
    let port = listener.local_addr().unwrap().port().to_string();
    let (run, _) = start_publishing(
        &emulator,
        &["--inflight-port", &port],
        &[
            ("METRICS_NAMESPACE", &ns),
            ("METRICS_INTERVAL", "2"),
            ("METRICS_DIMENSIONS", "ClusterName=test,ServiceName=web"),
        ],
    );
    let calls = calls_until(&emulator, &ns, "four publishes", |c| c.len() >= 4);
    // Cadence: one call every 2 s (the first after 2 s).
    let gaps: Vec<f64> = calls.windows(2).map(|w| w[1].at - w[0].at).collect();
    for gap in &gaps[..3] {
        assert!((1.5..=2.7).contains(gap), "gaps {gaps:?}");
    }
    for call in &calls[..4] {
        // The quiet start: no CPU or memory in the first 20 s.
        assert_eq!(call.data.len(), 1, "{call:#?}");
        let datum = call.metric("RequestsInFlight").unwrap();
        assert_eq!(datum["storage_resolution"], 1);
        assert_eq!(datum["unit"], "Count");
        assert_eq!(
            datum["dimensions"],
            serde_json::json!({"ClusterName": "test", "ServiceName": "web"})
        );
        // The interval's 1-second samples as raw values: 3 in flight (queued) each
        // time, so one value and how often it was sampled.
        assert!(datum["statistic_values"].is_null(), "{datum}");
        assert_eq!(datum["values"], serde_json::json!([3.0]), "{datum}");
        let n = datum["counts"][0].as_f64().unwrap();
        assert!((1.0..=3.0).contains(&n), "{datum}");
    }
    drop(run);
}

/// An app port the test controls: every connection carries one HTTP request, which the
/// app side accepts and leaves unread until the test answers it, so the requests in
/// flight on the port are exactly the ones held. (Unread bytes on an accepted
/// connection are how lifeguard sees a request outstanding, from the kernel.)
struct HeldRequests {
    listener: TcpListener,
    /// (the client's end, the app's end) of each request in flight.
    held: Vec<(TcpStream, TcpStream)>,
}

impl HeldRequests {
    fn new() -> HeldRequests {
        HeldRequests {
            listener: TcpListener::bind("127.0.0.1:0").unwrap(),
            held: Vec::new(),
        }
    }

    fn port(&self) -> u16 {
        self.listener.local_addr().unwrap().port()
    }

    /// Sends or answers requests until `n` are in flight.
    fn hold(&mut self, n: usize) {
        while self.held.len() < n {
            let mut client = TcpStream::connect(("127.0.0.1", self.port())).unwrap();
            client
                .write_all(b"GET /slow HTTP/1.1\r\nHost: app\r\n\r\n")
                .unwrap();
            let (app, _) = self.listener.accept().unwrap();
            self.held.push((client, app));
        }
        while self.held.len() > n {
            let (mut client, mut app) = self.held.pop().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 256];
            while !request.ends_with(b"\r\n\r\n") {
                let got = app.read(&mut buf).unwrap();
                assert!(got > 0, "the client went away");
                request.extend_from_slice(&buf[..got]);
            }
            app.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                .unwrap();
            drop(app);
            let mut answer = String::new();
            client.read_to_string(&mut answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
    }
}

/// lifeguard's own `lifeguard_requests_in_flight`, or None before its first sample.
fn in_flight_on_metrics(port: u16) -> Option<u64> {
    let (_, body) = get(port, "/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix("lifeguard_requests_in_flight "))
        .map(|n| n.trim().parse::<f64>().unwrap() as u64)
}

/// Every value `/metrics` showed for the in-flight gauge, polled every 50 ms until
/// dropped: each 1-second sample stays up for a second, so none goes unseen.
struct SeenOnMetrics {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<BTreeSet<u64>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SeenOnMetrics {
    fn watch(port: u16) -> SeenOnMetrics {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        let (stop2, seen2) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                if let Some(n) = in_flight_on_metrics(port) {
                    seen2.lock().unwrap().insert(n);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        SeenOnMetrics {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn seen(&self) -> BTreeSet<u64> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for SeenOnMetrics {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The in-flight samples behind each publish, from lifeguard's debug log (`-vv`), in
/// the order of the publishes.
fn sampled_per_publish(run: &Run) -> Vec<Vec<f64>> {
    run.stderr()
        .iter()
        .filter(|l| l.contains("CloudWatch publish "))
        .map(|l| {
            let list = l
                .split_whitespace()
                .find_map(|w| w.strip_prefix("in_flight_samples="))
                .unwrap_or_else(|| panic!("no in-flight samples in {l}"));
            list.split(',').map(|n| n.parse().unwrap()).collect()
        })
        .collect()
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

#[test]
fn under_a_load_changing_inside_the_interval_the_p50_that_arrives_is_the_median_sampled() {
    let emulator = Emulator::start();
    let ns = namespace("p50");
    let mut app = HeldRequests::new();
    let app_port = app.port().to_string();
    // -v (start_publishing) and -v: debug, where each publish lists its samples.
    let (run, port) = start_publishing(
        &emulator,
        &["-v", "--inflight-port", &app_port],
        &[("METRICS_NAMESPACE", &ns), ("METRICS_INTERVAL", "10")],
    );
    let metrics = SeenOnMetrics::watch(port);
    // A new level every 2.5 s for 30 s: each 10-second interval sees about four.
    for level in [4, 9, 2, 13, 6, 0, 11, 3, 8, 15, 1, 7] {
        app.hold(level);
        wait_until(&format!("{level} in flight on /metrics"), || {
            (in_flight_on_metrics(port) == Some(level as u64)).then_some(())
        });
        // Load shaping, not synchronisation: the level lasts 2.5 s whatever happens.
        std::thread::sleep(Duration::from_millis(2500));
    }
    let sampled = sampled_per_publish(&run);
    assert!(
        sampled.len() >= 3,
        "three publishes in 30 s expected:\n{}",
        run.transcript()
    );
    let calls = calls_until(&emulator, &ns, "every logged publish", |c| {
        c.len() >= sampled.len()
    });
    let stored = emulator.stored(&ns);
    let p50s = emulator.percentile(&ns, "RequestsInFlight", 50.0);
    let statistics = emulator.statistics(&ns);
    let api_points = statistics
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "RequestsInFlight")
        .expect("RequestsInFlight through GetMetricStatistics")["datapoints"]
        .as_array()
        .unwrap()
        .clone();
    let seen = metrics.seen();
    let mut changing = 0;
    for (k, (samples, call)) in sampled.iter().zip(&calls).enumerate() {
        let what = format!("publish {k}: sampled {samples:?}");
        // About ten 1-second samples per 10-second interval.
        assert!((9..=11).contains(&samples.len()), "{what}");
        // lifeguard's log is what its sampler produced: every value was on /metrics.
        for n in samples {
            assert!(
                seen.contains(&(*n as u64)),
                "{what}; /metrics showed {seen:?}"
            );
        }
        if samples.iter().any(|n| *n != samples[0]) {
            changing += 1;
        }
        // What was sent: one datum of raw values, percentile-ready, no statistic set.
        let datums = call.metrics("RequestsInFlight");
        assert_eq!(datums.len(), 1, "{what}: {call:#?}");
        let datum = datums[0];
        assert!(datum["statistic_values"].is_null(), "{what}: {datum}");
        let sent = samples_of(datum).unwrap_or_else(|| panic!("{what}: no Values: {datum}"));
        assert!(datum["values"].as_array().unwrap().len() <= 150, "{datum}");
        assert_eq!(sorted(&sent), sorted(samples), "{what}: sent {datum}");
        // What moto stored: one raw point per sample, at the datum's second.
        let second = datum["timestamp"].as_f64().unwrap().floor();
        let points: Vec<&serde_json::Value> = stored
            .iter()
            .filter(|r| r["name"] == "RequestsInFlight")
            .filter(|r| r["timestamp"].as_f64().unwrap().floor() == second)
            .collect();
        assert!(
            points.iter().all(|r| r["statistic_values"].is_null()),
            "{what}: moto holds a statistic set: {points:?}"
        );
        let raw: Vec<f64> = points
            .iter()
            .map(|r| r["value"].as_f64().unwrap())
            .collect();
        assert_eq!(sorted(&raw), sorted(samples), "{what}: moto stored {raw:?}");
        // The same through the CloudWatch API (GetMetricStatistics, Period 1).
        let point = api_points
            .iter()
            .find(|p| {
                let t = p["Timestamp"].as_f64().unwrap();
                (t..t + 1.0).contains(&datum["timestamp"].as_f64().unwrap())
            })
            .unwrap_or_else(|| panic!("{what}: no datapoint in {api_points:?}"));
        assert_eq!(
            point["SampleCount"].as_f64().unwrap(),
            samples.len() as f64,
            "{point}"
        );
        assert_eq!(
            point["Sum"].as_f64().unwrap(),
            samples.iter().sum::<f64>(),
            "{point}"
        );
        // The p50 a 10-second alarm would take of this task: the median lifeguard sampled.
        let p50 = p50s
            .iter()
            .find(|p| p["timestamp"].as_f64() == Some(second))
            .unwrap_or_else(|| panic!("{what}: no p50 for {second} in {p50s:?}"));
        assert_eq!(p50["raw"].as_u64(), Some(samples.len() as u64), "{p50}");
        assert_eq!(
            p50["value"].as_f64(),
            Some(nearest_rank(samples, 50.0)),
            "{what}: p50 {p50}"
        );
        eprintln!(
            "{what}; sent values {} counts {}; p50 {}",
            datum["values"], datum["counts"], p50["value"]
        );
    }
    let sizes: Vec<u64> = emulator
        .log()
        .iter()
        .filter(|r| r["operation"] == "PutMetricData")
        .filter_map(|r| r["bytes"].as_u64())
        .collect();
    eprintln!("PutMetricData bodies (bytes): {sizes:?}");
    assert!(
        changing >= 2,
        "the load should have changed inside at least two intervals: {sampled:?}"
    );
    drop(run);
}

#[test]
fn cpu_and_memory_come_after_the_quiet_start_as_rounded_percent_of_the_task() {
    // On ECS (the metadata stand-in: 0.25 vCPU, 512 MiB, using 0.2 cores and 216 MiB),
    // after max(2 × 2 s, 20 s).
    let emulator = Emulator::start();
    let standin = common::ecs::MetadataStandIn::start();
    let ns = namespace("quiet");
    let started = Instant::now();
    let (run, _) = start_publishing(
        &emulator,
        &[],
        &[
            ("METRICS_NAMESPACE", &ns),
            ("METRICS_INTERVAL", "2"),
            ("ECS_CONTAINER_METADATA_URI_V4", &standin.base),
        ],
    );
    let calls = calls_until(&emulator, &ns, "CPU and memory", |c| {
        c.iter().any(|call| call.metric("CpuUtilization").is_some())
    });
    let first = calls
        .iter()
        .find(|c| c.metric("CpuUtilization").is_some())
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(20),
        "CPU published after {waited:?}"
    );
    // Before it: nothing (no in-flight source, no CPU or memory yet).
    let cpu = first.metric("CpuUtilization").unwrap();
    let memory = first.metric("MemoryUtilization").unwrap();
    for datum in [cpu, memory] {
        assert_eq!(datum["unit"], "Percent");
        assert_eq!(datum["storage_resolution"], 1);
        let v = datum["value"].as_f64().unwrap();
        assert!(
            (v * 100.0 - (v * 100.0).round()).abs() < 1e-6,
            "{v} has more than 2 decimals"
        );
        assert!((0.0..=100.0).contains(&v));
    }
    let cpu = cpu["value"].as_f64().unwrap();
    assert!(
        (70.0..=90.0).contains(&cpu),
        "task CPU {cpu} %, about 80 expected"
    );
    // 216 MiB of 512 MiB.
    assert_eq!(memory["value"].as_f64().unwrap(), 42.19);
    assert!(
        first.metric("RequestsInFlight").is_none(),
        "no in-flight source given"
    );
    drop(run);
}

#[test]
fn a_burst_is_published_at_once_and_at_most_every_3_seconds() {
    let emulator = Emulator::start();
    let ns = namespace("burst");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let port_text = port.to_string();
    let (run, _) = start_publishing(
        &emulator,
        &["--inflight-port", &port_text],
        &[
            ("METRICS_NAMESPACE", &ns),
            ("METRICS_INTERVAL", "30"),
            ("METRICS_BURST_THRESHOLD", "5"),
        ],
    );
    // Under the threshold: nothing for a while (the interval is 30 s).
    let _few: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let burst_at = Instant::now();
    let _many: Vec<_> = (0..6)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let calls = calls_until(&emulator, &ns, "a burst publish", |c| !c.is_empty());
    let seen = burst_at.elapsed();
    assert!(
        seen < Duration::from_millis(2500),
        "burst published {seen:?} after it began"
    );
    // A burst goes out as raw samples too: the last one is the 8 in flight.
    let samples = samples_of(calls[0].metric("RequestsInFlight").unwrap()).unwrap();
    assert_eq!(
        samples.iter().copied().fold(0.0, f64::max),
        8.0,
        "{samples:?}"
    );
    // Still bursting: the next publishes come every 3 s, not every sample.
    let calls = calls_until(&emulator, &ns, "three burst publishes", |c| c.len() >= 3);
    for pair in calls.windows(2).take(2) {
        let gap = pair[1].at - pair[0].at;
        assert!((2.9..=4.5).contains(&gap), "burst publishes {gap} s apart");
    }
    drop(run);
}

/// The outage test: with `fault` in force, publishes fail and are counted under
/// `result`, one warning says so, signals are still forwarded at once, and the stop is
/// on time (the exit flush bounded to 2 s).
fn through_an_outage(fault: &str, result: &str, env: &[(&str, &str)]) {
    let emulator = Emulator::start();
    emulator.fault(fault);
    let ns = namespace(&format!(
        "outage-{}",
        fault.split_whitespace().next().unwrap()
    ));
    let mut vars = vec![
        ("METRICS_NAMESPACE", ns.as_str()),
        ("METRICS_INTERVAL", "1"),
    ];
    vars.extend_from_slice(env);
    // An in-flight source, so that every interval has data to send. The stop relays at
    // the first look with nothing in flight (--drain-quiet 0): this test runs in the
    // host's network namespace, whose passive-open counter every other test moves, and
    // times the exit, not the drain (tests/drain.rs does).
    // A listener of the test's own on it: a drain whose port never listened would hold
    // to --drain-max.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let inflight = listener.local_addr().unwrap().port().to_string();
    let (mut run, port) = start_publishing(
        &emulator,
        &["--inflight-port", &inflight, "--drain-quiet", "0"],
        &vars,
    );
    let counter = format!("lifeguard_cloudwatch_requests_total{{result=\"{result}\"}}");
    let until = Instant::now() + PATIENCE;
    loop {
        let (_, body) = get(port, "/metrics");
        let n: f64 = body
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{counter} ")))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0);
        if n >= 2.0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "no two failures counted as {result}:\n{body}\n{}",
            run.transcript()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let forwarded = Instant::now();
    run.signal(libc::SIGUSR1);
    run.expect_line("signal USR1");
    assert!(
        forwarded.elapsed() < Duration::from_millis(500),
        "a signal took {:?} during a CloudWatch outage ({fault})",
        forwarded.elapsed()
    );
    let stop = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    assert!(
        stop.elapsed() < Duration::from_millis(3500),
        "the exit took {:?} during a CloudWatch outage ({fault})",
        stop.elapsed()
    );
    let warnings = run
        .stderr()
        .iter()
        .filter(|l| l.contains("CloudWatch PutMetricData failed"))
        .count();
    assert_eq!(
        warnings,
        1,
        "one warning for the outage, not one per call:\n{}",
        run.transcript()
    );
    // (A refusing emulator cannot be asked; nothing reached it anyway.)
    if !fault.starts_with("refuse") {
        assert!(
            emulator.calls(&ns).is_empty(),
            "{fault}: something got through"
        );
    }
}

#[test]
fn an_endpoint_answering_500_costs_only_the_data() {
    through_an_outage("500", "error", &[]);
}

#[test]
fn throttling_is_counted_as_such() {
    through_an_outage("throttle", "throttled", &[]);
}

#[test]
fn an_endpoint_that_never_answers_times_out_within_the_interval() {
    through_an_outage("hang", "timeout", &[]);
}

#[test]
fn an_endpoint_that_is_down_costs_only_the_data() {
    through_an_outage("refuse secs=600", "error", &[]);
}

#[test]
fn missing_credentials_cost_only_the_data() {
    through_an_outage(
        "none",
        "error",
        &[("AWS_ACCESS_KEY_ID", ""), ("AWS_SECRET_ACCESS_KEY", "")],
    );
}

#[test]
fn missing_credentials_are_said_on_one_line_and_instance_metadata_is_asked_once_a_lookup() {
    // A stand-in for the instance metadata address, on loopback: it counts connections
    // and closes each at once (nothing answers outside EC2).
    let imds = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let imds_url = format!("http://{}", imds.local_addr().unwrap());
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let asked = asked.clone();
        std::thread::spawn(move || {
            for conn in imds.incoming() {
                asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(conn);
            }
        });
    }
    let emulator = Emulator::start();
    let ns = namespace("credentials");
    // A listener of the test's own: the stop below must not hold for a port that never
    // listened.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let inflight = listener.local_addr().unwrap().port().to_string();
    let (mut run, port) = start_publishing(
        &emulator,
        &["--inflight-port", &inflight, "--log-format", "json"],
        &[
            ("METRICS_NAMESPACE", &ns),
            ("METRICS_INTERVAL", "1"),
            ("AWS_ACCESS_KEY_ID", ""),
            ("AWS_SECRET_ACCESS_KEY", ""),
            ("AWS_EC2_METADATA_DISABLED", ""),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds_url),
        ],
    );
    let failed = |port| -> f64 {
        let (_, body) = get(port, "/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix("lifeguard_cloudwatch_requests_total{result=\"error\"} "))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    };
    wait_until("three failed publishes", || {
        (failed(port) >= 3.0).then_some(())
    });
    let calls = failed(port) as usize;
    let lookups = asked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..=calls + 1).contains(&lookups),
        "the instance metadata address was asked {lookups} times for {calls} publishes"
    );
    let line = run.expect_log("no AWS credentials");
    let json: serde_json::Value = serde_json::from_str(&line).expect("one whole JSON line");
    let msg = json["msg"].as_str().unwrap();
    assert!(
        msg.contains(
            "(tried: Environment, Profile, WebIdentityToken, EcsContainer, Ec2InstanceMetadata)"
        ) && msg.contains("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
            && !msg.contains('…'),
        "{msg}"
    );
    run.signal(libc::SIGTERM);
    let _ = run.wait_exit();
    drop(listener);
}

#[test]
fn without_a_region_publishing_is_off_and_says_why() {
    let emulator = Emulator::start();
    let ns = namespace("region");
    let (mut run, port) = start_publishing(
        &emulator,
        &[],
        &[
            ("METRICS_NAMESPACE", &ns),
            ("METRICS_INTERVAL", "1"),
            ("AWS_REGION", ""),
        ],
    );
    run.expect_log("CloudWatch publishing off: no AWS region");
    // Said in /metrics too: configured, not publishing.
    let (_, body) = get(port, "/metrics");
    assert!(
        body.contains("\nlifeguard_cloudwatch_publishing 0\n"),
        "{body}"
    );
    run.signal(libc::SIGUSR1);
    run.expect_line("signal USR1");
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn ecs_task_credentials_sign_the_calls() {
    // What ECS gives a task: a credentials URI (here the front's own ECS-style endpoint).
    let emulator = Emulator::start();
    let ns = namespace("ecs-creds");
    let creds = format!("{}/_creds", emulator.url());
    let inflight = free_port().to_string();
    let (run, _) = start_publishing(
        &emulator,
        &["--inflight-port", &inflight],
        &[
            ("METRICS_NAMESPACE", &ns),
            ("METRICS_INTERVAL", "1"),
            ("AWS_ACCESS_KEY_ID", ""),
            ("AWS_SECRET_ACCESS_KEY", ""),
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &creds),
        ],
    );
    wait_until("a call signed with the container credentials", || {
        emulator
            .log()
            .iter()
            .any(|r| {
                r["operation"] == "PutMetricData"
                    && r["access_key"]
                        .as_str()
                        .is_some_and(|k| k.starts_with("ASIA"))
            })
            .then_some(())
    });
    drop(run);
}
