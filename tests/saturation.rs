//! Saturation seen from outside the app (docs/metrics.md), on real
//! servers: a Python server with `listen(5)` overflowed by a burst, a connection left
//! waiting in an accept queue, an app that opens descriptors, threads and a child in
//! steps, a server without keep-alive against one with it, and the process tree read
//! while it churns, in every view of /proc, and from a lifeguard that may not list the
//! app's descriptors.
//!
//! The tests that read the namespace's TCP counters run in a network namespace of their
//! own (as a pod or an awsvpc task has one): on the host's every other test moves them.
mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use common::netns::in_own_netns;
use common::*;

/// Polls `/metrics` every 100 ms until `ok` accepts it; that scrape and how many
/// scrapes it took.
fn scrape_until(
    port: u16,
    what: &str,
    ok: impl Fn(&HashMap<String, f64>) -> bool,
) -> (HashMap<String, f64>, u64) {
    let mut last = HashMap::new();
    let until = Instant::now() + PATIENCE;
    let mut scrapes = 0;
    while Instant::now() < until {
        last = scrape(port);
        scrapes += 1;
        if ok(&last) {
            return (last, scrapes);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out waiting for {what}; last scrape: {last:?}");
}

fn figure(m: &HashMap<String, f64>, name: &str) -> Option<f64> {
    m.get(name).copied()
}

/// Waits for a sample taken after this call (the CPU counter moves with every sample);
/// that scrape, and how many scrapes it took in all.
fn next_sample(port: u16) -> (HashMap<String, f64>, u64) {
    let cpu = |m: &HashMap<String, f64>| figure(m, "lifeguard_cpu_usage_seconds_total");
    let before = cpu(&scrape(port));
    let (m, took) = scrape_until(port, "a new sample", |m| {
        cpu(m).is_some() && cpu(m) != before
    });
    (m, took + 1)
}

/// lifeguard as PID 1 with its endpoint on a free port and `flags`, supervising
/// `app` (a full command line); waits for the app's `ready` and a first sample.
fn start_app(flags: &[&str], app: &[&str]) -> (Run, u16) {
    start_app_under(&[], flags, app)
}

fn start_app_under(wrapper: &[&str], flags: &[&str], app: &[&str]) -> (Run, u16) {
    let port = free_port();
    let listen = listen_flag(port);
    let mut all = vec!["--listen", listen.as_str()];
    all.extend_from_slice(flags);
    all.push("--");
    all.extend_from_slice(app);
    let run = if wrapper.is_empty() {
        start(Mode::Pid1, &all)
    } else {
        start_under(Mode::Pid1, wrapper, &all)
    };
    run.ready();
    wait_for_answer(port, "/livez", 200, "alive");
    scrape_until(port, "a first sample", |m| {
        m.contains_key("lifeguard_cpu_usage_seconds_total")
    });
    (run, port)
}

fn python() -> &'static str {
    let found = std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "THIS TEST CANNOT RUN: no python3");
    "python3"
}

/// Log lines of lifeguard's containing `text`.
fn logged(run: &Run, text: &str) -> Vec<String> {
    run.stderr()
        .into_iter()
        .filter(|l| l.contains(text))
        .collect()
}

