#!/usr/bin/env bash
# Builds the static (musl) binaries, lifeguard and lifeguard-testapp, for x86_64, aarch64
# or both, from the same sources and the same release profile, installing what the build
# needs first (the rustup target; on Debian, musl-tools for x86_64 and gcc-aarch64-linux-gnu
# for aarch64). Prints each binary's path and size.
#
#   scripts/build-static.sh [x86_64|aarch64|all]     (default: all)
#
# The binaries land in $CARGO_TARGET_DIR (default target/)/<triple>/release/. aarch64 is
# cross-built on any host: rustup ships musl for it (self-contained start files and libc)
# and .cargo/config.toml links with rust-lld, so no aarch64 sysroot is needed. The C
# compiler below is only for crates that build C (none today; ring would): Debian's
# aarch64-linux-gnu-gcc compiles freestanding code for it well enough, and musl's headers
# come with the crate that needs them (cc-rs does not search glibc's for a musl target).
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

apt_updated=
# Debian packages, installed only when missing and only as root (elsewhere: say which).
apt_install() {
  local tool="$1" package="$2"
  command -v "$tool" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/build-static.sh: installing $package (for $tool)"
    if [ -z "$apt_updated" ]; then
      apt-get update -qq
      apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
  else
    echo "scripts/build-static.sh: $tool is missing; install $package" >&2
    exit 1
  fi
}

for target in "${targets[@]}"; do
  if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    rustup target add "$target"
  fi
  case "$target" in
    x86_64-*)
      # musl-gcc, for crates that build C for the host's own musl target.
      apt_install musl-gcc musl-tools
      ;;
    aarch64-*)
      apt_install aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu
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
