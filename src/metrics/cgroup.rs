//! The app's cgroup: finds it (v2, v1, the hybrid layout) through /proc/self/cgroup and
//! /proc/self/mountinfo once, then reads its CPU and memory figures once a second.
#![forbid(unsafe_code)]

// Layout of this file: pure parsers (text in, values out; tested on recorded inputs),
// then the resolver (entries + mounts -> one directory per controller), then the I/O
// layer (`discover`, `Cgroup::read`), which reads under a root prefix so recorded trees
// under tests/fixtures/cgroup/ stand in for / in the tests.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------
// Pure parsers
// ---------------------------------------------------------------------------------------

/// One line of /proc/self/cgroup: `hierarchy-ID:controller-list:cgroup-path`
/// (cgroups(7)). The v2 line is `0::/path` (ID 0, no controllers); a v1 named hierarchy
/// lists `name=systemd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupEntry {
    pub hierarchy_id: u32,
    pub controllers: Vec<String>,
    pub path: String,
}

/// Parses /proc/self/cgroup. Lines that do not have the three fields are skipped. The
/// path is everything after the second colon: a cgroup name may itself contain colons.
pub fn parse_proc_cgroup(text: &str) -> Vec<CgroupEntry> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let hierarchy_id = fields.next()?.trim().parse().ok()?;
            let controllers = fields
                .next()?
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
            let path = fields.next()?;
            if !path.starts_with('/') {
                return None;
            }
            Some(CgroupEntry {
                hierarchy_id,
                controllers,
                path: path.to_owned(),
            })
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// A cgroup filesystem as /proc/self/mountinfo shows it (proc(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    pub version: Version,
    /// Field 4: the cgroup, within its hierarchy, that is the root of this mount
    /// (`/docker/<id>` when a v1 container sees only its own cgroup; `/` with a cgroup
    /// namespace).
    pub root: String,
    /// Field 5: where it is mounted.
    pub mount_point: String,
    /// v1: the super options, which name the controllers (`rw,cpu,cpuacct` ->
    /// `cpu`, `cpuacct`), `rw`/`ro` left out; other options (`name=systemd`,
    /// `clone_children`...) stay, harmlessly: controllers are matched by exact name.
    /// v2: empty (the controllers are in cgroup.controllers, not in the options).
    pub controllers: Vec<String>,
}

/// Undoes the kernel's escaping of mountinfo paths (fs/seq_file.c `mangle_path`: space,
/// tab, newline and backslash become `\040`, `\011`, `\012`, `\134`). Any other
/// backslash is kept as it is.
pub fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits.iter().fold(0u32, |v, d| v * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses /proc/self/mountinfo, keeping the cgroup and cgroup2 mounts. Line format:
/// `ID parent maj:min root mount-point options [optional fields...] - fstype source
/// super-options`. The optional fields vary in number, so the fstype is found after the
/// lone `-`; paths never contain a bare space (escaped as `\040`), so splitting on
/// whitespace is safe.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let sep = fields.iter().skip(6).position(|f| *f == "-")? + 6;
            let fstype = *fields.get(sep + 1)?;
            let version = match fstype {
                "cgroup" => Version::V1,
                "cgroup2" => Version::V2,
                _ => return None,
            };
            let controllers = match version {
                Version::V1 => fields
                    .get(sep + 3)
                    .copied()
                    .unwrap_or("")
                    .split(',')
                    .filter(|o| !o.is_empty() && *o != "rw" && *o != "ro")
                    .map(str::to_owned)
                    .collect(),
                Version::V2 => Vec::new(),
            };
            Some(CgroupMount {
                version,
                root: unescape_octal(fields[3]),
                mount_point: unescape_octal(fields[4]),
                controllers,
            })
        })
        .collect()
}