/// Starts `n` connections to `port` without waiting for them (non-blocking connect):
/// a burst, as a balancer's when traffic jumps.
fn burst(port: u16, n: usize) -> Vec<OwnedFd> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    let addr = SockaddrIn::new(127, 0, 0, 1, port);
    (0..n)
        .map(|_| {
            let fd = socket(
                AddressFamily::Inet,
                SockType::Stream,
                SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
                None,
            )
            .unwrap();
            match connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr) {
                Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => fd,
                Err(e) => panic!("connect: {e}"),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The listener.

/// A server with Python's socketserver default backlog of 5 that takes half a second
/// per connection, as a single-threaded server does.
const SLOW_LISTEN_5: &str = r#"
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(5)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    time.sleep(0.5)
    c.sendall(b"HTTP/1.0 200 OK\r\n\r\nok")
    c.close()
"#;

#[test]
fn a_listen_5_server_overflowed_by_a_burst_shows_backlog_overflows_and_waits() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    in_own_netns(|| {
        let app_port = free_port();
        let app_port_text = app_port.to_string();
        let (run, port) = start_app(
            &["--inflight-port", &app_port_text],
            &[python(), "-c", SLOW_LISTEN_5, &app_port_text],
        );
        let (m, _) = scrape_until(port, "the listener", |m| {
            m.contains_key("lifeguard_listen_backlog")
        });
        assert_eq!(figure(&m, "lifeguard_listen_backlog"), Some(5.0), "{m:?}");
        // A namespace of its own: nothing has overflowed yet.
        assert_eq!(figure(&m, "lifeguard_listen_overflows_total"), Some(0.0));
        assert_eq!(figure(&m, "lifeguard_listen_drops_total"), Some(0.0));
        let small = run.expect_log("with a backlog of 5");
        assert!(
            small.contains(&format!("port {app_port}")) && small.contains("backlog of 1024"),
            "{small}"
        );
        // 40 connections at once against a queue of 6 (backlog + 1) and a server that
        // takes 2 a second: the kernel drops the rest's SYNs, and drops them again when
        // they retry.
        let clients = burst(app_port, 40);
        let (m, _) = scrape_until(port, "overflows", |m| {
            figure(m, "lifeguard_listen_overflows_total") >= Some(10.0)
        });
        let overflows = m["lifeguard_listen_overflows_total"];
        assert!(m["lifeguard_listen_drops_total"] >= overflows, "{m:?}");
        assert!(m["lifeguard_accept_queue_length"] <= 6.0, "{m:?}");
        let warned = run.expect_log("because an accept queue was full");
        assert!(
            warned.contains(&format!("port {app_port}")) && warned.contains("backlog is 5"),
            "{warned}"
        );
        // The queued connections wait seconds for the slow server.
        let (m, _) = scrape_until(port, "a long wait in the queue", |m| {
            figure(m, "lifeguard_accept_queue_oldest_seconds") >= Some(1.0)
        });
        assert!(m["lifeguard_accept_queue_oldest_seconds"] < 30.0, "{m:?}");
        run.expect_log("has waited");
        // The retries go on overflowing; the warning is not repeated within the minute.
        scrape_until(port, "more overflows after the warning", |m| {
            figure(m, "lifeguard_listen_overflows_total") > Some(overflows)
        });
        next_sample(port);
        assert_eq!(
            logged(&run, "because an accept queue was full").len(),
            1,
            "{}",
            run.transcript()
        );
        assert_eq!(logged(&run, "with a backlog of").len(), 1);
        assert_eq!(logged(&run, "has waited").len(), 1);
        drop(clients);
    });
}

/// A listener that accepts nothing until SIGUSR1, then everything.
const ACCEPTS_ON_USR1: &str = r#"
import signal, socket, sys, time
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(1024)
print("ready", flush=True)
signal.sigwait([signal.SIGUSR1])
held = []
s.settimeout(0.2)
try:
    while True:
        held.append(s.accept()[0])
except OSError:
    pass
print("accepted", len(held), flush=True)
time.sleep(3600)
"#;

#[test]
fn the_oldest_queued_connection_shows_how_long_it_has_waited() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    let app_port = free_port();
    let app_port_text = app_port.to_string();
    let (run, port) = start_app(
        &["--inflight-port", &app_port_text],
        &[python(), "-c", ACCEPTS_ON_USR1, &app_port_text],
    );
    let m = scrape_until(port, "the listener", |m| {
        m.contains_key("lifeguard_listen_backlog")
    })
    .0;
    assert_eq!(m["lifeguard_accept_queue_oldest_seconds"], 0.0, "{m:?}");
    assert!(
        logged(&run, "with a backlog of").is_empty(),
        "1024 is no small backlog"
    );
    let connected = Instant::now();
    let mut client = TcpStream::connect(("127.0.0.1", app_port)).unwrap();
    scrape_until(port, "a wait of 1.5 s", |m| {
        figure(m, "lifeguard_accept_queue_oldest_seconds") >= Some(1.5)
    });
    // The request comes late: the wait counts from the handshake, not from the bytes.
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Its age at the sample that reports it: no more than it has waited by the scrape,
    // and no less than that minus the age of a sample (about a second).
    let (m, _) = scrape_until(port, "a wait of 3 s", |m| {
        figure(m, "lifeguard_accept_queue_oldest_seconds") >= Some(3.0)
    });
    let waited = connected.elapsed().as_secs_f64();
    let oldest = m["lifeguard_accept_queue_oldest_seconds"];
    assert!(
        oldest <= waited + 0.05 && oldest >= waited - 1.3,
        "reported {oldest} s after {waited} s"
    );
    assert_eq!(m["lifeguard_accept_queue_length"], 1.0);
    run.expect_log("has waited");
    // Accepted: nothing waits any more.
    run.signal(libc::SIGUSR1);
    run.expect_line("accepted 1");
    scrape_until(port, "an empty queue", |m| {
        figure(m, "lifeguard_accept_queue_oldest_seconds") == Some(0.0)
    });
    drop(client);
}

