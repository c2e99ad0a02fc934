"""The context path's crossover, as a table the figures and the notebook read: per cached
context C and new-token count n, each way's time, floor and peak memory, which wins and by
how much, and what two serving engines' thresholds choose there.

The times come from the map's rows (``lab.context_map``: ``context_map*.csv``, the latest
run under a folder), or, with none, from the floors alone (``model_table``: each way's
floor at the datasheet rates of a device, its memory counted), named so in ``source``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from ..context import attention_hopper as gluon_attention
from ..context.absorbed import absorbed_blocking
from ..context.attention import expanded_blocking, split_count
from ..context.memory import absorbed_peak_bytes, expanded_peak_bytes
from ..core.devices import get_device
from ..core.shapes import get_shape
from ..lab.context_floors import Rates, absorbed_floor, expanded_floor

MAP_FILES = "context_map"
PATHS = ("expanded", "absorbed")
# The run's provenance and how it timed, carried from the map's rows into the table, so the
# table's CSV and the figures name the run their times come from.
RUN_COLUMNS = ("device", "compute_units", "torch", "triton", "commit", "date", "timing",
               "floor_source")
# Serving engines' rules, by cached tokens (one sequence: the batch's sum is its context).
ENGINE_RULES = {
    "SGLang": ("expand when the cached prefix is at least 8192 tokens", 8192),
    "ATOM": ("absorbed above 32768 cached tokens", 32768),
}


def engine_choice(engine: str, ctx: int) -> str:
    """The path an engine's rule takes for a cached context of ``ctx`` tokens."""
    if engine == "SGLang":
        return "expanded" if ctx >= ENGINE_RULES["SGLang"][1] else "absorbed"
    if engine == "ATOM":
        return "absorbed" if ctx > ENGINE_RULES["ATOM"][1] else "expanded"
    raise ValueError(f"engine: expected one of {sorted(ENGINE_RULES)}, got {engine!r}")


def load_map_rows(data_dir: str | os.PathLike | None) -> pd.DataFrame | None:
    """The rows of the latest map run under ``data_dir`` (recursively; the run of the newest
    ``date``), None where there are none (no folder given, or no map's CSV in it)."""
    if data_dir is None or not Path(data_dir).is_dir():
        return None
    files = sorted(Path(data_dir).rglob(f"{MAP_FILES}*.csv"))
    frames = [pd.read_csv(f) for f in files]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True)
    if "commit" in df.columns and "date" in df.columns:
        last = df.sort_values("date").iloc[-1]["commit"]
        df = df[df["commit"] == last]
    return df.reset_index(drop=True)


def _with_verdicts(t: pd.DataFrame) -> pd.DataFrame:
    t = t.copy()
    t["winner"] = ["expanded" if e <= a else "absorbed"
                   for e, a in zip(t["expanded_us"], t["absorbed_us"], strict=True)]
    t["speedup"] = [max(e, a) / min(e, a) for e, a in zip(t["expanded_us"], t["absorbed_us"],
                                                         strict=True)]
    for p in PATHS:
        t[f"{p}_fraction"] = t[f"{p}_floor_us"] / t[f"{p}_us"]
    for engine in ENGINE_RULES:
        t[f"{engine}_choice"] = [engine_choice(engine, int(c)) for c in t["ctx"]]
        t[f"{engine}_wrong"] = t[f"{engine}_choice"] != t["winner"]
        # What a wrong choice costs: its path's time over the winner's.
        t[f"{engine}_cost"] = [r[f"{r[f'{engine}_choice']}_us"] / min(r["expanded_us"],
                                                                      r["absorbed_us"])
                               for _, r in t.iterrows()]
    return t.sort_values(["ctx", "new_tokens"]).reset_index(drop=True)


def measured_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The crossover table of a map run's rows: one line per (C, n)."""
    keys = ["model", "cache_dtype", "weight_format", "kv_dtype", "ctx", "new_tokens"]
    out = []
    for key, g in rows.groupby(keys):
        by = {r["path"]: r for _, r in g.iterrows()}
        # The absorbed way as the call runs it by default: the Gluon kernel's rows where the
        # map timed it (an sm_90 GPU), the portable kernel's elsewhere.
        kernel = "hopper" if "absorbed_hopper" in by else "portable"
        if kernel == "hopper":
            by["absorbed"] = by["absorbed_hopper"]
        if not all(p in by for p in PATHS):
            continue
        line = dict(zip(keys, key, strict=True), absorbed_kernel=kernel)
        for p in PATHS:
            r = by[p]
            line[f"{p}_us"] = r["median_us"]
            line[f"{p}_floor_us"] = r["floor_us"]
            measured = r.get("peak_bytes_measured", float("nan"))
            line[f"{p}_peak_bytes"] = measured if measured == measured else r["peak_bytes_model"]
            line[f"{p}_correct"] = bool(r["correct"])
        if "sdpa" in by:
            line["sdpa_us"] = by["sdpa"]["median_us"]
        line["chunk_tokens"] = by["expanded"]["chunk_tokens"]
        line["source"] = f"measured ({by['expanded'].get('device', '?')})"
        line.update({c: by["expanded"][c] for c in RUN_COLUMNS if c in by["expanded"]})
        out.append(line)
    return _with_verdicts(pd.DataFrame(out))


