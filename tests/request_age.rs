//! Request age from the kernel, checked against the truth: an app that logs each
//! request's own service time (tests/support/timed_app.py) under a fixed mix of 10 ms,
//! 200 ms and 2 s requests, on keep-alive connections and on new ones, while
//! `/metrics` is read every 20 ms. The response-time histogram must hold the mix in the
//! app's proportions and put its median and 90th percentile where the app's log does;
//! `lifeguard_request_oldest_seconds` must be, at each look, within 0.2 s of the age
//! of the oldest request open at that moment.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const MIX: [(u64, u32); 3] = [(10, 60), (200, 20), (2000, 20)];
const KEEP_ALIVE_CLIENTS: u64 = 24;
const NEW_CONNECTION_CLIENTS: u64 = 4;
const LOAD: Duration = Duration::from_secs(30);

/// A request the clients sent: when, and when its answer was read.
#[derive(Clone, Copy)]
struct Sent {
    at: Instant,
    done: Option<Instant>,
}

/// A small deterministic generator: each client's choices are the same on every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn asked_ms(&mut self) -> u64 {
        let mut roll = (self.next() % 100) as u32;
        for (ms, weight) in MIX {
            if roll < weight {
                return ms;
            }
            roll -= weight;
        }
        unreachable!()
    }
}

/// Reads one HTTP/1.1 answer with a Content-Length.
fn read_answer(reader: &mut BufReader<TcpStream>) -> std::io::Result<()> {
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)
}

fn client(
    port: u16,
    seed: u64,
    keep_alive: bool,
    sent: Arc<Mutex<Vec<Sent>>>,
    stop: Arc<AtomicBool>,
) {
    let mut rng = Lcg(seed);
    let mut conn: Option<BufReader<TcpStream>> = None;
    while !stop.load(Ordering::Relaxed) {
        let ms = rng.asked_ms();
        let mut reader = match conn.take() {
            Some(reader) => reader,
            None => BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap()),
        };
        let close = if keep_alive {
            ""
        } else {
            "Connection: close\r\n"
        };
        let request = format!("GET /work?ms={ms} HTTP/1.1\r\nHost: x\r\n{close}\r\n");
        let at = Instant::now();
        let index = {
            let mut sent = sent.lock().unwrap();
            sent.push(Sent { at, done: None });
            sent.len() - 1
        };
        reader.get_mut().write_all(request.as_bytes()).unwrap();
        read_answer(&mut reader).unwrap();
        sent.lock().unwrap()[index].done = Some(Instant::now());
        if keep_alive {
            conn = Some(reader);
        }
        // A pause between requests that does not depend on the last one's length.
        std::thread::sleep(Duration::from_millis(300 + rng.next() % 300));
    }
}

/// The age of the oldest request open (sent, its answer not yet read) at `t`.
fn oldest_open(sent: &[Sent], t: Instant) -> f64 {
    sent.iter()
        .filter(|s| s.at <= t && s.done.is_none_or(|d| d > t))
        .map(|s| t.duration_since(s.at).as_secs_f64())
        .fold(0.0, f64::max)
}

