"""Figures for design reviews: one style, one colour per design in every figure, titles that
say what was measured on what, units on every axis, and a footer naming the run.

Every plot function takes rows in the tidy measurement schema of data/README.md (one row
per configuration x variant x timing) and returns the matplotlib Figure; ``save_figure``
writes it as PNG and SVG. A plotted series is one (variant, timing) pair: its Line2D carries
a readable label (``"chunked, device time"``) and the gid ``"<variant>/<timing>"``, so a
test can read back what was drawn.

Conventions shared by every figure
----------------------------------
* Colour is fixed by the design's name (``design_color``), never by the set plotted: the
  designs in colours, the torch paths in greys, the public change's published figures in
  black with hollow markers.
* Line style is fixed by the timing: device time (``graph``: one call replayed from a CUDA
  graph) solid, a plain call incl. host cost (``flushed``) dashed, ``graph8`` (8 calls in
  one graph, per call) dotted.
* Default series (``default_series``): every design in its device timing (``graph``, else
  ``graph8``, else ``flushed`` where a design has nothing better), plus the fastest torch
  path; at most ``limit`` (7) lines in a panel, counting the public change's reference lines.
  Over the limit, ``auto`` goes first (it runs one of the other designs, so its line repeats
  theirs), then the slowest designs; ``before`` and the torch path stay. Plain calls and the
  rest are opt-in through ``series=`` (see ``choose_series``). ``plot_formats`` keeps every
  torch path (torch_fp8 serves fp8 weights only, torch_bf16 every format) under the same
  limit; ``plot_occupancy`` (a model, not timings) draws every (design, device, config).
* Context axes are log scale with ticks only at the contexts that have data, labelled in
  units of k = 1024 tokens (32768 -> "32k", 109440 -> "107k").

Rows named ``<variant>_graph`` (what ``analysis.select`` makes of graph-timed rows) are read
as ``<variant>`` timed ``graph``.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from ..devices import lookup_device
from ..files import atomic_path
from ..lab import roofline

# ------------------------------------------------------------------ colours and styles
# The designs of this repository, in the order figures list them.
DESIGN_ORDER = ("serial", "chunked", "tiled", "tiled_tma", "hopper_ws", "auto")
DESIGN_COLORS = {
    "serial": "#0072B2",  # blue
    "chunked": "#E69F00",  # orange
    "tiled": "#009E73",  # green
    "tiled_tma": "#56B4E9",  # sky blue
    "hopper_ws": "#D55E00",  # vermillion
    "auto": "#CC79A7",  # reddish purple
}
DESIGN_MARKERS = {"serial": "o", "chunked": "s", "tiled": "^", "tiled_tma": "v",
                  "hopper_ws": "p", "auto": "*"}
# A design not listed above gets one of these, picked by a hash of its name: stable across
# figures and runs, and none of them is a grey or a hue listed above.
EXTRA_COLORS = ("#882255", "#44AA99", "#999933", "#332288", "#117733", "#AA4499",
                "#661100", "#6699CC")
TORCH_COLORS = {"torch_bf16": "#a3a3a3", "torch_fp8": "#5f5f5f"}
TORCH_EXTRA = ("#7a7a7a", "#bdbdbd", "#474747")
TORCH_MARKERS = {"torch_bf16": "X", "torch_fp8": "D"}
REFERENCE_COLOR = "#000000"  # the public change's published figures
PEAK_COLOR = "#b2182b"  # datasheet roofs
CEILING_COLOR = "#2166ac"  # measured roofs
ATTAINABLE_COLOR = "#1b7837"  # what this operation can reach at its arithmetic intensity

TIMINGS = ("graph", "graph8", "flushed")  # most device-like first
TIMING_LINESTYLE = {"graph": "-", "flushed": "--", "graph8": ":"}
TIMING_NAME = {"graph": "device time", "flushed": "plain call", "graph8": "8 calls in a graph"}
TIMING_LONG = {"graph": "device time (one call replayed from a CUDA graph): solid",
               "flushed": "plain call incl. host cost: dashed",
               "graph8": "8 calls in one CUDA graph, per call: dotted"}
DEFAULT_LIMIT = 7


def set_style() -> None:
    """The one style every figure uses: large enough to read on a slide."""
    sns.set_theme(context="talk", style="whitegrid", palette="colorblind",
                  rc={"figure.dpi": 100, "savefig.dpi": 150, "axes.titleweight": "bold",
                      "axes.titlesize": 15, "axes.labelsize": 13, "legend.fontsize": 11,
                      "xtick.labelsize": 11, "ytick.labelsize": 11,
                      "svg.fonttype": "none"})


def base_variant(v: str) -> str:
    """``hopper_ws_graph`` -> ``hopper_ws``: the old naming of graph-timed rows."""
    v = str(v)
    return v[: -len("_graph")] if v.endswith("_graph") else v


def is_torch(v: str) -> bool:
    return str(v).startswith("torch")


def _pick(name: str, palette: Sequence[str]) -> str:
    return palette[zlib.crc32(name.encode()) % len(palette)]


def design_color(v: str) -> str:
    """The colour of a design (or torch path) in every figure, fixed by its name."""
    v = base_variant(v)
    if v in DESIGN_COLORS:
        return DESIGN_COLORS[v]
    if is_torch(v):
        return TORCH_COLORS.get(v) or _pick(v, TORCH_EXTRA)
    return _pick(v, EXTRA_COLORS)


def design_marker(v: str) -> str:
    v = base_variant(v)
    if is_torch(v):
        return TORCH_MARKERS.get(v, "X")
    return DESIGN_MARKERS.get(v, "o")


def variant_colors(variants: Iterable[str]) -> dict[str, str]:
    """{variant: colour} by ``design_color``: the same for a name whatever else is plotted."""
    return {v: design_color(v) for v in variants}


def variant_style(v: str, timing: str = "graph") -> dict[str, object]:
    """Matplotlib keywords of one series: colour by design, line style by timing."""
    torch_path = is_torch(base_variant(v))
    # auto runs one of the other designs: drawn thinner, so the design under it shows.
    thin = base_variant(v) == "auto"
    return {"color": design_color(v), "ls": TIMING_LINESTYLE.get(timing, "-."),
            "marker": design_marker(v), "ms": 6 if thin or torch_path else 8,
            "lw": 1.3 if thin else 2.2, "mec": "white" if not torch_path else "0.15", "mew": 0.8}


def series_label(v: str, timing: str) -> str:
    """``"chunked, device time"``: what a series is called in every legend."""
    return f"{base_variant(v)}, {TIMING_NAME.get(timing, timing)}"


def _variant_order(v: str) -> tuple[int, int, str]:
    b = base_variant(v)
    if b in DESIGN_ORDER:
        return (0, DESIGN_ORDER.index(b), b)
    return (2, 0, b) if is_torch(b) else (1, 0, b)


def _series_order(s: tuple[str, str]) -> tuple:
    t = TIMINGS.index(s[1]) if s[1] in TIMINGS else len(TIMINGS)
    return (*_variant_order(s[0]), t, s[1])


# ------------------------------------------------------------------ rows and series
def tidy(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with a ``timing`` column and graph rows named by timing, not by variant."""
    d = df.copy()
    if "timing" not in d.columns:
        d["timing"] = "flushed"
    d["timing"] = d["timing"].fillna("flushed").astype(str)
    v = d["variant"].astype(str)
    renamed = v.str.endswith("_graph")
    d["variant"] = v.map(base_variant)
    d.loc[renamed, "timing"] = "graph"
    return d


