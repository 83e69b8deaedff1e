#!/usr/bin/env bash
# One command to a release: both static binaries (x86_64, aarch64) from the same
# sources and release profile, their checksums, and an SBOM of the crates linked into
# them, in target/release-artifacts/:
#
#   lifeguard-<version>-x86_64-linux-musl
#   lifeguard-<version>-aarch64-linux-musl
#   lifeguard-<version>.cdx.json     CycloneDX 1.5: every crate compiled into the binary
#                                    (what container scanners match advisories against)
#   SHA256SUMS                       sha256sum -c checks every file above
#
#   scripts/release.sh
#
# Installs what the build needs first (scripts/build-static.sh does). Run from a clean
# checkout of a tagged commit: `lifeguard --version` names the commit it was built from.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build-static.sh all >/dev/null
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
target_dir="${CARGO_TARGET_DIR:-target}"
out="$target_dir/release-artifacts"
rm -rf "$out"
mkdir -p "$out"
for arch in x86_64 aarch64; do
  cp "$target_dir/$arch-unknown-linux-musl/release/lifeguard" "$out/lifeguard-$version-$arch-linux-musl"
done
# The normal (not build or dev) dependencies of the lifeguard binary, as cargo resolves
# them for the two targets with the default features.
cargo metadata --locked --format-version 1 --filter-platform x86_64-unknown-linux-musl \
  > "$out/.metadata.json"
python3 scripts/sbom.py "$out/.metadata.json" "$version" > "$out/lifeguard-$version.cdx.json"
rm "$out/.metadata.json"
(cd "$out" && sha256sum lifeguard-* > SHA256SUMS)
for f in "$out"/*; do
  printf '%s\t%s bytes\n' "$f" "$(stat -c %s "$f")"
done
