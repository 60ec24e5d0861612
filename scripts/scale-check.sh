#!/usr/bin/env bash
# The W = 5-8 CPU sweeps (issue 36: sinks, sliding and full layers, MLA on both wires, at W = 8) on a
# machine with more cores than the development machine, which holds CI to 4 rank processes: the GPU
# machine's 16 cores, through the device tool, in a second call right after the GPU check while the
# machine is warm (docs/gpu.md, "The W = 8 CPU sweeps"). Only CPU ranks over Gloo: the GPU is not used.
# It runs the carried cpbench (.debs/prebuilt, scripts/gpu-bundle.sh) and builds nothing.
#
#   bash scripts/scale-check.sh [--filter REGEX] [--budget SECONDS]
#
# --filter: the cases to run (default 'cp8/': the W = 8 cases, 24 in each of the three; '' runs W = 5, 6 and 8).
# --budget: seconds for all the scenarios together (default 200), split evenly, each under `timeout`.
# CPBENCH_SCALE_SCENARIOS (space-separated YAML paths) and CPBENCH_SCALE_BIN (a cpbench) replace the
# defaults; tests/multirank/scale_check_test.cpp runs the script that way on this machine at W = 2.
# Writes $OUT/scale-summary.json (each scenario: exit status, seconds, ok / failed / skipped counts;
# `all_ok`), $OUT/scale-summary.md and, per scenario, $OUT/<name>.log and $OUT/<name>/report.md. Exits 0
# when every scenario ran every case it selected and none failed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FILTER='cp8/'
BUDGET=200
while [ $# -gt 0 ]; do
  case "$1" in
    --filter) FILTER="${2-}"; shift 2 ;;
    --budget) BUDGET="${2:?--budget SECONDS}"; shift 2 ;;
    *) echo "scale-check: unknown argument $1 (--filter REGEX, --budget SECONDS)" >&2; exit 2 ;;
  esac
done
: "${OUT:?OUT is not set: run this through the device tool (or set OUT to a folder)}"
mkdir -p "$OUT"
SCENARIOS="${CPBENCH_SCALE_SCENARIOS:-$ROOT/scenarios/nightly/attention_kinds_scale.yaml $ROOT/scenarios/nightly/mla_scale_latent.yaml $ROOT/scenarios/nightly/mla_scale_expanded.yaml}"
BIN="${CPBENCH_SCALE_BIN:-$ROOT/.debs/prebuilt/cpbench}"
[ -x "$BIN" ] || { echo "scale-check: no cpbench at $BIN (scripts/gpu-bundle.sh carries one in .debs/prebuilt)" >&2; exit 1; }
# The carried binary loads its own libraries from .debs/prebuilt/lib and torch's from the venv
# (/opt/torch/.venv on the GPU machine), found without importing torch.
PY=python3
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
TORCH_PKG=$("$PY" -c 'import importlib.util as u, os; s = u.find_spec("torch"); print(os.path.dirname(s.origin))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$ROOT/.debs/prebuilt/lib${TORCH_PKG:+:$TORCH_PKG/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
n=0
for s in $SCENARIOS; do n=$((n + 1)); done
share=$((BUDGET / n))
[ "$share" -ge 1 ] || share=1  # timeout 0 would mean no limit
rows=()
for s in $SCENARIOS; do
  name=$(basename "$s" .yaml)
  t0=$(date +%s)
  timeout "$share" "$BIN" run "$s" --max-local-ranks 16 ${FILTER:+--filter "$FILTER"} --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  rc=$?
  rows+=("$name $rc $(($(date +%s) - t0))")
  echo "scale-check: $name exit $rc in $(($(date +%s) - t0)) s (budget $share s)"
done
printf '%s\n' "${rows[@]}" >"$OUT/.rows"
"$PY" - "$OUT" "$FILTER" "$share" "$(nproc)" <<'PY'
import json, re, sys
out, filt, share, ncores = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
scen = []
for line in open(f"{out}/.rows").read().split("\n"):
    if not line.strip():
        continue
    name, rc, secs = line.split()
    row = {"scenario": name, "exit": int(rc), "seconds": int(secs), "budget_s": share}
    try:
        md = open(f"{out}/{name}/report.md").read()
        m = re.search(r"^- (\d+) ok, (\d+) failed, (\d+) skipped", md, re.M)
        if m:
            row.update(ok=int(m[1]), failed=int(m[2]), skipped=int(m[3]))
    except OSError:
        row["why"] = "no report: see the log"
    if row["exit"] == 124:
        row["why"] = "timed out"
    scen.append(row)
ok = all(r["exit"] == 0 and r.get("failed", 1) == 0 and "ok" in r for r in scen)
summary = {"filter": filt, "cores": ncores, "all_ok": ok, "scenarios": scen}
with open(f"{out}/scale-summary.json", "w") as f:
    json.dump(summary, f, indent=1)
verdict = "all ok" if ok else "NOT all ok"
with open(f"{out}/scale-summary.md", "w") as f:
    f.write(f"# W = 5-8 CPU sweeps (filter {filt!r}, {ncores} cores): {verdict}\n\n")
    f.write("| scenario | exit | s | ok | failed | skipped |\n|---|---|---|---|---|---|\n")
    for r in scen:
        cells = [r["scenario"], r["exit"], r["seconds"], r.get("ok", "-"), r.get("failed", "-"), r.get("skipped", "-")]
        f.write("| " + " | ".join(str(c) for c in cells) + " |\n")
print(json.dumps(summary))
sys.exit(0 if ok else 1)
PY
