//! The ready port (`--ready-port`): a TCP listener that exists exactly while `/readyz`
//! would answer 200, so that a TCP probe, which the kernel answers alone, holds while
//! the app saturates its CPU quota. Absent before the app is ready and after it exits,
//! following the app check both ways, refused within 100 ms of a SIGTERM, the probes'
//! connections taken off its queue (ten thousand of them), and left as it was by a
//! helper process that is killed or stopped.
mod common;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::*;

/// A probe as Kubernetes' `tcpSocket` makes one: connect, then close.
fn probe(port: u16) -> bool {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    TcpStream::connect_timeout(&addr, Duration::from_secs(3)).is_ok()
}

fn wait_open(port: u16) {
    wait_until(&format!("the ready port {port} to listen"), || {
        probe(port).then_some(())
    });
}

fn wait_refused(port: u16) {
    wait_until(&format!("the ready port {port} to refuse"), || {
        (!probe(port)).then_some(())
    });
}

/// The accept queue of the listener on `port` (loopback or any address), from the
/// calling thread's network namespace's tcp and tcp6 tables: None while nothing listens
/// there.
fn accept_queue(port: u16) -> Option<u64> {
    let mut found = None;
    for table in ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(queues)) = (f.get(1), f.get(3), f.get(4)) else {
                continue;
            };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && *state == "0A" {
                let rx = queues
                    .split_once(':')
                    .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok())
                    .unwrap_or(0);
                *found.get_or_insert(0) += rx;
            }
        }
    }
    found
}

/// The helper process (`lifeguard-helper`, a child of lifeguard beside the app).
fn helper_of(run: &Run) -> i32 {
    wait_until("the helper process to start", || {
        children(run.pid).into_iter().find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "lifeguard-helpe")
        })
    })
}

/// lifeguard as PID 1 with `--ready-port` (and the endpoint off unless `flags` say),
/// ready once a TCP connect to `check_port` succeeds.
fn start_checked(flags: &[&str], check_port: u16, app_args: &[&str]) -> (Run, u16) {
    let ready = free_port();
    (start_checked_on(ready, flags, check_port, app_args), ready)
}

/// As `start_checked`, with the ready port given.
fn start_checked_on(ready: u16, flags: &[&str], check_port: u16, app_args: &[&str]) -> Run {
    let ready_text = ready.to_string();
    let check = format!("127.0.0.1:{check_port}");
    let mut all = vec![
        "-v",
        "--ready-port",
        &ready_text,
        "--listen",
        "127.0.0.1:0",
        "--ready-tcp",
        &check,
        "--ready-interval",
        "100ms",
    ];
    all.extend_from_slice(flags);
    start(Mode::Pid1, &args(&all, app_args))
}

