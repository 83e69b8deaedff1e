//! /proc: which namespace's it is (docs/lifecycle.md: whose /proc), lifeguard's descendants
//! through the kernel's child lists (for supervision, and their /proc pids for the
//! sampler), and a process's signal state.
#![allow(unsafe_code)]

use super::kill::own_pid;
use crate::signal_names::Signal;

/// Whether `signal`'s default action does not apply to `process`: a handler installed,
/// the signal blocked (to be read with sigwait/signalfd) or ignored: SigCgt, SigBlk and
/// SigIgn in its /proc status.
pub fn handles(process: &Descendant, signal: Signal) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", process.proc_pid)) else {
        return false;
    };
    let bits = |field| status_mask(&status, field);
    (bits("SigCgt:") | bits("SigBlk:") | bits("SigIgn:")) & (1 << (signal.0 - 1)) != 0
}

/// A signal mask of a /proc status text (`SigCgt:`, `ShdPnd:` …); 0 when the line is
/// missing or unreadable.
fn status_mask(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0)
}

/// The fields of a /proc/PID/stat that the walks use.
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    state: char,
    ppid: i32,
    pgrp: i32,
}

fn read_stat(proc_pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{proc_pid}/stat")).ok()?)
}

/// `pid (comm) state ppid pgrp …` (proc(5)). The name may hold spaces and parentheses
/// of its own, so the fields start after the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Stat { state, ppid, pgrp })
}

/// A process below lifeguard.
#[derive(Clone, Copy, Debug)]
pub struct Descendant {
    /// Its pid and process group in lifeguard's PID namespace (what kill takes).
    pub pid: i32,
    pub pgid: i32,
    /// Its pid in the namespace /proc belongs to (what /proc paths take): the same as
    /// `pid` unless /proc is an outer namespace's.
    pub proc_pid: i32,
    /// Exited, not reaped yet (state Z): nothing left to signal — unless its other
    /// threads still run (a main thread that exited shows Z while they do), which
    /// its children list, read by the walk, still shows.
    pub zombie: bool,
}

/// How the mounted /proc relates to lifeguard's PID namespace (docs/lifecycle.md, "Whose
/// /proc"). `unshare --pid --fork` without `--mount-proc`, and some
/// sandboxes, leave PID 1 with the host's /proc, where /proc/1 is the host's init.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcView {
    /// /proc is this namespace's.
    Own,
    /// /proc is an outer namespace's: lifeguard is `self_pid` there, and a process's
    /// pid in lifeguard's namespace is entry `depth` of its NSpid line.
    Outer { self_pid: i32, depth: usize },
    /// /proc does not show lifeguard at all (an unrelated namespace's).
    Blind,
}

impl ProcView {
    /// lifeguard's own pid in this /proc, where a walk of its descendants starts.
    fn own_entry(self) -> Option<i32> {
        match self {
            ProcView::Own => Some(own_pid()),
            ProcView::Outer { self_pid, .. } => Some(self_pid),
            ProcView::Blind => None,
        }
    }
}

/// Decided once, on first use (nothing at start-up pays for it).
pub fn proc_view() -> ProcView {
    static VIEW: std::sync::OnceLock<ProcView> = std::sync::OnceLock::new();
    *VIEW.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok();
        decide_proc_view(own_pid(), proc_self_pid(), status.as_deref())
    })
}

/// This process's pid in the /proc it sees (in the helper, its own entry, which the
/// sampler leaves out of the app's figures).
pub fn proc_self_pid() -> Option<i32> {
    std::fs::read_link("/proc/self")
        .ok()?
        .to_str()?
        .parse()
        .ok()
}

/// The pure rule: `seen` is what /proc/self points to, `status` /proc/self/status.
fn decide_proc_view(own: i32, seen: Option<i32>, status: Option<&str>) -> ProcView {
    match seen {
        Some(pid) if pid == own => ProcView::Own,
        Some(self_pid) => match status.and_then(|s| ns_ids(s, "NSpid:")) {
            // The innermost entry is lifeguard's own namespace.
            Some(ids) if ids.last() == Some(&own) => ProcView::Outer {
                self_pid,
                depth: ids.len() - 1,
            },
            _ => ProcView::Blind,
        },
        None => ProcView::Blind,
    }
}

/// The ids of an `NSpid:`/`NSpgid:` line of a /proc status: outermost first.
fn ns_ids(status: &str, field: &str) -> Option<Vec<i32>> {
    let line = status.lines().find_map(|l| l.strip_prefix(field))?;
    line.split_whitespace().map(|id| id.parse().ok()).collect()
}

