//! CloudWatch publishing (DESIGN §5, issue #7) against a real CloudWatch emulator:
//! moto (PyPI) behind tests/support/cloudwatch_front.py, which speaks the Rust SDK's
//! Smithy RPC-v2 CBOR, records every datum as sent, and injects faults. Every rule of
//! the contract is checked on what arrives: cadence, dimensions, resolution, units,
//! rounding, the statistic set, the quiet start, bursts and their 3-second floor, and
//! the outages, each with a signal still forwarded at once and the exit on time.
mod common;

use std::net::TcpListener;
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
fn every_interval_a_high_resolution_statistic_set_with_the_dimensions() {
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
        // The interval's 1-second samples: 3 in flight (queued) each time.
        let stats = &datum["statistic_values"];
        let n = stats["SampleCount"].as_f64().unwrap();
        assert!((1.0..=3.0).contains(&n), "{stats}");
        assert_eq!(stats["Sum"].as_f64().unwrap(), 3.0 * n, "{stats}");
        assert_eq!(
            (stats["Minimum"].as_f64(), stats["Maximum"].as_f64()),
            (Some(3.0), Some(3.0))
        );
    }
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
    let max = calls[0].metric("RequestsInFlight").unwrap()["statistic_values"]["Maximum"]
        .as_f64()
        .unwrap();
    assert_eq!(max, 8.0);
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
    // An in-flight source, so that every interval has data to send.
    let inflight = free_port().to_string();
    let (mut run, port) = start_publishing(&emulator, &["--inflight-port", &inflight], &vars);
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
fn without_a_region_publishing_is_off_and_says_why() {
    let emulator = Emulator::start();
    let ns = namespace("region");
    let (mut run, _) = start_publishing(
        &emulator,
        &[],
        &[
            ("METRICS_NAMESPACE", &ns),
            ("METRICS_INTERVAL", "1"),
            ("AWS_REGION", ""),
        ],
    );
    run.expect_log("CloudWatch publishing off: no AWS region");
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
