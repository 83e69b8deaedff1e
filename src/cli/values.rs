//! Value parsers for the flags: each refusal names the accepted form (the flag's name is
//! added by clap, or the variable's by `cli::parse`).
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::time::Duration;

use crate::settings::{Listen, ListenAt, MirrorPort, ProbeTarget};
use crate::signal_names::Signal;

pub(super) const DURATION_FORM: &str = "a duration like 500ms, 5s, 2m or a plain number of seconds";

/// The longest duration accepted anywhere: far beyond any orchestrator's grace period.
const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// `500ms`, `5s`, `2m`, `1h30m`, or a plain number of seconds (`0.5`, `10`), up to a year.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    // Taken as a value even with a leading hyphen (the flags allow it), so that
    // `--drain-delay -1s` gets this error rather than clap's tip to write `-- -1s`,
    // which would make `-1s` the command.
    if trimmed.starts_with("--") {
        return Err(format!(
            "'{text}' is a flag, not a value: expected {DURATION_FORM}"
        ));
    }
    if trimmed.starts_with('-') {
        return Err(format!("'{text}' is negative: expected {DURATION_FORM}"));
    }
    match crate::seconds::parse(trimmed) {
        Some(d) if d <= MAX_DURATION => Ok(d),
        Some(_) => Err(format!(
            "'{text}' is longer than a year: expected {DURATION_FORM}"
        )),
        None => Err(format!("'{text}' is not {DURATION_FORM}")),
    }
}

pub(super) fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err(format!(
            "'{text}' must be above zero: expected {DURATION_FORM}"
        )),
        d => Ok(d),
    }
}

/// `--scale-in-protection`: a request age (None: `off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtectAfter(pub Option<Duration>);

/// The least `--scale-in-protection`: a request in flight for less is any request.
const LEAST_AFTER: Duration = Duration::from_secs(1);

/// `off`, or a duration of at least a second. Not "any request in flight": under steady
/// traffic every task always has one, so every task would be protected and the service
/// would never scale in.
pub(super) fn parse_protect_after(text: &str) -> Result<ProtectAfter, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(ProtectAfter(None));
    }
    let after = parse_duration(text).map_err(|e| format!("{e}, or off"))?;
    if after < LEAST_AFTER {
        return Err(format!(
            "'{text}' is shorter than 1s: a task would be protected for any request in \
             flight, and under steady traffic every task has one, so the service would never \
             scale in; expected the age of a long request, such as 30s or 2m, or off"
        ));
    }
    Ok(ProtectAfter(Some(after)))
}

/// `off`, `IP:PORT` (IPv4, `[IPv6]`), `HOST:PORT` with a host name, or `:PORT` for
/// every address of both families (as the default).
pub(super) fn parse_listen(text: &str) -> Result<Listen, String> {
    let text = text.trim();
    let refused = || {
        format!(
            "'{text}' is not an address: expected HOST:PORT (0.0.0.0:9595, [::]:9595, \
             localhost:9595), :PORT or off"
        )
    };
    if text.eq_ignore_ascii_case("off") {
        return Ok(Listen {
            at: None,
            explicit: true,
        });
    }
    if let Some(port) = text.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| refused())?;
        return Ok(Listen {
            at: Some(ListenAt::Any(port)),
            explicit: true,
        });
    }
    let full = text.to_string();
    if let Ok(addr) = full.parse::<SocketAddr>() {
        return Ok(Listen {
            at: Some(ListenAt::Addr(addr)),
            explicit: true,
        });
    }
    let (host, port) = full.rsplit_once(':').ok_or_else(refused)?;
    let port: u16 = port.parse().map_err(|_| refused())?;
    // A host name (RFC 1123 letters, digits, hyphens and dots); anything else with a
    // colon or bracket was meant as an address and is refused as one.
    let name = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && !host.starts_with(['-', '.']);
    if !name {
        return Err(refused());
    }
    Ok(Listen {
        at: Some(ListenAt::Name {
            host: host.to_ascii_lowercase(),
            port,
        }),
        explicit: true,
    })
}

pub(super) fn parse_http_url(text: &str) -> Result<hyper::Uri, String> {
    let accepted = "expected an http:// URL like http://127.0.0.1:8080/health";
    let uri: hyper::Uri = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a URL: {accepted}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http"), Some(_)) => Ok(uri),
        (Some("https"), _) => Err(format!(
            "'{text}': https is not supported ({accepted}; lifeguard carries no TLS stack: use the plain port)"
        )),
        _ => Err(format!("'{text}' is not an http URL: {accepted}")),
    }
}

