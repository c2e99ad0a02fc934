"""Figures for design reviews: one seaborn style, titles that say what was measured on what,
units on every axis, reference lines labelled where they are drawn.

Every function takes a DataFrame in the tidy schema of data/README.md and returns the
matplotlib Figure; ``save_figure`` writes it as PNG and SVG. Lines carry the series name as
their label, so a test can read back what was plotted.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

REFERENCE_COLOR = "0.35"
PEAK_COLOR = "#b2182b"
CEILING_COLOR = "#2166ac"


def set_style() -> None:
    """The one style every figure uses: large enough to read on a slide."""
    sns.set_theme(context="talk", style="whitegrid", palette="colorblind",
                  rc={"figure.dpi": 100, "savefig.dpi": 150, "axes.titleweight": "bold",
                      "axes.titlesize": 16, "axes.labelsize": 14, "legend.fontsize": 11,
                      "xtick.labelsize": 12, "ytick.labelsize": 12,
                      "svg.fonttype": "none"})


def variant_colors(variants: Sequence[str]) -> dict[str, tuple]:
    """A stable colour per variant: the same design gets the same colour in every figure."""
    pal = sns.color_palette("colorblind", max(10, len(variants)))
    return {v: pal[i % len(pal)] for i, v in enumerate(sorted(variants, key=_variant_order))}


def variant_style(v: str) -> dict[str, object]:
    """Line style and marker: a design drawn solid with dots, a torch baseline dash-dotted
    with diamonds, so the two kinds stay apart even where colours are close."""
    if v.startswith("torch"):
        return {"ls": "-.", "marker": "D", "ms": 7}
    return {"ls": "-", "marker": "o"}


def _variant_order(v: str) -> tuple[int, str]:
    # Designs first in the spec's order, torch baselines after.
    known = ["serial", "chunked", "auto"]
    return (known.index(v), v) if v in known else (10 if v.startswith("torch") else 5, v)


def _ctx_formatter() -> FuncFormatter:
    def fmt(x, _pos):
        if x >= 1024 and x % 1024 == 0:
            return f"{int(x // 1024)}k"
        if x >= 1000:
            return f"{x / 1000:g}k"
        return f"{x:g}"

    return FuncFormatter(fmt)


def _plain_log_y(ax) -> None:
    """Log y axis with plain numbers (0.5, 2, 300), which read faster than 3x10^2."""
    ax.set_yscale("log")
    fmt = FuncFormatter(lambda y, _pos: f"{y:g}")
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(FuncFormatter(
        lambda y, _pos: f"{y:g}" if f"{y:.0e}"[0] in "25" else ""))


def _legend_outside(ax, handles=None, labels=None) -> None:
    """Legend to the right of the axes, so it never covers a line."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=11,
              frameon=False)


def _log_ctx_axis(ax, label: str = "cached context (tokens, log scale)") -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(_ctx_formatter())
    ax.set_xlabel(label)


def column_values(df: pd.DataFrame, col: str, default: str = "?") -> str:
    """The distinct values of a column, comma-separated (for titles and sentences)."""
    if col not in df.columns or df.empty:
        return default
    vals = [str(v) for v in pd.unique(df[col].dropna())]
    return ", ".join(vals) if vals else default


def describe(df: pd.DataFrame) -> str:
    """'Kimi-K3 TP8, 12 heads, fp8 cache, fp8_row weight, page 1' for a title."""
    parts = [column_values(df, "model")]
    if "heads" in df.columns:
        parts.append(f"{column_values(df, 'heads')} heads")
    if "cache_dtype" in df.columns:
        parts.append(f"{column_values(df, 'cache_dtype')} cache")
    if "weight_format" in df.columns:
        parts.append(f"{column_values(df, 'weight_format')} weight")
    if "block_size" in df.columns:
        parts.append(f"page {column_values(df, 'block_size')}")
    return ", ".join(parts)


def _hline(ax, y: float, label: str, color: str, style: str = "--") -> None:
    """A labelled horizontal reference line: in the legend and written on the line."""
    ax.axhline(y, color=color, ls=style, lw=2, label=label, zorder=1)
    ax.annotate(label, xy=(0.01, y), xycoords=("axes fraction", "data"), xytext=(0, 4),
                textcoords="offset points", color=color, fontsize=11, va="bottom")


