//! High-resolution CloudWatch metrics for fast ECS scaling: the publisher, on
//! a thread of its own, fed by the sampler's 1-second samples. Its third way out, OTLP
//! to any OpenTelemetry collector, lives in helper/otlp/ and keeps the same timing.
//!
//! - `plan`: when to publish and what (pure)
//! - `client`: PutMetricData through the AWS SDK (the cargo feature `cloudwatch-api`)
//! - `emf`: the same batch as an Embedded Metric Format record (pure)
//! - `emf_writer`: where the records go: the CloudWatch agent, or stdout
//! - `outcome`: how a call ended, as the Desk counts it
//! - `put`: what every way out implements (the SDK client, the EMF writer, OTLP)
//!
//! It never hurts supervision: it runs on a thread of its own, at most one call is in
//! flight (a hung endpoint costs late data, never a queue of calls), every call has an
//! operation timeout shorter than the interval and a bounded retry, failures are
//! counted and logged without flooding, and the exit flush is bounded to 2 s.
#![forbid(unsafe_code)]

#[cfg(feature = "cloudwatch-api")]
pub mod client;
pub mod emf;
pub mod emf_writer;
pub mod outcome;
pub mod plan;
pub mod put;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::helper::desk::Desk;
use crate::helper::metrics::sample::Sample;
use crate::helper::threads::{self, Helper};
use crate::logging;
use outcome::Outcome;
use plan::{Datum, Plan, Reading};

use crate::settings::{CloudWatch as Config, Sink};

/// A call's (or an EMF record's) whole budget: within the interval (one late datum,
/// never a queue of calls), and at most 5 s.
pub fn operation_timeout(interval: Duration) -> Duration {
    (interval.mul_f64(0.8)).min(Duration::from_secs(5))
}

/// How long the exit flush may take.
pub const FLUSH_LIMIT: Duration = Duration::from_secs(2);
/// The most in-flight samples one debug line lists (10 minutes of them).
const LOGGED_SAMPLES: usize = 600;
/// A summary of ongoing failures at most this often.
const SUMMARY_EVERY: Duration = Duration::from_secs(60);

pub use put::{Put, PutCall, PutResult};

/// Logs failures without flooding: the first one, a summary now and then while they
/// go on, and the recovery. Pure.
#[derive(Debug, Default)]
pub struct FailureLog {
    /// What a failed call was, for its line: `CloudWatch PutMetricData`, or the EMF
    /// records sent to the CloudWatch agent (no API call there to name).
    what: &'static str,
    failing_since: Option<Instant>,
    failed: u64,
    summarized_at: Option<Instant>,
    since_summary: u64,
}

impl FailureLog {
    pub fn new(sink: &Sink) -> FailureLog {
        FailureLog {
            what: match sink {
                Sink::Api => "CloudWatch PutMetricData",
                Sink::Emf(_) => "sending EMF records to the CloudWatch agent",
                Sink::Otlp(otlp) if otlp.sigv4_region.is_some() => "OTLP export to CloudWatch",
                Sink::Otlp(_) => "OTLP export to the collector",
            },
            ..FailureLog::default()
        }
    }

    /// The line to log for this outcome, if any: (is a warning, text).
    pub fn on(&mut self, result: &PutResult, now: Instant) -> Option<(bool, String)> {
        match result {
            Ok(()) => {
                let since = self.failing_since.take()?;
                let failed = std::mem::take(&mut self.failed);
                self.summarized_at = None;
                self.since_summary = 0;
                Some((
                    false,
                    format!(
                        "{} works again, after {failed} failed calls in {}s",
                        self.what,
                        now.saturating_duration_since(since).as_secs()
                    ),
                ))
            }
            Err((_, reason)) => {
                self.failed += 1;
                self.since_summary += 1;
                match self.failing_since {
                    None => {
                        self.failing_since = Some(now);
                        self.summarized_at = Some(now);
                        self.since_summary = 0;
                        Some((true, format!("{} failed: {reason}", self.what)))
                    }
                    Some(_)
                        if self.summarized_at.is_some_and(|at| {
                            now.saturating_duration_since(at) >= SUMMARY_EVERY
                        }) =>
                    {
                        self.summarized_at = Some(now);
                        let n = std::mem::take(&mut self.since_summary);
                        Some((
                            true,
                            format!(
                                "{} still failing: {n} more failed calls; the last: {reason}",
                                self.what
                            ),
                        ))
                    }
                    Some(_) => None,
                }
            }
        }
    }
}

