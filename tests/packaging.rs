//! The one list of Debian packages (scripts/packages.list) against what README.md tells
//! a user to install: a package the scripts install but the README leaves out is a
//! build that works in CI and fails by hand.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// (group, package) rows of scripts/packages.list.
fn listed() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("scripts/packages.list")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut words = l.split_whitespace();
            let group = words.next().unwrap().to_string();
            let package = words.next().expect("a package after the group").to_string();
            assert!(
                words.next().is_some(),
                "scripts/packages.list: {package} must say what needs it"
            );
            (group, package)
        })
        .collect()
}

fn packages_of(groups: &[&str]) -> BTreeSet<String> {
    listed()
        .into_iter()
        .filter(|(g, _)| groups.contains(&g.as_str()))
        .map(|(_, p)| p)
        .collect()
}

/// The README's section that starts at `heading`, up to the next `## `.
fn readme_section(heading: &str) -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README.md has no '{heading}'"));
    let rest = &readme[start + heading.len()..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_string()
}

#[test]
fn the_readme_build_section_names_every_build_package() {
    let build = packages_of(&["build", "static-x86_64", "static-aarch64"]);
    assert!(build.contains("libc6-dev-arm64-cross"), "{build:?}");
    let section = readme_section("## Build the static binary");
    // The install line names them all, so a user building by hand gets CI's result.
    let install: BTreeSet<String> = section
        .split("apt-get install")
        .nth(1)
        .expect("an apt-get install line in the build section")
        .split("\n\n")
        .next()
        .unwrap()
        .split_whitespace()
        .filter(|w| !w.starts_with('-') && *w != "\\")
        .map(|w| w.trim_matches('`').to_string())
        .take_while(|w| !w.is_empty() && !w.contains("rustup"))
        .collect();
    let missing: Vec<_> = build.difference(&install).collect();
    assert!(
        missing.is_empty(),
        "README's apt-get install line lacks {missing:?}"
    );
    let extra: Vec<_> = install.difference(&build).collect();
    assert!(
        extra.is_empty(),
        "README installs {extra:?}, which the list does not have"
    );
}

#[test]
fn the_readme_test_paragraph_names_every_test_package() {
    let section = readme_section("## The two commands");
    for package in packages_of(&["test", "test-aarch64"]) {
        assert!(
            section.contains(&package),
            "README's test paragraph does not name {package}"
        );
    }
}

#[test]
fn every_group_the_scripts_ask_for_exists() {
    let groups: BTreeSet<String> = listed().into_iter().map(|(g, _)| g).collect();
    for script in [
        "scripts/test.sh",
        "scripts/build-static.sh",
        "scripts/test-aarch64.sh",
        "bench/run-all.sh",
        "bench/health-at-peak.sh",
    ] {
        let text = std::fs::read_to_string(root().join(script)).unwrap();
        let calls: Vec<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("scripts/packages.sh "))
            .collect();
        assert!(
            !calls.is_empty(),
            "{script} installs nothing through scripts/packages.sh"
        );
        for call in calls {
            for group in call.split_whitespace() {
                assert!(
                    groups.contains(group),
                    "{script} asks for the unknown group {group}"
                );
            }
        }
    }
}

