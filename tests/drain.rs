//! Drain until quiet (docs/lifecycle.md): with `--inflight-port`,
//! past the drain delay the stop signal waits until the port is quiet — nothing in
//! flight and no new request for `--drain-quiet` — up to `--drain-max`. The app here is
//! the testapp's web server; where it dies on SIGTERM (no handler), whatever is in
//! flight when the signal reaches it is lost: only the hold can save it.
//!
//! Each test runs in a network namespace of its own, as a pod or an awsvpc task does:
//! the quiet rule reads the namespace's passive-open counter, which every other test
//! moves on the host's.
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::haproxy::*;
use common::netns::in_own_netns;
use common::*;

/// lifeguard (PID 1) in front of the testapp's web server, with a 1 s drain (unless
/// `extra` sets one) and
/// in-flight counting on the app's port; `die` makes the app's SIGTERM fatal at once.
fn start_server(extra: &[&str], keep_alive: bool, die: bool) -> (Run, u16) {
    let app_port = free_port();
    let app_port_text = app_port.to_string();
    let mut flags = vec!["-v", "--inflight-port", &app_port_text];
    if !extra.contains(&"--drain-delay") {
        flags.extend(["--drain-delay", "1s"]);
    }
    flags.extend_from_slice(extra);
    let mut app_args = vec!["--http", &app_port_text];
    if die {
        app_args.push("--die-on-term");
    }
    if keep_alive {
        app_args.push("--keep-alive");
    }
    let run = start(Mode::Pid1, &args(&flags, &app_args));
    run.ready();
    (run, app_port)
}

/// Sends a GET and waits until the app has it (it prints `request PATH`).
fn request_in_flight(run: &Run, app_port: u16, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", app_port)).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    run.expect_line(&format!("request {path}"));
    stream
}

/// Everything the server sends until it closes: the answer, or "" if it died first.
fn answer(mut stream: TcpStream) -> String {
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text
}

/// The drain must have read real figures: a hold that ended because it could not
/// count would pass every timing here for the wrong reason.
fn figures_were_read(run: &Run) {
    assert!(
        !run.stderr()
            .iter()
            .any(|l| l.contains("without a fresh look")
                || l.contains("cannot read the port")
                || l.contains("cannot count")),
        "the drain ran blind\n{}",
        run.transcript()
    );
}

#[test]
fn a_request_in_flight_at_the_stop_completes_and_the_stop_follows_once_quiet() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    in_own_netns(|| {
        let (mut run, app_port) = start_server(&[], false, true);
        let stream = request_in_flight(&run, app_port, "/slow/3000");
        let term_at = Instant::now();
        run.signal(libc::SIGTERM);
        let reply = answer(stream);
        let answered = term_at.elapsed();
        assert!(
            reply.starts_with("HTTP/1.1 200"),
            "the request was lost: {reply:?}\n{}",
            run.transcript()
        );
        // The app got SIGTERM once the port had been quiet for --drain-quiet (1 s),
        // and died of it at once (128 + 15).
        run.expect_exit(143);
        let lag = term_at.elapsed() - answered;
        assert!(
            lag >= Duration::from_millis(900) && lag < Duration::from_millis(1700),
            "stopped {lag:?} after the answer; --drain-quiet is 1 s\n{}",
            run.transcript()
        );
        assert!(
            answered >= Duration::from_millis(2900),
            "answered after {answered:?}"
        );
        let held = run.expect_log("holding the stop signal");
        assert!(held.contains("in_flight=1"), "{held}");
        let quiet = run.expect_log("the port is quiet: drain over");
        assert!(quiet.contains("quiet_for="), "{quiet}");
        figures_were_read(&run);
    });
}

