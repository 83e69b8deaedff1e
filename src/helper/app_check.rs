//! The app check (`--ready-http`, `--ready-tcp`, or with `--inflight-port` alone the
//! port's listener): a helper on a thread of its own that runs every
//! `--ready-interval`, times out after the same, and publishes its verdict on the Board
//! for `/readyz`, the ready port and the Starting → Running step of the lifecycle.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use crate::board::Phase;
use crate::faults;
use crate::helper::desk::Desk;
use crate::helper::health::AppCheck;
use crate::helper::http_client;
use crate::helper::threads::{self, Helper};
use crate::logging;
use crate::settings::AppCheck as Check;
use crate::sock_diag::listening::PortListens;

/// Whether the check names a host rather than an IP address, so that each check
/// starts with a name lookup (a blocking call, run on a thread of its own).
fn needs_name_lookup(check: &Check) -> bool {
    let host = match check {
        Check::Http(uri) => uri.host().unwrap_or_default(),
        Check::Tcp(host, _) => host,
        Check::Listening(_) => return false,
    };
    crate::lookup::address(host).is_none()
}

/// Starts the check on its thread, to run until the drain begins; with no check
/// configured the app counts as ready as soon as it is spawned. From the drain on
/// `/readyz` says `draining` whatever the check finds, and an app closing its port on
/// the stop signal is no news: checking on would only log warnings. If the thread
/// cannot start, the app counts as ready (as with no check) and the reason is logged.
pub fn start(check: Option<Check>, interval: Duration, desk: Arc<Desk>) {
    let Some(check) = check else {
        desk.set_check(AppCheck::Passing);
        return;
    };
    let lookups = needs_name_lookup(&check);
    let shared = desk.clone();
    let started = threads::start(Helper::AppCheck, lookups, move || {
        run(check.clone(), interval, shared.clone())
    });
    if let Err(reason) = started {
        logging::warn(
            format!("app check off ({reason}): the app counts as ready"),
            &[],
        );
        desk.set_check(AppCheck::Passing);
    }
}

async fn run(check: Check, interval: Duration, desk: Arc<Desk>) {
    let mut listens = match check {
        Check::Listening(port) => Some(PortListens::new(port)),
        _ => None,
    };
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let checking = || matches!(desk.phase(), Phase::Starting | Phase::Running);
    loop {
        ticker.tick().await;
        if !checking() {
            return;
        }
        faults::point("app-check");
        let verdict = match tokio::time::timeout(interval, once(&check, &mut listens)).await {
            Ok(Ok(())) => AppCheck::Passing,
            Ok(Err(reason)) => AppCheck::Failing(reason),
            Err(_) => AppCheck::Failing(format!(
                "no answer within {}",
                crate::seconds::human(interval)
            )),
        };
        if !checking() {
            return;
        }
        let before = desk.check();
        if verdict != before {
            match (&before, &verdict) {
                (_, AppCheck::Passing) => logging::info("app check passing", &[]),
                // Failures before the first pass are the app starting up: not news.
                (AppCheck::Pending, AppCheck::Failing(reason)) => {
                    logging::debug("app check not passing yet", &[("reason", reason)])
                }
                (_, AppCheck::Failing(reason)) => {
                    logging::warn("app check failing", &[("reason", reason)])
                }
                _ => {}
            }
            if before == AppCheck::Pending
                && verdict != AppCheck::Passing
                && !desk.board.check_passed()
            {
                // Stay Pending until the first pass: /readyz says "starting" till then.
                // (A helper started again after the check passed once takes its first
                // verdict as it comes: the app is past its start.)
                continue;
            }
            desk.set_check(verdict);
        }
    }
}

async fn once(check: &Check, listens: &mut Option<PortListens>) -> Result<(), String> {
    match check {
        Check::Http(uri) => match http_client::get(uri).await? {
            (200..=299, _) => Ok(()),
            (status, _) => Err(format!("GET {uri} answered {status}")),
        },
        Check::Tcp(host, port) => http_client::connect(host, *port).await.map(drop),
        // One dump of the port's listeners: it never waits on the app.
        Check::Listening(port) => match listens.as_mut().map(PortListens::now) {
            Some(Ok(true)) => Ok(()),
            Some(Ok(false)) | None => Err(format!("nothing listens on port {port}")),
            Some(Err(reason)) => Err(format!("cannot tell whether port {port} listens: {reason}")),
        },
    }
}
