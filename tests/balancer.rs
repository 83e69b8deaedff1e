//! Behind a real load balancer: HAProxy (Debian package, installed by
//! scripts/test.sh) with active HTTP health checks every 500 ms and no retries, as an
//! ALB, in front of two servers that die on SIGTERM. Steady traffic flows through it
//! while one server is stopped, with a 4-second request in flight on that server.
//! Under lifeguard nothing fails; under tini (`tini -- app`, health checks on the app's
//! own port) the failures are counted, the long request's among them. All on loopback.
mod common;

use std::process::{Command, Stdio};

use common::haproxy::*;
use common::*;

/// One backend: the testapp's web server under an init, and the port HAProxy checks.
struct Backend {
    run: Run,
    port: u16,
    check_port: u16,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Init {
    /// Checked by HTTP on /readyz.
    Lifeguard,
    /// Checked by a TCP connect to its ready port (`--ready-port`).
    LifeguardReadyPort,
    Tini,
}

fn backend(init: Init) -> Backend {
    let port = free_port();
    let port_text = port.to_string();
    let app = ["--http", &port_text, "--die-on-term"];
    match init {
        Init::Lifeguard | Init::LifeguardReadyPort => {
            let (endpoint, ready) = (free_port(), free_port());
            let listen = listen_flag(endpoint);
            let ready_text = ready.to_string();
            let mut flags = vec![
                "-v",
                "--listen",
                &listen,
                "--drain-delay",
                "2s",
                "--inflight-port",
                &port_text,
            ];
            let check_port = if init == Init::LifeguardReadyPort {
                flags.extend(["--ready-port", &ready_text]);
                ready
            } else {
                endpoint
            };
            let run = start(Mode::Pid1, &args(&flags, &app));
            run.ready();
            Backend {
                run,
                port,
                check_port,
            }
        }
        Init::Tini => {
            // PID 1 of its own namespace, as in a container; no endpoint, so the balancer
            // checks the app itself.
            let tini = installed("tini");
            let run = start_with(Mode::Pid1, &[], |cmd| {
                let mut wrapped = Command::new("unshare");
                wrapped
                    .args(["--pid", "--fork", "--mount-proc"])
                    .arg(&tini)
                    .arg("--")
                    .arg(TESTAPP)
                    .args(app)
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                *cmd = wrapped;
            });
            run.ready();
            Backend {
                run,
                port,
                check_port: port,
            }
        }
    }
}

fn stop_one_under_load(init: Init) -> Outcome {
    let stopped = backend(init);
    let kept = backend(init);
    let check_path = match init {
        Init::Lifeguard => "/readyz",
        Init::LifeguardReadyPort => "",
        Init::Tini => "/health",
    };
    let lb = Balancer::start(
        &[
            (stopped.port, stopped.check_port),
            (kept.port, kept.check_port),
        ],
        check_path,
    );
    // Both servers up: requests reach each.
    wait_until("HAProxy to serve from both servers", || {
        fetch(lb.port, "/").then_some(())?;
        let seen = |b: &Backend| b.run.stdout().iter().filter(|l| *l == "request /").count();
        (seen(&stopped) > 0 && seen(&kept) > 0).then_some(())
    });
    let mut stopped = stopped;
    let outcome = across_a_stop(&lb, || {
        stopped.run.expect_line("request /slow/4000");
        stopped.run.signal(libc::SIGTERM);
        let _ = stopped.run.wait_exit();
    });
    drop(lb);
    drop(kept);
    outcome
}

#[test]
fn no_request_fails_across_a_stop_behind_haproxy_under_lifeguard_unlike_tini() {
    let guarded = stop_one_under_load(Init::Lifeguard);
    let bare = stop_one_under_load(Init::Tini);
    eprintln!(
        "across one stop behind HAProxy: lifeguard {} of {} failed (long request ok: {}); \
         tini {} of {} failed (long request ok: {})",
        guarded.failed,
        guarded.sent,
        guarded.long_request_ok,
        bare.failed,
        bare.sent,
        bare.long_request_ok
    );
    assert!(
        guarded.long_request_ok,
        "the 4 s request in flight failed under lifeguard"
    );
    assert_eq!(guarded.failed, 0, "failed requests under lifeguard");
    assert!(
        guarded.sent > 50,
        "too little traffic to tell: {}",
        guarded.sent
    );
    // The control: without the drain the long request dies with the app.
    assert!(
        !bare.long_request_ok && bare.failed >= 1,
        "tini lost nothing?"
    );
}

#[test]
fn no_request_fails_across_a_stop_behind_haproxy_checking_the_ready_port_by_tcp() {
    // The check a Kubernetes tcpSocket probe or an NLB makes: a TCP connect to the ready
    // port, which PID 1 closes at the SIGTERM, so the server leaves the pool at once.
    let outcome = stop_one_under_load(Init::LifeguardReadyPort);
    eprintln!(
        "across one stop behind HAProxy checking the ready port: {} of {} failed",
        outcome.failed, outcome.sent
    );
    assert!(outcome.long_request_ok, "the 4 s request in flight failed");
    assert_eq!(outcome.failed, 0, "failed requests");
    assert!(
        outcome.sent > 50,
        "too little traffic to tell: {}",
        outcome.sent
    );
}
