#!/usr/bin/env bash
# The scaling benchmark's one command: builds lifeguard (release) and the benchmark's
# virtualenv if needed, then runs bench/scaling/run.py with the arguments given.
#   sudo bench/scaling/run.sh            # the full run, both scenarios, ~17 minutes, into bench/scaling/results/
#   sudo bench/scaling/run.sh --smoke    # the scaled-down CI version, both scenarios, ~6 minutes
#   --scenario cpu|worker|both  the CPU-bound app, the worker-bound one, or both (the default)
#   --scenario scalein  the scale-in benchmark instead (scalein.py: N -> N/2 tasks with long
#                       jobs, without and with --scale-in-protection, ~15 minutes, into
#                       bench/scaling/results/scalein/; with --smoke, ~8 minutes)
#   --lifeguard PATH  run that binary instead of building target/release/lifeguard
#   --out DIR         write there
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" != 0 ]; then
  echo "bench/scaling/run.sh: needs root (PID namespaces, cgroups); run it with sudo" >&2
  exit 2
fi

# Python packages in the benchmark's own virtualenv (pinned; the emulator's are the
# tests' pins). pip is quick when everything is already there.
# Under a lock: two runs side by side (the smoke tests, a scenario each) would make the
# virtualenv at once, and one would find its python3 before its pip.
venv="${CARGO_TARGET_DIR:-target}/scaling-venv"
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -x "$venv/bin/python3" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python3" -m pip install --quiet --disable-pip-version-check -r bench/scaling/requirements.txt
flock -u 9
exec 9>&-

# lifeguard itself, unless a binary is given.
given=""
for arg in "$@"; do
  if [ "$given" = next ]; then given="$arg"; fi
  case "$arg" in
    --lifeguard) given=next ;;
    --lifeguard=*) given="${arg#--lifeguard=}" ;;
  esac
done
if [ -z "$given" ]; then
  cargo build --release --locked --bin lifeguard
  set -- --lifeguard "${CARGO_TARGET_DIR:-target}/release/lifeguard" "$@"
fi

# The scale-in benchmark is a program of its own (scalein.py); its other arguments are
# the same (--smoke, --lifeguard, --out).
script=bench/scaling/run.py
args=()
scalein=""
for arg in "$@"; do
  if [ "$scalein" = next ]; then
    scalein=""
    if [ "$arg" = scalein ]; then script=bench/scaling/scalein.py; continue; fi
    args+=(--scenario "$arg")
    continue
  fi
  case "$arg" in
    --scenario) scalein=next ;;
    --scenario=scalein) script=bench/scaling/scalein.py ;;
    *) args+=("$arg") ;;
  esac
done
exec "$venv/bin/python3" "$script" "${args[@]}"
