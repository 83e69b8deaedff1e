//! The files users copy (examples/), read as the tests see them: every YAML and JSON
//! file under examples/ as JSON (through tests/support/examples_as_json.py), the
//! lifeguard flags in a container's command line, and lifeguard's verdict on them.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::lifeguard;

pub fn examples() -> serde_json::Map<String, Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("tests/support/examples_as_json.py"))
        .arg(root.join("examples"))
        .output()
        .expect("THIS TEST CANNOT RUN: no python3");
    assert!(
        out.status.success(),
        "an example does not parse (or PyYAML is missing: scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_object()
        .unwrap()
        .clone()
}

pub fn doc<'a>(
    all: &'a serde_json::Map<String, Value>,
    file: &str,
    kind: Option<&str>,
) -> &'a Value {
    let docs = all[file].as_array().unwrap();
    docs.iter()
        .find(|d| kind.is_none_or(|k| d["kind"] == k))
        .unwrap_or_else(|| panic!("{file} has no {kind:?}"))
}

/// The value of `--NAME=V` in `args`.
pub fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .take_while(|a| *a != "--")
        .find_map(|a| a.strip_prefix(&format!("--{name}=")))
}

pub fn seconds(text: &str) -> f64 {
    text.trim_end_matches('s').parse().unwrap()
}

/// lifeguard must accept the flags and environment as given (exit 0 on `true`).
pub fn lifeguard_accepts(args: &[String], env: &[(String, String)]) {
    let options: Vec<&String> = args.iter().take_while(|a| *a != "--").collect();
    let mut cmd = lifeguard();
    cmd.args(&options)
        .args(["--listen", "off", "--", "true"])
        .env("AWS_REGION", "us-east-1")
        // No credentials anywhere: the publisher must give up quietly, not hang.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "lifeguard refused {options:?} {env:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}
