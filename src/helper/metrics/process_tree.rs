//! The app's process tree for the `lifeguard_app_*` figures: lifeguard's descendants
//! (not lifeguard), with their threads, open descriptors, nearest descriptor limit and
//! resident memory, read from /proc; the pure parsers of /proc/PID/status and
//! /proc/PID/limits and the totals, apart from the reading; and the `select()` line (a
//! process past 1,024 descriptors), said once per process.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::io;
use std::time::{Duration, Instant};

use super::sample::AppFigures;
use crate::kernel;

/// `select()` takes descriptors numbered below FD_SETSIZE only; a process holding more
/// than this many has one numbered at or above it.
pub const SELECT_LIMIT: u64 = 1024;

/// The limits are read when a process is first seen and every this many samples (a
/// process raising its own limit at start-up shows within 10 s).
const LIMITS_EVERY: u32 = 10;

/// Where descriptors are counted by listing the directory (kernels before 6.2), a
/// process is counted again only after this many times the last listing's cost has
/// passed: the listing stays under 0.1 % of a core whatever the app holds.
const LISTING_DUTY: u32 = 1000;

/// What the figures need of /proc/PID/status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    /// `Z` (zombie) or `X` (dead): its leader has exited.
    pub exited: bool,
    /// `Threads:`, the kernel's count of the process's threads.
    pub threads: u64,
    /// `VmRSS:` in bytes; absent once the leader has exited.
    pub rss_bytes: Option<u64>,
}

/// Parses /proc/PID/status; None without a State or Threads line (not a status file).
pub fn parse_status(text: &str) -> Option<Status> {
    let (mut name, mut state, mut threads, mut rss_bytes) = (None, None, None, None);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Name" => name = Some(value.to_string()),
            "State" => state = value.chars().next(),
            "Threads" => threads = value.parse::<u64>().ok(),
            "VmRSS" => {
                rss_bytes = value
                    .strip_suffix("kB")
                    .and_then(|kb| kb.trim().parse::<u64>().ok())
                    .map(|kb| kb * 1024)
            }
            _ => {}
        }
    }
    Some(Status {
        name: name.unwrap_or_default(),
        exited: matches!(state?, 'Z' | 'X'),
        threads: threads?,
        rss_bytes,
    })
}

/// The soft limit of `Max open files` in /proc/PID/limits: `Some(None)` when unlimited,
/// None when the line is missing or garbled.
pub fn parse_nofile_soft(text: &str) -> Option<Option<u64>> {
    let rest = text
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?;
    match rest.split_whitespace().next()? {
        "unlimited" => Some(None),
        soft => soft.parse().ok().map(Some),
    }
}

/// One process of the tree as one sample read it; a figure it could not read is None.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: i32,
    pub name: String,
    /// Exited with no thread left (a zombie not yet reaped): it holds no memory or
    /// descriptors, and no limit of its can bite.
    pub dead: bool,
    pub threads: Option<u64>,
    pub fds: Option<u64>,
    pub rss_bytes: Option<u64>,
    /// Soft RLIMIT_NOFILE: `Some(None)` when unlimited.
    pub nofile: Option<Option<u64>>,
}

/// The tree's figures. Sums are whole or absent: one process whose figure could not be
/// read leaves that figure out of the sample rather than under-count it. The descriptor
/// limit is the smallest soft limit among the processes that can still open one: the
/// first that any process can run into.
pub fn total(processes: &[Process]) -> AppFigures {
    let sum = |figure: fn(&Process) -> Option<u64>| processes.iter().map(figure).sum();
    let limits: Option<Vec<Option<u64>>> = processes
        .iter()
        .filter(|p| !p.dead)
        .map(|p| p.nofile)
        .collect();
    AppFigures {
        processes: Some(processes.len() as u64),
        threads: sum(|p| p.threads),
        open_fds: sum(|p| p.fds),
        max_fds: limits.and_then(|limits| limits.into_iter().flatten().min()),
        resident_bytes: sum(|p| p.rss_bytes),
        // The sampler's to fill: a read per thread, only while the quota throttles.
        threads_running: None,
    }
}

