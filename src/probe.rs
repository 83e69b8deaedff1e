//! `lifeguard --probe [ready|live|URL]`: the HEALTHCHECK client for images without curl.
//! Exit 0 on a 2xx answer, 1 on anything else (including nothing listening), always
//! within `--probe-timeout`.
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::lookup::{address, short};
use crate::settings::{Listen, ListenAt, Probe, ProbeTarget};

pub fn run(probe: &Probe) -> u8 {
    let timeout = probe.timeout;
    let (uri, also) = match target_uri(&probe.target, probe.listen.clone()) {
        Ok(uri) => uri,
        Err(reason) => return fail(&reason),
    };
    let deadline = Instant::now() + timeout;
    let answer = get(&uri, deadline, also);
    // An answer that came after the deadline is late too: a process starved of CPU (in
    // a cgroup at its quota) may get back to it long after, and HEALTHCHECK and the
    // orchestrators count the probe's timeout, not the server's.
    let answer = match answer {
        Ok(_) if Instant::now() > deadline => Err(Failure::Late),
        answer => answer,
    };
    match answer {
        Ok((status, body)) => {
            let _ = writeln!(std::io::stdout(), "{status} {body}");
            if (200..300).contains(&status) {
                0
            } else {
                fail(&format!("GET {uri} answered {status} {body}"))
            }
        }
        Err(Failure::Reason(reason)) => fail(&reason),
        Err(Failure::Late) => fail(&format!(
            "GET {uri}: no answer within {}",
            crate::seconds::human(timeout)
        )),
    }
}

enum Failure {
    Reason(String),
    /// The deadline passed first.
    Late,
}

/// Bodies longer than this are refused: a health answer is a word, `/metrics` a few kB.
const MAX_ANSWER: usize = 256 * 1024;

/// One GET on the standard library's blocking sockets, every step bounded by
/// `deadline`. A probe is one request from a process that exits right after it, so an
/// async runtime and an HTTP client library cost more than the request itself (they
/// were about 0.6 ms of CPU a probe: bench/health_at_peak.py); the answer it reads is
/// a status line, headers, and a body sized by Content-Length, chunked, or the close.
/// `also`: an address to try when the URI's cannot be connected to.
fn get(
    uri: &hyper::Uri,
    deadline: Instant,
    also: Option<SocketAddr>,
) -> Result<(u16, String), Failure> {
    let host = uri
        .host()
        .ok_or_else(|| Failure::Reason(format!("{uri} has no host")))?;
    let port = uri.port_u16().unwrap_or(80);
    let mut stream = connect(host, port, deadline, also)?;
    let _ = stream.set_nodelay(true);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = uri.authority().map_or(host, |a| a.as_str());
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: lifeguard/{}\r\n\
         Connection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    );
    stream
        .set_write_timeout(Some(left(deadline)?))
        .and_then(|()| stream.write_all(request.as_bytes()))
        .map_err(|e| io_failure(&format!("GET {uri}"), &e))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(whole) =
            parse(&answer).map_err(|e| Failure::Reason(format!("GET {uri}: {e}")))?
        {
            return Ok(whole);
        }
        if answer.len() > MAX_ANSWER {
            return Err(Failure::Reason(format!(
                "GET {uri}: the answer is over {MAX_ANSWER} bytes"
            )));
        }
        stream
            .set_read_timeout(Some(left(deadline)?))
            .map_err(|e| io_failure(&format!("GET {uri}"), &e))?;
        match stream.read(&mut buf) {
            Ok(0) => {
                // The close ends a body without a length; anything else is cut short.
                return match parse_until_close(&answer) {
                    Some(whole) => Ok(whole),
                    None => Err(Failure::Reason(format!(
                        "GET {uri}: the connection closed before a whole answer"
                    ))),
                };
            }
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_failure(&format!("GET {uri}"), &e)),
        }
    }
}

/// What is left until `deadline`, or `Late`.
fn left(deadline: Instant) -> Result<Duration, Failure> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(Failure::Late)
    } else {
        Ok(left)
    }
}

/// A timeout is `Late`; anything else a one-line reason.
fn io_failure(what: &str, err: &std::io::Error) -> Failure {
    if timed_out(err) {
        Failure::Late
    } else {
        Failure::Reason(format!("{what}: {}", short(err)))
    }
}

