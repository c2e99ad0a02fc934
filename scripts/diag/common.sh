# Sourced by the round scripts (bounds.sh, rounds_ij.sh, rounds_k.sh) from the repository root
# on the H200, with the caller's output folder as its argument: the environment, the points
# they time, auto's config for fp8 per row from 16384 rows, and `rows`, which times hopper_ws
# into <folder>/<csv> under the label <SHA>+<label>. The folder defaults to reports/diag/
# (git ignores reports/) and is created. A switch the caller puts before `rows`
# (MLA_HWS_DIAG=20 rows ...) reaches the kernel's process; with BUDGET set, a call past that
# many seconds is skipped.
set -u
export PYTHONPATH=$PWD TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
SHA=${SHA:?set SHA to the commit the tree was made from}
out=${1:-reports/diag}
mkdir -p "$out"
P4=kimi/fp8_row/fp8/p1/4096; P32=kimi/fp8_row/fp8/p1/32000
P109=kimi/fp8_row/fp8/p1/109440; P64=kimi/fp8_row/fp8/p1/64x4096
AUTO='ring_depth=6, mma_groups=2, latent_in_registers=True'
rows() { # label csv config points...
  local label=$1 csv=$2 cfg=$3; shift 3
  if [[ -n ${BUDGET:-} ]] && (( SECONDS > BUDGET )); then echo "skip $label"; return; fi
  echo "== $label ${cfg:+($cfg) }($SECONDS s)"
  MLA_RUN_LABEL=$label timeout 150 python3 scripts/perf_matrix.py "$out/$csv" \
    --variants hopper_ws --rows --config "hopper_ws=HopperWSConfig($cfg)" --points "$@" 2>&1 \
    | grep -v -i warn | grep -E " graph|rror|Traceback|wrong|FAIL" | cut -c1-150
}
