//! Settings as task definitions, Helm values and Compose files write them: every boolean
//! variable takes 1/0, true/false, yes/no and on/off in any case (a JSON task definition
//! can only give a string, and `"1"` is what most write), and anything else is a usage
//! error naming the variable and the forms; `--grace` lowered alone runs with defaults
//! scaled to it.
mod common;

use common::*;

/// Every boolean `LIFEGUARD_*` variable, and what it turns on.
const BOOLEANS: [&str; 4] = [
    "LIFEGUARD_SINGLE_CHILD",
    "LIFEGUARD_SUBREAPER",
    "LIFEGUARD_WARN_ON_REAP",
    "LIFEGUARD_QUIET",
];

/// lifeguard with `name=value`, running `true`: its exit code and stderr.
fn run_with(name: &str, value: &str) -> (Option<i32>, String) {
    let out = lifeguard()
        .env("LIFEGUARD_LISTEN", "off")
        .env(name, value)
        .args(["--", "true"])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn every_boolean_variable_takes_every_form_in_any_case() {
    for name in BOOLEANS {
        for value in [
            "1", "0", "true", "false", "yes", "no", "on", "off", "TRUE", "False", "YES", "No",
            "ON", "Off", " 1 ",
        ] {
            let (code, err) = run_with(name, value);
            assert_eq!(code, Some(0), "{name}={value:?} refused: {err}");
        }
        let (code, err) = run_with(name, "maybe");
        assert_eq!(code, Some(2), "{name}=maybe accepted: {err}");
        assert!(
            err.contains(name)
                || err.contains(
                    &name
                        .to_lowercase()
                        .replace("lifeguard_", "--")
                        .replace('_', "-")
                ),
            "{name}=maybe: the error does not name it: {err}"
        );
        assert!(err.contains("maybe"), "{name}=maybe: {err}");
    }
}

#[test]
fn a_boolean_variable_does_what_its_value_says() {
    // LIFEGUARD_WARN_ON_REAP=yes logs each reaped orphan; =no does not.
    for (value, said) in [("yes", true), ("On", true), ("no", false), ("0", false)] {
        let mut run = start_with(Mode::Pid1, &["--", "sh", "-c", "sleep 0.1 & exit 0"], |c| {
            c.env("LIFEGUARD_WARN_ON_REAP", value);
        });
        run.expect_exit(0);
        let logged = run.stderr().iter().any(|l| l.contains("reaped zombie"));
        assert_eq!(
            logged,
            said,
            "LIFEGUARD_WARN_ON_REAP={value}\n{}",
            run.transcript()
        );
    }
}

#[test]
fn grace_lowered_alone_runs_with_defaults_scaled_to_it() {
    let (code, err) = {
        let out = lifeguard()
            .env("LIFEGUARD_LISTEN", "off")
            .args(["--grace", "3", "-v", "--", "true"])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    assert_eq!(code, Some(0), "{err}");
    // Both given and in conflict: one error naming both.
    let out = lifeguard()
        .env("LIFEGUARD_LISTEN", "off")
        .args(["--grace", "3", "--drain-delay", "5s", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--grace") && err.contains("--drain-delay"),
        "{err}"
    );
}
