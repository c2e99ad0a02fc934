#!/usr/bin/env bash
# A run on the H200 (offline): install the carried notebook wheels, then the steps asked for,
# each timed into steps.csv (step, seconds, exit status) in the output folder.
usage() {
  cat >&2 <<'EOF'
usage: bash scripts/device_run.sh [--out DIR] <commit> [step ...]
       bash scripts/device_run.sh --plan [step ...]
Steps (default: run):
  run        precompile, mma, matrix, budget, report and host: a committed run in one step
  precompile compile every kernel the run launches, on all cores (lab.precompile)
  mma        the tensor cores' own rate at the designs' tile shape (mma_rate.csv), which the
             matrix's and the report's tensor-core floors use
  matrix     the performance matrix (scripts/perf_matrix.py), perf_matrix_all.csv
  budget     one point with every row at the full timing (budget_check.csv)
  report     the papermill batch, --config h200 (report_h200.tar.gz)
  host       host cost of a cached call (host_cost.csv, host_profile.txt, eager_layers.csv)
  tests      the GPU tests' quick tier (-m smoke, in TESTS_SHARDS processes): pytest_gpu.log
  tests-all  the whole GPU test suite: pytest_gpu_all.log
  ab         this tree against AB_OLD=<label>=<path> (ab_timing.csv)
  context    the context path: its map (lab.context_map: context_map.csv, context_map_log.txt),
             the context layer's GPU tests (pytest_gpu_context.log) and what bounds the expanded
             attention (lab.diagnostics.expanded_bounds: expanded_bounds.csv and its log), each
             within the limit
The tree's package files must match provenance-manifest.json's <commit> (written in the
checkout by `python -m mla_kernels.lab.provenance --manifest`). Results land in DIR (default
reports/device_run/). --plan prints each step's expected seconds, from the latest committed
run's steps.csv under data/h200/ (the step's limit where it has none), and runs nothing.
Environment: MATRIX_POINTS (globs), HOST_BEFORE=<label>=<path>, TESTS_K (a -k expression),
AB_POINTS (matrix point globs for ab, instead of its 32000 and 109440 tokens),
<STEP>_TIMEOUT (seconds; e.g. MATRIX_TIMEOUT, TESTS_ALL_TIMEOUT).
EOF
  exit 2
}
set -uo pipefail
STEPS="run precompile mma matrix budget report host tests tests-all ab context"
RUN_STEPS="precompile mma matrix budget report host"
limit() {  # a step's time limit, seconds
  local v="${1^^}_TIMEOUT"; v=${v//-/_}
  local d
  case $1 in
    install) d=120 ;; precompile) d=180 ;; mma) d=60 ;; matrix) d=300 ;; budget) d=60 ;; report) d=240 ;;
    host) d=150 ;; tests) d=240 ;; tests-all) d=580 ;; ab) d=300 ;; context) d=300 ;; *) d=0 ;;
  esac
  echo "${!v:-$d}"
}
expand() {  # the steps as they run: run's parts in its place
  local s
  for s in "$@"; do
    if [[ $s == run ]]; then echo $RUN_STEPS; else echo "$s"; fi
  done
}
check_steps() {
  local s
  for s in "$@"; do
    [[ " $STEPS " == *" $s "* ]] || { echo "step: expected one of $STEPS, got $s (unknown step $s)"; exit 2; }
  done
}

# The quick tier in TESTS_SHARDS pytest processes at once (default 6), the collected tests
# dealt out in turn, so the slowest-compiling design's tests (collected together) spread over
# every shard; their logs, in order, make one log. Status: the worst shard's.
run_sharded() {
  local lim=$1 log=$2 n=${TESTS_SHARDS:-6} ids total k pids=() rc=0 r shard
  ids=$(python3 -m pytest -q --co -p no:cacheprovider -m smoke tests ${TESTS_K:+-k "$TESTS_K"} \
        2>/dev/null | grep '::')
  total=$(printf '%s\n' "$ids" | grep -c '::')
  [[ $total -gt 0 ]] || { echo "tests: no test collected"; return 1; }
  for ((k = 0; k < n; k++)); do
    printf '%s\n' "$ids" | awk -v n="$n" -v k="$k" \
      '(NR - 1) % n == k' > "$log.ids$k"
    [[ -s $log.ids$k ]] || continue
    mapfile -t shard < "$log.ids$k"  # node ids may hold spaces: one argument a line
    timeout "$lim" python3 -m pytest -q -p no:cacheprovider "${shard[@]}" > "$log.$k" 2>&1 &
    pids+=("$k:$!")
  done
  for p in "${pids[@]}"; do
    wait "${p#*:}"; r=$?; [[ $r -gt $rc ]] && rc=$r
  done
  : > "$log"
  for p in "${pids[@]}"; do
    k=${p%%:*}; { echo "==== shard $k of $n"; cat "$log.$k"; } >> "$log"; rm -f "$log.$k" "$log.ids$k"
  done
  grep -E "passed|failed|error" "$log" | tail -$n
  return $rc
}

