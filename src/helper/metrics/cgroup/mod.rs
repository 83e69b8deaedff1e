//! The app's cgroup: finds it (v2, v1, the hybrid layout) through /proc/self/cgroup and
//! /proc/self/mountinfo once, then reads its CPU and memory figures once a second.
//!
//! - `parse`: the files' contents, pure (text in, values out)
//! - `resolve`: entries and mounts mapped to one directory per controller, pure
//! - `read`: `discover` and `Cgroup::read`, the I/O, under a root prefix so recorded
//!   trees stand in for / in the tests
#![forbid(unsafe_code)]

mod parse;
mod read;
mod resolve;

pub(super) use read::{discover, Cgroup, Reading};
