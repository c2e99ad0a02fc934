#!/usr/bin/env bash
# A run on the H200 (offline): install the carried notebook wheels, then run what a committed
# run needs. Usage (from the repository root there, .whl carried):
#   bash scripts/device_run.sh [--out DIR] <commit> [tests] [report] [matrix] [host] [ab]
# Results land in DIR (default reports/device_run/, which git ignores; created if missing):
# pytest_gpu.log, report_h200.tar.gz, perf_matrix_<part>.csv, host_cost.csv +
# host_profile.txt + eager_layers.csv, ab_timing.csv.
# MATRIX_POINTS (glob patterns, default all) and MATRIX_PART name a part of the matrix;
# AB_OLD=<label>=<path> is the tree timed against this one (default .ab/6a3775e);
# HOST_BEFORE=<label>=<path> a tree whose host cost is timed beside this one's; TESTS
# (files) and TESTS_K (a -k expression) choose the tests;
# *_TIMEOUT (seconds) bound the steps.
set -uo pipefail
out=reports/device_run
if [[ ${1:-} == --out ]]; then out=${2:?--out needs a folder}; shift 2; fi
sha=${1:?usage: device_run.sh [--out DIR] <commit> [steps]}; shift
steps=${*:-tests matrix report}  # the report's formats figure reads the matrix
for step in $steps; do
  case $step in tests|report|matrix|host|ab) ;; *) echo "unknown step $step"; exit 2 ;; esac
done
mkdir -p "$out" || exit 1
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site JUPYTER_PATH=/tmp/site/share/jupyter
# The rows stamp the commit their package files match (provenance-manifest.json, written in
# the checkout by `python -m mla_kernels.lab.provenance --manifest`): it must be <commit>.
stamp=$(python3 -m mla_kernels.lab.provenance) || exit 2
if [[ $stamp == *+* || ( $stamp != "$sha"* && $sha != "$stamp"* ) ]]; then
  echo "commit: expected the tree of $sha (its manifest matching), got stamp $stamp"; exit 2
fi
# The ipykernel spec found under JUPYTER_PATH starts "python": make it this python3.
mkdir -p /tmp/bin && ln -sf "$(command -v python3)" /tmp/bin/python && export PATH=/tmp/bin:$PATH
for step in $steps; do
  case $step in
    tests)  timeout ${TESTS_TIMEOUT:-420} python3 -m pytest -q -p no:cacheprovider \
              ${TESTS:-tests/test_kernels.py tests/test_gpu_large.py tests/test_validation.py \
              tests/test_eager.py tests/test_hopper_ws.py tests/test_designs.py \
              tests/test_checks.py} ${TESTS_K:+-k "$TESTS_K"} 2>&1 \
              | tee "$out/pytest_gpu.log" | tail -12 ;;
    report) timeout ${REPORT_TIMEOUT:-360} python3 -m mla_kernels.review.report --config h200 \
              --archive "$out/report_h200.tar.gz" --no-cell-progress 2>&1 | tail -12 ;;
    matrix) # Also under reports/matrix/: the report's formats notebook draws from it.
            mkdir -p reports/matrix
            timeout ${MATRIX_TIMEOUT:-300} python3 scripts/perf_matrix.py \
              "reports/matrix/perf_matrix_${MATRIX_PART:-all}.csv" \
              ${MATRIX_POINTS:+--points $MATRIX_POINTS} 2>&1 | tail -60
            cp reports/matrix/perf_matrix_${MATRIX_PART:-all}.csv "$out/" ;;
    host)   timeout ${HOST_TIMEOUT:-300} python3 scripts/host_cost.py "$out" \
              ${HOST_BEFORE:+--before "$HOST_BEFORE"} 2>&1 | tail -60 ;;
    ab)     timeout ${AB_TIMEOUT:-240} python3 scripts/ab_timing.py "$out/ab_timing.csv" \
              --tree "${AB_OLD:-6a3775e=.ab/6a3775e}" --tree "$sha=." 2>&1 | tail -30 ;;
  esac
done
