//! Signal numbers and names: parsing `TERM`/`SIGTERM`/`15`/`RTMIN+3`, printing, and the
//! `--rewrite` table.
#![forbid(unsafe_code)]

use std::fmt;

/// A signal number, 1..=64 on Linux. Real-time signals have no `nix::Signal` variant,
/// so lifeguard carries plain numbers (real-time signals are forwarded too).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Signal(pub i32);

/// The highest signal number the Linux kernel knows (`_NSIG - 1`).
pub const MAX: i32 = 64;

pub const HUP: Signal = Signal(libc::SIGHUP);
pub const INT: Signal = Signal(libc::SIGINT);
pub const KILL: Signal = Signal(libc::SIGKILL);
pub const TERM: Signal = Signal(libc::SIGTERM);
pub const CHLD: Signal = Signal(libc::SIGCHLD);
pub const CONT: Signal = Signal(libc::SIGCONT);
pub const STOP: Signal = Signal(libc::SIGSTOP);

const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
    // Aliases accepted on input only (the first name of a number is the one printed).
    ("IOT", libc::SIGABRT),
    ("POLL", libc::SIGIO),
    ("CLD", libc::SIGCHLD),
];

/// The first real-time signal the C library leaves to applications (34 on glibc, 35 on
/// musl: both keep a few for threads and timers).
pub fn rtmin() -> i32 {
    libc::SIGRTMIN()
}

pub fn rtmax() -> i32 {
    libc::SIGRTMAX()
}

impl Signal {
    /// Parses `TERM`, `SIGTERM`, `term`, `15`, `RTMIN`, `RTMIN+3`, `SIGRTMAX-1`.
    /// `allow_zero` admits `0`/`DROP` (the "drop it" target of `--rewrite`).
    pub fn parse(text: &str, allow_zero: bool) -> Result<Signal, String> {
        let accepted = "a signal name (TERM, SIGTERM, RTMIN+3) or number (1-64)";
        let upper = text.trim().to_ascii_uppercase();
        if allow_zero && (upper == "0" || upper == "DROP") {
            return Ok(Signal(0));
        }
        if let Ok(n) = upper.parse::<i32>() {
            return if (1..=MAX).contains(&n) {
                Ok(Signal(n))
            } else {
                Err(format!("'{text}' is out of range: expected {accepted}"))
            };
        }
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        if let Some((_, n)) = NAMES.iter().find(|(known, _)| *known == name) {
            return Ok(Signal(*n));
        }
        let realtime = |base: i32, rest: &str| -> Option<i32> {
            if rest.is_empty() {
                return Some(base);
            }
            if let Some(up) = rest.strip_prefix('+') {
                return Some(base + up.parse::<i32>().ok()?);
            }
            Some(base - rest.strip_prefix('-')?.parse::<i32>().ok()?)
        };
        let n = if let Some(rest) = name.strip_prefix("RTMIN") {
            realtime(rtmin(), rest)
        } else if let Some(rest) = name.strip_prefix("RTMAX") {
            realtime(rtmax(), rest)
        } else {
            None
        };
        match n {
            Some(n) if (rtmin()..=rtmax()).contains(&n) => Ok(Signal(n)),
            _ => Err(format!("unknown signal '{text}': expected {accepted}")),
        }
    }

    /// The short name, `TERM`, `RTMIN+2`; a number the C library reserves prints as `32`.
    pub fn name(self) -> String {
        if let Some((name, _)) = NAMES.iter().find(|(_, n)| *n == self.0) {
            return (*name).to_string();
        }
        match self.0 {
            n if n == rtmin() => "RTMIN".into(),
            n if n > rtmin() && n <= rtmax() => format!("RTMIN+{}", n - rtmin()),
            n => n.to_string(),
        }
    }

    /// Signals lifeguard can catch and pass on: all but KILL and STOP, which nobody can
    /// catch (the real-time numbers the C library keeps for itself included).
    #[cfg(test)]
    pub fn forwardable() -> impl Iterator<Item = Signal> {
        (1..=MAX)
            .filter(|&n| n != libc::SIGKILL && n != libc::SIGSTOP)
            .map(Signal)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SIG{}", self.name())
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SIG{}({})", self.name(), self.0)
    }
}