#[test]
fn an_idle_app_stops_at_the_drain_delay_even_with_a_keep_alive_connection_open() {
    in_own_netns(|| {
        let (mut run, app_port) = start_server(&[], true, true);
        // One answered request on a connection left open: idle, not in flight.
        let mut idle = request_in_flight(&run, app_port, "/");
        let mut buf = [0u8; 256];
        let n = idle.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).contains("hello"));
        // Quiet for longer than --drain-quiet by the end of the drain delay.
        std::thread::sleep(Duration::from_millis(200));
        let term_at = Instant::now();
        run.signal(libc::SIGTERM);
        run.expect_exit(143);
        let took = term_at.elapsed();
        if emulated() {
            // qemu-user refuses sock_diag: the sampler says it cannot read the port, and
            // a drain that cannot see holds to --drain-max (13 s: halfway from the 1 s
            // delay to the 25 s grace), saying why. Checked here instead.
            eprintln!(
                "UNDER EMULATION: {NO_SOCK_DIAG_UNDER_EMULATION}; checking the blind hold instead"
            );
            assert!(
                took >= Duration::from_millis(12_900) && took < Duration::from_secs(16),
                "stopped {took:?} after SIGTERM: a drain that cannot read holds to --drain-max (13 s)\n{}",
                run.transcript()
            );
            run.expect_log("the helper cannot read the port's sockets");
            return;
        }
        assert!(
            took >= Duration::from_secs(1) && took < Duration::from_millis(1600),
            "stopped {took:?} after SIGTERM, the drain delay is 1 s\n{}",
            run.transcript()
        );
        assert!(
            !run.stderr().iter().any(|l| l.contains("holding")),
            "an idle connection held the stop\n{}",
            run.transcript()
        );
        if !emulated() {
            run.expect_log("the port is quiet: drain over");
            figures_were_read(&run);
        }
        drop(idle);
    });
}

#[test]
fn with_no_drain_delay_an_idle_port_stops_within_drain_quiet() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    // ECS behind a load balancer: the target is deregistered before the task is
    // stopped, so the traffic has already stopped when SIGTERM comes.
    in_own_netns(|| {
        let (mut run, _) = start_server(&["--drain-delay", "0"], false, true);
        let term_at = Instant::now();
        run.signal(libc::SIGTERM);
        run.expect_exit(143);
        let took = term_at.elapsed();
        assert!(
            took < Duration::from_millis(1300),
            "stopped {took:?} after SIGTERM: --drain-quiet (1 s) + 0.3 s at most\n{}",
            run.transcript()
        );
        run.expect_log("the port is quiet: drain over");
        figures_were_read(&run);
    });
}

/// A streamed answer that pauses at the SIGTERM (its head and first part sent, the rest
/// 3 s later), under `--drain-quiet`: the answer and the app's lines.
fn stream_paused_at_the_stop(drain_quiet: &str) -> (String, Vec<String>) {
    let (mut run, app_port) = start_server(
        &[
            "--drain-delay",
            "0",
            "--drain-quiet",
            drain_quiet,
            "--drain-max",
            "10s",
        ],
        false,
        true,
    );
    let mut stream = request_in_flight(&run, app_port, "/stream/3000");
    run.expect_line("streamed first part");
    // The first part has reached the client: the server spoke last.
    let mut first = [0u8; 64];
    let n = stream.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).ends_with("first"));
    run.signal(libc::SIGTERM);
    let rest = answer(stream);
    run.wait_exit();
    figures_were_read(&run);
    (rest, run.stdout())
}

#[test]
fn a_stream_that_pauses_longer_than_drain_quiet_looks_idle_and_is_cut() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    // What docs/lifecycle.md says the drain cannot see: once a response has begun and
    // the server has spoken last, the kernel shows nothing outstanding, and a pause
    // with no bytes coming in is quiet. With --drain-quiet 1s the stop goes in the
    // 3 s pause, and the app (which dies on SIGTERM) cuts the stream. Each case has 2 s
    // of margin either way, for a loaded machine's late samples and late app.
    in_own_netns(|| {
        let (rest, lines) = stream_paused_at_the_stop("1s");
        assert_eq!(rest, "", "the stream was not cut: {lines:?}");
        assert!(
            !lines.iter().any(|l| l == "streamed last part"),
            "{lines:?}"
        );
    });
    // What the docs say to do: a --drain-quiet longer than the pause keeps it.
    in_own_netns(|| {
        let (rest, lines) = stream_paused_at_the_stop("5s");
        assert_eq!(rest, " last", "{lines:?}");
    });
}

