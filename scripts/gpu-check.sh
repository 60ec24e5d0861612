#!/usr/bin/env bash
# GPU check, unattended from a clean checkout on a machine with a CUDA GPU and torch 2.11 installed
# for python3 (no internet needed): builds cpbench against that torch, runs the GPU-labelled tests
# and a throughput scenario with device: cuda (W = 1 over NCCL; W > 1 over Gloo with ranks sharing
# the GPU; the report's backend axis says which), and writes everything under OUTDIR.
#   scripts/gpu-check.sh OUTDIR            (about 5-8 minutes on one H100/H200)
set -uo pipefail
OUT="${1:?usage: scripts/gpu-check.sh OUTDIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
echo "== gpu-check $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

TORCH_PREFIX="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" || { echo "no torch for python3"; exit 1; }
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
BUILD="$ROOT/build-gpu"
# Debian packages may be missing there; the .deb files can travel in .debs/ (see docs/gpu.md).
if [ -d "$ROOT/.debs" ]; then for f in "$ROOT"/.debs/*.deb; do dpkg -x "$f" "$ROOT/.debs/root"; done; fi
EXTRA_PREFIX=""
[ -d "$ROOT/.debs/root/usr" ] && EXTRA_PREFIX=";$ROOT/.debs/root/usr"
TORCH_DIR="$(dirname "$(dirname "$(dirname "$(dirname "$TORCH_PREFIX")")")")"

start=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" \
  -DCMAKE_BUILD_TYPE=Release -DCPBENCH_TORCH_DIR="$TORCH_DIR" -DCMAKE_PREFIX_PATH="$TORCH_PREFIX$EXTRA_PREFIX" \
  -DTORCH_CUDA_ARCH_LIST=9.0 > "$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
cmake --build "$BUILD" -j "$(nproc)" > "$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -60; exit 1; }
echo "== built in $(( $(date +%s) - start )) s"

"$BUILD/cpbench" --version | tee "$OUT/version.txt"
(cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 300) 2>&1 | tee "$OUT/ctest-gpu.log"
"$BUILD/cpbench" run "$ROOT/scenarios/gpu_throughput.yaml" --out "$OUT/throughput"
rc=$?
ls -la "$OUT" "$OUT/throughput"
echo "== done in $(( $(date +%s) - start )) s, run exit status $rc"
exit $rc
