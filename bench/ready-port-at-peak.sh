#!/usr/bin/env bash
# The ready port at the peak (bench/ready_port_at_peak.py says what and how). As root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/packages.sh build static-x86_64 bench
command -v tini >/dev/null && command -v dumb-init >/dev/null
scripts/build-static.sh x86_64 >/dev/null  # the rustup target too, on a fresh machine
exec python3 bench/ready_port_at_peak.py "$@"
