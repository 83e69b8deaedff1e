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
mod settings;
mod signal_names;
mod sock_diag;

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
    // The LIFEGUARD_* variables set, read once: for clap's part and for the warnings of
    // those nobody knows.
    let twins: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| name.starts_with("LIFEGUARD_"))
        .collect();
    // The process environment, for the command line and for where lifeguard runs.
    let lookup = |name: &str| std::env::var(name).ok();
    let run = match cli::parse(std::env::args_os(), lookup, &twins, engine(&lookup)) {
        Parsed::Run(run) => run,
        Parsed::Probe(probe) => {
            logging::init(probe.log.level, probe.log.format);
            // A probe says nothing of unknown variables: it runs beside a lifeguard
            // that has already said them.
            for warning in &probe.warnings {
                logging::warn(warning, &[]);
            }
            return Ok(ExitCode::from(probe::run(&probe)));
        }
        Parsed::Mirror(mirror) => {
            logging::init(mirror.log.level, mirror.log.format);
            warn_all(&mirror.warnings, twins);
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
    let settings::Run {
        supervision,
        helper,
        log,
        notices,
        warnings,
    } = *run;
    logging::init(log.level, log.format);
    for notice in &notices {
        logging::notice(notice, &[]);
    }
    warn_all(&warnings, twins);
    // PID 1 gets the helper process as an entry point and what it keeps; only this
    // file knows both halves.
    let helper = move |sockets: pid1::Sockets| -> Box<dyn pid1::HelperProcess> {
        Box::new(helper::Plan {
            endpoint: sockets.endpoint,
            ready_port: sockets.ready_port,
            settings: helper,
        })
    };
    pid1::supervise(supervision, helper).map(ExitCode::from)
}

/// Where lifeguard runs (cli::engine decides it from these facts): its stop's defaults
/// fit the engine's stop.
fn engine(lookup: &dyn Fn(&str) -> Option<String>) -> Option<settings::Engine> {
    // Regular files, as the engines write them.
    let written: fn(&str) -> bool = |path| std::path::Path::new(path).is_file();
    cli::engine(kernel::is_pid1(), written, lookup)
}

/// The settings' warnings, and the `LIFEGUARD_*` variables nobody knows (a misspelling
/// would otherwise be ignored without a word).
fn warn_all(warnings: &[String], twins: Vec<String>) {
    for warning in warnings {
        logging::warn(warning, &[]);
    }
    for warning in cli::unknown_variables(twins.into_iter()) {
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
