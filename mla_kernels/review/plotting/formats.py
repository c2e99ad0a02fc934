"""Weight formats at one context: heat maps of the fraction of the floor per cache dtype and
time per call per format."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from .axes import column_values, describe, figure_title, footer, new_figure, plain_log_y, timings_text
from .series import choose_series, rows_of
from .style import DEFAULT_LIMIT, design_color, series_label, set_style
from .tables import format_rows, format_table


def plot_formats(df: pd.DataFrame, *, ctx: int = 32000, series=None,
                 limit: int = DEFAULT_LIMIT) -> Figure:
    """FP4 against the other weight formats at one context: per cache dtype a heat map
    (weight format x design) of the fraction of the floor, each cell annotated with its value
    and the floor it is measured against (``dot_dtype``: "fp8 floor" / "bf16 floor"), blank
    "n/a" where nothing was measured; beside them time per call per format (grouped bars).

    Expects rows of the performance matrix (``perf_matrix.csv``): several weight formats
    and cache dtypes; rows at ``ctx``, single sequence, default configs and the most common
    model are kept. Each design in its device timing (``series`` as in ``choose_series``).
    """
    set_style()
    d = format_rows(df, ctx)
    chosen = choose_series(d, series, limit=limit, torch="all")
    fracs = format_table(d, ctx=ctx, series=chosen)
    times = format_table(d, ctx=ctx, value="median_us", series=chosen)
    caches = list(fracs)
    n = max(1, len(caches))
    ncols = len(chosen)
    heat_w, bars_w = 1.15 * ncols + 1.5, 0.75 * ncols + 2.0
    if n == 1:  # one heat map and the bars side by side
        fig, body = new_figure((heat_w + bars_w + 2.0, 8.5))
        gs = body.add_gridspec(1, 2, width_ratios=[heat_w, bars_w])
        bars_at = gs[0, 1]
    else:  # heat maps side by side, the bars (a group per format and cache) below them
        fig, body = new_figure((max(n * heat_w, 4 * n * 0.25 * ncols + 2.0) + 1.0, 15.5))
        gs = body.add_gridspec(2, n, height_ratios=[1.15, 1])
        bars_at = gs[1, :]
    cmap = plt.get_cmap("viridis").with_extremes(bad="#f2f2f2")
    for i, cache in enumerate(caches):
        ax = body.add_subplot(gs[0, i])
        t = fracs[cache]
        dots = {}
        for v, tm in chosen:
            r = rows_of(d, (v, tm))
            r = r[r["cache_dtype"] == cache]
            dots.update({(wf, v): dt for wf, dt in zip(r["weight_format"], r["dot_dtype"],
                                                       strict=True)})
        arr = np.ma.masked_invalid(t.to_numpy(dtype=float))
        im = ax.imshow(arr, cmap=cmap, vmin=0, vmax=1, aspect="auto")
        im.set_gid(f"heatmap/{cache}")
        for (ri, wf), (ci, v) in ((a, b) for a in enumerate(t.index) for b in enumerate(t.columns)):
            val = t.loc[wf, v]
            if np.isfinite(val):
                txt = f"{val:.2f}\n{dots.get((wf, v), '?')} floor"
                color = "white" if val < 0.55 else "black"
            else:
                txt, color = "n/a", "0.45"
            ax.text(ci, ri, txt, ha="center", va="center", fontsize=10, color=color,
                    gid=f"cell/{cache}/{wf}/{v}")
        ax.set_xticks(range(len(t.columns)), list(t.columns), rotation=35, ha="right")
        ax.set_yticks(range(len(t.index)), list(t.index))
        ax.grid(False)
        ax.set_xlabel("design (device time where measured)")
        if i == 0:
            ax.set_ylabel("weight format")
        ax.set_title(f"{cache} cache: fraction of the floor", loc="left")
        if i == n - 1:
            body.colorbar(im, ax=ax, fraction=0.05, pad=0.02,
                         label="fraction of the floor (floor time / time)")
    ax_b = body.add_subplot(bars_at)
    groups = [(c, wf) for c in caches for wf in fracs[c].index]
    width = 0.8 / max(1, ncols)
    for j, (v, tm) in enumerate(chosen):
        xs, hs = [], []
        for k, (cache, wf) in enumerate(groups):
            val = times[cache].loc[wf, v] if v in times[cache].columns else np.nan
            if np.isfinite(val):
                xs.append(k - 0.4 + (j + 0.5) * width)
                hs.append(val)
        ax_b.bar(xs, hs, width=width * 0.92, color=design_color(v), label=series_label(v, tm),
                 gid=f"{v}/{tm}", edgecolor="white", lw=0.5,
                 hatch="//" if tm == "flushed" else None)
    plain_log_y(ax_b)
    labels = [wf if len(caches) == 1 else f"{wf}\n{cache} cache" for cache, wf in groups]
    ax_b.set_xticks(range(len(groups)), labels)
    ax_b.set_xlim(-0.6, len(groups) - 0.4)
    ax_b.set_ylabel("time per call (µs, median, log scale)")
    ax_b.set_xlabel("weight format")
    ax_b.grid(axis="x", visible=False)
    ax_b.set_title(f"Time per call at {ctx} tokens", loc="left")
    if chosen:
        ax_b.legend(loc="upper right", ncol=2, fontsize=10, frameon=True, framealpha=0.9)
        ax_b.set_ylim(top=ax_b.get_ylim()[1] * 4)  # room for the legend above the bars
    figure_title(fig, f"gather_kv_b_proj on {column_values(d, 'device')}: weight formats at {ctx} "
                   f"tokens\n{describe(d, skip=('weight_format', 'cache_dtype'))}; "
                   f"{timings_text(chosen)}")
    footer(fig, d)
    return fig
