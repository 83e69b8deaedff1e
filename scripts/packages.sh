#!/usr/bin/env bash
# Installs the Debian packages of the named groups of scripts/packages.list that are not
# installed yet, checking each by package name (dpkg-query), so a machine that happens
# to have one command of a package is not taken for one that has the package.
#
#   scripts/packages.sh GROUP...          install what is missing (as root)
#   scripts/packages.sh --list GROUP...   print the groups' package names
#   scripts/packages.sh --missing GROUP...  print those not installed; exit 1 if any
#
# Not root, or no apt-get: says which packages are missing and how to install them.
set -euo pipefail
list="$(dirname "$0")/packages.list"

mode=install
case "${1:-}" in
  --list) mode=list; shift ;;
  --missing) mode=missing; shift ;;
esac
if [ $# -eq 0 ]; then
  echo "usage: scripts/packages.sh [--list|--missing] GROUP..." >&2
  echo "groups: $(awk '!/^#/ && NF {print $1}' "$list" | sort -u | tr '\n' ' ')" >&2
  exit 2
fi

packages=()
for group in "$@"; do
  found=$(awk -v g="$group" '!/^#/ && $1 == g {print $2}' "$list")
  if [ -z "$found" ]; then
    echo "scripts/packages.sh: no group '$group' in scripts/packages.list" >&2
    exit 2
  fi
  for p in $found; do
    [[ " ${packages[*]-} " == *" $p "* ]] || packages+=("$p")
  done
done

if [ "$mode" = list ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if [ "$mode" = missing ]; then
  [ ${#missing[@]} -eq 0 ] && exit 0
  printf '%s\n' "${missing[@]}"
  exit 1
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "scripts/packages.sh: missing Debian packages: ${missing[*]}" >&2
  echo "  install them with: sudo apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "scripts/packages.sh: installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Checked again by package: an install that "succeeded" without them is still a failure.
still=()
for p in "${missing[@]}"; do
  installed "$p" || still+=("$p")
done
if [ ${#still[@]} -gt 0 ]; then
  echo "scripts/packages.sh: still not installed after apt-get: ${still[*]}" >&2
  exit 1
fi
# Debian's packages start their services where an init system runs; the tests start
# their own, on ports of their own.
for service in prometheus haproxy; do
  if [[ " ${missing[*]} " == *" $service "* ]] && command -v service >/dev/null 2>&1; then
    service "$service" stop >/dev/null 2>&1 || true
  fi
done
