//! Reading the app's cgroup: `discover` finds its files once (the layout, one
//! directory per controller, the files in it), then `Cgroup::read` opens them once a
//! second. Everything is read under a root prefix, so the recorded trees of
//! tests/fixtures/cgroup stand in for / in the tests.
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::parse::{
    flat_key, parse_cfs_quota_us, parse_cpu_list, parse_cpu_max, parse_mem_total,
    parse_memory_limit, parse_mountinfo, parse_proc_cgroup, parse_u64, quota_cores, Version,
    UNLIMITED_FLOOR,
};
use super::resolve::{resolve, v2_dir, ControllerDir, Resolved};

/// One second's figures. Every field is `None` when its file is missing, unreadable or
/// not understood (see `Reading::new_failures`), or when the cgroup sets no such limit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// v2 cpu.stat usage_usec × 1000; v1 cpuacct.usage.
    pub cpu_usage_ns: Option<u64>,
    /// CFS quota ÷ period; `None` = no quota.
    pub cpu_quota_cores: Option<f64>,
    /// CPUs in the cpuset (v2 cpuset.cpus.effective; v1 cpuset.cpus).
    pub cpuset_cpus: Option<u32>,
    /// /sys/devices/system/cpu/online.
    pub online_cpus: Option<u32>,
    /// v2 cpu.stat throttled_usec × 1000; v1 cpu.stat throttled_time.
    pub cpu_throttled_ns: Option<u64>,
    /// cpu.stat nr_throttled: periods in which the quota ran out.
    pub cpu_nr_throttled: Option<u64>,
    /// cpu.stat nr_periods: enforcement periods that have elapsed with the app
    /// runnable (the quota's 100 ms periods, by default).
    pub cpu_nr_periods: Option<u64>,
    /// v2 memory.current; v1 memory.usage_in_bytes.
    pub memory_usage: Option<u64>,
    /// v2 memory.stat inactive_file; v1 memory.stat total_inactive_file.
    pub memory_inactive_file: Option<u64>,
    /// v2 memory.max; v1 the smaller of memory.limit_in_bytes and memory.stat
    /// hierarchical_memory_limit. `None` = unlimited: the caller falls back to
    /// `memory_total`.
    pub memory_limit: Option<u64>,
    /// MemTotal from /proc/meminfo.
    pub memory_total: Option<u64>,
    /// v2 memory.events oom_kill; v1 memory.oom_control oom_kill (kernel 4.13+).
    pub oom_kills: Option<u64>,
    /// Fields that could not be read for the first time in this Cgroup's life: each
    /// field is reported at most once, so the caller can log every entry as a warning
    /// without flooding. Empty on most readings.
    pub new_failures: Vec<ReadFailure>,
}

/// A field that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFailure {
    /// The `Reading` field's name, e.g. `"memory_limit"`.
    pub field: &'static str,
    pub path: PathBuf,
    /// The I/O error, or "unexpected content".
    pub reason: String,
}

impl Reading {
    /// The CPU limit in cores: the smallest of the CFS quota, the cpuset's CPU count and
    /// the online CPUs (a quota of 8 cores on a 2-CPU machine is 2 cores).
    pub fn limit_cores(&self) -> Option<f64> {
        [
            self.cpu_quota_cores,
            self.cpuset_cpus.map(f64::from),
            self.online_cpus.map(f64::from),
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min)
    }