/// Which processes passed `SELECT_LIMIT` descriptors: each said once while it lives.
#[derive(Default)]
pub struct SelectLine {
    said: HashSet<i32>,
}

impl SelectLine {
    /// The processes of this sample past the line that were not said before.
    pub fn crossed<'a>(&mut self, processes: &'a [Process]) -> Vec<&'a Process> {
        self.said
            .retain(|pid| processes.iter().any(|p| p.pid == *pid));
        processes
            .iter()
            .filter(|p| p.fds.is_some_and(|n| n > SELECT_LIMIT) && self.said.insert(p.pid))
            .collect()
    }
}

/// The warning for a process past the `select()` line.
pub fn select_warning(process: &Process) -> String {
    format!(
        "process {} ({}) holds {} descriptors, past 1,024: select() cannot watch a \
         descriptor numbered 1,024 or more, so code that uses it (directly or through an \
         old library) fails or corrupts memory from now on; move it to poll()/epoll, or \
         find what holds so many (a leak shows as a figure that only grows)",
        process.pid,
        process.name,
        process.fds.unwrap_or(0)
    )
}

/// Each process's soft descriptor limit as last read, with the name it had then: a
/// process that execs another program (lifeguard's own child before it becomes the
/// app, with lifeguard's raised limit) is read again at once.
type Limits = HashMap<i32, (String, Option<Option<u64>>)>;

/// How descriptors are counted, decided once from lifeguard's own /proc entry.
enum FdCounter {
    /// `stat()` of /proc/PID/fd gives the number of open descriptors as its size
    /// (Linux 6.2): one system call whatever the count, and no permission needed beyond
    /// seeing the process (Docker's default capabilities may not list another user's
    /// descriptors, but may count them this way).
    Size,
    /// Older kernels: the directory listed, one entry per descriptor (about 0.3 µs
    /// each), held between listings by the duty rule; by process.
    Listing(HashMap<i32, Listed>),
}

struct Listed {
    count: u64,
    at: Instant,
    cost: Duration,
}

impl FdCounter {
    fn detect() -> FdCounter {
        // lifeguard always holds descriptors, so a size of 0 means the kernel does not
        // report counts there.
        match std::fs::metadata("/proc/self/fd") {
            Ok(meta) if meta.len() > 0 => FdCounter::Size,
            _ => {
                crate::logging::info(
                    "metrics: this kernel does not count descriptors in /proc/PID/fd's size \
                     (Linux 6.2): the app's are counted by listing, at most 0.1 % of a core",
                    &[],
                );
                FdCounter::Listing(HashMap::new())
            }
        }
    }

    /// The count of `pid`'s descriptors in `dir`: Err when the process is gone,
    /// Ok(None) when it may not be counted.
    fn count(&mut self, pid: i32, dir: &str, now: Instant) -> io::Result<Option<u64>> {
        match self {
            FdCounter::Size => match std::fs::metadata(dir) {
                Ok(meta) => Ok(Some(meta.len())),
                Err(err) if gone(&err) => Err(err),
                Err(_) => Ok(None),
            },
            FdCounter::Listing(listed) => {
                if let Some(last) = listed.get(&pid) {
                    if now.saturating_duration_since(last.at) < last.cost * LISTING_DUTY {
                        return Ok(Some(last.count));
                    }
                }
                let started = Instant::now();
                match std::fs::read_dir(dir) {
                    Ok(entries) => {
                        let count = entries.count() as u64;
                        let cost = started.elapsed();
                        listed.insert(
                            pid,
                            Listed {
                                count,
                                at: now,
                                cost,
                            },
                        );
                        Ok(Some(count))
                    }
                    Err(err) if gone(&err) => Err(err),
                    Err(_) => Ok(None),
                }
            }
        }
    }

    fn forget_all_but(&mut self, live: &HashSet<i32>) {
        if let FdCounter::Listing(listed) = self {
            listed.retain(|pid, _| live.contains(pid));
        }
    }
}

/// The process (or thread) behind a /proc entry no longer exists.
fn gone(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::NotFound || err.raw_os_error() == Some(libc::ESRCH)
}

