"""Weight formats at one context: per cache dtype, first what each format costs in time
against fp8 per-row (the ratio written in every cell), then the fraction of the floor each
cell reaches, scored by the dot that ran there; where the rows hold FP8 outputs, what those
cost against bf16 outputs, per format and context, with their exactness."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from .axes import column_values, describe, figure_title, footer, new_figure, unique_handles
from .series import choose_series
from .style import DEFAULT_LIMIT, TIMING_LONG, TIMING_NAME, TIMINGS, design_color, set_style
from .tables import (
    FP8_OUT_TIMING,
    REFERENCE_FORMAT,
    cache_order,
    format_cells,
    format_rows,
    fp8_output_cells,
    tables_of,
)

# What each ``dot_dtype`` a row can carry scores its fraction against.
# (Dots joined by "+" are MXFP4's routes on hopper_ws: a route-weighted floor.)
FLOOR_NAMES = {"fp8": "fp8 floor", "bf16": "bf16 floor", "fp8x2": "two-fp8-dot floor"}
FLOOR_TEXT = {
    "fp8": "fp8 floor: an fp8 x fp8 dot at cuBLAS's fp8 rate",
    "bf16": "bf16 floor: a bf16 dot at cuBLAS's bf16 rate",
    "fp8x2": "two-fp8-dot floor (dot fp8x2): MXFP4's split route on hopper_ws, two fp8 x fp8 "
             "dots a product, at cuBLAS's fp8 rate for twice the K where the run measured it",
}
ROUTES_TEXT = ("route-weighted floor (dot {dot}): MXFP4 on hopper_ws, each route's share of the "
               "work at its rate (fp8: the fp8 rate, fp8x2: twice the FLOPs at the fp8 rate for "
               "twice the K where measured, bf16: the bf16 rate)")


def _floor_name(dot: str) -> str:
    return "route-weighted floor" if "+" in dot else FLOOR_NAMES.get(dot, f"{dot} floor")


def _floor_text(dot: str) -> str:
    return ROUTES_TEXT.format(dot=dot) if "+" in dot else FLOOR_TEXT.get(dot, f"{dot} floor")


def floor_name(dot: str) -> str:
    """The floor a cell's fraction is of, by the ``dot_dtype`` its rows name."""
    if not dot:
        return "floor (dot not recorded)"
    return " / ".join(_floor_name(x) for x in dot.split("/"))


def ratio_text(ratio: float, us: float) -> str:
    """A time cell: its time over the series' fp8_row time, and its own time."""
    if np.isfinite(ratio):
        return f"{ratio:.2f}x\n{us:.0f} µs"
    return f"{us:.0f} µs\nno {REFERENCE_FORMAT}" if np.isfinite(us) else "n/a"


def fraction_text(cell: pd.Series | None) -> str:
    """A fraction cell: the fraction of the floor, the floor (``dot_dtype``), the fraction
    of the tensor-core floor and the route shares where the rows have them."""
    if cell is None or not np.isfinite(cell["roof_fraction"]):
        return "n/a"
    lines = [f"{cell['roof_fraction']:.2f}", floor_name(cell["dot_dtype"])]
    if np.isfinite(cell["tc_fraction"]):
        lines.append(f"{cell['tc_fraction']:.2f} of TC floor")
    if np.isfinite(cell["fp8_route_share"]):
        lines.append(f"fp8 route {cell['fp8_route_share']:.2f}")
    if np.isfinite(cell.get("split_route_share", np.nan)) and cell["split_route_share"] > 0:
        lines.append(f"split route {cell['split_route_share']:.2f}")
    return "\n".join(lines)


def _column_labels(chosen, cols, cells) -> list[str]:
    """Tick labels: the variant, its timing where one variant is in several, and for
    ``auto`` the design it ran (its ``design`` column)."""
    out = []
    for (v, tm), col in zip(chosen, cols, strict=True):
        lab = v if col == v else f"{v}\n{TIMING_NAME.get(tm, tm)}"
        if v == "auto":
            ran = [x for x in dict.fromkeys(
                "/".join(cells.loc[cells["column"] == col, "design"]).split("/")) if x]
            lab += f"\n(ran {' / '.join(ran)})" if ran else "\n(ran: not recorded)"
        out.append(lab)
    return out


