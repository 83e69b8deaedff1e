//! What the app inherits (docs/lifecycle.md): lifeguard's original signal mask and ignored set,
//! no descriptor of lifeguard's, the environment and working directory, its own session
//! and group, and the terminal's foreground when stdin is one.
mod common;

use common::*;

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

fn hex(text: &str) -> u64 {
    u64::from_str_radix(text, 16).unwrap()
}

/// The reporting app: grep, a C program that leaves signals alone before it reads its
/// own status (the Rust testapp cannot: Rust's start-up ignores SIGPIPE).
const REPORT: [&str; 3] = ["grep", "-E", "^(SigBlk|SigIgn):"];

fn parse_report(text: &str) -> (u64, u64) {
    let field = |name: &str| {
        hex(text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .trim())
    };
    (field("SigBlk:"), field("SigIgn:"))
}

/// (blocked, ignored) of the reporting app started through `env ENV_ARGS`, directly or
/// under lifeguard in `mode`: the baseline is the direct run, since the test runner may
/// itself have inherited ignored signals (e.g. from a CI shell).
fn report(mode: Option<Mode>, env_args: &[&str]) -> (u64, u64) {
    let Some(mode) = mode else {
        let mut cmd = std::process::Command::new("env");
        cmd.args(env_args).args(REPORT).arg("/proc/self/status");
        return parse_report(&String::from_utf8_lossy(&cmd.output().unwrap().stdout));
    };
    let mut lifeguard_args = vec!["--"];
    lifeguard_args.extend(REPORT);
    lifeguard_args.push("/proc/self/status");
    let mut wrapper = vec!["env"];
    wrapper.extend_from_slice(env_args);
    let mut run = start_under(mode, &wrapper, &lifeguard_args);
    run.expect(|l| l.starts_with("SigIgn:"), "SigIgn");
    run.expect_exit(0);
    parse_report(&run.stdout().join("\n"))
}

#[test]
fn the_app_gets_the_mask_and_ignored_set_lifeguard_was_started_with() {
    for mode in MODES {
        // Plain start: the same as without lifeguard, although lifeguard blocks every
        // signal itself and Rust's runtime ignores SIGPIPE in it.
        let plain = ["--default-signal=PIPE"];
        let (mask, ignored) = report(Some(mode), &plain);
        assert_eq!((mask, ignored), report(None, &plain), "[{mode:?}]");
        assert_eq!(
            ignored & bit(libc::SIGPIPE),
            0,
            "[{mode:?}] SIGPIPE left ignored"
        );
        // Started with USR2 blocked and PIPE, HUP and CHLD ignored: the app sees the
        // same. (CHLD ignored must not make the kernel reap for lifeguard: the run
        // would never end.)
        let odd = [
            "--block-signal=USR2",
            "--ignore-signal=PIPE",
            "--ignore-signal=HUP",
            "--ignore-signal=CHLD",
        ];
        let (mask, ignored) = report(Some(mode), &odd);
        assert_eq!((mask, ignored), report(None, &odd), "[{mode:?}]");
        assert_ne!(mask & bit(libc::SIGUSR2), 0, "[{mode:?}]");
        for sig in [libc::SIGPIPE, libc::SIGHUP, libc::SIGCHLD] {
            assert_ne!(ignored & bit(sig), 0, "[{mode:?}] {sig}");
        }
    }
}

fn fds(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("fds "))
        .unwrap_or_else(|| panic!("no fds in {text}"))
        .to_string()
}

#[test]
fn no_descriptor_of_lifeguards_leaks_into_the_app() {
    let out = std::process::Command::new(TESTAPP)
        .args(["--report", "--exit", "0"])
        .output()
        .unwrap();
    let direct = fds(&String::from_utf8_lossy(&out.stdout));
    for mode in MODES {
        // With the endpoint listening and the app check's client in use too.
        let mut run = start(
            mode,
            &args(
                &[
                    "-vv",
                    "--listen",
                    "127.0.0.1:0",
                    "--ready-tcp",
                    "127.0.0.1:9",
                    "--ready-interval",
                    "50ms",
                ],
                &["--report", "--exit", "0"],
            ),
        );
        assert_eq!(
            run.value("fds"),
            direct,
            "[{mode:?}] the app sees descriptors it would not see without lifeguard"
        );
        run.expect_exit(0);
    }
}

