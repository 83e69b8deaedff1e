//! lifeguard's entry point: parse the command line, set up the process (signals,
//! subreaper, terminal), start the app, and hand over to the supervision loop.
#![deny(unsafe_code)]

mod app_check;
mod board;
mod cli;
mod cloudwatch;
mod faults;
mod health;
mod helpers;
mod http;
mod http_client;
mod kernel;
mod lifecycle;
mod logging;
mod metrics;
mod probe;
mod signal_names;
mod supervisor;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::board::Board;
use crate::cli::{Parsed, Settings};
use crate::lifecycle::Lifecycle;
use crate::supervisor::Supervisor;

/// lifeguard failed before the app started (README, "Exit status").
const EXIT_SETUP_FAILED: u8 = 125;
const EXIT_CANNOT_EXECUTE: u8 = 126;
const EXIT_NOT_FOUND: u8 = 127;
/// Room for the endpoint's 1024 connections and lifeguard's own descriptors.
const MAX_DESCRIPTORS: u64 = 2048;
/// Descriptors kept free of connections: the signalfd, epoll, the app check's sockets.
const RESERVED_DESCRIPTORS: u64 = 64;

fn main() -> ExitCode {
    helpers::catch_panics();
    let code = match run() {
        Ok(code) => code,
        Err(err) => {
            logging::error(format!("{err:#}"), &[]);
            ExitCode::from(EXIT_SETUP_FAILED)
        }
    };
    // Bounded: a stalled stderr must not hold the exit back.
    logging::flush(Duration::from_secs(1));
    code
}

fn run() -> anyhow::Result<ExitCode> {
    let settings = match cli::parse(std::env::args_os(), |name| std::env::var(name).ok()) {
        Parsed::Run(settings) => settings,
        Parsed::Exit {
            message,
            code,
            to_stdout,
        } => {
            let _ = if to_stdout {
                std::io::stdout().write_all(message.as_bytes())
            } else {
                std::io::stderr().write_all(message.as_bytes())
            };
            return Ok(ExitCode::from(code));
        }
    };
    logging::init(settings.log_level, settings.log_format);
    for warning in &settings.warnings {
        logging::warn(warning, &[]);
    }
    if let Some((target, timeout)) = &settings.probe {
        return Ok(ExitCode::from(probe::run(
            target,
            settings.listen.clone(),
            *timeout,
        )));
    }
    supervise(*settings).map(ExitCode::from)
}

fn supervise(settings: Settings) -> anyhow::Result<u8> {
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
    let listener = bind_endpoint(&settings.listen)?;
    let board = Board::new().context("creating the board's bells")?;
    // The helpers, each on a thread of its own, all started before the app (helpers.rs
    // says why). Samples are taken only for a reader: the endpoint, CloudWatch, or the
    // drain's hold.
    if let Some((listeners, cap)) = listener {
        http::start(listeners, board.clone(), cap);
    }
    app_check::start(settings.app_check, settings.check_interval, board.clone());
    let sampled = settings.listen.at.is_some()
        || settings.cloudwatch.is_some()
        || settings.metrics.inflight_port.is_some();
    if sampled {
        metrics::start(settings.metrics.clone(), board.clone());
    }
    let publisher = settings
        .cloudwatch
        .clone()
        .and_then(|config| cloudwatch::start(config, board.clone()));
    // The C library unblocks its reserved signals in the thread that starts the first
    // thread (musl and glibc, in pthread_create): every thread is started by now, so
    // block them again here, once (helpers.rs).
    kernel::reblock_every_signal();
    let terminal = kernel::release_terminal(&inbox);

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
        lifecycle: Lifecycle::new(settings.lifecycle),
        app_pid,
        warn_on_reap: settings.warn_on_reap,
        board,
        terminal,
        last_look: None,
        senders: Default::default(),
        me: kernel::own_pid(),
    };
    let code = supervisor.run(inbox);
    // The exit code is settled; one last publish, bounded to 2 s.
    if let Some(publisher) = publisher {
        publisher.flush();
    }
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
    let cap = (limit.saturating_sub(RESERVED_DESCRIPTORS) as usize).min(http::MAX_CONNECTIONS);
    let mut listeners = Vec::new();
    for addr in addrs {
        let bound = std::net::TcpListener::bind(addr).and_then(|l| {
            l.set_nonblocking(true)?;
            Ok(l)
        });
        match bound {
            Ok(listener) => {
                // Refinements only: a listener the kernel would not tune still serves.
                if let Err(err) =
                    kernel::tune_listener(&listener, http::RECEIVE_BUFFER, http::SEND_BUFFER)
                {
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
                    format!("cannot listen on the default address {addr}: {err}; running without the endpoint"),
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
    use std::net::ToSocketAddrs;
    let (tx, rx) = std::sync::mpsc::channel();
    let name = host.to_string();
    std::thread::Builder::new()
        .name("listen-lookup".into())
        .spawn(move || {
            kernel::reblock_every_signal();
            let _ = tx.send((name.as_str(), port).to_socket_addrs().map(|a| {
                let mut addrs: Vec<_> = a.collect();
                addrs.sort();
                addrs.dedup();
                addrs
            }));
        })
        .context("starting the --listen lookup")?;
    match rx.recv_timeout(LISTEN_LOOKUP_LIMIT) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(Ok(_)) => anyhow::bail!("cannot listen on {host}:{port}: the name has no address"),
        Ok(Err(err)) => Err(err).with_context(|| format!("cannot listen on {host}:{port}")),
        Err(_) => anyhow::bail!(
            "cannot listen on {host}:{port}: no answer to the name lookup within {}",
            humantime::format_duration(LISTEN_LOOKUP_LIMIT)
        ),
    }
}
