//! The command line (docs/reference.md): parsing and validation into `Settings`. The flags and
//! their twins are `flags`, the value parsers `values`, the tini and dumb-init
//! variables `compat`.
#![forbid(unsafe_code)]

use std::ffi::OsString;

/// What `--version` says: the version, the commit and the target (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BUILT_COMMIT"),
    ", ",
    env!("BUILT_TARGET"),
    ")"
);

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::logging::Level;
use crate::settings::{
    AppCheck, CloudWatch, Helper, Lifecycle, Listen, ListenAt, Log, Metrics, Mirror, MirrorPort,
    Probe, Protection, Run, Sink, Supervision, DEFAULT_PORT, MIRROR_DEFAULT_PORT,
};
use crate::signal_names::Rewrites;

mod compat;
#[cfg(feature = "fast-start")]
mod fast;
mod flags;
mod metrics_env;
mod values;

use compat::log_level;
use flags::Cli;
use metrics_env::SinkKind;

/// Whether this build carries the AWS SDK (the cargo feature `cloudwatch-api`, on by
/// default): without it `METRICS_SINK=api` publishes nothing, which is said at start.
const API_BUILT: bool = cfg!(feature = "cloudwatch-api");

/// What parsing decided: run, or stop at once with clap's message (help, version, or a
/// usage error) and the exit code that goes with it.
pub enum Parsed {
    Run(Box<Run>),
    Probe(Box<Probe>),
    Mirror(Box<Mirror>),
    Exit {
        message: String,
        code: u8,
        to_stdout: bool,
    },
}

/// Parses the command line and the environment. clap reads the `LIFEGUARD_*` twins from
/// the process environment itself; `lookup` serves the compatibility variables and tells
/// which twins are set but empty, so unit tests need not touch the process environment
/// (the twins are tested on the binary).
///
/// With `--probe` every refusal exits 1, not 2: the probe's contract is 0 or 1, and
/// Docker reserves 2 in HEALTHCHECK commands.
///
/// `twins`: the names of the `LIFEGUARD_*` variables set. With none of them (nor
/// `METRICS_SINK`), the usual command line is read without clap (fast.rs).
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    lookup: impl Fn(&str) -> Option<String>,
    twins: &[String],
) -> Parsed {
    let args: Vec<OsString> = args.into_iter().collect();
    #[cfg(feature = "fast-start")]
    {
        let twins = !twins.is_empty() || lookup("METRICS_SINK").is_some();
        if let Some((cli, sources)) = fast::parse(&args, twins) {
            return settings_or_refusal(cli, sources, &lookup, 2);
        }
    }
    #[cfg(not(feature = "fast-start"))]
    let _ = twins;
    parse_with_clap(args, lookup)
}

/// `parse`, all of it by clap.
fn parse_with_clap(args: Vec<OsString>, lookup: impl Fn(&str) -> Option<String>) -> Parsed {
    let mut command = Cli::command();
    let refusal_code = if probe_requested(&command, &args) {
        1
    } else {
        2
    };
    // A twin set to the empty string counts as unset: `ENV LIFEGUARD_GRACE=` in an
    // image, or Kubernetes' `value: ""`, mean "no value", not a malformed one.
    let blank: Vec<clap::Id> = command
        .get_arguments()
        .filter(|arg| {
            arg.get_env()
                .and_then(|name| lookup(&name.to_string_lossy()))
                .is_some_and(|value| value.is_empty())
        })
        .map(|arg| arg.get_id().clone())
        .collect();
    for id in blank {
        command = command.mut_arg(id, |arg| arg.env(None));
    }
    let parsed = command
        .try_get_matches_from(&args)
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(err) => {
            let to_stdout = !err.use_stderr();
            let mut message = err.render().to_string();
            if let Some(variable) = blamed_variable(&Cli::command(), &err, &args, &lookup) {
                message = message.replacen(
                    '\n',
                    &format!("\n  (the value comes from the environment variable {variable})\n"),
                    1,
                );
            }
            if let Some(flag) = similar_flag(&Cli::command(), &err) {
                message = message.replacen(
                    '\n',
                    &format!("\n\n  tip: a similar argument exists: '{flag}'\n"),
                    1,
                );
            }
            return Parsed::Exit {
                message,
                code: if to_stdout { 0 } else { refusal_code },
                to_stdout,
            };
        }
    };
    if let (Some(watched), None) = (cli.mirror_ready_port.clone(), &cli.probe) {
        return match mirror(cli, values::mirror_port(watched), &matches, &lookup) {
            Ok(mirror) => Parsed::Mirror(Box::new(mirror)),
            Err(message) => Parsed::Exit {
                message: format!("error: {message}\n\nFor more information, try '--help'.\n"),
                code: refusal_code,
                to_stdout: false,
            },
        };
    }
    let sources = CheckSources {
        http: matches.value_source("ready_http"),
        tcp: matches.value_source("ready_tcp"),
        drain_delay: matches.value_source("drain_delay"),
        grace: matches.value_source("grace"),
    };
    settings_or_refusal(cli, sources, &lookup, refusal_code)
}

/// The settings, or their refusal as a usage error that exits with `code`.
fn settings_or_refusal(
    cli: Cli,
    sources: CheckSources,
    lookup: &impl Fn(&str) -> Option<String>,
    code: u8,
) -> Parsed {
    match settings(cli, sources, lookup) {
        Ok(parsed) => parsed,
        Err(message) => Parsed::Exit {
            message: format!("error: {message}\n\nFor more information, try '--help'.\n"),
            code,
            to_stdout: false,
        },
    }
}

/// The environment twin a refused value came from, when the flag itself was not given:
/// clap's message names only the flag, and the user would look for it in vain on the
/// command line.
fn blamed_variable(
    command: &clap::Command,
    err: &clap::Error,
    args: &[OsString],
    lookup: &impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let clap::error::ContextValue::String(invalid) =
        err.get(clap::error::ContextKind::InvalidArg)?
    else {
        return None;
    };
    let long = invalid.split_whitespace().next()?.strip_prefix("--")?;
    let arg = command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))?;
    let variable = arg.get_env()?.to_string_lossy().into_owned();
    let flag = format!("--{long}");
    let given = args.iter().skip(1).any(|a| {
        let a = a.to_string_lossy();
        a == flag
            || a.starts_with(&format!("{flag}="))
            || arg
                .get_short()
                .is_some_and(|short| a.starts_with(&format!("-{short}")))
    });
    (!given && lookup(&variable).is_some()).then_some(variable)
}

