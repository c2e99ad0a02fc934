"""What every figure shares around its data: titles and sentences from the rows, the footer
naming the run, context and log axes, one legend below the panels, the figure with its
footer strip, marker sizes by context, and saving."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from ...lab.repo_files import atomic_path
from ..analysis import positive
from .style import TIMING_LONG, TIMINGS


# ------------------------------------------------------------------ labels and axes
def timings_text(chosen: Sequence[tuple[str, str]]) -> str:
    ts = [t for t in TIMINGS if any(p[1] == t for p in chosen)]
    return "; ".join(TIMING_LONG[t] for t in ts)


def column_values(df: pd.DataFrame, col: str, default: str = "?") -> str:
    """The distinct values of a column, comma-separated (for titles and sentences)."""
    if df is None or col not in df.columns or df.empty:
        return default
    vals = [str(v) for v in pd.unique(df[col].dropna())]
    vals = [v for v in vals if v.strip()]
    return ", ".join(vals) if vals else default


def describe(df: pd.DataFrame, skip: Sequence[str] = ()) -> str:
    """'kimi-k3-tp8, 12 heads, fp8 cache, fp8_row weight, page 1' for a title."""
    parts = [column_values(df, "model")]
    for col, fmt in (("heads", "{} heads"), ("cache_dtype", "{} cache"),
                     ("weight_format", "{} weight"), ("block_size", "page {}")):
        if col in df.columns and col not in skip:
            parts.append(fmt.format(column_values(df, col)))
    return ", ".join(parts)


def _runs(df: pd.DataFrame) -> list[str]:
    """The runs the rows came from, as their folders are named (``<date>-<commit>``, the day
    of each commit's first row), from the rows themselves: a replot and the run that measured
    the rows name the same run."""
    if df is None or df.empty or "commit" not in df.columns:
        return []
    out = []
    for commit in pd.unique(df["commit"].dropna().astype(str)):
        if not commit.strip():
            continue
        rows = df[df["commit"].astype(str) == commit]
        days = (sorted({str(x)[:10] for x in rows["date"].dropna() if str(x).strip()})
                if "date" in rows.columns else [])
        out.append((days[0] if days else "", commit))
    return [f"{day}-{commit}" if day else commit for day, commit in sorted(out)]


def run_label(df: pd.DataFrame) -> str:
    """'data: H200, run 2026-12-02-d9e1ba8b1201 (commit d9e1ba8b1201, 2026-12-02), torch
    2.11.0+cu130, triton 3.6.0': the run the rows came from, named as data (the code that
    draws the figure may be at another commit)."""
    parts = []
    dev = column_values(df, "device", "")
    if dev:
        parts.append(dev)
    runs = _runs(df)
    commit = column_values(df, "commit", "")
    days = []
    if df is not None and "date" in df.columns and not df.empty:
        days = sorted({str(x)[:10] for x in df["date"].dropna() if str(x).strip()})
    inner = ", ".join(([f"commit {commit}"] if commit else []) + days)
    if runs:
        parts.append(f"run{'s' if len(runs) > 1 else ''} {', '.join(runs)}"
                     + (f" ({inner})" if inner else ""))
    elif inner:
        parts.append(inner)
    for col in ("torch", "triton"):
        val = column_values(df, col, "")
        if val:
            parts.append(f"{col} {val}")
    return "data: " + (", ".join(parts) if parts else "no run named in the rows")


def footer(fig: Figure, df: pd.DataFrame, extra: str | None = None, *,
           note: str | None = None, label: str | None = None):
    """Write the run the rows came from (``run_label``: device, run, commit, date, torch,
    triton) at the bottom left of the figure; ``extra`` is appended (other sources of the
    figure), ``label`` replaces ``run_label`` (a figure not drawn from measured rows).
    ``note``: a second line below it (gid ``"note"``), e.g. the series left out."""
    text = (label or run_label(df)) + (f"; {extra}" if extra else "")
    area = getattr(fig, "_mla_footer", None)
    if area is not None:  # the strip new_figure keeps below the panels and their legend
        if note:
            area.text(0.004, 0.2, note, ha="left", va="center", fontsize=10, color="0.15",
                      gid="note")
        return area.text(0.004, 0.72 if note else 0.5, text, ha="left", va="center",
                         fontsize=10, color="0.3", gid="footer")
    if note:
        fig.text(0.005, 0.003, note, ha="left", va="bottom", fontsize=10, color="0.15",
                 gid="note")
    return fig.text(0.005, 0.025 if note else 0.003, text, ha="left", va="bottom", fontsize=10,
                    color="0.3", gid="footer")


CTX_AXIS_LABEL = "cached context (tokens, log scale)"


def ctx_label(n: float) -> str:
    """A token count as every figure and table writes it: exact, with no unit prefix
    (4096 -> '4096', 32000 -> '32000', 109440 -> '109440'), so 32000 and 32768 never read
    alike."""
    return str(int(round(n)))


def set_ctx_axis(ax, contexts: Iterable[float], label: str = CTX_AXIS_LABEL) -> list[int]:
    """Log x axis with a labelled tick at each context that has data, and no other."""
    ctx = sorted({int(c) for c in contexts if positive(c)})
    ax.set_xscale("log", base=2)
    ax.set_xlabel(label)
    if not ctx:
        return ctx
    labels, prev_low = [], False
    for i, c in enumerate(ctx):
        lab = ctx_label(c)
        # Two contexts within 25% (32000 and 32768) would print over each other: the
        # second goes one line lower.
        low = i > 0 and c / ctx[i - 1] < 1.25 and not prev_low
        labels.append("\n" + lab if low else lab)
        prev_low = low
    ax.xaxis.set_major_locator(FixedLocator(ctx))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(ctx, labels)
    ax.set_xlim(ctx[0] / 1.25, ctx[-1] * 1.25)
    return ctx


def spread(values: Sequence[float], gap: float, lo: float | None = None,
           hi: float | None = None) -> list[float]:
    """Positions for labels at ``values`` (one coordinate, e.g. log10 of y), moved apart
    until neighbours are at least ``gap`` apart, each as near its value as that allows and
    kept within [lo, hi] where the room is there. Same order as ``values``."""
    order = sorted(range(len(values)), key=lambda i: (values[i], i))
    pos = [float(values[i]) for i in order]
    for _ in range(200):  # relax: push overlapping neighbours apart about their middle
        moved = False
        for j in range(1, len(pos)):
            if pos[j] - pos[j - 1] < gap - 1e-12:
                mid = (pos[j] + pos[j - 1]) / 2
                pos[j - 1], pos[j] = mid - gap / 2, mid + gap / 2
                moved = True
        if lo is not None and pos and pos[0] < lo:
            pos = [p + (lo - pos[0]) for p in pos]
        if hi is not None and pos and pos[-1] > hi and (lo is None or
                                                      pos[-1] - pos[0] <= hi - lo):
            pos = [p - (pos[-1] - hi) for p in pos]
        if not moved:
            break
    out = [0.0] * len(values)
    for k, i in enumerate(order):
        out[i] = pos[k]
    return out


def plain_log_y(ax) -> None:
    """Log y axis with plain numbers (0.5, 2, 300), which read faster than 3x10^2."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(
        lambda y, _pos: f"{y:g}" if f"{y:.0e}"[0] in "25" else ""))


