//! Drain until idle (DESIGN §3, issue #8): with `--inflight-port`, the stop signal waits
//! for the requests in flight, checked every 100 ms, up to `--drain-max`. The app here
//! is a web server that dies on SIGTERM (no handler), so whatever is in flight when the
//! signal reaches it is lost: only the hold can save it.
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;

/// lifeguard (PID 1) in front of the testapp's web server that dies on SIGTERM, with a
/// 1 s drain and in-flight counting on the app's port.
fn start_server(extra: &[&str], keep_alive: bool) -> (Run, u16) {
    let app_port = free_port();
    let app_port_text = app_port.to_string();
    let mut flags = vec![
        "-v",
        "--drain-delay",
        "1s",
        "--inflight-port",
        &app_port_text,
    ];
    flags.extend_from_slice(extra);
    let mut app_args = vec!["--http", &app_port_text, "--die-on-term"];
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

#[test]
fn a_request_in_flight_at_the_stop_completes_and_the_exit_follows_it() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    let (mut run, app_port) = start_server(&[], false);
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
    // The app got SIGTERM only once idle, and died of it at once (128 + 15).
    run.expect_exit(143);
    let exited = term_at.elapsed();
    let lag = exited - answered;
    assert!(
        lag < Duration::from_millis(600),
        "exit {lag:?} after the answer (sampling every 100 ms)\n{}",
        run.transcript()
    );
    assert!(
        answered >= Duration::from_millis(2900),
        "answered after {answered:?}"
    );
    let held = run.expect_log("holding the stop signal");
    assert!(held.contains("in_flight=1"), "{held}");
    run.expect_log("no request in flight: hold over");
    eprintln!("answered {answered:?} after SIGTERM, exit {lag:?} later");
}

#[test]
fn an_idle_app_stops_at_the_drain_delay_even_with_a_keep_alive_connection_open() {
    let (mut run, app_port) = start_server(&[], true);
    // One answered request on a connection left open: idle, not in flight.
    let mut idle = request_in_flight(&run, app_port, "/");
    let mut buf = [0u8; 256];
    let n = idle.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("hello"));
    let term_at = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_exit(143);
    let took = term_at.elapsed();
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
    drop(idle);
}

#[test]
fn a_request_longer_than_drain_max_is_cut_there() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    let (mut run, app_port) = start_server(&["--drain-max", "2s", "--grace", "10s"], false);
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
    let capped = run.expect_log("--drain-max reached");
    assert!(capped.contains("in_flight=1"), "{capped}");
    // The app died with the request: the client gets no answer.
    assert_eq!(answer(stream), "");
}

#[test]
fn a_second_sigterm_during_the_hold_relays_at_once() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    let (mut run, app_port) = start_server(&[], false);
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
    run.expect_log("second SIGTERM: hold over");
}
