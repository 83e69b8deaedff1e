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

/// `sh -c 'sleep 1; exit 3'` with the endpoint on (so a helper process runs beside the
/// app) and a 20 s grace, started by `start`: lifeguard must exit 3 right after the
/// app, not wait the grace for its own helper.
fn an_exit_with_the_endpoint_on_is_not_held_by_the_helper(
    what: &str,
    start: impl FnOnce(&[&str]) -> Run,
) {
    let port = free_port();
    let listen = listen_flag(port);
    let started = Instant::now();
    let mut run = start(&[
        "-v",
        "--listen",
        &listen,
        "--grace",
        "20s",
        "--",
        "sh",
        "-c",
        "sleep 1; exit 3",
    ]);
    run.expect_exit(3);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "{what}: an app that runs 1 s ended lifeguard after {took:?} (the helper was waited for)\n{}",
        run.transcript()
    );
    assert!(
        !run.stderr().iter().any(|l| l.contains("grace deadline")),
        "{what}\n{}",
        run.transcript()
    );
}

#[test]
fn with_another_namespaces_proc_the_helper_never_holds_the_apps_exit() {
    an_exit_with_the_endpoint_on_is_not_held_by_the_helper("host /proc", |args| {
        start(Mode::Pid1HostProc, args)
    });
}

#[test]
fn with_no_proc_at_all_the_helper_never_holds_the_apps_exit() {
    // /proc unmounted in the container's mount namespace (some sandboxes mount none).
    an_exit_with_the_endpoint_on_is_not_held_by_the_helper("no /proc", |args| {
        start_under(
            Mode::Pid1,
            &["sh", "-c", "umount -l /proc && exec \"$0\" \"$@\""],
            args,
        )
    });
}

#[test]
fn without_child_lists_the_helper_never_holds_the_apps_exit() {
    // A kernel built without CONFIG_PROC_CHILDREN has no /proc/PID/task/TID/children:
    // an empty file system over lifeguard's own task directory gives PID 1 the same
    // view (the rest of /proc stays, so its own /proc is scanned instead).
    an_exit_with_the_endpoint_on_is_not_held_by_the_helper("no child lists", |args| {
        start_under(
            Mode::Pid1,
            &[
                "sh",
                "-c",
                "mount -t tmpfs none /proc/1/task && exec \"$0\" \"$@\"",
            ],
            args,
        )
    });
}
