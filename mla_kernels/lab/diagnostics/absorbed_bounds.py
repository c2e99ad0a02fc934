"""Which side bounds the absorbed attention's Gluon kernel (``context/absorbed_hopper.py``):
its launch timed whole, each side alone and (fp8) unwidened, on the plan ``plan_absorbed``
makes.

- ``all``: the kernel as the call runs it (partial outputs and LSE; the merge apart);
- ``dots``: the two warpgroups' scores, softmax and P V over every key tile, their stages
  written once and handed back at once (no gather);
- ``gather``: the loader's gather (and an fp8 cache's widening) of every key tile, each
  stage freed as soon as it lands (no dots);
- ``unwidened`` (an fp8 cache only): the whole kernel with each tile's bytes stored as
  loaded, not widened: the same loads, stores and dots without the widening's arithmetic,
  which shares the SMs' issue slots with the softmax.

Each is one CUDA graph's replay (median, L2 flushed). A row also gives the key tiles a
program runs and the waves of programs, so ``us_per_tile`` (median over tiles x waves) reads
against the dots' own time a tile at the SM's share of a bf16 rate. Outputs are not
checked here: ``dots`` and ``gather`` leave them unwritten, ``unwidened`` writes wrong
ones; the context tests check ``all``.

    python3 -m mla_kernels.lab.diagnostics.absorbed_bounds [--out FOLDER]
        [--contexts 32000 ...] [--new-tokens 128 2048 ...] [--cache-dtypes fp8 bf16]
    (rows to FOLDER/absorbed_bounds.csv; FOLDER defaults to reports/diag/)
    python3 -m mla_kernels.lab.diagnostics.absorbed_bounds --check   # no GPU: compiles the
        launches for sm_90 and prints their resources
"""

from __future__ import annotations

import functools
import json
import math

import pandas as pd
import torch

from ...context import absorbed_hopper as ah
from ...context import plan_absorbed
from ...context.attention import LOG2E, keys_per_split
from ...core.devices import device_spec
from ..context_inputs import build_context_inputs
from ..provenance import provenance
from ..timing import SHORT, graphed, measure
from .command_line import check_or_measure, require_sm90, write_rows

ROWS = "absorbed_bounds.csv"


def parts_for(cache_dtype: str) -> tuple[str, ...]:
    """The launches timed over a cache of ``cache_dtype`` (a bf16 one has nothing to widen)."""
    return ah.PARTS if cache_dtype == "fp8" else tuple(p for p in ah.PARTS if p != "unwidened")


def _launch(plan, parts: str):
    """The plan's attention kernel alone (no fold, merge or projection), running ``parts``."""
    fp8 = plan.k_buffer.dtype == torch.float8_e4m3fn
    return lambda: ah.launch(plan.q_absorbed, plan.k_buffer, plan.k_scale if fp8 else None,
                             plan.block_ids, plan.part_o, plan.part_lse, plan.context_len,
                             plan.splits, plan.sm_scale * LOG2E, parts=parts)


def shape_of(plan, sms: int) -> dict:
    """The launch's programs, key tiles a program and waves of one program an SM."""
    n, h, _ = plan.q_absorbed.shape
    programs = math.ceil(n * h / ah.BM.value) * plan.splits
    tiles = math.ceil(keys_per_split(plan.context_len, plan.splits, ah.BN.value) / ah.BN.value)
    return {"programs": programs, "tiles_per_program": tiles,
            "waves": math.ceil(programs / sms)}


def measure_point(c: int, n: int, cache_dtype: str, prov: dict, budget=SHORT,
                  shape: str = "kimi-k3-tp8", seed: int = 0) -> list[dict]:
    ci = build_context_inputs(shape, c, n, cache_dtype=cache_dtype, device="cuda", seed=seed)
    plan = plan_absorbed(*ci.args(), kernel="hopper")
    plan.fold()  # the absorbed queries the kernel reads
    geo = shape_of(plan, device_spec(ci.q.device).compute_units)  # the plan's own count
    rows = []
    for parts in parts_for(cache_dtype):
        t = measure(graphed(_launch(plan, parts)), budget)
        rows.append({**prov, "model": shape, "cache_dtype": cache_dtype, "ctx": c,
                     "new_tokens": n, "splits": plan.splits, **geo, "parts": parts,
                     "median_us": t.median_us, "q1_us": t.q1_us, "q3_us": t.q3_us,
                     "reps": t.reps,
                     "us_per_tile": t.median_us / (geo["tiles_per_program"] * geo["waves"])})
    return rows


def check() -> None:
    from ..compile_check import HOPPER, compile_calls, kernel_report

    q = torch.empty((128, 12, 576), dtype=torch.bfloat16)
    po, pl = torch.empty((4, 128, 12, 512)), torch.empty((4, 128, 12))
    ids = torch.arange(4096, dtype=torch.int32)
    for cache in ("fp8", "bf16"):
        fp8 = cache == "fp8"
        kb = torch.empty((4096, 1, 576), dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
        for parts in parts_for(cache):
            launch = functools.partial(ah.launch, q, kb, torch.ones(1) if fp8 else None, ids,
                                       po, pl, 4096, 4, 0.1, parts=parts)
            (kern,) = compile_calls(launch, HOPPER, 90)
            print(json.dumps({"cache": cache, "parts": parts, **kernel_report(kern)}))


def measure_all(a) -> None:
    require_sm90("absorbed_bounds")
    prov = provenance()
    rows = []
    for cache in a.cache_dtypes:
        for c in a.contexts:
            for n in a.new_tokens:
                for r in measure_point(c, n, cache, prov):
                    rows.append(r)
                    print(f"{cache:5s} C {c:6d} n {n:5d} {r['parts']:9s} "
                          f"{r['median_us']:10.1f} us  {r['us_per_tile']:6.2f} us a tile")
    print(write_rows(pd.DataFrame(rows), a.out, ROWS))


def _arguments(ap) -> None:
    ap.add_argument("--contexts", type=int, nargs="+", default=[32000, 109440])
    ap.add_argument("--new-tokens", type=int, nargs="+", default=[128, 2048])
    ap.add_argument("--cache-dtypes", nargs="+", default=["fp8", "bf16"],
                    choices=["fp8", "bf16"])


if __name__ == "__main__":
    check_or_measure(__doc__, ROWS, check, measure_all,
                     "compile each launch for sm_90 and print its resources",
                     _arguments)
