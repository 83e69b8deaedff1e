//! The usual start without clap: a command line of a few long options with values, `-v`
//! or `-q`, then COMMAND, and no `LIFEGUARD_*` variable set. Building clap's command and
//! matching against it is most of what PID 1 does before the app starts (about 400k of
//! 505k instructions, 18 of 41 mmaps and 27 page faults on the peer benchmark's start:
//! bench/README.md), and an init's start is on every container's way. Anything else —
//! another option, a short form, a repeated option, a value that does not parse, a
//! variable, `--help`, no COMMAND — goes to clap, so its messages and its rules stay the
//! only ones a user meets. The result is the `Cli` clap would build (a test compares
//! them line by line), and `settings()` validates it as always.
#![forbid(unsafe_code)]

use std::ffi::OsString;

use clap::parser::ValueSource;

use super::flags::*;
use super::metrics_env::SinkKind;
use super::values::*;
use super::CheckSources;
use crate::logging;

/// The `Cli` clap builds when nothing is given but COMMAND.
pub(super) fn defaults(command: Vec<OsString>) -> Option<Cli> {
    Some(Cli {
        drain_delay: parse_duration(DEFAULT_DRAIN_DELAY).ok()?,
        drain_max: None,
        drain_quiet: parse_duration(DEFAULT_DRAIN_QUIET).ok()?,
        grace: parse_duration(DEFAULT_GRACE).ok()?,
        leftover_grace: parse_duration(DEFAULT_LEFTOVER_GRACE).ok()?,
        listen: None,
        ready_http: None,
        ready_tcp: None,
        ready_interval: parse_positive_duration(DEFAULT_READY_INTERVAL).ok()?,
        ready_port: None,
        inflight_port: None,
        scale_in_protection: None,
        metrics_sink: SinkKind::Api,
        probe: None,
        mirror_ready_port: None,
        probe_timeout: parse_positive_duration(DEFAULT_PROBE_TIMEOUT).ok()?,
        single_child: false,
        rewrite: Vec::new(),
        stop_signal: None,
        remap_exit: Vec::new(),
        pdeathsig: None,
        subreaper: false,
        group: false,
        warn_on_reap: false,
        verbose: 0,
        quiet: 0,
        log_format: logging::Format::Text,
        command,
    })
}

/// `args` (the program's name first) as clap would take them, or None for clap to
/// decide. `twins`: whether any variable clap reads (`LIFEGUARD_*`, `METRICS_SINK`) is
/// set.
pub(super) fn parse(args: &[OsString], twins: bool) -> Option<(Cli, CheckSources)> {
    if twins {
        return None;
    }
    let mut cli = defaults(Vec::new())?;
    let mut given: Vec<&str> = Vec::new();
    let mut at = 1;
    while let Some(arg) = args.get(at) {
        let arg = arg.to_str()?;
        if arg == "--" {
            at += 1;
            break;
        }
        if !arg.starts_with('-') {
            break;
        }
        at += 1;
        match arg {
            "-v" | "-vv" | "-vvv" | "--verbose" if cli.quiet == 0 => {
                let n = if arg.starts_with("--") {
                    1
                } else {
                    arg.len() - 1
                };
                cli.verbose = cli.verbose.saturating_add(n as u8);
                continue;
            }
            "-q" | "--quiet" if cli.verbose == 0 => {
                cli.quiet = cli.quiet.saturating_add(1);
                continue;
            }
            _ => {}
        }
        let (name, value) = match arg.split_once('=') {
            Some((name, value)) => (name, value),
            None => {
                let value = args.get(at)?.to_str()?;
                at += 1;
                (arg, value)
            }
        };
        // A value clap would read as an option, and an option given twice, are clap's.
        if value.starts_with('-') || given.contains(&name) {
            return None;
        }
        given.push(name);
        match name {
            "--drain-delay" => cli.drain_delay = parse_duration(value).ok()?,
            "--drain-max" => cli.drain_max = Some(parse_duration(value).ok()?),
            "--drain-quiet" => cli.drain_quiet = parse_duration(value).ok()?,
            "--grace" => cli.grace = parse_duration(value).ok()?,
            "--leftover-grace" => cli.leftover_grace = parse_duration(value).ok()?,
            "--ready-interval" => cli.ready_interval = parse_positive_duration(value).ok()?,
            "--listen" => cli.listen = Some(parse_listen(value).ok()?),
            "--ready-port" => cli.ready_port = Some(parse_port(value).ok()?),
            "--inflight-port" => cli.inflight_port = Some(parse_port(value).ok()?),
            "--stop-signal" => cli.stop_signal = Some(parse_signal(value).ok()?),
            _ => return None,
        }
    }
    cli.command = args.get(at..)?.to_vec();
    if cli.command.is_empty() {
        return None;
    }
    let source = |name: &str| {
        Some(if given.contains(&name) {
            ValueSource::CommandLine
        } else {
            ValueSource::DefaultValue
        })
    };
    let sources = CheckSources {
        http: None,
        tcp: None,
        drain_delay: source("--drain-delay"),
        grace: source("--grace"),
    };
    Some((cli, sources))
}
