//! No helper can take PID 1 down or slow it down, shown in the shipped
//! configuration: a build with the release profile's panic strategy and code
//! generation, plus the `fault-injection` feature, whose helpers panic or hang at named
//! points (LIFEGUARD_FAULT; src/faults.rs). For each fault, lifeguard as PID 1 still
//! gets a signal to the app within 100 ms, still drains and relays on SIGTERM, still
//! kills at the grace deadline, and exits with the app's status. The shipped release
//! binary itself carries no fault points. And the endpoint survives a storm of
//! malformed, random, oversized and smuggling-shaped requests.
mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::cloudwatch::Emulator;
use common::*;

const DRAIN: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(6);

/// lifeguard (fault-injection build) as PID 1 with `fault` armed, a 1 s drain and a 6 s
/// grace, supervising a testapp that ignores SIGTERM (so the deadline must kill it).
fn start_faulty(fault: &str, flags: &[&str], env: &[(&str, String)]) -> Run {
    let mut all = vec!["-v", "--drain-delay", "1s", "--grace", "6s"];
    all.extend_from_slice(flags);
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let fault = fault.to_string();
    let run = start_program(
        fault_build(),
        Mode::Pid1,
        &args(&all, &["--exit-on", "none"]),
        move |cmd| {
            cmd.env("LIFEGUARD_FAULT", &fault);
            for (k, v) in &env {
                cmd.env(k, v);
            }
        },
    );
    run.ready();
    run
}

/// How long a signal takes from the test's kill() to the app's line, the median of
/// three (each sent after the last arrived).
fn signal_latency(run: &Run) -> Duration {
    let count = |run: &Run| run.stdout().iter().filter(|l| *l == "signal USR1").count();
    let mut times: Vec<Duration> = (0..3)
        .map(|_| {
            let before = count(run);
            let sent = Instant::now();
            run.signal(libc::SIGUSR1);
            wait_until("USR1 at the app", || (count(run) > before).then_some(()));
            sent.elapsed()
        })
        .collect();
    times.sort();
    times[1]
}

/// What must hold whatever a helper did: signals reach the app within 100 ms, SIGTERM
/// drains then relays (within `relay_within` of the SIGTERM), the grace deadline kills
/// the app that ignored it, and lifeguard exits with the app's status (137, SIGKILL).
fn still_supervises(mut run: Run, what: &str, relay_within: Duration) {
    let term = relays_after_the_drain(&run, what, relay_within);
    let code = run.wait_exit();
    let ended = term.elapsed();
    assert_eq!(code, 137, "{what}: exit status\n{}", run.transcript());
    assert!(
        ended >= GRACE && ended < GRACE + Duration::from_secs(2),
        "{what}: the deadline killed after {ended:?}, grace {GRACE:?}\n{}",
        run.transcript()
    );
}

