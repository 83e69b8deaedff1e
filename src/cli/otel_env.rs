//! The OpenTelemetry SDK's own variables, as `METRICS_SINK=otlp` reads them
//! (opentelemetry-specification, "OTLP Exporter Configuration" and "Environment Variable
//! Specification"), into `settings::Otlp`.
//!
//! One departure from the specification, on purpose: it asks an SDK to warn about an
//! unusable value and go on with the default; lifeguard refuses to start instead,
//! naming the variable and the form it takes, as it does for its own variables — a typo
//! in a task definition should fail the deploy, not publish nothing for months.
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::settings::Otlp;

/// Where an OpenTelemetry SDK sends metrics when nothing is set.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/metrics";
/// `OTEL_EXPORTER_OTLP_TIMEOUT`'s default, 10 s.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the variables; an error names the variable and the accepted form.
pub fn from_env(lookup: &impl Fn(&str) -> Option<String>) -> Result<Otlp, String> {
    let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    // The metrics-only variable wins over the general one, whole (not merged key by key).
    let either = |general: &'static str, metrics: &'static str| {
        set(metrics)
            .map(|v| (metrics, v))
            .or_else(|| set(general).map(|v| (general, v)))
    };
    if let Some((name, protocol)) = either(
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    ) {
        match protocol.trim() {
            "http/protobuf" => {}
            "grpc" | "http/json" => {
                return Err(format!(
                    "{name}={protocol}: lifeguard sends OTLP as http/protobuf only (no gRPC, no \
                     JSON); point OTEL_EXPORTER_OTLP_METRICS_ENDPOINT at the collector's \
                     OTLP/HTTP port (4318) and set {name}=http/protobuf"
                ))
            }
            _ => {
                return Err(format!(
                    "{name} '{protocol}' cannot be used: expected http/protobuf (grpc and \
                     http/json are not offered)"
                ))
            }
        }
    }
    let endpoint = match (
        set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
        set("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        // The signal's own URL is used as it is; the general one is a base that
        // `v1/metrics` is added to (the specification's rule).
        (Some(url), _) => endpoint_of("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", url.trim())?,
        (None, Some(base)) => {
            let full = format!("{}/v1/metrics", base.trim().trim_end_matches('/'));
            endpoint_of("OTEL_EXPORTER_OTLP_ENDPOINT", &full)?
        }
        (None, None) => endpoint_of("", DEFAULT_ENDPOINT)?,
    };
    let headers = match either(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    ) {
        Some((name, text)) => headers_of(name, &text)?,
        None => Vec::new(),
    };
    let timeout = match either(
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    ) {
        Some((name, text)) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => {
                return Err(format!(
                    "{name} '{text}' cannot be used: expected milliseconds, a whole number above 0, like 10000"
                ))
            }
        },
        None => DEFAULT_TIMEOUT,
    };
    let mut resource = match set("OTEL_RESOURCE_ATTRIBUTES") {
        Some(text) => pairs_of("OTEL_RESOURCE_ATTRIBUTES", &text, |_| true)?,
        None => Vec::new(),
    };
    if let Some(name) = set("OTEL_SERVICE_NAME") {
        resource.retain(|(k, _)| k != "service.name");
        resource.push(("service.name".into(), name.trim().to_string()));
    }
    // A bearer token (CloudWatch's API keys) or any other Authorization the user gives
    // is theirs to send; otherwise CloudWatch's own endpoint gets a SigV4 signature (in
    // the full build: the other refuses https, so CloudWatch, above).
    #[cfg(feature = "cloudwatch-api")]
    let sigv4_region = endpoint
        .host()
        .and_then(cloudwatch_region)
        .filter(|_| {
            !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        })
        .map(str::to_string);
    #[cfg(not(feature = "cloudwatch-api"))]
    let sigv4_region = None;
    Ok(Otlp {
        endpoint,
        headers,
        timeout,
        resource,
        sigv4_region,
    })
}

