//! The helper process, `lifeguard-helper`: everything lifeguard does besides
//! supervision — the endpoint, the app check, the sampler, the CloudWatch publisher,
//! the scale-in protection — on threads of its own, in a process PID 1 forks after the app and starts again if it
//! dies or hangs. It meets supervision only on the Board (board.rs). Its main thread
//! keeps the heartbeat: a beat every 2 s while every helper thread's runtime is
//! turning, none once one of them has been stuck for `STUCK` and is hung (a deadlock or
//! a spin a thread cannot be stopped from), so PID 1 kills the whole process and starts
//! a new one. A thread that is only starved of CPU (its cgroup at its quota) is said and
//! left to run.
#![forbid(unsafe_code)]

pub mod app_check;
pub mod cloudwatch;
pub mod desk;
pub mod endpoint;
pub mod health;
pub mod http_client;
pub mod metrics;
pub mod otlp;
pub mod protection;
pub mod threads;
#[cfg(feature = "cloudwatch-api")]
pub mod tls;

use std::convert::Infallible;
use std::time::Duration;

use crate::board::HelperBoard;
use crate::faults;
use crate::kernel;
use crate::logging;
use crate::settings;
use desk::Desk;

/// What the helper process runs, decided by PID 1 from the command line.
pub struct Plan {
    /// The endpoint's listeners, bound by PID 1 before the app started, with the
    /// number of connections they may hold at once.
    pub endpoint: Option<(Vec<std::net::TcpListener>, usize)>,
    /// Copies of the ready port's sockets (`--ready-port`), whose queues the endpoint
    /// empties while supervision keeps them listening.
    pub ready_port: Vec<std::net::TcpListener>,
    pub settings: settings::Helper,
}

impl Plan {
    /// Samples are taken only for a reader: the endpoint, CloudWatch, or the drain's hold.
    pub fn sampled(&self) -> bool {
        self.endpoint.is_some()
            || self.settings.cloudwatch.is_some()
            || self.settings.metrics.inflight_port.is_some()
    }

    /// Whether there is anything for a helper process to do.
    pub fn needed(&self) -> bool {
        self.endpoint.is_some()
            || !self.ready_port.is_empty()
            || self.settings.app_check.is_some()
            || self.sampled()
            || self.settings.cloudwatch.is_some()
    }

    /// Whether the helper has figures to publish before it leaves.
    pub fn publishes(&self) -> bool {
        self.settings.cloudwatch.is_some()
    }
}

/// A helper thread whose runtime has not turned for this long is stuck: if it is hung
/// rather than starved of CPU (threads::Stuck), the heartbeat stops, and PID 1 ends the
/// process.
const STUCK: Duration = Duration::from_secs(5);
/// Every 2 s, not every second: each wake-up of an idle process costs about 50 µs of
/// CPU on a busy host (bench/metrics-results.md), and PID 1 waits 10 s of silence, five
/// beats, before it calls the helper hung.
const BEAT_EVERY: Duration = Duration::from_secs(2);

/// The helper process's life, in the child of the fork.
pub fn run(plan: &Plan, board: HelperBoard) -> Infallible {
    crate::panics::in_helper_process(|thread| {
        threads::count_panic(thread).map(|(helper, first)| (helper.name(), first))
    });
    logging::become_helper();
    board.beat();
    let own_ports = (plan.endpoint.iter())
        .flat_map(|(listeners, _)| listeners)
        .chain(&plan.ready_port)
        .filter_map(|l| l.local_addr().ok().map(|a| a.port()))
        .collect();
    let desk = Desk::new(board, own_ports, plan.settings.stop_signal);
    if plan.settings.app_check.is_some() && desk.board.check_passed() {
        // A helper started again keeps the last verdict, which the Board holds, until
        // its own first check: the helper's death is not the app's, and a helper
        // killed for a missed heartbeat at the peak must not take a ready task out of
        // its balancer (the ready port follows the same verdict).
        desk.set_check(if desk.board.check_failing() {
            health::AppCheck::Failing(
                "the app check failed before the helper process restarted; waiting for its next verdict".into(),
            )
        } else {
            health::AppCheck::Passing
        });
    }
    if plan.endpoint.is_some() || !plan.ready_port.is_empty() {
        let copies = |listeners: &[std::net::TcpListener]| -> Vec<_> {
            listeners
                .iter()
                .filter_map(|l| l.try_clone().ok())
                .collect()
        };
        let (listeners, cap) = plan
            .endpoint
            .as_ref()
            .map_or((Vec::new(), 0), |(listeners, cap)| {
                (copies(listeners), *cap)
            });
        endpoint::start(listeners, copies(&plan.ready_port), desk.clone(), cap);
    }
    app_check::start(
        plan.settings.app_check.clone(),
        plan.settings.check_interval,
        desk.clone(),
    );
    if plan.sampled() {
        metrics::start(plan.settings.metrics.clone(), desk.clone());
    }
    if let Some(config) = plan.settings.protection.clone() {
        protection::start(config, desk.clone());
    }
    let mut publisher = plan
        .settings
        .cloudwatch
        .clone()
        .and_then(|config| cloudwatch::start(config, desk.clone()));
    let mut watch = threads::Watch::default();
    // Whether a stuck thread was said, and as hung or as starved.
    let mut told: Option<bool> = None;
    loop {
        if desk.board.leave_asked() {
            // Bounded inside (2 s, cloudwatch::FLUSH_LIMIT); supervision kills the
            // helper a little after that anyway.
            if let Some(publisher) = publisher.take() {
                publisher.flush();
            }
            logging::flush(Duration::from_millis(500));
            kernel::leave(0);
        }
        faults::point("helper-main");
        match watch.stuck(STUCK) {
            None => {
                desk.board.say_hung(false);
                desk.board.beat();
                told = None;
            }
            Some((helper, why)) => {
                // A starved thread is not restarted: a new process would wait for the CPU
                // alike, spend it on starting, and lose the sampler's state at the peak.
                if !why.hung() {
                    desk.board.beat();
                }
                // Said once a spell, and again if a starved thread turns out hung.
                if told != Some(why.hung()) {
                    told = Some(why.hung());
                    let (level, then) = if why.hung() {
                        (
                            logging::Level::Error,
                            "the helper process stops its heartbeat, and supervision starts a new one",
                        )
                    } else {
                        (logging::Level::Notice, "the helper process goes on")
                    };
                    let line = format!(
                        "the {} thread has not turned for {}: {}; {then}",
                        helper.name(),
                        crate::seconds::human(STUCK),
                        why.why()
                    );
                    logging::log(level, line, &[]);
                    if why.hung() {
                        // Out before the verdict below: supervision kills this process
                        // the moment it reads it, and the line is the why of that kill.
                        logging::flush(Duration::from_millis(500));
                    }
                }
                // A hung thread is said on the Board (the heartbeat stops with it), so
                // that supervision, which sees only this thread from outside (at the peak
                // as starved as any), never spares the helper for it.
                desk.board.say_hung(why.hung());
            }
        }
        wait_for(&desk.board.helper_bell, BEAT_EVERY);
        desk.board.helper_bell.clear();
    }
}

/// Waits until `bell` rings or `timeout` passes.
fn wait_for(bell: &crate::board::Bell, timeout: Duration) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(bell.fd(), PollFlags::POLLIN)];
    let ms = PollTimeout::try_from(timeout.as_millis() as u64).unwrap_or(PollTimeout::MAX);
    let _ = poll(&mut fds, ms);
}
