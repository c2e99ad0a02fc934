"""Occupancy: how much of the device one launch occupies, from the model of each design's
launch grid (computed, not measured)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from .axes import ctx_label, describe, figure_title, footer, new_figure, run_label
from .style import design_color, ran_text, set_style, short_config, variant_order


def _occupancy_series(df: pd.DataFrame, label: str | None) -> pd.DataFrame:
    """The rows with a ``_series`` key: one per row of the figure (design, device, config)."""
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
        d["_cfg"] = d["config"].map(short_config)
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
            gk = g[g["_k"] == k]
            ran = ran_text(gk.drop(columns=["config"], errors="ignore")) if v == "auto" else ""
            name = f"{v}{f' ({ran})' if ran else ''} on {dev} ({cus} CUs)"
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


def _per_cu_text(x: float) -> str:
    return f"{x:.2f}" if x < 1 else (f"{x:.1f}" if x < 10 else f"{x:.0f}")


def plot_occupancy(df: pd.DataFrame, *, label: str | None = None,
                   resources: pd.DataFrame | None = None,
                   code_commit: str | None = None) -> Figure:
    """Two tables of cells, one row per (device, design, configuration) and one column per
    context: left, the share of compute units busy in the first wave; right, working
    programs per compute unit. Every row shows, however many share a value (as lines, most
    of them would lie on one another at 100%).

    Expects the rows of ``occupancy.occupancy_table`` (variant, device, compute_units, ctx,
    programs_launched, programs_per_cu, busy_share; ``design``, ``config`` where known).
    Repeated (design, device) rows at one context are told apart by a ``label`` column (or
    the column named by ``label``), else by ``config`` (shortened: ``style.short_config``),
    else by the grid they launch. A row is named in its design's colour; ``auto``'s says
    what it ran. Each cell's text has the gid ``"busy/<row>/<ctx>"`` or
    ``"per_cu/<row>/<ctx>"``, each row label ``"row/<row>"``.

    Footer: the model is computed, at ``code_commit`` (default: the rows' ``commit`` where
    a saved table has one, else this checkout's commit stamp); ``resources``, the
    compiled-kernel resources it used (with their run's columns), are named as data.
    """
    set_style()
    d = _occupancy_series(df, label)
    devices = list(pd.unique(d["device"]))
    keys = (d[["_series", "device", "variant", "_k"]].drop_duplicates("_series")
            .assign(_dev=lambda x: x["device"].map(devices.index),
                    _v=lambda x: x["variant"].map(variant_order))
            .sort_values(["_dev", "_v", "_k"], kind="stable"))
    rows = list(keys["_series"])
    ctx = sorted({int(c) for c in d["ctx"]})
    busy = d.pivot_table(index="_series", columns="ctx", values="busy_share", aggfunc="first")
    per = d.pivot_table(index="_series", columns="ctx", values="programs_per_cu",
                        aggfunc="first")
    busy, per = busy.reindex(index=rows, columns=ctx), per.reindex(index=rows, columns=ctx)
    n = max(1, len(rows))
    fig, body = new_figure((22, 3.4 + 0.55 * n))
    ax, ax_p = body.subplots(1, 2, sharey=True)
    cmap = plt.get_cmap("viridis").with_extremes(bad="#f2f2f2")
    im = ax.imshow(np.ma.masked_invalid(busy.to_numpy(float)), cmap=cmap, vmin=0, vmax=1,
                   aspect="auto")
    im.set_gid("heatmap/busy")
    logp = np.log10(np.clip(per.to_numpy(float), 1e-3, None))
    lo, hi = (float(np.nanmin(logp)), float(np.nanmax(logp))) if np.isfinite(logp).any() \
        else (0.0, 1.0)
    lo, hi = min(lo, -0.01), max(hi, 0.01)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=lo, vmax=hi)  # one program per CU in the middle
    im_p = ax_p.imshow(np.ma.masked_invalid(logp), cmap=cmap, norm=norm, aspect="auto")
    im_p.set_gid("heatmap/per_cu")
    for i, name in enumerate(rows):
        for j, c in enumerate(ctx):
            b, p = busy.iloc[i, j], per.iloc[i, j]
            if np.isfinite(b):
                ax.text(j, i, f"{100 * b:.3g}%", ha="center", va="center", fontsize=10,
                        color="white" if b < 0.6 else "black", gid=f"busy/{name}/{c}")
            if np.isfinite(p):
                ax_p.text(j, i, _per_cu_text(p), ha="center", va="center", fontsize=10,
                          color="white" if norm(np.log10(max(p, 1e-3))) < 0.6 else "black",
                          gid=f"per_cu/{name}/{c}")
    for a in (ax, ax_p):
        a.set_xticks(range(len(ctx)), [ctx_label(c) for c in ctx], rotation=30, ha="right")
        a.set_xlabel("cached context (tokens)")
        a.grid(False)
        # A line between devices.
        for i in range(1, len(rows)):
            if keys["device"].iloc[i] != keys["device"].iloc[i - 1]:
                a.axhline(i - 0.5, color="white", lw=4)
    ax.set_yticks(range(len(rows)), rows)
    for lab, v in zip(ax.get_yticklabels(), keys["variant"], strict=True):
        lab.set_color(design_color(v))
        lab.set_fontweight("bold")
        lab.set_gid(f"row/{lab.get_text()}")
    ax.set_title("Share of compute units busy in the first wave (%)", loc="left")
    ax_p.set_title("Working programs per compute unit (colour: log scale, 1 in the middle)",
                   loc="left")
    figure_title(fig, "How much of the device one launch occupies (model of the launch grid)\n"
                   f"{describe(d)}; on {', '.join(devices)}")
    what = "model of each design's launch grid (computed, not measured)"
    if code_commit is None and "commit" in d.columns and d["commit"].notna().any():
        # A saved table names the run that computed it.
        head = f"{what}: {run_label(d).removeprefix('data: ')}"
    elif code_commit is None and resources is not None and len(resources) \
            and "commit" in resources.columns:
        # Drawn from a run's resources: named by that run, so a re-plot of it at a later
        # commit writes the same figure.
        head = f"{what}; devices {', '.join(devices)}"
    else:
        commit = code_commit if code_commit is not None else _commit_stamp()
        head = f"{what} at commit {commit}; devices {', '.join(devices)}"
    extra = None
    if resources is not None and len(resources) and "commit" in resources.columns:
        extra = ("resident programs per compute unit from the compiled kernels, "
                 + run_label(resources))
    footer(fig, d, extra, label=head)
    return fig


def _commit_stamp() -> str:
    from ...lab.provenance import commit_stamp

    return commit_stamp()
