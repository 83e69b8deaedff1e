//! What the command line and the environment decided, as plain data below every program
//! lifeguard can be: cli/ builds it, and each program reads its own part — PID 1's half
//! `Supervision`, the helper process `Helper`, the probe `Probe`, the readiness mirror
//! `Mirror`. Nothing here parses, validates or does I/O, and nothing here knows either
//! half, so PID 1's half needs neither the parser nor a type of the helper's to start,
//! and the helper's half nothing of supervision's.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::logging::{Format, Level};
use crate::signal_names::{Rewrites, Signal};

/// The endpoint's port when `--listen` is not given (on every address, both families).
pub const DEFAULT_PORT: u16 = 9595;

/// The readiness mirror's port when `--listen` is not given: not the endpoint's default
/// (9595), which the app container's lifeguard holds in the same network namespace, nor
/// 9596, which the examples give `--ready-port`.
pub const MIRROR_DEFAULT_PORT: u16 = 9597;

/// The endpoint's fixed limits (docs/reference.md), read by PID 1, which binds its
/// sockets, and by the helper, which serves them.
pub mod endpoint {
    use std::time::Duration;

    /// Largest request head; a longer one is answered 431.
    pub const MAX_HEAD: usize = 16 * 1024;
    /// Time to send a request head, which is also how long a keep-alive connection may
    /// sit idle.
    pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
    /// Connections held at once, at most (the descriptor limit may lower it).
    pub const MAX_CONNECTIONS: usize = 1024;
    /// How long writing an answer may make no progress before the connection is dropped.
    pub const WRITE_STALL_LIMIT: Duration = Duration::from_secs(5);
    /// Socket buffer sizes asked of the kernel: room for the largest head, and for many
    /// answers (a `/metrics` answer is about a kilobyte).
    pub const RECEIVE_BUFFER: usize = MAX_HEAD;
    pub const SEND_BUFFER: usize = 64 * 1024;
    /// Descriptors asked for: room for the connections and lifeguard's own.
    pub const MAX_DESCRIPTORS: u64 = 2048;
    /// Descriptors kept back from connections (the listeners, the signalfd, stderr, the
    /// netlink and app check's sockets).
    pub const RESERVED_DESCRIPTORS: u64 = 64;
}

/// A run with an app: PID 1's part, the helper process's part, and what both log with.
#[derive(Debug)]
pub struct Run {
    pub supervision: Supervision,
    pub helper: Helper,
    pub log: Log,
    /// Lines for the start, once the log is set up: defaults chosen for where it runs.
    pub notices: Vec<String>,
    /// Warnings for the log, once it is set up (settings that are ignored).
    pub warnings: Vec<String>,
}

/// Where lifeguard runs, as far as it decides the stop's defaults (cli's `engine` tells
/// it once at start): an orchestrator that stops containers with a timeout of its own
/// (ECS, Kubernetes), or a plain container engine (Docker writes `/.dockerenv` into
/// every container, Podman `/run/.containerenv`) whose `stop` kills at 10 s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Docker,
    Podman,
    Ecs,
    Kubernetes,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Docker => "Docker",
            Engine::Podman => "Podman",
            Engine::Ecs => "ECS",
            Engine::Kubernetes => "Kubernetes",
        }
    }

    /// A plain engine: nothing routes traffic by readiness, and its `stop` kills at 10 s.
    pub fn plain(self) -> bool {
        matches!(self, Engine::Docker | Engine::Podman)
    }

    /// The command whose stop a plain engine's defaults fit. Asked of a plain engine
    /// only (`plain`): ECS and Kubernetes stop containers with timeouts of their own.
    pub fn command(self) -> &'static str {
        match self {
            Engine::Podman => "podman",
            Engine::Docker | Engine::Ecs | Engine::Kubernetes => "docker",
        }
    }
}

/// Variables an orchestrator that routes traffic by readiness and stops containers with
/// its own timeout sets in every container: ECS's task metadata endpoints, Kubernetes'
/// service environment. Where one is set, a container engine underneath (ECS on EC2
/// runs Docker) is not the one that stops the container.
pub const ORCHESTRATOR_VARIABLES: [&str; 3] = [
    "ECS_CONTAINER_METADATA_URI_V4",
    "ECS_CONTAINER_METADATA_URI",
    "KUBERNETES_SERVICE_HOST",
];

