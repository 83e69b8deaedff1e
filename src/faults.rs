//! Fault injection for the tests: with the cargo feature `fault-injection` (never in a
//! release binary; tests/faults.rs checks), `LIFEGUARD_FAULT` makes a helper panic or
//! hang at a named point, to prove that no helper can take PID 1 down or slow it down.
//! Without the feature every point compiles to nothing.
//!
//! `LIFEGUARD_FAULT=point[:N|:once|:hang|:idle|:pause=MS|:abort|:overflow|:blocking|:child],...`:
//! panic at `point` every time, the first N times (in each helper process), once in the
//! whole run (the first helper process alone), hang there for good, stay there for good
//! waking every 100 ms to do nothing (a retry or `recv_timeout` loop that never gets
//! anywhere), stall there MS
//! milliseconds each time, abort the process (what a panic while unwinding, a failed
//! allocation or a dependency's `abort()` do), overflow the thread's stack (what runaway
//! recursion does) — the last two no unwinding can catch, and end the whole helper
//! process —, clear O_NONBLOCK on every descriptor of the process (what a library that
//! wants blocking I/O does), or start a child process of its own once (`sleep 600`,
//! its pid printed on stdout as `helper-child PID`). The points: `endpoint-request`
//! (answering a request), `endpoint-accept` (the accept loop), `app-check`, `sampler`,
//! `cloudwatch-publish`, `log-locked` (a helper's log line, inside the logging lock),
//! `helper-main` (the helper process's main thread, each heartbeat), and one on the
//! supervision thread itself, `signals-taken` (signals just read, not yet handled: the
//! instant a preempted main thread would stretch), for `pause` only.
//! `LIFEGUARD_FAULT_MINUTE` shortens the scale-in protection's minute (`minute`).
#![forbid(unsafe_code)]

/// The scale-in protection's minute (its expiry, renewal, least settle time and the
/// pause after AccessDenied are counted in minutes): a real one, except in the test
/// build, where `LIFEGUARD_FAULT_MINUTE=MS` shortens it so that a test sees a renewal
/// or a lapse in seconds. The agent is still asked for `ExpiresInMinutes` as usual; the
/// tests' emulator of the agent counts its minutes alike.
pub fn minute() -> std::time::Duration {
    #[cfg(feature = "fault-injection")]
    if let Some(ms) = std::env::var("LIFEGUARD_FAULT_MINUTE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return std::time::Duration::from_millis(ms);
    }
    std::time::Duration::from_secs(60)
}

/// Marks a place where a test may inject a fault.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn point(_name: &str) {}

#[cfg(feature = "fault-injection")]
pub fn point(name: &str) {
    use std::sync::atomic::Ordering;
    let Some(fault) = armed().iter().find(|f| f.point == name) else {
        return;
    };
    match fault.times {
        Times::Hang => loop {
            std::thread::park();
        },
        Times::Idle => loop {
            std::thread::sleep(std::time::Duration::from_millis(100));
        },
        Times::Blocking => clear_nonblocking(),
        Times::OncePerRun => {
            // Once for the whole run, not once per helper process: a marker file named
            // after the parent, its PID namespace and its start time. As PID 1 every
            // run's parent is 1, and the kernel reuses a freed namespace's inode number,
            // so a marker left by an earlier run would otherwise disarm the fault.
            let namespace = std::fs::read_link("/proc/self/ns/pid")
                .map(|l| l.display().to_string().replace(['[', ']', ':'], ""))
                .unwrap_or_default();
            let parent = std::os::unix::process::parent_id();
            // proc(5): field 22 of /proc/PID/stat, starttime, counted after the
            // command name's closing parenthesis (the name may hold spaces).
            let started = std::fs::read_to_string(format!("/proc/{parent}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s.get(s.rfind(')')? + 1..)?.to_owned();
                    rest.split_whitespace().nth(19).map(str::to_owned)
                })
                .unwrap_or_default();
            let marker = std::env::temp_dir().join(format!(
                "lifeguard-fault-{namespace}-{parent}-{started}-{name}"
            ));
            if std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&marker)
                .is_ok()
            {
                panic!("injected fault at {name}");
            }
        }
        Times::Child => spawn_child(),
        Times::Pause(ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
        Times::Abort => std::process::abort(),
        Times::Overflow => {
            overflow(1);
        }
        Times::Always => panic!("injected fault at {name}"),
        Times::First(ref left) => {
            if left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                panic!("injected fault at {name}");
            }
        }
    }
}

/// Recursion the optimiser cannot turn into a loop: each frame keeps a buffer it
/// reads after the call.
#[cfg(feature = "fault-injection")]
#[inline(never)]
#[allow(unconditional_recursion)]
fn overflow(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth; 512]);
    overflow(depth + 1) + frame[(depth % 512) as usize]
}

/// What a library that wants blocking I/O does to every descriptor it is handed:
/// clears O_NONBLOCK, on each descriptor of the process (its open file description).
#[cfg(feature = "fault-injection")]
fn clear_nonblocking() {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        if let Ok(flags) = fcntl(fd, FcntlArg::F_GETFL) {
            let flags = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
            let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
        }
    }
}

/// A child of the helper's own, once (what a library that runs a command does):
/// `sleep 600`, which prints its pid on stdout as `helper-child PID`.
#[cfg(feature = "fault-injection")]
fn spawn_child() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(child) = std::process::Command::new("sleep").arg("600").spawn() {
            let line = format!("helper-child {}\n", child.id());
            let _ = crate::kernel::write_whole(
                std::os::fd::AsFd::as_fd(&std::io::stdout()),
                line.as_bytes(),
            );
        }
    });
}

#[cfg(feature = "fault-injection")]
enum Times {
    Abort,
    Blocking,
    Child,
    OncePerRun,
    Overflow,
    Always,
    First(std::sync::atomic::AtomicU32),
    Hang,
    Idle,
    Pause(u64),
}

#[cfg(feature = "fault-injection")]
struct Fault {
    point: String,
    times: Times,
}

#[cfg(feature = "fault-injection")]
fn armed() -> &'static [Fault] {
    static ARMED: std::sync::OnceLock<Vec<Fault>> = std::sync::OnceLock::new();
    ARMED.get_or_init(|| {
        let spec = std::env::var("LIFEGUARD_FAULT").unwrap_or_default();
        spec.split(',')
            .filter(|s| !s.is_empty())
            .map(|entry| {
                let (point, times) = match entry.split_once(':') {
                    None => (entry, Times::Always),
                    Some((point, "hang")) => (point, Times::Hang),
                    Some((point, "idle")) => (point, Times::Idle),
                    Some((point, "abort")) => (point, Times::Abort),
                    Some((point, "overflow")) => (point, Times::Overflow),
                    Some((point, "blocking")) => (point, Times::Blocking),
                    Some((point, "child")) => (point, Times::Child),
                    Some((point, "once")) => (point, Times::OncePerRun),
                    Some((point, pause)) if pause.starts_with("pause=") => (
                        point,
                        Times::Pause(pause["pause=".len()..].parse().unwrap_or(100)),
                    ),
                    Some((point, n)) => (
                        point,
                        Times::First(std::sync::atomic::AtomicU32::new(n.parse().unwrap_or(1))),
                    ),
                };
                Fault {
                    point: point.to_string(),
                    times,
                }
            })
            .collect()
    })
}