#[test]
fn a_request_longer_than_drain_max_is_cut_there_with_a_warning() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    in_own_netns(|| {
        let (mut run, app_port) =
            start_server(&["--drain-max", "2s", "--grace", "10s"], false, true);
        let stream = request_in_flight(&run, app_port, "/slow/8000");
        let term_at = Instant::now();
        run.signal(libc::SIGTERM);
        run.expect_exit(143);
        let took = term_at.elapsed();
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_millis(2700),
            "stopped {took:?} after SIGTERM, --drain-max is 2 s\n{}",
            run.transcript()
        );
        let capped = run.expect_log("--drain-max reached with requests still in flight");
        assert!(
            capped.contains("warning:") && capped.contains("in_flight=1"),
            "{capped}"
        );
        // The app died with the request: the client gets no answer.
        assert_eq!(answer(stream), "");
        figures_were_read(&run);
    });
}

#[test]
fn a_second_sigterm_during_the_hold_relays_at_once() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    in_own_netns(|| {
        let (mut run, app_port) = start_server(&[], false, true);
        let _stream = request_in_flight(&run, app_port, "/slow/8000");
        run.signal(libc::SIGTERM);
        run.expect_log("holding the stop signal");
        let second_at = Instant::now();
        run.signal(libc::SIGTERM);
        run.expect_exit(143);
        assert!(
            second_at.elapsed() < Duration::from_millis(500),
            "{:?}",
            second_at.elapsed()
        );
        let cut = run.expect_log("second SIGTERM: drain cut short");
        assert!(cut.contains("in_flight=1"), "{cut}");
    });
}

#[test]
fn the_last_drain_shows_in_metrics_and_says_why_it_ended() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    in_own_netns(|| {
        let port = free_port();
        let listen = listen_flag(port);
        // An idle listener on the port (the test's own): seen listening, nothing in
        // flight, so the drain ends at its first quiet look.
        let idle = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let idle_port = idle.local_addr().unwrap().port().to_string();
        // The app lingers 3 s after SIGTERM, so /metrics can be read after the drain.
        let mut run = start(
            Mode::Pid1,
            &args(
                &[
                    "--listen",
                    &listen,
                    "--drain-delay",
                    "0",
                    "--inflight-port",
                    &idle_port,
                ],
                &["--linger", "3000"],
            ),
        );
        run.ready();
        let (_, before) = get(port, "/metrics");
        assert!(!before.contains("lifeguard_drain_seconds "), "{before}");
        run.signal(libc::SIGTERM);
        run.expect_line("signal TERM");
        let seconds: f64 = wait_until("lifeguard_drain_seconds", || {
            let (_, body) = request(port, "GET", "/metrics").ok()?;
            body.lines()
                .find_map(|l| l.strip_prefix("lifeguard_drain_seconds ")?.parse().ok())
        });
        assert!(
            (0.0..1.3).contains(&seconds),
            "the drain took {seconds} s by /metrics"
        );
        // The app handles SIGTERM and exits 0 after its linger.
        run.expect_exit(0);
        drop(idle);
    });
}

/// Two backends under lifeguard behind HAProxy, whose health check (lifeguard's
/// `/readyz`, every 1 s, 4 failures to take a server out) is several seconds slower
/// than the 1 s drain delay; `balance first` keeps every request on the first backend
/// until it is taken out. A client sends one request every 700 ms through HAProxy
/// while the first backend is stopped; its app closes its port on SIGTERM. Returns
/// (requests, failed).
fn stop_behind_a_slow_balancer(drain_quiet: &str) -> (u64, u64) {
    stop_behind_a_slow_balancer_beside(drain_quiet, None)
}

