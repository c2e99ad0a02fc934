#!/usr/bin/env bash
# One round: the quick tier, the overlapped launch's GPU test (hopper_ws and auto), fills
# back to back, and single launches against the plain-launch tree.
set -u
OUT=$1; SHA=$2
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$PWD/.tcache
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
stamp tests
timeout 230 bash scripts/device_run.sh --out $OUT/r $SHA tests 2>&1 | tail -4
tail -3 $OUT/r/pytest_gpu.log
stamp overlap
( export GIT_DIR=/nonexistent/.git PYTHONPATH=$PWD TRITON_INTERPRET=0
  timeout 110 python3 -m pytest -q -p no:cacheprovider tests/designs/test_overlap_launch.py > $OUT/pytest_gpu_overlap.log 2>&1
  tail -2 $OUT/pytest_gpu_overlap.log
  stamp write-bound
  timeout 60 python3 -m mla_kernels.lab.diagnostics.write_bound --out $OUT --sequence 61 4096 32000 2>&1 | tail -16 )
stamp ab
AB_OLD=30de4ddbadc4=.ab/30de4dd timeout 200 bash scripts/device_run.sh --out $OUT/r $SHA ab 2>&1 | tail -40
mv $OUT/r/ab_timing.csv $OUT/ 2>/dev/null; mv $OUT/r/steps.csv $OUT/; mv $OUT/r/pytest_gpu.log $OUT/; rm -rf $OUT/r
stamp done
