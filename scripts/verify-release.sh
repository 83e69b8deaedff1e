#!/usr/bin/env bash
# Rebuilds a recorded release and compares it with its record (RELEASES.md): the commit
# it names, built with that commit's own scripts/release.sh, must give the recorded
# SHA256SUMS. With artifact names, only those are rebuilt (each with the cargo
# arguments release.sh uses for it), which takes a minute rather than several.
#
#   scripts/verify-release.sh VERSION [ARTIFACT...]
#   scripts/verify-release.sh 0.2.0
#   scripts/verify-release.sh 0.2.0 lifeguard-0.2.0-slim-x86_64-linux-musl
#
# The build is reproducible for one toolchain: the record names the rustc it was built
# with, and another rustc makes other bytes. Works in a clone of the repository (the
# commit is checked out in a worktree of its own in a temporary directory, outside the
# clone, removed afterwards; the build goes to target/verify-VERSION/).
#
# VERIFY_RELEASE_CACHE=DIR (scripts/test.sh sets it): a rebuild that matched is noted in
# DIR, keyed by everything that decides its bytes (the version, the recorded commit,
# the recorded rustc and the artifacts asked for); the same verification on the same
# machine then says when it matched instead of building again. None of those inputs can
# change (a commit names its tree, Cargo.lock pins every crate, crates.io never changes
# a published crate), so the earlier match still holds; a new machine has no note and
# rebuilds. Unset, every run rebuilds.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${1:?usage: scripts/verify-release.sh VERSION [ARTIFACT...]}"
shift
record="$(awk -v v="$version" '
  /^## / { on = ($2 == v) ; next }
  on { print }' RELEASES.md)"
commit="$(printf '%s\n' "$record" | sed -n 's/^- commit: `\([0-9a-f]\{40\}\)`.*/\1/p')"
if [ -z "$commit" ]; then
  echo "scripts/verify-release.sh: RELEASES.md has no release $version with a commit" >&2
  exit 2
fi
sums="$(printf '%s\n' "$record" | sed -n '/^```sha256sums$/,/^```$/p' | sed '1d;$d')"
if [ -z "$sums" ]; then
  echo "scripts/verify-release.sh: RELEASES.md has no SHA256SUMS for $version" >&2
  exit 2
fi
# Another rustc makes other bytes, so the recorded one builds: rustup's toolchain of
# that version where it has one (scripts/test.sh installs it), else a clear refusal
# rather than a checksum mismatch minutes later.
rustc_said="$(rustc -V)"
recorded_rustc="$(printf '%s\n' "$record" | sed -n 's/^- toolchain: `\(.*\)`.*/\1/p')"
recorded_version="$(printf '%s\n' "$recorded_rustc" | awk '{print $2}')"
if [ "$rustc_said" != "$recorded_rustc" ]; then
  if command -v rustup >/dev/null 2>&1 \
    && rustup toolchain list 2>/dev/null | grep -q "^$recorded_version-" \
    && [ "$(RUSTUP_TOOLCHAIN="$recorded_version" rustc -V 2>/dev/null)" = "$recorded_rustc" ]; then
    export RUSTUP_TOOLCHAIN="$recorded_version"
    echo "scripts/verify-release.sh: building with the recorded toolchain, $recorded_rustc (this directory's rustc is '$rustc_said')"
  else
    echo "scripts/verify-release.sh: $version was built with '$recorded_rustc' and this rustc is '$rustc_said', which makes other bytes: install the recorded one (rustup toolchain install $recorded_version --profile minimal --target x86_64-unknown-linux-musl) and run this again" >&2
    exit 3
  fi
fi

# The note of an earlier match, when asked to keep them.
note=""
if [ -n "${VERIFY_RELEASE_CACHE:-}" ]; then
  key="$(printf '%s\n' "$version" "$commit" "$recorded_rustc" "$sums" "$@" | sha256sum | cut -c1-32)"
  note="$VERIFY_RELEASE_CACHE/$version-$key"
  if [ -s "$note" ]; then
    cat "$note"
    echo "scripts/verify-release.sh: $version rebuilt from $commit matched RELEASES.md on this machine before ($(date -u -r "$note" +%Y-%m-%dT%H:%MZ), $recorded_rustc); not rebuilt (remove $note to rebuild)"
    exit 0
  fi
fi

root="$(realpath "${CARGO_TARGET_DIR:-target}")"
work="$root/verify-$version"
rm -rf "$work"
mkdir -p "$work"
# The commit's tree goes outside this checkout: cargo reads every .cargo/config.toml
# from the build's directory up to /, so a tree inside it would build with this
# checkout's settings (its linker and flags) on top of the commit's own, and other bytes.
tree="$(mktemp -d "${TMPDIR:-/tmp}/lifeguard-verify-$version.XXXXXX")"
git worktree prune
git worktree add --detach "$tree" "$commit" >/dev/null
trap 'git worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
printf '%s\n' "$sums" > "$work/SHA256SUMS"

if [ "$#" -eq 0 ]; then
  # The whole release, with the commit's own script.
  (cd "$tree" && CARGO_TARGET_DIR="$work/build" scripts/release.sh)
  cp "$work/build/release-artifacts/"* "$work/"
  (cd "$work" && sha256sum -c SHA256SUMS) | tee "$work/.matched"
else
  for name in "$@"; do
    case "$name" in
      lifeguard-"$version"-slim-*-linux-musl)
        arch="${name#lifeguard-$version-slim-}"; arch="${arch%-linux-musl}"
        args=(--profile slim --no-default-features); profile=slim ;;
      lifeguard-"$version"-*-linux-musl)
        arch="${name#lifeguard-$version-}"; arch="${arch%-linux-musl}"
        args=(--release); profile=release ;;
      *) echo "scripts/verify-release.sh: $name is not a binary of $version" >&2; exit 2 ;;
    esac
    triple="$arch-unknown-linux-musl"
    scripts/packages.sh build "static-$arch"
    # As release.sh builds ring's C for aarch64: Debian's cross compiler.
    export CC_aarch64_unknown_linux_musl="${CC_aarch64_unknown_linux_musl:-aarch64-linux-gnu-gcc}"
    export AR_aarch64_unknown_linux_musl="${AR_aarch64_unknown_linux_musl:-aarch64-linux-gnu-ar}"
    if ! rustup target list --installed 2>/dev/null | grep -qx "$triple"; then
      rustup target add "$triple"
    fi
    (cd "$tree" && CARGO_TARGET_DIR="$work/build" cargo build --locked --target "$triple" --bin lifeguard "${args[@]}")
    cp "$work/build/$triple/$profile/lifeguard" "$work/$name"
  done
  (cd "$work" && sha256sum -c --ignore-missing SHA256SUMS) | tee "$work/.matched"
fi
if [ -n "$note" ]; then
  mkdir -p "$VERIFY_RELEASE_CACHE"
  cp "$work/.matched" "$note"
fi
echo "scripts/verify-release.sh: $version rebuilt from $commit matches RELEASES.md"
