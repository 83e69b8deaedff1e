//! The tokio runtimes lifeguard runs, built so that no thread is born while the app
//! runs: the C library starts every thread with its reserved signals (32-34) unblocked,
//! and such a signal would go to that thread with its default action, death (see
//! kernel::reblock_every_signal).
#![forbid(unsafe_code)]

use std::io;
use std::time::Duration;

use crate::kernel;

/// A current-thread runtime. Its only extra thread is tokio's blocking pool, capped at
/// one and kept for good, which serves name lookups (std's resolver blocks); with
/// `name_lookups` that thread is started now, before the app, and re-blocks every
/// signal first thing.
pub fn current_thread(name_lookups: bool) -> io::Result<tokio::runtime::Runtime> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start(kernel::reblock_every_signal)
        .max_blocking_threads(1)
        .thread_keep_alive(Duration::from_secs(365 * 86400))
        .build()?;
    if name_lookups {
        let _ = runtime.block_on(runtime.spawn_blocking(|| ()));
    }
    Ok(runtime)
}

/// Starts a named thread that runs `work` on a runtime of its own, and returns once
/// the thread has re-blocked every signal and built its runtime (so it is safe to
/// start the app). None, with the reason, when it could not start.
pub fn spawn_thread<F, Fut>(name: &str, name_lookups: bool, work: F) -> Result<(), String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (ready_tx, ready) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            kernel::reblock_every_signal();
            match current_thread(name_lookups) {
                Ok(runtime) => {
                    let _ = ready_tx.send(Ok(()));
                    runtime.block_on(work());
                }
                Err(err) => {
                    let _ = ready_tx.send(Err(format!("starting its runtime: {err}")));
                }
            }
        })
        .map_err(|err| format!("starting the thread: {err}"))?;
    ready
        .recv()
        .map_err(|_| "the thread ended before it was ready".to_string())?
}