#[test]
fn the_app_runs_in_its_own_session_and_group() {
    for mode in MODES {
        let mut run = start(mode, &app(&["--report", "--exit", "0"]));
        let ids = run.value("pgid");
        // "P sid S pid I": a session leader and group leader.
        let parts: Vec<&str> = ids.split_whitespace().collect();
        assert_eq!(parts[0], parts[2], "pgid = sid: {ids}");
        assert_eq!(parts[0], parts[4], "pgid = pid: {ids}");
        run.expect_exit(0);
    }
}

#[test]
fn environment_and_working_directory_are_unchanged() {
    let dir = std::env::temp_dir();
    let mut run = start_with(
        Mode::Pid1,
        &["--", "sh", "-c", "pwd; echo \"$GREETING\""],
        |c| {
            c.current_dir(&dir).env("GREETING", "hello there");
        },
    );
    run.expect_line(dir.to_str().unwrap());
    run.expect_line("hello there");
    run.expect_exit(0);
}

/// Runs `shell_command` under script(1), which gives it a pseudo-terminal as its
/// controlling terminal, and returns what it printed.
fn on_a_terminal(shell_command: &str) -> String {
    // Bounded by timeout(1): a lifeguard that never exits fails the test, not hangs it.
    let out = without_inherited_settings(&mut std::process::Command::new("timeout"))
        .args(["30", "script", "-qec", shell_command, "/dev/null"])
        .env("LIFEGUARD_LISTEN", "off")
        // script(1) runs $SHELL -c; pin it so that whether the shell execs the command
        // (and so who leads the terminal's session) does not depend on the environment.
        .env("SHELL", "/bin/sh")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script(1) from util-linux is needed for this test");
    String::from_utf8_lossy(&out.stdout).replace('\r', "")
}

#[test]
fn with_a_terminal_on_stdin_the_app_is_the_foreground_group() {
    let app = format!("{} -- {TESTAPP} --report --exit 0", lifeguard_shell());
    // (how the shell starts lifeguard, who lifeguard is, which id the app's pgid equals)
    let cases = [
        // lifeguard leads the terminal's session (as PID 1 of `docker run -t`): it lets
        // go of the terminal and the app's own session takes it, so pgid = sid.
        (format!("exec {app}"), "session leader", 2),
        // lifeguard is one member of the shell's session (started from an interactive
        // shell): the terminal stays that session's, so the app gets a group of its own
        // in it, made the foreground group: pgid = pid.
        // The shell then reports whether it has the terminal back.
        (format!("{app}; {SHELL_HAS_TERMINAL}"), "session member", 4),
    ];
    let mut texts = Vec::new();
    for (shell_command, who, leads) in cases {
        let text = on_a_terminal(&shell_command);
        assert!(
            text.contains("foreground true"),
            "{who}: the app does not own the terminal:\n{text}"
        );
        // "P sid S pid I"
        let ids = text.lines().find_map(|l| l.strip_prefix("pgid ")).unwrap();
        let parts: Vec<&str> = ids.split_whitespace().collect();
        assert_eq!(parts[0], parts[leads], "{who}: {ids}");
        texts.push(text);
    }
    assert!(
        texts[1].contains("shell has the terminal: yes"),
        "lifeguard did not give the terminal back to the shell:\n{}",
        texts[1]
    );
}

#[test]
fn a_lifeguard_started_in_the_background_leaves_the_terminal_to_the_shell() {
    // A job-control shell (`set -m`) runs lifeguard as a background job, as `lifeguard
    // -- app &` at a prompt. While the app runs, the terminal must stay the shell's:
    // a shell that loses it gets EIO at its next read.
    let lifeguard = lifeguard_shell();
    let text = on_a_terminal(&format!(
        "set -m; f=$(mktemp -u); mkfifo \"$f\"; \
         {lifeguard} -- {TESTAPP} > \"$f\" & read -r line < \"$f\"; echo \"app says $line\"; \
         {SHELL_HAS_TERMINAL}; kill -INT $!; wait; rm -f \"$f\""
    ));
    assert!(text.contains("app says ready"), "{text}");
    assert!(text.contains("shell has the terminal: yes"), "{text}");
}

