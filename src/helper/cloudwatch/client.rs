//! PutMetricData through the AWS SDK: the default credential chain and region (what
//! ECS gives a task, web identity on EKS, the environment, profiles),
//! `AWS_ENDPOINT_URL[_CLOUDWATCH]`, TLS by rustls with ring, and timeouts the SDK does
//! not set by itself (it sets only a 3.1 s connect timeout: a hung endpoint would hang
//! a call for good).
#![forbid(unsafe_code)]

use std::time::{Duration, SystemTime};

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::environment::region::EnvironmentVariableRegionProvider;
use aws_config::meta::region::RegionProviderChain;
use aws_config::provider_config::ProviderConfig;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use aws_sdk_cloudwatch::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

use super::operation_timeout;
use super::outcome::Outcome;
use super::plan::{Datum, Value};
use super::{Config, Put, PutCall};

/// How long the instance metadata address may take to answer, per lookup (no retry).
const IMDS_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the SDK looks for credentials and the region, and the client it asks with.
struct Sources {
    http: aws_sdk_cloudwatch::config::SharedHttpClient,
    providers: ProviderConfig,
    imds: aws_config::imds::Client,
}

impl Sources {
    fn new() -> Sources {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        // The instance metadata address is the last source of the credential and
        // region chains. Outside EC2 nothing answers there, and the SDK's own client
        // tries it up to four times with a second's wait each, at every publish: ask it
        // once per lookup, with a short timeout (AWS_EC2_METADATA_DISABLED=true skips it).
        let providers = ProviderConfig::default().with_http_client(http.clone());
        let imds = aws_config::imds::Client::builder()
            .configure(&providers)
            .max_attempts(1)
            .connect_timeout(IMDS_TIMEOUT)
            .read_timeout(IMDS_TIMEOUT)
            .build();
        Sources {
            http,
            providers,
            imds,
        }
    }
}

async fn credential_chain(
    providers: ProviderConfig,
    imds: aws_config::imds::Client,
) -> DefaultCredentialsChain {
    DefaultCredentialsChain::builder()
        .configure(providers)
        .imds_client(imds)
        .build()
        .await
}

/// The SDK's default credential chain, as PutMetricData uses it (what ECS gives a task,
/// web identity on EKS, the environment, profiles, instance metadata asked once).
pub async fn credentials() -> DefaultCredentialsChain {
    let Sources {
        providers, imds, ..
    } = Sources::new();
    credential_chain(providers, imds).await
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
        let Sources {
            http,
            providers,
            imds,
        } = Sources::new();
        let region = RegionProviderChain::first_try(EnvironmentVariableRegionProvider::new())
            .or_else(
                aws_config::profile::region::ProfileFileRegionProvider::builder()
                    .configure(&providers)
                    .build(),
            )
            .or_else(
                aws_config::imds::region::ImdsRegionProvider::builder()
                    .configure(&providers)
                    .imds_client(imds.clone())
                    .build(),
            );
        let credentials = credential_chain(providers, imds).await;
        let sdk_config = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .region(region)
            .credentials_provider(credentials)
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
            Value::Seconds(samples) => builder
                .set_values(Some(samples.iter().map(|(value, _)| *value).collect()))
                .set_counts(Some(samples.iter().map(|(_, n)| *n as f64).collect()))
                .unit(StandardUnit::Seconds),
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

/// One line for the log: the service's code and message, what kept the call from being
/// answered, or, for missing credentials, which sources were tried and what to set.
fn describe<E, R>(err: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match err {
        SdkError::ServiceError(_) => one_line(&format!(
            "{}: {}",
            err.code().unwrap_or("unknown error"),
            err.message().unwrap_or("no message")
        )),
        SdkError::TimeoutError(_) => "no answer within the operation timeout".to_string(),
        _ => {
            let text = DisplayErrorContext(err).to_string();
            no_credentials(&text).unwrap_or_else(|| one_line(&text))
        }
    }
}

/// The SDK's "no credentials found in chain. Attempted:" error, which lists each source
/// on a line of its own, as one line: the sources by name, and what to set.
pub fn no_credentials(text: &str) -> Option<String> {
    // When the chain reaches instance metadata and that cannot be asked (no IMDS: a
    // laptop, a CI runner, a container without a route to it), the SDK reports the
    // IMDS failure instead of "no credentials found", though every source before it
    // found none: the same news for the user.
    if text.contains("error occurred while loading credentials")
        && (text.contains("IMDS") || text.contains("instance metadata"))
    {
        return Some(format!(
            "{NO_CREDENTIALS} (tried: Environment, Profile, WebIdentityToken, EcsContainer, \
             Ec2InstanceMetadata: unreachable): {WHAT_TO_SET}"
        ));
    }
    let (_, attempted) = text.split_once("no credentials found in chain. Attempted:")?;
    let tried: Vec<&str> = attempted
        .lines()
        .filter_map(|line| {
            let (name, _) = line.trim().split_once(':')?;
            (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric())).then_some(name)
        })
        .collect();
    Some(format!(
        "{NO_CREDENTIALS} (tried: {}): {WHAT_TO_SET}",
        tried.join(", ")
    ))
}

