#!/usr/bin/env bash
# MXFP4 packed loader, round 3: GPU tests and a repeated check beside compile warm-ups, then the
# two trees timed side by side.
set -u
out=$1
OLD=.ab/e786fbf
python3 -m mla_kernels.lab.provenance > $out/stamp.txt 2>&1
python3 -m pytest -q --co -p no:cacheprovider tests/designs -k "mxfp4" 2>/dev/null | grep '::' > /tmp/ids
n=6
for ((k = 0; k < n; k++)); do
  awk -v n=$n -v k=$k '(NR - 1) % n == k' /tmp/ids > /tmp/ids$k
  mapfile -t shard < /tmp/ids$k
  timeout 300 python3 -m pytest -q -p no:cacheprovider "${shard[@]}" > /tmp/t$k.log 2>&1 &
done
TUNE="python3 -m mla_kernels.lab.tune"
G='[{"ring_depth":4},{"ring_depth":6,"mma_groups":2,"latent_in_registers":true}]'
for tree in . $OLD; do
  for shape in kimi-k3-tp8 glm-5-style; do
    PYTHONPATH=$tree timeout 300 $TUNE /tmp/w.csv --designs hopper_ws --shapes $shape --formats fp8_row --contexts 2048 --configs "$G" > /dev/null 2>&1 &
    PYTHONPATH=$tree timeout 300 $TUNE /tmp/w.csv --designs hopper_ws --shapes $shape --formats mxfp4 --contexts 2048 --configs '[{"ring_depth":4}]' > /dev/null 2>&1 &
  done
done
timeout 300 python3 reports/dev/stress.py > $out/stress_mxfp4.txt 2>&1 &
wait
{ for ((k = 0; k < n; k++)); do echo "==== shard $k"; cat /tmp/t$k.log; done; } > $out/pytest_gpu_mxfp4.log
grep -hE "passed|failed|error" /tmp/t*.log
echo "== ab $(date +%T)"
timeout 400 python3 scripts/ab_timing.py $out/ab_mxfp4.csv --tree e786fbf431ae=$OLD --tree $(python3 -m mla_kernels.lab.provenance)=. \
  --points 'kimi/mxfp4/fp8/p1/32000' 'kimi/mxfp4/fp8/p1/65536' 'kimi/mxfp4/fp8/p1/109440' 'kimi/mxfp4/fp8/p1/32000/wide' \
  'kimi/fp8_row/fp8/p1/32000' 'kimi/fp8_row/fp8/p1/109440' 'glm-5-style/mxfp4/fp8/p1/32000' 'glm-5-style/fp8_row/fp8/p1/32000' 2>&1 | grep -v Warn | tail -40
tail -4 $out/stress_mxfp4.txt
echo "== done $(date +%T)"
