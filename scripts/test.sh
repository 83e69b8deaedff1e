#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian machine, installing what it needs first.
# Needs root: the tests create PID namespaces (unshare --pid) as a container runtime does.
set -euo pipefail
cd "$(dirname "$0")/.."

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/test.sh: the tests need root (PID namespaces); run it with sudo" >&2
    exit 1
  fi
}
need_root

# Debian packages: the tests' and the builds' (scripts/packages.list says what needs
# each), checked by package name and installed when missing.
scripts/packages.sh build static-x86_64 static-aarch64 test test-aarch64
# Python packages of the tests (pinned): the examples' parsers and linters, the
# CloudWatch emulator. In a virtualenv of their own, first on PATH for the tests, so
# the machine's own Python packages are neither used nor changed.
venv=target/test-venv
if [ ! -x "$venv/bin/python3" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r tests/support/requirements.txt
export PATH="$PWD/$venv/bin:$PATH"
command -v cargo >/dev/null 2>&1 || { echo "scripts/test.sh: cargo (rustup) is required" >&2; exit 1; }

# The container tests build lifeguard and the test app as static musl binaries and run
# them in FROM-scratch images on the local Docker engine.
if ! rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
  rustup target add x86_64-unknown-linux-musl
fi
# The README's verify step (tests/packaging.rs runs it) rebuilds a recorded release bit
# for bit, which only the rustc its record names can: rustup's copy of that version.
for recorded in $(sed -n 's/^- toolchain: `rustc \([0-9.]*\) .*/\1/p' RELEASES.md | sort -u); do
  if ! rustup toolchain list 2>/dev/null | grep -q "^$recorded-"; then
    rustup toolchain install "$recorded" --profile minimal
  fi
  if ! rustup target list --installed --toolchain "$recorded" 2>/dev/null | grep -qx x86_64-unknown-linux-musl; then
    rustup target add --toolchain "$recorded" x86_64-unknown-linux-musl
  fi
done
if ! docker info >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1; then
  echo "scripts/test.sh: starting the Docker engine"
  (dockerd >/tmp/lifeguard-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi

# Graviton: the static aarch64 binary is built on every change, before the
# native suite, and a subset of the tests then runs against it under qemu-user.
scripts/build-static.sh aarch64
cargo test --locked "$@"
# The build without the AWS SDK, against the tests that do not need it.
scripts/test-slim.sh
scripts/test-aarch64.sh
# The release's artifacts, built and checked as a release makes them (nothing is
# uploaded): four static binaries, their SBOMs and checksums.
scripts/release.sh
