//! Counters the supervisor keeps for the metrics endpoint: signals forwarded (by signal)
//! and orphans reaped. Lock-free, so reading them never holds up supervision.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use crate::signals::{self, Signal};

pub struct Stats {
    forwarded: [AtomicU64; signals::MAX as usize + 1],
    zombies_reaped: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            forwarded: std::array::from_fn(|_| AtomicU64::new(0)),
            zombies_reaped: AtomicU64::new(0),
        }
    }
}

impl Stats {
    pub fn signal_forwarded(&self, signal: Signal) {
        if let Some(slot) = self.forwarded.get(signal.0 as usize) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn zombie_reaped(&self) {
        self.zombies_reaped.fetch_add(1, Ordering::Relaxed);
    }

    /// (signal, count) for every signal forwarded at least once.
    pub fn forwarded(&self) -> Vec<(Signal, u64)> {
        (1..=signals::MAX)
            .map(|n| {
                (
                    Signal(n),
                    self.forwarded[n as usize].load(Ordering::Relaxed),
                )
            })
            .filter(|(_, count)| *count > 0)
            .collect()
    }

    pub fn zombies_reaped(&self) -> u64 {
        self.zombies_reaped.load(Ordering::Relaxed)
    }
}
