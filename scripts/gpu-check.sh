#!/usr/bin/env bash
# GPU check: one call of at most 9 minutes on a machine with a CUDA GPU, torch 2.11 for python3 and no
# network (the exact device call a session makes: docs/gpu.md, "The first GPU session"). First a
# preflight (tools and versions, the carried files; the first miss is one line of summary.json), then
# the binaries scripts/gpu-bundle.sh carried in .debs/prebuilt are started; only when they do not
# start is anything built (the fallback, with its own budget). Every step runs under `timeout` with
# its own budget; on either path the budgets add up to at most what the check allows (the dry run
# prints both paths and exits non-zero otherwise; tests/unit/gpu_check_test.cpp holds each budget's
# basis against the scenarios' case counts and the GPU tests). Steps are independent: a failed step is
# recorded and the next one runs (without binaries the later steps are skipped with that reason).
# docs/gpu.md says what each step proves and what it cannot.
#
#   scripts/gpu-check.sh [--dry-run] [OUTDIR]      (OUTDIR defaults to $OUT, then ./gpu-check-out)
#
# Writes OUTDIR/summary.json (every step: status, seconds, budget, log path, numbers; the overall
# result; the preflight's first miss; the NCCL-at-W>1 status), OUTDIR/summary.md, OUTDIR/logs/<step>.log,
# the reports (OUTDIR/<step>/report.*) and the test XML (OUTDIR/gpu-tests.xml). Debian packages the
# fallback build needs travel as .deb files in .debs/ (scripts/fetch-gpu-debs.sh, scripts/gpu-debs.list)
# and are unpacked under .debs/root, never into /. CPBENCH_GPU_NSYS=1 adds an nsys-profiled case (25 s,
# taken from the shared step's budget).
set -uo pipefail

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="${1:-${OUT:-$ROOT/gpu-check-out}}"
BUILD="${CPBENCH_GPU_BUILD:-$ROOT/build-gpu}"
TOTAL_BUDGET=540    # seconds: the whole check, either path (the device call's timeout_s is 600)
MAX_STEPS_SUM=420   # the prebuilt path's budgets add up to at most this
MAX_FALLBACK_SUM=520 # the build-fallback path's: 20 s of the total for what no step counts
NSYS="${CPBENCH_GPU_NSYS:-0}"
# CPBENCH_GPU_SKIP="throughput shared-hybrid": steps not to run (and, for throughput, the benchmark
# not to build); the default runs every step.
SKIP=" ${CPBENCH_GPU_SKIP:-} "
skipped() { [[ "$SKIP" == *" $1 "* ]]; }

