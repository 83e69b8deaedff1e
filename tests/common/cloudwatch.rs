//! The CloudWatch emulator of the tests: moto (PyPI) behind
//! tests/support/cloudwatch_front.py, which speaks the Rust SDK's Smithy RPC-v2 CBOR,
//! records every datum as sent, and injects faults; and the ways to read back what moto
//! stored (its own records, GetMetricStatistics through its API, and the percentiles the
//! front computes from its records, as moto computes none).

use std::io::BufRead;
use std::io::BufReader;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::get;

/// The emulator: moto and the front, killed on drop.
pub struct Emulator {
    child: Child,
    pub port: u16,
    /// moto's own server, for reading back through the CloudWatch API.
    pub moto_port: u16,
}

impl Emulator {
    pub fn start() -> Emulator {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/cloudwatch_front.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(["--port", "0", "--moto-port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("THIS TEST CANNOT RUN: no python3");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut moto_port = 0;
        let port = loop {
            let line = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| {
                panic!("THIS TEST CANNOT RUN: the CloudWatch emulator did not start (pip install -r tests/support/requirements.txt)")
            });
            if let Some(port) = line.strip_prefix("moto ") {
                moto_port = port.trim().parse().unwrap();
            }
            if let Some(port) = line.strip_prefix("ready ") {
                break port.trim().parse().unwrap();
            }
        };
        Emulator {
            child,
            port,
            moto_port,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn fault(&self, fault: &str) {
        super::tell(self.port, "/_fault", fault);
    }

    /// Every PutMetricData moto accepted for `namespace`, each with its data as sent
    /// (the front records datums; those of one call share its arrival time).
    pub fn calls(&self, namespace: &str) -> Vec<Call> {
        let (status, body) = get(self.port, &format!("/_data?namespace={namespace}"));
        assert_eq!(status, 200, "{body}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        let mut calls: Vec<Call> = Vec::new();
        for datum in doc["data"].as_array().cloned().unwrap_or_default() {
            let at = datum["received_at"].as_f64().unwrap();
            match calls.last_mut() {
                Some(call) if call.at == at => call.data.push(datum),
                _ => calls.push(Call {
                    at,
                    data: vec![datum],
                }),
            }
        }
        calls
    }

    /// moto's own records for `namespace`: one per raw value it stored (moto keeps a
    /// datum sent as Values/Counts as one point per occurrence), one per statistic set.
    pub fn stored(&self, namespace: &str) -> Vec<Value> {
        let (status, body) = get(self.port, &format!("/_data?namespace={namespace}"));
        assert_eq!(status, 200, "{body}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        doc["moto_backend"].as_array().cloned().unwrap_or_default()
    }

    /// pNN of `metric` per 1-second timestamp, from moto's records by CloudWatch's rule
    /// (the front computes it: moto has no percentiles). `value` is null where
    /// CloudWatch would give none.
    pub fn percentile(&self, namespace: &str, metric: &str, p: f64) -> Vec<Value> {
        let (status, body) = get(
            self.port,
            &format!("/_percentile?namespace={namespace}&name={metric}&p={p}"),
        );
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body)
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// GetMetricStatistics (Period 1: SampleCount, Sum, Minimum, Maximum, Average) for
    /// every metric of `namespace`, asked of moto through the CloudWatch API by boto3
    /// (tests/support/cloudwatch_read.py).
    pub fn statistics(&self, namespace: &str) -> Value {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/cloudwatch_read.py");
        let out = Command::new("python3")
            .arg(script)
            .args(["--moto-port", &self.moto_port.to_string()])
            .args(["--namespace", namespace])
            .output()
            .expect("THIS TEST CANNOT RUN: no python3");
        assert!(
            out.status.success(),
            "cloudwatch_read.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["statistics"].clone()
    }

    /// Every API request received, failed ones included.
    pub fn log(&self) -> Vec<Value> {
        let (_, body) = get(self.port, "/_log");
        serde_json::from_str::<Value>(&body)
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One PutMetricData as it arrived.
#[derive(Clone, Debug)]
pub struct Call {
    pub at: f64,
    pub data: Vec<Value>,
}

impl Call {
    pub fn metric(&self, name: &str) -> Option<&Value> {
        self.data.iter().find(|d| d["name"] == name)
    }

    /// Every datum of `name` in the call.
    pub fn metrics(&self, name: &str) -> Vec<&Value> {
        self.data.iter().filter(|d| d["name"] == name).collect()
    }
}

/// The samples a datum sent as raw values stands for, one by one (each of `values`
/// repeated as often as `counts` says); None for a datum without `values`.
pub fn samples_of(datum: &Value) -> Option<Vec<f64>> {
    let values = datum["values"].as_array()?;
    let counts = datum["counts"].as_array()?;
    assert_eq!(
        values.len(),
        counts.len(),
        "Values and Counts differ: {datum}"
    );
    let mut out = Vec::new();
    for (v, c) in values.iter().zip(counts) {
        let (v, c) = (v.as_f64().unwrap(), c.as_f64().unwrap());
        assert_eq!(c, c.trunc(), "a count that is not whole: {datum}");
        out.extend(std::iter::repeat_n(v, c as usize));
    }
    Some(out)
}

/// The nearest-rank percentile: the smallest value with at least p % of `values` at or
/// below it (what the front computes, so both sides mean the same median).
pub fn nearest_rank(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((sorted.len() as f64 * p / 100.0).ceil() as usize).max(1);
    sorted[rank - 1]
}

/// Waits until `ok` holds for the calls recorded for `ns`; returns them.
pub fn calls_until(
    emulator: &Emulator,
    ns: &str,
    what: &str,
    ok: impl Fn(&[Call]) -> bool,
) -> Vec<Call> {
    let until = Instant::now() + Duration::from_secs(40);
    loop {
        let calls = emulator.calls(ns);
        if ok(&calls) {
            return calls;
        }
        if Instant::now() > until {
            panic!("timed out waiting for {what}; calls: {calls:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
