//! The app the integration tests run under lifeguard: prints `ready`, then one line per
//! signal it gets (`signal TERM`), and can misbehave on request (ignore SIGTERM, leave
//! orphans and zombies, daemonize, exit with a code, report what it inherited).
//!
//! Usage: lifeguard-testapp [OPTION...]
//!   --exit-on SIGS    comma list of signals that end it (default TERM,INT; `none`)
//!   --code N          exit code when a signal ends it (default 0)
//!   --linger MS       after the ending signal, keep running this long (a slow handler)
//!   --exit N          exit with N right after printing ready
//!   --zombies N       leave N exited orphans behind for the init to reap
//!   --daemon MODE     fork a grandchild in a session of its own that outlives the app:
//!                     `stubborn` ignores SIGTERM, `polite` exits on it (prints both)
//!   --report          print what it inherited: `mask`, `ignored`, `fds`, `pgid`, `sid`,
//!                     `foreground` (its group owns the terminal on stdin)
//!   --ignore-stop     do not let TSTP/TTIN/TTOU stop it (report them instead)
//!   --default-signal N  reset signal N to its default action, even one the C library
//!                     reserves (a raw rt_sigaction), so that N kills it
//!   --thread-outlives-main  after ready, the main thread exits and a second thread runs
//!                     on (the process shows as a zombie while it still runs)
//!   --http PORT       serve HTTP on 127.0.0.1:PORT like a naive web server: `/slow`
//!                     answers after 2 s, `/health` 200 (500 after SIGUSR1 flips it),
//!                     anything else 200 at once; prints `request PATH` on arrival. On
//!                     SIGTERM it closes its port at once (as Uvicorn does), prints
//!                     `closed`, finishes the requests in flight, then exits.
//!                     `--http ADDR:PORT` listens there instead (`[::]:8080`);
//!                     `/slow/MS` answers after MS milliseconds; `/stream/MS` sends
//!                     its head and a first part at once (`streamed first part`), the
//!                     rest MS milliseconds later (`streamed last part`)
//!   --keep-alive      the web server keeps connections open between requests
//!   --die-on-term     the web server's SIGTERM is fatal at once, as for an app with no
//!                     handler: requests in flight are lost
//!   --burn            spin one thread on the CPU for ever
//!   --burn-threads N  spin N threads on the CPU for ever
//!   --spew N          after ready, write N numbered lines to stdout, 500 at a time as
//!                     fast as it can, 100 ms between batches
//!   --hold-mb N       allocate and touch N MiB, and keep them
#![allow(unsafe_code)]

