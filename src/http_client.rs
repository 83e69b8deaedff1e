//! A minimal HTTP/1.1 GET, for the app check (`--ready-http`) and `--probe`: one
//! connection per request, status and body back, bounded by the caller's timeout.
#![forbid(unsafe_code)]

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Bodies longer than this are cut: a health answer is a word or two.
const MAX_BODY: usize = 64 * 1024;

/// GETs `uri` (http only). Errors are one-line reasons for logs and `/readyz`.
pub async fn get(uri: &Uri) -> Result<(u16, String), String> {
    let host = uri.host().ok_or_else(|| format!("{uri} has no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    // Brackets come with IPv6 hosts in URIs; connect wants the bare address.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let stream = TcpStream::connect((bare, port))
        .await
        .map_err(|e| format!("cannot connect to {host}:{port}: {}", short(&e)))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("{uri}: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri.authority().map_or(host, |a| a.as_str());
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, authority)
        .header(
            hyper::header::USER_AGENT,
            concat!("lifeguard/", env!("CARGO_PKG_VERSION")),
        )
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("{uri}: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("GET {uri}: {e}"))?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// "connection refused" rather than "Connection refused (os error 111)".
fn short(err: &std::io::Error) -> String {
    let text = err.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    text.to_lowercase()
}
