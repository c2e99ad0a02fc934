"""The absorbed path's attention kernel over candidate tilings, on the live GPU:
absorbed_tiles.csv, one row per (cache, C, n, tiling) with the attention (kernel and merge)
and the whole path timed as CUDA graphs' replays (median, L2 flushed), each checked against
the float32 reference first, with the run's provenance and the path's floor at the rates
measured at the start. (The rows of 2026-12-04 also hold two forms since removed:
``keys_as_rows`` and ``widen_first``, docs/log/2026-12-04-absorbed-tiles.md.)

Usage on the H200: python scripts/absorbed_tiles.py FOLDER [--points C:n ...]
[--caches fp8 bf16]. A tiling that does not compile or launch gets a row with its error."""
import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from mla_kernels.context import plan_absorbed
from mla_kernels.context.attention import Blocking
from mla_kernels.lab.bench import measure_ceilings
from mla_kernels.lab.context_checks import attention_errors, judge, worst
from mla_kernels.lab.context_floors import Rates, absorbed_floor
from mla_kernels.lab.context_inputs import build_context_inputs
from mla_kernels.lab.context_map import attention_rate
from mla_kernels.lab.measurements import write_csv_atomic
from mla_kernels.lab.provenance import provenance
from mla_kernels.lab.timing import SHORT, graphed, measure

SHAPE = "kimi-k3-tp8"
# (block_m, block_n, warps, stages); the first two are absorbed_blocking's for 64 rows or
# more over an fp8 and a bf16 latent, the third the tiling before them.
CANDIDATES = [(64, 128, 8, 1), (64, 64, 8, 2), (64, 32, 8, 2), (64, 64, 8, 1), (64, 128, 8, 2),
              (64, 32, 8, 1), (64, 16, 8, 3)]

ap = argparse.ArgumentParser()
ap.add_argument("out", type=Path)
ap.add_argument("--points", nargs="+", default=["32000:128", "32000:2048", "4096:16"])
ap.add_argument("--caches", nargs="+", default=["fp8", "bf16"])
a = ap.parse_args()
if not torch.cuda.is_available():
    sys.exit("absorbed_tiles: needs a CUDA GPU; nothing was run")
a.out.mkdir(parents=True, exist_ok=True)
rates = Rates.measured(measure_ceilings(SHAPE), attention_rate())
prov = provenance()
rows = []
for cache in a.caches:
    for point in a.points:
        c, n = (int(x) for x in point.split(":"))
        ci = build_context_inputs(SHAPE, c, n, cache_dtype=cache, weight_format="fp8_row",
                                  device="cuda", seed=0)
        ref = ci.reference()
        floor = absorbed_floor(SHAPE, c, n, cache, "fp8_row", rates)["floor_us"]
        for bm, bn, warps, stages in CANDIDATES:
            row = {**prov, "model": SHAPE, "cache_dtype": cache, "weight_format": "fp8_row",
                   "block_size": 1, "ctx": c, "new_tokens": n, "block_m": bm, "block_n": bn,
                   "num_warps": warps, "num_stages": stages, "floor_us": floor, "floor_source": rates.source}
            try:
                plan = plan_absorbed(*ci.args(), blocking=Blocking(bm, bn, warps, stages))
                plan.out.fill_(float("nan"))
                out, lse = plan.run()
                errs = attention_errors(out, lse, ref)
                attend = measure(graphed(plan.attend), SHORT)
                whole = measure(graphed(plan.run), SHORT)
                row.update(splits=plan.splits, correct=judge(errs, "bf16"), max_err=worst(errs),
                           attend_us=attend.median_us, attend_reps=attend.reps,
                           run_us=whole.median_us, run_reps=whole.reps,
                           roof_fraction=floor / whole.median_us, error="")
            except Exception as e:  # a tiling past the shared memory or registers: its row says so
                row.update(correct=False, error=f"{type(e).__name__}: {str(e)[:160]}")
                torch.cuda.synchronize()
            rows.append(row)
            print({k: row.get(k) for k in ("cache_dtype", "ctx", "new_tokens", "block_m", "block_n",
                                           "num_warps", "num_stages",
                                           "correct", "attend_us", "run_us", "roof_fraction",
                                           "error")}, flush=True)
            write_csv_atomic(pd.DataFrame(rows), a.out / "absorbed_tiles.csv")
        del ci, ref
        torch.cuda.empty_cache()
print(a.out / "absorbed_tiles.csv")
