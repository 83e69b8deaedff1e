//! The command line's tests: each rule of parsing and validation, on the settings it gives.

use super::values::parse_duration;
use super::*;
use crate::settings::ProbeTarget;
use std::collections::HashMap;
use std::time::Duration;

fn parse_with(args: &[&str], env: &[(&str, &str)]) -> Parsed {
    parse_under(None, args, env)
}

/// As lifeguard parses its command line as PID 1 under `engine`.
fn parse_under(engine: Option<Engine>, args: &[&str], env: &[(&str, &str)]) -> Parsed {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let args = std::iter::once("lifeguard")
        .chain(args.iter().copied())
        .map(OsString::from);
    let twins: Vec<String> = (env.keys())
        .filter(|k| k.starts_with("LIFEGUARD_"))
        .cloned()
        .collect();
    parse(args, |name| env.get(name).cloned(), &twins, engine)
}

/// The usual command lines: read without clap, and the very settings clap gives.
#[cfg(feature = "fast-start")]
#[test]
fn the_start_without_clap_gives_what_clap_gives() {
    let lines: &[&[&str]] = &[
        &["app"],
        &["--", "app", "--grace", "1s"],
        &["--drain-delay", "0", "--listen", "off", "--", "/bin/true"],
        &["--drain-delay=2s", "--grace=30s", "-v", "app", "-q"],
        &[
            "-vv",
            "--inflight-port",
            "8080",
            "--drain-max",
            "12s",
            "app",
        ],
        &["--grace", "3", "app"],
        &[
            "--drain-quiet",
            "500ms",
            "--leftover-grace",
            "2s",
            "--ready-interval",
            "2s",
            "app",
        ],
        &["--listen", "127.0.0.1:9999", "--ready-port", "9596", "app"],
        &[
            "--listen",
            "[::]:9595",
            "--stop-signal",
            "QUIT",
            "-q",
            "app",
        ],
        &["--verbose", "-vvv", "app"],
    ];
    for line in lines {
        let args: Vec<OsString> = std::iter::once("lifeguard")
            .chain(line.iter().copied())
            .map(OsString::from)
            .collect();
        assert!(fast::parse(&args, false).is_some(), "{line:?} went to clap");
        let lookup = |_: &str| None;
        let fast = match parse(args.clone(), lookup, &[], None) {
            Parsed::Run(run) => format!("{run:?}"),
            _ => panic!("{line:?}"),
        };
        let clap = match parse_with_clap(args, lookup, None) {
            Parsed::Run(run) => format!("{run:?}"),
            _ => panic!("{line:?}"),
        };
        assert_eq!(fast, clap, "{line:?}");
    }
    // The defaults are clap's, field by field.
    let command = vec![OsString::from("app")];
    let matches = Cli::command()
        .try_get_matches_from(["lifeguard", "app"])
        .unwrap();
    let by_clap = Cli::from_arg_matches(&matches).unwrap();
    assert_eq!(
        format!("{:?}", fast::defaults(command).unwrap()),
        format!("{by_clap:?}")
    );
    // Anything else is clap's: its rules and its messages.
    let theirs: &[&[&str]] = &[
        &[],
        &["--help"],
        &["-h"],
        &["--version"],
        &["--probe"],
        &["--mirror-ready-port", "9596"],
        &["--grace", "1s", "--grace", "2s", "app"],
        &["--grace", "-1s", "app"],
        &["--grace", "soon", "app"],
        &["--listen"],
        &["--rewrite", "TERM:QUIT", "app"],
        &["-c", "app"],
        &["-vq", "app"],
        &["-v", "-q", "app"],
        &["--drain-dela", "1s", "app"],
        &["--ready-interval", "0", "app"],
    ];
    for line in theirs {
        let args: Vec<OsString> = std::iter::once("lifeguard")
            .chain(line.iter().copied())
            .map(OsString::from)
            .collect();
        assert!(
            fast::parse(&args, false).is_none(),
            "{line:?} did not go to clap"
        );
    }
    // A variable clap reads sends every line to clap.
    let args: Vec<OsString> = ["lifeguard", "app"].map(OsString::from).to_vec();
    assert!(fast::parse(&args, true).is_none());
}

