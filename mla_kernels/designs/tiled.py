"""Our first own designs, one home: tile the flat token axis like a GEMM.

``tiled``: one program per (tile of BM output rows, head), or per (tile, head-half) with
``split``. Rows are numbered across the whole batch, so a ragged batch packs into full
tiles, and programs of one token tile sit next to each other on the grid, so the gathered
latent tile is re-read from L2 by the other heads. ``tiled_tma``: the same kernel with the
halves split and full tiles stored by TMA (Hopper-class NVIDIA GPUs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from ..core.devices import DeviceSpec
from ..core.formats import WEIGHT_FORMATS
from ..core.problem import GatherArgs, Problem
from ..core.value_rules import flag, one_of, optional
from .design import Design, DesignConfig
from .jit import (
    cast_out,
    find_sequence,
    gather_row_offsets,
    load_k_scale,
    load_out_inverse,
    load_rope,
    project_part,
    project_rows,
    search_steps,
    store_cols,
)
from .launch import DescriptorCache, JitLauncher
from .portable_plan import default_block_k, no_launch, portable_plan


@dataclass(frozen=True)
class TiledConfig(DesignConfig):
    """``block_m``: output rows a program covers; ``split``: a head's K-nope (+ rope) and V
    halves in two programs, halving the accumulators each holds; ``block_k``: K per dot
    step (None: 128 with fp8 operands, 64 with bf16)."""

    block_m: int = 64
    split: bool = False
    block_k: int | None = None
    num_warps: int = 4
    num_stages: int | None = None

    _rules = {"block_m": one_of(16, 32, 64, 128), "split": flag(),
              "block_k": optional(one_of(32, 64, 128)), "num_warps": one_of(1, 2, 4, 8, 16),
              "num_stages": optional(one_of(1, 2, 3, 4, 5))}
    _legacy = {"chunk_tokens": "block_m", "split_parts": "split", "block_k": "block_k",
               "num_warps": "num_warps", "num_stages": "num_stages"}


@triton.jit
def tiled_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, w_ptr, ws_ptr,
    k_out_ptr, v_out_ptr, ko_scale_ptr, vo_scale_ptr,
    stride_block, stride_slot, num_blocks, stride_ko_row, stride_ko_head, stride_vo_row,
    stride_vo_head, ld_w, ld_ws, batch, k_desc, rope_desc, v_desc,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    BPE: tl.constexpr, BNOPE: tl.constexpr, BV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
    DOT_BF16: tl.constexpr, HAS_K_SCALE: tl.constexpr, OUT_FP8: tl.constexpr,
    SEARCH_STEPS: tl.constexpr, SPLIT: tl.constexpr, TMA: tl.constexpr = False,
):
    """SPLIT: the head's K-nope (+ rope) and V halves go to two programs (grid axis 1 is
    2 x heads), halving the accumulators each holds.

    TMA (Hopper, with SPLIT): full tiles leave through tensor-memory-accelerator stores
    (k_desc / rope_desc / v_desc over the outputs viewed as [rows, heads x dim]; None
    without TMA): bulk
    asynchronous writes from shared memory instead of per-thread stores. The last, partial
    tile is stored row-masked so rows past cs[-1] are never written."""
    tile = tl.program_id(0)
    if SPLIT:
        head = tl.program_id(1) // 2
        part = tl.program_id(1) % 2
    else:
        head = tl.program_id(1)
        part = 0
    total = tl.load(cs_ptr + batch)
    if tile * BM >= total:
        return
    r = tile * BM + tl.arange(0, BM)
    tmask = r < total
    seq = find_sequence(cs_ptr, r, batch, SEARCH_STEPS)
    t = r - tl.load(cs_ptr + seq)
    first_block = tl.load(kv_indptr_ptr + seq)
    rows = gather_row_offsets(kv_indices_ptr + first_block, t, tmask, stride_block, stride_slot,
                              num_blocks, BLOCK_SIZE)
    k_scale = load_k_scale(k_scale_ptr, HAS_K_SCALE)
    k_inv = load_out_inverse(ko_scale_ptr, OUT_FP8)
    v_inv = load_out_inverse(vo_scale_ptr, OUT_FP8)
    if TMA:
        row0 = tile * BM
        full = row0 + BM <= total
        if part == 0:
            pe = load_rope(k_buffer_ptr, rows, tmask, k_scale, KV_C, PE, BPE)
            acc = project_part(k_buffer_ptr, rows, tmask, k_scale, w_ptr, ws_ptr,
                               head * (NOPE + V), NOPE, ld_w, ld_ws, KV_C, BNOPE, BM, BK, FMT,
                               DOT_BF16)
            if full:
                col = head * (NOPE + PE)
                k_desc.store([row0, col], cast_out(acc * k_inv, k_out_ptr.dtype.element_ty))
                rope_desc.store([row0, col + NOPE],
                                cast_out(pe * k_inv, k_out_ptr.dtype.element_ty))
            else:
                ko_base = (k_out_ptr + r.to(tl.int64)[:, None] * stride_ko_row
                           + head * stride_ko_head)
                store_cols(ko_base + NOPE, pe, tmask, k_inv, PE, BPE)
                store_cols(ko_base, acc, tmask, k_inv, NOPE, BNOPE)
        else:
            acc = project_part(k_buffer_ptr, rows, tmask, k_scale, w_ptr, ws_ptr,
                               head * (NOPE + V) + NOPE, V, ld_w, ld_ws, KV_C, BV, BM, BK, FMT,
                               DOT_BF16)
            if full:
                v_desc.store([row0, head * V], cast_out(acc * v_inv, v_out_ptr.dtype.element_ty))
            else:
                vo_base = (v_out_ptr + r.to(tl.int64)[:, None] * stride_vo_row
                           + head * stride_vo_head)
                store_cols(vo_base, acc, tmask, v_inv, V, BV)
    elif not SPLIT:
        project_rows(k_buffer_ptr, rows, tmask, r.to(tl.int64), k_scale,
                     w_ptr, ws_ptr, head, ld_w, ld_ws, k_out_ptr, v_out_ptr, k_inv, v_inv,
                     stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
                     KV_C, PE, NOPE, V, BPE, BNOPE, BV, BM, BK, FMT, DOT_BF16)
    elif part == 0:
        project_rows(k_buffer_ptr, rows, tmask, r.to(tl.int64), k_scale,
                     w_ptr, ws_ptr, head, ld_w, ld_ws, k_out_ptr, v_out_ptr, k_inv, v_inv,
                     stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
                     KV_C, PE, NOPE, V, BPE, BNOPE, BV, BM, BK, FMT, DOT_BF16,
                     DO_K=True, DO_V=False)
    else:
        project_rows(k_buffer_ptr, rows, tmask, r.to(tl.int64), k_scale,
                     w_ptr, ws_ptr, head, ld_w, ld_ws, k_out_ptr, v_out_ptr, k_inv, v_inv,
                     stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
                     KV_C, PE, NOPE, V, BPE, BNOPE, BV, BM, BK, FMT, DOT_BF16,
                     DO_K=False, DO_V=True)


def tiled_grid(prob: Problem, max_context_len: int | None, config: TiledConfig,
               device: DeviceSpec) -> tuple[int, ...]:
    return (triton.cdiv(prob.out_rows, config.block_m),
            prob.num_heads * (2 if config.split else 1))


def tiled_work(prob: Problem, contexts: Sequence[int], max_context_len: int | None,
               config: TiledConfig, device: DeviceSpec) -> int:
    # Tiles run along the flat token axis of the whole batch; a tile past the last token
    # (output rows beyond the total) returns at once.
    tiles, per_tile = tiled_grid(prob, max_context_len, config, device)
    return min(tiles, -(-sum(contexts) // config.block_m)) * per_tile


def _prepare(prob: Problem, t: GatherArgs, config: TiledConfig, device: DeviceSpec, tma: bool):
    grid = tiled_grid(prob, None, config, device)
    if 0 in grid or prob.batch == 0:
        return no_launch
    make_args, consts = portable_plan(prob, t, config.block_k or default_block_k(prob))
    bm = config.block_m
    consts = dict(consts, BM=bm, SEARCH_STEPS=search_steps(prob.batch),
                  SPLIT=config.split, **config.triton_options())
    n_args = len(make_args(t)) + 4
    if not tma:
        return JitLauncher(tiled_kernel, grid, n_args, consts,
                           lambda c: [*make_args(c), prob.batch, None, None, None])
    from triton.tools.tensor_descriptor import TensorDescriptor

    def desc(out: torch.Tensor, cols: int):
        # Over the output viewed as [rows, heads x dim]; cached per address (DescriptorCache).
        rows, width = out.shape[0], out.shape[1] * out.shape[2]
        return DescriptorCache(lambda base, shape, strides: TensorDescriptor(
            base, shape, strides, [bm, cols]), [rows, width], [width, 1], out.dtype)

    k_desc, rope_desc = desc(t.k_prefix, prob.nope_dim), desc(t.k_prefix, prob.pe_dim)
    v_desc = desc(t.v_prefix, prob.v_dim)
    return JitLauncher(tiled_kernel, grid, n_args, dict(consts, TMA=True),
                       lambda c: [*make_args(c), prob.batch, k_desc(c.k_prefix),
                                  rope_desc(c.k_prefix), v_desc(c.v_prefix)])


def prepare_tiled(prob: Problem, t: GatherArgs, max_context_len: int | None,
                  config: TiledConfig, device: DeviceSpec):
    return _prepare(prob, t, config, device, tma=False)


def prepare_tiled_tma(prob: Problem, t: GatherArgs, max_context_len: int | None,
                      config: TiledConfig, device: DeviceSpec):
    # TMA stores serve the split programs only; the grid is sized for them too.
    return _prepare(prob, t, replace(config, split=True), device, tma=True)


def tma_grid(prob: Problem, max_context_len: int | None, config: TiledConfig,
             device: DeviceSpec) -> tuple[int, ...]:
    return tiled_grid(prob, max_context_len, replace(config, split=True), device)


def tma_work(prob: Problem, contexts: Sequence[int], max_context_len: int | None,
             config: TiledConfig, device: DeviceSpec) -> int:
    return tiled_work(prob, contexts, max_context_len, replace(config, split=True), device)


def tma_serves(prob: Problem, device: DeviceSpec) -> bool:
    """TMA stores need a Hopper-class NVIDIA GPU (or the interpreter, which emulates them),
    16-byte aligned outputs and power-of-two nope / pe / v widths (tiles are stored whole)."""
    dims_ok = all(d == triton.next_power_of_2(d) and d >= 16
                  for d in (prob.nope_dim, prob.pe_dim, prob.v_dim))
    return dims_ok and prob.aligned16 and (device.vendor == "cpu" or device.sm >= 90)


TILED = Design("tiled", "one program per (tile of 64 rows of the flat token axis, head)",
               WEIGHT_FORMATS, TiledConfig, tiled_grid, prepare_tiled, tiled_work,
               kernels=(tiled_kernel,))
TILED_TMA = Design("tiled_tma", "tiled, halves split, full tiles stored by TMA (Hopper and "
                   "newer)", WEIGHT_FORMATS, TiledConfig, tma_grid, prepare_tiled_tma, tma_work,
                   kernels=(tiled_kernel,), vendors=("nvidia", "cpu"), serves=tma_serves,
                   default_config=TiledConfig(block_m=128, split=True))
DESIGNS = (TILED, TILED_TMA)