// ---------------------------------------------------------------------------------------
// New connections per request.

/// Requests answered (HTTP/1.1, Content-Length framed) on one connection.
fn requests_on(stream: &mut TcpStream, n: usize) {
    for _ in 0..n {
        write!(stream, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !String::from_utf8_lossy(&got).ends_with("hello") {
            let read = stream.read(&mut buf).unwrap();
            assert!(read > 0, "closed mid-answer");
            got.extend_from_slice(&buf[..read]);
        }
    }
}

/// The app's accepted connections per request over `requests` requests, as lifeguard's
/// counter shows it: (low, high), where the span is the scrapes of the test itself
/// (each one a connection the namespace accepted, lifeguard's own endpoint's).
fn opens_per_request(keep_alive: bool, requests: usize) -> (f64, f64) {
    in_own_netns(|| {
        let app_port = free_port();
        let app_port_text = app_port.to_string();
        let mut app = vec![TESTAPP, "--http", &app_port_text];
        if keep_alive {
            app.push("--keep-alive");
        }
        let (run, port) = start_app(&["--inflight-port", &app_port_text], &app);
        // Every scrape from here on is a connection the namespace accepts too; a sample
        // counts those made before it was taken, so all of them bound the span.
        let (m, mut scrapes) = next_sample(port);
        let before = m["lifeguard_connections_accepted_total"];
        // Connections the namespace opens but does not accept (refused: nothing listens
        // there) are no accepted connections; the counter must not move for them.
        let closed = free_port();
        for _ in 0..requests {
            assert!(TcpStream::connect(("127.0.0.1", closed)).is_err());
        }
        if keep_alive {
            let mut stream = TcpStream::connect(("127.0.0.1", app_port)).unwrap();
            requests_on(&mut stream, requests);
        } else {
            for _ in 0..requests {
                let mut stream = TcpStream::connect(("127.0.0.1", app_port)).unwrap();
                requests_on(&mut stream, 1);
            }
        }
        // A sample taken after every request had its answer.
        let (m, took) = next_sample(port);
        scrapes += took;
        let opened = m["lifeguard_connections_accepted_total"] - before;
        drop(run);
        let n = requests as f64;
        ((opened - scrapes as f64).max(0.0) / n, opened / n)
    })
}

#[test]
fn one_connection_per_request_shows_as_one_accepted_connection_per_request() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    // HTTP/1.0 style: the server closes after each answer.
    let (low, high) = opens_per_request(false, 300);
    eprintln!("without keep-alive: {low:.3}..{high:.3} accepted connections per request");
    assert!(
        low <= 1.0 && high >= 1.0 && low >= 0.9 && high <= 1.15,
        "without keep-alive: {low}..{high} per request"
    );
    // Keep-alive: one connection for all of them.
    let (low, high) = opens_per_request(true, 300);
    eprintln!("keep-alive: {low:.3}..{high:.3} accepted connections per request");
    assert!(
        low <= 1.0 / 300.0 && high < 0.15,
        "keep-alive: {low}..{high} per request"
    );
}

