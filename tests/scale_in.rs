//! ECS task scale-in protection (`--scale-in-protection AFTER`) against a stand-in for
//! the ECS agent's endpoint (tests/common/ecs_agent.rs) that answers with the agent's
//! documented shapes and keeps the protection's expiry as ECS does. The app is the
//! testapp's web server; a request's age is the kernel's, as in production.
//!
//! Where a test needs to see a renewal, a clear or a lapse, the fault-injection build
//! runs, with `LIFEGUARD_FAULT_MINUTE=2000`: the protection's minute (its expiry,
//! renewal, least settle time and the pause after AccessDenied) lasts 2 s, in lifeguard
//! and in the stand-in alike, so they take seconds; AFTER is 2 s, so the settle time is
//! 2 s too. The other tests run the binary under test (the slim and static builds in
//! their scripts) with real minutes.
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::ecs_agent::{Agent, Answers, Fault};
use common::*;

/// The fault-injection build's short minute.
const MINUTE: Duration = Duration::from_secs(2);
/// A real one: the binary under test.
const REAL_MINUTE: Duration = Duration::from_secs(60);
const AFTER: &str = "2s";

struct Task {
    run: Run,
    app_port: u16,
    endpoint: u16,
}

/// lifeguard (the binary under test) as PID 1 on ECS, with `--scale-in-protection 2s`,
/// the agent at `agent_uri`, supervising the testapp's web server.
fn start_task(agent_uri: &str, extra: &[&str]) -> Task {
    start_task_with_minute(agent_uri, REAL_MINUTE, extra)
}

/// As `start_task`, with minutes of `minute`: short ones are the fault-injection build's.
fn start_task_with_minute(agent_uri: &str, minute: Duration, extra: &[&str]) -> Task {
    start_task_with_env(agent_uri, minute, extra, &[])
}

/// As `start_task_with_minute`, with more of the environment.
fn start_task_with_env(
    agent_uri: &str,
    minute: Duration,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Task {
    let (app_port, endpoint) = (free_port(), free_port());
    let (app, listen) = (app_port.to_string(), listen_flag(endpoint));
    let mut flags = vec![
        "-v",
        "--listen",
        &listen,
        "--inflight-port",
        &app,
        "--scale-in-protection",
        AFTER,
        "--drain-delay",
        "0",
    ];
    flags.extend_from_slice(extra);
    let uri = agent_uri.to_string();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let argv = if minute == REAL_MINUTE {
        lifeguard_argv()
    } else {
        fault_build()
    };
    let run = start_program(
        argv,
        Mode::Pid1,
        &args(&flags, &["--http", &app]),
        move |cmd| {
            cmd.env("ECS_AGENT_URI", &uri).envs(env);
            if minute != REAL_MINUTE {
                cmd.env("LIFEGUARD_FAULT_MINUTE", minute.as_millis().to_string());
            }
        },
    );
    run.ready();
    wait_for_answer(endpoint, "/readyz", 200, "ready");
    Task {
        run,
        app_port,
        endpoint,
    }
}

impl Task {
    /// Sends `GET /slow/MS` on a thread of its own and waits until the app has it;
    /// the thread returns the status (0: no answer).
    fn long_request(&self, ms: u64) -> std::thread::JoinHandle<u16> {
        let (port, path) = (self.app_port, format!("/slow/{ms}"));
        let sent = path.clone();
        let request = std::thread::spawn(move || {
            // Its own connection: the answer comes only at the end, later than the
            // harness's read timeout.
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(60)))
                .unwrap();
            write!(
                stream,
                "GET {sent} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text);
            text.split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
        });
        self.run.expect_line(&format!("request {path}"));
        request
    }

    /// Once the helper has the agent's answer (the gauge reads what the stop line
    /// reads), a SIGTERM: its line says the task was protected, the drain lets `request`
    /// finish, and lifeguard exits 0.
    fn stop_while_protected(mut self, request: std::thread::JoinHandle<u16>) {
        wait_until("the gauge at 1", || {
            (self.gauge().as_deref() == Some("1")).then_some(())
        });
        self.run.signal(libc::SIGTERM);
        let line = self.run.expect_log("draining: not ready");
        assert!(line.contains("scale_in_protected=yes"), "{line}");
        assert_eq!(request.join().unwrap(), 200);
        self.run.expect_exit(0);
    }

    /// `lifeguard_scale_in_protected` on /metrics, if shown.
    fn gauge(&self) -> Option<String> {
        let (_, body) = get(self.endpoint, "/metrics");
        body.lines()
            .find_map(|l| l.strip_prefix("lifeguard_scale_in_protected "))
            .map(str::to_string)
    }
}

