//! The flags and their `LIFEGUARD_*` environment twins, as clap reads them (docs/reference.md);
//! `cli::parse` turns them into `Settings`.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::time::Duration;

use clap::{ArgAction, Parser};

use super::values::*;
use crate::logging;
use crate::settings::{Listen, ProbeTarget};
use crate::signal_names::{self, Signal};

/// The defaults that are parsed from text, shared with the start without clap (fast.rs),
/// which must build the very `Cli` clap would.
pub(super) const DEFAULT_DRAIN_DELAY: &str = "5s";
pub(super) const DEFAULT_DRAIN_QUIET: &str = "1s";
pub(super) const DEFAULT_GRACE: &str = "25s";
pub(super) const DEFAULT_LEFTOVER_GRACE: &str = "5s";
pub(super) const DEFAULT_READY_INTERVAL: &str = "1s";
pub(super) const DEFAULT_PROBE_TIMEOUT: &str = "2s";

#[derive(Parser, Debug)]
#[command(
    name = "lifeguard",
    version = super::VERSION,
    // Wrapped to the terminal, at most 100 columns (and 100 without one).
    max_term_width = 100,
    about = "PID 1 for containers: reaps zombies, forwards signals, drains before stopping, \
             and kills what outlives the grace deadline.",
    override_usage = "lifeguard [OPTIONS] [--] COMMAND [ARG...]\n       lifeguard --probe [ready|live|URL]\n       \
                      lifeguard --mirror-ready-port [HOST:]PORT [--listen ADDR]",
    after_help = "Environment:\n  \
        LIFEGUARD_<NAME>           every option, e.g. LIFEGUARD_DRAIN_DELAY=2s; the flag wins\n  \
        METRICS_NAMESPACE          publish to CloudWatch under this namespace (off when empty)\n  \
        METRICS_INTERVAL           seconds between publishes (default 10; 1 or more)\n  \
        METRICS_DIMENSIONS         NAME=VALUE,... on every datum (ClusterName=prod,ServiceName=web)\n  \
        METRICS_BURST_THRESHOLD    publish at once when requests in flight reach this (0: never)\n  \
        METRICS_EXTRA              more metrics, on request: OldestRequestAge, ScaleInProtected\n  \
        AWS_REGION, AWS_*          the AWS SDK's region, credentials, AWS_ENDPOINT_URL_CLOUDWATCH\n  \
        OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_METRIC_EXPORT_INTERVAL\n                             \
        with METRICS_SINK=otlp: the collector, and the resource\n  \
        ECS_CONTAINER_METADATA_URI_V4  set by ECS: CPU and memory become the task's\n  \
        ECS_AGENT_URI              set by ECS: where --scale-in-protection asks\n  \
        TINI_SUBREAPER, TINI_KILL_PROCESS_GROUP, TINI_VERBOSITY, DUMB_INIT_SETSID, DUMB_INIT_DEBUG\n                             \
        tini's and dumb-init's, honoured\n\n\
        See lifeguard(1)."
)]
pub(super) struct Cli {
    /// After SIGTERM: time spent not-ready before the stop signal is relayed. Default 0 as
    /// PID 1 of a plain Docker or Podman container (no ECS or Kubernetes variables)
    #[arg(long, env = "LIFEGUARD_DRAIN_DELAY", value_name = "DUR", default_value = DEFAULT_DRAIN_DELAY,
          value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) drain_delay: Duration,

    /// With --inflight-port: after the drain delay, hold the stop signal until the port is
    /// quiet (see --drain-quiet), up to DUR after the SIGTERM. Default: halfway from the
    /// drain delay to the grace deadline. No effect without --inflight-port
    #[arg(long, env = "LIFEGUARD_DRAIN_MAX", value_name = "DUR",
          value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) drain_max: Option<Duration>,

    /// With --inflight-port: the port is quiet when nothing is in flight and no new request
    /// (a new connection, or bytes received on one) has reached it for DUR; 0 = the first
    /// look with nothing in flight
    #[arg(long, env = "LIFEGUARD_DRAIN_QUIET", value_name = "DUR", default_value = DEFAULT_DRAIN_QUIET,
          value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) drain_quiet: Duration,

    /// Deadline counted from SIGTERM (drain included); then SIGKILL. Must exceed the drain
    /// delay. Default 9s in a plain Docker or Podman container, before `docker stop`'s 10s
    #[arg(long, env = "LIFEGUARD_GRACE", value_name = "DUR", default_value = DEFAULT_GRACE,
          value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) grace: Duration,

    /// Once the app has exited, SIGKILL what it left this long after (the grace deadline if
    /// sooner): nothing routes to a task whose app is gone
    #[arg(long, env = "LIFEGUARD_LEFTOVER_GRACE", value_name = "DUR", default_value = DEFAULT_LEFTOVER_GRACE,
          value_parser = parse_duration, allow_hyphen_values = true)]
    pub(super) leftover_grace: Duration,

    /// Health and metrics endpoint address (HOST:PORT, :PORT), or `off`. Default [::]:9595, dual-stack (0.0.0.0 without IPv6)
    #[arg(long, env = "LIFEGUARD_LISTEN", value_name = "ADDR", value_parser = parse_listen)]
    pub(super) listen: Option<Listen>,

    /// The app is ready while GET URL answers 2xx (http:// only)
    #[arg(long, env = "LIFEGUARD_READY_HTTP", value_name = "URL", value_parser = parse_http_url)]
    pub(super) ready_http: Option<hyper::Uri>,

    /// The app is ready while a TCP connection to HOST:PORT succeeds
    #[arg(long, env = "LIFEGUARD_READY_TCP", value_name = "HOST:PORT", value_parser = parse_host_port)]
    pub(super) ready_tcp: Option<(String, u16)>,

    /// How often the app check runs; it also times out after this long
    #[arg(long, env = "LIFEGUARD_READY_INTERVAL", value_name = "DUR", default_value = DEFAULT_READY_INTERVAL,
          value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub(super) ready_interval: Duration,

    /// A TCP port that listens exactly while /readyz would answer 200 (on --listen's host):
    /// open once the app is ready, refused from the instant a SIGTERM is read, while the
    /// app check fails and after the app exits. A TCP probe of it costs the app no CPU
    #[arg(long, env = "LIFEGUARD_READY_PORT", value_name = "PORT", value_parser = parse_port,
          allow_negative_numbers = true)]
    pub(super) ready_port: Option<u16>,

    /// Count the app's in-flight requests on this TCP port (accept queue plus requests
    /// outstanding, read from the kernel): /metrics, CloudWatch, the drain
    #[arg(long, env = "LIFEGUARD_INFLIGHT_PORT", value_name = "PORT", value_parser = parse_port,
          allow_negative_numbers = true)]
    pub(super) inflight_port: Option<u16>,

    /// On ECS, with --inflight-port: keep the task out of scale-in while a request has been in
    /// flight longer than AFTER (ECS task scale-in protection for 2 minutes, renewed while that
    /// lasts, cleared once none has been seen for AFTER, at least 1m). Never delays a stop.
    /// Default off
    #[arg(long, env = "LIFEGUARD_SCALE_IN_PROTECTION", value_name = "AFTER",
          value_parser = parse_protect_after, allow_hyphen_values = true)]
    pub(super) scale_in_protection: Option<ProtectAfter>,

    /// With METRICS_NAMESPACE: api = PutMetricData through the AWS SDK; emf = Embedded
    /// Metric Format records to the CloudWatch agent at AWS_EMF_AGENT_ENDPOINT, else on
    /// stdout for the log driver (no credentials, no AWS call). otlp = OTLP/HTTP protobuf
    /// to the collector the OTEL_EXPORTER_OTLP_* variables name (no namespace needed)
    #[arg(
        long,
        env = "METRICS_SINK",
        value_name = "api|emf|otlp",
        value_enum,
        default_value = "api",
        ignore_case = true
    )]
    pub(super) metrics_sink: super::metrics_env::SinkKind,

    /// Client mode for HEALTHCHECK: GET lifeguard's own /readyz (ready), /livez (live), or
    /// URL; exit 0 on 2xx, 1 otherwise
    #[arg(long, value_name = "ready|live|URL", num_args = 0..=1, default_missing_value = "ready",
          value_parser = parse_probe)]
    pub(super) probe: Option<ProbeTarget>,

    /// Run as the readiness mirror, in a container of its own beside the app's (no
    /// COMMAND): /readyz answers 200 while PORT (the app's --ready-port) listens in this
    /// network namespace, for HTTP checks that must hold at the peak. --listen: [::]:9597
    #[arg(long, env = "LIFEGUARD_MIRROR_READY_PORT", value_name = "[HOST:]PORT",
          value_parser = parse_mirror_port, allow_negative_numbers = true)]
    pub(super) mirror_ready_port: Option<(String, u16)>,

    /// How long --probe waits for the answer
    #[arg(long, env = "LIFEGUARD_PROBE_TIMEOUT", value_name = "DUR", default_value = DEFAULT_PROBE_TIMEOUT,
          value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub(super) probe_timeout: Duration,

    /// Signal only the direct child, not its process group (dumb-init -c)
    #[arg(short = 'c', long, env = "LIFEGUARD_SINGLE_CHILD", value_parser = boolean)]
    pub(super) single_child: bool,

    /// Rewrite a signal before forwarding it (TERM:QUIT, 15:3; TO = 0 or DROP drops it); repeatable
    #[arg(short = 'r', long, env = "LIFEGUARD_REWRITE", value_name = "FROM:TO",
          value_delimiter = ',', value_parser = signal_names::parse_rewrite)]
    pub(super) rewrite: Vec<(Signal, Signal)>,

    /// The signal from outside that begins the stop (not ready, drain, deadline), e.g. QUIT
    /// for an image whose STOPSIGNAL is SIGQUIT; others are forwarded at once [default: TERM]
    // Parsed as --pdeathsig is (one copy of clap's code for both); checked in settings().
    #[arg(long, env = "LIFEGUARD_STOP_SIGNAL", value_name = "SIG", value_parser = parse_signal)]
    pub(super) stop_signal: Option<Signal>,

    /// Report exit CODE as 0 (tini -e); repeatable
    #[arg(short = 'e', long, env = "LIFEGUARD_REMAP_EXIT", value_name = "CODE",
          value_delimiter = ',', value_parser = parse_exit_code, allow_negative_numbers = true)]
    pub(super) remap_exit: Vec<u8>,

    /// Signal lifeguard gets when its parent dies (tini -p)
    #[arg(short = 'p', long, env = "LIFEGUARD_PDEATHSIG", value_name = "SIG",
          value_parser = parse_signal)]
    pub(super) pdeathsig: Option<Signal>,

    /// Accepted for tini compatibility: lifeguard is a child subreaper whenever it is not PID 1
    #[arg(short = 's', long, env = "LIFEGUARD_SUBREAPER", value_parser = boolean)]
    pub(super) subreaper: bool,

    /// Accepted for tini compatibility: signals go to the process group by default
    #[arg(short = 'g')]
    pub(super) group: bool,

    /// Log each reaped orphan (tini -w)
    #[arg(short = 'w', long, env = "LIFEGUARD_WARN_ON_REAP", value_parser = boolean)]
    pub(super) warn_on_reap: bool,

    /// More log output; repeat for more (-v info, -vv debug, -vvv trace)
    #[arg(short = 'v', long, action = ArgAction::Count)]
    pub(super) verbose: u8,

    /// Less log output: errors only
    #[arg(short = 'q', long, action = ArgAction::Count)]
    pub(super) quiet: u8,

    /// Format of lifeguard's own log lines on stderr
    #[arg(
        long,
        env = "LIFEGUARD_LOG_FORMAT",
        value_name = "FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub(super) log_format: logging::Format,

    /// The app to supervise, and its arguments
    #[arg(value_name = "COMMAND", trailing_var_arg = true,
          required_unless_present_any = ["probe", "mirror_ready_port"],
          value_parser = clap::value_parser!(OsString))]
    pub(super) command: Vec<OsString>,
}