/// What one reading of the tree gives: the figures, and the processes that passed the
/// `select()` line since the last reading.
#[derive(Debug, Default)]
pub struct TreeReading {
    pub figures: AppFigures,
    pub crossed: Vec<Process>,
    /// The /proc pids of the processes read (for a per-thread look when needed).
    pub pids: Vec<i32>,
}

/// Reads the tree once a sample. The walk of the child lists (the costly part with many
/// threads: one read per thread) runs only when the tree may have changed: a new pid
/// in lifeguard's PID namespace (`ns_last_pid`, every process and thread created there
/// takes one) or a change in lifeguard's own children (an orphan from outside the tree,
/// say of a `docker exec`); in between, the processes found last time are read again.
pub struct TreeReader {
    known: Vec<i32>,
    /// `ns_last_pid` and lifeguard's own children when the tree was last walked.
    walked_at: Option<(String, Vec<i32>)>,
    limits: Limits,
    samples: u32,
    fds: Option<FdCounter>,
    select_line: SelectLine,
    /// The helper process's own /proc pid (the sampler runs in it): a child of
    /// lifeguard, but none of the app's processes, threads, descriptors or memory.
    me: Option<i32>,
}

impl Default for TreeReader {
    fn default() -> Self {
        Self::new()
    }
}

impl TreeReader {
    pub fn new() -> Self {
        TreeReader {
            known: Vec::new(),
            walked_at: None,
            limits: HashMap::new(),
            samples: 0,
            fds: None,
            select_line: SelectLine::default(),
            me: kernel::proc_self_pid(),
        }
    }

    pub fn read(&mut self) -> TreeReading {
        let now = Instant::now();
        // Read before the walk: a pid taken during it shows as a change next time.
        let marks = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
            .ok()
            .zip(kernel::own_children());
        if marks.is_none() || marks != self.walked_at {
            match kernel::descendant_proc_pids() {
                Some(mut pids) => {
                    pids.retain(|pid| Some(*pid) != self.me);
                    self.known = pids
                }
                // /proc shows nothing of lifeguard: no figures at all.
                None => return TreeReading::default(),
            }
            self.walked_at = marks;
        }
        let refresh_limits = self.samples.is_multiple_of(LIMITS_EVERY);
        self.samples = self.samples.wrapping_add(1);
        let fds = self.fds.get_or_insert_with(FdCounter::detect);
        let mut source = Live { fds, now };
        let processes = read_all(&self.known, &mut source, &mut self.limits, refresh_limits);
        let live: HashSet<i32> = processes.iter().map(|p| p.pid).collect();
        self.known.retain(|pid| live.contains(pid));
        self.limits.retain(|pid, _| live.contains(pid));
        source.fds.forget_all_but(&live);
        TreeReading {
            pids: self.known.clone(),
            figures: total(&processes),
            crossed: self
                .select_line
                .crossed(&processes)
                .into_iter()
                .cloned()
                .collect(),
        }
    }
}

/// The processes of `pids` that are still there.
fn read_all(
    pids: &[i32],
    proc: &mut impl ProcSource,
    limits: &mut Limits,
    refresh_limits: bool,
) -> Vec<Process> {
    pids.iter()
        .filter_map(|&pid| read_process(pid, proc, limits, refresh_limits))
        .collect()
}

/// What reading a process needs of /proc: a seam, so that the rules can be tested on a
/// /proc that changes or refuses under them.
trait ProcSource {
    fn text(&mut self, path: &str) -> io::Result<String>;
    /// The thread ids of `pid`.
    fn tasks(&mut self, pid: i32) -> io::Result<Vec<i32>>;
    /// `pid`'s open descriptors, counted in `dir` (Ok(None): it may not be counted).
    fn fds(&mut self, pid: i32, dir: &str) -> io::Result<Option<u64>>;
}

/// The real /proc.
struct Live<'a> {
    fds: &'a mut FdCounter,
    now: Instant,
}

