"""Each device against its own peak: achieved TB/s per context and series, ours on the H200
and the public change's published tables on the MI355X, each bar carrying its fraction of
its device's datasheet bandwidth, beside the ceiling the operation can reach at its
arithmetic intensity on that device."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ...core.devices import lookup_device
from ...lab import roofline
from ..analysis import bandwidth_fractions, positive, timed_points
from .axes import (
    column_values,
    ctx_label,
    figure_title,
    footer,
    new_figure,
    ref_device,
    unique_handles,
)
from .roofs import copy_roof, matrix_roofs, roofline_rows
from .series import reference_list, rows_of
from .style import (
    ATTAINABLE_COLOR,
    DEFAULT_LIMIT,
    PEAK_COLOR,
    REFERENCE_COLOR,
    TIMING_LONG,
    TIMINGS,
    design_color,
    series_label,
    set_style,
)
from .tables import text_values

# The public change's bars, per table: (after, before). Black, as its lines elsewhere:
# "after" filled (the first table) or cross-hatched, "before" hollow.
_REF_BARS = (({"color": REFERENCE_COLOR, "edgecolor": REFERENCE_COLOR, "hatch": None},
              {"color": "white", "edgecolor": REFERENCE_COLOR, "hatch": None}),
             ({"color": "white", "edgecolor": REFERENCE_COLOR, "hatch": "xx"},
              {"color": "white", "edgecolor": REFERENCE_COLOR, "hatch": ".."}))


def _auto_ran(rows: pd.DataFrame) -> str:
    """What auto's rows ran: their ``design`` and, where not empty, ``config``."""
    def vals(col):
        if col not in rows.columns:
            return []
        return [v for v in dict.fromkeys(text_values(rows[col])) if v]
    designs, configs = vals("design"), vals("config")
    out = f"ran {' / '.join(designs)}" if designs else "ran: not recorded"
    return out + (f", config {'; '.join(configs)}" if configs else "")


def _per_ctx(fr: pd.DataFrame) -> pd.DataFrame:
    """``bandwidth_fractions``' rows, the median per context (rows timed more than once)."""
    return fr.groupby("ctx", sort=True).median(numeric_only=True).reset_index()


def _bars(ax, groups: dict[int, list[dict]], *, gid_prefix: str) -> list[float]:
    """One group of bars per context (side by side, in the order given), each bar's
    fraction of the datasheet bandwidth written above it; returns each group's centre."""
    x, centres = 0.0, []
    for c in sorted(groups):
        bars = groups[c]
        xs = [x + i for i in range(len(bars))]
        centres.append(float(np.mean(xs)) if xs else x)
        for xi, b in zip(xs, bars, strict=True):
            ax.bar([xi], [b["tbps"]], width=0.86, color=b["color"], edgecolor=b["edgecolor"],
                   hatch=b["hatch"], lw=1.0, label=b["label"], gid=b["gid"], zorder=3)
            ax.text(xi, b["tbps"], f" {b['fraction']:.2f}", ha="center", va="bottom",
                    rotation=90, fontsize=10, color="0.15", zorder=4,
                    gid=f"fraction/{gid_prefix}/{b['gid']}/{c}")
        for key, style in (("measured", {"color": ATTAINABLE_COLOR, "ls": "-", "lw": 2.6}),
                           ("datasheet", {"color": PEAK_COLOR, "ls": ":", "lw": 2.2})):
            vals = [b[f"{key}_ceiling"] for b in bars if np.isfinite(b[f"{key}_ceiling"])]
            peak = bars[0]["peak"] if bars else np.nan
            # The datasheet ceiling drawn only where the matrix roof holds it under the
            # bandwidth (at the datasheet peak it is the peak line).
            if vals and not (key == "datasheet" and np.isclose(np.median(vals), peak)):
                ax.plot([xs[0] - 0.5, xs[-1] + 0.5], [np.median(vals)] * 2, **style, zorder=5,
                        gid=f"ceiling/{key}/{gid_prefix}/{c}")
        x += len(bars) + 1.0
    return centres