/// The value of `series` (name and labels as written) in `/metrics`.
fn metric(port: u16, series: &str) -> Option<f64> {
    let (status, body) = request(port, "GET", "/metrics").ok()?;
    if status != 200 {
        return None;
    }
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn failures_of(port: u16, helper: &str) -> Option<f64> {
    metric(
        port,
        &format!("lifeguard_helper_failures_total{{helper=\"{helper}\"}}"),
    )
}

#[test]
fn a_panic_in_the_endpoints_accept_loop_restarts_the_endpoint() {
    let port = free_port();
    let run = start_faulty("endpoint-accept:1", &["--listen", &listen_flag(port)], &[]);
    // The first connection makes the accept loop panic: that one gets nothing.
    assert!(
        request(port, "GET", "/livez").map_or(true, |(status, _)| status != 200),
        "the first request should meet the panic"
    );
    run.expect_log("panic in the endpoint helper");
    run.expect_log("endpoint restarts in");
    // Restarted in place on the same socket: a container is not restarted for it.
    wait_for_answer(port, "/livez", 200, "alive");
    wait_until("the failure counted", || {
        (failures_of(port, "endpoint")? == 1.0).then_some(())
    });
    still_supervises(run, "endpoint-accept", DRAIN + Duration::from_millis(500));
}

#[test]
fn a_panic_answering_a_request_costs_that_request() {
    let port = free_port();
    let run = start_faulty("endpoint-request:3", &["--listen", &listen_flag(port)], &[]);
    for _ in 0..3 {
        let answer = request(port, "GET", "/readyz");
        assert!(
            answer.as_ref().map_or(true, |(status, _)| *status != 200),
            "{answer:?}"
        );
    }
    run.expect_log("panic in the endpoint helper");
    // The endpoint never went away: the next request is answered.
    assert_eq!(get(port, "/livez"), (200, "alive".to_string()));
    assert_eq!(failures_of(port, "endpoint"), Some(3.0));
    still_supervises(run, "endpoint-request", DRAIN + Duration::from_millis(500));
}

#[test]
fn a_panicking_app_check_leaves_the_app_starting_and_supervised() {
    let port = free_port();
    let app_port = free_port();
    let run = start_faulty(
        "app-check",
        &[
            "--listen",
            &listen_flag(port),
            "--ready-tcp",
            &listen_flag(app_port),
        ],
        &[],
    );
    run.expect_log("panic in the app-check helper");
    run.expect_log("app-check restarts in");
    assert_eq!(get(port, "/readyz"), (503, "starting".to_string()));
    assert!(failures_of(port, "app-check").unwrap() >= 1.0);
    still_supervises(run, "app-check", DRAIN + Duration::from_millis(500));
}

/// `--drain-max` with a 1 s drain and a 6 s grace: halfway between them.
const DRAIN_MAX: Duration = Duration::from_millis(3500);

#[test]
fn a_panicking_sampler_holds_the_stop_to_drain_max_and_says_why() {
    // The drain's hold reads the sampler's figures; with none coming it cannot tell the
    // app is idle (late is not quiet): it holds to --drain-max (3.5 s), says so once,
    // and the deadline still kills.
    let port = free_port();
    let app_port = free_port();
    let run = start_faulty(
        "sampler",
        &[
            "--listen",
            &listen_flag(port),
            "--inflight-port",
            &app_port.to_string(),
        ],
        &[],
    );
    run.expect_log("panic in the sampler helper");
    wait_until("the failure counted", || {
        (failures_of(port, "sampler")? >= 1.0).then_some(())
    });
    let said = blind_to_drain_max(run, "sampler");
    assert!(said.contains("no fresh look at the port"), "{said}");
}

/// The stop of a drain whose sampler gives no figures: relayed at --drain-max, not
/// before, with the blind hold said; the grace deadline still kills. Returns the line.
fn blind_to_drain_max(mut run: Run, what: &str) -> String {
    run.signal(libc::SIGTERM);
    let term = Instant::now();
    run.expect_line("signal TERM");
    let relayed = term.elapsed();
    assert!(
        relayed >= DRAIN_MAX - Duration::from_millis(100)
            && relayed < DRAIN_MAX + Duration::from_millis(1500),
        "{what}: the stop came {relayed:?} after the SIGTERM, --drain-max {DRAIN_MAX:?}\n{}",
        run.transcript()
    );
    let said = run.expect_log("holding the stop signal until");
    run.expect_log("--drain-max reached without a fresh look");
    let code = run.wait_exit();
    assert_eq!(code, 137, "{what}: exit status\n{}", run.transcript());
    let ended = term.elapsed();
    assert!(
        ended >= GRACE && ended < GRACE + Duration::from_secs(2),
        "{what}: the deadline killed after {ended:?}\n{}",
        run.transcript()
    );
    said
}

#[test]
fn a_hung_sampler_holds_the_stop_to_drain_max() {
    let app_port = free_port();
    let run = start_faulty(
        "sampler:hang",
        &["--inflight-port", &app_port.to_string()],
        &[],
    );
    blind_to_drain_max(run, "sampler:hang");
}

#[test]
fn a_helper_that_panics_holding_the_logging_lock_never_stalls_supervision() {
    // The first helper to log (-v: the sampler says what it samples) panics inside the
    // lock the helpers share; supervision logs through a queue of its own.
    let port = free_port();
    let run = start_faulty("log-locked:1", &["--listen", &listen_flag(port)], &[]);
    let said = run.expect_log("injected fault at log-locked");
    assert!(said.contains("helper"), "{said}");
    run.signal(libc::SIGHUP);
    run.expect_log("signal received signal=SIGHUP");
    still_supervises(run, "log-locked", DRAIN + Duration::from_millis(500));
}

#[test]
fn readiness_turns_draining_while_supervision_has_yet_to_handle_the_sigterm() {
    // The supervision thread stalls 700 ms right after it has taken the signals out of
    // the kernel's queue (what a preempted main thread on a busy machine does): the
    // SIGTERM is no longer pending and the phase not yet published, and /readyz must
    // already say draining (a CI run once caught it answering ready there).
    let port = free_port();
    let mut run = start_faulty(
        "signals-taken:pause=700",
        &["--listen", &listen_flag(port)],
        &[],
    );
    wait_until("/readyz to say ready", || {
        (get(port, "/readyz") == (200, "ready".into())).then_some(())
    });
    let sent = Instant::now();
    run.signal(libc::SIGTERM);
    // From the kill(2) on, every answer is draining: before the loop wakes (the signal
    // pending), and through the stall (taken, the phase not yet published). Asked over
    // and over for 600 ms, well inside the stall.
    let mut answers = 0;
    while sent.elapsed() < Duration::from_millis(600) {
        let answer = get(port, "/readyz");
        assert_eq!(
            answer,
            (503, "draining".into()),
            "answer {answers}, {:?} after the SIGTERM\n{}",
            sent.elapsed(),
            run.transcript()
        );
        answers += 1;
    }
    assert!(answers >= 5, "only {answers} answers in 600 ms");
    run.expect_line("signal TERM");
    assert_eq!(run.wait_exit(), 137, "{}", run.transcript());
}

#[test]
fn a_panicking_publisher_leaves_supervision_running() {
    let emulator = Emulator::start();
    let env = [
        (
            "METRICS_NAMESPACE",
            format!("LifeguardTest/faults-{}", std::process::id()),
        ),
        ("METRICS_INTERVAL", "1".to_string()),
        ("AWS_ENDPOINT_URL_CLOUDWATCH", emulator.url()),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ACCESS_KEY_ID", "AKIDLIFEGUARDTEST".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
        ("AWS_CONFIG_FILE", "/nonexistent".to_string()),
        ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent".to_string()),
    ];
    let port = free_port();
    let run = start_faulty(
        "cloudwatch-publish",
        &["--listen", &listen_flag(port)],
        &env,
    );
    run.expect_log("panic in the cloudwatch helper");
    wait_until("the failure counted", || {
        (failures_of(port, "cloudwatch")? >= 1.0).then_some(())
    });
    still_supervises(
        run,
        "cloudwatch-publish",
        DRAIN + Duration::from_millis(500),
    );
}

#[test]
fn the_shipped_binary_carries_no_fault_points() {
    // The check can fail: the fault-injection build does carry them.
    let marker = b"LIFEGUARD_FAULT";
    let contains = |path: &str| {
        let bytes = std::fs::read(path).unwrap();
        bytes.windows(marker.len()).any(|w| w == marker)
    };
    assert!(
        contains(&fault_build()[0]),
        "the fault build lacks its marker"
    );
    let shipped = static_binaries().join("lifeguard");
    assert!(
        !contains(&shipped.display().to_string()),
        "{} contains fault injection",
        shipped.display()
    );
    // And it is the shipped configuration: it unwinds (the panic strategy the helpers'
    // isolation needs). The unwinding runtime's own message is the mark of it; the
    // fault build has it too.
    let unwinds = |path: &str| {
        let mark = b"Rust cannot catch foreign exceptions";
        let bytes = std::fs::read(path).unwrap();
        bytes.windows(mark.len()).any(|w| w == mark)
    };
    assert!(
        unwinds(&shipped.display().to_string()),
        "the shipped binary aborts on panic"
    );
    assert!(unwinds(&fault_build()[0]));
}

/// Requests no endpoint should choke on: malformed, random, oversized, and shaped like
/// request smuggling (conflicting or duplicated lengths, chunked trickery, obsolete
/// line folding, bare CRs, NULs). `seed` varies the random ones.
fn hostile_request(i: usize, seed: &mut u64) -> Vec<u8> {
    let mut random = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                // xorshift64: deterministic per seed, no crate needed.
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                (*seed & 0xff) as u8
            })
            .collect()
    };
    match i % 16 {
        0 => random(1 + i % 700),
        1 => b"GET /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_vec(),
        2 => b"POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\nGET /livez HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        3 => b"GET /livez HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\nffffffffffffffff\r\n".to_vec(),
        4 => {
            let mut v = b"GET /".to_vec();
            v.extend(std::iter::repeat_n(b'a', 70_000));
            v.extend(b" HTTP/1.1\r\n\r\n");
            v
        }
        5 => {
            let mut v = b"GET /readyz HTTP/1.1\r\n".to_vec();
            for n in 0..3000 {
                v.extend(format!("X-H{n}: {}\r\n", "v".repeat(20)).as_bytes());
            }
            v.extend(b"\r\n");
            v
        }
        6 => b"GET /readyz HTTP/1.1\r\nHost: x\r\n folded: header\r\n\r\n".to_vec(),
        7 => b"GET /readyz HTTP/1.1\rHost: x\r\r\r".to_vec(),
        8 => b"GET /re\0adyz HTTP/1.1\r\nHost: \0\r\n\r\n".to_vec(),
        9 => b"GET /livez HTTP/9.9\r\n\r\n".to_vec(),
        10 => b"\r\n\r\n\r\n\r\nGET /livez HTTP/1.1\r\n\r\n".to_vec(),
        11 => b"GET http://evil.example/../../metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        12 => {
            let mut v = b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n".repeat(50);
            v.extend(random(64));
            v
        }
        13 => b"POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n".to_vec(),
        14 => b"GET /readyz HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=\"\r\n\r\n".to_vec(),
        _ => {
            let mut v = b"GET /metrics HTTP/1.1\r\n".to_vec();
            v.extend(random(200));
            v
        }
    }
}

