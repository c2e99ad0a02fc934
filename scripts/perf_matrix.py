"""The performance matrix on the live GPU (``mla_kernels.matrix``): every point's designs and
torch paths, plain calls and from a CUDA graph, each checked against the reference. Each
point's rows are appended to OUT.csv as soon as they are measured (atomically).

Usage: MLA_COMMIT=<sha> python scripts/perf_matrix.py OUT.csv [--points GLOB ...] [--list]
"""
import argparse
import time

from mla_kernels import bench, matrix
from mla_kernels.measurements import append_csv_atomic, frame

ap = argparse.ArgumentParser()
ap.add_argument("out", help="CSV to append the rows to")
ap.add_argument("--points", nargs="+", help="glob patterns over the point names")
ap.add_argument("--list", action="store_true", help="print the selected points and exit")
ap.add_argument("--graph8", action="store_true", help="also time 8 launches in one graph")
a = ap.parse_args()

chosen = matrix.select(a.points)
if a.list:
    for name, pt in chosen.items():
        print(f"{name:40s} {' '.join(pt.variants)}")
    raise SystemExit(0)
t0 = time.time()
ceil = bench.measure_ceilings()
print({k: round(v, 2) for k, v in ceil.items()}, flush=True)
for name, pt in chosen.items():
    rows = frame(bench.run_points([pt], ceilings=ceil, design_graphs=True, graph8=a.graph8,
                                  progress=False))
    append_csv_atomic(rows, a.out)
    g = rows[rows.timing == "graph"].set_index("variant")
    best = g["median_us"].min() if not g.empty else float("nan")
    bad = rows[~rows.correct.astype(bool)]["variant"].unique().tolist()
    print(f"{name:36s} {time.time() - t0:5.0f}s  best graph {best:8.1f} us  "
          + " ".join(f"{v}={g.loc[v, 'roof_fraction']:.2f}" for v in g.index)
          + (f"  WRONG: {bad}" if bad else ""), flush=True)
