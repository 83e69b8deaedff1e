//! CloudWatch as Embedded Metric Format records (`METRICS_SINK=emf`): every record valid
//! by the format's specification (the checker below is written from the specification,
//! not from lifeguard's code), on stdout beside the app's own lines without cutting one,
//! to a CloudWatch agent over UDP and TCP (one that comes back is used again), never a
//! delay to a signal when the agent is dead, bursts within seconds on a long interval,
//! and the build without the SDK under its size goal. These tests run against the full
//! build and, in scripts/test-slim.sh, against the slim one.
mod common;

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The specification's rules for one record, as a checker: Err names the rule broken.
///
/// - the root is an object with an `_aws` member holding exactly `Timestamp` (a number
///   of milliseconds since the epoch) and `CloudWatchMetrics` (an array of directives);
/// - a directive holds exactly `Namespace` (1-255 characters), `Dimensions` (an array of
///   dimension sets, each an array of at most 30 strings) and `Metrics` (at most 100
///   definitions);
/// - a definition holds `Name`, and may hold `Unit` (a CloudWatch unit) and
///   `StorageResolution` (1 or 60), nothing else;
/// - every dimension named is a root member whose value is a string; every metric named
///   is a root member whose value is a number or an array of at most 100 numbers.
fn check_record(line: &str) -> Result<Value, String> {
    let root: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let root_map = root.as_object().ok_or("the root is not an object")?;
    let aws = root_map
        .get("_aws")
        .and_then(Value::as_object)
        .ok_or("no _aws object")?;
    let mut keys: Vec<&str> = aws.keys().map(String::as_str).collect();
    keys.sort();
    if keys != ["CloudWatchMetrics", "Timestamp"] {
        return Err(format!("_aws holds {keys:?}"));
    }
    let ts = aws["Timestamp"]
        .as_u64()
        .ok_or("Timestamp is not a whole number")?;
    if !(1_600_000_000_000..4_000_000_000_000).contains(&ts) {
        return Err(format!(
            "Timestamp {ts} is not milliseconds since the epoch"
        ));
    }
    let directives = aws["CloudWatchMetrics"]
        .as_array()
        .ok_or("CloudWatchMetrics is not an array")?;
    if directives.is_empty() {
        return Err("no metric directive".into());
    }
    for d in directives {
        let d = d.as_object().ok_or("a directive is not an object")?;
        let mut keys: Vec<&str> = d.keys().map(String::as_str).collect();
        keys.sort();
        if keys != ["Dimensions", "Metrics", "Namespace"] {
            return Err(format!("a directive holds {keys:?}"));
        }
        let ns = d["Namespace"].as_str().ok_or("Namespace is not a string")?;
        if ns.is_empty() || ns.len() > 255 {
            return Err(format!("Namespace {ns:?}"));
        }
        for set in d["Dimensions"]
            .as_array()
            .ok_or("Dimensions is not an array")?
        {
            let set = set.as_array().ok_or("a dimension set is not an array")?;
            if set.len() > 30 {
                return Err("a dimension set of more than 30".into());
            }
            for name in set {
                let name = name.as_str().ok_or("a dimension name is not a string")?;
                match root_map.get(name) {
                    Some(Value::String(_)) => {}
                    other => return Err(format!("dimension {name} is {other:?} at the root")),
                }
            }
        }
        let metrics = d["Metrics"].as_array().ok_or("Metrics is not an array")?;
        if metrics.is_empty() || metrics.len() > 100 {
            return Err(format!("{} metric definitions", metrics.len()));
        }
        for m in metrics {
            let m = m
                .as_object()
                .ok_or("a metric definition is not an object")?;
            if m.keys()
                .any(|k| !["Name", "Unit", "StorageResolution"].contains(&k.as_str()))
            {
                return Err(format!("a metric definition holds {:?}", m.keys()));
            }
            let name = m
                .get("Name")
                .and_then(Value::as_str)
                .ok_or("a metric has no Name")?;
            if let Some(unit) = m.get("Unit") {
                let units = [
                    "Count",
                    "Percent",
                    "Seconds",
                    "Milliseconds",
                    "Bytes",
                    "None",
                ];
                if !unit.as_str().is_some_and(|u| units.contains(&u)) {
                    return Err(format!("{name}: Unit {unit}"));
                }
            }
            if let Some(res) = m.get("StorageResolution") {
                if res != 1 && res != 60 {
                    return Err(format!("{name}: StorageResolution {res}"));
                }
            }
            match root_map.get(name) {
                Some(Value::Number(_)) => {}
                Some(Value::Array(values))
                    if !values.is_empty()
                        && values.len() <= 100
                        && values.iter().all(Value::is_number) => {}
                other => return Err(format!("metric {name} is {other:?} at the root")),
            }
        }
    }
    Ok(root)
}