#[test]
fn the_endpoint_survives_a_storm_of_hostile_requests() {
    // The fault-injection build with no fault armed: the shipped panic strategy.
    let port = free_port();
    let run = start_faulty("", &["--listen", &listen_flag(port)], &[]);
    wait_for_answer(port, "/readyz", 200, "ready");
    let clients = 8;
    let per_client = 150;
    let sent: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || {
                    let mut seed = 0x9e37_79b9_7f4a_7c15 ^ (c as u64 + 1);
                    let mut sent = 0;
                    for i in 0..per_client {
                        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
                            continue;
                        };
                        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                        let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
                        let bytes = hostile_request(i + c * per_client, &mut seed);
                        // Half of them in dribbles, half at once; some hang up early.
                        if i % 2 == 0 {
                            for chunk in bytes.chunks(1 + i % 97) {
                                if stream.write_all(chunk).is_err() {
                                    break;
                                }
                            }
                        } else {
                            let _ = stream.write_all(&bytes);
                        }
                        if i % 5 != 0 {
                            let mut answer = [0u8; 4096];
                            let _ = stream.read(&mut answer);
                        }
                        sent += 1;
                    }
                    sent
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(sent >= 1000, "only {sent} hostile requests went out");
    // Alive, answering, and still supervising.
    assert_eq!(get(port, "/livez"), (200, "alive".to_string()));
    assert_eq!(get(port, "/readyz"), (200, "ready".to_string()));
    let (status, body) = get(port, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("lifeguard_build_info"), "{body}");
    assert_eq!(failures_of(port, "endpoint"), Some(0.0), "{body}");
    still_supervises(run, "hostile requests", DRAIN + Duration::from_millis(500));
}

