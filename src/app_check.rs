//! The app check (`--ready-http`, `--ready-tcp`): runs every `--ready-interval`, times
//! out after the same, and publishes its verdict for `/readyz` and the Starting →
//! Running step of the lifecycle.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use crate::board::Board;
use crate::cli::AppCheckKind;
use crate::health::AppCheck;
use crate::http_client;
use crate::lifecycle::Phase;
use crate::logging;

/// Runs until the drain begins (or the runtime stops); with no check configured the app
/// counts as ready as soon as it is spawned (DESIGN §3). From the drain on `/readyz`
/// says `draining` whatever the check finds, and an app closing its port on the stop
/// signal is no news: checking on would only log warnings.
pub fn start(check: Option<AppCheckKind>, interval: Duration, board: Arc<Board>) {
    let Some(check) = check else {
        board.set_check(AppCheck::Passing);
        return;
    };
    tokio::spawn(run(check, interval, board));
}

async fn run(check: AppCheckKind, interval: Duration, board: Arc<Board>) {
    let phase = board.watch_phase();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if !matches!(*phase.borrow(), Phase::Starting | Phase::Running) {
            return;
        }
        let verdict = match tokio::time::timeout(interval, once(&check)).await {
            Ok(Ok(())) => AppCheck::Passing,
            Ok(Err(reason)) => AppCheck::Failing(reason),
            Err(_) => AppCheck::Failing(format!(
                "no answer within {}",
                humantime::format_duration(interval)
            )),
        };
        if !matches!(*phase.borrow(), Phase::Starting | Phase::Running) {
            return;
        }
        let before = board.check();
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
            if before == AppCheck::Pending && verdict != AppCheck::Passing {
                // Stay Pending until the first pass: /readyz says "starting" till then.
                continue;
            }
            board.set_check(verdict);
        }
    }
}

async fn once(check: &AppCheckKind) -> Result<(), String> {
    match check {
        AppCheckKind::Http(uri) => match http_client::get(uri).await? {
            (200..=299, _) => Ok(()),
            (status, _) => Err(format!("GET {uri} answered {status}")),
        },
        AppCheckKind::Tcp(host, port) => http_client::connect(host, *port).await.map(drop),
    }
}
