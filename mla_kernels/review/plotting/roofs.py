"""Roofs: the measured and datasheet roofs of a device, the roofline and the bandwidth
reached against the ceiling at this operation's arithmetic intensity."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ...core.devices import lookup_device
from ..analysis import attainable_tbps, positive
from .axes import (
    column_values,
    ctx_sizes,
    describe,
    fig_legend,
    figure_title,
    footer,
    new_figure,
    plain_log_x,
    plain_log_y,
    set_ctx_axis,
    size_legend,
    timings_text,
)
from .series import choose_series, rows_of, series_rows, tidy
from .style import (
    ATTAINABLE_COLOR,
    CEILING_COLOR,
    DEFAULT_LIMIT,
    PEAK_COLOR,
    design_color,
    series_label,
    set_style,
    variant_style,
)


def matrix_roofs(d: pd.DataFrame, mm_tflops: float | dict[str, float] | None
                  ) -> dict[str, float]:
    """{dot dtype: measured matmul TFLOP/s}: given, or the rows' median per ``dot_dtype``."""
    if isinstance(mm_tflops, Mapping):
        return {str(k): float(v) for k, v in mm_tflops.items() if positive(v)}
    if mm_tflops is not None:
        dtype = column_values(d, "dot_dtype", "")
        return {dtype: float(mm_tflops)} if positive(mm_tflops) else {}
    if d.empty or "mm_tflops" not in d.columns:
        return {}
    if "dot_dtype" not in d.columns:
        return {"": float(d["mm_tflops"].median())}
    roofs = d.groupby("dot_dtype")["mm_tflops"].median()
    return {str(k): float(v) for k, v in roofs.items() if positive(v)}


def copy_roof(d: pd.DataFrame, bw_tbps: float | None) -> float | None:
    if bw_tbps is None and "copy_tbps" in d.columns and not d.empty:
        bw_tbps = float(d["copy_tbps"].median())
    return bw_tbps if positive(bw_tbps) else None


def _datasheet(d: pd.DataFrame, device: str | None = None):
    name = device or column_values(d, "device", "")
    return lookup_device(name) if name else None


def draw_roofs(ax, x: np.ndarray, bw: float | None, roofs: Mapping[str, float], *,
                kind: str, color: str, ls: str, lw: float, ridge_dtypes: Iterable[str] = (),
                label_ridges: bool = True, below: bool = False,
                ridge_label_y: float = 0.5) -> dict[str, float]:
    """One device's roofs in TFLOP/s against FLOP/B: the bandwidth roof bending at the
    highest matrix roof, each matrix roof from its ridge on, and the ridges asked for as
    vertical lines. Each matrix roof's value is written at its right end, above the line
    (``below``: under it, so two sets of roofs do not print over each other); ridge labels
    at ``ridge_label_y`` (axes fraction). Returns {dot dtype: ridge}."""
    top = max(roofs.values()) if roofs else None
    ridges = {}
    if positive(bw):
        # TB/s x FLOP/B = TFLOP/s.
        y = x * bw if top is None else np.minimum(x * bw, top)
        ax.plot(x, y, color=color, ls=ls, lw=lw, label=f"bandwidth roof: {kind} {bw:.2f} TB/s",
                gid=f"roof/{kind}/bandwidth", zorder=2)
    for i, (dtype, mm) in enumerate(sorted(roofs.items(), key=lambda kv: -kv[1])):
        ridge = mm / bw if positive(bw) else float(x[0])
        ridges[dtype] = ridge
        xs = x[x >= ridge]
        xs = np.concatenate(([ridge], xs)) if len(xs) else np.array([ridge, x[-1]])
        ax.plot(xs, np.full_like(xs, mm), color=color, ls=ls, lw=lw if i == 0 else lw * 0.6,
                label=f"matrix roof: {kind} {dtype} matmul {mm:.0f} TFLOP/s".replace("  ", " "),
                gid=f"roof/{kind}/{dtype}", zorder=2)
        ax.annotate(f"{kind} {dtype} {mm:.0f}", xy=(x[-1], mm), xytext=(-4, -3 if below else 3),
                    textcoords="offset points", ha="right", va="top" if below else "bottom",
                    fontsize=10, color=color)
        if dtype in ridge_dtypes and positive(bw):
            ax.axvline(ridge, color=color, ls=":", lw=1.3, gid=f"ridge/{kind}/{dtype}",
                       label=f"ridge, {kind} {dtype}: {ridge:.0f} FLOP/B", zorder=1)
            if label_ridges:
                ax.annotate(f"ridge {ridge:.0f}", xy=(ridge, ridge_label_y),
                            xycoords=("data", "axes fraction"), rotation=90,
                            ha="left" if below else "right", va="bottom", fontsize=10,
                            color=color, xytext=(2 if below else -2, 0),
                            textcoords="offset points")
    return ridges


