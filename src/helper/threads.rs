//! The helper threads — the endpoint, the app check, the sampler, the CloudWatch
//! publisher, the scale-in protection — and what keeps their faults their own: each
//! runs on a thread of its own with a tokio runtime of its own, a panic unwinds that
//! helper alone (the release build unwinds; docs/decisions.md), is logged once and counted
//! (`lifeguard_helper_failures_total{helper}`), and the helper is started again in
//! place after a pause. They all live in the helper process, apart from supervision
//! (ARCHITECTURE.md); each one's runtime ticks a turn counter, which the helper's
//! heartbeat is made of (`Watch`). A restart reuses the thread and its runtime.
//!
//! Each thread blocks every signal first thing, as its runtime's lookup thread does:
//! signals sent to the helper process are taken by its main thread, at the actions
//! kernel/helper_process.rs sets (SIGSEGV, SIGABRT: the helper's death, which PID 1
//! hears of; the ones an init relays: ignored).
#![forbid(unsafe_code)]

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::kernel::{self, Sched};
use crate::logging;

/// How many helpers there are.
const HELPERS: usize = 5;

/// The helpers, as `lifeguard_helper_failures_total{helper}` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helper {
    Endpoint,
    AppCheck,
    Sampler,
    CloudWatch,
    ScaleIn,
}

impl Helper {
    pub const ALL: [Helper; HELPERS] = [
        Helper::Endpoint,
        Helper::AppCheck,
        Helper::Sampler,
        Helper::CloudWatch,
        Helper::ScaleIn,
    ];

    /// The label value, which is also the thread's name.
    pub fn name(self) -> &'static str {
        match self {
            Helper::Endpoint => "endpoint",
            Helper::AppCheck => "app-check",
            Helper::Sampler => "sampler",
            Helper::CloudWatch => "cloudwatch",
            Helper::ScaleIn => "scale-in",
        }
    }

    /// The helper a thread belongs to, by the thread's name (its name-lookup thread
    /// is `<name>-lookup`).
    pub fn of_thread(thread: &str) -> Option<Helper> {
        Helper::ALL
            .into_iter()
            .find(|h| thread == h.name() || thread.strip_suffix("-lookup") == Some(h.name()))
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Panics per helper since start; read by the endpoint (`/metrics`).
static FAILURES: [AtomicU64; HELPERS] = [const { AtomicU64::new(0) }; HELPERS];
/// Which helpers were started, so that `/metrics` shows their counters from the first
/// scrape, zeros included.
static STARTED: [std::sync::atomic::AtomicBool; HELPERS] =
    [const { std::sync::atomic::AtomicBool::new(false) }; HELPERS];

/// (helper, panics) for every helper that runs.
pub fn failures() -> Vec<(Helper, u64)> {
    Helper::ALL
        .into_iter()
        .filter(|h| STARTED[h.index()].load(Ordering::Relaxed))
        .map(|h| (h, FAILURES[h.index()].load(Ordering::Relaxed)))
        .collect()
}

/// Turns of each helper's runtime (a tick every 2 s from a task of its own on it), and
/// whether the helper is between runs (the pause after a panic) or done for good: what
/// the helper process's heartbeat is made of.
static TURNS: [AtomicU64; HELPERS] = [const { AtomicU64::new(0) }; HELPERS];
static RESTING: [std::sync::atomic::AtomicBool; HELPERS] =
    [const { std::sync::atomic::AtomicBool::new(false) }; HELPERS];
/// Two ticks fit in `STUCK` (5 s) with room for a late one; a tick a second cost each
/// idle runtime two wake-ups a second for nothing.
const TURN_EVERY: Duration = Duration::from_secs(2);

/// Each helper thread's own scheduling figures, opened by the thread as it starts: a
/// thread that has not turned is hung, or only starved of CPU (below).
static SCHED: [std::sync::OnceLock<kernel::ThreadSched>; HELPERS] =
    [const { std::sync::OnceLock::new() }; HELPERS];

/// CPU time a thread may have had without turning once before it counts as spinning: a
/// turn costs microseconds, and a thread starved at the peak (300 threads in a quarter
/// of a CPU) gets a few milliseconds in 5 s.
const SPIN: Duration = Duration::from_secs(1);

/// Why a helper that has not turned for the limit has not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stuck {
    /// It waits to run (runnable, or it waited on a run queue since the last look): its
    /// cgroup is at its quota or the machine is busy. A new process would wait alike,
    /// and lose the sampler's state with the CPU it costs to start.
    Starved { waited: Duration, ran: Duration },
    /// It neither ran nor waited to run since the last look and is not runnable now:
    /// blocked for good (a deadlock, a call that never returns, stopped).
    Blocked,
    /// It wakes now and then but does not turn, and waited for the CPU less than half
    /// the time since it last turned: a loop that retries or times out without getting
    /// anywhere, not a thread short of CPU.
    Idle { waited: Duration, over: Duration },
    /// It had this much CPU without turning: a spin.
    Spinning(Duration),
    /// Its figures cannot be read: taken as hung, as before they could be.
    Unknown,
}

