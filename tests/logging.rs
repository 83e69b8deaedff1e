//! lifeguard's own log lines: lifecycle events at info, a stop's few lines at the
//! default level, text or JSON, and a closed stderr never stopping supervision.
mod common;

use common::*;

#[test]
fn every_lifecycle_event_is_logged_at_info() {
    for mode in MODES {
        let mut run = start(
            mode,
            &args(
                &["-v", "--drain-delay", "100ms", "--grace", "1s"],
                &["--exit-on", "none"],
            ),
        );
        run.ready();
        run.signal(libc::SIGTERM);
        run.expect_exit(137);
        let log = run.stderr().join("\n");
        for event in [
            "app started pid=",
            "signal received signal=SIGTERM",
            "draining",
            "stop signal relayed signal=SIGTERM",
            "grace deadline reached",
            "app exited",
            "killed by SIGKILL",
            "exiting code=137",
        ] {
            assert!(
                log.contains(event),
                "[{mode:?}] missing {event:?} in:\n{log}"
            );
        }
        assert!(
            run.stderr().iter().all(|l| l.starts_with("lifeguard: ")),
            "{log}"
        );
    }
}

/// lifeguard's lines, which as PID 1 of the harness's namespace (no container engine
/// there, even where the tests run in a Docker container: tests/common's
/// no_engine_here) hold neither the reminder of Docker's stop timeout nor the plain
/// engine's defaults: tests/container.rs has those, in real containers.
fn without_docker_notice(lines: Vec<String>) -> Vec<String> {
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("lifeguard: reminder, under Docker")
                || l.starts_with("lifeguard: defaults for a plain")),
        "a container engine's line outside a container engine: {lines:#?}"
    );
    lines
}

#[test]
fn default_level_says_only_how_the_app_ended() {
    let mut run = start(Mode::Pid1, &app(&["--exit", "0"]));
    run.expect_exit(0);
    let log = without_docker_notice(run.stderr());
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(
        log[0].starts_with("lifeguard: app exited pid=") && log[0].contains("code=0"),
        "{log:?}"
    );
    assert_eq!(log[1], "lifeguard: exiting code=0");
}

#[test]
fn default_level_tells_a_stop_in_a_few_lines() {
    // What an operator reading `docker logs` expects of a stop, and nothing routine:
    // the SIGTERM (from outside the namespace, as `docker stop` sends it), the drain and
    // why it ended, the stop signal relayed, the app's exit, lifeguard's exit code.
    let mut run = start(Mode::Pid1, &args(&["--drain-delay", "200ms"], &[]));
    run.ready();
    run.signal(libc::SIGHUP);
    run.expect_line("signal HUP");
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    let log = without_docker_notice(run.stderr());
    let expected = [
        "lifeguard: signal received signal=SIGTERM from=\"outside the namespace\"",
        // The stop's plan, from the SIGTERM: when the relay comes, when SIGKILL would.
        "lifeguard: draining: not ready; the stop signal is relayed after the drain delay, at relay_by; what still runs at sigkill_at gets SIGKILL delay=200ms relay_by=+200ms sigkill_at=+25s",
        "lifeguard: drain delay over after=",
        "lifeguard: stop signal relayed signal=SIGTERM to=group pid=",
        "lifeguard: app exited pid=",
        "lifeguard: exiting code=0",
    ];
    assert_eq!(log.len(), expected.len(), "{log:#?}");
    for (line, start) in log.iter().zip(expected) {
        assert!(
            line.starts_with(start),
            "{line:?} is not {start:?}…\n{log:#?}"
        );
    }
}

#[test]
fn json_format_writes_one_object_per_line() {
    let mut run = start(
        Mode::Subreaper,
        &args(&["-v", "--log-format", "json"], &["--exit", "5"]),
    );
    run.expect_exit(5);
    let lines = run.stderr();
    assert!(lines.len() >= 3, "{lines:?}");
    for line in &lines {
        assert!(
            line.starts_with("{\"time\":\"") && line.ends_with('}'),
            "{line}"
        );
        assert!(
            line.contains("\"level\":\"info\"") || line.contains("\"level\":\"notice\""),
            "{line}"
        );
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"msg\":\"app exited\"") && l.contains("\"code\":5")),
        "{lines:?}"
    );
}