# ------------------------------------------------------------------ roofline
def roofline_rows(df: pd.DataFrame, series, limit: int
                   ) -> tuple[pd.DataFrame, list[tuple[str, str]], pd.DataFrame]:
    """A roofline's rows: ``tidy``'s copy with each row's arithmetic intensity (``ai``, FLOP
    per minimum byte), the series to draw (``choose_series``) and their rows."""
    d = tidy(df)
    d["ai"] = d["flops"] / d["min_bytes"]
    chosen = choose_series(d, series, limit=limit)
    return d, chosen, series_rows(d, chosen)


def roofline_series(ax, d: pd.DataFrame, series: tuple[str, str], sizes: Mapping[int, float],
                     lw: float, **line) -> pd.DataFrame:
    """One series on a roofline: its points joined in context order, a marker sized by each
    point's context (the small ones drawn over the large). Returns its rows, by context."""
    v, t = series
    p = rows_of(d, series).sort_values("ctx")
    if p.empty:
        return p
    st = variant_style(v, t)
    ax.plot(p["ai"], p["achieved_tflops"], color=st["color"], ls=st["ls"], lw=lw,
            marker=st["marker"], ms=6, label=series_label(v, t), gid=f"{v}/{t}", zorder=4,
            **line)
    q = p.sort_values("ctx", ascending=False)
    ax.scatter(q["ai"], q["achieved_tflops"], s=[sizes[int(c)] ** 2 for c in q["ctx"]],
               color=st["color"], marker=st["marker"], edgecolors="white", linewidths=0.6,
               zorder=5, label="_nolegend_")
    return p