// ---------------------------------------------------------------------------------------
// The helper process: faults no unwinding can catch end the helper process alone.

/// The helper process below `run` (lifeguard-helper; the kernel keeps 15 characters of
/// a name, as systemd-journald shows as systemd-journal), once one runs other than
/// `not`.
fn helper_of(run: &Run, not: Option<i32>) -> i32 {
    wait_until("a helper process", || {
        children(run.pid).into_iter().find(|&pid| {
            Some(pid) != not
                && alive(pid)
                && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim_end() == "lifeguard-helpe")
        })
    })
}

/// The faults build as PID 1 with the endpoint on `port` and `--inflight-port`, over a
/// testapp serving on that port that exits with 7 on SIGTERM; ready, with its helper up.
fn start_with_helper(fault: &str, port: u16, extra: &[&str]) -> (Run, i32) {
    let run = start_helped(fault, port, extra);
    wait_for_answer(port, "/readyz", 200, "ready");
    let helper = helper_of(&run, None);
    (run, helper)
}

/// As `start_with_helper`, without waiting for the endpoint (a fault may end every
/// helper before it answers).
fn start_helped(fault: &str, port: u16, extra: &[&str]) -> Run {
    let app_port = free_port();
    let listen = listen_flag(port);
    let app_port = app_port.to_string();
    let mut flags = vec![
        "-v",
        "--drain-delay",
        "1s",
        "--grace",
        "6s",
        "--listen",
        &listen,
        "--inflight-port",
        &app_port,
    ];
    flags.extend_from_slice(extra);
    let fault = fault.to_string();
    // The app listens on its port: with --inflight-port and no other check, that is
    // when it is ready.
    let run = start_program(
        fault_build(),
        Mode::Pid1,
        &args(&flags, &["--code", "7", "--http", &app_port]),
        move |cmd| {
            cmd.env("LIFEGUARD_FAULT", &fault);
        },
    );
    run.ready();
    run
}

