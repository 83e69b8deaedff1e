//! lifeguard as the ENTRYPOINT of a real container: a `FROM scratch` image holding only
//! the static (musl) lifeguard and the static testapp, run by the local Docker engine with
//! no network. `docker stop` must drain, relay, and end with the app's status; the image's
//! HEALTHCHECK is `lifeguard --probe`, since a scratch image has no curl.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

const TARGET: &str = "x86_64-unknown-linux-musl";

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

/// Builds the static binaries in a target directory of their own (the one `cargo test`
/// holds is locked while tests run).
fn static_binaries() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target_dir = root.join("target").join("container");
    let status = Command::new(env!("CARGO"))
        .current_dir(root)
        .args([
            "build",
            "--release",
            "--target",
            TARGET,
            "--bin",
            "lifeguard",
            "--bin",
            "lifeguard-testapp",
        ])
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("cannot run cargo");
    assert!(
        status.success(),
        "THIS TEST CANNOT RUN: the static build failed (rustup target add {TARGET})"
    );
    target_dir.join(TARGET).join("release")
}

/// A scratch image with lifeguard as ENTRYPOINT running the testapp with `app_args`.
struct Image(String);

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
        let mut entry = vec!["/lifeguard"];
        entry.extend_from_slice(lifeguard_flags);
        entry.push("--");
        entry.push("/testapp");
        entry.extend_from_slice(app_args);
        let quoted: Vec<String> = entry.iter().map(|a| format!("\"{a}\"")).collect();
        let env: String = env
            .iter()
            .map(|(name, value)| format!("ENV {name}=\"{value}\"\n"))
            .collect();
        std::fs::write(
            dir.join("Dockerfile"),
            format!(
                "FROM scratch\nCOPY lifeguard /lifeguard\nCOPY testapp /testapp\n{env}\
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
        let mut argv = vec!["run", "-d", "--network", "none"];
        argv.extend_from_slice(options);
        argv.push(&image.0);
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
