//! The measuring half (docs/metrics.md): once a second, the app's cgroup CPU and memory (or
//! the ECS task's), and its in-flight requests, sampled on a thread of its own and
//! published on the `Board` for `/metrics` and CloudWatch.
//!
//! - `sampler`: the loop and its state: the full sample once a second, and the looks at
//!   the port (every 100 ms of a drain) whose figures the drain's hold reads
//! - `sample`: what one sample holds (`Sample`, its scope, the listener's and the app's
//!   figures)
//! - `derive`: readings into a `Sample`: the scope, the limit that binds, the rates and
//!   percentages, pure
//! - `traffic`: the drain's rule for whether the port was busy between two looks, beside
//!   the namespace's other listeners too, pure
//! - `cgroup/`: finding the cgroup and reading its files
//! - `ecs`: the task metadata endpoint
//! - `task`: the ECS task's figures: their poller, and the latest it fetched
//! - `inflight/`: the listen queue and outstanding requests, from sock_diag; when a look
//!   at the port can do without the established-socket walk
//! - `netstat`: the network namespace's TCP counters
//! - `saturation`: the listener's backlog, waits and overflows, and their warnings
//! - `quota`: a CPU quota used up, from the cgroup's throttling and the runnable threads
//! - `process_tree`: the app's processes, threads, descriptors and resident memory
//! - `prometheus`: the text exposition of a `Snapshot`
#![forbid(unsafe_code)]

mod cgroup;
mod derive;
pub mod ecs;
pub mod inflight;
pub mod netstat;
pub mod process_tree;
pub mod prometheus;
mod quota;
pub mod sample;
mod sampler;
pub mod saturation;
mod task;
mod traffic;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::helper::desk::Desk;
use crate::helper::threads::{self, Helper};
use crate::logging;
use crate::settings::Metrics;
use sampler::sample_forever;
use task::{poll_task, TaskState, METADATA_TIMEOUT};

/// How often the sampler runs: once a second.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How often the in-flight figure is read while a drain runs, for its hold.
pub const HOLD_INTERVAL: Duration = Duration::from_millis(100);

/// Starts the sampler on a thread of its own (in the helper process),
/// so sampling never takes a moment from supervision: the cgroup files and the
/// sock_diag dump are synchronous reads (well under a millisecond, more with many
/// connections on the port), and the task metadata is fetched by a task of its own with
/// a timeout, so a hung endpoint costs the task-scope figures and nothing else. If the
/// thread cannot start, lifeguard runs on without samples (and a drain's hold, seeing
/// no figures, does not hold).
pub fn start(config: Metrics, desk: Arc<Desk>) {
    // The agent gives an address (169.254.170.2); a name needs the lookup thread.
    let name_lookups = config.ecs_metadata.as_deref().is_some_and(|uri| {
        uri.parse::<hyper::Uri>()
            .ok()
            .and_then(|u| u.host().map(|h| crate::lookup::address(h).is_none()))
            .unwrap_or(false)
    });
    // The task's figures outlive a restart of the sampler.
    let task = config
        .ecs_metadata
        .as_ref()
        .map(|_| Arc::new(Mutex::new(TaskState::default())));
    let started = threads::start(Helper::Sampler, name_lookups, move || {
        let (config, task, desk) = (config.clone(), task.clone(), desk.clone());
        async move {
            // Aborted when this run ends, a panic included, so a restart never leaves
            // two pollers behind.
            let _poller = match (&config.ecs_metadata, &task) {
                (Some(uri), Some(shared)) => Some(AbortOnDrop(threads::spawn(poll_task(
                    ecs::Client::new(uri, METADATA_TIMEOUT),
                    shared.clone(),
                    desk.clone(),
                )))),
                _ => None,
            };
            sample_forever(config, task, desk).await
        }
    });
    if let Err(reason) = started {
        logging::warn(format!("metrics off: {reason}"), &[]);
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
