//! PID 1's half of lifeguard: set the process up (signals, subreaper, the endpoint's
//! socket, the Board), start the app, and run the supervision loop, which keeps the
//! helper process beside it. One thread, always: nothing here runs HTTP, TLS, netlink,
//! DNS or an async runtime (they are the helper's, helper/).
#![forbid(unsafe_code)]

pub mod keeper;
pub mod lifecycle;
pub mod supervisor;
pub mod sys;

use std::time::{Duration, Instant};

use anyhow::Context;

use crate::board::Board;
use crate::cli::{self, Settings};
use crate::helper;
use crate::kernel;
use crate::logging;
use keeper::Keeper;
use lifecycle::Lifecycle;
use supervisor::Supervisor;
use sys::Kernel;

/// lifeguard failed before the app started (docs/reference.md).
pub const EXIT_SETUP_FAILED: u8 = 125;
const EXIT_CANNOT_EXECUTE: u8 = 126;
const EXIT_NOT_FOUND: u8 = 127;
/// Room for the endpoint's 1024 connections and lifeguard's own descriptors.
const MAX_DESCRIPTORS: u64 = 2048;
/// Descriptors kept free of connections: the signalfd, epoll, the app check's sockets.
const RESERVED_DESCRIPTORS: u64 = 64;

pub fn supervise(settings: Settings) -> anyhow::Result<u8> {
    kernel::guard_standard_descriptors();
    // First, before any thread exists: every thread started later inherits the mask.
    let inbox = kernel::SignalInbox::block_all().context("blocking signals")?;
    kernel::hear_children();
    logging::start_writer();
    if let Some(signal) = settings.pdeathsig {
        kernel::set_parent_death_signal(signal).context("setting the parent-death signal")?;
    }
    if !kernel::is_pid1() {
        // Not fatal: without it orphans go to the real init, which reaps them anyway.
        if let Err(err) = kernel::become_subreaper() {
            logging::warn(format!("cannot become a child subreaper: {err}"), &[]);
        }
    }
    // Bound before the app starts, so an unusable explicit address stops everything
    // with 125 and nothing is left half-started.
    let endpoint = bind_endpoint(&settings.listen)?;
    // Mapped before the fork, so the helper shares it.
    let board = Board::new().context("mapping the board")?;
    // The C library may have unblocked its reserved signals if a thread was started
    // (the --listen lookup): block them again, once.
    kernel::reblock_every_signal();
    let terminal = kernel::release_terminal(&inbox);
    let plan = helper::Plan {
        endpoint,
        app_check: settings.app_check.clone(),
        check_interval: settings.check_interval,
        metrics: settings.metrics.clone(),
        cloudwatch: settings.cloudwatch.clone(),
    };

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
            plan.needed(),
            plan.publishes(),
            Instant::now() + keeper::FIRST_START,
        ),
        app_check: settings.app_check.is_some(),
        sys: Kernel { inbox, plan },
        lifecycle: Lifecycle::new(settings.lifecycle),
        app_pid,
        warn_on_reap: settings.warn_on_reap,
        board,
        terminal,
        last_look: None,
        senders: Default::default(),
        me: kernel::own_pid(),
        inflight_port: settings.metrics.inflight_port,
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

/// How long a host name given to `--listen` may take to resolve, at start.
const LISTEN_LOOKUP_LIMIT: Duration = Duration::from_secs(2);

/// The endpoint's listeners (one per address), if it is on. An address the user named
/// must work; the default may be taken (two lifeguards in one pod), which costs only a
/// warning. Returns them with the number of connections they may hold at once.
fn bind_endpoint(
    listen: &cli::Listen,
) -> anyhow::Result<Option<(Vec<std::net::TcpListener>, usize)>> {
    let Some(at) = &listen.at else {
        return Ok(None);
    };
    let addrs = match at {
        cli::ListenAt::Addr(addr) => vec![*addr],
        cli::ListenAt::Name { host, port } => resolve(host, *port)?,
    };
    let limit = kernel::raise_descriptor_limit(MAX_DESCRIPTORS);
    let cap = (limit.saturating_sub(RESERVED_DESCRIPTORS) as usize)
        .min(helper::endpoint::MAX_CONNECTIONS);
    let mut listeners = Vec::new();
    for addr in addrs {
        let bound = std::net::TcpListener::bind(addr).and_then(|l| {
            l.set_nonblocking(true)?;
            Ok(l)
        });
        match bound {
            Ok(listener) => {
                // Refinements only: a listener the kernel would not tune still serves.
                if let Err(err) = kernel::tune_listener(
                    &listener,
                    helper::endpoint::RECEIVE_BUFFER,
                    helper::endpoint::SEND_BUFFER,
                ) {
                    logging::warn(format!("endpoint socket left untuned: {err}"), &[]);
                }
                logging::info(
                    "endpoint listening",
                    &[("addr", &addr), ("connections", &cap)],
                );
                listeners.push(listener);
            }
            Err(err) if listen.explicit => {
                return Err(err).with_context(|| match at {
                    cli::ListenAt::Name { .. } => format!("cannot listen on {addr} ({at})"),
                    cli::ListenAt::Addr(_) => format!("cannot listen on {addr}"),
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

/// Every address of `host`, looked up once at start on a thread of its own (std's
/// resolver blocks, and a resolver that never answers must not hold the start for
/// ever): the endpoint listens on each of them.
fn resolve(host: &str, port: u16) -> anyhow::Result<Vec<std::net::SocketAddr>> {
    let answer = crate::lookup::within(host, port, LISTEN_LOOKUP_LIMIT);
    match answer {
        Some(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Some(Ok(_)) => anyhow::bail!("cannot listen on {host}:{port}: the name has no address"),
        Some(Err(err)) => Err(err).with_context(|| format!("cannot listen on {host}:{port}")),
        None => anyhow::bail!(
            "cannot listen on {host}:{port}: no answer to the name lookup within {}",
            humantime::format_duration(LISTEN_LOOKUP_LIMIT)
        ),
    }
}
