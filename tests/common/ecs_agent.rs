//! A stand-in for the ECS agent's task scale-in protection endpoint
//! (`$ECS_AGENT_URI/task-protection/v1/state`) on 127.0.0.1, answering with the shapes the
//! agent documents (and its source writes): `{"protection": {…}}`, `{"failure": {…}}`
//! and `{"error": {"Arn", "Code", "Message"}}`. It keeps the task's protection with its
//! expiry, as ECS does, in minutes of `minute` (the fault-injection build's
//! `LIFEGUARD_FAULT_MINUTE` shortens lifeguard's alike), and records every call.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TASK_ARN: &str = "arn:aws:ecs:us-west-2:111122223333:task/default/1234567890abcdef0";

/// How the stand-in answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answers {
    /// As ECS does for a service's task.
    Service,
    /// A standalone task: `failure` with `TASK_NOT_VALID`.
    Standalone,
    /// The task role lacks the permissions: `AccessDeniedException`.
    Denied,
    /// The fault for every call.
    Always(Fault),
    /// The fault for the next N calls, then as `Service`.
    First(usize, Fault),
}

/// A call the agent fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `ThrottlingException`.
    Throttled,
    /// `RequestCanceled` with HTTP 504, as the agent answers when its own call to ECS
    /// timed out.
    Canceled,
    /// Reads the request and never answers (holds the connection 30 s).
    Hangs,
}

/// The status (0: no answer at all) and body of `fault`.
fn failed(fault: Fault) -> (u16, String) {
    match fault {
        Fault::Throttled => (400, error("ThrottlingException", "Rate exceeded")),
        Fault::Canceled => (
            504,
            error(
                "RequestCanceled",
                "Timed out calling ECS Task Protection API",
            ),
        ),
        Fault::Hangs => (0, String::new()),
    }
}

/// One call the stand-in took.
#[derive(Clone, Debug)]
pub struct Call {
    pub at: Instant,
    pub method: String,
    pub body: String,
    /// What it answered (None: it did not).
    pub status: Option<u16>,
}

#[derive(Debug)]
struct Task {
    mode: Answers,
    /// The protection's expiry, while set.
    until: Option<Instant>,
    calls: Vec<Call>,
}

pub struct Agent {
    /// What ECS sets as ECS_AGENT_URI.
    pub uri: String,
    minute: Duration,
    task: Arc<Mutex<Task>>,
    /// The most calls that were being answered at once.
    most_at_once: Arc<AtomicUsize>,
}

impl Agent {
    pub fn start(mode: Answers, minute: Duration) -> Agent {
        Agent::start_at(0, mode, minute)
    }

