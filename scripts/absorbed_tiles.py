"""The absorbed path's attention kernel over candidate tilings, on the live GPU:
absorbed_tiles.csv, one row per (cache, C, n, tiling) with the attention (kernel and merge)
and the whole path timed as CUDA graphs' replays (median, L2 flushed), each checked against
the float32 reference first, with the run's provenance and the path's floor at the rates
measured at the start. (The rows of 2026-12-04 also hold two forms since removed:
``keys_as_rows`` and ``widen_first``, docs/log/2026-12-04-absorbed-tiles.md.)

Usage on the H200: python scripts/absorbed_tiles.py FOLDER [--points C:n ...]
[--caches fp8 bf16] [--hopper-splits S ...] (``--hopper-splits``: the Gluon kernel for sm_90
instead of the tilings, once with the plan's split count, then with each S; 0: the plan's).
A tiling that does not compile or launch gets a row with its error."""
import argparse
from functools import partial
from pathlib import Path

import torch

from mla_kernels.context import plan_absorbed
from mla_kernels.context.attention import Blocking
from mla_kernels.lab import tilings
from mla_kernels.lab.context_floors import absorbed_floor
from mla_kernels.lab.context_inputs import build_context_inputs

SHAPE = tilings.SHAPE
# (block_m, block_n, warps, stages); the first two are absorbed_blocking's for 64 rows or
# more over an fp8 and a bf16 latent, the third the tiling before them.
CANDIDATES = [(64, 128, 8, 1), (64, 64, 8, 2), (64, 32, 8, 2), (64, 64, 8, 1), (64, 128, 8, 2),
              (64, 32, 8, 1), (64, 16, 8, 3)]
SHOWN = ("cache_dtype", "ctx", "new_tokens", "kernel", "block_m", "block_n", "num_warps",
         "num_stages", "splits", "correct", "attend_us", "run_us", "roof_fraction", "error")

ap = argparse.ArgumentParser()
ap.add_argument("out", type=Path)
ap.add_argument("--points", nargs="+", default=["32000:128", "32000:2048", "4096:16"])
ap.add_argument("--caches", nargs="+", default=["fp8", "bf16"])
ap.add_argument("--hopper-splits", nargs="+", type=int, metavar="S")
a = ap.parse_args()
# The candidates: (kernel, blocking, splits asked; None: the plan's).
if a.hopper_splits:
    candidates = [("hopper", None, None)] + [("hopper", None, s or None)
                                             for s in a.hopper_splits]
else:
    candidates = [("portable", Blocking(*t), None) for t in CANDIDATES]
rates, prov = tilings.start("absorbed_tiles", a.out)
rows = []
for cache in a.caches:
    for c, n in tilings.points(a.points):
        ci = build_context_inputs(SHAPE, c, n, cache_dtype=cache, weight_format="fp8_row",
                                  device="cuda", seed=0)
        ref = ci.reference()
        floor = absorbed_floor(SHAPE, c, n, cache, "fp8_row", rates)["floor_us"]
        for kernel, blk, splits in candidates:
            row = {**prov, "model": SHAPE, "cache_dtype": cache, "weight_format": "fp8_row",
                   "block_size": 1, "ctx": c, "new_tokens": n, "kernel": kernel,
                   "splits_asked": splits or 0, "floor_us": floor, "floor_source": rates.source}
            if blk is not None:
                row.update(block_m=blk.block_m, block_n=blk.block_n, num_warps=blk.num_warps,
                           num_stages=blk.num_stages)
            tilings.try_candidate(row, partial(plan_absorbed, *ci.args(), blocking=blk,
                                               kernel=kernel, num_splits=splits),
                                  ref, "bf16", ("roof_fraction", floor, "run_us"))
            tilings.keep(rows, row, a.out / "absorbed_tiles.csv", SHOWN)
        del ci, ref
        torch.cuda.empty_cache()
print(a.out / "absorbed_tiles.csv")