/// What must hold while the helper is down and after: a signal reaches the app within
/// 100 ms, a new helper answers /readyz within `back_within`, the app is the same
/// process, nothing is left unreaped, and a SIGTERM then drains and exits with the
/// app's code.
fn survives_the_helpers_end(mut run: Run, port: u16, old: i32, what: &str, back_within: Duration) {
    let app = run.app_pid();
    let down = Instant::now();
    wait_until("the old helper gone", || (!alive(old)).then_some(()));
    let latency = signal_latency(&run);
    assert!(
        latency <= Duration::from_millis(100),
        "{what}: a signal took {latency:?} to reach the app while the helper was down\n{}",
        run.transcript()
    );
    let new = helper_of(&run, Some(old));
    wait_for_answer(port, "/readyz", 200, "ready");
    let back = down.elapsed();
    assert!(
        back <= back_within,
        "{what}: a new helper answered /readyz after {back:?}\n{}",
        run.transcript()
    );
    assert_eq!(run.app_pid(), app, "{what}: the app was restarted");
    assert_ne!(new, old);
    let zombies: Vec<i32> = descendants(run.pid)
        .into_iter()
        .filter(|&pid| state(pid) == Some('Z'))
        .collect();
    assert!(zombies.is_empty(), "{what}: zombies {zombies:?}");
    wait_until("the restart counted", || {
        (metric(port, "lifeguard_helper_restarts_total")? >= 1.0).then_some(())
    });
    let term = Instant::now();
    run.signal(libc::SIGTERM);
    wait_for_answer(port, "/readyz", 503, "draining");
    run.expect_line("signal TERM");
    assert!(
        term.elapsed() >= DRAIN,
        "{what}: relayed before the drain delay"
    );
    run.expect_exit(7);
    assert!(!alive(new), "{what}: the helper outlived lifeguard");
}

fn killed_helper(signal: i32, what: &str) {
    let port = free_port();
    let (run, helper) = start_with_helper("", port, &[]);
    send(helper, signal);
    survives_the_helpers_end(run, port, helper, what, Duration::from_secs(5));
}

#[test]
fn a_helper_killed_by_sigkill_is_replaced_and_supervision_never_notices() {
    killed_helper(libc::SIGKILL, "SIGKILL");
}

#[test]
fn a_helper_killed_by_sigsegv_is_replaced_and_supervision_never_notices() {
    killed_helper(libc::SIGSEGV, "SIGSEGV");
}

