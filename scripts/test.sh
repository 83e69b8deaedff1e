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

# Debian packages the tests call: unshare, script, setpriv and prlimit (util-linux),
# env with --block-signal and timeout (coreutils >= 8.31), sh, grep, a C compiler for
# crates that build C.
# The metrics tests scrape with a real Prometheus server and check with promtool
# (package prometheus); the drain tests put HAProxy in front of the app (package haproxy)
# and compare with tini (package tini).
missing=()
for tool in unshare script setpriv prlimit timeout env sh grep cc prometheus promtool haproxy tini busybox; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "scripts/test.sh: installing packages for: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    util-linux bsdutils coreutils dash grep gcc prometheus haproxy tini busybox-static >/dev/null
  # Debian's packages start their services where an init system runs; the tests start
  # their own, on ports of their own.
  for service in prometheus haproxy; do
    (command -v service >/dev/null 2>&1 && service "$service" stop >/dev/null 2>&1) || true
  done
fi
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
if ! docker info >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1; then
  echo "scripts/test.sh: starting the Docker engine"
  (dockerd >/tmp/lifeguard-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi

# Graviton (issue #10): the static aarch64 binary is built on every change, before the
# native suite, and a subset of the tests then runs against it under qemu-user.
scripts/build-static.sh aarch64
cargo test --locked "$@"
scripts/test-aarch64.sh