impl Stuck {
    /// Whether the helper process must stop its heartbeat (and be started again).
    pub fn hung(self) -> bool {
        !matches!(self, Stuck::Starved { .. })
    }

    /// For the log line: measured times as people write them (tenths of a second,
    /// milliseconds).
    pub fn why(self) -> String {
        match self {
            Stuck::Starved { waited, ran } => format!(
                "starved of CPU, not hung: it waited {:.1}s to run and ran {}ms",
                waited.as_secs_f64(),
                ran.as_millis()
            ),
            Stuck::Blocked => "it neither runs nor waits to run: hung".to_string(),
            Stuck::Idle { waited, over } => format!(
                "it wakes but does not turn, and waited for the CPU {:.1}s of {:.1}s: hung",
                waited.as_secs_f64(),
                over.as_secs_f64()
            ),
            Stuck::Spinning(ran) => format!(
                "it ran {:.1}s of CPU without a turn: spinning",
                ran.as_secs_f64()
            ),
            Stuck::Unknown => "its scheduling figures cannot be read: taken as hung".to_string(),
        }
    }
}

/// What a helper that has not turned for `over` (since `since`) is, from its figures
/// then, at the last look, and now (pure). Starved means waiting for the CPU: runnable
/// now, or, having run or waited since the last look, waiting on a run queue for at least
/// half the time since it last turned. Any movement is not enough: a thread that wakes
/// and sleeps again without turning is idle, and hung.
pub fn judge(
    since: Option<Sched>,
    last: Option<Sched>,
    now: Option<Sched>,
    over: Duration,
) -> Stuck {
    let (Some(since), Some(last), Some(now)) = (since, last, now) else {
        return Stuck::Unknown;
    };
    let ran = now.ran.saturating_sub(since.ran);
    if ran >= SPIN {
        return Stuck::Spinning(ran);
    }
    let waited = now.waited.saturating_sub(since.waited);
    if now.runnable {
        return Stuck::Starved { waited, ran };
    }
    if now.waited <= last.waited && now.ran <= last.ran {
        return Stuck::Blocked;
    }
    if waited >= over / 2 {
        Stuck::Starved { waited, ran }
    } else {
        Stuck::Idle { waited, over }
    }
}

/// What the watch saw of one helper: its turns, since when they have not moved, its
/// figures then and at the last look.
#[derive(Default, Clone, Copy)]
struct Seen {
    turns: u64,
    since: Option<Instant>,
    sched_since: Option<Sched>,
    sched_last: Option<Sched>,
}

/// Tells which helper threads have stopped turning: each check compares every running
/// helper's turn count with the one it saw last, and when that last moved.
#[derive(Default)]
pub struct Watch {
    seen: [Seen; HELPERS],
}

