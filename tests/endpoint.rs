//! The health and metrics endpoint (docs/reference.md), the app checks, the graceful-shutdown
//! scenario (a naive server that closes its port on SIGTERM), hostile clients, `--listen` semantics and `--probe`.
mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::*;

/// lifeguard (in `mode`) with its endpoint on a free port, supervising the testapp with
/// `app_args`; returns once the app is ready and /livez answers.
fn start_listening(mode: Mode, flags: &[&str], app_args: &[&str]) -> (Run, u16) {
    let port = free_port();
    let listen = listen_flag(port);
    let mut all = vec!["--listen", listen.as_str()];
    all.extend_from_slice(flags);
    let run = start(mode, &args(&all, app_args));
    run.ready();
    wait_for_answer(port, "/livez", 200, "alive");
    (run, port)
}

/// lifeguard (PID 1) with its endpoint on, supervising the testapp's web server, ready
/// once the app's /health answers 2xx; waits until /readyz says ready.
struct WebApp {
    run: Run,
    /// lifeguard's endpoint.
    port: u16,
    /// The app's own port.
    app_port: u16,
    /// The app check's URL.
    url: String,
}

fn start_web_app(extra_flags: &[&str]) -> WebApp {
    start_web_app_with(extra_flags, |_| {})
}

/// As start_web_app; `tweak` may set lifeguard's environment.
fn start_web_app_with(
    extra_flags: &[&str],
    tweak: impl FnOnce(&mut std::process::Command),
) -> WebApp {
    let (port, app_port) = (free_port(), free_port());
    let listen = listen_flag(port);
    let url = format!("http://127.0.0.1:{app_port}/health");
    let app_port_text = app_port.to_string();
    let mut flags = vec![
        "--listen",
        &listen,
        "--ready-http",
        &url,
        "--ready-interval",
        "100ms",
    ];
    flags.extend_from_slice(extra_flags);
    let run = start_with(
        Mode::Pid1,
        &args(&flags, &["--http", &app_port_text]),
        tweak,
    );
    run.ready();
    wait_for_answer(port, "/readyz", 200, "ready");
    WebApp {
        run,
        port,
        app_port,
        url,
    }
}