fn ok(args: &[&str], env: &[(&str, &str)]) -> Run {
    match parse_with(args, env) {
        Parsed::Run(s) => *s,
        Parsed::Probe(p) => panic!("{args:?} is a probe: {p:?}"),
        Parsed::Mirror(m) => panic!("{args:?} is a mirror: {m:?}"),
        Parsed::Exit { message, .. } => panic!("{args:?} refused: {message}"),
    }
}

fn probe_ok(args: &[&str], env: &[(&str, &str)]) -> Probe {
    match parse_with(args, env) {
        Parsed::Probe(p) => *p,
        Parsed::Run(s) => panic!("{args:?} is no probe: {s:?}"),
        Parsed::Mirror(m) => panic!("{args:?} is a mirror: {m:?}"),
        Parsed::Exit { message, .. } => panic!("{args:?} refused: {message}"),
    }
}

fn mirror_ok(args: &[&str], env: &[(&str, &str)]) -> Mirror {
    match parse_with(args, env) {
        Parsed::Mirror(m) => *m,
        Parsed::Run(s) => panic!("{args:?} is no mirror: {s:?}"),
        Parsed::Probe(p) => panic!("{args:?} is a probe: {p:?}"),
        Parsed::Exit { message, .. } => panic!("{args:?} refused: {message}"),
    }
}

#[test]
fn the_mirror_takes_its_port_and_a_listen_of_its_own() {
    let m = mirror_ok(&["--mirror-ready-port", "9596"], &[]);
    assert_eq!(
        m.watched,
        MirrorPort {
            host: None,
            port: 9596
        }
    );
    assert_eq!(m.listen, ListenAt::Any(MIRROR_DEFAULT_PORT));
    let m = mirror_ok(
        &[
            "--mirror-ready-port=[::1]:9596",
            "--listen",
            "127.0.0.1:8081",
            "-v",
        ],
        &[("METRICS_NAMESPACE", "web")],
    );
    assert_eq!(m.watched.host, Some("::1".parse().unwrap()));
    assert_eq!(m.listen, ListenAt::Addr("127.0.0.1:8081".parse().unwrap()));
    assert_eq!(m.log.level, Level::Info);
    assert!(
        m.warnings[0].starts_with("METRICS_NAMESPACE ignored"),
        "{:?}",
        m.warnings
    );
    let m = mirror_ok(&["--mirror-ready-port", "[::]:9596"], &[]);
    assert_eq!(m.watched.host, None, "an unspecified HOST is any address");
    let m = mirror_ok(&["--mirror-ready-port", "9595"], &[]);
    assert!(
        m.warnings[0].contains("lifeguard's own endpoint"),
        "{:?}",
        m.warnings
    );
    // A probe in the mirror's image asks the mirror's port (the variable's case is
    // tested on the binary: clap reads the twins from the process environment).
    let probe = probe_ok(&["--probe", "live", "--mirror-ready-port", "9596"], &[]);
    assert_eq!(probe.listen.at, Some(ListenAt::Any(MIRROR_DEFAULT_PORT)));
}

#[test]
fn the_mirror_refuses_what_it_cannot_honour_by_name() {
    let rows: &[(&[&str], &[(&str, &str)], &str)] = &[
        (&["--mirror-ready-port", "0"], &[], "'0' is not a TCP port"),
        (
            &["--mirror-ready-port", "70000"],
            &[],
            "expected the app container's ready port",
        ),
        (
            &["--mirror-ready-port", "web:9596"],
            &[],
            "'web' is not an IP address",
        ),
        (
            &["--mirror-ready-port", "::1:9596"],
            &[],
            "'::1' is not an IP address",
        ),
        (
            &["--mirror-ready-port", "+9596"],
            &[],
            "'+9596' is not a TCP port",
        ),
        (
            &["--mirror-ready-port", "9596", "--", "app"],
            &[],
            "takes no COMMAND (got 'app')",
        ),
        (
            &[
                "--mirror-ready-port",
                "9596",
                "--ready-port",
                "9000",
                "--drain-delay",
                "1s",
            ],
            &[],
            "--drain-delay, --ready-port cannot apply to the readiness mirror",
        ),
        (
            &["--mirror-ready-port", "9596", "--listen", "off"],
            &[],
            "--listen off leaves",
        ),
        (
            &["--mirror-ready-port", "9597"],
            &[],
            "--mirror-ready-port (9597) must differ from --listen's port",
        ),
    ];
    for (args, env, want) in rows {
        let message = usage_error(args, env);
        assert!(message.contains(want), "{args:?}: {message}");
    }
}