#[test]
fn the_checker_refuses_what_the_specification_refuses() {
    let good = r#"{"_aws":{"Timestamp":1764000000000,"CloudWatchMetrics":[{"Namespace":"A/b","Dimensions":[["S"]],"Metrics":[{"Name":"m","Unit":"Count","StorageResolution":1}]}]},"S":"web","m":[1,2]}"#;
    check_record(good).unwrap();
    for (bad, why) in [
        (
            good.replace(r#""S":"web","#, ""),
            "dimension missing at the root",
        ),
        (
            good.replace(r#""m":[1,2]"#, r#""m":"2""#),
            "a metric that is a string",
        ),
        (
            good.replace("1764000000000", "1764000000"),
            "seconds, not milliseconds",
        ),
        (
            good.replace(r#""StorageResolution":1"#, r#""StorageResolution":5"#),
            "resolution",
        ),
        (
            good.replace(r#""Namespace":"A/b","#, r#""Namespace":"A/b","Extra":1,"#),
            "extra member",
        ),
        (
            good.replace(r#""Timestamp""#, r#""Extra":1,"Timestamp""#),
            "extra in _aws",
        ),
    ] {
        assert!(check_record(&bad).is_err(), "{why}: accepted {bad}");
    }
}

/// lifeguard publishing as EMF (1-second interval unless `env` says otherwise), with
/// `--inflight-port` on the testapp's web server; ready.
fn start_emf(env: &[(&str, String)], app_extra: &[&str]) -> (Run, u16) {
    let app_port = free_port();
    let port = app_port.to_string();
    let mut app = vec!["--http", port.as_str()];
    app.extend_from_slice(app_extra);
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let run = start_with(
        Mode::Pid1,
        &args(
            &[
                "-vv",
                "--drain-delay",
                "0",
                "--inflight-port",
                &port,
                "--listen",
                "off",
            ],
            &app,
        ),
        move |cmd| {
            cmd.env("METRICS_NAMESPACE", "Test/emf")
                .env("METRICS_SINK", "emf")
                .env("METRICS_INTERVAL", "1")
                .env("METRICS_DIMENSIONS", "ClusterName=test,ServiceName=web");
            for (k, v) in &env {
                cmd.env(k, v);
            }
        },
    );
    run.ready();
    (run, app_port)
}

/// The EMF records among `run`'s stdout lines, each checked.
fn records(run: &Run) -> Vec<Value> {
    run.stdout()
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| check_record(l).unwrap_or_else(|e| panic!("invalid record ({e}): {l}")))
        .collect()
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[test]
fn records_on_stdout_are_valid_and_carry_the_samples_behind_them() {
    let (mut run, app_port) = start_emf(&[], &[]);
    // Some load: requests that take a while, so the samples differ.
    let load = std::thread::spawn(move || {
        for _ in 0..6 {
            let _ = request(app_port, "GET", "/slow/300");
        }
    });
    let found = wait_until("three records with in-flight samples", || {
        let r = records(&run);
        (r.len() >= 3).then_some(r)
    });
    load.join().unwrap();
    for r in &found {
        assert_eq!(r["_aws"]["CloudWatchMetrics"][0]["Namespace"], "Test/emf");
        assert_eq!(
            r["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
            serde_json::json!([["ClusterName", "ServiceName"]])
        );
        assert_eq!(
            (r["ClusterName"].as_str(), r["ServiceName"].as_str()),
            (Some("test"), Some("web"))
        );
        let defs = r["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap();
        assert!(defs.iter().all(|d| d["StorageResolution"] == 1), "{r}");
        // Not asked for (METRICS_EXTRA unset): not sent.
        assert!(r.get("OldestRequestAge").is_none(), "{r}");
    }
    // The p50 CloudWatch takes of a record's values is the median of the samples the
    // publish was made of (-vv logs them: "CloudWatch publish ... in_flight_samples=").
    let logged: Vec<Vec<f64>> = run
        .stderr()
        .iter()
        .filter_map(|l| l.split("in_flight_samples=").nth(1))
        .map(|s| {
            s.split_whitespace()
                .next()
                .unwrap()
                .split(',')
                .map(|n| n.parse().unwrap())
                .collect()
        })
        .collect();
    let sent: Vec<Vec<f64>> = found
        .iter()
        .map(|r| {
            r["RequestsInFlight"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        })
        .collect();
    assert!(!logged.is_empty(), "{}", run.transcript());
    for values in &sent {
        assert!(
            logged
                .iter()
                .any(|samples| median(samples) == median(values) && samples.len() == values.len()),
            "a record's values {values:?} match no publish's samples {logged:?}"
        );
    }
    // No credentials are looked up, no AWS endpoint called.
    let log = run.stderr().join("\n");
    assert!(
        !log.contains("credentials") && !log.contains("PutMetricData"),
        "{log}"
    );
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn the_oldest_request_age_goes_out_on_request_in_seconds() {
    let extra = [("METRICS_EXTRA", "OldestRequestAge".to_string())];
    let (mut run, app_port) = start_emf(&extra, &[]);
    // One request the app takes 3 s to answer: its age climbs in the samples.
    let slow = std::thread::spawn(move || request(app_port, "GET", "/slow/3000"));
    let aged = wait_until("a record whose oldest request is a second old", || {
        records(&run).into_iter().find(|r| {
            r["OldestRequestAge"]
                .as_array()
                .is_some_and(|v| v.iter().any(|a| a.as_f64().unwrap() >= 1.0))
        })
    });
    let defs = aged["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap();
    assert!(
        defs.iter()
            .any(|d| d["Name"] == "OldestRequestAge" && d["Unit"] == "Seconds"),
        "{aged}"
    );
    // The ages are the request's, to the millisecond: under the 3 s it takes.
    let ages: Vec<f64> = aged["OldestRequestAge"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(ages.iter().all(|a| (0.0..3.2).contains(a)), "{ages:?}");
    slow.join().unwrap().unwrap();
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn app_lines_written_as_fast_as_it_can_stay_whole_and_in_order_beside_the_records() {
    const LINES: usize = 20_000;
    let (mut run, _) = start_emf(&[], &["--spew", "20000"]);
    run.expect_line("spew done");
    let out = run.stdout();
    let pad = "x".repeat(100);
    let mut next = 0;
    let mut interleaved = 0;
    let mut seen_record_during = false;
    for line in &out {
        if line.starts_with('{') {
            check_record(line).unwrap_or_else(|e| panic!("a cut record ({e}): {line}"));
            if next > 0 && next < LINES {
                seen_record_during = true;
                interleaved += 1;
            }
        } else if let Some(rest) = line.strip_prefix("spew ").filter(|_| line != "spew done") {
            let (n, tail) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("a cut line: {line}"));
            assert_eq!(n.parse::<usize>().unwrap(), next, "out of order: {line}");
            assert_eq!(tail, pad, "a cut line: {line}");
            next += 1;
        } else {
            assert!(
                ["ready", "spew done"].contains(&line.as_str()) || line.starts_with("request "),
                "a line that is neither the app's nor a record: {line:?}"
            );
        }
    }
    assert_eq!(next, LINES, "app lines lost");
    assert!(
        seen_record_during,
        "no record came while the app wrote: nothing was interleaved"
    );
    eprintln!("{interleaved} records among {LINES} app lines");
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn a_udp_agent_receives_the_records() {
    let agent = UdpSocket::bind("127.0.0.1:0").unwrap();
    agent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let at = format!("udp://127.0.0.1:{}", agent.local_addr().unwrap().port());
    let (mut run, _) = start_emf(&[("AWS_EMF_AGENT_ENDPOINT", at)], &[]);
    let mut buf = [0u8; 65536];
    let n = agent
        .recv(&mut buf)
        .expect("no record reached the UDP agent");
    let text = String::from_utf8_lossy(&buf[..n]);
    check_record(text.trim_end()).unwrap();
    assert!(records(&run).is_empty(), "records went to stdout too");
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn a_tcp_agent_receives_the_records_and_is_used_again_when_it_comes_back() {
    let agent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = agent.local_addr().unwrap().port();
    let (mut run, _) = start_emf(
        &[("AWS_EMF_AGENT_ENDPOINT", format!("tcp://127.0.0.1:{port}"))],
        &[],
    );
    let read_records = |agent: &TcpListener, n: usize| {
        let (stream, _) = agent.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut lines = BufReader::new(stream).lines();
        for _ in 0..n {
            let line = lines
                .next()
                .expect("the agent's connection closed")
                .expect("no record");
            check_record(&line).unwrap();
        }
    };
    read_records(&agent, 2);
    // The agent goes away: records are lost, and that is said.
    drop(agent);
    run.expect_log("CloudWatch agent tcp://127.0.0.1");
    // It comes back on its port: lifeguard connects again.
    let agent = wait_until("the agent's port again", || {
        TcpListener::bind(("127.0.0.1", port)).ok()
    });
    read_records(&agent, 1);
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn a_dead_agent_costs_the_records_and_never_a_signals_time() {
    let dead = format!("tcp://127.0.0.1:{}", free_port());
    let (mut run, _) = start_emf(&[("AWS_EMF_AGENT_ENDPOINT", dead)], &[]);
    run.expect_log("CloudWatch agent tcp://127.0.0.1");
    let count = |run: &Run| run.stdout().iter().filter(|l| *l == "signal USR1").count();
    let mut times = Vec::new();
    for _ in 0..5 {
        let before = count(&run);
        let sent = Instant::now();
        run.signal(libc::SIGUSR1);
        wait_until("USR1 at the app", || (count(&run) > before).then_some(()));
        times.push(sent.elapsed());
    }
    times.sort();
    assert!(
        times[2] <= Duration::from_millis(100),
        "signals took {times:?}"
    );
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn a_burst_is_written_within_4_seconds_on_a_30_second_interval() {
    let (mut run, app_port) = start_emf(
        &[
            ("METRICS_INTERVAL", "30".into()),
            ("METRICS_BURST_THRESHOLD", "3".into()),
        ],
        &[],
    );
    // Let the first interval begin quietly, then hold 4 requests in flight.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(records(&run).is_empty(), "a record before the burst");
    let started = Instant::now();
    let load: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || request(app_port, "GET", "/slow/5000")))
        .collect();
    let burst = wait_until("the burst's record", || {
        records(&run).into_iter().find(|r| {
            r["RequestsInFlight"]
                .as_array()
                .is_some_and(|v| v.iter().any(|n| n.as_f64() >= Some(3.0)))
        })
    });
    let took = started.elapsed();
    assert!(
        took <= Duration::from_secs(4),
        "the burst came after {took:?}: {burst}"
    );
    for l in load {
        let _ = l.join();
    }
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn the_build_without_the_sdk_is_under_1_5_mb_and_has_no_tls() {
    let slim = slim_binaries().join("lifeguard");
    let size = std::fs::metadata(&slim).unwrap().len();
    assert!(size < 1_500_000, "{} is {size} bytes", slim.display());
    let bytes = std::fs::read(&slim).unwrap();
    for sdk in [&b"aws-sdk-cloudwatch"[..], b"rustls", b"aws-config"] {
        assert!(
            !bytes.windows(sdk.len()).any(|w| w == sdk),
            "{} carries {}",
            slim.display(),
            String::from_utf8_lossy(sdk)
        );
    }
    // Asked for the API, it says what it is and how to publish, and the app runs.
    let out = std::process::Command::new(&slim)
        .args(["--listen", "off", "--drain-delay", "0", "--", "true"])
        .env("METRICS_NAMESPACE", "Test/emf")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("without the CloudWatch API") && said.contains("METRICS_SINK=emf"),
        "{said}"
    );
}
