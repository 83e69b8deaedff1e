//! A task's CPU as the tests lay it out: a parent cgroup at a quota with a cgroup per
//! container under it (cgroup v1's `cpu` controller, or v2's `cpu.max`), removed again
//! when dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A task's CPU as ECS and Kubernetes lay it out: a parent cgroup with the task's quota
/// (0.25 CPU), and a cgroup of its own for each container under it. cgroup v1's `cpu`
/// controller (this project's machines), or v2's `cpu.max` and `cpu.weight`.
pub struct Task {
    parent: PathBuf,
    children: Vec<PathBuf>,
    v2: bool,
}

impl Task {
    pub fn new(name: &str) -> Task {
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        let (root, v2) = if v1.join("cpu.cfs_quota_us").exists() {
            (v1.to_path_buf(), false)
        } else {
            (PathBuf::from("/sys/fs/cgroup"), true)
        };
        let parent = root.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&parent)
            .unwrap_or_else(|e| panic!("THIS TEST CANNOT RUN: cgroup {parent:?}: {e}"));
        let write = |file: &str, value: &str| {
            std::fs::write(parent.join(file), value)
                .unwrap_or_else(|e| panic!("THIS TEST CANNOT RUN: {file}: {e}"))
        };
        if v2 {
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
            write("cpu.max", "25000 100000");
            write("cgroup.subtree_control", "+cpu");
        } else {
            write("cpu.cfs_period_us", "100000");
            write("cpu.cfs_quota_us", "25000");
        }
        Task {
            parent,
            children: Vec::new(),
            v2,
        }
    }

    /// A container's cgroup, with the CPU share ECS gives a container of `cpu` units
    /// (cpu.shares; v2 converts it to a weight as runc does).
    pub fn container(&mut self, name: &str, shares: u64) -> PathBuf {
        let dir = self.parent.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let (file, value) = if self.v2 {
            ("cpu.weight", 1 + ((shares.max(2) - 2) * 9999) / 262142)
        } else {
            ("cpu.shares", shares)
        };
        std::fs::write(dir.join(file), value.to_string()).unwrap();
        self.children.push(dir.clone());
        dir
    }

    /// `sh -c` that moves itself into `dir`, then execs what follows.
    pub fn wrapper(dir: &Path) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            format!("echo $$ > {}/cgroup.procs && exec \"$@\"", dir.display()),
            "sh".into(),
        ]
    }

    /// How often the task's quota has throttled it so far.
    pub fn throttled(&self) -> u64 {
        let stat = std::fs::read_to_string(self.parent.join("cpu.stat")).unwrap_or_default();
        stat.lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        for dir in self.children.iter().chain([&self.parent]) {
            let _ = std::fs::write(
                dir.join(if self.v2 {
                    "cpu.max"
                } else {
                    "cpu.cfs_quota_us"
                }),
                if self.v2 { "max" } else { "-1" },
            );
        }
        for dir in self.children.iter().chain([&self.parent]) {
            for _ in 0..100 {
                if std::fs::remove_dir(dir).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