fn usage_error(args: &[&str], env: &[(&str, &str)]) -> String {
    match parse_with(args, env) {
        Parsed::Run(s) => panic!("{args:?} accepted: {s:?}"),
        Parsed::Probe(p) => panic!("{args:?} accepted: {p:?}"),
        Parsed::Mirror(m) => panic!("{args:?} accepted: {m:?}"),
        Parsed::Exit { message, code, .. } => {
            assert_eq!(code, 2, "{message}");
            message
        }
    }
}

/// Under Docker or Podman with no orchestrator, the stop fits the engine's 10 s: no drain
/// delay, a grace of 9 s, said at the start; what the user gave stays; under ECS or
/// Kubernetes (which may run on an engine) nothing changes.
#[test]
fn a_plain_container_engine_gets_defaults_that_fit_its_stop() {
    let run = |engine, args: &[&str], env: &[(&str, &str)]| match parse_under(engine, args, env) {
        Parsed::Run(run) => *run,
        _ => panic!("{args:?} {env:?}"),
    };
    let lifecycle = |r: &Run| {
        (
            r.supervision.lifecycle.drain_delay,
            r.supervision.lifecycle.grace,
        )
    };
    let (s5, s25, s9) = (
        Duration::from_secs(5),
        Duration::from_secs(25),
        Duration::from_secs(9),
    );
    let docker = run(Some(Engine::Docker), &["app"], &[]);
    assert_eq!(lifecycle(&docker), (Duration::ZERO, s9));
    assert_eq!(docker.supervision.lifecycle.drain_max, None);
    assert_eq!(docker.notices.len(), 1);
    let notice = &docker.notices[0];
    assert!(
        notice.contains("plain Docker container")
            && notice.contains("--drain-delay 0")
            && notice.contains("--grace 9s")
            && notice.contains("`docker stop` sends SIGKILL at 10s"),
        "{notice}"
    );
    // Through clap too (a variable sends the line there), and for Podman.
    let podman = run(
        Some(Engine::Podman),
        &["-v", "--", "app"],
        &[("LIFEGUARD_LOG_FORMAT", "text")],
    );
    assert_eq!(lifecycle(&podman), (Duration::ZERO, s9));
    assert!(
        podman.notices[0].contains("`podman stop`"),
        "{:?}",
        podman.notices
    );
    assert_eq!(
        crate::seconds::human(s9).to_string(),
        "9s",
        "the notice's figure"
    );
    // Given values stay (flags here; their variables in tests/container.rs, as clap
    // reads them from the process's environment); the notice names only what it chose.
    let given = run(Some(Engine::Docker), &["--grace", "30s", "app"], &[]);
    assert_eq!(lifecycle(&given), (Duration::ZERO, Duration::from_secs(30)));
    assert!(!given.notices[0].contains("--grace"), "{:?}", given.notices);
    let both = run(
        Some(Engine::Docker),
        &["--drain-delay", "1s", "--grace", "20s", "app"],
        &[],
    );
    assert_eq!(
        lifecycle(&both),
        (Duration::from_secs(1), Duration::from_secs(20))
    );
    // Nothing chosen for them; only the reminder that `docker stop`'s 10 s is shorter.
    assert_eq!(both.notices.len(), 1, "{:?}", both.notices);
    assert!(
        both.notices[0].starts_with("reminder, under Docker"),
        "{:?}",
        both.notices
    );
    // The ECS-tuned image on a laptop: its drain delay stays, the grace holds it, and
    // the start says how long a stop window the container needs.
    let tuned = run(Some(Engine::Docker), &["--drain-delay", "20s", "app"], &[]);
    assert_eq!(
        lifecycle(&tuned),
        (Duration::from_secs(20), Duration::from_secs(30))
    );
    assert!(
        tuned.notices[1].contains("docker run --stop-timeout 35"),
        "{:?}",
        tuned.notices
    );
    // An orchestrator (ECS on EC2 runs Docker; a pod may run on a Docker node): its
    // defaults, and nothing to say.
    for engine in [Engine::Ecs, Engine::Kubernetes] {
        let r = run(Some(engine), &["app"], &[]);
        assert_eq!(lifecycle(&r), (s5, s25), "{engine:?}");
        assert!(r.notices.is_empty());
    }
    // No engine (not PID 1, or neither file): the defaults.
    assert_eq!(lifecycle(&run(None, &["app"], &[])), (s5, s25));
}

