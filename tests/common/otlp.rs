//! The OTLP tests' collector: tests/support/otlp_collector.py, an OTLP/HTTP receiver that
//! decodes each export with the opentelemetry-proto package and prints what arrived.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The stand-in, killed on drop.
pub struct Collector {
    child: Child,
    pub port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Collector {
    pub fn start() -> Collector {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/otlp_collector.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("THIS TEST CANNOT RUN: no python3");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("ready ") {
                    let _ = tx.send(port.trim().parse::<u16>().unwrap());
                } else {
                    kept.lock().unwrap().push(line);
                }
            }
        });
        let port = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| {
            panic!("THIS TEST CANNOT RUN: the OTLP collector stand-in did not start (pip install -r tests/support/requirements.txt)")
        });
        Collector { child, port, lines }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How it answers from now on: `ok`, `status N`, `partial N`, `slow S`.
    pub fn mode(&self, mode: &str) {
        super::tell(self.port, "/_mode", mode);
    }

    /// Every export decoded so far; panics on a body the decoder refused.
    pub fn exports(&self) -> Vec<Value> {
        let lines = self.lines.lock().unwrap().clone();
        lines
            .iter()
            .map(|l| {
                let json = l
                    .strip_prefix("export ")
                    .unwrap_or_else(|| panic!("the collector could not decode an export: {l}"));
                serde_json::from_str(json).unwrap()
            })
            .collect()
    }

    /// Waits (at most `limit`) for an export that `pred` takes, and returns it.
    pub fn wait_for(&self, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + limit;
        loop {
            if let Some(found) = self.exports().into_iter().find(|e| pred(e)) {
                return found;
            }
            assert!(
                Instant::now() < until,
                "no such export within {limit:?}; {} arrived",
                self.exports().len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The metric named `name` in an export, if it is there.
pub fn metric<'a>(export: &'a Value, name: &str) -> Option<&'a Value> {
    export["resources"][0]["scopes"][0]["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)
}
