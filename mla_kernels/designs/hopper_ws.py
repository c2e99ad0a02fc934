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

import types
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from ..devices import DeviceSpec
from ..formats import as_uint8
from ..problem import GatherArgs, Problem
from ..rules import flag, int_in, one_of, optional
from .host import no_launch
from .jit import SCALE_CODES, find_sequence, search_steps
from .launch import DescriptorCache, JitLauncher
from .record import Design, DesignConfig
from .weight_widening import WidenedWeight, widened_problem, widened_shapes

# Asynchronous copies under either release's names: triton 3.6 has async_copy_global_to_shared
# (TMA and cp.async) and async_copy_shared_to_global; newer releases async_load / async_store.
tma_io = types.ModuleType("tma_io")
tma_io.load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_io.store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
cp_async = types.ModuleType("cp_async")
cp_async.load = (getattr(async_copy, "async_load", None)
                 or async_copy.async_copy_global_to_shared)
# A shared buffer viewed as another dtype and shape: _reinterpret in 3.6, reinterpret later.
smem = types.ModuleType("smem")
smem.reinterpret = (getattr(gl.shared_memory_descriptor, "reinterpret", None)
                    or gl.shared_memory_descriptor._reinterpret)
# A barrier among one partition's warps: gl.thread_barrier in 3.6, gl.barrier later.
partition_sync = getattr(gl, "barrier", None) or gl.thread_barrier

TILE = 128  # tokens per tile, output columns per item (one head-half), K per weight chunk
BM = gl.constexpr(TILE)  # tokens per tile
BN = gl.constexpr(TILE)  # output columns per item: one head-half
BK = gl.constexpr(TILE)  # K per weight chunk (128 fp8 bytes: one 128-byte swizzle row)
GATHER_WARPS = gl.constexpr(4)
# How the weight's scale applies (the SCALE constant; jit.SCALE_CODES' numbering).
SCALE_NONE = gl.constexpr(SCALE_CODES["none"])
SCALE_ROW = gl.constexpr(SCALE_CODES["row"])
SCALE_BLOCK = gl.constexpr(SCALE_CODES["block"])
SCALE_E8M0 = gl.constexpr(SCALE_CODES["e8m0"])

# Lockstep runs. Every program sweeps its tiles' items head by head; with equal runs each
# starts at its own head, so together they keep the whole weight in use, and a weight of
# many heads (DeepSeek-V3 TP1: 16.8 MB of fp8) falls out of L2 between two programs' reads
# of a row. Runs of whole granules (a tile, or 1/2 ... 1/8 of one) start every program at
# one of a few heads, so programs read each weight chunk at about the same time: 0.81 ->
# 0.90 of the floor at 32000 tokens (docs/perf-notes.md). For Kimi-K3 TP8's 1.5 MB it
# bought nothing and the imbalance cost 6%, so only weights of 64 heads or more.
LOCKSTEP_ITEMS = gl.constexpr(128)  # items a tile (2 x heads) from which runs go in lockstep
LOCKSTEP_SPLITS = gl.constexpr(4)  # granules tried: a tile, 1/2, 1/4, 1/8 of one
# e4m3 -> bf16 for a bf16 weight's latent (_latent_widener), a word of 4 values into two of 2: each
# byte s.eeee.mmm placed as the bf16 bits s.0000eeee.mmm0000 (its value 2^-120 times the
# e4m3 value, subnormals included), then multiplied by 2^120 (exact). Integer and bf16x2
# arithmetic, 3.5 instructions a value, instead of the conversion units' two conversions
# a value (e4m3x2 -> f16x2 -> bf16), which set the gather warps' pace. e4m3fn's NaN code
# comes out as 480: a NaN in a cache row a token reads is outside the contract.
# One output word: input bytes picked by a prmt selector into the low bytes of two halves.
_E4M3_PAIR = """prmt.b32 t, $2, z, {sel};
shl.b32 a, t, 4;
shl.b32 b, t, 8;
and.b32 a, a, 0x07F007F0;
and.b32 b, b, 0x80008000;
or.b32 a, a, b;
mul.rn.bf16x2 ${out}, a, k;
"""
_E4M3_TO_BF16 = gl.constexpr(
    "{\n.reg .b32 z, k, t, a, b;\nmov.b32 z, 0;\nmov.b32 k, 0x7B807B80;\n"
    + _E4M3_PAIR.format(sel="0x4140", out=0)  # values 0 and 1 of the word
    + _E4M3_PAIR.format(sel="0x4342", out=1)  # values 2 and 3
    + "}")

# ------------------------------------------------------------- MXFP4 widening
WIDEN_WARPS = gl.constexpr(4)
# The e4m3 route holds a weight row whose e8m0 exponents span at most MX_SPAN binades: with
# the row's factor 2^F, F = (largest exponent) - 6, each 32-value group is scaled by 2^d,
# d in [-5, 6], and every e2m1 value (0.5 to 6) times 2^d is a normal e4m3 value
# (2^-6 to 384), so the widening is exact. A work item (128 weight rows) whose rows all fit
# runs fp8 x fp8; any other item widens its weight to bf16 (same factor) and runs bf16.
MX_SPAN = gl.constexpr(11)
WIDEN_MIN_STAGES = 3  # ring slots MXFP4's widener needs (it hands chunks over in pairs)
MX_BIAS = gl.constexpr(127 + 6)  # F = e8m0 code - MX_BIAS for the row's largest code
# prmt lookup table: the e4m3 bytes of the e2m1 magnitudes 0, 0.5, 1, 1.5 (first word) and
# 2, 3, 4, 6 (second word) at d = 0; adding d << 3 to a non-zero byte scales it by 2^d. The
# sign is the nibble's top bit, moved to the byte's top bit by prmt's sign-replicate mode
# over bytes of 0x80 (0x80 -> bit 0 clear, 0xFF -> set) and a shift.
_E2M1_TO_E4M3 = gl.constexpr("""{
.reg .b32 l0, l1, t, m, s, k;
mad.lo.s32 l0, $3, 0x08080800, 0x3C383000;
mad.lo.s32 l1, $3, 0x08080808, 0x4C484440;
mov.b32 k, 0x80808080;
and.b32 t, $2, 0x7777;
prmt.b32 m, l0, l1, t;
prmt.b32 s, k, k, $2;
shl.b32 s, s, 7;
and.b32 s, s, 0x80808080;
or.b32 $0, m, s;
shr.u32 t, $2, 16;
prmt.b32 s, k, k, t;
and.b32 t, t, 0x7777;
prmt.b32 m, l0, l1, t;
shl.b32 s, s, 7;
and.b32 s, s, 0x80808080;
or.b32 $1, m, s;
}""")


@dataclass(frozen=True)
class HopperWSConfig(DesignConfig):
    """``ring_depth``: weight chunks in flight: 2-4 with a bf16 latent tile, 2-6 with an fp8
    one, where 5 and 6 take the room of the second output staging buffer (4 was fastest on
    the H200 with one MMA group; docs/perf-notes.md); ``programs``: persistent programs
    launched, None for one per SM; ``mma_groups``: MMA and epilogue warpgroups, 1, or 2 for
    an fp8 per-row weight over an fp8 cache (each takes 64 of a tile's 128 rows; with
    ``ring_depth=6``, 2-4% faster than the default from 32000 tokens and 2% slower at 4096,
    docs/perf-notes.md); ``latent_in_registers``: with two groups, each holds its rows of a
    tile's latent as wgmma's A operand in registers (0-2% more)."""

    ring_depth: int = 4
    programs: int | None = None
    mma_groups: int = 1
    latent_in_registers: bool = False

    _rules = {"ring_depth": int_in(2, 6), "programs": optional(int_in(1, 1 << 20)),
              "mma_groups": one_of(1, 2), "latent_in_registers": flag()}
    _legacy = {"stages": "ring_depth", "programs": "programs"}


@gluon.jit
def _as_words(slot):
    """A slot of 128 rows of 128 bytes ([128 x 128] e4m3: a ring slot or a latent chunk;
    [128 x 64] bf16: a slice of a bf16 latent tile) as [128 x 32] int32 words (the 128-byte swizzle places
    the same bytes either way)."""
    return smem.reinterpret(slot, gl.int32, [BN, BK // 4], gl.NVMMASharedLayout(
        swizzle_byte_width=128, element_bitwidth=32, rank=2))


@gluon.jit
def _widen_words(w):
    """[rows x n] int32 words of 4 e4m3 values as [rows x 2n] words of 2 bf16 values, in
    order, exactly (_E4M3_TO_BF16)."""
    lo, hi = gl.inline_asm_elementwise(_E4M3_TO_BF16, "=r,=r,r", [w],
                                       dtype=(gl.int32, gl.int32), is_pure=True, pack=1)
    return gl.join(lo, hi).reshape([w.shape[0], 2 * w.shape[1]])


@gluon.jit
def _as_bf16(ring):
    """The e4m3 ring as [STAGES, 128, 64] bf16 chunks (the same 16 KB a slot)."""
    return smem.reinterpret(ring, gl.bfloat16, [ring.shape[0], BN, BK // 2],
                            gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16,
                                                 rank=2))


