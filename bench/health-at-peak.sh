#!/usr/bin/env bash
# Health checks at the peak (bench/health_at_peak.py says what and how). As root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/packages.sh build bench
exec python3 bench/health_at_peak.py "$@"
