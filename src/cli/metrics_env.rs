//! The environment contract of CloudWatch publishing: `METRICS_NAMESPACE`,
//! `METRICS_INTERVAL`, `METRICS_DIMENSIONS`, `METRICS_BURST_THRESHOLD`, `METRICS_EXTRA`
//! (the metrics sent only on request) and `AWS_EMF_AGENT_ENDPOINT`, read into
//! `settings::CloudWatch`. A value that cannot be used is refused at start, naming the
//! variable and the accepted form: a typo in a task definition should fail the deploy,
//! not publish nothing for months.
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::settings::{Agent, CloudWatch as Config, Sink};

/// CloudWatch allows at most 30 dimensions per metric.
pub const MAX_DIMENSIONS: usize = 30;
const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// The metrics `METRICS_EXTRA` may name.
pub const EXTRA_METRICS: [&str; 2] = ["OldestRequestAge", "ScaleInProtected"];

/// `METRICS_SINK` (`--metrics-sink`): the two ways to CloudWatch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum SinkKind {
    /// PutMetricData through the AWS SDK (credentials and the permission needed).
    #[default]
    Api,
    /// Embedded Metric Format log records: to the CloudWatch agent, or on stdout for
    /// the log driver (no credentials, no AWS call).
    Emf,
    /// OTLP/HTTP protobuf to an OpenTelemetry collector (OTEL_EXPORTER_OTLP_*).
    Otlp,
}

/// Reads the contract; `Ok(None)` when publishing is off (no namespace, and not OTLP,
/// which needs none: `METRICS_SINK=otlp` alone turns it on).
pub fn from_env(
    lookup: &impl Fn(&str) -> Option<String>,
    sink: SinkKind,
) -> Result<Option<Config>, String> {
    let otlp = sink == SinkKind::Otlp;
    let namespace = lookup("METRICS_NAMESPACE").filter(|n| !n.trim().is_empty());
    if namespace.is_none() && !otlp {
        return Ok(None);
    }
    let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    // OTLP sends every figure, with the resource's attributes for dimensions: the
    // CloudWatch-only variables are ignored there (and said to be, by `ignored`).
    let extra = match set("METRICS_EXTRA") {
        Some(text) if !otlp => extra_of(&text)?,
        _ => Vec::new(),
    };
    Ok(Some(Config {
        sink: match sink {
            SinkKind::Api => Sink::Api,
            SinkKind::Emf => Sink::Emf(match set("AWS_EMF_AGENT_ENDPOINT") {
                Some(text) => Some(agent_of(&text)?),
                None => None,
            }),
            SinkKind::Otlp => Sink::Otlp(super::otel_env::from_env(lookup)?),
        },
        namespace: match namespace {
            Some(namespace) if !otlp => namespace_of(namespace.trim())?,
            _ => String::new(),
        },
        // OpenTelemetry's own interval variable wins for OTLP; lifeguard's default (10 s,
        // not the SDK's 60 s) holds for every sink: fresh figures are the point.
        interval: match (
            otlp.then(|| super::otel_env::interval(lookup))
                .transpose()?
                .flatten(),
            set("METRICS_INTERVAL"),
        ) {
            (Some(interval), _) => interval,
            (None, Some(text)) => interval_of(&text)?,
            (None, None) => DEFAULT_INTERVAL,
        },
        dimensions: match set("METRICS_DIMENSIONS") {
            Some(text) if !otlp => dimensions_of(&text)?,
            _ => Vec::new(),
        },
        burst_threshold: match set("METRICS_BURST_THRESHOLD") {
            Some(text) => threshold_of(&text)?,
            None => None,
        },
        oldest_request_age: extra.contains(&"OldestRequestAge"),
        scale_in_protected: extra.contains(&"ScaleInProtected"),
    }))
}

/// The METRICS_* variables set while METRICS_NAMESPACE is not: publishing is off, so
/// they are ignored, and said to be (a warning, not a refusal: a platform may set them
/// for every task, publishing or not, and an unused value must not fail a deploy).
///
/// Under `METRICS_SINK=otlp` publishing needs no namespace; there the CloudWatch-only
/// variables are the ignored ones.
pub fn ignored(lookup: &impl Fn(&str) -> Option<String>, sink: SinkKind) -> Vec<&'static str> {
    let names: &[&'static str] = if sink == SinkKind::Otlp {
        &["METRICS_NAMESPACE", "METRICS_DIMENSIONS", "METRICS_EXTRA"]
    } else if lookup("METRICS_NAMESPACE").is_some_and(|n| !n.trim().is_empty()) {
        return Vec::new();
    } else {
        &[
            "METRICS_INTERVAL",
            "METRICS_DIMENSIONS",
            "METRICS_BURST_THRESHOLD",
            "METRICS_EXTRA",
        ]
    };
    names
        .iter()
        .copied()
        .filter(|name| lookup(name).is_some_and(|v| !v.trim().is_empty()))
        .collect()
}

