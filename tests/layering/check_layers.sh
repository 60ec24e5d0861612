#!/usr/bin/env bash
# Layers point one way (docs/architecture.md): a file may include project headers only from its own
# layer or the layers below it. Prints every violation as "file:line: includes X (layer L may not)"
# and exits 1 if there is any. Usage: check_layers.sh SOURCE_DIR
set -euo pipefail
root="${1:?usage: check_layers.sh SOURCE_DIR}"
cd "$root"

# layer folder -> include prefixes it must not use
declare -A forbidden=(
  [sharders/core]="sharders/[a-z_]*\.hpp kernels/ harness/ reports/"
  [sharders]="kernels/ harness/ reports/"
  [kernels/comm]="sharders/[a-z_]*\.hpp kernels/attention/ kernels/transports/ harness/ reports/"
  [kernels/attention]="kernels/comm/ kernels/transports/ harness/ reports/"
  [kernels/transports]="kernels/controls/ kernels/mixers/ harness/ reports/"
  [kernels/mixers]="kernels/controls/ kernels/transports/ harness/ reports/"
  [kernels/controls]="harness/ reports/"
  [reports]="sharders/ kernels/ harness/"
)
status=0
for layer in "${!forbidden[@]}"; do
  # Files of this layer only (sharders/ without its core/ sub-folder is the sharders layer).
  if [ "$layer" = sharders ]; then
    files=$(find sharders -maxdepth 1 -name '*.[ch]pp')
  else
    files=$(find "$layer" -name '*.[ch]pp')
  fi
  for pat in ${forbidden[$layer]}; do
    for f in $files; do
      while IFS= read -r hit; do
        [ -z "$hit" ] && continue
        echo "$f:${hit%%:*}: includes ${hit#*:} (layer $layer may not include $pat)"
        status=1
      done < <(grep -n -E "^[[:space:]]*#[[:space:]]*include[[:space:]]+\"$pat" "$f" | sed -E 's/^([0-9]+):[^"]*"([^"]*)".*/\1:\2/' || true)
    done
  done
done
[ $status -eq 0 ] && echo "layering: every #include points down"
exit $status