/// How a missing-credentials line begins (the publisher tells it by this).
pub const NO_CREDENTIALS: &str = "no AWS credentials found";
const WHAT_TO_SET: &str = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give the task \
                           an IAM role (ECS task role, EKS web identity)";

/// The SDK's context, on one line: its line breaks made separators, and at most
/// `MAX_LINE` characters cut at a word (it can run to kilobytes: whole responses).
fn one_line(text: &str) -> String {
    const MAX_LINE: usize = 400;
    let flat = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if flat.chars().count() <= MAX_LINE {
        return flat;
    }
    let cut: String = flat.chars().take(MAX_LINE).collect();
    let at_word = cut.rfind(' ').unwrap_or(cut.len());
    format!("{} …", &cut[..at_word])
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

    /// As the SDK (aws-config 1.13) words it, recorded.
    const NO_CREDENTIALS: &str = "dispatch failure: other: the credential provider was not enabled: no credentials found in chain. Attempted:\n  Environment: the credential provider was not enabled: environment variable not set\n  Profile: the credential provider was not enabled: No profiles were defined\n  WebIdentityToken: the credential provider was not enabled: $AWS_WEB_IDENTITY_TOKEN_FILE was not set\n  EcsContainer: the credential provider was not enabled: ECS provider not configured\n  Ec2InstanceMetadata: failed to load credentials from IMDS: dispatch failure: io error: Connection refused (os error 111)\n";

    #[test]
    fn missing_credentials_say_on_one_line_what_was_tried_and_what_to_set() {
        let line = no_credentials(NO_CREDENTIALS).unwrap();
        assert_eq!(
            line,
            "no AWS credentials found (tried: Environment, Profile, WebIdentityToken, EcsContainer, Ec2InstanceMetadata): \
             set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give the task an IAM role (ECS task role, EKS web identity)"
        );
        assert_eq!(no_credentials("dispatch failure: io error"), None);
        // Recorded with AWS_REGION set, no credentials, and no instance metadata: the
        // chain reports the IMDS failure, which is the same news.
        let imds = "dispatch failure: other: an error occurred while loading credentials: failed to load IMDS session token: dispatch failure: io error: error trying to connect: tcp connect error: Connection refused (os error 111) (DispatchFailure(DispatchFailure { source: ConnectorError { kind: Io, source: hyper_util::client::legacy::Error(Connect, ConnectError(\"tcp connect error\", 169.254.169.254:80, Os { code: 111 })) } }))";
        let line = no_credentials(imds).unwrap();
        assert!(
            line.starts_with("no AWS credentials found (tried: "),
            "{line}"
        );
        assert!(
            line.contains("Ec2InstanceMetadata: unreachable") && !line.contains('\n'),
            "{line}"
        );
        assert!(!line.contains("DispatchFailure"), "{line}");
    }

    #[test]
    fn other_failures_fit_one_line_cut_at_a_word() {
        let line = one_line("first line\n  second line\n");
        assert_eq!(line, "first line; second line");
        let long = "word ".repeat(200);
        let line = one_line(&long);
        assert!(!line.contains('\n') && line.ends_with(" …"), "{line}");
        assert!(line.chars().count() <= 402);
    }

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
