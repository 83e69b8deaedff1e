//! lifeguard as the ENTRYPOINT of a real container: a `FROM scratch` image holding only
//! the static (musl) lifeguard and the static testapp, run by the local Docker engine with
//! no network. `docker stop` must drain, relay, and end with the app's status; the image's
//! HEALTHCHECK is `lifeguard --probe`, since a scratch image has no curl.
mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("THIS TEST CANNOT RUN: no docker client on PATH")
}

fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A scratch image with lifeguard as ENTRYPOINT running the testapp with `app_args`.
struct Image(String);

/// What goes into a test image besides lifeguard and the testapp.
#[derive(Default)]
struct Recipe<'a> {
    env: &'a [(&'a str, &'a str)],
    /// A static busybox as /bin/sh, for shell-form entrypoints.
    shell: bool,
    /// The ENTRYPOINT as given, instead of lifeguard's (for `docker run --init`).
    entrypoint: Option<Vec<String>>,
}

impl Image {
    fn build(name: &str, lifeguard_flags: &[&str], app_args: &[&str]) -> Image {
        Image::build_with_env(name, &[], lifeguard_flags, app_args)
    }

    /// With `ENV` lines, which HEALTHCHECK's probe sees too (the ENTRYPOINT's flags it
    /// does not).
    fn build_with_env(
        name: &str,
        env: &[(&str, &str)],
        lifeguard_flags: &[&str],
        app_args: &[&str],
    ) -> Image {
        let mut entry = vec!["/lifeguard"];
        entry.extend_from_slice(lifeguard_flags);
        entry.push("--");
        entry.push("/testapp");
        entry.extend_from_slice(app_args);
        Image::build_from(
            name,
            Recipe {
                env,
                entrypoint: Some(entry.iter().map(|s| s.to_string()).collect()),
                ..Default::default()
            },
        )
    }

