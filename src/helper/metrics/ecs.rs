//! ECS task scope (`ECS_CONTAINER_METADATA_URI_V4`): the task's limits from `${URI}/task`
//! and its usage summed over `${URI}/task/stats`, as the ECS scaling module reads them
//! (docs/metrics.md). Pure JSON parsers apart from the fetch that feeds them.
#![forbid(unsafe_code)]

use std::time::Duration;

use serde_json::Value;

use crate::helper::http_client;

/// The task's size, from `/task` `Limits` (Fargate always sets both; on EC2 a task may
/// have neither, and then the container's own cgroup limit is used).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TaskLimits {
    /// `Limits.CPU`, in vCPUs.
    pub cpu_cores: Option<f64>,
    /// `Limits.Memory`, MiB in the document.
    pub memory_bytes: Option<u64>,
}

/// The task's usage, summed over its running containers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskUsage {
    /// `cpu_stats.cpu_usage.total_usage`, nanoseconds.
    pub cpu_ns: u64,
    /// `memory_stats.usage` − inactive file, clamped at 0 per container (the definition
    /// cAdvisor and, since 2022, the ECS agent use).
    pub working_set: u64,
    /// How many containers reported stats (a stopped one reports `null`).
    pub containers: usize,
}

/// Parses the `/task` document (task metadata v4).
pub fn parse_task(body: &str) -> Result<TaskLimits, String> {
    let doc: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    if !doc.is_object() {
        return Err("not a JSON object".into());
    }
    let limits = doc.get("Limits");
    let number = |name: &str| {
        limits
            .and_then(|l| l.get(name))
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    Ok(TaskLimits {
        cpu_cores: number("CPU"),
        memory_bytes: number("Memory").map(|mib| (mib * 1024.0 * 1024.0) as u64),
    })
}

/// The task as OpenTelemetry's resource conventions name it (cloud.*, aws.ecs.*), from
/// the `/task` document: the region and account from the task's ARN, the cluster's ARN
/// built from them where EC2 gives a bare name, the launch type in lower case.
pub fn parse_identity(body: &str) -> Result<Vec<(&'static str, String)>, String> {
    let doc: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let text = |name: &str| doc.get(name).and_then(Value::as_str).map(str::to_string);
    let task = text("TaskARN").ok_or("no TaskARN")?;
    // arn:PARTITION:ecs:REGION:ACCOUNT:task/CLUSTER/ID
    let parts: Vec<&str> = task.splitn(6, ':').collect();
    let [_, partition, _, region, account, _] = parts[..] else {
        return Err(format!("TaskARN '{task}' is not an ARN"));
    };
    let mut out = vec![
        ("cloud.provider", "aws".to_string()),
        ("cloud.platform", "aws_ecs".to_string()),
        ("cloud.region", region.to_string()),
        ("cloud.account.id", account.to_string()),
    ];
    if let Some(zone) = text("AvailabilityZone") {
        out.push(("cloud.availability_zone", zone));
    }
    if let Some(cluster) = text("Cluster") {
        let arn = if cluster.starts_with("arn:") {
            cluster
        } else {
            format!("arn:{partition}:ecs:{region}:{account}:cluster/{cluster}")
        };
        out.push(("aws.ecs.cluster.arn", arn));
    }
    if let Some(id) = task.rsplit('/').next() {
        out.push(("aws.ecs.task.id", id.to_string()));
    }
    out.push(("aws.ecs.task.arn", task.clone()));
    if let Some(family) = text("Family") {
        out.push(("aws.ecs.task.family", family));
    }
    if let Some(revision) = text("Revision") {
        out.push(("aws.ecs.task.revision", revision));
    }
    if let Some(launch) = text("LaunchType") {
        out.push(("aws.ecs.launchtype", launch.to_ascii_lowercase()));
    }
    Ok(out)
}

/// Parses the `/task/stats` document: container id → Docker stats (or `null`).
pub fn parse_task_stats(body: &str) -> Result<TaskUsage, String> {
    let doc: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let containers = doc.as_object().ok_or("not a JSON object")?;
    let mut usage = TaskUsage::default();
    for (id, stats) in containers {
        if stats.is_null() {
            continue;
        }
        let cpu = stats
            .pointer("/cpu_stats/cpu_usage/total_usage")
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("container {id}: no cpu_stats.cpu_usage.total_usage"))?;
        let memory = stats
            .pointer("/memory_stats/usage")
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("container {id}: no memory_stats.usage"))?;
        // cgroup v2 hosts report `inactive_file`, v1 hosts both it and the
        // hierarchical `total_inactive_file`; either is subtracted (docs/metrics.md).
        let inactive = [
            "/memory_stats/stats/total_inactive_file",
            "/memory_stats/stats/inactive_file",
        ]
        .iter()
        .find_map(|p| stats.pointer(p).and_then(Value::as_u64))
        .unwrap_or(0);
        usage.cpu_ns = usage.cpu_ns.saturating_add(cpu);
        usage.working_set = usage
            .working_set
            .saturating_add(memory.saturating_sub(inactive));
        usage.containers += 1;
    }
    if usage.containers == 0 {
        return Err("no container reported stats".into());
    }
    Ok(usage)
}

