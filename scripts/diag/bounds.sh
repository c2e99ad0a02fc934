#!/usr/bin/env bash
# The bounds of 2026-12-01 (docs/log/2026-12-01-rounds-i-j-bounds.md), one run on the H200,
# on a tree with scripts/diag/hopper_ws_bounds.patch applied. Usage on the H200, from the
# repository root: SHA=<commit> bash scripts/diag/bounds.sh [FOLDER] (rows to FOLDER,
# default reports/diag/).
source scripts/diag/common.sh "${1:-}"
run() { # diag config points...
  local d=$1 cfg=$2; shift 2
  MLA_HWS_DIAG=$d rows diag$d bounds.csv "$cfg" "$@"
}
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
python3 scripts/diag/write_bound.py --out "$out" 4096 32000 2>&1 | tail -8
for round in 1 2; do
  for d in 0 20 21 22; do run $d "" $P4 $P32; done
done
for d in 0 20 21 22; do run $d "$AUTO" $P32; done
echo "done $SECONDS s"
