//! A minimal HTTP/1.1 client, for the app check's GET (`--ready-http`), the ECS
//! agent's task-protection PUT and the OTLP export: one connection per request, status
//! and body back, bounded by the caller's timeout. https (helper/tls.rs) in the full
//! build only.
#![forbid(unsafe_code)]

use std::net::{SocketAddr, ToSocketAddrs};

use crate::lookup::{address, short};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Bodies longer than this are cut: a health answer is a word or two.
const MAX_BODY: usize = 64 * 1024;

thread_local! {
    /// Set while a name lookup started from this thread runs on its runtime's one
    /// lookup thread (helper/threads.rs). A lookup cannot be cancelled, so while one
    /// hangs (a resolver that never answers) this thread's lookups fail at once instead
    /// of queueing one per interval behind it. One lane per thread, so per helper: a
    /// hung lookup of the app check's never fails the sampler's task-metadata fetch,
    /// whose runtime has a lookup thread of its own, nor the other way round.
    static LOOKUP_RUNNING: Arc<AtomicBool> = Arc::new(AtomicBool::new(false));
}

/// Connects to `host` (an IP address, `[IPv6]`, or a name looked up on the blocking
/// thread) and `port`. Errors are one-line reasons.
pub async fn connect(host: &str, port: u16) -> Result<TcpStream, String> {
    // Brackets come with IPv6 hosts in URIs; the address is what is inside.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match address(bare) {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => {
            let lane = LOOKUP_RUNNING.with(Arc::clone);
            if lane.swap(true, Ordering::AcqRel) {
                return Err(format!("the previous lookup of {bare} has not finished"));
            }
            let name = bare.to_string();
            let found = tokio::task::spawn_blocking(move || {
                let found = (name.as_str(), port).to_socket_addrs();
                // Cleared when the lookup ends, even if nobody waits for it any more.
                lane.store(false, Ordering::Release);
                found.map(|addrs| addrs.collect())
            })
            .await;
            match found {
                Ok(Ok(addrs)) => addrs,
                Ok(Err(e)) => return Err(format!("cannot look up {bare}: {}", short(&e))),
                Err(e) => return Err(format!("cannot look up {bare}: {e}")),
            }
        }
    };
    let mut failure = String::from("no address");
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => failure = short(&e),
        }
    }
    Err(format!("cannot connect to {host}:{port}: {failure}"))
}

/// GETs `uri` (http only). Errors are one-line reasons for logs and `/readyz`.
pub async fn get(uri: &Uri) -> Result<(u16, String), String> {
    get_limited(uri, MAX_BODY).await
}

/// GETs `uri`, keeping at most `max_body` bytes of the answer; a longer body is an error.
pub async fn get_limited(uri: &Uri, max_body: usize) -> Result<(u16, String), String> {
    request(hyper::Method::GET, uri, None, max_body).await
}

/// Sends `method` to `uri` with a JSON `body`, if any, and keeps at most `max_body` bytes
/// of the answer.
pub async fn request(
    method: hyper::Method,
    uri: &Uri,
    json: Option<String>,
    max_body: usize,
) -> Result<(u16, String), String> {
    let content_type = json.is_some().then_some("application/json");
    let body = Bytes::from(json.unwrap_or_default());
    let (status, body) = send(method, uri, content_type, &[], body, max_body).await?;
    Ok((status, String::from_utf8_lossy(&body).trim().to_string()))
}

/// Sends `method` to `uri` with `body` (of `content_type`, if any) and `headers`, and
/// keeps at most `max_body` bytes of the answer, as they came.
pub async fn send(
    method: hyper::Method,
    uri: &Uri,
    content_type: Option<&str>,
    headers: &[(String, String)],
    body: Bytes,
    max_body: usize,
) -> Result<(u16, Bytes), String> {
    let host = uri.host().ok_or_else(|| format!("{uri} has no host"))?;
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let stream = connect(host, port).await?;
    let _ = stream.set_nodelay(true);
    // One type for either connection, so the exchange below is compiled once; the
    // build without TLS keeps the plain stream.
    #[cfg(feature = "cloudwatch-api")]
    let io: Box<dyn Stream> = if https {
        Box::new(crate::helper::tls::connect(stream, host).await?)
    } else {
        Box::new(stream)
    };
    #[cfg(not(feature = "cloudwatch-api"))]
    let io = match https {
        true => return Err(format!("{uri}: this build has no TLS")),
        false => stream,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("{uri}: {e}"))?;
    crate::helper::threads::spawn(async move {
        let _ = conn.await;
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri.authority().map_or(host, |a| a.as_str());
    let mut request = hyper::Request::builder()
        .method(method.clone())
        .uri(path)
        .header(hyper::header::HOST, authority)
        .header(
            hyper::header::USER_AGENT,
            concat!("lifeguard/", env!("CARGO_PKG_VERSION")),
        );
    if let Some(content_type) = content_type {
        request = request.header(hyper::header::CONTENT_TYPE, content_type);
    }
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request
        .body(Full::new(body))
        .map_err(|e| format!("{uri}: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("{method} {uri}: {e}"))?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), max_body)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| format!("{method} {uri}: reading the answer: {e}"))?;
    Ok((status, body))
}

/// A connection, plain or over TLS.
#[cfg(feature = "cloudwatch-api")]
trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
#[cfg(feature = "cloudwatch-api")]
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Stream for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_lookup_queues_behind_one_still_running() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mark = |on: bool| LOOKUP_RUNNING.with(|l| l.store(on, Ordering::Release));
        // As if a lookup hung on this thread's lookup thread.
        mark(true);
        let refused = rt.block_on(connect("app.invalid", 80)).unwrap_err();
        assert!(refused.contains("has not finished"), "{refused}");
        // Addresses need no lookup and still go through.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        rt.block_on(connect("127.0.0.1", port)).unwrap();
        // Another helper's lane is its own: its lookup goes ahead (and fails on the
        // name, not on this thread's hung lookup).
        let other = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(connect("app.invalid", 80)).unwrap_err()
        })
        .join()
        .unwrap();
        assert!(!other.contains("has not finished"), "{other}");
        mark(false);
        // A finished lookup clears the mark, whether it found the name or not.
        let _ = rt.block_on(connect("localhost", port));
        assert!(!LOOKUP_RUNNING.with(|l| l.load(Ordering::Acquire)));
    }
}
