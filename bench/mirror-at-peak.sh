#!/usr/bin/env bash
# The readiness mirror at the peak (bench/mirror_at_peak.py says what and how). As root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/packages.sh build static-x86_64 bench
scripts/build-static.sh x86_64 >/dev/null  # the rustup target too, on a fresh machine
exec python3 bench/mirror_at_peak.py "$@"
