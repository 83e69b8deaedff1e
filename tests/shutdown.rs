//! Shutdown: the drain before the stop signal, the second SIGTERM, the grace deadline,
//! and what happens to what the app leaves behind when it exits.
mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn sigterm_is_held_for_the_drain_delay_then_relayed() {
    for mode in MODES {
        let mut run = start(
            mode,
            &args(&["--drain-delay", "600ms", "--grace", "5s"], &[]),
        );
        run.ready();
        let sent = Instant::now();
        run.signal(libc::SIGTERM);
        run.expect_line("signal TERM");
        let held = sent.elapsed();
        assert!(
            held >= Duration::from_millis(590),
            "[{mode:?}] relayed after {held:?}, before the drain delay"
        );
        run.expect_exit(0);
    }
}

#[test]
fn a_second_sigterm_cuts_the_drain_short() {
    for mode in MODES {
        let mut run = start_draining(mode);
        run.signal(libc::SIGTERM);
        run.expect_line("signal TERM");
        run.expect_exit(0);
        assert_eq!(
            run.stdout().iter().filter(|l| *l == "signal TERM").count(),
            1
        );
    }
}

#[test]
fn whatever_outlives_the_grace_deadline_is_killed_and_lifeguard_exits_137() {
    for mode in MODES {
        if orphans_skipped(mode) {
            continue;
        }
        let mut run = start(
            mode,
            &args(
                &["-w", "--drain-delay", "100ms", "--grace", "1s"],
                &["--exit-on", "none", "--daemon", "stubborn"],
            ),
        );
        run.ready();
        // The daemon's pid as lifeguard sees it (the namespace's, as PID 1).
        let daemon = run.value("daemon");
        run.signal(libc::SIGTERM);
        run.expect_line("signal TERM");
        run.expect_exit(137);
        // lifeguard itself killed the daemon at the deadline: as PID 1 the kernel would
        // end it anyway when lifeguard exits, so its absence afterwards proves nothing.
        // As PID 1 the kill is kill(-1) (no walk: the log cannot name them), and
        // lifeguard reaped the daemon killed by SIGKILL before it exited (-w says so);
        // as a subreaper the log names whom it killed.
        let killed = run.expect_log("grace deadline reached");
        if mode == Mode::Pid1 {
            assert!(
                killed.contains("every process left in the namespace"),
                "{killed}"
            );
            let reaped = run.expect_log(&format!("reaped zombie pid={daemon} "));
            assert!(reaped.contains("killed by SIGKILL"), "{reaped}");
        } else {
            let pids = killed
                .split("pids=")
                .nth(1)
                .unwrap_or_default()
                .trim_matches('"');
            assert!(
                pids.split(',').any(|p| p == daemon),
                "[{mode:?}] the daemon ({daemon}) is not among the killed: {killed}"
            );
        }
        if mode == Mode::Subreaper {
            let pid: i32 = daemon.parse().unwrap();
            wait_until("the daemon to be gone", || (!alive(pid)).then_some(()));
        }
    }
}

#[test]
fn when_the_app_exits_its_leftovers_get_sigterm_and_lifeguard_waits_for_them() {
    for mode in MODES {
        if orphans_skipped(mode) {
            continue;
        }
        let mut run = start(mode, &app(&["--daemon", "polite", "--exit", "7"]));
        run.ready();
        run.expect_line("daemon signal TERM");
        run.expect_exit(7);
    }
}

#[test]
fn leftovers_that_ignore_sigterm_are_killed_at_grace_after_the_app_exit() {
    for mode in MODES {
        if orphans_skipped(mode) {
            continue;
        }
        let started = Instant::now();
        let mut run = start(
            mode,
            &args(
                &["--grace", "1s", "--drain-delay", "0"],
                &["--daemon", "stubborn", "--exit", "4"],
            ),
        );
        run.ready();
        let daemon: i32 = run.value("daemon").parse().unwrap();
        run.expect_line("daemon signal TERM ignored");
        run.expect_exit(4);
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "killed before the grace ran out"
        );
        if mode == Mode::Subreaper {
            wait_until("the stubborn daemon to be killed", || {
                (!alive(daemon)).then_some(())
            });
        }
    }
}

#[test]
fn after_the_stop_signal_the_app_group_is_not_signalled_twice() {
    // The app takes a while to exit after SIGTERM; when its shell parent exits first the
    // group must not get a second SIGTERM (a second one means "force" to many apps).
    let script = format!("{TESTAPP} --exit-on TERM,INT --linger 300; true");
    let mut run = start(
        Mode::Subreaper,
        &["--drain-delay", "0", "--", "sh", "-c", &script],
    );
    run.ready();
    run.signal(libc::SIGTERM);
    run.expect_line("exiting");
    run.expect_exit(143);
    assert_eq!(
        run.stdout()
            .iter()
            .filter(|l| l.starts_with("signal TERM"))
            .count(),
        1,
        "{}",
        run.transcript()
    );
}

#[test]
fn lifeguard_gets_its_parent_death_signal() {
    // sh starts lifeguard in the background and waits on its own stdin; closing that
    // stdin ends sh, and the kernel sends lifeguard the -p signal.
    let cmd = format!(
        "{} -p TERM --drain-delay 0 -- {TESTAPP} </dev/null & read line",
        lifeguard_shell()
    );
    let mut sh = without_inherited_settings(&mut std::process::Command::new("sh"))
        .args(["-c", &cmd])
        .env("LIFEGUARD_LISTEN", "off")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(sh.stdout.take().unwrap());
    let mut line = String::new();
    use std::io::BufRead;
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    drop(sh.stdin.take());
    sh.wait().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rest = String::new();
        while out.read_line(&mut rest).unwrap_or(0) > 0 {}
        let _ = tx.send(rest);
    });
    let rest = rx
        .recv_timeout(PATIENCE)
        .expect("lifeguard kept running after its parent died");
    assert!(
        rest.contains("signal TERM"),
        "the app never got the stop signal: {rest:?}"
    );
}

#[test]
fn a_process_whose_main_thread_exited_is_still_killed_at_the_deadline() {
    // Its main thread gone, the app shows as a zombie in /proc while a thread runs on.
    let mut run = start(
        Mode::Subreaper,
        &args(
            &["--drain-delay", "0", "--grace", "1s"],
            &["--thread-outlives-main"],
        ),
    );
    run.ready();
    let app = run.app_pid();
    wait_until("the main thread to exit", || {
        (state(app) == Some('Z')).then_some(())
    });
    run.signal(libc::SIGTERM);
    run.expect_exit(137);
    wait_until("the app's last thread to be gone", || {
        std::fs::metadata(format!("/proc/{app}"))
            .is_err()
            .then_some(())
    });
}
