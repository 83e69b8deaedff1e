//! Build facts for `lifeguard --version`: the commit the binary was built from and the
//! target it was built for (a bug report then names the exact build).
use std::process::Command;

fn main() {
    // A build from a source tree without git (a tarball, a Docker context that leaves
    // .git out) may pass the commit in; otherwise ask git, and say "unknown" without it.
    println!("cargo:rerun-if-env-changed=LIFEGUARD_COMMIT");
    let commit = std::env::var("LIFEGUARD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        });
    let dirty = commit.is_some()
        && Command::new("git")
            .args([
                "diff",
                "--quiet",
                "HEAD",
                "--",
                "src",
                "Cargo.toml",
                "Cargo.lock",
                "build.rs",
            ])
            .status()
            .is_ok_and(|s| s.code() == Some(1));
    let commit = match (commit, dirty) {
        (Some(c), true) => format!("{c}-modified"),
        (Some(c), false) => c,
        (None, _) => "unknown".to_string(),
    };
    println!("cargo:rustc-env=LIFEGUARD_COMMIT={commit}");
    println!(
        "cargo:rustc-env=LIFEGUARD_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    // A new commit or a change to the sources: ask again.
    for path in [".git/HEAD", ".git/index", "src", "Cargo.toml", "Cargo.lock"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
