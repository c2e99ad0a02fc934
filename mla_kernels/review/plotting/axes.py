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


def run_label(df: pd.DataFrame) -> str:
    """'data: H200, commit cc73f07d2ac9, 2026-11-30': the run the rows came from."""
    parts = []
    dev = column_values(df, "device", "")
    if dev:
        parts.append(dev)
    commit = column_values(df, "commit", "")
    if commit:
        parts.append(f"commit {commit}")
    if df is not None and "date" in df.columns and not df.empty:
        days = sorted({str(x)[:10] for x in df["date"].dropna() if str(x).strip()})
        if days:
            parts.append(", ".join(days))
    return "data: " + (", ".join(parts) if parts else "no run named in the rows")


def footer(fig: Figure, df: pd.DataFrame, extra: str | None = None):
    """Write the run the rows came from (their ``device``, ``commit`` and ``date``) at the
    bottom left of the figure; ``extra`` is appended (other sources of the figure)."""
    text = run_label(df) + (f"; {extra}" if extra else "")
    area = getattr(fig, "_mla_footer", None)
    if area is not None:  # the strip new_figure keeps below the panels and their legend
        return area.text(0.004, 0.5, text, ha="left", va="center", fontsize=10, color="0.3",
                         gid="footer")
    return fig.text(0.005, 0.003, text, ha="left", va="bottom", fontsize=10, color="0.3",
                    gid="footer")


def ctx_label(n: float) -> str:
    """Tokens in units of k = 1024: 4096 -> '4k', 109440 -> '107k', 32000 -> '31.2k'."""
    n = int(round(n))
    if n < 1024:
        return str(n)
    if n % 1024 == 0:
        return f"{n // 1024}k"
    return f"{n / 1024:.3g}k"


def set_ctx_axis(ax, contexts: Iterable[float],
                 label: str = "cached context (tokens, k = 1024, log scale)") -> list[int]:
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


def fig_legend(fig: Figure, axes: Sequence, ncol: int = 4) -> None:
    """One legend below all panels: every labelled artist once."""
    seen, handles, labels = set(), [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in seen:
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(ncol, len(handles)),
                   fontsize=11, frameon=False)


def new_figure(figsize) -> tuple[Figure, object]:
    """A figure and the subfigure the panels go in; below it a strip for ``footer``, so the
    footer never runs into a legend under the panels."""
    fig = plt.figure(figsize=figsize, layout="constrained")
    strip = 0.32
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
    finds half a figure) and with the user's normal file mode."""
    paths = []
    for ext in ("png", "svg"):
        final = Path(out_dir) / f"{name}.{ext}"
        with atomic_path(final) as tmp:
            fig.savefig(tmp, format=ext, bbox_inches="tight")
        paths.append(final)
    return paths
