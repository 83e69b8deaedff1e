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
