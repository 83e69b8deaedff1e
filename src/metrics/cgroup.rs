//! TEMPORARY stub until the cgroup reader lands (wt-cgroup).
#![forbid(unsafe_code)]
#[derive(Clone, Debug, Default)]
pub struct Reading {
    pub cpu_usage_ns: Option<u64>,
    pub cpu_quota_cores: Option<f64>,
    pub cpuset_cpus: Option<u32>,
    pub online_cpus: Option<u32>,
    pub cpu_throttled_ns: Option<u64>,
    pub memory_usage: Option<u64>,
    pub memory_inactive_file: Option<u64>,
    pub memory_limit: Option<u64>,
    pub memory_total: Option<u64>,
    pub oom_kills: Option<u64>,
}
impl Reading {
    pub fn limit_cores(&self) -> Option<f64> {
        None
    }
    pub fn working_set(&self) -> Option<u64> {
        None
    }
}
pub struct Cgroup;
pub fn discover() -> Cgroup {
    Cgroup
}
impl Cgroup {
    pub fn read(&self) -> Reading {
        Reading::default()
    }
    pub fn describe(&self) -> String {
        String::new()
    }
}
