//! Metrics over OTLP (`METRICS_SINK=otlp`), checked by a collector stand-in that decodes
//! each export with the OpenTelemetry project's own generated types
//! (tests/support/otlp_collector.py): every figure `/metrics` shows arrives as the type it
//! is, with its unit, under the resource lifeguard knows and the user's attributes; a
//! collector that refuses, rejects part, answers slowly or is not there costs data
//! only, said once a spell; the OTEL_* variables are read as the specification writes
//! them, and an unusable one stops the start naming it.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::ecs::MetadataStandIn;
use common::otlp::{metric, Collector};
use common::*;

/// lifeguard as PID 1 exporting to `endpoint` every second, its endpoint on `listen`,
/// counting requests on the test app's port.
fn exporting(endpoint: &str, listen: u16, env: &[(&str, String)]) -> (Run, u16) {
    let app_port = free_port();
    let (listen, app) = (listen_flag(listen), app_port.to_string());
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let endpoint = endpoint.to_string();
    let run = start_with(
        Mode::Pid1,
        &args(
            &[
                "-v",
                "--drain-delay",
                "0",
                "--listen",
                &listen,
                "--inflight-port",
                &app,
            ],
            &["--http", &app],
        ),
        move |cmd| {
            cmd.env("METRICS_SINK", "otlp")
                .env("METRICS_INTERVAL", "1")
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
            for (k, v) in &env {
                cmd.env(k, v);
            }
        },
    );
    run.ready();
    (run, app_port)
}

/// `/metrics`' families by name: their TYPE.
fn families(port: u16) -> HashMap<String, String> {
    let (status, body) = get(port, "/metrics");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect()
}

fn expected_unit(name: &str) -> &'static str {
    let stem = name.strip_suffix("_total").unwrap_or(name);
    if stem.ends_with("_seconds") {
        "s"
    } else if stem.ends_with("_bytes") {
        "By"
    } else if stem.ends_with("_percent") {
        "%"
    } else if stem.ends_with("_cores") {
        "{cpu}"
    } else {
        ""
    }
}