    /// usage − inactive_file, clamped at 0 (cAdvisor's working set, which is what the
    /// kubelet and `docker stats` show). Without inactive_file: the usage, as cAdvisor.
    pub fn working_set(&self) -> Option<u64> {
        let usage = self.memory_usage?;
        Some(usage.saturating_sub(self.memory_inactive_file.unwrap_or(0)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// cgroup v2 only.
    V2,
    /// cgroup v1 only.
    V1,
    /// v1 controllers and a cgroup2 mount (systemd's "hybrid").
    Hybrid,
    /// No cgroup filesystem found.
    None,
}

/// Paths resolved once by `discover`; `read` only opens them.
#[derive(Debug, Clone)]
enum CpuFiles {
    V2 {
        max: PathBuf,
        stat: PathBuf,
    },
    V1 {
        quota: PathBuf,
        period: PathBuf,
        stat: PathBuf,
    },
}

#[derive(Debug, Clone)]
struct MemoryFiles {
    version: Version,
    usage: PathBuf,
    stat: PathBuf,
    limit: PathBuf,
    /// v2 memory.events; v1 memory.oom_control.
    events: PathBuf,
}

#[derive(Debug)]
pub struct Cgroup {
    layout: Layout,
    resolved: Resolved,
    v2_mount_dir: Option<PathBuf>,
    v2_controllers: String,
    // Files, with the root prefix:
    cpu_usage: Option<(PathBuf, Version)>,
    cpu: Option<CpuFiles>,
    cpuset: Option<PathBuf>,
    memory: Option<MemoryFiles>,
    meminfo: PathBuf,
    cpu_online: PathBuf,
    reader: Reader,
    /// Reads so far; the limits are read again every `LIMITS_EVERY` reads.
    reads: u64,
    limits: Limits,
}

/// The figures that change only when someone resizes the container (`docker update`,
/// a new task size): read every tenth time, which halves the files each sample opens
/// (lifeguard's own CPU at one sample a second).
const LIMITS_EVERY: u64 = 10;

#[derive(Debug, Default, Clone, Copy)]
struct Limits {
    cpu_quota_cores: Option<f64>,
    cpuset_cpus: Option<u32>,
    online_cpus: Option<u32>,
    memory_limit: Option<u64>,
    memory_total: Option<u64>,
}

/// Reads small files into one reused buffer and remembers which fields were reported.
#[derive(Debug, Default)]
struct Reader {
    buf: String,
    reported: HashSet<&'static str>,
    new_failures: Vec<ReadFailure>,
}

impl Reader {
    fn read(&mut self, path: &Path, field: &'static str) -> Option<&str> {
        self.buf.clear();
        match std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut self.buf)) {
            Ok(_) => Some(&self.buf),
            Err(err) => {
                self.fail(field, path, err.to_string());
                None
            }
        }
    }

    fn fail(&mut self, field: &'static str, path: &Path, reason: String) {
        if self.reported.insert(field) {
            self.new_failures.push(ReadFailure {
                field,
                path: path.to_owned(),
                reason,
            });
        }
    }

    /// Reads `path` and applies `parse`; a parse that gives `None` is a failure too.
    fn value<T>(
        &mut self,
        path: &Path,
        field: &'static str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let value = parse(self.read(path, field)?);
        if value.is_none() {
            self.fail(field, path, "unexpected content".to_owned());
        }
        value
    }
}

/// Discovers the cgroup of this process on the real system.
pub fn discover() -> Cgroup {
    let proc_self_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    discover_in(Path::new("/"), &proc_self_cgroup, &mountinfo)
}

/// `abs` (a path as the process sees it) under `root`.
fn under(root: &Path, abs: &Path) -> PathBuf {
    root.join(abs.strip_prefix("/").unwrap_or(abs))
}

/// Discovers from the given /proc/self/cgroup and mountinfo texts, reading the cgroup
/// files under `root` (a recorded tree in the tests, `/` for real). MemTotal and the
/// online CPUs come from `root`/proc/meminfo and `root`/sys/devices/system/cpu/online
/// unless `with_system_files` says otherwise.
fn discover_in(root: &Path, proc_self_cgroup: &str, mountinfo: &str) -> Cgroup {
    let entries = parse_proc_cgroup(proc_self_cgroup);
    let mounts = parse_mountinfo(mountinfo);
    let v2_mount_dir = v2_dir(&entries, &mounts);
    // cgroup.controllers of the process's own v2 cgroup: the controllers whose files
    // exist there (enabled by the parent's subtree_control; at the root, all that are
    // not bound to v1).
    let v2_controllers = v2_mount_dir
        .as_ref()
        .and_then(|d| std::fs::read_to_string(under(root, &d.join("cgroup.controllers"))).ok())
        .unwrap_or_default();
    let resolved = resolve(&entries, &mounts, &v2_controllers);

    let any_v1 = mounts.iter().any(|m| m.version == Version::V1);
    let layout = match (any_v1, v2_mount_dir.is_some()) {
        (true, true) => Layout::Hybrid,
        (true, false) => Layout::V1,
        (false, true) => Layout::V2,
        (false, false) => Layout::None,
    };

    let file = |d: &ControllerDir, name: &str| under(root, &d.dir.join(name));
    let cpu_usage = resolved.cpuacct.as_ref().map(|d| match d.version {
        Version::V2 => (file(d, "cpu.stat"), Version::V2),
        Version::V1 => (file(d, "cpuacct.usage"), Version::V1),
    });
    let cpu = resolved.cpu.as_ref().map(|d| match d.version {
        Version::V2 => CpuFiles::V2 {
            max: file(d, "cpu.max"),
            stat: file(d, "cpu.stat"),
        },
        Version::V1 => CpuFiles::V1 {
            quota: file(d, "cpu.cfs_quota_us"),
            period: file(d, "cpu.cfs_period_us"),
            stat: file(d, "cpu.stat"),
        },
    });
    let cpuset = resolved.cpuset.as_ref().map(|d| match d.version {
        Version::V2 => file(d, "cpuset.cpus.effective"),
        Version::V1 => file(d, "cpuset.cpus"),
    });
    let memory = resolved.memory.as_ref().map(|d| {
        let (usage, limit, events) = match d.version {
            Version::V2 => ("memory.current", "memory.max", "memory.events"),
            Version::V1 => (
                "memory.usage_in_bytes",
                "memory.limit_in_bytes",
                "memory.oom_control",
            ),
        };
        MemoryFiles {
            version: d.version,
            usage: file(d, usage),
            stat: file(d, "memory.stat"),
            limit: file(d, limit),
            events: file(d, events),
        }
    });

    Cgroup {
        layout,
        resolved,
        v2_mount_dir,
        v2_controllers: v2_controllers
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        cpu_usage,
        cpu,
        cpuset,
        memory,
        meminfo: root.join("proc/meminfo"),
        cpu_online: root.join("sys/devices/system/cpu/online"),
        reader: Reader::default(),
        reads: 0,
        limits: Limits::default(),
    }
}

impl Cgroup {
    /// Reads MemTotal and the online CPUs from these files instead (recorded trees keep
    /// them at their top level).
    #[cfg(test)]
    fn with_system_files(mut self, meminfo: PathBuf, cpu_online: PathBuf) -> Self {
        self.meminfo = meminfo;
        self.cpu_online = cpu_online;
        self
    }

