//! The cgroup files' contents, pure: /proc/self/cgroup, the cgroup mounts of
//! /proc/self/mountinfo, and each figure file (`cpu.max`, `memory.stat`, CPU lists, ...).
//! Text in, values out; tested on recorded inputs.
#![forbid(unsafe_code)]

/// One line of /proc/self/cgroup: `hierarchy-ID:controller-list:cgroup-path`
/// (cgroups(7)). The v2 line is `0::/path` (ID 0, no controllers); a v1 named hierarchy
/// lists `name=systemd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CgroupEntry {
    pub hierarchy_id: u32,
    pub controllers: Vec<String>,
    pub path: String,
}

/// Parses /proc/self/cgroup. Lines that do not have the three fields are skipped. The
/// path is everything after the second colon: a cgroup name may itself contain colons.
pub(super) fn parse_proc_cgroup(text: &str) -> Vec<CgroupEntry> {
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
pub(super) enum Version {
    V1,
    V2,
}

/// A cgroup filesystem as /proc/self/mountinfo shows it (proc(5)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CgroupMount {
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
fn unescape_octal(field: &str) -> String {
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
pub(super) fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
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
pub(super) fn parse_cpu_max(text: &str) -> Result<Option<f64>, ()> {
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
pub(super) fn parse_cfs_quota_us(text: &str) -> Result<Option<i64>, ()> {
    let quota: i64 = text.trim().parse().map_err(|_| ())?;
    Ok((quota >= 0).then_some(quota))
}

/// quota ÷ period in cores.
pub(super) fn quota_cores(quota: i64, period: u64) -> Result<Option<f64>, ()> {
    // The kernel refuses a zero period and a quota below 1 ms; a zero here is garbage.
    if quota <= 0 || period == 0 {
        return Err(());
    }
    Ok(Some(quota as f64 / period as f64))
}

/// The value of `key` in a flat-keyed file (`cpu.stat`, `memory.stat`, `memory.events`,
/// v1 `memory.oom_control`): lines of `key value`.
pub(super) fn flat_key(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        if fields.next()? != key {
            return None;
        }
        fields.next()?.parse().ok()
    })
}

/// A single number (`cpuacct.usage`, `memory.current`, `memory.usage_in_bytes`).
pub(super) fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// Memory limits at or above this mean none: v1 reports "unlimited" as LONG_MAX rounded
/// down to a page (9223372036854771712 with 4 KiB pages, other values with larger pages),
/// so no exact value can be matched; no real limit comes near 2^62 (4 EiB).
pub(super) const UNLIMITED_FLOOR: u64 = 1 << 62;

/// `memory.max` (v2, `max` = none) or `memory.limit_in_bytes` (v1, huge = none).
pub(super) fn parse_memory_limit(text: &str) -> Result<Option<u64>, ()> {
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
pub(super) fn parse_cpu_list(text: &str) -> Option<u32> {
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
pub(super) fn parse_mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
