//! Durations as people write them: read exactly (`0.5`, `5s`, `1m 30s`) and written back
//! the same way (`1m 30s`), for the duration flags, `METRICS_INTERVAL` and the log lines.
//! Its own code rather than a crate's: a few dozen lines, and the build without the SDK
//! stays under its size budget.
#![forbid(unsafe_code)]

use std::fmt::{self, Display, Formatter};
use std::time::Duration;

const NANOS: u128 = 1_000_000_000;
/// A month and a year as the common duration parsers count them (humantime, systemd):
/// 30.44 days and 365.25 days, so that `1y` is the same length everywhere it is read.
const MONTH_SECS: u64 = 2_630_016;
const YEAR_SECS: u64 = 31_557_600;

/// A plain decimal number of seconds (`10`, `0.5`, `.25`), to the nanosecond (further
/// digits are dropped); saturates at `Duration::MAX` rather than wrapping. Read as
/// digits rather than through a float: exact, and without the float parser's tables
/// in the binary.
pub fn plain(text: &str) -> Option<Duration> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let secs = whole.bytes().try_fold(0u64, |n, b| {
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    });
    let Some(secs) = secs else {
        return Some(Duration::MAX);
    };
    let nanos = (fraction.bytes().chain(std::iter::repeat(b'0')))
        .take(9)
        .fold(0u32, |n, b| n * 10 + u32::from(b - b'0'));
    Some(Duration::new(secs, nanos))
}

/// A duration with units: a plain number of seconds, or one or more `NUMBER UNIT` parts
/// (`500ms`, `2m`, `1h 30m`, `1.5s`; units from `ns` to `y`, with the usual long forms:
/// `sec`, `mins`, `hours`, `days`...), added up. Saturates at `Duration::MAX`, so that the
/// caller's "too long" rule, not an overflow, answers `99999999y`.
pub fn parse(text: &str) -> Option<Duration> {
    if let Some(plain) = plain(text) {
        return Some(plain);
    }
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let tail = tail.trim_start();
        let letters = tail
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(letters);
        let part = plain(number)?.as_nanos().saturating_mul(unit_nanos(unit)?) / NANOS;
        let part = u64::try_from(part / NANOS)
            .map(|secs| Duration::new(secs, (part % NANOS) as u32))
            .unwrap_or(Duration::MAX);
        total = total.saturating_add(part);
        rest = tail.trim_start();
    }
    Some(total)
}

fn unit_nanos(unit: &str) -> Option<u128> {
    let secs = |s: u64| u128::from(s) * NANOS;
    Some(match unit {
        "nanos" | "nsec" | "ns" => 1,
        "usec" | "us" | "µs" => 1_000,
        "millis" | "msec" | "ms" => 1_000_000,
        "seconds" | "second" | "secs" | "sec" | "s" => secs(1),
        "minutes" | "minute" | "mins" | "min" | "m" => secs(60),
        "hours" | "hour" | "hrs" | "hr" | "h" => secs(3_600),
        "days" | "day" | "d" => secs(86_400),
        "weeks" | "week" | "wks" | "wk" | "w" => secs(7 * 86_400),
        "months" | "month" | "M" => secs(MONTH_SECS),
        "years" | "year" | "yrs" | "yr" | "y" => secs(YEAR_SECS),
        _ => return None,
    })
}

/// A measured duration as people write one in a log line: tenths of a second from one
/// second up (`62.0s`, `2.3s`), whole milliseconds below (`340ms`). `human` is for
/// durations someone chose (`1m 30s`), where every part was meant; a measurement's
/// microseconds say nothing (`1m 2ms 8us 862ns` reads as a minute, not as 60.0 s).
pub fn measured(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 1_000 {
        format!("{millis}ms")
    } else {
        let tenths = millis / 100;
        format!("{}.{}s", tenths / 10, tenths % 10)
    }
}

/// Written as people write it, largest unit first: `5s`, `1m 30s`, `1s 500ms`, `0s`; what
/// [`parse`] reads back to the same duration.
pub fn human(duration: Duration) -> Human {
    Human(duration)
}

