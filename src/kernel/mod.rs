//! Everything that talks to the kernel about processes and signals, by concern: who
//! lifeguard is and kill(2) (`kill`, the leaf the others use), the signal state and
//! inbox, spawning and reaping, the terminal, /proc, limits, standard descriptors and
//! the ready port's sockets. The only module allowed `unsafe`; each use carries a
//! SAFETY note. The rest of lifeguard uses `kernel::*` and does not see the split.
#![allow(unsafe_code)]

mod helper_process;
mod kill;
mod limits;
mod proc;
mod process;
mod ready_port;
mod signal_inbox;
mod stdio;
mod terminal;
mod thread_sched;

pub use helper_process::{fork_helper, leave, shared_words};
pub use kill::{is_pid1, own_pid, send, signal_everything_in_namespace};
pub use limits::{datagram_pair, listen, raise_descriptor_limit, tune_buffers};
pub use proc::{
    children_besides, descendant_proc_pids, descendants, handles, own_children, proc_self_pid,
    proc_view, Descendant, ProcView, SupervisorPending,
};
pub use process::{
    app_stopped, become_subreaper, reap_one, set_parent_death_signal, spawn_app, Reaped,
};
pub use ready_port::{bound_socket, no_ipv6, ReadyPort};
pub use signal_inbox::{
    hear_children, reblock_every_signal, signal_pending, spawn_thread, Received, SignalInbox, Woke,
};
pub use stdio::{write_whole, QuickStderr};
pub use terminal::{release_terminal, restore_terminal, stop_with_app, AppTerminal};
pub use thread_sched::{main_thread_of, Sched, ThreadSched};
