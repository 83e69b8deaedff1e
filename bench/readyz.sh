#!/usr/bin/env bash
# /readyz throughput and latency under wrk while the app itself burns a full core: the
# number the readiness endpoint must hold up under. Root not needed; wrk is
# installed from Debian's packages if missing. Prints wrk's summary for each run and the
# median requests/s and p99 of all runs.
set -euo pipefail
cd "$(dirname "$0")/.."
lifeguard=${LIFEGUARD:-/tmp/bench-target/x86_64-unknown-linux-musl/release/lifeguard}
runs=${RUNS:-3}
port=${PORT:-19595}
if [ ! -x "$lifeguard" ]; then
  CARGO_TARGET_DIR=/tmp/bench-target cargo build --release --target x86_64-unknown-linux-musl --bin lifeguard
fi
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }

"$lifeguard" -q --drain-delay 0 --listen "127.0.0.1:$port" -- sh -c 'while :; do :; done' &
guard=$!
trap 'kill -TERM $guard 2>/dev/null; wait $guard 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  "$lifeguard" --probe "http://127.0.0.1:$port/readyz" && break
  sleep 0.05
done

rates=(); p99s=()
for i in $(seq 1 "$runs"); do
  out=$(wrk -t1 -c10 -d5s --latency "http://127.0.0.1:$port/readyz")
  echo "--- run $i"; echo "$out" | grep -E "Requests/sec|99%|Non-2xx|errors" || true
  rates+=("$(echo "$out" | awk '/Requests\/sec/ {print $2}')")
  # wrk prints 204.00us, 1.02ms or 1.10s: in microseconds.
  p99s+=("$(echo "$out" | awk '$1 == "99%" {v = $2 + 0; if ($2 ~ /ms$/) v *= 1000; else if ($2 ~ /[0-9]s$/) v *= 1000000; print v}')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "median of $runs runs: $(median "${rates[@]}") requests/s, p99 $(median "${p99s[@]}") µs"
