//! What lifeguard does first whenever it runs as an init — as the app's supervisor
//! (pid1/) or as the readiness mirror (mirror/): every signal to its inbox, SIGCHLD heard,
//! its log lines set up, the parent-death signal, and a subreaper where it is not PID 1.
#![forbid(unsafe_code)]

use anyhow::Context;

use crate::kernel;
use crate::logging;
use crate::signal_names::Signal;

/// Call first, before any thread exists: every thread started later inherits the mask.
pub fn start(pdeathsig: Option<Signal>) -> anyhow::Result<kernel::SignalInbox> {
    let inbox = kernel::SignalInbox::block_all().context("blocking signals")?;
    kernel::hear_children();
    logging::start_writer();
    if let Some(signal) = pdeathsig {
        kernel::set_parent_death_signal(signal).context("setting the parent-death signal")?;
    }
    if !kernel::is_pid1() {
        // Not fatal: without it orphans go to the real init, which reaps them anyway.
        if let Err(err) = kernel::become_subreaper() {
            logging::warn(format!("cannot become a child subreaper: {err}"), &[]);
        }
    }
    Ok(inbox)
}