/// Every descendant of lifeguard but those in `prune` and everything below them (the
/// helper processes). Walks the kernel's child lists
/// (/proc/PID/task/TID/children) down from lifeguard, so the cost is the size of the
/// tree, not of the host's process table; with an outer namespace's /proc the walk
/// starts at /proc/self and each pid is translated through NSpid/NSpgid; with a /proc
/// that does not show lifeguard there is nothing to walk (as PID 1, `kill(-1)` still
/// reaches the namespace). Falls back to a full /proc scan on kernels built without
/// child lists (CONFIG_PROC_CHILDREN), and only with lifeguard's own /proc.
pub fn descendants(prune: &[i32]) -> Vec<Descendant> {
    let view = proc_view();
    let Some(start) = view.own_entry() else {
        return Vec::new();
    };
    let depth = match view {
        ProcView::Outer { depth, .. } => Some(depth),
        _ => None,
    };
    let Some(mut frontier) = children_leader_last(start) else {
        return match depth {
            None => descendants_by_scan(start, prune),
            Some(_) => Vec::new(),
        };
    };
    let mut found = Vec::new();
    while let Some(proc_pid) = frontier.pop() {
        let ids = match depth {
            None => read_stat(proc_pid).map(|stat| (proc_pid, stat.pgrp, stat.state == 'Z')),
            Some(depth) => std::fs::read_to_string(format!("/proc/{proc_pid}/status"))
                .ok()
                .and_then(|status| {
                    let pid = *ns_ids(&status, "NSpid:")?.get(depth)?;
                    let pgid = *ns_ids(&status, "NSpgid:")?.get(depth)?;
                    let zombie = status
                        .lines()
                        .any(|l| l.starts_with("State:") && l.contains('Z'));
                    Some((pid, pgid, zombie))
                }),
        };
        let Some((pid, pgid, zombie)) = ids else {
            continue; // gone meanwhile
        };
        if prune.contains(&pid) {
            continue; // not the app's, nor anything it started
        }
        // A zombie's other threads may still run and have children: walked all the
        // same.
        let children = children_leader_last(proc_pid).unwrap_or_default();
        // A zombie whose threads have all gone has nothing to kill.
        let zombie = zombie && children.is_empty() && thread_count(proc_pid) <= 1;
        found.push(Descendant {
            pid,
            pgid,
            proc_pid,
            zombie,
        });
        frontier.extend(children);
    }
    found
}

/// The number of threads of a process in /proc (0 when it is gone).
fn thread_count(proc_pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{proc_pid}/task")).map_or(0, |d| d.count())
}

/// The /proc pids of lifeguard's descendants (zombies included), for the sampler's
/// figures: the walk of `descendants` without a read per process (the sampler reads
/// what it needs of each itself), in /proc's own numbering (an outer namespace's too).
/// None where /proc shows nothing of lifeguard.
///
/// The walk is not atomic, so it is ordered to lose nothing to a process or thread
/// that exits meanwhile. A thread that exits hands its children to another thread of
/// its process, the leader while it lives: each process's leader is read last. A
/// process that exits hands them to lifeguard (the subreaper, or PID 1): lifeguard's
/// own list is read again at the end, and what is new there is walked too.
pub fn descendant_proc_pids() -> Option<Vec<i32>> {
    let start = proc_view().own_entry()?;
    let Some(mut frontier) = children_leader_last(start) else {
        // A kernel without child lists: only a scan of lifeguard's own /proc can tell.
        return (proc_view() == ProcView::Own).then(|| {
            descendants_by_scan(start, &[])
                .iter()
                .map(|d| d.proc_pid)
                .collect()
        });
    };
    let mut found = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3 {
        while let Some(pid) = frontier.pop() {
            if seen.insert(pid) {
                found.push(pid);
                // Gone meanwhile: its children were handed on (read below).
                frontier.extend(children_leader_last(pid).unwrap_or_default());
            }
        }
        frontier = children_leader_last(start)?;
        frontier.retain(|pid| !seen.contains(pid));
        if frontier.is_empty() {
            break;
        }
    }
    Some(found)
}

