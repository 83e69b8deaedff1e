//! The integration-test harness: runs the real lifeguard binary, as PID 1 of a fresh PID
//! namespace (`unshare --pid --fork --mount-proc`) or as a plain child (subreaper),
//! collects its output line by line, and waits for conditions with a timeout.
#![allow(dead_code)]

pub mod cloudwatch;
pub mod ecs;
pub mod ecs_agent;
pub mod examples;
pub mod haproxy;
pub mod netns;
pub mod otlp;
pub mod prometheus;
pub mod task;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The lifeguard cargo built for this host. Tests run the binary under test instead,
/// through `lifeguard_argv`, `lifeguard_shell`, `lifeguard()` and `start*`.
const BUILT_LIFEGUARD: &str = env!("CARGO_BIN_EXE_lifeguard");
/// The app stays the host's own build under emulation too: qemu-user emulates only the
/// process it starts, and an execve from it is the host kernel's (see `emulated`).
pub const TESTAPP: &str = env!("CARGO_BIN_EXE_lifeguard-testapp");

/// The one place the binary under test comes from: `TEST_LIFEGUARD_BIN`, a
/// lifeguard built elsewhere (`scripts/build-static.sh aarch64`), run through
/// `TEST_LIFEGUARD_RUNNER` (a command and its arguments, split on spaces, e.g.
/// `qemu-aarch64-static`); by default the lifeguard cargo built, run directly. Named
/// TEST_* rather than LIFEGUARD_*: lifeguard's own variables are LIFEGUARD_*, and the
/// harness strips those from what it starts (`without_inherited_settings`).
///
/// Under qemu-user (`qemu-aarch64-static lifeguard -- app`), the emulator is the process
/// the test starts, lifeguard's pid and, under `unshare --pid --fork`, PID 1 of the
/// namespace, running lifeguard's aarch64 code; its system calls are the host kernel's.
/// The app lifeguard execs is not emulated: qemu 7.2 passes execve to the kernel, which
/// runs the x86_64 testapp natively (and refuses an aarch64 one with ENOEXEC unless
/// binfmt_misc has qemu registered, which this harness does not rely on). Checked: under
/// `qemu-aarch64-static lifeguard -- sh -c 'readlink /proc/$$/exe /proc/$PPID/exe'` the
/// shell is /usr/bin/dash and its parent /usr/bin/qemu-aarch64-static.
pub fn lifeguard_argv() -> &'static [String] {
    static ARGV: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    ARGV.get_or_init(|| {
        let mut argv: Vec<String> = std::env::var("TEST_LIFEGUARD_RUNNER")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let bin = std::env::var("TEST_LIFEGUARD_BIN")
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| BUILT_LIFEGUARD.to_string());
        assert!(
            std::path::Path::new(&bin).is_file(),
            "THIS TEST CANNOT RUN: TEST_LIFEGUARD_BIN={bin} is not a file"
        );
        argv.push(bin);
        argv
    })
}

/// The lifeguard binary under test (without its runner).
pub fn lifeguard_bin() -> &'static str {
    lifeguard_argv().last().unwrap()
}

/// The runner and lifeguard as the start of a `sh -c` command line (test paths have no
/// spaces or quotes).
pub fn lifeguard_shell() -> String {
    lifeguard_argv().join(" ")
}

/// Whether lifeguard runs under an emulator (`TEST_LIFEGUARD_RUNNER` is set).
pub fn emulated() -> bool {
    lifeguard_argv().len() > 1
}

