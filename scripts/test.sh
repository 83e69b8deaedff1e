#!/usr/bin/env bash
# Runs the whole test suite on a fresh Debian machine, installing what it needs first.
# Needs root: the tests create PID namespaces (unshare --pid) as a container runtime does.
#
#   scripts/test.sh                    every phase, as CI runs it
#   scripts/test.sh PHASE...           the setup, then those phases alone, in this order:
#                                      native alone slim aarch64 release
#   scripts/test.sh native -- ARGS     ARGS go to `cargo nextest run` (a filter, say)
#
# The phases (docs/testing.md says more):
#   setup     Debian packages, the tests' Python virtualenv, rustup targets and the
#             recorded release's toolchain, the Docker engine
#   build     the host's test binaries first; then the static builds in the background
#             (x86_64, its build without the SDK, the fault-injection build, aarch64),
#             while the native suite runs beside them
#   native    every test binary against the host build, in one pool of test threads
#             (cargo-nextest; .config/nextest.toml), but the tests that run alone
#   slim      the build without the AWS SDK against the tests that do not need it
#   aarch64   the static aarch64 binary under qemu-user, a subset
#   alone     the tests that need the machine to themselves, each alone once all else
#             is done: those at the peak (a 0.25-CPU cgroup full of spinning threads,
#             measuring what the quota leaves) and the kubelet's 3 s grace
#   release   the release's artifacts, built and checked as a release makes them
# At the end (pass or fail) a table says each phase's start, wall time and result.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "scripts/test.sh: the tests need root (PID namespaces); run it with sudo" >&2
  exit 1
fi

all_phases=(native alone slim aarch64 release)
phases=()
nextest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; nextest_args=("$@"); break ;;
    native|alone|slim|aarch64|release) phases+=("$1"); shift ;;
    *)
      echo "scripts/test.sh: no phase '$1'; the phases are: ${all_phases[*]} (and -- ARGS for cargo nextest run)" >&2
      exit 2
      ;;
  esac
