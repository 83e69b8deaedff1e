//! Exit status (docs/reference.md): the app's code, 128+N for death by signal N, remapped codes,
//! 126/127 for a command that cannot run, 2 for usage errors.
mod common;

use std::process::Command;

use common::*;

#[test]
fn every_exit_code_from_0_to_255_passes_through_as_pid1() {
    let codes: Vec<i32> = (0..=255).collect();
    let workers: Vec<_> = codes
        .chunks(64)
        .map(|chunk| {
            let chunk = chunk.to_vec();
            std::thread::spawn(move || {
                for code in chunk {
                    let text = code.to_string();
                    let mut run = start(Mode::Pid1, &["--", TESTAPP, "--exit", &text]);
                    run.expect_exit(code);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
}

#[test]
fn death_by_signal_is_128_plus_the_signal_number() {
    for mode in MODES {
        let mut run = start(mode, &["--", "sh", "-c", "kill -USR1 $$"]);
        run.expect_exit(128 + libc::SIGUSR1);
        if skipped_under_emulation(
            "the real-time half: qemu-user renumbers real-time signals (host 34-64 are the \
             guest's 32-62), so a death by host signal 36 reaches lifeguard's wait status as \
             34 and the exit code is 162, not 164 (observed with qemu 7.2)",
        ) {
            continue;
        }
        let rt = (libc::SIGRTMIN() + 2).to_string();
        let script = format!("kill -{rt} $$");
        let mut run = start(mode, &["--", "sh", "-c", &script]);
        run.expect_exit(128 + libc::SIGRTMIN() + 2);
    }
}

#[test]
fn remapped_codes_become_zero() {
    let mut run = start(
        Mode::Pid1,
        &args(&["-e", "3", "--remap-exit", "143"], &["--exit", "3"]),
    );
    run.expect_exit(0);
    let mut run = start(
        Mode::Pid1,
        &[
            "-e",
            "143",
            "--drain-delay",
            "0",
            "--",
            "sh",
            "-c",
            &format!("{TESTAPP}; true"),
        ],
    );
    run.ready();
    run.signal(libc::SIGTERM);
    run.expect_exit(0);
    let mut run = start(Mode::Pid1, &args(&["-e", "3"], &["--exit", "4"]));
    run.expect_exit(4);
}

#[test]
fn a_command_that_cannot_run_is_126_and_a_missing_one_127() {
    let dir = std::env::temp_dir().join(format!("lifeguard-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let not_executable = dir.join("plain-file");
    std::fs::write(&not_executable, "#!/bin/sh\necho hi\n").unwrap();
    let dir_text = dir.to_str().unwrap();
    for mode in MODES {
        let mut run = start(mode, &["--", not_executable.to_str().unwrap()]);
        run.expect_exit(126);
        run.expect_log("plain-file");
        let mut run = start(mode, &["--", dir_text]);
        run.expect_exit(126);
        // The kernel says "Permission denied" for a directory too: lifeguard says what
        // it is.
        let line = run.expect_log("cannot run");
        assert!(
            line.contains(&format!("{dir_text} is a directory")),
            "{line}"
        );
        let mut run = start(mode, &["--", "/no/such/program"]);
        run.expect_exit(127);
        let line = run.expect_log("/no/such/program");
        assert!(line.contains("cannot run"), "{line}");
        let mut run = start(mode, &["--", "no-such-program-on-path"]);
        run.expect_exit(127);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn usage_errors_exit_2_naming_the_flag_and_start_nothing() {
    let cases: &[(&[&str], &[&str])] = &[
        (&[], &["COMMAND"]),
        (&["--frobnicate", "--", "true"], &["--frobnicate"]),
        (
            &["--drain-delay", "soon", "--", "true"],
            &["--drain-delay", "500ms, 5s, 2m"],
        ),
        (
            &["--grace", "2s", "--drain-delay", "3s", "--", "true"],
            &["--grace", "--drain-delay"],
        ),
        (&["-r", "TERM", "--", "true"], &["--rewrite", "FROM:TO"]),
        (&["-p", "NOPE", "--", "true"], &["--pdeathsig", "NOPE"]),
        // Negative numbers reach the flag's own check instead of reading as flags.
        (
            &["--drain-delay", "-1", "--", "true"],
            &["--drain-delay", "500ms"],
        ),
        (&["-e", "-1", "--", "true"], &["--remap-exit", "0 to 255"]),
    ];
    for (args, wanted) in cases {
        let out = lifeguard().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for w in *wanted {
            assert!(err.contains(w), "{args:?}: message lacks {w:?}: {err}");
        }
    }
    let out = lifeguard()
        .args(["--", "true"])
        .env("LIFEGUARD_GRACE", "x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = lifeguard().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--drain-delay"));
}

#[test]
fn environment_twins_configure_lifeguard_and_flags_win() {
    // LIFEGUARD_REWRITE and LIFEGUARD_REMAP_EXIT, comma-separated like repeated flags.
    let mut run = start_with(
        Mode::Subreaper,
        &args(&[], &["--exit-on", "QUIT", "--code", "3"]),
        |c| {
            c.env("LIFEGUARD_REWRITE", "TERM:QUIT,HUP:DROP")
                .env("LIFEGUARD_REMAP_EXIT", "3")
                .env("LIFEGUARD_DRAIN_DELAY", "0")
                .env("LIFEGUARD_LOG_FORMAT", "json")
                .env("LIFEGUARD_VERBOSE", "1");
        },
    );
    run.ready();
    run.signal(libc::SIGHUP);
    run.signal(libc::SIGTERM);
    run.expect_line("signal QUIT");
    run.expect_exit(0);
    assert!(
        run.stderr().iter().all(|l| l.starts_with('{')),
        "{:?}",
        run.stderr()
    );
    assert!(!run.stdout().iter().any(|l| l == "signal HUP"));
    // The flag wins over its twin: --drain-delay 0 against a twin of a minute.
    let mut run = start_with(Mode::Subreaper, &args(&["--drain-delay", "0"], &[]), |c| {
        c.env("LIFEGUARD_DRAIN_DELAY", "60s")
            .env("LIFEGUARD_GRACE", "90s");
    });
    run.ready();
    run.signal(libc::SIGTERM);
    run.expect_line("signal TERM");
    run.expect_exit(0);
    // A twin with a bad value is a usage error naming the flag and the variable.
    let out = lifeguard()
        .args(["--", "true"])
        .env("LIFEGUARD_DRAIN_DELAY", "soon")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("--drain-delay") && err.contains("LIFEGUARD_DRAIN_DELAY"),
        "{err}"
    );
}

#[test]
fn a_failure_to_start_the_app_is_lifeguards_own_125() {
    require_root();
    if skipped_under_emulation(
        "under prlimit --nproc=1 the emulator itself cannot start: qemu-user starts threads \
         of its own before lifeguard's code runs (\"qemu: qemu_thread_create: Resource \
         temporarily unavailable\", no exit code)",
    ) {
        return;
    }
    // An unprivileged user allowed a single process: lifeguard runs, and its fork of the
    // app fails (EAGAIN). That is not the app's fault (126 is for a COMMAND that cannot
    // be executed). The binary is copied where that user can reach it.
    let dir = std::env::temp_dir().join(format!("lifeguard-nproc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("lifeguard");
    std::fs::copy(lifeguard_bin(), &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = without_inherited_settings(&mut Command::new("setpriv"))
        .args(["--reuid=54321", "--regid=54321", "--clear-groups"])
        .args(["prlimit", "--nproc=1:1"])
        .args(&lifeguard_argv()[..lifeguard_argv().len() - 1])
        .arg(&bin)
        .args(["--listen", "off", "--", "true"])
        .output()
        .expect("setpriv and prlimit from util-linux are needed for this test");
    std::fs::remove_dir_all(&dir).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("cannot run 'true'"), "{err}");
}
