//! PutMetricData through the AWS SDK: the default credential chain and region (what
//! ECS gives a task, web identity on EKS, the environment, profiles),
//! `AWS_ENDPOINT_URL[_CLOUDWATCH]`, TLS by rustls with ring, and timeouts the SDK does
//! not set by itself (it sets only a 3.1 s connect timeout: a hung endpoint would hang
//! a call for good).
#![forbid(unsafe_code)]

use std::time::{Duration, SystemTime};

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use aws_sdk_cloudwatch::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

use super::plan::{Datum, Value};
use super::{Config, Outcome, Put, PutCall};

/// The call's whole budget: within the interval (one late datum, never a queue of
/// calls), and at most 5 s.
pub fn operation_timeout(interval: Duration) -> Duration {
    (interval.mul_f64(0.8)).min(Duration::from_secs(5))
}

pub struct Client {
    sdk: aws_sdk_cloudwatch::Client,
    namespace: String,
    dimensions: Vec<Dimension>,
}

impl Client {
    /// Loads the SDK's configuration. Fails (with the reason) only when there is no
    /// region: credentials are looked up per call, so a task whose role arrives late
    /// still publishes once it has one.
    pub async fn connect(config: &Config) -> Result<Client, String> {
        let operation = operation_timeout(config.interval);
        let attempt = operation / 2;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let sdk_config = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(attempt)
                    .operation_attempt_timeout(attempt)
                    .operation_timeout(operation)
                    .build(),
            )
            // One retry, soon: the next publish is never far off.
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(2)
                    .with_initial_backoff(Duration::from_millis(100))
                    .with_max_backoff(attempt / 2),
            )
            .load()
            .await;
        if sdk_config.region().is_none() {
            return Err("no AWS region: set AWS_REGION (ECS sets it for every task)".to_string());
        }
        Ok(Client {
            sdk: aws_sdk_cloudwatch::Client::new(&sdk_config),
            namespace: config.namespace.clone(),
            dimensions: config
                .dimensions
                .iter()
                .map(|(name, value)| Dimension::builder().name(name).value(value).build())
                .collect(),
        })
    }

    fn datum(&self, datum: &Datum, now: DateTime) -> MetricDatum {
        let builder = MetricDatum::builder()
            .metric_name(datum.name)
            .set_dimensions(Some(self.dimensions.clone()))
            .timestamp(now)
            .storage_resolution(1);
        match &datum.value {
            Value::Percent(p) => builder.value(*p).unit(StandardUnit::Percent),
            // Raw values (each distinct sample once, its count beside it): what
            // CloudWatch needs to compute percentiles; a statistic set would not do.
            Value::Samples(samples) => builder
                .set_values(Some(samples.iter().map(|(value, _)| *value).collect()))
                .set_counts(Some(samples.iter().map(|(_, n)| *n as f64).collect()))
                .unit(StandardUnit::Count),
        }
        .build()
    }
}

impl Put for Client {
    fn put(&self, batch: Vec<Datum>) -> PutCall {
        let now = DateTime::from(SystemTime::now());
        let request = self
            .sdk
            .put_metric_data()
            .namespace(&self.namespace)
            .set_metric_data(Some(batch.iter().map(|d| self.datum(d, now)).collect()));
        Box::pin(async move {
            request
                .send()
                .await
                .map(drop)
                .map_err(|err| (classify(&err), describe(&err)))
        })
    }
}

/// One line for the log: the service's code and message, or what kept the call from
/// being answered.
fn describe<E, R>(err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let text = match err {
        SdkError::ServiceError(_) => format!(
            "{}: {}",
            err.code().unwrap_or("unknown error"),
            err.message().unwrap_or("no message")
        ),
        SdkError::TimeoutError(_) => "no answer within the operation timeout".to_string(),
        _ => DisplayErrorContext(err).to_string(),
    };
    // The SDK's context can run to kilobytes (whole responses): one line is enough.
    let mut line: String = text.chars().take(240).collect();
    if line.len() < text.len() {
        line.push('…');
    }
    line
}

fn classify<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> Outcome {
    match err {
        SdkError::TimeoutError(_) => Outcome::Timeout,
        SdkError::DispatchFailure(failure) if failure.is_timeout() => Outcome::Timeout,
        SdkError::ServiceError(_)
            if matches!(
                err.code(),
                Some(
                    "Throttling"
                        | "ThrottlingException"
                        | "RequestLimitExceeded"
                        | "TooManyRequestsException"
                )
            ) =>
        {
            Outcome::Throttled
        }
        _ => Outcome::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_ends_within_the_interval() {
        assert_eq!(
            operation_timeout(Duration::from_secs(10)),
            Duration::from_secs(5)
        );
        assert_eq!(
            operation_timeout(Duration::from_secs(2)),
            Duration::from_millis(1600)
        );
        assert_eq!(
            operation_timeout(Duration::from_secs(60)),
            Duration::from_secs(5)
        );
    }
}