def _finite(x) -> bool:
    return x is not None and np.isfinite(float(x)) and float(x) > 0


# ------------------------------------------------------------------ saving
def save_figure(fig: Figure, out_dir: str | os.PathLike, name: str) -> list[Path]:
    """Write ``name``.png and ``name``.svg under out_dir, each through a temp file and
    os.replace so a reader never finds half a figure."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        final = out / f"{name}.{ext}"
        fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=f".{ext}")
        os.close(fd)
        try:
            fig.savefig(tmp, format=ext, bbox_inches="tight")
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        paths.append(final)
    return paths


# ------------------------------------------------------------------ occupancy
def plot_occupancy(df: pd.DataFrame) -> Figure:
    """Left: share of compute units busy in the first wave against context; right: working
    programs per compute unit. One line per (device, variant); expects the rows of
    ``occupancy.occupancy_table``."""
    set_style()
    fig, (ax, ax_p) = plt.subplots(1, 2, figsize=(16, 6.5))
    colors = variant_colors(list(pd.unique(df["variant"])))
    styles, markers = ["-", "--", ":", "-."], ["o", "s", "^", "D"]
    devices = list(pd.unique(df["device"]))
    for i, dev in enumerate(devices):
        for v in sorted(pd.unique(df["variant"]), key=_variant_order):
            d = df[(df["device"] == dev) & (df["variant"] == v)].sort_values("ctx")
            if d.empty:
                continue
            cus = int(d["compute_units"].iloc[0])
            label = f"{v} on {dev} ({cus} CUs)"
            if d["busy_share"].nunique() == 1 and d["busy_share"].iloc[0] < 0.5:
                # A flat, low line is the argument: its number goes into the legend.
                r = d.iloc[0]
                label += f": {r['programs_working']} programs, {100 * r['busy_share']:.1f}% busy"
            kw = dict(color=colors[v], ls=styles[i % len(styles)],
                      marker=markers[i % len(markers)], label=label)
            ax.plot(d["ctx"], 100 * d["busy_share"], **kw)
            ax_p.plot(d["ctx"], d["programs_per_cu"], **kw)
    ax.set_ylim(0, 105)
    ax.set_ylabel("compute units busy in the first wave (%)")
    _log_ctx_axis(ax)
    ax.set_title("Share of compute units busy", loc="left")
    ax_p.set_yscale("log")
    ax_p.axhline(1.0, color="0.4", lw=1.2, ls="--")
    ax_p.annotate("one program per compute unit", xy=(0.01, 1.0), xycoords=("axes fraction",
                  "data"), xytext=(0, 4), textcoords="offset points", color="0.3", fontsize=11)
    ax_p.set_ylabel("working programs per compute unit (log scale)")
    _log_ctx_axis(ax_p)
    ax_p.set_title("Programs per compute unit", loc="left")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(2, len(labels)), fontsize=11,
               frameon=False, bbox_to_anchor=(0.5, -0.12))
    fig.suptitle(f"How much of the device one launch occupies (model of the launch grid)\n"
                 f"{describe(df)}; on {', '.join(devices)}", x=0.01, ha="left",
                 fontsize=16, fontweight="bold")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ context sweep
def plot_context_sweep(df: pd.DataFrame, reference: pd.DataFrame | None = None, *,
                       before: str = "serial", reference_device: str = "MI355X") -> Figure:
    """Time against context (left) and speedup over ``before`` (right), log axes.

    ``reference`` (the public change's table: ctx, before_ms, after_ms, speedup) is drawn
    as its own grey series, labelled as the public change's figures on its device.
    """
    set_style()
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(16, 6.5))
    variants = sorted(pd.unique(df["variant"]), key=_variant_order)
    colors = variant_colors(variants)
    t = df.pivot_table(index="ctx", columns="variant", values="median_us", aggfunc="median")
    for v in variants:
        s = t[v].dropna()
        ax_t.plot(s.index, s.values, color=colors[v], label=v, **variant_style(v))
        if before in t.columns and v != before:
            sp = (t[before] / t[v]).dropna()
            ax_s.plot(sp.index, sp.values, color=colors[v], label=f"{v} vs {before}",
                      **variant_style(v))
    if reference is not None and not reference.empty:
        ax_t.plot(reference["ctx"], reference["before_ms"] * 1e3, marker="s", ls="--",
                  color=REFERENCE_COLOR, label=f"serial on {reference_device} (public change)")
        ax_t.plot(reference["ctx"], reference["after_ms"] * 1e3, marker="^", ls="--",
                  color=REFERENCE_COLOR, label=f"chunked on {reference_device} (public change)")
        ax_s.plot(reference["ctx"], reference["speedup"], marker="^", ls="--",
                  color=REFERENCE_COLOR, label=f"chunked vs serial on {reference_device} "
                  "(public change)")
    _plain_log_y(ax_t)
    ax_t.set_ylabel("time per call (µs, median, log scale)")
    _log_ctx_axis(ax_t)
    ax_t.set_title("Time per call", loc="left")
    _plain_log_y(ax_s)
    ax_s.axhline(1.0, color="0.5", lw=1)
    ax_s.set_ylabel(f"speedup over {before} (x, log scale)")
    _log_ctx_axis(ax_s)
    ax_s.set_title(f"Speedup over {before}", loc="left")
    # One legend for both panels: a variant has the same colour in each.
    handles, labels = ax_t.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=11,
               frameon=False, bbox_to_anchor=(0.5, -0.02 - 0.04 * (len(labels) // 4)))
    timing = column_values(df, "timing", "")
    fig.suptitle(f"gather_kv_b_proj on {column_values(df, 'device')}: time against context"
                 f"\n{describe(df)}; timing: {timing}", x=0.01, ha="left", fontsize=17,
                 fontweight="bold")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ bandwidth
def plot_bandwidth(df: pd.DataFrame, *, peak_tbps: float | None = None,
                   copy_tbps: float | None = None, write_tbps: float | None = None) -> Figure:
    """Achieved TB/s (minimum bytes / time) against context per variant, with the
    datasheet peak and the measured copy ceiling as labelled lines. Ceilings default to
    the median of the rows' ``copy_tbps`` and ``write_tbps`` columns."""
    set_style()
    fig, ax = plt.subplots(figsize=(13, 6))
    variants = sorted(pd.unique(df["variant"]), key=_variant_order)
    colors = variant_colors(variants)
    for v in variants:
        d = df[df["variant"] == v].groupby("ctx")["achieved_tbps"].median()
        ax.plot(d.index, d.values, color=colors[v], label=v, **variant_style(v))
    if copy_tbps is None and "copy_tbps" in df.columns:
        copy_tbps = df["copy_tbps"].median()
    if write_tbps is None and "write_tbps" in df.columns:
        write_tbps = df["write_tbps"].median()
    dev = column_values(df, "device")
    top = [float(df["achieved_tbps"].max() or 0)]
    if _finite(peak_tbps):
        _hline(ax, peak_tbps, f"datasheet peak {peak_tbps:.2f} TB/s", PEAK_COLOR)
        top.append(peak_tbps)
    if _finite(copy_tbps):
        _hline(ax, copy_tbps, f"measured copy ceiling {copy_tbps:.2f} TB/s (read + write)",
               CEILING_COLOR)
        top.append(copy_tbps)
    if _finite(write_tbps):
        _hline(ax, write_tbps, f"measured write-only fill {write_tbps:.2f} TB/s",
               CEILING_COLOR, ":")
        top.append(write_tbps)
    ax.set_ylim(0, 1.15 * max(top + [1e-3]))
    ax.set_ylabel("achieved bandwidth (TB/s, minimum bytes / time)")
    _log_ctx_axis(ax)
    ax.set_title(f"Bandwidth reached on {dev}\n{describe(df)}", loc="left")
    _legend_outside(ax)
    return fig


# ------------------------------------------------------------------ roofline
def plot_roofline(df: pd.DataFrame, *, bw_tbps: float | None = None,
                  mm_tflops: float | dict[str, float] | None = None,
                  peak_tbps: float | None = None) -> Figure:
    """Classic roofline: achieved FLOP/s against arithmetic intensity (FLOP per minimum
    byte), both roofs drawn: the bandwidth roof (measured copy ceiling, and the datasheet
    peak when given) and a matrix roof per dot dtype (the measured matmul rate).

    ``mm_tflops`` is one rate, a {dot dtype: rate} map, or None for the rows' own
    ``mm_tflops`` per ``dot_dtype`` (a torch bf16 path has a lower roof than an fp8 design).
    The bandwidth roof bends at the highest matrix roof.
    """
    set_style()
    fig, ax = plt.subplots(figsize=(13, 6.5))
    d = df.assign(ai=df["flops"] / df["min_bytes"])
    if bw_tbps is None and "copy_tbps" in d.columns and not d.empty:
        bw_tbps = d["copy_tbps"].median()
    roofs = _matrix_roofs(d, mm_tflops)
    variants = sorted(pd.unique(d["variant"]), key=_variant_order)
    colors = variant_colors(variants)
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    for i, v in enumerate(variants):
        p = d[d["variant"] == v]
        ax.plot(p["ai"], p["achieved_tflops"], ls="none", marker=markers[i % len(markers)],
                ms=9, color=colors[v], label=v)
    ai_lo = max(1e-2, float(d["ai"].min()) / 16) if not d.empty else 1.0
    ai_hi = float(d["ai"].max()) * 8 if not d.empty else 1e3
    x = np.geomspace(ai_lo, ai_hi, 200)
    top_roof = max(roofs.values()) if roofs else None
    for bw, label, color, style, lw in ((bw_tbps, "measured copy", CEILING_COLOR, "-", 2.5),
                                        (peak_tbps, "datasheet", PEAK_COLOR, "--", 1.5)):
        if _finite(bw):
            # TB/s x FLOP/byte = TFLOP/s.
            y = x * bw if top_roof is None else np.minimum(x * bw, top_roof)
            ax.plot(x, y, color=color, lw=lw, ls=style,
                    label=f"bandwidth roof: {label} {bw:.2f} TB/s")
    for i, (dtype, mm) in enumerate(sorted(roofs.items(), key=lambda kv: -kv[1])):
        _hline(ax, mm, f"matrix roof: measured {dtype} matmul {mm:.0f} TFLOP/s".replace(
            "  ", " "), "0.2", ["-.", ":", "--"][i % 3])
        if _finite(bw_tbps):
            ridge = mm / bw_tbps
            ax.axvline(ridge, color="0.6", lw=1, ls=":")
            ax.annotate(f"ridge {ridge:.0f} FLOP/B", xy=(ridge, mm / 1.15), rotation=90,
                        color="0.4", fontsize=10, ha="right", va="top")
    ax.set_xscale("log")
    _plain_log_y(ax)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.set_xlim(ai_lo, ai_hi)
    tops = ([float(d["achieved_tflops"].max())] if not d.empty else [1.0]) + list(roofs.values())
    lows = [float(d["achieved_tflops"].min())] if not d.empty else [0.1]
    ax.set_ylim(min(lows) / 3, max(tops) * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP per minimum byte, log scale)")
    ax.set_ylabel("achieved TFLOP/s (log scale)")
    ax.set_title(f"Roofline on {column_values(d, 'device')}\n{describe(d)}", loc="left")
    _legend_outside(ax)
    return fig


def _matrix_roofs(d: pd.DataFrame, mm_tflops: float | dict[str, float] | None
                  ) -> dict[str, float]:
    if isinstance(mm_tflops, dict):
        return {k: float(v) for k, v in mm_tflops.items() if _finite(v)}
    if mm_tflops is not None:
        dtype = column_values(d, "dot_dtype", "")
        return {dtype: float(mm_tflops)} if _finite(mm_tflops) else {}
    if d.empty or "mm_tflops" not in d.columns:
        return {}
    if "dot_dtype" not in d.columns:
        return {"": float(d["mm_tflops"].median())}
    roofs = d.groupby("dot_dtype")["mm_tflops"].median()
    return {str(k): float(v) for k, v in roofs.items() if _finite(v)}