/// What the plan takes from a sample.
fn reading(sample: &Sample) -> Reading {
    Reading {
        in_flight: sample.requests_in_flight,
        cpu_percent: sample.cpu_utilization_percent,
        memory_percent: sample.memory_utilization_percent,
        oldest_request_age: sample.request_oldest_seconds,
        scale_in_protected: None,
    }
}

/// Tells the publisher to flush and waits for it, at most `FLUSH_LIMIT`.
pub struct Handle {
    stop: Arc<tokio::sync::Notify>,
    done: std::sync::mpsc::Receiver<()>,
    running: Arc<AtomicBool>,
}

/// The publisher's side of the handle (each run of the publisher, a restart after a
/// panic included, holds a copy).
#[derive(Clone)]
pub struct Stopper {
    stop: Arc<tokio::sync::Notify>,
    done: std::sync::mpsc::Sender<()>,
    running: Arc<AtomicBool>,
}

pub fn handle() -> (Handle, Stopper) {
    let stop = Arc::new(tokio::sync::Notify::new());
    let (done_tx, done) = std::sync::mpsc::channel();
    let running = Arc::new(AtomicBool::new(false));
    (
        Handle {
            stop: stop.clone(),
            done,
            running: running.clone(),
        },
        Stopper {
            stop,
            done: done_tx,
            running,
        },
    )
}

impl Handle {
    /// At exit: one last publish, bounded; returns at once if the publisher is not
    /// running (gone, or waiting to be started again after a panic).
    pub fn flush(self) {
        if !self.running.load(Ordering::Acquire) {
            return;
        }
        self.stop.notify_one();
        let _ = self
            .done
            .recv_timeout(FLUSH_LIMIT + Duration::from_millis(200));
    }
}

/// `lifeguard_cloudwatch_publishing` goes to 0 however a run ends, a panic included.
struct Publishing(Arc<Desk>);

impl Drop for Publishing {
    fn drop(&mut self) {
        self.0.counters.cloudwatch_publishing(false);
    }
}

/// Says the publisher runs while it lives; cleared however its run ends, a panic
/// included.
struct Running(Arc<AtomicBool>);

