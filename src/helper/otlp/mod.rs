//! OTLP/HTTP protobuf to an OpenTelemetry collector (`METRICS_SINK=otlp`): the
//! publisher's third way out, beside the CloudWatch API and EMF. At each publish it
//! sends every figure `/metrics` shows, read from the same table.
//!
//! - `proto`: the protobuf wire format, by hand (pure)
//! - `encode`: a snapshot as an `ExportMetricsServiceRequest` (pure)
//! - `sigv4`: the signature CloudWatch's own OTLP endpoint asks for (full build)
//!
//! No retry, though the OTLP specification allows one for 429, 502, 503 and 504: every
//! counter and the histogram are cumulative, so the next export carries whatever a lost
//! one held, and a gauge's lost point would only arrive late. The publisher's own rules
//! hold: at most one export in flight, each bounded in time, failures said once a spell.
#![forbid(unsafe_code)]

pub mod encode;
pub mod proto;
#[cfg(feature = "cloudwatch-api")]
pub mod sigv4;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyper::body::Bytes;

use crate::helper::cloudwatch::outcome::Outcome;
use crate::helper::cloudwatch::plan::Datum;
use crate::helper::cloudwatch::put::{Put, PutCall, PutResult};
use crate::helper::desk::Desk;
use crate::helper::http_client;
use crate::helper::metrics::prometheus;
use crate::settings::Otlp;
use proto::Field;

/// A collector's answer is a few bytes (an empty `ExportMetricsServiceResponse`, or a
/// `google.rpc.Status` on an error); more is cut.
const MAX_ANSWER: usize = 64 * 1024;

/// Exports snapshots of the Desk to one collector.
pub struct Exporter {
    endpoint: hyper::Uri,
    headers: Arc<Vec<(String, String)>>,
    timeout: Duration,
    /// The user's resource attributes (they win over what lifeguard learns).
    user: Vec<(String, String)>,
    hostname: Option<String>,
    /// The start of every cumulative stream, Unix nanoseconds: when this exporter began.
    start: u64,
    desk: Arc<Desk>,
    /// CloudWatch's own endpoint: each export signed.
    #[cfg(feature = "cloudwatch-api")]
    signer: Option<Arc<sigv4::Signer>>,
}

fn unix_nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Exporter {
    /// Exports to `config`'s collector, each call within `timeout` too (the
    /// publisher's bound).
    pub fn new(config: &Otlp, desk: Arc<Desk>, timeout: Duration) -> Exporter {
        Exporter {
            endpoint: config.endpoint.clone(),
            headers: Arc::new(config.headers.clone()),
            timeout: config.timeout.min(timeout),
            user: config.resource.clone(),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
            start: unix_nanos(SystemTime::now()),
            desk,
            #[cfg(feature = "cloudwatch-api")]
            signer: None,
        }
    }

    /// Signs each export for CloudWatch's endpoint in `region`.
    #[cfg(feature = "cloudwatch-api")]
    pub async fn signing(mut self, region: &str) -> Exporter {
        self.signer = Some(Arc::new(sigv4::Signer::new(region).await));
        self
    }
}

const CONTENT_TYPE: &str = "application/x-protobuf";