def _left_out(d: pd.DataFrame, chosen, variants, series, limit: int, ctx: int) -> list[str]:
    """Why a series asked for (``variants``), or one the rows hold, is not drawn."""
    drawn = {v for v, _ in chosen}
    have = set(d["variant"].astype(str))
    if variants is not None:
        gone = [v for v in variants if v not in drawn]
        return [f"not drawn: {', '.join(gone)} (no rows at {ctx} tokens, single sequence)"
                ] if gone else []
    if series is None:
        gone = sorted(have - drawn)
        return [f"left out over the limit of {limit} series: {', '.join(gone)} (auto first, "
                f"then the slowest; series= draws them)"] if gone else []
    return []


def _notes(d: pd.DataFrame, cells: pd.DataFrame, left_out: list[str]) -> list[str]:
    """The sentences under the panels: which floor every fraction uses, the tensor-core
    floor where the rows have it, the other weight draws, what auto ran, what is left out."""
    dots = [x for x in dict.fromkeys("/".join(cells["dot_dtype"]).split("/")) if x]
    out = ["Fractions: floor_us / time, floor_us at cuBLAS's rates for the dot the row ran "
           "(its dot_dtype): " + "; ".join(_floor_text(x) for x in dots)
           + "." if dots else "Fractions: floor_us / time (the rows name no dot_dtype)."]
    tc = cells["tc_fraction"].notna()
    if "tc_floor_us" not in d.columns or not tc.any():
        out.append("Tensor-core floor (tc_floor_us, the MMA rate measured at this op's tile "
                   "shape): not in these rows.")
    else:
        out.append("'of TC floor': tc_floor_us / time, tc_floor_us at the tensor cores' rate "
                   "measured at this op's tile shape; blank where not measured.")
    old = cells[(cells["dot_dtype"] == "bf16") & (cells["fp8_route_share"] > 0)]
    if not old.empty:
        out.append("Cells with an fp8 route share above 0 whose rows name a bf16 dot are scored "
                   "against the bf16 floor, as those rows say (rows from before route-weighted "
                   "floors).")
    draws = d.loc[d["weight_draw"] != "", ["weight_row", "weight_draw"]].drop_duplicates()
    for wrow, draw in zip(draws["weight_row"], draws["weight_draw"], strict=True):
        out.append(f"{wrow}: the rows with weight_draw '{draw}' (their fp8 route share in "
                   "each cell where hopper_ws ran).")
    auto = cells[cells["variant"] == "auto"]
    configs = [c for c in dict.fromkeys(auto["config"]) if c]
    if not auto.empty:
        ran = [x for x in dict.fromkeys("/".join(auto["design"]).split("/")) if x]
        out.append(f"auto ran {' / '.join(ran) or 'a design its rows do not name'} (design "
                   "column)" + (f", config {'; '.join(configs)}" if configs else
                                ", its default config (config column empty)") + ".")
    return out + left_out


# What FP8 outputs are to cost against bf16 outputs, the same design at the same point.
FP8_OUT_TARGET = 0.85


def fp8_bar_text(cell: pd.Series) -> str:
    """A bar of the FP8-output panel, one line (written up the bar): its time over bf16
    outputs', its exact share and its most e4m3 steps."""
    ratio = f"{cell['time_ratio']:.2f}x" if np.isfinite(cell["time_ratio"]) else "no bf16 row"
    share = cell["fp8_exact_share"]
    parts = [ratio, f"{100 * share:.1f}% exact" if np.isfinite(share) else "exact: n/a"]
    if np.isfinite(cell["fp8_max_steps"]):
        parts.append(f"≤{cell['fp8_max_steps']:.0f} steps")
    if not cell["correct"]:
        parts.append("WRONG")
    return " · ".join(parts)


FP8_OUT_NOTE = (
    "FP8 outputs: time per call with e4m3 outputs (per-tensor scales) over the same series' "
    "time with bf16 outputs at the same point, {timing}; dashed: the target, "
    f"{FP8_OUT_TARGET}. The torch paths compute their bf16 result, then quantize K and V by "
    "one compiled function. 'exact': the least share of values equal to the contract's rule "
    "(reference.quantize_e4m3) applied to the float reference; 'steps': the most e4m3 steps "
    "from it (values that cancelled lie many fine steps off by the dot's rounding alone).")


