//! lifeguard's own log lines on stderr: `lifeguard: ...` text or one JSON object per
//! line. Once supervision starts, no line waits for stderr: they are written without
//! blocking (a non-blocking description of stderr's pipe of lifeguard's own, or
//! MSG_DONTWAIT on a socket), what does not fit waits in a bounded queue, and only
//! where that cannot be had does a writer thread take them. A stalled stderr (a
//! blocking log driver) then costs log lines, never a delayed signal or deadline. A
//! failed write (closed stderr) is dropped silently.
//!
//! The supervision thread has a queue of its own, which no other thread touches: the
//! helpers share one behind a lock, and a helper that stalls or panics while holding
//! it cannot make supervision wait. Each line is one write, so lines of
//! the two queues never mix mid-line on a pipe (writes up to PIPE_BUF are atomic).
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt::{self, Display, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::kernel::QuickStderr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 0,
    Warn = 1,
    /// Shown by default with warnings: the few lines an operator reading `docker logs`
    /// expects of a stop (SIGTERM received, the drain's end, the stop signal relayed,
    /// the app's exit, lifeguard's exit code).
    Notice = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

impl Level {
    /// 0 = errors only, 1 = warnings and notices (the default), 2 = info, 3 = debug,
    /// 4+ = trace: the same scale as `TINI_VERBOSITY`.
    pub fn from_verbosity(n: i64) -> Level {
        match n {
            i64::MIN..=0 => Level::Error,
            1 => Level::Notice,
            2 => Level::Info,
            3 => Level::Debug,
            _ => Level::Trace,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Notice => "notice",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Notice as u8);
static JSON: AtomicBool = AtomicBool::new(false);
/// Where lines go once supervision starts; plain blocking writes before.
static SINK: OnceLock<Sink> = OnceLock::new();
/// The helper process's writer thread, where PID 1 needed one (`become_helper`).
static HELPER_SINK: OnceLock<Sink> = OnceLock::new();
/// Lines thrown away because the queue was full.
static DROPPED: AtomicU64 = AtomicU64::new(0);
const QUEUE_LINES: usize = 1024;

enum Sink {
    /// Writes that never wait (kernel::QuickStderr); a line that does not fit waits in
    /// a queue for the next line, or for the flush at exit: the helpers' queue here,
    /// the supervision thread's own in `OWN`.
    Quick {
        out: QuickStderr,
        shared: Mutex<Queue>,
    },
    /// The writer thread's queue, where stderr cannot be written without waiting.
    Thread(SyncSender<Message>),
    /// Neither could be had: warnings and errors are written directly, the rest dropped.
    WarningsOnly,
}

thread_local! {
    /// The supervision thread's queue (`None` on every other thread).
    // ManuallyDrop: a thread-local with a destructor costs every start a pthread key
    // and two sigprocmask calls to register it, for a queue that lives as long as the
    // process anyway (flushed by `flush_own`, not by a destructor).
    static OWN: RefCell<Option<std::mem::ManuallyDrop<Queue>>> = const { RefCell::new(None) };
}

/// Lines not written yet; the front one from byte `offset` on.
#[derive(Default)]
struct Queue {
    lines: VecDeque<String>,
    offset: usize,
}

impl Queue {
    fn push(&mut self, line: String, out: &QuickStderr) {
        self.enqueue(line);
        self.drain(out);
    }

    fn enqueue(&mut self, line: String) {
        if self.lines.len() >= QUEUE_LINES {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        } else {
            self.lines.push_back(line);
        }
    }

    /// Writes what the reader takes now. Returns whether the queue is empty.
    fn drain(&mut self, out: &QuickStderr) -> bool {
        loop {
            let Some(front) = self.lines.front() else {
                let dropped = DROPPED.swap(0, Ordering::Relaxed);
                if dropped == 0 {
                    return true;
                }
                self.lines.push_back(dropped_line(dropped));
                continue;
            };
            match out.write(&front.as_bytes()[self.offset..]) {
                Ok(n) if self.offset + n < front.len() => self.offset += n,
                Ok(_) => {
                    self.lines.pop_front();
                    self.offset = 0;
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                // A closed stderr: the line is lost, silently (module note).
                Err(_) => {
                    self.lines.pop_front();
                    self.offset = 0;
                }
            }
        }
    }
}

fn dropped_line(dropped: u64) -> String {
    text_or_json_line(
        Level::Warn,
        &format!("{dropped} log lines dropped: stderr was not keeping up"),
        &[],
    )
}

enum Message {
    Line(String),
    /// Answered once every line queued before it has been written.
    Flush(mpsc::Sender<()>),
}

/// Sets up writing for supervision: lines must never make it wait for stderr. Call it
/// on the supervision thread (it gets a queue of its own), after signals are blocked
/// (a writer thread inherits the mask).
pub fn start_writer() {
    let sink = match QuickStderr::open() {
        Some(out) => Sink::Quick {
            out,
            shared: Mutex::new(Queue::default()),
        },
        None => writer_thread(),
    };
    let _ = SINK.set(sink);
    OWN.with(|own| *own.borrow_mut() = Some(std::mem::ManuallyDrop::new(Queue::default())));
}

/// In the helper process, first thing after the fork: the supervision thread's own
/// queue stays with supervision (this copy of it would be written by nobody, and lines
/// queued before the fork are PID 1's to write), and the helper writes through stderr
/// descriptions of its own. PID 1's non-blocking description of stderr is not the
/// helper's to share: a file status flag is the description's, and a helper (or a
/// library of its) that cleared O_NONBLOCK on it would make PID 1's next write wait for
/// the reader. The helper closed its copy at the fork (kernel/helper_process.rs) and
/// opens its own; a writer thread, if PID 1 has one, is not in this process either.
pub fn become_helper() {
    OWN.with(|own| *own.borrow_mut() = None);
    let sink = match SINK.get() {
        Some(Sink::Quick { .. }) => match QuickStderr::open() {
            Some(out) => Sink::Quick {
                out,
                shared: Mutex::new(Queue::default()),
            },
            None => writer_thread(),
        },
        Some(Sink::Thread(_)) => writer_thread(),
        Some(Sink::WarningsOnly) | None => Sink::WarningsOnly,
    };
    let _ = HELPER_SINK.set(sink);
}

/// Where lines go in this process.
fn sink() -> Option<&'static Sink> {
    HELPER_SINK.get().or_else(|| SINK.get())
}

/// The writer thread, for a stderr that cannot be written without waiting.
fn writer_thread() -> Sink {
    let (tx, rx) = mpsc::sync_channel::<Message>(QUEUE_LINES);
    let (blocked_tx, blocked) = mpsc::channel();
    let spawned = crate::kernel::spawn_thread(
        "log",
        Box::new(move || {
            let _ = blocked_tx.send(());
            for message in rx {
                match message {
                    Message::Line(line) => write_stderr(&line),
                    Message::Flush(done) => {
                        let _ = done.send(());
                    }
                }
                let dropped = DROPPED.swap(0, Ordering::Relaxed);
                if dropped > 0 {
                    write_stderr(&dropped_line(dropped));
                }
            }
        }),
    );
    match spawned {
        Ok(_) => {
            // Until the thread has re-blocked the C library's reserved signals, one of
            // them would be delivered to it, with its default action (helper/threads.rs).
            let _ = blocked.recv();
            Sink::Thread(tx)
        }
        Err(err) => {
            // No thread (a pids limit reached, say): writing everything on the
            // supervision thread would bring back the stall the writer exists to
            // prevent, so only warnings and errors are written, and this is said once.
            write_stderr(&text_or_json_line(
                Level::Warn,
                &format!("cannot start the log writer thread ({err}): info and debug lines are dropped, so that a stalled stderr cannot delay supervision"),
                &[],
            ));
            Sink::WarningsOnly
        }
    }
}

/// Waits (at most `timeout`) until the queued lines are written; before exiting.
pub fn flush(timeout: Duration) {
    let until = std::time::Instant::now() + timeout;
    match sink() {
        Some(Sink::Quick { out, shared }) => {
            flush_own(timeout);
            while !shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .drain(out)
                && std::time::Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Some(Sink::Thread(queue)) => {
            let (done, wait) = mpsc::channel();
            if queue.send_timeout_compat(Message::Flush(done), timeout) {
                let _ =
                    wait.recv_timeout(until.saturating_duration_since(std::time::Instant::now()));
            }
        }
        Some(Sink::WarningsOnly) | None => {}
    }
}

/// Waits (at most `timeout`) until this thread's own queue is written (the supervision
/// thread's; nothing elsewhere).
pub fn flush_own(timeout: Duration) {
    let until = std::time::Instant::now() + timeout;
    let Some(Sink::Quick { out, .. }) = sink() else {
        return;
    };
    with_own(|queue| {
        while !queue.drain(out) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
    });
}

/// Writes what the supervision thread's own queue holds and stderr takes now; the loop
/// calls it every turn.
pub fn pump() {
    if let Some(Sink::Quick { out, .. }) = sink() {
        with_own(|queue| queue.drain(out));
    }
}

/// Whether lines wait in this thread's own queue (the loop then wakes soon to write
/// them).
pub fn pending() -> bool {
    with_own(|queue| !queue.lines.is_empty()).unwrap_or(false)
}

/// Runs `f` on this thread's own queue: None on a thread without one, or inside a log
/// line already using it (a Display that logs).
fn with_own<R>(f: impl FnOnce(&mut Queue) -> R) -> Option<R> {
    OWN.with(|own| own.try_borrow_mut().ok()?.as_mut().map(|queue| f(queue)))
}

trait SendTimeout {
    fn send_timeout_compat(&self, message: Message, timeout: Duration) -> bool;
}

impl SendTimeout for SyncSender<Message> {
    /// `SyncSender` has no send with a timeout: retry `try_send` until it fits or time is up.
    fn send_timeout_compat(&self, mut message: Message, timeout: Duration) -> bool {
        let until = std::time::Instant::now() + timeout;
        loop {
            match self.try_send(message) {
                Ok(()) => return true,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(back)) if std::time::Instant::now() < until => {
                    message = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TrySendError::Full(_)) => return false,
            }
        }
    }
}

fn write_stderr(line: &str) {
    // One write per line so lines from lifeguard and the app never interleave mid-line;
    // the error is ignored on purpose (see the module note).
    use std::os::fd::AsFd;
    let _ = crate::kernel::write_whole(std::io::stderr().as_fd(), line.as_bytes());
}

pub fn init(level: Level, format: Format) {
    LEVEL.store(level as u8, Ordering::Relaxed);
    JSON.store(format == Format::Json, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// A key and value logged with a message: `pid=12` in text, `"pid":12` in JSON.
pub type Field<'a> = (&'a str, &'a dyn Display);

pub fn error(msg: impl Display, fields: &[Field]) {
    log(Level::Error, msg, fields)
}
pub fn warn(msg: impl Display, fields: &[Field]) {
    log(Level::Warn, msg, fields)
}
pub fn notice(msg: impl Display, fields: &[Field]) {
    log(Level::Notice, msg, fields)
}
pub fn info(msg: impl Display, fields: &[Field]) {
    log(Level::Info, msg, fields)
}
pub fn debug(msg: impl Display, fields: &[Field]) {
    log(Level::Debug, msg, fields)
}

/// An error from the panic hook: never waits for a lock (the panicking thread may hold
/// the queue's), so a line that cannot be queued now is written directly.
pub fn error_now(msg: impl Display) {
    let line = text_or_json_line(Level::Error, &msg, &[]);
    match sink() {
        Some(Sink::Quick { out, shared }) => {
            if let Some(line) = own_push(line) {
                match shared.try_lock() {
                    Ok(mut queue) => queue.push(line, out),
                    Err(_) => write_stderr(&line),
                }
            }
        }
        Some(Sink::Thread(queue)) => {
            let _ = queue.try_send(Message::Line(line));
        }
        Some(Sink::WarningsOnly) | None => write_stderr(&line),
    }
}

/// Queues `line` on this thread's own queue if it has one (the supervision thread);
/// gives it back otherwise. The supervision thread's lines are written by `pump`, at
/// the end of each turn of its loop: a signal is relayed before the lines that tell of
/// it are written (a write to a pipe can wake its reader onto the CPU the relay needs).
fn own_push(line: String) -> Option<String> {
    let mut line = Some(line);
    with_own(|queue| line.take().map(|line| queue.enqueue(line)));
    line
}

pub fn log(level: Level, msg: impl Display, fields: &[Field]) {
    if !enabled(level) {
        return;
    }
    let sink = sink();
    if level > Level::Notice && matches!(sink, Some(Sink::WarningsOnly)) {
        return;
    }
    let line = text_or_json_line(level, &msg, fields);
    match sink {
        Some(Sink::Quick { out, shared }) => {
            if let Some(line) = own_push(line) {
                let mut queue = shared
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // The test build's fault: a helper that panics holding this lock.
                crate::faults::point("log-locked");
                queue.push(line, out);
            }
        }
        Some(Sink::Thread(queue)) => {
            if let Err(TrySendError::Full(_)) = queue.try_send(Message::Line(line)) {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        Some(Sink::WarningsOnly) | None => write_stderr(&line),
    }
}

fn text_or_json_line(level: Level, msg: &dyn Display, fields: &[Field]) -> String {
    if JSON.load(Ordering::Relaxed) {
        json_line(level, msg, fields, SystemTime::now())
    } else {
        text_line(level, msg, fields)
    }
}

fn text_line(level: Level, msg: &dyn Display, fields: &[Field]) -> String {
    let mut line = String::from("lifeguard: ");
    if level <= Level::Warn {
        let _ = write!(line, "{}: ", level.name());
    }
    let _ = write!(line, "{msg}");
    for (key, value) in fields {
        let value = value.to_string();
        if value.is_empty() || value.contains(char::is_whitespace) || value.contains('"') {
            let _ = write!(line, " {key}={value:?}");
        } else {
            let _ = write!(line, " {key}={value}");
        }
    }
    line.push('\n');
    line
}

/// UTC to the millisecond, as log shippers parse it (`2023-11-14T22:13:20.123Z`); a
/// clock before 1970 is written as the epoch.
struct Rfc3339Millis(SystemTime);

impl Display for Rfc3339Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let since = self.0.duration_since(UNIX_EPOCH).unwrap_or_default();
        let (days, secs) = (since.as_secs() / 86_400, since.as_secs() % 86_400);
        // Days to a proleptic Gregorian date in eras of 400 years (146,097 days), counted
        // from 0000-03-01 so that the leap day ends a year: H. Hinnant, "chrono-Compatible
        // Low-Level Date Algorithms", civil_from_days.
        let z = days + 719_468;
        let (era, day_of_era) = (z / 146_097, z % 146_097);
        let year_of_era =
            (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let shifted_month = (5 * day_of_year + 2) / 153;
        let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
        let month = if shifted_month < 10 {
            shifted_month + 3
        } else {
            shifted_month - 9
        };
        let year = year_of_era + era * 400 + u64::from(month <= 2);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            secs / 3_600,
            secs % 3_600 / 60,
            secs % 60,
            since.subsec_millis()
        )
    }
}

fn json_line(level: Level, msg: &dyn Display, fields: &[Field], now: SystemTime) -> String {
    let mut line = String::from("{");
    let _ = write!(
        line,
        "\"time\":\"{}\",\"level\":\"{}\",\"msg\":",
        Rfc3339Millis(now),
        level.name()
    );
    json_string(&mut line, &msg.to_string());
    for (key, value) in fields {
        line.push(',');
        json_string(&mut line, key);
        line.push(':');
        let value = value.to_string();
        if is_json_integer(&value) {
            line.push_str(&value);
        } else {
            json_string(&mut line, &value);
        }
    }
    line.push_str("}\n");
    line
}

fn is_json_integer(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
}

fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Displays a list as `a,b,c` in a log field.
pub struct Joined<'a, T: Display>(pub &'a [T]);

impl<T: Display> Display for Joined<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_char(',')?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn text_lines_carry_the_prefix_and_fields() {
        let line = text_line(
            Level::Info,
            &"app started",
            &[("pid", &42), ("cmd", &"sh -c x")],
        );
        assert_eq!(line, "lifeguard: app started pid=42 cmd=\"sh -c x\"\n");
        let line = text_line(Level::Warn, &"no endpoint", &[]);
        assert_eq!(line, "lifeguard: warning: no endpoint\n");
    }

    #[test]
    fn json_lines_are_one_object_with_typed_values() {
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let line = json_line(
            Level::Info,
            &"say \"hi\"\n",
            &[("pid", &7), ("signal", &"SIGTERM"), ("code", &"007")],
            at,
        );
        assert_eq!(
            line,
            "{\"time\":\"2023-11-14T22:13:20.123Z\",\"level\":\"info\",\"msg\":\"say \\\"hi\\\"\\n\",\
             \"pid\":7,\"signal\":\"SIGTERM\",\"code\":\"007\"}\n"
        );
    }

    #[test]
    fn timestamps_are_utc_dates_across_leap_days_and_centuries() {
        for (secs, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400, "2000-02-29T00:00:00.000Z"),
            (951_868_799, "2000-02-29T23:59:59.000Z"),
            (1_709_251_199, "2024-02-29T23:59:59.000Z"),
            (1_735_689_599, "2024-12-31T23:59:59.000Z"),
            (4_107_542_400, "2100-03-01T00:00:00.000Z"),
        ] {
            let at = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(Rfc3339Millis(at).to_string(), text);
        }
    }

    #[test]
    fn verbosity_scale_matches_tini() {
        assert_eq!(Level::from_verbosity(0), Level::Error);
        assert_eq!(Level::from_verbosity(1), Level::Notice);
        assert_eq!(Level::from_verbosity(2), Level::Info);
        assert_eq!(Level::from_verbosity(9), Level::Trace);
    }
}
