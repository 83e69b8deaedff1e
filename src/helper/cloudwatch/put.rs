//! What every way out of the publisher implements: one call with a batch, and how it
//! ended. The SDK client, the EMF writer and OTLP (helper/otlp/) implement it; a
//! recorder does in tests.
#![forbid(unsafe_code)]

use std::future::Future;
use std::pin::Pin;

use super::outcome::Outcome;
use super::plan::Datum;

/// One call's outcome, or why it failed (for the counter and the log).
pub type PutResult = Result<(), (Outcome, String)>;
/// A call under way.
pub type PutCall = Pin<Box<dyn Future<Output = PutResult> + Send>>;

/// Sends one batch; the SDK client in production, a recorder in tests.
pub trait Put: Send + Sync + 'static {
    fn put(&self, batch: Vec<Datum>) -> PutCall;
}
