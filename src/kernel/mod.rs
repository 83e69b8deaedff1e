//! Everything that talks to the kernel about processes and signals, by concern: the
//! signal state and inbox, spawning and reaping, the terminal, /proc, limits and
//! standard descriptors. The only module allowed `unsafe`; each use carries a SAFETY
//! note. The rest of lifeguard uses `kernel::*` and does not see the split.
#![allow(unsafe_code)]

mod limits;
mod proc;
mod process;
mod signals;
mod stdio;
mod terminal;

pub use limits::{raise_descriptor_limit, tune_listener};
pub use proc::{
    descendant_proc_pids, descendants, handles, own_children, proc_view, Descendant, ProcView,
};
pub use process::{
    become_subreaper, has_children, is_pid1, own_pid, reap_one, send, set_parent_death_signal,
    signal_everything_in_namespace, spawn_app, Reaped,
};
pub use signals::{
    hear_children, reblock_every_signal, signal_pending, Received, SignalInbox, Woke,
};
pub use stdio::{guard_standard_descriptors, QuickStderr};
pub use terminal::{app_stopped, release_terminal, restore_terminal, stop_with_app, AppTerminal};
