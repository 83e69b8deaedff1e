//! HAProxy (Debian package, installed by scripts/test.sh) as the load balancer of the
//! drain tests: active HTTP health checks every 500 ms and no retries, as an ALB; and
//! steady traffic through it across the stop of one server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::free_port;

pub use super::installed;

/// HAProxy on 127.0.0.1, killed on drop.
pub struct Balancer {
    child: Child,
    dir: PathBuf,
    pub port: u16,
}

/// How HAProxy's active health checks run: every `inter`, `fall` failures in a row
/// take a server out.
#[derive(Clone, Copy)]
/// `balance` is HAProxy's algorithm: `roundrobin`, or `first` (every request to the
/// first server up, so it keeps getting all of them until it is taken out).
pub struct Checks {
    pub inter: &'static str,
    pub fall: u32,
    pub balance: &'static str,
}

/// As an ALB's fastest: every 500 ms, one failure takes the server out.
pub const QUICK_CHECKS: Checks = Checks {
    inter: "500ms",
    fall: 1,
    balance: "roundrobin",
};

impl Balancer {
    /// Round robin over `servers` (app port, port HAProxy checks); `/slow/4000` always
    /// goes to the first (the one the test stops), so the long request is in flight
    /// where the stop happens.
    pub fn start(servers: &[(u16, u16)], check_path: &str) -> Balancer {
        Balancer::start_with(servers, check_path, QUICK_CHECKS)
    }

    /// As `start`, with the health checks' timing given. An empty `check_path` makes
    /// the checks TCP connects (HAProxy's default `check`, as an NLB's TCP check).
    pub fn start_with(servers: &[(u16, u16)], check_path: &str, checks: Checks) -> Balancer {
        let haproxy = installed("haproxy");
        let dir = std::env::temp_dir().join(format!(
            "lifeguard-haproxy-{}-{}",
            std::process::id(),
            servers[0].0
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let servers: String = servers
            .iter()
            .enumerate()
            .map(|(i, (port, check))| {
                format!("  server s{i} 127.0.0.1:{port} check port {check}\n")
            })
            .collect();
        let config = format!(
            "global\n  maxconn 512\n\
             defaults\n  mode http\n  timeout connect 1s\n  timeout client 10s\n  timeout server 10s\n  \
             retries 0\n  option http-server-close\n\
             frontend web\n  bind 127.0.0.1:{port}\n  default_backend app\n\
             backend app\n  balance {balance}\n{http_check}  \
             default-server inter {inter} fall {fall} rise 1\n  \
             use-server s0 if {{ path_beg /slow/4000 }}\n{servers}",
            http_check = if check_path.is_empty() {
                String::new()
            } else {
                format!("  option httpchk GET {check_path}\n")
            },
            inter = checks.inter,
            fall = checks.fall,
            balance = checks.balance,
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
pub fn fetch(port: u16, path: &str) -> bool {
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
pub struct Outcome {
    pub sent: u64,
    pub failed: u64,
    pub long_request_ok: bool,
}

/// Steady traffic through `lb` (two clients in a loop), and a 4-second request that
/// lands on the first server; `stop` waits until that server has it, stops it and
/// returns when it is gone. Traffic goes on a moment longer, then ends.
pub fn across_a_stop(lb: &Balancer, stop: impl FnOnce()) -> Outcome {
    let done = Arc::new(AtomicBool::new(false));
    let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut steady = Vec::new();
    for _ in 0..2 {
        let (done, sent, failed, port) = (done.clone(), sent.clone(), failed.clone(), lb.port);
        steady.push(std::thread::spawn(move || {
            // Bounded: at most 30 s or until told to stop.
            let until = Instant::now() + Duration::from_secs(30);
            while !done.load(Ordering::SeqCst) && Instant::now() < until {
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
    stop();
    let long_request_ok = long.join().unwrap();
    // Traffic after the stop: what the balancer still sends to the stopped server.
    std::thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::SeqCst);
    for t in steady {
        t.join().unwrap();
    }
    Outcome {
        sent: sent.load(Ordering::SeqCst) + 1,
        failed: failed.load(Ordering::SeqCst) + u64::from(!long_request_ok),
        long_request_ok,
    }
}