/// How lifeguard's own lines are written, whichever program it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Log {
    pub level: Level,
    pub format: Format,
}

/// Everything PID 1's half reads: the app, the stop plan, the sockets it binds before
/// the app starts, and which of the helper's parts are on (only whether: their settings
/// are the helper's).
#[derive(Debug)]
pub struct Supervision {
    pub command: Vec<OsString>,
    pub listen: Listen,
    /// `--ready-port`: the port that listens exactly while the app is ready.
    pub ready_port: Option<u16>,
    pub lifecycle: Lifecycle,
    pub pdeathsig: Option<Signal>,
    pub warn_on_reap: bool,
    /// An app check runs (`--ready-http`, `--ready-tcp`, or `--inflight-port`'s).
    pub app_check: bool,
    /// `--inflight-port`: the drain's hold reads the port's figures.
    pub inflight_port: Option<u16>,
    /// ECS scale-in protection is on: the stop line says whether the task is held.
    pub scale_in_protection: bool,
}

/// The stop plan and the signal rules, which the lifecycle (pure) is built from.
#[derive(Clone, Debug)]
pub struct Lifecycle {
    pub drain_delay: Duration,
    pub grace: Duration,
    pub rewrites: Rewrites,
    pub remap_exit: Vec<u8>,
    /// Signals go to the app's whole process group (the default) rather than the child.
    pub group: bool,
    /// Drain until quiet (`--inflight-port`): past the drain delay the stop signal is
    /// held until the port is quiet, at most this long after the SIGTERM
    /// (`--drain-max`). `None`: the stop signal goes at the drain delay.
    pub drain_max: Option<Duration>,
    /// `--drain-quiet`: how long the port must have had no new request, with nothing in
    /// flight, to count as quiet. Zero: one sample with nothing in flight is enough.
    pub drain_quiet: Duration,
    /// `--leftover-grace`: once the app has exited, what it left is SIGKILLed this long
    /// after (or at the grace deadline, if that comes first). Nothing routes to a task
    /// whose app is gone, and its restart waits for lifeguard's exit.
    pub leftover_grace: Duration,
    /// `--stop-signal`: the signal from outside that begins the stop (SIGTERM unless an
    /// image's STOPSIGNAL says otherwise); what is relayed after the drain is this
    /// signal after `--rewrite`.
    pub stop_signal: Signal,
}

/// Everything the helper process reads besides the sockets PID 1 bound for it.
#[derive(Clone, Debug)]
pub struct Helper {
    /// `--stop-signal`: the signal whose arrival `/readyz` answers draining to at once,
    /// before supervision has read it.
    pub stop_signal: Signal,
    pub app_check: Option<AppCheck>,
    pub check_interval: Duration,
    pub metrics: Metrics,
    /// CloudWatch publishing (`METRICS_NAMESPACE` set).
    pub cloudwatch: Option<CloudWatch>,
    /// ECS scale-in protection (`--scale-in-protection` on ECS).
    pub protection: Option<Protection>,
}

/// How the app's readiness is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppCheck {
    Http(hyper::Uri),
    Tcp(String, u16),
    /// `--inflight-port` with no other check: ready while something listens on the
    /// port, as the kernel's socket tables say (no connection to the app).
    Listening(u16),
}

/// The sampler's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// `--inflight-port`: count in-flight requests on this TCP port.
    pub inflight_port: Option<u16>,
    /// `ECS_CONTAINER_METADATA_URI_V4`: CPU and memory are the task's.
    pub ecs_metadata: Option<String>,
}

/// CloudWatch publishing, from the `METRICS_*` variables.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudWatch {
    /// Where the figures go: the PutMetricData API, or Embedded Metric Format records.
    pub sink: Sink,
    pub namespace: String,
    /// One PutMetricData this often (and after every burst publish).
    pub interval: Duration,
    pub dimensions: Vec<(String, String)>,
    /// A 1-second in-flight sample at or above this publishes at once; None: no burst.
    pub burst_threshold: Option<u64>,
    /// `METRICS_EXTRA=OldestRequestAge`: the oldest waiting request's age too (a custom
    /// metric more, so only on request).
    pub oldest_request_age: bool,
    /// `METRICS_EXTRA=ScaleInProtected`: 1 while ECS keeps the task out of scale-in, 0
    /// otherwise (with `--scale-in-protection`).
    pub scale_in_protected: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sink {
    Api,
    /// EMF records to the agent at `AWS_EMF_AGENT_ENDPOINT`, or to stdout.
    Emf(Option<Agent>),
    /// OTLP/HTTP protobuf to an OpenTelemetry collector.
    Otlp(Otlp),
}