def present_series(df: pd.DataFrame) -> list[tuple[str, str]]:
    """Every (variant, timing) pair of the rows, in display order."""
    if df.empty:
        return []
    d = tidy(df)
    pairs = {(str(v), str(t)) for v, t in zip(d["variant"], d["timing"], strict=True)}
    return sorted(pairs, key=_series_order)


def device_timing(df: pd.DataFrame, variant: str) -> str | None:
    """The most device-like timing the rows have for a variant: graph, graph8, flushed."""
    d = tidy(df)
    have = set(d.loc[d["variant"] == base_variant(variant), "timing"])
    for t in TIMINGS:
        if t in have:
            return t
    return sorted(have)[0] if have else None


_KEY_COLS = ("model", "weight_format", "cache_dtype", "block_size", "contexts", "ctx")


def _speed(d: pd.DataFrame, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """Geometric mean time of each series over the configurations all of them have
    (over their own rows where they share none): lower is faster."""
    keys = [c for c in _KEY_COLS if c in d.columns]
    per = {}
    for v, t in pairs:
        r = d[(d["variant"] == v) & (d["timing"] == t)]
        per[(v, t)] = r.groupby(keys)["median_us"].median() if keys else r["median_us"]
    shared = None
    for s in per.values():
        shared = set(s.index) if shared is None else shared & set(s.index)
    out = {}
    for p, s in per.items():
        vals = s[list(shared)] if shared else s
        vals = vals[vals > 0]
        out[p] = float(np.exp(np.log(vals).mean())) if len(vals) else float("inf")
    return out


def default_series(df: pd.DataFrame, *, before: str | None = None, limit: int = DEFAULT_LIMIT,
                   reserved: int = 0, torch: str = "fastest",
                   keep: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The series a figure shows unless told otherwise: each design in its device timing and
    the fastest torch path (``torch="all"``: every torch path), at most ``limit - reserved``
    of them (``reserved``: reference lines sharing the panel). Over the limit, ``auto`` is
    left out first (it runs one of the other designs), then the slowest designs; ``before``,
    the designs in ``keep`` and the torch paths stay."""
    if df.empty:
        return []
    d = tidy(df)
    variants = sorted(pd.unique(d["variant"]), key=_variant_order)
    designs = [(v, device_timing(d, v)) for v in variants if not is_torch(v)]
    torch_paths = [(v, device_timing(d, v)) for v in variants if is_torch(v)]
    chosen_torch = list(torch_paths) if torch == "all" else []
    if torch_paths and not chosen_torch:
        speed = _speed(d, torch_paths)
        chosen_torch = [min(torch_paths, key=lambda p: (speed[p], _series_order(p)))]
    room = max(1, limit - reserved - len(chosen_torch))
    if len(designs) > room:
        speed = _speed(d, designs)
        # Dropped first to last: auto, then the slowest; ``before`` never.
        drop = sorted((p for p in designs if p[0] != before and p[0] not in keep),
                      key=lambda p: (p[0] != "auto", -speed[p]))
        gone = set(drop[: len(designs) - room])
        designs = [p for p in designs if p not in gone]
    return sorted(designs + chosen_torch, key=_series_order)


def choose_series(df: pd.DataFrame, series=None, *, before: str | None = None,
                  limit: int = DEFAULT_LIMIT, reserved: int = 0,
                  torch: str = "fastest", keep: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The (variant, timing) pairs to draw.

    ``series`` is None (``default_series``), ``"all"`` (every pair of the rows), or a list
    of: ``"default"`` (the default set), a timing name (``"flushed"``: every variant at that
    timing), ``"<variant>/<timing>"`` or a (variant, timing) tuple, ``"<variant>_graph"``, or
    a bare variant name (that variant in its device timing). Pairs the rows lack are skipped.
    """
    if df.empty:
        return []
    d = tidy(df)
    have = present_series(d)
    if series is None:
        return default_series(d, before=before, limit=limit, reserved=reserved, torch=torch,
                              keep=keep)
    if isinstance(series, str):
        series = [series]
    out: list[tuple[str, str]] = []
    for item in series:
        if isinstance(item, tuple):
            out.append((base_variant(item[0]), str(item[1])))
        elif item == "all":
            out += have
        elif item == "default":
            out += default_series(d, before=before, limit=limit, reserved=reserved, torch=torch,
                                  keep=keep)
        elif item in TIMINGS:
            out += [p for p in have if p[1] == item]
        elif "/" in item:
            v, t = item.split("/", 1)
            out.append((base_variant(v), t))
        elif str(item).endswith("_graph"):
            out.append((base_variant(item), "graph"))
        else:
            t = device_timing(d, item)
            if t is not None:
                out.append((str(item), t))
    keep = set(have)
    return sorted(dict.fromkeys(p for p in out if p in keep), key=_series_order)


def _rows_of(d: pd.DataFrame, s: tuple[str, str]) -> pd.DataFrame:
    return d[(d["variant"] == s[0]) & (d["timing"] == s[1])]


def _timings_text(chosen: Sequence[tuple[str, str]]) -> str:
    ts = [t for t in TIMINGS if any(p[1] == t for p in chosen)]
    return "; ".join(TIMING_LONG[t] for t in ts)


# ------------------------------------------------------------------ labels and axes
def column_values(df: pd.DataFrame, col: str, default: str = "?") -> str:
    """The distinct values of a column, comma-separated (for titles and sentences)."""
    if df is None or col not in df.columns or df.empty:
        return default
    vals = [str(v) for v in pd.unique(df[col].dropna())]
    vals = [v for v in vals if v.strip()]
    return ", ".join(vals) if vals else default


def describe(df: pd.DataFrame, skip: Sequence[str] = ()) -> str:
    """'kimi-k3-tp8, 12 heads, fp8 cache, fp8_row weight, page 1' for a title."""
    parts = [column_values(df, "model")]
    for col, fmt in (("heads", "{} heads"), ("cache_dtype", "{} cache"),
                     ("weight_format", "{} weight"), ("block_size", "page {}")):
        if col in df.columns and col not in skip:
            parts.append(fmt.format(column_values(df, col)))
    return ", ".join(parts)


def run_label(df: pd.DataFrame) -> str:
    """'data: H200, commit cc73f07d2ac9, 2026-11-30': the run the rows came from."""
    parts = []
    dev = column_values(df, "device", "")
    if dev:
        parts.append(dev)
    commit = column_values(df, "commit", "")
    if commit:
        parts.append(f"commit {commit}")
    if df is not None and "date" in df.columns and not df.empty:
        days = sorted({str(x)[:10] for x in df["date"].dropna() if str(x).strip()})
        if days:
            parts.append(", ".join(days))
    return "data: " + (", ".join(parts) if parts else "no run named in the rows")


def footer(fig: Figure, df: pd.DataFrame, extra: str | None = None):
    """Write the run the rows came from (their ``device``, ``commit`` and ``date``) at the
    bottom left of the figure; ``extra`` is appended (other sources of the figure)."""
    text = run_label(df) + (f"; {extra}" if extra else "")
    area = getattr(fig, "_mla_footer", None)
    if area is not None:  # the strip _new_figure keeps below the panels and their legend
        return area.text(0.004, 0.5, text, ha="left", va="center", fontsize=10, color="0.3",
                         gid="footer")
    return fig.text(0.005, 0.003, text, ha="left", va="bottom", fontsize=10, color="0.3",
                    gid="footer")


def ctx_label(n: float) -> str:
    """Tokens in units of k = 1024: 4096 -> '4k', 109440 -> '107k', 32000 -> '31.2k'."""
    n = int(round(n))
    if n < 1024:
        return str(n)
    if n % 1024 == 0:
        return f"{n // 1024}k"
    return f"{n / 1024:.3g}k"


def set_ctx_axis(ax, contexts: Iterable[float],
                 label: str = "cached context (tokens, k = 1024, log scale)") -> list[int]:
    """Log x axis with a labelled tick at each context that has data, and no other."""
    ctx = sorted({int(c) for c in contexts if _finite(c)})
    ax.set_xscale("log", base=2)
    ax.set_xlabel(label)
    if not ctx:
        return ctx
    labels, prev_low = [], False
    for i, c in enumerate(ctx):
        lab = ctx_label(c)
        # Two contexts within 25% (32000 and 32768) would print over each other: the
        # second goes one line lower.
        low = i > 0 and c / ctx[i - 1] < 1.25 and not prev_low
        labels.append("\n" + lab if low else lab)
        prev_low = low
    ax.xaxis.set_major_locator(FixedLocator(ctx))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(ctx, labels)
    ax.set_xlim(ctx[0] / 1.25, ctx[-1] * 1.25)
    return ctx


def _plain_log_y(ax) -> None:
    """Log y axis with plain numbers (0.5, 2, 300), which read faster than 3x10^2."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(
        lambda y, _pos: f"{y:g}" if f"{y:.0e}"[0] in "25" else ""))


_NICE = (1, 1.5, 2, 3, 4, 5, 7)


def _plain_log_x(ax, lo: float, hi: float) -> None:
    ax.set_xscale("log")
    ticks = [m * 10.0 ** e for e in range(int(math.floor(math.log10(lo))),
                                          int(math.ceil(math.log10(hi))) + 1) for m in _NICE]
    ticks = [t for t in ticks if lo <= t <= hi]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.set_xlim(lo, hi)


def _finite(x) -> bool:
    try:
        return x is not None and np.isfinite(float(x)) and float(x) > 0
    except (TypeError, ValueError):
        return False


def _fig_legend(fig: Figure, axes: Sequence, ncol: int = 4) -> None:
    """One legend below all panels: every labelled artist once."""
    seen, handles, labels = set(), [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in seen:
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=min(ncol, len(handles)),
                   fontsize=11, frameon=False)


def _new_figure(figsize) -> tuple[Figure, object]:
    """A figure and the subfigure the panels go in; below it a strip for ``footer``, so the
    footer never runs into a legend under the panels."""
    fig = plt.figure(figsize=figsize, layout="constrained")
    strip = 0.32
    body, foot = fig.subfigures(2, 1, height_ratios=[figsize[1] - strip, strip])
    fig._mla_footer = foot
    return fig, body


def _suptitle(fig: Figure, text: str) -> None:
    fig.suptitle(text, x=0.005, ha="left", fontsize=16, fontweight="bold")


# ------------------------------------------------------------------ reference tables
def reference_table(ref: pd.DataFrame) -> pd.DataFrame:
    """A public table as ctx (tokens), before_us, after_us, speedup: from the first table's
    ctx, before_ms, after_ms or the merged version's ctx_tokens, before_us, after_us."""
    ctx = ref["ctx_tokens"] if "ctx_tokens" in ref.columns else ref["ctx"]
    if "before_us" in ref.columns:
        before, after = ref["before_us"], ref["after_us"]
    else:
        before, after = ref["before_ms"] * 1e3, ref["after_ms"] * 1e3
    out = pd.DataFrame({"ctx": ctx.astype(int).to_numpy(),
                        "before_us": before.astype(float).to_numpy(),
                        "after_us": after.astype(float).to_numpy()})
    out["speedup"] = out["before_us"] / out["after_us"]
    return out.sort_values("ctx").reset_index(drop=True)


def _reference_list(reference, default_name: str = "public change"
                    ) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """[(name, normalized table, the table as given)] from a frame, a {name: frame} map or a
    list of frames."""
    if reference is None:
        return []
    if isinstance(reference, pd.DataFrame):
        items = [(default_name, reference)]
    elif isinstance(reference, Mapping):
        items = list(reference.items())
    else:
        frames = list(reference)
        items = [(default_name if len(frames) == 1 else f"{default_name} ({i + 1})", f)
                 for i, f in enumerate(frames)]
    return [(str(n), reference_table(f), f) for n, f in items if f is not None and not f.empty]


_REF_MARKERS = (("s", "^"), ("D", "v"), ("o", "P"))
_REF_LINES = ("-", (0, (4, 1.5, 1, 1.5)), (0, (1, 1)))


def _ref_style(i: int, which: str) -> dict[str, object]:
    """The public change's series: black, a hollow marker for 'before' and a filled one
    for 'after'; a second table another pair of markers and a dash-dot line."""
    m = _REF_MARKERS[i % len(_REF_MARKERS)]
    return {"color": REFERENCE_COLOR, "lw": 1.8, "ls": _REF_LINES[i % len(_REF_LINES)],
            "marker": m[0] if which == "before" else m[1], "ms": 8,
            "mfc": "white" if which == "before" else REFERENCE_COLOR, "mec": REFERENCE_COLOR}


def _ref_device(raw: pd.DataFrame, default: str) -> str:
    return column_values(raw, "device", default)


# ------------------------------------------------------------------ saving
def save_figure(fig: Figure, out_dir: str | os.PathLike, name: str) -> list[Path]:
    """Write ``name``.png and ``name``.svg under out_dir, each atomically (a reader never
    finds half a figure) and with the user's normal file mode."""
    paths = []
    for ext in ("png", "svg"):
        final = Path(out_dir) / f"{name}.{ext}"
        with atomic_path(final) as tmp:
            fig.savefig(tmp, format=ext, bbox_inches="tight")
        paths.append(final)
    return paths


# ------------------------------------------------------------------ context sweep
def plot_context_sweep(df: pd.DataFrame, reference=None, *, before: str = "serial",
                       after: str | None = "chunked", series=None, limit: int = DEFAULT_LIMIT,
                       reference_device: str = "MI355X") -> Figure:
    """Three panels against context: time per call (log-log), speedup over ``before`` and
    the fraction of the floor (``floor_us / median_us``).

    Expects single-sequence rows of one configuration (``analysis.select(...,
    batch="single")``; any timings: which are drawn is ``series``, see ``choose_series``).
    A speedup compares a series with ``before`` at the same timing (``before``'s device
    timing where it lacks that one). ``reference``: the public change's table(s) (a frame
    with ctx, before_ms, after_ms or ctx_tokens, before_us, after_us; or {name: frame}),
    drawn in black as "<name> on <device>: before / after".
    """
    set_style()
    d = tidy(df)
    refs = _reference_list(reference)
    chosen = choose_series(d, series, before=before, limit=limit, reserved=2 * len(refs),
                           keep=(after,) if after else ())
    fig, body = _new_figure((22, 8))
    ax_t, ax_s, ax_f = body.subplots(1, 3)
    contexts: set[int] = set()
    for v, t in chosen:
        r = _rows_of(d, (v, t)).groupby("ctx")[["median_us", "floor_us"]].median()
        if r.empty:
            continue
        contexts |= set(r.index.astype(int))
        kw = dict(variant_style(v, t), label=series_label(v, t), gid=f"{v}/{t}")
        ax_t.plot(r.index, r["median_us"], **kw)
        ax_f.plot(r.index, r["floor_us"] / r["median_us"], **kw)
        if v != before:
            bt = t if not _rows_of(d, (before, t)).empty else device_timing(d, before)
            base = _rows_of(d, (before, bt)).groupby("ctx")["median_us"].median()
            sp = (base / r["median_us"]).dropna()
            if not sp.empty:
                ax_s.plot(sp.index, sp.values, **kw)
    for i, (name, ref, raw) in enumerate(refs):
        dev = _ref_device(raw, reference_device)
        contexts |= set(ref["ctx"].astype(int))
        for which in ("before", "after"):
            ax_t.plot(ref["ctx"], ref[f"{which}_us"], **_ref_style(i, which),
                      label=f"{name} on {dev}: {which}", gid=f"reference/{name}/{which}")
        ax_s.plot(ref["ctx"], ref["speedup"], **{**_ref_style(i, "after"), "marker": "h"},
                  label=f"{name} on {dev}: after vs before", gid=f"reference/{name}/speedup")

    _plain_log_y(ax_t)
    ax_t.set_ylabel("time per call (µs, median, log scale)")
    ax_t.set_title("Time per call", loc="left")
    _plain_log_y(ax_s)
    ax_s.axhline(1.0, color="0.45", lw=1.2, label=f"{before} (speedup 1)", zorder=1)
    ax_s.set_ylabel(f"speedup over {before} (x, log scale)")
    ax_s.set_title(f"Speedup over {before}", loc="left")
    ax_f.axhline(1.0, color=CEILING_COLOR, lw=1.5, ls="-",
                 label="the floor: max(bytes / copy, FLOPs / matmul), measured", zorder=1)
    top = max([1.0] + [float(np.nanmax(ln.get_ydata())) for ln in ax_f.get_lines()
                       if len(ln.get_ydata())])
    ax_f.set_ylim(0, 1.08 * top)
    ax_f.set_ylabel("fraction of the floor (floor time / time)")
    ax_f.set_title("Fraction of the floor", loc="left")
    for ax in (ax_t, ax_s, ax_f):
        set_ctx_axis(ax, contexts)
    _fig_legend(body, (ax_t, ax_s, ax_f), ncol=4)
    dev = column_values(d, "device")
    _suptitle(fig, f"gather_kv_b_proj on {dev}: time, speedup and fraction of the floor against "
                   f"context\n{describe(d)}; {_timings_text(chosen)}")
    footer(fig, d, "; ".join(f"{_ref_device(raw, reference_device)}: the {name}'s published "
                             "table" for name, _, raw in refs) or None)
    return fig


# ------------------------------------------------------------------ roofs
def _matrix_roofs(d: pd.DataFrame, mm_tflops: float | dict[str, float] | None
                  ) -> dict[str, float]:
    """{dot dtype: measured matmul TFLOP/s}: given, or the rows' median per ``dot_dtype``."""
    if isinstance(mm_tflops, Mapping):
        return {str(k): float(v) for k, v in mm_tflops.items() if _finite(v)}
    if mm_tflops is not None:
        dtype = column_values(d, "dot_dtype", "")
        return {dtype: float(mm_tflops)} if _finite(mm_tflops) else {}
    if d.empty or "mm_tflops" not in d.columns:
        return {}
    if "dot_dtype" not in d.columns:
        return {"": float(d["mm_tflops"].median())}
    roofs = d.groupby("dot_dtype")["mm_tflops"].median()
    return {str(k): float(v) for k, v in roofs.items() if _finite(v)}


def _copy_roof(d: pd.DataFrame, bw_tbps: float | None) -> float | None:
    if bw_tbps is None and "copy_tbps" in d.columns and not d.empty:
        bw_tbps = float(d["copy_tbps"].median())
    return bw_tbps if _finite(bw_tbps) else None


def _datasheet(d: pd.DataFrame, device: str | None = None):
    name = device or column_values(d, "device", "")
    return lookup_device(name) if name else None


def _draw_roofs(ax, x: np.ndarray, bw: float | None, roofs: Mapping[str, float], *,
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
    if _finite(bw):
        # TB/s x FLOP/B = TFLOP/s.
        y = x * bw if top is None else np.minimum(x * bw, top)
        ax.plot(x, y, color=color, ls=ls, lw=lw, label=f"bandwidth roof: {kind} {bw:.2f} TB/s",
                gid=f"roof/{kind}/bandwidth", zorder=2)
    for i, (dtype, mm) in enumerate(sorted(roofs.items(), key=lambda kv: -kv[1])):
        ridge = mm / bw if _finite(bw) else float(x[0])
        ridges[dtype] = ridge
        xs = x[x >= ridge]
        xs = np.concatenate(([ridge], xs)) if len(xs) else np.array([ridge, x[-1]])
        ax.plot(xs, np.full_like(xs, mm), color=color, ls=ls, lw=lw if i == 0 else lw * 0.6,
                label=f"matrix roof: {kind} {dtype} matmul {mm:.0f} TFLOP/s".replace("  ", " "),
                gid=f"roof/{kind}/{dtype}", zorder=2)
        ax.annotate(f"{kind} {dtype} {mm:.0f}", xy=(x[-1], mm), xytext=(-4, -3 if below else 3),
                    textcoords="offset points", ha="right", va="top" if below else "bottom",
                    fontsize=10, color=color)
        if dtype in ridge_dtypes and _finite(bw):
            ax.axvline(ridge, color=color, ls=":", lw=1.3, gid=f"ridge/{kind}/{dtype}",
                       label=f"ridge, {kind} {dtype}: {ridge:.0f} FLOP/B", zorder=1)
            if label_ridges:
                ax.annotate(f"ridge {ridge:.0f}", xy=(ridge, ridge_label_y),
                            xycoords=("data", "axes fraction"), rotation=90,
                            ha="left" if below else "right", va="bottom", fontsize=10,
                            color=color, xytext=(2 if below else -2, 0),
                            textcoords="offset points")
    return ridges


def _ctx_sizes(contexts: Iterable[float], lo: float = 5.0, hi: float = 15.0) -> dict[int, float]:
    """Marker size per context: small at the shortest, large at the longest (log scale)."""
    ctx = sorted({int(c) for c in contexts})
    if len(ctx) < 2:
        return {c: (lo + hi) / 2 for c in ctx}
    a, b = math.log(ctx[0]), math.log(ctx[-1])
    return {c: lo + (hi - lo) * (math.log(c) - a) / (b - a) for c in ctx}


def _size_legend(ax, sizes: Mapping[int, float], loc: str = "lower right", title="context"):
    ctx = sorted(sizes)
    if len(ctx) > 6:  # a few sizes tell the scale
        idx = sorted({round(i * (len(ctx) - 1) / 4) for i in range(5)})
        ctx = [ctx[i] for i in idx]
    handles = [Line2D([], [], ls="none", marker="o", ms=sizes[c], mfc="0.75", mec="0.3",
                      label=ctx_label(c)) for c in ctx]
    leg = ax.legend(handles=handles, loc=loc, title=title, fontsize=10, title_fontsize=10,
                    frameon=True, framealpha=0.9, ncol=len(handles), handletextpad=0.2,
                    columnspacing=0.8)
    ax.add_artist(leg)
    return leg


# ------------------------------------------------------------------ roofline
def _roofline_series(ax, d: pd.DataFrame, series: tuple[str, str], sizes: Mapping[int, float],
                     lw: float, **line) -> pd.DataFrame:
    """One series on a roofline: its points joined in context order, a marker sized by each
    point's context (the small ones drawn over the large). Returns its rows, by context."""
    v, t = series
    p = _rows_of(d, series).sort_values("ctx")
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
    d = tidy(df)
    d["ai"] = d["flops"] / d["min_bytes"]
    chosen = choose_series(d, series, limit=limit)
    bw = _copy_roof(d, bw_tbps)
    roofs = _matrix_roofs(d, mm_tflops)
    spec = _datasheet(d) if datasheet else None
    if peak_tbps is None and spec is not None:
        peak_tbps = spec.peak_tbps
    if peak_tflops is None and spec is not None:
        peak_tflops = {dt: spec.peak(dt) for dt in (roofs or {"fp8": 0})}
    ds_roofs = {k: float(v) for k, v in (peak_tflops or {}).items() if _finite(v)}
    fig, body = _new_figure((21, 8.5))
    ax, ax_f = body.subplots(1, 2, width_ratios=[1.3, 1])

    shown = pd.concat([_rows_of(d, s) for s in chosen]) if chosen else d.iloc[:0]
    sizes = _ctx_sizes(shown["ctx"]) if not shown.empty else {}
    dtypes = sorted(set(shown["dot_dtype"])) if "dot_dtype" in shown.columns else []
    # The roofs of the dot dtypes drawn (a bf16 roof without a bf16 series is noise).
    roofs = {k: v for k, v in roofs.items() if k in dtypes} or roofs
    ds_roofs = {k: v for k, v in ds_roofs.items() if k in dtypes} or ds_roofs
    ridges = [r / b for r, b in ((max(roofs.values(), default=0), bw),
                                 (max(ds_roofs.values(), default=0), peak_tbps)) if _finite(r)
              and _finite(b)]
    xs = list(shown["ai"]) + ridges or [100.0]
    # Zoomed to the points and the ridges: the slanted and the flat roofs both show.
    lo, hi = min(xs) / 1.3, max(xs) * 1.35
    x = np.geomspace(lo, hi, 400)
    _draw_roofs(ax, x, bw, roofs, kind="measured", color=CEILING_COLOR, ls="-", lw=2.5,
                ridge_dtypes=dtypes)
    if _finite(peak_tbps) or ds_roofs:
        _draw_roofs(ax, x, peak_tbps, ds_roofs, kind="datasheet", color=PEAK_COLOR, ls="--",
                    lw=1.6, ridge_dtypes=dtypes, below=True)
    if not shown.empty:
        a0, a1 = float(shown["ai"].min()), float(shown["ai"].max())
        ax.axvspan(a0 / 1.01, a1 * 1.01, color="0.85", alpha=0.6, zorder=0, lw=0,
                   label=f"this operation: {a0:.0f}-{a1:.0f} FLOP per minimum byte "
                         "(rises with context)")
    for v, t in chosen:
        p = _roofline_series(ax, d, (v, t), sizes, lw=1.4, mec=variant_style(v, t)["mec"],
                             mew=0.6)
        if p.empty:
            continue
        st = variant_style(v, t)
        r = p.groupby("ctx")["roof_fraction"].median()
        ax_f.plot(r.index, r.values, **st, label=series_label(v, t), gid=f"{v}/{t}")
    ax.set_xscale("log")
    _plain_log_x(ax, lo, hi)
    _plain_log_y(ax)
    tops = list(roofs.values()) + list(ds_roofs.values()) + list(shown["achieved_tflops"])
    lows = list(shown["achieved_tflops"]) or [min(tops, default=1.0) / 10]
    ax.set_ylim(min(lows) / 1.8, max(tops + [1.0]) * 1.6)
    ax.set_xlabel("arithmetic intensity (FLOP per minimum byte, log scale)")
    ax.set_ylabel("achieved TFLOP/s (log scale)")
    ax.set_title("Roofline (marker size: context)", loc="left")
    if sizes:
        _size_legend(ax, sizes, loc="lower right")
    ax_f.axhline(1.0, color=CEILING_COLOR, lw=1.5, zorder=1)
    ax_f.set_ylim(0, 1.08 * max([1.0] + list(shown.get("roof_fraction", []))))
    ax_f.set_ylabel("fraction of the floor (floor time / time)")
    ax_f.set_title("Fraction of the floor (1 = on the measured roof)", loc="left")
    set_ctx_axis(ax_f, shown["ctx"] if not shown.empty else [])
    _fig_legend(body, (ax,), ncol=4)
    _suptitle(fig, f"gather_kv_b_proj on {column_values(d, 'device')}: roofline and fraction of "
                   f"the floor\n{describe(d)}; {_timings_text(chosen)}")
    footer(fig, d)
    return fig


# ------------------------------------------------------------------ bandwidth
def attainable_tbps(ai: float, copy_tbps: float, mm_tflops: float) -> float:
    """The bandwidth an operation of arithmetic intensity ``ai`` (FLOP/B) can reach:
    min(bandwidth roof, matrix roof / ai), in TB/s."""
    return min(copy_tbps, mm_tflops / ai) if _finite(mm_tflops) else copy_tbps


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
    copy_tbps = _copy_roof(d, copy_tbps)
    if write_tbps is None and "write_tbps" in d.columns and not d.empty:
        write_tbps = float(d["write_tbps"].median())
    roofs = _matrix_roofs(d, mm_tflops)
    spec = _datasheet(d)
    if peak_tbps is None and spec is not None:
        peak_tbps = spec.peak_tbps
    fig, body = _new_figure((16, 8.5))
    ax = body.subplots()
    contexts: set[int] = set()
    best = None
    for v, t in chosen:
        r = _rows_of(d, (v, t)).groupby("ctx")["achieved_tbps"].median()
        if r.empty:
            continue
        contexts |= set(r.index.astype(int))
        ax.plot(r.index, r.values, **variant_style(v, t), label=series_label(v, t),
                gid=f"{v}/{t}")
        if best is None or r.iloc[-1] > best[2].iloc[-1]:
            best = (v, t, r)
    shown = pd.concat([_rows_of(d, s) for s in chosen]) if chosen else d.iloc[:0]
    top = [float(shown["achieved_tbps"].max()) if not shown.empty else 1e-3]
    ceilings = {}
    if _finite(copy_tbps) and not shown.empty:
        for i, dt in enumerate(sorted(set(shown["dot_dtype"]), key=lambda k: -roofs.get(k, 0))):
            g = shown[shown["dot_dtype"] == dt]
            ai = (g["flops"] / g["min_bytes"]).groupby(g["ctx"]).median()
            mm = roofs.get(dt)
            c = pd.Series([attainable_tbps(a, copy_tbps, mm) for a in ai], index=ai.index)
            ceilings[dt] = c
            lab = (f"ceiling at this op's AI ({ai.iloc[-1]:.0f} FLOP/B), {dt} dot: "
                   f"min(copy, {mm:.0f} TFLOP/s / AI) = {c.iloc[-1]:.2f} TB/s"
                   if _finite(mm) else f"ceiling, {dt} dot: copy {copy_tbps:.2f} TB/s")
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
        if _finite(val):
            ax.axhline(val, color=color, ls=style, lw=1.8, label=lab, gid=gid, zorder=1)
            ax.annotate(lab, xy=(0.01, val), xycoords=("axes fraction", "data"), xytext=(0, 3),
                        textcoords="offset points", color=color, fontsize=10, va="bottom")
            top.append(float(val))
    if best is not None:
        v, t, r = best
        dt = _rows_of(d, (v, t))["dot_dtype"].iloc[0]
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
                 f"{_timings_text(chosen)}", loc="left", fontsize=14)
    _fig_legend(body, (ax,), ncol=2)
    footer(fig, d)
    return fig


# ------------------------------------------------------------------ peaks
def _op_point(shape: str, ctx: int, cache_dtype: str, weight_format: str, us: float):
    nb = roofline.min_bytes(shape, int(ctx), cache_dtype, weight_format)
    nf = roofline.flops(shape, int(ctx))
    return nf / nb, nf / (us * 1e-6) / 1e12, nb / (us * 1e-6) / 1e12


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
    (``roofline.min_bytes(shape, ctx, cache_dtype, weight_format)`` and ``roofline.flops``).
    Bottom: the fraction of the attainable peak, min(bandwidth x AI, matrix roof), per
    (device, design, context): filled against the datasheet roofs, hollow against the
    measured ones.

    Expects single-sequence rows of the op (``flops``, ``min_bytes``, ``achieved_tflops``,
    ``ctx``, ``dot_dtype``, ``copy_tbps``, ``mm_tflops``), e.g. ``roofline.csv``'s.
    """
    set_style()
    d = tidy(df)
    d["ai"] = d["flops"] / d["min_bytes"]
    chosen = choose_series(d, series, limit=limit)
    shown = pd.concat([_rows_of(d, s) for s in chosen]) if chosen else d.iloc[:0]
    ours = column_values(d, "device", "")
    refs = _reference_list({"first table": reference, "as merged": merged},
                           default_name="public change")
    ref_pts = []  # (name, which, ctx, ai, tflops)
    for name, ref, _raw in refs:
        for which in ("before", "after"):
            for c, us in zip(ref["ctx"], ref[f"{which}_us"], strict=True):
                ai, tf, _tb = _op_point(shape, c, cache_dtype, weight_format, us)
                ref_pts.append((name, which, int(c), ai, tf))
    ref_dev = reference_device
    for _name, _ref, raw in refs:
        ref_dev = _ref_device(raw, reference_device)
    dot = roofline.dot_dtype(cache_dtype, weight_format)

    devices = [n for n in (ours, ref_dev if refs else "") if n]
    fig, body = _new_figure((20, 15))
    gs = body.add_gridspec(2, max(1, len(devices)), height_ratios=[1.1, 1])
    panels = {n: body.add_subplot(gs[0, i]) for i, n in enumerate(devices)}
    ax_b = body.add_subplot(gs[1, :])

    all_ai = list(shown["ai"]) + [p[3] for p in ref_pts]
    a0, a1 = (min(all_ai), max(all_ai)) if all_ai else (380.0, 380.0)
    contexts = set(shown["ctx"].astype(int)) | {p[2] for p in ref_pts}
    sizes = _ctx_sizes(contexts, 6, 14)
    fractions = []  # (device, group label, colour, marker, ctx, fraction, against)
    for name, ax in panels.items():
        spec = lookup_device(name)
        ds_bw = spec.peak_tbps if spec is not None else None
        mine = name == ours
        # The roofs of the op's dot dtype, and of the dtypes of our series drawn.
        keep = {dot} | (set(shown["dot_dtype"]) if mine and not shown.empty else set())
        ds = {dt: spec.peak(dt) for dt in sorted(keep)} if spec is not None else {}
        ds = {k: v for k, v in ds.items() if _finite(v)}
        bw = _copy_roof(d, None) if mine else None
        roofs = {k: v for k, v in _matrix_roofs(d, None).items() if k in keep} if mine else {}
        ridges = [v / b for v, b in ((ds.get(dot), ds_bw), (roofs.get(dot), bw))
                  if _finite(v) and _finite(b)]
        lo, hi = min([a0] + ridges) / 2.2, max([a1] + ridges) * 2.2
        x = np.geomspace(lo, hi, 400)
        if roofs and bw:
            _draw_roofs(ax, x, bw, roofs, kind="measured", color=CEILING_COLOR, ls="-", lw=2.5,
                        ridge_dtypes=[dot])
        _draw_roofs(ax, x, ds_bw, ds, kind="datasheet", color=PEAK_COLOR, ls="--", lw=1.8,
                    ridge_dtypes=[dot], below=True)
        ax.axvspan(a0 / 1.01, a1 * 1.01, color="0.8", alpha=0.7, zorder=0, lw=0,
                   label=f"this operation: {a0:.0f}-{a1:.0f} FLOP/B")
        ax.annotate(f"this op\n{a1:.0f} FLOP/B", xy=(a1 * 1.02, 0.98),
                    xycoords=("data", "axes fraction"), ha="left", va="top", fontsize=10,
                    color="0.25")
        pts_y = []
        if mine:
            for v, t in chosen:
                p = _roofline_series(ax, d, (v, t), sizes, lw=1.2)
                if p.empty:
                    continue
                st = variant_style(v, t)
                pts_y += list(p["achieved_tflops"])
                group = f"{name}: {series_label(v, t)}"
                for _, r in p.iterrows():
                    if spec is not None and _finite(ds.get(r["dot_dtype"])):
                        att = min(ds_bw * r["ai"], ds[r["dot_dtype"]])
                        fractions.append((name, group, st["color"], st["marker"], int(r["ctx"]),
                                          r["achieved_tflops"] / att, "datasheet"))
                    mm = roofs.get(r["dot_dtype"])
                    if bw and _finite(mm):
                        att = min(bw * r["ai"], mm)
                        fractions.append((name, group, st["color"], st["marker"], int(r["ctx"]),
                                          r["achieved_tflops"] / att, "measured"))
        if name == ref_dev and refs:
            for i, (rname, _ref, _raw) in enumerate(refs):
                for which in ("before", "after"):
                    pts = sorted((p for p in ref_pts if p[0] == rname and p[1] == which),
                                 key=lambda p: p[2])
                    st = _ref_style(i, which)
                    label = f"public change, {rname}: {which}"
                    ax.plot([p[3] for p in pts], [p[4] for p in pts], **{**st, "lw": 1.2},
                            label=label, gid=f"reference/{rname}/{which}", zorder=4)
                    pts_y += [p[4] for p in pts]
                    for p in pts:
                        if spec is not None and _finite(ds.get(dot)):
                            att = min(ds_bw * p[3], ds[dot])
                            fractions.append((name, f"{name}: {label}", REFERENCE_COLOR,
                                              st["marker"], p[2], p[4] / att, "datasheet"))
        _plain_log_x(ax, lo, hi)
        _plain_log_y(ax)
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
        _size_legend(ax_b, sizes, loc="lower right")
    _suptitle(fig, f"gather_kv_b_proj against each device's own peaks: "
                   f"{', '.join(devices)}\n{shape}, {cache_dtype} cache, {weight_format} weight; "
                   f"ours in {_timings_text(chosen) or 'no rows'}")
    footer(fig, d, f"{ref_dev}: the public change's published tables "
                   f"({', '.join(n for n, _, _ in refs)})" if refs else None)
    return fig


# ------------------------------------------------------------------ formats
FORMAT_ORDER = ("bf16", "fp8_row", "fp8_block", "mxfp4")


def format_table(df: pd.DataFrame, *, ctx: int = 32000, value: str = "roof_fraction",
                 series=None, limit: int = DEFAULT_LIMIT) -> dict[str, pd.DataFrame]:
    """{cache dtype: weight format x variant table of ``value``} at ``ctx``, each variant in
    the timing ``choose_series`` picks; NaN where nothing was measured."""
    d = _format_rows(df, ctx)
    chosen = choose_series(d, series, limit=limit, torch="all")
    cols = [v for v, _ in chosen]
    out = {}
    for cache in _cache_order(d):
        t = pd.DataFrame(np.nan, index=list(FORMAT_ORDER), columns=cols)
        for v, tm in chosen:
            r = _rows_of(d, (v, tm))
            r = r[r["cache_dtype"] == cache].groupby("weight_format")[value].median()
            for wf, val in r.items():
                if wf not in t.index:
                    t.loc[wf] = np.nan
                t.loc[wf, v] = val
        out[cache] = t
    return out


def _cache_order(d: pd.DataFrame) -> list[str]:
    return sorted(pd.unique(d["cache_dtype"].astype(str)), key=lambda c: (c != "bf16", c))


def _format_rows(df: pd.DataFrame, ctx: int) -> pd.DataFrame:
    d = tidy(df)
    d = d[d["ctx"].astype(int) == int(ctx)]
    if "batch" in d.columns:
        d = d[d["batch"].astype(int) == 1]
    if "config" in d.columns:
        d = d[d["config"].isna() | (d["config"].astype(str).str.strip() == "")]
    if "model" in d.columns and d["model"].nunique() > 1:
        d = d[d["model"] == d["model"].value_counts().idxmax()]
    return d


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
    d = _format_rows(df, ctx)
    chosen = choose_series(d, series, limit=limit, torch="all")
    fracs = format_table(d, ctx=ctx, series=chosen)
    times = format_table(d, ctx=ctx, value="median_us", series=chosen)
    caches = list(fracs)
    n = max(1, len(caches))
    ncols = len(chosen)
    heat_w, bars_w = 1.15 * ncols + 1.5, 0.75 * ncols + 2.0
    if n == 1:  # one heat map and the bars side by side
        fig, body = _new_figure((heat_w + bars_w + 2.0, 8.5))
        gs = body.add_gridspec(1, 2, width_ratios=[heat_w, bars_w])
        bars_at = gs[0, 1]
    else:  # heat maps side by side, the bars (a group per format and cache) below them
        fig, body = _new_figure((max(n * heat_w, 4 * n * 0.25 * ncols + 2.0) + 1.0, 15.5))
        gs = body.add_gridspec(2, n, height_ratios=[1.15, 1])
        bars_at = gs[1, :]
    cmap = plt.get_cmap("viridis").with_extremes(bad="#f2f2f2")
    for i, cache in enumerate(caches):
        ax = body.add_subplot(gs[0, i])
        t = fracs[cache]
        dots = {}
        for v, tm in chosen:
            r = _rows_of(d, (v, tm))
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
    _plain_log_y(ax_b)
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
    _suptitle(fig, f"gather_kv_b_proj on {column_values(d, 'device')}: weight formats at {ctx} "
                   f"tokens\n{describe(d, skip=('weight_format', 'cache_dtype'))}; "
                   f"{_timings_text(chosen)}")
    footer(fig, d)
    return fig


# ------------------------------------------------------------------ occupancy
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
    fig, body = _new_figure((20, 8.5))
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
    _plain_log_y(ax_p)
    ax_p.axhline(1.0, color="0.35", lw=1.4, ls=(0, (8, 3)), zorder=1,
                 label="one program per compute unit (reference)")
    ax_p.set_ylabel("working programs per compute unit (log scale)")
    ax_p.set_title("Programs per compute unit", loc="left")
    for a in (ax, ax_p):
        set_ctx_axis(a, d["ctx"])
    _fig_legend(body, (ax, ax_p), ncol=3)
    _suptitle(fig, "How much of the device one launch occupies (model of the launch grid)\n"
                   f"{describe(d)}; on {', '.join(devices)}")
    footer(fig, d, "occupancy model of each design's launch grid (computed, not measured)")
    return fig
