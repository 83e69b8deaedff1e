//! In-flight requests on the app's TCP port, read from the kernel over sock_diag netlink
//! (docs/metrics.md): the listeners' accept queues plus the connections with a request
//! outstanding.
//!
//! - `count`: the counting rule and what arrived between two dumps, pure
//! - `age`: the oldest request waiting and the response times answered, pure
//! - `diag`: the wire format: request bytes, the reply parser, `tcp_info` offsets
//! - `ladder`: the ways of asking, cheapest first, and the fallback between them
//! - `reader`: `InFlightReader`, the socket I/O of one sample
//! - `listening`: whether anything listens on the port, and what does when nothing does
//! - `quiet`: when a look can keep the last dump's figures, pure
//! - `source`: `InFlightSource`, the sampler's reader with its warnings and quiet looks
//!
//! `count`, `diag`, `ladder` and `reader` import nothing of lifeguard but each other:
//! bench/sock_diag_ways.rs builds them as they are to time each way of asking.
#![forbid(unsafe_code)]

mod age;
mod count;
mod diag;
mod ladder;
pub mod listening;
mod quiet;
mod reader;
mod source;
#[cfg(test)]
pub(super) mod testing;

pub(super) use age::{Ages, ResponseTimes, RESPONSE_BUCKETS};
#[cfg(test)]
pub(super) use count::Ends;
#[cfg(test)]
pub(super) use count::TcpInfoFields;
pub(super) use count::{arrivals, InFlight, SockRecord};
pub(super) use source::InFlightSource;
