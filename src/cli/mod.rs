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
    AppCheck, CloudWatch, Engine, Helper, Lifecycle, Listen, ListenAt, Log, Metrics, Mirror,
    MirrorPort, Probe, Protection, Run, Sink, Supervision, DEFAULT_PORT, MIRROR_DEFAULT_PORT,
};
use crate::signal_names::Rewrites;

mod compat;
#[cfg(feature = "fast-start")]
mod fast;
mod flags;
mod metrics_env;
mod otel_env;
mod stop_plan;
mod values;

pub use stop_plan::engine;

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
    engine: Option<Engine>,
) -> Parsed {
    let args: Vec<OsString> = args.into_iter().collect();
    #[cfg(feature = "fast-start")]
    {
        let twins = !twins.is_empty() || lookup("METRICS_SINK").is_some();
        if let Some((cli, sources)) = fast::parse(&args, twins) {
            return settings_or_refusal(cli, sources, &lookup, 2, engine);
        }
    }
    #[cfg(not(feature = "fast-start"))]
    let _ = twins;
    parse_with_clap(args, lookup, engine)
}

/// `parse`, all of it by clap.
fn parse_with_clap(
    args: Vec<OsString>,
    lookup: impl Fn(&str) -> Option<String>,
    engine: Option<Engine>,
) -> Parsed {
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
    settings_or_refusal(cli, sources, &lookup, refusal_code, engine)
}

/// The settings, or their refusal as a usage error that exits with `code`.
fn settings_or_refusal(
    cli: Cli,
    sources: CheckSources,
    lookup: &impl Fn(&str) -> Option<String>,
    code: u8,
    engine: Option<Engine>,
) -> Parsed {
    let given = |source: Option<ValueSource>, value| {
        (source.is_some() && source != Some(ValueSource::DefaultValue)).then_some(value)
    };
    let given = stop_plan::Given {
        delay: given(sources.drain_delay, cli.drain_delay),
        max: cli.drain_max,
        grace: given(sources.grace, cli.grace),
    };
    let probe = cli.probe.is_some();
    match settings(cli, sources, lookup, engine, given) {
        Ok(parsed) => parsed,
        Err(message) => {
            // What the start would have said of its stop plan comes before a refusal
            // that follows the plan: a usage error must not hide the defaults it chose.
            let mut said = String::new();
            if let (false, Ok(plan)) = (probe, stop_plan::stop_plan(engine, given)) {
                for notice in plan.notices {
                    said.push_str("lifeguard: ");
                    said.push_str(&notice);
                    said.push('\n');
                }
            }
            Parsed::Exit {
                message: format!("{said}error: {message}\n\nFor more information, try '--help'.\n"),
                code,
                to_stdout: false,
            }
        }
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
    engine: Option<Engine>,
    given: stop_plan::Given,
) -> Result<Parsed, String> {
    let probe = cli.probe.clone().map(|target| (target, cli.probe_timeout));
    // The probe runs beside a lifeguard configured by flags it does not see (the
    // ENTRYPOINT's); it neither refuses over a stop it does not run nor says its plan.
    let (drain_max, notices) = if probe.is_none() {
        let plan = stop_plan::stop_plan(engine, given)?;
        cli.drain_delay = plan.delay;
        cli.grace = plan.grace;
        (plan.max, plan.notices)
    } else {
        (cli.drain_max.unwrap_or(cli.grace), Vec::new())
    };
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
    let ignored = metrics_env::ignored(lookup, cli.metrics_sink);
    if !ignored.is_empty() && probe.is_none() {
        warnings.push(if cli.metrics_sink == SinkKind::Otlp {
            format!(
                "{} ignored: METRICS_SINK=otlp sends every figure, and names the resource by \
                 OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES",
                ignored.join(", ")
            )
        } else {
            format!(
                "{} ignored: CloudWatch publishing is off without METRICS_NAMESPACE",
                ignored.join(", ")
            )
        });
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
        notices,
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
mod tests;