/// See [`human`].
pub struct Human(Duration);

impl Display for Human {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let (secs, nanos) = (self.0.as_secs(), self.0.subsec_nanos());
        if secs == 0 && nanos == 0 {
            return f.write_str("0s");
        }
        let in_year = secs % YEAR_SECS;
        let in_month = in_year % MONTH_SECS;
        let in_day = in_month % 86_400;
        let parts = [
            (secs / YEAR_SECS, "y"),
            (in_year / MONTH_SECS, "M"),
            (in_month / 86_400, "d"),
            (in_day / 3_600, "h"),
            (in_day % 3_600 / 60, "m"),
            (in_day % 60, "s"),
            (u64::from(nanos / 1_000_000), "ms"),
            (u64::from(nanos / 1_000 % 1_000), "us"),
            (u64::from(nanos % 1_000), "ns"),
        ];
        let mut gap = "";
        for (value, unit) in parts.into_iter().filter(|(value, _)| *value > 0) {
            write!(f, "{gap}{value}{unit}")?;
            gap = " ";
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_durations_read_as_people_write_them() {
        let d = |secs: u64, nanos: u32| Duration::new(secs, nanos);
        for (duration, written) in [
            (d(62, 8_862), "62.0s"),
            (d(2, 345_000_000), "2.3s"),
            (d(1, 0), "1.0s"),
            (d(0, 999_999_999), "999ms"),
            (d(0, 0), "0ms"),
            (d(3_600, 950_000_000), "3600.9s"),
        ] {
            assert_eq!(measured(duration), written, "{duration:?}");
        }
        // What a chosen duration reads as, beside it.
        assert_eq!(human(d(62, 8_862)).to_string(), "1m 2s 8us 862ns");
    }

    #[test]
    fn units_as_people_write_them() {
        let ms = Duration::from_millis;
        for (text, expected) in [
            ("500ms", ms(500)),
            ("5s", ms(5_000)),
            ("2m", ms(120_000)),
            ("1h 30m", ms(5_400_000)),
            ("1m30s", ms(90_000)),
            ("1.5s", ms(1_500)),
            ("2 min", ms(120_000)),
            ("3 hours", ms(10_800_000)),
            ("1d", ms(86_400_000)),
            ("1w", ms(604_800_000)),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            ("1y", Duration::from_secs(YEAR_SECS)),
            ("1M", Duration::from_secs(MONTH_SECS)),
            ("999999999999y", Duration::MAX),
        ] {
            assert_eq!(parse(text), Some(expected), "{text}");
        }
        for refused in ["", "s", "5x", "5 s s", "1e3", "-1s", "1..5s", "soon"] {
            assert_eq!(parse(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn written_back_largest_unit_first() {
        for (duration, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(90), "1m 30s"),
            (Duration::from_millis(1_500), "1s 500ms"),
            (Duration::from_millis(200), "200ms"),
            (Duration::from_secs(3_600 + 5), "1h 5s"),
            (Duration::from_secs(86_400 * 2), "2d"),
            (Duration::new(0, 1_001), "1us 1ns"),
            (Duration::from_secs(YEAR_SECS + MONTH_SECS), "1y 1M"),
        ] {
            assert_eq!(human(duration).to_string(), text);
            assert_eq!(parse(text), Some(duration), "{text} reads back");
        }
    }

    #[test]
    fn decimals_to_the_nanosecond_and_nothing_else() {
        assert_eq!(plain("10"), Some(Duration::from_secs(10)));
        assert_eq!(plain("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(plain(".25"), Some(Duration::from_millis(250)));
        assert_eq!(plain("3."), Some(Duration::from_secs(3)));
        assert_eq!(plain("1.0000000019"), Some(Duration::new(1, 1)));
        assert_eq!(plain("99999999999999999999999"), Some(Duration::MAX));
        for refused in ["", ".", "1e3", "1.2.3", "-1", " 1", "inf", "1s"] {
            assert_eq!(plain(refused), None, "{refused:?}");
        }
    }
}