#[test]
fn defaults_follow_the_design() {
    let s = ok(&["--", "app", "arg"], &[]);
    assert_eq!(
        s.supervision.command,
        vec![OsString::from("app"), OsString::from("arg")]
    );
    assert_eq!(s.supervision.lifecycle.drain_delay, Duration::from_secs(5));
    assert_eq!(s.supervision.lifecycle.grace, Duration::from_secs(25));
    assert!(s.supervision.lifecycle.group);
    assert_eq!(s.log.level, Level::Notice);
    assert_eq!(s.log.format, crate::logging::Format::Text);
    assert_eq!(s.helper.metrics, Metrics::default());
}

#[test]
fn a_given_value_is_never_called_the_default_and_unknown_variables_are_said() {
    // 5s given for the drain delay: the user's own, though it equals the default.
    let m = usage_error(&["--grace", "4s", "--drain-delay", "5s", "app"], &[]);
    assert!(
        m.contains("--grace (4s)")
            && m.contains("--drain-delay (5s)")
            && !m.contains("the default"),
        "{m}"
    );
    // Not given: the default, said so (here with a drain delay given as the default's
    // twin, so that the grace alone does not scale it).
    let m = usage_error(&["--drain-max", "1s", "--grace", "0.5s", "app"], &[]);
    assert!(m.contains("--drain-max"), "{m}");
    // --grace lowered alone to the default drain delay or below: the drain delay is a
    // fifth of it, and --drain-max halfway, as the defaults are for 25 s.
    let s = ok(&["--grace", "3", "--inflight-port", "80", "app"], &[]);
    assert_eq!(
        s.supervision.lifecycle.drain_delay,
        Duration::from_millis(600)
    );
    assert_eq!(
        s.supervision.lifecycle.drain_max,
        Some(Duration::from_millis(1800))
    );
    // Above it, the default drain delay stands.
    let s = ok(&["--grace", "10s", "app"], &[]);
    assert_eq!(s.supervision.lifecycle.drain_delay, Duration::from_secs(5));
    let said = unknown_variables(
        [
            "LIFEGUARD_DRAIN_DELAI",
            "LIFEGUARD_GRACE",
            "LIFEGUARD_XYZZY_PLUGH",
            "PATH",
        ]
        .into_iter()
        .map(String::from),
    );
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].contains("LIFEGUARD_DRAIN_DELAI")
            && said[0].contains("did you mean LIFEGUARD_DRAIN_DELAY?"),
        "{said:?}"
    );
    assert!(
        said[1].contains("LIFEGUARD_XYZZY_PLUGH") && said[1].contains("--help"),
        "{said:?}"
    );
    // The CloudWatch contract's names have no prefix; a prefixed one means them.
    let said = unknown_variables(["LIFEGUARD_METRICS_SINK".to_string()].into_iter());
    assert!(said[0].contains("did you mean METRICS_SINK?"), "{said:?}");
    // What `cargo run` puts in the environment from build.rs is no LIFEGUARD_ name.
    assert!(!VERSION.is_empty() && !env!("BUILT_COMMIT").is_empty());
}