/// `OTEL_METRIC_EXPORT_INTERVAL`: milliseconds, from 1000 (the publisher's floor, as
/// `METRICS_INTERVAL`'s) to a day.
pub fn interval(lookup: &impl Fn(&str) -> Option<String>) -> Result<Option<Duration>, String> {
    let Some(text) = lookup("OTEL_METRIC_EXPORT_INTERVAL").filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    match text.trim().parse::<u64>() {
        Ok(ms) if (1_000..=86_400_000).contains(&ms) => Ok(Some(Duration::from_millis(ms))),
        _ => Err(format!(
            "OTEL_METRIC_EXPORT_INTERVAL '{text}' cannot be used: expected milliseconds from 1000 to 86400000, like 10000"
        )),
    }
}

fn endpoint_of(name: &str, url: &str) -> Result<hyper::Uri, String> {
    let form = "expected an http:// URL, like http://collector:4318/v1/metrics";
    let uri: hyper::Uri = url
        .parse()
        .map_err(|_| format!("{name} '{url}' cannot be used: {form}"))?;
    let Some(host) = uri.host().filter(|h| !h.is_empty()) else {
        return Err(format!("{name} '{url}' cannot be used: {form}"));
    };
    let cloudwatch = cloudwatch_region(host).is_some();
    match uri.scheme_str() {
        Some("http") if cloudwatch => Err(format!(
            "{name} '{url}': CloudWatch's OTLP endpoint takes https only, like \
             https://{host}/v1/metrics"
        )),
        Some("http") => Ok(uri),
        Some("https") if cfg!(feature = "cloudwatch-api") => Ok(uri),
        Some("https") => Err(format!(
            "{name} '{url}': this build (without the AWS SDK) has no TLS and no SigV4 \
             signing for CloudWatch: use the full build, or a collector beside the app \
             (http://localhost:4318) that forwards"
        )),
        _ => Err(format!("{name} '{url}' cannot be used: {form}")),
    }
}

/// The region of CloudWatch's OTLP endpoint at `host`, or None for any other host.
/// Pure. The hosts a user can be given for CloudWatch (the AWS endpoints list):
/// `monitoring.<region>.amazonaws.com` (`.amazonaws.com.cn` in China), the FIPS
/// endpoint `monitoring-fips.<region>.amazonaws.com`, and an interface VPC endpoint's
/// own names, `vpce-<id>.monitoring.<region>.vpce.amazonaws.com` (one label, also with
/// its Availability Zone: `vpce-<id>-<az>.…`). Nothing else is signed for: the
/// credentials' signature would go to whoever answers a look-alike.
pub fn cloudwatch_region(host: &str) -> Option<&str> {
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let in_region = |rest: &'_ str, domains: &[&str]| -> Option<usize> {
        domains
            .iter()
            .find_map(|d| rest.strip_suffix(d))
            .filter(|region| label(region))
            .map(str::len)
    };
    let (rest, domains): (&str, &[&str]) = if let Some(rest) = host.strip_prefix("monitoring.") {
        (rest, &[".amazonaws.com", ".amazonaws.com.cn"])
    } else if let Some(rest) = host.strip_prefix("monitoring-fips.") {
        (rest, &[".amazonaws.com"])
    } else {
        let (endpoint, rest) = host.split_once(".monitoring.")?;
        if !(endpoint.starts_with("vpce-") && label(endpoint)) {
            return None;
        }
        (rest, &[".vpce.amazonaws.com", ".vpce.amazonaws.com.cn"])
    };
    let len = in_region(rest, domains)?;
    Some(&rest[..len])
}

/// `%XX` escapes decoded (the W3C Baggage form the specification names for these lists).
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `key=value,key=value`, values percent-decoded; `key_ok` judges each key.
fn pairs_of(
    name: &str,
    text: &str,
    key_ok: impl Fn(&str) -> bool,
) -> Result<Vec<(String, String)>, String> {
    let form =
        "expected key=value pairs separated by commas, values percent-encoded, like a=1,b=x%20y";
    let mut pairs: Vec<(String, String)> = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .filter(|(k, _)| !k.is_empty() && key_ok(k))
            .ok_or_else(|| format!("{name}: '{pair}' cannot be used: {form}"))?;
        let value = percent_decoded(value)
            .ok_or_else(|| format!("{name}: '{pair}' has a broken %-escape: {form}"))?;
        pairs.retain(|(k, _)| k != key);
        pairs.push((key.to_string(), value));
    }
    Ok(pairs)
}