    #[cfg(test)]
    fn layout(&self) -> Layout {
        self.layout
    }

    #[cfg(test)]
    fn resolved(&self) -> &Resolved {
        &self.resolved
    }

    /// One line for the info log: the layout and where each controller was found, e.g.
    /// `cgroup hybrid (cgroup2 at /sys/fs/cgroup/unified, controllers: hugetlb);
    /// cpu v1 /sys/fs/cgroup/cpu; cpuacct v1 /sys/fs/cgroup/cpuacct; ...`.
    pub fn describe(&self) -> String {
        let mut out = String::from("cgroup ");
        out.push_str(match self.layout {
            Layout::V2 => "v2",
            Layout::V1 => "v1",
            Layout::Hybrid => "hybrid",
            Layout::None => "not found",
        });
        if let Some(dir) = &self.v2_mount_dir {
            let controllers = if self.v2_controllers.is_empty() {
                "none"
            } else {
                &self.v2_controllers
            };
            let _ = write!(
                out,
                " (cgroup2 at {}, controllers: {controllers})",
                dir.display()
            );
        }
        let r = &self.resolved;
        for (name, dir) in [
            ("cpu", &r.cpu),
            ("cpuacct", &r.cpuacct),
            ("cpuset", &r.cpuset),
            ("memory", &r.memory),
        ] {
            match dir {
                Some(d) => {
                    let v = if d.version == Version::V1 { "v1" } else { "v2" };
                    let _ = write!(out, "; {name} {v} {}", d.dir.display());
                }
                None => {
                    let _ = write!(out, "; {name} not found");
                }
            }
        }
        out
    }

