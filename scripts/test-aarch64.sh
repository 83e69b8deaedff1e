#!/usr/bin/env bash
# Runs a subset of the integration tests against the static aarch64 lifeguard under
# user-mode emulation (qemu-aarch64-static), after building it (scripts/build-static.sh).
# scripts/test.sh calls it after the native suite; it needs root for the same reason.
#
# The tests are the native ones, pointed at the other binary through the harness's one
# setting (tests/common/mod.rs, `lifeguard_argv`): TEST_LIFEGUARD_BIN and
# TEST_LIFEGUARD_RUNNER. The app each test starts stays the x86_64 testapp: qemu-user
# emulates lifeguard only, and the app it execs runs natively. A test, or a part of one,
# that the emulator cannot run says "SKIPPED UNDER EMULATION: <test>: <reason>"; those
# lines are listed again at the end (the harness writes them to TEST_SKIPPED_LOG too, as
# the test runner shows a passing test's output only when asked).
#
#   scripts/test-aarch64.sh [NEXTEST-ARGS...]
#
# The subset: exit codes, signal forwarding (real-time included), group signalling
# through `sh -c`, the drain and the deadline, the endpoint and --probe, and the metrics
# (cgroup and ECS; in-flight counting needs sock_diag netlink, which qemu lacks).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/packages.sh test-aarch64
scripts/build-static.sh aarch64
bin="$(realpath "${CARGO_TARGET_DIR:-target}")/aarch64-unknown-linux-musl/release/lifeguard"

log="$(mktemp /tmp/lifeguard-aarch64-tests.XXXXXX)"
status=0
TEST_SKIPPED_LOG="$log" TEST_LIFEGUARD_BIN="$bin" TEST_LIFEGUARD_RUNNER=qemu-aarch64-static \
  cargo nextest run --locked \
  --test exit_status --test signals --test shutdown --test drain --test endpoint --test metrics \
  --test scale_in "$@" || status=$?

echo
echo "scripts/test-aarch64.sh: ran against $bin under qemu-aarch64-static ($(qemu-aarch64-static --version | head -1))"
if grep -q '^SKIPPED UNDER EMULATION' "$log"; then
  echo "skipped under emulation (each with the reason):"
  grep '^SKIPPED UNDER EMULATION' "$log" | sort -u | sed 's/^/  /'
fi
rm -f "$log"
exit "$status"
