//! Kubernetes as its operators run it (examples/kubernetes/): the Deployment fits
//! lifeguard's flags and the stop budget and passes the "restricted" Pod Security
//! profile; the PodMonitor's targets carry the labels the Prometheus Operator gives them
//! and the KEDA query finds them on a real Prometheus; the HPA that KEDA makes scales as
//! the comments say; and a short grace period still gets the app its SIGTERM, with the
//! kubelet's part played as Kubernetes documents it.
mod common;

use std::time::{Duration, Instant};

use serde_json::Value;

use common::examples::*;
use common::prometheus::Server;
use common::*;

#[test]
fn the_kubernetes_example_fits_lifeguards_flags_and_the_stop_budget() {
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
    // The kubelet's preStop sleep waits before the SIGTERM, and lifeguard's grace counts
    // from the SIGTERM: both within the pod's grace period, with the sidecars' stop
    // after them. lifeguard adds no fixed wait of its own on top of the hook's.
    let pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_f64()
        .expect("a preStop sleep: the stop plan docs/kubernetes.md chose");
    assert_eq!(drain, 0.0, "a preStop sleep and a --drain-delay both wait");
    assert!(
        drain <= max && max < grace && pre_stop + grace < kill,
        "preStop {pre_stop} + --grace {grace} must end before the kill at {kill} \
         (--drain-delay {drain} <= --drain-max {max} < --grace)"
    );
    // The native sidecar stops after the web container; what it may take is the rest.
    assert!(
        kill - pre_stop - grace >= 2.0,
        "no margin left for the sidecar's stop"
    );
    // Neither the HPA's count nor a second scrape fights the example: no replicas (the
    // ScaledObject's HPA owns the count), no prometheus.io annotations (the PodMonitor
    // scrapes the pods).
    assert!(
        deployment["spec"].get("replicas").is_none(),
        "a fixed replicas resets the HPA's count on every apply"
    );
    assert!(
        deployment["spec"]["template"]["metadata"]
            .get("annotations")
            .is_none_or(|a| a
                .as_object()
                .unwrap()
                .keys()
                .all(|k| !k.starts_with("prometheus.io/"))),
        "prometheus.io annotations beside a PodMonitor scrape every figure twice"
    );
    admitted_by_the_restricted_profile(pod).unwrap();
    // Every object of the example in one namespace, the one the KEDA query names.
    for (file, kind) in [
        ("kubernetes/deployment.yaml", "Deployment"),
        ("kubernetes/deployment.yaml", "Service"),
        ("kubernetes/deployment.yaml", "Ingress"),
        ("kubernetes/podmonitor.yaml", "PodMonitor"),
        ("kubernetes/keda-scaledobject.yaml", "ScaledObject"),
        ("kubernetes/networkpolicy.yaml", "NetworkPolicy"),
    ] {
        assert_eq!(
            doc(&all, file, Some(kind))["metadata"]["namespace"],
            deployment["metadata"]["namespace"],
            "{file} {kind}"
        );
    }
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
    // Readiness is a TCP connect to the ready port, which the kernel answers even when
    // the app saturates its quota; the port it names is lifeguard's --ready-port.
    assert_eq!(container["readinessProbe"]["tcpSocket"]["port"], "ready");
    assert!(container["readinessProbe"].get("httpGet").is_none());
    assert_eq!(
        flag(&args, "ready-port").unwrap().parse::<u64>().unwrap(),
        port_of("ready")
    );
    // No HTTP app check: at the peak it would time out and close the ready port. With
    // --inflight-port alone, ready means the app's port listens (the kernel's tables).
    assert!(flag(&args, "ready-http").is_none(), "{args:?}");
    probes_ride_out_a_saturated_quota(container, "kubernetes/deployment.yaml");
    // In-flight counting on the app's own port.
    assert_eq!(
        flag(&args, "inflight-port")
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        port_of("http")
    );
    // Scraped on the pods (a PodMonitor): 9595 stays out of the app's Service, where every
    // client of the Service could reach /metrics, as SECURITY.md says to keep it.
    let monitor = doc(&all, "kubernetes/podmonitor.yaml", Some("PodMonitor"));
    assert_eq!(
        monitor["spec"]["podMetricsEndpoints"][0]["path"],
        "/metrics"
    );
    assert_eq!(
        monitor["spec"]["podMetricsEndpoints"][0]["port"],
        "lifeguard"
    );
    let service = doc(&all, "kubernetes/deployment.yaml", Some("Service"));
    let ports = service["spec"]["ports"].as_array().unwrap();
    assert!(
        ports
            .iter()
            .all(|p| p["port"] != 9595 && p["targetPort"] != "lifeguard"),
        "the Service exposes lifeguard's port: {ports:?}"
    );
    // The readiness mirror: a native sidecar on the web container's ready port, checked
    // by the ALB the Ingress makes.
    let mirror = &pod["initContainers"][0];
    assert_eq!(mirror["restartPolicy"], "Always", "a native sidecar");
    let mirror_args = strings(&mirror["args"]);
    assert_eq!(
        flag(&mirror_args, "mirror-ready-port"),
        flag(&args, "ready-port")
    );
    let mirror_port = mirror["ports"][0]["containerPort"].as_f64().unwrap();
    let ingress = doc(&all, "kubernetes/deployment.yaml", Some("Ingress"));
    let annotation = |key: &str| {
        ingress["metadata"]["annotations"][format!("alb.ingress.kubernetes.io/{key}")]
            .as_str()
            .unwrap_or_else(|| panic!("no {key} annotation"))
            .to_string()
    };
    assert_eq!(annotation("healthcheck-port"), mirror_port.to_string());
    assert_eq!(annotation("healthcheck-path"), "/readyz");
    assert_eq!(annotation("target-type"), "ip");
    for (key, want) in [
        ("healthcheck-interval-seconds", "5"),
        ("healthcheck-timeout-seconds", "2"),
        ("healthy-threshold-count", "2"),
        ("unhealthy-threshold-count", "2"),
    ] {
        assert_eq!(annotation(key), want, "{key}");
    }
    let (keda, _, query, _, _) = keda_trigger(&all);
    assert!(query.contains("lifeguard_requests_in_flight"), "{query}");
    assert_eq!(
        keda["spec"]["scaleTargetRef"]["name"],
        deployment["metadata"]["name"]
    );
}