// ---------------------------------------------------------------------------------------
// The process tree.

/// Steps on SIGUSR1: 1) 500 descriptors, 20 threads and a child with a descriptor limit
/// of 512; 2) 1,000 more descriptors (past select()'s 1,024) and 50 threads; 3) back:
/// 1,200 descriptors closed, 60 threads ended, the child gone. After each step it
/// prints what it holds, counted from /proc: `step N pid P processes N fds N threads N
/// nofile N rss N`.
const STEPS: &str = r#"
import os, resource, signal, subprocess, threading, time
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
held, threads, children = [], [], []
def start_threads(n):
    for _ in range(n):
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        threads.append((stop, t))
def child_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("Threads:"))
def report(step):
    me = os.getpid()
    fds = len(os.listdir("/proc/self/fd")) - 1  # the listing's own
    fds += sum(len(os.listdir(f"/proc/{c.pid}/fd")) for c in children)
    pids = [me] + [c.pid for c in children]
    def field(pid, name):
        with open(f"/proc/{pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith(name + ":"))
    threads_now = sum(field(p, "Threads") for p in pids)
    rss = sum(field(p, "VmRSS") for p in pids) * 1024
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if children:
        nofile = min(nofile, 512)
    print(f"step {step} pid {me} processes {len(pids)} fds {fds} threads {threads_now} nofile {nofile} rss {rss}", flush=True)
print("ready", flush=True)
report(0)
step = 0
while True:
    signal.sigwait([signal.SIGUSR1])
    step += 1
    if step == 1:
        held += [os.open("/dev/null", os.O_RDONLY) for _ in range(500)]
        start_threads(20)
        children.append(subprocess.Popen(["sleep", "3600"], preexec_fn=child_limit))
        # Popen returns once the exec has begun; the new program's start-up may still
        # hold a descriptor for a moment (the C library's locale files), which the report
        # would count and lifeguard would not: wait (at most 5 s) until it sleeps.
        until = time.monotonic() + 5
        while time.monotonic() < until:
            try:
                with open(f"/proc/{children[-1].pid}/wchan") as f:
                    if "nanosleep" in f.read():
                        break
            except OSError:
                pass
            time.sleep(0.01)
    elif step == 2:
        held += [os.open("/dev/null", os.O_RDONLY) for _ in range(1000)]
        start_threads(50)
    elif step == 3:
        for fd in held[-1200:]:
            os.close(fd)
        del held[-1200:]
        for stop, t in threads[-60:]:
            stop.set()
            t.join()
        del threads[-60:]
        for c in children:
            c.kill()
            c.wait()
        children.clear()
        # join() returns when the thread lets go of its lock, a moment before the
        # kernel has taken the task away: wait (at most 5 s) until /proc agrees.
        until = time.monotonic() + 5
        while threads_of(os.getpid()) > 1 + len(threads) and time.monotonic() < until:
            time.sleep(0.01)
    report(step)
"#;

/// The numbers of a `step` line.
fn step_report(line: &str) -> HashMap<String, f64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .chunks(2)
        .map(|kv| (kv[0].to_string(), kv[1].parse().unwrap()))
        .collect()
}

