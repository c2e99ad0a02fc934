#!/usr/bin/env bash
# One call on the lent H200 (offline): install the carried notebook wheels, then run what a
# committed run needs. Usage (from the repository root there, .whl carried):
#   bash scripts/device_run.sh <commit> [report] [matrix] [tests]
# Results land in $OUT: report_h200.tar.gz, perf_matrix.csv, pytest_gpu.log.
# REPORT_TIMEOUT / MATRIX_TIMEOUT (seconds) bound the two long steps.
set -uo pipefail
sha=${1:?commit hash}; shift
steps=${*:-report matrix tests}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site JUPYTER_PATH=/tmp/site/share/jupyter
# The ipykernel spec found under JUPYTER_PATH starts "python": make it this python3.
mkdir -p /tmp/bin && ln -sf "$(command -v python3)" /tmp/bin/python && export PATH=/tmp/bin:$PATH
for step in $steps; do
  case $step in
    report) timeout ${REPORT_TIMEOUT:-300} python3 -m mla_kernels.report --config h200 --commit "$sha" \
              --archive "$OUT/report_h200.tar.gz" --no-cell-progress 2>&1 | tail -12 ;;
    matrix) MLA_COMMIT=$sha timeout ${MATRIX_TIMEOUT:-240} python3 scripts/perf_matrix.py "$OUT" 2>&1 | tail -40 ;;
    tests)  TRITON_INTERPRET=0 timeout 300 python3 -m pytest -q -p no:cacheprovider \
              tests/test_kernels.py tests/test_gpu_large.py tests/test_validation.py \
              tests/test_formats.py tests/test_hopper_ws.py 2>&1 | tee "$OUT/pytest_gpu.log" | tail -8 ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
