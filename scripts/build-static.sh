#!/usr/bin/env bash
# Builds the static (musl) binaries, lifeguard and lifeguard-testapp, for x86_64, aarch64
# or both, from the same sources and the same release profile, installing what the build
# needs first (the rustup targets; the Debian packages of scripts/packages.list's groups
# build and static-<arch>). Prints each binary's path and size.
#
#   scripts/build-static.sh [x86_64|aarch64|all]     (default: all)
#
# The binaries land in $CARGO_TARGET_DIR (default target/)/<triple>/release/. aarch64 is
# cross-built on any host: rustup ships musl for it (self-contained start files and libc)
# and .cargo/config.toml links with rust-lld, so no aarch64 sysroot is needed. The C
# compiler is for ring (rustls, in the AWS SDK), which builds C: Debian's
# aarch64-linux-gnu-gcc compiles it, with the arm64 C headers of libc6-dev-arm64-cross
# (without them its stdint.h falls through to the host's x86_64 headers).
set -euo pipefail
cd "$(dirname "$0")/.."

which="${1:-all}"
case "$which" in
  x86_64) targets=(x86_64-unknown-linux-musl) ;;
  aarch64) targets=(aarch64-unknown-linux-musl) ;;
  all) targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl) ;;
  *)
    echo "usage: scripts/build-static.sh [x86_64|aarch64|all]" >&2
    exit 2
    ;;
esac

command -v cargo >/dev/null 2>&1 || { echo "scripts/build-static.sh: cargo (rustup) is required" >&2; exit 1; }

for target in "${targets[@]}"; do
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    rustup target add "$target"
  fi
  case "$target" in
    x86_64-*)
      scripts/packages.sh build static-x86_64
      ;;
    aarch64-*)
      scripts/packages.sh build static-aarch64
      # cc-rs reads these per-target variables; cargo's own linker setting is in
      # .cargo/config.toml ([target.aarch64-unknown-linux-musl] linker = "rust-lld").
      export CC_aarch64_unknown_linux_musl="${CC_aarch64_unknown_linux_musl:-aarch64-linux-gnu-gcc}"
      export AR_aarch64_unknown_linux_musl="${AR_aarch64_unknown_linux_musl:-aarch64-linux-gnu-ar}"
      ;;
  esac
done

target_args=()
for target in "${targets[@]}"; do target_args+=(--target "$target"); done
cargo build --locked --release "${target_args[@]}" --bin lifeguard --bin lifeguard-testapp

target_dir="${CARGO_TARGET_DIR:-target}"
for target in "${targets[@]}"; do
  for bin in lifeguard lifeguard-testapp; do
    path="$target_dir/$target/release/$bin"
    printf '%s\t%s bytes\n' "$path" "$(stat -c %s "$path")"
  done
done
