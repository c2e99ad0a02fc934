"""The context path's figures, from ``review.crossover``'s table: the crossover map (which
way wins per cached context and new-token count, by how much, and where two serving
engines' thresholds choose the slower way), each way's fraction of its floor, and each
way's peak memory beside its time."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..crossover import ENGINE_RULES, PATHS
from .axes import ctx_label, figure_title, footer, new_figure, plain_log_y

PATH_COLORS = {"expanded": "#1f77b4", "absorbed": "#d62728"}
ENGINE_MARKS = {"SGLang": "S", "ATOM": "A"}
PATH_LABEL = {"expanded": "expand + attend", "absorbed": "absorbed"}
KERNEL_LABEL = {"hopper": "Gluon kernel", "portable": "portable kernel"}


def _path_label(table: pd.DataFrame, path: str) -> str:
    """A way's name, the absorbed one with the attention kernel its rows timed where the
    table says (``crossover.measured_table``'s ``absorbed_kernel``)."""
    kernels = (sorted(set(table["absorbed_kernel"].dropna()))
               if path == "absorbed" and "absorbed_kernel" in table.columns else [])
    names = ", ".join(KERNEL_LABEL.get(k, k) for k in kernels)
    return f"{PATH_LABEL[path]} ({names})" if names else PATH_LABEL[path]


def _grid(table: pd.DataFrame, col: str) -> tuple[list[int], list[int], np.ndarray]:
    cs = sorted(table["ctx"].unique())
    ns = sorted(table["new_tokens"].unique())
    a = np.full((len(cs), len(ns)), np.nan)
    for r in table.itertuples():
        a[cs.index(r.ctx), ns.index(r.new_tokens)] = getattr(r, col)
    return cs, ns, a


def _label(table: pd.DataFrame, fig: Figure) -> None:
    """The footer: the run the times come from (its provenance, carried by
    ``crossover.measured_table``) and how it timed, or that the figure is the floors alone."""
    src = table["source"].iloc[0] if "source" in table.columns else "?"
    if src.startswith("model"):
        footer(fig, table, label=f"{src}: floors only, no measured rows")
        return
    how = []
    if "timing" in table.columns and table["timing"].iloc[0] == "graph":
        how.append("times of one CUDA graph's replay")
    if "floor_source" in table.columns and table["floor_source"].iloc[0] == "measured":
        how.append("floors at the run's measured rates")
    footer(fig, table, extra=", ".join(how) or src)


def _title(table: pd.DataFrame, what: str) -> str:
    r = table.iloc[0]
    return (f"{what}, {r['model']}, {r['cache_dtype']} cache, {r['weight_format']} weight, "
            f"{r['kv_dtype']} K/V")


def plot_crossover(table: pd.DataFrame) -> Figure:
    """Left: log2 of the absorbed time over the expanded one per (C, n), blue where
    expanding wins, red where absorbing does, the ratio written in each cell with the
    engines whose rule chooses the slower way there (S: SGLang, A: ATOM). Right: each way's
    fraction of its floor (model rows: 1 by definition)."""
    fig, body = new_figure((15, 5.2))
    axes = body.subplots(1, 3, width_ratios=[1.3, 1, 1])
    cs, ns, e = _grid(table, "expanded_us")
    _, _, a = _grid(table, "absorbed_us")
    ratio = np.log2(a / e)
    lim = max(1.0, float(np.nanmax(np.abs(ratio)))) if np.isfinite(ratio).any() else 1.0
    ax = axes[0]
    ax.imshow(ratio, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto", origin="lower")
    wrong = {eng: _grid(table, f"{eng}_wrong")[2] for eng in ENGINE_RULES}
    for i in range(len(cs)):
        for j in range(len(ns)):
            if not np.isfinite(ratio[i, j]):
                continue
            win = "E" if ratio[i, j] >= 0 else "A"
            marks = "".join(ENGINE_MARKS[k] for k, w in wrong.items() if w[i, j] == 1)
            text = f"{win} {2 ** abs(ratio[i, j]):.2f}x" + (f"\nwrong: {marks}" if marks else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    color="white" if abs(ratio[i, j]) > 0.6 * lim else "black",
                    gid=f"cell/{cs[i]}/{ns[j]}")
    ax.set_xticks(range(len(ns)), [str(n) for n in ns])
    ax.set_yticks(range(len(cs)), [ctx_label(c) for c in cs])
    ax.set_xlabel("new tokens n")
    ax.set_ylabel("cached context C (tokens)")
    ax.set_title(f"which way wins (E: expand + attend, A: {_path_label(table, 'absorbed')}),"
                 "\nby how much")
    # The engines' context thresholds, drawn between the rows they separate.
    for eng, (rule, at) in ENGINE_RULES.items():
        below = [i for i, c in enumerate(cs) if (c < at if eng == "SGLang" else c <= at)]
        y = (max(below) + 0.5) if below else -0.5
        if 0 <= y + 0.5 <= len(cs):
            ax.axhline(y, color="k", ls="--" if eng == "SGLang" else ":", lw=1.5,
                       gid=f"engine/{eng}", label=f"{eng} ({ENGINE_MARKS[eng]}): {rule}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8, ncol=1,
              frameon=False)
    for ax, p in zip(axes[1:], PATHS, strict=True):
        _, _, f = _grid(table, f"{p}_fraction")
        ax.imshow(f, cmap="viridis", vmin=0, vmax=1, aspect="auto", origin="lower")
        for i in range(len(cs)):
            for j in range(len(ns)):
                if np.isfinite(f[i, j]):
                    ax.text(j, i, f"{f[i, j]:.2f}", ha="center", va="center", fontsize=9,
                            color="white" if f[i, j] < 0.5 else "black", gid=f"{p}/{cs[i]}/{ns[j]}")
        ax.set_xticks(range(len(ns)), [str(n) for n in ns])
        ax.set_yticks(range(len(cs)), [ctx_label(c) for c in cs])
        ax.set_xlabel("new tokens n")
        ax.set_title(f"{_path_label(table, p)}:\nfraction of its floor")
    figure_title(fig, _title(table, "Cached prefix: expand + attend or absorbed"))
    _label(table, fig)
    return fig


def plot_context_memory(table: pd.DataFrame) -> Figure:
    """Per cached context, each way's peak memory (left) and time (right) against the new
    tokens: the expanded one's memory is set by its chunk, the absorbed one's by n."""
    fig, body = new_figure((13, 5))
    ax_m, ax_t = body.subplots(1, 2)
    styles = ["-", "--", ":", "-."]
    for k, (c, g) in enumerate(table.groupby("ctx")):
        g = g.sort_values("new_tokens")
        for p in PATHS:
            kw = dict(color=PATH_COLORS[p], ls=styles[k % len(styles)], marker="o", ms=4)
            label = f"{_path_label(table, p)}, C {ctx_label(c)}"
            ax_m.plot(g["new_tokens"], g[f"{p}_peak_bytes"] / 2**20, label=label,
                      gid=f"memory/{p}/{c}", **kw)
            ax_t.plot(g["new_tokens"], g[f"{p}_us"], label=label, gid=f"time/{p}/{c}", **kw)
    for ax in (ax_m, ax_t):
        ax.set_xscale("log", base=2)
        plain_log_y(ax)
        ax.set_xlabel("new tokens n (log scale)")
        ns = sorted(table["new_tokens"].unique())
        ax.set_xticks(ns, [str(n) for n in ns])
    ax_m.set_ylabel("peak memory (MiB, log scale)")
    chunk = int(table["chunk_tokens"].max())
    ax_m.set_title(f"peak memory (expand + attend: chunks of at most {chunk} tokens)")
    src = table["source"].iloc[0]
    ax_t.set_ylabel("µs per call (log scale)" + (": the floor" if src.startswith("model") else ""))
    ax_t.set_title("time" if not src.startswith("model") else "floor (no measured rows)")
    ax_t.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure_title(fig, _title(table, "Cached prefix: peak memory beside time"))
    _label(table, fig)
    return fig


def close(fig: Figure) -> None:
    plt.close(fig)
