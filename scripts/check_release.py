#!/usr/bin/env python3
"""Checks the artifacts scripts/release.sh wrote, before anything is published:

- each binary is an ELF executable for its machine (x86-64 or AArch64), static (no
  program interpreter, no dynamic section), and runs: `--version` names this version
  and the commit of the checkout (the aarch64 ones under qemu-aarch64-static);
- SHA256SUMS lists every binary and SBOM, and each sum holds;
- each SBOM is CycloneDX 1.5 naming this version, the default build's lists the AWS
  SDK's crates and rustls, the slim build's neither (and is a subset of the default's).

    scripts/check_release.py ARTIFACTS_DIR VERSION

Exits 1 with every problem found; prints what it checked otherwise.
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

MACHINES = {"x86_64": 62, "aarch64": 183}  # e_machine: EM_X86_64, EM_AARCH64
PT_INTERP, PT_DYNAMIC = 3, 2


def elf_facts(path):
    """(e_machine, has an interpreter, has a dynamic section) of a 64-bit LE ELF."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise ValueError("not a 64-bit little-endian ELF file")
        machine = struct.unpack_from("<H", head, 18)[0]
        phoff = struct.unpack_from("<Q", head, 32)[0]
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    types = [struct.unpack_from("<I", table, i * phentsize)[0] for i in range(phnum)]
    return machine, PT_INTERP in types, PT_DYNAMIC in types


def commit():
    out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def main():
    out, version = sys.argv[1], sys.argv[2]
    problems, checked = [], []
    head = commit()
    binaries = sorted(f for f in os.listdir(out) if f.startswith("lifeguard-") and not f.endswith(".json"))
    want = {f"lifeguard-{version}-{kind}{arch}-linux-musl"
            for arch in MACHINES for kind in ("", "slim-")}
    if set(binaries) != want:
        problems.append(f"binaries {binaries}, expected {sorted(want)}")
    for name in binaries:
        path = os.path.join(out, name)
        arch = "aarch64" if "aarch64" in name else "x86_64"
        try:
            machine, interp, dynamic = elf_facts(path)
        except (OSError, ValueError) as err:
            problems.append(f"{name}: {err}")
            continue
        if machine != MACHINES[arch]:
            problems.append(f"{name}: ELF machine {machine}, not {arch}'s {MACHINES[arch]}")
        if interp or dynamic:
            problems.append(f"{name}: not static (interpreter {interp}, dynamic section {dynamic})")
        runner = [] if arch == "x86_64" else [shutil.which("qemu-aarch64-static") or "qemu-aarch64-static"]
        try:
            ran = subprocess.run(runner + [path, "--version"], capture_output=True, text=True, timeout=60)
            said = ran.stdout.strip()
        except OSError as err:
            problems.append(f"{name}: cannot run {runner + [path]}: {err}")
            continue
        if ran.returncode != 0 or f"lifeguard {version} " not in said:
            problems.append(f"{name}: --version said {said!r} (exit {ran.returncode})")
        elif head and f"commit {head}" not in said:
            problems.append(f"{name}: --version names another commit than {head}: {said!r}")
        elif arch not in said:
            problems.append(f"{name}: --version names another target: {said!r}")
        else:
            checked.append(f"{name}: static {arch}, {os.path.getsize(path):,} bytes, says {said!r}")
    sums = {}
    try:
        for line in open(os.path.join(out, "SHA256SUMS")):
            digest, name = line.split()
            sums[name.lstrip("*")] = digest
    except (OSError, ValueError) as err:
        problems.append(f"SHA256SUMS: {err}")
    listed = set(binaries) | {f for f in os.listdir(out) if f.endswith(".cdx.json")}
    if set(sums) != listed:
        problems.append(f"SHA256SUMS lists {sorted(sums)}, the artifacts are {sorted(listed)}")
    for name, digest in sums.items():
        path = os.path.join(out, name)
        if os.path.exists(path) and hashlib.sha256(open(path, "rb").read()).hexdigest() != digest:
            problems.append(f"SHA256SUMS: {name} does not match")
    boms = {}
    for kind, name in (("default", f"lifeguard-{version}.cdx.json"), ("slim", f"lifeguard-{version}-slim.cdx.json")):
        try:
            bom = json.load(open(os.path.join(out, name)))
        except (OSError, ValueError) as err:
            problems.append(f"{name}: {err}")
            continue
        components = bom.get("components", [])
        crates = {c["name"] for c in components}
        boms[kind] = crates
        # The static binary links musl; proc-macros run in the compiler and are not in it;
        # each crate carries its .crate file's SHA-256 from Cargo.lock.
        if not any(c["name"] == "musl" and c.get("version") for c in components):
            problems.append(f"{name}: no musl component (the C library linked statically)")
        macros = {"syn", "serde_derive", "clap_derive", "proc-macro2", "quote"} & crates
        if macros:
            problems.append(f"{name}: lists proc-macro crates not in the binary: {sorted(macros)}")
        unhashed = [c["name"] for c in components if c.get("purl", "").startswith("pkg:cargo/")
                    and not any(h.get("alg") == "SHA-256" and len(h.get("content", "")) == 64
                                for h in c.get("hashes", []))]
        if unhashed:
            problems.append(f"{name}: crates without a SHA-256: {unhashed[:5]}")
        if bom.get("specVersion") != "1.5" or bom["metadata"]["component"]["version"] != version:
            problems.append(f"{name}: not a CycloneDX 1.5 SBOM of lifeguard {version}")
        sdk = {"aws-sdk-cloudwatch", "rustls"} & crates
        if kind == "default" and sdk != {"aws-sdk-cloudwatch", "rustls"}:
            problems.append(f"{name}: the default build's SBOM lacks the SDK's crates")
        if kind == "slim" and sdk:
            problems.append(f"{name}: the slim build's SBOM lists {sorted(sdk)}")
        checked.append(f"{name}: {len(crates)} crates")
    if "default" in boms and "slim" in boms and not boms["slim"] <= boms["default"]:
        problems.append(f"the slim SBOM has crates the default lacks: {sorted(boms['slim'] - boms['default'])}")
    if problems:
        print("scripts/check_release.py: the release is not right:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        sys.exit(1)
    for line in checked:
        print(f"checked: {line}")
    print(f"checked: SHA256SUMS, {len(sums)} files")


if __name__ == "__main__":
    main()
