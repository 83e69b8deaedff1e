//! The readiness mirror (`lifeguard --mirror-ready-port PORT`): a lifeguard of its own
//! beside the app's, in the same network namespace, whose `/readyz` follows the app's
//! ready port as the kernel's socket table shows it — 503 before the app is ready, 200
//! once it is, 503 from the SIGTERM and after the app's exit — without ever connecting
//! to the port; on IPv6 alone; reaping what is re-parented to it; refusing what it
//! cannot honour; and, at the peak (300 spinning threads in a 0.25-CPU task), answering
//! every check from a sibling cgroup while the helper inside the app's cgroup cannot.
mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::netns::in_own_netns;
use common::task::Task;
use common::*;

/// The mirror as PID 1 of a PID namespace of its own, watching `watched`, listening on
/// 127.0.0.1:`port`.
fn start_mirror(watched: &str, port: u16, extra: &[&str]) -> Run {
    let listen = listen_flag(port);
    let mut all = vec!["--mirror-ready-port", watched, "--listen", &listen];
    all.extend_from_slice(extra);
    start(Mode::Pid1, &all)
}

/// GET /readyz on the mirror: the status, or 0 when no answer came.
fn readyz(port: u16) -> u16 {
    request(port, "GET", "/readyz").map_or(0, |(status, _)| status)
}

/// How long until the mirror's /readyz answers `status`, asked every 5 ms.
fn time_until(port: u16, status: u16, what: &str) -> Duration {
    let start = Instant::now();
    wait_until(what, || (readyz(port) == status).then_some(()));
    start.elapsed()
}

/// One look of the mirror, and room for a loaded machine's scheduling.
const WITHIN_ONE_LOOK: Duration = Duration::from_millis(600);