#[test]
fn a_closed_stderr_never_stops_supervision() {
    for mode in MODES {
        // stderr is a pipe whose reader is gone: every log write fails with EPIPE.
        let mut run = start_with(
            mode,
            &args(&["-vv", "--drain-delay", "0"], &["--code", "9"]),
            |c| {
                c.stderr(broken_pipe());
            },
        );
        run.ready();
        run.signal(libc::SIGUSR1);
        run.expect_line("signal USR1");
        run.signal(libc::SIGTERM);
        run.expect_line("signal TERM");
        run.expect_exit(9);
        assert!(
            !run.stdout().iter().any(|l| l == "signal PIPE"),
            "lifeguard's own SIGPIPE was forwarded"
        );
    }
}

#[test]
fn without_a_log_writer_thread_lifeguard_says_so_once() {
    // stderr is a pipe and there is no /proc to open a non-blocking description of it
    // (a mount namespace without /proc), so only a writer thread could write without
    // stalling supervision; and a pids cgroup that holds lifeguard alone lets no thread
    // start (nor the app, which is lifeguard's own failure, 125). lifeguard must say what
    // it gives up instead of silently writing on the supervision thread.
    require_root();
    let mount = std::path::Path::new("/sys/fs/cgroup/pids");
    if !mount.join("cgroup.procs").exists() {
        panic!("THIS TEST CANNOT RUN: it needs the cgroup v1 pids hierarchy at {mount:?}");
    }
    let dir = mount.join(format!("lifeguard-test-{}-pids", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("pids.max"), "1").unwrap();
    let script = format!(
        "umount -l /proc && echo $$ > {}/cgroup.procs && exec \"$@\"",
        dir.display()
    );
    let out = lifeguard_output_under(
        &[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ],
        &["-v", "--", "true"],
    );
    let _ = std::fs::remove_dir(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    let said = stderr
        .lines()
        .filter(|l| l.contains("cannot start the log writer thread"))
        .count();
    assert_eq!(said, 1, "{stderr}");
    assert!(stderr.contains("cannot run 'true'"), "{stderr}");
    // Info lines are dropped from then on (notices, such as the exit code, are kept).
    assert!(!stderr.contains("app started"), "{stderr}");
}

/// Runs lifeguard (a plain child) through `wrapper`, which execs it, to the end.
fn lifeguard_output_under(wrapper: &[&str], args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new(wrapper[0]);
    cmd.args(&wrapper[1..]).args(lifeguard_argv()).args(args);
    without_inherited_settings(&mut cmd)
        .env("LIFEGUARD_LISTEN", "off")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_stalled_stderr_never_delays_signals_or_the_exit() {
    // stderr is a pipe nobody reads, shrunk to one page: lifeguard's debug lines fill it
    // at once. Signals must still be forwarded, and the stop must still end on time
    // (the unwritten lines wait in lifeguard's queue, and at exit it waits at most 1 s).
    use std::io::{BufRead, BufReader};
    use std::os::fd::AsRawFd;
    let mut child = lifeguard()
        .args([
            "-vv",
            "--listen",
            "off",
            "--drain-delay",
            "0",
            "--",
            TESTAPP,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stalled = child.stderr.take().unwrap();
    // SAFETY: F_SETPIPE_SZ on our own end of the pipe; no memory is passed.
    unsafe { libc::fcntl(stalled.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    let (lines, stdout) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let next = |what: &str| {
        stdout
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("no {what} from the app: supervision stalled"))
    };
    assert_eq!(next("ready"), "ready");
    let pid = child.id() as i32;
    // Each forwarded signal costs lifeguard a few debug lines: far more than a page.
    for _ in 0..200 {
        send(pid, libc::SIGUSR2);
        assert_eq!(next("forwarded signal"), "signal USR2");
    }
    let stop = std::time::Instant::now();
    send(pid, libc::SIGTERM);
    let status = wait_with_patience(&mut child);
    assert_eq!(status, Some(0));
    assert!(
        stop.elapsed() < std::time::Duration::from_secs(3),
        "the exit took {:?} with stderr stalled",
        stop.elapsed()
    );
    drop(stalled);
}

/// The exit code of `child`, or None (after killing it) if it does not exit in time.
fn wait_with_patience(child: &mut std::process::Child) -> Option<i32> {
    let until = std::time::Instant::now() + PATIENCE;
    while std::time::Instant::now() < until {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}