/// A socket timeout as std reports it (SO_RCVTIMEO/SO_SNDTIMEO give WouldBlock).
fn timed_out(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Connects to `host` (an address, `[IPv6]`, or a name looked up within the deadline)
/// and `port` by the deadline; then to `also`, if given.
fn connect(
    host: &str,
    port: u16,
    deadline: Instant,
    also: Option<SocketAddr>,
) -> Result<TcpStream, Failure> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let mut addrs: Vec<SocketAddr> = match address(host) {
        Some(ip) => vec![SocketAddr::new(ip, port)],
        None => match crate::lookup::within(bare, port, left(deadline)?) {
            Some(Ok(addrs)) => addrs,
            Some(Err(e)) => {
                return Err(Failure::Reason(format!(
                    "cannot look up {bare}: {}",
                    short(&e)
                )))
            }
            None => return Err(Failure::Late),
        },
    };
    addrs.extend(also);
    let mut failure = String::from("no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, left(deadline)?) {
            Ok(stream) => return Ok(stream),
            Err(e) if timed_out(&e) => return Err(Failure::Late),
            Err(e) => failure = short(&e),
        }
    }
    Err(Failure::Reason(format!(
        "cannot connect to {host}:{port}: {failure}"
    )))
}

/// The head of `answer` when it is whole: the status and where the body starts, with
/// the headers that size it (lower-cased names).
struct Head {
    status: u16,
    body_at: usize,
    length: Option<usize>,
    chunked: bool,
}

fn head(answer: &[u8]) -> Result<Option<Head>, String> {
    let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&answer[..end]);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP/1 answer: {status_line:?}"))?;
    let (mut length, mut chunked) = (None, false);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "content-length" {
            length = Some(
                value
                    .parse()
                    .map_err(|_| format!("Content-Length {value:?}"))?,
            );
        } else if name == "transfer-encoding" {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    Ok(Some(Head {
        status,
        body_at: end + 4,
        length,
        chunked,
    }))
}

/// (status, trimmed body) once `answer` holds a whole answer sized by its headers;
/// None while more is to come (or, without a size, until the close).
fn parse(answer: &[u8]) -> Result<Option<(u16, String)>, String> {
    let Some(h) = head(answer)? else {
        return Ok(None);
    };
    let body = &answer[h.body_at..];
    // 1xx, 204 and 304 carry no body (RFC 9112, section 6.3).
    if h.status < 200 || h.status == 204 || h.status == 304 {
        return Ok(Some((h.status, String::new())));
    }
    if h.chunked {
        return Ok(dechunk(body).map(|b| (h.status, text(&b))));
    }
    Ok(match h.length {
        Some(n) if body.len() >= n => Some((h.status, text(&body[..n]))),
        _ => None,
    })
}

/// At the close: a body without a size is whatever came.
fn parse_until_close(answer: &[u8]) -> Option<(u16, String)> {
    let h = head(answer).ok()??;
    (h.length.is_none() && !h.chunked).then(|| (h.status, text(&answer[h.body_at..])))
}

/// A chunked body once its last chunk has come (RFC 9112, section 7.1); trailers are
/// not read, the close follows.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        if rest.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

fn text(body: &[u8]) -> String {
    String::from_utf8_lossy(body).trim().to_string()
}

fn fail(reason: &str) -> u8 {
    let _ = writeln!(std::io::stderr(), "lifeguard: probe failed: {reason}");
    1
}

