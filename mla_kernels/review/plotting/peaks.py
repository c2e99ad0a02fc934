"""Each device against its own peaks: a roofline panel per device (ours and the public
change's) and the fraction of each one's attainable peak."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ...core.devices import lookup_device
from ...lab import roofline
from ..analysis import peak_fractions, positive, timed_points
from .axes import (
    column_values,
    ctx_sizes,
    figure_title,
    footer,
    new_figure,
    plain_log_x,
    plain_log_y,
    ref_device,
    size_legend,
    timings_text,
)
from .roofs import copy_roof, draw_roofs, matrix_roofs, roofline_rows, roofline_series
from .series import reference_list
from .style import (
    CEILING_COLOR,
    DEFAULT_LIMIT,
    PEAK_COLOR,
    REFERENCE_COLOR,
    ref_style,
    series_label,
    set_style,
    variant_style,
)


def _marks(fr: pd.DataFrame, device: str, group: str, color: str, marker: str) -> list[tuple]:
    """``analysis.peak_fractions``' rows as the fraction panel's marks: (device, group label,
    colour, marker, ctx, fraction, against)."""
    return [(device, group, color, marker, c, f, a)
            for c, f, a in zip(fr["ctx"], fr["fraction"], fr["against"], strict=True)]


def plot_peaks(df: pd.DataFrame, reference: pd.DataFrame | None = None,
               merged: pd.DataFrame | None = None, *, reference_device: str = "MI355X",
               shape: str = "kimi-k3-tp8", cache_dtype: str = "fp8",
               weight_format: str = "fp8_row", series=None, limit: int = DEFAULT_LIMIT) -> Figure:
    """Each device against its own peaks at this operation's arithmetic intensity.

    Top: one roofline panel per device (TFLOP/s against FLOP/B; datasheet roofs dashed from
    the device registry, measured roofs solid where the rows measured them: ``copy_tbps``,
    ``mm_tflops`` per ``dot_dtype``; the fp8 ridges; a band at the op's AI). Our rows on
    their device; the public change's tables on ``reference_device``: ``reference`` (its
    first table: ctx, before_ms, after_ms) and ``merged`` (the version merged: ctx_tokens,
    before_us, after_us), their points computed from the byte/FLOP model
    (``analysis.timed_points(shape, ctx, us, cache_dtype, weight_format)``).
    Bottom: the fraction of the attainable peak, min(bandwidth x AI, matrix roof), per
    (device, design, context), as ``analysis.peak_fractions`` computes it: filled against
    the datasheet roofs, hollow against the measured ones.

    Expects single-sequence rows of the op (``flops``, ``min_bytes``, ``achieved_tflops``,
    ``ctx``, ``dot_dtype``, ``copy_tbps``, ``mm_tflops``), e.g. ``roofline.csv``'s.
    """
    set_style()
    d, chosen, shown = roofline_rows(df, series, limit)
    ours = column_values(d, "device", "")
    refs = reference_list({"first table": reference, "as merged": merged},
                           default_name="public change")
    # The public change's calls placed by the byte/FLOP model: {(table, which): rows}.
    ref_pts = {(name, which): timed_points(shape, ref["ctx"], ref[f"{which}_us"], cache_dtype,
                                           weight_format)
               for name, ref, _raw in refs for which in ("before", "after")}
    ref_dev = reference_device
    for _name, _ref, raw in refs:
        ref_dev = ref_device(raw, reference_device)
    dot = roofline.dot_dtype(cache_dtype, weight_format)

    devices = [n for n in (ours, ref_dev if refs else "") if n]
    fig, body = new_figure((20, 15))
    gs = body.add_gridspec(2, max(1, len(devices)), height_ratios=[1.1, 1])
    panels = {n: body.add_subplot(gs[0, i]) for i, n in enumerate(devices)}
    ax_b = body.add_subplot(gs[1, :])

    all_ai = list(shown["ai"]) + [a for p in ref_pts.values() for a in p["flop_per_byte"]]
    a0, a1 = (min(all_ai), max(all_ai)) if all_ai else (380.0, 380.0)
    contexts = set(shown["ctx"].astype(int)) | {c for p in ref_pts.values() for c in p["ctx"]}
    sizes = ctx_sizes(contexts, 6, 14)
    fractions = []  # (device, group label, colour, marker, ctx, fraction, against)
    for name, ax in panels.items():
        spec = lookup_device(name)
        ds_bw = spec.peak_tbps if spec is not None else None
        mine = name == ours
        # The roofs of the op's dot dtype, and of the dtypes of our series drawn.
        keep = {dot} | (set(shown["dot_dtype"]) if mine and not shown.empty else set())
        ds = {dt: spec.peak(dt) for dt in sorted(keep)} if spec is not None else {}
        ds = {k: v for k, v in ds.items() if positive(v)}
        bw = copy_roof(d, None) if mine else None
        roofs = {k: v for k, v in matrix_roofs(d, None).items() if k in keep} if mine else {}
        ridges = [v / b for v, b in ((ds.get(dot), ds_bw), (roofs.get(dot), bw))
                  if positive(v) and positive(b)]
        lo, hi = min([a0] + ridges) / 2.2, max([a1] + ridges) * 2.2
        x = np.geomspace(lo, hi, 400)
        if roofs and bw:
            draw_roofs(ax, x, bw, roofs, kind="measured", color=CEILING_COLOR, ls="-", lw=2.5,
                        ridge_dtypes=[dot])
        draw_roofs(ax, x, ds_bw, ds, kind="datasheet", color=PEAK_COLOR, ls="--", lw=1.8,
                    ridge_dtypes=[dot], below=True)
        ax.axvspan(a0 / 1.01, a1 * 1.01, color="0.8", alpha=0.7, zorder=0, lw=0,
                   label=f"this operation: {a0:.0f}-{a1:.0f} FLOP/B")
        ax.annotate(f"this op\n{a1:.0f} FLOP/B", xy=(a1 * 1.02, 0.98),
                    xycoords=("data", "axes fraction"), ha="left", va="top", fontsize=10,
                    color="0.25")
        pts_y = []
        if mine:
            for v, t in chosen:
                p = roofline_series(ax, d, (v, t), sizes, lw=1.2)
                if p.empty:
                    continue
                st = variant_style(v, t)
                pts_y += list(p["achieved_tflops"])
                fr = peak_fractions(p, {"datasheet": (ds_bw, ds), "measured": (bw, roofs)})
                fractions += _marks(fr, name, f"{name}: {series_label(v, t)}", st["color"],
                                    st["marker"])
        if name == ref_dev and refs:
            for i, (rname, _ref, _raw) in enumerate(refs):
                for which in ("before", "after"):
                    pts = ref_pts[(rname, which)].sort_values("ctx", kind="stable")
                    st = ref_style(i, which)
                    label = f"public change, {rname}: {which}"
                    ax.plot(pts["flop_per_byte"].tolist(), pts["achieved_tflops"].tolist(),
                            **{**st, "lw": 1.2}, label=label, gid=f"reference/{rname}/{which}",
                            zorder=4)
                    pts_y += pts["achieved_tflops"].tolist()
                    fr = peak_fractions(pts, {"datasheet": (ds_bw, ds)})
                    fractions += _marks(fr, name, f"{name}: {label}", REFERENCE_COLOR,
                                        st["marker"])
        plain_log_x(ax, lo, hi)
        plain_log_y(ax)
        tops = list(ds.values()) + list(roofs.values()) + pts_y
        ax.set_ylim(min(pts_y or [10.0]) / 2, max(tops + [1.0]) * 1.8)
        ax.set_xlabel("arithmetic intensity (FLOP per minimum byte, log scale)")
        ax.set_ylabel("TFLOP/s (log scale)")
        kind = ("ours" if mine else "the public change's published figures")
        ax.set_title(f"{name}: {kind}", loc="left")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=2, fontsize=10,
                  frameon=False)

    # Bottom: fraction of the attainable peak, one row per (device, series); against the
    # datasheet roofs a little above the row's line, against the measured ones below.
    groups = list(dict.fromkeys(f[1] for f in fractions))
    ypos = {g: len(groups) - 1 - i for i, g in enumerate(groups)}
    both = {g for g in groups if {f[6] for f in fractions if f[1] == g} == {"datasheet",
                                                                              "measured"}}
    for _dev, g, color, marker, c, frac, against in fractions:
        hollow = against == "measured"
        y = ypos[g] + ((-0.17 if hollow else 0.17) if g in both else 0.0)
        ax_b.plot([frac], [y], ls="none", marker=marker, ms=sizes.get(c, 9),
                  mfc="white" if hollow else color, mec=color, mew=1.6 if hollow else 0.6,
                  gid=f"fraction/{g}/{c}/{against}", alpha=0.95)
    if groups:
        for g in groups:
            for against, dy in (("datasheet", 0.17), ("measured", -0.17)):
                m = [f[5] for f in fractions if f[1] == g and f[6] == against]
                if m:
                    ax_b.annotate(f"{max(m):.2f}" + (" (measured roofs)" if against == "measured"
                                                     else ""),
                                  xy=(max(m), ypos[g] + (dy if g in both else 0)), xytext=(10, 0),
                                  textcoords="offset points", va="center", fontsize=10,
                                  color="0.25")
        ax_b.set_yticks(list(ypos.values()), list(ypos.keys()), fontsize=11)
        ax_b.set_ylim(-0.7, len(groups) - 0.3)
        devs = [f[0] for f in fractions]
        for i in range(1, len(groups)):
            a, b = groups[i - 1], groups[i]
            if devs[[f[1] for f in fractions].index(a)] != devs[[f[1] for f in fractions].index(b)]:
                ax_b.axhline((ypos[a] + ypos[b]) / 2, color="0.4", lw=1)
    fmax = max([1.0] + [f[5] for f in fractions])
    ax_b.set_xlim(0, 1.1 * fmax)
    ax_b.axvline(1.0, color="0.3", lw=1.2)
    ax_b.set_xlabel(f"fraction of the attainable peak at the op's AI ({a1:.0f} FLOP/B): achieved "
                    "TFLOP/s / min(bandwidth x AI, matrix roof)")
    ax_b.set_title("Fraction of each device's own attainable peak (filled: datasheet roofs; "
                   "hollow: measured roofs; marker size: context)", loc="left")
    ax_b.grid(axis="y", visible=False)
    if sizes:
        size_legend(ax_b, sizes, loc="lower right")
    figure_title(fig, f"gather_kv_b_proj against each device's own peaks: "
                   f"{', '.join(devices)}\n{shape}, {cache_dtype} cache, {weight_format} weight; "
                   f"ours in {timings_text(chosen) or 'no rows'}")
    footer(fig, d, f"{ref_dev}: the public change's published tables "
                   f"({', '.join(n for n, _, _ in refs)})" if refs else None)
    return fig