#[test]
fn descriptors_threads_and_processes_follow_the_app_within_2_s() {
    let (run, port) = start_app(&[], &[python(), "-c", STEPS]);
    for step in 0..=3 {
        if step > 0 {
            run.signal(libc::SIGUSR1);
        }
        let line = run.expect(|l| l.starts_with(&format!("step {step} ")), "a step");
        let told = Instant::now();
        let want = step_report(&line);
        // A sample taken after the app said what it holds.
        let then = scrape(port)["lifeguard_cpu_usage_seconds_total"];
        let (m, _) = scrape_until(port, &format!("the figures of {line}"), |m| {
            m["lifeguard_cpu_usage_seconds_total"] != then
                && figure(m, "lifeguard_app_open_fds") == Some(want["fds"])
                && figure(m, "lifeguard_app_threads") == Some(want["threads"])
                && figure(m, "lifeguard_app_processes") == Some(want["processes"])
                && figure(m, "lifeguard_app_max_fds") == Some(want["nofile"])
        });
        let followed = told.elapsed();
        assert!(
            followed <= Duration::from_secs(2),
            "step {step}: the figures took {followed:?}"
        );
        let rss = m["lifeguard_app_resident_memory_bytes"];
        assert!(
            (rss - want["rss"]).abs() <= want["rss"] * 0.25,
            "step {step}: resident {rss} against {}",
            want["rss"]
        );
        // Past 1,024 descriptors at step 2: said once, naming the process.
        if step == 2 {
            let warning = run.expect_log("past 1,024");
            assert!(
                warning.contains(&format!("process {} (python3)", want["pid"])),
                "{warning}"
            );
            // Another sample still past the line says nothing more.
            next_sample(port);
        }
    }
    next_sample(port);
    assert_eq!(logged(&run, "past 1,024").len(), 1, "{}", run.transcript());
}

/// The figures of a lone testapp as lifeguard reports them, against /proc read here.
fn lone_app_figures(mode: Mode) {
    let port = free_port();
    let listen = listen_flag(port);
    let run = start(mode, &args(&["--listen", &listen], &[]));
    run.ready();
    let app = run.app_pid();
    let status = std::fs::read_to_string(format!("/proc/{app}/status")).unwrap();
    let threads: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let fds = std::fs::read_dir(format!("/proc/{app}/fd"))
        .unwrap()
        .count() as f64;
    // A sample taken after the app was read here (it holds still once ready).
    scrape_until(port, "a first sample", |m| {
        m.contains_key("lifeguard_cpu_usage_seconds_total")
    });
    let (m, _) = next_sample(port);
    assert_eq!(m["lifeguard_app_processes"], 1.0, "[{mode:?}] {m:?}");
    assert_eq!(m["lifeguard_app_threads"], threads, "[{mode:?}]");
    assert_eq!(m["lifeguard_app_open_fds"], fds, "[{mode:?}]");
    assert!(m["lifeguard_app_max_fds"] >= 1024.0, "[{mode:?}] {m:?}");
    assert!(
        m["lifeguard_app_resident_memory_bytes"] > 100_000.0,
        "[{mode:?}]"
    );
}

#[test]
fn the_tree_is_read_in_every_view_of_proc() {
    // As PID 1 of a container, as a subreaper on the host, and as PID 1 of a namespace
    // that sees the host's /proc (pids translated).
    for mode in [Mode::Pid1, Mode::Subreaper, Mode::Pid1HostProc] {
        lone_app_figures(mode);
    }
}