/// `cpu.max` (v2): `$MAX $PERIOD`, `max` meaning no quota. Returns the quota in cores;
/// `Ok(None)` for no quota, `Err` for content that is neither.
pub fn parse_cpu_max(text: &str) -> Result<Option<f64>, ()> {
    let mut fields = text.split_whitespace();
    let max = fields.next().ok_or(())?;
    if max == "max" {
        return Ok(None);
    }
    let quota: u64 = max.parse().map_err(|_| ())?;
    let period: u64 = fields.next().ok_or(())?.parse().map_err(|_| ())?;
    quota_cores(quota as i64, period)
}

/// v1 `cpu.cfs_quota_us` in µs; -1 means no quota (`Ok(None)`).
pub fn parse_cfs_quota_us(text: &str) -> Result<Option<i64>, ()> {
    let quota: i64 = text.trim().parse().map_err(|_| ())?;
    Ok((quota >= 0).then_some(quota))
}

/// quota ÷ period in cores.
pub fn quota_cores(quota: i64, period: u64) -> Result<Option<f64>, ()> {
    // The kernel refuses a zero period and a quota below 1 ms; a zero here is garbage.
    if quota <= 0 || period == 0 {
        return Err(());
    }
    Ok(Some(quota as f64 / period as f64))
}

/// The value of `key` in a flat-keyed file (`cpu.stat`, `memory.stat`, `memory.events`,
/// v1 `memory.oom_control`): lines of `key value`.
pub fn flat_key(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        if fields.next()? != key {
            return None;
        }
        fields.next()?.parse().ok()
    })
}

/// A single number (`cpuacct.usage`, `memory.current`, `memory.usage_in_bytes`).
pub fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Memory limits at or above this mean none: v1 reports "unlimited" as LONG_MAX rounded
/// down to a page (9223372036854771712 with 4 KiB pages, other values with larger pages),
/// so no exact value can be matched; no real limit comes near 2^62 (4 EiB).
pub const UNLIMITED_FLOOR: u64 = 1 << 62;

/// `memory.max` (v2, `max` = none) or `memory.limit_in_bytes` (v1, huge = none).
pub fn parse_memory_limit(text: &str) -> Result<Option<u64>, ()> {
    let text = text.trim();
    if text == "max" || text == "-1" {
        return Ok(None);
    }
    let value: u64 = text.parse().map_err(|_| ())?;
    Ok((value < UNLIMITED_FLOOR).then_some(value))
}

/// The number of CPUs in a kernel CPU list (`0-3,5,7-8` -> 7), as in cpuset.cpus,
/// cpuset.cpus.effective and /sys/devices/system/cpu/online. `None` for an empty list (a
/// v1 cpuset not yet configured reads empty: that is no CPU count, not zero) and for
/// garbage.
pub fn parse_cpu_list(text: &str) -> Option<u32> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut count: u32 = 0;
    for part in text.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (
                lo.trim().parse::<u32>().ok()?,
                hi.trim().parse::<u32>().ok()?,
            ),
            None => {
                let cpu = part.trim().parse::<u32>().ok()?;
                (cpu, cpu)
            }
        };
        if hi < lo {
            return None;
        }
        count = count.checked_add((hi - lo).checked_add(1)?)?;
    }
    Some(count)
}

/// `MemTotal:  24684084 kB` from /proc/meminfo, in bytes.
pub fn parse_mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

// ---------------------------------------------------------------------------------------
// Resolver
// ---------------------------------------------------------------------------------------

/// Where one controller's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerDir {
    pub version: Version,
    /// Absolute as the process sees it (no root prefix).
    pub dir: PathBuf,
}

/// The directories found for the controllers lifeguard reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    pub cpu: Option<ControllerDir>,
    pub cpuacct: Option<ControllerDir>,
    pub cpuset: Option<ControllerDir>,
    pub memory: Option<ControllerDir>,
}

/// `path` made relative to the mount's `root`, or `None` when it is not below it. That
/// happens when the process's cgroup lies outside what the mount shows (a cgroup
/// namespace created elsewhere: /proc/self/cgroup then says `/../..`, or the mount root
/// is a cgroup the process is not in); the caller then uses the mount point itself.
fn relative_to_root<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    if path.split('/').any(|c| c == "..") {
        return None;
    }
    let root = root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return None; // `/docker/ab` is not below `/docker/a`
    }
    Some(rest.trim_start_matches('/'))
}