/// The nearest-rank quantile of ascending `sorted`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[test]
fn response_times_and_the_oldest_request_agree_with_the_apps_own_log() {
    if skipped_under_emulation(NO_SOCK_DIAG_UNDER_EMULATION) {
        return;
    }
    let (port, endpoint) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("lifeguard-age-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("served.log");
    let app = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/timed_app.py");
    let (port_text, listen) = (port.to_string(), listen_flag(endpoint));
    let mut run = start(
        Mode::Subreaper,
        &[
            "--listen",
            &listen,
            "--inflight-port",
            &port_text,
            "--drain-delay",
            "0",
            "--",
            "python3",
            app,
            &port_text,
            log.to_str().unwrap(),
        ],
    );
    wait_until("the app to listen", || {
        let (_, body) = request(endpoint, "GET", "/metrics").ok()?;
        body.contains("\nlifeguard_inflight_port_listening 1\n")
            .then_some(())
    });

    let sent = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..KEEP_ALIVE_CLIENTS + NEW_CONNECTION_CLIENTS)
        .map(|n| {
            let (sent, stop) = (sent.clone(), stop.clone());
            std::thread::spawn(move || client(port, n + 1, n < KEEP_ALIVE_CLIENTS, sent, stop))
        })
        .collect();

    // The oldest request's age, each time a look changes it: the look was taken between
    // the previous read and this one (less the time a sample takes to be published).
    let started = Instant::now();
    let mut previous: Option<(Instant, f64)> = None;
    let mut checked = 0;
    let mut worst = 0.0f64;
    let mut misses = Vec::new();
    while started.elapsed() < LOAD {
        let before = Instant::now();
        let figures = scrape(endpoint);
        let now = Instant::now();
        let Some(&age) = figures.get("lifeguard_request_oldest_seconds") else {
            panic!("no lifeguard_request_oldest_seconds while sampling the port");
        };
        if let Some((read_at, was)) = previous {
            if was != age {
                let sent = sent.lock().unwrap().clone();
                let from = read_at - Duration::from_millis(60);
                let deviation = (0..)
                    .map(|step| from + Duration::from_millis(2 * step))
                    .take_while(|t| *t <= now)
                    .map(|t| (age - oldest_open(&sent, t)).abs())
                    .fold(f64::MAX, f64::min);
                checked += 1;
                worst = worst.max(deviation);
                if deviation > 0.2 {
                    misses.push(format!("{age:.3} s off by {deviation:.3} s"));
                }
            }
        }
        previous = Some((before, age));
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    // One more sample, after the last answers.
    std::thread::sleep(Duration::from_millis(1500));
    let figures = scrape(endpoint);
    run.signal(libc::SIGTERM);
    run.wait_exit();

    // The app's own log: each request's asked and served milliseconds.
    let served: Vec<(u64, f64)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let (asked, served) = l.split_once(' ').unwrap();
            (
                asked.parse().unwrap(),
                served.parse::<f64>().unwrap() / 1000.0,
            )
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let mut truth: Vec<f64> = served.iter().map(|(_, s)| *s).collect();
    truth.sort_by(f64::total_cmp);

    // The histogram: cumulative counts by bound.
    let mut buckets: Vec<(f64, f64)> = figures
        .iter()
        .filter_map(|(k, v)| {
            let le = k
                .strip_prefix("lifeguard_response_seconds_bucket{le=\"")?
                .strip_suffix("\"}")?;
            Some((
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                },
                *v,
            ))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let count = figures["lifeguard_response_seconds_count"];
    let below = |bound: f64| {
        buckets
            .iter()
            .rev()
            .find(|(le, _)| *le <= bound + 1e-9)
            .map_or(0.0, |(_, n)| *n)
    };
    // The bucket a quantile falls in, and its interpolated value (histogram_quantile's).
    let bucket_of = |q: f64| {
        let rank = q * count;
        let at = buckets.iter().position(|(_, n)| *n >= rank).unwrap();
        let (low, below_n) = if at == 0 { (0.0, 0.0) } else { buckets[at - 1] };
        let (high, n) = buckets[at];
        let value = low + (high - low) * (rank - below_n) / (n - below_n).max(1.0);
        (at, value)
    };
    let bucket_index = |seconds: f64| buckets.iter().position(|(le, _)| seconds <= *le).unwrap();

    // The mix's three kinds, in the app's log and in the histogram.
    let classes = [(0.0, 0.05), (0.1, 0.5), (1.0, 5.0)];
    let mut report = vec![format!(
        "{} requests served, {} response times sampled, {checked} changes of the oldest age checked (worst {:.3} s off)",
        served.len(),
        count,
        worst
    )];
    for ((ms, _), (low, high)) in MIX.iter().zip(classes) {
        let logged =
            served.iter().filter(|(asked, _)| asked == ms).count() as f64 / served.len() as f64;
        let sampled = (below(high) - below(low)) / count;
        report.push(format!(
            "{ms} ms: {:.1} % of the log, {:.1} % of the histogram",
            logged * 100.0,
            sampled * 100.0
        ));
        assert!(
            (logged - sampled).abs() <= 0.1,
            "the {ms} ms share: {logged:.3} logged, {sampled:.3} sampled\n{}",
            report.join("\n")
        );
    }
    for q in [0.5, 0.9] {
        let (at, value) = bucket_of(q);
        let logged = quantile(&truth, q);
        // Good to a jiffy (4 ms at HZ=250) and to the bucket: the histogram's bucket of
        // the quantile is one that the app's value, give or take a jiffy, falls in.
        let allowed = bucket_index(logged - 0.004)..=bucket_index(logged + 0.004);
        report.push(format!(
            "p{}: {:.4} s logged, {:.4} s from the histogram (bucket ≤ {})",
            q * 100.0,
            logged,
            value,
            buckets[at].0
        ));
        assert!(allowed.contains(&at), "p{q}\n{}", report.join("\n"));
    }
    eprintln!(
        "request age against the app's log:\n  {}",
        report.join("\n  ")
    );
    assert!(count >= 100.0, "too few samples\n{}", report.join("\n"));
    assert!(
        checked >= 20,
        "too few looks checked\n{}",
        report.join("\n")
    );
    assert!(
        misses.is_empty(),
        "{}\n{}",
        misses.join("\n"),
        report.join("\n")
    );
}
