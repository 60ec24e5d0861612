#!/usr/bin/env bash
# The GPU check's first step (scripts/gpu-check.sh): what the machine has and what travelled with the
# command, in seconds, before anything runs. One line per item on stdout; OUT_JSON gets
# {"items": {...}, "first_miss": "..."}, the first miss in the order the check needs things: the GPU
# and python's torch (every path), the carried binaries (the prebuilt path), then the build tools and
# the .deb of each find_package (the build fallback). Exits 1 only when the GPU or torch is missing
# (nothing can pass without them); a miss the prebuilt path does not need is recorded, not fatal.
#   scripts/gpu-preflight.sh PYTHON OUT_JSON
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${1:?python}"
OUT_JSON="${2:?output json}"
FIRST_MISS=""
FATAL=0
ITEMS=()
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | tr -d '\n')"; }
note() {
  printf '%-34s %s\n' "$1" "$2"
  ITEMS+=("$(json_str "$1"): $(json_str "$2")")
}
miss() {
  note "$1" "MISSING: $2"
  [ -z "$FIRST_MISS" ] && FIRST_MISS="$1: $2"
  return 0
}
# tool NAME COMMAND...: the first line of COMMAND's output, or a miss.
tool() {
  local name="$1" out
  shift
  if out=$(timeout 10 "$@" 2>&1) && [ -n "$out" ]; then note "$name" "$(printf '%s\n' "$out" | grep -m1 -v '^$')"; else miss "$name" "'$*' failed or is not on the PATH"; fi
}

note nproc "$(nproc)"
if gpu=$(timeout 15 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1) && [ -n "$gpu" ]; then
  note gpu "$(printf '%s' "$gpu" | tr '\n' ';')"
else
  miss gpu "nvidia-smi found no GPU ($gpu)"
  FATAL=1
fi
# torch's version and CUDA from its version.py, without importing torch (seconds on a fresh machine).
if t=$("$PY" -c 'import importlib.util as u, os
s = u.find_spec("torch"); d = os.path.dirname(s.origin); g = {}
exec(open(os.path.join(d, "version.py")).read(), g); print(g["__version__"], "cuda", g.get("cuda"), d)' 2>&1); then
  note "python torch" "$t"
else
  miss "python torch" "$PY has no torch ($(printf '%s' "$t" | tail -1))"
  FATAL=1
fi
for b in cpbench tests/cpbench_gpu_tests tests/cpbench_bench; do
  if [ -x "$ROOT/.debs/prebuilt/$b" ]; then note "carried .debs/prebuilt/$b" "$(du -k "$ROOT/.debs/prebuilt/$b" | cut -f1) KiB"
  else miss "carried .debs/prebuilt/$b" "not carried (scripts/gpu-bundle.sh, carry [\".debs\"]): the check will build"; fi
done
[ -f "$ROOT/.debs/prebuilt/COMMIT" ] && note "carried binaries' commit" "$(cat "$ROOT/.debs/prebuilt/COMMIT")"
tool cmake cmake --version
tool ninja ninja --version
tool c++ c++ --version
NVCC="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [ -x "$NVCC" ]; then note nvcc "$("$NVCC" --version | tail -1)"; else miss nvcc "no nvcc on the PATH or in /usr/local/cuda/bin"; fi
nvtx=""
for d in /usr/local/cuda/include "$(dirname "$NVCC")/../include"; do [ -f "$d/nvtx3/nvToolsExt.h" ] && nvtx="$d/nvtx3" && break; done
if [ -n "$nvtx" ]; then note nvtx3 "$nvtx"; else miss nvtx3 "nvtx3/nvToolsExt.h not under the CUDA toolkit's include"; fi
# The .deb of every package scripts/gpu-debs.list names for a find_package.
while IFS=: read -r name pkgs; do
  case "$name" in ''|'#'*|machine) continue ;; esac
  for p in $pkgs; do
    f=$(ls "$ROOT/.debs/${p}_"*.deb 2>/dev/null | head -1)
    if [ -n "$f" ]; then note ".deb $p ($name)" "$(basename "$f")"; else miss ".deb $p ($name)" "not in .debs/ (scripts/fetch-gpu-debs.sh)"; fi
  done
done <"$ROOT/scripts/gpu-debs.list"

{
  printf '{"first_miss": %s, "items": {' "$(json_str "$FIRST_MISS")"
  (IFS=,; printf '%s' "${ITEMS[*]}")
  printf '}}\n'
} >"$OUT_JSON"
echo "first miss: ${FIRST_MISS:-none}"
exit $FATAL