/// A busy pod is never killed or pulled for being busy (a CPU quota its threads use
/// up starves every server in the pod, lifeguard's endpoint included, while the kernel
/// still completes a TCP handshake): liveness by TCP connect, readiness with a timeout
/// of 2 s or more and at least 3 failures before the pod is pulled.
fn probes_ride_out_a_saturated_quota(container: &Value, file: &str) {
    let liveness = &container["livenessProbe"];
    assert!(
        liveness.get("tcpSocket").is_some() && liveness.get("httpGet").is_none(),
        "{file}: liveness must be answered by the kernel (tcpSocket): {liveness}"
    );
    let number = |probe: &Value, key: &str, default: f64| {
        probe.get(key).and_then(Value::as_f64).unwrap_or(default)
    };
    let readiness = &container["readinessProbe"];
    // Kubernetes' defaults: 1 s timeout, 3 failures.
    assert!(
        number(readiness, "timeoutSeconds", 1.0) >= 2.0,
        "{file}: {readiness}"
    );
    assert!(
        number(readiness, "failureThreshold", 3.0) >= 3.0,
        "{file}: {readiness}"
    );
    assert!(
        number(liveness, "timeoutSeconds", 1.0) >= 2.0,
        "{file}: {liveness}"
    );
}

/// The value a KEDA Prometheus trigger's query gives when each of `pods` pods holds
/// `per_pod` requests in flight (what `lifeguard_requests_in_flight` is per pod).
fn query_value(query: &str, pods: u64, per_pod: f64) -> f64 {
    assert!(query.contains("lifeguard_requests_in_flight"), "{query}");
    let function = query.trim().split('(').next().unwrap().trim();
    match function {
        "sum" => pods as f64 * per_pod,
        "avg" | "max" | "min" | "quantile" => per_pod,
        _ => panic!("the test cannot evaluate the query {query}"),
    }
}

/// The HPA's desired count for an external metric: ceil(value ÷ target) for
/// AverageValue, ceil(current × value ÷ target) for Value; no change while the ratio
/// of value to target (per pod for AverageValue) is within 10 % of 1; then within
/// minReplicaCount and maxReplicaCount.
fn hpa_desired(
    metric_type: &str,
    value: f64,
    target: f64,
    current: u64,
    bounds: (u64, u64),
) -> u64 {
    let (ratio, desired) = match metric_type {
        "AverageValue" => (value / (target * current as f64), (value / target).ceil()),
        "Value" => (value / target, (current as f64 * value / target).ceil()),
        other => panic!("a metricType the test does not know: {other}"),
    };
    let desired = if (ratio - 1.0).abs() <= 0.1 {
        current
    } else {
        desired as u64
    };
    desired.clamp(bounds.0, bounds.1)
}

