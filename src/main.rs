//! lifeguard's entry point: parse the command line, set up the process (signals,
//! subreaper, terminal), start the app, and hand over to the supervision loop.
#![deny(unsafe_code)]

mod cli;
mod kernel;
mod lifecycle;
mod logging;
mod signals;
mod stats;
mod supervisor;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;

use crate::cli::{Parsed, Settings};
use crate::lifecycle::{Lifecycle, Phase};
use crate::supervisor::{Status, Supervisor};

/// lifeguard failed before the app started (DESIGN §6).
const EXIT_SETUP_FAILED: u8 = 125;
const EXIT_CANNOT_EXECUTE: u8 = 126;
const EXIT_NOT_FOUND: u8 = 127;

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            logging::error(format!("{err:#}"), &[]);
            ExitCode::from(EXIT_SETUP_FAILED)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let settings = match cli::parse(std::env::args_os(), |name| std::env::var(name).ok()) {
        Parsed::Run(settings) => settings,
        Parsed::Exit { message, code, to_stdout } => {
            let _ = if to_stdout {
                std::io::stdout().write_all(message.as_bytes())
            } else {
                std::io::stderr().write_all(message.as_bytes())
            };
            return Ok(ExitCode::from(code));
        }
    };
    logging::init(settings.log_level, settings.log_format);
    supervise(*settings).map(ExitCode::from)
}

fn supervise(settings: Settings) -> anyhow::Result<u8> {
    kernel::guard_standard_descriptors();
    // First, before any thread exists (the runtime starts none, but a resolver might).
    let inbox = kernel::SignalInbox::block_all().context("blocking signals")?;
    if let Some(signal) = settings.pdeathsig {
        kernel::set_parent_death_signal(signal).context("setting the parent-death signal")?;
    }
    if !kernel::is_pid1() {
        // Not fatal: without it orphans go to the real init, which reaps them anyway.
        if let Err(err) = kernel::become_subreaper() {
            logging::warn(format!("cannot become a child subreaper: {err}"), &[]);
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let take_terminal = kernel::release_terminal(&inbox);

    let program = settings.command[0].to_string_lossy().into_owned();
    let app_pid = match kernel::spawn_app(&settings.command, take_terminal) {
        Ok(pid) => pid,
        Err(err) => {
            let code = match err.kind() {
                std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                _ => EXIT_CANNOT_EXECUTE,
            };
            logging::error(format!("cannot run '{program}': {err}"), &[("code", &code)]);
            return Ok(code);
        }
    };
    logging::info("app started", &[("pid", &app_pid), ("command", &program)]);

    let (status_tx, _status_rx) = watch::channel(Status {
        phase: Phase::Starting,
        app_pid,
    });
    // No app check yet: the app counts as ready once it is spawned (DESIGN §3).
    let (_ready_tx, ready_rx) = watch::channel(true);
    let supervisor = Supervisor {
        lifecycle: Lifecycle::new(settings.lifecycle),
        app_pid,
        group: true,
        warn_on_reap: settings.warn_on_reap,
        status: status_tx,
        app_ready: ready_rx,
        stats: Arc::new(stats::Stats::default()),
    };
    let supervisor = Supervisor {
        group: supervisor.lifecycle.config().group,
        ..supervisor
    };
    let code = runtime.block_on(supervisor.run(inbox));
    logging::info("lifeguard exiting", &[("code", &code)]);
    Ok(code)
}
