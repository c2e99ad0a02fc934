"""Style: the colour, marker and line of every series, fixed by its design's name and its
timing, so one design looks the same in every figure; the order figures list series in."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import seaborn as sns

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


def variant_order(v: str) -> tuple[int, int, str]:
    b = base_variant(v)
    if b in DESIGN_ORDER:
        return (0, DESIGN_ORDER.index(b), b)
    return (2, 0, b) if is_torch(b) else (1, 0, b)


def series_order(s: tuple[str, str]) -> tuple:
    t = TIMINGS.index(s[1]) if s[1] in TIMINGS else len(TIMINGS)
    return (*variant_order(s[0]), t, s[1])


# The public change's series.
_REF_MARKERS = (("s", "^"), ("D", "v"), ("o", "P"))
_REF_LINES = ("-", (0, (4, 1.5, 1, 1.5)), (0, (1, 1)))


def ref_style(i: int, which: str) -> dict[str, object]:
    """The public change's series: black, a hollow marker for 'before' and a filled one
    for 'after'; a second table another pair of markers and a dash-dot line."""
    m = _REF_MARKERS[i % len(_REF_MARKERS)]
    return {"color": REFERENCE_COLOR, "lw": 1.8, "ls": _REF_LINES[i % len(_REF_LINES)],
            "marker": m[0] if which == "before" else m[1], "ms": 8,
            "mfc": "white" if which == "before" else REFERENCE_COLOR, "mec": REFERENCE_COLOR}