    fn build_from(name: &str, recipe: Recipe) -> Image {
        let info = docker(&["info", "--format", "{{.ServerVersion}}"]);
        assert!(
            info.status.success(),
            "THIS TEST CANNOT RUN: no Docker engine answers: {}",
            String::from_utf8_lossy(&info.stderr)
        );
        let bins = static_binaries();
        let dir =
            std::env::temp_dir().join(format!("lifeguard-image-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(bins.join("lifeguard"), dir.join("lifeguard")).unwrap();
        std::fs::copy(bins.join("lifeguard-testapp"), dir.join("testapp")).unwrap();
        let mut copies = String::from("COPY lifeguard /lifeguard\nCOPY testapp /testapp\n");
        if recipe.shell {
            let busybox = ["/bin/busybox", "/usr/bin/busybox"]
                .into_iter()
                .find(|p| Path::new(p).exists())
                .expect("THIS TEST CANNOT RUN: no static busybox (apt-get install busybox-static; scripts/test.sh does)");
            std::fs::copy(busybox, dir.join("sh")).unwrap();
            copies.push_str("COPY sh /bin/sh\n");
        }
        let quoted: Vec<String> = recipe
            .entrypoint
            .unwrap_or_default()
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect();
        let env: String = recipe
            .env
            .iter()
            .map(|(name, value)| format!("ENV {name}=\"{value}\"\n"))
            .collect();
        std::fs::write(
            dir.join("Dockerfile"),
            format!(
                "FROM scratch\n{copies}{env}\
                 HEALTHCHECK --interval=1s --timeout=2s --retries=1 CMD [\"/lifeguard\", \"--probe\"]\n\
                 ENTRYPOINT [{}]\n",
                quoted.join(", ")
            ),
        )
        .unwrap();
        let tag = format!("lifeguard-test:{}-{name}", std::process::id());
        docker_ok(&["build", "-q", "-t", &tag, dir.to_str().unwrap()]);
        std::fs::remove_dir_all(&dir).unwrap();
        Image(tag)
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = docker(&["rmi", "-f", &self.0]);
    }
}

struct Container(String);

impl Container {
    fn run(image: &Image) -> Container {
        Container::run_with(image, &[])
    }

    /// With more `docker run` options (limits, say).
    fn run_with(image: &Image, options: &[&str]) -> Container {
        Container::run_args(image, options, &[])
    }

    /// With `docker run` options, and arguments after the image (appended to its
    /// ENTRYPOINT).
    fn run_args(image: &Image, options: &[&str], args: &[&str]) -> Container {
        let mut argv = vec!["run", "-d"];
        if !options.contains(&"--network") {
            argv.extend(["--network", "none"]);
        }
        argv.extend_from_slice(options);
        argv.push(&image.0);
        argv.extend_from_slice(args);
        let id = docker_ok(&argv);
        let c = Container(id);
        wait_until("the app to print ready", || {
            c.logs().contains("ready").then_some(())
        });
        c
    }

    fn logs(&self) -> String {
        let out = docker(&["logs", &self.0]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// The logs once the app has said it is ready.
    fn started(&self) -> String {
        wait_until("the app to start", || {
            let logs = self.logs();
            logs.contains("ready").then_some(logs)
        })
    }

    fn inspect(&self, format: &str) -> String {
        docker_ok(&["inspect", "--format", format, &self.0])
    }

    fn probe(&self) -> (i32, String) {
        self.probe_url(None)
    }

    /// `lifeguard --probe [URL]` inside the container: (exit code, `STATUS BODY`).
    fn probe_url(&self, url: Option<&str>) -> (i32, String) {
        let mut argv = vec!["exec", &self.0, "/lifeguard", "--probe"];
        argv.extend(url);
        let out = docker(&argv);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        )
    }

    /// `docker stop` in the background (it blocks until the container is gone).
    fn stop_in_background(&self, timeout_secs: u32) -> std::thread::JoinHandle<Output> {
        let id = self.0.clone();
        std::thread::spawn(move || docker(&["stop", "-t", &timeout_secs.to_string(), &id]))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

#[test]
fn docker_stop_drains_relays_and_exits_with_the_apps_status() {
    let image = Image::build(
        "drain",
        &["-v", "--drain-delay", "2s", "--grace", "8s"],
        &["--linger", "200"],
    );
    let c = Container::run(&image);
    assert_eq!(c.probe(), (0, "200 ready".into()), "{}", c.logs());
    wait_until("docker to call the container healthy", || {
        (c.inspect("{{.State.Health.Status}}") == "healthy").then_some(())
    });

    let stopped = Instant::now();
    let stop = c.stop_in_background(20);
    wait_until("lifeguard to start draining", || {
        c.logs().contains("draining").then_some(())
    });
    // During the drain the probe fails (503 draining) and the app has no SIGTERM yet.
    let (code, answer) = c.probe();
    assert_eq!((code, answer.as_str()), (1, "503 draining"), "{}", c.logs());
    assert!(
        !c.logs().contains("signal TERM"),
        "relayed before the drain ended:\n{}",
        c.logs()
    );

    assert!(stop.join().unwrap().status.success());
    let took = stopped.elapsed();
    let logs = c.logs();
    assert!(
        took >= Duration::from_secs(2),
        "stopped after {took:?}, inside the drain:\n{logs}"
    );
    assert!(
        logs.contains("signal TERM") && logs.contains("exiting"),
        "{logs}"
    );
    assert_eq!(c.inspect("{{.State.ExitCode}}"), "0", "{logs}");
}

#[test]
fn an_app_that_ignores_sigterm_is_killed_at_the_grace_deadline_before_docker_gives_up() {
    let image = Image::build(
        "deadline",
        &["--drain-delay", "500ms", "--grace", "2s"],
        &["--exit-on", "none"],
    );
    let c = Container::run(&image);
    let stopped = Instant::now();
    // Docker would SIGKILL after 30 s; lifeguard's own deadline comes first.
    let stop = c.stop_in_background(30);
    assert!(stop.join().unwrap().status.success());
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "took {took:?}: docker's kill, not lifeguard's deadline"
    );
    assert!(c.logs().contains("signal TERM"), "{}", c.logs());
    assert_eq!(c.inspect("{{.State.ExitCode}}"), "137");
}

#[test]
fn the_probe_reaches_an_ipv6_any_listener_in_a_container_without_ipv6() {
    // Docker starts containers with IPv6 off, so there is no [::1]; the `[::]` socket
    // takes IPv4 as well.
    let image = Image::build_with_env(
        "ipv6-any",
        &[("LIFEGUARD_LISTEN", "[::]:9595")],
        &["--drain-delay", "0"],
        &[],
    );
    let c = Container::run(&image);
    assert_eq!(c.probe(), (0, "200 ready".into()), "{}", c.logs());
    wait_until("docker to call the container healthy", || {
        (c.inspect("{{.State.Health.Status}}") == "healthy").then_some(())
    });
}

/// `name value` lines of a Prometheus text, as numbers.
fn gauges(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn a_limited_container_reports_its_own_limits_and_usage_from_inside() {
    const LIMIT: f64 = (256u64 << 20) as f64;
    let image = Image::build(
        "limits",
        &["--drain-delay", "0"],
        &["--burn", "--hold-mb", "64"],
    );
    let c = Container::run_with(&image, &["--cpus", "0.5", "--memory", "256m"]);
    // Read from inside, as a scrape through the container's own loopback would.
    let metrics = wait_until("two samples with utilization and throttling", || {
        let (code, answer) = c.probe_url(Some("http://127.0.0.1:9595/metrics"));
        let m = gauges(answer.strip_prefix("200 ")?);
        (code == 0
            && m.contains_key("lifeguard_cpu_utilization_percent")
            && m.get("lifeguard_cpu_throttled_seconds_total") > Some(&0.0))
        .then_some(m)
    });
    assert_eq!(
        metrics["lifeguard_cpu_limit_cores"],
        0.5,
        "{metrics:?}\n{}",
        c.logs()
    );
    assert_eq!(
        metrics["lifeguard_memory_limit_bytes"], LIMIT,
        "{metrics:?}"
    );
    let ws = metrics["lifeguard_memory_working_set_bytes"];
    assert!(
        ws >= (64u64 << 20) as f64 && ws < LIMIT,
        "working set {ws} with 64 MiB held"
    );
    // One 1-second sample against a quota enforced per 100 ms: within 60-130 %.
    let cpu = metrics["lifeguard_cpu_utilization_percent"];
    assert!((60.0..=130.0).contains(&cpu), "utilization {cpu} %");
    assert!(!c.logs().contains("warning: metrics"), "{}", c.logs());
}

#[test]
fn dockers_own_10_second_kill_explains_itself_in_the_log() {
    // An app that ignores SIGTERM, a --grace of 25 s given, and a plain `docker stop`
    // (10 s): Docker kills first (137). The start said so, and the SIGTERM's line states
    // the plan the kill cut short.
    let image = Image::build("docker-kill", &["--grace", "25s"], &["--exit-on", "none"]);
    let c = Container::run(&image);
    let started = c.started();
    assert!(
        started
            .contains("reminder, under Docker: `docker stop` sends SIGKILL 10s after its SIGTERM"),
        "{started}"
    );
    let stop = c.stop_in_background(10);
    assert!(stop.join().unwrap().status.success());
    assert_eq!(c.inspect("{{.State.ExitCode}}"), "137", "{}", c.logs());
    let logs = c.logs();
    // No drain delay under plain Docker: the stop signal went at once, and the line
    // says the deadline that Docker's kill came before.
    assert_eq!(
        plan_at_the_sigterm(&c),
        ("0s".into(), "+25s".into()),
        "{logs}"
    );
    assert!(!logs.contains("grace deadline reached"), "{logs}");
}

#[test]
fn an_image_tuned_for_ecs_starts_under_plain_docker_and_says_the_stop_window_it_needs() {
    // An entry point written for ECS (stopTimeout 30 s): `--drain-delay 20s`, nothing
    // else, run with plain `docker run` on a laptop. The user's 20 s stays, the grace
    // they did not give holds it (30 s), and the start says the container needs a stop
    // window longer than `docker stop`'s 10 s and how to give it one; stopped with that
    // window, the plan runs to the end and the app exits 0.
    let image = Image::build("ecs-tuned", &["--drain-delay", "20s"], &[]);
    let c = Container::run(&image);
    let start = c.started();
    assert!(
        start.contains("defaults for a plain Docker container")
            && start.contains("--grace 30s, to hold the --drain-delay 20s given"),
        "{start}"
    );
    assert!(
        start.contains("reminder, under Docker: `docker stop` sends SIGKILL 10s")
            && start.contains("docker run --stop-timeout 35")
            && start.contains("stop_grace_period: 35s"),
        "{start}"
    );
    assert!(!start.contains("error"), "{start}");
    let stop = c.stop_in_background(35);
    assert_eq!(plan_at_the_sigterm(&c), ("20s".into(), "+30s".into()));
    assert!(stop.join().unwrap().status.success());
    let logs = c.logs();
    assert!(logs.contains("signal TERM"), "{logs}");
    assert_eq!(c.inspect("{{.State.ExitCode}}"), "0", "{logs}");
}

/// The stop plan in the SIGTERM's line: (the drain delay, the SIGKILL's time).
fn plan_at_the_sigterm(c: &Container) -> (String, String) {
    let is_plan =
        |l: &&str| l.contains("lifeguard: draining:") || l.contains("lifeguard: stopping:");
    let logs = wait_until("the SIGTERM's line", || {
        let logs = c.logs();
        logs.lines().any(|l| is_plan(&l)).then_some(logs)
    });
    let plan = logs.lines().find(is_plan).unwrap();
    let field = |key: &str| {
        plan.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {plan}"))
            .to_string()
    };
    (field("delay="), field("sigkill_at="))
}

#[test]
fn under_plain_docker_the_defaults_fit_docker_stop_as_tinis_do() {
    // An app whose shutdown takes 6 s, no flags, `docker stop` with Docker's default
    // 10 s: under tini it exits 0 after ~6 s. lifeguard, seeing Docker (/.dockerenv) and
    // no orchestrator, waits no drain delay and ends its grace at 9 s: the same.
    let image = Image::build("engine-defaults", &[], &["--linger", "6000"]);
    let c = Container::run(&image);
    let start = c.started();
    assert!(
        start.contains("defaults for a plain Docker container")
            && start.contains("--drain-delay 0")
            && start.contains("--grace 9s"),
        "the start does not say which defaults apply:\n{start}"
    );
    assert!(!start.contains("reminder, under Docker"), "{start}");
    let stopped = Instant::now();
    let stop = c.stop_in_background(10);
    assert_eq!(plan_at_the_sigterm(&c), ("0s".into(), "+9s".into()));
    assert!(stop.join().unwrap().status.success());
    let took = stopped.elapsed();
    let logs = c.logs();
    assert_eq!(
        c.inspect("{{.State.ExitCode}}"),
        "0",
        "after {took:?}:\n{logs}"
    );
    assert!(
        logs.contains("exiting"),
        "the app's cleanup was cut:\n{logs}"
    );
    assert!(took < Duration::from_secs(9), "{took:?}\n{logs}");

    // Kubernetes' service variables (a pod on a Docker node): its defaults stand.
    let c = Container::run_with(&image, &["-e", "KUBERNETES_SERVICE_HOST=10.96.0.1"]);
    c.started();
    assert!(!c.logs().contains("defaults for a plain"), "{}", c.logs());
    let _stop = c.stop_in_background(1);
    assert_eq!(plan_at_the_sigterm(&c), ("5s".into(), "+25s".into()));
    // ECS's metadata variable likewise, and a value the user gave by variable stays.
    let c = Container::run_with(
        &image,
        &[
            "-e",
            "ECS_CONTAINER_METADATA_URI_V4=http://169.254.170.2/v4/x",
        ],
    );
    c.started();
    let _stop = c.stop_in_background(1);
    assert_eq!(plan_at_the_sigterm(&c), ("5s".into(), "+25s".into()));
    let c = Container::run_with(&image, &["-e", "LIFEGUARD_DRAIN_DELAY=2s"]);
    c.started();
    let _stop = c.stop_in_background(1);
    assert_eq!(plan_at_the_sigterm(&c), ("2s".into(), "+9s".into()));
}

#[test]
fn docker_kill_signals_reach_the_app() {
    let image = Image::build("kill", &["--drain-delay", "0"], &[]);
    let c = Container::run(&image);
    for signal in ["HUP", "USR1", "USR2", "QUIT", "WINCH"] {
        docker_ok(&["kill", "-s", signal, &c.0]);
        wait_until(&format!("the app to get SIG{signal}"), || {
            c.logs().contains(&format!("signal {signal}")).then_some(())
        });
    }
    let stop = c.stop_in_background(10);
    assert!(stop.join().unwrap().status.success());
    assert_eq!(c.inspect("{{.State.ExitCode}}"), "0", "{}", c.logs());
}

#[test]
fn exit_codes_reach_docker_wait() {
    // An exit code, and a death by signal as 128 + N.
    let image = Image::build("exit3", &[], &["--exit", "3"]);
    let c = Container::run(&image);
    assert_eq!(docker_ok(&["wait", &c.0]), "3");
    // An app with no SIGTERM handler dies of the relayed stop signal: 128 + 15.
    let image = Image::build(
        "killed",
        &["--drain-delay", "0"],
        &["--http", "8080", "--die-on-term"],
    );
    let c = Container::run(&image);
    let stop = c.stop_in_background(10);
    assert!(stop.join().unwrap().status.success());
    assert_eq!(docker_ok(&["wait", &c.0]), "143", "{}", c.logs());
}

#[test]
fn a_shell_form_entrypoint_stops_well_under_dockers_10_seconds() {
    // `ENTRYPOINT /bin/sh -c '...'` as shell-form Dockerfiles produce: under a plain
    // shell as PID 1 the SIGTERM never reaches the app and Docker kills after 10 s.
    let image = Image::build_from(
        "shell-form",
        Recipe {
            shell: true,
            entrypoint: Some(
                [
                    "/lifeguard",
                    "--drain-delay",
                    "1s",
                    "--",
                    "/bin/sh",
                    "-c",
                    "/testapp; true",
                ]
                .map(String::from)
                .to_vec(),
            ),
            ..Default::default()
        },
    );
    let c = Container::run(&image);
    let stopped = Instant::now();
    let stop = c.stop_in_background(10);
    assert!(stop.join().unwrap().status.success());
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "docker stop took {took:?}:\n{}",
        c.logs()
    );
    assert!(c.logs().contains("signal TERM"), "{}", c.logs());
}

#[test]
fn cloudwatch_data_leaves_the_container_and_reaches_the_emulator() {
    // --network host: the emulator listens on the host's 127.0.0.1, which the
    // container shares.
    let emulator = common::cloudwatch::Emulator::start();
    let ns = format!("LifeguardTest/container-{}", std::process::id());
    let endpoint = emulator.url();
    let inflight = free_port().to_string();
    let listen = listen_flag(free_port());
    let image = Image::build_with_env(
        "cloudwatch",
        &[
            ("METRICS_NAMESPACE", &ns),
            ("METRICS_INTERVAL", "1"),
            ("AWS_ENDPOINT_URL_CLOUDWATCH", &endpoint),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDCONTAINER"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
        &[
            "--listen",
            &listen,
            "--inflight-port",
            &inflight,
            "--drain-delay",
            "0",
        ],
        // The app listens on the port: a drain whose port never listened would hold
        // to --drain-max, past `docker stop`'s 10 s.
        &["--http", &inflight],
    );
    let c = Container::run_with(&image, &["--network", "host"]);
    let calls = wait_until("a PutMetricData from inside the container", || {
        let calls = emulator.calls(&ns);
        (!calls.is_empty()).then_some(calls)
    });
    let datum = calls[0]
        .metric("RequestsInFlight")
        .expect("RequestsInFlight");
    assert_eq!(datum["storage_resolution"], 1, "{datum}");
    let stop = c.stop_in_background(10);
    assert!(stop.join().unwrap().status.success());
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ContainerInit {
    Lifeguard,
    /// `docker run --init`: Docker's own tini.
    DockerInit,
}

/// One server of the balancer: a container on the host's network (loopback only).
fn server(image: &Image, init: ContainerInit, dies_on_term: bool) -> (Container, u16, u16) {
    let port = free_port();
    let port_text = port.to_string();
    let mut app = vec!["--http", port_text.as_str()];
    if dies_on_term {
        app.push("--die-on-term");
    }
    match init {
        ContainerInit::Lifeguard => {
            let check = free_port();
            let listen = listen_flag(check);
            let mut args = vec![
                "-v",
                "--listen",
                &listen,
                "--drain-delay",
                "2s",
                "--inflight-port",
                &port_text,
                "--",
                "/testapp",
            ];
            args.extend_from_slice(&app);
            let c = Container::run_args(image, &["--network", "host"], &args);
            (c, port, check)
        }
        ContainerInit::DockerInit => {
            let c = Container::run_args(image, &["--network", "host", "--init"], &app);
            (c, port, port)
        }
    }
}

#[test]
fn no_request_fails_across_docker_stop_behind_haproxy_under_lifeguard_unlike_docker_init() {
    use common::haproxy::{across_a_stop, fetch, Balancer};
    let lifeguard = Image::build_from(
        "lb-lifeguard",
        Recipe {
            entrypoint: Some(vec!["/lifeguard".into()]),
            ..Default::default()
        },
    );
    let bare = Image::build_from(
        "lb-bare",
        Recipe {
            entrypoint: Some(vec!["/testapp".into()]),
            ..Default::default()
        },
    );
    let mut report = Vec::new();
    for dies_on_term in [false, true] {
        for init in [ContainerInit::Lifeguard, ContainerInit::DockerInit] {
            let image = if init == ContainerInit::Lifeguard {
                &lifeguard
            } else {
                &bare
            };
            let (stopped, port, check) = server(image, init, dies_on_term);
            let (kept, kept_port, kept_check) = server(image, init, dies_on_term);
            let check_path = if init == ContainerInit::Lifeguard {
                "/readyz"
            } else {
                "/health"
            };
            let lb = Balancer::start(&[(port, check), (kept_port, kept_check)], check_path);
            wait_until("HAProxy to serve from both containers", || {
                fetch(lb.port, "/").then_some(())?;
                let seen = |c: &Container| c.logs().contains("request /\n");
                (seen(&stopped) && seen(&kept)).then_some(())
            });
            let outcome = across_a_stop(&lb, || {
                wait_until("the long request to reach the stopped container", || {
                    stopped.logs().contains("request /slow/4000").then_some(())
                });
                let _ = stopped.stop_in_background(10).join();
            });
            let app = if dies_on_term {
                "dies on SIGTERM"
            } else {
                "naive"
            };
            report.push(format!(
                "{init:?}, {app} app: {} of {} failed (long request ok: {})",
                outcome.failed, outcome.sent, outcome.long_request_ok
            ));
            if init == ContainerInit::Lifeguard {
                assert_eq!(
                    (outcome.failed, outcome.long_request_ok),
                    (0, true),
                    "{app} app under lifeguard:\n{}",
                    stopped.logs()
                );
                assert!(
                    outcome.sent > 50,
                    "too little traffic to tell: {}",
                    outcome.sent
                );
            } else if dies_on_term {
                // The control: without the drain the long request dies with the app.
                assert!(
                    !outcome.long_request_ok,
                    "the long request survived under --init?"
                );
            }
            drop(lb);
        }
    }
    eprintln!(
        "across one docker stop behind HAProxy:\n  {}",
        report.join("\n  ")
    );
}

#[test]
fn the_scratch_dockerfile_builds_from_the_static_binary_with_a_small_context() {
    // The README's second path, no buildx and no Rust image: scripts/build-static.sh,
    // then examples/docker/Dockerfile.scratch from the project's own layout, with its
    // .dockerignore (target/ out but for the static binaries).
    let bins = static_binaries();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ctx = std::env::temp_dir().join(format!("lifeguard-scratch-{}", std::process::id()));
    let release = ctx.join("target").join(STATIC_TARGET).join("release");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::copy(bins.join("lifeguard"), release.join("lifeguard")).unwrap();
    std::fs::copy(bins.join("lifeguard-testapp"), ctx.join("app")).unwrap();
    std::fs::copy(root.join(".dockerignore"), ctx.join(".dockerignore")).unwrap();
    // What a build leaves in target/: kept out of the context.
    std::fs::write(ctx.join("target").join("junk"), vec![7u8; 64 << 20]).unwrap();
    let tag = format!("lifeguard-test:{}-scratch", std::process::id());
    let out = docker(&[
        "build",
        "-t",
        &tag,
        "-f",
        root.join("examples/docker/Dockerfile.scratch")
            .to_str()
            .unwrap(),
        ctx.to_str().unwrap(),
    ]);
    std::fs::remove_dir_all(&ctx).unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    let image = Image(tag);
    // The legacy builder says how big the context was: the two binaries (about 6 MB),
    // not the 64 MB of junk in target/.
    if let Some(size) = said
        .lines()
        .find_map(|l| l.strip_prefix("Sending build context to Docker daemon"))
    {
        let size = size.trim();
        let megabytes: f64 = match size.strip_suffix("MB") {
            Some(n) => n.trim().parse().unwrap(),
            None if size.ends_with("kB") => 0.0,
            None => panic!("context: {size}"),
        };
        assert!(megabytes < 32.0, "context: {size}");
    }
    // The app on the Dockerfile's --inflight-port: ready once it listens there.
    let container = Container::run_args(&image, &[], &["--http", "8080"]);
    // Not root, as the restricted Pod Security profile admits: the image's USER.
    assert_eq!(container.inspect("{{.Config.User}}"), "65534");
    // Its HEALTHCHECK is lifeguard's own probe, every 5 s.
    wait_until("docker to call the container healthy", || {
        (container.inspect("{{.State.Health.Status}}") == "healthy").then_some(())
    });
    let stopped = Instant::now();
    docker_ok(&["stop", "-t", "30", &container.0]);
    // The drain delay of the Dockerfile (5 s), then the app's own exit on SIGTERM.
    assert!(
        stopped.elapsed() >= Duration::from_secs(5),
        "stopped after {:?}, before the drain delay",
        stopped.elapsed()
    );
    assert_eq!(
        container.inspect("{{.State.ExitCode}}"),
        "0",
        "{}",
        container.logs()
    );
}

#[test]
fn the_kubernetes_restricted_profile_keeps_every_figure_and_pid_1_alone() {
    // Non-root, read-only root, no capabilities, no new privileges: what Kubernetes'
    // restricted Pod Security profile allows. lifeguard forks its helper, which reads
    // the cgroup, /proc and sock_diag as that user.
    let image = Image::build(
        "restricted",
        &["--drain-delay", "0", "--inflight-port", "8080"],
        &["--http", "8080"],
    );
    let c = Container::run_with(
        &image,
        &[
            "--user",
            "65534:65534",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
        ],
    );
    let wanted = [
        "lifeguard_ready",
        "lifeguard_cpu_usage_seconds_total",
        "lifeguard_memory_working_set_bytes",
        "lifeguard_requests_in_flight",
        "lifeguard_accept_queue_length",
        "lifeguard_listen_backlog",
        "lifeguard_app_processes",
        "lifeguard_app_threads",
        "lifeguard_app_open_fds",
        "lifeguard_app_max_fds",
        "lifeguard_app_resident_memory_bytes",
        "lifeguard_helper_restarts_total",
    ];
    let metrics = wait_until("every figure on /metrics", || {
        let (code, answer) = c.probe_url(Some("http://127.0.0.1:9595/metrics"));
        let m = gauges(answer.strip_prefix("200 ")?);
        (code == 0 && wanted.iter().all(|k| m.contains_key(*k))).then_some(m)
    });
    assert_eq!(metrics["lifeguard_ready"], 1.0, "{}", c.logs());
    // The app alone: the helper is neither a process nor threads of the app's.
    assert_eq!(metrics["lifeguard_app_processes"], 1.0, "{metrics:?}");
    assert_eq!(metrics["lifeguard_helper_restarts_total"], 0.0);
    // PID 1 is one thread; the helper runs beside it under its own name.
    let top = docker_ok(&["top", &c.0, "-o", "pid,nlwp,comm"]);
    let rows: Vec<Vec<&str>> = top
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let lifeguard = rows
        .iter()
        .find(|r| r.get(2) == Some(&"lifeguard"))
        .unwrap_or_else(|| panic!("no lifeguard in\n{top}"));
    assert_eq!(lifeguard[1], "1", "PID 1's threads\n{top}");
    assert!(
        rows.iter().any(|r| r.get(2) == Some(&"lifeguard-helpe")),
        "no helper process in\n{top}"
    );
    assert!(!c.logs().contains("warning"), "{}", c.logs());
}

/// examples/docker/Dockerfile.mirror, built as its header says (the slim build in its
/// place under target/, the project root as the context).
fn mirror_image() -> Image {
    slim_binaries();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tag = format!("lifeguard-test:{}-mirror", std::process::id());
    let dockerfile = root.join("examples/docker/Dockerfile.mirror");
    docker_ok(&[
        "build",
        "-q",
        "-f",
        dockerfile.to_str().unwrap(),
        "-t",
        &tag,
        root.to_str().unwrap(),
    ]);
    Image(tag)
}

/// The mirror's /readyz, asked from inside its container by `lifeguard --probe`, which
/// in the mirror's image asks the mirror's own port: (exit code, `STATUS BODY`).
fn mirror_says(mirror: &Container) -> (i32, String) {
    mirror.probe()
}

#[test]
fn the_mirror_image_beside_the_app_container_follows_its_ready_port_unprivileged() {
    let app_image = Image::build(
        "mirror-app",
        &[
            "--ready-port",
            "9596",
            "--drain-delay",
            "3s",
            "--grace",
            "8s",
        ],
        &[],
    );
    let mirror_image = mirror_image();
    let app = Container::run(&app_image);
    let network = format!("container:{}", app.0);
    // The restricted profile: no root, a read-only root, no capability; its info lines
    // (LIFEGUARD_VERBOSE=2) say when it starts.
    let restricted = [
        "--network",
        &network,
        "--user",
        "65534",
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "-e",
        "LIFEGUARD_VERBOSE=2",
    ];
    let mirror = Container::run_with(&mirror_image, &restricted);
    wait_until("the mirror to answer 200 ready", || {
        (mirror_says(&mirror) == (0, "200 ready".into())).then_some(())
    });
    // A sandbox that refuses netlink sockets (seccomp, as some do): 503 with the
    // reason, never 200, and said in the log.
    let profile =
        std::env::temp_dir().join(format!("lifeguard-no-netlink-{}.json", std::process::id()));
    std::fs::write(
        &profile,
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["socket"],"action":"SCMP_ACT_ERRNO","errnoRet":1,"args":[{"index":0,"value":16,"op":"SCMP_CMP_EQ"}]}]}"#,
    )
    .unwrap();
    let seccomp = format!("seccomp={}", profile.display());
    let mut sandboxed_options = restricted.to_vec();
    sandboxed_options.extend(["--security-opt", seccomp.as_str()]);
    let sandboxed = Container::run_args(&mirror_image, &sandboxed_options, &["--listen", ":9598"]);
    let (code, said) = sandboxed.probe_url(Some("http://127.0.0.1:9598/readyz"));
    assert_eq!(code, 1, "{said}");
    assert!(
        said.starts_with("503 not ready: cannot read the socket table"),
        "{said}"
    );
    assert!(
        sandboxed.logs().contains("a sandbox that refuses netlink"),
        "{}",
        sandboxed.logs()
    );
    let _ = std::fs::remove_file(&profile);
    // SIGTERM to the app's container: its lifeguard closes the ready port at once and
    // drains for 3 s; the mirror answers 503 meanwhile.
    docker_ok(&["kill", "--signal", "TERM", &app.0]);
    wait_until("the mirror to answer 503", || {
        let (code, said) = mirror_says(&mirror);
        (code == 1 && said == "503 not ready: nothing listens on port 9596").then_some(())
    });
    assert_eq!(
        app.inspect("{{.State.Running}}"),
        "true",
        "the app drains on"
    );
    // `docker stop` of the mirror: exit 0, at once.
    let started = Instant::now();
    docker_ok(&["stop", "-t", "10", &mirror.0]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        mirror.inspect("{{.State.ExitCode}}"),
        "0",
        "{}",
        mirror.logs()
    );
}
