"""Deprecated: the path of ``designs.weight_widening`` in 0.2.0, re-exported for one release.

The bf16 widening of a weight ahead of ``hopper_ws`` (the only design that uses it) lives in
its family now: ``designs.hopper_ws.widening``.
"""

from __future__ import annotations

import warnings

from .hopper_ws.widening import (
    BK,
    MX_BIAS,
    ROWS,
    WidenedWeight,
    widen_weight,
    widen_weight_kernel,
    widened_problem,
    widened_shapes,
)

warnings.warn("mla_kernels.designs.weight_widening moved to mla_kernels.designs.hopper_ws.widening "
              "in 0.3.0; the old path goes in 0.4.0", DeprecationWarning, stacklevel=2)

__all__ = ["BK", "MX_BIAS", "ROWS", "WidenedWeight", "widen_weight", "widen_weight_kernel",
           "widened_problem", "widened_shapes"]