impl Watch {
    /// A helper that has run and has not turned for `limit`, if any, and why: a hung
    /// one before a starved one.
    pub fn stuck(&mut self, limit: Duration) -> Option<(Helper, Stuck)> {
        let now = Instant::now();
        let mut stuck: Option<(Helper, Stuck)> = None;
        for helper in Helper::ALL {
            let i = helper.index();
            let turns = TURNS[i].load(Ordering::Relaxed);
            let sched = SCHED[i].get().and_then(kernel::ThreadSched::read);
            let seen = &mut self.seen[i];
            let idle = !STARTED[i].load(Ordering::Relaxed) || RESTING[i].load(Ordering::Relaxed);
            if idle || seen.turns != turns || seen.since.is_none() {
                *seen = Seen {
                    turns,
                    since: Some(now),
                    sched_since: sched,
                    sched_last: sched,
                };
                continue;
            }
            if seen.since.is_some_and(|at| now.duration_since(at) >= limit) {
                let over = seen.since.map_or(limit, |at| now.duration_since(at));
                let verdict = judge(seen.sched_since, seen.sched_last, sched, over);
                if stuck.is_none_or(|(_, was)| !was.hung() && verdict.hung()) {
                    stuck = Some((helper, verdict));
                }
            }
            seen.sched_last = sched;
        }
        stuck
    }
}

/// Counts the runtime's turns while the helper's work runs beside it.
async fn turning(helper: Helper) {
    let mut ticks = tokio::time::interval(TURN_EVERY);
    loop {
        ticks.tick().await;
        TURNS[helper.index()].fetch_add(1, Ordering::Relaxed);
    }
}

/// First pause before a helper that panicked is started again; it doubles with each
/// panic that follows soon after, up to `MAX_BACKOFF`, so a helper that panics at once
/// every time costs a line a minute, not a hot loop.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Starts `helper` on a thread of its own and returns once the thread is ready, or why
/// it could not start. `work` makes one run of the
/// helper; it is called again after a panic. With `name_lookups` the runtime's one
/// blocking thread, which serves name lookups (std's resolver blocks), is started now
/// too.
///
/// One copy of this machinery serves every helper: `work`'s futures are boxed, so the
/// thread's loop is not compiled again for each helper's future type (four copies cost
/// the slim build about 20 kB).
pub fn start<F, Fut>(helper: Helper, name_lookups: bool, work: F) -> Result<(), String>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    start_boxed(helper, name_lookups, Box::new(move || Box::pin(work())))
}

/// Spawns `task` on the current runtime, boxed: the helpers' tasks then share one copy
/// of tokio's task machinery, which is otherwise compiled again for each future type
/// (a few kB each in the slim build).
pub fn spawn(task: impl Future<Output = ()> + Send + 'static) -> tokio::task::JoinHandle<()> {
    let boxed: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(task);
    tokio::spawn(boxed)
}

/// A run of a helper's work.
type Work = std::pin::Pin<Box<dyn Future<Output = ()>>>;

fn start_boxed(
    helper: Helper,
    name_lookups: bool,
    work: Box<dyn Fn() -> Work + Send>,
) -> Result<(), String> {
    let (ready_tx, ready) = std::sync::mpsc::channel();
    kernel::spawn_thread(
        helper.name(),
        Box::new(move || {
            if let Some(own) = kernel::ThreadSched::own() {
                let _ = SCHED[helper.index()].set(own);
            }
            let runtime = match runtime(helper, name_lookups) {
                Ok(runtime) => {
                    let _ = ready_tx.send(Ok(()));
                    runtime
                }
                Err(err) => {
                    let _ = ready_tx.send(Err(format!("starting its runtime: {err}")));
                    return;
                }
            };
            let mut backoff = FIRST_BACKOFF;
            loop {
                let began = Instant::now();
                RESTING[helper.index()].store(false, Ordering::Relaxed);
                let run = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    runtime.block_on(async {
                        tokio::select! {
                            () = work() => {}
                            () = turning(helper) => {}
                        }
                    })
                }));
                RESTING[helper.index()].store(true, Ordering::Relaxed);
                if run.is_ok() {
                    return; // the helper's work is done (the publisher after its flush)
                }
                // The panic hook has said what happened and counted it.
                if began.elapsed() > MAX_BACKOFF {
                    backoff = FIRST_BACKOFF;
                }
                logging::warn(
                    format!(
                        "{} restarts in {}",
                        helper.name(),
                        crate::seconds::human(backoff)
                    ),
                    &[],
                );
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }),
    )
    .map_err(|err| format!("starting the thread: {err}"))?;
    STARTED[helper.index()].store(true, Ordering::Relaxed);
    ready
        .recv()
        .map_err(|_| "the thread ended before it was ready".to_string())?
}

