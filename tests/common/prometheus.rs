//! A real Prometheus server (Debian package `prometheus`, installed by scripts/test.sh)
//! on 127.0.0.1 for a test: its configuration, its query API, its log on a failure.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::{free_port, installed, request, wait_until};

/// A Prometheus server on 127.0.0.1 with a storage directory of its own, killed on drop.
pub struct Server {
    child: Child,
    dir: PathBuf,
    pub port: u16,
}

impl Server {
    /// Scraping lifeguard's endpoint on `target_port` every second, as job `lifeguard`.
    pub fn scraping(target_port: u16) -> Server {
        Server::with_scrape_configs(&format!(
            "  - job_name: lifeguard\n    static_configs:\n      \
             - targets: ['127.0.0.1:{target_port}']\n"
        ))
    }

    /// With `scrape_configs` (YAML, each entry indented by two spaces) under a global
    /// scrape interval of 1 s.
    pub fn with_scrape_configs(scrape_configs: &str) -> Server {
        let prometheus = installed("prometheus");
        let dir = std::env::temp_dir().join(format!(
            "lifeguard-prometheus-{}-{}",
            std::process::id(),
            free_port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
                 scrape_configs:\n{scrape_configs}"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new(prometheus)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .unwrap();
        Server { child, dir, port }
    }

    /// The first value of an instant query, once the server has one.
    pub fn query(&self, expr: &str) -> f64 {
        let path = format!("/api/v1/query?query={expr}");
        let found = wait_until(&format!("Prometheus to have {expr}"), || {
            let (status, body) = request(self.port, "GET", &path).ok()?;
            if status != 200 {
                return None;
            }
            let doc: serde_json::Value = serde_json::from_str(&body).ok()?;
            let value = doc.pointer("/data/result/0/value/1")?.as_str()?;
            value.parse::<f64>().ok()
        });
        found
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            eprintln!("--- prometheus log\n{log}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