fn stop_behind_a_slow_balancer_beside(drain_quiet: &str, sidecar: Option<Closer>) -> (u64, u64) {
    in_own_netns(|| {
        let _sidecar = sidecar.map(|closer| Sidecar::closed_by(Duration::from_millis(100), closer));
        let backend = || {
            let port = free_port();
            let check = free_port();
            let port_text = port.to_string();
            let listen = listen_flag(check);
            let run = start(
                Mode::Pid1,
                &args(
                    &[
                        "-v",
                        "--listen",
                        &listen,
                        "--drain-delay",
                        "1s",
                        "--grace",
                        "20s",
                        "--drain-quiet",
                        drain_quiet,
                        "--inflight-port",
                        &port_text,
                    ],
                    &["--http", &port_text],
                ),
            );
            run.ready();
            wait_for_answer(check, "/readyz", 200, "ready");
            (run, port, check)
        };
        let (mut stopped, stopped_port, stopped_check) = backend();
        let (_kept, kept_port, kept_check) = backend();
        let lb = Balancer::start_with(
            &[(stopped_port, stopped_check), (kept_port, kept_check)],
            "/readyz",
            Checks {
                inter: "1s",
                fall: 4,
                balance: "first",
            },
        );
        wait_until("HAProxy to serve", || fetch(lb.port, "/").then_some(()));
        let done = Arc::new(AtomicBool::new(false));
        let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let client = {
            let (done, sent, failed, port) = (done.clone(), sent.clone(), failed.clone(), lb.port);
            // In the scene's namespace: a thread started here is.
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(40);
                while !done.load(Ordering::SeqCst) && Instant::now() < until {
                    sent.fetch_add(1, Ordering::SeqCst);
                    if !fetch(port, "/") {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(700));
                }
            })
        };
        // Traffic reaches the first backend before the stop.
        stopped.expect_line("request /");
        stopped.signal(libc::SIGTERM);
        let _ = stopped.wait_exit();
        // And goes on a while after it: what the balancer still sends to the stopped
        // backend fails now.
        std::thread::sleep(Duration::from_millis(2500));
        done.store(true, Ordering::SeqCst);
        client.join().unwrap();
        (sent.load(Ordering::SeqCst), failed.load(Ordering::SeqCst))
    })
}

/// A sidecar in the test's network namespace, as an ECS task's or a pod's other
/// containers are (an agent taking StatsD or EMF over TCP, a mesh proxy): a listener of
/// its own, and a client that opens a connection to it every 100 ms, sends a line, and
/// reads the answer until the sidecar closes it. Every one moves the namespace's passive-open
/// counter; none is the app's.
struct Sidecar {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// Which side of the sidecar's connections closes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closer {
    /// The sidecar answers and hangs up: its side keeps TIME_WAIT.
    Server,
    /// The client reads the answer and closes (an HTTP/1.0 client, a health checker):
    /// the client's side keeps TIME_WAIT, the server's passes through LAST_ACK and
    /// leaves nothing.
    Client,
}

impl Sidecar {
    fn every(period: Duration) -> Sidecar {
        Sidecar::closed_by(period, Closer::Server)
    }