/// The mapping rule: the cgroup path made relative to the mount's root, joined onto the
/// mount point. Of several mounts of one hierarchy, the first whose root contains the
/// path wins; if none does, the first one's mount point.
fn map_path<'a>(
    path: &str,
    mounts: impl Iterator<Item = &'a CgroupMount> + Clone,
) -> Option<PathBuf> {
    for mount in mounts.clone() {
        if let Some(rel) = relative_to_root(path, &mount.root) {
            let mut dir = PathBuf::from(&mount.mount_point);
            if !rel.is_empty() {
                dir.push(rel);
            }
            return Some(dir);
        }
    }
    mounts
        .into_iter()
        .next()
        .map(|m| PathBuf::from(&m.mount_point))
}

/// The process's v2 directory: the `0::` entry mapped through a cgroup2 mount.
pub fn v2_dir(entries: &[CgroupEntry], mounts: &[CgroupMount]) -> Option<PathBuf> {
    let entry = entries
        .iter()
        .find(|e| e.hierarchy_id == 0 && e.controllers.is_empty())?;
    map_path(
        &entry.path,
        mounts.iter().filter(|m| m.version == Version::V2),
    )
}

/// Per controller: v1 when /proc/self/cgroup shows it attached to a v1 hierarchy (then
/// only there: a controller is bound to one hierarchy at a time, so if that hierarchy is
/// not mounted here it is not readable at all); otherwise v2 when `v2_controllers` (the
/// content of cgroup.controllers in the process's v2 directory) lists it. In the hybrid
/// layout the cgroup2 mount lists no (or few) controllers and its cpu.stat, which always
/// exists, describes a cgroup that is not where the limits are: it must not be used for
/// a controller the v2 side does not have.
pub fn resolve(entries: &[CgroupEntry], mounts: &[CgroupMount], v2_controllers: &str) -> Resolved {
    let v2 = v2_dir(entries, mounts);
    let v1_entry = |controller: &str| {
        entries
            .iter()
            .find(|e| e.hierarchy_id != 0 && e.controllers.iter().any(|c| c == controller))
    };
    let find = |controller: &str| -> Option<ControllerDir> {
        let v1_entry = v1_entry(controller);
        if let Some(entry) = v1_entry {
            let v1_mounts = mounts.iter().filter(|m| {
                m.version == Version::V1 && m.controllers.iter().any(|c| c == controller)
            });
            return map_path(&entry.path, v1_mounts).map(|dir| ControllerDir {
                version: Version::V1,
                dir,
            });
        }
        if v2_controllers.split_whitespace().any(|c| c == controller) {
            return v2.clone().map(|dir| ControllerDir {
                version: Version::V2,
                dir,
            });
        }
        None
    };
    Resolved {
        cpu: find("cpu"),
        // v2 has no cpuacct: usage is cpu.stat's usage_usec, which "exists whether the
        // controller is enabled or not" (cgroup-v2.rst), so it is taken from v2 even
        // without the cpu controller there, but only when no CPU controller is attached
        // to v1 (in the hybrid layout the v2 cgroup is not where the CPU limits are).
        // A CPU controller attached to a v1 hierarchy that is not mounted here (a mount
        // namespace showing only cgroup2, beside a v1 host) cannot be read at all: the
        // v2 cgroup's usage is then the one CPU figure there is.
        cpuacct: match v1_entry("cpuacct").or_else(|| v1_entry("cpu")) {
            Some(_) => find("cpuacct").or_else(|| {
                v2.clone().map(|dir| ControllerDir {
                    version: Version::V2,
                    dir,
                })
            }),
            None => v2.clone().map(|dir| ControllerDir {
                version: Version::V2,
                dir,
            }),
        },
        cpuset: find("cpuset"),
        memory: find("memory"),
    }
}