# Budgets (seconds), in the order the steps run; the dry run prints each with its basis and sums them.
# A basis starts with its counts as key=value (cases: the scenario's cases, tests: the GPU tests,
# launches: rank launches, start_s: one launch's start with CUDA, per_case_s / per_test_s: one case's or
# test's time; points, runs, iters, per_run_s for the benchmark), then says where they come from.
# tests/unit/gpu_check_test.cpp reads them: the counts must be the scenarios' and tests' real ones and
# each budget must cover start_s x launches + cases x per_case_s (or its own product).
# The build's: docs/gpu.md, "What the check costs" (the CI machine's build log, 2026-12-02).
B_PREFLIGHT=15;    W_PREFLIGHT="tools=12: --version of cmake, ninja, c++, nvcc; nvidia-smi; python's torch found without importing it; ls of the carried files; < 1 s each"
B_PREBUILT=15;     W_PREBUILT="binaries=3 per_binary_s=4: each carried binary started once (--version, --gtest_list_tests, --benchmark_list_tests): LibTorch and the CUDA libraries loaded, ~2-4 s each"
B_BUILD=190;       W_BUILD="fallback only: configure ~20 s (torch's CMake config, the CUDA toolkit probe) + the precompiled header 53.5 s and harness/pch.cpp.o 7.6 s, serial + the longest TU after it (harness/cli/main.cpp ~51 s) + cpbench's link, then the GPU tests' and the benchmark's (~15 s); the other ~35 TUs (~600 CPU-s) beside them on 16 compilers, each slower for the others: 140-175 s measured-based, no ccache there"
B_GPU_TESTS=55;    W_GPU_TESTS="tests=8 per_test_s=2 launches=2 start_s=10 cases=16 per_case_s=1: LibTorch + CUDA start, 7 tests of a few kernels each; Gpu.RunnerPassesTheGradientCheckOnCuda runs its 16 cases (gpu_cases.cpp runner_scenario_yaml: one timed step, no collectives) in 2 rank launches plus cpbench's _device_memory child"
B_W1=35;           W_W1="cases=8 launches=1 start_s=15 per_case_s=2: W = 1 over NCCL (scenarios/gpu_routes.yaml): one rank start with CUDA and the _device_memory child, a float64 reference and one timed step each, the references reused per mask and dtype"
B_SHARED=$([ "$NSYS" = 1 ] && echo 55 || echo 80)
W_SHARED="cases=58 launches=2 start_s=10 per_case_s=1: W = 2 and 4 sharing the GPU (scenarios/gpu_shared.yaml): 2 rank launches, ~1 s per case (one reference per mask and dtype per launch on 512 tokens, one timed step, collectives off)"
B_HYBRID=45;       W_HYBRID="cases=17 launches=2 start_s=10 per_case_s=1: the tiny hybrid at W = 2, 4 (scenarios/gpu_shared_hybrid.yaml): 2 rank launches, ~1 s per case, collectives off"
B_THROUGHPUT=55;   W_THROUGHPUT="points=18 runs=3 iters=5 per_run_s=0.1 start_s=8: BM_AttentionW1, 3 transports x 6 points (tests/bench/attention_shapes.hpp), each iteration the transport, SDPA pinned to flash and SDPA's own choice, warm-up + 4 iterations; a run takes ~0.08 s at 32K causal (3e13 FLOP at ~400 TFLOP/s), far less below, 0.1 s is the mean's ceiling; the carried benchmark: nothing built"
B_WN=30;           W_WN="cases=4 launches=1 start_s=15 per_case_s=3: with 2+ GPUs only: W = the GPUs over NCCL (scenarios/gpu_nccl_multi.yaml), one launch, NCCL init"
B_NSYS=$([ "$NSYS" = 1 ] && echo 25 || echo 0)
W_NSYS="cases=1: one profiled case (taken from the shared step's budget)"
basis_of() {
  case "$1" in
    preflight) echo "$W_PREFLIGHT" ;; prebuilt) echo "$W_PREBUILT" ;; build) echo "$W_BUILD" ;;
    gpu-tests) echo "$W_GPU_TESTS" ;; w1-nccl) echo "$W_W1" ;; shared) echo "$W_SHARED" ;;
    shared-hybrid) echo "$W_HYBRID" ;; throughput) echo "$W_THROUGHPUT" ;; wN-nccl) echo "$W_WN" ;; nsys) echo "$W_NSYS" ;;
  esac
}
skipped gpu-tests && B_GPU_TESTS=0
skipped w1-nccl && B_W1=0
skipped shared && B_SHARED=0
skipped shared-hybrid && B_HYBRID=0
skipped throughput && B_THROUGHPUT=0
STEPS_SUM=$((B_GPU_TESTS + B_W1 + B_SHARED + B_HYBRID + B_THROUGHPUT + B_WN + B_NSYS))
SUM=$((B_PREFLIGHT + B_PREBUILT + STEPS_SUM))  # the prebuilt path
FALLBACK_SUM=$((SUM + B_BUILD))                # the prebuilt step fails, then the build

START=$(date +%s)
FAILED=0
STEPS_JSON=()  # one JSON object per step

if [ $DRY -eq 0 ]; then
  mkdir -p "$OUTDIR/logs"
  # The log through tee; at the end the script waits for tee (finish_log), so the log is whole before
  # anyone copies it (gpu-session.sh).
  exec 3>&1 4>&2
  exec > >(tee "$OUTDIR/gpu-check.log") 2>&1
  TEE_PID=$!