#[test]
fn endpoints_answer_as_the_design_says() {
    let port = free_port();
    let listen = listen_flag(port);
    let mut run = start(
        Mode::Pid1,
        &args(&["--listen", &listen], &["--zombies", "5"]),
    );
    run.ready();
    run.expect_line("zombies 5");
    wait_for_answer(port, "/readyz", 200, "ready");
    assert_eq!(get(port, "/livez"), (200, "alive".into()));
    assert_eq!(get(port, "/nope").0, 404);
    let (status, _) = request(port, "HEAD", "/livez").unwrap();
    assert_eq!(status, 200);
    // HEAD carries no body.
    let text = exchange(
        port,
        "HEAD /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert!(
        text.ends_with("\r\n\r\n"),
        "HEAD answered with a body: {text:?}"
    );
    // Other methods: 405 naming the allowed ones.
    let text = exchange(
        port,
        "POST /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert!(text.starts_with("HTTP/1.1 405"), "{text}");
    assert!(text.to_lowercase().contains("allow: get, head"), "{text}");

    run.signal(libc::SIGUSR1);
    run.expect_line("signal USR1");
    // The app says "zombies 5" once their parent is gone; on a loaded machine an orphan
    // may exit (and be reaped) a little later. Likewise the app can print the signal
    // before supervision's count of it reaches the helper (the count follows the kill).
    let zombies = "lifeguard_zombies_reaped_total 5";
    let forwarded = "lifeguard_signals_forwarded_total{signal=\"SIGUSR1\"} 1";
    let metrics = wait_until("all 5 orphans and the USR1 to be counted", || {
        let (status, metrics) = get(port, "/metrics");
        let counted = |want: &str| metrics.lines().any(|l| l == want);
        (status == 200 && counted(zombies) && counted(forwarded)).then_some(metrics)
    });
    for line in [
        "# TYPE lifeguard_ready gauge",
        "lifeguard_ready 1",
        "lifeguard_draining 0",
        "lifeguard_signals_forwarded_total{signal=\"SIGUSR1\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?}:\n{metrics}"
        );
    }
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn a_flag_beats_the_other_checks_twin_and_a_blank_twin_is_unset() {
    // The image's ENV checks a port nothing listens on, and leaves one twin blank; the
    // --ready-http flag wins, and /readyz turns ready through it.
    let mut web = start_web_app_with(&[], |c| {
        c.env("LIFEGUARD_READY_TCP", "127.0.0.1:1")
            .env("LIFEGUARD_GRACE", "");
    });
    web.run.signal(libc::SIGINT);
    web.run.expect_exit(0);
    let url = web.url;

    // Two checks in the environment alone: a usage error naming both variables.
    let out = lifeguard()
        .args(["--listen", "off", "--", "true"])
        .env("LIFEGUARD_READY_TCP", "127.0.0.1:1")
        .env("LIFEGUARD_READY_HTTP", &url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("LIFEGUARD_READY_TCP") && text.contains("LIFEGUARD_READY_HTTP"),
        "{text}"
    );
}

#[test]
fn readyz_says_starting_until_the_tcp_check_passes_then_follows_it() {
    let port = free_port();
    let app_port = free_port();
    let listen = listen_flag(port);
    let target = format!("127.0.0.1:{app_port}");
    let mut run = start(
        Mode::Subreaper,
        &args(
            &[
                "--listen",
                &listen,
                "--ready-tcp",
                &target,
                "--ready-interval",
                "100ms",
            ],
            &[],
        ),
    );
    run.ready();
    wait_for_answer(port, "/livez", 200, "alive");
    assert_eq!(get(port, "/readyz"), (503, "starting".into()));
    assert!(get(port, "/metrics")
        .1
        .lines()
        .any(|l| l == "lifeguard_ready 0"));
    let app_listener = TcpListener::bind(&target).unwrap();
    wait_for_answer(port, "/readyz", 200, "ready");
    drop(app_listener);
    let answer = wait_until("/readyz to turn not ready", || {
        let (status, body) = request(port, "GET", "/readyz").ok()?;
        (status == 503).then_some(body)
    });
    assert!(
        answer.starts_with("not ready: cannot connect to 127.0.0.1:"),
        "{answer}"
    );
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn readyz_follows_the_http_check_of_the_app() {
    let WebApp {
        mut run, port, url, ..
    } = start_web_app(&[]);
    run.signal(libc::SIGUSR1); // the app's /health now answers 500
    let expected = format!("not ready: GET {url} answered 500");
    wait_for_answer(port, "/readyz", 503, &expected);
    assert_eq!(
        get(port, "/livez").0,
        200,
        "a failing app check must not fail liveness"
    );
    run.signal(libc::SIGUSR1);
    wait_for_answer(port, "/readyz", 200, "ready");
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

/// The graceful-shutdown scenario: a naive server that closes its port the instant it gets
/// SIGTERM, a 2-second request in flight, a load balancer still sending requests.
#[test]
fn graceful_shutdown_behind_a_load_balancer() {
    let WebApp {
        mut run,
        port,
        app_port,
        ..
    } = start_web_app(&["--drain-delay", "1s", "--grace", "10s"]);

    let started = Instant::now();
    let in_flight =
        std::thread::spawn(move || (request(app_port, "GET", "/slow"), started.elapsed()));
    run.expect_line("request /slow");

    run.signal(libc::SIGTERM);
    let sent = Instant::now();
    // Readiness turns 503 at once, while liveness holds.
    assert_eq!(get(port, "/readyz"), (503, "draining".into()));
    assert_eq!(get(port, "/livez"), (200, "alive".into()));
    assert!(get(port, "/metrics")
        .1
        .lines()
        .any(|l| l == "lifeguard_draining 1"));
    // A request the balancer still sends during the drain is served.
    assert_eq!(
        request(app_port, "GET", "/").unwrap(),
        (200, "hello".into())
    );
    assert!(
        !run.stdout().iter().any(|l| l == "signal TERM"),
        "SIGTERM relayed before the drain ended"
    );

    // The app gets SIGTERM only after the drain delay, and closes its port at once.
    run.expect_line("closed");
    assert!(
        sent.elapsed() >= Duration::from_millis(950),
        "relayed after {:?}",
        sent.elapsed()
    );
    let refused = request(app_port, "GET", "/").unwrap_err();
    assert_eq!(
        refused.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{refused}"
    );

    // The request in flight completes.
    let (answer, took) = in_flight.join().unwrap();
    assert_eq!(answer.unwrap(), (200, "slow done".into()));
    assert!(took >= Duration::from_secs(2), "{took:?}");
    run.expect_exit(0);
    // The app closing its port on the stop signal is an ordinary shutdown, not a
    // failing app check worth a warning.
    assert!(
        !run.stderr().iter().any(|l| l.contains("app check failing")),
        "{}",
        run.transcript()
    );
}

/// The control: without the drain the same app refuses connections right after SIGTERM,
/// so a balancer that has not yet noticed sends requests into a closed port.
#[test]
fn without_the_drain_the_app_refuses_connections_right_after_sigterm() {
    let app_port = free_port();
    let app_port_text = app_port.to_string();
    let mut run = start(
        Mode::Pid1,
        &args(&["--drain-delay", "0"], &["--http", &app_port_text]),
    );
    run.ready();
    assert_eq!(request(app_port, "GET", "/").unwrap().0, 200);
    let sent = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_line("closed");
    let refused = request(app_port, "GET", "/").unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    // At once, not after the default 5 s drain.
    assert!(
        sent.elapsed() < Duration::from_millis(2500),
        "refused only after {:?}",
        sent.elapsed()
    );
    run.expect_exit(0);
}

#[test]
fn hostile_clients_never_delay_health_or_shutdown() {
    let (mut run, port) = start_listening(
        Mode::Pid1,
        &["--drain-delay", "200ms", "--grace", "3s"],
        &["--exit-on", "none"],
    );
    let mut hostile = Vec::new();
    // Hundreds of idle connections and of half-sent heads.
    for i in 0..600 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        if i % 2 == 0 {
            s.write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .unwrap();
        }
        hostile.push(s);
    }
    // A 200 kB header: refused with 431 (or cut off), never buffered whole.
    let mut big = TcpStream::connect(("127.0.0.1", port)).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let header = format!(
        "GET /livez HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let _ = big.write_all(header.as_bytes());
    let mut answer = String::new();
    let read = big.read_to_string(&mut answer);
    // Answered 431 and closed; or closed with the rest unread, which makes the kernel
    // reset the connection, and a reset may take the 431 with it. What must not happen
    // is lifeguard reading on (a timeout here): the head would be buffered whole.
    match read {
        Ok(_) => assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}"),
        Err(err) => assert_eq!(
            err.kind(),
            std::io::ErrorKind::ConnectionReset,
            "the 200 kB head was not refused: {err}"
        ),
    }
    // A client that asks for metrics over and over and never reads the answers.
    let mut deaf = TcpStream::connect(("127.0.0.1", port)).unwrap();
    deaf.set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    for _ in 0..2000 {
        if deaf
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .is_err()
        {
            break;
        }
    }
    // A fresh client is still answered within a second.
    let asked = Instant::now();
    assert_eq!(get(port, "/livez"), (200, "alive".into()));
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "/livez took {:?}",
        asked.elapsed()
    );
    // And the shutdown still runs on time: drain, relay, kill at the 3 s deadline.
    let sent = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_line("signal TERM");
    run.expect_exit(137);
    assert!(
        sent.elapsed() < Duration::from_secs(6),
        "shutdown took {:?}",
        sent.elapsed()
    );
    drop(hostile);
}

#[test]
fn a_client_that_never_reads_is_dropped_once_its_answers_stall() {
    let (mut run, port) = start_listening(Mode::Subreaper, &[], &[]);
    // The endpoint's connections as the kernel lists them (iproute2's ss): those whose
    // local port is the endpoint's, established or half-closed (lifeguard also holds
    // sockets of its own: the listener, the bells).
    let sockets = || {
        let out = std::process::Command::new("ss")
            .args(["-Htan", &format!("sport = :{port}")])
            .output()
            .expect("THIS TEST CANNOT RUN: no `ss` (iproute2)");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("ESTAB") || l.starts_with("CLOSE-WAIT"))
            .count()
    };
    wait_until("no connection to the endpoint", || {
        (sockets() == 0).then_some(())
    });
    let mut deaf = TcpStream::connect(("127.0.0.1", port)).unwrap();
    deaf.set_write_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    // Pipelined requests until the answers fill every buffer on the way back.
    while deaf
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .is_ok()
    {}
    let stalled = Instant::now();
    assert_eq!(sockets(), 1, "the deaf client's connection is open");
    wait_until("lifeguard to drop the deaf client", || {
        (sockets() == 0).then_some(())
    });
    assert!(
        stalled.elapsed() < Duration::from_secs(12),
        "dropped after {:?}",
        stalled.elapsed()
    );
    assert_eq!(get(port, "/livez"), (200, "alive".into()));
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn a_client_that_shuts_down_its_side_after_the_request_gets_the_answer() {
    let (mut run, port) = start_listening(Mode::Subreaper, &[], &[]);
    // hyper by default drops such a connection if the half-close is seen before the
    // answer is written: a race, so ask many times.
    for i in 0..1000 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /readyz HTTP/1.0\r\n\r\n").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        assert!(
            answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
            "request {i}: {answer:?}"
        );
    }
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn a_request_head_over_16_kib_gets_431() {
    let (mut run, port) = start_listening(Mode::Subreaper, &[], &[]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // The write may fail part-way: lifeguard answers and closes once 16 KiB are in.
    let _ = write!(
        s,
        "GET /livez HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn idle_and_half_sent_connections_are_closed_after_5_seconds() {
    let (mut run, port) = start_listening(Mode::Subreaper, &[], &[]);
    let mut idle = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut half = TcpStream::connect(("127.0.0.1", port)).unwrap();
    half.write_all(b"GET /livez HTTP/1.1\r\n").unwrap();
    for s in [&mut idle, &mut half] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    let opened = Instant::now();
    let mut buf = Vec::new();
    let _ = idle.read_to_end(&mut buf);
    let _ = half.read_to_end(&mut buf);
    let took = opened.elapsed();
    assert!(
        took >= Duration::from_millis(4500) && took < Duration::from_secs(9),
        "closed after {took:?}"
    );
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn connections_beyond_1024_evict_the_least_recently_active() {
    // This test holds 1100 sockets itself: lift its own soft limit (often 1024).
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        hard >= 1200,
        "THIS TEST CANNOT RUN: the hard descriptor limit is {hard}, below the 1200 it needs"
    );
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let (mut run, port) = start_listening(Mode::Pid1, &[], &[]);
    let mut first = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let opened = Instant::now();
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    for _ in 0..1100 {
        rest.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    // The oldest idle connection was closed to make room, before its 5 s idle timeout
    // (counted from its own connect) could have done it.
    let mut buf = [0u8; 16];
    let n = first.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the oldest idle connection is still open");
    assert!(
        opened.elapsed() < Duration::from_millis(4500),
        "closed only by the idle timeout ({:?})",
        opened.elapsed()
    );
    assert_eq!(get(port, "/livez"), (200, "alive".into()));
    drop(rest);
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn an_explicit_address_that_cannot_be_bound_is_exit_125_before_the_app_starts() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for (flag, env) in [(Some(addr.as_str()), None), (None, Some(addr.as_str()))] {
        let mut argv = vec![];
        if let Some(a) = flag {
            argv.extend(["--listen", a]);
        }
        argv.extend(["--", TESTAPP]);
        let mut run = start_with(Mode::Subreaper, &argv, |c| {
            match env {
                Some(a) => c.env("LIFEGUARD_LISTEN", a),
                None => c.env_remove("LIFEGUARD_LISTEN"),
            };
        });
        run.expect_exit(125);
        let line = run.expect_log(&addr);
        assert!(line.contains("cannot listen"), "{line}");
        assert!(
            run.stdout().is_empty(),
            "the app was started: {:?}",
            run.stdout()
        );
    }
}

#[test]
fn a_host_name_listens_on_every_address_it_resolves_to() {
    // localhost resolves (/etc/hosts) to 127.0.0.1, and to ::1 where the host has it:
    // the endpoint answers on each, and --probe finds it by the same name.
    let port = free_port();
    let listen = format!("localhost:{port}");
    let mut run = start(
        Mode::Subreaper,
        &args(&["--listen", &listen, "--drain-delay", "0"], &[]),
    );
    run.ready();
    wait_for_answer(port, "/readyz", 200, "ready");
    let v6: Vec<std::net::SocketAddr> =
        std::net::ToSocketAddrs::to_socket_addrs(&("localhost", port))
            .unwrap()
            .filter(|a| a.is_ipv6())
            .collect();
    for addr in &v6 {
        let mut stream = TcpStream::connect(addr).expect("the endpoint on ::1");
        stream
            .write_all(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let out = lifeguard()
        .args(["--probe", "ready"])
        .env("LIFEGUARD_LISTEN", &listen)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    // A name that does not resolve is an explicit address that cannot be used: 125.
    let mut run = start(
        Mode::Subreaper,
        &args(&["--listen", "no-such-host.invalid:9"], &[]),
    );
    run.expect_exit(125);
    run.expect_log("cannot listen on no-such-host.invalid:9");
}

#[test]
fn a_busy_default_address_costs_a_warning_only() {
    // Occupy the default port (or find it occupied already): either way it is busy (an
    // IPv4 listener on it stops the dual-stack default too).
    let _held = TcpListener::bind("0.0.0.0:9595");
    let mut run = start_with(Mode::Subreaper, &app(&["--exit", "3"]), |c| {
        c.env_remove("LIFEGUARD_LISTEN");
    });
    run.expect_exit(3);
    run.expect_log("cannot listen on the default address [::]:9595");
}

fn probe(args: &[&str]) -> (i32, String, Duration) {
    let started = Instant::now();
    let out = lifeguard()
        .arg("--probe")
        .args(args)
        .env_remove("LIFEGUARD_LISTEN")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap(), text, started.elapsed())
}

#[test]
fn probe_exits_0_on_2xx_and_1_otherwise_within_its_timeout() {
    let (mut run, port) = start_listening(
        Mode::Subreaper,
        &["--drain-delay", "30s", "--grace", "40s"],
        &[],
    );
    let listen = listen_flag(port);
    wait_for_answer(port, "/readyz", 200, "ready");
    let (code, text, _) = probe(&["--listen", &listen]);
    assert_eq!(code, 0, "{text}");
    let url = format!("http://127.0.0.1:{port}/livez");
    assert_eq!(probe(&[&url]).0, 0);
    run.signal(libc::SIGTERM);
    wait_for_answer(port, "/readyz", 503, "draining");
    let (code, text, _) = probe(&["ready", "--listen", &listen]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("503") && text.contains("draining"), "{text}");
    // The environment twin names the address too.
    let out = lifeguard()
        .args(["--probe", "live"])
        .env("LIFEGUARD_LISTEN", &listen)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // Settings the probe does not use never make it refuse: an image with
    // LIFEGUARD_DRAIN_DELAY=30s in its ENV and `--grace 60s` on its ENTRYPOINT.
    let out = lifeguard()
        .args(["--probe", "live", "--listen", &listen])
        .env("LIFEGUARD_DRAIN_DELAY", "30s")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // `[::]` is reached over loopback too (IPv4 unless IPv6 sockets are v6-only here).
    let any_v6 = format!("[::]:{port}");
    let (code, text, _) = probe(&["live", "--listen", &any_v6]);
    assert_eq!(code, 0, "{text}");
    run.signal(libc::SIGINT);
    run.expect_exit(0);

    // A refusal is 1 too, never the 2 Docker reserves in HEALTHCHECK.
    let (code, text, _) = probe(&["sideways"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("--probe"), "{text}");
    // Nothing listening: 1 at once.
    let (code, text, _) = probe(&["--listen", &listen]);
    assert_eq!(code, 1, "{text}");
    // A server that accepts and never answers: 1 within the timeout.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let (code, text, took) = probe(&["--listen", &silent_addr, "--probe-timeout", "500ms"]);
    assert_eq!(code, 1, "{text}");
    assert!(took < Duration::from_secs(2), "probe took {took:?}");
    assert!(text.contains("no answer within 500ms"), "{text}");
}

#[test]
fn a_low_descriptor_limit_still_leaves_room_for_a_fresh_probe() {
    // With 128 descriptors the cap is lower than 1024; the oldest idle connection still
    // makes room, so a probe is never stuck behind the 5 s idle timeout.
    let port = free_port();
    let listen = listen_flag(port);
    let mut run = start_under(
        Mode::Subreaper,
        &["prlimit", "--nofile=128:128"],
        &args(&["--listen", &listen], &[]),
    );
    run.ready();
    wait_for_answer(port, "/livez", 200, "alive");
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let asked = Instant::now();
    assert_eq!(get(port, "/livez"), (200, "alive".into()));
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "/livez took {:?}",
        asked.elapsed()
    );
    drop(idle);
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn the_endpoint_answers_until_lifeguard_has_nothing_left_to_wait_for() {
    // The app exits and leaves a daemon that ignores SIGTERM: lifeguard waits for it up
    // to the grace deadline, and meanwhile /livez says the app has exited and /metrics
    // still has the last figures (the helper stays until nothing else is left).
    let port = free_port();
    let listen = listen_flag(port);
    let mut run = start(
        Mode::Pid1,
        &args(
            &[
                "-v",
                "--listen",
                &listen,
                "--drain-delay",
                "0",
                "--grace",
                "3s",
            ],
            &["--daemon", "stubborn"],
        ),
    );
    run.ready();
    wait_for_answer(port, "/livez", 200, "alive");
    send(run.app_pid(), libc::SIGINT);
    run.expect_log("app exited");
    wait_for_answer(port, "/livez", 503, "exited");
    // Asked again while lifeguard waits for the daemon: still answered.
    let (status, body) = get(port, "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("lifeguard_ready 0"), "{body}");
    wait_for_answer(port, "/livez", 503, "exited");
    run.expect_exit(0);
}
