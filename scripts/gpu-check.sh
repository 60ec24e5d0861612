#!/usr/bin/env bash
# GPU check: one call, under 8 minutes, on a machine with a CUDA GPU, torch 2.11 for python3 and no
# network. Builds cpbench against that torch, runs the `gpu` tests, then the GPU scenarios; every step
# runs under `timeout` with its own budget, and the script exits non-zero if any step fails.
#
#   scripts/gpu-check.sh [--dry-run] [OUTDIR]      (OUTDIR defaults to $OUT, then ./gpu-check-out)
#
# Steps (budget in seconds):
#   build        configure + build cpbench, the gpu tests and the benchmarks against python3's torch
#   gpu-tests    cpbench_gpu_tests (fused routes vs tiled on CUDA, no host sync in a step, NCCL world
#                of one, the runner on CUDA), JUnit XML
#   w1-nccl      every sharder x both transports at W = 1 over NCCL, bfloat16 and float32, against the
#                float64 reference (scenarios/gpu_correctness.yaml)
#   w2-shared    W = 2 sharing the GPU over Gloo (scenarios/gpu_shared.yaml, share_gpu: true)
#   wN-nccl      W = the visible GPU count over NCCL, when more than one GPU is visible
#   throughput   BM_AttentionW1 with the Llama-3-8B attention dims (32 query / 8 kv heads of 128) in
#                bfloat16 at 4K, 16K, 32K and 128K tokens: x_sdpa = transport / at::scaled_dot_product_attention
#   nsys         if nsys is on the PATH: one profiled case, its cp: NVTX ranges checked present
# Writes OUTDIR/summary.md, OUTDIR/logs/<step>.log, the reports (OUTDIR/<step>/report.*) and the test
# XML (OUTDIR/gpu-tests.xml). Debian packages the build needs travel as .deb files in .debs/ (fetched
# on a networked machine by scripts/fetch-gpu-debs.sh) and are unpacked under .debs/root, never into /.
set -uo pipefail

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="${1:-${OUT:-$ROOT/gpu-check-out}}"
BUILD="${CPBENCH_GPU_BUILD:-$ROOT/build-gpu}"
TOTAL_BUDGET=470  # seconds: the whole check stays under 8 minutes
START=$(date +%s)
FAILED=0
SUMMARY=()

if [ $DRY -eq 0 ]; then
  mkdir -p "$OUTDIR/logs"
  exec > >(tee "$OUTDIR/gpu-check.log") 2>&1
fi

# step NAME BUDGET_S COMMAND: runs COMMAND under `timeout BUDGET_S` (never past the total budget),
# logs to logs/NAME.log, records the outcome. A step that cannot start in time fails.
step() {
  local name="$1" budget="$2" cmd="$3"
  if [ $DRY -eq 1 ]; then
    printf '%-11s %4d s  %s\n' "$name" "$budget" "$cmd"
    return 0
  fi
  local left=$((TOTAL_BUDGET - ($(date +%s) - START)))
  if [ "$left" -lt 10 ]; then
    SUMMARY+=("| $name | FAILED | 0 | no time left in the ${TOTAL_BUDGET} s budget |")
    FAILED=1
    return 1
  fi
  [ "$budget" -gt "$left" ] && budget=$left
  echo "== $name (budget ${budget} s): $cmd"
  local t0=$(date +%s) rc
  timeout --kill-after=10 "$budget" bash -c "$cmd" >"$OUTDIR/logs/$name.log" 2>&1
  rc=$?
  local dt=$(($(date +%s) - t0)) what="ok"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    what="TIMEOUT after ${budget} s"
  elif [ $rc -ne 0 ]; then
    what="FAILED (exit $rc)"
  fi
  if [ "$what" != "ok" ]; then
    FAILED=1
    echo "!! $name: $what; last lines of logs/$name.log:"
    tail -25 "$OUTDIR/logs/$name.log"
  fi
  SUMMARY+=("| $name | $what | $dt | logs/$name.log |")
  [ "$what" = "ok" ]
}

skip() {
  if [ $DRY -eq 1 ]; then printf '%-11s %4s    skipped: %s\n' "$1" "-" "$2"; return 0; fi
  echo "== $1: skipped ($2)"
  SUMMARY+=("| $1 | skipped | 0 | $2 |")
}

