"""Figures for design reviews: one style, one colour per design in every figure, titles that
say what was measured on what, units on every axis, and a footer naming the run.

Every plot function takes rows in the tidy measurement schema of data/README.md (one row
per configuration x variant x timing) and returns the matplotlib Figure; ``save_figure``
writes it as PNG and SVG. A plotted series is one (variant, timing) pair: its Line2D carries
a readable label (``"chunked, device time"``) and the gid ``"<variant>/<timing>"``, so a
test can read back what was drawn.

The modules, by what they hold: ``style`` (colours, markers, line styles, ``set_style``),
``series`` (``tidy`` and which series a figure draws), ``axes`` (titles, footers, axes,
legends, saving) and the figures: ``sweep`` (``plot_context_sweep``), ``roofs``
(``plot_roofline``, ``plot_bandwidth``), ``peaks`` (``plot_peaks``), ``formats``
(``plot_formats``), ``occupancy`` (``plot_occupancy``). The tables the figures draw
(the peak fractions, the reference table) are computed in ``mla_kernels.review.analysis``;
``tables`` holds the weight-format tables.
Every public name is importable from here.

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

Rows named ``<variant>_graph`` (how the tables of older runs in data/ name graph-timed rows)
are read as ``<variant>`` timed ``graph``.
"""

# Tables, computed in analysis; importable from here too, as before the split.
from ..analysis import attainable_tbps, reference_table
from .axes import column_values, ctx_label, describe, footer, run_label, save_figure, set_ctx_axis
from .formats import plot_formats
from .occupancy import plot_occupancy
from .peaks import plot_peaks
from .roofs import plot_bandwidth, plot_roofline
from .series import choose_series, default_series, device_timing, present_series, tidy
from .style import (
    ATTAINABLE_COLOR,
    CEILING_COLOR,
    DEFAULT_LIMIT,
    DESIGN_COLORS,
    DESIGN_MARKERS,
    DESIGN_ORDER,
    EXTRA_COLORS,
    PEAK_COLOR,
    REFERENCE_COLOR,
    TIMING_LINESTYLE,
    TIMING_LONG,
    TIMING_NAME,
    TIMINGS,
    TORCH_COLORS,
    TORCH_EXTRA,
    TORCH_MARKERS,
    base_variant,
    design_color,
    design_marker,
    is_torch,
    series_label,
    set_style,
    variant_colors,
    variant_style,
)
from .sweep import plot_context_sweep
from .tables import FORMAT_ORDER, format_table

__all__ = [
    "ATTAINABLE_COLOR", "CEILING_COLOR", "DEFAULT_LIMIT", "DESIGN_COLORS", "DESIGN_MARKERS",
    "DESIGN_ORDER", "EXTRA_COLORS", "FORMAT_ORDER", "PEAK_COLOR", "REFERENCE_COLOR", "TIMINGS",
    "TIMING_LINESTYLE", "TIMING_LONG", "TIMING_NAME", "TORCH_COLORS", "TORCH_EXTRA",
    "TORCH_MARKERS", "attainable_tbps", "base_variant", "choose_series", "column_values",
    "ctx_label", "default_series", "describe", "design_color", "design_marker", "device_timing",
    "footer", "format_table", "is_torch", "plot_bandwidth", "plot_context_sweep",
    "plot_formats", "plot_occupancy", "plot_peaks", "plot_roofline", "present_series",
    "reference_table", "run_label", "save_figure", "series_label", "set_ctx_axis", "set_style",
    "tidy", "variant_colors", "variant_style",
]