use std::io::Write;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut exit_on = vec![libc::SIGTERM, libc::SIGINT];
    let mut code = 0;
    let mut linger = 0u64;
    let mut exit_now = None;
    let mut zombies = 0usize;
    let mut daemon = None;
    let mut report = false;
    let mut ignore_stop = false;
    let mut http_addr = None;
    let mut keep_alive = false;
    let mut die_on_term = false;
    let mut burn = 0usize;
    let mut spew = 0usize;
    let mut hold_mb = 0usize;
    let mut thread_outlives_main = false;
    let mut defaulted = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().expect("option needs a value").clone();
        match arg.as_str() {
            "--exit-on" => {
                let v = value();
                exit_on = if v == "none" {
                    vec![]
                } else {
                    v.split(',').map(signal_number).collect()
                };
            }
            "--code" => code = value().parse().unwrap(),
            "--linger" => linger = value().parse().unwrap(),
            "--exit" => exit_now = Some(value().parse::<i32>().unwrap()),
            "--zombies" => zombies = value().parse().unwrap(),
            "--daemon" => daemon = Some(value()),
            "--report" => report = true,
            "--ignore-stop" => ignore_stop = true,
            "--thread-outlives-main" => thread_outlives_main = true,
            "--default-signal" => defaulted.push(value().parse::<i32>().unwrap()),
            "--http" => {
                let v = value();
                http_addr = Some(if v.contains(':') {
                    v
                } else {
                    format!("127.0.0.1:{v}")
                });
            }
            "--keep-alive" => keep_alive = true,
            "--die-on-term" => die_on_term = true,
            "--burn" => burn = 1,
            "--spew" => spew = value().parse().expect("--spew N"),
            "--burn-threads" => burn = value().parse().expect("--burn-threads N"),
            "--hold-mb" => hold_mb = value().parse().unwrap(),
            other => panic!("testapp: unknown option {other}"),
        }
    }

    if report {
        report_inherited();
    }
    for n in defaulted {
        // The kernel's struct sigaction: handler, flags, restorer, mask, four 8-byte
        // words on x86_64 and aarch64 alike (src/kernel.rs, KernelSigaction, checks the
        // layout; KERNEL_SIGACTION_WORDS below guards the architecture).
        let action: [u64; KERNEL_SIGACTION_WORDS] = [libc::SIG_DFL as u64, 0, 0, 0];
        // SAFETY: a live struct of the kernel's layout; no old action asked for.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                n,
                action.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8,
            )
        };
    }
    // Every signal but the job-control ones stays blocked and is read from a signalfd, so
    // none is lost and each is printed once, in order. (Not sigwaitinfo: while a process
    // waits in it the kernel shows the waited signals as unblocked in /proc, and
    // lifeguard reads SigBlk to decide how to pass TSTP on.) TSTP/TTIN/TTOU/CONT keep
    // their default actions so that they really stop and resume the app.
    use nix::sys::signal::{SigSet, Signal};
    let mut waited = SigSet::all();
    if !ignore_stop {
        for sig in [
            Signal::SIGTSTP,
            Signal::SIGTTIN,
            Signal::SIGTTOU,
            Signal::SIGCONT,
        ] {
            waited.remove(sig);
        }
    }
    waited.thread_block().expect("testapp: block signals");
    let inbox = nix::sys::signalfd::SignalFd::new(&waited).expect("testapp: signalfd");

    if let Some(mode) = daemon {
        spawn_daemon(&mode);
    }
    if zombies > 0 {
        leave_zombies(zombies);
    }
    let server = http_addr.map(|addr| web::Server::start(&addr, keep_alive));
    let held: Vec<u8> = hold(hold_mb);
    // The spinners wait at a gate until all are made: in a small CPU quota each one
    // spinning while the next is made would leave the main thread 1/N of the quota,
    // and 300 of them take longer to make than a test waits for "ready".
    let gate = std::sync::Arc::new(std::sync::Barrier::new(burn + 1));
    for _ in 0..burn {
        let gate = gate.clone();
        std::thread::spawn(move || {
            gate.wait();
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        });
    }
    say("ready");
    if burn > 0 {
        gate.wait();
    }
    if spew > 0 {
        std::thread::spawn(move || {
            use std::io::Write;
            let pad = "x".repeat(100);
            for batch in (0..spew).collect::<Vec<_>>().chunks(500) {
                let mut out = std::io::stdout().lock();
                for i in batch {
                    // One write per line, as an app's logger makes them.
                    let _ = out.write_all(format!("spew {i:06} {pad}\n").as_bytes());
                    let _ = out.flush();
                }
                drop(out);
                std::thread::sleep(Duration::from_millis(100));
            }
            say("spew done");
        });
    }
    if let Some(n) = exit_now {
        std::process::exit(n);
    }
    if thread_outlives_main {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_secs(3600));
        });
        // SAFETY: the raw exit system call ends only the calling (main) thread, without
        // unwinding (pthread_exit would unwind through Rust frames and abort); the
        // spawned thread keeps the process alive.
        unsafe { libc::syscall(libc::SYS_exit, 0) };
    }
    loop {
        let Ok(Some(info)) = inbox.read_signal() else {
            continue;
        };
        let sig = info.ssi_signo as i32;
        say(&format!("signal {}", signal_name(sig)));
        if let Some(server) = &server {
            if sig == libc::SIGUSR1 {
                server.flip_health();
            }
            if sig == libc::SIGTERM && die_on_term {
                say("dying");
                die_by(libc::SIGTERM);
            }
            if sig == libc::SIGTERM {
                server.close_and_finish();
                say("exiting");
                std::process::exit(code);
            }
        }
        if exit_on.contains(&sig) {
            std::thread::sleep(Duration::from_millis(linger));
            say("exiting");
            drop(held);
            std::process::exit(code);
        }
    }
}

