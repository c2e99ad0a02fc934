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
* Reference lines (roofs, ceilings, ridges) are drawn without markers in colours no design,
  extra design or torch grey uses (``REFERENCE_LINE_COLORS``): datasheet brown, measured
  library rates (copy, cuBLAS) violet, the tensor cores' own rate magenta, the ceiling at
  the operation's intensity yellow-green; each roof has its own swatch (``ROOF_STYLE``: a
  roof's bandwidth part and its matrix part differ in line style).
* Line style is fixed by the timing: device time (``graph``: one call replayed from a CUDA
  graph) solid, a plain call incl. host cost (``flushed``) dashed, ``graph8`` (8 calls in
  one graph, per call) dotted.
* Default series (``default_series``): every design in its device timing (``graph``, else
  ``graph8``, else ``flushed`` where a design has nothing better), plus the fastest torch
  path; at most ``limit`` (7) lines in a panel, counting the public change's reference lines.
  Over the limit, ``auto`` goes first (it runs one of the other designs, so its line repeats
  theirs), then the slowest designs; ``before`` and the torch path stay. The context sweep
  has no limit by default (every design is drawn). A variant of the rows that a figure does
  not draw is named, with why, in a note under the footer (``left_out_note``, gid
  ``"note"``). Plain calls and the rest are opt-in through ``series=`` (see
  ``choose_series``). ``plot_formats`` keeps every torch path (torch_fp8 serves fp8 weights
  only, torch_bf16 every format) under the same limit; ``plot_occupancy`` (a model, not
  timings) draws every (design, device, config) as a row of two tables of cells.
* ``auto``'s legend entry says what it ran (``series_label(v, t, rows)``: the rows'
  ``design``, and ``config`` shortened by ``short_config`` where not empty).
* Token counts are written exactly, in every figure and table: 32000, 32768, 109440
  (``ctx_label``), never in units of 1024. Context axes are log scale with ticks only at
  the contexts that have data.
* The footer (``footer``, gid ``"footer"``) names the data: device, run (``<date>-<commit>``,
  as run folders are named, from the rows' ``date`` and ``commit``), commit, date, torch and
  triton, after "data:", so a figure redrawn by newer code never claims the code's commit
  is the data's. A model computed here (occupancy) names the commit that computed it.
* The roofline draws, where the rows have them, the tensor cores' own rate (``tc_tflops``
  at ``sm_clock_mhz``) as a third roof and the fraction of its floor (``tc_floor_us /
  median_us``) beside the fraction of the floor at cuBLAS's rates (``roof_fraction``); where
  they do not, it says "tensor-core rate not measured in this run" (gid ``"note/tc"``).
* Gids a test reads: a series ``"<variant>/<timing>"``; roofs ``"roof/<kind>/<dot or
  bandwidth>"`` and ridges ``"ridge/<kind>/<dot>"`` (kind ``measured``, ``tc``,
  ``datasheet``); the roofline zoom's labels ``"label/<variant>/<timing>"`` and
  ``"label/roof/<kind>/<dot>"``; the bandwidth figure's line labels ``"label/<line>"``;
  occupancy cells ``"busy/<row>/<ctx>"`` and ``"per_cu/<row>/<ctx>"``, row labels
  ``"row/<row>"``; the formats figure's FP8-output panels ``"fp8out/<cache>/<ctx>"``, their
  bars' texts ``"fp8out/<cache>/<ctx>/<format>/<variant>"`` and target lines
  ``"fp8out/target"``.

Rows named ``<variant>_graph`` (how the tables of older runs in data/ name graph-timed rows)
are read as ``<variant>`` timed ``graph``.
"""

# Tables, computed in analysis; importable from here too, as before the split.
from ..analysis import attainable_tbps, reference_table
from .axes import column_values, ctx_label, describe, footer, run_label, save_figure, set_ctx_axis
from .context import plot_context_memory, plot_crossover
from .formats import plot_formats
from .occupancy import plot_occupancy
from .peaks import plot_peaks
from .roofs import plot_bandwidth, plot_roofline
from .series import (
    choose_series,
    default_series,
    device_timing,
    left_out,
    left_out_note,
    present_series,
    tidy,
)
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
    REFERENCE_LINE_COLORS,
    ROOF_STYLE,
    TC_COLOR,
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
    ran_text,
    series_label,
    set_style,
    short_config,
    variant_colors,
    variant_style,
)
from .sweep import plot_context_sweep
from .tables import FORMAT_ORDER, format_table, fp8_output_cells

__all__ = [
    "ATTAINABLE_COLOR", "CEILING_COLOR", "DEFAULT_LIMIT", "DESIGN_COLORS", "DESIGN_MARKERS",
    "DESIGN_ORDER", "EXTRA_COLORS", "FORMAT_ORDER", "PEAK_COLOR", "REFERENCE_COLOR",
    "REFERENCE_LINE_COLORS", "ROOF_STYLE", "TC_COLOR", "TIMINGS",
    "TIMING_LINESTYLE", "TIMING_LONG", "TIMING_NAME", "TORCH_COLORS", "TORCH_EXTRA",
    "TORCH_MARKERS", "attainable_tbps", "base_variant", "choose_series", "column_values",
    "ctx_label", "default_series", "describe", "design_color", "design_marker", "device_timing",
    "footer", "format_table", "fp8_output_cells", "is_torch", "left_out", "left_out_note",
    "plot_bandwidth", "plot_context_memory", "plot_context_sweep", "plot_crossover",
    "plot_formats", "plot_occupancy", "plot_peaks", "plot_roofline", "present_series",
    "ran_text", "reference_table", "run_label", "save_figure", "series_label", "set_ctx_axis",
    "set_style", "short_config",
    "tidy", "variant_colors", "variant_style",
]