fi
finish_log() {
  [ $DRY -eq 1 ] && return 0
  exec 1>&3 2>&4
  wait "$TEE_PID" 2>/dev/null || true
}

json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

# record NAME STATUS SECONDS BUDGET LOG NUMBERS_JSON
record() {
  local numbers="${6:-}"
  [ -z "$numbers" ] && numbers='{}'
  STEPS_JSON+=("{\"name\": $(json_str "$1"), \"status\": $(json_str "$2"), \"seconds\": $3, \"budget_s\": $4, \"log\": $(json_str "$5"), \"numbers\": $numbers}")
}

# step NAME BUDGET_S WHAT COMMAND [NUMBERS_COMMAND]: runs COMMAND under `timeout` (never past the total
# budget), logs to logs/NAME.log, records the outcome; NUMBERS_COMMAND prints the step's numbers as
# one JSON object (run after the step, whatever its outcome). The dry run prints the step, its budget
# and the budget's basis (the W_<STEP> text of the step's variable, passed as BASIS).
step() {
  local name="$1" budget="$2" what="$3" cmd="$4" numbers_cmd="${5:-}"
  if skipped "$name"; then not_run "$name" 0 "skipped: CPBENCH_GPU_SKIP"; return 0; fi
  if [ $DRY -eq 1 ]; then
    printf '%-15s %4d s  %s\n%-22s basis: %s\n' "$name" "$budget" "$what" "" "$(basis_of "$name")"
    return 0
  fi
  local left=$((TOTAL_BUDGET - ($(date +%s) - START)))
  if [ "$left" -lt 10 ]; then
    record "$name" "FAILED: no time left in the ${TOTAL_BUDGET} s budget" 0 "$budget" "" "{}"
    FAILED=1
    return 1
  fi
  [ "$budget" -gt "$left" ] && budget=$left
  echo "== $name (budget ${budget} s): $what"
  local t0=$(date +%s) rc
  timeout --kill-after=10 "$budget" bash -c "$cmd" >"$OUTDIR/logs/$name.log" 2>&1
  rc=$?
  local dt=$(($(date +%s) - t0)) status="PASS"
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    status="TIMEOUT after ${budget} s"
  elif [ $rc -ne 0 ]; then
    status="FAILED (exit $rc)"
  fi
  if [ "$status" != "PASS" ]; then
    FAILED=1
    echo "!! $name: $status; last lines of logs/$name.log:"
    tail -25 "$OUTDIR/logs/$name.log"
  fi
  local numbers="{}"
  if [ -n "$numbers_cmd" ]; then numbers=$(bash -c "$numbers_cmd" 2>/dev/null | tail -1); fi
  [ -z "$numbers" ] && numbers="{}"
  record "$name" "$status" "$dt" "$budget" "logs/$name.log" "$numbers"
  [ "$status" = "PASS" ]
}

# not_run NAME BUDGET STATUS: a step that does not run here, with the reason as its status.
not_run() {
  if [ $DRY -eq 1 ]; then printf '%-15s %4d s  %s\n' "$1" "$2" "$3"; return 0; fi
  echo "== $1: $3"
  record "$1" "$3" 0 "$2" "" "{}"
}