    /// A local listener that a local client connects to every `period` (send "ping",
    /// read "ok", close), each connection over within a millisecond.
    fn closed_by(period: Duration, closer: Closer) -> Sidecar {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((mut conn, _)) => {
                            // Read what the client sent, answer, and close first, or
                            // after the client: an orderly close either way (a reset
                            // would leave no trace of it).
                            conn.set_nonblocking(false).unwrap();
                            let mut line = [0u8; 11];
                            let _ = conn.read_exact(&mut line);
                            let _ = conn.write_all(b"ok");
                            if closer == Closer::Client {
                                let mut rest = Vec::new();
                                let _ = conn.read_to_end(&mut rest);
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        let client = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                    if let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) {
                        let _ = c.write_all(b"metric:1|c\n");
                        let mut answer = Vec::new();
                        match closer {
                            // Until the sidecar closes.
                            Closer::Server => {
                                let _ = c.read_to_end(&mut answer);
                            }
                            // The answer, then the client closes.
                            Closer::Client => {
                                let mut ok = [0u8; 2];
                                let _ = c.read_exact(&mut ok);
                            }
                        }
                    }
                    std::thread::sleep(period);
                }
            })
        };
        Sidecar {
            stop,
            threads: vec![server, client],
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn beside_a_busy_sidecar_an_idle_app_stops_within_drain_quiet() {
    for closer in [Closer::Server, Closer::Client] {
        idle_app_beside_a_sidecar(closer);
    }
}

fn idle_app_beside_a_sidecar(closer: Closer) {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    // Before: every sidecar connection counted as the app's, and the drain ran to
    // --drain-max (and, for connections their client closed first, still did until
    // the closing side's TIME_WAIT was read too).
    in_own_netns(|| {
        let _sidecar = Sidecar::closed_by(Duration::from_millis(100), closer);
        let endpoint = free_port();
        let listen = listen_flag(endpoint);
        let (mut run, _) = start_server(
            &[
                "--drain-delay",
                "0",
                "--drain-max",
                "8s",
                "--listen",
                &listen,
            ],
            false,
            true,
        );
        // The sampler has watched the namespace accept the sidecar's connections for a
        // while before the stop.
        wait_until("the sidecar's accepts counted", || {
            let m = request(endpoint, "GET", "/metrics").ok()?.1;
            let accepted: f64 = m
                .lines()
                .find_map(|l| l.strip_prefix("lifeguard_connections_accepted_total "))?
                .parse()
                .ok()?;
            (accepted >= 20.0).then_some(())
        });
        let term_at = Instant::now();
        run.signal(libc::SIGTERM);
        run.expect_exit(143);
        let took = term_at.elapsed();
        // --drain-quiet (1 s) + 0.5 s: a sidecar accept landing between a look's dump
        // and its read of the namespace's counter is explained by the next look.
        assert!(
            took < Duration::from_millis(1500),
            "[{closer:?} closes] stopped {took:?} after SIGTERM: --drain-quiet (1 s) + 0.5 s at most\n{}",
            run.transcript()
        );
        run.expect_log("the port is quiet: drain over");
        figures_were_read(&run);
    });
}

#[test]
fn beside_a_busy_sidecar_the_apps_own_trickle_holds_the_stop_until_it_ends() {
    for closer in [Closer::Server, Closer::Client] {
        trickle_beside_a_sidecar(closer);
    }
}

fn trickle_beside_a_sidecar(closer: Closer) {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    // The balancer still sends a request every 0.5 s on a new connection, beside the
    // sidecar's: every one is answered, and the stop follows the last by --drain-quiet.
    in_own_netns(|| {
        let _sidecar = Sidecar::closed_by(Duration::from_millis(100), closer);
        let (mut run, app_port) =
            start_server(&["--drain-delay", "0", "--drain-max", "15s"], false, true);
        let stop_sending = Arc::new(AtomicBool::new(false));
        let last = Arc::new(std::sync::Mutex::new(Instant::now()));
        let failed = Arc::new(AtomicU64::new(0));
        let trickle = {
            let (stop_sending, last, failed) = (stop_sending.clone(), last.clone(), failed.clone());
            std::thread::spawn(move || {
                let mut sent = 0;
                while !stop_sending.load(Ordering::SeqCst) {
                    if !fetch(app_port, "/") {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                    *last.lock().unwrap() = Instant::now();
                    sent += 1;
                    std::thread::sleep(Duration::from_millis(500));
                }
                sent
            })
        };
        // A few requests first: the sampler has looked at the port by then.
        wait_until("three requests served", || {
            (run.stdout().iter().filter(|l| *l == "request /").count() >= 3).then_some(())
        });
        run.signal(libc::SIGTERM);
        std::thread::sleep(Duration::from_millis(2500));
        stop_sending.store(true, Ordering::SeqCst);
        let sent = trickle.join().unwrap();
        let last_request = *last.lock().unwrap();
        run.expect_exit(143);
        let relayed = run
            .stderr()
            .iter()
            .position(|l| l.contains("stop signal relayed"))
            .is_some();
        assert!(relayed, "{}", run.transcript());
        let after_last = last_request.elapsed();
        assert_eq!(
            failed.load(Ordering::SeqCst),
            0,
            "requests failed\n{}",
            run.transcript()
        );
        assert!(sent >= 5, "{sent}");
        // The relay came --drain-quiet (1 s) after the last request, ± 0.5 s; the exit
        // follows the relay at once (the app dies of SIGTERM).
        assert!(
            after_last >= Duration::from_millis(500) && after_last <= Duration::from_millis(1500),
            "[{closer:?} closes] stopped {after_last:?} after the last request\n{}",
            run.transcript()
        );
        figures_were_read(&run);
    });
}

#[test]
fn beside_a_busy_sidecar_the_app_behind_haproxy_loses_no_request() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    for closer in [Closer::Server, Closer::Client] {
        let (sent, failed) = stop_behind_a_slow_balancer_beside("1s", Some(closer));
        assert_eq!(
            failed, 0,
            "requests failed beside the sidecar ({closer:?} closes; {sent} sent)"
        );
        assert!(sent >= 8, "too little traffic to tell: {sent}");
    }
}

#[test]
fn an_app_that_calls_out_through_a_local_proxy_still_holds_its_own_requests() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    // A mesh's outbound proxy (Envoy for ECS Service Connect, Istio) accepts the app's
    // own calls on a local listener: each request the app serves opens a connection
    // there. Those are not the app's port's; the request in flight is, and holds the stop.
    in_own_netns(|| {
        let proxy = Sidecar::every(Duration::from_millis(50));
        let (mut run, app_port) = start_server(&["--drain-delay", "0"], false, true);
        let stream = request_in_flight(&run, app_port, "/slow/1500");
        let term_at = Instant::now();
        run.signal(libc::SIGTERM);
        let answer = answer(stream);
        assert!(
            answer.contains("slow done"),
            "the request was cut: {answer:?}"
        );
        run.expect_exit(143);
        assert!(
            term_at.elapsed() >= Duration::from_millis(1400),
            "{}",
            run.transcript()
        );
        drop(proxy);
        figures_were_read(&run);
    });
}

