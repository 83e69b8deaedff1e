//! The files users copy (examples/, issue #11): they parse, lifeguard accepts their
//! command lines and environment, and their names, ports and timings match lifeguard's
//! flags and defaults and the timing rule (drain delay ≤ drain max < grace < the
//! orchestrator's kill).
mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use common::*;

fn examples() -> serde_json::Map<String, Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("tests/support/examples_as_json.py"))
        .arg(root.join("examples"))
        .output()
        .expect("THIS TEST CANNOT RUN: no python3");
    assert!(
        out.status.success(),
        "an example does not parse (or PyYAML is missing: scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_object()
        .unwrap()
        .clone()
}

fn doc<'a>(all: &'a serde_json::Map<String, Value>, file: &str, kind: Option<&str>) -> &'a Value {
    let docs = all[file].as_array().unwrap();
    docs.iter()
        .find(|d| kind.is_none_or(|k| d["kind"] == k))
        .unwrap_or_else(|| panic!("{file} has no {kind:?}"))
}

/// The value of `--NAME=V` in `args`.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .take_while(|a| *a != "--")
        .find_map(|a| a.strip_prefix(&format!("--{name}=")))
}

fn seconds(text: &str) -> f64 {
    text.trim_end_matches('s').parse().unwrap()
}

/// lifeguard must accept the flags and environment as given (exit 0 on `true`).
fn lifeguard_accepts(args: &[String], env: &[(String, String)]) {
    let options: Vec<&String> = args.iter().take_while(|a| *a != "--").collect();
    let mut cmd = lifeguard();
    cmd.args(&options)
        .args(["--listen", "off", "--", "true"])
        .env("AWS_REGION", "us-east-1")
        // No credentials anywhere: the publisher must give up quietly, not hang.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "lifeguard refused {options:?} {env:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_kubernetes_example_fits_lifeguards_flags_and_the_timing_rule() {
    let all = examples();
    let deployment = doc(&all, "kubernetes/deployment.yaml", Some("Deployment"));
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["command"][0], "/lifeguard");
    let args = strings(&container["args"]);
    lifeguard_accepts(&args, &[]);
    let (drain, max, grace) = (
        seconds(flag(&args, "drain-delay").unwrap()),
        seconds(flag(&args, "drain-max").unwrap()),
        seconds(flag(&args, "grace").unwrap()),
    );
    let kill = pod["terminationGracePeriodSeconds"].as_f64().unwrap();
    assert!(
        drain <= max && max < grace && grace < kill,
        "{drain} {max} {grace} {kill}"
    );
    // The probes reach lifeguard's endpoint at its default port.
    let port_of = |name: &str| {
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["containerPort"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        port_of("lifeguard"),
        9595,
        "lifeguard's default --listen port"
    );
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(container["readinessProbe"]["httpGet"]["port"], "lifeguard");
    // In-flight counting on the app's own port.
    assert_eq!(
        flag(&args, "inflight-port")
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        port_of("http")
    );
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/port"], "9595");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    let monitor = doc(
        &all,
        "kubernetes/servicemonitor.yaml",
        Some("ServiceMonitor"),
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "lifeguard");
    let keda = doc(
        &all,
        "kubernetes/keda-scaledobject.yaml",
        Some("ScaledObject"),
    );
    let query = keda["spec"]["triggers"][0]["metadata"]["query"]
        .as_str()
        .unwrap();
    assert!(query.contains("lifeguard_requests_in_flight"), "{query}");
    assert_eq!(
        keda["spec"]["scaleTargetRef"]["name"],
        deployment["metadata"]["name"]
    );
}

#[test]
fn the_ecs_example_fits_the_metrics_contract_the_policy_and_the_alarm() {
    let all = examples();
    let task = doc(&all, "ecs/task-definition.json", None);
    let container = &task["containerDefinitions"][0];
    assert_eq!(container["entryPoint"][0], "/lifeguard");
    let args = strings(&container["command"]);
    let env: Vec<(String, String)> = container["environment"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let var = |name: &str| env.iter().find(|(k, _)| k == name).unwrap().1.clone();
    lifeguard_accepts(&args, &env);
    let grace = seconds(flag(&args, "grace").unwrap());
    let stop_timeout = container["stopTimeout"].as_f64().unwrap();
    assert!(
        grace < stop_timeout,
        "grace {grace} must end before ECS's kill {stop_timeout}"
    );
    assert!(seconds(flag(&args, "drain-max").unwrap()) < grace);
    assert_eq!(
        strings(&container["healthCheck"]["command"]),
        ["CMD", "/lifeguard", "--probe"]
    );
    // The policy lets the task publish into its namespace only.
    let policy = doc(&all, "ecs/task-role-policy.json", None);
    let statement = &policy["Statement"][0];
    assert_eq!(statement["Action"], "cloudwatch:PutMetricData");
    assert_eq!(
        statement["Condition"]["StringEquals"]["cloudwatch:namespace"],
        var("METRICS_NAMESPACE").as_str()
    );
    // The alarm reads what lifeguard publishes: same namespace, metric, dimensions, a
    // 10-second period on the median across tasks.
    let template = doc(&all, "ecs/scaling.yaml", None);
    let alarm = &template["Resources"]["InFlightHigh"]["Properties"];
    assert_eq!(alarm["Namespace"], var("METRICS_NAMESPACE").as_str());
    assert_eq!(alarm["MetricName"], "RequestsInFlight");
    assert_eq!(alarm["Period"], 10);
    assert_eq!(alarm["ExtendedStatistic"], "p50");
    let names: Vec<String> = alarm["Dimensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["Name"].as_str().unwrap().to_string())
        .collect();
    let published: Vec<String> = var("METRICS_DIMENSIONS")
        .split(',')
        .map(|kv| kv.split('=').next().unwrap().to_string())
        .collect();
    assert_eq!(names, published);
    let defaults = &template["Parameters"];
    for (param, value) in var("METRICS_DIMENSIONS")
        .split(',')
        .map(|kv| kv.split_once('=').unwrap())
    {
        assert_eq!(defaults[param]["Default"], value, "{param}");
    }
}

#[test]
fn the_cloudformation_template_passes_cfn_lint() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("cfn-lint")
        .arg(root.join("examples/ecs/scaling.yaml"))
        .output()
        .expect("THIS TEST CANNOT RUN: cfn-lint is not installed (scripts/test.sh installs it from PyPI)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
