"""The issue-4 matrix on the live GPU: every target configuration, every design, the torch
paths, one run. Writes OUTDIR/perf_matrix.csv (tidy rows, bench schema).
Usage: MLA_COMMIT=<sha> python scripts/perf_matrix.py OUTDIR"""
import sys
import time

import pandas as pd

from mla_kernels import bench

KIMI = "kimi-k3-tp8"
RAGGED8 = (512, 1024, 2048, 4096, 8192, 16384, 3000, 700)
ALL = ("serial", "chunked", "tiled", "tiled_tma", "hopper_ws", "auto")
FAST = ("chunked", "tiled", "tiled_tma", "auto")
FP8_ROW = ("chunked", "tiled", "tiled_tma", "hopper_ws", "auto")

out = sys.argv[1]
t0 = time.time()
ceil = bench.measure_ceilings()
print({k: round(v, 2) for k, v in ceil.items()}, flush=True)
rows = bench.run_points([bench.Point(KIMI, (4096,), "fp8_row", "fp8", 1, ALL)], ceilings=ceil,
                        graph8=True, design_graphs=True, progress=False)
pts = [bench.Point(KIMI, (c,), "fp8_row", "fp8", 1, ALL) for c in (32000, 65536, 109440)]
pts += [bench.Point(KIMI, (c,), f, "fp8", 1, FAST) for f in ("fp8_block", "bf16", "mxfp4")
        for c in (32000, 65536)]
pts += [bench.Point(KIMI, RAGGED8, "fp8_row", "fp8", 1, FP8_ROW)]
pts += [bench.Point(s, (32000,), "fp8_row", "fp8", 1, FP8_ROW)
        for s in ("deepseek-v3-tp8", "deepseek-v3-tp1")]
for p in pts:
    rows += bench.run_points([p], ceilings=ceil, design_graphs=True, progress=False)
    print(f"{p.weight_format} {p.shape} {sum(p.contexts)} done {time.time() - t0:.0f}s", flush=True)
df = pd.DataFrame(rows)
df.to_csv(f"{out}/perf_matrix.csv", index=False)
pd.set_option("display.width", 250)
print(df[["model", "weight_format", "ctx", "variant", "timing", "median_us", "floor_us",
          "roof_fraction", "correct"]].to_string())