impl ProcSource for Live<'_> {
    fn text(&mut self, path: &str) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn tasks(&mut self, pid: i32) -> io::Result<Vec<i32>> {
        Ok(std::fs::read_dir(format!("/proc/{pid}/task"))?
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect())
    }

    fn fds(&mut self, pid: i32, dir: &str) -> io::Result<Option<u64>> {
        self.fds.count(pid, dir, self.now)
    }
}

/// One process's figures; None when it is gone (it exited and was reaped during the
/// walk: it is left out whole, as if the walk had come a moment later). What is there
/// but may not be read is None in its figure, which leaves that figure out of the sample.
fn read_process(
    pid: i32,
    proc: &mut impl ProcSource,
    limits: &mut Limits,
    refresh_limits: bool,
) -> Option<Process> {
    let status = match proc.text(&format!("/proc/{pid}/status")) {
        Ok(text) => parse_status(&text),
        Err(err) if gone(&err) => return None,
        Err(_) => None,
    };
    let Some(status) = status else {
        // There but unreadable: a process, with every other figure unknown.
        return Some(Process {
            pid,
            name: String::new(),
            dead: false,
            threads: None,
            fds: None,
            rss_bytes: None,
            nofile: None,
        });
    };
    // A leader that exited ahead of its threads shows as a zombie with nothing under
    // its own entry; its memory and descriptors are read through a live thread's.
    let (dead, rss_bytes, fd_dir) = if status.exited {
        let live = match proc.tasks(pid) {
            Ok(tids) => tids.into_iter().find(|tid| *tid != pid),
            Err(err) if gone(&err) => return None,
            Err(_) => None,
        };
        match live {
            Some(tid) => (
                false,
                proc.text(&format!("/proc/{pid}/task/{tid}/status"))
                    .ok()
                    .and_then(|text| parse_status(&text))
                    .and_then(|s| s.rss_bytes),
                Some(format!("/proc/{pid}/task/{tid}/fd")),
            ),
            None => (true, Some(0), None),
        }
    } else {
        (false, status.rss_bytes, Some(format!("/proc/{pid}/fd")))
    };
    let open = match fd_dir {
        None => Some(0),
        Some(dir) => match proc.fds(pid, &dir) {
            Ok(count) => count,
            Err(_) => return None,
        },
    };
    let nofile = if dead {
        None
    } else {
        match limits.get(&pid) {
            Some((name, known)) if !refresh_limits && *name == status.name => *known,
            _ => {
                let read = match proc.text(&format!("/proc/{pid}/limits")) {
                    Ok(text) => parse_nofile_soft(&text),
                    Err(err) if gone(&err) => return None,
                    Err(_) => None,
                };
                limits.insert(pid, (status.name.clone(), read));
                read
            }
        }
    };
    Some(Process {
        pid,
        name: status.name,
        dead,
        threads: Some(status.threads),
        fds: open,
        rss_bytes,
        nofile,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /proc/PID/status of a Python server on Linux 6.18 (recorded, abridged).
    const STATUS: &str = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t3121\n\
        Ngid:\t0\nPid:\t3121\nPPid:\t3101\nTracerPid:\t0\nUid:\t0\t0\t0\t0\n\
        FDSize:\t16384\nNSpid:\t3121\nVmPeak:\t  263112 kB\nVmSize:\t  263112 kB\n\
        VmHWM:\t   12620 kB\nVmRSS:\t   12620 kB\nRssAnon:\t    5120 kB\n\
        RssFile:\t    7500 kB\nRssShmem:\t       0 kB\nThreads:\t200\n\
        SigQ:\t0/94424\nSigPnd:\t0000000000000000\n";
    /// A zombie whose leader exited while another thread runs on.
    const ZOMBIE_LEADER: &str = "Name:\tlifeguard-testa\nState:\tZ (zombie)\nTgid:\t2820\n\
        PPid:\t2790\nThreads:\t2\nSigQ:\t0/94424\n";
    /// A zombie with no thread left.
    const ZOMBIE: &str = "Name:\tpython3\nState:\tZ (zombie)\nPPid:\t2855\nThreads:\t1\n";
    /// The same process after it exec'd another program.
    const EXECD: &str = "Name:\tnode\nState:\tS (sleeping)\nThreads:\t11\n\
        VmRSS:\t 40000 kB\n";
    const LIMITS_4096: &str =
        "Max open files            4096                 524288               files\n";
    /// /proc/PID/limits, recorded.
    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units     \n\
        Max cpu time              unlimited            unlimited            seconds   \n\
        Max processes             94424                94424                processes \n\
        Max open files            1024                 524288               files     \n\
        Max locked memory         8388608              8388608              bytes     \n";

    #[test]
    fn status_fields() {
        let cases: &[(&str, Option<Status>)] = &[
            (
                STATUS,
                Some(Status {
                    name: "python3".into(),
                    exited: false,
                    threads: 200,
                    rss_bytes: Some(12620 * 1024),
                }),
            ),
            (
                ZOMBIE_LEADER,
                Some(Status {
                    name: "lifeguard-testa".into(),
                    exited: true,
                    threads: 2,
                    rss_bytes: None,
                }),
            ),
            (
                ZOMBIE,
                Some(Status {
                    name: "python3".into(),
                    exited: true,
                    threads: 1,
                    rss_bytes: None,
                }),
            ),
            // A name with a colon and spaces stays whole.
            (
                "Name:\tweb: worker 1\nState:\tR (running)\nThreads:\t4\nVmRSS:\t 8 kB\n",
                Some(Status {
                    name: "web: worker 1".into(),
                    exited: false,
                    threads: 4,
                    rss_bytes: Some(8192),
                }),
            ),
            // A garbled memory line is no figure, never a wrong one.
            (
                "State:\tS (sleeping)\nThreads:\t1\nVmRSS:\t12 MB\n",
                Some(Status {
                    name: String::new(),
                    exited: false,
                    threads: 1,
                    rss_bytes: None,
                }),
            ),
            // Cut short (the process went while it was read) or not a status file.
            ("Name:\tpython3\nState:\tS (sleeping)\n", None),
            ("State:\tS (sleeping)\nThreads:\tmany\n", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(&parse_status(text), want, "{text:?}");
        }
    }

    #[test]
    fn nofile_soft_limit() {
        assert_eq!(parse_nofile_soft(LIMITS), Some(Some(1024)));
        let unlimited = LIMITS.replace("1024                 524288", "unlimited  unlimited");
        assert_eq!(parse_nofile_soft(&unlimited), Some(None));
        assert_eq!(
            parse_nofile_soft("Max open files  lots  524288  files\n"),
            None
        );
        assert_eq!(
            parse_nofile_soft("Max cpu time  unlimited  unlimited  seconds\n"),
            None
        );
        assert_eq!(parse_nofile_soft(""), None);
    }

    fn process(pid: i32, threads: u64, fds: u64, rss: u64, nofile: u64) -> Process {
        Process {
            pid,
            name: format!("p{pid}"),
            dead: false,
            threads: Some(threads),
            fds: Some(fds),
            rss_bytes: Some(rss),
            nofile: Some(Some(nofile)),
        }
    }

    #[test]
    fn totals_are_whole_or_absent() {
        let master = process(10, 1, 8, 20 << 20, 65536);
        let worker = process(11, 4, 300, 50 << 20, 1024);
        let dead = Process {
            dead: true,
            threads: Some(1),
            fds: Some(0),
            rss_bytes: Some(0),
            nofile: None,
            ..process(12, 0, 0, 0, 0)
        };
        let figures = |ps: &[Process]| total(ps);
        // Sums, and the smallest limit of the processes that can still open one.
        assert_eq!(
            figures(&[master.clone(), worker.clone(), dead.clone()]),
            AppFigures {
                processes: Some(3),
                threads: Some(6),
                open_fds: Some(308),
                max_fds: Some(1024),
                resident_bytes: Some(70 << 20),
                threads_running: None,
            }
        );
        // One process that may not be read leaves its figures out, never a short sum;
        // it still counts as a process.
        let hidden = Process {
            threads: None,
            fds: None,
            rss_bytes: None,
            nofile: None,
            ..process(13, 0, 0, 0, 0)
        };
        assert_eq!(
            figures(&[master.clone(), hidden.clone()]),
            AppFigures {
                processes: Some(2),
                threads: None,
                open_fds: None,
                max_fds: None,
                resident_bytes: None,
                threads_running: None,
            }
        );
        // Only its descriptors unreadable: the rest stands.
        let no_fds = Process {
            fds: None,
            ..worker.clone()
        };
        let got = figures(&[master.clone(), no_fds]);
        assert_eq!((got.open_fds, got.threads), (None, Some(5)));
        // Unlimited is no limit; nothing at all: no figure.
        let unlimited = Process {
            nofile: Some(None),
            ..master.clone()
        };
        assert_eq!(figures(&[unlimited.clone(), worker]).max_fds, Some(1024));
        assert_eq!(figures(&[unlimited]).max_fds, None);
        // The app gone: nothing running, no limit.
        assert_eq!(
            figures(&[]),
            AppFigures {
                processes: Some(0),
                threads: Some(0),
                open_fds: Some(0),
                max_fds: None,
                resident_bytes: Some(0),
                threads_running: None,
            }
        );
    }

    #[test]
    fn the_select_line_is_said_once_per_process() {
        let mut line = SelectLine::default();
        let pids = |ps: Vec<&Process>| ps.iter().map(|p| p.pid).collect::<Vec<_>>();
        let at = |pid, fds| process(pid, 1, fds, 0, 4096);
        // At the line is not past it.
        assert_eq!(
            pids(line.crossed(&[at(1, 1024), at(2, 10)])),
            Vec::<i32>::new()
        );
        assert_eq!(pids(line.crossed(&[at(1, 1025), at(2, 10)])), vec![1]);
        // Still past, or back under and past again: said already.
        assert_eq!(pids(line.crossed(&[at(1, 5000), at(2, 2000)])), vec![2]);
        assert_eq!(
            pids(line.crossed(&[at(1, 10), at(2, 2000)])),
            Vec::<i32>::new()
        );
        assert_eq!(
            pids(line.crossed(&[at(1, 1100), at(2, 2000)])),
            Vec::<i32>::new()
        );
        // Unreadable says nothing; a process that is gone is forgotten (its pid may
        // come back as another process).
        let unread = Process {
            fds: None,
            ..at(3, 0)
        };
        assert_eq!(pids(line.crossed(&[unread])), Vec::<i32>::new());
        assert_eq!(pids(line.crossed(&[at(1, 1100)])), vec![1]);
        let text = select_warning(&at(1, 1100));
        assert!(
            text.contains("process 1 (p1) holds 1100 descriptors"),
            "{text}"
        );
    }

    /// A /proc that holds what a test puts in it; anything else is not there (ENOENT).
    #[derive(Default)]
    struct FakeProc {
        files: HashMap<String, Result<&'static str, i32>>,
        tasks: HashMap<i32, Vec<i32>>,
        fds: HashMap<String, Result<Option<u64>, i32>>,
    }

    impl ProcSource for FakeProc {
        fn text(&mut self, path: &str) -> io::Result<String> {
            match self.files.get(path) {
                Some(Ok(text)) => Ok(text.to_string()),
                Some(Err(errno)) => Err(io::Error::from_raw_os_error(*errno)),
                None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
        }

        fn tasks(&mut self, pid: i32) -> io::Result<Vec<i32>> {
            self.tasks
                .get(&pid)
                .cloned()
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
        }

        fn fds(&mut self, _pid: i32, dir: &str) -> io::Result<Option<u64>> {
            match self.fds.get(dir) {
                Some(Ok(count)) => Ok(*count),
                Some(Err(errno)) => Err(io::Error::from_raw_os_error(*errno)),
                None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
            }
        }
    }

    impl FakeProc {
        /// A running process with `STATUS`'s figures (200 threads, 12,620 kB), `fds`
        /// descriptors and `LIMITS` (soft 1,024).
        fn running(mut self, pid: i32, fds: u64) -> Self {
            self.files.insert(format!("/proc/{pid}/status"), Ok(STATUS));
            self.files.insert(format!("/proc/{pid}/limits"), Ok(LIMITS));
            self.fds.insert(format!("/proc/{pid}/fd"), Ok(Some(fds)));
            self
        }

        fn file(mut self, path: &str, content: Result<&'static str, i32>) -> Self {
            self.files.insert(path.to_string(), content);
            self
        }

        fn fd_dir(mut self, path: &str, count: Result<Option<u64>, i32>) -> Self {
            self.fds.insert(path.to_string(), count);
            self
        }
    }

    fn read_one(mut proc: FakeProc, pid: i32) -> Option<Process> {
        read_process(pid, &mut proc, &mut HashMap::new(), true)
    }

    #[test]
    fn a_process_that_vanishes_or_refuses_costs_its_figures_never_a_wrong_one() {
        let full = Process {
            pid: 20,
            name: "python3".into(),
            dead: false,
            threads: Some(200),
            fds: Some(10_005),
            rss_bytes: Some(12620 * 1024),
            nofile: Some(Some(1024)),
        };
        let unknown = Process {
            name: String::new(),
            threads: None,
            fds: None,
            rss_bytes: None,
            nofile: None,
            ..full.clone()
        };
        let running = || FakeProc::default().running(20, 10_005);
        let cases: Vec<(&str, FakeProc, Option<Process>)> = vec![
            ("all there", running(), Some(full.clone())),
            // Gone at any step: left out whole, as if the walk had come later.
            ("gone before its status", FakeProc::default(), None),
            (
                "gone between status and descriptors",
                running().fd_dir("/proc/20/fd", Err(libc::ENOENT)),
                None,
            ),
            (
                "gone before its limits",
                running().file("/proc/20/limits", Err(libc::ESRCH)),
                None,
            ),
            // There but refused: a process, with what could not be read unknown.
            (
                "status refused",
                running().file("/proc/20/status", Err(libc::EACCES)),
                Some(unknown.clone()),
            ),
            (
                "status garbled",
                running().file("/proc/20/status", Ok("Name:\tpython3\n")),
                Some(unknown.clone()),
            ),
            (
                "descriptors may not be counted",
                running().fd_dir("/proc/20/fd", Ok(None)),
                Some(Process {
                    fds: None,
                    ..full.clone()
                }),
            ),
            (
                "limits refused",
                running().file("/proc/20/limits", Err(libc::EACCES)),
                Some(Process {
                    nofile: None,
                    ..full.clone()
                }),
            ),
        ];
        for (what, proc, want) in cases {
            assert_eq!(read_one(proc, 20), want, "{what}");
        }
    }

    #[test]
    fn a_leader_that_exited_ahead_of_its_threads_is_read_through_one() {
        let mut proc = FakeProc::default()
            .running(30, 0)
            .file("/proc/30/status", Ok(ZOMBIE_LEADER))
            .file("/proc/30/task/31/status", Ok(STATUS))
            .fd_dir("/proc/30/fd", Ok(Some(0)))
            .fd_dir("/proc/30/task/31/fd", Ok(Some(6)));
        proc.tasks.insert(30, vec![30, 31]);
        assert_eq!(
            read_one(proc, 30),
            Some(Process {
                pid: 30,
                name: "lifeguard-testa".into(),
                dead: false,
                threads: Some(2),
                fds: Some(6),
                rss_bytes: Some(12620 * 1024),
                nofile: Some(Some(1024)),
            })
        );
        // A zombie with no thread left holds nothing, and its limit cannot bite.
        let mut proc = FakeProc::default()
            .running(40, 0)
            .file("/proc/40/status", Ok(ZOMBIE));
        proc.tasks.insert(40, vec![40]);
        let dead = read_one(proc, 40).unwrap();
        assert!(dead.dead, "{dead:?}");
        assert_eq!(
            (dead.fds, dead.rss_bytes, dead.nofile, dead.threads),
            (Some(0), Some(0), None, Some(1))
        );
    }

    #[test]
    fn a_walk_over_a_changing_tree_sums_only_what_it_could_read_whole() {
        // 20 runs on; 21 exited during the walk; 22 refuses its descriptors this time.
        let mut proc = FakeProc::default()
            .running(20, 100)
            .running(21, 5)
            .fd_dir("/proc/21/fd", Err(libc::ENOENT))
            .running(22, 7)
            .fd_dir("/proc/22/fd", Ok(None));
        let mut limits = HashMap::new();
        let read = read_all(&[20, 21, 22], &mut proc, &mut limits, true);
        assert_eq!(
            total(&read),
            AppFigures {
                processes: Some(2),
                threads: Some(400),
                open_fds: None,
                max_fds: Some(1024),
                resident_bytes: Some(2 * 12620 * 1024),
                threads_running: None,
            }
        );
        // Next sample 22 may be counted again: the figure is back. Limits come from the
        // cache between refreshes (one that disappears is not asked for).
        proc.fds.insert("/proc/22/fd".into(), Ok(Some(7)));
        proc.files.remove("/proc/22/limits");
        let read = read_all(&[20, 22], &mut proc, &mut limits, false);
        let figures = total(&read);
        assert_eq!((figures.open_fds, figures.max_fds), (Some(107), Some(1024)));
        // 20 execs another program with a higher limit: read again, not taken from the
        // cache.
        proc.files.insert("/proc/20/status".into(), Ok(EXECD));
        proc.files.insert("/proc/20/limits".into(), Ok(LIMITS_4096));
        proc.files.insert("/proc/22/limits".into(), Ok(LIMITS_4096));
        let read = read_all(&[20, 22], &mut proc, &mut limits, false);
        assert_eq!(
            read.iter().map(|p| p.nofile).collect::<Vec<_>>(),
            vec![Some(Some(4096)), Some(Some(1024))]
        );
    }

    #[test]
    fn descriptors_are_counted_both_ways_and_a_listing_is_held_for_its_duty() {
        // A child that holds its descriptors still.
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let dir = format!("/proc/{pid}/fd");
        // Until its exec has closed what it must not inherit (spawn may return before):
        // asleep as `sleep`. The name alone is not enough, as the kernel renames the
        // process before it closes the close-on-exec descriptors (a run once counted one
        // descriptor more by listing than by size a moment later).
        let deadline = Instant::now() + Duration::from_secs(10);
        let asleep = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (name, rest) = stat.split_once(") ")?;
            (name.ends_with("(sleep") && rest.starts_with('S')).then_some(())
        };
        while asleep().is_none() {
            assert!(Instant::now() < deadline, "the child never slept as sleep");
            std::thread::yield_now();
        }
        let now = Instant::now();
        let mut listing = FdCounter::Listing(HashMap::new());
        let counted = listing.count(pid, &dir, now);
        let sized = FdCounter::Size.count(pid, &dir, now);
        let size_works = matches!(FdCounter::detect(), FdCounter::Size);
        let _ = child.kill();
        let _ = child.wait();
        // Its standard three, and whatever the test runner lets children inherit (cargo's
        // jobserver pipe): the two ways agree on a process that holds still.
        let counted = counted.unwrap().unwrap();
        assert!(counted >= 3, "{counted}");
        if size_works {
            assert_eq!(sized.unwrap(), Some(counted));
        }
        // A listing that cost 1 ms stands for 1 s; then the directory is listed again.
        let own = std::process::id() as i32;
        let own_dir = format!("/proc/{own}/fd");
        let mut held = FdCounter::Listing(HashMap::from([(
            own,
            Listed {
                count: 999_999,
                at: now,
                cost: Duration::from_millis(1),
            },
        )]));
        let later = |ms| now + Duration::from_millis(ms);
        assert_eq!(
            held.count(own, &own_dir, later(900)).unwrap(),
            Some(999_999)
        );
        assert_ne!(
            held.count(own, &own_dir, later(1000)).unwrap(),
            Some(999_999)
        );
        // A process that is gone is an error (it is left out), not a count.
        for mut counter in [FdCounter::Size, FdCounter::Listing(HashMap::new())] {
            let err = counter.count(pid, &dir, later(5000)).unwrap_err();
            assert!(gone(&err), "{err}");
        }
    }
}
