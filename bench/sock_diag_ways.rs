//! What each way of asking the kernel for a port's sockets costs (the table in
//! src/sock_diag/diag.rs): the median µs of one `InFlightReader::sample()` with
//! 100, 1,000 and 10,000 established loopback pairs open (two ESTABLISHED sockets each),
//! sampling their port and another one, each way of the ladder (legacy or per family,
//! with and without the kernel filter); and of reading /proc/net/tcp{,6} as `ss`-less
//! tools do.
//!
//! It is built from the reader's own source files, which import nothing of lifeguard
//! but each other, so it times the code lifeguard ships:
//!
//! ```sh
//! cargo run --release --example sock_diag_ways
//! ```
//!
//! Start it with no TIME_WAIT sockets left from an earlier run (`tw` in
//! /proc/net/sockstat; they last 60 s): they sit in the hash chains the kernel walks and
//! lengthen every sample. Needs python3 (the client ends live in a child process).
#![forbid(unsafe_code)]

fn main() {
    if std::env::args().any(|a| a == "--others") {
        inflight::others_cost();
    } else {
        inflight::bench();
    }
}

/// The in-flight reader's files, mounted as lifeguard mounts them, and the benchmark
/// beside them (the reader's constructor of one way is visible to its folder only).
#[allow(dead_code)]
#[path = "../src/sock_diag"]
mod inflight {
    mod count;
    mod diag;
    mod ladder;
    mod reader;

    use std::io::{BufRead, Read};
    use std::net::{TcpListener, TcpStream};
    use std::process::{Child, Command, Stdio};
    use std::time::Instant;

    use ladder::LADDER;
    use reader::InFlightReader;

    pub(super) fn bench() {
        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let busy_port = busy.local_addr().unwrap().port();
        let quiet = TcpListener::bind("127.0.0.1:0").unwrap();
        let quiet_port = quiet.local_addr().unwrap().port();
        let mut held = Vec::new();
        let mut open = 0;
        let mut text = String::new();
        println!(
            "pairs  port   legacy_filtered legacy_unfiltered  per_family_filtered \
             per_family_unfiltered  (records on the port)"
        );
        for n in [100usize, 1_000, 10_000] {
            held.push(connect_from_child(&busy, n - open));
            open = n;
            for (name, port) in [("other", quiet_port), ("same", busy_port)] {
                // One reader per way, each without fallback.
                let mut readers: Vec<InFlightReader> = (0..LADDER.len())
                    .map(|at| InFlightReader::with_ways(port, &LADDER[at..=at]).unwrap())
                    .collect();
                let runs = if n >= 10_000 { 101 } else { 501 };
                // Warm-up, and a check they agree.
                let first = readers[0].sample().unwrap();
                for reader in readers.iter_mut() {
                    assert_eq!(reader.sample().unwrap(), first);
                }
                let micros: Vec<f64> = readers
                    .iter_mut()
                    .map(|reader| {
                        median_micros(runs, || {
                            reader.sample().unwrap();
                        })
                    })
                    .collect();
                println!(
                    "{n:>6} {name:>6} {:>15.1} {:>17.1} {:>20.1} {:>22.1}  ({})",
                    micros[0],
                    micros[1],
                    micros[2],
                    micros[3],
                    readers[0].records().len()
                );
            }
            let p = median_micros(if n >= 10_000 { 51 } else { 201 }, || {
                assert_eq!(proc_net_tcp_listeners(quiet_port, &mut text), 1);
            });
            println!("{n:>6} /proc/net/tcp+tcp6: {p:.1} us");
        }
        for (mut child, accepted) in held {
            drop(child.stdin.take());
            child.wait().unwrap();
            drop(accepted);
        }
    }