/// For a test (or part of one) the emulator cannot run: under emulation says so with the
/// reason and returns true, and the test skips that part; natively returns false.
/// `reason` names the call the emulator lacks and what was seen failing. Written to the
/// stderr handle itself, which libtest does not capture (it captures `eprintln!` of a
/// passing test), so the line shows with the test's name whether the test passes or not.
/// cargo-nextest shows a passing test's output only when asked, so the line is also
/// appended to the file `TEST_SKIPPED_LOG` names, from which scripts/test-aarch64.sh
/// lists them again at the end.
pub fn skipped_under_emulation(reason: &str) -> bool {
    if !emulated() {
        return false;
    }
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("?");
    let line = format!("SKIPPED UNDER EMULATION: {name}: {reason}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os("TEST_SKIPPED_LOG") {
        // One short append (O_APPEND) per line: tests in other processes write beside it.
        let appended = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = appended {
            panic!("TEST_SKIPPED_LOG={log:?}: {e}");
        }
    }
    true
}
/// How long any condition may take before the test fails; generous for a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// PID 1 of a new PID namespace, as in a container.
    Pid1,
    /// A child of the test, so a child subreaper.
    Subreaper,
    /// PID 1 of a new PID namespace that still sees the host's /proc
    /// (`unshare --pid --fork` without `--mount-proc`, as in some sandboxes).
    Pid1HostProc,
}

pub const MODES: [Mode; 2] = [Mode::Pid1, Mode::Subreaper];

/// Lines a stream produced so far, and a condvar rung on each new line or at its end.
#[derive(Default)]
struct Lines {
    lines: Mutex<(Vec<String>, bool)>,
    rung: Condvar,
}

impl Lines {
    fn collect(stream: impl Read + Send + 'static) -> Arc<Lines> {
        let lines = Arc::new(Lines::default());
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                sink.lines.lock().unwrap().0.push(line);
                sink.rung.notify_all();
            }
            sink.lines.lock().unwrap().1 = true;
            sink.rung.notify_all();
        });
        lines
    }

    fn snapshot(&self) -> Vec<String> {
        self.lines.lock().unwrap().0.clone()
    }

    /// Waits until `pred` holds for some line; returns it. None on timeout or end.
    fn wait(&self, pred: &dyn Fn(&str) -> bool, timeout: Duration) -> Option<String> {
        let until = Instant::now() + timeout;
        let mut guard = self.lines.lock().unwrap();
        loop {
            if let Some(line) = guard.0.iter().find(|l| pred(l)) {
                return Some(line.clone());
            }
            let now = Instant::now();
            if guard.1 || now >= until {
                return None;
            }
            guard = self.rung.wait_timeout(guard, until - now).unwrap().0;
        }
    }
}

/// One running lifeguard.
pub struct Run {
    pub mode: Mode,
    child: Child,
    /// lifeguard's pid as this test sees it.
    pub pid: i32,
    stdout: Arc<Lines>,
    stderr: Arc<Lines>,
}

pub fn start(mode: Mode, args: &[&str]) -> Run {
    start_with(mode, args, |_| {})
}

/// Removes every LIFEGUARD_*, TINI_* and DUMB_INIT_* variable of the test's own
/// environment from `cmd` (lifeguard, or a wrapper that passes its environment on): a
/// developer's or a CI machine's settings must not change what the tests see.
pub fn without_inherited_settings(cmd: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if ["LIFEGUARD_", "TINI_", "DUMB_INIT_"]
            .iter()
            .any(|prefix| text.starts_with(prefix))
        {
            cmd.env_remove(&name);
        }
    }
    cmd
}

/// Removes from `cmd` what cargo and the test runner put in a test's environment
/// (`CARGO_PKG_*`, `CARGO_MANIFEST_DIR`, `OUT_DIR`, lifeguard's `BUILT_*`, `NEXTEST_*`),
/// for a cargo build the test starts: build scripts name variables like these in
/// `rerun-if-env-changed` (ring's names `OUT_DIR` and `CARGO_PKG_NAME`), so a build
/// under the test's environment and one under the shell's would each find the other's
/// stale and build everything again.
pub fn as_from_the_shell(cmd: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        let injected = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "NEXTEST",
        ]
        .iter()
        .any(|prefix| text.starts_with(prefix))
            || [
                "OUT_DIR",
                "BUILT_COMMIT",
                "BUILT_TARGET",
                "CARGO_PRIMARY_PACKAGE",
            ]
            .contains(&&*text);
        if injected {
            cmd.env_remove(&name);
        }
    }
    cmd
}