#[test]
fn a_helper_killed_by_sigabrt_is_replaced_and_supervision_never_notices() {
    killed_helper(libc::SIGABRT, "SIGABRT");
}

#[test]
fn a_stopped_helper_is_found_hung_killed_and_replaced() {
    let port = free_port();
    let (run, helper) = start_with_helper("", port, &[]);
    send(helper, libc::SIGSTOP);
    let said = run.expect_log("the helper process hangs");
    assert!(said.contains("silent_for="), "{said}");
    survives_the_helpers_end(run, port, helper, "SIGSTOP", Duration::from_secs(20));
}

#[test]
fn an_abort_in_a_helper_thread_ends_the_helper_alone() {
    // The sampler's first sample aborts the whole helper process (no unwinding), in
    // every helper started again: supervision goes on all the same.
    let port = free_port();
    let run = start_helped("sampler:abort", port, &[]);
    let helper = helper_of(&run, None);
    let said = run.expect_log("the helper process ended");
    assert!(said.contains("SIGABRT"), "{said}");
    survives_the_helpers_end_without_endpoint(run, helper, "abort");
}

#[test]
fn a_stack_overflow_in_a_helper_thread_ends_the_helper_alone() {
    let port = free_port();
    let run = start_helped("sampler:overflow", port, &[]);
    let helper = helper_of(&run, None);
    let said = run.expect_log("the helper process ended");
    // Rust's guard page handler aborts; without it the kernel's SIGSEGV ends it.
    assert!(
        said.contains("SIGSEGV") || said.contains("SIGABRT"),
        "{said}"
    );
    survives_the_helpers_end_without_endpoint(run, helper, "overflow");
}

/// For a fault that fires again in every new helper: supervision goes on regardless.
fn survives_the_helpers_end_without_endpoint(mut run: Run, old: i32, what: &str) {
    let app = run.app_pid();
    wait_until("the old helper gone", || (!alive(old)).then_some(()));
    let latency = signal_latency(&run);
    assert!(
        latency <= Duration::from_millis(100),
        "{what}: a signal took {latency:?}\n{}",
        run.transcript()
    );
    assert_eq!(run.app_pid(), app);
    let term = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_line("signal TERM");
    assert!(term.elapsed() >= DRAIN);
    run.expect_exit(7);
}