/// Reads the task metadata endpoint.
pub struct Client {
    base: String,
    timeout: Duration,
}

/// Task stats for a handful of containers are a few kilobytes each.
const MAX_DOCUMENT: usize = 1024 * 1024;

impl Client {
    pub fn new(base: &str, timeout: Duration) -> Client {
        Client {
            base: base.trim_end_matches('/').to_string(),
            timeout,
        }
    }

    /// The task's limits, and its identity where the document has one (an OTLP
    /// resource's attributes; none is no error: the limits are what the sampler needs).
    pub async fn limits(&self) -> Result<(TaskLimits, Vec<(&'static str, String)>), String> {
        let body = self.fetch("/task").await?;
        Ok((
            parse_task(&body)?,
            parse_identity(&body).unwrap_or_default(),
        ))
    }

    pub async fn usage(&self) -> Result<TaskUsage, String> {
        parse_task_stats(&self.fetch("/task/stats").await?)
    }

    async fn fetch(&self, path: &str) -> Result<String, String> {
        let url = format!("{}{path}", self.base);
        let uri: hyper::Uri = url.parse().map_err(|_| format!("{url} is not a URL"))?;
        match tokio::time::timeout(self.timeout, http_client::get_limited(&uri, MAX_DOCUMENT)).await
        {
            Ok(Ok((200, body))) => Ok(body),
            Ok(Ok((status, _))) => Err(format!("GET {url} answered {status}")),
            Ok(Err(reason)) => Err(reason),
            Err(_) => Err(format!(
                "GET {url}: no answer within {}",
                crate::seconds::human(self.timeout)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape AWS documents for `${ECS_CONTAINER_METADATA_URI_V4}/task` on Fargate
    /// (trimmed to the fields that matter plus a few neighbours).
    const TASK: &str = r#"{
        "Cluster": "arn:aws:ecs:us-west-2:111122223333:cluster/default",
        "TaskARN": "arn:aws:ecs:us-west-2:111122223333:task/default/158d1c8083dd49d6b527399fd6414f5c",
        "Family": "curltest", "Revision": "26", "DesiredStatus": "RUNNING", "KnownStatus": "RUNNING",
        "Limits": { "CPU": 0.25, "Memory": 512 },
        "PullStartedAt": "2020-10-02T00:43:06.202617438Z",
        "AvailabilityZone": "us-west-2d", "LaunchType": "FARGATE",
        "Containers": [ { "DockerId": "598cba581fe3f939459eaba1e071d5c93bb2c49b7d1ba7db6bb19deeb70d8e38",
                          "Name": "curl", "Limits": { "CPU": 128, "Memory": 512 } } ]
    }"#;

    /// `/task/stats`: two containers (v1 host: both inactive_file fields), one stopped.
    const STATS: &str = r#"{
        "598cba581fe3f939459eaba1e071d5c93bb2c49b7d1ba7db6bb19deeb70d8e38": {
            "read": "2020-10-02T00:51:32.51467703Z", "preread": "2020-10-02T00:51:31.50860463Z",
            "num_procs": 0,
            "cpu_stats": { "cpu_usage": { "total_usage": 2000000000, "usage_in_kernelmode": 10000000,
                                          "usage_in_usermode": 1990000000 },
                           "system_cpu_usage": 4381090000000, "online_cpus": 2,
                           "throttling_data": { "periods": 0, "throttled_periods": 0, "throttled_time": 0 } },
            "memory_stats": { "usage": 104857600, "max_usage": 110000000, "limit": 9223372036854771712,
                              "stats": { "cache": 8192, "inactive_file": 20971520,
                                         "total_inactive_file": 10485760, "rss": 94371840 } },
            "name": "curl", "id": "598cba58"
        },
        "b8f3a9d1e0c24ff6a8c19a5b7c5e0f7bb1d0c2d4e3f4a5b6c7d8e9f0a1b2c3d4": {
            "cpu_stats": { "cpu_usage": { "total_usage": 500000000 } },
            "memory_stats": { "usage": 1000, "stats": { "inactive_file": 5000 } }
        },
        "deadbeef": null
    }"#;

    #[test]
    fn task_limits_are_vcpus_and_mib() {
        assert_eq!(
            parse_task(TASK),
            Ok(TaskLimits {
                cpu_cores: Some(0.25),
                memory_bytes: Some(512 * 1024 * 1024)
            })
        );
        // An EC2 task without a task-level size.
        assert_eq!(parse_task(r#"{"Cluster":"c"}"#), Ok(TaskLimits::default()));
        assert_eq!(
            parse_task(r#"{"Limits":{"CPU":0,"Memory":"lots"}}"#),
            Ok(TaskLimits::default())
        );
    }

    #[test]
    fn the_task_as_opentelemetry_names_it() {
        let found = parse_identity(TASK).unwrap();
        let get = |k: &str| found.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("cloud.platform"), Some("aws_ecs"));
        assert_eq!(get("cloud.region"), Some("us-west-2"));
        assert_eq!(get("cloud.account.id"), Some("111122223333"));
        assert_eq!(get("cloud.availability_zone"), Some("us-west-2d"));
        assert_eq!(
            get("aws.ecs.cluster.arn"),
            Some("arn:aws:ecs:us-west-2:111122223333:cluster/default")
        );
        assert_eq!(
            get("aws.ecs.task.id"),
            Some("158d1c8083dd49d6b527399fd6414f5c")
        );
        assert_eq!(get("aws.ecs.task.family"), Some("curltest"));
        assert_eq!(get("aws.ecs.task.revision"), Some("26"));
        assert_eq!(get("aws.ecs.launchtype"), Some("fargate"));
        // EC2 names the cluster bare: its ARN is built from the task's.
        let ec2 = r#"{"Cluster":"prod","TaskARN":"arn:aws-cn:ecs:cn-north-1:1:task/prod/ab","LaunchType":"EC2"}"#;
        let found = parse_identity(ec2).unwrap();
        assert!(found.contains(&(
            "aws.ecs.cluster.arn",
            "arn:aws-cn:ecs:cn-north-1:1:cluster/prod".into()
        )));
        assert!(found.contains(&("aws.ecs.launchtype", "ec2".into())));
        for bad in ["{}", r#"{"TaskARN":"task/1"}"#, "[]", "x"] {
            assert!(parse_identity(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn task_usage_sums_running_containers_and_clamps_memory() {
        assert_eq!(
            parse_task_stats(STATS),
            Ok(TaskUsage {
                cpu_ns: 2_500_000_000,
                // 100 MiB − 10 MiB (total_inactive_file wins), + max(1000 − 5000, 0).
                working_set: 94_371_840,
                containers: 2,
            })
        );
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        for body in [
            "",
            "<html>502 Bad Gateway</html>",
            "[]",
            "null",
            "{}",
            r#"{"x":{"cpu_stats":{}}}"#,
            r#"{"x":{"cpu_stats":{"cpu_usage":{"total_usage":-1}},"memory_stats":{"usage":1}}}"#,
            r#"{"x": null}"#,
        ] {
            assert!(parse_task_stats(body).is_err(), "{body:?}");
        }
        assert!(parse_task("not json").is_err());
        assert!(parse_task("[1]").is_err());
    }
}
