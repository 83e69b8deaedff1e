//! The scaling benchmark's smoke test: runs the real command, `bench/scaling/run.sh
//! --smoke --scenario S` (scaled down: 1 to 3 replicas, 15 s cooldowns; about 3 minutes
//! a scenario), against the shipped build of lifeguard, and checks that its decisions
//! came in the expected order, that each replica's drain ended once the balancer stopped
//! sending, and that what it writes exists and makes sense, so the benchmark cannot rot.
//! One test a scenario, so the two run side by side: their fleets have network
//! namespaces, cgroups and ports of their own (named by scenario and process).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The whole command: the benchmark's virtualenv (pip, the first time), the scenario
/// (under 4 minutes), the reports. Generous for a loaded CI machine.
const RUN_LIMIT: Duration = Duration::from_secs(20 * 60);

fn seconds(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is missing from summary.json: {v}"))
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(
        bytes.len() > 24 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR",
        "scaling.png is not a PNG"
    );
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// Runs the smoke version of one scenario; returns its output directory. The command's
/// own lines are echoed as they come (they say what the autoscaler decided and when).
fn run_smoke(lifeguard: &Path, scenario: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!(
        "lifeguard-scaling-smoke-{scenario}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&out);
    let mut child = Command::new(root.join("bench/scaling/run.sh"))
        .arg("--smoke")
        .args(["--scenario", scenario])
        .arg("--lifeguard")
        .arg(lifeguard)
        .arg("--out")
        .arg(&out)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("THIS TEST CANNOT RUN: cannot start bench/scaling/run.sh");
    let (tx, rx) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let deadline = Instant::now() + RUN_LIMIT;
    let mut lines = Vec::new();
    // Both streams closed: the command is over (or has lost its output, which the exit
    // status then says).
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                eprintln!("scaling: {line}");
                lines.push(line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // SIGINT first: run.py's cleanup stops the replicas, HAProxy, the
                // emulator and removes its cgroups; then the hard way.
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
                let _ = rx.recv_timeout(Duration::from_secs(60));
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "bench/scaling/run.sh --smoke did not finish within {RUN_LIMIT:?}; its last lines:\n{}",
                    lines[lines.len().saturating_sub(30)..].join("\n")
                );
            }
        }
    }
    let status = child.wait().unwrap();
    if status.code() == Some(2) {
        panic!(
            "THIS TEST CANNOT RUN: bench/scaling/run.sh said it cannot run:\n{}",
            lines.join("\n")
        );
    }
    assert!(
        status.success(),
        "bench/scaling/run.sh --smoke failed ({status}); its last lines:\n{}",
        lines[lines.len().saturating_sub(40)..].join("\n")
    );
    out
}

/// The benchmark's smoke run of `scenario`, against the shipped build; its output
/// directory. The index above the scenario's folder must link it.
fn smoke(scenario: &str) -> Option<PathBuf> {
    common::require_root();
    if common::skipped_under_emulation(
        "the benchmark runs lifeguard as it ships, natively (in-flight counting needs sock_diag)",
    ) {
        return None;
    }
    for tool in ["haproxy", "unshare", "nsenter", "ip", "python3"] {
        common::haproxy::installed(tool);
    }
    let lifeguard = common::static_binaries().join("lifeguard");
    let out = run_smoke(&lifeguard, scenario);
    let index = std::fs::read_to_string(out.join("results.md")).unwrap();
    let link = format!("({scenario}/results.md)");
    assert!(index.contains(&link), "results.md has no {link}:\n{index}");
    eprintln!("{index}");
    Some(out)
}

