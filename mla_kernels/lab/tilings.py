"""What the tiling scripts (``scripts/absorbed_tiles.py``, ``scripts/prefix_tiles.py``)
share: the run's start on the live GPU (its rates and provenance), and each candidate's
row, checked and timed or holding the error that stopped it, written as it lands."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd
import torch

from ..context.attention import Blocking, check_blocking
from .bench import measure_ceilings
from .context_checks import attention_errors, judge, worst
from .context_floors import Rates
from .context_map import attention_rate
from .measurements import write_csv_atomic
from .provenance import provenance
from .timing import SHORT, graphed, measure

SHAPE = "kimi-k3-tp8"


def start(script: str, out: Path, shape: str = SHAPE) -> tuple[Rates, dict]:
    """The rates measured now (the floors') and the run's provenance, ``out`` made; without
    a CUDA GPU the script exits having run nothing."""
    if not torch.cuda.is_available():
        sys.exit(f"{script}: needs a CUDA GPU; nothing was run")
    out.mkdir(parents=True, exist_ok=True)
    return Rates.measured(measure_ceilings(shape), attention_rate()), provenance()


def points(specs: Iterable[str]) -> list[tuple[int, int]]:
    """(C, n) of each "C:n"."""
    return [tuple(int(x) for x in spec.split(":")) for spec in specs]


def blockings(specs: Iterable[str]) -> list[Blocking]:
    """A ``context.attention.Blocking`` of each "block_m,block_n,num_warps,num_stages" (a
    fifth field "tma": K and V through tensor descriptors), checked as a plan checks it (a
    ValueError naming the field)."""
    out = []
    for spec in specs:
        parts = spec.split(",")
        tma = parts[4:] == ["tma"]
        if tma:
            parts = parts[:4]
        if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
            raise ValueError("tiles: expected block_m,block_n,num_warps,num_stages[,tma], "
                             f"got {spec!r}")
        out.append(check_blocking(Blocking(*(int(p) for p in parts), tma=tma)))
    return out


def try_candidate(row: dict, make_plan: Callable[[], object], ref, kv_format: str,
                  fraction: tuple[str, float, str]) -> dict:
    """``row`` with the plan's check against ``ref`` (its outputs poisoned first), its
    attention and whole run timed as CUDA graphs' replays, and ``fraction`` = (name, floor
    µs, the timing it scores: "attend_us" or "run_us"); or, for a tiling that does not
    compile or launch (past the shared memory or the registers), not correct and the error
    that stopped it."""
    try:
        plan = make_plan()
        plan.out.fill_(float("nan"))
        out, lse = plan.run()
        errs = attention_errors(out, lse, ref)
        attend = measure(graphed(plan.attend), SHORT)
        whole = measure(graphed(plan.run), SHORT)
        splits = plan.splits[0] if isinstance(plan.splits, list) else plan.splits
        row.update(splits=splits, correct=judge(errs, kv_format), max_err=worst(errs),
                   attend_us=attend.median_us, attend_reps=attend.reps,
                   run_us=whole.median_us, run_reps=whole.reps, error="")
        name, floor, timing = fraction
        row[name] = floor / row[timing]
    except Exception as e:
        row.update(correct=False, error=f"{type(e).__name__}: {str(e)[:160]}")
        torch.cuda.synchronize()
    return row


def keep(rows: list[dict], row: dict, csv: Path, shown: Iterable[str]) -> None:
    """``row`` added, its ``shown`` fields printed, every row so far written to ``csv``."""
    rows.append(row)
    print({k: row.get(k) for k in shown}, flush=True)
    write_csv_atomic(pd.DataFrame(rows), csv)
