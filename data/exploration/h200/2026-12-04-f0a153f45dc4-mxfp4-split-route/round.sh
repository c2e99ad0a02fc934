#!/usr/bin/env bash
# MXFP4's split route: its GPU tests, then side by side with the starting commit.
set -u
out=$1
OLD=.ab/699a657
python3 -m mla_kernels.lab.provenance > $out/stamp.txt 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/designs/test_weight_widening.py \
  tests/designs/test_hopper_ws.py -k "mxfp4 or widen or bit_for_bit or route" > $out/pytest_gpu_split.log 2>&1 &
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/designs/test_hopper_ws_wide_heads.py \
  tests/call/test_gpu_large.py -k "mxfp4" > $out/pytest_gpu_large_mxfp4.log 2>&1 &
wait
tail -n 2 $out/pytest_gpu_split.log $out/pytest_gpu_large_mxfp4.log
grep -h -A30 "^____" $out/pytest_gpu_*.log | head -80
NEW=$(python3 -m mla_kernels.lab.provenance)
echo "== ab $(date +%T) new=$NEW"
timeout 270 python3 scripts/ab_timing.py $out/ab_split.csv --tree 699a65718e1c=$OLD --tree $NEW=. \
  --points 'kimi/mxfp4/fp8/p1/32000/wide' 'kimi/mxfp4/fp8/p1/65536/wide' 'kimi/mxfp4/fp8/p1/109440/wide' \
  'kimi/mxfp4/fp8/p1/32000' 'kimi/mxfp4/fp8/p1/109440' 'kimi/fp8_row/fp8/p1/32000' 'kimi/bf16/fp8/p1/32000' 2>&1 | grep -v Warn | tail -40
echo "== widest $(date +%T)"
timeout 90 python3 scripts/ab_timing.py $out/ab_widest.csv --tree $NEW=. \
  --points 'kimi/mxfp4/fp8/p1/32000/widest' 'kimi/mxfp4/fp8/p1/32000/wide' 2>&1 | grep -v Warn | tail -12
echo "== done $(date +%T)"
