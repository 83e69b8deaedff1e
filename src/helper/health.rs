//! What `/readyz` and `/livez` answer, as pure functions of the supervision state (the
//! text of `/metrics` is `metrics::prometheus`).
#![forbid(unsafe_code)]

use crate::board::Phase;

/// What the app check last said (docs/lifecycle.md and "Endpoint").
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