/// For an unknown `--option`, the flag it most likely meant (at most 3 edits away), as
/// clap's own "suggestions" would say: done here with the edit distance the variables'
/// warnings use, as clap's costs the slim build 5 kB.
fn similar_flag(command: &clap::Command, err: &clap::Error) -> Option<String> {
    if err.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let clap::error::ContextValue::String(given) = err.get(clap::error::ContextKind::InvalidArg)?
    else {
        return None;
    };
    let given = given.strip_prefix("--")?;
    let given = given.split('=').next().unwrap_or(given);
    command
        .get_arguments()
        .filter_map(|arg| arg.get_long())
        .map(|long| (edit_distance(given, long), long))
        .filter(|(distance, _)| *distance <= 3)
        .min()
        .map(|(_, long)| format!("--{long}"))
}

/// Whether the arguments ask for probe mode; read before parsing, so that a refusal
/// exits as the probe does. Options end at `--` or at COMMAND (the first argument that
/// is neither an option nor an option's value): after that, `--probe` is the app's.
fn probe_requested(command: &clap::Command, args: &[OsString]) -> bool {
    let takes_value = |name: &str| {
        command.get_arguments().any(|arg| {
            let named = match name.strip_prefix("--") {
                Some(long) => arg.get_long() == Some(long),
                None => name.len() == 2 && arg.get_short() == name.chars().nth(1),
            };
            named && arg.get_action().takes_values() && arg.get_id() != "probe"
        })
    };
    let mut args = args.iter().skip(1).map(|arg| arg.to_string_lossy());
    while let Some(arg) = args.next() {
        if arg == "--probe" || arg.starts_with("--probe=") {
            return true;
        }
        if arg == "--" || !arg.starts_with('-') {
            return false;
        }
        if !arg.contains('=') && takes_value(&arg) {
            args.next();
        }
    }
    false
}

/// Where options came from: a flag beats the other app check's environment twin, as
/// it beats its own; and a usage error says "the default" only of a value nobody gave.
struct CheckSources {
    http: Option<ValueSource>,
    tcp: Option<ValueSource>,
    drain_delay: Option<ValueSource>,
    grace: Option<ValueSource>,
}

/// The options of the app's side: the mirror runs no app, so each one given is refused by
/// name rather than ignored (a `--drain-delay` there would promise a drain it cannot do).
const APP_SIDE: [&str; 16] = [
    "drain_delay",
    "drain_max",
    "drain_quiet",
    "grace",
    "leftover_grace",
    "ready_http",
    "ready_tcp",
    "ready_interval",
    "ready_port",
    "inflight_port",
    "scale_in_protection",
    "metrics_sink",
    "single_child",
    "rewrite",
    "remap_exit",
    "stop_signal",
];