/// The example's KEDA trigger: (the ScaledObject, its metric type, query, threshold,
/// and the replica bounds).
fn keda_trigger(all: &serde_json::Map<String, Value>) -> (Value, String, String, f64, (u64, u64)) {
    let keda = doc(
        all,
        "kubernetes/keda-scaledobject.yaml",
        Some("ScaledObject"),
    )
    .clone();
    let trigger = &keda["spec"]["triggers"][0];
    assert_eq!(trigger["type"], "prometheus");
    // KEDA's default metric type is AverageValue.
    let metric_type = trigger["metricType"]
        .as_str()
        .unwrap_or("AverageValue")
        .to_string();
    let query = trigger["metadata"]["query"].as_str().unwrap().to_string();
    let threshold: f64 = trigger["metadata"]["threshold"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let bounds = (
        keda["spec"]["minReplicaCount"].as_u64().unwrap(),
        keda["spec"]["maxReplicaCount"].as_u64().unwrap(),
    );
    (keda, metric_type, query, threshold, bounds)
}

#[test]
fn the_keda_example_scales_out_and_back_in_as_the_hpa_would() {
    let all = examples();
    let (_, metric_type, query, threshold, bounds) = keda_trigger(&all);
    let (metric_type, query) = (metric_type.as_str(), query.as_str());
    let mut table = Vec::new();
    for current in [3, 10] {
        let mut at_twice = 0;
        for per_pod in [0.0, threshold - 1.0, 2.0 * threshold, 5.0 * threshold] {
            let value = query_value(query, current, per_pod);
            let desired = hpa_desired(metric_type, value, threshold, current, bounds);
            let what = format!(
                "{current} pods at {per_pod} in flight each: {query} = {value} -> {desired}"
            );
            table.push(what.clone());
            if per_pod == 0.0 {
                assert_eq!(desired, bounds.0, "{what}");
            } else if per_pod < threshold {
                assert_eq!(desired, current, "{what}");
            } else {
                // Out, far enough that each pod holds at most the threshold.
                assert!(desired > current || desired == bounds.1, "{what}");
                let total = per_pod * current as f64;
                assert!(
                    desired as f64 * threshold >= total || desired == bounds.1,
                    "{what}"
                );
                if per_pod == 2.0 * threshold {
                    at_twice = desired;
                } else {
                    assert!(desired >= at_twice, "{what}");
                }
            }
        }
    }
    eprintln!("{}", table.join("\n"));
}

/// The "restricted" Pod Security Standard as the admission controller checks it
/// (kubernetes/pod-security-admission, policy/check_*.go), with the baseline rules it
/// includes, for every container, init and ephemeral ones too (policy/visitor.go):
/// the first rule `pod` breaks, or Ok. Plus a read-only root, which the profile does not
/// ask for but SECURITY.md does.
fn admitted_by_the_restricted_profile(pod: &Value) -> Result<(), String> {
    let context = &pod["securityContext"];
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[host] == true {
            return Err(host.to_string());
        }
    }
    const VOLUMES: [&str; 9] = [
        "configMap",
        "downwardAPI",
        "emptyDir",
        "projected",
        "secret",
        "csi",
        "persistentVolumeClaim",
        "ephemeral",
        "image",
    ];
    for volume in pod["volumes"].as_array().into_iter().flatten() {
        let kind = volume
            .as_object()
            .unwrap()
            .keys()
            .find(|k| *k != "name")
            .unwrap();
        if !VOLUMES.contains(&kind.as_str()) {
            return Err(format!("volume type {kind}"));
        }
    }
    if let Some(sysctls) = context["sysctls"].as_array() {
        if !sysctls.is_empty() {
            return Err("sysctls (this check allows none)".into());
        }
    }
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| pod[*list].as_array().cloned().unwrap_or_default());
    for c in containers {
        let name = c["name"].as_str().unwrap_or("?").to_string();
        let own = &c["securityContext"];
        let either = |key: &str| own.get(key).filter(|v| !v.is_null()).or(context.get(key));
        if own["privileged"] == true {
            return Err(format!("{name}: privileged"));
        }
        if either("runAsNonRoot") != Some(&Value::Bool(true)) {
            return Err(format!("{name}: runAsNonRoot is not true"));
        }
        if either("runAsUser").and_then(Value::as_f64) == Some(0.0) {
            return Err(format!("{name}: runAsUser 0"));
        }
        if own["allowPrivilegeEscalation"] != false {
            return Err(format!("{name}: allowPrivilegeEscalation is not false"));
        }
        match either("seccompProfile").and_then(|p| p["type"].as_str()) {
            Some("RuntimeDefault") | Some("Localhost") => {}
            other => return Err(format!("{name}: seccompProfile {other:?}")),
        }
        let caps = &own["capabilities"];
        if !caps["drop"]
            .as_array()
            .is_some_and(|d| d.iter().any(|c| c == "ALL"))
        {
            return Err(format!("{name}: capabilities do not drop ALL"));
        }
        if caps["add"]
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c != "NET_BIND_SERVICE"))
        {
            return Err(format!(
                "{name}: adds a capability other than NET_BIND_SERVICE"
            ));
        }
        if c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["hostPort"].as_f64().unwrap_or(0.0) != 0.0)
        {
            return Err(format!("{name}: hostPort"));
        }
        if !matches!(own["procMount"].as_str(), None | Some("Default")) {
            return Err(format!("{name}: procMount"));
        }
        if own["readOnlyRootFilesystem"] != true {
            return Err(format!("{name}: the root filesystem is writable"));
        }
    }
    Ok(())
}

