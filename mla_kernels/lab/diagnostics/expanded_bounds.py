"""Which side bounds the expanded attention's Gluon kernel (``context/attention_hopper.py``):
its launch timed whole, each side alone, the merge alone and both as a plan runs them, over
the K/V an expanded plan (one chunk of all C keys) makes.

- ``all``: the kernel as the plan runs it (partial outputs and LSE; the merge apart);
- ``dots``: the two consumers' scores, softmax and P V over every key tile, the stages
  loaded once and then handed back with their stale bytes (no loads after the first);
- ``loads``: the loader's copies of every key tile, each stage freed as soon as it lands
  (no dots);
- ``merge``: the merge of the partials alone, over partials the kernel wrote;
- ``attend``: the kernel then the merge, as the plan's attention launches them.

Each is one CUDA graph's replay (median), timed twice: with the L2 flushed as every timing
here is (``flush="write"``: a buffer larger than the L2 written, whose dirty lines the
launch then writes back as it evicts them) and flushed by a read (``flush="read"``, no
dirty line: ``timing.measure_clean``). A row also gives the programs, the
key tiles a program runs and the waves, and ``kv_gbps``: the K/V bytes the keys hold over
the row's time, to read against the device's copy rate. ``--splits`` times other split
counts than the plan's (its fixed cost a wave, cut for the schedule's tiles),
``--schedules`` other pipelines than the plan's (``attention_hopper.schedule_for``; specs
of ``attention_hopper.Schedule.parse``: ``hopper`` the default's, ``hopper,pingpong``,
...). Outputs are not checked here: ``dots`` writes partials of stale tiles, ``loads``
writes none; the context tests check ``all``.

    python3 -m mla_kernels.lab.diagnostics.expanded_bounds [--out FOLDER]
        [--contexts 32000 ...] [--new-tokens 128 ...] [--splits 5 22 ...]
        [--schedules hopper hopper,pingpong ...]
    (rows to FOLDER/expanded_bounds.csv; FOLDER defaults to reports/diag/)
    python3 -m mla_kernels.lab.diagnostics.expanded_bounds --check   # no GPU: compiles the
        launches for sm_90 and prints their resources
"""

from __future__ import annotations

import argparse
import functools
import json
import math

import pandas as pd
import torch

from ...context import attention_hopper as ah
from ...context import plan_expanded
from ...context.attention import keys_per_split
from ...context.merge import merge_parts
from ...core.devices import device_spec
from ..context_inputs import build_context_inputs
from ..provenance import provenance
from ..timing import SHORT, graphed, measure, measure_clean
from .command_line import check_or_measure, require_sm90, write_rows

ROWS = "expanded_bounds.csv"
FLUSHES = {"write": measure, "read": measure_clean}
LAUNCHES = (*ah.PARTS, "merge", "attend")


def shape_of(n: int, heads: int, n_keys: int, splits: int, sms: int, block_n: int) -> dict:
    """The launch's programs, key tiles a program and waves of one program an SM."""
    programs = math.ceil(n / ah.QUERIES.value) * heads * splits
    tiles = math.ceil(keys_per_split(n_keys, splits, block_n) / block_n)
    return {"programs": programs, "tiles_per_program": tiles,
            "waves": math.ceil(programs / sms)}


def launches(plan, part_o: torch.Tensor, part_lse: torch.Tensor) -> dict:
    """Each of LAUNCHES over the plan's queries and K/V (one chunk) in as many splits as
    ``part_o`` [splits, n, H, DV] and ``part_lse`` [splits, n, H] hold partials (the plan's
    own hold its split count), the merge into the plan's output."""
    q, k, v, c = plan.q, plan.k_chunk, plan.v_chunk, plan.chunk_tokens[0]
    splits = part_o.shape[0]
    descs = ah.descriptors(q, k, v, c, plan.schedule.block_n)

    def kernel(parts):
        return lambda: ah.launch(q, k, v, c, plan.sm_scale, splits, part_o, part_lse, descs,
                                 plan.schedule, parts=parts)

    def merge():
        merge_parts(part_o, part_lse, splits, plan.out, plan.lse)

    def attend():
        kernel("all")()
        merge()
    return {**{p: kernel(p) for p in ah.PARTS}, "merge": merge, "attend": attend}


