//! TLS for the helper's own HTTP client (OTLP to an https:// endpoint, such as
//! CloudWatch's): rustls with ring and the system's CA store, as the AWS SDK's client
//! has them, so both trust the same authorities (`SSL_CERT_FILE` and `SSL_CERT_DIR`
//! name others, as for OpenSSL). Full build only: the slim build has no TLS.
#![forbid(unsafe_code)]

use std::sync::{Arc, OnceLock};

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::{self, pki_types::ServerName};

/// The client's configuration, read once: loading the CA store reads every file in it.
fn config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found
                    .errors
                    .first()
                    .map_or("none found".to_string(), |e| e.to_string());
                return Err(format!(
                    "no CA certificates to check the endpoint's against ({why}): install \
                     ca-certificates in the image, or name a PEM file in SSL_CERT_FILE"
                ));
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS: {e}"))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

/// The TLS handshake with `host` over `stream`, its certificate checked against the
/// CA store and the name. Errors are one-line reasons.
pub async fn connect(stream: TcpStream, host: &str) -> Result<TlsStream<TcpStream>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(bare.to_string())
        .map_err(|e| format!("{host} cannot be a TLS server name: {e}"))?;
    tokio_rustls::TlsConnector::from(config()?)
        .connect(name, stream)
        .await
        .map_err(|e| format!("TLS with {host}: {e}"))
}
