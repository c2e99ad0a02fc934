"""A Hopper-only design in Triton's Gluon dialect: persistent and warp-specialised.

The portable tiled design spends its time in two halves that do not overlap: the matrix
work (about the floor) and the output stores (about 3/4 of it). Here each program owns a
contiguous run of work items and three groups of warps run side by side:

- one warp streams the weight, [BN x BK] fp8 chunks by TMA, into a STAGES-deep ring;
- four warps gather the scattered latent rows of a token tile with cp.async into shared
  memory (zero-filled past the last row), completing on an mbarrier;
- four warps (the default partition) issue async fp8 wgmma, scale and narrow the result,
  stage it in one of two shared buffers and store it by TMA, so one item's stores drain
  while the next item's matrix work runs.

A work item is BM tokens x one head-half (K-nope or V, BN = 128 columns). Items are
numbered tile-major, so consecutive items of a program share the gathered latent tile
(2 x heads items per tile). The rope columns are narrowed once per tile and stored beside
each head's K-nope block. The last tile is shifted back to end at the last token, so rows
past it are never written; only a batch of fewer than 128 tokens has a partial tile, stored
with row-masked stores.

Supported: fp8 e4m3fn cache, fp8 per-row weight, nope = v = 128, pe = 64, kv_c a multiple
of 128, bf16 or fp16 outputs (``supports``).
"""

from __future__ import annotations

import types
from collections import OrderedDict
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
from ..problem import GatherArgs, Problem
from .base import Design, DesignConfig, JitLauncher, no_launch, optional, positive_int
from .jit import find_sequence

# Asynchronous copies under either release's names: triton 3.6 has async_copy_global_to_shared
# (TMA and cp.async) and async_copy_shared_to_global; newer releases async_load / async_store.
tma_io = types.ModuleType("tma_io")
tma_io.load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_io.store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
cp_async = types.ModuleType("cp_async")
cp_async.load = (getattr(async_copy, "async_load", None)
                 or async_copy.async_copy_global_to_shared)

TILE = 128  # tokens per tile, output columns per item (one head-half), K per weight chunk
BM = gl.constexpr(TILE)  # tokens per tile
BN = gl.constexpr(TILE)  # output columns per item: one head-half
BK = gl.constexpr(TILE)  # K per weight chunk (128 fp8 bytes: one 128-byte swizzle row)
GATHER_WARPS = gl.constexpr(4)


@dataclass(frozen=True)
class HopperWSConfig(DesignConfig):
    """``ring_depth``: weight chunks in flight (the shared-memory budget allows 2-4; 4 was
    fastest on the H200, docs/perf-notes.md); ``programs``: persistent programs launched,
    None for one per SM."""

    ring_depth: int = 4
    programs: int | None = None

    _rules = {"ring_depth": (lambda v: type(v) is int and 2 <= v <= 4, "an int in [2, 4]"),
              "programs": optional(positive_int(1 << 20))}
    _legacy = {"stages": "ring_depth", "programs": "programs"}