def measure_point(c: int, n: int, prov: dict, splits: list[int] | None = None,
                  schedules: list[ah.Schedule] | None = None, budget=SHORT,
                  shape: str = "kimi-k3-tp8", seed: int = 0) -> list[dict]:
    ci = build_context_inputs(shape, c, n, cache_dtype="fp8", weight_format="fp8_row",
                              device="cuda", seed=seed)
    plan = plan_expanded(*ci.args(), kernel="hopper", chunk_tokens=c)
    plan.expand()  # the K/V the kernel reads
    h = ci.q.shape[1]
    sms = device_spec(ci.q.device).compute_units
    kv_bytes = (c * h * (plan.k_chunk.shape[2] + plan.v_chunk.shape[2])
                * plan.k_chunk.element_size())
    rows = []
    for sched, s in [(x, y) for x in schedules or [plan.schedule]
                     for y in splits or [ah.splits(n, h, c, sms, x.block_n)]]:
        plan.schedule = sched  # its splits: the plan's for its tiles, or those given
        geo = shape_of(n, h, c, s, sms, sched.block_n)
        fns = launches(plan, torch.empty((s, n, h, ah.DV.value), device=ci.q.device),
                       torch.empty((s, n, h), device=ci.q.device))
        fns["attend"]()  # the merge's partials written before the merge alone is timed
        for name in LAUNCHES:
            replay = graphed(fns[name])
            for flush, timed in FLUSHES.items():
                t = timed(replay, budget)
                rows.append({
                    **prov, "model": shape, "ctx": c, "new_tokens": n, "heads": h, "splits": s,
                    "plan_splits": ah.splits(n, h, c, sms, sched.block_n), **geo,
                    "parts": name, "flush": flush,
                    "block_n": sched.block_n, "stages": sched.stages,
                    "overlap": sched.overlap, "pingpong": sched.pingpong, "apart": sched.apart,
                    "median_us": t.median_us,
                    "q1_us": t.q1_us, "q3_us": t.q3_us, "reps": t.reps,
                    "us_per_tile": t.median_us / (geo["tiles_per_program"] * geo["waves"]),
                    "kv_bytes": kv_bytes, "kv_gbps": kv_bytes / t.median_us / 1e3})
    return rows


def check() -> None:
    from ..compile_check import HOPPER, compile_calls, kernel_report

    n, h, c = 128, 12, 4096
    q = torch.empty((n, h, 192), dtype=torch.bfloat16)
    k = torch.empty((c, h, 192), dtype=torch.bfloat16)
    v = torch.empty((c, h, 128), dtype=torch.bfloat16)
    po, pl = torch.empty((4, n, h, 128)), torch.empty((4, n, h))
    for parts in ah.PARTS:
        launch = functools.partial(ah.launch, q, k, v, c, 0.07, 4, po, pl, parts=parts)
        (kern,) = compile_calls(launch, HOPPER, 90)
        print(json.dumps({"parts": parts, **kernel_report(kern)}))


def measure_all(a) -> None:
    require_sm90("expanded_bounds")
    prov = provenance()
    rows = []
    for c in a.contexts:
        for n in a.new_tokens:
            for r in measure_point(c, n, prov, a.splits, a.schedules):
                rows.append(r)
                sched = (f"{r['stages']},{r['block_n']}{',ov' * r['overlap']}"
                         f"{',pp' * r['pingpong']}{',ap' * r['apart']}")
                print(f"C {c:6d} n {n:5d} splits {r['splits']:3d} {sched:12s} {r['parts']:6s} "
                      f"{r['flush']:5s} "
                      f"{r['median_us']:10.1f} us  {r['kv_gbps']:7.0f} GB/s of K/V",
                      flush=True)
            torch.cuda.empty_cache()
    print(write_rows(pd.DataFrame(rows), a.out, ROWS))


def _splits(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a split count of at least 1, got {text!r}")
    return int(text)


def _schedule(text: str) -> ah.Schedule:
    try:
        return ah.Schedule.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _arguments(ap) -> None:
    ap.add_argument("--contexts", type=int, nargs="+", default=[16000, 32000, 64000, 109440])
    ap.add_argument("--new-tokens", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--splits", type=_splits, nargs="+", default=None,
                    help="split counts to time (default: the plan's)")
    ap.add_argument("--schedules", type=_schedule, nargs="+", default=None,
                    help="the kernel's pipelines, e.g. hopper,pingpong (default: the plan's)")


if __name__ == "__main__":
    check_or_measure(__doc__, ROWS, check, measure_all,
                     "compile each launch for sm_90 and print its resources",
                     _arguments)
