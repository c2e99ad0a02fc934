"""The context sweep: time per call, speedup and fraction of the floor against context."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from . import axes
from .series import choose_series, device_timing, left_out_note, reference_list, rows_of, tidy
from .style import CEILING_COLOR, design_color, ref_style, series_label, set_style, variant_style


def plot_context_sweep(df: pd.DataFrame, reference=None, *, before: str = "serial",
                       after: str | None = "chunked", series=None, limit: int | None = None,
                       reference_device: str = "MI355X") -> Figure:
    """Three panels against context: time per call (log-log), speedup over ``before`` and
    the fraction of the floor (``floor_us / median_us``).

    Expects single-sequence rows of one configuration (``analysis.select(...,
    batch="single")``; any timings: which are drawn is ``series``, see ``choose_series``).
    A speedup compares a series with ``before`` at the same timing (``before``'s device
    timing where it lacks that one). ``reference``: the public change's table(s) (a frame
    with ctx, before_ms, after_ms or ctx_tokens, before_us, after_us; or {name: frame}),
    drawn in black as "<name> on <device>: before / after".

    Every design is drawn (``limit=None``; the panels are wide enough, and ``auto`` is drawn
    thin over the design it ran), with the fastest torch path; a variant of the rows left
    out (a slower torch path, or over a ``limit`` given) is named in a note under the footer.
    """
    set_style()
    d = tidy(df)
    refs = reference_list(reference)
    room = limit if limit is not None else len(pd.unique(d["variant"])) + 2 * len(refs) + 1
    chosen = choose_series(d, series, before=before, limit=room, reserved=2 * len(refs),
                           keep=(after,) if after else ())
    fig, body = axes.new_figure((22, 8))
    ax_t, ax_s, ax_f = body.subplots(1, 3)
    contexts: set[int] = set()
    for v, t in chosen:
        r = rows_of(d, (v, t)).groupby("ctx")[["median_us", "floor_us"]].median()
        if r.empty:
            continue
        contexts |= set(r.index.astype(int))
        kw = dict(variant_style(v, t), label=series_label(v, t, rows_of(d, (v, t))),
                  gid=f"{v}/{t}")
        ax_t.plot(r.index, r["median_us"], **kw)
        ax_f.plot(r.index, r["floor_us"] / r["median_us"], **kw)
        if v != before:
            bt = t if not rows_of(d, (before, t)).empty else device_timing(d, before)
            base = rows_of(d, (before, bt)).groupby("ctx")["median_us"].median()
            sp = (base / r["median_us"]).dropna()
            if not sp.empty:
                ax_s.plot(sp.index, sp.values, **kw)
    for i, (name, ref, raw) in enumerate(refs):
        dev = axes.ref_device(raw, reference_device)
        contexts |= set(ref["ctx"].astype(int))
        for which in ("before", "after"):
            ax_t.plot(ref["ctx"], ref[f"{which}_us"], **ref_style(i, which),
                      label=f"{name} on {dev}: {which}", gid=f"reference/{name}/{which}")
        ax_s.plot(ref["ctx"], ref["speedup"], **{**ref_style(i, "after"), "marker": "h"},
                  label=f"{name} on {dev}: after vs before", gid=f"reference/{name}/speedup")

    axes.plain_log_y(ax_t)
    ax_t.set_ylabel("time per call (µs, median, log scale)")
    ax_t.set_title("Time per call", loc="left")
    axes.plain_log_y(ax_s)
    # The baseline in its own colour: the line at 1 is that design against itself.
    ax_s.axhline(1.0, color=design_color(before), lw=1.2, label=f"{before} (speedup 1)",
                 gid="baseline", zorder=1)
    ax_s.set_ylabel(f"speedup over {before} (x, log scale)")
    ax_s.set_title(f"Speedup over {before}", loc="left")
    ax_f.axhline(1.0, color=CEILING_COLOR, lw=1.8, ls="-", gid="floor",
                 label="the floor at measured rates: max(bytes / copy, FLOPs / cuBLAS matmul)",
                 zorder=1)
    top = max([1.0] + [float(np.nanmax(ln.get_ydata())) for ln in ax_f.get_lines()
                       if len(ln.get_ydata())])
    ax_f.set_ylim(0, 1.08 * top)
    ax_f.set_ylabel("fraction of the floor (floor_us / time)")
    ax_f.set_title("Fraction of the floor (cuBLAS rates)", loc="left")
    for ax in (ax_t, ax_s, ax_f):
        axes.set_ctx_axis(ax, contexts)
    axes.fig_legend(body, (ax_t, ax_s, ax_f), ncol=4)
    dev = axes.column_values(d, "device")
    axes.figure_title(fig, f"gather_kv_b_proj on {dev}: time, speedup and fraction of the floor against "
                   f"context\n{axes.describe(d)}; {axes.timings_text(chosen)}")
    axes.footer(fig, d, "; ".join(f"{axes.ref_device(raw, reference_device)}: the {name}'s published "
                                  "table" for name, _, raw in refs) or None,
                note=left_out_note(d, chosen, series=series, limit=limit))
    return fig
