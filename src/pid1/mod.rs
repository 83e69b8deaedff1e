//! PID 1's half of lifeguard: set the process up (signals, subreaper, the endpoint's
//! socket, the Board), start the app, and run the supervision loop, which keeps the
//! helper process beside it. One thread, always: nothing here runs HTTP, TLS, netlink,
//! DNS or an async runtime (they are the helper's, helper/).
#![forbid(unsafe_code)]

pub mod keeper;
pub mod lifecycle;
pub mod supervisor;
pub mod sys;

use std::convert::Infallible;
use std::os::fd::{OwnedFd, RawFd};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::board::{Board, HelperBoard};
use crate::kernel;
use crate::logging;
use crate::settings::{self, endpoint, Supervision};
use keeper::Keeper;
use lifecycle::Lifecycle;
use supervisor::Supervisor;
use sys::Kernel;

/// lifeguard failed before the app started (docs/reference.md).
pub const EXIT_SETUP_FAILED: u8 = 125;
const EXIT_CANNOT_EXECUTE: u8 = 126;
const EXIT_NOT_FOUND: u8 = 127;

/// What PID 1 knows of the helper process: whether there is one, what it keeps of the
/// descriptors a fork gives it, and its entry point. `main` hands it over, so that
/// supervision holds no helper type and the helper's code is reached only through the
/// fork.
pub trait HelperProcess {
    /// Whether there is anything for a helper process to do.
    fn needed(&self) -> bool;
    /// Whether it has figures to publish before it leaves.
    fn publishes(&self) -> bool;
    /// The descriptors it keeps besides the Board's bells (its sockets).
    fn keeps(&self) -> Vec<RawFd>;
    /// Its life, in the child of the fork.
    fn run(&self, board: HelperBoard) -> Infallible;
}

/// What PID 1 binds for the helper before the app starts: the endpoint's listeners (one
/// per address, and how many connections they may hold at once) and copies of the ready
/// port's sockets, whose queues the helper empties.
pub struct Sockets {
    pub endpoint: Option<(Vec<std::net::TcpListener>, usize)>,
    pub ready_port: Vec<std::net::TcpListener>,
}

pub fn supervise(
    settings: Supervision,
    helper: impl FnOnce(Sockets) -> Box<dyn HelperProcess>,
) -> anyhow::Result<u8> {
    let inbox = crate::init::start(settings.pdeathsig)?;
    // Bound before the app starts, so an unusable explicit address stops everything
    // with 125 and nothing is left half-started.
    let mut hosts = endpoint_addresses(&settings.listen)?;
    let endpoint = bind_endpoint(&settings.listen, &mut hosts, kernel::listen)?;
    let ready_port = match settings.ready_port {
        Some(port) => Some(bind_ready_port(port, &mut hosts)?),
        None => None,
    };
    // Mapped before the fork, so the helper shares it.
    let board = Board::new().context("mapping the board")?;
    // The C library may have unblocked its reserved signals if a thread was started
    // (the --listen lookup): block them again, once.
    kernel::reblock_every_signal();
    let terminal = kernel::release_terminal(&inbox);
    let helper = helper(Sockets {
        endpoint,
        ready_port: match &ready_port {
            Some(port) => port
                .listeners()
                .context("copying the ready port's sockets for the helper")?,
            None => Vec::new(),
        },
    });

    let program = settings.command[0].to_string_lossy().into_owned();
    let app_pid = match kernel::spawn_app(&settings.command, terminal) {
        Ok(pid) => pid,
        Err(err) => {
            // The child may have taken the foreground before its exec failed.
            kernel::restore_terminal(terminal);
            // As a shell: 127 not found, 126 found but not executable; a failure to
            // fork or to set the child up is lifeguard's own (125).
            let code = match err.raw_os_error() {
                Some(libc::ENOENT) => EXIT_NOT_FOUND,
                Some(
                    libc::EACCES
                    | libc::EPERM
                    | libc::ENOEXEC
                    | libc::EISDIR
                    | libc::ENOTDIR
                    | libc::ELOOP
                    | libc::ETXTBSY
                    | libc::ENAMETOOLONG,
                ) => EXIT_CANNOT_EXECUTE,
                _ => EXIT_SETUP_FAILED,
            };
            logging::error(
                format!("cannot run '{program}': {}", why_not_run(&program, &err)),
                &[("code", &code)],
            );
            return Ok(code);
        }
    };
    logging::info("app started", &[("pid", &app_pid), ("command", &program)]);

    let supervisor = Supervisor {
        keeper: Keeper::new(
            helper.needed(),
            helper.publishes(),
            Instant::now() + keeper::FIRST_START,
        ),
        app_check: settings.app_check,
        sys: Kernel {
            inbox,
            helper,
            ready_port,
        },
        lifecycle: Lifecycle::new(settings.lifecycle),
        app_pid,
        warn_on_reap: settings.warn_on_reap,
        board,
        terminal,
        last_look: None,
        senders: Default::default(),
        me: kernel::own_pid(),
        inflight_port: settings.inflight_port,
        ready_port: settings.ready_port,
        scale_in_protection: settings.scale_in_protection,
        ready_open: false,
        ready_retry: None,
        woke_late: Duration::ZERO,
        told_own_signal: false,
        helper_sched: None,
        spared_since: None,
        starved_from: None,
    };
    // The helper process is forked by the loop keeper::FIRST_START after the app's
    // spawn: its start is off the app's way.
    let code = supervisor.run();
    kernel::restore_terminal(terminal);
    logging::notice("exiting", &[("code", &code)]);
    Ok(code)
}