def plot_roofline(df: pd.DataFrame, *, bw_tbps: float | None = None,
                  mm_tflops: float | dict[str, float] | None = None,
                  peak_tbps: float | None = None, peak_tflops: dict[str, float] | None = None,
                  datasheet: bool = True, series=None, limit: int = DEFAULT_LIMIT) -> Figure:
    """Left: each series on a roofline (achieved TFLOP/s against FLOP per minimum byte),
    its points joined in context order, marker size growing with context, axes zoomed to
    the points, both roofs and the ridges. Right: the fraction of the floor against context.

    Expects single-sequence rows of one configuration with ``flops``, ``min_bytes``,
    ``achieved_tflops``, ``roof_fraction``, ``dot_dtype``, ``copy_tbps``, ``mm_tflops``.
    Measured roofs: ``bw_tbps`` (default the rows' ``copy_tbps``) and ``mm_tflops`` (one rate,
    {dot dtype: rate}, or None for the rows' per ``dot_dtype``). Datasheet roofs dashed, from
    ``peak_tbps`` / ``peak_tflops`` or, with ``datasheet``, the device registry.
    """
    set_style()
    d, chosen, shown = roofline_rows(df, series, limit)
    bw = copy_roof(d, bw_tbps)
    roofs = matrix_roofs(d, mm_tflops)
    spec = _datasheet(d) if datasheet else None
    if peak_tbps is None and spec is not None:
        peak_tbps = spec.peak_tbps
    if peak_tflops is None and spec is not None:
        peak_tflops = {dt: spec.peak(dt) for dt in (roofs or {"fp8": 0})}
    ds_roofs = {k: float(v) for k, v in (peak_tflops or {}).items() if positive(v)}
    fig, body = new_figure((21, 8.5))
    ax, ax_f = body.subplots(1, 2, width_ratios=[1.3, 1])

    sizes = ctx_sizes(shown["ctx"]) if not shown.empty else {}
    dtypes = sorted(set(shown["dot_dtype"])) if "dot_dtype" in shown.columns else []
    # The roofs of the dot dtypes drawn (a bf16 roof without a bf16 series is noise).
    roofs = {k: v for k, v in roofs.items() if k in dtypes} or roofs
    ds_roofs = {k: v for k, v in ds_roofs.items() if k in dtypes} or ds_roofs
    ridges = [r / b for r, b in ((max(roofs.values(), default=0), bw),
                                 (max(ds_roofs.values(), default=0), peak_tbps)) if positive(r)
              and positive(b)]
    xs = list(shown["ai"]) + ridges or [100.0]
    # Zoomed to the points and the ridges: the slanted and the flat roofs both show.
    lo, hi = min(xs) / 1.3, max(xs) * 1.35
    x = np.geomspace(lo, hi, 400)
    draw_roofs(ax, x, bw, roofs, kind="measured", color=CEILING_COLOR, ls="-", lw=2.5,
                ridge_dtypes=dtypes)
    if positive(peak_tbps) or ds_roofs:
        draw_roofs(ax, x, peak_tbps, ds_roofs, kind="datasheet", color=PEAK_COLOR, ls="--",
                    lw=1.6, ridge_dtypes=dtypes, below=True)
    if not shown.empty:
        a0, a1 = float(shown["ai"].min()), float(shown["ai"].max())
        ax.axvspan(a0 / 1.01, a1 * 1.01, color="0.85", alpha=0.6, zorder=0, lw=0,
                   label=f"this operation: {a0:.0f}-{a1:.0f} FLOP per minimum byte "
                         "(rises with context)")
    for v, t in chosen:
        p = roofline_series(ax, d, (v, t), sizes, lw=1.4, mec=variant_style(v, t)["mec"],
                             mew=0.6)
        if p.empty:
            continue
        st = variant_style(v, t)
        r = p.groupby("ctx")["roof_fraction"].median()
        ax_f.plot(r.index, r.values, **st, label=series_label(v, t), gid=f"{v}/{t}")
    ax.set_xscale("log")
    plain_log_x(ax, lo, hi)
    plain_log_y(ax)
    tops = list(roofs.values()) + list(ds_roofs.values()) + list(shown["achieved_tflops"])
    lows = list(shown["achieved_tflops"]) or [min(tops, default=1.0) / 10]
    ax.set_ylim(min(lows) / 1.8, max(tops + [1.0]) * 1.6)
    ax.set_xlabel("arithmetic intensity (FLOP per minimum byte, log scale)")
    ax.set_ylabel("achieved TFLOP/s (log scale)")
    ax.set_title("Roofline (marker size: context)", loc="left")
    if sizes:
        size_legend(ax, sizes, loc="lower right")
    ax_f.axhline(1.0, color=CEILING_COLOR, lw=1.5, zorder=1)
    ax_f.set_ylim(0, 1.08 * max([1.0] + list(shown.get("roof_fraction", []))))
    ax_f.set_ylabel("fraction of the floor (floor time / time)")
    ax_f.set_title("Fraction of the floor (1 = on the measured roof)", loc="left")
    set_ctx_axis(ax_f, shown["ctx"] if not shown.empty else [])
    fig_legend(body, (ax,), ncol=4)
    figure_title(fig, f"gather_kv_b_proj on {column_values(d, 'device')}: roofline and fraction of "
                   f"the floor\n{describe(d)}; {timings_text(chosen)}")
    footer(fig, d)
    return fig