/// The stand-in's calls, one per line, for a failure's message.
fn calls_of(agent: &Agent, since: Instant) -> String {
    agent
        .calls()
        .iter()
        .map(|c| {
            format!(
                "+{:.2}s {} {} -> {:?}",
                c.at.saturating_duration_since(since).as_secs_f64(),
                c.method,
                c.body,
                c.status
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_long_request_is_protected_renewed_while_it_runs_and_cleared_after_it_ends() {
    if skipped_under_emulation("sock_diag, which gives a request's age, is refused under qemu-user")
    {
        return;
    }
    let agent = Agent::start(Answers::Service, MINUTE);
    // With ScaleInProtected on request, as Embedded Metric Format records on stdout.
    let emf = [
        ("METRICS_NAMESPACE", "Acme/web"),
        ("METRICS_SINK", "emf"),
        ("METRICS_INTERVAL", "1"),
        ("METRICS_EXTRA", "ScaleInProtected"),
    ];
    let mut task = start_task_with_env(&agent.uri, MINUTE, &[], &emf);
    // The start's read, and nothing else while nothing is long.
    wait_until("the start's GET", || {
        (agent.calls().first().map(|c| c.method.as_str()) == Some("GET")).then_some(())
    });
    task.run.expect_log("the task is not protected");
    assert_eq!(task.gauge().as_deref(), Some("0"));
    let sent = Instant::now();
    let request = task.long_request(9_000);
    wait_until("the protection", || agent.protected().then_some(()));
    let set_after = sent.elapsed();
    let set = task.run.expect_log("scale-in protection set");
    assert!(set.contains("expires_in=4s"), "{set}");
    // Not before the request was AFTER old; soon after (a look a second).
    assert!(
        set_after >= Duration::from_secs(2) && set_after < Duration::from_secs(5),
        "protected {set_after:?} after the request\n{}",
        calls_of(&agent, sent)
    );
    wait_until("the gauge", || {
        (task.gauge().as_deref() == Some("1")).then_some(())
    });
    wait_until("a record with ScaleInProtected 1", || {
        task.run.stdout().iter().find_map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).ok()?;
            let values = record.get("ScaleInProtected")?.as_array()?;
            values.iter().any(|v| v.as_f64() == Some(1.0)).then_some(())
        })
    });
    // Renewed while the request runs: the stand-in never lets it lapse.
    while !request.is_finished() {
        assert!(
            agent.protected(),
            "lapsed while the request was in flight, {:?} after it was sent\n{}",
            sent.elapsed(),
            calls_of(&agent, sent)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ended = Instant::now();
    assert_eq!(request.join().unwrap(), 200);
    let renewals = agent.puts().iter().filter(|(_, on)| *on).count();
    assert!(
        renewals >= 3,
        "set and renewed every 2 s over 7 s\n{}",
        calls_of(&agent, sent)
    );
    // Cleared after the settle time (2 s), by a call, well before the expiry would.
    wait_until("the clear", || {
        agent.puts().iter().any(|(_, on)| !on).then_some(())
    });
    let cleared = agent.puts().iter().find(|(_, on)| !on).unwrap().0;
    let after_end = cleared.saturating_duration_since(ended);
    assert!(
        after_end >= Duration::from_millis(1_000) && after_end < Duration::from_secs(5),
        "cleared {after_end:?} after the request ended\n{}",
        calls_of(&agent, sent)
    );
    assert!(!agent.protected());
    task.run.expect_log("scale-in protection cleared");
    wait_until("the gauge back at 0", || {
        (task.gauge().as_deref() == Some("0")).then_some(())
    });
    // The stop line says so, and nothing is asked after the SIGTERM.
    let calls = agent.calls().len();
    task.run.signal(libc::SIGTERM);
    let line = task.run.expect_log("draining: not ready");
    assert!(line.contains("scale_in_protected=no"), "{line}");
    task.run.expect_exit(0);
    assert_eq!(agent.calls().len(), calls, "{}", calls_of(&agent, sent));
    assert_eq!(agent.most_calls_at_once(), 1);
}

#[test]
fn steady_short_requests_never_protect_the_task() {
    if skipped_under_emulation("sock_diag, which gives a request's age, is refused under qemu-user")
    {
        return;
    }
    // The trap of "any request in flight": here a request is always in flight (eight
    // clients, 300 ms each), and none is ever 2 s old.
    let agent = Agent::start(Answers::Service, REAL_MINUTE);
    let mut task = start_task(&agent.uri, &[]);
    let port = task.app_port;
    let until = Instant::now() + Duration::from_secs(10);
    let clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut answered = 0;
                while Instant::now() < until {
                    if request(port, "GET", "/slow/300").is_ok_and(|(s, _)| s == 200) {
                        answered += 1;
                    }
                }
                answered
            })
        })
        .collect();
    let mut in_flight_seen = 0;
    while Instant::now() < until {
        let (_, body) = get(task.endpoint, "/metrics");
        let busy = body
            .lines()
            .find_map(|l| l.strip_prefix("lifeguard_requests_in_flight "))
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|v| v > 0.0);
        in_flight_seen += usize::from(busy);
        std::thread::sleep(Duration::from_millis(250));
    }
    let answered: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert!(answered > 100, "the load ran: {answered} answers");
    assert!(
        in_flight_seen > 20,
        "requests were in flight at most looks: {in_flight_seen}"
    );
    assert!(agent.puts().is_empty(), "{}", calls_of(&agent, until));
    assert_eq!(task.gauge().as_deref(), Some("0"));
    task.run.signal(libc::SIGTERM);
    task.run.expect_exit(0);
}

