//! How a PutMetricData call ended: the publisher's verdict on each call, counted on the
//! Board as `lifeguard_cloudwatch_requests_total{result}`.
#![forbid(unsafe_code)]

/// How a call ended, as `lifeguard_cloudwatch_requests_total{result}` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Throttled,
    Timeout,
    Error,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Ok,
        Outcome::Throttled,
        Outcome::Timeout,
        Outcome::Error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Throttled => "throttled",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}
