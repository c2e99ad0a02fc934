"""Search launch configs of each design per weight format on the live GPU; prints the best
per (format, cache, ctx) and writes every row to OUTDIR/tune.csv.
Usage: python scripts/tune.py OUTDIR [--designs tiled ...] [--formats fp8_row ...]
       [--contexts 32000 ...] [--shapes kimi-k3-tp8 ...]"""
import argparse
import time

import pandas as pd

from mla_kernels import bench
from mla_kernels.designs import LaunchConfig

SEARCH = {
    "tiled": [LaunchConfig(chunk_tokens=bm, num_warps=w, num_stages=st, split_parts=sp)
              for bm, w, st, sp in ((64, 4, 2, False), (128, 8, 2, False), (128, 4, 2, True),
                                    (128, 8, 2, True), (128, 8, 3, True), (64, 4, 2, True))],
    "chunked": [LaunchConfig(num_warps=w, num_stages=st) for w, st in ((4, 2), (4, 3), (8, 2))],
    "serial": [LaunchConfig(num_warps=w, num_stages=st) for w, st in ((4, 2), (4, 3), (8, 2))],
    "hopper_ws": [LaunchConfig(stages=s) for s in (2, 3, 4)],
}
FORMATS = ("fp8_row", "fp8_block", "bf16", "mxfp4")

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--designs", nargs="+", default=["tiled", "chunked", "serial"])
ap.add_argument("--formats", nargs="+", default=list(FORMATS))
ap.add_argument("--contexts", nargs="+", type=int, default=[32000])
ap.add_argument("--shapes", nargs="+", default=["kimi-k3-tp8"])
a = ap.parse_args()

t0 = time.time()
ceil = bench.measure_ceilings()
rows = []
for shape in a.shapes:
    for fmt in a.formats:
        for design in a.designs:
            for cfg in SEARCH[design]:
                # serial is ~10x slower than the rest: tuned at the short context only
                ctxs = a.contexts if design != "serial" else (4096,)
                for ctx in ctxs:
                    pt = bench.Point(shape, (ctx,), fmt, "fp8", 1, (design,),
                                     configs={design: cfg})
                    rows += bench.run_points([pt], ceilings=ceil, torch_paths=False,
                                             progress=False)
        print(f"{shape} {fmt} done {time.time() - t0:.0f}s", flush=True)
df = pd.DataFrame(rows)
df.to_csv(f"{a.out}/tune.csv", index=False)
pd.set_option("display.width", 250)
print(df[["model", "weight_format", "ctx", "variant", "median_us", "roof_fraction", "correct",
          "error", "config"]].sort_values(["model", "weight_format", "ctx", "median_us"])
      .to_string())