#[test]
fn the_drain_waits_for_the_balancer_to_stop_sending_where_one_quiet_sample_does_not() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    let (sent, failed) = stop_behind_a_slow_balancer("1s");
    let (old_sent, old_failed) = stop_behind_a_slow_balancer("0");
    eprintln!(
        "behind HAProxy (checks every 1 s, 4 to fail), one request every 700 ms: \
         --drain-quiet 1s lost {failed} of {sent}; --drain-quiet 0 lost {old_failed} of {old_sent}"
    );
    assert_eq!(failed, 0, "requests failed under the quiet rule");
    assert!(sent >= 8, "too little traffic to tell: {sent}");
    assert!(
        old_failed >= 1,
        "one quiet sample lost nothing: the setup cannot tell the rules apart"
    );
}

#[test]
fn a_helper_killed_during_the_drain_makes_the_hold_look_a_whole_quiet_period_afresh() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    // A request in flight holds the stop; it completes, and 0.8 s later the helper
    // process (the sampler with it) is SIGKILLed. The new sampler cannot know what came
    // since its predecessor's last look: the port counts as busy from its start, so the
    // stop comes a whole --drain-quiet after it, not --drain-quiet after the request
    // (which would be 0.2 s after the kill).
    in_own_netns(|| {
        let (mut run, app_port, helper) =
            start_watched(&["--drain-quiet", "1s", "--drain-max", "15s"]);
        let stream = request_in_flight(&run, app_port, "/slow/1500");
        run.signal(libc::SIGTERM);
        let answered = answer(stream);
        assert!(
            answered.contains("slow done"),
            "the request in flight was cut: {answered:?}\n{}",
            run.transcript()
        );
        // The scenario's gap, not a wait for a condition: the helper dies 0.8 s after
        // the request's answer, while the hold counts its --drain-quiet.
        std::thread::sleep(Duration::from_millis(800));
        assert!(
            alive(run.app_pid()),
            "relayed before the helper was killed\n{}",
            run.transcript()
        );
        send(helper, libc::SIGKILL);
        let killed = Instant::now();
        run.expect_exit(143);
        let after_kill = killed.elapsed();
        // The new helper starts 0.2 s after the death; its sampler then looks for
        // --drain-quiet (1 s) before the port is quiet.
        assert!(
            after_kill >= Duration::from_millis(1100),
            "relayed {after_kill:?} after the helper was killed: the new sampler did not look a whole --drain-quiet\n{}",
            run.transcript()
        );
        assert!(
            after_kill < Duration::from_secs(4),
            "relayed {after_kill:?} after the kill\n{}",
            run.transcript()
        );
        figures_were_read(&run);
    });
}

