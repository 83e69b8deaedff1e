//! A stand-in for the ECS task metadata endpoint v4 (`ECS_CONTAINER_METADATA_URI_V4`)
//! on 127.0.0.1, serving the documented shapes, for the metrics and CloudWatch tests.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the metadata stand-in answers.
pub const HEALTHY: u8 = 0;
pub const ANSWERS_500: u8 = 1;
pub const ANSWERS_GARBAGE: u8 = 2;
pub const HANGS: u8 = 3;

/// A stand-in for the ECS task metadata endpoint v4 on 127.0.0.1, serving the
/// documented shapes of `/task` and `/task/stats` for a task of 0.25 vCPU and 512 MiB
/// with two containers. Its CPU counters grow at 0.2 cores in all, so the task's
/// utilization is 80 %.
pub struct MetadataStandIn {
    pub base: String,
    pub mode: Arc<AtomicU8>,
}

impl MetadataStandIn {
    pub fn start() -> MetadataStandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!(
            "http://127.0.0.1:{}/v4/5f6a7c0e-task",
            listener.local_addr().unwrap().port()
        );
        let mode = Arc::new(AtomicU8::new(HEALTHY));
        let shared = mode.clone();
        let started = Instant::now();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let mode = shared.clone();
                std::thread::spawn(move || answer_metadata(stream, &mode, started));
            }
        });
        MetadataStandIn { base, mode }
    }
}

fn answer_metadata(mut stream: TcpStream, mode: &AtomicU8, started: Instant) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (status, body) = match mode.load(Ordering::SeqCst) {
        HANGS => {
            std::thread::sleep(Duration::from_secs(30));
            return;
        }
        ANSWERS_500 => ("500 Internal Server Error", "oops".to_string()),
        ANSWERS_GARBAGE => ("200 OK", "<html>not json</html>".to_string()),
        _ if path.ends_with("/task") => ("200 OK", TASK.to_string()),
        _ if path.ends_with("/task/stats") => {
            // 0.15 + 0.05 cores: total_usage in ns grows with wall time.
            let ns = started.elapsed().as_nanos() as u64;
            ("200 OK", task_stats(ns / 20 * 3, ns / 20))
        }
        _ => ("404 Not Found", "{}".to_string()),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// `${ECS_CONTAINER_METADATA_URI_V4}/task` as AWS documents it for Fargate.
const TASK: &str = r#"{"Cluster":"arn:aws:ecs:us-west-2:111122223333:cluster/default",
"TaskARN":"arn:aws:ecs:us-west-2:111122223333:task/default/158d1c8083dd49d6b527399fd6414f5c",
"Family":"web","Revision":"26","DesiredStatus":"RUNNING","KnownStatus":"RUNNING",
"Limits":{"CPU":0.25,"Memory":512},"LaunchType":"FARGATE","AvailabilityZone":"us-west-2d",
"Containers":[{"DockerId":"598cba581fe3","Name":"web","Limits":{"CPU":128,"Memory":256}},
{"DockerId":"7e1b9d2c44aa","Name":"sidecar","Limits":{"CPU":128,"Memory":256}}]}"#;

/// `/task/stats`: Docker stats per container (a v2 host: `inactive_file`).
fn task_stats(web_ns: u64, sidecar_ns: u64) -> String {
    let container = |ns: u64, usage: u64, inactive: u64| {
        format!(
            r#"{{"read":"2026-12-01T08:00:00Z","num_procs":0,
"cpu_stats":{{"cpu_usage":{{"total_usage":{ns},"usage_in_kernelmode":0,"usage_in_usermode":{ns}}},"system_cpu_usage":1,"online_cpus":2,
"throttling_data":{{"periods":0,"throttled_periods":0,"throttled_time":0}}}},
"memory_stats":{{"usage":{usage},"limit":9223372036854771712,"stats":{{"inactive_file":{inactive},"active_file":0}}}}}}"#
        )
    };
    format!(
        r#"{{"598cba581fe3":{},"7e1b9d2c44aa":{},"0ffe1d":null}}"#,
        container(web_ns, 200 << 20, 40 << 20),
        container(sidecar_ns, 60 << 20, 4 << 20),
    )
}