def _fp8_panels(body, spec, cells: pd.DataFrame) -> None:
    """One bar panel per (cache, context) of the FP8-output cells: per weight format a bar
    per series, its height the time over bf16 outputs', the target line drawn."""
    panels = list(dict.fromkeys(zip(cells["cache_dtype"], cells["ctx"], strict=True)))
    sub = spec.subgridspec(1, len(panels), wspace=0.25)
    series = list(dict.fromkeys(cells["variant"]))
    top = max(1.15, float(np.nanmax(cells["time_ratio"].to_numpy(dtype=float), initial=0)) * 1.35)
    for i, (cache, ctx) in enumerate(panels):
        ax = body.add_subplot(sub[0, i])
        ax.set_gid(f"fp8out/{cache}/{ctx}")
        c = cells[(cells["cache_dtype"] == cache) & (cells["ctx"] == ctx)]
        fmts = list(dict.fromkeys(c["weight_format"]))
        width = 0.8 / max(1, len(series))
        for j, v in enumerate(series):
            for k, fmt in enumerate(fmts):
                r = c[(c["weight_format"] == fmt) & (c["variant"] == v)]
                if r.empty:
                    continue
                cell = r.iloc[0]
                x = k - 0.4 + width * (j + 0.5)
                h = float(cell["time_ratio"]) if np.isfinite(cell["time_ratio"]) else 0.0
                ax.bar(x, h, width * 0.92, color=design_color(v), label=v,
                       gid=f"fp8out/{cache}/{ctx}/{fmt}/{v}/bar")
                # Up the bar from its foot: 20 bars a panel leave no room for text across.
                ax.text(x, 0.02 * top, fp8_bar_text(cell), ha="center", va="bottom",
                        fontsize=7.5, rotation=90, color="0.05",
                        bbox={"fc": "white", "alpha": 0.75, "lw": 0, "pad": 1.0},
                        gid=f"fp8out/{cache}/{ctx}/{fmt}/{v}")
        ax.axhline(FP8_OUT_TARGET, ls="--", lw=1.4, color="0.1", gid="fp8out/target",
                   label=f"target {FP8_OUT_TARGET}")
        ax.text(1.01, FP8_OUT_TARGET, f"target\n{FP8_OUT_TARGET}", ha="left", va="center",
                fontsize=9, color="0.1", transform=ax.get_yaxis_transform(),
                gid=f"fp8out/{cache}/{ctx}/target")
        ax.axhline(1.0, lw=0.8, color="0.6")
        ax.set_xticks(range(len(fmts)), fmts)
        ax.set_xlim(-0.5, len(fmts) - 0.5)
        ax.set_ylim(0, top)
        ax.set_xlabel("weight format")
        if i == 0:
            ax.set_ylabel("time, FP8 / bf16 outputs (ratio)")
        # Short: five panels share the row (the y label and the suptitle say the ratio).
        ax.set_title(f"FP8 outputs, {cache} cache, {ctx} tokens", loc="left", fontsize=11)
        ax.grid(False, axis="x")
    panels_axes = [ax for ax in body.axes if (ax.get_gid() or "").startswith("fp8out/")]
    handles, labels = unique_handles(panels_axes)
    panels_axes[-1].legend(handles, labels, loc="upper left", fontsize=9,
                           bbox_to_anchor=(1.08, 1.0),
                           title=f"series ({TIMING_NAME.get(FP8_OUT_TIMING, FP8_OUT_TIMING)})")


def _heatmap(ax, table: pd.DataFrame, texts: dict[tuple[str, str], str], *, values, cmap, norm,
             gid: str, text_gid: str, dark) -> object:
    arr = np.ma.masked_invalid(np.asarray(values, dtype=float))
    im = ax.imshow(arr, cmap=cmap, norm=norm, aspect="auto")
    im.set_gid(gid)
    for ri, wrow in enumerate(table.index):
        for ci, col in enumerate(table.columns):
            txt = texts.get((wrow, col), "n/a")
            val = arr[ri, ci]
            color = "0.45" if txt == "n/a" else ("white" if dark(val) else "black")
            ax.text(ci, ri, txt, ha="center", va="center", fontsize=9.5, color=color,
                    gid=f"{text_gid}/{wrow}/{col}")
    ax.set_yticks(range(len(table.index)), [w.replace(" (", "\n(") for w in table.index])
    ax.grid(False)
    return im


