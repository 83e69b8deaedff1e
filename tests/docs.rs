//! The docs keep step with the binary and the examples: every flag `--help` shows is in
//! the man page and the reference, every metric family the binary emits is in the
//! metrics reference, every snippet the docs quote from a file they name is in that
//! file, and no doc sends the reader to something the repository does not have.
mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The long flags `--help` lists (`--name` at the start of an option line).
fn help_flags() -> Vec<String> {
    let out = lifeguard().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    // An option line: `  -v, --verbose ...` or `      --drain-delay <DUR> ...`.
    let flags: Vec<String> = help
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .filter_map(|l| {
            let token = l.split_whitespace().take(2).find(|t| t.starts_with("--"))?;
            let name: String = token[2..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty()).then(|| format!("--{name}"))
        })
        .collect();
    assert!(flags.len() > 20, "too few flags read from --help:\n{help}");
    flags
}

#[test]
fn every_flag_of_help_is_in_the_man_page_and_the_reference() {
    // The man page writes dashes as \-.
    let man = read("man/lifeguard.1").replace("\\-", "-");
    let reference = read("docs/reference.md");
    let mut missing = Vec::new();
    for flag in help_flags() {
        if !man.contains(&flag) {
            missing.push(format!("{flag} not in man/lifeguard.1"));
        }
        if !reference.contains(&format!("`{flag}")) {
            missing.push(format!("{flag} not in docs/reference.md"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn every_metric_family_the_binary_emits_is_in_the_metrics_reference() {
    require_root();
    // Everything on: the endpoint, the in-flight port, CloudWatch (whose calls fail
    // against a closed local port, which only costs the data).
    let port = free_port();
    let app_port = free_port();
    let run = start_with(
        Mode::Pid1,
        &args(
            &[
                "--listen",
                &listen_flag(port),
                "--inflight-port",
                &app_port.to_string(),
            ],
            &["--http", &app_port.to_string()],
        ),
        |cmd| {
            cmd.env("METRICS_NAMESPACE", "Test/docs")
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
                .env("AWS_SECRET_ACCESS_KEY", "secret")
                .env(
                    "AWS_ENDPOINT_URL_CLOUDWATCH",
                    format!("http://127.0.0.1:{}", free_port()),
                );
        },
    );
    run.ready();
    let families = wait_until("a sample on /metrics", || {
        let (status, body) = request(port, "GET", "/metrics").ok()?;
        (status == 200 && body.contains("lifeguard_requests_in_flight ")).then_some(body)
    });
    let names: Vec<&str> = families
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_whitespace().next())
        .collect();
    assert!(names.len() > 25, "{families}");
    let reference = read("docs/metrics.md");
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| !reference.contains(&format!("`{n}")))
        .collect();
    assert!(missing.is_empty(), "not in docs/metrics.md: {missing:?}");
}

/// Every file a doc names as a path of the repository exists.
#[test]
fn every_file_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    for doc in docs() {
        let text = read(&doc);
        for word in text.split(|c: char| c == '`' || c == '(' || c == ')' || c.is_whitespace()) {
            let path = word.split('#').next().unwrap_or(word);
            let path = path
                .trim_end_matches(['.', ',', ':', ';'])
                .trim_start_matches("../");
            let named = [
                "examples/",
                "docs/",
                "scripts/",
                "bench/",
                "tests/",
                "man/",
                "src/",
            ]
            .iter()
            .any(|p| path.starts_with(p));
            if !named
                || path.contains('*')
                || path.contains('<')
                || path.ends_with('/') && path.len() < 6
            {
                continue;
            }
            // A path with an argument (`scripts/build-static.sh x86_64`) names the file.
            if !root.join(path).exists() {
                missing.push(format!("{doc}: {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

fn docs() -> Vec<String> {
    let mut docs = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if name.ends_with(".md") {
            docs.push(format!("docs/{name}"));
        }
    }
    docs
}

/// A snippet the docs quote right after naming an example file (`examples/...` in the
/// paragraph before it) holds only lines of that file: a quote that drifted from its
/// file tells the reader something the file does not do.
#[test]
fn every_snippet_quoted_from_a_file_is_in_that_file() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for doc in docs() {
        let text = read(&doc);
        let blocks: Vec<&str> = text.split("```").collect();
        // Odd entries are the fenced blocks; the even one before each is its lead-in.
        for i in (1..blocks.len()).step_by(2) {
            let (lead, block) = (blocks[i - 1].trim_end(), blocks[i]);
            let paragraph = lead.rsplit("\n\n").next().unwrap_or(lead);
            let Some(file) = paragraph.split('`').find(|w| {
                (w.starts_with("examples/") || *w == "Dockerfile.example") && !w.ends_with('/')
            }) else {
                continue;
            };
            let source = read(file);
            let lines: Vec<&str> = source.lines().map(str::trim).collect();
            for line in block.lines().skip(1).map(str::trim) {
                if line.is_empty() || line.starts_with('#') || line.starts_with("//") {
                    continue;
                }
                if !lines.iter().any(|l| *l == line || l.contains(line)) {
                    wrong.push(format!("{doc}: {line:?} is not in {file}"));
                }
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 1,
        "no quoted snippet found: the check reads nothing"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_doc_names_a_module_the_reader_cannot_find() {
    for doc in docs() {
        let text = read(&doc).to_lowercase();
        assert!(
            !text.contains("scaling module"),
            "{doc} names \"the scaling module\", which this repository does not have"
        );
    }
}

#[test]
fn the_help_fits_in_100_columns() {
    let out = lifeguard()
        .arg("--help")
        .env("COLUMNS", "200")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let wide: Vec<&str> = help.lines().filter(|l| l.chars().count() > 100).collect();
    assert!(
        wide.is_empty(),
        "{} lines wider than 100:\n{}",
        wide.len(),
        wide.join("\n")
    );
}

/// The documents a reader reads for how to run lifeguard.
const PROSE: [&str; 5] = [
    "README.md",
    "ARCHITECTURE.md",
    "SECURITY.md",
    "man/lifeguard.1",
    "docs",
];

/// (path, text) of every document in `PROSE` (the folder's markdown files).
fn prose() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for entry in PROSE {
        let path = root.join(entry);
        if path.is_dir() {
            for file in std::fs::read_dir(&path).unwrap() {
                let file = file.unwrap().path();
                if file.extension().is_some_and(|e| e == "md") {
                    let name = file.strip_prefix(root).unwrap().display().to_string();
                    out.push((name.clone(), read(&name)));
                }
            }
        } else {
            out.push((entry.to_string(), read(entry)));
        }
    }
    out
}

/// The kind of a Kubernetes probe the example's Deployment uses (`tcpSocket`,
/// `httpGet`, ...): the first key under `name:` in its YAML.
fn example_probe_kind(name: &str) -> String {
    let deployment = read("examples/kubernetes/deployment.yaml");
    let mut lines = deployment
        .lines()
        .skip_while(|l| l.trim() != format!("{name}:"));
    lines
        .next()
        .unwrap_or_else(|| panic!("no {name} in the example"));
    let kind = lines.next().unwrap().trim();
    kind.split(':').next().unwrap().to_string()
}

#[test]
fn probe_examples_and_the_process_model_agree_with_the_examples() {
    // A probe a doc shows is the kind the Kubernetes example uses (liveness and
    // readiness both answered by the kernel); and no doc puts the endpoint or
    // supervision on "a thread of its own" without the process it lives in (the
    // endpoint runs in the helper process, supervision alone in PID 1).
    const KINDS: [&str; 4] = ["tcpSocket", "httpGet", "exec", "grpc"];
    let mut wrong = Vec::new();
    for (probe, key) in [
        ("livenessProbe", "livenessProbe"),
        ("readinessProbe", "readinessProbe"),
    ] {
        let want = example_probe_kind(key);
        for (file, text) in prose() {
            let text = text.replace("\\-", "-");
            for (n, line) in text.lines().enumerate() {
                if !line.contains(probe) {
                    continue;
                }
                if let Some(kind) = KINDS.iter().find(|k| line.contains(*k)) {
                    if *kind != want {
                        wrong.push(format!(
                            "{file}:{}: {probe} by {kind}, the example's is {want}: {line}",
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    for (file, text) in prose() {
        for paragraph in text.split("\n\n") {
            let flat = paragraph.replace('\n', " ");
            let lower = flat.to_lowercase();
            let claims = lower.contains("thread of its own")
                && (lower.contains("endpoint") || lower.contains("supervision"));
            if claims && !lower.contains("process") {
                wrong.push(format!(
                    "{file}: a thread of its own, no process named: {}",
                    flat.trim()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The rules of where users run it, said where a reader looks, and the old ones gone:
/// the default endpoint is dual-stack, a drain that cannot see holds (late is not
/// quiet), the ready port is lifeguard's alone. A doc that still promised the old rule
/// ("a broken gauge never holds a stop", the endpoint on `0.0.0.0:9595`) would tell an
/// IPv6-only pod's owner or a saturated service's that it works as it did in 0.2.0.
#[test]
fn the_environment_rules_are_said_and_the_old_ones_are_gone() {
    let man = read("man/lifeguard.1");
    let mut everywhere: Vec<(String, String)> = prose();
    everywhere.push(("man/lifeguard.1".into(), man.clone()));
    everywhere.push(("SECURITY.md".into(), read("SECURITY.md")));
    for (name, text) in &everywhere {
        let flat = text.replace('\n', " ");
        for stale in [
            "broken gauge never holds",
            "cannot be read count as quiet",
            "helper never holds a stop",
            "listens on `0.0.0.0:9595`",
            "Default \\fB0.0.0.0:9595\\fR",
            "for every IPv4 address",
        ] {
            assert!(!flat.contains(stale), "{name} still says {stale:?}");
        }
    }
    let flat = man.replace('\n', " ");
    for said in [
        "Default \\fB[::]:9595\\fR",
        "Late is not quiet",
        "LIFEGUARD_READY_PORT",
        "tried again every second",
    ] {
        assert!(flat.contains(said), "the man page does not say {said:?}");
    }
    let help = lifeguard().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).replace('\n', " ");
    assert!(help.contains("[::]:9595"), "--help's default for --listen");
}

/// What a review of 0.2.0 found saying more (or other) than the binary does, each held
/// here so it cannot come back unnoticed.
#[test]
fn what_the_pilot_review_found_stays_fixed() {
    let man = read("man/lifeguard.1").replace('\n', " ");
    let help = lifeguard().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).replace('\n', " ");
    // `cargo run` puts build.rs's rustc-env facts in the app's environment: none may be
    // a LIFEGUARD_* name, which lifeguard would warn about as unknown.
    assert!(!read("build.rs").contains("rustc-env=LIFEGUARD_"));
    // Every LIFEGUARD_* twin --help names is in the man page's ENVIRONMENT section.
    let environment = man
        .split(".SH ENVIRONMENT")
        .nth(1)
        .expect("an ENVIRONMENT section");
    let out = lifeguard().arg("--help").output().unwrap();
    let twins: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("LIFEGUARD_") && w.len() > "LIFEGUARD_".len())
        .map(String::from)
        .collect();
    assert!(twins.len() > 10, "{twins:?}");
    for twin in twins {
        assert!(
            environment.contains(&twin),
            "the man page's ENVIRONMENT lacks {twin}"
        );
    }
    // The log levels and DUMB_INIT_DEBUG's false values read the same everywhere.
    let migrating = read("docs/migrating.md").replace('\n', " ");
    assert!(help.contains("-vvv trace") && man.contains("\\fB\\-vvv\\fR trace"));
    assert!(migrating.contains("`-vvv` trace"));
    // Each false form as a word of its own in each page's markup (a bare "0" or "no"
    // is in almost any text).
    let marked = [(&man, "\\fB", "\\fR"), (&migrating, "`", "`")];
    for (text, open, close) in marked {
        let mark = |form: &str| format!("{open}{form}{close}");
        let at = text.find("DUMB_INIT_DEBUG").unwrap();
        let around = &text[at..(at + 300).min(text.len())];
        for form in ["0", "false", "no", "off"] {
            assert!(
                around.contains(&mark(form)),
                "DUMB_INIT_DEBUG's false value {form} is not named: {around}"
            );
        }
    }
    // METRICS_INTERVAL: what the binary takes (1 to 86400, fractions too).
    assert!(
        man.contains("from 1 to 86400"),
        "the man page's METRICS_INTERVAL"
    );
    assert!(read("docs/cloudwatch.md").contains("1 to 86400"));
    // The liveness probe's trade-off is said where the probes are recommended.
    for doc in ["README.md", "docs/lifecycle.md"] {
        let text = read(doc).replace('\n', " ");
        assert!(
            text.contains("not that the app works"),
            "{doc}: the liveness trade-off"
        );
    }
    // lifeguard_response_seconds and clients that open a connection per request.
    let metrics = read("docs/metrics.md").replace('\n', " ");
    assert!(metrics.contains("stays at 0 for clients that open a connection per request"));
    // The man page says what /readyz and --inflight-port mean since 0.2.0.
    assert!(man.contains("until something listens on that port"));
}

#[test]
fn no_page_says_a_heading_twice() {
    // A section pasted twice reads as two sections; the reader skips the second.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.extend(["README.md", "ARCHITECTURE.md", "CHANGELOG.md"].map(|p| root.join(p)));
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut seen: Vec<&str> = Vec::new();
        let mut in_code = false;
        for line in text.lines() {
            if line.starts_with("```") {
                in_code = !in_code;
            }
            // The changelog repeats Keep a Changelog's kinds under each release.
            if in_code
                || !line.starts_with('#')
                || line.starts_with("### ") && page.ends_with("CHANGELOG.md")
            {
                continue;
            }
            assert!(
                !seen.contains(&line),
                "{}: the heading '{line}' twice",
                page.display()
            );
            seen.push(line);
        }
    }
}

#[test]
fn what_the_0_3_0_trial_found_is_said_where_users_read() {
    let man = read("man/lifeguard.1").replace('\n', " ");
    let lifecycle = read("docs/lifecycle.md").replace('\n', " ");
    // A stream that pauses looks idle to the drain: said in the drain's section and the
    // man page, with what to do (tests/drain.rs pins the behaviour).
    let drain_section = |text: &str, from: &str| {
        let at = text.find(from).unwrap_or_else(|| panic!("no {from:?}"));
        text[at..(at + 1_500).min(text.len())].to_string()
    };
    let said = drain_section(
        &lifecycle,
        "What the drain cannot see: a stream that pauses",
    );
    assert!(
        said.contains("`--drain-quiet` above the longest pause") && said.contains("--drain-delay"),
        "{said}"
    );
    let said = drain_section(&man, "A response that has begun streaming");
    assert!(
        said.contains("above the longest pause") && said.contains("drain\\-delay"),
        "{said}"
    );
    // ECS bridge mode: what works, the check on the traffic port, no mirror.
    let bridge = drain_section(&lifecycle, "### ECS on EC2 in `bridge` network mode");
    for word in [
        "dynamic host port",
        "traffic-port",
        "No readiness mirror",
        "--drain-delay 0",
    ] {
        assert!(
            bridge.contains(word) || lifecycle.contains(word),
            "bridge mode: {word}"
        );
    }
    // --help's METRICS_EXTRA names every extra, ScaleInProtected included.
    let help = lifeguard().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).replace('\n', " ");
    assert!(help.contains("ScaleInProtected"), "{help}");
    // The migrating page's leftovers paragraph knows --leftover-grace.
    assert!(read("docs/migrating.md").contains("--leftover-grace"));
    // lifeguard_build_info carries the commit, and the metrics page says so.
    assert!(read("docs/metrics.md").contains("`lifeguard_build_info{version,commit}`"));
    // Measured durations in log lines read as people write them: a measured field the
    // docs quote is `62.0s` or `340ms`, never `1m 2ms 8us 862ns` (src/seconds.rs tests
    // the writing itself).
    for page in docs() {
        let text = read(&page);
        let fields = [
            "quiet_for=",
            "silent_for=",
            "at_the_latest_in=",
            "retry_in=",
        ];
        for (at, _) in fields.iter().flat_map(|f| text.match_indices(f)) {
            let value: String = text[at..]
                .split_once('=')
                .unwrap()
                .1
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.')
                .collect();
            let measured = value
                .strip_suffix("ms")
                .map(|n| n.chars().all(|c| c.is_ascii_digit()))
                .or_else(|| {
                    value.strip_suffix('s').map(|n| {
                        n.split('.')
                            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
                    })
                })
                .unwrap_or(false);
            assert!(
                value.is_empty() || measured,
                "{page}: {value:?} is not a measured duration"
            );
        }
    }
}