impl Running {
    fn new(flag: Arc<AtomicBool>) -> Running {
        flag.store(true, Ordering::Release);
        Running(flag)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Starts the publisher on a thread of its own in the helper process (helper/threads.rs), with its
/// own name-lookup thread for the SDK (the endpoint and the credential providers are
/// names), so the SDK never shares the app check's. A panic inside the SDK or the
/// publisher unwinds this helper alone, which starts again (helper/threads.rs), never
/// supervision.
pub fn start(config: Config, desk: Arc<Desk>) -> Option<Handle> {
    desk.counters.cloudwatch_on();
    let (handle, stopper) = handle();
    let started = threads::start(Helper::CloudWatch, true, move || {
        run(config.clone(), desk.clone(), stopper.clone())
    });
    match started {
        Ok(()) => Some(handle),
        Err(reason) => {
            logging::warn(format!("CloudWatch publishing off: {reason}"), &[]);
            None
        }
    }
}

/// Connects and publishes until told to flush.
async fn run(config: Config, desk: Arc<Desk>, stopper: Stopper) {
    let Stopper {
        stop,
        done,
        running,
    } = stopper;
    let _running = Running::new(running);
    match connect(&config, &desk).await {
        Ok(put) => {
            desk.counters.cloudwatch_publishing(true);
            let _off = Publishing(desk.clone());
            publish(config, desk.clone(), put, stop).await
        }
        Err(reason) => logging::error(format!("CloudWatch publishing off: {reason}"), &[]),
    }
    let _ = done.send(());
}

/// The way to CloudWatch the configuration names.
async fn connect(config: &Config, desk: &Arc<Desk>) -> Result<Arc<dyn Put>, String> {
    match &config.sink {
        Sink::Otlp(otlp) => {
            let timeout = operation_timeout(config.interval);
            let exporter = crate::helper::otlp::Exporter::new(otlp, desk.clone(), timeout);
            #[cfg(feature = "cloudwatch-api")]
            let exporter = match &otlp.sigv4_region {
                Some(region) => exporter.signing(region).await,
                None => exporter,
            };
            Ok(Arc::new(exporter) as Arc<dyn Put>)
        }
        Sink::Emf(agent) => {
            let timeout = operation_timeout(config.interval);
            emf_writer::EmfSink::start(config, agent.clone(), timeout)
                .map(|sink| Arc::new(sink) as Arc<dyn Put>)
                .map_err(|e| format!("starting the EMF writer thread: {e}"))
        }
        #[cfg(feature = "cloudwatch-api")]
        Sink::Api => client::Client::connect(config)
            .await
            .map(|client| Arc::new(client) as Arc<dyn Put>),
        #[cfg(not(feature = "cloudwatch-api"))]
        Sink::Api => Err(
            "this build has no CloudWatch API (cargo feature cloudwatch-api): set METRICS_SINK=emf"
                .to_string(),
        ),
    }
}

async fn publish(
    config: Config,
    desk: Arc<Desk>,
    put: Arc<dyn Put>,
    stop: Arc<tokio::sync::Notify>,
) {
    let interval = crate::seconds::human(config.interval);
    match &config.sink {
        Sink::Otlp(otlp) => logging::info(
            "OTLP export",
            &[("endpoint", &otlp.endpoint), ("interval", &interval)],
        ),
        _ => logging::info(
            "CloudWatch publishing",
            &[("namespace", &config.namespace), ("interval", &interval)],
        ),
    }
    let mut plan = Plan::new(config.interval, config.burst_threshold, Instant::now())
        .with_oldest_request_age(config.oldest_request_age)
        .with_scale_in_protected(config.scale_in_protected);
    let mut samples = desk.watch_sample();
    // With -vv, the in-flight samples behind each publish, in the order taken.
    let mut sampled = logging::enabled(logging::Level::Debug).then(Sampled::default);
    let mut failures = FailureLog::new(&config.sink);
    // The call in flight, if any: at most one.
    let mut call: Option<tokio::task::JoinHandle<PutResult>> = None;
    let mut wants_publish = false;
    loop {
        let deadline = tokio::time::Instant::from_std(plan.deadline());
        tokio::select! {
            changed = samples.changed() => {
                if changed.is_err() {
                    return;
                }
                let sample = samples.borrow_and_update().clone();
                let now = Instant::now();
                if let (Some(sampled), Some(n)) = (sampled.as_mut(), sample.requests_in_flight) {
                    sampled.push(n);
                }
                let reading = Reading {
                    // The Board's word, which only a protection on ECS ever sets; none
                    // when it does not run (off ECS), rather than a paid 0 forever.
                    scale_in_protected: desk.scale_in_protected(now),
                    ..reading(&sample)
                };
                if plan.record(reading, now) {
                    wants_publish = true;
                }
            }
            _ = tokio::time::sleep_until(deadline), if call.is_none() => {
                wants_publish = true;
            }
            result = async { call.as_mut().expect("guarded").await }, if call.is_some() => {
                call = None;
                let result = result.unwrap_or_else(|e| Err((Outcome::Error, format!("the call failed: {e}"))));
                settle(&desk, &mut failures, &result);
            }
            _ = stop.notified() => {
                // One deadline for the whole flush: the running call, then the rest.
                let until = tokio::time::Instant::now() + FLUSH_LIMIT;
                if let Some(running) = call.take() {
                    if let Ok(result) = tokio::time::timeout_at(until, running).await {
                        let result = result.unwrap_or_else(|e| Err((Outcome::Error, e.to_string())));
                        settle(&desk, &mut failures, &result);
                    }
                }
                let batch = plan.take(Instant::now());
                log_batch(&batch, sampled.as_mut());
                if !batch.is_empty() {
                    let result = match tokio::time::timeout_at(until, put.put(batch)).await {
                        Ok(result) => result,
                        Err(_) => Err((Outcome::Timeout, "the exit flush ran out of time".into())),
                    };
                    settle(&desk, &mut failures, &result);
                }
                return;
            }
        }
        if wants_publish && call.is_none() {
            wants_publish = false;
            // The test build's fault: proves a panic here costs publishing only.
            crate::faults::point("cloudwatch-publish");
            let batch = plan.take(Instant::now());
            log_batch(&batch, sampled.as_mut());
            if !batch.is_empty() {
                let put = put.clone();
                call = Some(tokio::spawn(async move { put.put(batch).await }));
            }
        }
    }
}

/// The in-flight samples since the last publish, in the order taken, for the debug log.
#[derive(Debug, Default)]
struct Sampled {
    values: Vec<u64>,
    /// Samples past `LOGGED_SAMPLES`, counted only: a long interval must not grow a
    /// log line (or this list) without bound.
    more: u64,
}

impl Sampled {
    fn push(&mut self, n: u64) {
        if self.values.len() < LOGGED_SAMPLES {
            self.values.push(n);
        } else {
            self.more += 1;
        }
    }
}

/// At debug level, what a publish sends and the in-flight samples it was made of, so
/// what arrives in CloudWatch can be held against what lifeguard sampled.
fn log_batch(batch: &[Datum], sampled: Option<&mut Sampled>) {
    let Some(sampled) = sampled else {
        return;
    };
    let Sampled { values, more } = std::mem::take(sampled);
    if batch.is_empty() {
        return;
    }
    let metrics = batch.iter().map(|d| d.name).collect::<Vec<_>>().join(",");
    let values = values
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut fields: Vec<logging::Field> = vec![("metrics", &metrics)];
    if !values.is_empty() {
        fields.push(("in_flight_samples", &values));
    }
    if more > 0 {
        fields.push(("in_flight_samples_not_listed", &more));
    }
    logging::debug("CloudWatch publish", &fields);
}

fn settle(desk: &Desk, failures: &mut FailureLog, result: &PutResult) {
    let outcome = match result {
        Ok(()) => Outcome::Ok,
        Err((outcome, _)) => *outcome,
    };
    desk.counters.cloudwatch_request(outcome);
    // Publishing means data reaches CloudWatch: not while no credentials can be had
    // (the gauge says 0 until a call goes through).
    match result {
        Ok(()) => desk.counters.cloudwatch_publishing(true),
        #[cfg(feature = "cloudwatch-api")]
        Err((_, line)) if line.starts_with(client::NO_CREDENTIALS) => {
            desk.counters.cloudwatch_publishing(false)
        }
        Err(_) => {}
    }
    if let Some((warning, line)) = failures.on(result, Instant::now()) {
        if warning {
            logging::warn(line, &[]);
        } else {
            logging::info(line, &[]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_logged_first_then_summarized_then_the_recovery() {
        let t0 = Instant::now();
        let mut log = FailureLog::new(&Sink::Api);
        let fail = Err((Outcome::Timeout, "no answer within 5s".to_string()));
        assert_eq!(log.on(&Ok(()), t0), None, "a success is no news");
        let (warning, first) = log.on(&fail, t0).unwrap();
        assert!(warning && first.contains("no answer within 5s"), "{first}");
        for s in 1..60 {
            assert_eq!(log.on(&fail, t0 + Duration::from_secs(s)), None, "{s}");
        }
        let (_, summary) = log.on(&fail, t0 + Duration::from_secs(60)).unwrap();
        assert!(summary.contains("60 more failed calls"), "{summary}");
        let (warning, recovered) = log.on(&Ok(()), t0 + Duration::from_secs(61)).unwrap();
        assert!(
            !warning && recovered.contains("after 61 failed calls"),
            "{recovered}"
        );
        assert_eq!(log.on(&Ok(()), t0 + Duration::from_secs(62)), None);
        // The EMF sink's agent is no API call: its line says what failed.
        let agent = crate::settings::Agent::Tcp("127.0.0.1".into(), 25888);
        let mut log = FailureLog::new(&Sink::Emf(Some(agent)));
        let (_, first) = log.on(&fail, t0).unwrap();
        assert!(
            first.starts_with("sending EMF records to the CloudWatch agent failed"),
            "{first}"
        );
        assert!(!first.contains("PutMetricData"), "{first}");
    }
}