#[test]
fn ctrl_z_at_the_terminal_stops_the_job_and_fg_resumes_it() {
    // A job-control shell runs lifeguard in the foreground; the app owns the terminal.
    // Ctrl-Z stops the app, and lifeguard must stop too or the shell waits for ever;
    // `fg` resumes both and gives the app the terminal back, so Ctrl-C reaches it.
    use std::io::{Read, Write};
    use std::sync::{Arc, Mutex};
    let command = format!(
        "set -m; {} -v -- {TESTAPP}; echo stopped-status=$?; fg; echo done-status=$?",
        lifeguard_shell()
    );
    let mut script = without_inherited_settings(&mut std::process::Command::new("timeout"))
        .args(["30", "script", "-qec", &command, "/dev/null"])
        .env("LIFEGUARD_LISTEN", "off")
        .env("SHELL", "/bin/sh")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux is needed for this test");
    // Whatever happens, nothing started here outlives the test (a stopped lifeguard
    // would wait for ever).
    struct KillTree(i32);
    impl Drop for KillTree {
        fn drop(&mut self) {
            for pid in descendants(self.0).into_iter().chain([self.0]) {
                // SAFETY: kill with pids this test started (all > 1); errors ignored.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    let cleanup = KillTree(script.id() as i32);
    let output = Arc::new(Mutex::new(String::new()));
    let mut stdout = script.stdout.take().unwrap();
    let sink = output.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let mut keys = script.stdin.take().unwrap();
    let wait_for = |text: &str| {
        wait_until(&format!("{text:?} on the terminal"), || {
            output.lock().unwrap().contains(text).then_some(())
        })
    };
    wait_for("ready");
    keys.write_all(b"\x1a").unwrap(); // Ctrl-Z
                                      // The shell saw its job stop (128 + SIGSTOP) and runs `fg`.
    wait_for("stopped-status=147");
    // lifeguard logs this once it has handed the terminal back to the app.
    wait_for("lifeguard: continued");
    keys.write_all(b"\x03").unwrap(); // Ctrl-C
    wait_for("signal INT");
    wait_for("done-status=0");
    drop(keys);
    let _ = script.wait();
    // All ended by themselves; their pids are free for reuse now.
    std::mem::forget(cleanup);
}

/// Shell code printing whether the shell's group is the terminal's foreground group
/// (fields 5 and 8 of /proc/PID/stat: pgrp and tpgid), without ps.
const SHELL_HAS_TERMINAL: &str = "set -- $(cat /proc/$$/stat); \
    [ \"$5\" = \"$8\" ] && echo 'shell has the terminal: yes' || echo \"shell has the terminal: no ($5 vs $8)\"";

#[test]
fn the_app_gets_the_descriptor_limit_lifeguard_was_started_with() {
    // lifeguard raises its own soft limit for the endpoint's connections; the app must
    // not notice.
    let script = format!("ulimit -Sn; exec {TESTAPP}");
    let mut run = start_under(
        Mode::Subreaper,
        &["prlimit", "--nofile=512:4096"],
        &["--listen", "127.0.0.1:0", "--", "sh", "-c", &script],
    );
    run.expect_line("512");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", run.pid)).unwrap();
    let soft = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert!(
        soft.split_whitespace().nth(3) == Some("2048"),
        "lifeguard's own limit: {soft}"
    );
    run.ready();
    run.signal(libc::SIGINT);
    run.expect_exit(0);
}

#[test]
fn a_standard_descriptor_closed_for_lifeguard_is_closed_for_the_app() {
    // The runtime lifeguard is written with parks /dev/null on a closed standard
    // descriptor before main: the app must still see it closed, as its parent left it.
    // Seen by the shell (not a Rust program, which would park its own), whose builtin
    // test opens nothing.
    for mode in MODES {
        let mut run = start_with(
            mode,
            &[
                "--",
                "sh",
                "-c",
                "for fd in 0 1; do if [ -e /proc/$$/fd/$fd ]; then echo $fd open; else echo $fd closed; fi; done",
            ],
            |cmd| {
                // SAFETY: close(2) in the child before exec; async-signal-safe.
                unsafe {
                    use std::os::unix::process::CommandExt;
                    cmd.pre_exec(|| {
                        libc::close(0);
                        Ok(())
                    });
                }
            },
        );
        run.expect_exit(0);
        assert_eq!(
            run.stdout(),
            ["0 closed", "1 open"],
            "[{mode:?}] the app's standard descriptors"
        );
    }
}