#[test]
fn it_follows_the_app_containers_ready_port_from_start_to_exit() {
    let (mirror_port, ready, check) = (free_port(), free_port(), free_port());
    let mut mirror = start_mirror(&ready.to_string(), mirror_port, &["-v"]);
    wait_for_answer(
        mirror_port,
        "/readyz",
        503,
        &format!("not ready: nothing listens on port {ready}"),
    );
    assert_eq!(get(mirror_port, "/livez"), (200, "alive".into()));
    // The app's lifeguard, ready once its app check passes.
    let ready_text = ready.to_string();
    let check_addr = format!("127.0.0.1:{check}");
    let mut app = start(
        Mode::Pid1,
        &args(
            &[
                "-v",
                "--ready-port",
                &ready_text,
                "--ready-tcp",
                &check_addr,
                "--ready-interval",
                "100ms",
                "--drain-delay",
                "3s",
                "--grace",
                "10s",
            ],
            &[],
        ),
    );
    app.ready();
    app.expect_log("ready port bound");
    for _ in 0..5 {
        assert_eq!(readyz(mirror_port), 503, "ready before the app is");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The app turns ready: the ready port listens, and the mirror follows within a look.
    let target = TcpListener::bind(("127.0.0.1", check)).unwrap();
    wait_until("the ready port to listen", || {
        TcpStream::connect(("127.0.0.1", ready)).ok()
    });
    let took = time_until(mirror_port, 200, "the mirror to answer 200");
    assert!(
        took < WITHIN_ONE_LOOK,
        "200 only {took:?} after the ready port listened"
    );
    mirror.expect_log("the app's ready port listens: /readyz answers 200");
    // SIGTERM to the app's lifeguard: its ready port closes at once, the mirror follows
    // while the app still runs (its drain is 3 s).
    app.signal(libc::SIGTERM);
    let took = time_until(
        mirror_port,
        503,
        "the mirror to answer 503 after the SIGTERM",
    );
    assert!(
        took < WITHIN_ONE_LOOK,
        "503 only {took:?} after the SIGTERM"
    );
    assert!(alive(app.app_pid()), "the app runs on through the drain");
    app.expect_exit(0);
    assert_eq!(readyz(mirror_port), 503);
    drop(target);
    mirror.signal(libc::SIGTERM);
    mirror.expect_exit(0);
    mirror.expect_log("the readiness mirror stops");
}

#[test]
fn it_turns_not_ready_within_a_look_of_the_apps_exit() {
    let (mirror_port, ready) = (free_port(), free_port());
    let mut mirror = start_mirror(&ready.to_string(), mirror_port, &[]);
    let ready_text = ready.to_string();
    // No app check: ready once spawned; the app exits on SIGUSR1.
    let mut app = start(
        Mode::Pid1,
        &args(&["--ready-port", &ready_text], &["--exit-on", "USR1"]),
    );
    app.ready();
    time_until(mirror_port, 200, "the mirror to answer 200");
    send(app.app_pid(), libc::SIGUSR1);
    let took = time_until(
        mirror_port,
        503,
        "the mirror to answer 503 after the app's exit",
    );
    assert!(
        took < WITHIN_ONE_LOOK + Duration::from_millis(400),
        "{took:?}"
    );
    app.expect_exit(0);
    mirror.signal(libc::SIGTERM);
    mirror.expect_exit(0);
}

#[test]
fn no_check_ever_connects_to_the_watched_port() {
    // The port's listener is the test's own: whatever connected would wait in its
    // accept queue, which nobody empties.
    let watched = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = watched.local_addr().unwrap().port();
    let mirror_port = free_port();
    let mut mirror = start_mirror(&port.to_string(), mirror_port, &[]);
    time_until(mirror_port, 200, "the mirror to answer 200");
    for _ in 0..200 {
        assert_eq!(readyz(mirror_port), 200);
    }
    watched.set_nonblocking(true).unwrap();
    match watched.accept() {
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a connection reached the watched port: {other:?}"),
    }
    mirror.signal(libc::SIGTERM);
    mirror.expect_exit(0);
}

#[test]
fn a_host_narrows_the_listeners_that_count() {
    let watched = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = watched.local_addr().unwrap().port();
    let (on_it, elsewhere) = (free_port(), free_port());
    let mut a = start_mirror(&format!("127.0.0.1:{port}"), on_it, &[]);
    let mut b = start_mirror(&format!("127.0.0.2:{port}"), elsewhere, &[]);
    time_until(on_it, 200, "the mirror on 127.0.0.1 to answer 200");
    time_until(elsewhere, 503, "the mirror on 127.0.0.2 to answer");
    for _ in 0..20 {
        assert_eq!(
            readyz(elsewhere),
            503,
            "a listener on 127.0.0.1 is not 127.0.0.2's"
        );
    }
    for run in [&mut a, &mut b] {
        run.signal(libc::SIGTERM);
        run.expect_exit(0);
    }
}

#[test]
fn in_an_ipv6_only_namespace_it_listens_and_sees_on_ipv6() {
    in_own_netns(|| {
        let done = std::process::Command::new("ip")
            .args(["addr", "del", "127.0.0.1/8", "dev", "lo"])
            .status()
            .expect("THIS TEST CANNOT RUN: no `ip` (iproute2)");
        assert!(done.success(), "THIS TEST CANNOT RUN: ip addr del failed");
        let watched = TcpListener::bind("[::1]:0").unwrap();
        let port = watched.local_addr().unwrap().port();
        // The default --listen, [::]:9597 (this namespace is the test's alone).
        let mut mirror = start_with(
            Mode::Pid1,
            &["--mirror-ready-port", &port.to_string()],
            |c| {
                c.env_remove("LIFEGUARD_LISTEN");
            },
        );
        let at = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 9597));
        wait_until("the mirror to answer 200 on [::1]:9597", || {
            (request_at(at, "GET", "/readyz").ok()? == (200, "ready".into())).then_some(())
        });
        drop(watched);
        wait_until("the mirror to answer 503 on [::1]:9597", || {
            (request_at(at, "GET", "/readyz").ok()?.0 == 503).then_some(())
        });
        mirror.signal(libc::SIGTERM);
        mirror.expect_exit(0);
    });
}

#[test]
fn it_reaps_what_is_re_parented_to_it_as_any_pid_1() {
    let mirror_port = free_port();
    let mut mirror = start_mirror("9", mirror_port, &["-w"]);
    time_until(mirror_port, 503, "the mirror to answer");
    // As `docker exec` does: a shell enters the mirror's PID namespace, starts a child
    // and leaves; the child, orphaned, is re-parented to the mirror (the namespace's
    // init), and its exit is the mirror's to reap.
    let done = std::process::Command::new("nsenter")
        .args(["--target", &mirror.pid.to_string(), "--pid", "--"])
        .args(["sh", "-c", "sleep 0.2 & exit 0"])
        .status()
        .expect("THIS TEST CANNOT RUN: no nsenter (util-linux)");
    assert!(done.success());
    mirror.expect_log("reaped a zombie");
    wait_until("no zombie under the mirror", || {
        children(mirror.pid)
            .into_iter()
            .all(|pid| state(pid) != Some('Z'))
            .then_some(())
    });
    mirror.signal(libc::SIGTERM);
    mirror.expect_exit(0);
}

