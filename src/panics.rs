//! What a panic does, by where it happens. On a helper thread (the endpoint, the app
//! check, the sampler, the publisher) it unwinds that helper alone, which starts again in
//! place: logged the first time, counted every time (`lifeguard_helper_failures_total`).
//! Elsewhere in the helper process (its main thread, which keeps the heartbeat) nothing
//! could restart it in place: the helper process ends at once, without unwinding into
//! the frames the fork copied from PID 1, and supervision starts a new one. On PID 1's
//! supervision thread nothing could supervise after it: it is logged and the process
//! aborts, as the kernel then ends the container.
#![forbid(unsafe_code)]

use std::sync::OnceLock;
use std::time::Duration;

use crate::kernel;
use crate::logging;

/// A process's count of its threads' panics: by a thread's name, the name of the part
/// that restarts in place and whether this is its first panic; None for a thread that
/// nothing restarts.
pub type Counter = fn(thread: &str) -> Option<(&'static str, bool)>;

/// Set in the helper process, first thing after the fork: its threads' counter.
static IN_HELPER: OnceLock<Counter> = OnceLock::new();

/// This process is the helper, not PID 1: a panic here is never supervision's, and
/// `count` says which of its threads restart in place (the hook knows no thread of its
/// own).
pub fn in_helper_process(count: Counter) {
    let _ = IN_HELPER.set(count);
}

/// Installs the panic hook, before anything else runs.
pub fn install() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        // One line: the message and where, without the default hook's line break.
        let message = info.payload_as_str().unwrap_or("(no message)");
        let place = info
            .location()
            .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
        let count = IN_HELPER.get();
        if let Some((helper, first)) = count.and_then(|count| count(name)) {
            if first {
                logging::error_now(format!(
                    "panic in the {helper} helper{place}: {message}; it is started again, supervision goes on (further panics of it are only counted: lifeguard_helper_failures_total)"
                ));
            }
            return;
        }
        if count.is_some() {
            logging::error_now(format!(
                "panic in the helper process's {name} thread{place}: {message}; the helper process ends, supervision goes on and starts a new one"
            ));
            logging::flush(Duration::from_millis(200));
            kernel::leave(70);
        }
        logging::error_now(format!("panic in the {name} thread{place}: {message}"));
        if name == "main" {
            logging::flush_own(Duration::from_millis(200));
            std::process::abort();
        }
    }));
}
