#!/usr/bin/env bash
# The build without the AWS SDK (cargo build --profile slim --no-default-features): built
# static as it ships, then the tests that do not need the SDK run against it (through
# TEST_LIFEGUARD_BIN, as scripts/test-aarch64.sh runs the aarch64 binary). The same
# target directory as tests/common's slim_binaries(), so the build is done once.
#
#   scripts/test-slim.sh [NEXTEST-ARGS...]    e.g. --profile ci (scripts/test.sh), a filter
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/packages.sh build static-x86_64
target=x86_64-unknown-linux-musl
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  rustup target add "$target"
fi
export CARGO_TARGET_DIR_SLIM="$PWD/target/slim"
CARGO_TARGET_DIR="$CARGO_TARGET_DIR_SLIM" cargo build --locked --profile slim --no-default-features \
  --target "$target" --bin lifeguard --bin lifeguard-testapp
bin="$CARGO_TARGET_DIR_SLIM/$target/slim/lifeguard"
printf 'scripts/test-slim.sh: %s, %s bytes\n' "$bin" "$(stat -c %s "$bin")"
TEST_LIFEGUARD_BIN="$bin" cargo nextest run --locked \
  --test emf --test exit_status --test signals --test drain --test endpoint --test metrics --test scale_in \
  --test otlp "$@"
