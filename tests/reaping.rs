//! Reaping: every orphan lifeguard inherits is reaped, in bursts too, as PID 1 and as a
//! subreaper; `-w` reports each one.
mod common;

use common::*;

#[test]
fn a_burst_of_twenty_thousand_orphans_leaves_no_zombie() {
    for mode in MODES {
        let mut run = start(mode, &app(&["--zombies", "20000"]));
        run.ready();
        run.expect_line("zombies 20000");
        // "zombies" comes once their parent is gone; on a loaded machine a few of the
        // orphans may not have exited yet, so wait for the end state itself: only the
        // app left below lifeguard, still running.
        let app = run.app_pid();
        wait_until("every orphan to be reaped", || {
            (children(run.pid) == vec![app]).then_some(())
        });
        run.signal(libc::SIGINT);
        run.expect_exit(0);
    }
}

#[test]
fn warn_on_reap_logs_each_orphan() {
    let mut run = start(Mode::Subreaper, &args(&["-w"], &["--zombies", "3"]));
    run.ready();
    run.expect_line("zombies 3");
    wait_until("three reap warnings", || {
        (run.stderr()
            .iter()
            .filter(|l| l.contains("reaped zombie"))
            .count()
            == 3)
            .then_some(())
    });
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn what_the_app_leaves_gets_the_leftover_grace_not_the_whole_grace() {
    // The app exits at once, leaving a daemon that ignores SIGTERM. Nothing routes to a
    // task whose app is gone, and its restart waits for lifeguard: the daemon is
    // SIGKILLed --leftover-grace (5 s by default) after the exit, not --grace (25 s), and
    // a line says what lifeguard waits for and until when.
    for mode in MODES {
        if orphans_skipped(mode) {
            continue;
        }
        let started = std::time::Instant::now();
        let mut run = start(
            mode,
            &args(
                &["--grace", "25s"],
                &["--daemon", "stubborn", "--exit", "3"],
            ),
        );
        run.expect_exit(3);
        let took = started.elapsed();
        assert!(
            took >= std::time::Duration::from_secs(5) && took < std::time::Duration::from_secs(15),
            "[{mode:?}] exited {took:?} after start, the leftover grace is 5 s\n{}",
            run.transcript()
        );
        let said = run.expect_log("what still runs then gets SIGKILL");
        assert!(said.contains("sigkill_in=5s"), "{said}");
    }
}
