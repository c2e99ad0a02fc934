"""A Hopper-only design in Triton's Gluon dialect: persistent and warp-specialised.

The portable tiled design spends its time in two halves that do not overlap: the matrix
work (about the floor) and the output stores (about 3/4 of it). Here each program owns a
contiguous run of work items and three groups of warps run side by side:

- one warp streams the weight, chunks of 128 rows x 128 bytes ([128 x 128] fp8 or
  [128 x 64] bf16, 16 KB either way) by TMA, into a STAGES-deep ring (MXFP4: four warps
  widen it into the ring, below);
- four warps gather the scattered latent rows of a token tile with cp.async into shared
  memory (zero-filled past the last row), completing on an mbarrier;
- four warps (the default partition) issue async wgmma, scale and narrow the result,
  stage it in one of two shared buffers and store it by TMA, so one item's stores drain
  while the next item's matrix work runs.

Three options (``HopperWSConfig``), off by default: ``mma_groups=2`` runs the MMA and
epilogue warps as two warpgroups, each taking 64 of a tile's 128 rows of every item (both
read each weight and latent chunk, which is freed when both have; each stages and stores
its half), 200 registers each beside the other partitions; ``ring_depth`` 5 or 6 (over an
fp8 latent tile) gives the weight ring the room of the second output staging buffer;
``latent_in_registers`` (with two groups) has each group load its 64 rows of a tile's four
latent chunks into registers once, as wgmma's A operand for all the tile's items (int32
words: 64 registers; held as fp8 values they take one register each and spill), and frees
the tile's buffer for the next tile at once. The three together (what ``auto`` runs for fp8
per row from 16384 rows): 3.5-7% faster than the default from 32000 tokens in the
committed run at 4db5f28 (fp8 per row over an fp8 cache, Kimi-K3 TP8; DeepSeek-V3 TP1
8.5%), 2% slower at 4096; the registers alone add 0-2% to two groups (docs/perf-notes.md).

A work item is BM tokens x one head-half (K-nope or V, BN = 128 columns). Items are
numbered tile-major, so consecutive items of a program share the gathered latent tile
(2 x heads items per tile). The rope columns are narrowed once per tile and stored beside
each head's K-nope block. The last tile is shifted back to end at the last token, so rows
past it are never written; only a batch of fewer than 128 tokens has a partial tile, stored
with row-masked stores.

Supported (``supports``): an fp8 e4m3fn or a bf16 cache (below), nope = v = 128, pe = 64,
kv_c a multiple of 128 up to 512, bf16 or fp16 outputs, and one of these weights (float
scales float32 or bf16):

- fp8 e4m3fn per output row (SCALE_ROW): fp8 x fp8 wgmma, the row scale x k_scale in the
  epilogue.
- fp8 e4m3fn per 128x128 block (SCALE_BLOCK): an item's 128 rows are one block row and a
  128-wide K chunk one block column, so each (item, K chunk) has one scalar scale s[kb]. The
  accumulator is kept normalised to the current chunk's scale (acc *= s[kb-1] / s[kb] before
  chunk kb; s[last] x k_scale in the epilogue), as two 64-token halves so that one half is
  renormalised while the other's wgmma runs and the tensor cores never wait
  (``_block_scaled_item``: why, and what it costs). Predicted: about fp8_row's time.
- bf16, with no scale, a per-row or a per-block scale: the ring holds [128 x 64] bf16
  chunks (two per latent chunk) and the latent tile is bf16 too (below): the gather warps
  load each tile's fp8 rows into registers, widen them exactly (_E4M3_TO_BF16) and store
  the bf16 tile a bf16 cache's gather leaves (``_latent_widener``), so the MMA warps run
  that cache's K loops with k_scale in the epilogue. Row scales apply in the epilogue,
  block scales per 128-wide K step as for fp8. Widened once a tile instead of once an item,
  as the designs before did (in the MMA warps: 276 us at 32000 tokens; by the gather warps
  into a staging ring: 219 us, 0.72 of the bf16 floor): 187 us, 0.88 (0.87-0.89 at 32000 to
  109440 tokens, Kimi-K3 TP8; docs/perf-notes.md).

- MXFP4 (packed e2m1, e8m0 scales per 32 values along K; SCALE_E8M0): no copy of the
  weight in another format exists before or after the call. A widener partition (four
  warps, in place of the TMA loader) reads each item's packed bytes and codes from global
  memory and writes its weight into the ring widened, with one power-of-two factor 2^F a
  row (F = the row's largest code - 133, undone with k_scale in the epilogue): as e4m3
  chunks when every row's codes span at most 12 binades (each value then a normal e4m3
  value, exactly: an fp8 x fp8 item, as fp8_row), else as bf16 chunks (exact but below
  float32's range; a bf16 x bf16 item, as a bf16 weight). The route is chosen per item on
  the device (``fp8_route`` is the same rule on the host) and passed with the item's
  factors through a small shared ``info`` ring. Chunks go over two at a time (so MXFP4
  needs three ring slots or more). Measured (docs/perf-notes.md): 0.93-1.00 of the bf16
  floor from 32k tokens with every item on e4m3, about 1.5x fp8_row's time (the widener
  sets the pace); 0.36-0.38 with every item on bf16.

A bf16 latent tile (LAT16: a bf16 weight, over either cache): 2 NK bf16 [128 x 64] K slices
(128 KB at kv_c = 512), wgmma's A operand as they are, so every item is bf16 x bf16. With a
4-deep ring (64 KB) and one output staging buffer (32 KB) that is 224 KB, so the rope skips
shared memory: the gather warps load it into registers and store it (x k_scale over an fp8
cache) into the K rows of the heads whose K-nope items their program runs. A bf16 cache
takes every weight format: fp8 (per row or per block) and MXFP4 weights are widened into a
bf16 copy ahead of the kernel (weight_widening: a small kernel, once a call), which then
runs as a bf16 weight with the fp8 weight's own scale, or with MXFP4's power-of-two row
factors as a row scale: 0.91-0.96 of the bf16 floor at 32000 to 109440 tokens (Kimi-K3
TP8, docs/perf-notes.md). Widening them in the kernel instead, item by item, set the pace
(0.56-0.69; MXFP4 0.36-0.39).

Not written either: GLM-5-style heads (nope 192, v 256; ``supports`` asks nope = v = 128).
A head's 448 weight rows are 3.5 items of 128 columns: K-nope straddles an item boundary.
What it would take: items of a head as K-nope[0:128], K-nope[128:192], V[0:128],
V[128:256], the second an n64 item (m64n64 wgmma, a [128 x 64] accumulator and staging
half, the weight chunk [64 x 128]): the item kind chosen per item at run time, both MMA
shapes compiled in, the rope stored beside the n64 item. All-n64 items (7 a head) would be
simpler but read the latent operand from shared memory twice per FLOP, at about the SM's
128 bytes a cycle for fp8. Expected about fp8_row's time per output column (512 columns
a head against Kimi's 320), plus the n64 item's lower rate.
"""

from __future__ import annotations

from ..record import Design
from .config import HopperWSConfig
from .conversions import _E4M3_TO_BF16, _halves, _mx_chunk, _mx_item, _widen_bf16, _widen_e4m3
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

__all__ = ["DESIGNS", "HOPPER_WS", "HopperWSConfig", "_E4M3_TO_BF16", "_halves", "_mx_chunk",
           "_mx_item", "_widen_bf16", "_widen_e4m3", "fp8_route", "hopper_ws_grid",
           "hopper_ws_kernel", "hopper_ws_work", "lockstep_granule", "prepare_hopper_ws",
           "row_extras", "serves", "supports"]