#[test]
fn a_standalone_task_is_told_once_and_the_agent_never_asked_again() {
    if skipped_under_emulation("sock_diag, which gives a request's age, is refused under qemu-user")
    {
        return;
    }
    let agent = Agent::start(Answers::Standalone, REAL_MINUTE);
    let mut task = start_task(&agent.uri, &[]);
    let line = task.run.expect_log("TASK_NOT_VALID");
    assert!(line.contains("belongs to no service"), "{line}");
    let request = task.long_request(5_000);
    assert_eq!(request.join().unwrap(), 200);
    let calls = agent.calls();
    assert_eq!(calls.len(), 1, "only the start's read");
    assert_eq!(calls[0].method, "GET");
    let told = task
        .run
        .stderr()
        .iter()
        .filter(|l| l.contains("TASK_NOT_VALID"))
        .count();
    assert_eq!(told, 1);
    task.run.signal(libc::SIGTERM);
    task.run.expect_exit(0);
}

#[test]
fn access_denied_names_both_permissions_once_and_is_not_hammered() {
    if skipped_under_emulation("sock_diag, which gives a request's age, is refused under qemu-user")
    {
        return;
    }
    let agent = Agent::start(Answers::Denied, REAL_MINUTE);
    let mut task = start_task(&agent.uri, &[]);
    let line = task.run.expect_log("AccessDenied");
    assert!(
        line.contains("ecs:UpdateTaskProtection") && line.contains("ecs:GetTaskProtection"),
        "{line}"
    );
    // A long request: one PUT, refused; the next try only 5 minutes later.
    let sent = Instant::now();
    let request = task.long_request(7_000);
    wait_until("the PUT", || (!agent.puts().is_empty()).then_some(()));
    assert_eq!(request.join().unwrap(), 200);
    assert_eq!(agent.puts().len(), 1, "{}", calls_of(&agent, sent));
    let told = task
        .run
        .stderr()
        .iter()
        .filter(|l| l.contains("AccessDenied"))
        .count();
    assert_eq!(told, 1, "said once:\n{}", task.run.transcript());
    assert_eq!(task.gauge().as_deref(), Some("0"));
    task.run.signal(libc::SIGTERM);
    task.run.expect_exit(0);
}

