//! The ECS task's figures as the sampler takes them: a poller of their own fetches the
//! task's limits and usage from the metadata endpoint (`ecs`) once a second, and keeps
//! the latest for the sampler, which uses them while they are fresh.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{ecs, INTERVAL};
use crate::helper::desk::Desk;
use crate::logging;

/// A task metadata fetch that takes longer is given up: the next one is due.
pub(super) const METADATA_TIMEOUT: Duration = Duration::from_millis(800);
/// Task stats older than this are not used; the cgroup stands in.
const METADATA_STALE: Duration = Duration::from_millis(2500);

/// The latest from the task metadata endpoint.
#[derive(Default)]
pub(super) struct TaskState {
    limits: ecs::TaskLimits,
    usage: Option<(Instant, ecs::TaskUsage)>,
}

impl TaskState {
    /// The task's usage as of `at`, when fresh enough to stand for the task, and its
    /// limits.
    pub(super) fn fresh(
        &self,
        at: Instant,
    ) -> (Option<(Instant, ecs::TaskUsage)>, ecs::TaskLimits) {
        let fresh = self
            .usage
            .filter(|(t, _)| at.duration_since(*t) < METADATA_STALE);
        (fresh, self.limits)
    }
}

/// Fetches the task's limits (until it has them) and stats, once a second.
pub(super) async fn poll_task(client: ecs::Client, state: Arc<Mutex<TaskState>>, desk: Arc<Desk>) {
    let mut have_limits = false;
    let mut failing = false;
    let mut ticker = tokio::time::interval(INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let mut result = Ok(());
        if !have_limits {
            match client.limits().await {
                Ok((limits, identity)) => {
                    desk.set_task_identity(identity);
                    logging::info(
                        "metrics: ECS task limits",
                        &[
                            (
                                "cpu",
                                &limits.cpu_cores.map_or("none".into(), |c| c.to_string()),
                            ),
                            (
                                "memory",
                                &limits.memory_bytes.map_or("none".into(), |m| m.to_string()),
                            ),
                        ],
                    );
                    state
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .limits = limits;
                    have_limits = true;
                }
                Err(reason) => result = Err(reason),
            }
        }
        if result.is_ok() {
            match client.usage().await {
                Ok(usage) => {
                    state
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .usage = Some((Instant::now(), usage))
                }
                Err(reason) => result = Err(reason),
            }
        }
        match result {
            Ok(()) if failing => {
                failing = false;
                logging::info("metrics: task metadata readable again", &[]);
            }
            Ok(()) => {}
            Err(reason) => {
                desk.counters.metadata_failed();
                if !std::mem::replace(&mut failing, true) {
                    logging::warn(
                        format!(
                            "task metadata unavailable, using the container's cgroup: {reason}"
                        ),
                        &[],
                    );
                }
            }
        }
    }
}
