//! What the endpoint answers, as pure functions of the supervision state: the `/readyz`
//! and `/livez` verdicts and the Prometheus text of `/metrics` (format 0.0.4).
#![forbid(unsafe_code)]

use std::fmt::Write as _;

use crate::lifecycle::Phase;
use crate::stats::Stats;

/// What the app check last said (DESIGN §3, §4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppCheck {
    /// No verdict yet.
    Pending,
    Passing,
    Failing(String),
}

/// An HTTP status and a one-line body.
pub type Verdict = (u16, String);

/// `/readyz`. `term_pending`: a SIGTERM has arrived but the loop has not read it yet;
/// the answer turns to draining from the instant it arrives, not when it is read.
pub fn readiness(phase: Phase, check: &AppCheck, term_pending: bool) -> Verdict {
    match (phase, check) {
        (Phase::Draining | Phase::Stopping, _) => (503, "draining".into()),
        (Phase::Starting | Phase::Running, _) if term_pending => (503, "draining".into()),
        (Phase::Exited, _) => (503, "not ready: app exited".into()),
        (Phase::Starting, _) => (503, "starting".into()),
        (Phase::Running, AppCheck::Failing(reason)) => (503, format!("not ready: {reason}")),
        (Phase::Running, _) => (200, "ready".into()),
    }
}

/// `/livez`: alive while the app runs, draining included.
pub fn liveness(phase: Phase) -> Verdict {
    match phase {
        Phase::Exited => (503, "exited".into()),
        _ => (200, "alive".into()),
    }
}

/// `/metrics` in Prometheus text format 0.0.4: HELP and TYPE lines, then samples.
/// Written by hand: the OpenMetrics encoder of `prometheus-client` writes `# EOF` and
/// TYPE lines without the `_total` suffix, which the 0.0.4 parser reads as untyped.
pub fn metrics(ready: bool, draining: bool, stats: &Stats) -> String {
    let mut out = String::with_capacity(1024);
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, u64)]| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    family(
        "lifeguard_ready",
        "gauge",
        "1 while /readyz answers 200.",
        &[(String::new(), ready as u64)],
    );
    family(
        "lifeguard_draining",
        "gauge",
        "1 from the instant SIGTERM arrives until the app has exited.",
        &[(String::new(), draining as u64)],
    );
    let forwarded: Vec<(String, u64)> = stats
        .forwarded()
        .into_iter()
        .map(|(signal, n)| (format!("{{signal=\"{signal}\"}}"), n))
        .collect();
    family(
        "lifeguard_signals_forwarded_total",
        "counter",
        "Signals sent to the app, after rewriting, by signal.",
        &forwarded,
    );
    family(
        "lifeguard_zombies_reaped_total",
        "counter",
        "Orphaned processes reaped (the app itself not counted).",
        &[(String::new(), stats.zombies_reaped())],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signals::{Signal, TERM};

    #[test]
    fn readiness_follows_phase_then_check() {
        let failing = AppCheck::Failing("GET http://127.0.0.1:8080/ answered 500".into());
        let rows: &[(Phase, &AppCheck, bool, u16, &str)] = &[
            (Phase::Starting, &AppCheck::Pending, false, 503, "starting"),
            (Phase::Starting, &failing, false, 503, "starting"),
            (Phase::Running, &AppCheck::Passing, false, 200, "ready"),
            (
                Phase::Running,
                &failing,
                false,
                503,
                "not ready: GET http://127.0.0.1:8080/ answered 500",
            ),
            (Phase::Running, &AppCheck::Passing, true, 503, "draining"),
            (Phase::Starting, &AppCheck::Pending, true, 503, "draining"),
            (Phase::Draining, &AppCheck::Passing, false, 503, "draining"),
            (Phase::Stopping, &AppCheck::Passing, false, 503, "draining"),
            (
                Phase::Exited,
                &AppCheck::Passing,
                false,
                503,
                "not ready: app exited",
            ),
        ];
        for (phase, check, pending, code, body) in rows {
            assert_eq!(
                readiness(*phase, check, *pending),
                (*code, body.to_string()),
                "{phase:?} {check:?}"
            );
        }
    }

    #[test]
    fn liveness_holds_until_the_app_exits() {
        assert_eq!(liveness(Phase::Draining).0, 200);
        assert_eq!(liveness(Phase::Stopping), (200, "alive".into()));
        assert_eq!(liveness(Phase::Exited), (503, "exited".into()));
    }

    #[test]
    fn metrics_are_prometheus_text() {
        let stats = Stats::default();
        stats.signal_forwarded(TERM);
        stats.signal_forwarded(TERM);
        stats.signal_forwarded(Signal(libc::SIGHUP));
        stats.zombie_reaped();
        let text = metrics(true, false, &stats);
        for line in [
            "# TYPE lifeguard_ready gauge",
            "lifeguard_ready 1",
            "lifeguard_draining 0",
            "# TYPE lifeguard_signals_forwarded_total counter",
            "lifeguard_signals_forwarded_total{signal=\"SIGTERM\"} 2",
            "lifeguard_signals_forwarded_total{signal=\"SIGHUP\"} 1",
            "lifeguard_zombies_reaped_total 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(text.ends_with('\n'));
    }
}
