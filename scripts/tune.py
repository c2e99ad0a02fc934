"""Search launch configs of each design per weight format on the live GPU; prints the best
per (format, cache, ctx) and writes every row to OUTDIR/tune.csv.
Usage: python scripts/tune.py OUTDIR"""
import sys
import time

import pandas as pd

from mla_kernels import bench
from mla_kernels.designs import LaunchConfig

out = sys.argv[1]
t0 = time.time()
ceil = bench.measure_ceilings()
SEARCH = {
    "tiled": [LaunchConfig(chunk_tokens=bm, num_warps=w, num_stages=st, split_parts=sp)
              for bm, w, st, sp in ((64, 4, 2, False), (128, 8, 2, False), (128, 4, 2, True),
                                    (128, 8, 2, True), (128, 8, 3, True), (64, 4, 2, True))],
    "chunked": [LaunchConfig(num_warps=w, num_stages=st) for w, st in ((4, 2), (4, 3), (8, 2))],
    "serial": [LaunchConfig(num_warps=w, num_stages=st) for w, st in ((4, 2), (4, 3), (8, 2))],
}
rows = []
for fmt, cache in (("fp8_row", "fp8"), ("fp8_block", "fp8"), ("bf16", "fp8"), ("mxfp4", "fp8")):
    for design, cfgs in SEARCH.items():
        for cfg in cfgs:
            ctxs = (32000,) if design != "serial" else (4096,)
            for ctx in ctxs:
                pt = bench.Point("kimi-k3-tp8", (ctx,), fmt, cache, 1, (design,),
                                 configs={design: cfg})
                try:
                    rows += bench.run_points([pt], ceilings=ceil, torch_paths=False, progress=False)
                except Exception as e:  # a config that does not compile is a result too
                    print(fmt, design, cfg, "FAILED", type(e).__name__, str(e)[:120], flush=True)
    print(f"{fmt} done {time.time() - t0:.0f}s", flush=True)
df = pd.DataFrame(rows)
df.to_csv(f"{out}/tune.csv", index=False)
pd.set_option("display.width", 250)
print(df[["weight_format", "ctx", "variant", "median_us", "roof_fraction", "correct", "config"]]
      .sort_values(["weight_format", "variant", "median_us"]).to_string())
