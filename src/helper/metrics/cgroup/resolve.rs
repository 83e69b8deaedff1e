//! Which cgroup, under which mount: /proc/self/cgroup's entries and the cgroup mounts
//! mapped to one directory per controller lifeguard reads (v2, v1 or the hybrid layout,
//! a cgroup namespace made elsewhere). Pure.
#![forbid(unsafe_code)]

use std::path::PathBuf;

use super::parse::{CgroupEntry, CgroupMount, Version};

/// Where one controller's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ControllerDir {
    pub version: Version,
    /// Absolute as the process sees it (no root prefix).
    pub dir: PathBuf,
}

/// The directories found for the controllers lifeguard reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Resolved {
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
pub(super) fn v2_dir(entries: &[CgroupEntry], mounts: &[CgroupMount]) -> Option<PathBuf> {
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
pub(super) fn resolve(
    entries: &[CgroupEntry],
    mounts: &[CgroupMount],
    v2_controllers: &str,
) -> Resolved {
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

#[cfg(test)]
pub(super) mod tests {
    use super::super::parse::{parse_mountinfo, parse_proc_cgroup};
    use super::*;

    pub(crate) fn dir(version: Version, path: &str) -> Option<ControllerDir> {
        Some(ControllerDir {
            version,
            dir: PathBuf::from(path),
        })
    }

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
}