/// CloudWatch's rule: 1-255 characters of letters, digits and `. - _ / # :` (and
/// spaces), not beginning with `AWS/` (reserved for AWS's own services).
fn namespace_of(text: &str) -> Result<String, String> {
    let form = "expected a namespace like MyCompany/web: 1-255 letters, digits, spaces or . - _ / # :, not beginning with AWS/";
    let allowed = |c: char| c.is_ascii_alphanumeric() || " .-_/#:".contains(c);
    if text.len() > 255 || !text.chars().all(allowed) {
        return Err(format!("METRICS_NAMESPACE '{text}' cannot be used: {form}"));
    }
    if text.starts_with("AWS/") {
        return Err(format!(
            "METRICS_NAMESPACE '{text}' is reserved for AWS's own metrics: {form}"
        ));
    }
    Ok(text.to_string())
}

fn interval_of(text: &str) -> Result<Duration, String> {
    // CloudWatch's high resolution is one second; a shorter interval would leave each
    // call less time than it takes.
    let form = "expected seconds from 1 to 86400, like 10, 30 or 2.5 (CloudWatch's high resolution is 1 s)";
    let day = Duration::from_secs(86_400);
    match crate::seconds::plain(text.trim()) {
        Some(d) if (Duration::from_secs(1)..=day).contains(&d) => Ok(d),
        _ => Err(format!("METRICS_INTERVAL '{text}' cannot be used: {form}")),
    }
}

/// `K=V,K=V`; each name 1-255 characters, each value 1-1024 (CloudWatch's limits).
fn dimensions_of(text: &str) -> Result<Vec<(String, String)>, String> {
    let form =
        "expected NAME=VALUE pairs separated by commas, like ClusterName=prod,ServiceName=web";
    let mut dimensions: Vec<(String, String)> = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(format!("METRICS_DIMENSIONS: '{pair}' has no '=': {form}"));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty() || value.is_empty() || name.len() > 255 || value.len() > 1024 {
            return Err(format!(
                "METRICS_DIMENSIONS: '{pair}' needs a name (1-255 characters) and a value (1-1024): {form}"
            ));
        }
        if dimensions.iter().any(|(n, _)| n == name) {
            return Err(format!(
                "METRICS_DIMENSIONS: '{name}' is given twice: {form}"
            ));
        }
        dimensions.push((name.to_string(), value.to_string()));
    }
    if dimensions.len() > MAX_DIMENSIONS {
        return Err(format!(
            "METRICS_DIMENSIONS has {} dimensions; CloudWatch takes at most {MAX_DIMENSIONS}: {form}",
            dimensions.len()
        ));
    }
    Ok(dimensions)
}

/// `tcp://host:port` or `udp://host:port`.
fn agent_of(text: &str) -> Result<Agent, String> {
    let form = "expected tcp://HOST:PORT or udp://HOST:PORT, like tcp://127.0.0.1:25888";
    let fail = || format!("AWS_EMF_AGENT_ENDPOINT '{text}' cannot be used: {form}");
    let (scheme, rest) = text.trim().split_once("://").ok_or_else(fail)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(fail)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(fail)?;
    if host.is_empty() {
        return Err(fail());
    }
    match scheme {
        "tcp" => Ok(Agent::Tcp(host.to_string(), port)),
        "udp" => Ok(Agent::Udp(host.to_string(), port)),
        _ => Err(fail()),
    }
}

fn threshold_of(text: &str) -> Result<Option<u64>, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(format!(
            "METRICS_BURST_THRESHOLD '{text}' cannot be used: expected a whole number of requests, 0 or more (0: no burst publishing)"
        )),
    }
}