    /// One short phrase for the start line: the layout and the directory the memory (or
    /// else CPU) figures come from; `describe` has every controller.
    pub fn summary(&self) -> String {
        let r = &self.resolved;
        let layout = match self.layout {
            Layout::V2 => "v2",
            Layout::V1 => "v1",
            Layout::Hybrid => "hybrid",
            Layout::None => return "not found".to_string(),
        };
        match r.memory.as_ref().or(r.cpu.as_ref()).or(r.cpuacct.as_ref()) {
            Some(d) => format!("{layout} {}", d.dir.display()),
            None => layout.to_string(),
        }
    }

    /// Reads the current figures: about ten small files, no directory walk. `&mut`
    /// because it reuses one buffer and remembers which fields it already reported as
    /// failing (`Reading::new_failures`). A controller that was not found leaves its
    /// fields `None` without a failure (`describe` already said so).
    pub fn read(&mut self) -> Reading {
        let mut r = Reading::default();
        let fresh_limits = self.reads.is_multiple_of(LIMITS_EVERY);
        self.reads += 1;
        let rd = &mut self.reader;
        let mut limits = self.limits;

        match &self.cpu_usage {
            Some((path, Version::V2)) => {
                r.cpu_usage_ns = rd.value(path, "cpu_usage_ns", |t| {
                    flat_key(t, "usage_usec").and_then(|us| us.checked_mul(1000))
                })
            }
            Some((path, Version::V1)) => r.cpu_usage_ns = rd.value(path, "cpu_usage_ns", parse_u64),
            None => {}
        }

        match &self.cpu {
            Some(CpuFiles::V2 { max, stat }) => {
                if fresh_limits {
                    limits.cpu_quota_cores = rd
                        .value(max, "cpu_quota_cores", |t| parse_cpu_max(t).ok())
                        .flatten();
                }
                if let Some(text) = rd.read(stat, "cpu_throttled_ns") {
                    r.cpu_throttled_ns =
                        flat_key(text, "throttled_usec").and_then(|us| us.checked_mul(1000));
                    r.cpu_nr_throttled = flat_key(text, "nr_throttled");
                    r.cpu_nr_periods = flat_key(text, "nr_periods");
                    if r.cpu_throttled_ns.is_none() {
                        rd.fail("cpu_throttled_ns", stat, "no throttled_usec".to_owned());
                    }
                }
            }
            Some(CpuFiles::V1 {
                quota,
                period,
                stat,
            }) => {
                // -1 = no quota; the period is read only when there is one.
                if fresh_limits {
                    let quota_us =
                        rd.value(quota, "cpu_quota_cores", |t| parse_cfs_quota_us(t).ok());
                    limits.cpu_quota_cores = match quota_us.flatten() {
                        Some(quota_us) => rd
                            .value(period, "cpu_quota_cores", |p| {
                                quota_cores(quota_us, p.trim().parse().ok()?).ok()
                            })
                            .flatten(),
                        None => None,
                    };
                }
                if let Some(text) = rd.read(stat, "cpu_throttled_ns") {
                    r.cpu_throttled_ns = flat_key(text, "throttled_time");
                    r.cpu_nr_throttled = flat_key(text, "nr_throttled");
                    r.cpu_nr_periods = flat_key(text, "nr_periods");
                    if r.cpu_throttled_ns.is_none() {
                        rd.fail("cpu_throttled_ns", stat, "no throttled_time".to_owned());
                    }
                }
            }
            None => {}
        }

        if fresh_limits {
            if let Some(path) = &self.cpuset {
                limits.cpuset_cpus = rd.value(path, "cpuset_cpus", parse_cpu_list);
            }
            limits.online_cpus = rd.value(&self.cpu_online, "online_cpus", parse_cpu_list);
        }

        if let Some(m) = &self.memory {
            r.memory_usage = rd.value(&m.usage, "memory_usage", parse_u64);
            let mut hierarchical_limit = None;
            if let Some(text) = rd.read(&m.stat, "memory_inactive_file") {
                r.memory_inactive_file = match m.version {
                    Version::V2 => flat_key(text, "inactive_file"),
                    // v1 has both: inactive_file is this cgroup's own pages,
                    // total_inactive_file includes its descendants, as usage_in_bytes
                    // does (use_hierarchy is always 1 since 5.x). cAdvisor uses total_.
                    Version::V1 => flat_key(text, "total_inactive_file")
                        .or_else(|| flat_key(text, "inactive_file")),
                };
                if m.version == Version::V1 {
                    // The effective limit, ancestors included: a v1 cgroup nested below
                    // the limited one shows "unlimited" in its own limit_in_bytes.
                    hierarchical_limit = flat_key(text, "hierarchical_memory_limit")
                        .filter(|l| *l < UNLIMITED_FLOOR);
                }
                if r.memory_inactive_file.is_none() {
                    rd.fail(
                        "memory_inactive_file",
                        &m.stat,
                        "no inactive_file".to_owned(),
                    );
                }
            }
            if fresh_limits {
                limits.memory_limit = rd
                    .value(&m.limit, "memory_limit", |t| parse_memory_limit(t).ok())
                    .flatten();
            }
            r.memory_limit = match (limits.memory_limit, hierarchical_limit) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // v1 memory.oom_control has no oom_kill line before 4.13: reported once.
            r.oom_kills = rd.value(&m.events, "oom_kills", |t| flat_key(t, "oom_kill"));
        }

        if fresh_limits {
            limits.memory_total = rd.value(&self.meminfo, "memory_total", parse_mem_total);
        }
        r.cpu_quota_cores = limits.cpu_quota_cores;
        r.cpuset_cpus = limits.cpuset_cpus;
        r.online_cpus = limits.online_cpus;
        r.memory_total = limits.memory_total;
        self.limits = limits;
        r.new_failures = std::mem::take(&mut rd.new_failures);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::super::resolve::tests::dir;
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn fixture_dir(layout: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/cgroup")
            .join(layout)
    }

    fn fixture(layout: &str) -> Cgroup {
        let dir = fixture_dir(layout);
        let text = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        discover_in(&dir, &text("proc_self_cgroup"), &text("mountinfo"))
            .with_system_files(dir.join("meminfo"), dir.join("cpu_online"))
    }

    fn failed_fields(reading: &Reading) -> Vec<&'static str> {
        let mut fields: Vec<_> = reading.new_failures.iter().map(|f| f.field).collect();
        fields.sort_unstable();
        fields
    }