/// A current-thread runtime. Its only extra thread is tokio's blocking pool, capped at
/// one and kept for good, which serves name lookups; with `name_lookups` that thread is
/// started now, and blocks every signal first thing.
fn runtime(helper: Helper, name_lookups: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name(format!("{}-lookup", helper.name()))
        .on_thread_start(kernel::reblock_every_signal)
        .max_blocking_threads(1)
        .thread_keep_alive(Duration::from_secs(365 * 86400))
        .build()?;
    if name_lookups {
        let _ = runtime.block_on(runtime.spawn_blocking(|| ()));
    }
    Ok(runtime)
}

/// A panic on one of the helper threads (or inside one of its tasks, which tokio
/// catches), for the panic hook (panics.rs): counted, and whether it is that helper's
/// first. None when `thread` is no helper thread's.
pub fn count_panic(thread: &str) -> Option<(Helper, bool)> {
    let helper = Helper::of_thread(thread)?;
    let before = FAILURES[helper.index()].fetch_add(1, Ordering::Relaxed);
    Some((helper, before == 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(ran_ms: u64, waited_ms: u64, runnable: bool) -> Option<Sched> {
        Some(Sched {
            ran: Duration::from_millis(ran_ms),
            waited: Duration::from_millis(waited_ms),
            runnable,
        })
    }

    const FIVE: Duration = Duration::from_secs(5);

    #[test]
    fn a_starved_thread_is_told_from_a_hung_one() {
        let since = sched(100, 50, false);
        // Runnable now, or it waited on a run queue since the last look: starved.
        assert_eq!(
            judge(since, sched(101, 900, false), sched(102, 4200, true), FIVE),
            Stuck::Starved {
                waited: Duration::from_millis(4150),
                ran: Duration::from_millis(2)
            }
        );
        assert!(!judge(since, sched(101, 900, false), sched(101, 4300, false), FIVE).hung());
        // Asleep, and neither ran nor waited since the last look: blocked (a deadlock, a
        // SIGSTOP), though it waited before.
        assert_eq!(
            judge(since, sched(101, 900, false), sched(101, 900, false), FIVE),
            Stuck::Blocked
        );
        // A second of CPU without a turn: spinning, starved or not.
        assert_eq!(
            judge(since, sched(600, 60, true), sched(1100, 70, true), FIVE),
            Stuck::Spinning(Duration::from_millis(1000))
        );
        assert_eq!(judge(since, None, sched(1, 1, true), FIVE), Stuck::Unknown);
        assert!(Stuck::Blocked.hung() && Stuck::Unknown.hung());
        // Woke now and then (a retry, a timed-out wait) without turning, hardly ever
        // waiting for the CPU: idle, and hung, however little it ran.
        let idle = judge(since, sched(110, 60, false), sched(120, 70, false), FIVE);
        assert_eq!(
            idle,
            Stuck::Idle {
                waited: Duration::from_millis(20),
                over: FIVE
            }
        );
        assert!(idle.hung());
        assert_eq!(
            idle.why(),
            "it wakes but does not turn, and waited for the CPU 0.0s of 5.0s: hung"
        );
        let said = judge(since, since, sched(103, 3250, true), FIVE).why();
        assert_eq!(
            said,
            "starved of CPU, not hung: it waited 3.2s to run and ran 3ms"
        );
    }

    #[test]
    fn threads_are_told_apart_by_name() {
        assert_eq!(Helper::of_thread("endpoint"), Some(Helper::Endpoint));
        assert_eq!(Helper::of_thread("sampler-lookup"), Some(Helper::Sampler));
        assert_eq!(Helper::of_thread("app-check"), Some(Helper::AppCheck));
        assert_eq!(Helper::of_thread("main"), None);
        assert_eq!(Helper::of_thread("log"), None);
    }
}
