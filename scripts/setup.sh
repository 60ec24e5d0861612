#!/usr/bin/env bash
# Installs what cpbench needs and builds it. Idempotent: silent when everything is already there.
#   - Debian packages (yaml-cpp, gloo headers, nlohmann-json, CLI11, ccache, ninja, GoogleTest, Google Benchmark,
#     SQLite and SQLiteCpp for the run history)
#   - LibTorch from the PyPI wheel torch==${CPBENCH_TORCH_VERSION}, once, into ${CPBENCH_CACHE}
#     (default ~/.cache/cpbench), reused by every clone on this machine
#   - a CMake build in ${CPBENCH_BUILD_DIR} (default <repo>/build) of the targets in
#     ${CPBENCH_BUILD_TARGETS} (default: all; scripts/cpbench asks for `cpbench` only)
# Sourced by scripts/cpbench and scripts/test; run directly to only install and build everything.
set -euo pipefail

CPBENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CPBENCH_TORCH_VERSION="${CPBENCH_TORCH_VERSION:-2.11.0}"
CPBENCH_CACHE="${CPBENCH_CACHE:-$HOME/.cache/cpbench}"
CPBENCH_BUILD_DIR="${CPBENCH_BUILD_DIR:-$CPBENCH_ROOT/build}"
CPBENCH_TORCH_DIR="$CPBENCH_CACHE/torch-$CPBENCH_TORCH_VERSION"
export CCACHE_DIR="${CCACHE_DIR:-$CPBENCH_CACHE/ccache}"
# One cache for every clone on this machine. The settings its hits depend on (relative paths, the
# precompiled header's sloppiness and checksum) are the build's own: CMakeLists.txt's compiler launcher.
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"

say() { echo "cpbench setup: $*" >&2; }

install_debian_packages() {
  local pkgs=(cmake ninja-build g++ libyaml-cpp-dev libgloo-dev nlohmann-json3-dev libcli11-dev ccache
              libgtest-dev libbenchmark-dev python3-pip libsqlite3-dev libsqlitecpp-dev)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

install_torch() {
  [ -f "$CPBENCH_TORCH_DIR/.complete" ] && return 0
  say "installing LibTorch from PyPI torch==$CPBENCH_TORCH_VERSION into $CPBENCH_TORCH_DIR (one time, ~5 GB)"
  mkdir -p "$CPBENCH_CACHE"
  local tmp="$CPBENCH_TORCH_DIR.partial"
  rm -rf "$tmp"
  python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$tmp" "torch==$CPBENCH_TORCH_VERSION"
  rm -rf "$CPBENCH_TORCH_DIR"
  mv "$tmp" "$CPBENCH_TORCH_DIR"
  touch "$CPBENCH_TORCH_DIR/.complete"
}

build_cpbench() {
  local log="$CPBENCH_BUILD_DIR/build.log"
  mkdir -p "$CPBENCH_BUILD_DIR"
  if [ ! -f "$CPBENCH_BUILD_DIR/build.ninja" ]; then
    say "configuring build in $CPBENCH_BUILD_DIR"
    if ! cmake -S "$CPBENCH_ROOT" -B "$CPBENCH_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DCPBENCH_TORCH_DIR="$CPBENCH_TORCH_DIR" >"$log" 2>&1; then
      cat "$log" >&2; say "configure failed (log: $log)"; return 1
    fi
  fi
  # Only talk when there is something to build. (`ninja -n` cannot tell: CMake's glob check always
  # looks dirty to a dry run.) A first build announces itself; an incremental one reports afterwards.
  local first=0
  if [ ! -f "$CPBENCH_BUILD_DIR/cpbench" ]; then
    first=1
    say "building; the first build takes several minutes on 2 cores (log: $log)"
  elif [ -z "${CPBENCH_BUILD_TARGETS:-}" ] && [ ! -f "$CPBENCH_BUILD_DIR/tests/cpbench_unit_tests" ]; then
    first=1
    say "building the tests and benchmarks for the first time, a few minutes on 2 cores (log: $log)"
  fi
  local before
  before=0
  [ -f "$log" ] && before=$(wc -l < "$log")
  local targets=()
  for t in ${CPBENCH_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
  if ! cmake --build "$CPBENCH_BUILD_DIR" -j "${CPBENCH_JOBS:-$(nproc)}" "${targets[@]}" >>"$log" 2>&1; then
    grep -E "error|Error|FAILED" -A5 "$log" | head -60 >&2; say "build failed (log: $log)"; return 1
  fi
  if [ $first -eq 0 ] && tail -n +"$((before + 1))" "$log" | grep -qE "Building CXX|Linking CXX"; then
    say "rebuilt what changed (log: $log)"
  fi
}

install_debian_packages
install_torch
build_cpbench