#[test]
fn the_release_script_writes_both_binaries_their_checksums_and_an_sbom() {
    // Builds both static binaries (already built by scripts/test.sh and the container
    // tests, so cargo finds little to do) and lays out the release.
    let out = common::as_from_the_shell(&mut std::process::Command::new(
        root().join("scripts/release.sh"),
    ))
    .output()
    .expect("THIS TEST CANNOT RUN: scripts/release.sh did not start");
    assert!(
        out.status.success(),
        "scripts/release.sh failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = root().join("target/release-artifacts");
    let version = env!("CARGO_PKG_VERSION");
    let x86 = dir.join(format!("lifeguard-{version}-x86_64-linux-musl"));
    for build in ["", "slim-"] {
        for arch in ["x86_64", "aarch64"] {
            let binary = dir.join(format!("lifeguard-{version}-{build}{arch}-linux-musl"));
            assert!(binary.exists(), "{} missing", binary.display());
        }
    }
    // The checksums check, and cover every artifact.
    let check = std::process::Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    // Four binaries (default and slim, x86_64 and aarch64) and the two builds' SBOMs.
    assert_eq!(sums.lines().count(), 6, "{sums}");
    // The SBOM names what scanners look for, and nothing only a build script uses.
    let names = sbom_components(&dir.join(format!("lifeguard-{version}.cdx.json")));
    for linked in [
        "aws-sdk-cloudwatch",
        "rustls",
        "ring",
        "hyper",
        "tokio",
        "clap",
    ] {
        assert!(
            names.iter().any(|n| n == linked),
            "{linked} missing from the SBOM"
        );
    }
    assert!(
        !names.iter().any(|n| n == "cc"),
        "a build-only crate in the SBOM"
    );
    // Proc-macros run in the compiler: none of their code is in the binary. The C
    // library is: the static binary links musl.
    for macro_only in ["syn", "serde_derive", "clap_derive", "proc-macro2", "quote"] {
        assert!(
            !names.iter().any(|n| n == macro_only),
            "{macro_only} (compile time only) in the SBOM"
        );
    }
    assert!(
        names.iter().any(|n| n == "musl"),
        "musl missing from the SBOM"
    );
    // Every crate carries the SHA-256 of its .crate file, as Cargo.lock has it.
    let sbom: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("lifeguard-{version}.cdx.json"))).unwrap(),
    )
    .unwrap();
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).unwrap();
    for c in sbom["components"].as_array().unwrap() {
        if !c["purl"].as_str().unwrap().starts_with("pkg:cargo/") {
            continue;
        }
        let hash = c["hashes"][0]["content"].as_str().unwrap_or("");
        assert!(
            c["hashes"][0]["alg"] == "SHA-256" && lock.contains(&format!("checksum = \"{hash}\"")),
            "{} has no SHA-256 from Cargo.lock: {c}",
            c["name"]
        );
    }
    // The slim build's SBOM lists what it links, and not the SDK it leaves out.
    let slim = sbom_components(&dir.join(format!("lifeguard-{version}-slim.cdx.json")));
    assert!(
        slim.iter().any(|n| n == "hyper"),
        "hyper missing from the slim SBOM"
    );
    for left_out in ["aws-sdk-cloudwatch", "rustls", "ring"] {
        assert!(
            !slim.iter().any(|n| n == left_out),
            "{left_out} in the slim SBOM"
        );
    }
    // --version names the version, the commit and the target.
    let said = std::process::Command::new(&x86)
        .arg("--version")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&said.stdout);
    assert!(
        said.starts_with(&format!("lifeguard {version} (commit "))
            && said.contains("x86_64-unknown-linux-musl"),
        "{said}"
    );
}

