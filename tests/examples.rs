//! The files users copy (examples/): they parse, lifeguard accepts
//! their command lines and environment, their names, ports and timings match lifeguard's
//! flags and defaults and the timing rule (drain delay ≤ drain max < grace < the
//! orchestrator's kill, Docker's included), and their scalers scale out and back in:
//! the replica counts Application Auto Scaling and the HPA would choose are computed from
//! each example's own fields at a few loads.
mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use common::examples::*;
use common::*;

#[test]
fn the_compose_example_keeps_the_timing_rule_and_a_patient_probe() {
    let all = examples();
    let compose = doc(&all, "compose/compose.yaml", None);
    let web = &compose["services"]["web"];
    let mut args = strings(&web["entrypoint"]);
    assert_eq!(args.remove(0), "/lifeguard");
    let env: Vec<(String, String)> = web["environment"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    args.extend(strings(&web["command"]));
    lifeguard_accepts(&args, &env);
    let stop = seconds(web["stop_grace_period"].as_str().unwrap());
    assert!(
        default_grace() < stop,
        "stop_grace_period {stop} s must outlast the grace"
    );
    let check = &web["healthcheck"];
    assert_eq!(strings(&check["test"]), ["CMD", "/lifeguard", "--probe"]);
    // The readiness mirror shares web's network namespace and watches its ready port;
    // its port is published on web, whose namespace it is.
    let mirror = &compose["services"]["readiness-mirror"];
    assert_eq!(mirror["network_mode"], "service:web");
    let watched = mirror["environment"]["LIFEGUARD_MIRROR_READY_PORT"]
        .as_str()
        .unwrap();
    assert_eq!(
        Some(watched.to_string()),
        env.iter()
            .find(|(k, _)| k == "LIFEGUARD_READY_PORT")
            .map(|(_, v)| v.clone())
    );
    assert!(
        mirror.get("ports").is_none(),
        "network_mode: service:web takes no ports"
    );
    assert!(
        strings(&web["ports"])
            .iter()
            .any(|p| p.ends_with(":9597:9597")),
        "{web}"
    );
    assert_eq!(mirror["user"], "65534");
    assert!(
        seconds(check["timeout"].as_str().unwrap()) >= 2.0,
        "{check}"
    );
    assert!(check["retries"].as_f64().unwrap() >= 3.0, "{check}");
}

/// An ECS container definition's `environment`, as (name, value) pairs.
fn ecs_environment(container: &Value) -> Vec<(String, String)> {
    container["environment"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_ecs_emf_variant_publishes_through_its_logs_with_the_same_contract() {
    let all = examples();
    let api = &doc(&all, "ecs/task-definition.json", None)["containerDefinitions"][0];
    let emf = &doc(&all, "ecs/task-definition-emf.json", None)["containerDefinitions"][0];
    let (api_env, emf_env) = (ecs_environment(api), ecs_environment(emf));
    assert!(emf_env.contains(&("METRICS_SINK".to_string(), "emf".to_string())));
    // The same namespace and dimensions: the same alarms read either.
    for name in [
        "METRICS_NAMESPACE",
        "METRICS_DIMENSIONS",
        "METRICS_INTERVAL",
    ] {
        let of = |e: &[(String, String)]| e.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        assert_eq!(of(&api_env), of(&emf_env), "{name}");
    }
    // Records on stdout: the awslogs driver carries them to CloudWatch Logs.
    assert_eq!(emf["logConfiguration"]["logDriver"], "awslogs");
    assert_eq!(api["command"], emf["command"]);
    lifeguard_accepts(&strings(&emf["command"]), &emf_env);
    // The same readiness mirror beside it.
    let mirrors = |file: &str| doc(&all, file, None)["containerDefinitions"][1].clone();
    assert_eq!(
        mirrors("ecs/task-definition.json"),
        mirrors("ecs/task-definition-emf.json")
    );
}

#[test]
fn the_ecs_example_fits_the_metrics_contract_the_policy_and_the_alarm() {
    let all = examples();
    let task = doc(&all, "ecs/task-definition.json", None);
    let container = &task["containerDefinitions"][0];
    assert_eq!(container["entryPoint"][0], "/lifeguard");
    let args = strings(&container["command"]);
    let env = ecs_environment(container);
    let var = |name: &str| env.iter().find(|(k, _)| k == name).unwrap().1.clone();
    lifeguard_accepts(&args, &env);
    let grace = seconds(flag(&args, "grace").unwrap());
    let stop_timeout = container["stopTimeout"].as_f64().unwrap();
    assert!(
        grace < stop_timeout,
        "grace {grace} must end before ECS's kill {stop_timeout}"
    );
    assert!(seconds(flag(&args, "drain-max").unwrap()) < grace);
    // The app's port reaches the balancer, and lifeguard's endpoint (/metrics) the
    // task's own network.
    let ports: Vec<f64> = container["portMappings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_f64().unwrap())
        .collect();
    assert!(
        ports.contains(&8080.0) && ports.contains(&9595.0),
        "{ports:?}"
    );
    // No container health check: a task at its CPU quota would fail it (the check is a
    // process in the starved cgroup) and be replaced when it is needed most; the
    // balancer's check on /readyz decides.
    assert!(container.get("healthCheck").is_none(), "{container}");
    // The service behind its target group, whose health check asks the readiness
    // mirror beside the app (a container of its own, so a cgroup of its own under the
    // task's quota): the quickest timings an ALB takes, which the mirror holds at the
    // peak (tests/mirror.rs), and a short deregistration delay (lifeguard holds the stop
    // until the port is quiet).
    let resources = &doc(&all, "ecs/scaling.yaml", None)["Resources"];
    let group = &resources["TargetGroup"]["Properties"];
    assert_eq!(group["HealthCheckPath"], "/readyz");
    assert_eq!(group["HealthCheckPort"], "9597");
    for (key, want) in [
        ("HealthCheckIntervalSeconds", 5.0),
        ("HealthCheckTimeoutSeconds", 2.0),
        ("HealthyThresholdCount", 2.0),
        ("UnhealthyThresholdCount", 2.0),
    ] {
        assert_eq!(group[key].as_f64(), Some(want), "{key}");
    }
    the_mirror_container_serves_the_ready_port(task, container, &args, 9597);
    // No HTTP app check either: at the peak it would time out and turn /readyz to 503.
    assert!(flag(&args, "ready-http").is_none(), "{args:?}");
    let delay = group["TargetGroupAttributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["Key"] == "deregistration_delay.timeout_seconds")
        .map(|a| a["Value"].as_str().unwrap().parse::<f64>().unwrap())
        .expect("a deregistration delay");
    assert!(delay <= 30.0, "deregistration delay {delay}");
    let service = &resources["Service"]["Properties"];
    assert_eq!(service["LoadBalancers"][0]["ContainerPort"], 8080.0);
    assert_eq!(
        service["LoadBalancers"][0]["ContainerName"],
        container["name"]
    );
    // The policy lets the task publish into its namespace only.
    let policy = doc(&all, "ecs/task-role-policy.json", None);
    let statement = &policy["Statement"][0];
    assert_eq!(statement["Action"], "cloudwatch:PutMetricData");
    assert_eq!(
        statement["Condition"]["StringEquals"]["cloudwatch:namespace"],
        var("METRICS_NAMESPACE").as_str()
    );
    // Scale-in protection: on, with the port whose requests' age it reads, for requests
    // the drain cannot wait for (longer than --drain-max), and the task role may ask
    // for it, in the example's cluster (the ClusterName the metrics carry).
    let after = seconds(flag(&args, "scale-in-protection").expect("--scale-in-protection"));
    assert!(flag(&args, "inflight-port").is_some());
    assert!(
        after >= seconds(flag(&args, "drain-max").unwrap()),
        "{after}"
    );
    let protection = &policy["Statement"][1];
    let actions = strings(&protection["Action"]);
    assert!(
        actions.contains(&"ecs:UpdateTaskProtection".to_string())
            && actions.contains(&"ecs:GetTaskProtection".to_string()),
        "{actions:?}"
    );
    let cluster = var("METRICS_DIMENSIONS")
        .split(',')
        .find_map(|kv| kv.strip_prefix("ClusterName=").map(str::to_string))
        .unwrap();
    assert!(
        protection["Resource"]
            .as_str()
            .unwrap()
            .contains(&format!(":task/{cluster}/")),
        "{protection}"
    );
    // Every alarm reads what lifeguard publishes: same namespace, a metric it sends,
    // the same dimensions, a period of the publishing interval, and a statistic that
    // exists for the data as sent (raw values: percentiles included).
    let template = doc(&all, "ecs/scaling.yaml", None);
    let published: Vec<String> = var("METRICS_DIMENSIONS")
        .split(',')
        .map(|kv| kv.split('=').next().unwrap().to_string())
        .collect();
    for alarm in &alarms(template) {
        let props = &template["Resources"][&alarm.id]["Properties"];
        assert_eq!(props["Namespace"], var("METRICS_NAMESPACE").as_str());
        assert!(
            ["RequestsInFlight", "CpuUtilization", "MemoryUtilization"]
                .contains(&alarm.metric.as_str()),
            "{alarm:?}"
        );
        assert_eq!(
            props["Period"].as_f64().unwrap(),
            var("METRICS_INTERVAL").parse::<f64>().unwrap(),
            "{alarm:?}"
        );
        assert!(statistic_exists_for_raw_values(props), "{props}");
        let names: Vec<String> = props["Dimensions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["Name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, published, "{alarm:?}");
    }
    let defaults = &template["Parameters"];
    for (param, value) in var("METRICS_DIMENSIONS")
        .split(',')
        .map(|kv| kv.split_once('=').unwrap())
    {
        assert_eq!(defaults[param]["Default"], value, "{param}");
    }
}

/// What lifeguard sends is raw values (RequestsInFlight as Values/Counts, CPU and memory
/// as single values), so every statistic exists: the five plain ones and percentiles.
/// (A statistic set would have no percentile whenever its Minimum and Maximum differ.)
/// The task's readiness mirror: it watches the app container's --ready-port, listens
/// where the target group checks, starts as lifeguard would run it, and is laid out as
/// docs/readiness-mirror.md says (not essential but restarted, a CPU share of its own
/// within the task's, the restricted profile).
fn the_mirror_container_serves_the_ready_port(
    task: &Value,
    app: &Value,
    app_args: &[String],
    checked: u16,
) {
    let mirror = task["containerDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "readiness-mirror")
        .expect("a readiness-mirror container");
    assert_eq!(mirror["entryPoint"][0], "/lifeguard");
    let args = strings(&mirror["command"]);
    assert_eq!(
        flag(&args, "mirror-ready-port"),
        flag(app_args, "ready-port"),
        "the mirror watches the app's ready port"
    );
    assert_eq!(
        mirror["portMappings"][0]["containerPort"],
        f64::from(checked)
    );
    assert_eq!(mirror["essential"], false);
    assert_eq!(mirror["restartPolicy"]["enabled"], true);
    assert!(mirror.get("dependsOn").is_none(), "{mirror}");
    assert_eq!(mirror["user"], "65534");
    assert_eq!(mirror["readonlyRootFilesystem"], true);
    assert_eq!(mirror["linuxParameters"]["capabilities"]["drop"][0], "ALL");
    let cpu = |c: &Value| c["cpu"].as_f64().unwrap();
    assert!(cpu(mirror) >= 64.0, "the mirror's share: {mirror}");
    let task_cpu: f64 = task["cpu"].as_str().unwrap().parse().unwrap();
    assert!(cpu(app) + cpu(mirror) <= task_cpu);
    // It runs as written, on a free port in place of 9597, and answers.
    let port = free_port();
    let mut run = start(
        Mode::Subreaper,
        &args
            .iter()
            .map(String::as_str)
            .chain(["--listen", &listen_flag(port)])
            .collect::<Vec<_>>(),
    );
    wait_for_answer(port, "/livez", 200, "alive");
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

fn statistic_exists_for_raw_values(alarm: &Value) -> bool {
    match (
        alarm["Statistic"].as_str(),
        alarm["ExtendedStatistic"].as_str(),
    ) {
        (Some(s), None) => ["SampleCount", "Sum", "Average", "Minimum", "Maximum"].contains(&s),
        (None, Some(p)) => p
            .strip_prefix('p')
            .and_then(|n| n.parse::<f64>().ok())
            .is_some_and(|n| (0.0..=100.0).contains(&n)),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------
// What the scalers would do, from the examples' own fields.

/// A number of the template: a literal, or a `Ref` to a parameter (its default).
fn number(template: &Value, v: &Value) -> f64 {
    if let Some(n) = v.as_f64() {
        return n;
    }
    if let Some(text) = v.as_str() {
        return text.parse().unwrap_or_else(|_| panic!("not a number: {v}"));
    }
    let name = v["Ref"]
        .as_str()
        .unwrap_or_else(|| panic!("neither a number nor a Ref: {v}"));
    number(template, &template["Parameters"][name]["Default"])
}

/// One CloudWatch alarm of the template and the one policy it drives.
#[derive(Debug)]
struct Alarm {
    id: String,
    metric: String,
    threshold: f64,
    comparison: String,
    policy: String,
}

impl Alarm {
    /// Whether the alarm goes to ALARM when every period shows `value` (a steady load:
    /// any EvaluationPeriods and DatapointsToAlarm are then met).
    fn fires(&self, value: f64) -> bool {
        match self.comparison.as_str() {
            "GreaterThanOrEqualToThreshold" => value >= self.threshold,
            "GreaterThanThreshold" => value > self.threshold,
            "LessThanOrEqualToThreshold" => value <= self.threshold,
            "LessThanThreshold" => value < self.threshold,
            other => panic!("an alarm comparison the test does not know: {other}"),
        }
    }

    fn high(&self) -> bool {
        self.comparison.starts_with("GreaterThan")
    }
}

fn alarms(template: &Value) -> Vec<Alarm> {
    let resources = template["Resources"].as_object().unwrap();
    resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::CloudWatch::Alarm")
        .map(|(id, r)| {
            let p = &r["Properties"];
            let actions = p["AlarmActions"].as_array().unwrap();
            assert_eq!(actions.len(), 1, "{id}: one scaling action per alarm");
            Alarm {
                id: id.clone(),
                metric: p["MetricName"].as_str().unwrap().to_string(),
                threshold: number(template, &p["Threshold"]),
                comparison: p["ComparisonOperator"].as_str().unwrap().to_string(),
                policy: actions[0]["Ref"].as_str().unwrap().to_string(),
            }
        })
        .collect()
}

/// Application Auto Scaling's rounding of a PercentChangeInCapacity: above 1 down,
/// between 0 and 1 to 1, between -1 and 0 to -1, below -1 up (towards zero); then at
/// least MinAdjustmentMagnitude either way.
fn percent_change(current: u64, percent: f64, min_magnitude: f64) -> f64 {
    let raw = current as f64 * percent / 100.0;
    let rounded = if raw >= 1.0 {
        raw.floor()
    } else if raw > 0.0 {
        1.0
    } else if raw > -1.0 && raw < 0.0 {
        -1.0
    } else {
        raw.ceil()
    };
    if rounded != 0.0 && rounded.abs() < min_magnitude {
        min_magnitude.copysign(rounded)
    } else {
        rounded
    }
}

/// The capacity `alarm`'s step-scaling policy asks for when it fires at `value`, before
/// the scalable target's bounds: the step whose bounds hold the breach (value −
/// threshold; above the threshold the lower bound is inclusive, below it the upper).
fn step(template: &Value, alarm: &Alarm, value: f64, current: u64) -> f64 {
    let policy = &template["Resources"][&alarm.policy]["Properties"];
    assert_eq!(policy["PolicyType"], "StepScaling", "{}", alarm.policy);
    let config = &policy["StepScalingPolicyConfiguration"];
    let breach = value - alarm.threshold;
    let bound = |s: &Value, name: &str| (!s[name].is_null()).then(|| number(template, &s[name]));
    let step = config["StepAdjustments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            let (lower, upper) = (
                bound(s, "MetricIntervalLowerBound"),
                bound(s, "MetricIntervalUpperBound"),
            );
            if alarm.high() {
                lower.is_none_or(|l| breach >= l) && upper.is_none_or(|u| breach < u)
            } else {
                lower.is_none_or(|l| breach > l) && upper.is_none_or(|u| breach <= u)
            }
        })
        .unwrap_or_else(|| panic!("{}: no step for a breach of {breach}", alarm.policy));
    let adjustment = number(template, &step["ScalingAdjustment"]);
    let min_magnitude = config["MinAdjustmentMagnitude"].as_f64().unwrap_or(0.0);
    match config["AdjustmentType"].as_str().unwrap() {
        "ChangeInCapacity" => current as f64 + adjustment,
        "ExactCapacity" => adjustment,
        "PercentChangeInCapacity" => {
            current as f64 + percent_change(current, adjustment, min_magnitude)
        }
        other => panic!("an adjustment type the test does not know: {other}"),
    }
}

/// The scalable target's MinCapacity and MaxCapacity.
fn capacity_bounds(template: &Value) -> (u64, u64) {
    let target = template["Resources"]
        .as_object()
        .unwrap()
        .values()
        .find(|r| r["Type"] == "AWS::ApplicationAutoScaling::ScalableTarget")
        .expect("a scalable target");
    let p = &target["Properties"];
    (
        number(template, &p["MinCapacity"]) as u64,
        number(template, &p["MaxCapacity"]) as u64,
    )
}

/// One evaluation of the ECS service's scaling with `load(metric)` in every task: the
/// alarms that fire, and the desired count. When several policies fire, Application
/// Auto Scaling takes the one that gives the largest capacity; the result stays within
/// the scalable target's bounds.
fn ecs_decides(template: &Value, load: &dyn Fn(&str) -> f64, current: u64) -> (Vec<String>, u64) {
    let (min, max) = capacity_bounds(template);
    let mut fired = Vec::new();
    let mut wanted: Option<f64> = None;
    for alarm in alarms(template) {
        let value = load(&alarm.metric);
        if alarm.fires(value) {
            let capacity = step(template, &alarm, value, current);
            wanted = Some(wanted.map_or(capacity, |w| w.max(capacity)));
            fired.push(alarm.id);
        }
    }
    fired.sort();
    let desired = wanted.map_or(current, |w| (w.max(min as f64) as u64).min(max));
    (fired, desired)
}

/// The alarm on `metric` that scales out (or in, `high` false); of several high ones,
/// the lowest threshold (the first to fire).
fn alarm_on(template: &Value, metric: &str, high: bool) -> Alarm {
    alarms(template)
        .into_iter()
        .filter(|a| a.metric == metric && a.high() == high)
        .min_by(|a, b| a.threshold.total_cmp(&b.threshold))
        .unwrap_or_else(|| panic!("no {} alarm on {metric}", if high { "high" } else { "low" }))
}

/// The saturated step: the high in-flight alarm with the highest threshold.
fn saturated_alarm(template: &Value) -> Alarm {
    alarms(template)
        .into_iter()
        .filter(|a| a.metric == "RequestsInFlight" && a.high())
        .max_by(|a, b| a.threshold.total_cmp(&b.threshold))
        .unwrap()
}

#[test]
fn the_saturated_step_adds_400_percent_past_three_times_the_threshold() {
    let all = examples();
    let template = doc(&all, "ecs/scaling.yaml", None);
    let high = alarm_on(template, "RequestsInFlight", true);
    let saturated = saturated_alarm(template);
    assert_ne!(high.id, saturated.id, "a saturated step of its own");
    assert_eq!(saturated.threshold, 3.0 * high.threshold);
    let inflight = |per_task: f64| {
        move |metric: &str| {
            if metric == "RequestsInFlight" {
                per_task
            } else {
                0.0
            }
        }
    };
    // (current, in flight per task, desired): 200 % below the saturated threshold, 400 %
    // from it (the larger capacity wins when both fire), within MaxCapacity.
    for (current, per_task, desired) in [
        (3, high.threshold, 9),
        (3, saturated.threshold - 1.0, 9),
        (3, saturated.threshold, 15),
        (4, saturated.threshold, 20),
        (10, saturated.threshold, 30),
    ] {
        let (fired, got) = ecs_decides(template, &inflight(per_task), current);
        assert_eq!(got, desired, "{current} tasks at {per_task}: {fired:?}");
        assert_eq!(
            fired.contains(&saturated.id),
            per_task >= saturated.threshold
        );
    }
    let config =
        &template["Resources"][&saturated.policy]["Properties"]["StepScalingPolicyConfiguration"];
    assert_eq!(config["Cooldown"], 60);
}

#[test]
fn the_ecs_scaler_arithmetic_matches_awss_own_examples() {
    // (current, percent, MinAdjustmentMagnitude, change): Application Auto Scaling's
    // documented cases (200 % of 10 is +20; 25 % of 4 with a minimum of 2 is +2), and
    // the rounding towards zero.
    for (current, percent, min, change) in [
        (10, 200.0, 0.0, 20.0),
        (4, 25.0, 2.0, 2.0),
        (3, 200.0, 1.0, 6.0),
        (10, 25.0, 1.0, 2.0),
        (3, -25.0, 1.0, -1.0),
        (10, -25.0, 1.0, -2.0),
        (2, 10.0, 0.0, 1.0),
    ] {
        assert_eq!(
            percent_change(current, percent, min),
            change,
            "{percent} % of {current}, at least {min}"
        );
    }
}

#[test]
fn the_ecs_template_scales_out_and_back_in_as_application_auto_scaling_would() {
    let all = examples();
    let template = doc(&all, "ecs/scaling.yaml", None);
    let (min, max) = capacity_bounds(template);
    let high = alarm_on(template, "RequestsInFlight", true);
    let low = alarm_on(template, "RequestsInFlight", false);
    let cpu = alarm_on(template, "CpuUtilization", true);
    assert!(low.threshold < high.threshold, "{low:?} {high:?}");
    // Both directions exist, each with a 60 s cooldown.
    for alarm in [&high, &low, &cpu] {
        let config =
            &template["Resources"][&alarm.policy]["Properties"]["StepScalingPolicyConfiguration"];
        assert_eq!(config["Cooldown"], 60, "{}", alarm.policy);
    }
    assert_ne!(high.policy, low.policy, "scale-in has a policy of its own");

    let threshold = high.threshold;
    let mut table = Vec::new();
    for current in [3, 10] {
        let mut at_twice = 0;
        for per_task in [0.0, threshold - 1.0, 2.0 * threshold, 5.0 * threshold] {
            let load = |metric: &str| {
                if metric == "RequestsInFlight" {
                    per_task
                } else {
                    0.0
                }
            };
            let (fired, desired) = ecs_decides(template, &load, current);
            table.push(format!(
                "{current} tasks, {per_task} in flight each: {fired:?} -> {desired}"
            ));
            let what = format!("{current} tasks at {per_task} in flight: {fired:?} -> {desired}");
            assert!((min..=max).contains(&desired), "{what}");
            if per_task == 0.0 {
                // Idle: back in, to the minimum at most.
                assert_eq!(fired, std::slice::from_ref(&low.id), "{what}");
                assert!(desired < current || desired == min, "{what}");
            } else if per_task < threshold {
                assert!(fired.is_empty(), "{what}");
                assert_eq!(desired, current, "{what}");
            } else {
                assert!(fired.contains(&high.id), "{what}");
                let saturated = saturated_alarm(template);
                let expected: Vec<String> = if per_task >= saturated.threshold {
                    let mut both = vec![high.id.clone(), saturated.id.clone()];
                    both.sort();
                    both
                } else {
                    vec![high.id.clone()]
                };
                assert_eq!(fired, expected, "{what}");
                assert!(desired > current || desired == max, "{what}");
                if per_task == 2.0 * threshold {
                    at_twice = desired;
                } else {
                    assert!(desired >= at_twice, "{what}");
                }
            }
            // Held there, the total load settles on a count that is neither high nor
            // low, or at a bound, and never swings back and forth.
            let total = per_task * current as f64;
            let mut count = current;
            let mut seen = vec![count];
            loop {
                let each = total / count as f64;
                let load = |metric: &str| {
                    if metric == "RequestsInFlight" {
                        each
                    } else {
                        0.0
                    }
                };
                let (_, next) = ecs_decides(template, &load, count);
                if next == count {
                    break;
                }
                assert!(
                    !seen.contains(&next),
                    "{what}: flapping through {seen:?} to {next}"
                );
                seen.push(next);
                count = next;
            }
            let each = total / count as f64;
            assert!(
                !high.fires(each) || count == max,
                "{what}: settles at {count}, {each} each"
            );
            assert!(
                !low.fires(each) || count == min,
                "{what}: settles at {count}, {each} each"
            );
            table.push(format!("  held: {seen:?}"));
        }
        // CPU: with in-flight between its thresholds, CPU alone scales out (lifeguard
        // caps the figure at 100).
        let middle = (low.threshold + high.threshold) / 2.0;
        for percent in [
            0.0,
            cpu.threshold - 1.0,
            2.0 * cpu.threshold,
            5.0 * cpu.threshold,
        ] {
            let figure = f64::min(percent, 100.0);
            let load = |metric: &str| match metric {
                "RequestsInFlight" => middle,
                "CpuUtilization" => figure,
                _ => 0.0,
            };
            let (fired, desired) = ecs_decides(template, &load, current);
            let what = format!("{current} tasks at {figure} % CPU: {fired:?} -> {desired}");
            table.push(what.clone());
            if percent < cpu.threshold {
                assert!(fired.is_empty() && desired == current, "{what}");
            } else {
                assert_eq!(fired, std::slice::from_ref(&cpu.id), "{what}");
                assert!(desired > current || desired == max, "{what}");
            }
        }
        // High CPU and idle in-flight together: the larger capacity, the scale-out, wins.
        let load = |metric: &str| {
            if metric == "CpuUtilization" {
                100.0
            } else {
                0.0
            }
        };
        let (fired, desired) = ecs_decides(template, &load, current);
        assert_eq!(fired.len(), 2, "{fired:?}");
        assert!(
            desired > current || desired == max,
            "{fired:?} -> {desired}"
        );
    }
    eprintln!("{}", table.join("\n"));
}

/// `lifeguard --help`'s default for `--grace`, in seconds.
fn default_grace() -> f64 {
    let out = lifeguard().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    // The option's help, wrapped over lines: from its line to the next option's.
    let mut lines = help
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("--grace"));
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no --grace in --help:\n{help}"));
    let line: String = std::iter::once(first)
        .chain(lines.take_while(|l| !l.trim_start().starts_with('-')))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    let default = line
        .split("[default: ")
        .nth(1)
        .and_then(|d| d.split(']').next())
        .unwrap_or_else(|| panic!("no default in {line}"));
    seconds(default)
}

/// The whole number after the first `key` in `text`.
fn number_after(text: &str, key: &str) -> f64 {
    let rest = text
        .split(key)
        .nth(1)
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"));
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {key:?} in:\n{text}"))
}

/// Every orchestrator's stop timeout named in `text` outlasts `grace`: Docker's 10 s
/// default would SIGKILL lifeguard (and the requests it is draining) before its own
/// deadline.
fn shows_the_stop_timeouts(text: &str, grace: f64, file: &str) {
    for key in [
        "--stop-timeout",
        "stop_grace_period:",
        "terminationGracePeriodSeconds:",
        "\"stopTimeout\":",
    ] {
        let timeout = number_after(text, key);
        assert!(
            timeout > grace,
            "{file}: {key} {timeout} must outlast the grace ({grace} s)"
        );
    }
}

#[test]
fn the_docker_snippets_show_the_stop_timeout_each_orchestrator_needs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The README's first Docker snippet, with lifeguard's default grace.
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let snippet = readme
        .split("```dockerfile")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("a Docker snippet in the README");
    let entrypoint = snippet
        .lines()
        .find(|l| l.starts_with("ENTRYPOINT [\"/lifeguard\""))
        .unwrap_or_else(|| panic!("no lifeguard ENTRYPOINT in {snippet}"));
    assert!(
        !entrypoint.contains("--grace"),
        "the snippet uses the default grace: {entrypoint}"
    );
    shows_the_stop_timeouts(snippet, default_grace(), "README.md");
    // Dockerfile.example, with the grace of its ENTRYPOINT.
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile.example")).unwrap();
    let entrypoint = dockerfile
        .split("\nENTRYPOINT ")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("an ENTRYPOINT");
    let argv: Vec<String> =
        serde_json::from_str(&format!("{}]", entrypoint.replace("\\\n", " "))).unwrap();
    let after = |flag: &str| {
        let at = argv.iter().position(|a| a == flag).unwrap();
        seconds(&argv[at + 1])
    };
    let (drain, max, grace) = (
        after("--drain-delay"),
        after("--drain-max"),
        after("--grace"),
    );
    assert!(drain <= max && max < grace, "{argv:?}");
    shows_the_stop_timeouts(&dockerfile, grace, "Dockerfile.example");
}

#[test]
fn the_dockerfile_pins_the_release_toolchain_and_passes_the_commit() {
    // The build stage cannot run here (no image can be pulled); what it must say can be
    // read: the Rust image pinned to the release, the commit passed in (the context has
    // no .git, and --version would say "unknown").
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile.example")).unwrap();
    let from = dockerfile
        .lines()
        .find(|l| l.starts_with("FROM ") && l.contains(" AS build"))
        .expect("a build stage");
    let tag = from
        .split_whitespace()
        .find_map(|w| w.strip_prefix("rust:"))
        .unwrap_or_else(|| panic!("the build stage is not a Rust image: {from}"));
    let pinned = tag.split('-').next().unwrap();
    assert!(
        pinned.split('.').count() == 3 && pinned.split('.').all(|n| n.parse::<u32>().is_ok()),
        "the Rust image is not pinned to a release (X.Y.Z): {from}"
    );
    // The toolchain the newest release was built with (RELEASES.md).
    let releases = std::fs::read_to_string(root.join("RELEASES.md")).unwrap();
    let toolchain = releases
        .lines()
        .find_map(|l| l.strip_prefix("- toolchain: `rustc "))
        .expect("a release record naming its toolchain");
    assert!(
        toolchain.starts_with(&format!("{pinned} ")),
        "Dockerfile.example builds with rust:{pinned}, the release with rustc {toolchain}"
    );
    let stage: String = dockerfile
        .split(" AS build")
        .nth(1)
        .and_then(|s| s.split("\nFROM ").next())
        .unwrap()
        .to_string();
    assert!(
        stage.contains("ARG LIFEGUARD_COMMIT") && stage.contains("ENV LIFEGUARD_COMMIT="),
        "the build stage does not pass the commit to build.rs"
    );
    let build_rs = std::fs::read_to_string(root.join("build.rs")).unwrap();
    assert!(build_rs.contains("std::env::var(\"LIFEGUARD_COMMIT\")"));
    assert!(dockerfile.contains("--build-arg LIFEGUARD_COMMIT="));
}

#[test]
fn the_cloudformation_template_passes_cfn_lint() {
    cfn_lint("examples/ecs/scaling.yaml");
}

/// cfn-lint, AWS's own linter for CloudFormation, must find nothing in `file`.
fn cfn_lint(file: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("cfn-lint")
        .arg(root.join(file))
        .output()
        .expect(
        "THIS TEST CANNOT RUN: cfn-lint is not installed (scripts/test.sh installs it from PyPI)",
    );
    assert!(
        out.status.success(),
        "{file}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The flags and `LIFEGUARD_*` variables of the release `version`, read from the commit
/// RELEASES.md records for it (its src/cli/flags.rs), or None when it is not recorded.
fn release_options(version: &str) -> Option<(Vec<String>, Vec<String>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let releases = std::fs::read_to_string(root.join("RELEASES.md")).unwrap();
    let section = releases.split(&format!("## {version} ")).nth(1)?;
    let commit = section
        .lines()
        .find_map(|l| l.strip_prefix("- commit: `"))?
        .split('`')
        .next()?
        .to_string();
    let out = Command::new("git")
        .args(["show", &format!("{commit}:src/cli/flags.rs")])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{version}: git show {commit}: a shallow clone?"
    );
    let source = String::from_utf8_lossy(&out.stdout).to_string();
    let flags = source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub(super) "))
        .filter_map(|l| l.split(':').next())
        .map(|field| format!("--{}", field.replace('_', "-")))
        .collect();
    let twins = source
        .split("env = \"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(String::from)
        .collect();
    Some((flags, twins))
}

/// The `--flags` of the command lines in `v` (an array's words before its `--`; the
/// app's own come after it), and the `LIFEGUARD_*` variables it sets (an environment's
/// keys, a task definition's `name`s).
fn lifeguard_words(v: &Value, flags: &mut Vec<String>, twins: &mut Vec<String>) {
    match v {
        Value::Array(items) => {
            for item in items {
                if item == "--" {
                    break;
                }
                if let Some(word) = item.as_str().filter(|w| w.starts_with("--") && w.len() > 2) {
                    flags.push(word.split('=').next().unwrap().to_string());
                }
                lifeguard_words(item, flags, twins);
            }
        }
        Value::Object(map) => {
            // An entry point that ends its own flags with `--` (compose's `entrypoint`,
            // ECS's `entryPoint`) makes `command` the app's arguments.
            let app_command = ["entrypoint", "entryPoint"].iter().any(|k| {
                map.get(*k)
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|w| w == "--"))
            });
            for (key, value) in map {
                if app_command && key == "command" {
                    continue;
                }
                for name in [Some(key.as_str()), value.as_str().filter(|_| key == "name")] {
                    if let Some(name) = name.filter(|n| n.starts_with("LIFEGUARD_")) {
                        twins.push(name.to_string());
                    }
                }
                lifeguard_words(value, flags, twins);
            }
        }
        Value::String(text) => {
            // A compose or task definition may give a command line as one string.
            for word in text.split_whitespace() {
                if word.starts_with("LIFEGUARD_") {
                    twins.push(word.split('=').next().unwrap().to_string());
                }
            }
        }
        _ => {}
    }
}

#[test]
fn the_examples_use_only_what_the_release_they_name_has() {
    // The examples name the lifeguard release their images are built from (the mirror's
    // tag); a task built from them must start on that release. 0.2.0, say, refuses
    // --scale-in-protection with exit 2.
    let all = examples();
    let mut named = std::collections::BTreeSet::new();
    for docs in all.values() {
        let text = docs.to_string();
        for (at, _) in text.match_indices("lifeguard-mirror:") {
            let version: String = text[at + "lifeguard-mirror:".len()..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            named.insert(version);
        }
    }
    assert_eq!(
        named.len(),
        1,
        "the examples name several releases: {named:?}"
    );
    let version = named.into_iter().next().unwrap();
    let Some((flags, twins)) = release_options(&version) else {
        panic!(
            "the examples name lifeguard {version}, which RELEASES.md does not record: \
             name a recorded release"
        );
    };
    for (file, docs) in &all {
        // examples/otlp/ says it needs main (0.4.0): its own test below holds it.
        if file.starts_with("otlp/") {
            continue;
        }
        let (mut used, mut variables) = (Vec::new(), Vec::new());
        for doc in docs.as_array().unwrap() {
            lifeguard_words(doc, &mut used, &mut variables);
        }
        for flag in used {
            // The app's own flags sit after `--`; what is left is lifeguard's, or a
            // container runtime's own (compose's) that lifeguard never sees.
            assert!(
                flags.contains(&flag),
                "{file}: {flag} is not in lifeguard {version}"
            );
        }
        for variable in variables {
            assert!(
                twins.contains(&variable),
                "{file}: {variable} is not in lifeguard {version}"
            );
        }
    }
}

#[test]
fn the_otlp_examples_start_as_written_on_the_version_they_name() {
    // They name 0.4.0, which main is until it is released (the other examples name the
    // last release, which has no METRICS_SINK=otlp).
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("examples/otlp/README.md")).unwrap();
    assert!(readme.contains("lifeguard 0.4.0"), "{readme}");
    assert!(
        env!("CARGO_PKG_VERSION").starts_with("0.4.0"),
        "main is {}: examples/otlp/ names 0.4.0; move it to the release that has OTLP",
        env!("CARGO_PKG_VERSION")
    );
    let all = examples();
    let mut endpoints = Vec::new();
    for file in [
        "otlp/task-definition-cloudwatch.json",
        "otlp/task-definition-collector.json",
    ] {
        let task = doc(&all, file, None);
        let containers = task["containerDefinitions"].as_array().unwrap();
        let web = containers.iter().find(|c| c["name"] == "web").unwrap();
        assert_eq!(strings(&web["entryPoint"]), ["/lifeguard"], "{file}");
        let env: Vec<(String, String)> = web["environment"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let text = |k: &str| e[k].as_str().unwrap().to_string();
                (text("name"), text("value"))
            })
            .collect();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("METRICS_SINK"), Some("otlp"), "{file}");
        assert_eq!(get("OTEL_SERVICE_NAME"), Some("web"), "{file}");
        // As written, the current build starts with it (an unusable OTEL_* value would
        // be exit 2).
        lifeguard_accepts(&strings(&web["command"]), &env);
        endpoints.push((
            file,
            get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
                .or(get("OTEL_EXPORTER_OTLP_ENDPOINT"))
                .map(str::to_string),
        ));
        if let Some(otel) = containers.iter().find(|c| c["name"] == "otel") {
            // The collector: not essential (the app outlives it), CPU of its own that
            // fits the task's beside the app's.
            assert_eq!(otel["essential"], false);
            let (app, own) = (web["cpu"].as_u64().unwrap(), otel["cpu"].as_u64().unwrap());
            let task_cpu: u64 = task["cpu"].as_str().unwrap().parse().unwrap();
            assert!(
                own > 0 && app + own <= task_cpu,
                "{app} + {own} > {task_cpu}"
            );
        }
    }
    assert_eq!(
        endpoints,
        [
            (
                "otlp/task-definition-cloudwatch.json",
                Some("https://monitoring.us-east-1.amazonaws.com/v1/metrics".to_string())
            ),
            (
                "otlp/task-definition-collector.json",
                Some("http://localhost:4318".to_string())
            ),
        ]
    );
    // Kubernetes: a patch to the example Deployment's own container, whose environment
    // lifeguard takes (the kubelet expands $(POD_NAMESPACE) first).
    let patch = doc(&all, "otlp/kubernetes-patch.yaml", Some("Deployment"));
    let deployment = doc(&all, "kubernetes/deployment.yaml", Some("Deployment"));
    assert_eq!(patch["metadata"], {
        let m = &deployment["metadata"];
        serde_json::json!({"name": m["name"], "namespace": m["namespace"]})
    });
    let container = &patch["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["name"],
        deployment["spec"]["template"]["spec"]["containers"][0]["name"]
    );
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .map(|(k, v)| (k, v.replace("$(POD_NAMESPACE)", "shop")))
        .collect();
    assert!(env.contains(&("METRICS_SINK".to_string(), "otlp".to_string())));
    lifeguard_accepts(&[], &env);
    // The role may put metrics, which is what CloudWatch's OTLP endpoint checks.
    let policy = doc(&all, "otlp/task-role-policy.json", None);
    assert_eq!(policy["Statement"][0]["Action"], "cloudwatch:PutMetricData");
    // The PromQL alarm: it passes cfn-lint, is evaluated at CloudWatch's shortest
    // interval, and asks for a figure lifeguard sends, under the resource it sends.
    cfn_lint("examples/otlp/promql-alarm.yaml");
    let template = doc(&all, "otlp/promql-alarm.yaml", None);
    let alarm = &template["Resources"]["InFlightPerTaskAlarm"]["Properties"];
    assert_eq!(alarm["EvaluationInterval"], 10);
    let query = alarm["EvaluationCriteria"]["PromQLCriteria"]["Query"]["Fn::Sub"]
        .as_str()
        .unwrap();
    let metrics = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
    assert!(
        query.contains("\"lifeguard_requests_in_flight\"")
            && metrics.contains("lifeguard_requests_in_flight"),
        "{query}"
    );
    for attribute in ["service.name", "service.instance.id"] {
        assert!(query.contains(&format!("@resource.{attribute}")), "{query}");
    }
}