/// `OldestRequestAge[,…]`: names of `EXTRA_METRICS`, any case.
fn extra_of(text: &str) -> Result<Vec<&'static str>, String> {
    let mut named = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match EXTRA_METRICS.iter().find(|m| m.eq_ignore_ascii_case(name)) {
            Some(metric) => named.push(*metric),
            None => {
                return Err(format!(
                    "METRICS_EXTRA: '{name}' is not a metric lifeguard can add: expected a comma-separated list of {}",
                    EXTRA_METRICS.join(", ")
                ))
            }
        }
    }
    Ok(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> Result<Option<Config>, String> {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let sink = match env.get("METRICS_SINK").map(String::as_str) {
            Some("emf") => SinkKind::Emf,
            Some("otlp") => SinkKind::Otlp,
            _ => SinkKind::Api,
        };
        from_env(&|name: &str| env.get(name).cloned(), sink)
    }

    #[test]
    fn the_emf_sink_takes_the_agent_as_aws_libraries_name_it() {
        let emf = |agent: Option<&str>| {
            let mut pairs = vec![("METRICS_NAMESPACE", "Acme/web"), ("METRICS_SINK", "emf")];
            if let Some(agent) = agent {
                pairs.push(("AWS_EMF_AGENT_ENDPOINT", agent));
            }
            read(&pairs).map(|c| c.unwrap().sink)
        };
        assert_eq!(emf(None), Ok(Sink::Emf(None)));
        assert_eq!(
            emf(Some("tcp://127.0.0.1:25888")),
            Ok(Sink::Emf(Some(Agent::Tcp("127.0.0.1".into(), 25888))))
        );
        assert_eq!(
            emf(Some("udp://[::1]:25888")),
            Ok(Sink::Emf(Some(Agent::Udp("::1".into(), 25888))))
        );
        for bad in [
            "127.0.0.1:25888",
            "http://agent:25888",
            "tcp://agent",
            "tcp://:1",
            "tcp://a:0",
        ] {
            let err = emf(Some(bad)).unwrap_err();
            assert!(
                err.starts_with("AWS_EMF_AGENT_ENDPOINT") && err.contains("tcp://HOST:PORT"),
                "{bad}: {err}"
            );
        }
        // The API sink ignores the agent.
        let api = read(&[
            ("METRICS_NAMESPACE", "A/b"),
            ("AWS_EMF_AGENT_ENDPOINT", "junk"),
        ]);
        assert_eq!(api.unwrap().unwrap().sink, Sink::Api);
    }

    #[test]
    fn off_without_a_namespace_and_defaults_with_one() {
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(
            read(&[("METRICS_NAMESPACE", " "), ("METRICS_INTERVAL", "x")]),
            Ok(None)
        );
        assert_eq!(
            read(&[("METRICS_NAMESPACE", "Acme/web")]),
            Ok(Some(Config {
                sink: Sink::Api,
                namespace: "Acme/web".into(),
                interval: Duration::from_secs(10),
                dimensions: vec![],
                burst_threshold: None,
                oldest_request_age: false,
                scale_in_protected: false,
            }))
        );
        let with = |extra: &'static str| {
            read(&[("METRICS_NAMESPACE", "Acme/web"), ("METRICS_EXTRA", extra)])
                .map(|c| c.unwrap().oldest_request_age)
        };
        assert_eq!(with("OldestRequestAge"), Ok(true));
        assert_eq!(with(" oldestrequestage, "), Ok(true));
        assert_eq!(with(" "), Ok(false));
        let refused = with("OldestRequestAge,P99").unwrap_err();
        assert!(
            refused.contains("METRICS_EXTRA")
                && refused.contains("'P99'")
                && refused.contains("OldestRequestAge"),
            "{refused}"
        );
    }

    #[test]
    fn variables_without_a_namespace_are_named_as_ignored() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            ignored(
                &env(&[("METRICS_INTERVAL", "abc"), ("METRICS_DIMENSIONS", "")]),
                SinkKind::Api
            ),
            vec!["METRICS_INTERVAL"]
        );
        assert!(ignored(
            &env(&[("METRICS_NAMESPACE", "a/b"), ("METRICS_INTERVAL", "30")]),
            SinkKind::Api
        )
        .is_empty());
        // OTLP needs no namespace; its interval and burst threshold count, the
        // CloudWatch-only ones do not.
        assert_eq!(
            ignored(
                &env(&[
                    ("METRICS_NAMESPACE", "a/b"),
                    ("METRICS_INTERVAL", "30"),
                    ("METRICS_DIMENSIONS", "A=1")
                ]),
                SinkKind::Otlp
            ),
            vec!["METRICS_NAMESPACE", "METRICS_DIMENSIONS"]
        );
    }

    #[test]
    fn otlp_needs_no_namespace_and_takes_opentelemetrys_interval() {
        let c = read(&[("METRICS_SINK", "otlp")]).unwrap().unwrap();
        assert!(matches!(c.sink, Sink::Otlp(_)), "{c:?}");
        assert_eq!(c.interval, Duration::from_secs(10), "lifeguard's default");
        let c = read(&[
            ("METRICS_SINK", "otlp"),
            ("METRICS_INTERVAL", "30"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "5000"),
            ("METRICS_NAMESPACE", "not/used"),
            ("METRICS_DIMENSIONS", "not used either"),
            ("METRICS_BURST_THRESHOLD", "40"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.interval, Duration::from_secs(5));
        assert_eq!((c.namespace.as_str(), c.dimensions.len()), ("", 0));
        assert_eq!(c.burst_threshold, Some(40));
        let c = read(&[("METRICS_SINK", "otlp"), ("METRICS_INTERVAL", "2")]);
        assert_eq!(c.unwrap().unwrap().interval, Duration::from_secs(2));
        let err = read(&[
            ("METRICS_SINK", "otlp"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1s"),
        ]);
        assert!(err.unwrap_err().contains("OTEL_METRIC_EXPORT_INTERVAL"));
    }

    #[test]
    fn the_contract_as_the_scaling_module_sets_it() {
        let c = read(&[
            ("METRICS_NAMESPACE", "prod/web"),
            ("METRICS_INTERVAL", "30"),
            ("METRICS_DIMENSIONS", "ClusterName=prod, ServiceName=web"),
            ("METRICS_BURST_THRESHOLD", "50"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(c.interval, Duration::from_secs(30));
        assert_eq!(
            c.dimensions,
            vec![
                ("ClusterName".into(), "prod".into()),
                ("ServiceName".into(), "web".into())
            ]
        );
        assert_eq!(c.burst_threshold, Some(50));
        let c = read(&[("METRICS_NAMESPACE", "a"), ("METRICS_BURST_THRESHOLD", "0")]);
        assert_eq!(c.unwrap().unwrap().burst_threshold, None);
    }

    #[test]
    fn unusable_values_name_the_variable_and_the_form() {
        let ns = ("METRICS_NAMESPACE", "prod/web");
        for (pairs, variable, form) in [
            (
                vec![ns, ("METRICS_INTERVAL", "0")],
                "METRICS_INTERVAL",
                "from 1 to 86400",
            ),
            (
                vec![ns, ("METRICS_INTERVAL", "-5")],
                "METRICS_INTERVAL",
                "from 1 to 86400",
            ),
            (
                vec![ns, ("METRICS_INTERVAL", "10s")],
                "METRICS_INTERVAL",
                "from 1 to 86400",
            ),
            (
                vec![ns, ("METRICS_BURST_THRESHOLD", "-1")],
                "METRICS_BURST_THRESHOLD",
                "whole number",
            ),
            (
                vec![ns, ("METRICS_BURST_THRESHOLD", "1.5")],
                "METRICS_BURST_THRESHOLD",
                "whole number",
            ),
            (
                vec![ns, ("METRICS_DIMENSIONS", "ClusterName")],
                "METRICS_DIMENSIONS",
                "NAME=VALUE",
            ),
            (
                vec![ns, ("METRICS_DIMENSIONS", "A=1,=2")],
                "METRICS_DIMENSIONS",
                "NAME=VALUE",
            ),
            (
                vec![ns, ("METRICS_DIMENSIONS", "A=1,A=2")],
                "METRICS_DIMENSIONS",
                "twice",
            ),
            (
                vec![("METRICS_NAMESPACE", "AWS/ECS")],
                "METRICS_NAMESPACE",
                "reserved",
            ),
            (
                vec![("METRICS_NAMESPACE", "web$")],
                "METRICS_NAMESPACE",
                "1-255",
            ),
        ] {
            let err = read(&pairs).unwrap_err();
            assert!(
                err.contains(variable) && err.contains(form),
                "{pairs:?}: {err}"
            );
        }
        let many: String = (0..31).map(|i| format!("D{i}=v,")).collect();
        let err = read(&[ns, ("METRICS_DIMENSIONS", &many)]).unwrap_err();
        assert!(err.contains("at most 30"), "{err}");
        let thirty: String = (0..30).map(|i| format!("D{i}=v,")).collect();
        assert_eq!(
            read(&[ns, ("METRICS_DIMENSIONS", &thirty)])
                .unwrap()
                .unwrap()
                .dimensions
                .len(),
            30
        );
    }
}