/// The lifeguard binary as a Command, free of inherited settings.
pub fn lifeguard() -> Command {
    let argv = lifeguard_argv();
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    without_inherited_settings(&mut cmd);
    cmd
}

/// Starts lifeguard with `args`; `tweak` may set the environment, stdin and so on.
pub fn start_with(mode: Mode, args: &[&str], tweak: impl FnOnce(&mut Command)) -> Run {
    start_program(lifeguard_argv(), mode, args, tweak)
}

/// As `start_with`, for the lifeguard binary (and its runner) given by `argv`.
pub fn start_program(
    argv: &[String],
    mode: Mode,
    args: &[&str],
    tweak: impl FnOnce(&mut Command),
) -> Run {
    let mut cmd = match mode {
        Mode::Pid1 => {
            require_root();
            let mut c = Command::new("unshare");
            c.args(["--pid", "--fork", "--mount-proc"])
                .args(no_engine_here())
                .args(argv);
            c
        }
        Mode::Pid1HostProc => {
            require_root();
            let mut c = Command::new("unshare");
            // A mount namespace of its own for no_engine_here's mount; /proc stays the
            // host's.
            c.args(["--pid", "--fork", "--mount"])
                .args(no_engine_here())
                .args(argv);
            c
        }
        Mode::Subreaper => {
            let mut c = Command::new(&argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    without_inherited_settings(&mut cmd);
    // The endpoint is off unless a test asks for it with --listen (the flag wins over
    // its environment twin): parallel tests would fight over the default port.
    cmd.args(args)
        .env("LIFEGUARD_LISTEN", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    tweak(&mut cmd);
    let mut child = cmd.spawn().expect("cannot start lifeguard");
    let stdout = Lines::collect(child.stdout.take().unwrap());
    let stderr = match child.stderr.take() {
        Some(s) => Lines::collect(s),
        None => Arc::new(Lines {
            lines: Mutex::new((vec![], true)),
            rung: Condvar::new(),
        }),
    };
    let pid = match mode {
        Mode::Subreaper => child.id() as i32,
        Mode::Pid1 | Mode::Pid1HostProc => {
            // Found by polling; a lifeguard that is already done leaves pid 0 (nothing
            // to signal, and `send` refuses it).
            let unshare = child.id() as i32;
            wait_until("unshare's child to appear", || {
                match children(unshare).first() {
                    Some(pid) => Some(*pid),
                    None => child.try_wait().ok().flatten().map(|_| 0),
                }
            })
        }
    };
    Run {
        mode,
        child,
        pid,
        stdout,
        stderr,
    }
}

/// What goes between `unshare`'s options and lifeguard so that its PID namespace looks
/// like a container of no engine: where the tests themselves run in a Docker container,
/// `/.dockerenv` is there for every process, and lifeguard as PID 1 would take the
/// defaults it gives a plain Docker container (no drain delay, a 9 s grace) — right for
/// that container's own PID 1, not for the tests' namespaces. In the namespace's own
/// mount namespace the file is covered by /dev/null, no longer the regular file Docker
/// writes; tests/container.rs runs the real thing.
pub fn no_engine_here() -> Vec<String> {
    if !std::path::Path::new("/.dockerenv").is_file() {
        return Vec::new();
    }
    [
        "sh",
        "-c",
        "mount --bind /dev/null /.dockerenv && exec \"$@\"",
        "sh",
    ]
    .map(String::from)
    .to_vec()
}

/// Starts lifeguard through `wrapper` (e.g. `env --block-signal=USR2`, `prlimit
/// --nofile=128:128`), which then execs it: lifeguard inherits what the wrapper sets.
/// As PID 1 the wrapper runs inside `unshare`, which would otherwise undo some of it
/// (it resets SIGCHLD to wait for its child).
pub fn start_under(mode: Mode, wrapper: &[&str], args: &[&str]) -> Run {
    start_under_with(mode, wrapper, args, |_| {})
}

/// As `start_under`; `tweak` may then set the environment and so on.
pub fn start_under_with(
    mode: Mode,
    wrapper: &[&str],
    args: &[&str],
    tweak: impl FnOnce(&mut Command),
) -> Run {
    let wrapper: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
    start_with(mode, args, move |c| {
        let program = c.get_program().to_owned();
        let original: Vec<std::ffi::OsString> = c.get_args().map(|a| a.to_owned()).collect();
        // As PID 1: unshare's own options, then (the runner and) lifeguard and its
        // arguments.
        let first = &lifeguard_argv()[0];
        let lifeguard_at = original
            .iter()
            .position(|a| a == first.as_str())
            .unwrap_or(0);
        let mut wrapped = Command::new(if mode == Mode::Subreaper {
            std::ffi::OsStr::new(&wrapper[0])
        } else {
            program.as_os_str()
        });
        match mode {
            Mode::Pid1 | Mode::Pid1HostProc => {
                wrapped
                    .args(&original[..lifeguard_at])
                    .args(&wrapper)
                    .args(&original[lifeguard_at..]);
            }
            Mode::Subreaper => {
                wrapped.args(&wrapper[1..]).arg(&program).args(&original);
            }
        }
        without_inherited_settings(&mut wrapped).env("LIFEGUARD_LISTEN", "off");
        wrapped
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        tweak(&mut wrapped);
        *c = wrapped;
    })
}

/// Why in-flight counting (metrics and the drain's hold) cannot be tested under qemu-user:
/// it reads the kernel's sockets over sock_diag netlink, and qemu 7.2 opens only
/// NETLINK_ROUTE, NETLINK_AUDIT and NETLINK_KOBJECT_UEVENT sockets for a guest.
pub const NO_SOCK_DIAG_UNDER_EMULATION: &str = "qemu-user refuses NETLINK_SOCK_DIAG sockets \
     (lifeguard: \"cannot count in-flight requests: Protocol not supported \
     (os error 93)\"), so no request is ever in flight";

/// For a test of orphans (processes that left the app's tree): true, after saying why,
/// for `Mode::Subreaper` under emulation. qemu 7.2 refuses PR_SET_CHILD_SUBREAPER with
/// EINVAL (lifeguard: "cannot become a child subreaper: Invalid argument"), so orphans
/// go to the real init and lifeguard can neither see nor kill them. As PID 1 they are
/// lifeguard's without asking, and those runs go ahead.
pub fn orphans_skipped(mode: Mode) -> bool {
    mode == Mode::Subreaper
        && skipped_under_emulation(
            "Subreaper mode: qemu-user refuses PR_SET_CHILD_SUBREAPER (EINVAL), so an \
             orphan below the app is re-parented past lifeguard, which can neither wait for \
             it nor kill it (observed: a daemon's TERM never came and it outlived lifeguard; \
             the app behind a shell that died was left running)",
        )
}

/// A tool the tests run (HAProxy, Prometheus, promtool, tini...) from its Debian package,
/// or a loud stop naming it.
pub fn installed(name: &str) -> std::path::PathBuf {
    for dir in [
        "/usr/sbin",
        "/usr/bin",
        "/usr/local/bin",
        "/usr/local/sbin",
        "/bin",
    ] {
        let path = std::path::PathBuf::from(dir).join(name);
        if path.exists() {
            return path;
        }
    }
    panic!("THIS TEST CANNOT RUN: `{name}` is not installed (scripts/test.sh installs it)");
}

/// Root is needed for PID namespaces and for cgroups; say so instead of passing.
pub fn require_root() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!("THIS TEST CANNOT RUN: it needs root (unshare --pid). Run the suite as root, as .ci/run does.");
    }
}

/// Polls `probe` until it returns Some, or panics after PATIENCE naming `what`.
pub fn wait_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if Instant::now() > until {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// As `wait_until`, with a limit of its own: for what may take long on a machine at its
/// quota.
pub fn wait_until_patient<T>(limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + limit;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < until, "not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Direct children of `pid` (zombies included: they stay listed until reaped).
pub fn children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Every live process below `pid`.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for c in children(p) {
            found.push(c);
            frontier.push(c);
        }
    }
    found
}

/// Single-letter process state (R, S, T, Z...), None once the process is gone.
pub fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim().chars().next()
}

pub fn alive(pid: i32) -> bool {
    matches!(state(pid), Some(s) if s != 'Z' && s != 'X')
}

pub fn send(pid: i32, signal: i32) {
    assert!(pid > 1, "refusing to signal pid {pid}");
    // SAFETY: kill has no memory preconditions; pid > 1 never reaches the test itself
    // or a whole group.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
}

impl Run {
    /// Sends `signal` to lifeguard (never to the test process).
    pub fn signal(&self, signal: i32) {
        send(self.pid, signal);
    }

    /// Waits for a stdout line equal to `line`.
    pub fn expect_line(&self, line: &str) {
        self.expect(|l| l == line, line);
    }

    /// Waits for a stdout line matching `pred`, returns it.
    pub fn expect(&self, pred: impl Fn(&str) -> bool, what: &str) -> String {
        match self.stdout.wait(&pred, PATIENCE) {
            Some(line) => line,
            None => panic!(
                "[{:?}] no stdout line {what:?}\n{}",
                self.mode,
                self.transcript()
            ),
        }
    }

    /// Waits for a stderr line containing `text`.
    pub fn expect_log(&self, text: &str) -> String {
        match self.stderr.wait(&|l| l.contains(text), PATIENCE) {
            Some(line) => line,
            None => panic!(
                "[{:?}] no log line with {text:?}\n{}",
                self.mode,
                self.transcript()
            ),
        }
    }

    pub fn ready(&self) {
        self.expect_line("ready");
    }

    pub fn stdout(&self) -> Vec<String> {
        self.stdout.snapshot()
    }

    pub fn stderr(&self) -> Vec<String> {
        self.stderr.snapshot()
    }

    /// The value after `prefix ` in the first stdout line that starts with it.
    pub fn value(&self, prefix: &str) -> String {
        let line = self.expect(|l| l.starts_with(&format!("{prefix} ")), prefix);
        line[prefix.len() + 1..].to_string()
    }

    pub fn transcript(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}",
            self.stdout().join("\n"),
            self.stderr().join("\n")
        )
    }

    /// The app's pid as seen from the test (the direct child of lifeguard).
    pub fn app_pid(&self) -> i32 {
        wait_until("the app to be spawned", || {
            children(self.pid).first().copied()
        })
    }

    /// Waits for lifeguard to exit; its exit code (as unshare passes it on).
    pub fn wait_exit(&mut self) -> i32 {
        let until = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the output threads drain what was written before the exit.
                self.stdout.wait(&|_| false, Duration::from_secs(2));
                self.stderr.wait(&|_| false, Duration::from_secs(2));
                return status.code().unwrap_or_else(|| {
                    panic!(
                        "lifeguard died by a signal: {status:?}\n{}",
                        self.transcript()
                    )
                });
            }
            if Instant::now() > until {
                // As PID 1 the child is unshare: killing it alone would leave lifeguard
                // and the app running.
                self.terminate();
                panic!(
                    "[{:?}] lifeguard did not exit\n{}",
                    self.mode,
                    self.transcript()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// lifeguard's exit code if it has exited (as unshare passes it on; 128 + the
    /// signal for a death by a signal), None while it runs. Does not wait.
    pub fn try_exit(&mut self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.try_wait().unwrap()?;
        self.stdout.wait(&|_| false, Duration::from_secs(2));
        self.stderr.wait(&|_| false, Duration::from_secs(2));
        Some(
            status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        )
    }

    /// Waits for the exit and checks the code.
    pub fn expect_exit(&mut self, code: i32) {
        let got = self.wait_exit();
        assert_eq!(
            got,
            code,
            "[{:?}] exit code\n{}",
            self.mode,
            self.transcript()
        );
    }
}

impl Run {
    /// SIGKILL to lifeguard, everything below it, and the child this run started.
    fn terminate(&mut self) {
        if self.pid > 1 {
            let doomed = descendants(self.pid);
            // SAFETY: kill with pids this run started (all > 1).
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                for pid in doomed {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // A failed test must not leave lifeguard (or, through it, the app) behind.
        if self.child.try_wait().ok().flatten().is_none() {
            self.terminate();
        }
    }
}

/// A run of the default testapp that has received SIGTERM and is held in a long drain
/// (60 s), which the test then cuts short its own way.
pub fn start_draining(mode: Mode) -> Run {
    let run = start(
        mode,
        &args(&["-v", "--drain-delay", "60s", "--grace", "90s"], &[]),
    );
    run.ready();
    run.signal(libc::SIGTERM);
    run.expect_log("draining");
    run
}

/// A pipe's writing end whose reading end is already closed: every write to it fails
/// with EPIPE (and raises SIGPIPE in the writer).
pub fn broken_pipe() -> Stdio {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    Stdio::from(write)
}

/// The testapp's command line after `--`.
pub fn app(extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec!["--", TESTAPP];
    v.extend_from_slice(extra);
    v
}

pub fn args<'a>(flags: &[&'a str], app_args: &[&'a str]) -> Vec<&'a str> {
    let mut v = flags.to_vec();
    v.push("--");
    v.push(TESTAPP);
    v.extend_from_slice(app_args);
    v
}

// ---------------------------------------------------------------------------------------
// HTTP on loopback.

/// A port nothing listens on right now, for a server a test starts a moment later.
///
/// Taken below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, 32768 to
/// 60999 by default), not with a bind to port 0: a port from that range is free only
/// until the next outgoing connection of any test running beside this one picks it as
/// its local port, and the server then fails with EADDRINUSE. Below the range only
/// another explicit bind can take it, and the ports this process hands out never
/// repeat (a cursor, started at a place of its own for each test binary).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    static CURSOR: AtomicU32 = AtomicU32::new(0);
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .min(65_536);
    if ephemeral_from < LOW + 1_000 {
        // An unusual range: nothing below it to take from.
        return TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
    }
    let span = ephemeral_from - LOW;
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..span {
        let at = start.wrapping_add(CURSOR.fetch_add(1, Ordering::Relaxed));
        let port = (LOW + at % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 between {LOW} and {ephemeral_from}");
}

/// One request on a fresh connection: (status, body), or the connect/read error.
pub fn request(port: u16, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    request_at(([127, 0, 0, 1], port).into(), method, path)
}

/// `request` to any address (`[::1]`, say).
pub fn request_at(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let text = exchange_at(
        addr,
        &format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.trim().to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// Sends `raw` on a fresh connection and returns everything that comes back.
pub fn exchange(port: u16, raw: &str) -> std::io::Result<String> {
    exchange_at(([127, 0, 0, 1], port).into(), raw)
}

/// POSTs `body` to a test stand-in's control `path` on 127.0.0.1 (a fault to inject,
/// a mode to answer in), which must answer 200.
pub fn tell(port: u16, path: &str, body: &str) {
    let raw = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = exchange(port, &raw).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"),
        "{path} {body}: {answer}"
    );
}

fn exchange_at(addr: SocketAddr, raw: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(raw.as_bytes())?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text)
}

pub fn get(port: u16, path: &str) -> (u16, String) {
    request(port, "GET", path).unwrap_or_else(|e| panic!("GET {path} on {port}: {e}"))
}

/// Waits until GET `path` answers `status` with `body`.
pub fn wait_for_answer(port: u16, path: &str, status: u16, body: &str) {
    wait_until(&format!("{path} to answer {status} {body}"), || {
        (request(port, "GET", path).ok()? == (status, body.to_string())).then_some(())
    });
}

/// `/metrics` as `name{labels}` → value (the answer must be 200).
pub fn scrape(port: u16) -> std::collections::HashMap<String, f64> {
    let (status, body) = get(port, "/metrics");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

pub fn listen_flag(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

// ---------------------------------------------------------------------------------------
// Other builds of lifeguard.

/// Builds lifeguard and the testapp with `cargo build ARGS` in a target directory of
/// their own under target/ (the one `cargo test` holds is locked while tests run);
/// returns the directory the binaries are in. `what` names the build in the failure.
///
/// Where scripts/test.sh has just made the build itself, it names the directory in
/// `TEST_BUILT_TARGETS` (comma-separated), and cargo is not asked again: the test runner
/// starts each test in a process of its own, and a dozen cargos asking at once whether
/// a build is fresh queue on cargo's locks for most of a minute.
pub fn build(dir: &str, cargo_args: &[&str], what: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let target_dir = root.join("target").join(dir);
    let built = std::env::var("TEST_BUILT_TARGETS").unwrap_or_default();
    if built.split(',').any(|d| d == dir) {
        return target_dir;
    }
    let out = as_from_the_shell(&mut Command::new(env!("CARGO")))
        .current_dir(root)
        .arg("build")
        .args(cargo_args)
        .args(["--bin", "lifeguard", "--bin", "lifeguard-testapp"])
        .env("CARGO_TARGET_DIR", &target_dir)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .expect("cannot run cargo");
    assert!(out.success(), "THIS TEST CANNOT RUN: {what} failed");
    target_dir
}

/// The fault-injection build of lifeguard: release profile without LTO
/// (`[profile.faults]`), `--features fault-injection` (src/faults.rs), built once per
/// test binary.
pub fn fault_build() -> &'static [String] {
    static ARGV: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    ARGV.get_or_init(|| {
        let dir = build(
            "faults",
            &[
                "--profile",
                "faults",
                "--locked",
                "--features",
                "fault-injection",
            ],
            "the fault-injection build",
        );
        vec![dir.join("faults").join("lifeguard").display().to_string()]
    })
}

/// lifeguard's helper process (`lifeguard-helper`), a child of lifeguard.
pub fn helper_of(run: &Run) -> i32 {
    wait_until("the helper process", || {
        children(run.pid).into_iter().find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "lifeguard-helpe")
        })
    })
}

/// The shipped binaries: static musl, release profile (as scripts/build-static.sh
/// makes them), built once per test binary.
pub const STATIC_TARGET: &str = "x86_64-unknown-linux-musl";

pub fn static_binaries() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        build(
            "container",
            &["--release", "--locked", "--target", STATIC_TARGET],
            &format!("the static build (rustup target add {STATIC_TARGET})"),
        )
        .join(STATIC_TARGET)
        .join("release")
    })
    .clone()
}

/// The build without the AWS SDK (`--no-default-features`), static, in the `slim`
/// profile it ships in (scripts/test-slim.sh builds the same), built once per test
/// binary.
pub fn slim_binaries() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        build(
            "slim",
            &[
                "--profile",
                "slim",
                "--locked",
                "--no-default-features",
                "--target",
                STATIC_TARGET,
            ],
            &format!("the slim static build (rustup target add {STATIC_TARGET})"),
        )
        .join(STATIC_TARGET)
        .join("slim")
    })
    .clone()
}
