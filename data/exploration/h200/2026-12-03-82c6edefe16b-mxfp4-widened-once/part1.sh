#!/usr/bin/env bash
# MXFP4 widened once a call, part 1: GPU tests beside compile warm-ups of what part 2 times.
set -u
out=$1
OLD=.ab/1e8bf8d
python3 -m mla_kernels.lab.provenance > $out/stamp.txt 2>&1
python3 -m pytest -q --co -p no:cacheprovider tests/designs -k "mxfp4 or widen" 2>/dev/null | grep '::' > /tmp/ids
wc -l < /tmp/ids
n=7
for ((k = 0; k < n; k++)); do
  awk -v n=$n -v k=$k '(NR - 1) % n == k' /tmp/ids > /tmp/ids$k
  mapfile -t shard < /tmp/ids$k
  timeout 330 python3 -m pytest -q -p no:cacheprovider "${shard[@]}" > /tmp/t$k.log 2>&1 &
done
TUNE="python3 -m mla_kernels.lab.tune"
MX='[{"ring_depth":4},{"ring_depth":6},{"ring_depth":4,"mma_groups":2},{"ring_depth":6,"mma_groups":2},{"ring_depth":4,"mxfp4_widening":"kernel"}]'
G='[{"ring_depth":4},{"ring_depth":6,"mma_groups":2,"latent_in_registers":true}]'
for shape in kimi-k3-tp8 glm-5-style; do
  timeout 330 $TUNE /tmp/w.csv --designs hopper_ws --shapes $shape --formats mxfp4 --contexts 2048 --configs "$MX" > /dev/null 2>&1 &
  for tree in . $OLD; do
    PYTHONPATH=$tree timeout 330 $TUNE /tmp/w.csv --designs hopper_ws --shapes $shape --formats fp8_row --contexts 2048 --configs "$G" > /dev/null 2>&1 &
  done
  PYTHONPATH=$OLD timeout 330 $TUNE /tmp/w.csv --designs hopper_ws --shapes $shape --formats mxfp4 --contexts 2048 --configs '[{"ring_depth":4}]' > /dev/null 2>&1 &
done
timeout 330 python3 reports/dev/stress.py > $out/stress_mxfp4.txt 2>&1 &
wait
{ for ((k = 0; k < n; k++)); do echo "==== shard $k"; cat /tmp/t$k.log; done; } > $out/pytest_gpu_mxfp4.log
grep -hE "passed|failed|error" /tmp/t*.log
grep -h -B2 -A30 "^____\|Error" /tmp/t*.log | head -120
tail -4 $out/stress_mxfp4.txt
echo "== done $(date +%T)"
