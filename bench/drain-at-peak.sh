#!/usr/bin/env bash
# The drain at the peak (bench/drain_at_peak.py says what and how), in a network
# namespace of its own (the drain reads the namespace's TCP counters). As root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/packages.sh build static-x86_64 bench
scripts/build-static.sh x86_64 >/dev/null  # the rustup target too, on a fresh machine
exec unshare --net sh -c 'ip link set lo up && exec python3 bench/drain_at_peak.py "$@"' sh "$@"