/// The kernel's `struct sigaction` in 8-byte words: the same generic layout on x86_64
/// and aarch64 (asm-generic/signal.h with SA_RESTORER); other architectures differ.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const KERNEL_SIGACTION_WORDS: usize = 4;
const _: () = assert!(std::mem::size_of::<libc::sighandler_t>() == 8);

/// N MiB, every page written so it is resident (anonymous memory, not cache).
fn hold(mb: usize) -> Vec<u8> {
    let mut held = vec![0u8; mb << 20];
    for page in held.chunks_mut(4096) {
        page[0] = 1;
    }
    std::hint::black_box(held)
}

/// Ends the process by `sig` with its default action, as if it had no handler.
fn die_by(sig: i32) -> ! {
    // SAFETY: resets one disposition and unblocks it for this thread, then sends it to
    // the process; plain calls with no memory involved.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
    }
    std::process::exit(128 + sig);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn all_signals() -> libc::sigset_t {
    // SAFETY: sigfillset initialises the zeroed set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        set
    }
}

const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ABRT", libc::SIGABRT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("WINCH", libc::SIGWINCH),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
    ("TRAP", libc::SIGTRAP),
    ("XCPU", libc::SIGXCPU),
];

fn signal_name(sig: i32) -> String {
    if let Some((name, _)) = NAMES.iter().find(|(_, n)| *n == sig) {
        return name.to_string();
    }
    if sig >= libc::SIGRTMIN() {
        return format!("RTMIN+{}", sig - libc::SIGRTMIN());
    }
    sig.to_string()
}

fn signal_number(name: &str) -> i32 {
    NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, n)| *n)
        .or_else(|| name.parse().ok())
        .unwrap_or_else(|| panic!("testapp: unknown signal {name}"))
}

fn report_inherited() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    say(&format!("mask {}", field("SigBlk:")));
    say(&format!("ignored {}", field("SigIgn:")));
    let mut fds: Vec<u32> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    fds.sort();
    // The directory handle read_dir held is closed again by now; drop fds that vanished.
    fds.retain(|fd| std::fs::metadata(format!("/proc/self/fd/{fd}")).is_ok());
    let fds: Vec<String> = fds.iter().map(|f| f.to_string()).collect();
    say(&format!("fds {}", fds.join(",")));
    // SAFETY: plain getters.
    let (pgid, sid, fg) = unsafe { (libc::getpgrp(), libc::getsid(0), libc::tcgetpgrp(0)) };
    say(&format!("pgid {pgid} sid {sid} pid {}", std::process::id()));
    say(&format!("foreground {}", fg == pgid));
}

/// Forks a child that forks `n` children that exit at once, then exits itself without
/// waiting: its `n` zombies are re-parented to the init, which must reap them.
fn leave_zombies(n: usize) {
    // SAFETY: fork in a single-threaded program; the child only forks and exits.
    match unsafe { libc::fork() } {
        0 => {
            for _ in 0..n {
                // SAFETY: as above; the grandchild exits at once.
                if unsafe { libc::fork() } == 0 {
                    unsafe { libc::_exit(0) };
                }
            }
            unsafe { libc::_exit(0) };
        }
        pid if pid > 0 => {
            let mut status = 0;
            // SAFETY: waits for the direct child only; its children are left as zombies.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            say(&format!("zombies {n}"));
        }
        _ => panic!("fork failed"),
    }
}