/// lifeguard's own children, sorted: orphans land here, so a change tells the sampler
/// that its tree may have grown without a new pid. Its main thread's list alone (one
/// read, every second): the app is spawned from it, helper threads never fork, and the
/// kernel hands orphans to a subreaper's first live thread, which is its leader while
/// lifeguard runs.
pub fn own_children() -> Option<Vec<i32>> {
    let start = proc_view().own_entry()?;
    let text = std::fs::read_to_string(format!("/proc/{start}/task/{start}/children")).ok()?;
    let mut children: Vec<i32> = text
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect();
    children.sort_unstable();
    Some(children)
}

/// Children of every thread of `pid`, its leader's read last. None when the leader's
/// list cannot be read: the process is gone, or the kernel has no child lists.
fn children_leader_last(pid: i32) -> Option<Vec<i32>> {
    let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|tid| *tid != pid)
        .collect();
    tids.push(pid);
    let mut out = Vec::new();
    for tid in tids {
        match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) {
            Ok(text) => out.extend(
                text.split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            ),
            Err(_) if tid == pid => return None,
            // A thread that exited: its children went to the leader, read after it.
            Err(_) => {}
        }
    }
    Some(out)
}

fn descendants_by_scan(me: i32, prune: &[i32]) -> Vec<Descendant> {
    let Ok(all) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let table: Vec<(i32, i32, i32, bool)> = all
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(|pid| Some((pid, read_stat(pid)?)))
        .map(|(pid, s)| (pid, s.ppid, s.pgrp, s.state == 'Z'))
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![me];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid, pgid, zombie) in &table {
            if ppid == parent && pid != me && !prune.contains(&pid) {
                found.push(Descendant {
                    pid,
                    pgid,
                    proc_pid: pid,
                    zombie: zombie && thread_count(pid) <= 1,
                });
                frontier.push(pid);
            }
        }
    }
    found
}

/// Whether lifeguard has a child other than those in `besides` (the helper
/// processes), `None` where it cannot be told. One read of its child list, no walk;
/// with an outer namespace's /proc, a walk of its descendants (each translated through
/// its NSpid line); on a kernel without child lists, a scan of lifeguard's own /proc
/// (never of an outer one: no step may cost the host's process count). With a /proc that shows nothing of lifeguard, or an outer one without child
/// lists, it cannot be told: the kernel's own count (`waitid`) includes the helper, and
/// must not be what lifeguard waits for.
pub fn children_besides(besides: &[i32]) -> Option<bool> {
    let any = super::process::has_children();
    if besides.is_empty() || !any {
        return Some(any);
    }
    match (proc_view(), own_children()) {
        (ProcView::Own, Some(children)) => Some(children.iter().any(|c| !besides.contains(c))),
        // The walk tells: through NSpid in an outer /proc, by a scan of lifeguard's own
        // /proc without child lists; the helpers' subtrees left out.
        (ProcView::Outer { .. }, Some(_)) | (ProcView::Own, None) => {
            Some(!descendants(besides).is_empty())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (my (odd) app) Z 17 4240 4240 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0\n";
        assert_eq!(
            parse_stat(stat),
            Some(Stat {
                state: 'Z',
                ppid: 17,
                pgrp: 4240
            })
        );
        assert_eq!(parse_stat("4242 (cut"), None);
        assert_eq!(parse_stat("4242 (a) S x 1"), None);
        // Recorded from this machine: a shell.
        let own = "1187 (bash) S 1180 1187 1187 34816 1190 4194560 1024 2519 0 2 2 1 5 3 20 0 1 0 3312 8364032 1066 18446744073709551615 1 1 0 0 0 0 65536 3686404 1266761467 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(
            parse_stat(own).map(|s| (s.state, s.ppid, s.pgrp)),
            Some(('S', 1180, 1187))
        );
    }

    #[test]
    fn whose_proc_is_decided_from_self_and_nspid() {
        let status = "Name:\tlifeguard\nNSpid:\t48213\t1\nNSpgid:\t48213\t1\n";
        // /proc/self is lifeguard itself: its own /proc.
        assert_eq!(decide_proc_view(1, Some(1), Some(status)), ProcView::Own);
        // The host's /proc: lifeguard is 48213 there, and 1 in its namespace.
        assert_eq!(
            decide_proc_view(1, Some(48213), Some(status)),
            ProcView::Outer {
                self_pid: 48213,
                depth: 1
            }
        );
        // Three levels deep.
        let nested = "NSpid:\t900\t40\t7\n";
        assert_eq!(
            decide_proc_view(7, Some(900), Some(nested)),
            ProcView::Outer {
                self_pid: 900,
                depth: 2
            }
        );
        // A /proc where "self" is somebody else's view, or missing: blind.
        assert_eq!(
            decide_proc_view(7, Some(5), Some("NSpid:\t5\n")),
            ProcView::Blind
        );
        assert_eq!(decide_proc_view(7, None, None), ProcView::Blind);
        assert_eq!(decide_proc_view(7, Some(5), None), ProcView::Blind);
    }

    #[test]
    fn ns_id_lines_parse_outermost_first() {
        assert_eq!(ns_ids("NSpid:\t12\t3\n", "NSpid:"), Some(vec![12, 3]));
        assert_eq!(ns_ids("NSpid:\t12 x\n", "NSpid:"), None);
        assert_eq!(ns_ids("Pid:\t12\n", "NSpid:"), None);
    }
}

