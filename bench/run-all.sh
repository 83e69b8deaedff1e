#!/usr/bin/env bash
# Every benchmark of bench/, side by side with tini, tini-static, dumb-init and catatonit
# where they have a counterpart, and the peer yardstick (an external harness of start-up,
# SIGTERM latency and memory across inits, found at $PEER_BENCH) in the same sitting, so
# the two can be checked against each other. As root; about 15 min.
#   [PEER_BENCH=DIR] bench/run-all.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
quick=""
seconds=300
if [ "${1:-}" = "--quick" ]; then quick="--quick"; seconds=20; fi
scripts/packages.sh build static-x86_64 bench
export CARGO_TARGET_DIR=/tmp/bench-target
cargo build --release --target x86_64-unknown-linux-musl --bin lifeguard --bin lifeguard-testapp
lg=$CARGO_TARGET_DIR/x86_64-unknown-linux-musl/release/lifeguard
python3 bench/compare.py $quick
LIFEGUARD=$lg bench/readyz.sh | tee bench/readyz-results.txt
python3 bench/metrics.py --seconds "$seconds"
python3 bench/cloudwatch.py --seconds "$seconds"
if [ -n "${PEER_BENCH:-}" ] && [ -x "$PEER_BENCH/run-peers.sh" ]; then
  "$PEER_BENCH/run-peers.sh" $quick "" "tini --" "tini-static --" dumb-init "catatonit --" \
    "$lg --drain-delay 0 --listen off --" "$lg --drain-delay 0 --" | tee bench/peers-results.txt
else
  echo "run-all: PEER_BENCH does not name a peer-bench directory: the peer yardstick was NOT run" >&2
fi