/// The server with no drain delay and the endpoint on, once it is ready (the port seen
/// listening): the run, the app's port, and lifeguard's helper process.
fn start_watched(extra: &[&str]) -> (Run, u16, i32) {
    let endpoint = free_port();
    let listen = listen_flag(endpoint);
    let mut flags = vec!["--drain-delay", "0", "--listen", &listen];
    flags.extend_from_slice(extra);
    let (run, app_port) = start_server(&flags, false, true);
    wait_for_answer(endpoint, "/readyz", 200, "ready");
    let helper = helper_of(&run);
    (run, app_port, helper)
}

#[test]
fn a_helper_stopped_at_the_sigterm_holds_the_stop_until_a_fresh_look_finds_the_port_quiet() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    // Late is not quiet. The helper (whose sampler gives the drain its looks) is stopped
    // right before the SIGTERM and for 4 s, as a helper starved of CPU at the peak is;
    // the app dies on SIGTERM and has a 6 s request in flight. With no fresh look the
    // drain holds (0.2.0 relayed after 1 s and the request was lost); once the helper
    // runs again, it sees the request, and the stop follows it by --drain-quiet.
    in_own_netns(|| {
        let (mut run, app_port, helper) = start_watched(&[
            "--drain-quiet",
            "1s",
            "--drain-max",
            "20s",
            "--grace",
            "25s",
        ]);
        let stream = request_in_flight(&run, app_port, "/slow/6000");
        send(helper, libc::SIGSTOP);
        wait_until("the helper to stop", || {
            (state(helper) == Some('T')).then_some(())
        });
        let stopped = Instant::now();
        let term_at = Instant::now();
        run.signal(libc::SIGTERM);
        let blind = run.expect_log("no fresh look at the port");
        assert!(blind.contains("at_the_latest_in="), "{blind}");
        // The scenario's length, not a wait for a condition: the helper stays stopped
        // 4 s in all.
        std::thread::sleep(Duration::from_secs(4).saturating_sub(stopped.elapsed()));
        assert!(
            alive(run.app_pid()),
            "relayed while the drain could not see\n{}",
            run.transcript()
        );
        send(helper, libc::SIGCONT);
        let reply = answer(stream);
        let answered = term_at.elapsed();
        assert!(
            reply.starts_with("HTTP/1.1 200"),
            "the request was lost: {reply:?}\n{}",
            run.transcript()
        );
        run.expect_exit(143);
        let stopped_after = term_at.elapsed();
        assert!(
            stopped_after >= answered + Duration::from_millis(900)
                && stopped_after < Duration::from_secs(15),
            "stopped {stopped_after:?} after the SIGTERM, answered at {answered:?}: --drain-quiet is 1 s, --drain-max 20 s\n{}",
            run.transcript()
        );
        run.expect_log("the port is quiet: drain over");
    });
}