_NICE = (1, 1.5, 2, 3, 4, 5, 7)


def plain_log_x(ax, lo: float, hi: float) -> None:
    ax.set_xscale("log")
    ticks = [m * 10.0 ** e for e in range(int(math.floor(math.log10(lo))),
                                          int(math.ceil(math.log10(hi))) + 1) for m in _NICE]
    ticks = [t for t in ticks if lo <= t <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.set_xlim(lo, hi)


def unique_handles(axes: Sequence) -> tuple[list, list[str]]:
    """The labelled artists of ``axes``, each label once, in order: (handles, labels)."""
    seen, handles, labels = set(), [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in seen:
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    return handles, labels


def fig_legend(fig: Figure, axes: Sequence, ncol: int = 4) -> None:
    """One legend below all panels: every labelled artist once."""
    handles, labels = unique_handles(axes)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(ncol, len(handles)),
                   fontsize=11, frameon=False)


def new_figure(figsize) -> tuple[Figure, object]:
    """A figure and the subfigure the panels go in; below it a strip for ``footer``, so the
    footer never runs into a legend under the panels."""
    fig = plt.figure(figsize=figsize, layout="constrained")
    strip = 0.5  # two lines: the run, and a note (series left out) where there is one
    body, foot = fig.subfigures(2, 1, height_ratios=[figsize[1] - strip, strip])
    fig._mla_footer = foot
    return fig, body


def figure_title(fig: Figure, text: str) -> None:
    fig.suptitle(text, x=0.005, ha="left", fontsize=16, fontweight="bold")


def ref_device(raw: pd.DataFrame, default: str) -> str:
    return column_values(raw, "device", default)


# ------------------------------------------------------------------ marker size by context
def ctx_sizes(contexts: Iterable[float], lo: float = 5.0, hi: float = 15.0) -> dict[int, float]:
    """Marker size per context: small at the shortest, large at the longest (log scale)."""
    ctx = sorted({int(c) for c in contexts})
    if len(ctx) < 2:
        return {c: (lo + hi) / 2 for c in ctx}
    a, b = math.log(ctx[0]), math.log(ctx[-1])
    return {c: lo + (hi - lo) * (math.log(c) - a) / (b - a) for c in ctx}


def size_legend(ax, sizes: Mapping[int, float], loc: str = "lower right", title="context"):
    ctx = sorted(sizes)
    if len(ctx) > 6:  # a few sizes tell the scale
        idx = sorted({round(i * (len(ctx) - 1) / 4) for i in range(5)})
        ctx = [ctx[i] for i in idx]
    handles = [Line2D([], [], ls="none", marker="o", ms=sizes[c], mfc="0.75", mec="0.3",
                      label=ctx_label(c)) for c in ctx]
    leg = ax.legend(handles=handles, loc=loc, title=title, fontsize=10, title_fontsize=10,
                    frameon=True, framealpha=0.9, ncol=len(handles), handletextpad=0.2,
                    columnspacing=0.8)
    ax.add_artist(leg)
    return leg


# ------------------------------------------------------------------ saving
def save_figure(fig: Figure, out_dir: str | os.PathLike, name: str) -> list[Path]:
    """Write ``name``.png and ``name``.svg under out_dir, each atomically (a reader never
    finds half a figure) and with the user's normal file mode; no date in either, so a
    re-plot of the same rows writes the same bytes."""
    paths = []
    for ext in ("png", "svg"):
        final = Path(out_dir) / f"{name}.{ext}"
        meta = {"Date": None} if ext == "svg" else {}
        with atomic_path(final) as tmp:
            fig.savefig(tmp, format=ext, bbox_inches="tight", metadata=meta)
        paths.append(final)
    return paths