/// What the exec failure means for COMMAND: the kernel says EACCES both for a file
/// without execute permission and for a directory, and a user who typed a directory
/// should be told so.
fn why_not_run(program: &str, err: &std::io::Error) -> String {
    let is_dir = |path: &std::path::Path| path.metadata().is_ok_and(|m| m.is_dir());
    if err.raw_os_error() == Some(libc::EACCES) {
        // As execvp looks: the path itself, or the first PATH entry that has the name.
        let found = if program.contains('/') {
            Some(std::path::PathBuf::from(program))
        } else {
            std::env::var_os("PATH").and_then(|path| {
                std::env::split_paths(&path)
                    .map(|dir| dir.join(program))
                    .find(|p| p.exists())
            })
        };
        if let Some(path) = found.filter(|p| is_dir(p)) {
            return format!("{} is a directory", path.display());
        }
    }
    err.to_string()
}

/// The addresses of `--listen` (a host name's every address), looked up once; with
/// the endpoint off, the default's (the ready port listens on the same host), with
/// whether they are the dual-stack default that falls back to IPv4 (`any`).
fn endpoint_addresses(listen: &settings::Listen) -> anyhow::Result<Hosts> {
    let (addrs, any) = match &listen.at {
        Some(settings::ListenAt::Addr(addr)) => (vec![*addr], false),
        Some(settings::ListenAt::Name { host, port }) => {
            (crate::lookup::for_listen(host, *port)?, false)
        }
        Some(settings::ListenAt::Any(port)) => (vec![dual_stack(*port)], true),
        None => (vec![dual_stack(settings::DEFAULT_PORT)], true),
    };
    Ok(Hosts { addrs, any })
}

/// Where the endpoint and the ready port listen.
struct Hosts {
    addrs: Vec<std::net::SocketAddr>,
    /// The addresses are `[::]`, to be taken as `0.0.0.0` where the kernel has no IPv6.
    any: bool,
}

fn dual_stack(port: u16) -> std::net::SocketAddr {
    (std::net::Ipv6Addr::UNSPECIFIED, port).into()
}

/// Where `addr` is the dual-stack default and binding it failed for want of IPv6 in
/// the kernel (booted with `ipv6.disable=1`), the address to bind instead, `0.0.0.0`,
/// which every later bind on these hosts takes too (said once).
fn ipv4_instead(
    hosts: &mut Hosts,
    addr: std::net::SocketAddr,
    err: &std::io::Error,
) -> Option<std::net::SocketAddr> {
    if !hosts.any || !kernel::no_ipv6(err) {
        return None;
    }
    let v4 = std::net::SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, addr.port()));
    logging::info("no IPv6 in this kernel: listening on IPv4 alone", &[]);
    // The default is one address: `[::]`.
    *hosts = Hosts {
        addrs: vec![v4],
        any: false,
    };
    Some(v4)
}

/// The ready port's sockets (`--ready-port`), on the endpoint's host, bound and not
/// listening: the port was named, so a failure to bind it stops lifeguard (125) before
/// the app starts, naming the address.
fn bind_ready_port(port: u16, hosts: &mut Hosts) -> anyhow::Result<kernel::ReadyPort> {
    let addrs: Vec<std::net::SocketAddr> = hosts
        .addrs
        .iter()
        .map(|addr| std::net::SocketAddr::new(addr.ip(), port))
        .collect();
    let bound = match kernel::ReadyPort::bind(&addrs) {
        Err(err) => match (&addrs[..], ipv4_instead(hosts, addrs[0], &err)) {
            ([_], Some(v4)) => kernel::ReadyPort::bind(&[v4]),
            _ => Err(err),
        },
        bound => bound,
    }
    .with_context(|| {
        let named: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
        format!("cannot bind --ready-port on {}", named.join(", "))
    })?;
    logging::info(
        "ready port bound: it listens once the app is ready",
        &[("port", &port)],
    );
    Ok(bound)
}