#[test]
fn drain_max_defaults_halfway_and_needs_an_inflight_port() {
    // Without --inflight-port there is nothing to wait for: no hold.
    assert_eq!(
        ok(&["--drain-max", "10s", "app"], &[])
            .supervision
            .lifecycle
            .drain_max,
        None
    );
    let s = ok(&["--inflight-port", "80", "app"], &[]);
    assert_eq!(
        s.supervision.lifecycle.drain_max,
        Some(Duration::from_secs(15))
    );
    let s = ok(
        &[
            "--inflight-port",
            "80",
            "--drain-delay",
            "2s",
            "--grace",
            "10s",
            "app",
        ],
        &[],
    );
    assert_eq!(
        s.supervision.lifecycle.drain_max,
        Some(Duration::from_secs(6))
    );
    let s = ok(&["--inflight-port", "80", "--drain-max", "5s", "app"], &[]);
    assert_eq!(
        s.supervision.lifecycle.drain_max,
        Some(Duration::from_secs(5))
    );
    // A drain-max given alone stays; the defaults fit around it (the delay no longer
    // than it, a grace that holds it), where before 1.0 it was refused.
    for (max, delay, grace) in [(4, 4, 25), (25, 5, 35), (30, 5, 40)] {
        let s = ok(
            &[
                "--inflight-port",
                "80",
                "--drain-max",
                &format!("{max}s"),
                "app",
            ],
            &[],
        );
        let lifecycle = &s.supervision.lifecycle;
        assert_eq!(
            (lifecycle.drain_delay, lifecycle.drain_max, lifecycle.grace),
            (
                Duration::from_secs(delay),
                Some(Duration::from_secs(max)),
                Duration::from_secs(grace)
            ),
            "--drain-max {max}s"
        );
    }
    // Given values that contradict each other are refused, naming all three.
    for args in [
        ["--drain-max", "30s", "--grace", "20s"],
        ["--drain-max", "2s", "--drain-delay", "3s"],
    ] {
        let m = usage_error(&[args[0], args[1], args[2], args[3], "app"], &[]);
        assert!(
            m.contains("--drain-max") && m.contains("--drain-delay") && m.contains("--grace"),
            "{args:?}: {m}"
        );
    }
}

#[test]
fn the_metrics_contract_is_checked_at_start() {
    let s = ok(&["app"], &[("METRICS_NAMESPACE", "prod/web")]);
    if cfg!(feature = "cloudwatch-api") {
        assert_eq!(s.helper.cloudwatch.unwrap().namespace, "prod/web");
    } else {
        // The build without the SDK cannot call the API: it says so, and publishes
        // nothing rather than refusing to start.
        assert!(s.helper.cloudwatch.is_none());
    }
    let m = usage_error(
        &["app"],
        &[
            ("METRICS_NAMESPACE", "prod/web"),
            ("METRICS_INTERVAL", "often"),
        ],
    );
    assert!(
        m.contains("METRICS_INTERVAL") && m.contains("from 1 to 86400"),
        "{m}"
    );
    // Not the probe's business.
    probe_ok(&["--probe"], &[("METRICS_NAMESPACE", "AWS/ECS")]);
}

#[test]
fn metrics_settings() {
    let s = ok(
        &["--inflight-port", "8080", "app"],
        &[(
            "ECS_CONTAINER_METADATA_URI_V4",
            "http://169.254.170.2/v4/abc",
        )],
    );
    assert_eq!(s.helper.metrics.inflight_port, Some(8080));
    assert_eq!(
        s.helper.metrics.ecs_metadata.as_deref(),
        Some("http://169.254.170.2/v4/abc")
    );
    let s = ok(&["app"], &[("ECS_CONTAINER_METADATA_URI_V4", " ")]);
    assert_eq!(s.helper.metrics.ecs_metadata, None);
}

#[test]
fn the_command_keeps_its_own_flags() {
    let s = ok(&["-c", "app", "-c", "--grace", "1"], &[]);
    assert_eq!(
        s.supervision.command,
        ["app", "-c", "--grace", "1"].map(OsString::from)
    );
    assert!(!s.supervision.lifecycle.group);
}

#[test]
fn endpoint_and_app_check_options() {
    let s = ok(&["app"], &[]);
    assert_eq!(
        s.supervision.listen,
        Listen {
            at: Some(ListenAt::Any(9595)),
            explicit: false
        }
    );
    assert_eq!(s.helper.app_check, None);
    assert_eq!(s.helper.check_interval, Duration::from_secs(1));
    let s = ok(
        &["--listen", ":8081", "--ready-tcp", "localhost:80", "app"],
        &[],
    );
    assert_eq!(
        s.supervision.listen,
        Listen {
            at: Some(ListenAt::Any(8081)),
            explicit: true
        }
    );
    assert_eq!(
        s.helper.app_check,
        Some(AppCheck::Tcp("localhost".into(), 80))
    );
    let s = ok(
        &[
            "--listen",
            "off",
            "--ready-http",
            "http://127.0.0.1:8080/health",
            "app",
        ],
        &[],
    );
    assert_eq!(s.supervision.listen.at, None);
    assert!(matches!(s.helper.app_check, Some(AppCheck::Http(ref u)) if u.path() == "/health"));
    let s = ok(&["--listen", "[::1]:9000", "app"], &[]);
    assert_eq!(
        s.supervision.listen.at,
        Some(ListenAt::Addr("[::1]:9000".parse().unwrap()))
    );
    // A host name, resolved at start (main.rs): --help says HOST:PORT.
    let s = ok(&["--listen", "localhost:9596", "app"], &[]);
    assert_eq!(
        s.supervision.listen.at,
        Some(ListenAt::Name {
            host: "localhost".into(),
            port: 9596
        })
    );
}