def plot_formats(df: pd.DataFrame, *, ctx: int = 32000, series=None,
                 variants: Sequence[str] | None = None, limit: int = DEFAULT_LIMIT,
                 outputs: pd.DataFrame | None = None) -> Figure:
    """FP4 against the other weight formats at one context, per cache dtype.

    Top: time per call over the same series' fp8_row time on the same cache (the ratio
    and the time written in each cell; red slower, blue faster). Below: the fraction of the
    floor (``roof_fraction``), each cell naming the floor of the dot its rows ran
    (``dot_dtype``), the fraction of the tensor-core floor (``tc_floor_us``) and the fp8
    route share where the rows have them. Every other weight draw (``weight_draw``, e.g.
    MXFP4's ``wide``) is its own row; "n/a" where nothing was measured. Notes under the
    panels say which floor each fraction uses, what auto ran and what is not drawn.

    Expects rows of the performance matrix (``perf_matrix.csv``): several weight formats
    and cache dtypes; rows at ``ctx``, single sequence, default configs and the most common
    model are kept. ``variants``: the series asked for, each in its device timing (every one
    drawn, or named as not drawn); else ``series`` as in ``choose_series`` (default: every
    design in its device timing and every torch path, at most ``limit``).

    FP8 outputs: where the rows (or ``outputs``, rows of any context, for the notebook's
    rows kept to ``ctx``) hold rows with FP8 outputs (``out_dtype`` ``float8_e4m3fn``), a
    row of bar panels above the notes, one per (cache, context) measured: per weight format,
    the time of ``auto``, ``hopper_ws``, ``tiled`` and the torch paths with FP8 outputs over
    the same one's with bf16 outputs at the same point (device time), the target line at
    ``FP8_OUT_TARGET``, and each bar's exact share and most e4m3 steps written above it
    (``tables.fp8_output_cells``). Without such rows the figure is as it was before them.
    The heatmaps draw bf16 outputs only.
    """
    set_style()
    d = format_rows(df, ctx)
    if variants is not None and series is None:
        chosen = choose_series(d, [str(v) for v in variants], torch="all")
    else:
        chosen = choose_series(d, series, limit=limit, torch="all")
    cells = format_cells(d, chosen)
    ratios = tables_of(d, chosen, cells, "time_ratio")
    caches = cache_order(d) or ["?"]
    # No rows: one empty cell per panel, "n/a".
    rows = list(next(iter(ratios.values())).index) if ratios else ["no rows"]
    cols = (list(next(iter(ratios.values())).columns) if ratios else []) or ["no rows"]
    notes = _notes(d, cells, _left_out(d, chosen, variants, series, limit, ctx))
    # FP8 outputs against bf16 outputs: a row of panels only where the rows hold them.
    fp8 = fp8_output_cells(df if outputs is None else outputs)
    if not fp8.empty:
        notes.append(FP8_OUT_NOTE.format(timing=TIMING_LONG[FP8_OUT_TIMING].split(":")[0]))

    n, ncols, nrows = len(caches), max(1, len(cols)), max(1, len(rows))
    panel_w, panel_h = 1.45 * ncols + 2.4, 0.95 * nrows + 2.6
    note_h = 0.3 * len(notes) + 0.3
    # Caches side by side; one above the other where the series make a panel wide.
    tall = n > 1 and ncols > 9
    fp8_h = [] if fp8.empty else [6.0]
    if tall:
        fig, body = new_figure((panel_w + 1.8, 2 * n * panel_h + sum(fp8_h) + note_h + 1.2))
        gs = body.add_gridspec(2 * n + 1 + len(fp8_h), 1,
                               height_ratios=[panel_h] * (2 * n) + fp8_h + [note_h])
    else:
        fig, body = new_figure((n * panel_w + 1.8, 2 * panel_h + sum(fp8_h) + note_h + 1.2))
        gs = body.add_gridspec(3 + len(fp8_h), n,
                               height_ratios=[panel_h, panel_h, *fp8_h, note_h])

    def at(row: int, i: int):  # the panel of (time: 0 / fraction: 1, cache i)
        return gs[row * n + i, 0] if tall else gs[row, i]

    finite = np.abs(np.log2(cells["time_ratio"].dropna().to_numpy(dtype=float)))
    lim = max(1.0, float(finite.max())) if len(finite) else 1.0
    ratio_norm = Normalize(vmin=-lim, vmax=lim)
    ratio_cmap = plt.get_cmap("RdBu_r").with_extremes(bad="#f2f2f2")
    frac_cmap = plt.get_cmap("viridis").with_extremes(bad="#f2f2f2")
    labels = _column_labels(chosen, cols, cells) if chosen else cols
    timings = [t for t in TIMINGS if any(p[1] == t for p in chosen)]
    xlabel = (f"design ({TIMING_NAME[timings[0]]})" if len(timings) == 1
              else "design, timing")
    for i, cache in enumerate(caches):
        c = cells[cells["cache_dtype"] == cache]
        by = {(w, k): r for w, k, r in zip(c["weight_row"], c["column"],
                                           c.to_dict("records"), strict=True)}
        t = ratios.get(cache, pd.DataFrame(np.nan, index=rows, columns=cols))
        ax = body.add_subplot(at(0, i))
        texts = {key: ratio_text(r["time_ratio"], r["median_us"]) for key, r in by.items()}
        im = _heatmap(ax, t, texts, values=np.log2(t.to_numpy(dtype=float)), cmap=ratio_cmap,
                      norm=ratio_norm, gid=f"ratio/{cache}", text_gid=f"ratio/{cache}",
                      dark=lambda v: np.isfinite(v) and abs(v) > 0.6 * lim)
        ax.set_xticks(range(len(cols)), labels, rotation=0, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_title(f"{cache} cache: time per call / the same design's {REFERENCE_FORMAT} "
                     f"time", loc="left")
        if i == 0 or tall:
            ax.set_ylabel("weight format")
        if i == n - 1 or tall:
            ticks = [k for k in range(-int(np.floor(lim)), int(np.floor(lim)) + 1)]
            cb = body.colorbar(im, ax=ax, fraction=0.05, pad=0.02, ticks=ticks,
                               label=f"time / {REFERENCE_FORMAT} time (log scale)")
            cb.ax.set_yticklabels([f"{2.0 ** k:g}x" for k in ticks])
        ax = body.add_subplot(at(1, i))
        frac = tables_of(d, chosen, cells, "roof_fraction").get(
            cache, pd.DataFrame(np.nan, index=rows, columns=cols))
        texts = {key: fraction_text(pd.Series(r)) for key, r in by.items()}
        im = _heatmap(ax, frac, texts, values=frac.to_numpy(dtype=float), cmap=frac_cmap,
                      norm=Normalize(vmin=0, vmax=1), gid=f"heatmap/{cache}",
                      text_gid=f"cell/{cache}",
                      dark=lambda v: np.isfinite(v) and v < 0.55)
        ax.set_xticks(range(len(cols)), labels, rotation=0, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_title(f"{cache} cache: fraction of the floor of the dot that ran", loc="left")
        if i == 0 or tall:
            ax.set_ylabel("weight format")
        if i == n - 1 or tall:
            body.colorbar(im, ax=ax, fraction=0.05, pad=0.02,
                          label="fraction of the floor (floor_us / time)")
    if not fp8.empty:
        _fp8_panels(body, gs[-2, :], fp8)
    ax_n = body.add_subplot(gs[-1, :])
    ax_n.axis("off")
    ax_n.text(0.0, 1.0, "\n".join(notes), ha="left", va="top", fontsize=11, color="0.2",
              transform=ax_n.transAxes, gid="notes", wrap=True)
    timing_text = "; ".join(TIMING_LONG[t].split(":")[0] for t in timings)
    also = "" if fp8.empty else ", and FP8 outputs against bf16 outputs"
    figure_title(fig, f"gather_kv_b_proj on {column_values(d, 'device')}: weight formats at {ctx} "
                   f"tokens: time against {REFERENCE_FORMAT}, then "
                   f"the fraction of the floor{also}\n"
                   f"{describe(d, skip=('weight_format', 'cache_dtype'))}; "
                   f"{timing_text or 'no rows'}")
    footer(fig, d)
    return fig
