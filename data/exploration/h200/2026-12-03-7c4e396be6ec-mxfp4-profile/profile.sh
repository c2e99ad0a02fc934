#!/usr/bin/env bash
set -u
out=$1
python3 -m mla_kernels.lab.provenance > $out/stamp.txt 2>&1
which ncu >> $out/stamp.txt 2>&1; ncu --version >> $out/stamp.txt 2>&1
# warm the compile first (outside the profile)
python3 -m mla_kernels.lab.diagnostics.profile_hopper_ws 32000 mxfp4 fp8
timeout 300 ncu --kernel-name hopper_ws_kernel --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section SchedulerStats \
  --clock-control none -o /tmp/mx python3 -m mla_kernels.lab.diagnostics.profile_hopper_ws 32000 mxfp4 fp8 > $out/ncu_log.txt 2>&1
ncu --import /tmp/mx.ncu-rep --page source --csv --print-source sass > $out/mx_source.csv 2>&1
ncu --import /tmp/mx.ncu-rep --page details --csv > $out/mx_details.csv 2>&1
cp /tmp/mx.ncu-rep $out/ 2>/dev/null
ls -la $out; head -c 600 $out/mx_source.csv; tail -5 $out/ncu_log.txt