pub(super) fn parse_host_port(text: &str) -> Result<(String, u16), String> {
    let accepted = "expected HOST:PORT like 127.0.0.1:8080 or localhost:8080";
    let (host, port) = text
        .trim()
        .rsplit_once(':')
        .ok_or_else(|| format!("'{text}': {accepted}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match port.parse::<u16>() {
        Ok(port) if port > 0 && !host.is_empty() => Ok((host.to_string(), port)),
        _ => Err(format!("'{text}': {accepted}")),
    }
}

pub(super) fn parse_port(text: &str) -> Result<u16, String> {
    match text.trim().parse::<u32>() {
        Ok(port @ 1..=65535) => Ok(port as u16),
        _ => Err(format!(
            "'{text}' is not a TCP port: expected a whole number from 1 to 65535"
        )),
    }
}

/// `[HOST:]PORT`, HOST an IP address: as `(HOST, PORT)` with HOST empty when not given,
/// the value type `--ready-tcp` has (one copy of clap's code for both); `mirror_port`
/// makes it a `MirrorPort`.
pub(super) fn parse_mirror_port(text: &str) -> Result<(String, u16), String> {
    let accepted = "expected the app container's ready port, PORT (9596) or HOST:PORT \
                    (127.0.0.1:9596, [::1]:9596), the port a whole number from 1 to 65535";
    let trimmed = text.trim();
    let (host, port) = match trimmed.rsplit_once(':') {
        Some((host, port)) => {
            // An IPv6 address in brackets, as in a URL: `::1:9596` would be ambiguous.
            let bare = match host.strip_prefix('[') {
                Some(inner) => inner.strip_suffix(']'),
                None => (!host.contains(':') && !host.contains(']')).then_some(host),
            };
            match bare.filter(|h| h.parse::<std::net::IpAddr>().is_ok()) {
                Some(bare) => (bare, port),
                None => {
                    return Err(format!(
                        "'{text}': '{host}' is not an IP address: {accepted}"
                    ))
                }
            }
        }
        None => ("", trimmed),
    };
    match port.parse::<u32>() {
        Ok(port @ 1..=65535) if !port_has_sign(text) => Ok((host.to_string(), port as u16)),
        _ => Err(format!("'{text}' is not a TCP port: {accepted}")),
    }
}

/// `+9596`: u32's parser takes the sign; a port is written without one.
fn port_has_sign(text: &str) -> bool {
    text.rsplit(':')
        .next()
        .is_some_and(|p| p.trim().starts_with('+'))
}

/// The mirror's port from what `parse_mirror_port` accepted.
/// An unspecified HOST (`0.0.0.0`, `[::]`) is any address, as a listener's is.
pub(super) fn mirror_port((host, port): (String, u16)) -> MirrorPort {
    MirrorPort {
        host: host
            .parse::<std::net::IpAddr>()
            .ok()
            .filter(|ip| !ip.is_unspecified()),
        port,
    }
}

pub(super) fn parse_probe(text: &str) -> Result<ProbeTarget, String> {
    match text.trim() {
        "ready" | "" => Ok(ProbeTarget::Ready),
        "live" => Ok(ProbeTarget::Live),
        url => parse_http_url(url)
            .map(ProbeTarget::Url)
            .map_err(|e| format!("{e} (or `ready` or `live`)")),
    }
}

pub(super) fn parse_signal(text: &str) -> Result<Signal, String> {
    Signal::parse(text, false)
}

/// `--stop-signal`: a signal lifeguard can catch and that means "stop" rather than
/// lifeguard's own business (SIGCHLD is how it hears of exits; job control's signals it
/// passes on as a terminal would; SIGCONT it sends after a stop signal itself, and the
/// kernel sends it to resume a stopped group); SIGTERM when not given.
pub(super) fn stop_signal(given: Option<Signal>) -> Result<Signal, String> {
    let Some(signal) = given else {
        return Ok(crate::signal_names::TERM);
    };
    let why = match signal.0 {
        libc::SIGKILL | libc::SIGSTOP => "cannot be caught, so it cannot begin a drain",
        libc::SIGCHLD => "is how lifeguard hears of exits",
        libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => {
            "is job control (a terminal's Ctrl-Z, a background read or write), which \
             lifeguard passes on to the app as a terminal would, so it cannot also begin a drain"
        }
        libc::SIGCONT => {
            "resumes stopped processes (lifeguard sends it after the stop signal itself), \
             so it cannot also begin a drain"
        }
        _ => return Ok(signal),
    };
    Err(format!(
        "--stop-signal (LIFEGUARD_STOP_SIGNAL) {signal} {why}: expected the signal your \
         orchestrator or image's STOPSIGNAL sends to stop, like TERM (the default), QUIT or INT"
    ))
}

pub(super) fn parse_exit_code(text: &str) -> Result<u8, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("'{text}' is not an exit code: expected a whole number from 0 to 255"))
}

/// The forms a boolean takes, in any case: what task definitions, Helm values and
/// Compose files write (`1`, `true`, `yes`, `on`), and their opposites.
pub(super) const BOOLEAN_FORM: &str = "1/0, true/false, yes/no or on/off";

/// A boolean variable's value (`LIFEGUARD_SINGLE_CHILD=1`), case-insensitively.
pub(super) fn boolean(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!(
            "'{text}' is not a boolean: expected {BOOLEAN_FORM}"
        )),
    }
}

/// `ECS_AGENT_URI`: the agent's task-protection state endpoint under it
/// (`$ECS_AGENT_URI/task-protection/v1/state`, agent 1.65.0 and later), or why it cannot be
/// used.
pub(super) fn ecs_agent_endpoint(agent_uri: &str) -> Result<hyper::Uri, String> {
    let base = agent_uri.trim().trim_end_matches('/');
    let uri: hyper::Uri = format!("{base}/task-protection/v1/state")
        .parse()
        .map_err(|e| format!("ECS_AGENT_URI ({agent_uri}) is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.host().is_none() {
        return Err(format!(
            "ECS_AGENT_URI ({agent_uri}) is not an http:// URL, as the ECS agent sets it"
        ));
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_under_the_agents_uri() {
        let uri = ecs_agent_endpoint("http://169.254.170.2/api/4e5bb1d0-task/").unwrap();
        assert_eq!(
            uri.to_string(),
            "http://169.254.170.2/api/4e5bb1d0-task/task-protection/v1/state"
        );
        assert!(ecs_agent_endpoint("https://x/api")
            .unwrap_err()
            .contains("http://"));
        assert!(ecs_agent_endpoint("not a url")
            .unwrap_err()
            .contains("ECS_AGENT_URI"));
    }
}
