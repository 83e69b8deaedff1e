//! lifeguard's entry point: parse the command line, then either probe a running
//! lifeguard (`--probe`) or become the app's supervisor (pid1/), which forks the
//! helper process (helper/) beside it.
#![deny(unsafe_code)]

mod board;
mod cli;
mod faults;
mod helper;
mod kernel;
mod logging;
mod lookup;
mod pid1;
mod probe;
mod signal_names;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::Parsed;
use crate::pid1::EXIT_SETUP_FAILED;

fn main() -> ExitCode {
    helper::threads::catch_panics();
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
    pid1::supervise(*settings).map(ExitCode::from)
}