def model_table(shape: str, contexts: Sequence[int], new_tokens: Sequence[int], *,
                cache_dtype: str, weight_format: str, kv_dtype: str = "bf16",
                chunk_tokens: int | None = None, device: str = "H200") -> pd.DataFrame:
    """The crossover table of the floors alone (each way's time taken as its floor at the
    device's datasheet rates) and of the counted memory, split as the device would split."""
    rates = Rates.datasheet(device)
    spec = get_device(device)
    units = spec.compute_units
    dims = get_shape(shape)
    h = dims.num_heads
    # Where plan_expanded's default attends on the Gluon kernel: its own split count.
    gluon = (spec.sm == 90 and kv_dtype == "bf16" and dims.v_head_dim == gluon_attention.DV.value
             and (dims.qk_nope_dim, dims.kv_pe_dim) == (gluon_attention.DA.value,
                                                        gluon_attention.DB.value))
    out = []
    for c in contexts:
        for n in new_tokens:
            ef = expanded_floor(shape, c, n, cache_dtype, weight_format, rates, kv_dtype)
            af = absorbed_floor(shape, c, n, cache_dtype, weight_format, rates)
            chunk = min(c, chunk_tokens or c)
            eb, ab = expanded_blocking(n, chunk), absorbed_blocking(n * h, cache_dtype == "fp8")
            e_splits = (gluon_attention.splits(n, h, chunk, units) if gluon
                        else split_count(math.ceil(n / eb.block_m) * h, chunk, eb.block_n, units))
            a_splits = split_count(math.ceil(n * h / ab.block_m), c, ab.block_n, units)
            kv = torch.float8_e4m3fn if kv_dtype == "fp8" else torch.bfloat16
            out.append({"model": shape, "cache_dtype": cache_dtype, "weight_format": weight_format,
                        "kv_dtype": kv_dtype, "ctx": c, "new_tokens": n,
                        "expanded_us": ef["floor_us"], "expanded_floor_us": ef["floor_us"],
                        "absorbed_us": af["floor_us"], "absorbed_floor_us": af["floor_us"],
                        "expanded_peak_bytes": expanded_peak_bytes(
                            shape, n, c, chunk_tokens=chunk_tokens, splits=e_splits, kv_dtype=kv),
                        "absorbed_peak_bytes": absorbed_peak_bytes(shape, n, c, splits=a_splits),
                        "chunk_tokens": chunk, "source": f"model ({rates.source})"})
    return _with_verdicts(pd.DataFrame(out))


def crossover_new_tokens(table: pd.DataFrame) -> pd.DataFrame:
    """Per cached context, the new-token count from which expanding wins: where the time
    ratio crosses 1 between two points of the table (interpolated in log n), the smallest
    count if it wins everywhere, NaN if it never does."""
    out = []
    for c, g in table.groupby("ctx"):
        g = g.sort_values("new_tokens")
        lr = [math.log(e / a) for e, a in zip(g["expanded_us"], g["absorbed_us"], strict=True)]
        ns = list(g["new_tokens"])
        cross = float("nan")
        if lr and lr[0] <= 0:
            cross = float(ns[0])
        else:
            for i in range(1, len(ns)):
                if lr[i - 1] > 0 >= lr[i]:
                    f = lr[i - 1] / (lr[i - 1] - lr[i])
                    cross = math.exp(math.log(ns[i - 1]) + f * (math.log(ns[i]) - math.log(ns[i - 1])))
                    break
        out.append({"ctx": int(c), "expand_from_new_tokens": cross})
    return pd.DataFrame(out)


def threshold_table(shapes: Sequence[str], formats: Sequence[tuple[str, str]],
                    contexts: Sequence[int], *, device: str = "H200", kv_dtype: str = "bf16"
                    ) -> pd.DataFrame:
    """What a serving engine should use, from the floors: per shape, (cache, weight format)
    and cached context, the new-token count from which to expand (on a fine grid of n)."""
    grid = sorted({int(round(2 ** (i / 8))) for i in range(0, 8 * 14 + 1)})
    rows = []
    for shape in shapes:
        for cache, fmt in formats:
            t = model_table(shape, contexts, grid, cache_dtype=cache, weight_format=fmt,
                            kv_dtype=kv_dtype, device=device)
            for r in crossover_new_tokens(t).itertuples():
                rows.append({"model": shape, "cache_dtype": cache, "weight_format": fmt,
                             "kv_dtype": kv_dtype, "ctx": r.ctx,
                             "expand_from_new_tokens": round(r.expand_from_new_tokens)
                             if r.expand_from_new_tokens == r.expand_from_new_tokens else None})
    return pd.DataFrame(rows)
