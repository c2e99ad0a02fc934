#!/usr/bin/env bash
# A bf16 weight over an fp8 cache, auto's configs, 32000 tokens: bf16 and FP8 outputs, one
# profiled launch each, after a warm-up launch.
set -u
out=$1
python3 -m mla_kernels.lab.provenance > $out/stamp.txt 2>&1
ncu --version >> $out/stamp.txt 2>&1
for oc in bfloat16:r6g2L float8_e4m3fn:r7g2L1; do o=${oc%:*}; c=${oc#*:}
  python3 -m mla_kernels.lab.diagnostics.profile_hopper_ws 32000 bf16 fp8 --config $c --out-dtype $o
  timeout 200 ncu --kernel-name hopper_ws_kernel --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --section SchedulerStats \
    --clock-control none -o /tmp/p_$o python3 -m mla_kernels.lab.diagnostics.profile_hopper_ws 32000 bf16 fp8 \
    --config $c --out-dtype $o >> $out/ncu_log.txt 2>&1
  ncu --import /tmp/p_$o.ncu-rep --page source --csv --print-source sass > $out/source_$o.csv 2>&1
  gzip $out/source_$o.csv
  ncu --import /tmp/p_$o.ncu-rep --page details --csv > $out/details_$o.csv 2>&1
done
ls -la $out; tail -5 $out/ncu_log.txt
