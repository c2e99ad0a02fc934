#!/usr/bin/env bash
# Rounds I and J (paired runs, late rope) and bounds (MLA_HWS_DIAG 20/21), one device call,
# on ea034cb with scripts/diag/hopper_ws_paired_late_bounds.patch applied. Usage on the H200,
# from the repository root: SHA=<commit> bash scripts/diag/rounds_ij.sh (rows to $OUT).
set -u
export PYTHONPATH=$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
SHA=${SHA:?}
P4=kimi/fp8_row/fp8/p1/4096; P32=kimi/fp8_row/fp8/p1/32000
P109=kimi/fp8_row/fp8/p1/109440; P64=kimi/fp8_row/fp8/p1/64x4096
AUTO='ring_depth=6, mma_groups=2, latent_in_registers=True'
run() { # label csv config points...
  local label=$1 csv=$2 cfg=$3; shift 3
  if (( SECONDS > ${BUDGET:-400} )); then echo "skip $label"; return; fi
  echo "== $label ($SECONDS s)"
  MLA_HWS_DIAG=${DIAG:-0} MLA_COMMIT=$SHA+$label timeout 120 python3 scripts/perf_matrix.py $OUT/$csv --variants hopper_ws \
    --rows --config "hopper_ws=HopperWSConfig($cfg)" --points "$@" 2>&1 \
    | grep -v -i warn | grep -E "hopper_ws|rror|Traceback|wrong|FAIL" | cut -c1-160
}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
python3 scripts/perf_matrix.py --empty 2>&1 | tail -1
run default rounds.csv "" $P4 $P32 $P109 $P64
run paired_late rounds.csv "paired_runs=True, late_rope=True" $P4 $P32 $P109 $P64
run auto rounds.csv "$AUTO" $P32 $P109 $P64
run auto_paired_late rounds.csv "$AUTO, paired_runs=True, late_rope=True" $P32 $P109 $P64
DIAG=20; run diag20 bounds.csv "" $P4 $P32
run diag20_auto bounds.csv "$AUTO" $P32
DIAG=21; run diag21 bounds.csv "" $P4 $P32; DIAG=0
run late rounds.csv "late_rope=True" $P4 $P32
run auto_paired rounds.csv "$AUTO, paired_runs=True" $P32 $P109
run default rounds.csv "" $P4 $P32 $P109 $P64
run paired_late rounds.csv "paired_runs=True, late_rope=True" $P4 $P32 $P109 $P64
run auto rounds.csv "$AUTO" $P32 $P109 $P64
run auto_paired_late rounds.csv "$AUTO, paired_runs=True, late_rope=True" $P32 $P109 $P64
echo "== tests ($SECONDS s)"
left=$(( 575 - SECONDS )); (( left > 30 )) && timeout $left python3 -m pytest -q -p no:cacheprovider \
  tests/test_hopper_ws.py -k "paired" -x 2>&1 | tee $OUT/pytest_r1.log | tail -6
echo "done $SECONDS s"
