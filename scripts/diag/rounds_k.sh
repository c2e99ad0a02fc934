#!/usr/bin/env bash
# Round K (every item stored from registers, MLA_HWS_DIRECT=1) against the kernel as committed,
# and fill_ by element type, one run on the H200, on a tree with
# scripts/diag/hopper_ws_direct_stores.patch applied. Usage on the H200, from the repository
# root: SHA=<commit> bash scripts/diag/rounds_k.sh [FOLDER] (rows to FOLDER, default
# reports/diag/).
BUDGET=${BUDGET:-330}
source scripts/diag/common.sh "${1:-}"
run() { # direct label config points...
  local d=$1; shift
  MLA_HWS_DIRECT=$d rows "$1" rounds_k.csv "${@:2}"
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
python3 scripts/diag/write_bound.py --out "$out" 4096 32000 2>&1 | tail -14
for round in 1 2; do
  run 0 default "" $P4 $P32
  run 1 direct "" $P4 $P32
  run 0 auto "$AUTO" $P32 $P64
  run 1 direct_auto "$AUTO" $P32 $P64
done
run 0 default "" "kimi/mxfp4/fp8/p1/32000" "kimi/fp8_block/fp8/p1/32000" "kimi/bf16/bf16/p1/32000"
run 1 direct "" "kimi/mxfp4/fp8/p1/32000" "kimi/fp8_block/fp8/p1/32000" "kimi/bf16/bf16/p1/32000"
echo "== tests, MLA_HWS_DIRECT=1 ($SECONDS s)"
left=$(( 570 - SECONDS )); (( left > 30 )) && MLA_HWS_DIRECT=1 timeout $left python3 -m pytest \
  -q -p no:cacheprovider tests/test_hopper_ws.py -x \
  -k "matches_reference or fp16_outputs or deep_rings or many_sequences" 2>&1 \
  | tee "$out/pytest_direct.log" | tail -6
echo "done $SECONDS s"
