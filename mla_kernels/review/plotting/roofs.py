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
    ctx_label,
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
    spread,
    timings_text,
)
from .series import choose_series, left_out_note, rows_of, series_rows, tidy
from .style import (
    ATTAINABLE_COLOR,
    CEILING_COLOR,
    DEFAULT_LIMIT,
    PEAK_COLOR,
    ROOF_STYLE,
    TC_COLOR,
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
                     lw: float, label: str | None = None, **line) -> pd.DataFrame:
    """One series on a roofline: its points joined in context order, a marker sized by each
    point's context (the small ones drawn over the large). Returns its rows, by context."""
    v, t = series
    p = rows_of(d, series).sort_values("ctx")
    if p.empty:
        return p
    st = variant_style(v, t)
    ax.plot(p["ai"], p["achieved_tflops"], color=st["color"], ls=st["ls"], lw=lw,
            marker=st["marker"], ms=6, label=label or series_label(v, t), gid=f"{v}/{t}",
            zorder=4, **line)
    q = p.sort_values("ctx", ascending=False)
    ax.scatter(q["ai"], q["achieved_tflops"], s=[sizes[int(c)] ** 2 for c in q["ctx"]],
               color=st["color"], marker=st["marker"], edgecolors="white", linewidths=0.6,
               zorder=5, label="_nolegend_")
    return p


def tc_roofs(rows: pd.DataFrame) -> dict[str, tuple[float, float | None]]:
    """{dot dtype: (tensor-core TFLOP/s, SM clock MHz or None)}: the median ``tc_tflops`` and
    ``sm_clock_mhz`` of the rows of each dot; empty where the rows did not measure it."""
    if rows.empty or "tc_tflops" not in rows.columns or "dot_dtype" not in rows.columns:
        return {}
    out = {}
    for dtype, g in rows.groupby("dot_dtype", sort=True):
        rate = pd.to_numeric(g["tc_tflops"], errors="coerce").median()
        if not positive(rate):
            continue
        clock = (pd.to_numeric(g["sm_clock_mhz"], errors="coerce").median()
                 if "sm_clock_mhz" in g.columns else None)
        out[str(dtype)] = (float(rate), float(clock) if positive(clock) else None)
    return out


TC_MISSING = "tensor-core rate not measured in this run"


def tc_text(dtype: str, rate: float, clock: float | None) -> str:
    """'tensor cores, fp8, 1620 TFLOP/s at 1755 MHz' (the rate is at the rows' SM clock)."""
    at = f" at {clock:.0f} MHz" if clock else " (SM clock not recorded)"
    return f"tensor cores, {dtype}, {rate:.0f} TFLOP/s{at}"


def _roofs_to_draw(d: pd.DataFrame, shown: pd.DataFrame, bw_tbps, mm_tflops, peak_tbps,
                   peak_tflops, datasheet: bool):
    """[(kind, bandwidth TB/s or None, {dtype: TFLOP/s}, {dtype: legend text})] of the
    roofline, highest roofs of each kind first: measured (copy, cuBLAS), tensor cores (on the
    copy bandwidth: ``tc_floor_us`` is max(byte floor, FLOPs / tc rate)), datasheet."""
    bw = copy_roof(d, bw_tbps)
    dtypes = sorted(set(shown["dot_dtype"])) if "dot_dtype" in shown.columns else []
    roofs = matrix_roofs(d, mm_tflops)
    roofs = {k: v for k, v in roofs.items() if k in dtypes} or roofs
    spec = _datasheet(d) if datasheet else None
    if peak_tbps is None and spec is not None:
        peak_tbps = spec.peak_tbps
    if peak_tflops is None and spec is not None:
        peak_tflops = {dt: spec.peak(dt) for dt in (roofs or {"fp8": 0})}
    ds = {k: float(v) for k, v in (peak_tflops or {}).items() if positive(v)}
    ds = {k: v for k, v in ds.items() if k in dtypes} or ds
    tc = tc_roofs(shown)
    out = [("measured", bw, roofs,
            {k: f"matrix roof: measured {k} matmul (cuBLAS) {v:.0f} TFLOP/s".replace("  ", " ")
             for k, v in roofs.items()}),
           ("tensor cores", bw, {k: r for k, (r, _) in tc.items()},
            {k: tc_text(k, r, c) for k, (r, c) in tc.items()}),
           ("datasheet", peak_tbps if positive(peak_tbps) else None, ds,
            {k: f"matrix roof: datasheet {k} matmul {v:.0f} TFLOP/s" for k, v in ds.items()})]
    return out