    /// The drain's look at the namespace's other listeners (`--others`): at 1,000,
    /// 10,000 and 50,000 sockets of a host's namespace (loopback pairs on an unrelated
    /// listener), the median µs of the kernel-filtered dump of one sidecar's
    /// connections (`sample_others`, what a drain reads every 100 ms beside other
    /// listeners) against the whole table unfiltered (`sample_namespace`, the fallback
    /// where the kernel cannot filter), legacy request. Raise the descriptor limit
    /// first (`ulimit -n 100000`, as root).
    pub(super) fn others_cost() {
        let sidecar = TcpListener::bind("127.0.0.1:0").unwrap();
        let sidecar_port = sidecar.local_addr().unwrap().port();
        let sidecar_conns = connect_from_child(&sidecar, 4);
        let mut held = Vec::new();
        let mut open = 0;
        println!("sockets  others_filtered_us  whole_table_us  (records: filtered, whole)");
        for sockets in [1_000usize, 10_000, 50_000] {
            let pairs = sockets / 2;
            // Both ends in children of their own (the descriptor limit of a process
            // here is 20,000), 8,000 pairs at most each.
            while open < pairs {
                let n = (pairs - open).min(8_000);
                held.push(pairs_in_child(n));
                open += n;
            }
            let mut reader = InFlightReader::with_ways(0, &LADDER[0..=0]).unwrap();
            let runs = if sockets >= 10_000 { 51 } else { 301 };
            let filtered = reader
                .sample_others(&[sidecar_port])
                .unwrap()
                .unwrap()
                .len();
            let f = median_micros(runs, || {
                reader.sample_others(&[sidecar_port]).unwrap().unwrap();
            });
            let whole = reader.sample_namespace().unwrap().len();
            let w = median_micros(runs, || {
                reader.sample_namespace().unwrap();
            });
            println!("{sockets:>7} {f:>19.1} {w:>15.1}  ({filtered}, {whole})");
        }
        for mut child in held {
            drop(child.stdin.take());
            child.wait().unwrap();
        }
        let (mut child, accepted) = sidecar_conns;
        drop(child.stdin.take());
        child.wait().unwrap();
        drop(accepted);
    }

    /// `n` loopback pairs, both ends held by a python3 child (on a listener of its
    /// own), until its stdin closes.
    fn pairs_in_child(n: usize) -> Child {
        let script = format!(
            "import socket,sys\n\
             l=socket.socket();l.bind(('127.0.0.1',0));l.listen(4096)\n\
             c=[];a=[]\n\
             for _ in range({n}):\n c.append(socket.create_connection(l.getsockname()));a.append(l.accept()[0])\n\
             print('ready',flush=True)\nsys.stdin.read()\n"
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut ready = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready");
        child
    }

    fn median_micros(runs: usize, mut f: impl FnMut()) -> f64 {
        let mut times: Vec<f64> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        times[runs / 2]
    }

    /// What `ss`-less tools do: read /proc/net/tcp and tcp6 whole and pick the port's lines.
    fn proc_net_tcp_listeners(port: u16, text: &mut String) -> usize {
        let mut found = 0;
        for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
            text.clear();
            std::fs::File::open(file)
                .unwrap()
                .read_to_string(text)
                .unwrap();
            for line in text.lines().skip(1) {
                let mut fields = line.split_whitespace();
                let local = fields.nth(1).unwrap_or("");
                let local_port = local
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok());
                let state = fields.nth(1).unwrap_or("");
                let queues = fields.next().unwrap_or("");
                if local_port == Some(port) && state == "0A" && queues.contains(':') {
                    found += 1;
                }
            }
        }
        found
    }

    /// Connects `n` clients to the listener's port from a separate process (the
    /// descriptor limit here is 20,000 and cannot be raised without CAP_SYS_RESOURCE, so
    /// the client ends live in a python3 child with its own), and accepts them here. The
    /// child exits when its stdin closes.
    fn connect_from_child(listener: &TcpListener, n: usize) -> (Child, Vec<TcpStream>) {
        let port = listener.local_addr().unwrap().port();
        let script = format!(
            "import socket,sys\n\
             s=[socket.create_connection(('127.0.0.1',{port})) for _ in range({n})]\n\
             print('ready',flush=True)\nsys.stdin.read()\n"
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let accepted: Vec<TcpStream> = (0..n).map(|_| listener.accept().unwrap().0).collect();
        let mut ready = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready");
        (child, accepted)
    }
}