#[test]
fn throttling_and_request_canceled_back_off_one_call_at_a_time_until_it_is_protected() {
    if skipped_under_emulation("sock_diag, which gives a request's age, is refused under qemu-user")
    {
        return;
    }
    // ECS throttling the account's calls; the agent's own call to ECS timing out (504).
    for (mode, code) in [
        (Answers::First(2, Fault::Throttled), "ThrottlingException"),
        (Answers::First(2, Fault::Canceled), "RequestCanceled"),
    ] {
        let agent = Agent::start(Answers::Service, REAL_MINUTE);
        let task = start_task(&agent.uri, &[]);
        wait_until("the start's GET", || {
            (!agent.calls().is_empty()).then_some(())
        });
        agent.set_mode(mode);
        let sent = Instant::now();
        let request = task.long_request(16_000);
        wait_until("the protection", || agent.protected().then_some(()));
        // Two refused, then the third: 2 s, then 4 s apart at least (jitter adds up to
        // half of each).
        let statuses: Vec<Option<u16>> = agent.calls().iter().skip(1).map(|c| c.status).collect();
        assert_eq!(
            statuses[2..],
            [Some(200)],
            "{code}\n{}",
            calls_of(&agent, sent)
        );
        let puts: Vec<Instant> = agent.puts().iter().map(|(at, _)| *at).collect();
        let gaps: Vec<f64> = puts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64())
            .collect();
        for (gap, least) in gaps.iter().zip([2.0, 4.0]) {
            assert!(
                *gap >= least * 0.95 && *gap < least * 1.5 + 1.5,
                "{code}: gaps {gaps:?}"
            );
        }
        let line = task
            .run
            .expect_log("setting the task's scale-in protection failed");
        assert!(line.contains(code), "{line}");
        let retry = line
            .split("retry_in=")
            .nth(1)
            .unwrap_or_default()
            .trim_start_matches('"');
        // 2 s and its jitter, in tenths as measured durations are written.
        assert!(retry.starts_with("2."), "{line}");
        task.run.expect_log("the ECS agent answers again");
        assert_eq!(agent.most_calls_at_once(), 1);
        task.stop_while_protected(request);
    }
}

#[test]
fn an_agent_gone_and_back_then_hanging_once_protects_the_task_when_it_answers() {
    if skipped_under_emulation("sock_diag, which gives a request's age, is refused under qemu-user")
    {
        return;
    }
    // Nothing at ECS_AGENT_URI yet (the agent restarting, say).
    let port = free_port();
    let uri = format!("http://127.0.0.1:{port}/api/1234567890abcdef0-3920716453");
    let mut task = start_task(&uri, &[]);
    task.run
        .expect_log("reading the task's scale-in protection failed");
    let request = task.long_request(30_000);
    let line = task
        .run
        .expect_log("setting the task's scale-in protection failed");
    assert!(line.contains("connection refused"), "{line}");
    // Back at its address; its first call hangs (given up after 5 s), then it answers.
    let back = Instant::now();
    let agent = Agent::start_at(port, Answers::First(1, Fault::Hangs), REAL_MINUTE);
    wait_until("a call to the agent that is back", || {
        (!agent.calls().is_empty()).then_some(())
    });
    // The next after the hang's 5 s and a pause of 4 s at least (the third failure in
    // a row): within 15 s of the first call. Patience starts now.
    wait_until("the protection", || agent.protected().then_some(()));
    let calls = agent.calls();
    assert_eq!(calls.len(), 2, "{}", calls_of(&agent, back));
    let gap = calls[1].at - calls[0].at;
    assert!(
        gap >= Duration::from_secs(9),
        "gave up and paused for {gap:?} only"
    );
    assert_eq!(agent.most_calls_at_once(), 1);
    let line = task.run.expect_log("the ECS agent answers again");
    assert!(line.contains("failed_calls="), "{line}");
    task.run.signal(libc::SIGTERM);
    assert_eq!(request.join().unwrap(), 200);
    task.run.expect_exit(0);
}