    // --- recorded trees ---------------------------------------------------------------

    /// Recorded on this project's v1 machine: cgroup2 mounted alone in a mount namespace
    /// (the v1 hierarchies unmounted there, still attached), the process in a v2 cgroup
    /// of its own. No controller is v2's; the usage is (tests/cgroup_v2.rs runs it live).
    #[test]
    fn v2_beside_v1_reads_the_usage_v2_keeps_without_controllers() {
        let mut cg = fixture("v2-beside-v1");
        assert_eq!(
            cg.resolved(),
            &Resolved {
                cpu: None,
                cpuacct: dir(Version::V2, "/sys/fs/cgroup/app"),
                cpuset: None,
                memory: None,
            }
        );
        let r = cg.read();
        assert_eq!(r.cpu_usage_ns, Some(4_526_000));
        assert_eq!(r.memory_usage, None);
        assert_eq!(r.cpu_quota_cores, None);
        assert_eq!(cg.summary(), "v2 /sys/fs/cgroup/app");
    }

    #[test]
    fn v2_private_namespace_with_limits() {
        let mut cg = fixture("v2");
        assert_eq!(cg.layout(), Layout::V2);
        let v2 = dir(Version::V2, "/sys/fs/cgroup");
        assert_eq!(
            cg.resolved(),
            &Resolved {
                cpu: v2.clone(),
                cpuacct: v2.clone(),
                cpuset: v2.clone(),
                memory: v2,
            }
        );
        let r = cg.read();
        let expected = Reading {
            cpu_usage_ns: Some(123_456_789_000),
            cpu_quota_cores: Some(0.5),
            cpuset_cpus: Some(4),
            online_cpus: Some(8),
            cpu_throttled_ns: Some(7_654_321_000),
            cpu_nr_throttled: Some(42),
            cpu_nr_periods: Some(5000),
            memory_usage: Some(160 * MIB),
            memory_inactive_file: Some(40 * MIB),
            memory_limit: Some(256 * MIB),
            memory_total: Some(16_318_420 * 1024),
            oom_kills: Some(2),
            new_failures: vec![],
        };
        assert_eq!(r, expected);
        assert_eq!(r.limit_cores(), Some(0.5));
        assert_eq!(r.working_set(), Some(120 * MIB));
        assert_eq!(
            cg.describe(),
            "cgroup v2 (cgroup2 at /sys/fs/cgroup, controllers: cpuset cpu io memory hugetlb pids rdma misc); \
             cpu v2 /sys/fs/cgroup; cpuacct v2 /sys/fs/cgroup; cpuset v2 /sys/fs/cgroup; memory v2 /sys/fs/cgroup"
        );
    }