#[test]
fn the_stop_signal_is_taken_by_name_or_number_and_must_be_catchable() {
    let s = ok(&["app"], &[]);
    assert_eq!(
        s.supervision.lifecycle.stop_signal,
        crate::signal_names::TERM
    );
    for value in ["QUIT", "SIGQUIT", "3", "quit"] {
        let s = ok(&["--stop-signal", value, "app"], &[]);
        assert_eq!(
            s.supervision.lifecycle.stop_signal.0,
            libc::SIGQUIT,
            "{value}"
        );
        assert_eq!(s.helper.stop_signal.0, libc::SIGQUIT, "{value}");
    }
    for (value, said) in [
        ("KILL", "cannot be caught"),
        ("STOP", "cannot be caught"),
        ("CHLD", "how lifeguard hears of exits"),
        ("TSTP", "is job control"),
        ("TTIN", "is job control"),
        ("TTOU", "is job control"),
        ("CONT", "resumes stopped processes"),
        ("NOPE", "NOPE"),
    ] {
        let message = usage_error(&["--stop-signal", value, "app"], &[]);
        assert!(
            message.contains("--stop-signal") && message.contains(said),
            "{message}"
        );
    }
}

#[test]
fn a_misspelt_flag_gets_the_one_it_meant() {
    let message = usage_error(&["--drain-dealy", "5s", "app"], &[]);
    assert!(
        message.contains("unexpected argument '--drain-dealy'")
            && message.contains("tip: a similar argument exists: '--drain-delay'"),
        "{message}"
    );
    let message = usage_error(&["--gracefully=3", "app"], &[]);
    assert!(!message.contains("similar argument"), "{message}");
}

#[test]
fn probe_needs_no_command() {
    let p = probe_ok(&["--probe"], &[]);
    assert_eq!(
        (p.target, p.timeout),
        (ProbeTarget::Ready, Duration::from_secs(2))
    );
    let p = probe_ok(&["--probe", "live", "--probe-timeout", "500ms"], &[]);
    assert_eq!(
        (p.target, p.timeout),
        (ProbeTarget::Live, Duration::from_millis(500))
    );
    let p = probe_ok(&["--probe", "http://127.0.0.1:1/x"], &[]);
    assert!(matches!(p.target, ProbeTarget::Url(_)));
}

#[test]
fn the_probe_ignores_settings_it_does_not_use_and_refuses_with_1() {
    // The ENTRYPOINT's flags are not repeated in HEALTHCHECK: an image with
    // LIFEGUARD_DRAIN_DELAY=30s and `--grace 60s` on its ENTRYPOINT.
    probe_ok(&["--probe"], &[("TINI_VERBOSITY", "loud")]);
    probe_ok(&["--drain-delay", "30s", "--probe"], &[]);
    for args in [
        &["--probe", "sideways"][..],
        &["--listen", ":1", "--probe", "--bogus"],
        &["-v", "--grace", "x", "--probe=live"],
    ] {
        match parse_with(args, &[]) {
            Parsed::Exit {
                code: 1, message, ..
            } => {
                assert!(message.contains("error"), "{message}")
            }
            _ => panic!("{args:?}: a probe refusal exits 1"),
        }
    }
    // After COMMAND, --probe is the app's, and a refusal is a usage error.
    for args in [&["--grace", "1s", "app", "--probe"][..], &["--", "--probe"]] {
        let command = Cli::command();
        let args: Vec<OsString> = std::iter::once("lifeguard")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        assert!(!probe_requested(&command, &args), "{args:?}");
    }
    usage_error(
        &["--grace", "1s", "--drain-delay", "2s", "app", "--probe"],
        &[],
    );
}