/// lifeguard's exit code and stderr for `args` with `env`, run to its end.
fn refused(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = lifeguard();
    cmd.args(args).envs(env.iter().copied());
    let out = cmd.output().expect("run lifeguard");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_errors_name_the_flag_or_variable_and_what_it_takes() {
    let rows: &[(&[&str], &[(&str, &str)], &str)] = &[
        (&["--mirror-ready-port", "65536"], &[], "is not a TCP port"),
        (
            &["--mirror-ready-port", "9596", "--", "app"],
            &[],
            "takes no COMMAND",
        ),
        (
            &["--mirror-ready-port", "9596", "--inflight-port", "8080"],
            &[],
            "--inflight-port cannot apply to the readiness mirror",
        ),
        (
            &[],
            &[("LIFEGUARD_MIRROR_READY_PORT", "x")],
            "(the value comes from the environment variable LIFEGUARD_MIRROR_READY_PORT)",
        ),
        (
            &["--mirror-ready-port", "9596", "--listen", "off"],
            &[],
            "--listen off leaves the readiness mirror nothing to serve",
        ),
    ];
    for (args, env, want) in rows {
        let (code, stderr) = refused(args, env);
        assert_eq!(code, 2, "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?} {env:?}: {stderr}");
    }
    // A port someone else holds: 125, naming the address.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = refused(&["--mirror-ready-port", "9596", "--listen", &addr], &[]);
    assert_eq!(code, 125, "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
}

#[test]
fn the_variable_alone_runs_the_mirror() {
    let mirror_port = free_port();
    let listen = listen_flag(mirror_port);
    // An environment shared with the app's container (a pod's envFrom, compose's
    // env_file) brings the app's variables along: said, not refused.
    let mut mirror = start_with(Mode::Subreaper, &["--listen", &listen], |c| {
        c.env("LIFEGUARD_MIRROR_READY_PORT", "9")
            .env("LIFEGUARD_DRAIN_DELAY", "2s")
            .env("LIFEGUARD_LOG_FORMAT", "json");
    });
    wait_for_answer(
        mirror_port,
        "/readyz",
        503,
        "not ready: nothing listens on port 9",
    );
    let line = mirror.expect_log("LIFEGUARD_DRAIN_DELAY ignored: the readiness mirror runs no app");
    let json: serde_json::Value = serde_json::from_str(&line).expect("a JSON log line");
    assert_eq!(json["level"], "warning", "{line}");
    mirror.signal(libc::SIGTERM);
    mirror.expect_exit(0);
}

#[test]
fn a_port_never_seen_is_said_once_with_its_likely_cause() {
    let mirror_port = free_port();
    let watched = free_port();
    let mut mirror = start_mirror(&watched.to_string(), mirror_port, &[]);
    let started = Instant::now();
    let line = wait_until_patient(Duration::from_secs(90), || {
        mirror
            .stderr()
            .into_iter()
            .find(|l| l.contains("nothing has listened on port"))
    });
    assert!(
        started.elapsed() >= Duration::from_secs(59),
        "said too soon"
    );
    assert!(
        line.contains("ECS bridge mode") && line.contains(&format!("--ready-port {watched}")),
        "{line}"
    );
    mirror.signal(libc::SIGTERM);
    mirror.expect_exit(0);
    let said = mirror.stderr();
    let times = said
        .iter()
        .filter(|l| l.contains("nothing has listened"))
        .count();
    assert_eq!(times, 1, "{said:?}");
}

// ---------------------------------------------------------------------------------------
// At the peak.

/// An HTTP check as a load balancer makes one: a new connection, GET, the status line,
/// all within `timeout`. The seconds it took, or None for a failure.
fn check(port: u16, timeout: Duration) -> Option<f64> {
    let start = Instant::now();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    let left = timeout.checked_sub(start.elapsed())?;
    stream.set_read_timeout(Some(left)).ok()?;
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    let took = start.elapsed();
    (head.starts_with(b"HTTP/1.1 200") && took < timeout).then_some(took.as_secs_f64())
}

/// Checks of `port` every `every` for `length`, each on a thread of its own (a slow
/// answer does not hold the next check back, as a balancer's do not).
fn checks(port: u16, every: Duration, length: Duration) -> Arc<Mutex<Vec<Option<f64>>>> {
    let out = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut threads = Vec::new();
    let mut n = 0u32;
    while every * n < length {
        let out = out.clone();
        threads.push(std::thread::spawn(move || {
            let took = check(port, Duration::from_secs(2));
            out.lock().unwrap().push(took);
        }));
        n += 1;
        let next = start + every * n;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    for t in threads {
        t.join().unwrap();
    }
    out
}

fn p99(results: &[Option<f64>]) -> String {
    let mut ok: Vec<f64> = results.iter().flatten().copied().collect();
    ok.sort_by(f64::total_cmp);
    match ok.get((ok.len() * 99).div_ceil(100).saturating_sub(1)) {
        Some(v) => format!("{:.0} ms", v * 1000.0),
        None => "none answered".into(),
    }
}

#[test]
fn at_the_peak_the_mirror_answers_every_check_from_a_sibling_cgroup() {
    require_root();
    let mut task = Task::new("lifeguard-mirror-peak");
    let app_group = task.container("app", 1024);
    let mirror_group = task.container("mirror", 64);
    let (endpoint, ready, mirror_port) = (free_port(), free_port(), free_port());
    let (listen, ready_text) = (listen_flag(endpoint), ready.to_string());
    let mirror_listen = listen_flag(mirror_port);
    let mut mirror = start_under(
        Mode::Subreaper,
        &Task::wrapper(&mirror_group)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[
            "--mirror-ready-port",
            &ready_text,
            "--listen",
            &mirror_listen,
        ],
    );
    let app = start_under(
        Mode::Subreaper,
        &Task::wrapper(&app_group)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &args(
            &[
                "--listen",
                &listen,
                "--ready-port",
                &ready_text,
                "--drain-delay",
                "0",
            ],
            &["--burn-threads", "300"],
        ),
    );
    app.ready();
    wait_until_patient(Duration::from_secs(60), || {
        (readyz(mirror_port) == 200).then_some(())
    });
    let throttled_before = task.throttled();
    let length = Duration::from_secs(60);
    let every = Duration::from_millis(500);
    let in_group = std::thread::spawn(move || checks(endpoint, every, length));
    let beside = checks(mirror_port, every, length);
    let in_group = in_group.join().unwrap();
    let (beside, in_group) = (beside.lock().unwrap(), in_group.lock().unwrap());
    let failed = |r: &[Option<f64>]| r.iter().filter(|v| v.is_none()).count();
    let throttled = task.throttled() - throttled_before;
    // Said whatever the outcome: the figures are the test's point.
    eprintln!(
        "at the peak (300 spinning threads, 0.25 CPU, throttled {throttled} times in 60 s; \
         checks every 0.5 s, 2 s timeout): the mirror (cpu.shares 64) failed {} of {}, p99 {}; \
         the helper's /readyz in the app's cgroup failed {} of {}, p99 {}",
        failed(&beside),
        beside.len(),
        p99(&beside),
        failed(&in_group),
        in_group.len(),
        p99(&in_group),
    );
    assert!(
        throttled > 100,
        "the task was not at its quota: throttled {throttled} times"
    );
    assert_eq!(failed(&beside), 0, "the mirror missed checks at the peak");
    // The app is not the point here: killed with everything it runs.
    drop(app);
    mirror.signal(libc::SIGTERM);
    mirror.expect_exit(0);
}

/// CPU time process `pid` has had (user and system), in clock ticks (proc(5): fields 14
/// and 15 of /proc/PID/stat, counted after the command name's closing parenthesis).
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Sets process `pid`'s soft descriptor limit while it runs (the hard one stays: raising
/// it again would take CAP_SYS_RESOURCE, which a container's root may lack).
fn set_nofile(pid: i32, limit: usize) {
    let out = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={limit}:")])
        .output()
        .expect("THIS TEST CANNOT RUN: no prlimit (util-linux)");
    assert!(
        out.status.success(),
        "prlimit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn out_of_descriptors_with_no_connection_to_close_it_rests_rather_than_spins() {
    // The mirror's descriptor limit lowered, while it runs, to the descriptors it holds:
    // a check then waits in the listener's queue and cannot be accepted (EMFILE), and
    // the mirror has no connection of its own to close to make room. The queued check
    // keeps the listener readable; the mirror must rest, not spin on it. Given room
    // again, it answers the check that waited.
    let mirror_port = free_port();
    let mirror = start_mirror("9", mirror_port, &[]);
    let pid = mirror.pid;
    // Listening (the kernel's table says so; no connection is made to find out), and
    // asleep in its one wait: its descriptors stay as they are until something comes.
    let listening = format!(":{mirror_port:04X} 00000000:0000 0A");
    wait_until("the mirror to listen and wait", || {
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        let waiting =
            std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.contains("poll"));
        (table.contains(&listening) && waiting).then_some(())
    });
    // The limit at the lowest descriptor number free (the kernel gives a new descriptor
    // the lowest free number), and a check. Should a descriptor come free below the limit
    // all the same, the check is accepted and answered: then again, with the descriptors
    // as they are by then.
    let queued = (0..3).find_map(|_| {
        let open: Vec<usize> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        set_nofile(pid, (0..).find(|n| !open.contains(n)).unwrap());
        let mut check = TcpStream::connect(("127.0.0.1", mirror_port)).unwrap();
        check
            .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        check
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut answered = [0u8; 64];
        match check.read(&mut answered) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Some(check)
            }
            _ => None,
        }
    });
    let mut check =
        queued.expect("THIS TEST CANNOT RUN as meant: every check was accepted despite the limit");
    let before = cpu_ticks(pid);
    // A measurement window, not a wait for a condition: what the mirror spends in it.
    std::thread::sleep(Duration::from_secs(2));
    let spent = cpu_ticks(pid) - before;
    // A spin takes a whole core: about 200 ticks in 2 s (USER_HZ is 100).
    assert!(
        spent <= 20,
        "the mirror spent {spent} ticks of CPU in 2 s with a check it cannot accept:\n{}",
        mirror.transcript()
    );
    set_nofile(pid, 1024);
    check
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = String::new();
    check
        .read_to_string(&mut answer)
        .expect("the check that waited is answered once there is room");
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
}

#[test]
fn its_http_keeps_the_endpoints_limits() {
    let mirror_port = free_port();
    let mut mirror = start_mirror("9", mirror_port, &[]);
    time_until(mirror_port, 503, "the mirror to answer");
    let connect = || {
        let stream = TcpStream::connect(("127.0.0.1", mirror_port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
    };
    // 300 pipelined requests in one write, the client then waiting for every answer:
    // all come, on the one connection, with no more sent.
    let mut pipelined = connect();
    let one = "GET /livez HTTP/1.1\r\nHost: x\r\n\r\n";
    pipelined.write_all(one.repeat(300).as_bytes()).unwrap();
    let (mut got, mut answers, started) = (Vec::new(), 0, Instant::now());
    let mut buf = [0u8; 65536];
    while answers < 300 {
        let n = pipelined
            .read(&mut buf)
            .expect("the answers stopped coming");
        assert!(n > 0, "closed after {answers} answers");
        got.extend_from_slice(&buf[..n]);
        answers = String::from_utf8_lossy(&got)
            .matches("HTTP/1.1 200 OK")
            .count();
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // A head past 16 KiB: 431, and the connection ends with the answer, not a reset.
    let mut large = connect();
    let head = format!("GET /readyz HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let _ = large.write_all(head.as_bytes());
    let mut text = String::new();
    large
        .read_to_string(&mut text)
        .expect("the answer, then the end");
    assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
    // Other methods and paths.
    assert_eq!(request(mirror_port, "POST", "/readyz").unwrap().0, 405);
    assert_eq!(request(mirror_port, "GET", "/metrics").unwrap().0, 404);
    // A head that never ends is closed within the 5 s it has.
    let mut slow = connect();
    slow.write_all(b"GET /readyz HTTP/1.1\r\nHost:").unwrap();
    let started = Instant::now();
    let n = slow.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "an answer to half a head");
    let took = started.elapsed();
    assert!(
        took > Duration::from_secs(4) && took < Duration::from_secs(8),
        "{took:?}"
    );
    mirror.signal(libc::SIGTERM);
    mirror.expect_exit(0);
}