#[test]
fn the_restricted_check_refuses_what_the_profile_refuses() {
    // The check itself can fail: each rule broken once on the example's own pod.
    let all = examples();
    let pod = doc(&all, "kubernetes/deployment.yaml", Some("Deployment"))["spec"]["template"]
        ["spec"]
        .clone();
    admitted_by_the_restricted_profile(&pod).unwrap();
    type Breaking = (&'static str, fn(&mut Value));
    let broken: [Breaking; 6] = [
        ("runAsNonRoot", |p| {
            p["securityContext"]["runAsNonRoot"] = false.into()
        }),
        ("allowPrivilegeEscalation", |p| {
            p["containers"][0]["securityContext"]
                .as_object_mut()
                .unwrap()
                .remove("allowPrivilegeEscalation");
        }),
        ("seccompProfile", |p| {
            p["securityContext"]
                .as_object_mut()
                .unwrap()
                .remove("seccompProfile");
        }),
        ("drop ALL", |p| {
            p["initContainers"][0]["securityContext"]["capabilities"]["drop"] =
                serde_json::json!([])
        }),
        ("NET_BIND_SERVICE", |p| {
            p["containers"][0]["securityContext"]["capabilities"]["add"] =
                serde_json::json!(["NET_RAW"])
        }),
        ("hostPID", |p| p["hostPID"] = true.into()),
    ];
    for (rule, breaking) in broken {
        let mut p = pod.clone();
        breaking(&mut p);
        assert!(
            admitted_by_the_restricted_profile(&p).is_err(),
            "{rule} broken, still admitted"
        );
    }
}

#[test]
fn the_example_images_run_as_65534() {
    // The restricted profile admits a container that runs as a non-zero uid; the
    // images the examples build set it, in the stage that is the image.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "Dockerfile.example",
        "examples/docker/Dockerfile.scratch",
        "examples/docker/Dockerfile.mirror",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let last_stage = text.rsplit("\nFROM ").next().unwrap();
        assert!(
            last_stage.lines().any(|l| l.trim() == "USER 65534"),
            "{file}: its image runs as root"
        );
    }
}

#[test]
fn the_network_policy_admits_metrics_only_from_monitoring() {
    let all = examples();
    let deployment = doc(&all, "kubernetes/deployment.yaml", Some("Deployment"));
    let policy = doc(&all, "kubernetes/networkpolicy.yaml", Some("NetworkPolicy"));
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (k, v) in policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&pod_labels[k], v, "the policy selects the web pods");
    }
    let rules = policy["spec"]["ingress"].as_array().unwrap();
    let admitting = |port: f64| -> Vec<&Value> {
        rules
            .iter()
            .filter(|r| {
                r["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["port"] == port)
            })
            .collect()
    };
    // The app's port from anyone; lifeguard's endpoint only from a namespace selector.
    assert!(admitting(8080.0).iter().any(|r| r.get("from").is_none()));
    let metrics = admitting(9595.0);
    assert!(!metrics.is_empty(), "the scraper cannot reach /metrics");
    for rule in metrics {
        let from = rule["from"].as_array().expect("9595 open to every client");
        assert!(
            from.iter().all(|f| f.get("namespaceSelector").is_some()),
            "{rule}"
        );
    }
    assert!(
        !admitting(9597.0).is_empty(),
        "the balancer cannot reach the mirror"
    );
}