/// Header names are HTTP tokens; values must be sendable as they are (no control
/// characters once decoded).
fn headers_of(name: &str, text: &str) -> Result<Vec<(String, String)>, String> {
    let token = |k: &str| {
        k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let pairs = pairs_of(name, text, token)?;
    if let Some((key, _)) = pairs
        .iter()
        .find(|(_, v)| v.chars().any(|c| c.is_control() && c != '\t'))
    {
        return Err(format!(
            "{name}: the value of '{key}' has a control character once decoded"
        ));
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(pairs: &[(&str, &str)]) -> Result<Otlp, String> {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_env(&|name: &str| env.get(name).cloned())
    }

    #[test]
    fn only_cloudwatchs_own_hosts_are_signed_for() {
        assert_eq!(
            cloudwatch_region("monitoring.us-east-1.amazonaws.com"),
            Some("us-east-1")
        );
        assert_eq!(
            cloudwatch_region("monitoring.cn-north-1.amazonaws.com.cn"),
            Some("cn-north-1")
        );
        // FIPS, and an interface VPC endpoint's names (regional and zonal).
        for (host, region) in [
            ("monitoring-fips.us-gov-west-1.amazonaws.com", "us-gov-west-1"),
            ("monitoring-fips.us-east-2.amazonaws.com", "us-east-2"),
            (
                "vpce-0123456789abcdef0-abcdefgh.monitoring.eu-west-1.vpce.amazonaws.com",
                "eu-west-1",
            ),
            (
                "vpce-0123456789abcdef0-abcdefgh-eu-west-1a.monitoring.eu-west-1.vpce.amazonaws.com",
                "eu-west-1",
            ),
            (
                "vpce-0a1b2c3d-xyz.monitoring.cn-north-1.vpce.amazonaws.com.cn",
                "cn-north-1",
            ),
        ] {
            assert_eq!(cloudwatch_region(host), Some(region), "{host}");
        }
        for other in [
            "collector",
            "monitoring.amazonaws.com",
            "logs.us-east-1.amazonaws.com",
            "monitoring.us-east-1.amazonaws.com.evil.example",
            "monitoring.US-EAST-1.amazonaws.com",
            "xmonitoring.us-east-1.amazonaws.com",
            "monitoring-fips.us-east-1.amazonaws.com.evil.example",
            "monitoring-fips.cn-north-1.amazonaws.com.cn",
            "evil.monitoring.us-east-1.vpce.amazonaws.com",
            "vpce-1.evil.monitoring.us-east-1.vpce.amazonaws.com",
            "vpce-1.monitoring.us-east-1.amazonaws.com",
            "vpce-1.monitoring.us-east-1.vpce.amazonaws.com.evil.example",
            "vpce-1.monitoring..vpce.amazonaws.com",
            "monitoring.us-east-1.vpce.amazonaws.com",
        ] {
            assert_eq!(cloudwatch_region(other), None, "{other}");
        }
    }

    #[test]
    fn the_endpoint_follows_the_specifications_rules() {
        let url = |pairs: &[(&str, &str)]| read(pairs).unwrap().endpoint.to_string();
        assert_eq!(url(&[]), "http://localhost:4318/v1/metrics");
        assert_eq!(
            url(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]),
            "http://collector:4318/v1/metrics"
        );
        assert_eq!(
            url(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/otlp/")]),
            "http://collector:4318/otlp/v1/metrics"
        );
        // The signal's own URL is used as it is, and wins.
        assert_eq!(
            url(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://[::1]:9/m")
            ]),
            "http://[::1]:9/m"
        );
    }

    #[test]
    fn cloudwatchs_endpoint_is_signed_unless_the_user_authorizes_and_needs_the_full_build() {
        let cloudwatch = "https://monitoring.eu-west-1.amazonaws.com/v1/metrics";
        let read_cw = |extra: &[(&str, &str)]| {
            let mut pairs = vec![("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", cloudwatch)];
            pairs.extend_from_slice(extra);
            read(&pairs)
        };
        let collector = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]);
        assert_eq!(collector.unwrap().sigv4_region, None);
        if cfg!(feature = "cloudwatch-api") {
            assert_eq!(
                read_cw(&[]).unwrap().sigv4_region.as_deref(),
                Some("eu-west-1")
            );
            // A bearer token (an API key) is the user's way in: sent, not signed over.
            let bearer = read_cw(&[("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20k")]);
            assert_eq!(bearer.unwrap().sigv4_region, None);
            // Any other https endpoint is taken, unsigned.
            let other = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example")]);
            assert_eq!(other.unwrap().sigv4_region, None);
        } else {
            let err = read_cw(&[]).unwrap_err();
            assert!(
                err.contains("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") && err.contains("SigV4"),
                "{err}"
            );
            let err = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example")]);
            assert!(err.unwrap_err().contains("has no TLS"));
        }
    }

    #[test]
    fn headers_resource_service_name_and_timeout() {
        let o = read(&[
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, x-team=web"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=old,deployment.environment=prod,team=a%2Cb",
            ),
            ("OTEL_SERVICE_NAME", "checkout"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ])
        .unwrap();
        assert_eq!(
            o.headers,
            [
                ("api-key".into(), "a b".into()),
                ("x-team".into(), "web".into())
            ]
        );
        assert_eq!(
            o.resource,
            [
                ("deployment.environment".into(), "prod".into()),
                ("team".into(), "a,b".into()),
                ("service.name".into(), "checkout".into())
            ]
        );
        assert_eq!(o.timeout, Duration::from_millis(2500));
        // The metrics-only headers replace the general ones whole.
        let o = read(&[
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "b=2"),
        ])
        .unwrap();
        assert_eq!(o.headers, [("b".into(), "2".into())]);
        assert_eq!(read(&[]).unwrap().timeout, Duration::from_secs(10));
    }

    #[test]
    fn unusable_values_name_the_variable_and_the_form() {
        for (pairs, variable, form) in [
            (
                vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
                "http/protobuf only",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "thrift")],
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
                "expected http/protobuf",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http:// URL",
            ),
            (
                vec![(
                    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                    "http://monitoring.us-east-1.amazonaws.com/v1/metrics",
                )],
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "takes https only",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "api-key")],
                "OTEL_EXPORTER_OTLP_HEADERS",
                "key=value",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "bad key=1")],
                "OTEL_EXPORTER_OTLP_HEADERS",
                "key=value",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_HEADERS", "k=%0a")],
                "OTEL_EXPORTER_OTLP_HEADERS",
                "control character",
            ),
            (
                vec![("OTEL_RESOURCE_ATTRIBUTES", "team=%zz")],
                "OTEL_RESOURCE_ATTRIBUTES",
                "%-escape",
            ),
            (
                vec![("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")],
                "OTEL_EXPORTER_OTLP_TIMEOUT",
                "milliseconds",
            ),
        ] {
            let err = read(&pairs).unwrap_err();
            assert!(
                err.contains(variable) && err.contains(form),
                "{pairs:?}: {err}"
            );
        }
        let interval = |v: &str| {
            let v = v.to_string();
            interval(&move |n: &str| (n == "OTEL_METRIC_EXPORT_INTERVAL").then(|| v.clone()))
        };
        assert_eq!(interval("5000"), Ok(Some(Duration::from_secs(5))));
        for bad in ["999", "60s", "-1"] {
            let err = interval(bad).unwrap_err();
            assert!(
                err.contains("OTEL_METRIC_EXPORT_INTERVAL") && err.contains("1000"),
                "{err}"
            );
        }
    }
}
