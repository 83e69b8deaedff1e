#!/usr/bin/env bash
# One command to a release, in target/release-artifacts/:
#
#   lifeguard-<version>-x86_64-linux-musl          the default build (PutMetricData
#   lifeguard-<version>-aarch64-linux-musl         through the AWS SDK, and EMF)
#   lifeguard-<version>-slim-x86_64-linux-musl     without the AWS SDK (EMF only):
#   lifeguard-<version>-slim-aarch64-linux-musl    `--profile slim --no-default-features`
#   lifeguard-<version>.cdx.json                   CycloneDX 1.5 SBOMs: every crate
#   lifeguard-<version>-slim.cdx.json              compiled into each build
#   SHA256SUMS                                     `sha256sum -c SHA256SUMS` checks them
#
#   scripts/release.sh
#
# All four static, from the same sources; then checked (scripts/check_release.py):
# each binary is a static executable for its machine that runs (`--version`, the
# aarch64 ones under qemu-aarch64-static) and names this version and commit, the
# checksums hold, the SBOMs list the crates (the slim one without the SDK). Nothing is
# uploaded. Installs what the build needs first (scripts/build-static.sh's packages and
# targets). Run from a clean checkout of the tagged commit: `lifeguard --version` names
# the commit it was built from, and "-modified" where the tree differs from it.
#
# Each build has a target directory of its own, the one the test suite builds the same
# thing in (target/container: the container tests' static x86_64 build; target/slim:
# scripts/test-slim.sh's), so after `scripts/test.sh` the release costs only the slim
# aarch64 build.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/packages.sh build static-x86_64 static-aarch64 test-aarch64
for triple in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
  if ! rustup target list --installed 2>/dev/null | grep -qx "$triple"; then
    rustup target add "$triple"
  fi
done
# ring (rustls, in the AWS SDK) builds C for aarch64 with Debian's cross compiler.
export CC_aarch64_unknown_linux_musl="${CC_aarch64_unknown_linux_musl:-aarch64-linux-gnu-gcc}"
export AR_aarch64_unknown_linux_musl="${AR_aarch64_unknown_linux_musl:-aarch64-linux-gnu-ar}"

version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
root="$(realpath "${CARGO_TARGET_DIR:-target}")"
out="$root/release-artifacts"
rm -rf "$out"
mkdir -p "$out"

# build ARCH KIND TARGET_DIR: one static lifeguard, copied into the artifacts.
build() {
  local arch="$1" kind="$2" dir="$3" triple="$1-unknown-linux-musl"
  local args=(--locked --target "$triple" --bin lifeguard)
  local profile=release name="lifeguard-$version-$arch-linux-musl"
  if [ "$kind" = slim ]; then
    profile=slim
    args+=(--profile slim --no-default-features)
    name="lifeguard-$version-slim-$arch-linux-musl"
  else
    args+=(--release)
  fi
  echo "scripts/release.sh: building $name"
  CARGO_TARGET_DIR="$dir" cargo build "${args[@]}"
  cp "$dir/$triple/$profile/lifeguard" "$out/$name"
}

build x86_64 default "$root/container"
build aarch64 default "$root"
build x86_64 slim "$root/slim"
build aarch64 slim "$root/slim"

# The normal (not build or dev) dependencies of the lifeguard binary, as cargo resolves
# them for the target with each build's features.
cargo metadata --locked --format-version 1 --filter-platform x86_64-unknown-linux-musl \
  > "$out/.metadata.json"
python3 scripts/sbom.py "$out/.metadata.json" "$version" > "$out/lifeguard-$version.cdx.json"
cargo metadata --locked --format-version 1 --filter-platform x86_64-unknown-linux-musl \
  --no-default-features > "$out/.metadata.json"
python3 scripts/sbom.py "$out/.metadata.json" "$version" > "$out/lifeguard-$version-slim.cdx.json"
rm "$out/.metadata.json"
(cd "$out" && sha256sum lifeguard-* > SHA256SUMS)

python3 scripts/check_release.py "$out" "$version"
for f in "$out"/*; do
  printf '%s\t%s bytes\n' "$f" "$(stat -c %s "$f")"
done