/// The HPA's replica count after each 15 s sync (kube-controller-manager's default
/// --horizontal-pod-autoscaler-sync-period), for the total in flight `load(t)`, with
/// the scaling behaviour `behavior` (the HPA's defaults where a field is absent), from
/// `start` pods: the HPA documentation's algorithm ("Configurable scaling behavior"):
/// the desired count from the metric, stabilised (the lowest wish of the scale-up window,
/// the highest of the scale-down window), then limited by the policies over their
/// periods (selectPolicy Max: the one that allows the largest change).
fn hpa_over_time(
    behavior: &Value,
    metric: (&str, &str, f64),
    bounds: (u64, u64),
    start: u64,
    load: impl Fn(u64) -> f64,
    until: u64,
) -> Vec<(u64, u64)> {
    let (metric_type, query, threshold) = metric;
    let defaults = serde_json::json!({
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15},
                                 {"type": "Pods", "value": 4, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
                      "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
    });
    let rule = |dir: &str, key: &str| -> Value {
        behavior[dir]
            .get(key)
            .cloned()
            .unwrap_or_else(|| defaults[dir][key].clone())
    };
    let mut current = start;
    // (time, recommendation) and (time, replicas after the sync)
    let mut wishes: Vec<(u64, u64)> = Vec::new();
    let mut history: Vec<(u64, u64)> = vec![(0, start)];
    let at = |history: &[(u64, u64)], t: i64| -> u64 {
        history
            .iter()
            .rev()
            .find(|(when, _)| (*when as i64) <= t)
            .map_or(start, |h| h.1)
    };
    let mut t = 0;
    while t <= until {
        // The metric's pods are the ones running (a sum does not depend on them).
        let per_pod = load(t) / current as f64;
        let wish = hpa_desired(
            metric_type,
            query_value(query, current, per_pod),
            threshold,
            current,
            bounds,
        );
        wishes.push((t, wish));
        let window = |dir: &str| rule(dir, "stabilizationWindowSeconds").as_u64().unwrap();
        let recent = |secs: u64| {
            wishes
                .iter()
                .filter(move |(w, _)| w + secs >= t)
                .map(|w| w.1)
        };
        let up = recent(window("scaleUp")).min().unwrap();
        let down = recent(window("scaleDown")).max().unwrap();
        let mut next = current;
        if next < up {
            next = up;
        }
        if next > down {
            next = down;
        }
        let limit = |dir: &str| -> Vec<u64> {
            rule(dir, "policies")
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    let period = p["periodSeconds"].as_i64().unwrap();
                    let base = at(&history, t as i64 - period) as f64;
                    let value = p["value"].as_f64().unwrap();
                    match (dir, p["type"].as_str().unwrap()) {
                        ("scaleUp", "Percent") => (base * (1.0 + value / 100.0)).ceil() as u64,
                        ("scaleUp", _) => base as u64 + value as u64,
                        (_, "Percent") => (base * (1.0 - value / 100.0)).ceil() as u64,
                        (_, _) => (base as u64).saturating_sub(value as u64),
                    }
                })
                .collect()
        };
        if next > current {
            next = next.min(limit("scaleUp").into_iter().max().unwrap());
        } else if next < current {
            next = next.max(limit("scaleDown").into_iter().min().unwrap());
        }
        current = next.clamp(bounds.0, bounds.1);
        history.push((t, current));
        t += 15;
    }
    history
}