/// The resource's attributes: what lifeguard learned, then the user's, which win; a
/// `service.name` always (OpenTelemetry's default, `unknown_service:` and the
/// program's name, where none is given); the host name as `service.instance.id` (a
/// container engine gives each container or task its own), so that two tasks' series
/// never merge, and one task's never change when the task metadata arrives. Pure.
pub fn resource(
    user: &[(String, String)],
    learned: &[(&'static str, String)],
    hostname: Option<&str>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    out.push(("service.name".into(), "unknown_service:lifeguard".into()));
    if let Some(host) = hostname.map(str::trim).filter(|h| !h.is_empty()) {
        out.push(("service.instance.id".into(), host.to_string()));
    }
    out.extend(learned.iter().map(|(k, v)| (k.to_string(), v.clone())));
    for (key, value) in user {
        out.retain(|(k, _)| k != key);
        out.push((key.clone(), value.clone()));
    }
    out
}

impl Put for Exporter {
    /// Sends the snapshot of this instant; the CloudWatch batch the plan made is not
    /// used (its timing is: the interval and the burst rule are the same for every sink).
    fn put(&self, _batch: Vec<Datum>) -> PutCall {
        let snapshot = self.desk.snapshot_asked(Instant::now());
        let now = unix_nanos(SystemTime::now());
        // The task's attributes join once the sampler has read the task metadata
        // (within a second of the start on ECS).
        let resource = resource(
            &self.user,
            self.desk.task_identity(),
            self.hostname.as_deref(),
        );
        let body = encode::request(&resource, prometheus::families(&snapshot), self.start, now);
        let (endpoint, user, timeout) = (self.endpoint.clone(), self.headers.clone(), self.timeout);
        #[cfg(feature = "cloudwatch-api")]
        let signer = self.signer.clone();
        Box::pin(async move {
            // The signature and the answer share one deadline: the call is bounded as a
            // whole. The credentials it needs are asked for apart, within a bound of
            // their own that a late export does not cut (sigv4::CREDENTIALS_LIMIT).
            let deadline = tokio::time::Instant::now() + timeout;
            let late = || {
                let within = crate::seconds::human(timeout);
                (
                    Outcome::Timeout,
                    format!("no answer from {endpoint} within {within}"),
                )
            };
            #[cfg(feature = "cloudwatch-api")]
            let (headers, signed) = match &signer {
                Some(signer) => {
                    let signing = signer.export_headers(&endpoint, &user, CONTENT_TYPE, &body);
                    match tokio::time::timeout_at(deadline, signing).await {
                        // Signing is quick: what it waited on was the credentials.
                        Err(_) => {
                            return Err((
                                Outcome::Timeout,
                                format!(
                                    "no AWS credentials yet within {}: the credential chain \
                                     (environment, profile, web identity, ECS container \
                                     credentials, instance metadata) is slow to answer; it \
                                     is still asked, for up to {}, and the next export uses \
                                     what it gives",
                                    crate::seconds::human(timeout),
                                    crate::seconds::human(sigv4::CREDENTIALS_LIMIT)
                                ),
                            ))
                        }
                        Ok(Err(reason)) => return Err((Outcome::Error, reason)),
                        Ok(Ok(headers)) => (headers, true),
                    }
                }
                None => (user.to_vec(), false),
            };
            #[cfg(not(feature = "cloudwatch-api"))]
            let (headers, signed) = (user, false);
            let sent = http_client::send(
                hyper::Method::POST,
                &endpoint,
                Some(CONTENT_TYPE),
                &headers,
                Bytes::from(body),
                MAX_ANSWER,
            );
            match tokio::time::timeout_at(deadline, sent).await {
                Err(_) => Err(late()),
                Ok(Err(reason)) => Err((Outcome::Error, reason)),
                Ok(Ok((status, answer))) => judge(status, &answer, signed),
            }
        })
    }
}

/// A collector's answer, judged: 2xx is taken unless its `partial_success` says data
/// points were rejected; 429 and 503 are throttling; the rest an error, with the
/// collector's own reason (a `google.rpc.Status` message, or the text it sent).
/// `cloudwatch`: the answer is CloudWatch's own endpoint's, and a refusal for want of
/// permission says which IAM action to grant. Pure.
pub fn judge(status: u16, answer: &[u8], cloudwatch: bool) -> PutResult {
    let who = if cloudwatch {
        "CloudWatch"
    } else {
        "the collector"
    };
    let string = |data: &[u8], n: u32| match proto::field(data, n) {
        Some(Field::Bytes(b)) => std::str::from_utf8(b).ok().map(str::to_string),
        _ => None,
    };
    if (200..300).contains(&status) {
        // ExportMetricsServiceResponse.partial_success (1): rejected_data_points (1),
        // error_message (2).
        let Some(Field::Bytes(partial)) = proto::field(answer, 1) else {
            return Ok(());
        };
        return match proto::field(partial, 1) {
            Some(Field::Number(n)) if n > 0 => Err((
                Outcome::Error,
                format!(
                    "{who} rejected {n} data points: {}",
                    string(partial, 2).unwrap_or_default()
                ),
            )),
            _ => Ok(()),
        };
    }
    let reason = string(answer, 2)
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(answer);
            text.trim().chars().take(200).collect()
        });
    let outcome = match status {
        429 | 503 => Outcome::Throttled,
        _ => Outcome::Error,
    };
    #[allow(unused_mut)] // the build without the AWS SDK never signs, so never adds
    let mut line = format!("{who} answered {status}: {reason}")
        .trim_end_matches([':', ' '])
        .to_string();
    #[cfg(feature = "cloudwatch-api")]
    if cloudwatch
        && status == 403
        && ["AccessDenied", "not authorized"]
            .iter()
            .any(|w| reason.contains(w))
    {
        line.push_str(": grant the task's IAM role cloudwatch:PutMetricData");
    }
    Err((outcome, line))
}

