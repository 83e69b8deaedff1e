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
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
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
    // Named outside lifeguard's LIFEGUARD_* namespace: `cargo run` and `cargo test` put
    // these in the environment of what they run too, and lifeguard warns about every
    // LIFEGUARD_* variable that is not one of its own.
    println!("cargo:rustc-env=BUILT_COMMIT={commit}");
    println!(
        "cargo:rustc-env=BUILT_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    // A new commit or a change to the sources: ask again. A commit on a branch moves
    // the branch's ref, not HEAD (which still says `ref: refs/heads/main`), and in a
    // linked worktree `.git` is a file: ask git where HEAD, the ref it names, the packed
    // refs and the index live (git-rev-parse(1), --git-path).
    let mut watched: Vec<String> = ["src", "Cargo.toml", "Cargo.lock"]
        .map(String::from)
        .to_vec();
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for name in ["HEAD", "index", "packed-refs"]
        .into_iter()
        .chain(branch.as_deref())
    {
        watched.extend(git(&["rev-parse", "--git-path", name]));
    }
    for path in watched {
        // A path that does not exist would make cargo run this script on every build.
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}

/// One line of git's answer, or None without git or outside a repository.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
