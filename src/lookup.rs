//! Name lookups with a time limit, for `--listen` at start and `--probe`: the standard
//! library's resolver (getaddrinfo) has no timeout of its own, so the lookup runs on a
//! thread of its own and the caller waits at most its limit. A lookup left behind ends
//! with the process (a probe exits; a start that timed out exits 125). With them, what
//! every client of lifeguard's (the probe, the helper's HTTP client) says of a host and
//! of a network error.
#![forbid(unsafe_code)]

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::kernel;

/// Every address of `host` and `port`, sorted, each once; None when no answer came
/// within `limit`. The thread is joined once it has answered, so a caller that forks
/// afterwards (PID 1 forks the helper) is one thread again by then.
pub fn within(host: &str, port: u16, limit: Duration) -> Option<io::Result<Vec<SocketAddr>>> {
    // The answer waits in a slot, and a channel of () rings: a channel of the answer's
    // own type would be a whole channel's code more in the binary for one start-up call.
    let slot = Arc::new(Mutex::new(None));
    let (ring, rung) = std::sync::mpsc::channel::<()>();
    let name = host.to_string();
    let answer = slot.clone();
    // Signals are PID 1's to take (its signalfd), never this thread's.
    let lookup = kernel::spawn_thread(
        "lookup",
        Box::new(move || {
            let found = (name.as_str(), port).to_socket_addrs().map(|found| {
                // Sorted as they come, each once (a handful: no sort's code for them).
                let mut addrs: Vec<SocketAddr> = Vec::new();
                for addr in found {
                    let at = addrs.partition_point(|a| *a < addr);
                    if addrs.get(at) != Some(&addr) {
                        addrs.insert(at, addr);
                    }
                }
                addrs
            });
            *answer.lock().unwrap_or_else(PoisonError::into_inner) = Some(found);
            let _ = ring.send(());
        }),
    );
    let lookup = match lookup {
        Ok(lookup) => lookup,
        Err(err) => return Some(Err(err)),
    };
    rung.recv_timeout(limit).ok()?;
    let _ = lookup.join();
    let answer = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    answer
}

/// How long a host name given to `--listen` may take to resolve, at start.
const LISTEN_LOOKUP_LIMIT: Duration = Duration::from_secs(2);

/// Every address of `host`, looked up once at start on a thread of its own (std's
/// resolver blocks, and a resolver that never answers must not hold the start for
/// ever): the endpoint (or the readiness mirror) listens on each of them.
pub fn for_listen(host: &str, port: u16) -> anyhow::Result<Vec<SocketAddr>> {
    use anyhow::Context;
    match within(host, port, LISTEN_LOOKUP_LIMIT) {
        Some(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Some(Ok(_)) => anyhow::bail!("cannot listen on {host}:{port}: the name has no address"),
        Some(Err(err)) => Err(err).with_context(|| format!("cannot listen on {host}:{port}")),
        None => anyhow::bail!(
            "cannot listen on {host}:{port}: no answer to the name lookup within {}",
            crate::seconds::human(LISTEN_LOOKUP_LIMIT)
        ),
    }
}

/// `host` as an address (`[IPv6]` brackets allowed), or None when it is a name that
/// needs a lookup (a blocking call, run on a runtime's one lookup thread).
pub fn address(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// "connection refused" rather than "Connection refused (os error 111)".
pub fn short(err: &std::io::Error) -> String {
    let text = err.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text);
    // ASCII alone (the C library's and std's messages are): Unicode's case tables and
    // final-sigma rule would cost the slim build kilobytes for nothing.
    text.to_ascii_lowercase()
}