# The GPU machine keeps torch in /opt/torch/.venv (docs/gpu.md); CPBENCH_PYTHON wins.
if [ -z "${CPBENCH_PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3; else PY="${CPBENCH_PYTHON:-python3}"; fi
if [ $DRY -eq 1 ]; then
  echo "gpu-check dry run: ROOT=$ROOT OUTDIR=$OUTDIR BUILD=$BUILD total budget ${TOTAL_BUDGET} s"
  GPUS=1
  HAVE_NSYS=$(command -v nsys >/dev/null && echo 1 || echo 0)
else
  echo "== gpu-check $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  HAVE_NSYS=$(command -v nsys >/dev/null && echo 1 || echo 0)
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' ||
    echo "!! $PY cannot import torch: set CPBENCH_PYTHON to the python whose torch the build should use (the build step will fail)"
fi

# Debian packages carried as .deb files: unpacked under .debs/root, found through the prefix path.
DEBS_ROOT="$ROOT/.debs/root"
PREP="set -e; if ls '$ROOT'/.debs/*.deb >/dev/null 2>&1; then for f in '$ROOT'/.debs/*.deb; do dpkg -x \"\$f\" '$DEBS_ROOT'; done; fi"
TORCH_PREFIX="\$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')"
NCCL_INC="\$($PY -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], \"include\"))' 2>/dev/null || echo /usr/local/cuda/include)"
TORCH_DIR="\$(dirname \$(dirname \$(dirname \$(dirname $TORCH_PREFIX))))"
CONFIGURE="cmake -S '$ROOT' -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCPBENCH_TORCH_DIR=$TORCH_DIR \
-DCMAKE_PREFIX_PATH=\"$TORCH_PREFIX;$DEBS_ROOT/usr\" -DNCCL_INCLUDE_DIR=$NCCL_INC -DTORCH_CUDA_ARCH_LIST=9.0"
BUILD_CMD="$PREP; $CONFIGURE && cmake --build '$BUILD' -j \$(nproc) --target cpbench cpbench_gpu_tests cpbench_bench"
export LD_LIBRARY_PATH="$DEBS_ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
CP="'$BUILD/cpbench'"

if step build 200 "$BUILD_CMD"; then
  step gpu-tests 60 "'$BUILD/tests/cpbench_gpu_tests' --gtest_output=xml:'$OUTDIR/gpu-tests.xml'"
  step w1-nccl 90 "$CP run '$ROOT/scenarios/gpu_correctness.yaml' --out '$OUTDIR/w1-nccl' \
&& grep -Eq 'backend.{0,4}nccl' '$OUTDIR/w1-nccl/report.json'"
  step w2-shared 40 "$CP run '$ROOT/scenarios/gpu_shared.yaml' --out '$OUTDIR/w2-shared'"
  if [ "$GPUS" -gt 1 ]; then
    step wN-nccl 40 "$CP run '$ROOT/scenarios/gpu_correctness.yaml' -a cp=[$GPUS] -a dtype=[bfloat16] --out '$OUTDIR/wN-nccl'"
  else
    skip wN-nccl "one GPU visible"
  fi
  step throughput 75 "'$BUILD/tests/cpbench_bench' --benchmark_filter=BM_AttentionW1 \
--benchmark_out='$OUTDIR/throughput.json' --benchmark_out_format=json | tee '$OUTDIR/throughput.txt' \
&& grep -q x_sdpa '$OUTDIR/throughput.txt'"
  if [ "$HAVE_NSYS" = 1 ]; then
    step nsys 30 "nsys profile -t cuda,nvtx -o '$OUTDIR/nsys/case' $CP run '$ROOT/scenarios/gpu_shared.yaml' \
--filter 'load_balanced.*ring' -a cp=[1] --out '$OUTDIR/nsys/out' && nsys stats -r nvtx_sum '$OUTDIR/nsys/case.nsys-rep' \
| tee '$OUTDIR/nsys/nvtx.txt' && grep -q 'cp:load_balanced:forward' '$OUTDIR/nsys/nvtx.txt' \
&& grep -q 'cp:load_balanced:attn_compute' '$OUTDIR/nsys/nvtx.txt'"
  else
    skip nsys "nsys is not on the PATH"
  fi
else
  for s in gpu-tests w1-nccl w2-shared wN-nccl throughput nsys; do skip "$s" "the build failed"; done
  FAILED=1
fi

[ $DRY -eq 1 ] && { echo "dry run: nothing was run"; exit 0; }
{
  echo "# gpu-check $(date -u +%FT%TZ)"
  echo
  echo "- host $(hostname), GPUs $GPUS, total $(($(date +%s) - START)) s of ${TOTAL_BUDGET} s"
  echo "- result: $([ $FAILED -eq 0 ] && echo PASS || echo FAIL)"
  echo
  echo "| step | outcome | seconds | detail |"
  echo "|---|---|---:|---|"
  printf '%s\n' "${SUMMARY[@]}"
  if [ -f "$OUTDIR/throughput.txt" ]; then
    echo
    echo '## x_sdpa (transport / at::scaled_dot_product_attention, W = 1, fwd + bwd, causal, bf16)'
    echo
    echo '```'
    grep BM_AttentionW1 "$OUTDIR/throughput.txt"
    echo '```'
  fi
} >"$OUTDIR/summary.md"
cat "$OUTDIR/summary.md"
exit $FAILED