# ------------------------------------------------------------------ bandwidth
def plot_bandwidth(df: pd.DataFrame, *, peak_tbps: float | None = None,
                   copy_tbps: float | None = None, write_tbps: float | None = None,
                   mm_tflops: float | dict[str, float] | None = None, series=None,
                   limit: int = DEFAULT_LIMIT) -> Figure:
    """Achieved TB/s (minimum bytes / time) against context per series, with the ceiling
    this operation can reach at its arithmetic intensity (min(copy, matmul / AI), per dot
    dtype of the series drawn) labelled, the measured copy and write-only ceilings, and the
    datasheet peak (``peak_tbps``, default from the device registry).

    Expects single-sequence rows of one configuration (with ``flops``, ``min_bytes``,
    ``achieved_tbps``, ``dot_dtype``); ceilings default to the rows' ``copy_tbps``,
    ``write_tbps`` and ``mm_tflops`` medians.
    """
    set_style()
    d = tidy(df)
    chosen = choose_series(d, series, limit=limit)
    copy_tbps = copy_roof(d, copy_tbps)
    if write_tbps is None and "write_tbps" in d.columns and not d.empty:
        write_tbps = float(d["write_tbps"].median())
    roofs = matrix_roofs(d, mm_tflops)
    spec = _datasheet(d)
    if peak_tbps is None and spec is not None:
        peak_tbps = spec.peak_tbps
    fig, body = new_figure((16, 8.5))
    ax = body.subplots()
    contexts: set[int] = set()
    best = None
    for v, t in chosen:
        r = rows_of(d, (v, t)).groupby("ctx")["achieved_tbps"].median()
        if r.empty:
            continue
        contexts |= set(r.index.astype(int))
        ax.plot(r.index, r.values, **variant_style(v, t), label=series_label(v, t),
                gid=f"{v}/{t}")
        if best is None or r.iloc[-1] > best[2].iloc[-1]:
            best = (v, t, r)
    shown = series_rows(d, chosen)
    top = [float(shown["achieved_tbps"].max()) if not shown.empty else 1e-3]
    ceilings = {}
    if positive(copy_tbps) and not shown.empty:
        for i, dt in enumerate(sorted(set(shown["dot_dtype"]), key=lambda k: -roofs.get(k, 0))):
            g = shown[shown["dot_dtype"] == dt]
            ai = (g["flops"] / g["min_bytes"]).groupby(g["ctx"]).median()
            mm = roofs.get(dt)
            c = pd.Series([attainable_tbps(a, copy_tbps, mm) for a in ai], index=ai.index)
            ceilings[dt] = c
            lab = (f"ceiling at this op's AI ({ai.iloc[-1]:.0f} FLOP/B), {dt} dot: "
                   f"min(copy, {mm:.0f} TFLOP/s / AI) = {c.iloc[-1]:.2f} TB/s"
                   if positive(mm) else f"ceiling, {dt} dot: copy {copy_tbps:.2f} TB/s")
            ax.plot(c.index, c.values, color=ATTAINABLE_COLOR, lw=5 if i == 0 else 2.5,
                    alpha=0.35 if i == 0 else 0.6, ls="-", label=lab, gid=f"ceiling/{dt}",
                    zorder=1, solid_capstyle="round")
            ax.annotate(f"ceiling at AI, {dt} dot: {c.iloc[-1]:.2f} TB/s", xy=(c.index[-1],
                        c.iloc[-1]), xytext=(6, 0), textcoords="offset points",
                        color=ATTAINABLE_COLOR, fontsize=10, va="center", ha="left")
            top.append(float(c.max()))
    for val, lab, color, style, gid in (
            (peak_tbps, f"datasheet peak {peak_tbps or 0:.2f} TB/s", PEAK_COLOR, "--", "peak"),
            (copy_tbps, f"measured copy ceiling {copy_tbps or 0:.2f} TB/s (read + write)",
             CEILING_COLOR, "-", "copy"),
            (write_tbps, f"measured write-only fill {write_tbps or 0:.2f} TB/s", CEILING_COLOR,
             ":", "write")):
        if positive(val):
            ax.axhline(val, color=color, ls=style, lw=1.8, label=lab, gid=gid, zorder=1)
            ax.annotate(lab, xy=(0.01, val), xycoords=("axes fraction", "data"), xytext=(0, 3),
                        textcoords="offset points", color=color, fontsize=10, va="bottom")
            top.append(float(val))
    if best is not None:
        v, t, r = best
        dt = rows_of(d, (v, t))["dot_dtype"].iloc[0]
        if dt in ceilings and r.index[-1] in ceilings[dt].index:
            frac = r.iloc[-1] / ceilings[dt][r.index[-1]]
            ax.annotate(f"{v}: {r.iloc[-1]:.2f} TB/s\n= {frac:.2f} of the ceiling",
                        xy=(r.index[-1], r.iloc[-1]), xytext=(-10, -34),
                        textcoords="offset points", ha="right", fontsize=10,
                        color=design_color(v), arrowprops={"arrowstyle": "-", "color": "0.5"})
    ax.set_ylim(0, 1.12 * max(top))
    ax.set_ylabel("achieved bandwidth (TB/s, minimum bytes / time)")
    set_ctx_axis(ax, contexts)
    ax.set_title(f"Bandwidth reached on {column_values(d, 'device')}\n{describe(d)}; "
                 f"{timings_text(chosen)}", loc="left", fontsize=14)
    fig_legend(body, (ax,), ncol=2)
    footer(fig, d)
    return fig
