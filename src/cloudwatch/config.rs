//! The environment contract of the ECS scaling module (issue #7):
//! `METRICS_NAMESPACE`, `METRICS_INTERVAL`, `METRICS_DIMENSIONS`,
//! `METRICS_BURST_THRESHOLD`. A value that cannot be used is refused at start, naming
//! the variable and the accepted form: a typo in a task definition should fail the
//! deploy, not publish nothing for months.
#![forbid(unsafe_code)]

use std::time::Duration;

/// CloudWatch allows at most 30 dimensions per metric.
pub const MAX_DIMENSIONS: usize = 30;
const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub namespace: String,
    /// One PutMetricData this often (and after every burst publish).
    pub interval: Duration,
    pub dimensions: Vec<(String, String)>,
    /// A 1-second in-flight sample at or above this publishes at once; None: no burst.
    pub burst_threshold: Option<u64>,
}

/// Reads the contract; `Ok(None)` when publishing is off (no namespace).
pub fn from_env(lookup: &impl Fn(&str) -> Option<String>) -> Result<Option<Config>, String> {
    let Some(namespace) = lookup("METRICS_NAMESPACE").filter(|n| !n.trim().is_empty()) else {
        return Ok(None);
    };
    let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    Ok(Some(Config {
        namespace: namespace_of(namespace.trim())?,
        interval: match set("METRICS_INTERVAL") {
            Some(text) => interval_of(&text)?,
            None => DEFAULT_INTERVAL,
        },
        dimensions: match set("METRICS_DIMENSIONS") {
            Some(text) => dimensions_of(&text)?,
            None => Vec::new(),
        },
        burst_threshold: match set("METRICS_BURST_THRESHOLD") {
            Some(text) => threshold_of(&text)?,
            None => None,
        },
    }))
}

/// The METRICS_* variables set while METRICS_NAMESPACE is not: publishing is off, so
/// they are ignored, and said to be (a warning, not a refusal: a platform may set them
/// for every task, publishing or not, and an unused value must not fail a deploy).
pub fn ignored(lookup: &impl Fn(&str) -> Option<String>) -> Vec<&'static str> {
    if lookup("METRICS_NAMESPACE").is_some_and(|n| !n.trim().is_empty()) {
        return Vec::new();
    }
    [
        "METRICS_INTERVAL",
        "METRICS_DIMENSIONS",
        "METRICS_BURST_THRESHOLD",
    ]
    .into_iter()
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
    let form = "expected a positive number of seconds, 1 or more, like 10 or 30";
    match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && (1.0..=86_400.0).contains(&secs) => {
            Ok(Duration::from_secs_f64(secs))
        }
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

fn threshold_of(text: &str) -> Result<Option<u64>, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(format!(
            "METRICS_BURST_THRESHOLD '{text}' cannot be used: expected a whole number of requests, 0 or more (0: no burst publishing)"
        )),
    }
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
        from_env(&|name: &str| env.get(name).cloned())
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
                namespace: "Acme/web".into(),
                interval: Duration::from_secs(10),
                dimensions: vec![],
                burst_threshold: None,
            }))
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
            ignored(&env(&[
                ("METRICS_INTERVAL", "abc"),
                ("METRICS_DIMENSIONS", "")
            ])),
            vec!["METRICS_INTERVAL"]
        );
        assert!(ignored(&env(&[
            ("METRICS_NAMESPACE", "a/b"),
            ("METRICS_INTERVAL", "30")
        ]))
        .is_empty());
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
                "positive number",
            ),
            (
                vec![ns, ("METRICS_INTERVAL", "-5")],
                "METRICS_INTERVAL",
                "positive number",
            ),
            (
                vec![ns, ("METRICS_INTERVAL", "10s")],
                "METRICS_INTERVAL",
                "positive number",
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
