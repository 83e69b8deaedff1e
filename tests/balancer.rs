//! Behind a real load balancer (issue #8): HAProxy (Debian package, installed by
//! scripts/test.sh) with active HTTP health checks every 500 ms and no retries, as an
//! ALB, in front of two servers that die on SIGTERM. Steady traffic flows through it
//! while one server is stopped, with a 4-second request in flight on that server.
//! Under lifeguard nothing fails; under tini (`tini -- app`, health checks on the app's
//! own port) the failures are counted, the long request's among them. All on loopback.
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

fn installed(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"] {
        let path = PathBuf::from(dir).join(name);
        if path.exists() {
            return path;
        }
    }
    panic!("THIS TEST CANNOT RUN: `{name}` is not installed (scripts/test.sh installs it)");
}

/// One backend: the testapp's web server under an init, and the port HAProxy checks.
struct Backend {
    run: Run,
    port: u16,
    check_port: u16,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Init {
    Lifeguard,
    Tini,
}

fn backend(init: Init) -> Backend {
    let port = free_port();
    let port_text = port.to_string();
    let app = ["--http", &port_text, "--die-on-term"];
    match init {
        Init::Lifeguard => {
            let check_port = free_port();
            let listen = listen_flag(check_port);
            let run = start(
                Mode::Pid1,
                &args(
                    &[
                        "-v",
                        "--listen",
                        &listen,
                        "--drain-delay",
                        "2s",
                        "--inflight-port",
                        &port_text,
                    ],
                    &app,
                ),
            );
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

/// HAProxy on 127.0.0.1, killed on drop.
struct Balancer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Balancer {
    /// Round robin over `backends`; `/slow/4000` always goes to the first (the one the
    /// test stops), so the long request is in flight where the stop happens.
    fn start(backends: &[&Backend], check_path: &str) -> Balancer {
        let haproxy = installed("haproxy");
        let dir = std::env::temp_dir().join(format!(
            "lifeguard-haproxy-{}-{}",
            std::process::id(),
            backends[0].port
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                format!(
                    "  server s{i} 127.0.0.1:{} check port {}\n",
                    b.port, b.check_port
                )
            })
            .collect();
        let config = format!(
            "global\n  maxconn 512\n\
             defaults\n  mode http\n  timeout connect 1s\n  timeout client 10s\n  timeout server 10s\n  \
             retries 0\n  option http-server-close\n\
             frontend web\n  bind 127.0.0.1:{port}\n  default_backend app\n\
             backend app\n  balance roundrobin\n  option httpchk GET {check_path}\n  \
             default-server inter 500ms fall 1 rise 1\n  \
             use-server s0 if {{ path_beg /slow/4000 }}\n{servers}"
        );
        std::fs::write(dir.join("haproxy.cfg"), config).unwrap();
        let child = Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(dir.join("haproxy.cfg"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .unwrap();
        Balancer { child, dir, port }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- haproxy log\n{}",
                std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
            );
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One request through the balancer: true for a 200.
fn fetch(port: u16, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    if write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return false;
    }
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200")
}

/// Requests that failed, out of those sent, across the stop of the first backend.
struct Outcome {
    sent: u64,
    failed: u64,
    long_request_ok: bool,
}

fn stop_one_under_load(init: Init) -> Outcome {
    let stopped = backend(init);
    let kept = backend(init);
    let check_path = if init == Init::Lifeguard {
        "/readyz"
    } else {
        "/health"
    };
    let lb = Balancer::start(&[&stopped, &kept], check_path);
    // Both servers up: requests reach each.
    wait_until("HAProxy to serve from both servers", || {
        fetch(lb.port, "/").then_some(())?;
        let seen = |b: &Backend| b.run.stdout().iter().filter(|l| *l == "request /").count();
        (seen(&stopped) > 0 && seen(&kept) > 0).then_some(())
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut steady = Vec::new();
    for _ in 0..2 {
        let (stop, sent, failed, port) = (stop.clone(), sent.clone(), failed.clone(), lb.port);
        steady.push(std::thread::spawn(move || {
            // Bounded: at most 30 s or until told to stop.
            let until = Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                sent.fetch_add(1, Ordering::SeqCst);
                if !fetch(port, "/slow/20") {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    let long = {
        let port = lb.port;
        std::thread::spawn(move || fetch(port, "/slow/4000"))
    };
    stopped.run.expect_line("request /slow/4000");
    let mut stopped = stopped;
    stopped.run.signal(libc::SIGTERM);
    let _ = stopped.run.wait_exit();
    let long_request_ok = long.join().unwrap();
    // Traffic goes on a moment after the stop, then ends.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    for t in steady {
        t.join().unwrap();
    }
    drop(lb);
    drop(kept);
    let failed = failed.load(Ordering::SeqCst) + u64::from(!long_request_ok);
    Outcome {
        sent: sent.load(Ordering::SeqCst) + 1,
        failed,
        long_request_ok,
    }
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