#[test]
fn a_stop_while_the_helper_is_killed_every_100ms_ends_within_drain_max() {
    // The drain's hold reads the helper's looks at the port; a helper that dies over
    // and over gives none, which counts as quiet: the stop comes by --drain-max + 1 s.
    let port = free_port();
    let (run, _) = start_with_helper("", port, &["--drain-max", "3s"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let killer = {
        let stop = stop.clone();
        let pid = run.pid;
        std::thread::spawn(move || {
            let mut kills = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for child in children(pid) {
                    let comm = std::fs::read_to_string(format!("/proc/{child}/comm"));
                    if comm.is_ok_and(|c| c.trim_end() == "lifeguard-helpe") && alive(child) {
                        kill_helper(child);
                        kills += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            kills
        })
    };
    let mut run = run;
    let term = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_line("signal TERM");
    let relayed = term.elapsed();
    let code = run.wait_exit();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let kills = killer.join().unwrap();
    assert_eq!(code, 7, "{}", run.transcript());
    assert!(
        relayed <= Duration::from_secs(4),
        "the stop came {relayed:?} after the SIGTERM (--drain-max 3s)\n{}",
        run.transcript()
    );
    assert!(kills >= 1, "the helper was never killed");
}

/// SIGKILL to `pid`, a helper process below the test's lifeguard (it may be gone
/// meanwhile: then nothing happens).
fn kill_helper(pid: i32) -> bool {
    assert!(pid > 1);
    // SAFETY: kill has no memory preconditions; pid > 1 is a process, never the test
    // itself or a group.
    unsafe { libc::kill(pid, libc::SIGKILL) == 0 }
}

// ---------------------------------------------------------------------------------------
// The helper's levers on PID 1: none.

/// For a run of `start_helped`: a signal reaches the app within 100 ms, and a SIGTERM
/// is relayed after the drain delay and well before the grace deadline, and the app's
/// exit (7) is lifeguard's.
fn supervises_to_the_end(mut run: Run, what: &str) {
    relays_after_the_drain(&run, what, GRACE - Duration::from_millis(1));
    run.expect_exit(7);
}

/// A signal reaches the app within 100 ms, and a SIGTERM then reaches it after the
/// drain delay and by `relay_within`; returns when the SIGTERM was sent.
fn relays_after_the_drain(run: &Run, what: &str, relay_within: Duration) -> Instant {
    let latency = signal_latency(run);
    assert!(
        latency <= Duration::from_millis(100),
        "{what}: a signal took {latency:?} to reach the app\n{}",
        run.transcript()
    );
    let term = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_line("signal TERM");
    let relayed = term.elapsed();
    assert!(
        relayed >= DRAIN && relayed <= relay_within,
        "{what}: the stop signal was relayed after {relayed:?} (drain {DRAIN:?}, \
         expected by {relay_within:?})\n{}",
        run.transcript()
    );
    term
}

/// The O_NONBLOCK flag of `pid`'s descriptor `fd` (from its fdinfo), None when gone.
fn nonblocking(pid: i32, fd: &str) -> Option<bool> {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    let flags = info.lines().find_map(|l| l.strip_prefix("flags:"))?;
    let flags = u32::from_str_radix(flags.trim(), 8).ok()?;
    Some(flags & libc::O_NONBLOCK as u32 != 0)
}

/// `pid`'s descriptors that are sockets, or other than its standard three, with the
/// link they point to.
fn fds_of(pid: i32) -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name().to_str()?.to_string();
        let link = std::fs::read_link(format!("/proc/{pid}/fd/{name}")).ok()?;
        Some((name, link.display().to_string()))
    })
    .collect()
}

#[test]
fn a_helper_that_makes_its_descriptors_blocking_cannot_block_supervision() {
    // A library in the helper that clears O_NONBLOCK on every descriptor it has (the
    // fault, on the helper's main thread). PID 1's descriptions are not among them: the
    // helper has descriptions of its own for stderr, keeps no other of PID 1's, and the
    // bells are read and rung with MSG_DONTWAIT whatever their flags.
    // (The helper's own runtimes may then stall on their blocking descriptors: their
    // heartbeat stops and PID 1 replaces it, which is the helper's business.)
    let port = free_port();
    let check = TcpListener::bind("127.0.0.1:0").unwrap();
    let check_addr = check.local_addr().unwrap().to_string();
    let run = start_helped(
        "helper-main:blocking",
        port,
        &["--ready-tcp", &check_addr, "--ready-interval", "100ms"],
    );
    // The check passes first: a check that has never passed is the app starting up,
    // and its failures are not news (nothing would be logged when it turns).
    run.expect_log("app check passing");
    let helper = helper_of(&run, None);
    wait_until("the helper's descriptors made blocking", || {
        let sockets: Vec<_> = fds_of(helper)
            .into_iter()
            .filter(|(_, link)| link.starts_with("socket:"))
            .collect();
        (!sockets.is_empty()
            && sockets
                .iter()
                .all(|(fd, _)| nonblocking(helper, fd) == Some(false)))
        .then_some(())
    });
    // PID 1's own description of stderr (a pipe here: the one that is not fd 2) is
    // still non-blocking.
    let stderr = std::fs::read_link(format!("/proc/{}/fd/2", run.pid))
        .unwrap()
        .display()
        .to_string();
    let own: Vec<String> = fds_of(run.pid)
        .into_iter()
        .filter(|(fd, link)| *link == stderr && fd != "2")
        .map(|(fd, _)| fd)
        .collect();
    assert!(
        !own.is_empty(),
        "PID 1 has no stderr of its own: {:?}",
        fds_of(run.pid)
    );
    for fd in &own {
        assert_eq!(
            nonblocking(run.pid, fd),
            Some(true),
            "PID 1's stderr (fd {fd}) was made blocking by the helper"
        );
    }
    // The app check turns: the helper rings PID 1's bell, and PID 1 takes the ring
    // (before the fix its second read of the now blocking bell waited for good).
    drop(check);
    run.expect_log("app check failing");
    supervises_to_the_end(run, "a blocking helper");
}

#[test]
fn a_panic_on_the_helpers_main_thread_ends_the_helper_alone_without_a_core_file() {
    let port = free_port();
    let run = start_helped("helper-main:once", port, &[]);
    let said = run.expect_log("panic in the helper process's main thread");
    assert!(said.contains("injected fault at helper-main"), "{said}");
    wait_until("the helper started again", || {
        (metric(port, "lifeguard_helper_restarts_total")? >= 1.0).then_some(())
    });
    wait_for_answer(port, "/readyz", 200, "ready");
    assert!(
        !run.stderr()
            .iter()
            .any(|l| l.contains("panic in the main thread")),
        "told as PID 1's panic:\n{}",
        run.transcript()
    );
    // The helper dumps no core: a fault there is contained and restarted anyway.
    let helper = helper_of(&run, None);
    let limits = std::fs::read_to_string(format!("/proc/{helper}/limits")).unwrap();
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap();
    assert_eq!(core.split_whitespace().nth(4), Some("0"), "{core}");
    supervises_to_the_end(run, "a panic on the helper's main thread");
}

#[test]
fn a_child_of_the_helpers_is_neither_the_apps_nor_left_behind() {
    // A library in the helper starts a command (the fault: `sleep 600`). It is not the
    // app's: not signalled with what the app left, and it goes with the helper's
    // process group when the helper is let go. As a subreaper, where an orphan would
    // otherwise outlive lifeguard.
    if orphans_skipped(Mode::Subreaper) {
        return;
    }
    let port = free_port();
    let listen = listen_flag(port);
    let mut run = start_program(
        fault_build(),
        Mode::Subreaper,
        &args(&["-v", "--listen", &listen], &["--code", "7"]),
        |cmd| {
            cmd.env("LIFEGUARD_FAULT", "helper-main:child");
        },
    );
    run.ready();
    let child: i32 = run.value("helper-child").parse().unwrap();
    assert!(alive(child));
    // The app ends by itself.
    send(run.app_pid(), libc::SIGINT);
    run.expect_exit(7);
    assert!(
        !run.stderr()
            .iter()
            .any(|l| l.contains("signalled what the app left")),
        "the helper's child was taken for the app's:\n{}",
        run.transcript()
    );
    wait_until("the helper's child gone with it", || {
        (!alive(child)).then_some(())
    });
}

#[test]
fn a_thread_that_wakes_without_working_is_told_hung_and_replaced() {
    // The sampler stays in a loop that wakes every 100 ms and gets nowhere (a retry or a
    // timed-out wait): it runs and waits a little, which is not waiting for the CPU. It
    // is hung, and a new helper process starts within the watchdog's time.
    let port = free_port();
    let (run, helper) = start_with_helper("sampler:idle", port, &[]);
    let said = run.expect_log("the sampler thread has not turned for 5s");
    assert!(
        said.contains("it wakes but does not turn") && said.contains("stops its heartbeat"),
        "{said}"
    );
    run.expect_log("the helper process hangs");
    let new = helper_of(&run, Some(helper));
    assert_ne!(new, helper);
}

#[test]
fn a_deadlocked_helper_thread_is_told_hung_not_starved_and_replaced() {
    // The sampler parks for good (a deadlock): it neither runs nor waits to run, which
    // the watch tells from a thread starved of CPU; the heartbeat stops and a new helper
    // process starts within the watchdog's time.
    let port = free_port();
    let (run, helper) = start_with_helper("sampler:hang", port, &[]);
    let said = run.expect_log("the sampler thread has not turned for 5s");
    assert!(
        said.contains("it neither runs nor waits to run: hung")
            && said.contains("stops its heartbeat"),
        "{said}"
    );
    run.expect_log("the helper process hangs");
    let new = helper_of(&run, Some(helper));
    assert_ne!(new, helper);
}