#[test]
fn it_listens_exactly_while_ready_and_refuses_within_100_ms_of_a_sigterm() {
    let check_port = free_port();
    let (mut run, ready) =
        start_checked(&["--drain-delay", "2s", "--grace", "10s"], check_port, &[]);
    run.ready();
    // The app check fails (nothing listens on its port): not ready, refused.
    run.expect_log("ready port bound");
    for _ in 0..5 {
        assert!(!probe(ready), "listening before the app is ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The check passes: it listens.
    let target = TcpListener::bind(("127.0.0.1", check_port)).unwrap();
    wait_open(ready);
    run.expect_log("ready port listening");
    // The check fails again: refused; and it comes back with the check.
    drop(target);
    wait_refused(ready);
    run.expect_log("ready port closed");
    let target = TcpListener::bind(("127.0.0.1", check_port)).unwrap();
    wait_open(ready);
    // SIGTERM: refused at once, while the app is still running (its drain is 2 s).
    run.signal(libc::SIGTERM);
    let sent = Instant::now();
    while probe(ready) {
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "the ready port still listens 2 s after the SIGTERM\n{}",
            run.transcript()
        );
    }
    let refused_after = sent.elapsed();
    assert!(
        refused_after < Duration::from_millis(100),
        "refused {refused_after:?} after the SIGTERM (at most 100 ms)\n{}",
        run.transcript()
    );
    assert!(alive(run.app_pid()), "the app still runs during the drain");
    let plan = run.expect_log("draining:");
    assert!(
        plan.contains("relay_by=+2s")
            && plan.contains("sigkill_at=+10s")
            && plan.contains("ready_port=closed"),
        "{plan}"
    );
    // Never again, whatever the check says.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!probe(ready));
    run.expect_line("signal TERM");
    run.expect_exit(0);
    drop(target);
}

#[test]
fn it_is_refused_once_the_app_has_exited_while_lifeguard_waits_for_what_it_left() {
    // The app leaves a daemon that ignores SIGTERM and then exits by itself: lifeguard
    // stays until the grace deadline for the daemon, the port refused all along.
    let check_port = free_port();
    let target = TcpListener::bind(("127.0.0.1", check_port)).unwrap();
    let (mut run, ready) = start_checked(
        &["--grace", "3s", "--drain-delay", "0"],
        check_port,
        &["--daemon", "stubborn"],
    );
    run.ready();
    wait_open(ready);
    send(run.app_pid(), libc::SIGINT);
    run.expect_log("app exited");
    wait_refused(ready);
    run.expect_log("ready port closed");
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        assert!(!probe(ready), "listening after the app exited");
    }
    run.expect_exit(0);
    drop(target);
}

/// The network namespace's `TcpExt: ListenOverflows` and `ListenDrops`: a SYN dropped
/// for a full accept queue is retried by the client within its timeout, so only these
/// counters show that a probe found the queue full.
fn overflows_and_drops() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/thread-self/net/netstat").unwrap();
    let mut lines = text.lines();
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        if !names.starts_with("TcpExt:") {
            continue;
        }
        let pairs: Vec<(&str, u64)> = names
            .split_whitespace()
            .zip(values.split_whitespace())
            .filter_map(|(n, v)| Some((n, v.parse().ok()?)))
            .collect();
        let of = |name: &str| pairs.iter().find(|(n, _)| *n == name).map_or(0, |p| p.1);
        return (of("ListenOverflows"), of("ListenDrops"));
    }
    panic!("no TcpExt in /proc/net/netstat");
}

#[test]
fn ten_thousand_probes_connect_and_the_queue_is_emptied() {
    // In a network namespace of its own: the probes' 10,000 TIME_WAIT entries stay
    // there, and its overflow counters are the ready port's alone. In ten bursts of
    // 1,000, each let through once the helper has emptied the queue: the queue holds
    // 4,096, and the helper takes connections off it once a second while idle (every
    // 50 ms while probes come), so a burst of more than 4,096 within one idle second
    // overflows it (docs/lifecycle.md says so); no orchestrator probes at that rate.
    netns::in_own_netns(|| {
        let ready = free_port();
        let ready_text = ready.to_string();
        let mut run = start(Mode::Pid1, &args(&["--ready-port", &ready_text], &[]));
        run.ready();
        wait_open(ready);
        let before = overflows_and_drops();
        let started = Instant::now();
        let mut failed = 0;
        for _ in 0..10 {
            failed += (0..1_000).filter(|_| !probe(ready)).count();
            wait_until("the ready port's queue to be emptied", || {
                (accept_queue(ready) == Some(0)).then_some(())
            });
        }
        let took = started.elapsed();
        assert_eq!(
            failed,
            0,
            "of 10,000 probes in {took:?}\n{}",
            run.transcript()
        );
        assert_eq!(
            overflows_and_drops(),
            before,
            "(ListenOverflows, ListenDrops) rose: a probe's SYN was dropped and retried\n{}",
            run.transcript()
        );
        run.signal(libc::SIGTERM);
        run.expect_exit(0);
    });
}