@gluon.jit
def _mx_item(w32_ptr, ws_ptr, w_row, KV_C: gl.constexpr, WS_LD: gl.constexpr):
    """An item's 128 weight rows, packed, a row a thread, in one round of loads: the words
    [128, NK, 16] (int32, 8 e2m1 values each, low nibble first, NK = K chunks rounded up to
    a power of two), the codes [128, NK] (int32, a K chunk's four e8m0 codes, one a byte),
    each row's largest code, and whether the item takes the e4m3 route (no row's codes span
    more than MX_SPAN)."""
    NK: gl.constexpr = KV_C // BK
    NKP: gl.constexpr = triton.next_power_of_2(NK)
    l3: gl.constexpr = gl.BlockedLayout([1, NKP, BK // 8], [32, 1, 1], [WIDEN_WARPS, 1, 1],
                                        [2, 1, 0])
    c3: gl.constexpr = gl.BlockedLayout([1, NKP, BK // 32], [32, 1, 1], [WIDEN_WARPS, 1, 1],
                                        [2, 1, 0])
    r = w_row + gl.arange(0, BN, layout=gl.SliceLayout(1, gl.SliceLayout(2, l3)))
    k = gl.arange(0, NKP, layout=gl.SliceLayout(0, gl.SliceLayout(2, l3)))
    w = gl.arange(0, BK // 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, l3)))
    words = gl.load(w32_ptr + r[:, None, None] * (KV_C // 8) + k[None, :, None] * (BK // 8)
                    + w[None, None, :], mask=(k < NK)[None, :, None], other=0)
    rc = w_row + gl.arange(0, BN, layout=gl.SliceLayout(1, gl.SliceLayout(2, c3)))
    kc = gl.arange(0, NKP, layout=gl.SliceLayout(0, gl.SliceLayout(2, c3)))
    g = gl.arange(0, BK // 32, layout=gl.SliceLayout(0, gl.SliceLayout(1, c3)))
    kmask = (kc < NK)[None, :, None]
    code = gl.load(ws_ptr + rc[:, None, None] * WS_LD + kc[None, :, None] * (BK // 32)
                   + g[None, None, :], mask=kmask, other=0).to(gl.int32)
    top = gl.max(gl.max(code, axis=2), axis=1)
    low = gl.min(gl.min(gl.where(kmask, code, 255), axis=2), axis=1)
    fits = gl.max(top - low, axis=0) <= MX_SPAN
    packed = gl.sum(code << (8 * g)[None, None, :], axis=2)
    return (words, gl.convert_layout(packed, gl.SliceLayout(2, l3)),
            gl.convert_layout(top, gl.SliceLayout(1, gl.SliceLayout(2, l3))), fits)


@gluon.jit
def _mx_chunk(words, packed, top, kb: gl.constexpr):
    """K chunk ``kb`` of an item (``_mx_item``): its [128 x 16] words and each word's
    exponent offset d = code - top + 6 (picked out of registers: kb is a constant)."""
    l3: gl.constexpr = words.type.layout
    k = gl.arange(0, words.shape[1], layout=gl.SliceLayout(0, gl.SliceLayout(2, l3)))
    w = gl.arange(0, BK // 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, l3)))
    chunk = gl.sum(gl.where((k == kb)[None, :, None], words, 0), axis=1)
    codes = gl.sum(gl.where((k == kb)[None, :], packed, 0), axis=1)
    codes = gl.convert_layout(codes, gl.SliceLayout(1, chunk.type.layout))
    top = gl.convert_layout(top, gl.SliceLayout(1, chunk.type.layout))
    d = ((codes[:, None] >> (8 * (w // 4))[None, :]) & 0xFF) - top[:, None] + 6
    return chunk, d


@gluon.jit
def _widen_e4m3(words, d):
    """A chunk's words (``_mx_chunk``) as e4m3, each value its e2m1 value times 2^d (exact on
    the e4m3 route): [128 x 32] int32 words of 4 values in K order, a row a thread; two
    words out of each packed one (_E2M1_TO_E4M3)."""
    lo, hi = gl.inline_asm_elementwise(_E2M1_TO_E4M3, "=r,=r,r,r", [words, d],
                                       dtype=(gl.int32, gl.int32), is_pure=True, pack=1)
    return gl.join(lo, hi).reshape([BN, BK // 4])


@gluon.jit
def _halves(words, d):
    """A chunk (``_mx_chunk``) as its two 64-value halves: ([128 x 8] words, [128 x 8]
    exponent offsets) each (register renaming only)."""
    w0, w1 = gl.split(words.reshape([BN, 2, BK // 16]).permute((0, 2, 1)))
    d0, d1 = gl.split(d.reshape([BN, 2, BK // 16]).permute((0, 2, 1)))
    return w0, d0, w1, d1


@gluon.jit
def _widen_bf16(words, d):
    """A half-chunk (``_halves``) as bf16, each value its e2m1 value times 2^d: [128 x 64],
    a row a thread. Exact, but for values below float32's normal range, which are flushed
    to zero."""
    lay: gl.constexpr = gl.BlockedLayout([1, 8, 8], [32, 1, 1], [WIDEN_WARPS, 1, 1], [2, 1, 0])
    wl: gl.constexpr = gl.SliceLayout(2, lay)
    j = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, lay)))
    p = (gl.maximum(gl.convert_layout(d, wl) + 127 + 14, 0) << 23).to(gl.float32, bitcast=True)
    n = (gl.convert_layout(words, wl)[:, :, None] >> (4 * j)[None, None, :]) & 15
    # The nibble's sign, exponent and mantissa bits placed in a float16's sign, low exponent
    # and top mantissa bits: its value is the e2m1 value x 2^-14 (0.5 a subnormal); times
    # 2^(14 + d).
    bits = ((n & 8) << 12) | ((n & 7) << 9)
    v = bits.to(gl.int16).to(gl.float16, bitcast=True).to(gl.float32) * p[:, :, None]
    return v.to(gl.bfloat16).reshape([BN, BK // 2])


@gluon.jit
def _pow2(f):
    """2^f as float32 for integer f in [-252, 254] (two normal factors, an exact product)."""
    a = f >> 1
    return (((a + 127) << 23).to(gl.float32, bitcast=True)
            * (((f - a) + 127) << 23).to(gl.float32, bitcast=True))


@gluon.jit
def _publish(bar):
    """Hand a ring slot written by this partition's threads to the MMA warps: each thread's
    stores made visible to the async proxy (wgmma), all threads done, one arrival."""
    fence_async_shared()
    partition_sync()
    mbarrier.arrive(bar, count=1)


@gluon.jit
def _publish2(bar0, bar1):
    """``_publish`` for two ring slots at once (one fence and one barrier)."""
    _publish(bar0)
    mbarrier.arrive(bar1, count=1)


@gluon.jit
def _mx_widener(w_ptr, ws_ptr, w_ring, info, w_ready, w_empty, cs_ptr, batch,
                NOPE: gl.constexpr, V: gl.constexpr, KV_C: gl.constexpr,
                ITEMS_PER_TILE: gl.constexpr, STAGES: gl.constexpr, WS_LD: gl.constexpr):
    """MXFP4's weight partition (in place of the TMA loader): reads the packed e2m1 bytes and
    e8m0 scales of each item's 128 weight rows from global memory and writes them into the
    ring widened, as [128 x 128] e4m3 chunks when every row fits, else as [128 x 64] bf16
    chunks, with one factor 2^F a row (undone in the epilogue). The item's F and route go
    to ``info`` before its first chunk is published."""
    NK: gl.constexpr = KV_C // BK
    info_layout: gl.constexpr = gl.BlockedLayout([1], [32], [WIDEN_WARPS], [0])
    w32_ptr = w_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    _, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    c = 0
    for it in range(start, end):
        w_row = _item_weight_row(it, NOPE, V, ITEMS_PER_TILE)
        # Every load of the item at once. Each chunk's hand-over fences shared memory for
        # wgmma (fence.proxy.async: MEMBAR.ALL.CTA), which also waits for every load in
        # flight: loads issued chunk by chunk would each wait out L2's latency there.
        words, packed, top, fits = _mx_item(w32_ptr, ws_ptr, w_row, KV_C, WS_LD)
        # An info entry is rewritten STAGES + 1 items later: by then the MMA warps have
        # released this item's first slot and so read the entry (they read it first).
        mbarrier.wait(w_empty.index(c % STAGES), ((c // STAGES) & 1) ^ 1)
        info.index((it - start) % (STAGES + 1)).store(
            gl.convert_layout((top - MX_BIAS) * 2 + (1 - fits.to(gl.int32)), info_layout))
        # Chunks are handed over two at a time: one fence and one barrier for two slots. The
        # first is held while the second's slot frees, which takes the MMA warps' next
        # chunk only with three slots or more (WIDEN_MIN_STAGES).
        if fits:
            for kb in gl.static_range(0, NK, 2):
                chunk, d = _mx_chunk(words, packed, top, kb)
                e4m3 = _widen_e4m3(chunk, d)
                s = c % STAGES
                mbarrier.wait(w_empty.index(s), ((c // STAGES) & 1) ^ 1)
                _as_words(w_ring.index(s)).store(e4m3)
                if kb + 1 < NK:
                    chunk, d = _mx_chunk(words, packed, top, kb + 1)
                    e4m3 = _widen_e4m3(chunk, d)
                    s1 = (c + 1) % STAGES
                    mbarrier.wait(w_empty.index(s1), (((c + 1) // STAGES) & 1) ^ 1)
                    _as_words(w_ring.index(s1)).store(e4m3)
                    _publish2(w_ready.index(s), w_ready.index(s1))
                    c += 2
                else:
                    _publish(w_ready.index(s))
                    c += 1
        else:
            ring16 = _as_bf16(w_ring)
            for kb in gl.static_range(NK):
                chunk, d = _mx_chunk(words, packed, top, kb)
                w_lo, d_lo, w_hi, d_hi = _halves(chunk, d)
                s = c % STAGES
                mbarrier.wait(w_empty.index(s), ((c // STAGES) & 1) ^ 1)
                ring16.index(s).store(_widen_bf16(w_lo, d_lo))
                s1 = (c + 1) % STAGES
                mbarrier.wait(w_empty.index(s1), (((c + 1) // STAGES) & 1) ^ 1)
                ring16.index(s1).store(_widen_bf16(w_hi, d_hi))
                _publish2(w_ready.index(s), w_ready.index(s1))
                c += 2


@gluon.jit
def _item_range(cs_ptr, batch, ITEMS_PER_TILE: gl.constexpr):
    """(tokens, first item, end item) of this program.

    With at least two programs per token tile, each program takes an equal share of one
    tile's items, so none gathers two tiles in a row (short contexts); otherwise the items
    of all tiles are split into contiguous runs, which touch as few tiles as possible:
    equal runs, or, for a weight of LOCKSTEP_ITEMS items a tile or more, runs of whole
    granules (``lockstep_granule``).
    """
    total = gl.load(cs_ptr + batch)
    n_tiles = gl.cdiv(total, BM)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    if n_tiles * 2 <= nprog:
        parts = nprog // n_tiles
        tile = pid // parts
        part = pid % parts
        start = tile * ITEMS_PER_TILE + (part * ITEMS_PER_TILE) // parts
        end = tile * ITEMS_PER_TILE + ((part + 1) * ITEMS_PER_TILE) // parts
        if tile >= n_tiles:
            end = start
    else:
        n_items = n_tiles * ITEMS_PER_TILE
        start = (pid * n_items) // nprog
        end = ((pid + 1) * n_items) // nprog
        if ITEMS_PER_TILE >= LOCKSTEP_ITEMS:
            # The largest granule (a tile, a half, ... an eighth) whose whole-granule runs
            # cost at most 1/16 in balance; none: the equal runs above.
            g = 0
            for k in gl.static_range(LOCKSTEP_SPLITS - 1, -1, -1):
                n_g = n_items // (ITEMS_PER_TILE >> k)
                if gl.cdiv(n_g, nprog) * nprog * 16 <= n_g * 17:
                    g = ITEMS_PER_TILE >> k
            if g > 0:
                n_g = n_items // g
                start = (pid * n_g) // nprog * g
                end = ((pid + 1) * n_g) // nprog * g
    return total, start, end


@gluon.jit
def _tile_row0(tile, total):
    """First token row of a tile. The last tile is shifted back to end at the last token, so
    it is full too and leaves by TMA like the others: its first rows, also the previous
    tile's last, are computed twice and written twice with the same bits. Only a batch of
    fewer than BM tokens has a partial tile."""
    return gl.minimum(tile * BM, gl.maximum(total - BM, 0))


@gluon.jit
def _batch_index(cs_ptr, kv_indptr_ptr, batch, layout: gl.constexpr):
    """cs[i] and kv_indptr[i] for i in [0, BM) (the last entry repeated past the batch),
    loaded at a gather partition's start as vectors of ``layout``'s rows. A batch of at most
    BM sequences is then searched in registers (``_tile_rows``): its first tile's row
    offsets cost two dependent round trips to memory (these loads, then the block ids)
    instead of one a search step, one for cs[b] and kv_indptr[b], one for the block ids."""
    i = gl.minimum(gl.arange(0, BM, layout=gl.SliceLayout(1, layout)), batch)
    return gl.load(cs_ptr + i), gl.load(kv_indptr_ptr + i)


@gluon.jit
def _tile_rows(kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch, total, tile,
               stride_block, stride_slot, num_blocks, BLOCK_SIZE: gl.constexpr,
               SEARCH_STEPS: gl.constexpr, layout: gl.constexpr, index):
    """Element offsets of the latent rows of token tile ``tile`` (64-bit: block id x stride
    overflows 32 bits on large caches), and which rows hold a token; ``index``: the batch's
    cs and kv_indptr in registers (``_batch_index``), used for a batch of at most BM
    sequences (SEARCH_STEPS <= log2(BM)). Compiled with debug=True, a block id outside
    [0, num_blocks) stops the kernel."""
    r = _tile_row0(tile, total) + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    tmask = r < total
    if (1 << SEARCH_STEPS) <= BM:
        cs_v, ip_v = index
        lo = find_sequence(cs_ptr, r, batch, SEARCH_STEPS, cs_v)
        t = r - gl.gather(cs_v, lo, 0)
        first_block = gl.gather(ip_v, lo, 0)
    else:
        lo = find_sequence(cs_ptr, r, batch, SEARCH_STEPS)
        t = r - gl.load(cs_ptr + lo)
        first_block = gl.load(kv_indptr_ptr + lo)
    blk = gl.load(kv_indices_ptr + first_block + t // BLOCK_SIZE, mask=tmask, other=0)
    gl.device_assert((blk >= 0) & (blk < num_blocks), "kv_indices: block id out of range")
    rows = blk.to(gl.int64) * stride_block + (t % BLOCK_SIZE).to(gl.int64) * stride_slot
    return rows, tmask


@gluon.jit
def _item_weight_row(it, NOPE: gl.constexpr, V: gl.constexpr, ITEMS_PER_TILE: gl.constexpr):
    """First weight row of item ``it``: its head's K-nope rows, or its V rows."""
    hp = it % ITEMS_PER_TILE
    return (hp // 2) * (NOPE + V) + (hp % 2) * NOPE


@gluon.jit
def _weight_loader(w_desc, w_ring, w_ready, w_empty, cs_ptr, batch,
                   NOPE: gl.constexpr, V: gl.constexpr, KV_C: gl.constexpr,
                   ITEMS_PER_TILE: gl.constexpr, STAGES: gl.constexpr, WK: gl.constexpr):
    _, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    c = 0
    for it in range(start, end):
        w_row = _item_weight_row(it, NOPE, V, ITEMS_PER_TILE)
        for kb in gl.static_range(KV_C // WK):
            s = c % STAGES
            # A slot's first fill waits on the phase before the barrier's first: it passes.
            mbarrier.wait(w_empty.index(s), ((c // STAGES) & 1) ^ 1)
            mbarrier.expect(w_ready.index(s), w_desc.block_type.nbytes)
            tma_io.load(w_desc, [w_row, kb * WK], w_ready.index(s), w_ring.index(s))
            c += 1


@gluon.jit
def _store_rope(pe_ptrs, pe_mask, k_scale, k_out_ptr, total, tile, start, end, pe_cols,
                NOPE: gl.constexpr, PE: gl.constexpr, ITEMS_PER_TILE: gl.constexpr,
                pe_layout: gl.constexpr):
    """The rope of one tile with a bf16 latent tile, from registers (x k_scale; 1 for a bf16
    cache): stored into the K rows of every head whose K-nope item of this tile is in the run
    [start, end) (the program that stores a head's K-nope stores its rope). The tile's rows
    past the last token are masked; a shifted last tile writes its first rows again with the
    same bits."""
    out_ty: gl.constexpr = k_out_ptr.dtype.element_ty
    KROW: gl.constexpr = NOPE + PE
    pe = (gl.load(pe_ptrs, mask=pe_mask[:, None], other=0.0).to(gl.float32) * k_scale
          ).to(out_ty)
    r = _tile_row0(tile, total) + gl.arange(0, BM, layout=gl.SliceLayout(1, pe_layout))
    out = k_out_ptr + (r.to(gl.int64) * (KROW * (ITEMS_PER_TILE // 2)) + NOPE)[:, None] \
        + pe_cols[None, :]
    # Heads h whose K item tile * ITEMS_PER_TILE + 2h lies in the run.
    t0 = gl.maximum(start - tile * ITEMS_PER_TILE, 0)
    t1 = gl.minimum(end - tile * ITEMS_PER_TILE, ITEMS_PER_TILE)
    for head in range((t0 + 1) // 2, (t1 + 1) // 2):
        gl.store(out + head * KROW, pe, mask=pe_mask[:, None])


@gluon.jit
def _tile_span(cs_ptr, batch, ITEMS_PER_TILE: gl.constexpr):
    """(tokens, the run's items [start, end), its token tiles [first, last))."""
    total, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    first_tile = start // ITEMS_PER_TILE
    last_tile = (end + ITEMS_PER_TILE - 1) // ITEMS_PER_TILE
    if end == start:
        last_tile = first_tile  # no items: gather nothing
    return total, start, end, first_tile, last_tile


@gluon.jit
def _latent_gatherer(k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch,
                     k_out_ptr, stride_block, stride_slot, num_blocks, lat, pe_raw, lat_ready,
                     lat_empty, KV_C: gl.constexpr, PE: gl.constexpr, NOPE: gl.constexpr,
                     BLOCK_SIZE: gl.constexpr, ITEMS_PER_TILE: gl.constexpr,
                     SEARCH_STEPS: gl.constexpr, LAT16: gl.constexpr, CACHE_FP8: gl.constexpr):
    """Gathers each token tile's latent rows (and rope) into shared memory by cp.async, a
    barrier per K chunk (and one for an fp8 cache's rope).

    A bf16 latent tile (LAT16) is [2 NK, 128, 64] bf16 K slices, two a chunk barrier, and
    the rope skips shared memory: loaded into registers and stored from them to the K rows
    of every head of the run's items in the tile. Over an fp8 cache (a bf16 weight) the
    tile is widened on its way in instead (``_latent_widener``)."""
    if LAT16 and CACHE_FP8:
        _latent_widener(k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr,
                        batch, k_out_ptr, stride_block, stride_slot, num_blocks, lat,
                        lat_ready, lat_empty, KV_C, PE, NOPE, BLOCK_SIZE, ITEMS_PER_TILE,
                        SEARCH_STEPS)
    else:
        # 16 contiguous bytes per thread: one cp.async each; a row of a K slice (LK values).
        VEC: gl.constexpr = 8 if LAT16 else 16
        LK: gl.constexpr = BK // 2 if LAT16 else BK
        lat_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [4, 8], [GATHER_WARPS, 1],
                                                    [1, 0])
        pe_layout: gl.constexpr = gl.BlockedLayout([1, VEC], [32 // (PE // VEC), PE // VEC],
                                                   [GATHER_WARPS, 1], [1, 0])
        NK: gl.constexpr = KV_C // BK
        index = _batch_index(cs_ptr, kv_indptr_ptr, batch, lat_layout)
        total, start, end, first_tile, last_tile = _tile_span(cs_ptr, batch, ITEMS_PER_TILE)
        k_cols = gl.arange(0, LK, layout=gl.SliceLayout(0, lat_layout))
        pe_cols = gl.arange(0, PE, layout=gl.SliceLayout(0, pe_layout))
        rows, tmask = _tile_rows(kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch, total,
                                 first_tile, stride_block, stride_slot, num_blocks, BLOCK_SIZE,
                                 SEARCH_STEPS, lat_layout, index)
        for tile in range(first_tile, last_tile):
            # A buffer's first fill waits on the phase before the barrier's first: it passes.
            phase = ((tile - first_tile) & 1) ^ 1
            # Rope first (the MMA warps stage it at the tile's start), then the K chunks in
            # order, each on its own barrier so the first wgmma starts as soon as its chunk
            # has landed.
            pe_rows = gl.convert_layout(rows, gl.SliceLayout(1, pe_layout))
            pe_mask = gl.convert_layout(tmask, gl.SliceLayout(1, pe_layout))
            pe_ptrs = k_buffer_ptr + pe_rows[:, None] + (KV_C + pe_cols)[None, :]
            if not LAT16:
                mbarrier.wait(lat_empty.index(NK), phase)
                cp_async.load(pe_raw, pe_ptrs, mask=pe_mask[:, None])
                # Each thread's arrival lands when its own copies have: the barriers count
                # threads.
                async_copy.mbarrier_arrive(lat_ready.index(NK), increment_count=False)
            for kb in gl.static_range(NK):
                mbarrier.wait(lat_empty.index(kb), phase)
                for h in gl.static_range(BK // LK):
                    cp_async.load(lat.index(kb * (BK // LK) + h), k_buffer_ptr + rows[:, None]
                                  + (kb * BK + h * LK + k_cols)[None, :], mask=tmask[:, None])
                async_copy.mbarrier_arrive(lat_ready.index(kb), increment_count=False)
            if LAT16:  # a bf16 cache: nothing to dequantise
                _store_rope(pe_ptrs, pe_mask, 1.0, k_out_ptr, total, tile, start, end, pe_cols,
                            NOPE, PE, ITEMS_PER_TILE, pe_layout)
            # The next tile's row offsets (dependent index loads) are fetched while this
            # tile's matrix work runs, off the MMA warps' critical path.
            rows, tmask = _tile_rows(kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch,
                                     total, tile + 1, stride_block, stride_slot, num_blocks,
                                     BLOCK_SIZE, SEARCH_STEPS, lat_layout, index)


@gluon.jit
def _slice_load(k32, words, rw, tmask, j: gl.constexpr, NS: gl.constexpr):
    """K slice ``j`` of a tile (rows at word offsets ``rw``) as [128 x 16] words, or, past
    the tile's NS slices, a stand-in that is never stored (nothing loaded)."""
    SW: gl.constexpr = BK // 8  # words of a slice's row
    if j < NS:
        x = gl.load(k32 + (rw + j * SW)[:, None] + words[None, :], mask=tmask[:, None],
                    other=0)
    else:
        x = gl.zeros([BM, SW], gl.int32, words.type.layout.parent)
    return x


@gluon.jit
def _tile_words(k32, words, kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch, total, tile,
                stride_block, stride_slot, num_blocks, BLOCK_SIZE: gl.constexpr,
                SEARCH_STEPS: gl.constexpr, NS: gl.constexpr, layout: gl.constexpr, index):
    """A tile's row offsets in words, its row mask and its 8 slices' loads (stand-ins past
    NS), all issued at once: the row offsets first (dependent index loads)."""
    rows, tmask = _tile_rows(kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch, total, tile,
                             stride_block, stride_slot, num_blocks, BLOCK_SIZE, SEARCH_STEPS,
                             layout, index)
    # Rows start at multiples of 4 bytes (kv_c + pe is a multiple of 64).
    rw = rows // 4
    return (rw, tmask, _slice_load(k32, words, rw, tmask, 0, NS),
            _slice_load(k32, words, rw, tmask, 1, NS), _slice_load(k32, words, rw, tmask, 2, NS),
            _slice_load(k32, words, rw, tmask, 3, NS), _slice_load(k32, words, rw, tmask, 4, NS),
            _slice_load(k32, words, rw, tmask, 5, NS), _slice_load(k32, words, rw, tmask, 6, NS),
            _slice_load(k32, words, rw, tmask, 7, NS))


@gluon.jit
def _widen_chunk(lat, lat_ready, lat_empty, kb: gl.constexpr, phase, x_lo, x_hi,
                 NS: gl.constexpr):
    """K chunk ``kb`` of a tile (its two slices' words in registers) widened into the bf16
    tile once the MMA warps have freed it, and handed to them."""
    if 2 * kb < NS:
        mbarrier.wait(lat_empty.index(kb), phase)
        _as_words(lat.index(2 * kb)).store(_widen_words(x_lo))
        _as_words(lat.index(2 * kb + 1)).store(_widen_words(x_hi))
        _publish(lat_ready.index(kb))


@gluon.jit
def _latent_widener(k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch,
                    k_out_ptr, stride_block, stride_slot, num_blocks, lat, lat_ready,
                    lat_empty, KV_C: gl.constexpr, PE: gl.constexpr, NOPE: gl.constexpr,
                    BLOCK_SIZE: gl.constexpr, ITEMS_PER_TILE: gl.constexpr,
                    SEARCH_STEPS: gl.constexpr):
    """The gather partition of a bf16 weight over an fp8 cache: each token tile's fp8 latent
    rows loaded into registers, widened exactly to bf16 (_widen_words) and stored as the
    tile of bf16 K slices a bf16 cache's gather leaves, so the MMA warps run the bf16 cache's
    K loops (k_scale in their epilogue); the rope x k_scale stored from registers. Widened
    once a tile: the designs before widened each slice once an item (24 times a tile at
    Kimi-K3 TP8), in the MMA warps and then in these, and that work set the pace
    (docs/perf-notes.md).

    The whole next tile (64 KB: 128 registers a thread) is loaded as soon as this one is
    handed over, so its loads land while the MMA warps run this tile's items. Each
    hand-over's proxy fence (MEMBAR.ALL.CTA) waits for every load in flight: loads issued
    between two hand-overs would put their latency on the MMA warps' path once a chunk, and
    so they did with one or two chunks loaded ahead (docs/perf-notes.md)."""
    # A [128 x 64] fp8 slice as [128 x 16] words of 4 values: 4 words (16 bytes) a thread,
    # four threads a row; 8 words of 2 bf16 (two 16-byte stores) out.
    word_layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [GATHER_WARPS, 1], [1, 0])
    # The rope, 16 values a thread: rows on the threads as in word_layout (no conversion).
    pe_layout: gl.constexpr = gl.BlockedLayout([1, PE // 4], [8, 4], [GATHER_WARPS, 1], [1, 0])
    SW: gl.constexpr = BK // 8  # words of a slice's row
    NS: gl.constexpr = 2 * (KV_C // BK)  # slices a tile: 2 to 8
    k32 = k_buffer_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    words = gl.arange(0, SW, layout=gl.SliceLayout(0, word_layout))
    pe_cols = gl.arange(0, PE, layout=gl.SliceLayout(0, pe_layout))
    index = _batch_index(cs_ptr, kv_indptr_ptr, batch, word_layout)
    k_scale = gl.load(k_scale_ptr)
    total, start, end, first_tile, last_tile = _tile_span(cs_ptr, batch, ITEMS_PER_TILE)
    rw, tmask, x0, x1, x2, x3, x4, x5, x6, x7 = _tile_words(
        k32, words, kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch, total, first_tile,
        stride_block, stride_slot, num_blocks, BLOCK_SIZE, SEARCH_STEPS, NS, word_layout,
        index)
    for tile in range(first_tile, last_tile):
        # A buffer's first fill waits on the phase before the barrier's first: it passes.
        phase = ((tile - first_tile) & 1) ^ 1
        _widen_chunk(lat, lat_ready, lat_empty, 0, phase, x0, x1, NS)
        _widen_chunk(lat, lat_ready, lat_empty, 1, phase, x2, x3, NS)
        _widen_chunk(lat, lat_ready, lat_empty, 2, phase, x4, x5, NS)
        _widen_chunk(lat, lat_ready, lat_empty, 3, phase, x6, x7, NS)
        pe_ptrs = k_buffer_ptr + gl.convert_layout(rw * 4, gl.SliceLayout(1, pe_layout))[:, None] \
            + (KV_C + pe_cols)[None, :]
        pe_mask = gl.convert_layout(tmask, gl.SliceLayout(1, pe_layout))
        _store_rope(pe_ptrs, pe_mask, k_scale, k_out_ptr, total, tile, start, end, pe_cols,
                    NOPE, PE, ITEMS_PER_TILE, pe_layout)
        rw, tmask, x0, x1, x2, x3, x4, x5, x6, x7 = _tile_words(
            k32, words, kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch, total, tile + 1,
            stride_block, stride_slot, num_blocks, BLOCK_SIZE, SEARCH_STEPS, NS, word_layout,
            index)


@gluon.jit
def _wait_for_chunk(w_ready, lat_ready, c, kb, h, new_tile, tiles_seen, STAGES: gl.constexpr):
    """Wait until weight chunk ``c`` is in its ring slot (returned) and, for the first item of
    a tile, until its latent K chunk ``kb`` has landed (cp.async wrote it through the generic
    proxy; wgmma reads through the async one, hence the fence)."""
    s = c % STAGES
    mbarrier.wait(w_ready.index(s), (c // STAGES) & 1)
    if h == 0:
        if new_tile:
            mbarrier.wait(lat_ready.index(kb), (tiles_seen - 1) & 1)
            fence_async_shared()
    return s


@gluon.jit
def _item_k_loop(lat, w_ring, w_ready, w_empty, lat_ready, lat_empty, acc, c, new_tile,
                 last_of_tile, tiles_seen, NK: gl.constexpr, STEP: gl.constexpr,
                 STAGES: gl.constexpr, a_layout: gl.constexpr, LAT16: gl.constexpr,
                 WG: gl.constexpr = 0, NWG: gl.constexpr = 1, a_regs=0,
                 LAT_REGS: gl.constexpr = False):
    """Issue one item's K loop on one accumulator: weight chunk kb * STEP + h multiplies K
    slice h of latent chunk kb (STEP 1: fp8 x fp8 from shared memory; STEP 2: a bf16 weight
    chunk times the bf16 latent tile's slice kb * 2 + h from shared memory (LAT16), or, on
    MXFP4's bf16 route over an fp8 tile, the fp8 latent slice widened to a bf16 A operand in
    registers). With LAT_REGS (fp8, two groups) the group's rows of each latent chunk are
    wgmma's A operand in registers (``a_regs``, one per chunk, loaded by a tile's first item,
    which frees the chunk for the next tile at once). Returns with the last wgmma in flight
    (``_item_done`` retires it), the weight-chunk count and ``a_regs``."""
    WK: gl.constexpr = BK // STEP
    for kb in gl.static_range(NK):
        for h in gl.static_range(STEP):
            s = _wait_for_chunk(w_ready, lat_ready, c, kb, h, new_tile, tiles_seen, STAGES)
            if LAT_REGS:
                if new_tile:
                    a_regs = _take_latent_chunk(lat, lat_empty, a_regs, kb, WG, NWG)
                a = _words_as_fp8(a_regs[kb], a_layout)
            elif STEP == 1 or LAT16:  # an fp8 chunk, or a bf16 tile's slice
                a = lat.index(kb * STEP + h)
                if NWG > 1:  # this group's rows of the tile
                    a = a.slice(WG * (BM // NWG), BM // NWG, dim=0)
            else:
                # This K slice of the fp8 latent chunk, widened (exactly) in registers while
                # the previous slice's wgmma runs.
                a = lat.index(kb).slice(h * WK, WK, dim=1).load(a_layout)
                a = a.to(gl.bfloat16)
            acc = warpgroup_mma(a, w_ring.index(s).permute((1, 0)), acc,
                                use_acc=kb * STEP + h > 0, is_async=True)
            if kb * STEP + h > 0:
                # The previous chunk's wgmma is done: its ring slot can be refilled.
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
                mbarrier.arrive(w_empty.index((c - 1) % STAGES), count=1)
                if h == 0 and not LAT_REGS:
                    if last_of_tile:  # the tile's last reader of that chunk is done
                        mbarrier.arrive(lat_empty.index(kb - 1), count=1)
            c += 1
    return acc, c, a_regs


@gluon.constexpr_function
def _word_layout(a_layout):
    """The layout of an fp8 A operand's registers (a linear layout whose first two register
    bases step K by 1 and 2: kWidth 4) as int32 words of four K values: the same threads
    and registers, K / 4. Carried in words, the operand takes a register per four values
    (carried as fp8 it takes one per value and spills)."""
    assert a_layout.reg_bases[:2] == [[0, 1], [0, 2]], a_layout

    def quarter(bases):
        return [[r, k // 4] for r, k in bases]
    return gl.DistributedLinearLayout(
        reg_bases=quarter(a_layout.reg_bases[2:]), lane_bases=quarter(a_layout.lane_bases),
        warp_bases=quarter(a_layout.warp_bases), block_bases=[],
        shape=[a_layout.shape[0], a_layout.shape[1] // 4])


@gluon.jit
def _words_as_fp8(w, a_layout: gl.constexpr):
    """int32 words (``_word_layout``) as the fp8 A operand they hold (four K values a word,
    low byte first): the bytes joined back in place, which is register renaming."""
    b0 = w.to(gl.int8)
    b1 = (w >> 8).to(gl.int8)
    b2 = (w >> 16).to(gl.int8)
    b3 = (w >> 24).to(gl.int8)
    # join(join(b0, b2), join(b1, b3))[r, w, j, i] = b[2 j + i]: K = 4 w + 2 j + i.
    q = gl.join(gl.join(b0, b2), gl.join(b1, b3))
    q = q.reshape([w.shape[0], 4 * w.shape[1]]).to(gl.float8e4nv, bitcast=True)
    return gl.convert_layout(q, a_layout)


@gluon.jit
def _take_latent_chunk(lat, lat_empty, a_regs, kb: gl.constexpr, WG: gl.constexpr,
                       NWG: gl.constexpr):
    """This group's rows of latent chunk ``kb``, loaded into registers as int32 words in
    the layout of entry kb of ``a_regs`` (``_word_layout``), in its place; the chunk is then
    released to the gatherer: every warp of the group has read it (the partition's barrier)
    before the one arrival."""
    HM: gl.constexpr = BM // NWG
    fresh = _as_words(lat.index(kb)).slice(WG * HM, HM, dim=0).load(a_regs[kb].type.layout)
    partition_sync()
    mbarrier.arrive(lat_empty.index(kb), count=1)
    if kb == 0:
        a_regs = (fresh, a_regs[1], a_regs[2], a_regs[3])
    elif kb == 1:
        a_regs = (a_regs[0], fresh, a_regs[2], a_regs[3])
    elif kb == 2:
        a_regs = (a_regs[0], a_regs[1], fresh, a_regs[3])
    else:
        a_regs = (a_regs[0], a_regs[1], a_regs[2], fresh)
    return a_regs


@gluon.jit
def _item_done(w_empty, lat_empty, acc, c, last_of_tile, NK: gl.constexpr,
               STAGES: gl.constexpr, LAT_REGS: gl.constexpr = False):
    """Retire an item's last wgmma and release its last weight chunk (and latent chunk,
    unless it was released when it was loaded into registers)."""
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    mbarrier.arrive(w_empty.index((c - 1) % STAGES), count=1)
    if last_of_tile and not LAT_REGS:
        mbarrier.arrive(lat_empty.index(NK - 1), count=1)
    return acc


@gluon.jit
def _block_scaled_item(lat, w_ring, w_ready, w_empty, lat_ready, lat_empty, acc_t, acc_b,
                       ws_row, c, new_tile, last_of_tile, tiles_seen,
                       KV_C: gl.constexpr, STAGES: gl.constexpr, WK: gl.constexpr):
    """One item's K loop with a per-128x128-block weight scale: its 128 weight rows are one
    block row and each 128-wide latent chunk one block column, so chunk kb has one scalar
    scale s[kb] (row ``ws_row`` of the scale). Returns the two halves of the product
    normalised to the last chunk's scale (the caller multiplies by it and k_scale), that
    scale, and the weight-chunk count.

    A block-scaled GEMM promotes each K step's partial product into a second accumulator;
    a second 128x128 fp32 accumulator does not fit beside the first, so the accumulator is
    kept normalised to the current chunk's scale instead: before chunk kb > 0 it must be
    complete and multiplied by s[kb-1] / s[kb]. Done on one accumulator, that would drain
    the wgmma queue at each of the NK - 1 block boundaries (150-250 cycles of idle tensor
    cores against 512 of fp8 wgmma a chunk). The item's 128 tokens are split into two
    64-row halves, each its own m64 wgmma group and accumulator (64 registers each, as one
    128-row accumulator): the top half is renormalised while the bottom half's previous
    chunk still runs, and the other way round, so the queue never empties. What remains is
    the FMULs (64 a thread per half and boundary) and the waits' issue slots, while the
    tensor cores work: about the fp8_row path's time (bf16: about the unscaled bf16 path's).
    """
    NK: gl.constexpr = KV_C // BK
    STEP: gl.constexpr = BK // WK  # weight chunks per latent chunk: 1 (fp8), 2 (bf16)
    HM: gl.constexpr = BM // 2
    # The next chunk's scale is always in flight.
    s_cur = gl.load(ws_row).to(gl.float32)
    if NK > 1:
        s_nxt = gl.load(ws_row + 1).to(gl.float32)
    for kb in gl.static_range(NK):
        for h in gl.static_range(STEP):
            s = _wait_for_chunk(w_ready, lat_ready, c, kb, h, new_tile, tiles_seen, STAGES)
            w = w_ring.index(s).permute((1, 0))
            # Both operands from shared memory: an fp8 chunk, or a bf16 tile's slice.
            sl = lat.index(kb * STEP + h)
            a_t = sl.slice(0, HM, dim=0)
            a_b = sl.slice(HM, HM, dim=0)
            if kb > 0:
                if h == 0:
                    # A block boundary. In flight: the previous chunk's top, then bottom.
                    ratio = s_cur / s_nxt
                    acc_t = warpgroup_mma_wait(num_outstanding=1, deps=(acc_t,))
                    acc_t = acc_t * ratio
                    acc_t = warpgroup_mma(a_t, w, acc_t, is_async=True)
                    acc_b = warpgroup_mma_wait(num_outstanding=1, deps=(acc_b,))
                    # Both halves of the previous chunk are done.
                    mbarrier.arrive(w_empty.index((c - 1) % STAGES), count=1)
                    if last_of_tile:  # the tile's last reader of that latent chunk is done
                        mbarrier.arrive(lat_empty.index(kb - 1), count=1)
                    acc_b = acc_b * ratio
                    acc_b = warpgroup_mma(a_b, w, acc_b, is_async=True)
                    s_cur = s_nxt
                    if kb + 1 < NK:
                        s_nxt = gl.load(ws_row + kb + 1).to(gl.float32)
            if kb == 0 or h > 0:
                acc_t = warpgroup_mma(a_t, w, acc_t, use_acc=kb * STEP + h > 0, is_async=True)
                acc_b = warpgroup_mma(a_b, w, acc_b, use_acc=kb * STEP + h > 0, is_async=True)
                if kb * STEP + h > 0:
                    # Both halves of the previous chunk are done: its ring slot is free.
                    acc_t, acc_b = warpgroup_mma_wait(num_outstanding=2, deps=(acc_t, acc_b))
                    mbarrier.arrive(w_empty.index((c - 1) % STAGES), count=1)
            c += 1
    acc_t, acc_b = warpgroup_mma_wait(num_outstanding=0, deps=(acc_t, acc_b))
    mbarrier.arrive(w_empty.index((c - 1) % STAGES), count=1)
    if last_of_tile:
        mbarrier.arrive(lat_empty.index(NK - 1), count=1)
    return acc_t, acc_b, s_cur, c


@gluon.jit
def _mma_epilogue(k_scale_ptr, ws_ptr, cs_ptr, batch, k_out_ptr, v_out_ptr,
                  k_desc, pe_desc, v_desc, lat, pe_raw, w_ring, info, out_buf, pe_out,
                  w_ready, w_empty, lat_ready, lat_empty,
                  NOPE: gl.constexpr, V: gl.constexpr, PE: gl.constexpr, KV_C: gl.constexpr,
                  ITEMS_PER_TILE: gl.constexpr, STAGES: gl.constexpr, WK: gl.constexpr,
                  SCALE: gl.constexpr, WS_LD: gl.constexpr, LAT16: gl.constexpr,
                  CACHE_FP8: gl.constexpr, WG: gl.constexpr, NWG: gl.constexpr,
                  LAT_REGS: gl.constexpr, num_warps: gl.constexpr):
    """The MMA and epilogue warps: every item of the run, on rows [R0, R0 + HM) of each
    token tile. With two groups (``mma_groups=2``) each takes half of every tile's rows, both
    read each weight chunk and latent chunk (freed when both have) and each stages and stores
    its half; with LAT_REGS each holds its rows of the tile's latent in registers."""
    NK: gl.constexpr = KV_C // BK  # latent chunks (and scale blocks along K) per tile
    HM: gl.constexpr = BM // NWG  # this group's rows of a tile
    R0: gl.constexpr = WG * HM
    STEP: gl.constexpr = BK // WK  # weight chunks per latent chunk: 1 (fp8), 2 (bf16)
    # K of one wgmma instruction: 32 fp8 values, 16 bf16 ones.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 32 // STEP])
    # The A operand of a bf16 wgmma held in registers: two consecutive K values a register.
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    # MXFP4's bf16 route (the ring holds e4m3 chunks, STEP = 1, and bf16 ones by item).
    acc16_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 16])
    a16_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc16_layout,
                                                   k_width=2)
    if LAT_REGS:
        # The A operand of an fp8 wgmma held in registers: four consecutive K values a
        # register; a group's 64 rows of the tile's four latent chunks, 64 registers.
        a8_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout,
                                                      k_width=4)
        a0 = gl.zeros((HM, BK // 4), gl.int32,
                      _word_layout(gl.to_linear_layout(a8_layout, [HM, BK])))
        a_regs = (a0, a0, a0, a0)
    else:
        a8_layout: gl.constexpr = a_layout
        a_regs = 0  # a stand-in (triton 3.6 returns no None from a jit function)
    one_layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (PE // 8), PE // 8],
                                               [num_warps, 1], [1, 0])
    out_ty: gl.constexpr = k_out_ptr.dtype.element_ty
    KROW: gl.constexpr = NOPE + PE  # one head's columns in k_out
    HEADS: gl.constexpr = ITEMS_PER_TILE // 2
    total, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    if CACHE_FP8:
        k_scale = gl.load(k_scale_ptr)
    else:  # a bf16 cache has nothing to dequantise
        k_scale = 1.0
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    pe_cols = gl.arange(0, PE, layout=gl.SliceLayout(0, pe_layout))
    pe_rows = gl.arange(0, HM, layout=gl.SliceLayout(1, pe_layout))
    st_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [num_warps, 1], [1, 0])
    st_cols = gl.arange(0, BN, layout=gl.SliceLayout(0, st_layout))
    st_rows = gl.arange(0, HM, layout=gl.SliceLayout(1, st_layout))
    if SCALE == SCALE_BLOCK:  # two 64-row halves (_block_scaled_item)
        half_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 32 // STEP])
        acc_t = gl.zeros((BM // 2, BN), gl.float32, half_layout)
        acc_b = gl.zeros((BM // 2, BN), gl.float32, half_layout)
    else:
        acc = gl.zeros((HM, BN), gl.float32, acc_layout)
    pe_src = pe_raw
    pe_dst = pe_out
    if NWG > 1:
        pe_src = pe_raw.slice(R0, HM, dim=0)
        pe_dst = pe_out.slice(R0, HM, dim=0)
    c = 0  # weight chunks consumed
    n_tma = 0  # items staged: picks the staging buffer
    tiles_seen = 0
    for it in range(start, end):
        tile = it // ITEMS_PER_TILE
        hp = it % ITEMS_PER_TILE
        head = hp // 2
        half = hp % 2
        row0 = _tile_row0(tile, total)
        full = row0 + BM <= total
        last_of_tile = (hp == ITEMS_PER_TILE - 1) | (it == end - 1)
        new_tile = (it == start) | (hp == 0)
        if new_tile:
            tiles_seen += 1
        if new_tile and not LAT16:  # a bf16 tile's rope is the gather warps' (_store_rope)
            mbarrier.wait(lat_ready.index(NK), (tiles_seen - 1) & 1)
            # cp.async wrote through the generic proxy; wgmma and TMA read through the async one.
            fence_async_shared()
            if full:
                pe = pe_src.load(pe_layout).to(gl.float32) * k_scale
                tma.store_wait(0)  # the previous tile's rope stores have left pe_out
                pe_dst.store(pe.to(out_ty))
                fence_async_shared()
                mbarrier.arrive(lat_empty.index(NK), count=1)  # the next tile's rope may land
        w_row = _item_weight_row(it, NOPE, V, ITEMS_PER_TILE)
        if SCALE == SCALE_BLOCK:
            acc_t, acc_b, s_last, c = _block_scaled_item(
                lat, w_ring, w_ready, w_empty, lat_ready, lat_empty, acc_t, acc_b,
                ws_ptr + (w_row // BN) * WS_LD, c, new_tile, last_of_tile, tiles_seen,
                KV_C, STAGES, WK)
            f = s_last * k_scale
            out_t = (acc_t * f).to(out_ty)
            out_b = (acc_b * f).to(out_ty)
        elif SCALE == SCALE_E8M0:
            # The item's first chunk is published with its info entry (_mx_widener).
            mbarrier.wait(w_ready.index(c % STAGES), (c // STAGES) & 1)
            entry = info.index((it - start) % (STAGES + 1))
            if (gl.max(entry.slice(0, 1).load(one_layout), axis=0) & 1) == 0:
                # e4m3 chunks: fp8 x fp8, as fp8_row
                acc, c, _ = _item_k_loop(lat, w_ring, w_ready, w_empty, lat_ready,
                                         lat_empty, acc, c, new_tile, last_of_tile,
                                         tiles_seen, NK, 1, STAGES, a_layout, LAT16)
            else:  # bf16 chunks, the latent widened in registers, as a bf16 weight
                acc16 = gl.zeros((BM, BN), gl.float32, acc16_layout)
                acc16, c, _ = _item_k_loop(lat, _as_bf16(w_ring), w_ready, w_empty,
                                           lat_ready, lat_empty, acc16, c, new_tile,
                                           last_of_tile, tiles_seen, NK, 2, STAGES,
                                           a16_layout, LAT16)
                acc = gl.convert_layout(acc16, acc_layout)
            # Each column's 2^F x k_scale, read behind the last wgmma.
            scale = _pow2(entry.load(gl.SliceLayout(0, acc_layout)) >> 1) * k_scale
            acc = _item_done(w_empty, lat_empty, acc, c, last_of_tile, NK, STAGES)
            out = (acc * scale[None, :]).to(out_ty)
        else:
            if SCALE == SCALE_ROW:
                # Fetched now, so their latency hides behind the wgmma.
                scale = gl.load(ws_ptr + w_row + cols).to(gl.float32) * k_scale
            acc, c, a_next = _item_k_loop(
                lat, w_ring, w_ready, w_empty, lat_ready, lat_empty, acc, c, new_tile,
                last_of_tile, tiles_seen, NK, STEP, STAGES, a8_layout, LAT16, WG, NWG,
                a_regs, LAT_REGS)
            if LAT_REGS:  # (a loop-carried value only then)
                a_regs = a_next
            acc = _item_done(w_empty, lat_empty, acc, c, last_of_tile, NK, STAGES, LAT_REGS)
            if SCALE == SCALE_ROW:
                out = (acc * scale[None, :]).to(out_ty)
            else:
                out = (acc * k_scale).to(out_ty)
        buf = out_buf.index(n_tma % out_buf.shape[0])
        if NWG > 1:
            buf = buf.slice(R0, HM, dim=0)
        # Before reusing a staging buffer, the stores of the item that last used it (two
        # items back) must be done. Full tiles' items alternate K (rope + K-nope stores, in
        # that order) and V (one store), so that is all but the newest 1 (or 2) groups. A
        # partial tile (a batch under BM tokens: the only tile) issues none and waits for all.
        # With one buffer (a bf16 tile, or a ring past 4) the last item's stores must be done.
        if not full or out_buf.shape[0] == 1:
            tma.store_wait(0)
        elif half == 0:
            tma.store_wait(1)
        else:
            tma.store_wait(2)
        if SCALE == SCALE_BLOCK:
            buf.slice(0, BM // 2, dim=0).store(out_t)
            buf.slice(BM // 2, BM // 2, dim=0).store(out_b)
        else:
            buf.store(out)
        n_tma += 1
        if full:
            fence_async_shared()
            if half == 0:
                if not LAT16:
                    tma_io.store(pe_desc, [row0 + R0, head * KROW + NOPE], pe_dst)
                tma_io.store(k_desc, [row0 + R0, head * KROW], buf)
            else:
                tma_io.store(v_desc, [row0 + R0, head * V], buf)
        else:
            # TMA would write the spare rows past the last token too: the partial tile is
            # read back from the staging buffer and stored row-masked, 16 bytes a thread.
            val = buf.load(st_layout)
            r = (row0 + R0 + st_rows).to(gl.int64)[:, None]
            rmask = (row0 + R0 + st_rows < total)[:, None]
            if half == 0:
                gl.store(k_out_ptr + r * (KROW * HEADS) + head * KROW + st_cols[None, :], val,
                         mask=rmask)
                if not LAT16:
                    pr = row0 + R0 + pe_rows
                    pe = (pe_src.load(pe_layout).to(gl.float32) * k_scale).to(out_ty)
                    gl.store(k_out_ptr + pr.to(gl.int64)[:, None] * (KROW * HEADS)
                             + head * KROW + NOPE + pe_cols[None, :], pe,
                             mask=(pr < total)[:, None])
            else:
                gl.store(v_out_ptr + r * (V * HEADS) + head * V + st_cols[None, :], val,
                         mask=rmask)
            if last_of_tile and not LAT16:  # its rope was read from pe_raw until now
                mbarrier.arrive(lat_empty.index(NK), count=1)
    tma.store_wait(0)


@gluon.jit
def hopper_ws_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, w_ptr, ws_ptr,
    k_out_ptr, v_out_ptr, w_desc, k_desc, pe_desc, v_desc,
    stride_block, stride_slot, num_blocks, batch,
    KV_C: gl.constexpr, PE: gl.constexpr, NOPE: gl.constexpr, V: gl.constexpr,
    HEADS: gl.constexpr, BLOCK_SIZE: gl.constexpr, SEARCH_STEPS: gl.constexpr,
    STAGES: gl.constexpr, LOADER_REGS: gl.constexpr, GATHER_REGS: gl.constexpr,
    WK: gl.constexpr, SCALE: gl.constexpr, WS_LD: gl.constexpr, LAT16: gl.constexpr,
    CACHE_FP8: gl.constexpr, MMA_GROUPS: gl.constexpr, MMA_REGS: gl.constexpr,
    LAT_REGS: gl.constexpr, num_warps: gl.constexpr,
):
    ITEMS_PER_TILE: gl.constexpr = 2 * HEADS
    NK: gl.constexpr = KV_C // BK
    # Output staging buffers of an fp8 tile: two (an item's stores may still read one while
    # the next item stages), or one, whose 32 KB hold the fifth and sixth weight slots (each
    # item then waits for the last item's stores, long done: docs/perf-notes.md).
    NBUF: gl.constexpr = 2 if STAGES <= 4 else 1
    lat_smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8,
                                                  rank=2)
    bf16_smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128,
                                                   element_bitwidth=16, rank=2)
    if LAT16:
        # A bf16 weight: the tile's latent as 2 NK bf16 K slices of [128 x 64] (128 KB at
        # kv_c = 512), wgmma's A operand as they are (over an fp8 cache widened on their way
        # in: _latent_widener); with a 4-deep ring and one output staging buffer 224 KB, so
        # the rope skips shared memory (_store_rope). The rope buffers below are stand-ins,
        # never read.
        lat = gl.allocate_shared_memory(gl.bfloat16, [2 * NK, BM, BK // 2], bf16_smem)
        pe_raw = lat
    else:
        lat = gl.allocate_shared_memory(gl.float8e4nv, [NK, BM, BK], lat_smem)
        pe_raw = gl.allocate_shared_memory(gl.float8e4nv, [BM, PE],
                                           gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    if SCALE == SCALE_E8M0:
        # MXFP4: no TMA, the widener writes [128 x 128] e4m3 (or [128 x 64] bf16) chunks,
        # each item's factors and route in its info entry. w_desc is None.
        w_ring = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BN, BK], lat_smem)
        info = gl.allocate_shared_memory(gl.int32, [STAGES + 1, BN],  # rank-1 entries
                                         gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    else:
        w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, WK], w_desc.layout)
    lat_ready = gl.allocate_shared_memory(gl.int64, [NK + 1, 1], mbarrier.MBarrierLayout())
    lat_empty = gl.allocate_shared_memory(gl.int64, [NK + 1, 1], mbarrier.MBarrierLayout())
    if SCALE != SCALE_E8M0:
        if LAT16:
            info = lat_ready  # a stand-in, never read (a partition's argument cannot be None)
        else:
            # Unused (512 bytes): a partition's argument cannot be None in newer Gluon.
            info = gl.allocate_shared_memory(gl.int32, [1, BN],
                                             gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    if LAT16:
        out_buf = gl.allocate_shared_memory(k_desc.dtype, [1, BM, BN], k_desc.layout)
        pe_out = out_buf
    else:
        out_buf = gl.allocate_shared_memory(k_desc.dtype, [NBUF, BM, BN], k_desc.layout)
        pe_out = gl.allocate_shared_memory(pe_desc.dtype, [BM, PE], pe_desc.layout)

    w_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    w_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    # One barrier per K chunk of the latent tile and a last one for its rope part, both ways:
    # a chunk is refilled as soon as the tile's last item has multiplied it.
    for s in gl.static_range(STAGES):
        mbarrier.init(w_ready.index(s), count=1)
        mbarrier.init(w_empty.index(s), count=MMA_GROUPS)  # freed by each MMA group
    for kb in gl.static_range(NK + 1):
        if LAT16 and CACHE_FP8:  # one arrival a chunk, after its stores (_publish)
            mbarrier.init(lat_ready.index(kb), count=1)
        else:  # each gather thread's arrival, when its own cp.async copies have landed
            mbarrier.init(lat_ready.index(kb), count=GATHER_WARPS * 32)
    for kb in gl.static_range(NK + 1):
        mbarrier.init(lat_empty.index(kb), count=MMA_GROUPS)

    # The weight partition: MXFP4's widener (four warps) or the TMA loader (one); with two
    # MMA groups, a second MMA partition. Gluon takes each partition's arguments written in
    # place (triton 3.6 and 3.9 refuse them held in a variable), hence one call each.
    if MMA_GROUPS == 2:
        gl.warp_specialize([
            (_mma_epilogue, (k_scale_ptr, ws_ptr, cs_ptr, batch, k_out_ptr, v_out_ptr,
                             k_desc, pe_desc, v_desc, lat, pe_raw, w_ring, info, out_buf,
                             pe_out, w_ready, w_empty, lat_ready, lat_empty, NOPE, V, PE,
                             KV_C, ITEMS_PER_TILE, STAGES, WK, SCALE, WS_LD, LAT16,
                             CACHE_FP8, 0, 2, LAT_REGS, num_warps)),
            (_mma_epilogue, (k_scale_ptr, ws_ptr, cs_ptr, batch, k_out_ptr, v_out_ptr,
                             k_desc, pe_desc, v_desc, lat, pe_raw, w_ring, info, out_buf,
                             pe_out, w_ready, w_empty, lat_ready, lat_empty, NOPE, V, PE,
                             KV_C, ITEMS_PER_TILE, STAGES, WK, SCALE, WS_LD, LAT16,
                             CACHE_FP8, 1, 2, LAT_REGS, num_warps)),
            (_latent_gatherer, (k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr,
                                cs_ptr, batch, k_out_ptr, stride_block, stride_slot,
                                num_blocks, lat, pe_raw, lat_ready, lat_empty, KV_C, PE, NOPE,
                                BLOCK_SIZE, ITEMS_PER_TILE, SEARCH_STEPS, LAT16, CACHE_FP8)),
            (_weight_loader, (w_desc, w_ring, w_ready, w_empty, cs_ptr, batch,
                              NOPE, V, KV_C, ITEMS_PER_TILE, STAGES, WK)),
        ], [num_warps, GATHER_WARPS, 1], [MMA_REGS, GATHER_REGS, LOADER_REGS])
    elif SCALE == SCALE_E8M0:
        gl.warp_specialize([
            (_mma_epilogue, (k_scale_ptr, ws_ptr, cs_ptr, batch, k_out_ptr, v_out_ptr,
                             k_desc, pe_desc, v_desc, lat, pe_raw, w_ring, info, out_buf,
                             pe_out, w_ready, w_empty, lat_ready, lat_empty, NOPE, V, PE,
                             KV_C, ITEMS_PER_TILE, STAGES, WK, SCALE, WS_LD, LAT16,
                             CACHE_FP8, 0, 1, False, num_warps)),
            (_mx_widener, (w_ptr, ws_ptr, w_ring, info, w_ready, w_empty, cs_ptr, batch,
                           NOPE, V, KV_C, ITEMS_PER_TILE, STAGES, WS_LD)),
            (_latent_gatherer, (k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr,
                                cs_ptr, batch, k_out_ptr, stride_block, stride_slot,
                                num_blocks, lat, pe_raw, lat_ready, lat_empty, KV_C, PE, NOPE,
                                BLOCK_SIZE, ITEMS_PER_TILE, SEARCH_STEPS, LAT16, CACHE_FP8)),
        ], [WIDEN_WARPS, GATHER_WARPS], [LOADER_REGS, GATHER_REGS])
    else:
        gl.warp_specialize([
            (_mma_epilogue, (k_scale_ptr, ws_ptr, cs_ptr, batch, k_out_ptr, v_out_ptr,
                             k_desc, pe_desc, v_desc, lat, pe_raw, w_ring, info, out_buf,
                             pe_out, w_ready, w_empty, lat_ready, lat_empty, NOPE, V, PE,
                             KV_C, ITEMS_PER_TILE, STAGES, WK, SCALE, WS_LD, LAT16,
                             CACHE_FP8, 0, 1, False, num_warps)),
            (_weight_loader, (w_desc, w_ring, w_ready, w_empty, cs_ptr, batch,
                              NOPE, V, KV_C, ITEMS_PER_TILE, STAGES, WK)),
            (_latent_gatherer, (k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr,
                                cs_ptr, batch, k_out_ptr, stride_block, stride_slot,
                                num_blocks, lat, pe_raw, lat_ready, lat_empty, KV_C, PE, NOPE,
                                BLOCK_SIZE, ITEMS_PER_TILE, SEARCH_STEPS, LAT16, CACHE_FP8)),
        ], [1, GATHER_WARPS], [LOADER_REGS, GATHER_REGS])


# ------------------------------------------------------------------ host side
def hopper_ws_grid(prob: Problem, max_context_len: int | None, config: HopperWSConfig,
                   device: DeviceSpec) -> tuple[int, ...]:
    items = triton.cdiv(prob.out_rows, TILE) * 2 * prob.num_heads
    return (min(items, config.programs or device.compute_units),)


def lockstep_granule(items_per_tile: int, n_tiles: int, programs: int) -> int:
    """The kernel's choice (``_item_range``) of a run granule in items, 0 for equal runs:
    for LOCKSTEP_ITEMS items a tile or more, the largest of a tile, 1/2 ... 1/8 of one whose
    whole-granule runs cost at most 1/16 in balance."""
    if items_per_tile < LOCKSTEP_ITEMS.value or n_tiles * 2 <= programs:
        return 0
    n_items = n_tiles * items_per_tile
    for k in range(LOCKSTEP_SPLITS.value):
        g = items_per_tile >> k
        n_g = n_items // g
        if -(-n_g // programs) * programs * 16 <= n_g * 17:
            return g
    return 0


def hopper_ws_work(prob: Problem, contexts: Sequence[int], max_context_len: int | None,
                   config: HopperWSConfig, device: DeviceSpec) -> int:
    # As the kernel splits its items: at least two programs a token tile give each tile
    # min(parts, items a tile) non-empty shares; otherwise contiguous runs of items (of
    # whole granules in lockstep, where fewer granules than programs leave some idle).
    launched = hopper_ws_grid(prob, max_context_len, config, device)[0]
    tiles = -(-sum(contexts) // TILE)
    per_tile = 2 * prob.num_heads
    if tiles == 0:
        return 0
    if 2 * tiles <= launched:
        return tiles * min(launched // tiles, per_tile)
    g = lockstep_granule(per_tile, tiles, launched)
    return min(launched, tiles * per_tile // (g or 1))


@lru_cache(maxsize=16)
def _smem_layout(rows: int, cols: int, dtype: torch.dtype):
    gl_dtype = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16,
                torch.float8_e4m3fn: gl.float8e4nv}[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gl_dtype)


def _descriptors(shape, strides, dtype: torch.dtype, rows: int, cols: int) -> DescriptorCache:
    """TMA descriptors of [rows, cols] blocks, cached per address (base.DescriptorCache)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = _smem_layout(rows, cols, dtype)
    return DescriptorCache(lambda base, shape, strides: TensorDescriptor(
        base, shape, strides, [rows, cols], layout), shape, strides, dtype)


def prepare_hopper_ws(prob: Problem, t: GatherArgs, max_context_len: int | None,
                      config: HopperWSConfig, device: DeviceSpec):
    if not prob.cache_is_fp8 and prob.weight_dtype != torch.bfloat16:
        # An fp8 or MXFP4 weight over a bf16 cache: widened to a bf16 copy ahead of the
        # kernel (weight_widening), which then runs the bf16 weight's path. Only shapes,
        # strides and dtypes of the copy are read here: meta tensors stand in.
        shape, factor_shape = widened_shapes(prob, t.kv_proj_weight.shape[0])
        meta = t._replace(
            kv_proj_weight=torch.empty(shape, dtype=torch.bfloat16, device="meta"),
            kv_proj_scale=(t.kv_proj_scale if factor_shape is None else
                           torch.empty(factor_shape, dtype=torch.float32, device="meta")))
        main = prepare_hopper_ws(widened_problem(prob), meta, max_context_len, config, device)
        if main is no_launch:
            return no_launch
        return WidenedWeight(prob, t.kv_proj_weight, t.kv_proj_scale, main)
    mx = prob.scale == "e8m0"
    # A bf16 weight multiplies a bf16 latent tile (over an fp8 cache widened at the gather).
    lat16 = prob.weight_dtype == torch.bfloat16
    if mx and config.ring_depth < WIDEN_MIN_STAGES:
        # The widener holds one slot while it waits for the next: with two, the MMA warps
        # would wait for the held one.
        raise ValueError(f"config.ring_depth: expected {WIDEN_MIN_STAGES} or more for an MXFP4 "
                         f"weight over an fp8 cache (its chunks are handed over in pairs), got "
                         f"{config.ring_depth}")
    grid = hopper_ws_grid(prob, max_context_len, config, device)
    if 0 in grid or prob.batch == 0:
        return no_launch
    rows = t.k_prefix.shape[0]
    k_cols, v_cols = prob.num_heads * (prob.nope_dim + prob.pe_dim), prob.num_heads * prob.v_dim
    w, ws = t.kv_proj_weight, t.kv_proj_scale
    if mx:  # MXFP4: read by pointer (as uint8: Triton 3.6 takes no float4 or e8m0 dtype)
        w_view = as_uint8 if w.dtype != torch.uint8 or ws.dtype != torch.uint8 else None
        ws = as_uint8(ws)

        def w_desc(_):
            return None
        wk = TILE  # e4m3 chunks in the ring
    else:
        w_view = None
        # Weight chunks of 128-byte rows: [128 x 128] fp8 or [128 x 64] bf16, 16 KB either way.
        wk = TILE // w.element_size()
        w_desc = _descriptors(list(w.shape), list(w.stride()), w.dtype, TILE, wk)
    groups = config.mma_groups
    if groups == 2 and not (prob.scale == "row" and prob.cache_is_fp8 and not lat16):
        raise ValueError("config.mma_groups: expected 1 here (two MMA groups take an fp8 "
                         f"per-row weight over an fp8 cache), got 2 (weight format "
                         f"{prob.weight_format}, cache {prob.cache_dtype})")
    if config.latent_in_registers and groups != 2:
        raise ValueError("config.latent_in_registers: expected False with one MMA group (the "
                         "latent rows take the registers of two groups' halves; set "
                         "mma_groups=2), got True")
    if config.ring_depth > 4 and lat16:
        # A bf16 latent tile (128 KB) leaves room for four weight slots.
        raise ValueError("config.ring_depth: expected 2 to 4 with a bf16 latent tile (a bf16 "
                         f"weight, or any weight over a bf16 cache), got {config.ring_depth}")
    srows = TILE // groups  # rows of one TMA store: a group's share of a tile
    k_desc = _descriptors([rows, k_cols], [k_cols, 1], t.k_prefix.dtype, srows, TILE)
    pe_desc = _descriptors([rows, k_cols], [k_cols, 1], t.k_prefix.dtype, srows, prob.pe_dim)
    v_desc = _descriptors([rows, v_cols], [v_cols, 1], t.v_prefix.dtype, srows, TILE)
    ints = (t.k_buffer.stride(0), t.k_buffer.stride(1), t.k_buffer.shape[0], prob.batch)
    cache_fp8 = prob.cache_is_fp8
    consts = dict(KV_C=prob.kv_c_dim, PE=prob.pe_dim, NOPE=prob.nope_dim, V=prob.v_dim,
                  HEADS=prob.num_heads, BLOCK_SIZE=prob.block_size,
                  SEARCH_STEPS=search_steps(prob.batch),
                  STAGES=config.ring_depth,
                  # The widener holds its row of an item (64 packed words) and a widened
                  # chunk; the gatherer fits in 88 (no spills, compile-checked), 96 with the
                  # rope in registers, 200 widening the latent (a whole tile of words in
                  # registers; the MMA warps keep 256: 4 x 32 x (256 + 200 + 24) <= 64K).
                  LOADER_REGS=160 if mx else 24,
                  GATHER_REGS=88 if mx or groups == 2 else 200 if lat16 and cache_fp8 else 96,
                  num_warps=4, WK=wk, LAT16=lat16, CACHE_FP8=cache_fp8,
                  # A block scale [ceil(N / 128), kv_c / 128] is read a block row at a time.
                  SCALE=SCALE_CODES[prob.scale],
                  WS_LD=ws.stride(0) if prob.scale in ("block", "e8m0") else 0,
                  # 4 + 1 (MXFP4: 4) + 4 warps launch as three warpgroups: 12 x 32 x 168 <=
                  # 64K registers; the partitions' register counts then move the rest to the
                  # MMA warps. Two MMA groups: four warpgroups at 128, then 2 x 200 + 88 + 24.
                  MMA_GROUPS=groups, MMA_REGS=200, LAT_REGS=config.latent_in_registers,
                  maxnreg=168 if groups == 1 else 128)
    has_ws = ws is not None

    def make(c: GatherArgs) -> list:
        w, ws = c.kv_proj_weight, c.kv_proj_scale
        if w_view is not None and type(w) is not int:  # addresses (ints) need no view
            w, ws = w_view(w), w_view(ws)
        # A bf16 cache's k_scale (it may be None) is never read: a stand-in pointer.
        ks = c.k_scale if cache_fp8 else c.k_buffer
        return [c.k_buffer, ks, c.kv_indptr, c.kv_indices, c.kv_prefix_sum_context_lens,
                # Read by pointer by MXFP4's widener only (TMA otherwise).
                w if mx else ks,
                # A weight with no scale (bf16): a pointer the kernel never reads.
                ws if has_ws else ks,
                c.k_prefix, c.v_prefix,
                w_desc(c.kv_proj_weight), k_desc(c.k_prefix), pe_desc(c.k_prefix),
                v_desc(c.v_prefix), *ints]
    return JitLauncher(hopper_ws_kernel, grid, 17, consts, make)


def fp8_route(scale: torch.Tensor, cache_is_fp8: bool = True) -> torch.Tensor:
    """Which 128-row blocks (work items) of an MXFP4 weight the kernel widens to e4m3 (True)
    rather than bf16, from its e8m0 scale [N, K/32]: over an fp8 cache those whose rows'
    codes all span at most MX_SPAN binades, over a bf16 cache none (the weight is widened to
    a bf16 copy ahead of the kernel: weight_widening). The kernel
    decides the same on the device, per item; this host-side copy of the rule is for
    reporting (the matrix's ``fp8_route_share``) and tests."""
    codes = as_uint8(scale).to(torch.int32)
    span = codes.amax(dim=1) - codes.amin(dim=1)
    return (span <= MX_SPAN.value).view(-1, TILE).all(dim=1) & cache_is_fp8


def supports(prob: Problem) -> bool:
    """The shapes and formats the kernel was written for: an fp8 e4m3fn or a bf16 cache;
    an fp8 e4m3fn weight with a per-row or per-128x128-block scale, a bf16 weight with
    none, a per-row or a per-block scale (scales float32 or bf16), or MXFP4; nope = v = 128, pe = 64, kv_c a
    multiple of 128 up to 512, bf16 or fp16 outputs, and a 16-byte aligned weight and
    outputs (TMA's rule). The whole latent tile lives in shared memory: at kv_c = 640 it
    takes 238,760 bytes with a 4-deep ring (over the 227 KiB an SM gives) and the MMA warps
    spill."""
    weight_ok = ((prob.weight_dtype == torch.float8_e4m3fn
                  and (prob.weight_format, prob.scale) in (("fp8_row", "row"),
                                                           ("fp8_block", "block")))
                 or (prob.weight_dtype == torch.bfloat16 and prob.weight_format == "bf16"
                     and prob.scale in ("none", "row", "block"))
                 or (prob.weight_format == "mxfp4" and prob.scale == "e8m0"))
    return (weight_ok and prob.nope_dim == prob.v_dim == TILE and prob.pe_dim == 64
            and prob.kv_c_dim % TILE == 0 and prob.kv_c_dim <= 4 * TILE
            and prob.cache_dtype in (torch.float8_e4m3fn, torch.bfloat16)
            and prob.scale_dtype in (None, torch.bfloat16)
            and prob.out_dtype in (torch.bfloat16, torch.float16)
            and prob.aligned16)


def serves(prob: Problem, device: DeviceSpec) -> bool:
    """Supported problems on an sm_90 GPU (Gluon kernels are compiled, never interpreted)."""
    return device.sm == 90 and supports(prob)


def row_extras(prob: Problem, args: GatherArgs) -> dict[str, float]:
    """The measurement column this design reports of its own: an MXFP4 weight's share of
    work items on the e4m3 route."""
    if prob.weight_format != "mxfp4":
        return {}
    return {"fp8_route_share": float(fp8_route(args.kv_proj_scale, prob.cache_is_fp8)
                                     .float().mean())}


HOPPER_WS = Design("hopper_ws", "persistent, warp-specialised Gluon kernel: TMA weight ring, "
                   "cp.async latent gather, async wgmma, overlapped TMA stores (sm_90 only)",
                   ("fp8_row", "fp8_block", "bf16", "mxfp4"), HopperWSConfig, hopper_ws_grid,
                   prepare_hopper_ws, hopper_ws_work, kernels=(hopper_ws_kernel,), vendors=("nvidia",),
                   serves=serves, row_extras=row_extras)
DESIGNS = (HOPPER_WS,)
