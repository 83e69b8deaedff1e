//! OTLP straight to CloudWatch's endpoint (`https://monitoring.<region>.amazonaws.com/v1/metrics`):
//! each export signed with AWS Signature Version 4 for the service `monitoring`, by
//! AWS's own signing crate, with credentials from the same chain PutMetricData uses.
//! Full build only.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4::SigningParams;

use crate::helper::cloudwatch::client;
use crate::helper::threads;

/// Credentials are asked for again this long before they expire (the SDK's own cache
/// refreshes within the same margin), so a request is never signed with ones about to
/// lapse in flight.
const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

/// How long one ask of the credential chain may take, apart from any export's deadline:
/// instance metadata behind a hop limit, an STS call or a slow container credentials
/// endpoint can take longer than a 1-second interval's export, and an ask cancelled with
/// every export would never succeed. The chain's own sources time out within it.
pub const CREDENTIALS_LIMIT: Duration = Duration::from_secs(10);

/// The signing service name CloudWatch's OTLP endpoint checks.
pub const SERVICE: &str = "monitoring";

/// Signs exports for one region, keeping the credentials between them.
pub struct Signer {
    region: String,
    shared: Arc<Shared>,
}

/// What the exports and the one ask of the chain under way share.
struct Shared {
    chain: aws_config::default_provider::credentials::DefaultCredentialsChain,
    kept: std::sync::Mutex<Kept>,
    /// Rung when an ask of the chain ends, with credentials or without.
    done: tokio::sync::Notify,
}

#[derive(Default)]
struct Kept {
    credentials: Option<Credentials>,
    asking: bool,
    /// Why the last ask gave none, for the export waiting on it (said once).
    failed: Option<String>,
}

impl Signer {
    pub async fn new(region: &str) -> Signer {
        Signer {
            region: region.to_string(),
            shared: Arc::new(Shared {
                chain: client::credentials().await,
                kept: std::sync::Mutex::new(Kept::default()),
                done: tokio::sync::Notify::new(),
            }),
        }
    }

    /// Credentials that hold for a while yet: the kept ones, or new ones from the chain,
    /// asked in a task of its own bounded by `CREDENTIALS_LIMIT`, which an export that
    /// gives up waiting does not cancel (the next export finds what it brought). A
    /// failure is one line naming the cause (no credentials: which sources were tried
    /// and what to set).
    async fn credentials(&self) -> Result<Credentials, String> {
        let fresh = |c: &Credentials| {
            c.expiry()
                .is_none_or(|at| at > SystemTime::now() + REFRESH_MARGIN)
        };
        loop {
            // Listening before looking, so an ask that ends in between is not missed.
            let done = self.shared.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            {
                let mut kept = self.shared.kept.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(ready) = kept.credentials.as_ref().filter(|c| fresh(c)) {
                    return Ok(ready.clone());
                }
                if let Some(why) = kept.failed.take() {
                    return Err(why);
                }
                if !kept.asking {
                    kept.asking = true;
                    threads::spawn(ask(self.shared.clone()));
                }
            }
            done.await;
        }
    }

    /// An export's headers: the user's, and the signature over them, the host (as the
    /// URL names it, which the HTTP client sends), the content type and the body.
    pub async fn export_headers(
        &self,
        endpoint: &hyper::Uri,
        user: &[(String, String)],
        content_type: &str,
        body: &[u8],
    ) -> Result<Vec<(String, String)>, String> {
        let host = endpoint.authority().map_or("", |a| a.as_str());
        let mut signed = vec![
            ("host".to_string(), host.to_string()),
            ("content-type".to_string(), content_type.to_string()),
        ];
        signed.extend(user.iter().cloned());
        let mut headers = user.to_vec();
        headers.extend(self.headers("POST", endpoint, &signed, body).await?);
        Ok(headers)
    }

    /// The headers that sign a request of these parts (`x-amz-date`, `authorization`,
    /// and `x-amz-security-token` with temporary credentials).
    pub async fn headers(
        &self,
        method: &str,
        uri: &hyper::Uri,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, String> {
        let credentials = self.credentials().await?;
        signed_headers(
            &credentials,
            &self.region,
            SystemTime::now(),
            method,
            uri,
            headers,
            body,
        )
    }
}

/// One ask of the credential chain, within `CREDENTIALS_LIMIT`; what it found (or why
/// not) kept for the exports, which it then wakes.
async fn ask(shared: Arc<Shared>) {
    let asked = tokio::time::timeout(CREDENTIALS_LIMIT, shared.chain.provide_credentials()).await;
    {
        let mut kept = shared.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.asking = false;
        match asked {
            Ok(Ok(found)) => kept.credentials = Some(found),
            Ok(Err(e)) => {
                let text = aws_sdk_cloudwatch::error::DisplayErrorContext(&e).to_string();
                kept.failed =
                    Some(client::no_credentials(&text).unwrap_or_else(|| {
                        format!("AWS credentials: {}", text.replace('\n', "; "))
                    }));
            }
            Err(_) => {
                kept.failed = Some(format!(
                    "AWS credentials: the credential chain (environment, profile, web \
                     identity, ECS container credentials, instance metadata) gave none within \
                     {}",
                    crate::seconds::human(CREDENTIALS_LIMIT)
                ))
            }
        }
    }
    shared.done.notify_waiters();
}

/// SigV4's headers for a request of these parts, signed at `time`. `headers` are the
/// ones the request will carry besides them (`host` among them); all are signed. Pure.
pub fn signed_headers(
    credentials: &Credentials,
    region: &str,
    time: SystemTime,
    method: &str,
    uri: &hyper::Uri,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Vec<(String, String)>, String> {
    let identity = credentials.clone().into();
    let params = SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| format!("SigV4: {e}"))?
        .into();
    let request = SignableRequest::new(
        method,
        uri.to_string(),
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Bytes(body),
    )
    .map_err(|e| format!("SigV4: {e}"))?;
    let (instructions, _signature) = sign(request, &params)
        .map_err(|e| format!("SigV4: {e}"))?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_covers_the_headers_and_the_body_and_names_the_service() {
        let credentials =
            Credentials::new("AKIDEXAMPLE", "secret", Some("token".into()), None, "test");
        let uri: hyper::Uri = "https://monitoring.us-east-1.amazonaws.com/v1/metrics"
            .parse()
            .unwrap();
        let headers = vec![
            (
                "host".to_string(),
                "monitoring.us-east-1.amazonaws.com".to_string(),
            ),
            (
                "content-type".to_string(),
                "application/x-protobuf".to_string(),
            ),
        ];
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_765_000_000);
        let sign = |body: &[u8]| {
            signed_headers(&credentials, "us-east-1", at, "POST", &uri, &headers, body).unwrap()
        };
        let one = sign(b"one");
        let get = |h: &[(String, String)], k: &str| {
            h.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        let auth = get(&one, "authorization").unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20251206/us-east-1/monitoring/aws4_request"),
            "{auth}"
        );
        assert!(
            auth.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
            "{auth}"
        );
        assert_eq!(get(&one, "x-amz-date").as_deref(), Some("20251206T054640Z"));
        assert_eq!(get(&one, "x-amz-security-token").as_deref(), Some("token"));
        // The same parts sign the same; another body signs otherwise.
        assert_eq!(sign(b"one"), one);
        assert_ne!(get(&sign(b"two"), "authorization"), Some(auth));
    }
}
