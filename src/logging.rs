//! lifeguard's own log lines on stderr (DESIGN §7): `lifeguard: ...` text or one JSON
//! object per line. Once supervision starts, no line waits for stderr: they are written
//! without blocking (a non-blocking description of stderr's pipe of lifeguard's own, or
//! MSG_DONTWAIT on a socket), what does not fit waits in a bounded queue, and only
//! where that cannot be had does a writer thread take them. A stalled stderr (a
//! blocking log driver) then costs log lines, never a delayed signal or deadline. A
//! failed write (closed stderr) is dropped silently.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fmt::{self, Display, Write as _};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use crate::kernel::QuickStderr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
    Trace = 4,
}

impl Level {
    /// 0 = errors only, 1 = warnings (the default), 2 = info, 3 = debug, 4+ = trace: the
    /// same scale as `TINI_VERBOSITY`.
    pub fn from_verbosity(n: i64) -> Level {
        match n {
            i64::MIN..=0 => Level::Error,
            1 => Level::Warn,
            2 => Level::Info,
            3 => Level::Debug,
            _ => Level::Trace,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warning",
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

static LEVEL: AtomicU8 = AtomicU8::new(Level::Warn as u8);
static JSON: AtomicBool = AtomicBool::new(false);
/// Where lines go once supervision starts; plain blocking writes before.
static SINK: OnceLock<Sink> = OnceLock::new();
/// Lines thrown away because the queue was full.
static DROPPED: AtomicU64 = AtomicU64::new(0);
const QUEUE_LINES: usize = 1024;

enum Sink {
    /// Writes that never wait (kernel::QuickStderr); a line that does not fit waits in
    /// the queue for the next line, or for the flush at exit.
    Quick(Mutex<Quick>),
    /// The writer thread's queue, where stderr cannot be written without waiting.
    Thread(SyncSender<Message>),
    /// Neither could be had: warnings and errors are written directly, the rest dropped.
    WarningsOnly,
}

struct Quick {
    out: QuickStderr,
    /// Lines not written yet; the front one from byte `offset` on.
    queue: VecDeque<String>,
    offset: usize,
}

impl Quick {
    fn push(&mut self, line: String) {
        if self.queue.len() >= QUEUE_LINES {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        } else {
            self.queue.push_back(line);
        }
        self.drain();
    }

    /// Writes what the reader takes now. Returns whether the queue is empty.
    fn drain(&mut self) -> bool {
        loop {
            let Some(front) = self.queue.front() else {
                let dropped = DROPPED.swap(0, Ordering::Relaxed);
                if dropped == 0 {
                    return true;
                }
                self.queue.push_back(dropped_line(dropped));
                continue;
            };
            match self.out.write(&front.as_bytes()[self.offset..]) {
                Ok(n) if self.offset + n < front.len() => self.offset += n,
                Ok(_) => {
                    self.queue.pop_front();
                    self.offset = 0;
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                // A closed stderr: the line is lost, silently (module note).
                Err(_) => {
                    self.queue.pop_front();
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
/// after signals are blocked (a writer thread inherits the mask).
pub fn start_writer() {
    let sink = match QuickStderr::open() {
        Some(out) => Sink::Quick(Mutex::new(Quick {
            out,
            queue: VecDeque::new(),
            offset: 0,
        })),
        None => writer_thread(),
    };
    let _ = SINK.set(sink);
}

/// The writer thread, for a stderr that cannot be written without waiting.
fn writer_thread() -> Sink {
    let (tx, rx) = mpsc::sync_channel::<Message>(QUEUE_LINES);
    let (blocked_tx, blocked) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("log".into())
        .spawn(move || {
            crate::kernel::reblock_every_signal();
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
        });
    match spawned {
        Ok(_) => {
            // Until the thread has re-blocked the C library's reserved signals, one of
            // them would be delivered to it, with its default action (runtime.rs).
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
    match SINK.get() {
        Some(Sink::Quick(quick)) => {
            while !quick
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .drain()
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
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
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
    match SINK.get() {
        Some(Sink::Quick(quick)) => match quick.try_lock() {
            Ok(mut quick) => quick.push(line),
            Err(_) => write_stderr(&line),
        },
        Some(Sink::Thread(queue)) => {
            let _ = queue.try_send(Message::Line(line));
        }
        Some(Sink::WarningsOnly) | None => write_stderr(&line),
    }
}

pub fn log(level: Level, msg: impl Display, fields: &[Field]) {
    if !enabled(level) {
        return;
    }
    let sink = SINK.get();
    if level > Level::Warn && matches!(sink, Some(Sink::WarningsOnly)) {
        return;
    }
    let line = text_or_json_line(level, &msg, fields);
    match sink {
        Some(Sink::Quick(quick)) => quick
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(line),
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

fn json_line(level: Level, msg: &dyn Display, fields: &[Field], now: SystemTime) -> String {
    let mut line = String::from("{");
    let _ = write!(
        line,
        "\"time\":\"{}\",\"level\":\"{}\",\"msg\":",
        humantime::format_rfc3339_millis(now),
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
    fn verbosity_scale_matches_tini() {
        assert_eq!(Level::from_verbosity(0), Level::Error);
        assert_eq!(Level::from_verbosity(1), Level::Warn);
        assert_eq!(Level::from_verbosity(2), Level::Info);
        assert_eq!(Level::from_verbosity(9), Level::Trace);
    }
}