/// The endpoint's listeners (one per address), if it is on. An address the user named
/// must work; the default may be taken (two lifeguards in one pod), which costs only a
/// warning. Returns them with the number of connections they may hold at once. A
/// socket counts once it listens (`start`, the kernel's listen(2) but in tests): the
/// bind alone can succeed where the listen then fails.
fn bind_endpoint(
    listen: &settings::Listen,
    hosts: &mut Hosts,
    start: impl Fn(&OwnedFd) -> std::io::Result<()>,
) -> anyhow::Result<Option<(Vec<std::net::TcpListener>, usize)>> {
    let Some(at) = &listen.at else {
        return Ok(None);
    };
    let limit = kernel::raise_descriptor_limit(endpoint::MAX_DESCRIPTORS);
    let cap = (limit.saturating_sub(endpoint::RESERVED_DESCRIPTORS) as usize)
        .min(endpoint::MAX_CONNECTIONS);
    let mut listeners = Vec::new();
    for mut addr in hosts.addrs.clone() {
        let bound = match kernel::bound_socket(addr, true) {
            Err(err) => match ipv4_instead(hosts, addr, &err) {
                Some(v4) => {
                    addr = v4;
                    kernel::bound_socket(v4, true)
                }
                None => Err(err),
            },
            bound => bound,
        };
        let listening = bound.and_then(|fd| {
            // Refinements only: a listener the kernel would not tune still serves.
            if let Err(err) =
                kernel::tune_buffers(&fd, endpoint::RECEIVE_BUFFER, endpoint::SEND_BUFFER)
            {
                logging::warn(format!("endpoint socket left untuned: {err}"), &[]);
            }
            start(&fd)?;
            Ok(std::net::TcpListener::from(fd))
        });
        match listening {
            Ok(listener) => {
                logging::info(
                    "endpoint listening",
                    &[("addr", &addr), ("connections", &cap)],
                );
                listeners.push(listener);
            }
            Err(err) if listen.explicit => {
                return Err(err).with_context(|| match at {
                    settings::ListenAt::Name { .. } => format!("cannot listen on {addr} ({at})"),
                    _ => format!("cannot listen on {addr}"),
                });
            }
            Err(err) => {
                logging::warn(
                    format!("cannot listen on the default address {addr}: {err}; running without the endpoint, so /readyz and /livez do not answer here: a readiness probe or health check aimed at this port will never pass (another lifeguard in the pod or task holds it? give each its own --listen)"),
                    &[],
                );
                return Ok(None);
            }
        }
    }
    Ok(Some((listeners, cap)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback(explicit: bool) -> (settings::Listen, Hosts) {
        let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let listen = settings::Listen {
            at: Some(settings::ListenAt::Addr(addr)),
            explicit,
        };
        let hosts = Hosts {
            addrs: vec![addr],
            any: false,
        };
        (listen, hosts)
    }

    #[test]
    fn a_listen_that_fails_after_the_bind_counts_as_the_bind_would() {
        // What a second socket bound to the port with SO_REUSEADDR meets when the other
        // listened first.
        let taken = |_: &OwnedFd| Err(std::io::Error::from_raw_os_error(libc::EADDRINUSE));
        let (listen, mut hosts) = loopback(true);
        let err = bind_endpoint(&listen, &mut hosts, taken).unwrap_err();
        let said = format!("{err:#}");
        assert!(said.starts_with("cannot listen on 127.0.0.1:0"), "{said}");
        assert!(said.contains("in use"), "{said}");
        // The default address: no endpoint, and no listener that never listens.
        let (mut listen, mut hosts) = loopback(false);
        assert!(bind_endpoint(&listen, &mut hosts, taken).unwrap().is_none());
        // The kernel's listen: a socket that takes connections.
        listen.explicit = true;
        let (listeners, _) = bind_endpoint(&listen, &mut hosts, kernel::listen)
            .unwrap()
            .unwrap();
        let addr = listeners[0].local_addr().unwrap();
        std::net::TcpStream::connect(addr).expect("the endpoint's socket listens");
    }
}
