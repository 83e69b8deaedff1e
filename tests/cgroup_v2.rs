//! cgroup v2 on the real kernel, on a machine whose controllers are all
//! bound to v1: a cgroup2 hierarchy can still be mounted beside them, in a mount
//! namespace of the test's own, and it keeps the core accounting every v2 cgroup has
//! (`cpu.stat`'s usage_usec) but no controller (`cgroup.controllers` is empty: the
//! kernel binds each controller to one hierarchy, and v1 holds them all). lifeguard is
//! started in such a namespace with cgroup2 mounted at /sys/fs/cgroup, v1 hidden, in a
//! cgroup of its own: a pure v2 layout, as on EKS/AL2023, GKE or Fargate 1.4. What the
//! kernel here can show live — discovery and CPU usage from v2 files — is checked
//! against the kernel's own figures; the v2 limit and memory files need controllers
//! this machine cannot give v2, and stay tested on recorded trees (tests/fixtures/cgroup).
mod common;

use std::process::Command;

use common::*;

/// Runs `script` with `sh` in a new mount namespace (private propagation), as root.
fn in_mount_namespace(script: &str) -> std::process::Output {
    require_root();
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .output()
        .expect("THIS TEST CANNOT RUN: no unshare")
}

#[test]
fn on_a_live_cgroup2_hierarchy_lifeguard_reads_the_apps_cpu_from_v2_files() {
    // The v2 hierarchy is one for the whole machine, whoever mounts it: a cgroup of the
    // test's own in it, removed at the end.
    let name = format!("lifeguard-test-{}", std::process::id());
    let probe = in_mount_namespace(
        "mkdir -p /tmp/lg-cg2-probe && mount -t cgroup2 none /tmp/lg-cg2-probe \
         && cat /tmp/lg-cg2-probe/cgroup.controllers",
    );
    assert!(
        probe.status.success(),
        "THIS TEST CANNOT RUN: the kernel refuses a cgroup2 mount: {}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let controllers = String::from_utf8_lossy(&probe.stdout).trim().to_string();
    let port = free_port();
    let listen = listen_flag(port);
    // cgroup2 at /sys/fs/cgroup (the v1 mounts unmounted in the namespace), the shell moved
    // into a cgroup of its own, then lifeguard exec'd in its place, burning app below.
    let script = format!(
        "umount -R /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup \
         && mkdir /sys/fs/cgroup/{name} && echo $$ > /sys/fs/cgroup/{name}/cgroup.procs \
         && exec {lifeguard} -v --listen {listen} -- {TESTAPP} --burn",
        lifeguard = lifeguard_shell(),
    );
    let mut run = start_program(
        &["unshare".into()],
        Mode::Subreaper,
        &["--mount", "--propagation", "private", "sh", "-c", &script],
        |_| {},
    );
    run.ready();
    // lifeguard found the v2 layout and its cgroup.
    let said = run.expect_log("metrics: sampling");
    assert!(
        said.contains(&format!("v2 /sys/fs/cgroup/{name}")),
        "{said}"
    );
    // CPU usage from the v2 cpu.stat: the app burns a core, so the counter grows by
    // about a second a second, and agrees with the kernel's own usage_usec.
    let cpu_stat = format!("/proc/{}/root/sys/fs/cgroup/{name}/cpu.stat", run.pid);
    let usage = || -> Option<f64> {
        let text = std::fs::read_to_string(&cpu_stat).ok()?;
        let usec: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))?
            .parse()
            .ok()?;
        Some(usec / 1e6)
    };
    let first = wait_until("a CPU usage figure", || {
        scrape(port)
            .get("lifeguard_cpu_usage_seconds_total")
            .copied()
    });
    let kernel_first = usage().expect("the cgroup's cpu.stat");
    let later = wait_until("a second of CPU more", || {
        scrape(port)
            .get("lifeguard_cpu_usage_seconds_total")
            .copied()
            .filter(|t| *t >= first + 1.0)
    });
    let kernel_later = usage().unwrap();
    assert!(
        later <= kernel_later + 0.01 && later >= kernel_first,
        "lifeguard {first} → {later} s, the kernel {kernel_first} → {kernel_later} s"
    );
    let m = scrape(port);
    let utilization = m.get("lifeguard_cpu_utilization_percent").copied();
    assert!(
        utilization.is_some_and(|u| u > 20.0),
        "the burning app's utilization: {utilization:?}"
    );
    // No v2 memory controller on this machine (it is v1's): the working set is left
    // out, never reported as 0 (the limit falls back to MemTotal, as with no limit).
    if !controllers.split_whitespace().any(|c| c == "memory") {
        assert!(
            !m.contains_key("lifeguard_memory_working_set_bytes"),
            "{m:?}"
        );
    }
    run.signal(libc::SIGINT);
    let _ = run.wait_exit();
    // Empty now (lifeguard reaped everything before it exited): the cgroup can go.
    let gone = in_mount_namespace(&format!(
        "mkdir -p /tmp/lg-cg2-probe && mount -t cgroup2 none /tmp/lg-cg2-probe \
         && rmdir /tmp/lg-cg2-probe/{name}"
    ));
    assert!(
        gone.status.success(),
        "could not remove the test's cgroup {name}: {}",
        String::from_utf8_lossy(&gone.stderr)
    );
}
