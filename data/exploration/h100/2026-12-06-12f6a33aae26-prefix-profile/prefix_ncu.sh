set -u
out=$1
ncu --version > $out/stamp.txt 2>&1
for t in 64,32,4,3 128,64,8,3; do
  timeout 150 ncu --kernel-name prefix_attention_kernel --launch-skip 1 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy \
    --clock-control none -o /tmp/p_${t//,/x} python3 .probe/prefix_ncu.py 32000 128 $t >> $out/ncu_log.txt 2>&1
  ncu --import /tmp/p_${t//,/x}.ncu-rep --page details --csv > $out/details_${t//,/x}.csv 2>&1
  ncu --import /tmp/p_${t//,/x}.ncu-rep --page source --csv --print-source sass > $out/source_${t//,/x}.csv 2>&1; gzip $out/source_${t//,/x}.csv
done
tail -5 $out/ncu_log.txt
timeout 100 ncu --kernel-name merge_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
  --clock-control none -o /tmp/p_merge python3 .probe/prefix_ncu.py 32000 128 >> $out/ncu_log.txt 2>&1
ncu --import /tmp/p_merge.ncu-rep --page details --csv > $out/details_merge.csv 2>&1
