#!/usr/bin/env bash
# MXFP4 widened once a call, part 3: the faster widening kernel's tests, then side by side.
set -u
out=$1
OLD=.ab/1e8bf8d
python3 -m mla_kernels.lab.provenance > $out/stamp3.txt 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/designs/test_weight_widening.py \
  tests/designs/test_hopper_ws.py -k "bit_for_bit or widen or mxfp4_matches" > $out/pytest_gpu_widen.log 2>&1 &
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/designs/test_hopper_ws_wide_heads.py -k "mxfp4" > $out/pytest_gpu_glm5_mxfp4.log 2>&1 &
G='[{"ring_depth":6}]'
timeout 200 python3 -m mla_kernels.lab.tune /tmp/w.csv --designs hopper_ws --shapes glm-5-style --formats mxfp4 --contexts 2048 --configs "$G" > /dev/null 2>&1 &
wait
tail -2 $out/pytest_gpu_widen.log $out/pytest_gpu_glm5_mxfp4.log
grep -h -A25 "^____" $out/pytest_gpu_*.log | head -60
echo "== ab $(date +%T)"
timeout 330 python3 scripts/ab_timing.py $out/ab_mxfp4.csv --tree 1e8bf8d02209=$OLD --tree $(python3 -m mla_kernels.lab.provenance)=. \
  --points 'kimi/mxfp4/fp8/p1/32000' 'kimi/mxfp4/fp8/p1/65536' 'kimi/mxfp4/fp8/p1/109440' 'kimi/mxfp4/fp8/p1/32000/wide' \
  'kimi/fp8_row/fp8/p1/32000' 'kimi/fp8_row/fp8/p1/65536' 'kimi/fp8_row/fp8/p1/109440' 'glm-5-style/mxfp4/fp8/p1/32000' 'glm-5-style/fp8_row/fp8/p1/32000' 2>&1 | grep -v Warn | tail -44
echo "== done $(date +%T)"