_GID_KIND = {"measured": "measured", "tensor cores": "tc", "datasheet": "datasheet"}


def _draw_roof_set(ax, x: np.ndarray, sets, *, texts: bool, ridge_y: Mapping[str, float]
                   ) -> None:
    """Each kind's roofs as separate swatches (``style.ROOF_STYLE``): its bandwidth part up to
    its highest ridge, each matrix roof flat from its ridge, the ridges dotted (labelled on
    the axes with ``texts``). The tensor-core roofs share the measured copy bandwidth, drawn
    once, up to the highest of their ridges."""
    ridge_of = {}
    for kind, bw, roofs, _ in sets:
        if positive(bw):
            for dt, mm in roofs.items():
                ridge_of[(kind, dt)] = mm / bw
    copy_end = max([r for (k, _), r in ridge_of.items() if k != "datasheet"], default=None)
    for kind, bw, roofs, labels in sets:
        g = _GID_KIND[kind]
        if positive(bw) and kind != "tensor cores":
            end = copy_end if kind == "measured" else max(
                [r for (k, _), r in ridge_of.items() if k == kind], default=None)
            xs = x if end is None or end >= x[-1] else np.concatenate((x[x < end], [end]))
            if len(xs) < 2:  # the bandwidth part lies left of these axes
                xs = np.array([])
            color, ls, lw = ROOF_STYLE[(kind, "bandwidth")]
            what = "copy, read + write" if kind == "measured" else "HBM"
            ax.plot(xs, xs * bw, color=color, ls=ls, lw=lw, gid=f"roof/{g}/bandwidth",
                    label=f"bandwidth roof: {kind} {bw:.2f} TB/s ({what})", zorder=2)
        color, ls, lw = ROOF_STYLE[(kind, "matrix")]
        for i, (dt, mm) in enumerate(sorted(roofs.items(), key=lambda kv: -kv[1])):
            ridge = ridge_of.get((kind, dt), float(x[0]))
            xs = np.concatenate(([ridge], x[x > ridge])) if ridge < x[-1] else np.array([])
            if len(xs):
                ax.plot(xs, np.full_like(xs, mm), color=color, ls=ls,
                        lw=lw if i == 0 else lw * 0.6, gid=f"roof/{g}/{dt}", label=labels[dt],
                        zorder=2)
            if (kind, dt) in ridge_of and x[0] < ridge < x[-1]:
                ax.axvline(ridge, color=color, ls=":", lw=1.2, gid=f"ridge/{g}/{dt}",
                           label="_nolegend_", zorder=1)
                if texts:
                    name = {"measured": "cuBLAS", "tensor cores": "tensor cores"}.get(kind, kind)
                    right = kind == "tensor cores"  # beside the datasheet ridge's label
                    ax.annotate(f"ridge {ridge:.0f} ({name} {dt})", xy=(ridge, ridge_y[kind]),
                                xycoords=("data", "axes fraction"), rotation=90,
                                ha="left" if right else "right", va="bottom", fontsize=10,
                                color=color, xytext=(2 if right else -2, 0),
                                textcoords="offset points", gid=f"ridge-label/{g}/{dt}")


def _roof_at(sets, ai: np.ndarray) -> list[np.ndarray]:
    """Every roof's attainable TFLOP/s at the intensities ``ai``: min(bandwidth x AI, roof)."""
    out = []
    for _, bw, roofs, _ in sets:
        for mm in roofs.values():
            out.append(np.minimum(ai * bw, mm) if positive(bw) else np.full_like(ai, mm))
    return out


