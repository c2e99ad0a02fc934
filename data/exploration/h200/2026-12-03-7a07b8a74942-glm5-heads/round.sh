#!/usr/bin/env bash
# The round: GLM-5-style heads on hopper_ws. GPU tests (8 shards) beside compile
# warm-up runs, then the config search at 32000 / 109440 tokens.
set -u
out=$1
python3 -m mla_kernels.lab.provenance > $out/stamp.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> $out/stamp.txt 2>&1
T=tests/designs/test_hopper_ws_wide_heads.py
python3 -m pytest -q --co -p no:cacheprovider $T 2>/dev/null | grep '::' > /tmp/ids
n=8
for ((k = 0; k < n; k++)); do
  awk -v n=$n -v k=$k '(NR - 1) % n == k' /tmp/ids > /tmp/ids$k
  mapfile -t shard < /tmp/ids$k
  timeout 400 python3 -m pytest -q -p no:cacheprovider "${shard[@]}" > /tmp/t$k.log 2>&1 &
done
R4='[{"ring_depth":4},{"ring_depth":6},{"ring_depth":6,"mma_groups":2},{"ring_depth":6,"mma_groups":2,"latent_in_registers":true}]'
R3='[{"ring_depth":3},{"ring_depth":4},{"ring_depth":6}]'
F8='[{"ring_depth":4},{"ring_depth":6},{"ring_depth":6,"mma_groups":2,"latent_in_registers":true}]'
TUNE="python3 -m mla_kernels.lab.tune"
G="--designs hopper_ws --shapes glm-5-style"
# compile warm-up (rows thrown away)
timeout 400 $TUNE /tmp/w1.csv $G --formats fp8_row --contexts 2048 --configs "$R4" > /tmp/w1.log 2>&1 &
timeout 400 $TUNE /tmp/w2.csv $G --formats fp8_block bf16 mxfp4 --contexts 2048 --configs "$R3" > /tmp/w2.log 2>&1 &
timeout 400 $TUNE /tmp/w3.csv $G --formats fp8_row fp8_block --contexts 2048 --configs "$F8" --out-dtype float8_e4m3fn > /tmp/w3.log 2>&1 &
wait
{ for ((k = 0; k < n; k++)); do echo "==== shard $k"; cat /tmp/t$k.log; done; } > $out/pytest_gpu_wide_heads.log
grep -hE "passed|failed|error" /tmp/t*.log
tail -3 /tmp/w*.log
echo "== search $(date +%T)"
$TUNE $out/tune_glm5.csv $G --formats fp8_row --contexts 32000 109440 --configs "$R4" 2>&1 | grep -v Warn | tail -8
$TUNE $out/tune_glm5.csv $G --formats fp8_block bf16 mxfp4 --contexts 32000 --configs "$R3" 2>&1 | grep -v Warn | tail -9
$TUNE $out/tune_glm5_fp8out.csv $G --formats fp8_row fp8_block --contexts 32000 --configs "$F8" --out-dtype float8_e4m3fn 2>&1 | grep -v Warn | tail -6
echo "== done $(date +%T)"