#[test]
fn a_protection_set_by_someone_else_is_left_alone() {
    if skipped_under_emulation("sock_diag, which gives a request's age, is refused under qemu-user")
    {
        return;
    }
    // The app protects its own task (as teams do by hand) before lifeguard starts.
    let agent = Agent::start(Answers::Service, MINUTE);
    agent.protect_for(Duration::from_secs(600));
    let mut task = start_task_with_minute(&agent.uri, MINUTE, &[]);
    task.run.expect_log("not by this lifeguard");
    // Looks with no long request for three settle times (2 s each here, a real minute
    // at least): lifeguard neither clears nor renews what it did not set.
    let seen = Instant::now();
    while seen.elapsed() < MINUTE * 2 + Duration::from_secs(2) {
        assert_eq!(agent.calls().len(), 1, "{}", calls_of(&agent, seen));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(agent.protected());
    assert_eq!(
        task.gauge().as_deref(),
        Some("0"),
        "not lifeguard's protection"
    );
    task.run.signal(libc::SIGTERM);
    task.run.expect_exit(0);
}

#[test]
fn an_agent_that_hangs_or_is_gone_costs_the_stop_nothing() {
    if skipped_under_emulation("sock_diag, which gives a request's age, is refused under qemu-user")
    {
        return;
    }
    // Hangs: each call given up after 5 s, never two at once.
    let agent = Agent::start(Answers::Always(Fault::Hangs), REAL_MINUTE);
    let mut task = start_task(&agent.uri, &[]);
    let line = task
        .run
        .expect_log("reading the task's scale-in protection failed");
    assert!(line.contains("did not answer within 5s"), "{line}");
    let request = task.long_request(12_000);
    task.run
        .expect_log("setting the task's scale-in protection failed");
    assert_eq!(agent.most_calls_at_once(), 1);
    // A SIGTERM with a call hanging: the stop is not delayed by it (the request is
    // still in flight: the drain holds for it, as always, and the app finishes it).
    task.run.signal(libc::SIGTERM);
    let stop = Instant::now();
    let line = task.run.expect_log("draining: not ready");
    // The set went unanswered: the agent may have carried it out all the same (its
    // call to ECS may have gone through after lifeguard stopped waiting), so it counts
    // as set until its expiry, and the stop line says so.
    assert!(line.contains("scale_in_protected=yes"), "{line}");
    assert_eq!(request.join().unwrap(), 200);
    task.run.expect_exit(0);
    assert!(
        stop.elapsed() < Duration::from_secs(14),
        "{:?}",
        stop.elapsed()
    );
    // Gone: nothing listens at ECS_AGENT_URI.
    let gone = format!("http://127.0.0.1:{}/api/1234567890abcdef0", free_port());
    let mut task = start_task(&gone, &[]);
    let line = task
        .run
        .expect_log("reading the task's scale-in protection failed");
    assert!(line.contains("connection refused"), "{line}");
    let request = task.long_request(4_000);
    task.run
        .expect_log("setting the task's scale-in protection failed");
    task.run.signal(libc::SIGTERM);
    // Refused: nothing was carried out, and the stop line says so.
    let line = task.run.expect_log("draining: not ready");
    assert!(line.contains("scale_in_protected=no"), "{line}");
    assert_eq!(request.join().unwrap(), 200);
    task.run.expect_exit(0);
}

#[test]
fn a_stopped_helper_lets_the_protection_lapse_and_a_killed_one_is_taken_over() {
    if skipped_under_emulation("sock_diag, which gives a request's age, is refused under qemu-user")
    {
        return;
    }
    let agent = Agent::start(Answers::Service, MINUTE);
    let task = start_task_with_minute(&agent.uri, MINUTE, &[]);
    let sent = Instant::now();
    let request = task.long_request(30_000);
    wait_until("the protection", || agent.protected().then_some(()));
    // Killed: supervision starts a new helper, which finds the protection on the Board
    // and renews it while the request runs; no lapse.
    let helper = helper_of(&task.run);
    send(helper, libc::SIGKILL);
    wait_until("a new helper", || {
        let new = helper_of(&task.run);
        (new != helper).then_some(new)
    });
    let killed = Instant::now();
    while killed.elapsed() < Duration::from_secs(5) {
        assert!(
            agent.protected(),
            "lapsed after the helper was killed\n{}",
            calls_of(&agent, sent)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Stopped (hung, or starved of CPU): nothing renews it and nothing clears it, and
    // the stand-in's expiry — ExpiresInMinutes=2 — is what releases the task.
    let helper = helper_of(&task.run);
    send(helper, libc::SIGSTOP);
    wait_until("the helper to stop", || {
        (state(helper) == Some('T')).then_some(())
    });
    let stopped = Instant::now();
    let calls = agent.calls().len();
    wait_until("the lapse", || (!agent.protected()).then_some(()));
    let lapsed = stopped.elapsed();
    assert!(
        lapsed <= MINUTE * 2 + Duration::from_secs(1),
        "lapsed {lapsed:?} after the helper stopped\n{}",
        calls_of(&agent, sent)
    );
    assert!(
        agent.puts().last().is_some_and(|(_, on)| *on),
        "never cleared by a call"
    );
    assert_eq!(agent.calls().len(), calls, "no call from a stopped helper");
    assert!(
        !request.is_finished(),
        "the request still runs: only the expiry released it"
    );
    // Supervision replaces the hung helper (10 s without a heartbeat); the new one
    // sees the request still long and protects the task again.
    task.run.expect_log("the helper process hangs");
    wait_until("the protection again", || agent.protected().then_some(()));
    task.stop_while_protected(request);
}

#[test]
fn off_ecs_the_protected_metric_is_not_published_as_a_paid_zero() {
    // The same image off ECS (no ECS_AGENT_URI), publishing EMF records with
    // METRICS_EXTRA=ScaleInProtected: the records go out, without that metric.
    let app = free_port().to_string();
    let mut run = start_with(
        Mode::Pid1,
        &args(
            &[
                "--drain-delay",
                "0",
                "--listen",
                "off",
                "--inflight-port",
                &app,
                "--scale-in-protection",
                "30s",
            ],
            &["--http", &app],
        ),
        |cmd| {
            cmd.env_remove("ECS_AGENT_URI")
                .env("METRICS_NAMESPACE", "Test/scale-in")
                .env("METRICS_SINK", "emf")
                .env("METRICS_INTERVAL", "1")
                .env("METRICS_EXTRA", "ScaleInProtected");
        },
    );
    run.ready();
    let line = run.expect_log("METRICS_EXTRA=ScaleInProtected publishes nothing");
    assert!(line.contains("ECS_AGENT_URI"), "{line}");
    if skipped_under_emulation(
        "sock_diag is refused under qemu-user: no in-flight count, so no record goes out to look into",
    ) {
        run.signal(libc::SIGTERM);
        run.expect_exit(0);
        return;
    }
    let records = wait_until("two EMF records", || {
        let records: Vec<String> = run
            .stdout()
            .into_iter()
            .filter(|l| l.starts_with('{') && l.contains("_aws"))
            .collect();
        (records.len() >= 2).then_some(records)
    });
    for record in &records {
        assert!(!record.contains("ScaleInProtected"), "{record}");
    }
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
}

#[test]
fn settings_are_refused_or_said_where_they_cannot_work() {
    // The trap, refused by name.
    let out = lifeguard()
        .args([
            "--inflight-port",
            "8080",
            "--scale-in-protection",
            "0",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--scale-in-protection") && err.contains("never scale in"),
        "{err}"
    );
    // No port to read a request's age from.
    let out = lifeguard()
        .env("LIFEGUARD_SCALE_IN_PROTECTION", "30s")
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--scale-in-protection needs --inflight-port"),
        "{err}"
    );
    // Off ECS the same settings run the app, and say why nothing is protected.
    let out = lifeguard()
        .env("LIFEGUARD_SCALE_IN_PROTECTION", "30s")
        .env_remove("ECS_AGENT_URI")
        .args(["--inflight-port", "8080", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("ECS_AGENT_URI is not set"), "{err}");
    // `off` is off, wherever it is written.
    let out = lifeguard()
        .env("LIFEGUARD_SCALE_IN_PROTECTION", "OFF")
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
