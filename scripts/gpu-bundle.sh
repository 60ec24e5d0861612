#!/usr/bin/env bash
# Builds the binaries the GPU check runs (cpbench, cpbench_gpu_tests, cpbench_bench; Release, against
# the cached LibTorch: the torch 2.11.0 cu130 wheel the GPU machine's venv has too) and puts them into
# .debs/prebuilt/, beside the .deb files: the one folder that travels with the GPU command (the device
# tool's carry: [".debs"], 64 MiB at most). gpu-check.sh's first step starts them there with
# LD_LIBRARY_PATH on .debs/prebuilt/lib and the venv's torch/lib, and builds nothing when they start.
#   scripts/gpu-bundle.sh              (after scripts/setup.sh; builds in CPBENCH_BUILD_DIR, default build/)
# Layout: .debs/prebuilt/cpbench, .debs/prebuilt/tests/{cpbench_gpu_tests,cpbench_bench} (the tests
# find cpbench at ../cpbench, as in a build folder), .debs/prebuilt/lib/: every shared library the three
# load that is neither torch's (the venv has those) nor the C library's own.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${CPBENCH_BUILD_DIR:-$ROOT/build}"
OUTB="$ROOT/.debs/prebuilt"
LIMIT_MIB=64
[ -f "$BUILD/build.ninja" ] || { echo "gpu-bundle: no build in $BUILD (run scripts/setup.sh first)" >&2; exit 1; }
grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$BUILD/CMakeCache.txt" || {
  echo "gpu-bundle: $BUILD is not a Release build" >&2; exit 1; }
cmake --build "$BUILD" -j "${CPBENCH_JOBS:-$(nproc)}" --target cpbench cpbench_gpu_tests cpbench_bench
rm -rf "$OUTB"
mkdir -p "$OUTB/tests" "$OUTB/lib"
cp "$BUILD/cpbench" "$OUTB/"
cp "$BUILD/tests/cpbench_gpu_tests" "$BUILD/tests/cpbench_bench" "$OUTB/tests/"
strip --strip-unneeded "$OUTB/cpbench" "$OUTB/tests/cpbench_gpu_tests" "$OUTB/tests/cpbench_bench"
TORCH_LIB="$(grep '^CPBENCH_TORCH_DIR:PATH=' "$BUILD/CMakeCache.txt" | cut -d= -f2-)/torch/lib"
# What ldd resolves outside torch's folder and the CUDA wheels (the venv brings both), and not the C
# library itself (libc, libm, the loader: the machine's own).
for b in "$OUTB/cpbench" "$OUTB/tests/cpbench_gpu_tests" "$OUTB/tests/cpbench_bench"; do
  LD_LIBRARY_PATH="$TORCH_LIB" ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$lib" in
    "$TORCH_LIB"/*|*/nvidia/*|*/cuda*/*) continue ;;
    */libc.so.*|*/libm.so.*|*/libdl.so.*|*/librt.so.*|*/libpthread.so.*|*/libutil.so.*|*/libresolv.so.*|*/ld-linux*) continue ;;
  esac
  cp -L "$lib" "$OUTB/lib/"
done
git -C "$ROOT" rev-parse HEAD >"$OUTB/COMMIT"
size_kib=$(du -sk "$ROOT/.debs" | cut -f1)
echo "gpu-bundle: $OUTB: $(ls "$OUTB/lib" | wc -l) libraries; .debs is $((size_kib / 1024)) MiB ($size_kib KiB) of ${LIMIT_MIB} MiB"
ls -la "$OUTB" "$OUTB/tests" "$OUTB/lib"
[ "$size_kib" -le $((LIMIT_MIB * 1024)) ] || { echo "gpu-bundle: .debs is over ${LIMIT_MIB} MiB" >&2; exit 1; }
