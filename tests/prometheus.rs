//! `/metrics` against the real Prometheus tools (Debian package `prometheus`, installed
//! by scripts/test.sh): `promtool check metrics` finds nothing to complain about, and a
//! real Prometheus server scraping lifeguard every second reads the values back through
//! its query API.
mod common;

use std::process::{Command, Stdio};

use common::prometheus::Server;
use common::*;

/// lifeguard with its endpoint and in-flight counting on, supervising the testapp's web
/// server; returns once `/metrics` has its first sample.
fn start_observed() -> (Run, u16) {
    let port = free_port();
    let app_port = free_port().to_string();
    let listen = listen_flag(port);
    let run = start(
        Mode::Pid1,
        &args(
            &["--listen", &listen, "--inflight-port", &app_port],
            &["--http", &app_port],
        ),
    );
    run.ready();
    wait_until("a first sample", || {
        let (_, body) = request(port, "GET", "/metrics").ok()?;
        body.contains("lifeguard_requests_in_flight").then_some(())
    });
    (run, port)
}

#[test]
fn promtool_finds_nothing_wrong_with_the_exposition() {
    let promtool = installed("promtool");
    let (run, port) = start_observed();
    // Two samples, so the rates are there too.
    wait_until("a utilization sample", || {
        let (_, body) = request(port, "GET", "/metrics").ok()?;
        body.contains("lifeguard_cpu_utilization_percent")
            .then_some(body)
    });
    run.signal(libc::SIGHUP);
    run.expect_line("signal HUP");
    // Exactly as served (the request helper trims the body; the format needs its last
    // newline).
    let raw = exchange(
        port,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let body = raw.split_once("\r\n\r\n").unwrap().1.to_string();
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics: {:?}\n{said}\n--- exposition\n{body}",
        out.status
    );
    for name in [
        "lifeguard_cpu_usage_seconds_total",
        "lifeguard_cpu_limit_cores",
        "lifeguard_cpu_utilization_percent",
        "lifeguard_memory_working_set_bytes",
        "lifeguard_memory_limit_bytes",
        "lifeguard_memory_utilization_percent",
        "lifeguard_requests_in_flight",
        "lifeguard_listen_backlog",
        "lifeguard_accept_queue_oldest_seconds",
        "lifeguard_listen_overflows_total",
        "lifeguard_listen_drops_total",
        "lifeguard_connections_accepted_total",
        "lifeguard_app_processes",
        "lifeguard_app_threads",
        "lifeguard_app_open_fds",
        "lifeguard_app_max_fds",
        "lifeguard_app_resident_memory_bytes",
        "lifeguard_ready",
        "lifeguard_draining",
        "lifeguard_signals_forwarded_total{signal=\"SIGHUP\"}",
        "lifeguard_zombies_reaped_total",
        "lifeguard_build_info{version=",
    ] {
        assert!(body.contains(&format!("\n{name}")), "no {name} in\n{body}");
    }
}

#[test]
fn a_real_prometheus_server_scrapes_lifeguard_every_second() {
    let (run, port) = start_observed();
    let server = Server::scraping(port);
    assert_eq!(server.query("lifeguard_build_info"), 1.0);
    // The build's commit as a label, the one --version names.
    let version = lifeguard().arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).to_string();
    let commit = version
        .split("(commit ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("{version}"));
    assert_eq!(
        server.query(&format!("lifeguard_build_info{{commit=\"{commit}\"}}")),
        1.0
    );
    assert_eq!(server.query("up{job=\"lifeguard\"}"), 1.0);
    // The same figure lifeguard serves itself.
    let limit = server.query("lifeguard_cpu_limit_cores");
    let (_, body) = get(port, "/metrics");
    assert!(
        body.contains(&format!("\nlifeguard_cpu_limit_cores {limit}\n")),
        "Prometheus read {limit}; lifeguard serves\n{body}"
    );
    // And it moves: a signal forwarded shows in the next scrapes.
    run.signal(libc::SIGUSR2);
    run.expect_line("signal USR2");
    let forwarded = wait_until("the counter to reach Prometheus", || {
        let v = server.query("sum(lifeguard_signals_forwarded_total)");
        (v >= 1.0).then_some(v)
    });
    assert_eq!(forwarded, 1.0);
}

#[test]
fn every_configured_family_is_there_from_the_first_sample() {
    // Dashboards and alerts (`rate()`, `absent()`) break on series that come and go:
    // before the app listens, and before any signal, the figures are there at 0.
    let port = free_port();
    let idle_port = free_port().to_string();
    let listen = listen_flag(port);
    let run = start(
        Mode::Pid1,
        &args(&["--listen", &listen, "--inflight-port", &idle_port], &[]),
    );
    run.ready();
    let body = wait_until("a first sample", || {
        let (_, body) = request(port, "GET", "/metrics").ok()?;
        body.contains("lifeguard_requests_in_flight")
            .then_some(body)
    });
    for series in [
        "lifeguard_requests_in_flight 0",
        "lifeguard_accept_queue_length 0",
        "lifeguard_signals_forwarded_total{signal=\"SIGTERM\"} 0",
        "lifeguard_signals_forwarded_total{signal=\"SIGINT\"} 0",
        "lifeguard_signals_forwarded_total{signal=\"SIGQUIT\"} 0",
        "lifeguard_signals_forwarded_total{signal=\"SIGHUP\"} 0",
        "lifeguard_signals_forwarded_total{signal=\"SIGUSR1\"} 0",
        "lifeguard_signals_forwarded_total{signal=\"SIGUSR2\"} 0",
        "lifeguard_signals_forwarded_total{signal=\"SIGWINCH\"} 0",
        "lifeguard_helper_failures_total{helper=\"endpoint\"} 0",
        "lifeguard_helper_failures_total{helper=\"sampler\"} 0",
    ] {
        assert!(
            body.lines().any(|l| l == series),
            "no `{series}` in the first scrape:\n{body}"
        );
    }
    // No CloudWatch configured: none of its series.
    assert!(!body.contains("lifeguard_cloudwatch"), "{body}");
    drop(run);
}
