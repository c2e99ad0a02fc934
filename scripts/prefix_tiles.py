"""The expanded path's attention (``context.attention.prefix_attention_kernel``) over
candidate tilings, on the live GPU: prefix_tiles.csv, one row per (K/V dtype, C, n, tiling)
with the attention alone (its split launch and merge over the expanded K/V) and the whole
path timed as CUDA graphs' replays (median, L2 flushed), each checked against the float32
reference first, with the run's provenance and the attention's floor (the expanded K/V
read once) at the rates measured at the start.

Usage on the H200: python scripts/prefix_tiles.py FOLDER [--points C:n ...]
[--kv-dtypes bf16 fp8]
[--tiles M,N,WARPS,STAGES[,tma] ... hopper[,STAGES][,overlap|,serial][,nKEYS][,pingpong][,apart]]
("hopper": the Gluon kernel for sm_90 beside them, with the schedule given,
``attention_hopper.Schedule.parse``'s: "hopper" alone the default's, whatever the plan
would choose; each in the splits the plan cuts for its tiles). A tiling that does not
compile or launch gets a row with its error."""
import argparse
from functools import partial
from pathlib import Path

import torch

from mla_kernels.context import attention_hopper, plan_expanded
from mla_kernels.context.attention import Blocking, expanded_blocking
from mla_kernels.context.attention_hopper import Schedule
from mla_kernels.lab import tilings
from mla_kernels.lab.context_floors import expanded_floor
from mla_kernels.lab.context_inputs import build_context_inputs

SHAPE = tilings.SHAPE
CHUNK = 32768  # the map's chunk of expanded tokens
# The plan's own tiles (None: expanded_blocking's), then candidates; those of 128 rows read
# a head's keys once for 128 queries, not twice.
CANDIDATES = [None, Blocking(64, 32, 4, 3), Blocking(64, 64, 4, 2), Blocking(64, 64, 4, 3),
              Blocking(64, 128, 8, 2), Blocking(128, 64, 8, 2), Blocking(128, 64, 8, 3),
              Blocking(128, 32, 8, 2), Blocking(128, 32, 8, 3), Blocking(128, 32, 8, 4),
              Blocking(128, 128, 8, 2)]
SHOWN = ("kv_dtype", "ctx", "new_tokens", "kernel", "tiles", "block_m", "block_n", "num_warps",
         "num_stages", "tma", "overlap", "pingpong", "apart", "correct", "attend_us", "run_us",
         "attend_fraction", "error")

ap = argparse.ArgumentParser()
ap.add_argument("out", type=Path)
ap.add_argument("--points", nargs="+", default=["32000:128", "109440:128", "32000:2048",
                                                  "4096:512"])
ap.add_argument("--kv-dtypes", nargs="+", choices=["bf16", "fp8"], default=["bf16"])
ap.add_argument("--tiles", nargs="+", metavar="M,N,WARPS,STAGES[,tma]",
                help="candidates instead of the list above (the plan's own tiles still first); "
                     "'hopper[,STAGES][,overlap|,serial][,nKEYS][,pingpong][,apart]': the Gluon "
                     "kernel for sm_90 too (nKEYS: keys a tile, n64 or n128; pingpong: its "
                     "consumers' dots in turn; apart: K and V freed apart)")
a = ap.parse_args()


def schedule(spec: str) -> Schedule:
    """``Schedule.parse``, its refusal a usage error."""
    try:
        return Schedule.parse(spec)
    except ValueError as e:
        raise SystemExit(f"--tiles: {e}") from None


def hopper_plan(sched: Schedule, *args, **kwargs):
    """The expanded plan on the Gluon kernel with ``sched`` as its schedule (its splits cut
    for its tiles)."""
    return plan_expanded(*args, kernel="hopper", schedule=sched, **kwargs)


# "hopper..." among the tiles: the Gluon kernel for sm_90 (its tiles fixed), timed as a plan
# with kernel="hopper" and that schedule.
schedules = [schedule(t) for t in a.tiles or [] if t.startswith("hopper")]
tiles = [t for t in a.tiles or [] if not t.startswith("hopper")]
candidates = [None, *tilings.blockings(tiles)] if a.tiles else CANDIDATES
rates, prov = tilings.start("prefix_tiles", a.out)
rows = []
for kv in a.kv_dtypes:
    for c, n in tilings.points(a.points):
        ci = build_context_inputs(SHAPE, c, n, cache_dtype="fp8", weight_format="fp8_row",
                                  device="cuda", seed=0)
        ref = ci.reference()
        floor = expanded_floor(SHAPE, c, n, "fp8", "fp8_row", rates, kv)["attend_floor_us"]
        extra = ci.fp8_scales() if kv == "fp8" else {}
        for given in candidates + (schedules if kv == "bf16" else []):
            sched = given if isinstance(given, Schedule) else None
            kernel = "portable" if sched is None else "hopper"
            given = None if sched else given
            # The first chunk's tiles: a last chunk under LONG_KEYS may take other ones.
            blk = (Blocking(attention_hopper.QUERIES.value, sched.block_n, 12, sched.stages)
                   if sched
                   else given or expanded_blocking(n, min(c, CHUNK)))
            row = {**prov, "model": SHAPE, "cache_dtype": "fp8", "weight_format": "fp8_row",
                   "kv_dtype": kv, "block_size": 1, "ctx": c, "new_tokens": n,
                   "chunk_tokens": CHUNK, "kernel": kernel,
                   "tiles": "hopper" if kernel == "hopper" else ("given" if given else "default"),
                   "block_m": blk.block_m, "block_n": blk.block_n, "num_warps": blk.num_warps,
                   "num_stages": blk.num_stages, "tma": blk.tma,
                   "overlap": bool(sched and sched.overlap),
                   "pingpong": bool(sched and sched.pingpong),
                   "apart": bool(sched and sched.apart), "attend_floor_us": floor,
                   "floor_source": rates.source}
            make = (partial(hopper_plan, sched, *ci.args(), chunk_tokens=CHUNK) if sched else
                    partial(plan_expanded, *ci.args(), chunk_tokens=CHUNK, blocking=given,
                            kernel="portable", **extra))
            tilings.try_candidate(row, make, ref, kv, ("attend_fraction", floor, "attend_us"))
            tilings.keep(rows, row, a.out / "prefix_tiles.csv", SHOWN)
        del ci, ref
        torch.cuda.empty_cache()
print(a.out / "prefix_tiles.csv")