#[test]
fn durations_accept_units_and_plain_seconds() {
    for (text, ms) in [
        ("500ms", 500),
        ("5s", 5000),
        ("2m", 120_000),
        ("1.5", 1500),
        (".25", 250),
        ("3.", 3000),
        ("0.125", 125),
        ("0", 0),
    ] {
        assert_eq!(
            parse_duration(text),
            Ok(Duration::from_millis(ms)),
            "{text}"
        );
    }
    assert!(parse_duration("soon")
        .unwrap_err()
        .contains("500ms, 5s, 2m"));
    assert!(parse_duration("-1").is_err());
    assert!(parse_duration("99999999999999999999999")
        .unwrap_err()
        .contains("longer than a year"));
    assert!(parse_duration("1e3").is_err());
    assert!(parse_duration(".").is_err());
    assert!(parse_duration("1.2.3").is_err());
    assert!(parse_duration("400d")
        .unwrap_err()
        .contains("longer than a year"));
}

#[test]
fn compatibility_variables_are_honoured() {
    assert!(
        !ok(&["app"], &[("DUMB_INIT_SETSID", "0")])
            .supervision
            .lifecycle
            .group
    );
    assert!(
        ok(&["app"], &[("DUMB_INIT_SETSID", "1")])
            .supervision
            .lifecycle
            .group
    );
    let levels: &[(&[&str], (&str, &str), Level)] = &[
        (&["app"], ("DUMB_INIT_DEBUG", "1"), Level::Debug),
        (&["app"], ("TINI_VERBOSITY", "2"), Level::Info),
        (&["app"], ("TINI_VERBOSITY", "0"), Level::Error),
        (&["app"], ("LIFEGUARD_VERBOSE", "1"), Level::Info),
        (&["app"], ("LIFEGUARD_QUIET", "1"), Level::Error),
        (&["-vv", "app"], ("TINI_VERBOSITY", "0"), Level::Debug),
        (&["-q", "app"], ("UNRELATED", "1"), Level::Error),
    ];
    for (args, env, level) in levels {
        assert_eq!(ok(args, &[*env]).log.level, *level, "{args:?} {env:?}");
    }
    ok(
        &["-s", "-g", "app"],
        &[("TINI_SUBREAPER", "1"), ("TINI_KILL_PROCESS_GROUP", "1")],
    );
}

#[test]
fn usage_errors_name_the_flag_and_the_accepted_form() {
    let m = usage_error(&["--drain-delay", "soon", "app"], &[]);
    assert!(
        m.contains("--drain-delay") && m.contains("500ms, 5s, 2m"),
        "{m}"
    );
    let m = usage_error(&["--grace", "5s", "--drain-delay", "5s", "app"], &[]);
    assert!(m.contains("--grace") && m.contains("--drain-delay"), "{m}");
    let m = usage_error(&["--rewrite", "TERM=QUIT", "app"], &[]);
    assert!(m.contains("--rewrite") && m.contains("FROM:TO"), "{m}");
    let m = usage_error(&["-p", "SIGFOO", "app"], &[]);
    assert!(
        m.contains("--pdeathsig") && m.contains("signal name"),
        "{m}"
    );
    let m = usage_error(&["-e", "256", "app"], &[]);
    assert!(m.contains("--remap-exit") && m.contains("0 to 255"), "{m}");
    let m = usage_error(&["--log-format", "xml", "app"], &[]);
    assert!(m.contains("--log-format") && m.contains("json"), "{m}");
    let m = usage_error(&["--bogus", "app"], &[]);
    assert!(m.contains("--bogus"), "{m}");
    let m = usage_error(&[], &[]);
    assert!(m.contains("COMMAND"), "{m}");
    let m = usage_error(&["--listen", "nowhere", "app"], &[]);
    assert!(m.contains("--listen") && m.contains("HOST:PORT"), "{m}");
    let m = usage_error(&["--listen", "bad_host:80", "app"], &[]);
    assert!(
        m.contains("--listen") && m.contains("localhost:9595"),
        "{m}"
    );
    // A negative duration is a duration error, not clap's tip to write `-- -1s`
    // (which would make it the command).
    let m = usage_error(&["--drain-delay", "-1s", "app"], &[]);
    assert!(
        m.contains("--drain-delay") && m.contains("negative") && !m.contains("tip"),
        "{m}"
    );
    let m = usage_error(&["--grace", "--drain-delay", "1s", "app"], &[]);
    assert!(m.contains("is a flag, not a value"), "{m}");
    let m = usage_error(&["--ready-http", "https://x/", "app"], &[]);
    assert!(m.contains("--ready-http") && m.contains("http://"), "{m}");
    let m = usage_error(&["--ready-tcp", "localhost", "app"], &[]);
    assert!(m.contains("--ready-tcp") && m.contains("HOST:PORT"), "{m}");
    let m = usage_error(
        &["--ready-tcp", "a:1", "--ready-http", "http://a/", "app"],
        &[],
    );
    assert!(
        m.contains("--ready-tcp") && m.contains("--ready-http"),
        "{m}"
    );
    for port in ["0", "65536", "http", "-1", "80x"] {
        let m = usage_error(&["--inflight-port", port, "app"], &[]);
        assert!(
            m.contains("--inflight-port") && m.contains("1 to 65535"),
            "{port}: {m}"
        );
    }
    let m = usage_error(&["--ready-interval", "0", "app"], &[]);
    assert!(
        m.contains("--ready-interval") && m.contains("above zero"),
        "{m}"
    );
    let m = usage_error(&["app"], &[("TINI_VERBOSITY", "loud")]);
    assert!(m.contains("TINI_VERBOSITY"), "{m}");
}

