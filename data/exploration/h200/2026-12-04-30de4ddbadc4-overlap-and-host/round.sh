#!/usr/bin/env bash
# One round: GPU tests of the touched code, overlapped launch on/off, host cost, ab.
set -u
OUT=$1; SHA=$2
export GIT_DIR=/nonexistent/.git PYTHONPATH=$PWD TRITON_INTERPRET=0 TRITON_CACHE_DIR=$PWD/.tcache PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
stamp tests
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/designs/test_overlap_launch.py tests/lab/test_sequence_timing.py tests/call/test_eager.py > $OUT/pytest_gpu.log 2>&1
tail -3 $OUT/pytest_gpu.log
stamp tune-sequence
timeout 170 python3 -m mla_kernels.lab.tune $OUT/overlap_sequence.csv --designs hopper_ws --formats fp8_row --contexts 4096 8192 32000 --configs '[{}, {"overlap_launch": true}]' --sequence 61 2>&1 | grep -v Warn | tail -8
stamp host
HOST_BEFORE=179dccd=.ab/179dccd timeout 70 bash scripts/device_run.sh --out $OUT/host $SHA host 2>&1 | tail -30
tar -czf $OUT/host.tar.gz -C $OUT host && rm -rf $OUT/host
stamp ab
timeout 180 python3 scripts/ab_timing.py $OUT/ab_timing.csv --tree 179dccd=.ab/179dccd --tree ${SHA}+overlap_launch=.ab/pdl 2>&1 | tail -45
stamp done