/// Double-forks a grandchild into a session of its own, so it is neither in the app's
/// process group nor its child: only an init that tracks descendants can stop it.
fn spawn_daemon(mode: &str) {
    let stubborn = mode == "stubborn";
    // SAFETY: fork in a single-threaded program.
    match unsafe { libc::fork() } {
        0 => {
            unsafe { libc::setsid() };
            if unsafe { libc::fork() } != 0 {
                unsafe { libc::_exit(0) };
            }
            say(&format!("daemon {}", std::process::id()));
            let set = all_signals();
            loop {
                let sig = unsafe { libc::sigwaitinfo(&set, std::ptr::null_mut()) };
                if sig == libc::SIGTERM {
                    say(&format!(
                        "daemon signal TERM{}",
                        if stubborn { " ignored" } else { "" }
                    ));
                    if !stubborn {
                        unsafe { libc::_exit(0) };
                    }
                }
            }
        }
        pid if pid > 0 => {
            let mut status = 0;
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
        _ => panic!("fork failed"),
    }
}

/// The naive web server of `--http`.
mod web {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    pub struct Server {
        fd: i32,
        in_flight: Arc<AtomicUsize>,
        healthy: Arc<AtomicBool>,
    }

    impl Server {
        pub fn start(addr: &str, keep_alive: bool) -> Server {
            let listener = TcpListener::bind(addr).expect("testapp: bind");
            let server = Server {
                fd: listener.as_raw_fd(),
                in_flight: Arc::new(AtomicUsize::new(0)),
                healthy: Arc::new(AtomicBool::new(true)),
            };
            let (in_flight, healthy) = (server.in_flight.clone(), server.healthy.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(stream) = stream else { break };
                    // Counted before the handler starts, so a close never misses it.
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    let (in_flight, healthy) = (in_flight.clone(), healthy.clone());
                    std::thread::spawn(move || {
                        handle(stream, &healthy, keep_alive);
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            });
            server
        }

        pub fn flip_health(&self) {
            self.healthy.fetch_xor(true, Ordering::SeqCst);
        }

        /// Stops listening at once, then waits for the requests in flight.
        pub fn close_and_finish(&self) {
            // SAFETY: shutting down our own listening socket; accept() then fails and
            // new connections are refused.
            unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
            super::say("closed");
            while self.in_flight.load(Ordering::SeqCst) > 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// One request, or with `keep_alive` one after another until the client closes.
    fn handle(mut stream: TcpStream, healthy: &AtomicBool, keep_alive: bool) {
        let mut pending = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            while !pending.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                }
            }
            let end = pending.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let head = String::from_utf8_lossy(&pending[..end]).to_string();
            pending.drain(..end);
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
            super::say(&format!("request {path}"));
            // A streamed answer: its head and first part at once, the rest after MS
            // milliseconds (a download that stalls, a server-sent event stream).
            if let Some(ms) = path.strip_prefix("/stream/") {
                let ms = ms.parse().unwrap_or(1000);
                let first =
                    "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nfirst";
                if stream.write_all(first.as_bytes()).is_err() {
                    return;
                }
                super::say("streamed first part");
                std::thread::sleep(Duration::from_millis(ms));
                let _ = stream.write_all(b" last");
                super::say("streamed last part");
                return;
            }
            let (status, body) = match path.as_str() {
                "/slow" => {
                    std::thread::sleep(Duration::from_secs(2));
                    ("200 OK", "slow done")
                }
                p if p.starts_with("/slow/") => {
                    let ms = p["/slow/".len()..].parse().unwrap_or(1000);
                    std::thread::sleep(Duration::from_millis(ms));
                    ("200 OK", "slow done")
                }
                "/health" if !healthy.load(Ordering::SeqCst) => {
                    ("500 Internal Server Error", "sick")
                }
                _ => ("200 OK", "hello"),
            };
            let connection = if keep_alive { "keep-alive" } else { "close" };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n{body}",
                body.len()
            );
            if stream.write_all(response.as_bytes()).is_err() || !keep_alive {
                return;
            }
        }
    }
}