#[test]
fn a_socket_that_tries_to_take_the_port_cannot_and_ready_means_lifeguards_port() {
    // Go, Node and Python servers bind with SO_REUSEADDR, which lets a second socket
    // bind a port whose holder does not listen, and then listen before it. The
    // squatter binds first, before lifeguard starts, and once more while lifeguard
    // waits for the app check: it never gets to listen, and the port that answers
    // when lifeguard says ready is lifeguard's (its queue is emptied by the helper).
    let check_port = free_port();
    let (mut run, ready) = {
        let ready_port = free_port();
        let early = squat(ready_port);
        let run = start_checked_on(ready_port, &[], check_port, &[]);
        run.ready();
        run.expect_log("ready port bound");
        // The early squatter, bound before lifeguard, cannot listen now.
        let listened = early.and_then(|fd| listen_on(&fd));
        assert!(
            listened.is_err(),
            "a socket bound before lifeguard listened on the ready port\n{}",
            run.transcript()
        );
        (run, ready_port)
    };
    assert!(
        squat(ready).is_err(),
        "a socket with SO_REUSEADDR bound the ready port while it was closed"
    );
    let target = TcpListener::bind(("127.0.0.1", check_port)).unwrap();
    wait_open(ready);
    run.expect_log("ready port listening");
    assert!(squat(ready).is_err());
    assert!(!run
        .stderr()
        .iter()
        .any(|l| l.contains("cannot listen on --ready-port")));
    // The probes land in lifeguard's queue, which its helper empties.
    for _ in 0..100 {
        assert!(probe(ready));
    }
    wait_until("lifeguard's helper to empty the queue", || {
        (accept_queue(ready) == Some(0)).then_some(())
    });
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    drop(target);
}

/// A socket bound to 127.0.0.1:`port` with SO_REUSEADDR, as servers bind (not listening).
fn squat(port: u16) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns; the OwnedFd closes it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let one: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let rc = libc::bind(
            fd,
            &addr as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(owned)
    }
}

fn listen_on(fd: &std::os::fd::OwnedFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: listen on a descriptor the caller owns.
    if unsafe { libc::listen(fd.as_raw_fd(), 16) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn a_stopped_or_killed_helper_leaves_it_listening_and_a_sigterm_still_closes_it() {
    let check_port = free_port();
    let target = TcpListener::bind(("127.0.0.1", check_port)).unwrap();
    let (mut run, ready) = start_checked(&["--drain-delay", "1s"], check_port, &[]);
    run.ready();
    wait_open(ready);

    // Killed: nothing changes for the probes, and a new helper takes over the queue.
    let first = helper_of(&run);
    send(first, libc::SIGKILL);
    for _ in 0..200 {
        assert!(
            probe(ready),
            "the ready port refused while the helper was down"
        );
    }
    wait_until("a new helper process", || {
        let now = helper_of(&run);
        (now != first).then_some(())
    });
    wait_until("the new helper to empty the queue", || {
        (accept_queue(ready) == Some(0)).then_some(())
    });

    // Stopped (a hung helper): the probes wait in the queue, every one connects.
    let helper = helper_of(&run);
    send(helper, libc::SIGSTOP);
    wait_until("the helper to stop", || {
        (state(helper) == Some('T')).then_some(())
    });
    for _ in 0..1000 {
        assert!(
            probe(ready),
            "the ready port refused while the helper was stopped"
        );
    }
    assert!(
        accept_queue(ready).is_some_and(|n| n >= 1000),
        "the queue holds them: {:?}",
        accept_queue(ready)
    );
    // PID 1 closes it at the SIGTERM, helper or not.
    run.signal(libc::SIGTERM);
    let sent = Instant::now();
    while probe(ready) {
        assert!(
            sent.elapsed() < Duration::from_secs(2),
            "{}",
            run.transcript()
        );
    }
    assert!(
        sent.elapsed() < Duration::from_millis(100),
        "refused {:?} after the SIGTERM with the helper stopped",
        sent.elapsed()
    );
    assert_eq!(
        accept_queue(ready),
        None,
        "no listener left, its queue reset"
    );
    send(helper, libc::SIGCONT);
    run.expect_exit(0);
    drop(target);
}
