"""The weight-format tables the formats figure and notebook 04 read: each series' value per
(weight format, cache) at one context, in the timing the series choice picks.

A table's rows are the weight formats (``FORMAT_ORDER``, then any other the rows hold), each
followed by its other weight draws (``weight_draw``, e.g. MXFP4's ``wide``: its own row,
``format_label``). Its columns are the series: a variant's name, or ``<variant>/<timing>``
where one variant is drawn in several timings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ...lab.measurements import DEFAULT_OUT_DTYPE, FP8_OUT_DTYPE, out_dtypes
from .series import choose_series, rows_of, tidy
from .style import DEFAULT_LIMIT

FORMAT_ORDER = ("bf16", "fp8_row", "fp8_block", "mxfp4")
# The format every time is set against: the fast path's own format.
REFERENCE_FORMAT = "fp8_row"

# One (cache, weight row, series) of a format table: the medians over its rows, the text
# columns joined (distinct values), and its time over the same series' fp8_row time.
CELL_COLUMNS = ("cache_dtype", "weight_row", "column", "variant", "timing", "median_us",
                "roof_fraction", "tc_fraction", "dot_dtype", "fp8_route_share",
                "split_route_share", "design", "config", "rows", "fp8_row_us", "time_ratio")


def format_label(weight_format: str, weight_draw: str = "") -> str:
    """A table row's name: the format, and the draw where it is not the default
    (``mxfp4 (wide scales)``)."""
    draw = str(weight_draw or "").strip()
    return f"{weight_format} ({draw} scales)" if draw else str(weight_format)


def text_values(s: pd.Series) -> pd.Series:
    """A text column with missing values as "" (a column pandas read as all-NaN floats)."""
    return s.astype(object).where(s.notna(), "").astype(str).str.strip()


def format_rows(df: pd.DataFrame, ctx: int) -> pd.DataFrame:
    """The rows a weight-format table compares at ``ctx`` (``tidy``'s copy): single
    sequences, bf16 outputs (``fp8_output_cells`` sets the FP8 ones beside them), default
    launch configs (``auto``'s rows whatever their ``config``: it names what auto resolved
    to), and the most common model where there are several; with ``weight_draw`` ("" for
    the default draw) and ``weight_row`` (``format_label``)."""
    d = tidy(df)
    d = d[(d["ctx"].astype(int) == int(ctx)) & (out_dtypes(d) == DEFAULT_OUT_DTYPE)]
    if "batch" in d.columns:
        d = d[d["batch"].astype(int) == 1]
    if "config" in d.columns:
        d = d[(text_values(d["config"]) == "") | (d["variant"] == "auto")]
    if "model" in d.columns and d["model"].nunique() > 1:
        d = d[d["model"] == d["model"].value_counts().idxmax()]
    d = d.copy()
    d["weight_draw"] = text_values(d["weight_draw"]) if "weight_draw" in d.columns else ""
    d["weight_row"] = [format_label(f, w) for f, w in zip(d["weight_format"], d["weight_draw"],
                                                          strict=True)]
    return d


def cache_order(d: pd.DataFrame) -> list[str]:
    """The caches of the rows, the bf16 cache first."""
    return sorted(pd.unique(d["cache_dtype"].astype(str)), key=lambda c: (c != "bf16", c))


def row_order(d: pd.DataFrame) -> list[str]:
    """Every format of ``FORMAT_ORDER``, then the others the rows hold; each format's other
    draws right after it."""
    pairs = {(str(f), str(w)) for f, w in zip(d["weight_format"], d["weight_draw"], strict=True)}
    pairs |= {(f, "") for f in FORMAT_ORDER}

    def key(p):
        f, w = p
        return (FORMAT_ORDER.index(f) if f in FORMAT_ORDER else len(FORMAT_ORDER), f, w != "", w)

    return [format_label(f, w) for f, w in sorted(pairs, key=key)]


def series_columns(chosen: Sequence[tuple[str, str]]) -> list[str]:
    """The table column of each series: its variant, or ``<variant>/<timing>`` where the
    variant is chosen in more than one timing."""
    n = pd.Series([v for v, _ in chosen]).value_counts() if chosen else {}
    return [v if n[v] == 1 else f"{v}/{t}" for v, t in chosen]


def _joined(g: pd.DataFrame, col: str) -> str:
    if col not in g.columns:
        return ""
    vals = [v for v in dict.fromkeys(text_values(g[col])) if v]
    return "/".join(vals)


def _median(g: pd.DataFrame, col: str) -> float:
    if col not in g.columns:
        return float("nan")
    v = pd.to_numeric(g[col], errors="coerce").dropna()
    return float(v.median()) if len(v) else float("nan")


def format_cells(d: pd.DataFrame, chosen: Sequence[tuple[str, str]],
                 values: Sequence[str] = ()) -> pd.DataFrame:
    """The cells of the tables of ``format_rows``' rows ``d`` for the series ``chosen``:
    one row per (cache, weight row, series) measured, columns ``CELL_COLUMNS`` plus the
    median of each column in ``values``. A column the rows lack reads NaN (or "")."""
    recs = []
    for (v, tm), col in zip(chosen, series_columns(chosen), strict=True):
        r = rows_of(d, (v, tm))
        for (cache, wrow), g in r.groupby(["cache_dtype", "weight_row"], sort=True):
            tc = (pd.to_numeric(g["tc_floor_us"], errors="coerce") / g["median_us"]
                  if "tc_floor_us" in g.columns else pd.Series(dtype=float))
            rec = {"cache_dtype": str(cache), "weight_row": str(wrow), "column": col,
                   "variant": v, "timing": tm, "median_us": _median(g, "median_us"),
                   "roof_fraction": _median(g, "roof_fraction"),
                   "tc_fraction": float(tc.median()) if tc.notna().any() else float("nan"),
                   "dot_dtype": _joined(g, "dot_dtype"),
                   "fp8_route_share": _median(g, "fp8_route_share"),
                   "split_route_share": _median(g, "split_route_share"),
                   "design": _joined(g, "design"), "config": _joined(g, "config"),
                   "rows": len(g)}
            rec.update({c: _median(g, c) for c in values if c not in rec})
            recs.append(rec)
    cells = pd.DataFrame(recs, columns=list(CELL_COLUMNS[:-2]) + [
        c for c in values if c not in CELL_COLUMNS])
    base = cells[cells["weight_row"] == REFERENCE_FORMAT].set_index(
        ["column", "cache_dtype"])["median_us"]
    cells["fp8_row_us"] = [base.get((c, k), np.nan)
                           for c, k in zip(cells["column"], cells["cache_dtype"], strict=True)]
    cells["time_ratio"] = cells["median_us"] / cells["fp8_row_us"]
    return cells


def format_table(df: pd.DataFrame, *, ctx: int = 32000, value: str = "roof_fraction",
                 series=None, limit: int | None = None) -> dict[str, pd.DataFrame]:
    """{cache dtype: weight row x series table of ``value``} at ``ctx``, each variant in
    the timing ``choose_series`` picks (``series``; ``limit``, default ``DEFAULT_LIMIT``,
    with every torch path); NaN where nothing was measured. ``value``: a column of the rows
    (their median per cell), or ``"time_ratio"`` (time over the same series' fp8_row time
    on the same cache) or ``"tc_fraction"`` (``tc_floor_us`` / time) of ``format_cells``."""
    d = format_rows(df, ctx)
    chosen = choose_series(d, series, limit=DEFAULT_LIMIT if limit is None else limit,
                           torch="all")
    cells = format_cells(d, chosen, values=(value,))
    return tables_of(d, chosen, cells, value)


def tables_of(d: pd.DataFrame, chosen: Sequence[tuple[str, str]], cells: pd.DataFrame,
              value: str) -> dict[str, pd.DataFrame]:
    """``format_cells``' column ``value`` as {cache: weight row x series table}."""
    rows, cols = row_order(d), series_columns(chosen)
    out = {}
    for cache in cache_order(d):
        t = pd.DataFrame(np.nan, index=rows, columns=cols)
        c = cells[cells["cache_dtype"] == cache]
        for wrow, col, val in zip(c["weight_row"], c["column"], c[value], strict=True):
            t.loc[wrow, col] = val
        out[cache] = t
    return out


# ------------------------------------------------------------------ FP8 outputs
# The series the FP8-output comparison draws, where their rows are: the targets, the
# portable reference and the torch paths (each quantizing its bf16 result).
FP8_OUT_SERIES = ("auto", "hopper_ws", "tiled", "torch_bf16", "torch_fp8")
FP8_OUT_TIMING = "graph"  # the device's time: the targets are scored on it
FP8_OUT_CELL_COLUMNS = ("cache_dtype", "ctx", "weight_format", "variant", "fp8_us", "bf16_us",
                        "time_ratio", "fp8_exact_share", "fp8_max_steps", "correct", "design")


def fp8_output_cells(df: pd.DataFrame, series: Sequence[str] = FP8_OUT_SERIES,
                     timing: str = FP8_OUT_TIMING) -> pd.DataFrame:
    """Per (cache, context, weight format, series) with FP8-output rows (``out_dtype``
    ``float8_e4m3fn``) in ``timing``: the median time with FP8 outputs, the same series'
    with bf16 outputs at the same point (NaN where not measured) and their ratio, the
    least exact share and the most e4m3 steps of its rows, and whether all were correct.
    Single sequences of the default weight draw and launch config (``auto``'s whatever its
    ``config``), of the most common model. Columns ``FP8_OUT_CELL_COLUMNS``; no rows when
    none wrote FP8 outputs (every run before the column)."""
    empty = pd.DataFrame(columns=list(FP8_OUT_CELL_COLUMNS))
    if df is None or df.empty or "out_dtype" not in df.columns:
        return empty
    d = tidy(df)
    d = d[(d["timing"] == timing) & d["variant"].isin(list(series))]
    if "batch" in d.columns:
        d = d[d["batch"].astype(int) == 1]
    if "config" in d.columns:
        d = d[(text_values(d["config"]) == "") | (d["variant"] == "auto")]
    if "weight_draw" in d.columns:
        d = d[text_values(d["weight_draw"]) == ""]
    d = d.assign(out_dtype=out_dtypes(d))
    fp8 = d[d["out_dtype"] == FP8_OUT_DTYPE]
    if fp8.empty:
        return empty
    model = fp8["model"].value_counts().idxmax() if "model" in fp8.columns else None
    if model is not None:
        d, fp8 = d[d["model"] == model], fp8[fp8["model"] == model]
    bf16 = d[d["out_dtype"] == DEFAULT_OUT_DTYPE]
    key = ["cache_dtype", "ctx", "weight_format", "variant"]
    base = bf16.groupby(key)["median_us"].median()
    recs = []
    for k, g in fp8.groupby(key, sort=False):
        us, ref = _median(g, "median_us"), float(base.get(k, np.nan))
        recs.append({"cache_dtype": str(k[0]), "ctx": int(k[1]), "weight_format": str(k[2]),
                     "variant": str(k[3]), "fp8_us": us, "bf16_us": ref,
                     "time_ratio": us / ref,
                     "fp8_exact_share": (float(pd.to_numeric(g["fp8_exact_share"]).min())
                                         if "fp8_exact_share" in g else np.nan),
                     "fp8_max_steps": (float(pd.to_numeric(g["fp8_max_steps"]).max())
                                       if "fp8_max_steps" in g else np.nan),
                     "correct": bool(g["correct"].astype(str).str.lower().eq("true").all())
                     if "correct" in g else True,
                     "design": _joined(g, "design")})
    out = pd.DataFrame(recs, columns=list(FP8_OUT_CELL_COLUMNS))
    fmt = {f: i for i, f in enumerate(FORMAT_ORDER)}
    order = {v: i for i, v in enumerate(series)}
    return out.sort_values(
        ["cache_dtype", "ctx", "weight_format", "variant"],
        key=lambda c: (c.map(lambda x: int(x != "fp8")) if c.name == "cache_dtype" else
                       c.map(lambda x: fmt.get(x, len(fmt))) if c.name == "weight_format" else
                       c.map(order) if c.name == "variant" else c),
        ignore_index=True)
