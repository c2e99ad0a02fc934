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

from .series import choose_series, rows_of, tidy
from .style import DEFAULT_LIMIT

FORMAT_ORDER = ("bf16", "fp8_row", "fp8_block", "mxfp4")
# The format every time is set against: the fast path's own format.
REFERENCE_FORMAT = "fp8_row"

# One (cache, weight row, series) of a format table: the medians over its rows, the text
# columns joined (distinct values), and its time over the same series' fp8_row time.
CELL_COLUMNS = ("cache_dtype", "weight_row", "column", "variant", "timing", "median_us",
                "roof_fraction", "tc_fraction", "dot_dtype", "fp8_route_share", "design",
                "config", "rows", "fp8_row_us", "time_ratio")


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
    sequences, default launch configs (``auto``'s rows whatever their ``config``: it names
    what auto resolved to), and the most common model where there are several; with
    ``weight_draw`` ("" for the default draw) and ``weight_row`` (``format_label``)."""
    d = tidy(df)
    d = d[d["ctx"].astype(int) == int(ctx)]
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
