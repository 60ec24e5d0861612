#!/usr/bin/env bash
# The one command a session lent a GPU runs through the device tool (docs/gpu.md, "The first GPU
# session"): scripts/gpu-check.sh into a scratch folder, then what fits the tool's way back (at most
# 8 files of 16 MiB) into $OUT: summary.json, summary.md, gpu-check.log, and everything else (logs,
# reports without their traces, test XML, benchmark JSON) as one gpu-check.tgz. Exits with the check's
# status.
#   bash scripts/gpu-session.sh        (on the GPU machine; OUT is set by the device tool)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${OUT:?OUT is not set: run this through the device tool (or set OUT to a folder)}"
WORK="${CPBENCH_GPU_WORK:-/tmp/gpu-check}"
rm -rf "$WORK"
mkdir -p "$WORK" "$OUT"
bash "$ROOT/scripts/gpu-check.sh" "$WORK"
rc=$?
for f in summary.json summary.md gpu-check.log; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"; done
tar czf "$OUT/gpu-check.tgz" -C "$WORK" --exclude='trace.json' --exclude='*.nsys-rep' . 2>/dev/null
ls -la "$OUT"
exit $rc
