#!/usr/bin/env bash
# The ready port at the peak (bench/ready_port_at_peak.py says what and how). As root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/packages.sh build static-x86_64 bench
command -v tini >/dev/null && command -v dumb-init >/dev/null
cargo build --release --locked --target x86_64-unknown-linux-musl --bin lifeguard
exec python3 bench/ready_port_at_peak.py "$@"
