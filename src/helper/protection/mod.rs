//! ECS task scale-in protection (`--scale-in-protection AFTER`): while a request on
//! `--inflight-port` has been in flight longer than AFTER — the kernel's view the
//! sampler already reads for `lifeguard_request_oldest_seconds` — the task asks its
//! ECS agent not to be chosen for scale-in, renews that before it expires, and clears
//! it once no such request has been seen for the settle time.
//!
//! - `rule`: when to set, renew and clear, and how to take each answer (pure)
//! - `agent`: the agent's endpoint: the call and its answers' parser
//!
//! It keeps a task from being *chosen*; it never delays a stop: from the SIGTERM on it
//! asks nothing, and supervision only reads, for its stop line, the expiry written on
//! the Board. One call at a time, each within `agent::CALL_TIMEOUT`, on a thread of its
//! own in the helper process.
#![forbid(unsafe_code)]

pub mod agent;
pub mod rule;

use std::sync::Arc;
use std::time::Instant;

use crate::board::Phase;
use crate::helper::desk::Desk;
use crate::helper::threads::{self, Helper};
use crate::logging;
use crate::settings::Protection;
use rule::{Ask, Rule, Said};

/// Starts the protection's thread.
pub fn start(config: Protection, desk: Arc<Desk>) {
    desk.counters.protection_on();
    let started = threads::start(Helper::ScaleIn, false, move || {
        run(config.clone(), desk.clone())
    });
    if let Err(reason) = started {
        logging::warn(format!("scale-in protection off: {reason}"), &[]);
    }
}

async fn run(config: Protection, desk: Arc<Desk>) {
    let mut rule = Rule::new(
        config.after,
        crate::faults::minute(),
        desk.board.protected_until(),
        Instant::now(),
    );
    let expires = crate::seconds::human(rule.expiry());
    let (after, settle) = (
        crate::seconds::human(config.after),
        crate::seconds::human(rule.settle()),
    );
    logging::info(
        "scale-in protection on: a request in flight longer than after keeps the task out of ECS scale-in",
        &[("after", &after), ("settle", &settle), ("agent", &config.endpoint)],
    );
    let mut samples = desk.watch_sample();
    loop {
        let phase = desk.board.phase();
        if desk.board.term_taken() || !matches!(phase, Phase::Starting | Phase::Running) {
            // Stopping: nothing more to ask (a protection still set lapses by itself).
            rule.stop();
            return;
        }
        let now = Instant::now();
        if let Some(said) = rule.expire(now) {
            desk.board.set_protected_until(None);
            tell(said, &expires);
        }
        if let Some(ask) = rule.due(now) {
            let sent = Instant::now();
            let answer = agent::call(&config.endpoint, ask).await;
            let now = Instant::now();
            let said = rule.answered(ask, sent, answer, now, jitter());
            // The Board first, then the lines: whoever reads a line (a person, a stop
            // that follows it) finds the Board already saying what the line says.
            desk.board.set_protected_until(rule.protected_until(now));
            for said in said {
                tell(said, &expires);
            }
            continue;
        }
        let wake = rule.next_wake(now);
        tokio::select! {
            changed = samples.changed() => {
                if changed.is_err() {
                    return;
                }
                let sample = samples.borrow_and_update().clone();
                if let Some(taken) = sample.taken {
                    rule.look(taken, sample.request_oldest_seconds);
                }
            }
            () = sleep_until(wake) => {}
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// In [0, 1): spreads the retries of a fleet throttled at once (its tasks all started
/// alike, so nothing of their own state tells them apart better than the clock).
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1000) / 1000.0
}

fn tell(said: Said, expires: &dyn std::fmt::Display) {
    match said {
        Said::Protected { oldest } => logging::notice(
            "scale-in protection set: a request has been in flight longer than --scale-in-protection; ECS keeps this task out of scale-in, renewed while that lasts",
            &[("oldest", &format!("{oldest:.1}s")), ("expires_in", expires)],
        ),
        Said::Renewed => logging::debug("scale-in protection renewed", &[("expires_in", expires)]),
        Said::Cleared { quiet_for } => {
            let quiet = quiet_for.map(crate::seconds::measured);
            let fields: Vec<logging::Field> = quiet.iter().map(|q| ("quiet_for", q as _)).collect();
            logging::notice(
                "scale-in protection cleared: no request in flight longer than --scale-in-protection for the settle time",
                &fields,
            )
        }
        Said::Found { enabled, foreign } => logging::info(
            match (enabled, foreign) {
                (false, _) => "scale-in protection: the ECS agent answers; the task is not protected",
                (true, false) => "scale-in protection: the ECS agent answers; the task is protected already (set before this helper started): renewed or cleared after the settle time",
                (true, true) => "scale-in protection: the ECS agent answers; the task is protected already, not by this lifeguard (the app, another container, or an earlier run of this one): left to lapse at its own expiry, unless a long request sets and then clears it",
            },
            &[],
        ),
        Said::NotAService => logging::warn(
            "scale-in protection off: ECS answered TASK_NOT_VALID, this task belongs to no service (only a service's tasks can be protected); lifeguard asks no more",
            &[],
        ),
        Said::Denied { ask, message } => logging::warn(
            format!(
                "scale-in protection: {} was refused (AccessDenied): the task role needs ecs:UpdateTaskProtection and ecs:GetTaskProtection; setting it is tried when a request is long, and every 5 minutes while refused",
                ask.describe()
            ),
            &[("message", &message)],
        ),
        Said::Failing {
            ask,
            reason,
            retry_in,
        } => {
            let retry = crate::seconds::measured(retry_in);
            let mut fields: Vec<logging::Field> = vec![("reason", &reason)];
            if ask != Ask::Read {
                fields.push(("retry_in", &retry));
            }
            logging::warn(format!("scale-in protection: {} failed", ask.describe()), &fields)
        }
        Said::Permitted => logging::info(
            "scale-in protection: the task role is allowed to set it now (no more AccessDenied)",
            &[],
        ),
        Said::StillFailing { failed, reason } => logging::warn(
            "scale-in protection: the ECS agent still fails",
            &[("failed_calls", &failed), ("reason", &reason)],
        ),
        Said::Recovered { failed } => logging::info(
            "scale-in protection: the ECS agent answers again",
            &[("failed_calls", &failed)],
        ),
        Said::Lapsed => logging::warn(
            "scale-in protection lapsed: it was not renewed in time (the ECS agent did not answer, or the port could not be read); this task may be chosen for scale-in again",
            &[],
        ),
    }
}