#[test]
fn every_figure_arrives_as_the_type_it_is_with_its_unit_and_the_tasks_resource() {
    let (collector, metadata, listen) = (Collector::start(), MetadataStandIn::start(), free_port());
    let (mut run, app_port) = exporting(
        &collector.base(),
        listen,
        &[
            ("ECS_CONTAINER_METADATA_URI_V4", metadata.base.clone()),
            ("OTEL_SERVICE_NAME", "checkout".into()),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=test,cloud.region=eu-west-1,team=pay%2Cments".into(),
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s%20ecret".into()),
        ],
    );
    // A request answered, so the response histogram has one.
    let _ = request(app_port, "GET", "/");
    // The first exports come before the sampler has read the task metadata: the
    // container's cgroup stands in until then, and the task's attributes are not there.
    let task_size = |e: &serde_json::Value| {
        metric(e, "lifeguard_cpu_limit_cores")
            .is_some_and(|m| m["points"][0]["value"].as_f64() == Some(0.25))
    };
    let export = collector.wait_for(Duration::from_secs(30), |e| {
        metric(e, "lifeguard_requests_in_flight").is_some()
            && task_size(e)
            && e["resources"][0]["attributes"]["aws.ecs.task.family"] == "web"
    });
    assert_eq!(export["path"], "/v1/metrics");
    assert_eq!(export["content_type"], "application/x-protobuf");
    assert_eq!(export["headers"]["x-api-key"], "s ecret");
    let resource = &export["resources"][0]["attributes"];
    for (key, want) in [
        ("service.name", "checkout"),
        ("deployment.environment", "test"),
        ("team", "pay,ments"),
        // The user's attribute wins over the task's own region.
        ("cloud.region", "eu-west-1"),
        ("cloud.provider", "aws"),
        ("cloud.platform", "aws_ecs"),
        ("cloud.account.id", "111122223333"),
        (
            "aws.ecs.cluster.arn",
            "arn:aws:ecs:us-west-2:111122223333:cluster/default",
        ),
        ("aws.ecs.task.family", "web"),
        ("aws.ecs.task.revision", "26"),
        ("aws.ecs.launchtype", "fargate"),
        ("aws.ecs.task.id", "158d1c8083dd49d6b527399fd6414f5c"),
    ] {
        assert_eq!(resource[key], want, "{key} in {resource}");
    }
    // The instance is the host's name, from the first export to the last: a series
    // never changes its identity when the task's attributes join.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for each in collector.exports() {
        assert_eq!(
            each["resources"][0]["attributes"]["service.instance.id"],
            host.trim()
        );
    }
    let scope = &export["resources"][0]["scopes"][0];
    assert_eq!(scope["name"], "lifeguard");
    assert_eq!(scope["version"], env!("CARGO_PKG_VERSION"));
    // Every family /metrics has, as the type it is, with its unit.
    let scraped = families(listen);
    assert!(scraped.len() > 20, "{scraped:?}");
    let exported = |name: &str| {
        collector
            .wait_for(Duration::from_secs(10), |e| metric(e, name).is_some())
            .clone()
    };
    for (name, kind) in &scraped {
        let export = exported(name);
        let m = metric(&export, name).unwrap();
        let want = match kind.as_str() {
            "gauge" => "gauge",
            "counter" => "sum",
            "histogram" => "histogram",
            other => panic!("{name}: TYPE {other}"),
        };
        assert_eq!(m["type"], want, "{name}: {m}");
        assert_eq!(m["unit"], expected_unit(name), "{name}: {m}");
        assert!(!m["description"].as_str().unwrap().is_empty(), "{name}");
        if want != "gauge" {
            assert_eq!(
                m["temporality"], "AGGREGATION_TEMPORALITY_CUMULATIVE",
                "{name}"
            );
            for p in m["points"].as_array().unwrap() {
                let (start, time) = (p["start"].as_u64().unwrap(), p["time"].as_u64().unwrap());
                assert!(0 < start && start < time, "{name}: {p}");
            }
        }
        if want == "sum" {
            assert_eq!(m["monotonic"], true, "{name}");
        }
    }
    // docs/metrics.md's table says what arrives: the type and unit of every family.
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    let table: HashMap<String, (String, String)> = docs
        .split("## Over OTLP")
        .nth(1)
        .expect("docs/metrics.md has no section \"Over OTLP\"")
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let unit = cells.get(3)?.trim_matches('`').replace('—', "");
            Some((name.to_string(), (cells.get(2)?.to_lowercase(), unit)))
        })
        .collect();
    for name in scraped.keys() {
        let m = metric(&exported(name), name).unwrap().clone();
        assert_eq!(
            table.get(name.as_str()),
            Some(&(
                m["type"].as_str().unwrap().to_string(),
                m["unit"].as_str().unwrap().to_string()
            )),
            "docs/metrics.md's OTLP table on {name}"
        );
    }
    // Figures with known values arrive as /metrics shows them: the task's size, as the
    // metadata stand-in gives it.
    let gauge = |name: &str| -> f64 {
        metric(&export, name).unwrap()["points"][0]["value"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(gauge("lifeguard_cpu_limit_cores"), 0.25);
    assert_eq!(
        gauge("lifeguard_memory_limit_bytes"),
        512.0 * 1024.0 * 1024.0
    );
    assert_eq!(
        metric(&export, "lifeguard_memory_limit_bytes").unwrap()["points"][0]["value_type"],
        "as_int"
    );
    let build = metric(&export, "lifeguard_build_info").unwrap();
    assert_eq!(
        build["points"][0]["attributes"]["version"],
        env!("CARGO_PKG_VERSION")
    );
    // The histogram: per-bucket counts that add up to its count, and its bounds.
    let h = exported("lifeguard_response_seconds");
    let point = &metric(&h, "lifeguard_response_seconds").unwrap()["points"][0];
    let counts: u64 = point["bucket_counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert_eq!(counts, point["count"].as_u64().unwrap(), "{point}");
    assert_eq!(
        point["explicit_bounds"].as_array().unwrap().len() + 1,
        point["bucket_counts"].as_array().unwrap().len()
    );
    assert_eq!(point["explicit_bounds"][0], 0.005);
    run.expect_log("OTLP export");
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    // The exit flush sends the figures as they stood at the end: the drain said.
    let last = collector.exports().last().cloned().unwrap();
    assert!(metric(&last, "lifeguard_draining").is_some(), "{last}");
}

#[test]
fn a_collector_that_fails_costs_data_only_and_says_so_once_a_spell() {
    let mut collector = Collector::start();
    collector.mode("status 500");
    let (mut run, _) = exporting(&collector.base(), free_port(), &[]);
    let first = run.expect_log("OTLP export to the collector failed");
    assert!(
        first.contains("the collector answered 500: the stand-in answers 500"),
        "{first}"
    );
    // Further failures within the minute are counted, not said.
    let failed_before = collector.exports().len();
    wait_until("three more refused exports", || {
        (collector.exports().len() >= failed_before + 3).then_some(())
    });
    let said = |text: &str| run.stderr().iter().filter(|l| l.contains(text)).count();
    assert_eq!(
        said("OTLP export to the collector failed"),
        1,
        "{}",
        run.transcript()
    );
    collector.mode("ok");
    let back = run.expect_log("OTLP export to the collector works again");
    assert!(back.contains("failed calls"), "{back}");
    collector.mode("partial 2");
    let partial = run.expect_log("rejected 2 data points");
    assert!(partial.contains("rejected by the stand-in"), "{partial}");
    collector.mode("ok");
    wait_until("the second recovery said", || {
        (said("OTLP export to the collector works again") == 2).then_some(())
    });
    // A collector that does not answer in time: the export is given up within the
    // interval, and the app's signals and exit are never held up by it.
    collector.mode("slow 30");
    let slow = run.expect_log("no answer from");
    assert!(slow.contains("within 800ms"), "{slow}");
    let asked = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the exit waited {:?} for a collector that answers in 30 s",
        asked.elapsed()
    );
}

#[test]
fn a_collector_that_is_not_there_is_said_and_the_app_runs_on() {
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let (mut run, app_port) = exporting(&nobody, free_port(), &[]);
    let line = run.expect_log("OTLP export to the collector failed");
    assert!(line.contains("cannot connect to 127.0.0.1"), "{line}");
    assert_eq!(request(app_port, "GET", "/").unwrap().0, 200);
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn unusable_variables_stop_the_start_naming_the_variable_and_the_form() {
    let start = |env: &[(&str, &str)]| {
        let mut cmd = lifeguard();
        cmd.args(["--listen", "off", "--drain-delay", "0", "--", "true"]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    for (env, named, form) in [
        (
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")][..],
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
            "http/protobuf only",
        ),
        (
            &[("OTEL_METRIC_EXPORT_INTERVAL", "10s")][..],
            "OTEL_METRIC_EXPORT_INTERVAL",
            "milliseconds",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")][..],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http:// URL",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_HEADERS", "api-key")][..],
            "OTEL_EXPORTER_OTLP_HEADERS",
            "key=value",
        ),
    ] {
        let mut with_sink = vec![("METRICS_SINK", "otlp")];
        with_sink.extend_from_slice(env);
        let (code, said) = start(&with_sink);
        assert_eq!(code, Some(2), "{env:?}: {said}");
        assert!(
            said.contains(named) && said.contains(form),
            "{env:?}: {said}"
        );
        // Without METRICS_SINK=otlp they are the app's variables, none of lifeguard's
        // business.
        let (code, said) = start(env);
        assert_eq!(code, Some(0), "{env:?}: {said}");
    }
    // The CloudWatch-only variables are said to be ignored, and the app runs.
    let (code, said) = start(&[
        ("METRICS_SINK", "otlp"),
        ("METRICS_DIMENSIONS", "A=1"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
    ]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("METRICS_DIMENSIONS ignored: METRICS_SINK=otlp"),
        "{said}"
    );
}

/// CloudWatch's OTLP endpoint as lifeguard is pointed at it (its real name, https),
/// played by the stand-in: that name resolves to 127.0.0.1 in lifeguard's own mount
/// namespace only (a hosts file bound over /etc/hosts), and the stand-in's CA is the
/// one lifeguard trusts (SSL_CERT_FILE, which the system store honours).
struct CloudWatchEndpoint {
    collector: Collector,
    dir: std::path::PathBuf,
    url: String,
}

const CLOUDWATCH: &str = "monitoring.us-east-1.amazonaws.com";
const KEY_ID: &str = "AKIALIFEGUARDTEST";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

impl CloudWatchEndpoint {
    fn start() -> CloudWatchEndpoint {
        let dir = std::env::temp_dir().join(format!("lifeguard-otlp-cw-{}", free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = format!("{KEY_ID}={SECRET}");
        let collector =
            Collector::cloudwatch(CLOUDWATCH, "us-east-1", &[&key], &dir.join("ca.pem"));
        std::fs::write(
            dir.join("hosts"),
            format!("127.0.0.1 localhost\n127.0.0.1 {CLOUDWATCH}\n"),
        )
        .unwrap();
        let url = format!("https://{CLOUDWATCH}:{}/v1/metrics", collector.port);
        CloudWatchEndpoint {
            collector,
            dir,
            url,
        }
    }

    /// lifeguard as PID 1 exporting to the endpoint every second with `credentials`
    /// (the AWS_* variables; nothing else is there to find: no profile, no instance
    /// metadata).
    fn lifeguard(&self, credentials: &[(&str, &str)]) -> Run {
        let hosts = self.dir.join("hosts");
        let bind = format!("mount --bind {} /etc/hosts && exec \"$@\"", hosts.display());
        let app = free_port().to_string();
        let (ca, home, url) = (self.dir.join("ca.pem"), self.dir.clone(), self.url.clone());
        let credentials: Vec<(String, String)> = credentials
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let run = start_under_with(
            Mode::Pid1,
            &["sh", "-c", &bind, "sh"],
            &args(
                &["-v", "--drain-delay", "0", "--inflight-port", &app],
                &["--http", &app],
            ),
            move |cmd| {
                for name in [
                    "AWS_ACCESS_KEY_ID",
                    "AWS_SECRET_ACCESS_KEY",
                    "AWS_SESSION_TOKEN",
                    "AWS_PROFILE",
                ] {
                    cmd.env_remove(name);
                }
                cmd.env("METRICS_SINK", "otlp")
                    .env("METRICS_INTERVAL", "1")
                    .env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", url)
                    .env("SSL_CERT_FILE", ca)
                    .env("HOME", &home)
                    .env("AWS_CONFIG_FILE", home.join("no-config"))
                    .env("AWS_SHARED_CREDENTIALS_FILE", home.join("no-credentials"))
                    .env("AWS_EC2_METADATA_DISABLED", "true");
                for (k, v) in credentials {
                    cmd.env(k, v);
                }
            },
        );
        run.ready();
        run
    }
}

/// Whether the binary under test can sign for CloudWatch. The build without the AWS
/// SDK (scripts/test-slim.sh runs these tests against it) cannot, and must refuse
/// CloudWatch's endpoint at the start, naming the variable and saying why: that is
/// checked here, and the caller then has nothing more to test.
fn signs_for_cloudwatch() -> bool {
    let out = lifeguard()
        .args(["--listen", "off", "--drain-delay", "0", "--", "true"])
        .env("METRICS_SINK", "otlp")
        .env(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            format!("https://{CLOUDWATCH}/v1/metrics"),
        )
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    if !said.contains("without the AWS SDK") {
        return true;
    }
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") && said.contains("SigV4"),
        "{said}"
    );
    eprintln!(
        "the build without the AWS SDK: CloudWatch's endpoint refused at the start, as it must be"
    );
    false
}

impl Drop for CloudWatchEndpoint {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn straight_to_cloudwatch_each_export_is_signed_and_botocore_verifies_it() {
    if !signs_for_cloudwatch() {
        return;
    }
    let mut endpoint = CloudWatchEndpoint::start();
    let mut run = endpoint.lifeguard(&[
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_SESSION_TOKEN", "session-token-of-the-task-role"),
    ]);
    // Every export arrives over TLS, signed for monitoring in us-east-1 with the task's
    // temporary credentials; botocore, recomputing the signature, finds it right.
    let export = endpoint.collector.wait_for(Duration::from_secs(20), |e| {
        metric(e, "lifeguard_requests_in_flight").is_some()
    });
    assert_eq!(export["sigv4"], "verified", "{export}");
    let headers = &export["headers"];
    assert_eq!(
        headers["x-amz-security-token"],
        "session-token-of-the-task-role"
    );
    let authorization = headers["authorization"].as_str().unwrap();
    assert!(
        authorization.contains(&format!("Credential={KEY_ID}/"))
            && authorization.contains("/us-east-1/monitoring/aws4_request"),
        "{authorization}"
    );
    assert_eq!(
        headers["host"],
        format!("{CLOUDWATCH}:{}", endpoint.collector.port)
    );
    // Refused for want of permission: the line names the action to grant.
    endpoint.collector.mode("deny");
    let denied = run.expect_log("OTLP export to CloudWatch failed");
    assert!(
        denied.contains("CloudWatch answered 403")
            && denied.contains("grant the task's IAM role cloudwatch:PutMetricData"),
        "{denied}"
    );
    endpoint.collector.mode("ok");
    run.expect_log("OTLP export to CloudWatch works again");
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    assert!(
        endpoint
            .collector
            .exports()
            .iter()
            .all(|e| e["sigv4"] == "verified"),
        "an export was not signed right"
    );
}

#[test]
fn straight_to_cloudwatch_wrong_or_missing_credentials_are_named_and_cost_data_only() {
    if !signs_for_cloudwatch() {
        return;
    }
    let endpoint = CloudWatchEndpoint::start();
    // A secret that is not the key's: the stand-in's check (botocore's) refuses it, and
    // the line says so.
    let mut run = endpoint.lifeguard(&[
        ("AWS_ACCESS_KEY_ID", KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", "not-the-secret"),
    ]);
    let line = run.expect_log("OTLP export to CloudWatch failed");
    assert!(
        line.contains("CloudWatch answered 403") && line.contains("SignatureDoesNotMatch"),
        "{line}"
    );
    assert!(!line.contains("grant"), "{line}");
    assert!(endpoint
        .collector
        .exports()
        .iter()
        .all(|e| e["sigv4"] == "SignatureDoesNotMatch"));
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    // None at all: nothing is sent, and the line says where lifeguard looked and what
    // to set; the app runs and stops as ever.
    let sent_before = endpoint.collector.exports().len();
    let mut run = endpoint.lifeguard(&[]);
    let line = run.expect_log("OTLP export to CloudWatch failed");
    assert!(line.contains("no AWS credentials found (tried: "), "{line}");
    assert!(line.contains("give the task an IAM role"), "{line}");
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    assert_eq!(endpoint.collector.exports().len(), sent_before);
}

/// A container credentials endpoint (ECS's `AWS_CONTAINER_CREDENTIALS_FULL_URI`) on
/// loopback that answers every ask only after `delay` (instance metadata behind a hop
/// limit, or an STS call, can be as slow): the test's credentials, temporary, for an
/// hour. Its port.
fn slow_credentials(delay: Duration) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = std::process::Command::new("date")
        .args(["-u", "-d", "+1 hour", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("THIS TEST CANNOT RUN: no date (coreutils)");
    let expiration = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let body = format!(
        "{{\"AccessKeyId\":\"{KEY_ID}\",\"SecretAccessKey\":\"{SECRET}\",\
         \"Token\":\"token-of-a-slow-source\",\"Expiration\":\"{expiration}\"}}"
    );
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let body = body.clone();
            std::thread::spawn(move || {
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head);
                // The source's slowness: the fault under test, not synchronisation.
                std::thread::sleep(delay);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

#[test]
fn straight_to_cloudwatch_a_slow_credential_source_is_named_and_its_credentials_still_arrive() {
    if !signs_for_cloudwatch() {
        return;
    }
    // Credentials that take 2 s to come, and exports every second with 0.8 s each: an
    // ask of the credential chain bounded by the export's deadline would be cancelled
    // every time and never succeed, and the line would blame the endpoint.
    let endpoint = CloudWatchEndpoint::start();
    let creds = format!(
        "http://127.0.0.1:{}/creds",
        slow_credentials(Duration::from_secs(2))
    );
    let mut run = endpoint.lifeguard(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &creds),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "800"),
    ]);
    let slow = run.expect_log("no AWS credentials yet within");
    assert!(
        slow.contains("the credential chain") && slow.contains("still asked"),
        "{slow}"
    );
    // The ask outlives the export that started it: the exports after it are signed with
    // what it brought, and botocore finds the signature right.
    let export = endpoint
        .collector
        .wait_for(Duration::from_secs(20), |e| e["sigv4"] == "verified");
    assert_eq!(
        export["headers"]["x-amz-security-token"],
        "token-of-a-slow-source"
    );
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}
