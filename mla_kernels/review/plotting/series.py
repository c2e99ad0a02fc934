"""Rows and series: a copy of the rows in one naming (``tidy``), the (variant, timing) pairs
they hold, the ones a figure draws by default or on request (``choose_series``), and the
public change's tables as a figure takes them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..analysis import reference_table
from .style import DEFAULT_LIMIT, TIMINGS, base_variant, is_torch, series_order, variant_order


def tidy(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with a ``timing`` column and graph rows named by timing, not by variant: the
    tables of older runs name them ``<variant>_graph``."""
    d = df.copy()
    if "timing" not in d.columns:
        d["timing"] = "flushed"
    d["timing"] = d["timing"].fillna("flushed").astype(str)
    v = d["variant"].astype(str)
    renamed = v.str.endswith("_graph")
    d["variant"] = v.map(base_variant)
    d.loc[renamed, "timing"] = "graph"
    return d


def present_series(df: pd.DataFrame) -> list[tuple[str, str]]:
    """Every (variant, timing) pair of the rows, in display order."""
    if df.empty:
        return []
    d = tidy(df)
    pairs = {(str(v), str(t)) for v, t in zip(d["variant"], d["timing"], strict=True)}
    return sorted(pairs, key=series_order)


def device_timing(df: pd.DataFrame, variant: str) -> str | None:
    """The most device-like timing the rows have for a variant: graph, graph8, flushed."""
    d = tidy(df)
    have = set(d.loc[d["variant"] == base_variant(variant), "timing"])
    for t in TIMINGS:
        if t in have:
            return t
    return sorted(have)[0] if have else None


_KEY_COLS = ("model", "weight_format", "cache_dtype", "block_size", "contexts", "ctx")


