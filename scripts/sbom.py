#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM of what is compiled into the lifeguard binary.

Reads `cargo metadata` (its resolve, for one target platform) and walks the
dependency graph from the lifeguard package along normal dependencies only (build
scripts and dev-dependencies are not linked into the binary), and not into proc-macro
crates (serde_derive, clap_derive and syn run in the compiler; none of their code is in
the binary), so the list is what a scanner should match advisories against. Each crate
carries the SHA-256 of its .crate file from Cargo.lock (what cargo verified when it
downloaded it). Beside the crates, what the static binary also links: the musl C
library (its version read from the toolchain's self-contained libc.a), LLVM's libunwind
and Rust's standard library, at the toolchain's versions. Prints the JSON on stdout.

    scripts/sbom.py METADATA.json VERSION [CARGO.LOCK]
"""
import glob
import json
import os
import re
import subprocess
import sys
import tomllib
import uuid


def toolchain_components():
    """musl, libunwind and the Rust standard library, as this toolchain links them."""
    about = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    rust = re.search(r"^release: (\S+)", about, re.M).group(1)
    llvm = re.search(r"^LLVM version: (\S+)", about, re.M)
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True, check=True).stdout.strip()
    musl = None
    for libc in glob.glob(os.path.join(sysroot, "lib/rustlib/*-linux-musl/lib/self-contained/libc.a")):
        # musl keeps its version as a plain string (src/internal/version.c).
        found = re.search(rb"\x00(1\.[0-9]+\.[0-9]+)\x00", open(libc, "rb").read())
        if found:
            musl = found.group(1).decode()
            break
    if musl is None:
        sys.exit("scripts/sbom.py: no musl version in the toolchain's self-contained libc.a "
                 "(rustup target add x86_64-unknown-linux-musl)")
    components = [{
        "type": "library",
        "bom-ref": f"pkg:generic/musl@{musl}",
        "name": "musl",
        "version": musl,
        "purl": f"pkg:generic/musl@{musl}?download_url=https://musl.libc.org/releases/musl-{musl}.tar.gz",
        "description": "the C library, linked statically (rustup's self-contained musl for the target)",
        "licenses": [{"expression": "MIT"}],
    }, {
        "type": "library",
        "bom-ref": f"pkg:generic/rust-std@{rust}",
        "name": "rust-std",
        "version": rust,
        "purl": f"pkg:generic/rust-std@{rust}",
        "description": "Rust's standard library (std, core, alloc), linked statically",
        "licenses": [{"expression": "MIT OR Apache-2.0"}],
    }]
    if llvm:
        components.append({
            "type": "library",
            "bom-ref": f"pkg:generic/llvm-libunwind@{llvm.group(1)}",
            "name": "llvm-libunwind",
            "version": llvm.group(1),
            "purl": f"pkg:generic/llvm-libunwind@{llvm.group(1)}",
            "description": "LLVM's libunwind, linked statically (rustup's self-contained libunwind.a)",
            "licenses": [{"expression": "Apache-2.0 WITH LLVM-exception"}],
        })
    return components


def main():
    metadata = json.load(open(sys.argv[1]))
    version = sys.argv[2]
    lock_path = sys.argv[3] if len(sys.argv) > 3 else os.path.join(metadata["workspace_root"], "Cargo.lock")
    checksums = {(p["name"], p["version"]): p.get("checksum")
                 for p in tomllib.load(open(lock_path, "rb"))["package"]}
    packages = {p["id"]: p for p in metadata["packages"]}
    nodes = {n["id"]: n for n in metadata["resolve"]["nodes"]}
    root = next(p["id"] for p in metadata["packages"] if p["name"] == "lifeguard")

    def proc_macro(pid):
        return any("proc-macro" in t["kind"] for t in packages[pid]["targets"])

    linked, frontier = set(), [root]
    while frontier:
        node = nodes[frontier.pop()]
        for dep in node.get("deps", []):
            normal = any(k.get("kind") is None for k in dep.get("dep_kinds", []))
            if normal and dep["pkg"] not in linked and not proc_macro(dep["pkg"]):
                linked.add(dep["pkg"])
                frontier.append(dep["pkg"])
    components = toolchain_components()
    for pid in sorted(linked, key=lambda i: (packages[i]["name"], packages[i]["version"])):
        p = packages[pid]
        component = {
            "type": "library",
            "bom-ref": f"pkg:cargo/{p['name']}@{p['version']}",
            "name": p["name"],
            "version": p["version"],
            "purl": f"pkg:cargo/{p['name']}@{p['version']}",
        }
        if p.get("license"):
            component["licenses"] = [{"expression": p["license"]}]
        checksum = checksums.get((p["name"], p["version"]))
        if checksum:
            component["hashes"] = [{"alg": "SHA-256", "content": checksum}]
        components.append(component)
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, 'lifeguard@' + version)}",
        "version": 1,
        "metadata": {
            "component": {
                "type": "application",
                "bom-ref": f"pkg:cargo/lifeguard@{version}",
                "name": "lifeguard",
                "version": version,
                "purl": f"pkg:cargo/lifeguard@{version}",
                "licenses": [{"expression": "MIT OR Apache-2.0"}],
            }
        },
        "components": components,
        "dependencies": [
            {
                "ref": f"pkg:cargo/{packages[i]['name']}@{packages[i]['version']}",
                "dependsOn": sorted(
                    f"pkg:cargo/{packages[d['pkg']]['name']}@{packages[d['pkg']]['version']}"
                    for d in nodes[i].get("deps", [])
                    if d["pkg"] in linked
                    and any(k.get("kind") is None for k in d.get("dep_kinds", []))
                ),
            }
            for i in [root] + sorted(linked)
        ],
    }
    json.dump(bom, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