    #[test]
    fn v2_unlimited_service_below_the_root() {
        let mut cg = fixture("v2-unlimited");
        assert_eq!(cg.layout(), Layout::V2);
        assert_eq!(
            cg.resolved().memory,
            dir(Version::V2, "/sys/fs/cgroup/system.slice/app.service")
        );
        let r = cg.read();
        assert_eq!(
            r,
            Reading {
                cpu_usage_ns: Some(5_000_000_000),
                cpu_quota_cores: None,
                cpuset_cpus: Some(4),
                online_cpus: Some(4),
                cpu_throttled_ns: Some(0),
                cpu_nr_throttled: Some(0),
                cpu_nr_periods: Some(0),
                memory_usage: Some(30 * MIB),
                memory_inactive_file: Some(8 * MIB),
                memory_limit: None,
                memory_total: Some(8_039_784 * 1024),
                oom_kills: Some(0),
                new_failures: vec![],
            }
        );
        assert_eq!(r.limit_cores(), Some(4.0));
        assert_eq!(r.working_set(), Some(22 * MIB));
    }

    /// This machine's real layout, recorded: v1 controllers with cpu and cpuacct mounted
    /// apart, memory nested below the root, and a cgroup2 at /sys/fs/cgroup/unified
    /// whose root lists only hugetlb (so it is the hybrid layout).
    #[test]
    fn v1_split_cpu_cpuacct_recorded_from_this_machine() {
        let mut cg = fixture("v1-split");
        assert_eq!(cg.layout(), Layout::Hybrid);
        let memory = "/sys/fs/cgroup/memory/process_api/a26bbbb044f203f49fa0604c6dd8e9d4";
        assert_eq!(
            cg.resolved(),
            &Resolved {
                cpu: dir(Version::V1, "/sys/fs/cgroup/cpu"),
                cpuacct: dir(Version::V1, "/sys/fs/cgroup/cpuacct"),
                cpuset: dir(Version::V1, "/sys/fs/cgroup/cpuset"),
                memory: dir(Version::V1, memory),
            }
        );
        let r = cg.read();
        assert_eq!(
            r,
            Reading {
                cpu_usage_ns: Some(200_579_528_044),
                cpu_quota_cores: None,
                cpuset_cpus: Some(2),
                online_cpus: Some(2),
                cpu_throttled_ns: Some(0),
                cpu_nr_throttled: Some(0),
                cpu_nr_periods: Some(0),
                memory_usage: Some(887_742_464),
                memory_inactive_file: Some(543_399_936),
                // 9223372036854771712, LONG_MAX rounded to 4 KiB: unlimited.
                memory_limit: None,
                memory_total: Some(24_684_084 * 1024),
                oom_kills: Some(0),
                new_failures: vec![],
            }
        );
        assert_eq!(r.limit_cores(), Some(2.0));
        assert_eq!(r.working_set(), Some(887_742_464 - 543_399_936));
        assert_eq!(
            cg.describe(),
            format!(
                "cgroup hybrid (cgroup2 at /sys/fs/cgroup/unified, controllers: hugetlb); \
                 cpu v1 /sys/fs/cgroup/cpu; cpuacct v1 /sys/fs/cgroup/cpuacct; \
                 cpuset v1 /sys/fs/cgroup/cpuset; memory v1 {memory}"
            )
        );
    }