/// `--rewrite FROM:TO` entries; the last entry for a FROM wins. `TO` = 0 drops the signal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rewrites(Vec<(Signal, Signal)>);

impl Rewrites {
    pub fn new(pairs: Vec<(Signal, Signal)>) -> Self {
        Rewrites(pairs)
    }

    /// What to send for a received signal; `None` when the rewrite drops it.
    pub fn apply(&self, received: Signal) -> Option<Signal> {
        let to = self
            .0
            .iter()
            .rev()
            .find(|(from, _)| *from == received)
            .map_or(received, |(_, to)| *to);
        (to.0 != 0).then_some(to)
    }
}

/// Parses one `FROM:TO` of `--rewrite`.
pub fn parse_rewrite(text: &str) -> Result<(Signal, Signal), String> {
    let (from, to) = text
        .split_once(':')
        .ok_or_else(|| format!("'{text}' is not FROM:TO (e.g. TERM:QUIT, 15:3, USR1:DROP)"))?;
    let from = Signal::parse(from, false)?;
    let to = Signal::parse(to, true)?;
    if from == KILL || from.0 == libc::SIGSTOP {
        return Err(format!(
            "{from} cannot be caught, so it cannot be rewritten"
        ));
    }
    Ok((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_parse_to_the_same_signal() {
        for text in ["TERM", "SIGTERM", "term", "15", " sigterm "] {
            assert_eq!(Signal::parse(text, false), Ok(TERM), "{text}");
        }
        assert_eq!(Signal::parse("RTMIN", false), Ok(Signal(rtmin())));
        assert_eq!(Signal::parse("SIGRTMIN+3", false), Ok(Signal(rtmin() + 3)));
        assert_eq!(Signal::parse("RTMAX-1", false), Ok(Signal(rtmax() - 1)));
        assert_eq!(Signal::parse("IOT", false), Ok(Signal(libc::SIGABRT)));
    }

    #[test]
    fn bad_signals_are_refused_with_the_accepted_form() {
        for text in [
            "TERMINATE",
            "0",
            "65",
            "RTMIN+99",
            "",
            "RTMINX",
            "RTMINé",
            "RTMAXü",
            "RTMIN+é",
        ] {
            let err = Signal::parse(text, false).unwrap_err();
            assert!(err.contains("signal name"), "{text}: {err}");
        }
        assert_eq!(Signal::parse("drop", true), Ok(Signal(0)));
    }

    #[test]
    fn names_round_trip() {
        for sig in Signal::forwardable() {
            assert_eq!(Signal::parse(&sig.name(), false), Ok(sig), "{sig:?}");
        }
        assert_eq!(TERM.to_string(), "SIGTERM");
        assert_eq!(Signal(rtmin() + 2).name(), "RTMIN+2");
    }

    #[test]
    fn rewrites_map_drop_and_pass_through() {
        let rw = Rewrites::new(vec![
            parse_rewrite("TERM:QUIT").unwrap(),
            parse_rewrite("USR1:DROP").unwrap(),
            parse_rewrite("15:3").unwrap(),
            parse_rewrite("HUP:TERM").unwrap(),
        ]);
        assert_eq!(rw.apply(TERM), Some(Signal(libc::SIGQUIT)));
        assert_eq!(rw.apply(Signal(libc::SIGUSR1)), None);
        assert_eq!(rw.apply(HUP), Some(TERM));
        assert_eq!(rw.apply(INT), Some(INT));
        assert!(parse_rewrite("TERM").unwrap_err().contains("FROM:TO"));
        assert!(parse_rewrite("KILL:TERM").is_err());
        assert!(parse_rewrite("TERM:NOPE").unwrap_err().contains("NOPE"));
    }

    #[test]
    fn forwardable_excludes_only_the_uncatchable() {
        let all: Vec<i32> = Signal::forwardable().map(|s| s.0).collect();
        assert!(!all.contains(&libc::SIGKILL) && !all.contains(&libc::SIGSTOP));
        assert!(all.contains(&libc::SIGTERM) && all.contains(&rtmax()));
        assert_eq!(all.len(), 62);
        assert_eq!(Signal(32).name(), "32");
    }
}