    /// As `start`, on a given port (0: any free one): an agent that comes back where
    /// it was.
    pub fn start_at(port: u16, mode: Answers, minute: Duration) -> Agent {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let uri = format!(
            "http://127.0.0.1:{}/api/1234567890abcdef0-3920716453",
            listener.local_addr().unwrap().port()
        );
        let task = Arc::new(Mutex::new(Task {
            mode,
            until: None,
            calls: Vec::new(),
        }));
        let most_at_once = Arc::new(AtomicUsize::new(0));
        let now_answering = Arc::new(AtomicUsize::new(0));
        let (shared, most) = (task.clone(), most_at_once.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                let (task, most, now) = (shared.clone(), most.clone(), now_answering.clone());
                std::thread::spawn(move || {
                    let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(at_once, Ordering::SeqCst);
                    answer(stream, &task, minute);
                    now.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Agent {
            uri,
            minute,
            task,
            most_at_once,
        }
    }

    pub fn set_mode(&self, mode: Answers) {
        self.task.lock().unwrap().mode = mode;
    }

    /// Protects the task for `long`, as a PUT of someone else's would (the app's own).
    pub fn protect_for(&self, long: Duration) {
        self.task.lock().unwrap().until = Some(Instant::now() + long);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.task.lock().unwrap().calls.clone()
    }

    /// The PUTs, as (when, ProtectionEnabled).
    pub fn puts(&self) -> Vec<(Instant, bool)> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == "PUT")
            .map(|c| (c.at, c.body.contains(r#""ProtectionEnabled":true"#)))
            .collect()
    }

    /// Whether ECS would keep the task out of scale-in now.
    pub fn protected(&self) -> bool {
        self.task
            .lock()
            .unwrap()
            .until
            .is_some_and(|until| until > Instant::now())
    }

    pub fn most_calls_at_once(&self) -> usize {
        self.most_at_once.load(Ordering::SeqCst)
    }

    pub fn minute(&self) -> Duration {
        self.minute
    }
}

fn read_request(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut data = Vec::new();
    let mut buf = [0u8; 2048];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while data.len() < head_end + length {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
    let first = head.lines().next().unwrap_or_default().to_string();
    let body = String::from_utf8_lossy(&data[head_end..head_end + length]).to_string();
    Some((first, body))
}

fn error(code: &str, message: &str) -> String {
    format!(r#"{{"error":{{"Arn":"{TASK_ARN}","Code":"{code}","Message":"{message}"}}}}"#)
}

fn answer(mut stream: TcpStream, task: &Mutex<Task>, minute: Duration) {
    let Some((first, body)) = read_request(&mut stream) else {
        return;
    };
    let mut words = first.split_whitespace();
    let (method, path) = (
        words.next().unwrap_or_default().to_string(),
        words.next().unwrap_or_default().to_string(),
    );
    let at = Instant::now();
    let (status, reply) = {
        let mut task = task.lock().unwrap();
        let (status, reply) = if !path.ends_with("/task-protection/v1/state") {
            (404, error("ResourceNotFoundException", "no such path"))
        } else {
            match task.mode {
                Answers::Always(fault) => failed(fault),
                Answers::First(n, fault) if n > 0 => {
                    task.mode = Answers::First(n - 1, fault);
                    failed(fault)
                }
                Answers::Standalone => (
                    200,
                    format!(
                        r#"{{"failure":{{"Arn":"{TASK_ARN}","Detail":null,"Reason":"TASK_NOT_VALID"}}}}"#
                    ),
                ),
                Answers::Denied => {
                    let action = if method == "GET" {
                        "ecs:GetTaskProtection"
                    } else {
                        "ecs:UpdateTaskProtection"
                    };
                    (
                        400,
                        error(
                            "AccessDeniedException",
                            &format!("User: arn:aws:sts::111122223333:assumed-role/web-task/1234567890abcdef0 is not authorized to perform: {action} on resource: {TASK_ARN} because no identity-based policy allows the {action} action"),
                        ),
                    )
                }
                Answers::First(..) | Answers::Service => {
                    state(&mut task, &method, &body, minute, at)
                }
            }
        };
        task.calls.push(Call {
            at,
            method,
            body,
            status: (status != 0).then_some(status),
        });
        (status, reply)
    };
    if status == 0 {
        // Holds the connection until lifeguard gives up on it (or 30 s pass).
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        let _ = stream.read(&mut [0u8; 64]);
        return;
    }
    let reason = if status == 200 { "OK" } else { "Error" };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
}

/// GET and PUT as ECS answers them for a service's task; the PUT's body checked as the
/// agent and ECS check it.
fn state(
    task: &mut Task,
    method: &str,
    body: &str,
    minute: Duration,
    at: Instant,
) -> (u16, String) {
    if task.until.is_some_and(|until| until <= at) {
        task.until = None;
    }
    if method == "PUT" {
        let doc: serde_json::Value = match serde_json::from_str(body) {
            Ok(doc) => doc,
            Err(_) => {
                return (
                    400,
                    error(
                        "InvalidParameterException",
                        "UpdateTaskProtection: failed to decode request",
                    ),
                )
            }
        };
        let Some(enabled) = doc.get("ProtectionEnabled").and_then(|v| v.as_bool()) else {
            return (
                400,
                error(
                    "InvalidParameterException",
                    "Invalid request: does not contain 'ProtectionEnabled' field",
                ),
            );
        };
        if enabled {
            let minutes = doc
                .get("ExpiresInMinutes")
                .map_or(Some(120), |v| v.as_u64());
            match minutes {
                Some(m) if (1..=2880).contains(&m) => task.until = Some(at + minute * m as u32),
                _ => {
                    return (
                        400,
                        error(
                            "InvalidParameterException",
                            "ExpiresInMinutes must be between 1 and 2880",
                        ),
                    )
                }
            }
        } else {
            task.until = None;
        }
    } else if method != "GET" {
        return (
            405,
            error("InvalidParameterException", "method not allowed"),
        );
    }
    let enabled = task.until.is_some();
    let expiration = if enabled {
        r#""2026-12-06T12:00:00.000Z""#
    } else {
        "null"
    };
    (
        200,
        format!(
            r#"{{"protection":{{"ExpirationDate":{expiration},"ProtectionEnabled":{enabled},"TaskArn":"{TASK_ARN}"}}}}"#
        ),
    )
}
