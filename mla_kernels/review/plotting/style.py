"""Style: the colour, marker and line of every series, fixed by its design's name and its
timing, so one design looks the same in every figure; the order figures list series in."""

from __future__ import annotations

import re
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
# Reference lines, in hues no design, extra design or torch grey uses (each at least ~25
# CIE76 units from all of them, and from each other), drawn without markers.
PEAK_COLOR = "#8C510A"  # datasheet roofs: brown
CEILING_COLOR = "#785EF0"  # measured library roofs (copy, cuBLAS matmul): violet
TC_COLOR = "#DC267F"  # the tensor cores' own MMA rate: magenta
ATTAINABLE_COLOR = "#66A61E"  # what this operation can reach at its AI: yellow-green
REFERENCE_LINE_COLORS = (PEAK_COLOR, CEILING_COLOR, TC_COLOR, ATTAINABLE_COLOR)
# One swatch per roof: (colour, line style, width). A roof's bandwidth part and its matrix
# part differ in line style, so the legend tells them apart.
ROOF_STYLE = {
    ("measured", "bandwidth"): (CEILING_COLOR, "-.", 2.0),
    ("measured", "matrix"): (CEILING_COLOR, "-", 2.6),
    ("tensor cores", "matrix"): (TC_COLOR, "-", 2.6),
    ("datasheet", "bandwidth"): (PEAK_COLOR, "--", 1.7),
    ("datasheet", "matrix"): (PEAK_COLOR, ":", 2.2),
}

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


def short_config(text) -> str:
    """A launch config's repr, briefly: ``HopperWSConfig(ring_depth=4, programs=None,
    latent_in_registers=True)`` -> ``"ring_depth=4, latent_in_registers"`` (the class name,
    fields left at None or False dropped; a True flag by its name). Text that is not such a
    repr comes back as it is; empty or NaN gives ``""``."""
    text = "" if text is None or text != text else str(text).strip()
    m = re.fullmatch(r"\w+\((.*)\)", text, flags=re.S)
    if not m:
        return text
    fields, depth, cur = [], 0, ""
    for ch in m.group(1):  # split at top-level commas only: a field may hold a tuple
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            fields.append(cur.strip())
            cur = ""
        else:
            cur += ch
    fields.append(cur.strip())
    out = []
    for f in filter(None, fields):
        name, eq, val = f.partition("=")
        if not eq:
            out.append(f)
        elif val in ("None", "False"):
            continue
        else:
            out.append(name if val == "True" else f"{name}={val}")
    return ", ".join(out) or "defaults"


def ran_text(rows) -> str:
    """What ``auto`` ran, from its rows' ``design`` and ``config`` columns: ``"ran
    hopper_ws"``, ``"ran hopper_ws with ring_depth=4"``, ``"ran tiled_tma / hopper_ws"`` (by
    context); ``""`` when the rows do not say."""
    if rows is None or len(rows) == 0 or "design" not in rows.columns:
        return ""
    r = rows.sort_values("ctx") if "ctx" in rows.columns else rows
    designs = [str(x) for x in r["design"] if x == x and str(x).strip()]
    configs = ([short_config(x) for x in r["config"]] if "config" in r.columns
               else [""] * len(designs))
    pairs = list(dict.fromkeys(
        (d, c) for d, c in zip(r["design"].astype(str), configs, strict=True)
        if d.strip() and d != "nan"))
    if not designs or not pairs:
        return ""
    if len(pairs) > 2:  # a long story: the designs alone
        return "ran " + " / ".join(dict.fromkeys(d for d, _ in pairs))
    return "ran " + " / ".join(f"{d} with {c}" if c else d for d, c in pairs)


def series_label(v: str, timing: str, rows=None) -> str:
    """``"chunked, device time"``: what a series is called in every legend. With the
    series' ``rows``, ``auto``'s label says what it ran (``ran_text``)."""
    name = base_variant(v)
    ran = ran_text(rows) if rows is not None and name == "auto" else ""
    who = f"{name} ({ran})" if ran else name
    return f"{who}, {TIMING_NAME.get(timing, timing)}"


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
