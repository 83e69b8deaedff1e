//! PID 1 with another namespace's /proc (docs/lifecycle.md: whose /proc):
//! `unshare --pid --fork` without `--mount-proc` leaves lifeguard with the host's
//! /proc, where /proc/1 is the host's init. lifeguard must still find what the app left
//! (through /proc/self and NSpid), never touch the host's processes, and keep its
//! deadline.
mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn leftovers_get_sigterm_at_once_and_lifeguard_exits_right_after_them() {
    // The app exits at once, leaving a daemon in a session of its own that exits on
    // SIGTERM: lifeguard must signal it now, not sit out the 10 s grace.
    let started = Instant::now();
    let mut run = start(
        Mode::Pid1HostProc,
        &args(
            &["-v", "--grace", "10s"],
            &["--daemon", "polite", "--exit", "0"],
        ),
    );
    run.expect_line("daemon signal TERM");
    run.expect_exit(0);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: the leftover waited for the deadline\n{}",
        run.transcript()
    );
    let line = run.expect_log("signalled what the app left running");
    assert!(line.contains("processes=1"), "{line}");
}

#[test]
fn the_deadline_kills_and_exits_137_on_time() {
    let mut run = start(
        Mode::Pid1HostProc,
        &args(
            &["--drain-delay", "0", "--grace", "2s"],
            &["--exit-on", "none"],
        ),
    );
    run.ready();
    let term_at = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_line("signal TERM");
    run.expect_exit(137);
    let took = term_at.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "exit {took:?} after SIGTERM with a 2 s grace\n{}",
        run.transcript()
    );
}

#[test]
fn the_app_behind_a_shell_is_found_and_killed_at_the_deadline() {
    // `sh -c 'app; true'`: the shell dies of the relayed SIGTERM (143, the status
    // lifeguard reports); the app, a grandchild found only through the host's /proc and
    // NSpid, ignores it and is SIGKILLed at the deadline, on time.
    let command = format!("{TESTAPP} --exit-on none; true");
    let mut run = start(
        Mode::Pid1HostProc,
        &[
            "-v",
            "--drain-delay",
            "0",
            "--grace",
            "2s",
            "--",
            "sh",
            "-c",
            &command,
        ],
    );
    run.ready();
    let term_at = Instant::now();
    run.signal(libc::SIGTERM);
    run.expect_line("signal TERM");
    run.expect_exit(143);
    let took = term_at.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "exit {took:?} after SIGTERM with a 2 s grace\n{}",
        run.transcript()
    );
    let line = run.expect_log("grace deadline reached");
    assert!(line.contains("processes=1"), "{line}");
}

#[test]
fn job_control_reads_the_right_processes_signal_state() {
    // TSTP goes to an app that handles it (its SigCgt, read through the host's /proc
    // under its host pid), not turned into SIGSTOP.
    let mut run = start(Mode::Pid1HostProc, &app(&["--ignore-stop"]));
    run.ready();
    run.signal(libc::SIGTSTP);
    run.expect_line("signal TSTP");
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}