/// Whether the stop signal (SIGTERM unless `--stop-signal`) waits, not yet read, for
/// lifeguard (the supervisor): its /proc status's `ShdPnd` (a signal sent to the process) and `SigPnd`, read from another
/// process (the helper's endpoint). The file is opened once and read again from its
/// start each time (one pread): /proc regenerates it on every read.
pub struct SupervisorPending {
    status: std::fs::File,
    /// The last reading, and when it began (nanoseconds from `since`, plus one: zero is
    /// "never"). A reading answers every question asked before it began — a burst of
    /// probes that arrived together pays for one read, where a read per probe (12 µs:
    /// /proc builds the whole status text) halved `/readyz`'s throughput — and never
    /// one asked after: a reading kept for a fixed time once answered `ready` to a
    /// probe sent a quarter of a millisecond after the SIGTERM.
    since: std::time::Instant,
    read_at: std::sync::atomic::AtomicU64,
    pending: std::sync::atomic::AtomicBool,
    /// The stop signal (SIGTERM unless `--stop-signal`).
    stop: Signal,
}

impl SupervisorPending {
    /// None where /proc shows nothing of lifeguard.
    pub fn open(stop: Signal) -> Option<SupervisorPending> {
        let pid = proc_view().own_entry()?;
        let status = std::fs::File::open(format!("/proc/{pid}/status")).ok()?;
        Some(SupervisorPending {
            status,
            since: std::time::Instant::now(),
            read_at: std::sync::atomic::AtomicU64::new(0),
            pending: std::sync::atomic::AtomicBool::new(false),
            stop,
        })
    }

    /// Whether a SIGTERM is pending, by a reading that began no earlier than `asked`
    /// (when the question's request had been read whole: anything sent before it, a
    /// kill(2) included, is in the kernel's set by then).
    pub fn term_pending(&self, asked: std::time::Instant) -> bool {
        use std::os::unix::fs::FileExt;
        use std::sync::atomic::Ordering;
        let nanos =
            |at: std::time::Instant| at.saturating_duration_since(self.since).as_nanos() as u64 + 1;
        let last = self.read_at.load(Ordering::Acquire);
        if last != 0 && last >= nanos(asked) {
            return self.pending.load(Ordering::Acquire);
        }
        let began = nanos(std::time::Instant::now());
        let mut buf = [0u8; 4096];
        let pending = match self.status.read_at(&mut buf, 0) {
            Ok(n) => pending_in(&buf[..n], self.stop),
            Err(_) => false,
        };
        self.pending.store(pending, Ordering::Release);
        self.read_at.store(began, Ordering::Release);
        pending
    }
}

/// Whether `signal` is in the `SigPnd` or `ShdPnd` mask of a /proc status text.
fn pending_in(status: &[u8], signal: Signal) -> bool {
    let text = String::from_utf8_lossy(status);
    (status_mask(&text, "SigPnd:") | status_mask(&text, "ShdPnd:")) & (1 << (signal.0 - 1)) != 0
}

#[cfg(test)]
mod pending_tests {
    use super::*;

    #[test]
    fn a_pending_sigterm_is_read_from_either_mask() {
        let status = |sig: &str, shd: &str| {
            format!("Name:\tlifeguard\nSigPnd:\t{sig}\nShdPnd:\t{shd}\nSigBlk:\tfffffffe7ffbfeff\n")
        };
        let term = Signal(libc::SIGTERM);
        assert!(pending_in(
            status("0000000000000000", "0000000000004000").as_bytes(),
            term
        ));
        assert!(pending_in(
            status("0000000000004000", "0000000000000000").as_bytes(),
            term
        ));
        assert!(!pending_in(
            status("0000000000000000", "0000000000000002").as_bytes(),
            term
        ));
        assert!(!pending_in(b"garbage", term));
    }
}