def _speed(d: pd.DataFrame, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """Geometric mean time of each series over the configurations all of them have
    (over their own rows where they share none): lower is faster."""
    keys = [c for c in _KEY_COLS if c in d.columns]
    per = {}
    for v, t in pairs:
        r = d[(d["variant"] == v) & (d["timing"] == t)]
        per[(v, t)] = r.groupby(keys)["median_us"].median() if keys else r["median_us"]
    shared = None
    for s in per.values():
        shared = set(s.index) if shared is None else shared & set(s.index)
    out = {}
    for p, s in per.items():
        vals = s[list(shared)] if shared else s
        vals = vals[vals > 0]
        out[p] = float(np.exp(np.log(vals).mean())) if len(vals) else float("inf")
    return out


def default_series(df: pd.DataFrame, *, before: str | None = None, limit: int = DEFAULT_LIMIT,
                   reserved: int = 0, torch: str = "fastest",
                   keep: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The series a figure shows unless told otherwise: each design in its device timing and
    the fastest torch path (``torch="all"``: every torch path), at most ``limit - reserved``
    of them (``reserved``: reference lines sharing the panel). Over the limit, ``auto`` is
    left out first (it runs one of the other designs), then the slowest designs; ``before``,
    the designs in ``keep`` and the torch paths stay."""
    if df.empty:
        return []
    d = tidy(df)
    variants = sorted(pd.unique(d["variant"]), key=variant_order)
    designs = [(v, device_timing(d, v)) for v in variants if not is_torch(v)]
    torch_paths = [(v, device_timing(d, v)) for v in variants if is_torch(v)]
    chosen_torch = list(torch_paths) if torch == "all" else []
    if torch_paths and not chosen_torch:
        speed = _speed(d, torch_paths)
        chosen_torch = [min(torch_paths, key=lambda p: (speed[p], series_order(p)))]
    room = max(1, limit - reserved - len(chosen_torch))
    if len(designs) > room:
        speed = _speed(d, designs)
        # Dropped first to last: auto, then the slowest; ``before`` never.
        drop = sorted((p for p in designs if p[0] != before and p[0] not in keep),
                      key=lambda p: (p[0] != "auto", -speed[p]))
        gone = set(drop[: len(designs) - room])
        designs = [p for p in designs if p not in gone]
    return sorted(designs + chosen_torch, key=series_order)


def choose_series(df: pd.DataFrame, series=None, *, before: str | None = None,
                  limit: int = DEFAULT_LIMIT, reserved: int = 0,
                  torch: str = "fastest", keep: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The (variant, timing) pairs to draw.

    ``series`` is None (``default_series``), ``"all"`` (every pair of the rows), or a list
    of: ``"default"`` (the default set), a timing name (``"flushed"``: every variant at that
    timing), ``"<variant>/<timing>"`` or a (variant, timing) tuple, ``"<variant>_graph"``, or
    a bare variant name (that variant in its device timing). Pairs the rows lack are skipped.
    """
    if df.empty:
        return []
    d = tidy(df)
    have = present_series(d)
    if series is None:
        return default_series(d, before=before, limit=limit, reserved=reserved, torch=torch,
                              keep=keep)
    if isinstance(series, str):
        series = [series]
    out: list[tuple[str, str]] = []
    for item in series:
        if isinstance(item, tuple):
            out.append((base_variant(item[0]), str(item[1])))
        elif item == "all":
            out += have
        elif item == "default":
            out += default_series(d, before=before, limit=limit, reserved=reserved, torch=torch,
                                  keep=keep)
        elif item in TIMINGS:
            out += [p for p in have if p[1] == item]
        elif "/" in item:
            v, t = item.split("/", 1)
            out.append((base_variant(v), t))
        elif str(item).endswith("_graph"):
            out.append((base_variant(item), "graph"))
        else:
            t = device_timing(d, item)
            if t is not None:
                out.append((str(item), t))
    keep = set(have)
    return sorted(dict.fromkeys(p for p in out if p in keep), key=series_order)


def rows_of(d: pd.DataFrame, s: tuple[str, str]) -> pd.DataFrame:
    return d[(d["variant"] == s[0]) & (d["timing"] == s[1])]


def series_rows(d: pd.DataFrame, chosen: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """The rows of the series drawn, series by series (none drawn: no rows, d's columns)."""
    return pd.concat([rows_of(d, s) for s in chosen]) if chosen else d.iloc[:0]


# ------------------------------------------------------------------ reference tables
def reference_list(reference, default_name: str = "public change"
                    ) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """[(name, normalized table, the table as given)] from a frame, a {name: frame} map or a
    list of frames."""
    if reference is None:
        return []
    if isinstance(reference, pd.DataFrame):
        items = [(default_name, reference)]
    elif isinstance(reference, Mapping):
        items = list(reference.items())
    else:
        frames = list(reference)
        items = [(default_name if len(frames) == 1 else f"{default_name} ({i + 1})", f)
                 for i, f in enumerate(frames)]
    return [(str(n), reference_table(f), f) for n, f in items if f is not None and not f.empty]


def left_out(df: pd.DataFrame, chosen: Sequence[tuple[str, str]], *, series=None,
             limit: int | None = None) -> list[tuple[str, str]]:
    """The variants of the rows that a figure does not draw in any timing, each with why:
    [(variant, reason)], in display order. ``series`` and ``limit`` as the figure's
    ``choose_series`` had them (an explicit ``series`` leaves the rest out by request)."""
    if df.empty:
        return []
    d = tidy(df)
    drawn = {v for v, _ in chosen}
    torch_drawn = [v for v in sorted(drawn, key=variant_order) if is_torch(v)]
    out = []
    for v in sorted(pd.unique(d["variant"]), key=variant_order):
        if v in drawn:
            continue
        if series is not None:
            why = "not in the series asked for"
        elif is_torch(v) and torch_drawn:
            why = f"slower than {torch_drawn[0]}"
        else:
            why = f"over the limit of {limit} lines" if limit else "not chosen"
        out.append((str(v), why))
    return out


def left_out_note(df: pd.DataFrame, chosen: Sequence[tuple[str, str]], *, series=None,
                  limit: int | None = None) -> str | None:
    """``left_out`` as one line for a figure (None when every variant is drawn)."""
    gone = left_out(df, chosen, series=series, limit=limit)
    if not gone:
        return None
    return "not drawn: " + "; ".join(f"{v} ({why})" for v, why in gone)
