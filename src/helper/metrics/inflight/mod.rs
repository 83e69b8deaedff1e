//! In-flight requests on the app's TCP port, read from the kernel over sock_diag netlink
//! (docs/metrics.md): the listeners' accept queues plus the connections with a request
//! outstanding.
//!
//! The dump itself, the counting rule and the listener watch are the shared reader's
//! (sock_diag/); here is what the sampler makes of them:
//!
//! - `age`: the oldest request waiting and the response times answered, pure
//! - `quiet`: when a look can keep the last dump's figures, pure
//! - `source`: `InFlightSource`, the sampler's reader with its warnings and quiet looks
#![forbid(unsafe_code)]

mod age;
mod quiet;
mod source;

#[cfg(test)]
pub(super) use crate::sock_diag::count::Ends;
#[cfg(test)]
pub(super) use crate::sock_diag::count::TcpInfoFields;
pub(super) use crate::sock_diag::count::{arrivals, InFlight, SockRecord};
pub(super) use age::{Ages, ResponseTimes, RESPONSE_BUCKETS};
pub(super) use source::InFlightSource;