#[test]
fn the_scaling_benchmark_scales_a_cpu_bound_app_out_on_lifeguards_data_first_and_back_in_without_failures(
) {
    let Some(out) = smoke("cpu") else { return };
    let cpu = check_scenario(&out.join("cpu"));
    // The CPU-bound app: every model decides, lifeguard's 10 s data first (its CPU
    // datapoints are never later than the 20 s ones, and the in-flight ones can only be
    // earlier), the 1-minute data three minutes late last.
    let models = &cpu["models"];
    let replayed = seconds(&models["lifeguard"]["alarm"], "models.lifeguard.alarm");
    let cpu20 = seconds(&models["cpu20"]["alarm"], "models.cpu20.alarm");
    let late60 = seconds(&models["late60"]["alarm"], "models.late60.alarm");
    assert!(
        replayed <= cpu20 && cpu20 < late60,
        "models out of order: lifeguard {replayed}, 20 s CPU {cpu20}, 1 min late {late60}"
    );
    assert!(
        late60 >= 180.0,
        "the 1-minute model decided {late60} s after the step, before its lag"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_scaling_benchmark_scales_a_worker_bound_app_out_on_in_flight_alone_and_back_in_without_failures(
) {
    let Some(out) = smoke("worker") else { return };
    let worker = check_scenario(&out.join("worker"));
    // The worker-bound app: its CPU stays under the CPU alarms' threshold, so neither
    // CPU model ever decides, while lifeguard's in-flight alarm does.
    let models = &worker["models"];
    for key in ["cpu20", "cpu60"] {
        assert!(
            models[key]["alarm"].is_null(),
            "the {key} model decided on a worker-bound app: {}",
            models[key]
        );
    }
    let cpu_max = seconds(
        &worker["held_cpu_p50_max_during_step"],
        "held_cpu_p50_max_during_step",
    );
    let threshold = seconds(&worker["config"]["cpu_threshold"], "config.cpu_threshold");
    assert!(
        cpu_max < threshold,
        "the worker-bound app's CPU p50 reached {cpu_max} %"
    );
    assert!(
        worker["live"]["alarm_name"]
            .as_str()
            .is_some_and(|a| a.starts_with("InFlight")),
        "{}",
        worker["live"]
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// What every scenario must show: the live fleet scaled out on lifeguard's data soon
/// after the step, came back in after it without losing a request, each drain ending
/// once the balancer stopped sending; and its files. Returns its summary.
fn check_scenario(out: &Path) -> Value {
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let scenario = summary["config"]["scenario"].as_str().unwrap().to_string();
    assert_eq!(summary["mode"], "smoke", "{summary}");
    assert_eq!(
        summary["problems"].as_array().map(Vec::len),
        Some(0),
        "{scenario}: {}",
        summary["problems"]
    );
    let live = &summary["live"];
    let models = &summary["models"];
    let step_len = seconds(&summary["config"]["step_len"], "config.step_len");

    // The real fleet, live: the step, then a datum above the threshold at the emulator,
    // the alarm, the first new replica ready, in that order and within a few periods.
    let first_datum = seconds(&live["first_datum"], "live.first_datum");
    let alarm = seconds(&live["alarm"], "live.alarm");
    let ready = seconds(
        &live["first_new_replica_ready"],
        "live.first_new_replica_ready",
    );
    assert!(
        0.0 <= first_datum && first_datum <= alarm && alarm <= ready,
        "{scenario}: out of order: datum {first_datum}, alarm {alarm}, ready {ready}"
    );
    assert!(
        alarm <= 45.0,
        "{scenario}: lifeguard's alarm came {alarm} s after the step: more than four 10 s periods"
    );
    assert!(
        live["scale_out_to"].as_u64() > summary["config"]["min"].as_u64(),
        "{live}"
    );
    let replayed = seconds(&models["lifeguard"]["alarm"], "models.lifeguard.alarm");
    assert!(
        replayed <= 45.0,
        "{scenario}: replayed lifeguard {replayed}"
    );

    // Back in, after the load: every scale-in after the step ended, each drain clean
    // and ended by the quiet rule well before --drain-max (each replica has a network
    // namespace of its own), and nothing failed while a replica drained.
    let scale_ins = live["scale_ins"].as_array().unwrap();
    assert!(!scale_ins.is_empty(), "{scenario}: no scale-in: {live}");
    for s in scale_ins {
        let at = seconds(&s[0], "a scale-in's time");
        assert!(
            at >= step_len,
            "{scenario}: a scale-in at {at} s, during the {step_len} s step (flapping): {live}"
        );
    }
    let drains = live["drains"].as_array().unwrap();
    assert_eq!(drains.len(), scale_ins.len(), "{live}");
    let goal = seconds(&live["drain_goal_s"], "live.drain_goal_s");
    for d in drains {
        assert_eq!(d[2], 0, "{scenario}: a drained replica's exit: {d}");
        let took = seconds(&d[1], "a drain's length");
        assert!(
            took <= goal,
            "{scenario}: a drain took {took} s, more than {goal} s: {d}"
        );
        assert!(
            d[3].as_str()
                .is_some_and(|l| l.contains("the port is quiet")),
            "{scenario}: a drain not ended by the quiet rule: {d}"
        );
    }
    assert!(live["settled"].is_number(), "{live}");
    let requests = &summary["requests"];
    assert_eq!(
        requests["during_drains"]["failed"], 0,
        "{scenario}: requests failed while replicas drained: {requests}"
    );
    let sent = seconds(&requests["real"]["sent"], "requests.real.sent");
    assert!(
        sent >= 500.0,
        "{scenario}: only {sent} requests through the real fleet"
    );
    if scenario == "cpu" {
        // Callers who wait 10 s: nothing fails on a fleet that scales.
        let failed = seconds(&requests["real"]["failed"], "requests.real.failed");
        assert!(
            failed <= sent / 100.0,
            "{failed} of {sent} requests failed on the real fleet: {requests}"
        );
    } else {
        // Callers who give up after 3 s: the fleet that scales loses fewer than the one
        // that does not.
        let (real, held) = (
            seconds(
                &requests["real_step"]["failed"],
                "requests.real_step.failed",
            ),
            seconds(
                &requests["held_step"]["failed"],
                "requests.held_step.failed",
            ),
        );
        assert!(
            real < held || held == 0.0,
            "{scenario}: the scaled fleet failed {real} during the step, the held one {held}"
        );
    }

    // The files a person looks at.
    let md = std::fs::read_to_string(out.join("results.md")).unwrap();
    assert!(
        md.contains("SMOKE TEST"),
        "results.md does not say it is the smoke test"
    );
    assert!(
        md.contains("| **lifeguard**, live"),
        "results.md has no table:\n{md}"
    );
    let png = std::fs::read(out.join("scaling.png")).unwrap();
    let (w, h) = png_size(&png);
    assert!(
        w >= 800 && h >= 800 && png.len() > 30_000,
        "scaling.png is {w}x{h}, {} bytes",
        png.len()
    );
    let events = std::fs::read_to_string(out.join("events.jsonl")).unwrap();
    for line in events.lines() {
        let e: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(e["t"].is_number() && e["kind"].is_string(), "{line}");
    }
    let rows = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    assert!(rows.starts_with("target,start,latency,status\n"));
    let recorded = rows.lines().count() - 1;
    assert!(
        recorded as f64 >= sent,
        "requests.csv has {recorded} rows, the summary counts {sent}"
    );
    eprintln!("{md}");
    summary
}