/// lifeguard's own endpoint, reached over loopback when it listens on every address:
/// 127.0.0.1, and for a dual-stack endpoint `[::1]` as a second try (an IPv6-only
/// network namespace has no 127.0.0.1).
fn target_uri(
    target: &ProbeTarget,
    listen: Listen,
) -> Result<(hyper::Uri, Option<SocketAddr>), String> {
    let path = match target {
        ProbeTarget::Url(uri) => return Ok((uri.clone(), None)),
        ProbeTarget::Ready => "/readyz",
        ProbeTarget::Live => "/livez",
    };
    let at = listen
        .at
        .ok_or("the endpoint is off (--listen off / LIFEGUARD_LISTEN=off); give --probe a URL")?;
    let (addr, also) = match at {
        // The name the endpoint was bound to, looked up by the probe's own client.
        ListenAt::Name { host, port } => {
            return format!("http://{host}:{port}{path}")
                .parse()
                .map(|uri| (uri, None))
                .map_err(|e| format!("{host}:{port}: {e}"));
        }
        // lifeguard binds `[::]` dual-stack (IPV6_V6ONLY off) itself.
        ListenAt::Any(port) => (SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port), true),
        ListenAt::Addr(addr) => (addr, addr.is_ipv6()),
    };
    let (addr, also) = match addr.ip() {
        ip if ip.is_unspecified() => (
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port()),
            also.then(|| SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())),
        ),
        _ => (addr, None),
    };
    format!("http://{addr}{path}")
        .parse()
        .map(|uri| (uri, also))
        .map_err(|e| format!("{addr}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening_on(addr: Option<&str>) -> Listen {
        Listen {
            at: addr.map(|a| ListenAt::Addr(a.parse().unwrap())),
            explicit: true,
        }
    }

    #[test]
    fn answers_are_read_by_length_chunks_or_the_close() {
        let whole = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nready\n";
        assert_eq!(parse(whole).unwrap(), Some((200, "ready".into())));
        // Not yet: a body shorter than its length, a head without its end.
        assert_eq!(parse(&whole[..whole.len() - 2]).unwrap(), None);
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n").unwrap(),
            None
        );
        let chunked = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n\
                        4\r\ndrai\r\n4;x=y\r\nning\r\n0\r\n\r\n";
        assert_eq!(parse(chunked).unwrap(), Some((503, "draining".into())));
        assert_eq!(parse(&chunked[..chunked.len() - 5]).unwrap(), None);
        // No size: the body is what came before the close.
        let open = b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nalive";
        assert_eq!(parse(open).unwrap(), None);
        assert_eq!(parse_until_close(open), Some((200, "alive".into())));
        assert_eq!(
            parse(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap(),
            Some((204, String::new()))
        );
        assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n").is_err());
    }

    #[test]
    fn a_silent_server_is_late_and_a_closed_port_a_reason() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let uri: hyper::Uri = format!("http://{}/readyz", silent.local_addr().unwrap())
            .parse()
            .unwrap();
        let asked = Instant::now();
        assert!(matches!(
            get(&uri, asked + Duration::from_millis(200), None),
            Err(Failure::Late)
        ));
        assert!(asked.elapsed() < Duration::from_secs(2));
        let port = silent.local_addr().unwrap().port();
        drop(silent);
        let uri: hyper::Uri = format!("http://127.0.0.1:{port}/").parse().unwrap();
        match get(&uri, Instant::now() + Duration::from_secs(1), None) {
            Err(Failure::Reason(r)) => assert!(r.contains("connection refused"), "{r}"),
            _ => panic!("a closed port connected"),
        }
    }

    #[test]
    fn probes_reach_the_endpoint_over_loopback() {
        let uris = |listen| {
            let (first, then) = target_uri(&ProbeTarget::Ready, listen).unwrap();
            (first.to_string(), then.map(|a| a.to_string()))
        };
        assert_eq!(
            uris(listening_on(Some("0.0.0.0:9595"))),
            ("http://127.0.0.1:9595/readyz".into(), None)
        );
        // Dual-stack: IPv4's loopback, then IPv6's (a namespace with ::1 alone).
        let both = (
            "http://127.0.0.1:81/readyz".to_string(),
            Some("[::1]:81".to_string()),
        );
        assert_eq!(uris(listening_on(Some("[::]:81"))), both);
        let default = Listen {
            at: Some(ListenAt::Any(81)),
            explicit: false,
        };
        assert_eq!(uris(default), both);
        assert_eq!(
            uris(listening_on(Some("[::1]:81"))),
            ("http://[::1]:81/readyz".into(), None)
        );
        let named = Listen {
            at: Some(ListenAt::Name {
                host: "localhost".into(),
                port: 9596,
            }),
            explicit: true,
        };
        assert_eq!(uris(named), ("http://localhost:9596/readyz".into(), None));
        assert!(target_uri(&ProbeTarget::Ready, listening_on(None))
            .unwrap_err()
            .contains("off"));
    }
}
