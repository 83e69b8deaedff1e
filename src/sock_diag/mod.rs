//! The kernel's TCP socket tables over sock_diag netlink (`NETLINK_SOCK_DIAG`, see
//! sock_diag(7)): one port's listeners and connections, what is in flight on them, and
//! whether anything listens there. Below every program that reads them — the helper's
//! sampler and app check, and the readiness mirror — and knowing none of them: no
//! threads, no runtime, one socket per reader.
//!
//! - `count`: the counting rule and what arrived between two dumps, pure
//! - `diag`: the wire format: request bytes, the reply parser, `tcp_info` offsets
//! - `ladder`: the ways of asking, cheapest first, and the fallback between them
//! - `reader`: `InFlightReader`, the socket I/O of one sample
//! - `listening`: whether anything listens on the port, and what does when nothing does
//!
//! `count`, `diag`, `ladder` and `reader` import nothing of lifeguard but each other:
//! bench/sock_diag_ways.rs builds them as they are to time each way of asking.
#![forbid(unsafe_code)]

pub mod count;
mod diag;
mod ladder;
pub mod listening;
pub mod reader;
#[cfg(test)]
pub mod testing;
