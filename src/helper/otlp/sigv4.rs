//! OTLP straight to CloudWatch's endpoint (`https://monitoring.<region>.amazonaws.com/v1/metrics`):
//! each export signed with AWS Signature Version 4 for the service `monitoring`, by
//! AWS's own signing crate, with credentials from the same chain PutMetricData uses.
//! Full build only.
#![forbid(unsafe_code)]

use std::time::{Duration, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4::SigningParams;

use crate::helper::cloudwatch::client;

/// Credentials are asked for again this long before they expire (the SDK's own cache
/// refreshes within the same margin), so a request is never signed with ones about to
/// lapse in flight.
const REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

/// The signing service name CloudWatch's OTLP endpoint checks.
pub const SERVICE: &str = "monitoring";

/// Signs exports for one region, keeping the credentials between them.
pub struct Signer {
    region: String,
    chain: aws_config::default_provider::credentials::DefaultCredentialsChain,
    cached: tokio::sync::Mutex<Option<Credentials>>,
}

impl Signer {
    pub async fn new(region: &str) -> Signer {
        Signer {
            region: region.to_string(),
            chain: client::credentials().await,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// Credentials that hold for a while yet: the kept ones, or new ones from the chain.
    /// A failure is one line naming the cause (no credentials: which sources were tried
    /// and what to set).
    async fn credentials(&self) -> Result<Credentials, String> {
        let mut cached = self.cached.lock().await;
        let fresh = |c: &Credentials| {
            c.expiry()
                .is_none_or(|at| at > SystemTime::now() + REFRESH_MARGIN)
        };
        if let Some(kept) = cached.as_ref().filter(|c| fresh(c)) {
            return Ok(kept.clone());
        }
        match self.chain.provide_credentials().await {
            Ok(found) => {
                *cached = Some(found.clone());
                Ok(found)
            }
            Err(e) => {
                let text = aws_sdk_cloudwatch::error::DisplayErrorContext(&e).to_string();
                Err(client::no_credentials(&text)
                    .unwrap_or_else(|| format!("AWS credentials: {}", text.replace('\n', "; "))))
            }
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