#[test]
fn help_and_version_exit_zero_on_stdout() {
    for flag in ["--help", "--version"] {
        match parse_with(&[flag], &[]) {
            Parsed::Exit {
                code: 0,
                to_stdout: true,
                ..
            } => {}
            _ => panic!("{flag} should print to stdout and exit 0"),
        }
    }
}

/// The man page must document every flag, its short form and its environment twin.
#[test]
fn man_page_documents_every_flag() {
    let man = include_str!("../../man/lifeguard.1");
    let cmd = command();
    let mut missing = Vec::new();
    for arg in cmd.get_arguments() {
        if let Some(long) = arg.get_long() {
            if !man.contains(&format!("\\-\\-{}", long.replace('-', "\\-"))) {
                missing.push(format!("--{long}"));
            }
        }
        if let Some(short) = arg.get_short() {
            if !man.contains(&format!("\\-{short}")) {
                missing.push(format!("-{short}"));
            }
        }
        if let Some(env) = arg.get_env() {
            let env = env.to_string_lossy();
            if !man.contains(&*env) {
                missing.push(env.into_owned());
            }
        }
    }
    for env in [
        "LIFEGUARD_VERBOSE",
        "LIFEGUARD_QUIET",
        "TINI_SUBREAPER",
        "TINI_KILL_PROCESS_GROUP",
        "TINI_VERBOSITY",
        "DUMB_INIT_SETSID",
        "DUMB_INIT_DEBUG",
    ] {
        if !man.contains(env) {
            missing.push(env.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "man/lifeguard.1 does not document: {missing:?}"
    );
}

/// `--help` ends usage errors' advice ("try '--help'"): every variable lifeguard
/// reads is there, and in the man page.
#[test]
fn help_and_the_man_page_list_the_environment() {
    let help = command().render_help().to_string();
    let man = include_str!("../../man/lifeguard.1");
    for env in [
        "METRICS_NAMESPACE",
        "METRICS_INTERVAL",
        "METRICS_DIMENSIONS",
        "METRICS_BURST_THRESHOLD",
        "AWS_REGION",
        "AWS_ENDPOINT_URL_CLOUDWATCH",
        "ECS_CONTAINER_METADATA_URI_V4",
        "TINI_VERBOSITY",
        "DUMB_INIT_SETSID",
        "LIFEGUARD_",
    ] {
        assert!(help.contains(env), "--help does not name {env}:\n{help}");
        assert!(man.contains(env), "the man page does not name {env}");
    }
}

#[test]
fn metrics_settings_without_a_namespace_are_warned_about_not_refused() {
    let s = ok(&["app"], &[("METRICS_INTERVAL", "abc")]);
    assert_eq!(s.helper.cloudwatch, None);
    assert_eq!(
        s.warnings,
        vec!["METRICS_INTERVAL ignored: CloudWatch publishing is off without METRICS_NAMESPACE"]
    );
    let s = ok(&["app"], &[]);
    assert!(s.warnings.is_empty());
    // With a namespace the same value is refused, naming the variable.
    let m = usage_error(
        &["app"],
        &[("METRICS_NAMESPACE", "a/b"), ("METRICS_INTERVAL", "abc")],
    );
    assert!(m.contains("METRICS_INTERVAL 'abc'"), "{m}");
}
