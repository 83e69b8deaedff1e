//! lifeguard's own log lines (DESIGN §7): lifecycle events at info, text or JSON, and a
//! closed stderr never stopping supervision.
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
            "lifeguard exiting code=137",
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

#[test]
fn default_level_is_quiet_about_routine_events() {
    let mut run = start(Mode::Pid1, &app(&["--exit", "0"]));
    run.expect_exit(0);
    assert!(run.stderr().is_empty(), "{:?}", run.stderr());
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
        assert!(line.contains("\"level\":\"info\""), "{line}");
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
