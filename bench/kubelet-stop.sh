#!/usr/bin/env bash
# Kubernetes' stop, two plans, played as the kubelet documents it (bench/kubelet_stop.py
# says what and how), in a network namespace of its own (the drain reads its TCP counters). As root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/packages.sh build static-x86_64 bench
scripts/build-static.sh x86_64 >/dev/null  # the rustup target too, on a fresh machine
exec unshare --net sh -c 'ip link set lo up && exec python3 bench/kubelet_stop.py "$@"' sh "$@"