#[test]
fn the_hpa_keda_makes_scales_as_the_comments_say() {
    let all = examples();
    let (keda, metric_type, query, threshold, bounds) = keda_trigger(&all);
    let meta = &keda["spec"]["triggers"][0]["metadata"];
    let metric = (metric_type.as_str(), query.as_str(), threshold);
    // An empty answer is an error that falls back to more pods, never a silent 0.
    assert_eq!(
        meta["ignoreNullValues"], "false",
        "an empty query would read as no load"
    );
    let fallback = keda["spec"]["fallback"]["replicas"]
        .as_u64()
        .expect("a fallback");
    assert!(fallback > bounds.0 && fallback <= bounds.1);
    // pollingInterval and cooldownPeriod only take a workload to and from zero.
    assert!(bounds.0 > 0);
    assert!(
        keda["spec"].get("cooldownPeriod").is_none(),
        "it does nothing above zero pods"
    );
    let behavior = &keda["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"];
    let defaults = Value::Null;
    let reached = |behavior: &Value, start: u64, load: f64, want: u64| -> u64 {
        let run = hpa_over_time(behavior, metric, bounds, start, |_| load, 600);
        run.iter()
            .find(|(_, n)| *n == want)
            .map(|(t, _)| *t)
            .unwrap_or_else(|| panic!("never {want}: {run:?}"))
    };
    // "3 pods holding 40 each (120) -> 6 pods", at the first sync.
    assert_eq!(reached(behavior, 3, 120.0, 6), 0);
    // "10 pods at 100 each -> 50, capped at maxReplicaCount": one sync with the example's
    // 400 %, two with the HPA's default (+100 % or +4 per 15 s).
    assert_eq!(reached(behavior, 10, 1000.0, bounds.1), 0);
    assert_eq!(reached(&defaults, 10, 1000.0, bounds.1), 15);
    // Load gone: nothing for 2 minutes of lower wishes, then at most half the pods a
    // minute, down to minReplicaCount. The wishes before the drop were for 30.
    let run = hpa_over_time(
        behavior,
        metric,
        bounds,
        30,
        |t| if t < 120 { 600.0 } else { 0.0 },
        900,
    );
    let after = |t: u64| run.iter().rev().find(|(w, _)| *w <= t).unwrap().1;
    assert_eq!(after(120 + 105), 30, "{run:?}");
    assert_eq!(after(120 + 120), 15, "{run:?}");
    assert!(run.windows(2).all(|w| w[1].1 * 2 >= w[0].1), "{run:?}");
    let floor = run
        .iter()
        .find(|(_, n)| *n == bounds.0)
        .expect("back to the minimum")
        .0;
    assert!(floor <= 120 + 120 + 4 * 60, "{run:?}");
    eprintln!("scale-in: {run:?}");
}

/// The relabelling the Prometheus Operator writes for a PodMonitor endpoint
/// (prometheus-operator, pkg/prometheus/promcfg.go, generatePodMonitorConfig), for the
/// fields the example uses: keep pods that match the selector's matchLabels and not
/// Failed or Succeeded, keep the container port by name, then namespace, container and
/// pod labels, job = "<namespace>/<name>" unless jobLabel names a pod label that is
/// set, and endpoint = the port's name.
fn operator_relabelings(monitor: &Value) -> String {
    let sanitize = |s: &str| s.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
    let mut rules = vec![
        "{source_labels: [job], target_label: __tmp_prometheus_job_name}".to_string(),
        "{source_labels: [__meta_kubernetes_pod_phase], regex: '(Failed|Succeeded)', action: drop}"
            .into(),
    ];
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        let k = sanitize(k);
        rules.push(format!(
            "{{action: keep, source_labels: [__meta_kubernetes_pod_label_{k}, __meta_kubernetes_pod_labelpresent_{k}], regex: '({});true'}}",
            v.as_str().unwrap()
        ));
    }
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    let port = endpoint["port"].as_str().unwrap();
    rules.push(format!("{{action: keep, source_labels: [__meta_kubernetes_pod_container_port_name], regex: {port}}}"));
    for (meta, label) in [
        ("namespace", "namespace"),
        ("pod_container_name", "container"),
        ("pod_name", "pod"),
    ] {
        rules.push(format!(
            "{{source_labels: [__meta_kubernetes_{meta}], target_label: {label}}}"
        ));
    }
    let (namespace, name) = (
        monitor["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default"),
        monitor["metadata"]["name"].as_str().unwrap(),
    );
    rules.push(format!(
        "{{target_label: job, replacement: '{namespace}/{name}'}}"
    ));
    if let Some(job_label) = monitor["spec"]["jobLabel"].as_str() {
        rules.push(format!(
            "{{source_labels: [__meta_kubernetes_pod_label_{}], target_label: job, regex: '(.+)', replacement: '${{1}}'}}",
            sanitize(job_label)
        ));
    }
    rules.push(format!("{{target_label: endpoint, replacement: {port}}}"));
    rules.iter().map(|r| format!("      - {r}\n")).collect()
}

