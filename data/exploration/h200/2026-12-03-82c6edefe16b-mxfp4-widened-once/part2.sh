#!/usr/bin/env bash
# MXFP4 widened once a call, part 2: configs timed, then the two trees side by side.
set -u
out=$1
OLD=.ab/1e8bf8d
python3 -m mla_kernels.lab.provenance > $out/stamp2.txt 2>&1
MX='[{"ring_depth":4},{"ring_depth":6},{"ring_depth":4,"mma_groups":2},{"ring_depth":6,"mma_groups":2},{"ring_depth":4,"mxfp4_widening":"kernel"}]'
echo "== tune $(date +%T)"
timeout 200 python3 -m mla_kernels.lab.tune $out/tune_mxfp4.csv --designs hopper_ws --shapes kimi-k3-tp8 --formats mxfp4 --contexts 32000 109440 --configs "$MX" 2>&1 | grep -v Warn | tail -15
timeout 100 python3 -m mla_kernels.lab.tune $out/tune_mxfp4_glm5.csv --designs hopper_ws --shapes glm-5-style --formats mxfp4 --contexts 32000 --configs "$MX" 2>&1 | grep -v Warn | tail -8
echo "== ab $(date +%T)"
timeout 330 python3 scripts/ab_timing.py $out/ab_mxfp4.csv --tree 1e8bf8d02209=$OLD --tree $(python3 -m mla_kernels.lab.provenance)=. \
  --points 'kimi/mxfp4/fp8/p1/32000' 'kimi/mxfp4/fp8/p1/65536' 'kimi/mxfp4/fp8/p1/109440' 'kimi/mxfp4/fp8/p1/32000/wide' \
  'kimi/fp8_row/fp8/p1/32000' 'kimi/fp8_row/fp8/p1/109440' 'glm-5-style/mxfp4/fp8/p1/32000' 'glm-5-style/fp8_row/fp8/p1/32000' 2>&1 | grep -v Warn | tail -40
echo "== done $(date +%T)"