    /// A Docker container on v1: cpu,cpuacct comounted, every mount's root is the
    /// container's /docker/<id>, which is also its path in /proc/self/cgroup, so the
    /// files are at the mount points themselves.
    #[test]
    fn v1_docker_comounted_with_mount_root() {
        let mut cg = fixture("v1-docker");
        assert_eq!(cg.layout(), Layout::V1);
        assert_eq!(
            cg.resolved(),
            &Resolved {
                cpu: dir(Version::V1, "/sys/fs/cgroup/cpu,cpuacct"),
                cpuacct: dir(Version::V1, "/sys/fs/cgroup/cpu,cpuacct"),
                cpuset: dir(Version::V1, "/sys/fs/cgroup/cpuset"),
                memory: dir(Version::V1, "/sys/fs/cgroup/memory"),
            }
        );
        let r = cg.read();
        assert_eq!(
            r,
            Reading {
                cpu_usage_ns: Some(98_765_432_101),
                cpu_quota_cores: Some(1.5),
                cpuset_cpus: Some(2),
                online_cpus: Some(4),
                cpu_throttled_ns: Some(4_100_200_300),
                cpu_nr_throttled: Some(37),
                cpu_nr_periods: Some(812),
                memory_usage: Some(300 * MIB),
                // total_inactive_file (50 MiB), not inactive_file (40 MiB).
                memory_inactive_file: Some(50 * MIB),
                memory_limit: Some(512 * MIB),
                memory_total: Some(16_318_420 * 1024),
                oom_kills: Some(3),
                new_failures: vec![],
            }
        );
        assert_eq!(r.limit_cores(), Some(1.5));
        assert_eq!(r.working_set(), Some(250 * MIB));
    }

    /// systemd's hybrid layout: the cgroup2 mount has no controllers, so everything is
    /// read from v1, even though unified/<service>/cpu.stat exists with a usage.
    #[test]
    fn hybrid_reads_v1_not_the_empty_unified_hierarchy() {
        let mut cg = fixture("hybrid");
        assert_eq!(cg.layout(), Layout::Hybrid);
        let svc = "system.slice/app.service";
        assert_eq!(
            cg.resolved(),
            &Resolved {
                cpu: dir(Version::V1, &format!("/sys/fs/cgroup/cpu,cpuacct/{svc}")),
                cpuacct: dir(Version::V1, &format!("/sys/fs/cgroup/cpu,cpuacct/{svc}")),
                cpuset: dir(Version::V1, "/sys/fs/cgroup/cpuset"),
                memory: dir(Version::V1, &format!("/sys/fs/cgroup/memory/{svc}")),
            }
        );
        let r = cg.read();
        assert_eq!(
            r,
            Reading {
                cpu_usage_ns: Some(7_000_000_000),
                cpu_quota_cores: Some(2.0),
                cpuset_cpus: Some(6),
                online_cpus: Some(8),
                cpu_throttled_ns: Some(250_000_000),
                cpu_nr_throttled: Some(5),
                cpu_nr_periods: Some(100),
                memory_usage: Some(70 * MIB),
                memory_inactive_file: Some(10 * MIB),
                memory_limit: Some(GIB),
                memory_total: Some(8_039_784 * 1024),
                oom_kills: Some(0),
                new_failures: vec![],
            }
        );
        assert_eq!(r.limit_cores(), Some(2.0));
        assert!(cg.describe().starts_with(&format!(
            "cgroup hybrid (cgroup2 at /sys/fs/cgroup/unified/{svc}, controllers: none); cpu v1 "
        )));
    }

    #[test]
    fn v1_unlimited_64k_pages_and_no_oom_kill_line() {
        let mut cg = fixture("v1-unlimited");
        assert_eq!(cg.layout(), Layout::V1);
        let r = cg.read();
        assert_eq!(failed_fields(&r), ["oom_kills"]);
        assert_eq!(
            r,
            Reading {
                cpu_usage_ns: Some(555_000_000_000),
                cpu_quota_cores: None,
                cpuset_cpus: Some(4),
                online_cpus: Some(4),
                cpu_throttled_ns: Some(0),
                cpu_nr_throttled: Some(0),
                cpu_nr_periods: Some(0),
                memory_usage: Some(4 * GIB),
                memory_inactive_file: Some(GIB),
                memory_limit: None,
                memory_total: Some(8_039_784 * 1024),
                // Kernels before 4.13 have no oom_kill line in memory.oom_control.
                oom_kills: None,
                new_failures: r.new_failures.clone(),
            }
        );
        assert_eq!(r.limit_cores(), Some(4.0));
        assert_eq!(r.working_set(), Some(3 * GIB));
        assert!(cg.read().new_failures.is_empty(), "reported once");
    }