/// What Kubernetes service discovery says of one pod of the Deployment: its namespace,
/// name, labels, and the container port by name (lifeguard's endpoint at `address`).
fn pod_as_discovered(deployment: &Value, address: &str) -> String {
    let template = &deployment["spec"]["template"];
    let container = &template["spec"]["containers"][0];
    let mut labels = vec![
        (
            "__meta_kubernetes_namespace".to_string(),
            deployment["metadata"]["namespace"]
                .as_str()
                .unwrap()
                .to_string(),
        ),
        (
            "__meta_kubernetes_pod_name".into(),
            "web-5d8f7c9b4-x2x7k".into(),
        ),
        ("__meta_kubernetes_pod_phase".into(), "Running".into()),
        (
            "__meta_kubernetes_pod_container_name".into(),
            container["name"].as_str().unwrap().into(),
        ),
        (
            "__meta_kubernetes_pod_container_port_name".into(),
            "lifeguard".into(),
        ),
    ];
    for (k, v) in template["metadata"]["labels"].as_object().unwrap() {
        let k = k.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        labels.push((
            format!("__meta_kubernetes_pod_label_{k}"),
            v.as_str().unwrap().into(),
        ));
        labels.push((
            format!("__meta_kubernetes_pod_labelpresent_{k}"),
            "true".into(),
        ));
    }
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}: '{v}'")).collect();
    format!(
        "      - targets: ['{address}']\n        labels: {{{}}}\n",
        labels.join(", ")
    )
}

#[test]
fn the_keda_query_finds_the_pods_the_prometheus_operator_labels() {
    let all = examples();
    let deployment = doc(&all, "kubernetes/deployment.yaml", Some("Deployment"));
    let monitor = doc(&all, "kubernetes/podmonitor.yaml", Some("PodMonitor"));
    let (_, _, query, _, _) = keda_trigger(&all);
    // The container's lifeguard with its endpoint on, its app on --inflight-port.
    let port = free_port();
    let app_port = free_port().to_string();
    let run = start(
        Mode::Pid1,
        &args(
            &["--listen", &listen_flag(port), "--inflight-port", &app_port],
            &["--http", &app_port],
        ),
    );
    run.ready();
    // A Prometheus with the PodMonitor's job as the Operator writes it; the pod that
    // Kubernetes discovery would find stands in a static config with the same meta
    // labels, and the Operator's own relabelling turns them into the targets' labels.
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    let server = Server::with_scrape_configs(&format!(
        "  - job_name: podMonitor/{}/{}/0\n    metrics_path: {}\n    static_configs:\n{}    relabel_configs:\n{}",
        monitor["metadata"]["namespace"].as_str().unwrap(),
        monitor["metadata"]["name"].as_str().unwrap(),
        endpoint["path"].as_str().unwrap(),
        pod_as_discovered(deployment, &format!("127.0.0.1:{port}")),
        operator_relabelings(monitor),
    ));
    // The example's query, as KEDA sends it: a value, from exactly one series (KEDA
    // refuses an answer of several).
    let found = wait_until_patient(Duration::from_secs(30), || {
        let path = format!("/api/v1/query?query={}", percent_encode(&query));
        let (status, body) = request(server.port, "GET", &path).ok()?;
        let doc: Value = serde_json::from_str(&body).ok()?;
        let result = doc.pointer("/data/result")?.as_array()?.clone();
        (status == 200 && !result.is_empty()).then_some(result)
    });
    assert_eq!(found.len(), 1, "{found:?}");
    // And the labels the docs name: job from the pod's app label, the namespace.
    assert_eq!(
        server.query(
            "count(up{job=\"web\",namespace=\"shop\",endpoint=\"lifeguard\",container=\"web\"})"
        ),
        1.0
    );
    drop(run);
}

#[test]
fn without_job_label_the_operator_names_the_job_namespace_slash_name() {
    // What the example used to meet: no jobLabel, so job="shop/web", and a query for
    // job="web" is empty — which KEDA's default ignoreNullValues reads as 0.
    let all = examples();
    let mut monitor = doc(&all, "kubernetes/podmonitor.yaml", Some("PodMonitor")).clone();
    monitor["spec"].as_object_mut().unwrap().remove("jobLabel");
    let rules = operator_relabelings(&monitor);
    assert!(
        rules.contains("{target_label: job, replacement: 'shop/web'}"),
        "{rules}"
    );
    assert!(!rules.contains("target_label: job, regex"), "{rules}");
}