/// `METRICS_SINK=otlp`: where and how, from the OpenTelemetry SDK's own variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Otlp {
    /// The full URL requests go to (`…/v1/metrics`).
    pub endpoint: hyper::Uri,
    /// Extra request headers (`OTEL_EXPORTER_OTLP_HEADERS`), values decoded.
    pub headers: Vec<(String, String)>,
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`; the publisher's own bound applies too.
    pub timeout: Duration,
    /// The resource attributes the user gave (`OTEL_RESOURCE_ATTRIBUTES`, with
    /// `OTEL_SERVICE_NAME` as `service.name`): they win over what lifeguard learns.
    pub resource: Vec<(String, String)>,
    /// Sign each export with SigV4 for CloudWatch's OTLP endpoint in this region: set
    /// when the endpoint is CloudWatch's own and no `Authorization` header is given.
    pub sigv4_region: Option<String>,
}

/// The CloudWatch agent's EMF listener, as AWS's embedded-metrics libraries name it:
/// `tcp://host:port` or `udp://host:port` in `AWS_EMF_AGENT_ENDPOINT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agent {
    Tcp(String, u16),
    Udp(String, u16),
}

/// `--scale-in-protection` on ECS: the threshold and the agent's state endpoint.
#[derive(Clone, Debug)]
pub struct Protection {
    pub after: Duration,
    pub endpoint: hyper::Uri,
}

/// `lifeguard --probe`: what to ask, how long to wait, and where the endpoint is.
#[derive(Debug)]
pub struct Probe {
    pub target: ProbeTarget,
    pub timeout: Duration,
    pub listen: Listen,
    pub log: Log,
    pub warnings: Vec<String>,
}

/// What `--probe` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeTarget {
    Ready,
    Live,
    Url(hyper::Uri),
}

/// Everything the readiness mirror (`--mirror-ready-port`) needs to run.
#[derive(Debug)]
pub struct Mirror {
    pub watched: MirrorPort,
    pub listen: ListenAt,
    pub pdeathsig: Option<Signal>,
    pub warn_on_reap: bool,
    pub log: Log,
    /// Warnings for the log, once it is set up (settings that are ignored).
    pub warnings: Vec<String>,
}

/// `--mirror-ready-port`: the port (and, optionally, the address) whose listener the
/// mirror reports; no address: a listener on any address counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MirrorPort {
    pub host: Option<IpAddr>,
    pub port: u16,
}

/// The endpoint address: `explicit` when the user named it (flag or environment), which
/// turns a failure to bind into an error instead of a warning; `None` is `off`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    pub at: Option<ListenAt>,
    pub explicit: bool,
}

/// Where the endpoint listens: every address of both families (the default, and
/// `:PORT`), an address, or a host name resolved once at start, the endpoint then
/// listening on every address it gives (`localhost`: 127.0.0.1 and ::1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAt {
    /// One dual-stack socket on `[::]` (IPV6_V6ONLY off, as Go's `:PORT`), so an
    /// IPv6-only pod (EKS in IPv6 mode, whose kubelet probes the pod's IPv6 address) is
    /// reached as well as an IPv4 one; `0.0.0.0` where the kernel has no IPv6.
    Any(u16),
    Addr(SocketAddr),
    Name {
        host: String,
        port: u16,
    },
}

impl ListenAt {
    pub fn port(&self) -> u16 {
        match self {
            ListenAt::Any(port) | ListenAt::Name { port, .. } => *port,
            ListenAt::Addr(addr) => addr.port(),
        }
    }
}

impl std::fmt::Display for ListenAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAt::Any(port) => write!(f, "[::]:{port}"),
            ListenAt::Addr(addr) => write!(f, "{addr}"),
            ListenAt::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}