/// The readiness mirror's settings: no COMMAND, none of the app's options, an endpoint
/// that is on and is not the port it watches.
fn mirror(
    cli: Cli,
    watched: MirrorPort,
    matches: &clap::ArgMatches,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<Mirror, String> {
    if let Some(first) = cli.command.first() {
        return Err(format!(
            "--mirror-ready-port takes no COMMAND (got '{}'): the app runs in its own \
             container, under lifeguard --ready-port {}",
            first.to_string_lossy(),
            watched.port
        ));
    }
    // Flags on the mirror's own command line are refused; variables only warned of, as
    // they may come from an environment shared with the app's container (a pod's
    // `envFrom`, compose's `env_file`).
    let (mut given, mut ignored) = (Vec::new(), Vec::new());
    for arg in Cli::command().get_arguments() {
        let id = arg.get_id().as_str();
        if !APP_SIDE.contains(&id) {
            continue;
        }
        match matches.value_source(id) {
            Some(ValueSource::CommandLine) => {
                given.push(format!("--{}", arg.get_long().unwrap_or(id)))
            }
            Some(ValueSource::EnvVariable) => {
                ignored.extend(arg.get_env().map(|e| e.to_string_lossy().into_owned()))
            }
            _ => {}
        }
    }
    if !given.is_empty() {
        return Err(format!(
            "{} cannot apply to the readiness mirror (--mirror-ready-port), which runs no \
             app: give the app's options to the lifeguard in the app's container",
            given.join(", "),
        ));
    }
    let listen = match cli.listen {
        Some(Listen { at: None, .. }) => {
            return Err(format!(
                "--listen off leaves the readiness mirror nothing to serve: give an address, \
                 or leave --listen out for [::]:{MIRROR_DEFAULT_PORT}"
            ))
        }
        Some(Listen { at: Some(at), .. }) => at,
        None => ListenAt::Any(MIRROR_DEFAULT_PORT),
    };
    if listen.port() == watched.port {
        return Err(format!(
            "--mirror-ready-port ({}) must differ from --listen's port ({listen}): the mirror \
             would see its own listener and always say ready",
            watched.port
        ));
    }
    for name in [
        "METRICS_NAMESPACE",
        "METRICS_INTERVAL",
        "METRICS_DIMENSIONS",
        "METRICS_BURST_THRESHOLD",
        "METRICS_EXTRA",
    ] {
        if lookup(name).is_some_and(|v| !v.trim().is_empty()) {
            ignored.push(name.to_string());
        }
    }
    let mut warnings = Vec::new();
    if !ignored.is_empty() {
        warnings.push(format!(
            "{} ignored: the readiness mirror runs no app",
            ignored.join(", ")
        ));
    }
    if watched.port == DEFAULT_PORT {
        warnings.push(format!(
            "--mirror-ready-port {DEFAULT_PORT} is lifeguard's own endpoint, ready before \
             the app is: watch the app's --ready-port"
        ));
    }
    Ok(Mirror {
        watched,
        listen,
        pdeathsig: cli.pdeathsig,
        warn_on_reap: cli.warn_on_reap,
        log: Log {
            level: log_level(cli.verbose, cli.quiet, lookup)?,
            format: cli.log_format,
        },
        warnings,
    })
}

/// A run's settings, or a probe's (which must not refuse over settings it does not use).
fn settings(
    mut cli: Cli,
    sources: CheckSources,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<Parsed, String> {
    let probe = cli.probe.clone().map(|target| (target, cli.probe_timeout));
    // `--grace` lowered alone, to the default drain delay or below (`--grace 3`): the
    // drain delay scales with it (a fifth, as 5 s of the default 25 s) rather than
    // refusing a setting whose other half the user never chose.
    if sources.drain_delay == Some(ValueSource::DefaultValue)
        && sources.grace != Some(ValueSource::DefaultValue)
        && cli.grace <= cli.drain_delay
    {
        cli.drain_delay = cli.grace / 5;
    }
    // The probe runs beside a lifeguard configured by flags it does not see (the
    // ENTRYPOINT's); it must not refuse over settings it does not use.
    if probe.is_none() && cli.grace <= cli.drain_delay {
        // Say which of the two the user did not set: `--grace 5` alone meets the
        // default drain delay, and "(5s)" would read as a value they typed; a value they
        // did type is theirs, whatever it equals.
        let default = |source: Option<ValueSource>| {
            if source == Some(ValueSource::DefaultValue) {
                ", the default"
            } else {
                ""
            }
        };
        return Err(format!(
            "--grace ({}{}) must be longer than --drain-delay ({}{}): the grace deadline \
             includes the drain; give both, e.g. --drain-delay 5s --grace 25s",
            crate::seconds::human(cli.grace),
            default(sources.grace),
            crate::seconds::human(cli.drain_delay),
            default(sources.drain_delay),
        ));
    }
    // Halfway from the drain delay to the grace deadline, so the app keeps time to shut
    // down before the SIGKILL.
    let drain_max = cli
        .drain_max
        .unwrap_or(cli.drain_delay + (cli.grace.saturating_sub(cli.drain_delay)) / 2);
    if probe.is_none() && (drain_max < cli.drain_delay || drain_max >= cli.grace) {
        return Err(format!(
            "--drain-max ({}) must be at least --drain-delay ({}) and shorter than --grace ({})",
            crate::seconds::human(drain_max),
            crate::seconds::human(cli.drain_delay),
            crate::seconds::human(cli.grace)
        ));
    }
    // dumb-init's way to ask for the child alone (its -c).
    // dumb-init's own rule is `0` alone; its other false forms are taken too.
    let single_child = cli.single_child
        || lookup("DUMB_INIT_SETSID").is_some_and(|v| values::boolean(&v) == Ok(false));
    let flag = Some(ValueSource::CommandLine);
    let app_check = match (cli.ready_http, cli.ready_tcp) {
        (Some(url), Some(_)) if sources.http == flag && sources.tcp != flag => {
            Some(AppCheck::Http(url))
        }
        (Some(_), Some((host, port))) if sources.tcp == flag && sources.http != flag => {
            Some(AppCheck::Tcp(host, port))
        }
        (Some(_), Some(_)) => {
            let [http, tcp] = if sources.http == flag {
                ["--ready-http", "--ready-tcp"]
            } else {
                ["LIFEGUARD_READY_HTTP", "LIFEGUARD_READY_TCP"]
            };
            return Err(format!(
                "{http} and {tcp} exclude each other: give one app check"
            ));
        }
        (Some(url), None) => Some(AppCheck::Http(url)),
        (None, Some((host, port))) => Some(AppCheck::Tcp(host, port)),
        // Knowing the app's port, ready means that port listens: a balancer routes
        // nothing to a task before its app can take it.
        (None, None) => cli.inflight_port.map(AppCheck::Listening),
    };
    // A probe in the mirror's container (`ENV LIFEGUARD_MIRROR_READY_PORT` in its image)
    // asks the mirror, on the mirror's default port.
    let default_port = match &cli.mirror_ready_port {
        Some(_) => MIRROR_DEFAULT_PORT,
        None => DEFAULT_PORT,
    };
    let listen = cli.listen.unwrap_or(Listen {
        at: Some(ListenAt::Any(default_port)),
        explicit: false,
    });
    if let (Some(ready), None) = (cli.ready_port, &probe) {
        if listen.at.as_ref().map(ListenAt::port) == Some(ready) {
            return Err(format!(
                "--ready-port ({ready}) must differ from the endpoint's port (--listen): \
                 the ready port listens only while the app is ready, the endpoint always"
            ));
        }
        if cli.inflight_port == Some(ready) {
            return Err(format!(
                "--ready-port ({ready}) must differ from --inflight-port: that is the app's \
                 own port, and lifeguard's ready port is a port of lifeguard's"
            ));
        }
    }
    let protect_after = cli.scale_in_protection.and_then(|p| p.0);
    if protect_after.is_some() && cli.inflight_port.is_none() && probe.is_none() {
        return Err(
            "--scale-in-protection needs --inflight-port: a request's age is read from the \
             app port's connections"
                .to_string(),
        );
    }
    // Off the task's agent (a laptop, a CI job, Kubernetes) the same image runs, and
    // says once why nothing is protected.
    let (protection, protection_warning) = match (protect_after, probe.is_some()) {
        (Some(after), false) => match lookup("ECS_AGENT_URI").filter(|v| !v.trim().is_empty()) {
            Some(uri) => match values::ecs_agent_endpoint(&uri) {
                Ok(endpoint) => (Some(Protection { after, endpoint }), None),
                Err(reason) => (
                    None,
                    Some(format!("--scale-in-protection is off: {reason}")),
                ),
            },
            None => (
                None,
                Some(
                    "--scale-in-protection is off: ECS_AGENT_URI is not set (not on ECS, or an \
                     ECS agent older than 1.65.0)"
                        .to_string(),
                ),
            ),
        },
        _ => (None, None),
    };
    let protecting = protection.is_some();
    // The probe sees the image's environment too, and must not refuse over it.
    let cloudwatch_config = match metrics_env::from_env(lookup, cli.metrics_sink) {
        // A build without the SDK (no cargo feature cloudwatch-api) cannot call the
        // API: said once (below), and the app runs without publishing.
        Ok(Some(config)) if config.sink == Sink::Api && !API_BUILT => None,
        Ok(config) => config,
        Err(_) if probe.is_some() => None,
        Err(message) => return Err(message),
    };
    // Settings that are ignored, said once the log is set up (none to a probe).
    let mut warnings = Vec::new();
    let ignored = metrics_env::ignored(lookup);
    if !ignored.is_empty() && probe.is_none() {
        warnings.push(format!(
            "{} ignored: CloudWatch publishing is off without METRICS_NAMESPACE",
            ignored.join(", ")
        ));
    }
    warnings.extend(protection_warning);
    if probe.is_none() {
        let extra =
            |wanted: fn(&CloudWatch) -> bool| cloudwatch_config.as_ref().is_some_and(wanted);
        if !protecting && extra(|c| c.scale_in_protected) {
            warnings.push(
                "METRICS_EXTRA=ScaleInProtected publishes nothing: --scale-in-protection is \
                 not on (it needs the flag, and ECS_AGENT_URI from the ECS agent)"
                    .to_string(),
            );
        }
        if cli.inflight_port.is_none() && extra(|c| c.oldest_request_age) {
            warnings.push(
                "METRICS_EXTRA=OldestRequestAge publishes nothing without --inflight-port: \
                 the age is read from the app port's connections"
                    .to_string(),
            );
        }
        if !API_BUILT
            && cli.metrics_sink == SinkKind::Api
            && lookup("METRICS_NAMESPACE").is_some_and(|n| !n.trim().is_empty())
        {
            warnings.push(
                "this lifeguard was built without the CloudWatch API (cargo feature \
                 cloudwatch-api off): METRICS_SINK=api publishes nothing; set METRICS_SINK=emf \
                 to publish the same metrics as Embedded Metric Format log records"
                    .to_string(),
            );
        }
    }
    let stop_signal = match values::stop_signal(cli.stop_signal) {
        Ok(signal) => signal,
        Err(_) if probe.is_some() => crate::signal_names::TERM,
        Err(message) => return Err(message),
    };
    let log = Log {
        level: match log_level(cli.verbose, cli.quiet, lookup) {
            Ok(level) => level,
            Err(_) if probe.is_some() => Level::Warn,
            Err(message) => return Err(message),
        },
        format: cli.log_format,
    };
    if let Some((target, timeout)) = probe {
        return Ok(Parsed::Probe(Box::new(Probe {
            target,
            timeout,
            listen,
            log,
            warnings,
        })));
    }
    let supervision = Supervision {
        lifecycle: Lifecycle {
            drain_delay: cli.drain_delay,
            grace: cli.grace,
            rewrites: Rewrites::new(cli.rewrite),
            remap_exit: cli.remap_exit,
            group: !single_child,
            // Drain until quiet needs a port to watch.
            drain_max: cli.inflight_port.map(|_| drain_max),
            drain_quiet: cli.drain_quiet,
            leftover_grace: cli.leftover_grace,
            stop_signal,
        },
        command: cli.command,
        listen,
        ready_port: cli.ready_port,
        pdeathsig: cli.pdeathsig,
        warn_on_reap: cli.warn_on_reap,
        app_check: app_check.is_some(),
        inflight_port: cli.inflight_port,
        scale_in_protection: protection.is_some(),
    };
    let helper = Helper {
        stop_signal,
        app_check,
        check_interval: cli.ready_interval,
        cloudwatch: cloudwatch_config,
        protection,
        metrics: Metrics {
            inflight_port: cli.inflight_port,
            // The ECS agent sets it in every container of a task (task metadata v4).
            ecs_metadata: lookup("ECS_CONTAINER_METADATA_URI_V4").filter(|v| !v.trim().is_empty()),
        },
    };
    Ok(Parsed::Run(Box::new(Run {
        supervision,
        helper,
        log,
        warnings,
    })))
}

/// Warnings for `LIFEGUARD_*` variables in `names` that lifeguard does not know (a
/// misspelling would otherwise be ignored without a word), each naming the closest
/// known one where there is one, as a mistyped flag's error does.
pub fn unknown_variables(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut unknown: Vec<String> = names.filter(|n| n.starts_with("LIFEGUARD_")).collect();
    if unknown.is_empty() {
        // The usual start: no twin set, and no second build of clap's command, whose
        // allocations cost about 120 µs of every start (the peer benchmark's start-up
        // as PID 1: 2,349 µs with it, 2,226 without).
        return unknown;
    }
    let command = Cli::command();
    let mut known: Vec<String> = command
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .collect();
    // Read outside clap: the log-level twins (compat.rs); and a test build's faults
    // (named only there: a shipped binary carries no trace of fault injection).
    known.extend(["LIFEGUARD_VERBOSE", "LIFEGUARD_QUIET"].map(String::from));
    #[cfg(feature = "fault-injection")]
    known.extend(["LIFEGUARD_FAULT", "LIFEGUARD_FAULT_MINUTE"].map(String::from));
    unknown.retain(|n| !known.contains(n));
    // In order, for the same lines every time (a handful: no sort's code for them).
    let mut sorted: Vec<String> = Vec::with_capacity(unknown.len());
    for name in unknown {
        let at = sorted.partition_point(|n| *n < name);
        sorted.insert(at, name);
    }
    let unknown = sorted;
    // The CloudWatch contract's variables carry no LIFEGUARD_ prefix (METRICS_SINK,
    // --metrics-sink's twin, is already among clap's): LIFEGUARD_METRICS_SINK means that
    // one.
    known.extend(
        [
            "METRICS_NAMESPACE",
            "METRICS_INTERVAL",
            "METRICS_DIMENSIONS",
            "METRICS_BURST_THRESHOLD",
            "METRICS_EXTRA",
        ]
        .map(String::from),
    );
    unknown
        .into_iter()
        .map(|name| {
            let bare = name.trim_start_matches("LIFEGUARD_");
            let closest = known
                .iter()
                .map(|k| (edit_distance(&name, k).min(edit_distance(bare, k)), k))
                .filter(|(d, _)| *d <= 3)
                .min();
            match closest {
                Some((_, k)) => format!(
                    "{name} is not a lifeguard variable, and is ignored (did you mean {k}?)"
                ),
                None => format!(
                    "{name} is not a lifeguard variable, and is ignored (`lifeguard --help` lists them)"
                ),
            }
        })
        .collect()
}

/// Levenshtein distance, for the suggestion above.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The clap definition, for the man page test.
#[cfg(test)]
pub fn command() -> clap::Command {
    Cli::command()
}

#[cfg(test)]
mod tests {
    use super::values::parse_duration;
    use super::*;
    use crate::settings::ProbeTarget;
    use std::collections::HashMap;
    use std::time::Duration;

    fn parse_with(args: &[&str], env: &[(&str, &str)]) -> Parsed {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let args = std::iter::once("lifeguard")
            .chain(args.iter().copied())
            .map(OsString::from);
        let twins: Vec<String> = (env.keys())
            .filter(|k| k.starts_with("LIFEGUARD_"))
            .cloned()
            .collect();
        parse(args, |name| env.get(name).cloned(), &twins)
    }

    /// The usual command lines: read without clap, and the very settings clap gives.
    #[cfg(feature = "fast-start")]
    #[test]
    fn the_start_without_clap_gives_what_clap_gives() {
        let lines: &[&[&str]] = &[
            &["app"],
            &["--", "app", "--grace", "1s"],
            &["--drain-delay", "0", "--listen", "off", "--", "/bin/true"],
            &["--drain-delay=2s", "--grace=30s", "-v", "app", "-q"],
            &[
                "-vv",
                "--inflight-port",
                "8080",
                "--drain-max",
                "12s",
                "app",
            ],
            &["--grace", "3", "app"],
            &[
                "--drain-quiet",
                "500ms",
                "--leftover-grace",
                "2s",
                "--ready-interval",
                "2s",
                "app",
            ],
            &["--listen", "127.0.0.1:9999", "--ready-port", "9596", "app"],
            &[
                "--listen",
                "[::]:9595",
                "--stop-signal",
                "QUIT",
                "-q",
                "app",
            ],
            &["--verbose", "-vvv", "app"],
        ];
        for line in lines {
            let args: Vec<OsString> = std::iter::once("lifeguard")
                .chain(line.iter().copied())
                .map(OsString::from)
                .collect();
            assert!(fast::parse(&args, false).is_some(), "{line:?} went to clap");
            let lookup = |_: &str| None;
            let fast = match parse(args.clone(), lookup, &[]) {
                Parsed::Run(run) => format!("{run:?}"),
                _ => panic!("{line:?}"),
            };
            let clap = match parse_with_clap(args, lookup) {
                Parsed::Run(run) => format!("{run:?}"),
                _ => panic!("{line:?}"),
            };
            assert_eq!(fast, clap, "{line:?}");
        }
        // The defaults are clap's, field by field.
        let command = vec![OsString::from("app")];
        let matches = Cli::command()
            .try_get_matches_from(["lifeguard", "app"])
            .unwrap();
        let by_clap = Cli::from_arg_matches(&matches).unwrap();
        assert_eq!(
            format!("{:?}", fast::defaults(command).unwrap()),
            format!("{by_clap:?}")
        );
        // Anything else is clap's: its rules and its messages.
        let theirs: &[&[&str]] = &[
            &[],
            &["--help"],
            &["-h"],
            &["--version"],
            &["--probe"],
            &["--mirror-ready-port", "9596"],
            &["--grace", "1s", "--grace", "2s", "app"],
            &["--grace", "-1s", "app"],
            &["--grace", "soon", "app"],
            &["--listen"],
            &["--rewrite", "TERM:QUIT", "app"],
            &["-c", "app"],
            &["-vq", "app"],
            &["-v", "-q", "app"],
            &["--drain-dela", "1s", "app"],
            &["--ready-interval", "0", "app"],
        ];
        for line in theirs {
            let args: Vec<OsString> = std::iter::once("lifeguard")
                .chain(line.iter().copied())
                .map(OsString::from)
                .collect();
            assert!(
                fast::parse(&args, false).is_none(),
                "{line:?} did not go to clap"
            );
        }
        // A variable clap reads sends every line to clap.
        let args: Vec<OsString> = ["lifeguard", "app"].map(OsString::from).to_vec();
        assert!(fast::parse(&args, true).is_none());
    }

    fn ok(args: &[&str], env: &[(&str, &str)]) -> Run {
        match parse_with(args, env) {
            Parsed::Run(s) => *s,
            Parsed::Probe(p) => panic!("{args:?} is a probe: {p:?}"),
            Parsed::Mirror(m) => panic!("{args:?} is a mirror: {m:?}"),
            Parsed::Exit { message, .. } => panic!("{args:?} refused: {message}"),
        }
    }

    fn probe_ok(args: &[&str], env: &[(&str, &str)]) -> Probe {
        match parse_with(args, env) {
            Parsed::Probe(p) => *p,
            Parsed::Run(s) => panic!("{args:?} is no probe: {s:?}"),
            Parsed::Mirror(m) => panic!("{args:?} is a mirror: {m:?}"),
            Parsed::Exit { message, .. } => panic!("{args:?} refused: {message}"),
        }
    }

    fn mirror_ok(args: &[&str], env: &[(&str, &str)]) -> Mirror {
        match parse_with(args, env) {
            Parsed::Mirror(m) => *m,
            Parsed::Run(s) => panic!("{args:?} is no mirror: {s:?}"),
            Parsed::Probe(p) => panic!("{args:?} is a probe: {p:?}"),
            Parsed::Exit { message, .. } => panic!("{args:?} refused: {message}"),
        }
    }

    #[test]
    fn the_mirror_takes_its_port_and_a_listen_of_its_own() {
        let m = mirror_ok(&["--mirror-ready-port", "9596"], &[]);
        assert_eq!(
            m.watched,
            MirrorPort {
                host: None,
                port: 9596
            }
        );
        assert_eq!(m.listen, ListenAt::Any(MIRROR_DEFAULT_PORT));
        let m = mirror_ok(
            &[
                "--mirror-ready-port=[::1]:9596",
                "--listen",
                "127.0.0.1:8081",
                "-v",
            ],
            &[("METRICS_NAMESPACE", "web")],
        );
        assert_eq!(m.watched.host, Some("::1".parse().unwrap()));
        assert_eq!(m.listen, ListenAt::Addr("127.0.0.1:8081".parse().unwrap()));
        assert_eq!(m.log.level, Level::Info);
        assert!(
            m.warnings[0].starts_with("METRICS_NAMESPACE ignored"),
            "{:?}",
            m.warnings
        );
        let m = mirror_ok(&["--mirror-ready-port", "[::]:9596"], &[]);
        assert_eq!(m.watched.host, None, "an unspecified HOST is any address");
        let m = mirror_ok(&["--mirror-ready-port", "9595"], &[]);
        assert!(
            m.warnings[0].contains("lifeguard's own endpoint"),
            "{:?}",
            m.warnings
        );
        // A probe in the mirror's image asks the mirror's port (the variable's case is
        // tested on the binary: clap reads the twins from the process environment).
        let probe = probe_ok(&["--probe", "live", "--mirror-ready-port", "9596"], &[]);
        assert_eq!(probe.listen.at, Some(ListenAt::Any(MIRROR_DEFAULT_PORT)));
    }

    #[test]
    fn the_mirror_refuses_what_it_cannot_honour_by_name() {
        let rows: &[(&[&str], &[(&str, &str)], &str)] = &[
            (&["--mirror-ready-port", "0"], &[], "'0' is not a TCP port"),
            (
                &["--mirror-ready-port", "70000"],
                &[],
                "expected the app container's ready port",
            ),
            (
                &["--mirror-ready-port", "web:9596"],
                &[],
                "'web' is not an IP address",
            ),
            (
                &["--mirror-ready-port", "::1:9596"],
                &[],
                "'::1' is not an IP address",
            ),
            (
                &["--mirror-ready-port", "+9596"],
                &[],
                "'+9596' is not a TCP port",
            ),
            (
                &["--mirror-ready-port", "9596", "--", "app"],
                &[],
                "takes no COMMAND (got 'app')",
            ),
            (
                &[
                    "--mirror-ready-port",
                    "9596",
                    "--ready-port",
                    "9000",
                    "--drain-delay",
                    "1s",
                ],
                &[],
                "--drain-delay, --ready-port cannot apply to the readiness mirror",
            ),
            (
                &["--mirror-ready-port", "9596", "--listen", "off"],
                &[],
                "--listen off leaves",
            ),
            (
                &["--mirror-ready-port", "9597"],
                &[],
                "--mirror-ready-port (9597) must differ from --listen's port",
            ),
        ];
        for (args, env, want) in rows {
            let message = usage_error(args, env);
            assert!(message.contains(want), "{args:?}: {message}");
        }
    }

    fn usage_error(args: &[&str], env: &[(&str, &str)]) -> String {
        match parse_with(args, env) {
            Parsed::Run(s) => panic!("{args:?} accepted: {s:?}"),
            Parsed::Probe(p) => panic!("{args:?} accepted: {p:?}"),
            Parsed::Mirror(m) => panic!("{args:?} accepted: {m:?}"),
            Parsed::Exit { message, code, .. } => {
                assert_eq!(code, 2, "{message}");
                message
            }
        }
    }

    #[test]
    fn defaults_follow_the_design() {
        let s = ok(&["--", "app", "arg"], &[]);
        assert_eq!(
            s.supervision.command,
            vec![OsString::from("app"), OsString::from("arg")]
        );
        assert_eq!(s.supervision.lifecycle.drain_delay, Duration::from_secs(5));
        assert_eq!(s.supervision.lifecycle.grace, Duration::from_secs(25));
        assert!(s.supervision.lifecycle.group);
        assert_eq!(s.log.level, Level::Notice);
        assert_eq!(s.log.format, crate::logging::Format::Text);
        assert_eq!(s.helper.metrics, Metrics::default());
    }

    #[test]
    fn a_given_value_is_never_called_the_default_and_unknown_variables_are_said() {
        // 5s given for the drain delay: the user's own, though it equals the default.
        let m = usage_error(&["--grace", "4s", "--drain-delay", "5s", "app"], &[]);
        assert!(
            m.contains("--grace (4s)")
                && m.contains("--drain-delay (5s)")
                && !m.contains("the default"),
            "{m}"
        );
        // Not given: the default, said so (here with a drain delay given as the default's
        // twin, so that the grace alone does not scale it).
        let m = usage_error(&["--drain-max", "1s", "--grace", "0.5s", "app"], &[]);
        assert!(m.contains("--drain-max"), "{m}");
        // --grace lowered alone to the default drain delay or below: the drain delay is a
        // fifth of it, and --drain-max halfway, as the defaults are for 25 s.
        let s = ok(&["--grace", "3", "--inflight-port", "80", "app"], &[]);
        assert_eq!(
            s.supervision.lifecycle.drain_delay,
            Duration::from_millis(600)
        );
        assert_eq!(
            s.supervision.lifecycle.drain_max,
            Some(Duration::from_millis(1800))
        );
        // Above it, the default drain delay stands.
        let s = ok(&["--grace", "10s", "app"], &[]);
        assert_eq!(s.supervision.lifecycle.drain_delay, Duration::from_secs(5));
        let said = unknown_variables(
            [
                "LIFEGUARD_DRAIN_DELAI",
                "LIFEGUARD_GRACE",
                "LIFEGUARD_XYZZY_PLUGH",
                "PATH",
            ]
            .into_iter()
            .map(String::from),
        );
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].contains("LIFEGUARD_DRAIN_DELAI")
                && said[0].contains("did you mean LIFEGUARD_DRAIN_DELAY?"),
            "{said:?}"
        );
        assert!(
            said[1].contains("LIFEGUARD_XYZZY_PLUGH") && said[1].contains("--help"),
            "{said:?}"
        );
        // The CloudWatch contract's names have no prefix; a prefixed one means them.
        let said = unknown_variables(["LIFEGUARD_METRICS_SINK".to_string()].into_iter());
        assert!(said[0].contains("did you mean METRICS_SINK?"), "{said:?}");
        // What `cargo run` puts in the environment from build.rs is no LIFEGUARD_ name.
        assert!(!VERSION.is_empty() && !env!("BUILT_COMMIT").is_empty());
    }

    #[test]
    fn drain_max_defaults_halfway_and_needs_an_inflight_port() {
        // Without --inflight-port there is nothing to wait for: no hold.
        assert_eq!(
            ok(&["--drain-max", "10s", "app"], &[])
                .supervision
                .lifecycle
                .drain_max,
            None
        );
        let s = ok(&["--inflight-port", "80", "app"], &[]);
        assert_eq!(
            s.supervision.lifecycle.drain_max,
            Some(Duration::from_secs(15))
        );
        let s = ok(
            &[
                "--inflight-port",
                "80",
                "--drain-delay",
                "2s",
                "--grace",
                "10s",
                "app",
            ],
            &[],
        );
        assert_eq!(
            s.supervision.lifecycle.drain_max,
            Some(Duration::from_secs(6))
        );
        let s = ok(&["--inflight-port", "80", "--drain-max", "5s", "app"], &[]);
        assert_eq!(
            s.supervision.lifecycle.drain_max,
            Some(Duration::from_secs(5))
        );
        for max in ["4s", "25s", "30s"] {
            let m = usage_error(&["--drain-max", max, "app"], &[]);
            assert!(
                m.contains("--drain-max") && m.contains("--drain-delay") && m.contains("--grace"),
                "{max}: {m}"
            );
        }
    }

    #[test]
    fn the_metrics_contract_is_checked_at_start() {
        let s = ok(&["app"], &[("METRICS_NAMESPACE", "prod/web")]);
        assert_eq!(s.helper.cloudwatch.unwrap().namespace, "prod/web");
        let m = usage_error(
            &["app"],
            &[
                ("METRICS_NAMESPACE", "prod/web"),
                ("METRICS_INTERVAL", "often"),
            ],
        );
        assert!(
            m.contains("METRICS_INTERVAL") && m.contains("from 1 to 86400"),
            "{m}"
        );
        // Not the probe's business.
        probe_ok(&["--probe"], &[("METRICS_NAMESPACE", "AWS/ECS")]);
    }

    #[test]
    fn metrics_settings() {
        let s = ok(
            &["--inflight-port", "8080", "app"],
            &[(
                "ECS_CONTAINER_METADATA_URI_V4",
                "http://169.254.170.2/v4/abc",
            )],
        );
        assert_eq!(s.helper.metrics.inflight_port, Some(8080));
        assert_eq!(
            s.helper.metrics.ecs_metadata.as_deref(),
            Some("http://169.254.170.2/v4/abc")
        );
        let s = ok(&["app"], &[("ECS_CONTAINER_METADATA_URI_V4", " ")]);
        assert_eq!(s.helper.metrics.ecs_metadata, None);
    }

    #[test]
    fn the_command_keeps_its_own_flags() {
        let s = ok(&["-c", "app", "-c", "--grace", "1"], &[]);
        assert_eq!(
            s.supervision.command,
            ["app", "-c", "--grace", "1"].map(OsString::from)
        );
        assert!(!s.supervision.lifecycle.group);
    }

    #[test]
    fn endpoint_and_app_check_options() {
        let s = ok(&["app"], &[]);
        assert_eq!(
            s.supervision.listen,
            Listen {
                at: Some(ListenAt::Any(9595)),
                explicit: false
            }
        );
        assert_eq!(s.helper.app_check, None);
        assert_eq!(s.helper.check_interval, Duration::from_secs(1));
        let s = ok(
            &["--listen", ":8081", "--ready-tcp", "localhost:80", "app"],
            &[],
        );
        assert_eq!(
            s.supervision.listen,
            Listen {
                at: Some(ListenAt::Any(8081)),
                explicit: true
            }
        );
        assert_eq!(
            s.helper.app_check,
            Some(AppCheck::Tcp("localhost".into(), 80))
        );
        let s = ok(
            &[
                "--listen",
                "off",
                "--ready-http",
                "http://127.0.0.1:8080/health",
                "app",
            ],
            &[],
        );
        assert_eq!(s.supervision.listen.at, None);
        assert!(matches!(s.helper.app_check, Some(AppCheck::Http(ref u)) if u.path() == "/health"));
        let s = ok(&["--listen", "[::1]:9000", "app"], &[]);
        assert_eq!(
            s.supervision.listen.at,
            Some(ListenAt::Addr("[::1]:9000".parse().unwrap()))
        );
        // A host name, resolved at start (main.rs): --help says HOST:PORT.
        let s = ok(&["--listen", "localhost:9596", "app"], &[]);
        assert_eq!(
            s.supervision.listen.at,
            Some(ListenAt::Name {
                host: "localhost".into(),
                port: 9596
            })
        );
    }

    #[test]
    fn the_stop_signal_is_taken_by_name_or_number_and_must_be_catchable() {
        let s = ok(&["app"], &[]);
        assert_eq!(
            s.supervision.lifecycle.stop_signal,
            crate::signal_names::TERM
        );
        for value in ["QUIT", "SIGQUIT", "3", "quit"] {
            let s = ok(&["--stop-signal", value, "app"], &[]);
            assert_eq!(
                s.supervision.lifecycle.stop_signal.0,
                libc::SIGQUIT,
                "{value}"
            );
            assert_eq!(s.helper.stop_signal.0, libc::SIGQUIT, "{value}");
        }
        for (value, said) in [
            ("KILL", "cannot be caught"),
            ("STOP", "cannot be caught"),
            ("CHLD", "how lifeguard hears of exits"),
            ("NOPE", "NOPE"),
        ] {
            let message = usage_error(&["--stop-signal", value, "app"], &[]);
            assert!(
                message.contains("--stop-signal") && message.contains(said),
                "{message}"
            );
        }
    }

    #[test]
    fn a_misspelt_flag_gets_the_one_it_meant() {
        let message = usage_error(&["--drain-dealy", "5s", "app"], &[]);
        assert!(
            message.contains("unexpected argument '--drain-dealy'")
                && message.contains("tip: a similar argument exists: '--drain-delay'"),
            "{message}"
        );
        let message = usage_error(&["--gracefully=3", "app"], &[]);
        assert!(!message.contains("similar argument"), "{message}");
    }

    #[test]
    fn probe_needs_no_command() {
        let p = probe_ok(&["--probe"], &[]);
        assert_eq!(
            (p.target, p.timeout),
            (ProbeTarget::Ready, Duration::from_secs(2))
        );
        let p = probe_ok(&["--probe", "live", "--probe-timeout", "500ms"], &[]);
        assert_eq!(
            (p.target, p.timeout),
            (ProbeTarget::Live, Duration::from_millis(500))
        );
        let p = probe_ok(&["--probe", "http://127.0.0.1:1/x"], &[]);
        assert!(matches!(p.target, ProbeTarget::Url(_)));
    }

    #[test]
    fn the_probe_ignores_settings_it_does_not_use_and_refuses_with_1() {
        // The ENTRYPOINT's flags are not repeated in HEALTHCHECK: an image with
        // LIFEGUARD_DRAIN_DELAY=30s and `--grace 60s` on its ENTRYPOINT.
        probe_ok(&["--probe"], &[("TINI_VERBOSITY", "loud")]);
        probe_ok(&["--drain-delay", "30s", "--probe"], &[]);
        for args in [
            &["--probe", "sideways"][..],
            &["--listen", ":1", "--probe", "--bogus"],
            &["-v", "--grace", "x", "--probe=live"],
        ] {
            match parse_with(args, &[]) {
                Parsed::Exit {
                    code: 1, message, ..
                } => {
                    assert!(message.contains("error"), "{message}")
                }
                _ => panic!("{args:?}: a probe refusal exits 1"),
            }
        }
        // After COMMAND, --probe is the app's, and a refusal is a usage error.
        for args in [&["--grace", "1s", "app", "--probe"][..], &["--", "--probe"]] {
            let command = Cli::command();
            let args: Vec<OsString> = std::iter::once("lifeguard")
                .chain(args.iter().copied())
                .map(OsString::from)
                .collect();
            assert!(!probe_requested(&command, &args), "{args:?}");
        }
        usage_error(
            &["--grace", "1s", "--drain-delay", "2s", "app", "--probe"],
            &[],
        );
    }

    #[test]
    fn durations_accept_units_and_plain_seconds() {
        for (text, ms) in [
            ("500ms", 500),
            ("5s", 5000),
            ("2m", 120_000),
            ("1.5", 1500),
            (".25", 250),
            ("3.", 3000),
            ("0.125", 125),
            ("0", 0),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
        assert!(parse_duration("soon")
            .unwrap_err()
            .contains("500ms, 5s, 2m"));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("99999999999999999999999")
            .unwrap_err()
            .contains("longer than a year"));
        assert!(parse_duration("1e3").is_err());
        assert!(parse_duration(".").is_err());
        assert!(parse_duration("1.2.3").is_err());
        assert!(parse_duration("400d")
            .unwrap_err()
            .contains("longer than a year"));
    }

    #[test]
    fn compatibility_variables_are_honoured() {
        assert!(
            !ok(&["app"], &[("DUMB_INIT_SETSID", "0")])
                .supervision
                .lifecycle
                .group
        );
        assert!(
            ok(&["app"], &[("DUMB_INIT_SETSID", "1")])
                .supervision
                .lifecycle
                .group
        );
        let levels: &[(&[&str], (&str, &str), Level)] = &[
            (&["app"], ("DUMB_INIT_DEBUG", "1"), Level::Debug),
            (&["app"], ("TINI_VERBOSITY", "2"), Level::Info),
            (&["app"], ("TINI_VERBOSITY", "0"), Level::Error),
            (&["app"], ("LIFEGUARD_VERBOSE", "1"), Level::Info),
            (&["app"], ("LIFEGUARD_QUIET", "1"), Level::Error),
            (&["-vv", "app"], ("TINI_VERBOSITY", "0"), Level::Debug),
            (&["-q", "app"], ("UNRELATED", "1"), Level::Error),
        ];
        for (args, env, level) in levels {
            assert_eq!(ok(args, &[*env]).log.level, *level, "{args:?} {env:?}");
        }
        ok(
            &["-s", "-g", "app"],
            &[("TINI_SUBREAPER", "1"), ("TINI_KILL_PROCESS_GROUP", "1")],
        );
    }

    #[test]
    fn usage_errors_name_the_flag_and_the_accepted_form() {
        let m = usage_error(&["--drain-delay", "soon", "app"], &[]);
        assert!(
            m.contains("--drain-delay") && m.contains("500ms, 5s, 2m"),
            "{m}"
        );
        let m = usage_error(&["--grace", "5s", "--drain-delay", "5s", "app"], &[]);
        assert!(m.contains("--grace") && m.contains("--drain-delay"), "{m}");
        let m = usage_error(&["--rewrite", "TERM=QUIT", "app"], &[]);
        assert!(m.contains("--rewrite") && m.contains("FROM:TO"), "{m}");
        let m = usage_error(&["-p", "SIGFOO", "app"], &[]);
        assert!(
            m.contains("--pdeathsig") && m.contains("signal name"),
            "{m}"
        );
        let m = usage_error(&["-e", "256", "app"], &[]);
        assert!(m.contains("--remap-exit") && m.contains("0 to 255"), "{m}");
        let m = usage_error(&["--log-format", "xml", "app"], &[]);
        assert!(m.contains("--log-format") && m.contains("json"), "{m}");
        let m = usage_error(&["--bogus", "app"], &[]);
        assert!(m.contains("--bogus"), "{m}");
        let m = usage_error(&[], &[]);
        assert!(m.contains("COMMAND"), "{m}");
        let m = usage_error(&["--listen", "nowhere", "app"], &[]);
        assert!(m.contains("--listen") && m.contains("HOST:PORT"), "{m}");
        let m = usage_error(&["--listen", "bad_host:80", "app"], &[]);
        assert!(
            m.contains("--listen") && m.contains("localhost:9595"),
            "{m}"
        );
        // A negative duration is a duration error, not clap's tip to write `-- -1s`
        // (which would make it the command).
        let m = usage_error(&["--drain-delay", "-1s", "app"], &[]);
        assert!(
            m.contains("--drain-delay") && m.contains("negative") && !m.contains("tip"),
            "{m}"
        );
        let m = usage_error(&["--grace", "--drain-delay", "1s", "app"], &[]);
        assert!(m.contains("is a flag, not a value"), "{m}");
        let m = usage_error(&["--ready-http", "https://x/", "app"], &[]);
        assert!(m.contains("--ready-http") && m.contains("http://"), "{m}");
        let m = usage_error(&["--ready-tcp", "localhost", "app"], &[]);
        assert!(m.contains("--ready-tcp") && m.contains("HOST:PORT"), "{m}");
        let m = usage_error(
            &["--ready-tcp", "a:1", "--ready-http", "http://a/", "app"],
            &[],
        );
        assert!(
            m.contains("--ready-tcp") && m.contains("--ready-http"),
            "{m}"
        );
        for port in ["0", "65536", "http", "-1", "80x"] {
            let m = usage_error(&["--inflight-port", port, "app"], &[]);
            assert!(
                m.contains("--inflight-port") && m.contains("1 to 65535"),
                "{port}: {m}"
            );
        }
        let m = usage_error(&["--ready-interval", "0", "app"], &[]);
        assert!(
            m.contains("--ready-interval") && m.contains("above zero"),
            "{m}"
        );
        let m = usage_error(&["app"], &[("TINI_VERBOSITY", "loud")]);
        assert!(m.contains("TINI_VERBOSITY"), "{m}");
    }

    #[test]
    fn help_and_version_exit_zero_on_stdout() {
        for flag in ["--help", "--version"] {
            match parse_with(&[flag], &[]) {
                Parsed::Exit {
                    code: 0,
                    to_stdout: true,
                    ..
                } => {}
                _ => panic!("{flag} should print to stdout and exit 0"),
            }
        }
    }

    /// The man page must document every flag, its short form and its environment twin.
    #[test]
    fn man_page_documents_every_flag() {
        let man = include_str!("../../man/lifeguard.1");
        let cmd = command();
        let mut missing = Vec::new();
        for arg in cmd.get_arguments() {
            if let Some(long) = arg.get_long() {
                if !man.contains(&format!("\\-\\-{}", long.replace('-', "\\-"))) {
                    missing.push(format!("--{long}"));
                }
            }
            if let Some(short) = arg.get_short() {
                if !man.contains(&format!("\\-{short}")) {
                    missing.push(format!("-{short}"));
                }
            }
            if let Some(env) = arg.get_env() {
                let env = env.to_string_lossy();
                if !man.contains(&*env) {
                    missing.push(env.into_owned());
                }
            }
        }
        for env in [
            "LIFEGUARD_VERBOSE",
            "LIFEGUARD_QUIET",
            "TINI_SUBREAPER",
            "TINI_KILL_PROCESS_GROUP",
            "TINI_VERBOSITY",
            "DUMB_INIT_SETSID",
            "DUMB_INIT_DEBUG",
        ] {
            if !man.contains(env) {
                missing.push(env.to_string());
            }
        }
        assert!(
            missing.is_empty(),
            "man/lifeguard.1 does not document: {missing:?}"
        );
    }

    /// `--help` ends usage errors' advice ("try '--help'"): every variable lifeguard
    /// reads is there, and in the man page.
    #[test]
    fn help_and_the_man_page_list_the_environment() {
        let help = command().render_help().to_string();
        let man = include_str!("../../man/lifeguard.1");
        for env in [
            "METRICS_NAMESPACE",
            "METRICS_INTERVAL",
            "METRICS_DIMENSIONS",
            "METRICS_BURST_THRESHOLD",
            "AWS_REGION",
            "AWS_ENDPOINT_URL_CLOUDWATCH",
            "ECS_CONTAINER_METADATA_URI_V4",
            "TINI_VERBOSITY",
            "DUMB_INIT_SETSID",
            "LIFEGUARD_",
        ] {
            assert!(help.contains(env), "--help does not name {env}:\n{help}");
            assert!(man.contains(env), "the man page does not name {env}");
        }
    }

    #[test]
    fn metrics_settings_without_a_namespace_are_warned_about_not_refused() {
        let s = ok(&["app"], &[("METRICS_INTERVAL", "abc")]);
        assert_eq!(s.helper.cloudwatch, None);
        assert_eq!(
            s.warnings,
            vec![
                "METRICS_INTERVAL ignored: CloudWatch publishing is off without METRICS_NAMESPACE"
            ]
        );
        let s = ok(&["app"], &[]);
        assert!(s.warnings.is_empty());
        // With a namespace the same value is refused, naming the variable.
        let m = usage_error(
            &["app"],
            &[("METRICS_NAMESPACE", "a/b"), ("METRICS_INTERVAL", "abc")],
        );
        assert!(m.contains("METRICS_INTERVAL 'abc'"), "{m}");
    }
}