#[cfg(test)]
mod tests {
    use super::proto::Message;
    use super::*;

    #[test]
    fn answers_are_judged_as_the_otlp_specification_reads_them() {
        assert_eq!(judge(200, &[], false), Ok(()));
        let mut partial = Message::default();
        partial.uint(1, 3).string(2, "name too long");
        let mut answer = Message::default();
        answer.message(1, &partial);
        let (outcome, reason) = judge(200, &answer.0, false).unwrap_err();
        assert_eq!(outcome, Outcome::Error);
        assert_eq!(
            reason,
            "the collector rejected 3 data points: name too long"
        );
        // A partial success that rejected nothing is a success (a warning, at most).
        let mut none = Message::default();
        none.uint(1, 0).string(2, "fine");
        let mut answer = Message::default();
        answer.message(1, &none);
        assert_eq!(judge(200, &answer.0, false), Ok(()));
        let mut status = Message::default();
        status.uint(1, 8).string(2, "over the limit");
        assert_eq!(
            judge(429, &status.0, false),
            Err((
                Outcome::Throttled,
                "the collector answered 429: over the limit".into()
            ))
        );
        assert_eq!(
            judge(400, b"bad request: unknown field\n", false),
            Err((
                Outcome::Error,
                "the collector answered 400: bad request: unknown field".into()
            ))
        );
        assert_eq!(
            judge(502, b"", false),
            Err((Outcome::Error, "the collector answered 502".into()))
        );
        // CloudWatch's refusal for want of permission names the action to grant (in the
        // build that can sign); one for another cause (a clock far off) does not.
        if !cfg!(feature = "cloudwatch-api") {
            return;
        }
        let denied = br#"{"__type":"AccessDeniedException","message":"User: arn:aws:sts::1:assumed-role/web is not authorized to perform: cloudwatch:PutMetricData"}"#;
        let (outcome, line) = judge(403, denied, true).unwrap_err();
        assert_eq!(outcome, Outcome::Error);
        assert!(line.starts_with("CloudWatch answered 403: "), "{line}");
        assert!(
            line.ends_with(": grant the task's IAM role cloudwatch:PutMetricData"),
            "{line}"
        );
        let skew = b"Signature expired: 20251206T054640Z is now earlier than 20251206T060140Z";
        let (_, line) = judge(403, skew, true).unwrap_err();
        assert!(!line.contains("grant"), "{line}");
        assert_eq!(judge(429, b"", true).unwrap_err().0, Outcome::Throttled);
    }

    #[test]
    fn the_users_attributes_win_and_every_resource_has_a_name_and_an_instance() {
        let learned = vec![
            ("cloud.region", "us-east-1".to_string()),
            ("aws.ecs.task.id", "abc".to_string()),
        ];
        let user = vec![
            ("cloud.region".to_string(), "eu-west-1".to_string()),
            ("service.name".to_string(), "web".to_string()),
        ];
        let r = resource(&user, &learned, Some("host\n"));
        let get = |k: &str| r.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("service.name"), Some("web"));
        assert_eq!(get("cloud.region"), Some("eu-west-1"));
        assert_eq!(get("service.instance.id"), Some("host"));
        assert_eq!(get("aws.ecs.task.id"), Some("abc"));
        assert_eq!(r.iter().filter(|(k, _)| k == "cloud.region").count(), 1);
        let r = resource(&[], &[], Some("4f1e2d\n"));
        assert_eq!(
            r,
            [
                (
                    "service.name".to_string(),
                    "unknown_service:lifeguard".to_string()
                ),
                ("service.instance.id".to_string(), "4f1e2d".to_string())
            ]
        );
    }
}
