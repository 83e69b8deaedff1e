//! The OTLP tests' collector: tests/support/otlp_collector.py, an OTLP/HTTP receiver that
//! decodes each export with the opentelemetry-proto package and prints what arrived.

use std::io::{BufRead, BufReader, Write};
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
    /// The stand-in's word that a mode is taken.
    taken: Mutex<std::sync::mpsc::Receiver<String>>,
}

impl Collector {
    pub fn start() -> Collector {
        Collector::start_with(&[])
    }

    /// As CloudWatch's own OTLP endpoint: TLS for `name` (its CA written to `ca_out`),
    /// each export's SigV4 signature for `region` checked by botocore, `keys`
    /// (`ID=SECRET`) the credentials it knows.
    pub fn cloudwatch(name: &str, region: &str, keys: &[&str], ca_out: &Path) -> Collector {
        let mut args = vec![
            "--tls",
            name,
            "--ca-out",
            ca_out.to_str().unwrap(),
            "--sigv4",
            region,
        ];
        for key in keys {
            args.extend(["--key", key]);
        }
        Collector::start_with(&args)
    }

    fn start_with(args: &[&str]) -> Collector {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/otlp_collector.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("THIS TEST CANNOT RUN: no python3");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (taken_tx, taken) = std::sync::mpsc::channel();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("ready ") {
                    let _ = tx.send(port.trim().parse::<u16>().unwrap());
                } else if let Some(mode) = line.strip_prefix("mode ") {
                    let _ = taken_tx.send(mode.to_string());
                } else {
                    kept.lock().unwrap().push(line);
                }
            }
        });
        let port = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| {
            panic!("THIS TEST CANNOT RUN: the OTLP collector stand-in did not start (pip install -r tests/support/requirements.txt)")
        });
        Collector {
            child,
            port,
            lines,
            taken: Mutex::new(taken),
        }
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How it answers from now on: `ok`, `status N`, `partial N`, `slow S`, `deny`
    /// (told on its stdin, which works with TLS too; returns once it is taken).
    pub fn mode(&mut self, mode: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{mode}").unwrap();
        stdin.flush().unwrap();
        let taken = self.taken.lock().unwrap();
        let said = taken.recv_timeout(Duration::from_secs(10));
        assert_eq!(
            said.as_deref(),
            Ok(mode),
            "the stand-in did not take the mode"
        );
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
