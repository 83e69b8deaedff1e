//! `lifeguard --probe [ready|live|URL]`: the HEALTHCHECK client for images without curl.
//! Exit 0 on a 2xx answer, 1 on anything else (including nothing listening), always
//! within `--probe-timeout`.
#![forbid(unsafe_code)]

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::cli::{Listen, ListenAt, ProbeTarget};
use crate::http_client;

pub fn run(target: &ProbeTarget, listen: Listen, timeout: Duration) -> u8 {
    let uri = match target_uri(target, listen) {
        Ok(uri) => uri,
        Err(reason) => return fail(&reason),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => return fail(&format!("cannot start: {err}")),
    };
    let answer =
        runtime.block_on(async { tokio::time::timeout(timeout, http_client::get(&uri)).await });
    runtime.shutdown_background();
    match answer {
        Ok(Ok((status, body))) => {
            let _ = writeln!(std::io::stdout(), "{status} {body}");
            if (200..300).contains(&status) {
                0
            } else {
                fail(&format!("GET {uri} answered {status} {body}"))
            }
        }
        Ok(Err(reason)) => fail(&reason),
        Err(_) => fail(&format!(
            "GET {uri}: no answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}

fn fail(reason: &str) -> u8 {
    let _ = writeln!(std::io::stderr(), "lifeguard: probe failed: {reason}");
    1
}

/// lifeguard's own endpoint, reached over loopback when it listens on every address.
fn target_uri(target: &ProbeTarget, listen: Listen) -> Result<hyper::Uri, String> {
    let path = match target {
        ProbeTarget::Url(uri) => return Ok(uri.clone()),
        ProbeTarget::Ready => "/readyz",
        ProbeTarget::Live => "/livez",
    };
    let at = listen
        .at
        .ok_or("the endpoint is off (--listen off / LIFEGUARD_LISTEN=off); give --probe a URL")?;
    let addr = match at {
        ListenAt::Addr(addr) => addr,
        // The name the endpoint was bound to, looked up by the probe's own client.
        ListenAt::Name { host, port } => {
            return format!("http://{host}:{port}{path}")
                .parse()
                .map_err(|e| format!("{host}:{port}: {e}"));
        }
    };
    let addr = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        // `[::]` also takes IPv4 unless the kernel makes IPv6 sockets v6-only
        // (net.ipv6.bindv6only; lifeguard does not set IPV6_V6ONLY itself), and Docker
        // starts containers without an IPv6 loopback by default: 127.0.0.1 reaches it.
        IpAddr::V6(ip) if ip.is_unspecified() => {
            let loopback: IpAddr = if v6_only() {
                Ipv6Addr::LOCALHOST.into()
            } else {
                Ipv4Addr::LOCALHOST.into()
            };
            SocketAddr::new(loopback, addr.port())
        }
        _ => addr,
    };
    format!("http://{addr}{path}")
        .parse()
        .map_err(|e| format!("{addr}: {e}"))
}

/// Whether new IPv6 sockets are v6-only by default on this host.
fn v6_only() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").is_ok_and(|v| v.trim() == "1")
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
    fn probes_reach_the_endpoint_over_loopback() {
        assert_eq!(
            target_uri(&ProbeTarget::Ready, listening_on(Some("0.0.0.0:9595"))).unwrap(),
            "http://127.0.0.1:9595/readyz"
        );
        let expected = if v6_only() {
            "http://[::1]:81/livez"
        } else {
            "http://127.0.0.1:81/livez"
        };
        assert_eq!(
            target_uri(&ProbeTarget::Live, listening_on(Some("[::]:81"))).unwrap(),
            expected
        );
        assert_eq!(
            target_uri(&ProbeTarget::Live, listening_on(Some("[::1]:81"))).unwrap(),
            "http://[::1]:81/livez"
        );
        let named = Listen {
            at: Some(ListenAt::Name {
                host: "localhost".into(),
                port: 9596,
            }),
            explicit: true,
        };
        assert_eq!(
            target_uri(&ProbeTarget::Ready, named).unwrap(),
            "http://localhost:9596/readyz"
        );
        assert!(target_uri(&ProbeTarget::Ready, listening_on(None))
            .unwrap_err()
            .contains("off"));
    }
}