def plot_peaks(df: pd.DataFrame, reference: pd.DataFrame | None = None,
               merged: pd.DataFrame | None = None, *, reference_device: str = "MI355X",
               shape: str = "kimi-k3-tp8", cache_dtype: str = "fp8",
               weight_format: str = "fp8_row", reference_weight: str = "fp8_row",
               reference_which: tuple[str, ...] = ("before", "after"), series=None,
               limit: int = DEFAULT_LIMIT) -> Figure:
    """Each device against its own peak: achieved TB/s (minimum bytes / time) per context,
    one bar per series, each bar's fraction of its device's datasheet bandwidth (from the
    device registry) written on it; the datasheet bandwidth a line across each panel, and
    the ceiling the operation can reach at its arithmetic intensity, min(bandwidth, matrix
    roof / AI), per context: under the datasheet roofs where the matrix roof holds it under
    the bandwidth, and for our device under the roofs the rows measured (``copy_tbps``,
    ``mm_tflops`` of the dot). Fractions of the measured ceiling are written apart, under
    the panels: they are not comparable with the datasheet ones.

    Left: our rows (single sequence; ``series`` as in ``choose_series``). Right, on
    ``reference_device``: the public change's tables, ``reference`` (its first: ctx,
    before_ms, after_ms) and ``merged`` (as merged: ctx_tokens, before_us, after_us), the
    columns ``reference_which``; their bytes by this repository's model
    (``analysis.timed_points``) for ``shape``, the table's ``kv_cache_dtype`` (else
    ``cache_dtype``) and ``reference_weight`` (the public change's description names an
    fp8 per-row weight).

    Expects rows of the op with ``flops``, ``min_bytes``, ``median_us``, ``ctx``,
    ``dot_dtype`` (``copy_tbps``, ``mm_tflops`` for the measured ceiling), e.g.
    ``roofline.csv``'s.
    """
    set_style()
    d, chosen, _shown = roofline_rows(df, series, limit)
    ours = column_values(d, "device", "")
    refs = reference_list({"first table": reference, "as merged": merged},
                          default_name="public change")
    ref_dev = reference_device
    for _name, _ref, raw in refs:
        ref_dev = ref_device(raw, reference_device)
    ref_cache = cache_dtype
    for _name, _ref, raw in refs:
        if "kv_cache_dtype" in raw.columns:
            ref_cache = column_values(raw, "kv_cache_dtype", cache_dtype)

    panels: dict[str, dict] = {}  # device -> {"groups": {ctx: [bar]}, "spec", "measured"}
    apart: list[str] = []  # fractions of the measured ceiling, written under the panels
    if ours:
        spec = lookup_device(ours)
        drawn = pd.concat([rows_of(d, p) for p in chosen]) if chosen else d.iloc[:0]
        dots = set(drawn["dot_dtype"].astype(str)) if "dot_dtype" in d.columns else set()
        ds = ((spec.peak_tbps, {t: spec.peak(t) for t in dots}) if spec is not None
              else (None, {}))
        ms = (copy_roof(d, None),
              {k: v for k, v in matrix_roofs(d, None).items() if k in dots})
        groups: dict[int, list[dict]] = {}
        best: dict[int, tuple[float, str]] = {}
        for v, t in chosen:
            r = rows_of(d, (v, t))
            if r.empty:
                continue
            fr = _per_ctx(bandwidth_fractions(r, ds, ms))
            label = series_label(v, t) + (f" ({_auto_ran(r)})" if v == "auto" else "")
            for rec in fr.to_dict("records"):
                groups.setdefault(int(rec["ctx"]), []).append({
                    "tbps": rec["achieved_tbps"], "fraction": rec["datasheet_fraction"],
                    "peak": rec["datasheet_tbps"], "datasheet_ceiling": rec["datasheet_ceiling_tbps"],
                    "measured_ceiling": rec["measured_ceiling_tbps"], "label": label,
                    "gid": f"{v}/{t}", "color": design_color(v), "edgecolor": "white",
                    "hatch": "//" if t == "flushed" else None})
                if np.isfinite(rec["measured_fraction"]):
                    c = int(rec["ctx"])
                    if c not in best or rec["measured_fraction"] > best[c][0]:
                        best[c] = (rec["measured_fraction"], series_label(v, t))
        panels[ours] = {"groups": groups, "spec": spec, "measured": ms, "kind": "ours"}
        if best:
            apart.append(f"Apart, not comparable with the datasheet fractions: ours against "
                         f"the ceiling at the {ours}'s measured roofs, the best series per "
                         "context: " + "; ".join(f"{ctx_label(c)} {b[1]} {b[0]:.2f}"
                                                 for c, b in sorted(best.items())) + ".")
    if refs:
        spec = lookup_device(ref_dev)
        dot = roofline.dot_dtype(ref_cache, reference_weight)
        ds = (spec.peak_tbps, {dot: spec.peak(dot)}) if spec is not None else (None, {})
        groups = {}
        for i, (rname, ref, _raw) in enumerate(refs):
            for which in reference_which:
                pts = timed_points(shape, ref["ctx"], ref[f"{which}_us"], ref_cache,
                                   reference_weight)
                fr = _per_ctx(bandwidth_fractions(pts, ds))
                style = _REF_BARS[i % len(_REF_BARS)][which != "after"]
                for rec in fr.to_dict("records"):
                    groups.setdefault(int(rec["ctx"]), []).append({
                        "tbps": rec["achieved_tbps"], "fraction": rec["datasheet_fraction"],
                        "peak": rec["datasheet_tbps"],
                        "datasheet_ceiling": rec["datasheet_ceiling_tbps"],
                        "measured_ceiling": np.nan,
                        "label": f"public change, {rname}: {which}",
                        "gid": f"reference/{rname}/{which}", **style})
        panels[ref_dev] = {"groups": groups, "spec": spec, "measured": None,
                           "kind": "reference", "cache": ref_cache}

    names = list(panels) or ["no rows"]
    slots = [max(1, sum(len(b) + 1 for b in p["groups"].values())) for p in panels.values()]
    notes = ["Bars: achieved TB/s = minimum bytes / time; the number on each bar: its fraction "
             "of its device's datasheet bandwidth (dashed line). Ceiling at this op's "
             "arithmetic intensity (AI = FLOP / minimum byte): min(bandwidth, matrix roof / "
             "AI), per context."]
    for name, p in panels.items():
        spec = p["spec"]
        if spec is None:
            notes.append(f"{name}: not in the device registry, no datasheet peak.")
            continue
        bars = [b for g in p["groups"].values() for b in g]
        att = [b["datasheet_ceiling"] for b in bars if np.isfinite(b["datasheet_ceiling"])]
        held = att and not np.isclose(min(att), spec.peak_tbps)
        notes.append(f"{name}: datasheet {spec.peak_tbps:.2f} TB/s; at the datasheet matrix "
                     "roofs the ceiling at this AI is "
                     + (f"{min(att):.2f}-{max(att):.2f} TB/s (dotted)" if held else
                        "the datasheet bandwidth (bandwidth-bound)" if att else "not known")
                     + ".")
        if p["measured"] is not None:
            bw, mm = p["measured"]
            ms = [b["measured_ceiling"] for b in bars if np.isfinite(b["measured_ceiling"])]
            roofs = ", ".join(f"{k} matmul {v:.0f} TFLOP/s" for k, v in sorted(mm.items()))
            notes.append(f"{name}, measured roofs (copy {bw:.2f} TB/s, {roofs}): ceiling at "
                         f"this AI {min(ms):.2f}-{max(ms):.2f} TB/s (solid line)."
                         if ms and positive(bw) else f"{name}: no measured roofs in the rows.")
    notes += apart
    auto = rows_of(d, next((p for p in chosen if p[0] == "auto"), ("", "")))
    if not auto.empty:
        configs = "config" in auto.columns and (text_values(auto["config"]) != "").any()
        notes.append(f"auto {_auto_ran(auto)} (its design column"
                     + (")." if configs else "; config empty: its default config)."))

    note_h = 0.3 * len(notes) + 0.4
    fig, body = new_figure((max(16.0, 0.42 * sum(slots) + 5.0), 10.5 + note_h))
    gs = body.add_gridspec(2, len(names), width_ratios=slots if panels else [1],
                           height_ratios=[10.0, note_h])
    top = max([p["spec"].peak_tbps for p in panels.values() if p["spec"] is not None]
              + [b["tbps"] for p in panels.values() for g in p["groups"].values() for b in g]
              + [1.0])
    first = None
    for i, name in enumerate(names):
        ax = body.add_subplot(gs[0, i], sharey=first)
        first = first or ax
        p = panels.get(name, {"groups": {}, "spec": None, "kind": "ours"})
        centres = _bars(ax, p["groups"], gid_prefix=name)
        spec = p["spec"]
        if spec is not None and positive(spec.peak_tbps):
            ax.axhline(spec.peak_tbps, color=PEAK_COLOR, ls="--", lw=2.0, zorder=2,
                       gid="roof/datasheet/bandwidth",
                       label=f"{name} datasheet bandwidth {spec.peak_tbps:.2f} TB/s")
            ax.annotate(f"{name} datasheet {spec.peak_tbps:.2f} TB/s", xy=(0.99, spec.peak_tbps),
                        xycoords=("axes fraction", "data"), xytext=(0, 3),
                        textcoords="offset points", ha="right", va="bottom", fontsize=12,
                        color=PEAK_COLOR, fontweight="bold", gid="peak-label")
        for key, style, text in (
                ("measured", {"color": ATTAINABLE_COLOR, "ls": "-", "lw": 2.6},
                 "ceiling at this AI, measured roofs"),
                ("datasheet", {"color": PEAK_COLOR, "ls": ":", "lw": 2.2},
                 "ceiling at this AI, datasheet roofs")):
            if any((ln.get_gid() or "").startswith(f"ceiling/{key}/") for ln in ax.get_lines()):
                ax.plot([], [], **style, label=text)
        ax.set_xticks(centres, [ctx_label(c) for c in sorted(p["groups"])])
        ax.set_xlim(-0.8, max(0.8, sum(len(b) + 1 for b in p["groups"].values()) - 1.2))
        ax.set_xlabel("cached context (tokens, k = 1024)")
        ax.grid(axis="x", visible=False)
        if i == 0:
            ax.set_ylabel("achieved bandwidth (TB/s, minimum bytes / time)")
        if p["kind"] == "ours":
            ax.set_title(f"{name}: ours\nbytes: the rows' min_bytes ({shape}, {cache_dtype} "
                         f"cache, {weight_format} weight)", loc="left")
        else:
            ax.set_title(f"{name}: the public change's published tables\nbytes: this "
                         f"repository's model ({shape}, {p['cache']} cache, {reference_weight} "
                         "weight)", loc="left")
        handles, labels = unique_handles([ax])
        if handles:
            ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.1),
                      ncol=2, fontsize=10, frameon=False)
    first.set_ylim(0, top * 1.18)
    ax_n = body.add_subplot(gs[1, :])
    ax_n.axis("off")
    ax_n.text(0.0, 1.0, "\n".join(notes), ha="left", va="top", fontsize=11, color="0.2",
              transform=ax_n.transAxes, gid="notes")
    timings = "; ".join(TIMING_LONG[t].split(":")[0] for t in TIMINGS
                        if any(p[1] == t for p in chosen))
    figure_title(fig, f"gather_kv_b_proj: each device against its own peak bandwidth "
                   f"({', '.join(panels) or 'no rows'})\n{shape}, {cache_dtype} cache, "
                   f"{weight_format} weight; ours in {timings or 'no rows'}")
    footer(fig, d, f"{ref_dev}: the public change's published tables "
                   f"({', '.join(n for n, _, _ in refs)})" if refs else None)
    return fig
