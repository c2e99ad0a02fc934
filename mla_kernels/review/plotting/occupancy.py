"""Occupancy: how much of the device one launch occupies, from the model of each design's
launch grid (computed, not measured)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from .axes import ctx_label, describe, fig_legend, figure_title, footer, new_figure, plain_log_y, set_ctx_axis
from .style import design_color, set_style

_DEVICE_MARKERS = ("o", "s", "^", "D")
_CONFIG_LINES = ("-", (0, (6, 2, 1, 2)), (0, (2, 1.5)))


def _occupancy_series(df: pd.DataFrame, label: str | None) -> pd.DataFrame:
    """The rows with a ``_series`` key: one per line (design, device and config)."""
    d = df.drop_duplicates().copy()
    col = label or ("label" if "label" in d.columns else None)
    if col is not None and col in d.columns:
        d["_series"] = d[col].astype(str)
        d["_k"] = d.groupby(["device", "variant"])[col].transform(
            lambda s: pd.factorize(s)[0])
        return d
    if "config" in d.columns and d["config"].notna().any():
        d["_k"] = d.groupby(["device", "variant"])["config"].transform(
            lambda s: pd.factorize(s.fillna(""))[0])
        d["_cfg"] = d["config"].fillna("default").astype(str)
    else:
        # Rows of one (device, design) repeated at a context are different configurations
        # (``auto`` resolving to a design with another launch config): the n-th repeat at each
        # context belongs to the n-th configuration.
        d["_k"] = d.groupby(["device", "variant", "contexts" if "contexts" in d.columns
                             else "ctx"]).cumcount()
        d["_cfg"] = ""
    names = {}
    for (dev, v), g in d.groupby(["device", "variant"], sort=False):
        cus = int(g["compute_units"].iloc[0])
        ks = sorted(pd.unique(g["_k"]))
        # Where the configs differ: their programs at the first context where they do.
        diff_ctx = None
        if len(ks) > 1:
            for c, gc in g.groupby("ctx"):
                if gc["programs_launched"].nunique() > 1:
                    diff_ctx = c
                    break
        for k in ks:
            name = f"{v} on {dev} ({cus} CUs)"
            gk = g[g["_k"] == k]
            if len(ks) > 1:
                cfg = str(gk["_cfg"].iloc[0])
                if cfg:
                    name += f", {cfg}"
                elif diff_ctx is not None:
                    progs = int(gk.loc[gk["ctx"] == diff_ctx, "programs_launched"].iloc[0])
                    name += f", grid of {progs} programs at {ctx_label(diff_ctx)}"
                else:
                    name += f", config {k + 1}"
            names[(dev, v, k)] = name
    d["_series"] = [names[(a, b, c)] for a, b, c in zip(d["device"], d["variant"], d["_k"],
                                                         strict=True)]
    return d


def plot_occupancy(df: pd.DataFrame, *, label: str | None = None) -> Figure:
    """Left: share of compute units busy in the first wave against context; right: working
    programs per compute unit. One line per (design, device, configuration).

    Expects the rows of ``occupancy.occupancy_table`` (variant, device, compute_units, ctx,
    programs_launched, programs_per_cu, busy_share). Repeated (design, device) rows at one
    context are told apart by a ``label`` column (or the column named by ``label``), else
    by ``config``, else by the grid they launch. Colour: the design; marker: the device;
    line style: the configuration.
    """
    set_style()
    d = _occupancy_series(df, label)
    fig, body = new_figure((20, 8.5))
    ax, ax_p = body.subplots(1, 2)
    devices = list(pd.unique(d["device"]))
    for name in pd.unique(d["_series"]):
        g = d[d["_series"] == name].sort_values("ctx")
        v, dev, k = g["variant"].iloc[0], g["device"].iloc[0], int(g["_k"].iloc[0])
        lab = name
        if g["busy_share"].nunique() == 1 and g["busy_share"].iloc[0] < 0.5:
            # A flat, low line is the argument: its number goes into the legend.
            r = g.iloc[0]
            lab += f": {r['programs_working']} programs, {100 * r['busy_share']:.1f}% busy"
        mk = _DEVICE_MARKERS[devices.index(dev) % len(_DEVICE_MARKERS)]
        # A second configuration is drawn thinner and on top, so a line it coincides with
        # still shows under it.
        kw = dict(color=design_color(v), ls=_CONFIG_LINES[k % len(_CONFIG_LINES)],
                  lw=2.6 if k == 0 else 1.6, zorder=2 if k == 0 else 3, marker=mk,
                  ms=8 if k == 0 else 7, mfc=design_color(v) if k == 0 else "white",
                  mec=design_color(v), mew=1.5, label=lab, gid=name)
        ax.plot(g["ctx"], 100 * g["busy_share"], **kw)
        ax_p.plot(g["ctx"], g["programs_per_cu"], **kw)
    ax.set_ylim(0, 105)
    ax.set_ylabel("compute units busy in the first wave (%)")
    ax.set_title("Share of compute units busy", loc="left")
    plain_log_y(ax_p)
    ax_p.axhline(1.0, color="0.35", lw=1.4, ls=(0, (8, 3)), zorder=1,
                 label="one program per compute unit (reference)")
    ax_p.set_ylabel("working programs per compute unit (log scale)")
    ax_p.set_title("Programs per compute unit", loc="left")
    for a in (ax, ax_p):
        set_ctx_axis(a, d["ctx"])
    fig_legend(body, (ax, ax_p), ncol=3)
    figure_title(fig, "How much of the device one launch occupies (model of the launch grid)\n"
                   f"{describe(d)}; on {', '.join(devices)}")
    footer(fig, d, "occupancy model of each design's launch grid (computed, not measured)")
    return fig
