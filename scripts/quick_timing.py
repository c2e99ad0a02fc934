"""Console timing of chosen designs at chosen points of the performance matrix, for rounds of
kernel work between committed runs: each row timed as the matrix times it (flushed, graph,
graph8; L2 flushed; checked against the reference), printed, and appended to OUT.csv with
its provenance (``MLA_COMMIT`` names an uncommitted tree). Rows of such rounds are quoted in
docs/perf-notes.md, not committed under data/h200/.

Usage (a GPU machine):
    python scripts/quick_timing.py OUT.csv hopper_ws,tiled 'kimi/fp8_row/fp8/p1/*' ...
    python scripts/quick_timing.py --empty    # an empty Triton launch, timed the same way
"""
import argparse
import time
from dataclasses import replace

import torch

from mla_kernels import bench, matrix
from mla_kernels.measurements import append_csv_atomic, frame


def empty_launch() -> None:
    """``bench.empty_kernel`` on 132 programs: the least a launch costs, plain and replayed
    from a CUDA graph (L2 flushed either way)."""
    t = [torch.empty(16, device="cuda") for _ in range(9)]

    def launch() -> None:
        bench.empty_kernel[(132,)](*t, *range(11), C0=1, C1=2, C2=3, C3=4)
    replay = bench._graphed(launch)
    print(f"empty launch: graph {bench._bench(replay):.2f} us, plain {bench._bench(launch):.2f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("variants", nargs="?", help="designs, comma-separated")
    ap.add_argument("points", nargs="*", help="matrix point patterns (matrix.select)")
    ap.add_argument("--empty", action="store_true", help="time an empty launch instead")
    a = ap.parse_args()
    if a.empty:
        empty_launch()
        return
    if not (a.out and a.variants and a.points):
        ap.error("OUT.csv, VARIANTS and at least one point pattern are needed")
    t0 = time.time()
    ceilings = bench.measure_ceilings()
    print({k: round(v, 2) for k, v in ceilings.items()}, flush=True)
    variants = tuple(a.variants.split(","))
    for name, pt in matrix.select(a.points).items():
        pt = replace(pt, variants=tuple(v for v in pt.variants if v in variants))
        rows = frame(bench.run_points([pt], ceilings=ceilings, torch_paths=False,
                                      design_graphs=True, progress=False))
        append_csv_atomic(rows, a.out)
        for _, r in rows.iterrows():
            err = r.error if isinstance(r.error, str) else ""
            print(f"{name:36s} {r.variant:10s} {r.timing:8s} {r.median_us:9.1f} us  floor "
                  f"{r.floor_us:8.1f}  frac {r.roof_fraction:.3f}  ok={r.correct} "
                  f"err={r.max_rel_err:.2g} {err}", flush=True)
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
