#!/usr/bin/env bash
# Companion of scripts/gpu-check.sh, for a networked machine: downloads (never installs) the Debian
# packages the build needs (scripts/gpu-debs.list) into .debs/ (git-ignored), so they travel with the
# tree to the GPU machine, which has no network; gpu-check.sh unpacks them under .debs/root with
# `dpkg -x` (its build fallback; the carried binaries of scripts/gpu-bundle.sh need none of it).
#   scripts/fetch-gpu-debs.sh          (amd64 packages, whatever this machine's architecture)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mapfile -t PKGS < <(grep -v '^#' "$ROOT/scripts/gpu-debs.list" | grep -v '^machine:' | cut -d: -f2 | tr ' ' '\n' | sed '/^$/d')
mkdir -p "$ROOT/.debs" /tmp/cpbench-apt-amd64/partial
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/cpbench-apt-amd64)
apt-get "${o[@]}" update -qq
(cd "$ROOT/.debs" && apt-get "${o[@]}" download "${PKGS[@]}")
ls -la "$ROOT/.debs"
echo "carry .debs with the tree (the device tool: carry: [\".debs\"]); gpu-check.sh unpacks them"