done
[ ${#phases[@]} -gt 0 ] || phases=("${all_phases[@]}")
# A filter of the user's may match nothing in some phase: said, not failed.
[ ${#nextest_args[@]} -eq 0 ] || nextest_args=(--no-tests=warn "${nextest_args[@]}")
wants() { [[ " ${phases[*]} " == *" $1 "* ]]; }

mkdir -p target/test-logs
clock="target/test-logs/phases.tsv"
: > "$clock"
started="$(date +%s.%N)"

# timed NAME COMMAND...: runs COMMAND, noting its start, end and exit status in the
# table; returns the command's status. COMMAND runs in a subshell with errexit on:
# bash ignores errexit inside a function called as `f || ...`, which would let a failed
# step of a phase's function go unnoticed.
timed() {
  local name="$1" from to status
  shift
  from="$(date +%s.%N)"
  set +e
  (set -e; "$@")
  status=$?
  set -e
  to="$(date +%s.%N)"
  printf '%s\t%s\t%s\t%s\n' "$name" "$from" "$to" "$status" >> "$clock"
  return "$status"
}

# The table, however the run ends: where the time went is most wanted after a failure.
report() {
  local status=$?
  echo
  echo "scripts/test.sh: where the time went (wall clock; phases that start together ran side by side)"
  awk -F'\t' -v t0="$started" -v now="$(date +%s.%N)" -v status="$status" '
    function mmss(s) { return sprintf("%2d:%02d", int(s / 60), int(s % 60)) }
    { printf "  %-22s from %s  %6.0f s  %s\n", $1, mmss($2 - t0), $3 - $2, ($4 == 0 ? "ok" : "FAILED (" $4 ")") }
    END { printf "  %-22s          %6.0f s  %s\n", "total", now - t0, (status == 0 ? "ok" : "FAILED") }
  ' "$clock"
  exit "$status"
}
trap report EXIT

# Jobs side by side: each one's output goes to a log of its own, printed whole once the
# job is over (the logs of jobs that ran at once would interleave line by line).
background=()
in_background() {
  local name="$1"
  shift
  ( timed "$name" "$@" > "target/test-logs/$name.log" 2>&1 ) &
  background+=("$!:$name")
}
wait_background() {
  local failed=0 job
  for job in "${background[@]}"; do
    if ! wait "${job%%:*}"; then
      failed=1
    fi
    echo "----- scripts/test.sh: ${job#*:} (target/test-logs/${job#*:}.log) -----"
    cat "target/test-logs/${job#*:}.log"
  done
  background=()
  return "$failed"
}

setup() {
  # Debian packages: the tests' and the builds' (scripts/packages.list says what needs
  # each), checked by package name and installed when missing.
  scripts/packages.sh build static-x86_64 static-aarch64 test test-aarch64
  # Python packages of the tests (pinned): the examples' parsers and linters, the
  # CloudWatch emulator. In a virtualenv of their own, first on PATH for the tests, so
  # the machine's own Python packages are neither used nor changed.
  if [ ! -x "$venv/bin/python3" ]; then
    python3 -m venv "$venv"
  fi
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r tests/support/requirements.txt
  # The scaling benchmark's own (bench/scaling/run.sh makes it too; its smoke tests run
  # side by side, so it is made once here, before them).
  if [ ! -x target/scaling-venv/bin/python3 ]; then
    python3 -m venv target/scaling-venv
  fi
  target/scaling-venv/bin/python3 -m pip install --quiet --disable-pip-version-check -r bench/scaling/requirements.txt
  command -v cargo >/dev/null 2>&1 || { echo "scripts/test.sh: cargo (rustup) is required" >&2; exit 1; }
  # The test runner: cargo-nextest runs every test binary's tests in one pool.
  if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked cargo-nextest
  fi
  # The container tests build lifeguard and the test app as static musl binaries and
  # run them in FROM-scratch images on the local Docker engine; aarch64 is cross-built.
  for triple in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
    if ! rustup target list --installed 2>/dev/null | grep -qx "$triple"; then
      rustup target add "$triple"
    fi
  done
  # The README's verify step (tests/packaging.rs runs it) rebuilds a recorded release
  # bit for bit, which only the rustc its record names can: rustup's copy of that version.
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
}

venv=target/test-venv
timed setup setup
export PATH="$PWD/$venv/bin:$PATH"
# A rebuild of a recorded release that matched is not repeated on this machine (its
# inputs cannot change; scripts/verify-release.sh says why); a new machine rebuilds.
export VERIFY_RELEASE_CACHE="${VERIFY_RELEASE_CACHE:-/var/cache/lifeguard/verified-releases}"
# ring's C for aarch64, with Debian's cross compiler (as scripts/build-static.sh does).
export CC_aarch64_unknown_linux_musl="${CC_aarch64_unknown_linux_musl:-aarch64-linux-gnu-gcc}"
export AR_aarch64_unknown_linux_musl="${AR_aarch64_unknown_linux_musl:-aarch64-linux-gnu-ar}"

# Every build up front, in two chains side by side: each build ends in a whole-program
# (LTO) step on one core, so two at once keep both cores busy; and no test runs beside
# a build, so none competes with a compiler for the CPU it times. Builds that share a
# target directory are in one chain (cargo holds a directory while it builds in it).
# A test that needs one of these builds asks cargo for it too, and finds it done.
build_host_and_aarch64() {
  cargo nextest run --locked --no-run
  if wants aarch64 || wants release; then
    scripts/build-static.sh aarch64
  fi
  if wants native || wants release; then
    # The release's build without the SDK for aarch64 (tests/packaging.rs makes the
    # release too).
    CARGO_TARGET_DIR=target/slim cargo build --locked --profile slim --no-default-features \
      --target aarch64-unknown-linux-musl --bin lifeguard
  fi
}
build_x86_64() {
  if wants native || wants release; then
    # The shipped build: the container tests' images, the faults' size check, the
    # scaling benchmark, the release.
    CARGO_TARGET_DIR=target/container cargo build --locked --release \
      --target x86_64-unknown-linux-musl --bin lifeguard --bin lifeguard-testapp
  fi
  if wants native || wants alone; then
    CARGO_TARGET_DIR=target/faults cargo build --locked --profile faults \
      --features fault-injection --bin lifeguard --bin lifeguard-testapp
  fi
  if wants native || wants slim || wants alone || wants release; then
    CARGO_TARGET_DIR=target/slim cargo build --locked --profile slim --no-default-features \
      --target x86_64-unknown-linux-musl --bin lifeguard --bin lifeguard-testapp
  fi
}
in_background "build host+aarch64" build_host_and_aarch64
in_background "build x86_64" build_x86_64
wait_background || exit 1
# The tests take the builds made above as made (tests/common's `build`), rather than
# each test's process asking cargo again.
built=()
if wants native || wants release; then built+=(container); fi
if wants native || wants alone; then built+=(faults); fi
if wants native || wants slim || wants alone || wants release; then built+=(slim); fi
TEST_BUILT_TARGETS="$(IFS=,; echo "${built[*]}")"
export TEST_BUILT_TARGETS

status=0
if wants native; then
  timed native cargo nextest run --locked --profile ci "${nextest_args[@]}" || status=1
fi
# The build without the SDK against the tests that do not need it, and the aarch64
# binary under emulation, side by side (their tests wait on timers as the native ones
# do). Their tests that run alone wait for that phase.
if wants slim; then
  in_background slim scripts/test-slim.sh --profile ci "${nextest_args[@]}"
fi
if wants aarch64; then
  in_background aarch64 scripts/test-aarch64.sh "${nextest_args[@]}"
fi
wait_background || status=1
if wants alone; then
  timed "alone native" cargo nextest run --locked --profile alone "${nextest_args[@]}" || status=1
  timed "alone slim" scripts/test-slim.sh --profile alone "${nextest_args[@]}" || status=1
fi
# The release's artifacts, built and checked as a release makes them (nothing is
# uploaded): four static binaries, their SBOMs and checksums.
if wants release; then
  timed release scripts/release.sh || status=1
fi
exit "$status"