@gluon.jit
def _item_range(cs_ptr, batch, ITEMS_PER_TILE: gl.constexpr):
    """(tokens, first item, end item) of this program.

    With at least two programs per token tile, each program takes an equal share of one
    tile's items, so none gathers two tiles in a row (short contexts); otherwise the items
    of all tiles are split into contiguous, equal runs, which touch as few tiles as possible.
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
    return total, start, end


@gluon.jit
def _tile_row0(tile, total):
    """First token row of a tile. The last tile is shifted back to end at the last token, so
    it is full too and leaves by TMA like the others: its first rows, also the previous
    tile's last, are computed twice and written twice with the same bits. Only a batch of
    fewer than BM tokens has a partial tile."""
    return gl.minimum(tile * BM, gl.maximum(total - BM, 0))


@gluon.jit
def _tile_rows(kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch, total, tile,
               stride_block, stride_slot, num_blocks, BLOCK_SIZE: gl.constexpr,
               SEARCH_STEPS: gl.constexpr, layout: gl.constexpr):
    """Element offsets of the latent rows of token tile ``tile`` (64-bit: block id x stride
    overflows 32 bits on large caches), and which rows hold a token. Compiled with
    debug=True, a block id outside [0, num_blocks) stops the kernel."""
    r = _tile_row0(tile, total) + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    tmask = r < total
    lo = find_sequence(cs_ptr, r, batch, SEARCH_STEPS)
    t = r - gl.load(cs_ptr + lo)
    first_block = gl.load(kv_indptr_ptr + lo)
    blk = gl.load(kv_indices_ptr + first_block + t // BLOCK_SIZE, mask=tmask, other=0)
    gl.device_assert((blk >= 0) & (blk < num_blocks), "kv_indices: block id out of range")
    rows = blk.to(gl.int64) * stride_block + (t % BLOCK_SIZE).to(gl.int64) * stride_slot
    return rows, tmask


@gluon.jit
def _weight_loader(w_desc, w_ring, w_ready, w_empty, cs_ptr, batch,
                   NOPE: gl.constexpr, V: gl.constexpr, KV_C: gl.constexpr,
                   ITEMS_PER_TILE: gl.constexpr, STAGES: gl.constexpr):
    _, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    c = 0
    for it in range(start, end):
        hp = it % ITEMS_PER_TILE
        w_row = (hp // 2) * (NOPE + V) + (hp % 2) * NOPE
        for kb in gl.static_range(KV_C // BK):
            s = c % STAGES
            # A slot's first fill waits on the phase before the barrier's first: it passes.
            mbarrier.wait(w_empty.index(s), ((c // STAGES) & 1) ^ 1)
            mbarrier.expect(w_ready.index(s), w_desc.block_type.nbytes)
            tma_io.load(w_desc, [w_row, kb * BK], w_ready.index(s),
                                            w_ring.index(s))
            c += 1


@gluon.jit
def _latent_gatherer(k_buffer_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch,
                     stride_block, stride_slot, num_blocks, lat, pe_raw, lat_ready, lat_empty,
                     KV_C: gl.constexpr, PE: gl.constexpr, BLOCK_SIZE: gl.constexpr,
                     ITEMS_PER_TILE: gl.constexpr, SEARCH_STEPS: gl.constexpr):
    # 16 contiguous bytes per thread: one cp.async each.
    lat_layout: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [GATHER_WARPS, 1], [1, 0])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 16], [32 // (PE // 16), PE // 16],
                                               [GATHER_WARPS, 1], [1, 0])
    NK: gl.constexpr = KV_C // BK
    total, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    k_cols = gl.arange(0, BK, layout=gl.SliceLayout(0, lat_layout))
    pe_cols = gl.arange(0, PE, layout=gl.SliceLayout(0, pe_layout))
    first_tile = start // ITEMS_PER_TILE
    last_tile = (end + ITEMS_PER_TILE - 1) // ITEMS_PER_TILE
    if end == start:
        last_tile = first_tile  # no items: gather nothing
    rows, tmask = _tile_rows(kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch, total,
                             first_tile, stride_block, stride_slot, num_blocks, BLOCK_SIZE,
                             SEARCH_STEPS, lat_layout)
    for tile in range(first_tile, last_tile):
        # A buffer's first fill waits on the phase before the barrier's first: it passes.
        phase = ((tile - first_tile) & 1) ^ 1
        # Rope first (the MMA warps stage it at the tile's start), then the K chunks in order,
        # each on its own barrier so the first wgmma starts as soon as its chunk has landed.
        pe_rows = gl.convert_layout(rows, gl.SliceLayout(1, pe_layout))
        pe_mask = gl.convert_layout(tmask, gl.SliceLayout(1, pe_layout))
        mbarrier.wait(lat_empty.index(NK), phase)
        cp_async.load(pe_raw, k_buffer_ptr + pe_rows[:, None] + (KV_C + pe_cols)[None, :],
                      mask=pe_mask[:, None])
        # Each thread's arrival lands when its own copies have: the barriers count threads.
        async_copy.mbarrier_arrive(lat_ready.index(NK), increment_count=False)
        for kb in gl.static_range(NK):
            mbarrier.wait(lat_empty.index(kb), phase)
            cp_async.load(lat.index(kb),
                          k_buffer_ptr + rows[:, None] + (kb * BK + k_cols)[None, :],
                          mask=tmask[:, None])
            async_copy.mbarrier_arrive(lat_ready.index(kb), increment_count=False)
        # The next tile's row offsets (dependent index loads) are fetched while this
        # tile's matrix work runs, off the MMA warps' critical path.
        rows, tmask = _tile_rows(kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch,
                                 total, tile + 1, stride_block, stride_slot, num_blocks,
                                 BLOCK_SIZE, SEARCH_STEPS, lat_layout)


@gluon.jit
def _mma_epilogue(k_scale_ptr, ws_ptr, cs_ptr, batch, k_out_ptr, v_out_ptr,
                  k_desc, pe_desc, v_desc, lat, pe_raw, w_ring, out_buf, pe_out,
                  w_ready, w_empty, lat_ready, lat_empty,
                  NOPE: gl.constexpr, V: gl.constexpr, PE: gl.constexpr, KV_C: gl.constexpr,
                  ITEMS_PER_TILE: gl.constexpr, STAGES: gl.constexpr,
                  num_warps: gl.constexpr):
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 32])
    pe_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (PE // 8), PE // 8],
                                               [num_warps, 1], [1, 0])
    out_ty: gl.constexpr = k_out_ptr.dtype.element_ty
    NK: gl.constexpr = KV_C // BK
    KROW: gl.constexpr = NOPE + PE  # one head's columns in k_out
    HEADS: gl.constexpr = ITEMS_PER_TILE // 2
    total, start, end = _item_range(cs_ptr, batch, ITEMS_PER_TILE)
    k_scale = gl.load(k_scale_ptr)
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    pe_cols = gl.arange(0, PE, layout=gl.SliceLayout(0, pe_layout))
    pe_rows = gl.arange(0, BM, layout=gl.SliceLayout(1, pe_layout))
    st_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [num_warps, 1], [1, 0])
    st_cols = gl.arange(0, BN, layout=gl.SliceLayout(0, st_layout))
    st_rows = gl.arange(0, BM, layout=gl.SliceLayout(1, st_layout))
    acc = gl.zeros((BM, BN), gl.float32, acc_layout)
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
            mbarrier.wait(lat_ready.index(NK), (tiles_seen - 1) & 1)
            # cp.async wrote through the generic proxy; wgmma and TMA read through the async one.
            fence_async_shared()
            if full:
                pe = pe_raw.load(pe_layout).to(gl.float32) * k_scale
                tma.store_wait(0)  # the previous tile's rope stores have left pe_out
                pe_out.store(pe.to(out_ty))
                fence_async_shared()
                mbarrier.arrive(lat_empty.index(NK), count=1)  # the next tile's rope may land
        # The weight scales are fetched now, so their latency hides behind the wgmma.
        w_row = head * (NOPE + V) + half * NOPE
        scale = gl.load(ws_ptr + w_row + cols) * k_scale

        for kb in gl.static_range(NK):
            s = c % STAGES
            mbarrier.wait(w_ready.index(s), (c // STAGES) & 1)
            if new_tile:
                mbarrier.wait(lat_ready.index(kb), (tiles_seen - 1) & 1)
                fence_async_shared()
            acc = warpgroup_mma(lat.index(kb), w_ring.index(s).permute((1, 0)), acc,
                                use_acc=kb > 0, is_async=True)
            if kb > 0:
                # The previous chunk's wgmma is done: its ring slot can be refilled.
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
                mbarrier.arrive(w_empty.index((c - 1) % STAGES), count=1)
                if last_of_tile:  # the tile's last reader of that latent chunk is done
                    mbarrier.arrive(lat_empty.index(kb - 1), count=1)
            c += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(w_empty.index((c - 1) % STAGES), count=1)
        if last_of_tile:
            mbarrier.arrive(lat_empty.index(NK - 1), count=1)

        out = (acc * scale[None, :]).to(out_ty)
        buf = out_buf.index(n_tma % 2)
        # Before reusing a staging buffer, the stores of the item that last used it (two
        # items back) must be done. Full tiles' items alternate K (rope + K-nope stores, in
        # that order) and V (one store), so that is all but the newest 1 (or 2) groups. A
        # partial tile (a batch under BM tokens: the only tile) issues none and waits for all.
        if not full:
            tma.store_wait(0)
        elif half == 0:
            tma.store_wait(1)
        else:
            tma.store_wait(2)
        buf.store(out)
        n_tma += 1
        if full:
            fence_async_shared()
            if half == 0:
                tma_io.store(pe_desc, [row0, head * KROW + NOPE], pe_out)
                tma_io.store(k_desc, [row0, head * KROW], buf)
            else:
                tma_io.store(v_desc, [row0, head * V], buf)
        else:
            # TMA would write the spare rows past the last token too: the partial tile is
            # read back from the staging buffer and stored row-masked, 16 bytes a thread.
            val = buf.load(st_layout)
            r = (row0 + st_rows).to(gl.int64)[:, None]
            rmask = (row0 + st_rows < total)[:, None]
            if half == 0:
                gl.store(k_out_ptr + r * (KROW * HEADS) + head * KROW + st_cols[None, :], val,
                         mask=rmask)
                pr = row0 + pe_rows
                pe = (pe_raw.load(pe_layout).to(gl.float32) * k_scale).to(out_ty)
                gl.store(k_out_ptr + pr.to(gl.int64)[:, None] * (KROW * HEADS)
                         + head * KROW + NOPE + pe_cols[None, :], pe,
                         mask=(pr < total)[:, None])
            else:
                gl.store(v_out_ptr + r * (V * HEADS) + head * V + st_cols[None, :], val,
                         mask=rmask)
            if last_of_tile:  # the partial tile's rope was read from pe_raw until now
                mbarrier.arrive(lat_empty.index(NK), count=1)
    tma.store_wait(0)


@gluon.jit
def hopper_ws_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, ws_ptr,
    k_out_ptr, v_out_ptr, w_desc, k_desc, pe_desc, v_desc,
    stride_block, stride_slot, num_blocks, batch,
    KV_C: gl.constexpr, PE: gl.constexpr, NOPE: gl.constexpr, V: gl.constexpr,
    HEADS: gl.constexpr, BLOCK_SIZE: gl.constexpr, SEARCH_STEPS: gl.constexpr,
    STAGES: gl.constexpr, LOADER_REGS: gl.constexpr, GATHER_REGS: gl.constexpr,
    num_warps: gl.constexpr,
):
    ITEMS_PER_TILE: gl.constexpr = 2 * HEADS
    NK: gl.constexpr = KV_C // BK
    lat_smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8,
                                                  rank=2)
    lat = gl.allocate_shared_memory(gl.float8e4nv, [NK, BM, BK], lat_smem)
    pe_raw = gl.allocate_shared_memory(gl.float8e4nv, [BM, PE],
                                       gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    w_ring = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
    out_buf = gl.allocate_shared_memory(k_desc.dtype, [2, BM, BN], k_desc.layout)
    pe_out = gl.allocate_shared_memory(pe_desc.dtype, [BM, PE], pe_desc.layout)

    w_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    w_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    # One barrier per K chunk of the latent tile and a last one for its rope part, both ways:
    # a chunk is refilled as soon as the tile's last item has multiplied it.
    lat_ready = gl.allocate_shared_memory(gl.int64, [NK + 1, 1], mbarrier.MBarrierLayout())
    lat_empty = gl.allocate_shared_memory(gl.int64, [NK + 1, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(w_ready.index(s), count=1)
        mbarrier.init(w_empty.index(s), count=1)
    for kb in gl.static_range(NK + 1):
        mbarrier.init(lat_ready.index(kb), count=GATHER_WARPS * 32)
    for kb in gl.static_range(NK + 1):
        mbarrier.init(lat_empty.index(kb), count=1)

    gl.warp_specialize([
        (_mma_epilogue, (k_scale_ptr, ws_ptr, cs_ptr, batch, k_out_ptr, v_out_ptr,
                         k_desc, pe_desc, v_desc, lat, pe_raw, w_ring, out_buf, pe_out,
                         w_ready, w_empty, lat_ready, lat_empty,
                         NOPE, V, PE, KV_C, ITEMS_PER_TILE, STAGES, num_warps)),
        (_weight_loader, (w_desc, w_ring, w_ready, w_empty, cs_ptr, batch,
                          NOPE, V, KV_C, ITEMS_PER_TILE, STAGES)),
        (_latent_gatherer, (k_buffer_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, batch,
                            stride_block, stride_slot, num_blocks, lat, pe_raw, lat_ready,
                            lat_empty,
                            KV_C, PE, BLOCK_SIZE, ITEMS_PER_TILE, SEARCH_STEPS)),
    ], [1, GATHER_WARPS], [LOADER_REGS, GATHER_REGS])


# ------------------------------------------------------------------ host side
def hopper_ws_grid(prob: Problem, max_context_len: int | None, config: HopperWSConfig,
                   device: DeviceSpec) -> tuple[int, ...]:
    items = triton.cdiv(prob.out_rows, TILE) * 2 * prob.num_heads
    return (min(items, config.programs or device.compute_units),)


def hopper_ws_work(prob: Problem, contexts: Sequence[int], max_context_len: int | None,
                   config: HopperWSConfig, device: DeviceSpec) -> int:
    # As the kernel splits its items: at least two programs a token tile give each tile
    # min(parts, items a tile) non-empty shares; otherwise contiguous runs of items.
    launched = hopper_ws_grid(prob, max_context_len, config, device)[0]
    tiles = -(-sum(contexts) // TILE)
    per_tile = 2 * prob.num_heads
    if tiles == 0:
        return 0
    if 2 * tiles <= launched:
        return tiles * min(launched // tiles, per_tile)
    return min(launched, tiles * per_tile)


@lru_cache(maxsize=16)
def _smem_layout(rows: int, cols: int, dtype: torch.dtype):
    gl_dtype = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16,
                torch.float8_e4m3fn: gl.float8e4nv}[dtype]
    return gl.NVMMASharedLayout.get_default_for([rows, cols], gl_dtype)


class _Pointer:
    """What Triton's launcher reads of a descriptor's base (its address and dtype), without
    a reference to the tensor: a cached descriptor keeps no tensor alive."""

    __slots__ = ("_ptr", "dtype")

    def __init__(self, ptr: int, dtype: torch.dtype):
        self._ptr, self.dtype = ptr, dtype

    def data_ptr(self) -> int:
        return self._ptr


class _Descriptors:
    """TMA descriptors of [rows, cols] blocks over 2-D views of one plan's tensors (shapes,
    strides and dtype fixed by the plan), cached by address, least recently used first out:
    a repeated call (the same weight, the same outputs) builds none."""

    def __init__(self, shape: list[int], strides: list[int], dtype: torch.dtype, rows: int,
                 cols: int, size: int = 16):
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        self.make = lambda ptr: TensorDescriptor(_Pointer(ptr, dtype), shape, strides,
                                                 [rows, cols], _smem_layout(rows, cols, dtype))
        self.cache: OrderedDict[int, object] = OrderedDict()
        self.size = size

    def __call__(self, x: torch.Tensor):
        ptr = x.data_ptr()
        desc = self.cache.get(ptr)
        if desc is None:
            desc = self.cache[ptr] = self.make(ptr)
            if len(self.cache) > self.size:
                self.cache.popitem(last=False)
        return desc


def prepare_hopper_ws(prob: Problem, t: GatherArgs, max_context_len: int | None,
                      config: HopperWSConfig, device: DeviceSpec):
    grid = hopper_ws_grid(prob, max_context_len, config, device)
    if 0 in grid or prob.batch == 0:
        return no_launch
    rows = t.k_prefix.shape[0]
    k_cols, v_cols = prob.num_heads * (prob.nope_dim + prob.pe_dim), prob.num_heads * prob.v_dim
    w_desc = _Descriptors(list(t.kv_proj_weight.shape), list(t.kv_proj_weight.stride()),
                          t.kv_proj_weight.dtype, TILE, TILE)
    k_desc = _Descriptors([rows, k_cols], [k_cols, 1], t.k_prefix.dtype, TILE, TILE)
    pe_desc = _Descriptors([rows, k_cols], [k_cols, 1], t.k_prefix.dtype, TILE, prob.pe_dim)
    v_desc = _Descriptors([rows, v_cols], [v_cols, 1], t.v_prefix.dtype, TILE, TILE)
    ints = (t.k_buffer.stride(0), t.k_buffer.stride(1), t.k_buffer.shape[0], prob.batch)
    consts = dict(KV_C=prob.kv_c_dim, PE=prob.pe_dim, NOPE=prob.nope_dim, V=prob.v_dim,
                  HEADS=prob.num_heads, BLOCK_SIZE=prob.block_size,
                  SEARCH_STEPS=max(1, prob.batch.bit_length()), STAGES=config.ring_depth,
                  LOADER_REGS=24, GATHER_REGS=96, num_warps=4,
                  # 4 + 1 + 4 warps launch as three warpgroups: 12 x 32 x 168 <= 64K registers.
                  maxnreg=168)
    launcher = JitLauncher(hopper_ws_kernel, grid, 16, consts)

    def launch(c: GatherArgs):
        return launcher([c.k_buffer, c.k_scale, c.kv_indptr, c.kv_indices,
                         c.kv_prefix_sum_context_lens, c.kv_proj_scale, c.k_prefix, c.v_prefix,
                         w_desc(c.kv_proj_weight), k_desc(c.k_prefix), pe_desc(c.k_prefix),
                         v_desc(c.v_prefix), *ints])
    return launch


def supports(prob: Problem) -> bool:
    """The shapes and formats the kernel was written for: an fp8 e4m3fn cache, an fp8
    per-row weight with a float32 scale, nope = v = 128, pe = 64, kv_c a multiple of 128,
    bf16 or fp16 outputs, and a 16-byte aligned weight and outputs (TMA's rule)."""
    return (prob.nope_dim == prob.v_dim == TILE and prob.pe_dim == 64
            and prob.kv_c_dim % TILE == 0
            and prob.cache_dtype == torch.float8_e4m3fn
            and prob.weight_dtype == torch.float8_e4m3fn and prob.weight_format == "fp8_row"
            and prob.scale_dtype is None and prob.out_dtype in (torch.bfloat16, torch.float16)
            and prob.aligned16)


def serves(prob: Problem, device: DeviceSpec) -> bool:
    """Supported problems on an sm_90 GPU (Gluon kernels are compiled, never interpreted)."""
    return device.sm == 90 and supports(prob)


HOPPER_WS = Design("hopper_ws", "persistent, warp-specialised Gluon kernel: TMA weight ring, "
                   "cp.async latent gather, async wgmma, overlapped TMA stores (sm_90 only)",
                   ("fp8_row",), HopperWSConfig, hopper_ws_grid, prepare_hopper_ws,
                   hopper_ws_work, kernels=(hopper_ws_kernel,), vendors=("nvidia",),
                   serves=serves)
DESIGNS = (HOPPER_WS,)
