"""The weight-format tables the formats figure and notebook 04 read: each variant's value per
(weight format, cache) at one context, in the timing the series choice picks."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .series import choose_series, tidy
from .style import DEFAULT_LIMIT

FORMAT_ORDER = ("bf16", "fp8_row", "fp8_block", "mxfp4")


def format_rows(df: pd.DataFrame, ctx: int) -> pd.DataFrame:
    """The rows a weight-format table compares at ``ctx`` (``tidy``'s copy): single
    sequences, default launch configs, and the most common model where there are several."""
    d = tidy(df)
    d = d[d["ctx"].astype(int) == int(ctx)]
    if "batch" in d.columns:
        d = d[d["batch"].astype(int) == 1]
    if "config" in d.columns:
        d = d[d["config"].isna() | (d["config"].astype(str).str.strip() == "")]
    if "model" in d.columns and d["model"].nunique() > 1:
        d = d[d["model"] == d["model"].value_counts().idxmax()]
    return d


def _cache_order(d: pd.DataFrame) -> list[str]:
    return sorted(pd.unique(d["cache_dtype"].astype(str)), key=lambda c: (c != "bf16", c))


def format_table(df: pd.DataFrame, *, ctx: int = 32000, value: str = "roof_fraction",
                 series=None, limit: int | None = None) -> dict[str, pd.DataFrame]:
    """{cache dtype: weight format x variant table of ``value``} at ``ctx``, each variant in
    the timing ``choose_series`` picks (``series``; ``limit``, default
    ``DEFAULT_LIMIT``, with every torch path); NaN where nothing was measured."""
    d = format_rows(df, ctx)
    chosen = choose_series(d, series, limit=DEFAULT_LIMIT if limit is None else limit,
                           torch="all")
    cols = [v for v, _ in chosen]
    out = {}
    for cache in _cache_order(d):
        t = pd.DataFrame(np.nan, index=list(FORMAT_ORDER), columns=cols)
        for v, tm in chosen:
            r = d[(d["variant"] == v) & (d["timing"] == tm) & (d["cache_dtype"] == cache)]
            for wf, val in r.groupby("weight_format")[value].median().items():
                if wf not in t.index:
                    t.loc[wf] = np.nan
                t.loc[wf, v] = val
        out[cache] = t
    return out
