//! lifeguard's entry point: parse the command line, then either probe a running
//! lifeguard (`--probe`), serve as the readiness mirror beside the app's container
//! (`--mirror-ready-port`, mirror/), or become the app's supervisor (pid1/), which forks
//! the helper process (helper/) beside it.
#![deny(unsafe_code)]

mod board;
mod cli;
mod faults;
mod helper;
mod init;
mod kernel;
mod logging;
mod lookup;
mod mirror;
mod panics;
mod pid1;
mod probe;
mod seconds;
mod signal_names;

use std::convert::Infallible;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::Parsed;
use crate::pid1::EXIT_SETUP_FAILED;

fn main() -> ExitCode {
    panics::install();
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
        Parsed::Mirror(mirror) => {
            logging::init(mirror.log_level, mirror.log_format);
            warn_all(&mirror.warnings);
            return mirror::run(*mirror);
        }
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
    if settings.probe.is_none() {
        warn_all(&settings.warnings);
    } else {
        for warning in &settings.warnings {
            logging::warn(warning, &[]);
        }
    }
    if let Some((target, timeout)) = &settings.probe {
        return Ok(ExitCode::from(probe::run(
            target,
            settings.listen.clone(),
            *timeout,
        )));
    }
    // PID 1 gets the helper process as an entry point and what it keeps; only this
    // file knows both halves.
    let (app_check, check_interval) = (settings.app_check.clone(), settings.check_interval);
    let (metrics, cloudwatch) = (settings.metrics.clone(), settings.cloudwatch.clone());
    let protection = settings.protection.clone();
    let helper = move |sockets: pid1::Sockets| -> Box<dyn pid1::HelperProcess> {
        Box::new(helper::Plan {
            endpoint: sockets.endpoint,
            ready_port: sockets.ready_port,
            app_check,
            check_interval,
            metrics,
            cloudwatch,
            protection,
        })
    };
    let sizes = pid1::EndpointSizes {
        max_connections: helper::endpoint::MAX_CONNECTIONS,
        receive_buffer: helper::endpoint::RECEIVE_BUFFER,
        send_buffer: helper::endpoint::SEND_BUFFER,
    };
    pid1::supervise(*settings, sizes, helper).map(ExitCode::from)
}

/// The settings' warnings, and the `LIFEGUARD_*` variables nobody knows (a misspelling
/// would otherwise be ignored without a word).
fn warn_all(warnings: &[String]) {
    for warning in warnings {
        logging::warn(warning, &[]);
    }
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    for warning in cli::unknown_variables(names) {
        logging::warn(warning, &[]);
    }
}

/// How supervision sees the helper process: through this and the Board alone (pid1/
/// imports nothing of helper/, nor helper/ of pid1/).
impl pid1::HelperProcess for helper::Plan {
    fn needed(&self) -> bool {
        helper::Plan::needed(self)
    }

    fn publishes(&self) -> bool {
        helper::Plan::publishes(self)
    }

    fn keeps(&self) -> Vec<RawFd> {
        (self.endpoint.iter())
            .flat_map(|(listeners, _)| listeners)
            .chain(&self.ready_port)
            .map(|l| l.as_raw_fd())
            .collect()
    }

    fn run(&self, board: board::HelperBoard) -> Infallible {
        helper::run(self, board)
    }
}
