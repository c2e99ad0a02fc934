#!/usr/bin/env bash
# Rounds I and J (paired runs, late rope) and bounds (MLA_HWS_DIAG 20/21), one run on the
# H200, on ea034cb with scripts/diag/hopper_ws_paired_late_bounds.patch applied. Usage on the
# H200, from the repository root: SHA=<commit> bash scripts/diag/rounds_ij.sh [FOLDER] (rows
# to FOLDER, default reports/diag/).
BUDGET=${BUDGET:-400}
source scripts/diag/common.sh "${1:-}"
run() { MLA_HWS_DIAG=${DIAG:-0} rows "$@"; } # label csv config points...
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
  tests/test_hopper_ws.py -k "paired" -x 2>&1 | tee "$out/pytest_r1.log" | tail -6
echo "done $SECONDS s"