/// The names of the components a CycloneDX SBOM lists (after checking it is one).
fn sbom_components(path: &std::path::Path) -> Vec<String> {
    let sbom: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX", "{}", path.display());
    sbom["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// One release of RELEASES.md: its version, commit, toolchain and SHA256SUMS lines.
struct Record {
    version: String,
    commit: String,
    toolchain: String,
    sums: Vec<(String, String)>,
}

fn records() -> Vec<Record> {
    let text = std::fs::read_to_string(root().join("RELEASES.md")).unwrap();
    let mut out = Vec::new();
    for section in text.split("\n## ").skip(1) {
        let version = section.split_whitespace().next().unwrap().to_string();
        let field = |name: &str| {
            section
                .lines()
                .find_map(|l| l.strip_prefix(&format!("- {name}: `")))
                .and_then(|l| l.split('`').next())
                .unwrap_or_else(|| panic!("RELEASES.md {version}: no {name}"))
                .to_string()
        };
        let sums = section
            .split("```sha256sums\n")
            .nth(1)
            .and_then(|s| s.split("```").next())
            .unwrap_or_else(|| panic!("RELEASES.md {version}: no sha256sums block"))
            .lines()
            .map(|l| {
                let (digest, name) = l.split_once("  ").expect("DIGEST  NAME");
                (digest.to_string(), name.to_string())
            })
            .collect();
        out.push(Record {
            commit: field("commit"),
            toolchain: field("toolchain"),
            version,
            sums,
        });
    }
    out
}

fn git(args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .args(args)
        .current_dir(root())
        .output()
        .expect("THIS TEST CANNOT RUN: no git")
}

#[test]
fn every_release_record_names_a_commit_of_this_repository_and_its_six_sums() {
    // A tag does not reach every clone; the record is in the tree, and what it names must
    // be in the history a clone of main has.
    let records = records();
    assert!(!records.is_empty(), "RELEASES.md records no release");
    // Nothing in the record may go stale as main moves on: it says what the release is,
    // never what came after it.
    let text = std::fs::read_to_string(root().join("RELEASES.md")).unwrap();
    for stale in ["after it on main", "commits after", "since then"] {
        assert!(
            !text.contains(stale),
            "RELEASES.md says {stale:?}, which later commits make false"
        );
    }
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).unwrap();
    for r in &records {
        assert_eq!(r.commit.len(), 40, "{}: {}", r.version, r.commit);
        let kind = git(&["cat-file", "-t", &r.commit]);
        assert_eq!(
            String::from_utf8_lossy(&kind.stdout).trim(),
            "commit",
            "{}: {} is not a commit of this repository (a shallow clone?)",
            r.version,
            r.commit
        );
        let manifest = git(&["show", &format!("{}:Cargo.toml", r.commit)]);
        assert!(
            String::from_utf8_lossy(&manifest.stdout)
                .contains(&format!("version = \"{}\"", r.version)),
            "{}: the recorded commit's Cargo.toml is another version",
            r.version
        );
        assert!(
            changelog.contains(&format!("## [{}]", r.version)),
            "{}: no CHANGELOG section",
            r.version
        );
        assert!(r.toolchain.starts_with("rustc "), "{}", r.toolchain);
        let names: BTreeSet<String> = r.sums.iter().map(|(_, n)| n.clone()).collect();
        let v = &r.version;
        let want: BTreeSet<String> = [
            format!("lifeguard-{v}-x86_64-linux-musl"),
            format!("lifeguard-{v}-aarch64-linux-musl"),
            format!("lifeguard-{v}-slim-x86_64-linux-musl"),
            format!("lifeguard-{v}-slim-aarch64-linux-musl"),
            format!("lifeguard-{v}.cdx.json"),
            format!("lifeguard-{v}-slim.cdx.json"),
        ]
        .into_iter()
        .collect();
        assert_eq!(names, want, "{v}: the recorded artifacts");
        for (digest, name) in &r.sums {
            assert!(
                digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
                "{v}: {name}'s sum {digest}"
            );
        }
    }
}

#[test]
fn the_readme_verify_steps_run_as_written_and_the_release_rebuilds_bit_for_bit() {
    // The README's commands, as a user types them in a clone: the one that finds the
    // release's commit, and the one that rebuilds a binary of it and checks the record.
    let section = readme_section("### Releases, and verifying one");
    let checkout = section
        .lines()
        .find(|l| l.starts_with("git checkout \"$(sed"))
        .expect("the README's checkout line");
    let find = checkout
        .strip_prefix("git checkout \"$(")
        .and_then(|l| l.strip_suffix(")\""))
        .unwrap();
    let found = std::process::Command::new("bash")
        .args(["-c", find])
        .current_dir(root())
        .output()
        .unwrap();
    // The README names the newest release (RELEASES.md lists the newest first).
    let release = records().into_iter().next().unwrap();
    assert!(
        checkout.contains(&format!("/^## {}/", release.version)),
        "the README's checkout line names another release than the newest, {}",
        release.version
    );
    assert_eq!(
        String::from_utf8_lossy(&found.stdout).trim(),
        release.commit,
        "the README's line finds another commit"
    );
    let verify = section
        .lines()
        .find(|l| {
            l.starts_with(&format!(
                "scripts/verify-release.sh {v} lifeguard-{v}-",
                v = release.version
            ))
        })
        .expect("the README's one-binary verify line, for the newest release");
    let out = common::as_from_the_shell(&mut std::process::Command::new("bash"))
        .args(["-c", verify])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{verify}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(": OK"), "{said}");
}

#[test]
fn another_toolchain_is_refused_with_the_one_to_install() {
    // A rustc that is not the record's, and a rustup with no toolchain of the record's
    // version: one line naming what to install, before any build, not a checksum
    // mismatch minutes later.
    let fake = std::env::temp_dir().join(format!("lifeguard-fake-rust-{}", std::process::id()));
    std::fs::create_dir_all(&fake).unwrap();
    for (name, body) in [
        ("rustc", "echo 'rustc 1.99.0 (0000000 2099-01-01)'"),
        ("rustup", "exit 0"),
    ] {
        let path = fake.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&path, executable).unwrap();
    }
    let path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap());
    let out = std::process::Command::new("bash")
        .args([
            "scripts/verify-release.sh",
            "0.2.0",
            "lifeguard-0.2.0-slim-x86_64-linux-musl",
        ])
        .current_dir(root())
        .env("PATH", path)
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&fake);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{said}");
    let release = records()
        .into_iter()
        .find(|r| r.version == "0.2.0")
        .unwrap();
    let version = release
        .toolchain
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    assert!(
        said.contains(&format!("rustup toolchain install {version}")) && said.lines().count() == 1,
        "{said}"
    );
}
