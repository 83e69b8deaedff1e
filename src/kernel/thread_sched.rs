//! A thread's scheduling figures, for telling a thread starved of CPU from a hung one:
//! `/proc/thread-self/schedstat` (the time it ran, and the time it waited on a run queue
//! to run: the kernel's `sched_info`, `CONFIG_SCHED_INFO`) and the state letter of
//! `/proc/thread-self/stat`. The thread opens its own files once; any thread of the
//! process reads them again later (one pread each: /proc regenerates them on every read),
//! and they stay that thread's whoever reads them — by name, `/proc/self/task/TID` would
//! need the TID as the reading /proc counts it, which differs from the thread's own
//! where /proc is another PID namespace's.
#![forbid(unsafe_code)]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Duration;

/// One reading of a thread's figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sched {
    /// CPU time it has had.
    pub ran: Duration,
    /// Time it has spent runnable, waiting for a CPU: it grows while the thread's cgroup
    /// is at its quota or the machine is busy, and only when the thread gets the CPU at
    /// last (the kernel adds each wait at its end).
    pub waited: Duration,
    /// Running or runnable now (state `R`), rather than asleep, blocked or stopped.
    pub runnable: bool,
}

/// The calling thread's two files, open.
pub struct ThreadSched {
    stat: File,
    schedstat: File,
}

impl ThreadSched {
    /// The calling thread's, or None where /proc cannot show them (no /proc, or a kernel
    /// without `CONFIG_SCHED_INFO`).
    pub fn own() -> Option<ThreadSched> {
        Some(ThreadSched {
            stat: File::open("/proc/thread-self/stat").ok()?,
            schedstat: File::open("/proc/thread-self/schedstat").ok()?,
        })
    }

    /// The figures now, or None if they cannot be read (the thread has ended).
    pub fn read(&self) -> Option<Sched> {
        let mut buf = [0u8; 512];
        let n = self.schedstat.read_at(&mut buf, 0).ok()?;
        let (ran, waited) = parse_schedstat(&buf[..n])?;
        let n = self.stat.read_at(&mut buf, 0).ok()?;
        let state = parse_state(&buf[..n])?;
        Some(Sched {
            ran,
            waited,
            runnable: state == b'R',
        })
    }
}

/// The figures of process `pid`'s main thread (its thread id is the pid), by pid in
/// this /proc: for supervision, whose helper process's beating thread is its main one.
/// The caller makes sure /proc is its own namespace's (kernel::proc_view), or the pid
/// names another process.
pub fn main_thread_of(pid: i32) -> Option<Sched> {
    let open = |file: &str| File::open(format!("/proc/{pid}/task/{pid}/{file}")).ok();
    ThreadSched {
        stat: open("stat")?,
        schedstat: open("schedstat")?,
    }
    .read()
}

/// `schedstat`: nanoseconds run, nanoseconds waited on a run queue, time slices (decimal
/// numbers separated by one space; read byte by byte, as the kernel writes them).
pub fn parse_schedstat(text: &[u8]) -> Option<(Duration, Duration)> {
    let mut fields = text.split(|b| *b == b' ' || *b == b'\n').map(|field| {
        let digits = !field.is_empty() && field.iter().all(u8::is_ascii_digit);
        digits.then(|| {
            (field.iter()).fold(0u64, |n, d| {
                n.wrapping_mul(10).wrapping_add(u64::from(d - b'0'))
            })
        })
    });
    let ran = fields.next()??;
    let waited = fields.next()??;
    Some((Duration::from_nanos(ran), Duration::from_nanos(waited)))
}

/// The state letter of a `stat` line: the field after the name in parentheses, which may
/// itself hold spaces and parentheses (proc(5): read from the last `)`).
pub fn parse_state(text: &[u8]) -> Option<u8> {
    let close = text.iter().rposition(|b| *b == b')')?;
    text.get(close + 2).copied().filter(u8::is_ascii_alphabetic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_files_read_as_the_kernel_writes_them() {
        // Recorded from a helper thread on Linux 6.18.
        assert_eq!(
            parse_schedstat(b"141786 1506975 2\n"),
            Some((
                Duration::from_nanos(141_786),
                Duration::from_nanos(1_506_975)
            ))
        );
        assert_eq!(parse_schedstat(b"12 x 3"), None);
        assert_eq!(parse_schedstat(b""), None);
        let stat = b"17085 (sampler) R 17082 17082 1920 0 -1 4194304 127 0 0 0";
        assert_eq!(parse_state(stat), Some(b'R'));
        // A name with a space and a parenthesis of its own.
        assert_eq!(parse_state(b"9 (a) b) S 1 9 9"), Some(b'S'));
        assert_eq!(parse_state(b"9 (stopped) t 1"), Some(b't'));
        assert_eq!(parse_state(b"garbage"), None);
    }

    #[test]
    fn a_thread_reads_its_own_figures_and_another_reads_them_later() {
        let Some(own) = ThreadSched::own() else {
            panic!("THIS TEST CANNOT RUN: no /proc/thread-self/schedstat here");
        };
        let first = own.read().unwrap();
        // Running: this very thread, reading.
        assert!(first.runnable);
        // Spin until this thread has had 20 ms more of CPU (however busy the machine).
        let spun = std::time::Instant::now();
        while own.read().unwrap().ran < first.ran + Duration::from_millis(20) {
            assert!(
                spun.elapsed() < Duration::from_secs(20),
                "no CPU time counted"
            );
            std::hint::black_box(0);
        }
        // Read from another thread: still this one's figures, grown.
        let later = std::thread::scope(|s| s.spawn(|| own.read().unwrap()).join().unwrap());
        assert!(
            later.ran >= first.ran + Duration::from_millis(20),
            "{first:?} {later:?}"
        );
    }
}