    #[test]
    fn missing_and_broken_files_give_none_and_are_reported_once() {
        let mut cg = fixture("missing");
        let r = cg.read();
        assert_eq!(
            failed_fields(&r),
            [
                "cpu_quota_cores",
                "cpu_throttled_ns",
                "cpu_usage_ns",
                "cpuset_cpus",
                "memory_inactive_file",
                "memory_limit",
                "online_cpus",
                "oom_kills",
            ]
        );
        let cpu_max = r
            .new_failures
            .iter()
            .find(|f| f.field == "cpu_quota_cores")
            .unwrap();
        assert_eq!(
            cpu_max.path,
            fixture_dir("missing").join("sys/fs/cgroup/cpu.max")
        );
        assert!(
            cpu_max.reason.contains("No such file"),
            "{}",
            cpu_max.reason
        );
        let limit = r
            .new_failures
            .iter()
            .find(|f| f.field == "memory_limit")
            .unwrap();
        assert_eq!(limit.reason, "unexpected content");
        assert_eq!(
            r,
            Reading {
                cpu_usage_ns: None,
                cpu_quota_cores: None,
                cpuset_cpus: None,
                online_cpus: None,
                cpu_throttled_ns: None,
                cpu_nr_throttled: None,
                cpu_nr_periods: None,
                memory_usage: Some(MIB),
                memory_inactive_file: None,
                memory_limit: None,
                memory_total: Some(8_039_784 * 1024),
                oom_kills: None,
                new_failures: r.new_failures.clone(),
            }
        );
        assert_eq!(r.limit_cores(), None);
        assert_eq!(
            r.working_set(),
            Some(MIB),
            "usage alone without inactive_file, as cAdvisor"
        );
        let again = cg.read();
        assert!(again.new_failures.is_empty(), "{:?}", again.new_failures);
        assert_eq!(again.memory_usage, Some(MIB));
    }

    #[test]
    fn no_cgroup_at_all() {
        let mut cg = discover_in(Path::new("/nonexistent"), "", "");
        assert_eq!(cg.layout(), Layout::None);
        assert_eq!(cg.resolved(), &Resolved::default());
        let r = cg.read();
        assert_eq!(r.cpu_usage_ns, None);
        assert_eq!(r.memory_usage, None);
        assert_eq!(failed_fields(&r), ["memory_total", "online_cpus"]);
        assert!(cg.describe().starts_with("cgroup not found; cpu not found"));
    }

    #[test]
    fn under_root_prefix() {
        assert_eq!(
            under(Path::new("/"), Path::new("/sys/fs/cgroup")),
            PathBuf::from("/sys/fs/cgroup")
        );
        assert_eq!(
            under(Path::new("/fx"), Path::new("/sys/fs")),
            PathBuf::from("/fx/sys/fs")
        );
    }

    #[test]
    fn limit_cores_is_the_smallest() {
        let r = Reading {
            cpu_quota_cores: Some(8.0),
            cpuset_cpus: Some(3),
            online_cpus: Some(4),
            ..Reading::default()
        };
        assert_eq!(r.limit_cores(), Some(3.0));
        let r = Reading {
            online_cpus: Some(4),
            ..Reading::default()
        };
        assert_eq!(r.limit_cores(), Some(4.0));
        assert_eq!(Reading::default().limit_cores(), None);
        let r = Reading {
            memory_usage: Some(10),
            memory_inactive_file: Some(20),
            ..Reading::default()
        };
        assert_eq!(r.working_set(), Some(0), "clamped at 0");
        assert_eq!(Reading::default().working_set(), None);
    }
}