// ---------------------------------------------------------------------------------------
// I/O layer
// ---------------------------------------------------------------------------------------

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
pub enum Layout {
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
/// (issue #6: lifeguard's own CPU at one sample a second).
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
pub fn discover_in(root: &Path, proc_self_cgroup: &str, mountinfo: &str) -> Cgroup {
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
    pub fn with_system_files(mut self, meminfo: PathBuf, cpu_online: PathBuf) -> Self {
        self.meminfo = meminfo;
        self.cpu_online = cpu_online;
        self
    }

    #[cfg(test)]
    pub fn layout(&self) -> Layout {
        self.layout
    }

    #[cfg(test)]
    pub fn resolved(&self) -> &Resolved {
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
        let fresh_limits = self.reads % LIMITS_EVERY == 0;
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

    fn dir(version: Version, path: &str) -> Option<ControllerDir> {
        Some(ControllerDir {
            version,
            dir: PathBuf::from(path),
        })
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

    // --- /proc/self/cgroup ------------------------------------------------------------

    #[test]
    fn proc_cgroup_lines() {
        let entries = parse_proc_cgroup("12:cpu,cpuacct:/docker/ab\n1:name=systemd:/a:b:c\n0::/\n");
        assert_eq!(
            entries,
            [
                CgroupEntry {
                    hierarchy_id: 12,
                    controllers: vec!["cpu".into(), "cpuacct".into()],
                    path: "/docker/ab".into(),
                },
                CgroupEntry {
                    hierarchy_id: 1,
                    controllers: vec!["name=systemd".into()],
                    path: "/a:b:c".into(),
                },
                CgroupEntry {
                    hierarchy_id: 0,
                    controllers: vec![],
                    path: "/".into(),
                },
            ]
        );
    }

    #[test]
    fn proc_cgroup_odd_inputs() {
        assert_eq!(parse_proc_cgroup(""), []);
        assert_eq!(
            parse_proc_cgroup("garbage\n\n::\nx:cpu:/a\n3:cpu\n4:cpu:relative\n"),
            []
        );
        assert_eq!(
            parse_proc_cgroup("0::/../../user.slice")[0].path,
            "/../../user.slice"
        );
    }

    // --- mountinfo --------------------------------------------------------------------

    #[test]
    fn mountinfo_cgroup_lines() {
        let text = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                    32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                    1032 1029 0:33 /docker/x /sys/fs/cgroup/cpu,cpuacct ro,nosuid master:16 shared:3 - cgroup cgroup rw,cpu,cpuacct\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            parse_mountinfo(text),
            [
                CgroupMount {
                    version: Version::V1,
                    root: "/".into(),
                    mount_point: "/sys/fs/cgroup/cpu".into(),
                    controllers: vec!["cpu".into()],
                },
                CgroupMount {
                    version: Version::V1,
                    root: "/docker/x".into(),
                    mount_point: "/sys/fs/cgroup/cpu,cpuacct".into(),
                    controllers: vec!["cpu".into(), "cpuacct".into()],
                },
                CgroupMount {
                    version: Version::V2,
                    root: "/".into(),
                    mount_point: "/sys/fs/cgroup/unified".into(),
                    controllers: vec![],
                },
            ]
        );
    }

    #[test]
    fn mountinfo_octal_escapes_and_odd_inputs() {
        let text = "50 31 0:40 /my\\040group /mnt/cg\\040v1\\011x rw - cgroup cg rw,memory\n";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts[0].root, "/my group");
        assert_eq!(mounts[0].mount_point, "/mnt/cg v1\tx");
        assert_eq!(mounts[0].controllers, ["memory"]);
        assert_eq!(parse_mountinfo(""), []);
        // No separator, too few fields, separator among the first six fields, no fstype.
        assert_eq!(
            parse_mountinfo("garbage\n1 2 3\n1 2 - cgroup cgroup rw,cpu\n32 31 0:29 / /x rw -\n"),
            []
        );
        // A `-` inside a path is not the separator (it is not a lone field).
        let mounts = parse_mountinfo("32 31 0:29 / /a-b rw shared:1 - cgroup2 cgroup2 rw\n");
        assert_eq!(mounts[0].mount_point, "/a-b");
    }

    #[test]
    fn octal_unescape() {
        assert_eq!(unescape_octal("/a\\040b"), "/a b");
        assert_eq!(unescape_octal("\\134"), "\\");
        assert_eq!(unescape_octal("/a\\012"), "/a\n");
        assert_eq!(unescape_octal("trailing\\04"), "trailing\\04");
        assert_eq!(unescape_octal("\\9999"), "\\9999");
        assert_eq!(unescape_octal("\\777"), "\\777", "above a byte: kept");
        assert_eq!(unescape_octal(""), "");
    }

    // --- resolver ---------------------------------------------------------------------

    fn mounts(text: &str) -> Vec<CgroupMount> {
        parse_mountinfo(text)
    }

    #[test]
    fn relative_paths() {
        assert_eq!(relative_to_root("/a/b", "/"), Some("a/b"));
        assert_eq!(relative_to_root("/", "/"), Some(""));
        assert_eq!(relative_to_root("/docker/x", "/docker/x"), Some(""));
        assert_eq!(relative_to_root("/docker/x/sub", "/docker/x"), Some("sub"));
        assert_eq!(relative_to_root("/docker/xy", "/docker/x"), None);
        assert_eq!(relative_to_root("/", "/docker/x"), None);
        assert_eq!(relative_to_root("/../../user.slice", "/"), None);
    }

    #[test]
    fn foreign_namespace_falls_back_to_the_mount_point() {
        // A v2 cgroup namespace made elsewhere: the process's cgroup is outside the root.
        let m = mounts("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        let e = parse_proc_cgroup("0::/../../system.slice/other.service\n");
        assert_eq!(v2_dir(&e, &m), Some(PathBuf::from("/sys/fs/cgroup")));
        // v1: the mount shows a cgroup the process is not in.
        let m = mounts("32 31 0:29 /docker/a /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
        let e = parse_proc_cgroup("3:memory:/docker/b\n");
        assert_eq!(
            resolve(&e, &m, "").memory,
            dir(Version::V1, "/sys/fs/cgroup/memory")
        );
    }

    #[test]
    fn of_two_mounts_the_one_containing_the_path_wins() {
        let m = mounts(
            "40 31 0:32 /other /mnt/mem rw - cgroup cgroup rw,memory\n\
             41 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
        );
        let e = parse_proc_cgroup("3:memory:/kubepods/pod1\n");
        assert_eq!(
            resolve(&e, &m, "").memory,
            dir(Version::V1, "/sys/fs/cgroup/memory/kubepods/pod1")
        );
    }

    #[test]
    fn hybrid_takes_v2_only_for_controllers_it_lists() {
        let m = mounts(
            "38 33 0:33 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
             34 33 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
        );
        let e = parse_proc_cgroup("5:cpu,cpuacct:/a\n0::/a\n");
        let r = resolve(&e, &m, "memory pids\n");
        assert_eq!(r.cpu, dir(Version::V1, "/sys/fs/cgroup/cpu,cpuacct/a"));
        assert_eq!(r.cpuacct, dir(Version::V1, "/sys/fs/cgroup/cpu,cpuacct/a"));
        assert_eq!(r.memory, dir(Version::V2, "/sys/fs/cgroup/unified/a"));
        assert_eq!(r.cpuset, None);
        // Nothing listed: nothing from v2.
        assert_eq!(resolve(&e, &m, "").memory, None);
    }

    #[test]
    fn v2_usage_comes_from_cpu_stat_even_without_the_cpu_controller() {
        let m = mounts("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        let e = parse_proc_cgroup("0::/user.slice\n");
        let r = resolve(&e, &m, "memory pids");
        assert_eq!(r.cpu, None);
        assert_eq!(r.cpuacct, dir(Version::V2, "/sys/fs/cgroup/user.slice"));
    }

    #[test]
    fn attached_to_v1_but_not_mounted_is_not_found_but_v2_usage_is() {
        // cpu is bound to a v1 hierarchy that this mount namespace does not show; even
        // if cgroup.controllers claimed it, the v2 files would not be its cgroup (no
        // limits from there). The usage, though, is the v2 cgroup's own and the one CPU
        // figure that can be read: it counts the processes lifeguard runs with.
        let m = mounts("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
        let e = parse_proc_cgroup("2:cpu,cpuacct:/x\n0::/\n");
        let r = resolve(&e, &m, "cpu memory");
        assert_eq!(r.cpu, None);
        assert_eq!(r.cpuacct, dir(Version::V2, "/sys/fs/cgroup"));
        assert_eq!(r.memory, dir(Version::V2, "/sys/fs/cgroup"));
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

    // --- file contents ----------------------------------------------------------------

    #[test]
    fn cpu_max() {
        assert_eq!(parse_cpu_max("max 100000\n"), Ok(None));
        assert_eq!(parse_cpu_max("max"), Ok(None));
        assert_eq!(parse_cpu_max("50000 100000\n"), Ok(Some(0.5)));
        assert_eq!(parse_cpu_max("250000 100000"), Ok(Some(2.5)));
        assert_eq!(parse_cpu_max(""), Err(()));
        assert_eq!(parse_cpu_max("50000"), Err(()));
        assert_eq!(parse_cpu_max("50000 0"), Err(()));
        assert_eq!(parse_cpu_max("lots 100000"), Err(()));
    }

    #[test]
    fn cfs_quota() {
        assert_eq!(parse_cfs_quota_us("-1\n"), Ok(None));
        assert_eq!(parse_cfs_quota_us("50000\n"), Ok(Some(50000)));
        assert_eq!(parse_cfs_quota_us(""), Err(()));
        assert_eq!(parse_cfs_quota_us("x"), Err(()));
        assert_eq!(quota_cores(50000, 100000), Ok(Some(0.5)));
        assert_eq!(quota_cores(0, 100000), Err(()));
        assert_eq!(quota_cores(50000, 0), Err(()));
    }

    #[test]
    fn flat_keys() {
        let stat = "usage_usec 10\nnr_throttled 3\nthrottled_usec 7\ntotal_inactive_file 9\ninactive_file 5\n";
        assert_eq!(flat_key(stat, "usage_usec"), Some(10));
        assert_eq!(flat_key(stat, "throttled_usec"), Some(7));
        // Whole keys only: `inactive_file` is not found inside `total_inactive_file`.
        assert_eq!(flat_key(stat, "inactive_file"), Some(5));
        assert_eq!(flat_key("total_inactive_file 9\n", "inactive_file"), None);
        assert_eq!(flat_key("", "usage_usec"), None);
        assert_eq!(flat_key("usage_usec\nusage_usec x\n", "usage_usec"), None);
        assert_eq!(
            flat_key("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n", "oom_kill"),
            Some(4)
        );
    }

    #[test]
    fn memory_limits() {
        assert_eq!(parse_memory_limit("max\n"), Ok(None));
        assert_eq!(parse_memory_limit("-1"), Ok(None));
        assert_eq!(parse_memory_limit("268435456\n"), Ok(Some(268_435_456)));
        assert_eq!(parse_memory_limit("0"), Ok(Some(0)));
        // LONG_MAX rounded down to 4 KiB and to 64 KiB pages, LONG_MAX itself, 2^62.
        for unlimited in [
            "9223372036854771712",
            "9223372036854710272",
            "9223372036854775807",
            "4611686018427387904",
        ] {
            assert_eq!(parse_memory_limit(unlimited), Ok(None), "{unlimited}");
        }
        assert_eq!(
            parse_memory_limit("4611686018427387903"),
            Ok(Some(4_611_686_018_427_387_903))
        );
        assert_eq!(parse_memory_limit(""), Err(()));
        assert_eq!(parse_memory_limit("lots"), Err(()));
        assert_eq!(parse_memory_limit("99999999999999999999"), Err(()));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,5,7-8\n"), Some(7));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0-63,128-191"), Some(128));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("\n"), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("0,,1"), None);
        assert_eq!(parse_cpu_list("a-b"), None);
        assert_eq!(parse_cpu_list("0-4294967295"), None, "overflow");
    }

    #[test]
    fn mem_total() {
        assert_eq!(
            parse_mem_total("MemTotal:       24684084 kB\nMemFree: 1 kB\n"),
            Some(24_684_084 * 1024)
        );
        assert_eq!(
            parse_mem_total("MemFree: 1 kB\nMemTotal: 2 kB\n"),
            Some(2048)
        );
        assert_eq!(parse_mem_total(""), None);
        assert_eq!(parse_mem_total("MemTotal: lots kB"), None);
        assert_eq!(parse_mem_total("MemTotal: 2 MB"), None);
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

    // --- the real kernel --------------------------------------------------------------

    /// Removes the test cgroups, also when the test fails.
    struct RemoveOnDrop(Vec<PathBuf>);

    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            for dir in self.0.iter().rev() {
                if let Err(err) = std::fs::remove_dir(dir) {
                    eprintln!("could not remove {}: {err}", dir.display());
                }
            }
        }
    }

    /// Creates v1 cgroups with a 0.5-core quota and a 256 MiB limit and reads them
    /// through the real mountinfo. Needs root and v1 cpu, cpuacct and memory
    /// hierarchies at /sys/fs/cgroup/{cpu,cpuacct,memory} (this machine's layout).
    #[test]
    fn real_kernel_v1_cgroups() {
        // The effective uid: the second field of `Uid:` in /proc/self/status.
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let euid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1).map(str::to_owned));
        if euid.as_deref() != Some("0") {
            panic!("THIS TEST CANNOT RUN: needs root");
        }
        let name = format!("lifeguard-test-{}", std::process::id());
        let base = Path::new("/sys/fs/cgroup");
        let mut guard = RemoveOnDrop(Vec::new());
        for controller in ["cpu", "cpuacct", "memory"] {
            let hierarchy = base.join(controller);
            assert!(
                hierarchy.join("tasks").exists(),
                "THIS TEST CANNOT RUN: needs a v1 {controller} hierarchy at {}",
                hierarchy.display()
            );
            let dir = hierarchy.join(&name);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            guard.0.push(dir);
        }
        let write = |path: PathBuf, value: &str| {
            std::fs::write(&path, value).unwrap_or_else(|e| panic!("write {}: {e}", path.display()))
        };
        write(
            base.join("cpu").join(&name).join("cpu.cfs_period_us"),
            "100000",
        );
        write(
            base.join("cpu").join(&name).join("cpu.cfs_quota_us"),
            "50000",
        );
        write(
            base.join("memory")
                .join(&name)
                .join("memory.limit_in_bytes"),
            "268435456",
        );

        let proc_self_cgroup =
            format!("4:memory:/{name}\n3:cpuset:/\n2:cpuacct:/{name}\n1:cpu:/{name}\n0::/\n");
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mut cg = discover_in(Path::new("/"), &proc_self_cgroup, &mountinfo);
        assert_eq!(
            cg.resolved().cpu,
            dir(Version::V1, &format!("/sys/fs/cgroup/cpu/{name}"))
        );
        assert_eq!(
            cg.resolved().memory,
            dir(Version::V1, &format!("/sys/fs/cgroup/memory/{name}"))
        );
        let r = cg.read();
        assert!(r.new_failures.is_empty(), "{:?}", r.new_failures);
        assert_eq!(r.cpu_quota_cores, Some(0.5));
        assert_eq!(r.limit_cores(), Some(0.5));
        assert_eq!(r.memory_limit, Some(268_435_456));
        // An empty cgroup: no task has run in it.
        assert_eq!(r.cpu_usage_ns, Some(0));
        assert_eq!(r.memory_usage, Some(0));
        assert_eq!(r.cpu_throttled_ns, Some(0));
        assert_eq!(r.oom_kills, Some(0));
        assert!(r.online_cpus.is_some() && r.memory_total.is_some() && r.cpuset_cpus.is_some());
        drop(guard);
        assert!(!base.join("memory").join(&name).exists());
    }
}