/// `text` with what a URL query may not hold percent-encoded.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The kubelet's stop of one container, as Kubernetes documents it (the Pod Lifecycle
/// page, "Termination of Pods"; kuberuntime's killContainer): the preStop hook first, its
/// time counted in the grace period; then the stop signal; the SIGKILL at the end of the
/// grace period. A hook still running at the grace's end is cut, and the kubelet grants
/// "a small, one-off grace period extension of 2 seconds": the stop signal then, the
/// SIGKILL 2 s later. Returns (when the stop signal goes, when the SIGKILL goes).
fn kubelet_stop(pre_stop: f64, grace: f64) -> (f64, f64) {
    if pre_stop < grace {
        (pre_stop, grace)
    } else {
        (grace, grace + 2.0)
    }
}

/// Plays the kubelet's stop against lifeguard (PID 1, `flags`, `--inflight-port
/// app_port`) and the test app serving HTTP on `app_port` (on SIGTERM it closes its port,
/// finishes what is in flight and exits 0): the app's lines, and lifeguard's exit code
/// if it exited by itself before the SIGKILL.
fn stop_like_the_kubelet(
    flags: &[&str],
    app_port: &str,
    pre_stop: f64,
    grace: f64,
) -> (Vec<String>, Option<i32>) {
    let mut all: Vec<&str> = flags.to_vec();
    all.extend(["--inflight-port", app_port]);
    let mut run = start(Mode::Pid1, &args(&all, &["--http", app_port]));
    run.ready();
    let (term_at, kill_at) = kubelet_stop(pre_stop, grace);
    let deleted = Instant::now();
    let at = |secs: f64| deleted + Duration::from_secs_f64(secs);
    // The kubelet's clock: these waits are the scenario's timeline, not synchronisation.
    std::thread::sleep(at(term_at).saturating_duration_since(Instant::now()));
    run.signal(libc::SIGTERM);
    let exited = loop {
        if let Some(code) = run.try_exit() {
            break Some(code);
        }
        if Instant::now() >= at(kill_at) {
            run.signal(libc::SIGKILL);
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if exited.is_none() {
        wait_until("the SIGKILLed lifeguard to be gone", || run.try_exit());
    }
    (run.stdout(), exited)
}

#[test]
fn a_3s_grace_period_still_gets_the_app_its_sigterm_with_the_examples_stop_plan() {
    // kubectl delete --grace-period=3 (an eviction, a node's shutdown): less than the
    // preStop sleep. The example's plan: the kubelet cuts the hook at 3 s, sends the
    // SIGTERM, and kills at 5 s; lifeguard relays at once on a quiet port, and the app
    // closes its port and exits 0 in the 2 s left.
    let all = examples();
    let container = &doc(&all, "kubernetes/deployment.yaml", Some("Deployment"))["spec"]
        ["template"]["spec"]["containers"][0];
    let pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_f64()
        .unwrap();
    let example = strings(&container["args"]);
    let app_port = free_port().to_string();
    let flags: Vec<String> = example
        .iter()
        .take_while(|a| *a != "--")
        .filter(|a| !a.starts_with("--ready-port") && !a.starts_with("--inflight-port"))
        .cloned()
        .collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (lines, exited) = stop_like_the_kubelet(&flags, &app_port, pre_stop, 3.0);
    assert!(
        lines.iter().any(|l| l == "signal TERM"),
        "the app never got its SIGTERM: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "exiting"),
        "the app's cleanup was cut: {lines:?}"
    );
    assert_eq!(exited, Some(0), "{lines:?}");

    // The plan it replaced, lifeguard's own 5 s delay and no hook: the SIGKILL at 3 s
    // comes while lifeguard still holds the SIGTERM, and the app never sees one (tini
    // would have relayed it at once).
    let (lines, exited) = stop_like_the_kubelet(
        &[
            "--drain-delay",
            "5s",
            "--drain-max",
            "15s",
            "--grace",
            "25s",
        ],
        &app_port,
        0.0,
        3.0,
    );
    assert!(!lines.iter().any(|l| l == "signal TERM"), "{lines:?}");
    assert_eq!(exited, None);
}