#[test]
fn a_tree_that_churns_gives_whole_figures_or_none_and_never_stops_the_sampler() {
    // A shell that forks and reaps a short-lived process without pause beside a sleeper:
    // entries vanish during nearly every walk.
    for mode in [Mode::Pid1, Mode::Subreaper] {
        let port = free_port();
        let listen = listen_flag(port);
        let run = start(
            mode,
            &[
                "--listen",
                &listen,
                "--",
                "sh",
                "-c",
                "sleep 3600 & echo ready; while :; do /bin/true; done",
            ],
        );
        run.ready();
        // From a sample that already has the sleeper.
        next_sample(port);
        let mut seen = 0;
        let mut last_cpu = -1.0;
        let until = Instant::now() + Duration::from_secs(6);
        while Instant::now() < until {
            let m = scrape(port);
            let cpu = figure(&m, "lifeguard_cpu_usage_seconds_total").unwrap_or(-1.0);
            if cpu != last_cpu {
                last_cpu = cpu;
                seen += 1;
                // sh, sleep, and at most one `true` (or a fork of sh about to be one).
                if let Some(n) = figure(&m, "lifeguard_app_processes") {
                    assert!((2.0..=4.0).contains(&n), "[{mode:?}] processes {n}");
                }
                if let Some(n) = figure(&m, "lifeguard_app_threads") {
                    assert!((2.0..=4.0).contains(&n), "[{mode:?}] threads {n}");
                }
                if let Some(n) = figure(&m, "lifeguard_app_open_fds") {
                    assert!((3.0..=40.0).contains(&n), "[{mode:?}] descriptors {n}");
                }
                assert!(
                    m.iter().all(|(k, v)| {
                        !k.starts_with("lifeguard_helper_failures_total") || *v == 0.0
                    }),
                    "[{mode:?}] {m:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(seen >= 4, "[{mode:?}] only {seen} samples in 6 s");
        assert!(
            !run.stderr().iter().any(|l| l.contains("panic")),
            "{}",
            run.transcript()
        );
    }
}

/// Holds 300 descriptors and prints how many it has.
const HOLD_300: &str = r#"
import os
held = [os.open("/dev/null", os.O_RDONLY) for _ in range(300)]
print("ready", flush=True)
print("fds", len(os.listdir("/proc/self/fd")) - 1, flush=True)
import time
time.sleep(3600)
"#;

#[test]
fn descriptors_of_an_app_lifeguard_may_not_list_are_still_counted_or_left_out() {
    // lifeguard as root without the capabilities that let root into another user's
    // /proc/PID/fd (a hardened container drops them all), the app as nobody.
    let drop = "-sys_ptrace,-dac_override,-dac_read_search";
    let bounding = format!("--bounding-set={drop}");
    let inheritable = format!("--inh-caps={drop}");
    let (run, port) = start_app_under(
        &["setpriv", &bounding, &inheritable, "--"],
        &[],
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            python(),
            "-c",
            HOLD_300,
        ],
    );
    let fds: f64 = run.value("fds").parse().unwrap();
    // The setting holds: lifeguard has none of the three.
    let status = std::fs::read_to_string(format!("/proc/{}/status", run.pid)).unwrap();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap();
    const DAC_OVERRIDE: u64 = 1 << 1;
    const DAC_READ_SEARCH: u64 = 1 << 2;
    const SYS_PTRACE: u64 = 1 << 19;
    assert_eq!(effective & (DAC_OVERRIDE | DAC_READ_SEARCH | SYS_PTRACE), 0);
    let (m, _) = next_sample(port);
    // Counted by stat() on kernels that give the count as the directory's size (6.2);
    // elsewhere lifeguard would have to list the directory, which it may not: left out,
    // never a wrong number.
    let sized =
        std::fs::metadata("/proc/self/fd").map_or(0, |m| std::os::unix::fs::MetadataExt::size(&m));
    if sized > 0 {
        assert_eq!(figure(&m, "lifeguard_app_open_fds"), Some(fds), "{m:?}");
    } else {
        assert_eq!(figure(&m, "lifeguard_app_open_fds"), None, "{m:?}");
    }
    assert_eq!(figure(&m, "lifeguard_app_processes"), Some(1.0), "{m:?}");
    assert!(figure(&m, "lifeguard_app_threads") >= Some(1.0), "{m:?}");
}

// ---------------------------------------------------------------------------------------
// The quiet shortcut: a look at a namespace where no segment moved does without the walk
// of the established-socket table (metrics/inflight/quiet.rs); whatever moves is seen at the next.

/// The `sample taken` debug lines of stderr from its `from`th line on.
fn sample_lines(run: &Run, from: usize) -> Vec<String> {
    run.stderr()
        .into_iter()
        .skip(from)
        .filter(|l| l.contains("metrics: sample taken"))
        .collect()
}

/// The second sample line from the `from`th line of stderr: the first may have been
/// looking when the change came, the second looked after it.
fn second_sample_after(run: &Run, from: usize) -> String {
    wait_until("two samples after the change", || {
        sample_lines(run, from).get(1).cloned()
    })
}

/// Waits until a sample from the `from`th line of stderr on took the shortcut.
fn quiet_sample(run: &Run, from: usize) {
    wait_until("a sample of a quiet namespace", || {
        sample_lines(run, from)
            .iter()
            .any(|l| l.contains("port=listeners"))
            .then_some(())
    })
}

/// Listens on its port only after SIGUSR1.
const LISTENS_ON_USR1: &str = r#"
import signal, socket, sys, time
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
print("ready", flush=True)
signal.sigwait([signal.SIGUSR1])
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print("listening", flush=True)
time.sleep(3600)
"#;

#[test]
fn a_quiet_namespace_skips_the_walk_and_sees_a_new_listener_and_new_bytes_at_once() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    // No scrape from here on in each part: a scrape is traffic in the namespace. The
    // figures come from lifeguard's debug line of each sample.
    in_own_netns(|| {
        // A listener that appears with no segment at all in the namespace.
        let app_port = free_port();
        let app_port_text = app_port.to_string();
        let (run, _) = start_app(
            &["-vv", "--inflight-port", &app_port_text],
            &[python(), "-c", LISTENS_ON_USR1, &app_port_text],
        );
        quiet_sample(&run, run.stderr().len());
        run.signal(libc::SIGUSR1);
        run.expect_line("listening");
        let line = second_sample_after(&run, run.stderr().len());
        assert!(line.contains("queue=0"), "{line}\n{}", run.transcript());
        drop(run);

        // Bytes on an idle keep-alive connection: a request in flight at the next look.
        let app_port = free_port();
        let app_port_text = app_port.to_string();
        let (run, _) = start_app(
            &["-vv", "--inflight-port", &app_port_text],
            &[TESTAPP, "--http", &app_port_text, "--keep-alive"],
        );
        let mut stream = TcpStream::connect(("127.0.0.1", app_port)).unwrap();
        requests_on(&mut stream, 1);
        let idle = run.stderr().len();
        quiet_sample(&run, idle);
        assert!(
            sample_lines(&run, idle)
                .iter()
                .all(|l| l.contains("in_flight=0")),
            "{}",
            run.transcript()
        );
        write!(stream, "GET /slow/4000 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        run.expect_line("request /slow/4000");
        let line = second_sample_after(&run, run.stderr().len());
        assert!(line.contains("in_flight=1"), "{line}\n{}", run.transcript());
        drop(stream);
    });
}

/// The helper processes below `run` (their comm: the kernel keeps 15 characters).
fn helpers(run: &Run) -> Vec<i32> {
    descendants(run.pid)
        .into_iter()
        .filter(|&pid| {
            alive(pid)
                && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim_end() == "lifeguard-helpe")
        })
        .collect()
}

/// Starts lifeguard as PID 1 in a fresh 0.25-CPU task whose app spins 300 threads (the
/// saturation bench's setting) — with `fault`, the fault-injection build with that fault
/// armed; the task, the run and the first helper process.
fn at_the_peak(name: &str, fault: Option<&str>) -> (common::task::Task, Run, i32) {
    require_root();
    let mut task = common::task::Task::new(name);
    let group = task.container("app", 1024);
    let mut argv = common::task::Task::wrapper(&group);
    argv.extend(match fault {
        Some(_) => common::fault_build().to_vec(),
        None => lifeguard_argv().to_vec(),
    });
    let (port, app_port) = (free_port(), free_port());
    let (listen, app_port) = (listen_flag(port), app_port.to_string());
    let flags = [
        "-v",
        "--listen",
        &listen,
        "--inflight-port",
        &app_port,
        "--drain-delay",
        "0",
    ];
    let fault = fault.map(str::to_string);
    let run = common::start_program(
        &argv,
        Mode::Pid1,
        &args(&flags, &["--http", &app_port, "--burn-threads", "300"]),
        move |cmd| {
            if let Some(fault) = fault {
                cmd.env("LIFEGUARD_FAULT", fault);
            }
        },
    );
    run.ready();
    let first = wait_until_patient(Duration::from_secs(60), || helpers(&run).first().copied());
    (task, run, first)
}

#[test]
fn a_helper_thread_stopped_for_good_at_the_peak_is_replaced_within_20_s() {
    // The sampler hangs for good (a deadlock) while the app spins 300 threads in a
    // quarter of a CPU. The helper's main thread, as starved as any thread there, says
    // the hang on the Board and stops its heartbeat; supervision, which sees only that
    // starved main thread from outside, must not spare it as starved: a new helper
    // process starts within 20 s, while the peak goes on.
    let (task, run, first) = at_the_peak("lifeguard-hung-at-peak", Some("sampler:hang"));
    let throttled_before = task.throttled();
    let from = Instant::now();
    let replaced = wait_until_patient(Duration::from_secs(60), || {
        helpers(&run).into_iter().find(|&pid| pid != first)
    });
    let took = from.elapsed();
    let throttled = task.throttled() - throttled_before;
    eprintln!(
        "replaced after {took:?} at the peak (throttled {throttled} times): {first} -> {replaced}"
    );
    // At its quota in most of the 100 ms periods it waited through.
    let periods = (took.as_millis() / 100) as u64;
    assert!(
        throttled * 2 >= periods,
        "THIS TEST CANNOT RUN as meant: the task was not at its quota (throttled {throttled} times in {periods} periods)"
    );
    let said = logged(&run, "the sampler thread has not turned");
    assert!(
        said.iter().any(|l| l.contains("hung")),
        "the helper did not say the hang: {said:?}\n{}",
        run.transcript()
    );
    assert!(
        logged(&run, "waits for the CPU (starved at the quota, not hung)").is_empty(),
        "supervision spared a helper that said it hangs:\n{}",
        run.transcript()
    );
    assert!(
        took <= Duration::from_secs(20),
        "replaced only after {took:?}:\n{}",
        run.transcript()
    );
    drop(run);
}

#[test]
fn a_helper_starved_at_the_peak_is_not_restarted() {
    // The saturation bench's setting: the task at 0.25 CPU, its app spinning 300
    // threads, for a minute. The helper's threads then wait seconds for the CPU; that is
    // not a hang, and a new helper process would wait alike, spend the quota on
    // starting, and lose the sampler's state at the moment its figures matter.
    let (task, run, first) = at_the_peak("lifeguard-starved-helper", None);
    let throttled_before = task.throttled();
    let (start, mut seen) = (Instant::now(), vec![first]);
    while start.elapsed() < Duration::from_secs(60) {
        for pid in helpers(&run) {
            if !seen.contains(&pid) {
                seen.push(pid);
            }
        }
        // The window's cadence, not a wait for a condition.
        std::thread::sleep(Duration::from_millis(500));
    }
    let throttled = task.throttled() - throttled_before;
    let starved = logged(&run, "starved of CPU, not hung");
    // Said whatever the outcome: how late the helper's threads were is the point.
    eprintln!(
        "a minute at the peak (throttled {throttled} times): helper processes {seen:?}; \
         starvation said {} times: {starved:?}",
        starved.len()
    );
    assert!(
        throttled > 100,
        "THIS TEST CANNOT RUN as meant: the task was not at its quota (throttled {throttled} times)"
    );
    let restarts = logged(&run, "the helper process hangs");
    let stopped = logged(&run, "stops its heartbeat");
    assert!(
        restarts.is_empty() && stopped.is_empty() && seen.len() == 1,
        "a starved helper was taken for a hung one: {restarts:?} {stopped:?}, helpers {seen:?}\n{}",
        run.transcript()
    );
    drop(run);
}