# The GPU machine keeps torch in /opt/torch/.venv (docs/gpu.md); CPBENCH_PYTHON wins.
if [ -z "${CPBENCH_PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3; else PY="${CPBENCH_PYTHON:-python3}"; fi
if [ $DRY -eq 1 ]; then
  echo "gpu-check dry run: ROOT=$ROOT OUTDIR=$OUTDIR"
  echo "prebuilt path: budgets $SUM s (at most ${MAX_STEPS_SUM} s) in a total of ${TOTAL_BUDGET} s"
  echo "build-fallback path: budgets $FALLBACK_SUM s (at most ${MAX_FALLBACK_SUM} s) in the same ${TOTAL_BUDGET} s"
  GPUS="${CPBENCH_GPU_COUNT:-1}"
  for f in gpu_routes gpu_shared gpu_shared_hybrid gpu_nccl_multi; do
    [ -f "$ROOT/scenarios/$f.yaml" ] || { echo "!! scenarios/$f.yaml is missing"; exit 1; }
  done
else
  echo "== gpu-check $(date -u +%FT%TZ) on $(hostname)"
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  [ -z "$GPUS" ] && GPUS=0
fi
if [ "$SUM" -gt "$MAX_STEPS_SUM" ] || [ "$FALLBACK_SUM" -gt "$MAX_FALLBACK_SUM" ] || [ "$MAX_FALLBACK_SUM" -gt "$TOTAL_BUDGET" ]; then
  echo "!! the step budgets add up to $SUM s (prebuilt) / $FALLBACK_SUM s (build fallback), over the ${MAX_STEPS_SUM} / ${MAX_FALLBACK_SUM} s they may take of the ${TOTAL_BUDGET} s total"
  exit 1
fi

# Debian packages carried as .deb files: unpacked under .debs/root, found through the prefix path.
DEBS_ROOT="$ROOT/.debs/root"
PREBUILT="$ROOT/.debs/prebuilt"
PREP="set -e; if ls '$ROOT'/.debs/*.deb >/dev/null 2>&1; then for f in '$ROOT'/.debs/*.deb; do dpkg -x \"\$f\" '$DEBS_ROOT'; done; fi"
# The torch to build against: python3's (the GPU machine's /opt/torch/.venv, or CPBENCH_PYTHON), else
# the LibTorch that scripts/setup.sh caches (CPBENCH_CACHE, default ~/.cache/cpbench), else none: the
# build step then fails with that one reason. Both are torch 2.11 wheels; TORCH_DIR is the folder
# holding torch/ (CPBENCH_TORCH_DIR in CMakeLists.txt). The torch package's folder is found without
# importing torch (find_spec), and so is NCCL's header.
CACHED_TORCH="${CPBENCH_CACHE:-$HOME/.cache/cpbench}/torch-2.11.0"
TORCH_PKG=""
[ $DRY -eq 0 ] && TORCH_PKG=$("$PY" -c 'import importlib.util as u, os; s = u.find_spec("torch"); print(os.path.dirname(s.origin))' 2>/dev/null || true)
FIND_TORCH="TORCH_PKG='$TORCH_PKG'
if [ -n \"\$TORCH_PKG\" ] && [ -d \"\$TORCH_PKG/share/cmake/Torch\" ]; then
  TORCH_DIR=\$(dirname \"\$TORCH_PKG\"); echo \"building against $PY's torch in \$TORCH_PKG\"
elif [ -f '$CACHED_TORCH/.complete' ]; then
  TORCH_DIR='$CACHED_TORCH'; echo 'building against the cached LibTorch $CACHED_TORCH ($PY has no torch)'
else
  echo '!! no torch to build against: $PY has no torch and $CACHED_TORCH is not installed (run scripts/setup.sh, or set CPBENCH_PYTHON)' >&2; exit 1
fi
NCCL_INC=\$('$PY' -c 'import importlib.util as u, os; s = u.find_spec(\"nvidia.nccl\"); print(os.path.join(list(s.submodule_search_locations)[0], \"include\"))' 2>/dev/null || echo /usr/local/cuda/include)"
CONFIGURE="cmake -S '$ROOT' -B '$BUILD' -G Ninja -DCMAKE_BUILD_TYPE=Release -DCPBENCH_TORCH_DIR=\"\$TORCH_DIR\" \
-DCMAKE_PREFIX_PATH=\"\$TORCH_DIR/torch/share/cmake;$DEBS_ROOT/usr\" -DNCCL_INCLUDE_DIR=\"\$NCCL_INC\" -DTORCH_CUDA_ARCH_LIST=9.0"
# The fallback builds what the steps run: the CLI, the GPU tests and the benchmark.
BUILD_CMD="$PREP; $FIND_TORCH; $CONFIGURE && cmake --build '$BUILD' -j \$(nproc) --target cpbench cpbench_gpu_tests cpbench_bench"
TORCH_FROM="python3's torch, else the cached LibTorch"
# The carried binaries (scripts/gpu-bundle.sh) load their own libraries from .debs/prebuilt/lib and
# torch's from the venv; each must start (LibTorch and CUDA's libraries loaded) for the path to be taken.
PREBUILT_LD="$PREBUILT/lib${TORCH_PKG:+:$TORCH_PKG/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
START_PREBUILT="set -e; export LD_LIBRARY_PATH='$PREBUILT_LD'
for b in cpbench tests/cpbench_gpu_tests tests/cpbench_bench; do
  [ -x '$PREBUILT'/\$b ] || { echo \"!! not carried: .debs/prebuilt/\$b (scripts/gpu-bundle.sh)\"; exit 1; }
done
'$PREBUILT/cpbench' --version
'$PREBUILT/tests/cpbench_gpu_tests' --gtest_list_tests >/dev/null || { echo '!! cpbench_gpu_tests does not start'; exit 1; }
'$PREBUILT/tests/cpbench_bench' --benchmark_list_tests >/dev/null || { echo '!! cpbench_bench does not start'; exit 1; }"
# Why the prebuilt path was not taken, in one line: the first '!!' line, or the loader's complaint.
WHY_PREBUILT="'$PY' -c 'import json, re, sys
lines = open(sys.argv[1], errors=\"replace\").read().splitlines()
bad = [l for l in lines if re.search(r\"^!!|error while loading|not found|GLIBC|undefined symbol\", l)]
print(json.dumps({\"why_not\": bad[0] if bad else \"\"}))' '$OUTDIR/logs/prebuilt.log'"
# Numbers of a scenario step: its cases by status and backend, and the forward blocks per step per
# kernel route over every case and rank (each case's `routes` pin is checked by the run itself).
cases_numbers() {
  echo "$PY - '$OUTDIR/$1/report.json' <<'PYEOF'
import json, sys, collections
r = json.load(open(sys.argv[1]))
res = r.get('results', [])
st = collections.Counter(c.get('status', '?') for c in res)
be = collections.Counter(c.get('axes', {}).get('backend', '?') for c in res)
routes = collections.Counter()
for c in res:
    for rk in c.get('ranks', []):
        routes.update(rk.get('kernel_blocks', {}))
print(json.dumps({'cases': len(res), 'by_status': st, 'by_backend': be, 'kernel_blocks': routes,
                  'not_ok': [c.get('name', '?') + ': ' + str(c.get('reason', ''))[:200] for c in res if c.get('status') != 'ok'][:20]}))
PYEOF"
}
# x_sdpa of every throughput point, and the assertion's verdict (<= 1.10 at S >= 8192, bf16).
XSDPA_PY="import json, sys
b = json.load(open(sys.argv[1]))['benchmarks']
pts = {x['name']: round(x.get('x_sdpa', 0), 3) for x in b if 'x_sdpa' in x}
bad = {n: v for n, v in pts.items() if int(n.split('S:')[1].split('/')[0]) >= 8192 and not 0 < v <= 1.10}
print(json.dumps({'x_sdpa': pts, 'over_1_10_at_8k_plus': bad}))
sys.exit(1 if bad or not pts else 0)"

step preflight "$B_PREFLIGHT" "tools and versions, the GPU, python's torch, the carried files; the first miss in summary.json" \
  "bash '$ROOT/scripts/gpu-preflight.sh' '$PY' '$OUTDIR/preflight.json'" "cat '$OUTDIR/preflight.json'"
BUILT=0
PATH_TAKEN=""
if step prebuilt "$B_PREBUILT" "start the carried cpbench, cpbench_gpu_tests and cpbench_bench (.debs/prebuilt): if they start, nothing is built" \
    "$START_PREBUILT" "$WHY_PREBUILT"; then
  BUILD="$PREBUILT"
  export LD_LIBRARY_PATH="$PREBUILT_LD"
  BUILT=1
  PATH_TAKEN="prebuilt"
  [ $DRY -eq 1 ] && printf '%-15s %4d s  %s\n%-22s basis: %s\n' build "$B_BUILD" \
    "the fallback, only when the prebuilt step fails: then the budgets add up to $FALLBACK_SUM s" "" "$W_BUILD"
else
  export LD_LIBRARY_PATH="$DEBS_ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  PATH_TAKEN="build fallback: $(grep -m1 -E '^!!|error while loading|not found|GLIBC|undefined symbol' "$OUTDIR/logs/prebuilt.log" 2>/dev/null || echo 'the carried binaries did not start')"
  echo "== the carried binaries did not start: ${PATH_TAKEN#build fallback: }; building"
  step build "$B_BUILD" "the fallback: configure + build cpbench, cpbench_gpu_tests and cpbench_bench against ${TORCH_FROM}" "$BUILD_CMD" && BUILT=1
fi
CP="'$BUILD/cpbench'"
if [ $BUILT -eq 1 ]; then
  step gpu-tests "$B_GPU_TESTS" "cpbench_gpu_tests (label gpu): fused routes vs tiled on CUDA, GQA native on flash, no host sync in a step (masked plans, a2a), NCCL world of one, the runner on CUDA" \
    "'$BUILD/tests/cpbench_gpu_tests' --gtest_output=xml:'$OUTDIR/gpu-tests.xml'" \
    "$PY -c \"import xml.etree.ElementTree as E, json; r=E.parse('$OUTDIR/gpu-tests.xml').getroot(); print(json.dumps({k: int(r.get(k, 0)) for k in ('tests', 'failures', 'errors', 'disabled')}))\""
  step w1-nccl "$B_W1" "W = 1 over NCCL, one case per kernel route per dtype (flash, flash window, flash varlen, memory-efficient, tiled; a2a), each pinned by its routes key, vs float64 (scenarios/gpu_routes.yaml)" \
    "$CP run '$ROOT/scenarios/gpu_routes.yaml' --out '$OUTDIR/w1-nccl' && grep -Eq 'backend.{0,4}nccl' '$OUTDIR/w1-nccl/report.json'" \
    "$(cases_numbers w1-nccl)"
  step shared "$B_SHARED" "W = 2, 4 sharing the GPU over Gloo: every layout x allgather, ring, a2a, hybrid; bf16 at W = 2 on the flash window / varlen and memory-efficient routes (pinned); negative controls perturbed and a2a_rank_order (expect: mismatch) (scenarios/gpu_shared.yaml)" \
    "$CP run '$ROOT/scenarios/gpu_shared.yaml' --out '$OUTDIR/shared'" "$(cases_numbers shared)"
  step shared-hybrid "$B_HYBRID" "tiny-hybrid (Mamba + attention) at W = 2, 4 sharing the GPU over Gloo; control ssm_rank_order (scenarios/gpu_shared_hybrid.yaml)" \
    "$CP run '$ROOT/scenarios/gpu_shared_hybrid.yaml' --out '$OUTDIR/shared-hybrid'" "$(cases_numbers shared-hybrid)"
  step throughput "$B_THROUGHPUT" "BM_AttentionW1, Llama-3-8B attention dims, bf16, causal 4K-32K and document 8K, 16K, after warm-up: x_sdpa <= 1.10 at S >= 8192 against SDPA pinned to FlashAttention-2 (cuDNN off; asserted), x_cudnn against SDPA's own choice (shown)" \
    "'$BUILD/tests/cpbench_bench' --benchmark_filter=BM_AttentionW1 --benchmark_out='$OUTDIR/throughput.json' \
--benchmark_out_format=json | tee '$OUTDIR/throughput.txt' && $PY -c \"$XSDPA_PY\" '$OUTDIR/throughput.json'" \
    "$PY -c \"$XSDPA_PY\" '$OUTDIR/throughput.json'"
  if [ "$GPUS" -gt 1 ]; then
    step wN-nccl "$B_WN" "W = $GPUS over NCCL, one GPU per rank: allgather, ring, a2a (scenarios/gpu_nccl_multi.yaml -a cp=[$GPUS])" \
      "$CP run '$ROOT/scenarios/gpu_nccl_multi.yaml' -a cp=[$GPUS] --out '$OUTDIR/wN-nccl' \
&& grep -Eq 'backend.{0,4}nccl' '$OUTDIR/wN-nccl/report.json'" "$(cases_numbers wN-nccl)"
  else
    not_run wN-nccl "$B_WN" "NCCL at W > 1: not tested ($GPUS GPU)"
  fi
  if [ "$NSYS" = 1 ]; then
    if command -v nsys >/dev/null; then
      step nsys "$B_NSYS" "one nsys-profiled case, its cp: NVTX ranges present" \
        "nsys profile -t cuda,nvtx -o '$OUTDIR/nsys/case' $CP run '$ROOT/scenarios/gpu_routes.yaml' \
--filter 'allgather.*causal.*bfloat16' --out '$OUTDIR/nsys/out' && nsys stats -r nvtx_sum '$OUTDIR/nsys/case.nsys-rep' \
| tee '$OUTDIR/nsys/nvtx.txt' && grep -q 'cp:load_balanced:forward' '$OUTDIR/nsys/nvtx.txt' \
&& grep -q 'cp:load_balanced:attn_compute' '$OUTDIR/nsys/nvtx.txt'"
    else
      not_run nsys "$B_NSYS" "skipped: nsys is not on the PATH"
    fi
  fi
else
  FAILED=1
  for s in gpu-tests:$B_GPU_TESTS w1-nccl:$B_W1 shared:$B_SHARED shared-hybrid:$B_HYBRID throughput:$B_THROUGHPUT wN-nccl:$B_WN; do
    not_run "${s%%:*}" "${s##*:}" "skipped: neither the carried binaries started nor the build succeeded"
  done
fi

if [ $DRY -eq 1 ]; then
  echo "dry run: nothing was run"
  exit 0
fi
RESULT=$([ $FAILED -eq 0 ] && echo PASS || echo FAIL)
PREFLIGHT_MISS=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("first_miss", ""))' "$OUTDIR/preflight.json" 2>/dev/null || echo "preflight.json unreadable")
NCCL_MULTI=$([ "$GPUS" -gt 1 ] && echo "tested at W = $GPUS (step wN-nccl)" || echo "NCCL at W > 1: not tested ($GPUS GPU)")
{
  echo "{"
  echo "  \"when\": \"$(date -u +%FT%TZ)\", \"host\": $(json_str "$(hostname)"), \"gpus\": $GPUS,"
  echo "  \"total_s\": $(($(date +%s) - START)), \"total_budget_s\": $TOTAL_BUDGET,"
  echo "  \"result\": \"$RESULT\","
  echo "  \"path\": $(json_str "$PATH_TAKEN"),"
  echo "  \"preflight_first_miss\": $(json_str "$PREFLIGHT_MISS"),"
  echo "  \"nccl_multi_rank\": $(json_str "$NCCL_MULTI"),"
  echo "  \"steps\": ["
  n=${#STEPS_JSON[@]}
  for i in "${!STEPS_JSON[@]}"; do
    sep=","; [ $((i + 1)) -eq $n ] && sep=""
    echo "    ${STEPS_JSON[$i]}$sep"
  done
  echo "  ]"
  echo "}"
} >"$OUTDIR/summary.json"
{
  echo "# gpu-check $(date -u +%FT%TZ)"
  echo
  echo "- host $(hostname), GPUs $GPUS, total $(($(date +%s) - START)) s of ${TOTAL_BUDGET} s"
  echo "- result: $RESULT; path: ${PATH_TAKEN:-none}; preflight first miss: ${PREFLIGHT_MISS:-none}"
  echo "- $NCCL_MULTI"
  echo
  echo '```json'
  cat "$OUTDIR/summary.json"
  echo '```'
} >"$OUTDIR/summary.md"
cat "$OUTDIR/summary.md"
finish_log
exit $FAILED
