"""A Hopper-only design in Triton's Gluon dialect: persistent and warp-specialised.

Each program owns a contiguous run of work items (128 tokens x one head-half) and three
groups of warps run side by side: one streams the weight by TMA into a ring of shared slots
(MXFP4: four warps widen it into the ring instead), four gather the scattered latent rows of
a token tile by cp.async, and four issue async wgmma, scale and narrow each item and store it
by TMA from shared staging buffers, so one item's stores drain while the next item's matrix
work runs. Weights: fp8 per row or per 128x128 block, bf16, MXFP4; caches: fp8 or bf16
(``supports``).

The design's story (partitions, ring and barriers, items and tiles, the MXFP4 routes, the
bf16-cache path, why each choice) is in README.md beside this file, with links to its
measurements (docs/perf-notes.md, docs/log/); each part lives in its own module here
(README.md: the files).
"""

from __future__ import annotations

from ..design import Design
from .config import HopperWSConfig
from .kernel import hopper_ws_kernel
from .plan import (
    fp8_route,
    hopper_ws_grid,
    hopper_ws_work,
    prepare_hopper_ws,
    row_extras,
    serves,
    supports,
)
from .schedule import lockstep_granule

HOPPER_WS = Design("hopper_ws", "persistent, warp-specialised Gluon kernel: TMA weight ring, "
                   "cp.async latent gather, async wgmma, overlapped TMA stores (sm_90 only)",
                   ("fp8_row", "fp8_block", "bf16", "mxfp4"), HopperWSConfig, hopper_ws_grid,
                   prepare_hopper_ws, hopper_ws_work, kernels=(hopper_ws_kernel,), vendors=("nvidia",),
                   serves=serves, row_extras=row_extras)
DESIGNS = (HOPPER_WS,)

__all__ = ["DESIGNS", "HOPPER_WS", "HopperWSConfig", "fp8_route", "hopper_ws_grid",
           "hopper_ws_kernel", "hopper_ws_work", "lockstep_granule", "prepare_hopper_ws",
           "row_extras", "serves", "supports"]