def plot_roofline(df: pd.DataFrame, *, bw_tbps: float | None = None,
                  mm_tflops: float | dict[str, float] | None = None,
                  peak_tbps: float | None = None, peak_tflops: dict[str, float] | None = None,
                  datasheet: bool = True, series=None, limit: int = DEFAULT_LIMIT) -> Figure:
    """Four panels. Top left: the roofline (achieved TFLOP/s against FLOP per minimum byte),
    each series' points joined in context order, marker size growing with context, with its
    roofs: measured (copy bandwidth and cuBLAS matmul: the floor ``roof_fraction`` is taken
    against), the tensor cores' own rate (``tc_tflops`` at ``sm_clock_mhz``, the rows'
    medians; "not measured in this run" where the rows lack it), datasheet; the ridges.
    Top right: the same zoomed to this operation's intensities, each series named at its
    end. Bottom: the fraction of the floor at cuBLAS's rates (``roof_fraction``) and of the
    tensor-core floor (``tc_floor_us / median_us``) against context.

    Expects single-sequence rows of one configuration with ``flops``, ``min_bytes``,
    ``achieved_tflops``, ``roof_fraction``, ``dot_dtype``, ``copy_tbps``, ``mm_tflops``
    (``tc_tflops``, ``tc_floor_us``, ``sm_clock_mhz`` where measured). Measured roofs:
    ``bw_tbps`` (default the rows' ``copy_tbps``) and ``mm_tflops`` (one rate, {dot dtype:
    rate}, or None for the rows' per ``dot_dtype``). Datasheet roofs from ``peak_tbps`` /
    ``peak_tflops`` or, with ``datasheet``, the device registry.
    """
    set_style()
    d, chosen, shown = roofline_rows(df, series, limit)
    sets = _roofs_to_draw(d, shown, bw_tbps, mm_tflops, peak_tbps, peak_tflops, datasheet)
    has_tc = bool(sets[1][2])
    fig, body = new_figure((21, 15))
    (ax, ax_z), (ax_f, ax_t) = body.subplots(2, 2, width_ratios=[1.15, 1])
    sizes = ctx_sizes(shown["ctx"]) if not shown.empty else {}
    labels = {(v, t): series_label(v, t, rows_of(d, (v, t))) for v, t in chosen}

    # ---- the whole roofline, zoomed to the points and the ridges
    ridges = [mm / bw for _, bw, roofs, _ in sets if positive(bw) for mm in roofs.values()]
    xs = list(shown["ai"]) + ridges or [100.0]
    lo, hi = min(xs) / 1.3, max(xs) * 1.35
    x = np.geomspace(lo, hi, 400)
    _draw_roof_set(ax, x, sets, texts=True,
                   ridge_y={"measured": 0.04, "tensor cores": 0.04, "datasheet": 0.42})
    if not shown.empty:
        a0, a1 = float(shown["ai"].min()), float(shown["ai"].max())
        ax.axvspan(a0 / 1.01, a1 * 1.01, color="0.88", zorder=0, lw=0, gid="band",
                   label=f"this operation: {a0:.0f}-{a1:.0f} FLOP per minimum byte "
                         "(rises with context; zoomed at right)")
    for v, t in chosen:
        roofline_series(ax, d, (v, t), sizes, lw=1.2, label=labels[(v, t)],
                        mec=variant_style(v, t)["mec"], mew=0.6)
    plain_log_x(ax, lo, hi)
    plain_log_y(ax)
    tops = [float(np.max(r)) for r in _roof_at(sets, x)] + list(shown["achieved_tflops"])
    lows = list(shown["achieved_tflops"]) or [min(tops, default=1.0) / 10]
    ax.set_ylim(min(lows) / 1.8, max(tops + [1.0]) * 1.6)
    ax.set_xlabel("arithmetic intensity (FLOP per minimum byte, log scale)")
    ax.set_ylabel("achieved TFLOP/s (log scale)")
    ax.set_title("Roofline (marker size: context)", loc="left")
    if not has_tc:
        ax.text(0.01, 0.985, TC_MISSING, transform=ax.transAxes, ha="left", va="top",
                fontsize=11, color=TC_COLOR, gid="note/tc")
    if sizes:
        size_legend(ax, sizes, loc="center left")  # left of the ridges, below the roofs

    # ---- zoomed to the band, each series named at its right end
    if not shown.empty:
        w = max(a1 - a0, 0.02 * a1)
        zx = np.linspace(a0 - 0.15 * w, a1 + 0.15 * w, 100)
        _draw_roof_set(ax_z, zx, sets, texts=False, ridge_y={})
        ends = []
        for v, t in chosen:
            p = roofline_series(ax_z, d, (v, t), sizes, lw=1.4, label=labels[(v, t)],
                                mec=variant_style(v, t)["mec"], mew=0.6)
            if not p.empty:
                ends.append(((v, t), float(p["ai"].iloc[-1]), float(p["achieved_tflops"].iloc[-1])))
        roof_ends = [(kind, dt, float(np.minimum(zx[-1] * bw, mm) if positive(bw) else mm),
                      positive(bw) and zx[-1] * bw < mm)
                     for kind, bw, roofs, _ in sets for dt, mm in roofs.items()]
        ys = [e[2] for e in ends] + [r[2] for r in roof_ends]
        y0, y1 = min(ys) / 1.6, max(ys) * 1.3
        ax_z.set_yscale("log")
        ax_z.set_ylim(y0, y1)
        ax_z.set_xlim(zx[0], a1 + 0.95 * w)
        plain_log_y(ax_z)
        # Labels apart by a line's height in log10(y): the axes span log10(y1 / y0).
        span = np.log10(y1 / y0)
        gap = span * 0.035
        # A roof still on its bandwidth part here says so: its line is the bandwidth's.
        names = [labels[s].rsplit(",", 1)[0] for s, _, _ in ends] + [
            ("cuBLAS" if k == "measured" else k) + f" {dt}" + (" (bandwidth-bound here)"
                                                              if slanted else "")
            for k, dt, _, slanted in roof_ends]
        colors = [variant_style(*s)["color"] for s, _, _ in ends] + [
            ROOF_STYLE[(k, "matrix")][0] for k, _, _, _ in roof_ends]
        gids = [f"label/{s[0]}/{s[1]}" for s, _, _ in ends] + [
            f"label/roof/{_GID_KIND[k]}/{dt}" for k, dt, _, _ in roof_ends]
        at = [(e[1], e[2]) for e in ends] + [(zx[-1], r[2]) for r in roof_ends]
        pos = spread([np.log10(y) for _, y in at], gap, np.log10(y0) + gap, np.log10(y1) - gap)
        lx = a1 + 0.3 * w
        for (px, py), yl, name, color, gid in zip(at, pos, names, colors, gids, strict=True):
            ax_z.annotate(name, xy=(px, py), xytext=(lx, 10 ** yl), textcoords="data",
                          ha="left", va="center", fontsize=10.5, color=color, gid=gid,
                          arrowprops={"arrowstyle": "-", "color": color, "lw": 0.7,
                                      "shrinkA": 0, "shrinkB": 3})
    ax_z.set_xlabel("arithmetic intensity (FLOP per minimum byte, linear)")
    ax_z.set_ylabel("achieved TFLOP/s (log scale)")
    ax_z.set_title("At this operation's intensity (zoom of the band)", loc="left")

    # ---- fractions of the two floors against context
    top = 1.0
    for v, t in chosen:
        p = rows_of(d, (v, t))
        if p.empty:
            continue
        st = variant_style(v, t)
        r = p.groupby("ctx")["roof_fraction"].median()
        ax_f.plot(r.index, r.values, **st, label=labels[(v, t)], gid=f"{v}/{t}")
        top = max(top, float(np.nanmax(r.values)))
        if has_tc and "tc_floor_us" in p.columns:
            q = (pd.to_numeric(p["tc_floor_us"], errors="coerce") / p["median_us"])
            q = q.groupby(p["ctx"]).median().dropna()
            if not q.empty:
                ax_t.plot(q.index, q.values, **st, label=labels[(v, t)], gid=f"{v}/{t}")
                top = max(top, float(q.max()))
    ax_f.axhline(1.0, color=CEILING_COLOR, lw=1.8, zorder=1, gid="floor:measured",
                 label="_nolegend_")
    ax_f.set_ylabel("fraction of the floor (floor_us / time)")
    ax_f.set_title("Fraction of the floor at cuBLAS's rates (roof_fraction; 1 = on the "
                   "measured roofs)", loc="left", fontsize=13)
    ax_t.set_ylabel("fraction of the tensor-core floor (tc_floor_us / time)")
    ax_t.set_title("Fraction of the tensor-core floor (1 = at the MMA rate or copy bandwidth)",
                   loc="left", fontsize=13)
    if has_tc:
        ax_t.axhline(1.0, color=TC_COLOR, lw=1.8, zorder=1, gid="floor:tc", label="_nolegend_")
    else:
        ax_t.text(0.5, 0.5, TC_MISSING, transform=ax_t.transAxes, ha="center", va="center",
                  fontsize=13, color=TC_COLOR, gid="note/tc")
    for a in (ax_f, ax_t):
        a.set_ylim(0, 1.08 * top)
        set_ctx_axis(a, shown["ctx"] if not shown.empty else [])
    fig_legend(body, (ax,), ncol=3)
    figure_title(fig, f"gather_kv_b_proj on {column_values(d, 'device')}: roofline and fraction of "
                   f"the floor\n{describe(d)}; {timings_text(chosen)}")
    footer(fig, d, note=left_out_note(d, chosen, series=series, limit=limit))
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
        ax.plot(r.index, r.values, **variant_style(v, t),
                label=series_label(v, t, rows_of(d, (v, t))), gid=f"{v}/{t}")
        if best is None or r.iloc[-1] > best[2].iloc[-1]:
            best = (v, t, r)
    shown = series_rows(d, chosen)
    top = [float(shown["achieved_tbps"].max()) if not shown.empty else 1e-3]
    ceilings, labels = {}, []
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
            top.append(float(c.max()))
            labels.append((f"ceiling at this op's AI, {dt} dot: {c.iloc[-1]:.2f} TB/s at "
                           f"{ctx_label(c.index[-1])} tokens", float(c.iloc[0]),
                           ATTAINABLE_COLOR, f"label/ceiling/{dt}"))
    for val, lab, color, style, gid in (
            (peak_tbps, f"datasheet peak {peak_tbps or 0:.2f} TB/s", PEAK_COLOR, "--", "peak"),
            (copy_tbps, f"measured copy ceiling {copy_tbps or 0:.2f} TB/s (read + write)",
             CEILING_COLOR, "-", "copy"),
            (write_tbps, f"measured write-only fill {write_tbps or 0:.2f} TB/s", CEILING_COLOR,
             ":", "write")):
        if positive(val):
            ax.axhline(val, color=color, ls=style, lw=1.8, label=lab, gid=gid, zorder=1)
            labels.append((lab, float(val), color, f"label/{gid}"))
            top.append(float(val))
    y1 = 1.12 * max(top)
    # Each reference line's value written at the left, just above it; labels of lines
    # closer than a text line are moved apart (4.80 and 4.63 TB/s would print over each other).
    gap = 0.04 * y1
    pos = spread([y + 0.018 * y1 for _, y, _, _ in labels], gap, hi=y1 - gap / 2)
    for (lab, _, color, gid), y in zip(labels, pos, strict=True):
        ax.text(0.01, y, lab, transform=ax.get_yaxis_transform(), ha="left", va="center",
                fontsize=10, color=color, gid=gid,
                bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
    if best is not None:
        v, t, r = best
        dt = rows_of(d, (v, t))["dot_dtype"].iloc[0]
        if dt in ceilings and r.index[-1] in ceilings[dt].index:
            frac = r.iloc[-1] / ceilings[dt][r.index[-1]]
            ax.annotate(f"{v}: {r.iloc[-1]:.2f} TB/s\n= {frac:.2f} of the ceiling",
                        xy=(r.index[-1], r.iloc[-1]), xytext=(-10, -34),
                        textcoords="offset points", ha="right", fontsize=10,
                        color=design_color(v), arrowprops={"arrowstyle": "-", "color": "0.5"})
    ax.set_ylim(0, y1)
    ax.set_ylabel("achieved bandwidth (TB/s, minimum bytes / time)")
    set_ctx_axis(ax, contexts)
    ax.set_title(f"Bandwidth reached on {column_values(d, 'device')}\n{describe(d)}; "
                 f"{timings_text(chosen)}", loc="left", fontsize=14)
    fig_legend(body, (ax,), ncol=2)
    footer(fig, d, note=left_out_note(d, chosen, series=series, limit=limit))
    return fig