[[ $# -eq 0 || $1 == -h || $1 == --help ]] && usage
if [[ $1 == --plan ]]; then
  shift; check_steps "$@"
  # The run measured last (its matrix rows' newest date: two runs of one day are not in
  # name order), the last by name among equals.
  last=$(for f in data/h200/*/steps.csv; do
           [[ -f $f ]] || continue
           d=$(awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) if ($i == "date") c = i; next}
                        c && $c > m {m = $c} END {print m}' "${f%/*}"/perf_matrix*.csv 2>/dev/null)
           echo "${d:-0} $f"
         done | sort | tail -1 | cut -d' ' -f2)
  echo "expected seconds per step${last:+ (from $last; limits where it has none)}:"
  total=0
  for s in install $(expand ${*:-run}); do
    t=""
    [[ -n $last ]] && t=$(awk -F, -v s="$s" '$1 == s && $3 == 0 {print int($2 + 0.5)}' "$last" | tail -1)
    src="measured"; [[ -z $t ]] && { t=$(limit "$s"); src="limit"; }
    printf '  %-10s %5s s  (%s)\n' "$s" "$t" "$src"
    total=$((total + t))
  done
  echo "  total      $total s"
  exit 0
fi
out=reports/device_run
if [[ $1 == --out ]]; then out=${2:-}; [[ -n $out ]] || usage; shift 2; fi
[[ $# -ge 1 && $1 != -* ]] || usage
sha=$1; shift
[[ $sha =~ ^[0-9a-f]{7,40}$ ]] || { echo "commit: expected 7 to 40 hex digits, got $sha"; exit 2; }
steps=${*:-run}
check_steps $steps
if [[ " $steps " == *" ab "* && -z ${AB_OLD:-} ]]; then
  echo "AB_OLD: expected <label>=<path> of the tree to time against, got nothing"; exit 2
fi
mkdir -p "$out" || exit 1
csv=$out/steps.csv
[[ -s $csv ]] || echo "step,seconds,status" > "$csv"
now() { date +%s%N; }
begin=$(now)
record() {  # step, its start (ns), exit status
  awk -v s="$1" -v a="$2" -v b="$(now)" -v r="$3" 'BEGIN {printf "%s,%.1f,%s\n", s, (b - a) / 1e9, r}' >> "$csv"
}

export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
t0=$(now)
timeout "$(limit install)" python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
rc=$?; record install "$t0" $rc; [[ $rc == 0 ]] || exit 1
export PYTHONPATH=$PWD:/tmp/site JUPYTER_PATH=/tmp/site/share/jupyter
# A copy that carries its manifest is checked against it alone: a .git beside the files may
# be an older checkout's (a newer tree copied over it), whose HEAD the files no longer are.
[[ -f provenance-manifest.json ]] && export GIT_DIR=/nonexistent/.git
# The rows stamp the commit their covered files match: it must be <commit>.
stamp=$(python3 -m mla_kernels.lab.provenance) || exit 2
if [[ $stamp == *+* || ( $stamp != "$sha"* && $sha != "$stamp"* ) ]]; then
  echo "commit: expected the tree of $sha (its manifest matching), got stamp $stamp"; exit 2
fi
# The ipykernel spec found under JUPYTER_PATH starts "python": make it this python3.
mkdir -p /tmp/bin && ln -sf "$(command -v python3)" /tmp/bin/python && export PATH=/tmp/bin:$PATH
mkdir -p reports/matrix  # the report's formats notebook draws the matrix from here

mma_arg() {  # the tensor cores' rates, where the mma step measured them
  [[ -s reports/matrix/mma_rate.csv ]] && echo "--mma-rate reports/matrix/mma_rate.csv"
}
status=0
for step in $(expand $steps); do
  t0=$(now)
  lim=$(limit "$step")
  echo "== $step (limit ${lim} s)"
  case $step in
    precompile) timeout "$lim" python3 -m mla_kernels.lab.precompile ${MATRIX_POINTS:+--points $MATRIX_POINTS} \
                  --report configs/h200.yaml --host 2>&1 | tail -20 ;;
    mma)        rm -f reports/matrix/mma_rate.csv
                timeout "$lim" python3 -m mla_kernels.lab.diagnostics.mma_rate \
                  reports/matrix/mma_rate.csv --rep-ms 800 2>&1 | tail -8
                rc=$?; cp reports/matrix/mma_rate.csv "$out/" 2>/dev/null; (exit $rc) ;;
    matrix)     rm -f reports/matrix/perf_matrix_all.csv
                timeout "$lim" python3 scripts/perf_matrix.py reports/matrix/perf_matrix_all.csv \
                  ${MATRIX_POINTS:+--points $MATRIX_POINTS} $(mma_arg) 2>&1 | tail -60
                rc=$?; cp reports/matrix/perf_matrix_all.csv "$out/"; (exit $rc) ;;
    budget)     rm -f "$out/budget_check.csv"
                timeout "$lim" python3 scripts/perf_matrix.py "$out/budget_check.csv" --full-timing \
                  --rows --points kimi/fp8_row/fp8/p1/32000 $(mma_arg) 2>&1 | tail -20 ;;
    report)     timeout "$lim" python3 -m mla_kernels.review.report --config h200 \
                  --archive "$out/report_h200.tar.gz" --no-cell-progress \
                  $(mma_arg | sed 's/^--mma-rate /-p mma_rate_csv=/') 2>&1 | tail -12 ;;
    host)       timeout "$lim" python3 scripts/host_cost.py "$out" \
                  ${HOST_BEFORE:+--before "$HOST_BEFORE"} 2>&1 | tail -40 ;;
    tests)      run_sharded "$lim" "$out/pytest_gpu.log" ;;
    tests-all)  timeout "$lim" python3 -m pytest -q -p no:cacheprovider ${TESTS_K:+-k "$TESTS_K"} \
                  tests/designs tests/call tests/core/test_validation.py tests/lab/test_checks.py 2>&1 | tee "$out/pytest_gpu_all.log" | tail -12 ;;
    context)    rm -f "$out/context_map.csv"
                timeout "$lim" python3 -m mla_kernels.lab.context_map --out "$out" \
                  > "$out/context_map_log.txt" 2>&1
                rc=$?; tail -4 "$out/context_map_log.txt"
                timeout "$lim" python3 -m pytest -q -p no:cacheprovider tests/context/test_gpu_context.py \
                  tests/context/test_attention.py > "$out/pytest_gpu_context.log" 2>&1
                r=$?; tail -2 "$out/pytest_gpu_context.log"; rc=$((rc > r ? rc : r))
                # What bounds the expanded attention at the target's point and at 512 queries,
                # on the default's tiles and on 128-key tiles with K and V freed apart.
                timeout "$lim" python3 -m mla_kernels.lab.diagnostics.expanded_bounds --out "$out" \
                  --contexts 32000 --new-tokens 128 512 --schedules hopper hopper,2,n128,apart \
                  > "$out/expanded_bounds_log.txt" 2>&1
                r=$?; tail -2 "$out/expanded_bounds_log.txt"; (exit $((rc > r ? rc : r))) ;;
    ab)         timeout "$lim" python3 scripts/ab_timing.py "$out/ab_timing.csv" \
                  --tree "$AB_OLD" --tree "$sha=." ${AB_POINTS:+--points $AB_POINTS} 2>&1 | tail -40 ;;
  esac
  rc=$?
  record "$step" "$t0" $rc
  [[ $rc == 0 ]] || status=1
done
[[ " $steps " == *" run "* ]] && record run "$begin" $status
cat "$csv"
exit $status
