"""The performance matrix on the live GPU (``mla_kernels.lab.matrix``): every point's designs and
torch paths, plain calls and from a CUDA graph, each checked against the reference. Each
point's rows are appended to ROWS.csv as soon as they are measured (atomically). The
targets (``matrix.TARGETS``) are timed at the full budget, the other rows at a shorter one
(``matrix.budget``); ``--full-timing`` times every row at the full one, as the run's
``budget`` step does at one point to show the two agree.

Usage: python scripts/perf_matrix.py ROWS.csv [--points GLOB ...] [--mma-rate CSV] [--list]

``--mma-rate`` gives the tensor cores' own rates (``lab.diagnostics.mma_rate``'s rows, measured
by the run's ``mma`` step): the rows' ``tc_tflops`` and ``tc_floor_us`` come from them.

For rounds of kernel work between committed runs (the entries of docs/log/ quote their console
output; their rows stay out of data/h200/), ``--variants`` times only the named designs (no
torch paths) and ``--rows`` prints every row; ``--config DESIGN=REPR`` launches a design with
another config than the default (its repr, as the CSVs' ``config`` column holds it, e.g.
``hopper_ws='HopperWSConfig(mma_groups=2, ring_depth=6)'``); ``--empty`` times an empty Triton
launch the way the designs' graph rows are timed, and nothing else.
"""
import argparse
import time
from dataclasses import replace

from mla_kernels.designs import DESIGNS
from mla_kernels.designs.design import parse_config
from mla_kernels.lab import bench, host_cost, matrix, timing
from mla_kernels.lab.clock import ClockLog
from mla_kernels.lab.inputs import HostDraws
from mla_kernels.lab.measurements import append_csv_atomic, frame

ap = argparse.ArgumentParser()
ap.add_argument("out", nargs="?", help="CSV to append the rows to")
ap.add_argument("--points", nargs="+", help="glob patterns over the point names")
ap.add_argument("--list", action="store_true", help="print the selected points and exit")
ap.add_argument("--graph8", action="store_true", help="also time 8 launches in one graph")
ap.add_argument("--variants", help="only these designs, comma-separated, and no torch path")
ap.add_argument("--rows", action="store_true", help="print every row, not a line a point")
ap.add_argument("--config", action="append", default=[], metavar="DESIGN=REPR",
                help="launch DESIGN with this config (repeatable)")
ap.add_argument("--full-timing", action="store_true",
                help="every row at the full timing budget (the matrix times only its targets so)")
ap.add_argument("--mma-rate", metavar="CSV",
                help="the tensor cores' rates (lab.diagnostics.mma_rate's rows) for tc_floor_us")
ap.add_argument("--empty", action="store_true",
                help="time host_cost.empty_kernel on 132 programs, plain and from a CUDA graph")
a = ap.parse_args()

if a.empty:
    launch = host_cost.empty_launch()
    print(f"empty launch: graph {timing.median_us(timing.graphed(launch)):.2f} us, "
          f"plain {timing.median_us(launch):.2f} us")
    raise SystemExit(0)
chosen = matrix.select(a.points)
configs = {}
for item in a.config:
    name, _, text = item.partition("=")
    if name not in DESIGNS:
        ap.error(f"--config: expected DESIGN=REPR with DESIGN one of {sorted(DESIGNS)}, got {item!r}")
    configs[name] = parse_config(DESIGNS[name].config_type, text)
if configs:
    chosen = {name: replace(pt, configs={**pt.configs, **configs}) for name, pt in chosen.items()}
if a.variants:
    keep = a.variants.split(",")
    chosen = {name: replace(pt, variants=tuple(v for v in pt.variants if v in keep))
              for name, pt in chosen.items()}
if a.list:
    for name, pt in chosen.items():
        print(f"{name:40s} {' '.join(pt.variants)}")
    raise SystemExit(0)
if not a.out:
    ap.error("ROWS.csv (the CSV to append the rows to) is needed")
t0 = time.time()
ceil = bench.measure_ceilings(tensor_cores=a.mma_rate)
print({k: round(v, 2) for k, v in ceil.items()}, flush=True)
# One SM-clock sampler for every point (each row reads the samples of its own window): a
# sampler started per point costs nvidia-smi's start each time. The host's draws of each
# point's input sets are kept for a later point with the same inputs (an FP8-output point's
# are its bf16-output twin's): copied again, not drawn again.
draws = HostDraws(max_bytes=bench.MATRIX_DRAW_BYTES)
with ClockLog() as sm_clock:
    for name, pt in chosen.items():
        rows = frame(bench.run_points([pt], ceilings=ceil, torch_paths=not a.variants,
                                      design_graphs=True, graph8=a.graph8, progress=False,
                                      budget=None if a.full_timing else matrix.budget,
                                      clock=sm_clock, draws=draws))
        append_csv_atomic(rows, a.out)
        if a.rows:
            for _, r in rows.iterrows():
                err = r.error if isinstance(r.error, str) else ""
                # FP8 outputs: the share of values exact to the contract's rule beside the error.
                fp8 = (f"exact={r.fp8_exact_share:.4f} steps={r.fp8_max_steps:.0f} "
                       if r.fp8_exact_share == r.fp8_exact_share else "")
                print(f"{name:36s} {r.variant:10s} {r.timing:8s} {r.median_us:9.1f} us  floor "
                      f"{r.floor_us:8.1f}  frac {r.roof_fraction:.3f}  ok={r.correct} "
                      f"err={r.max_rel_err:.2g} {fp8}{err}", flush=True)
            continue
        g = rows[rows.timing == "graph"].set_index("variant")
        best = g["median_us"].min() if not g.empty else float("nan")
        bad = rows[~rows.correct.astype(bool)]["variant"].unique().tolist()
        print(f"{name:36s} {time.time() - t0:5.0f}s  best graph {best:8.1f} us  "
              + " ".join(f"{v}={g.loc[v, 'roof_fraction']:.2f}" for v in g.index)
              + (f"  WRONG: {bad}" if bad else ""), flush=True)
