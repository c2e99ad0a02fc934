"""Our first own design: tile the flat token axis like a GEMM.

One program per (tile of BM output rows, head). Rows are numbered across the whole batch,
so a ragged batch packs into full tiles, and programs of one token tile sit next to each
other on the grid, so the gathered latent tile is re-read from L2 by the other heads.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    cast_out,
    gather_row_offsets,
    load_k_scale,
    load_rope,
    project_part,
    project_rows,
    store_cols,
)


@triton.jit
def find_sequence(cs_ptr, r, batch, SEARCH_STEPS: tl.constexpr):
    """For each row r, the sequence b with cs[b] <= r < cs[b + 1] (binary search; empty
    sequences, whose cs entries repeat, are skipped because the last b with cs[b] <= r wins)."""
    lo = r - r  # zeros like r; also traced by Gluon kernels, where zeros_like needs a layout
    hi = lo + batch - 1
    for _ in tl.static_range(SEARCH_STEPS):
        mid = (lo + hi + 1) // 2
        go_right = tl.load(cs_ptr + mid) <= r
        lo = tl.where(go_right, mid, lo)
        hi = tl.where(go_right, hi, mid - 1)
    return lo


@triton.jit
def tiled_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, w_ptr, ws_ptr,
    k_out_ptr, v_out_ptr,
    stride_block, stride_slot, stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
    ld_w, ld_ws, batch,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    BPE: tl.constexpr, BNOPE: tl.constexpr, BV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
    DOT_BF16: tl.constexpr, HAS_K_SCALE: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    SPLIT: tl.constexpr, k_desc=None, rope_desc=None, v_desc=None, TMA: tl.constexpr = False,
):
    """SPLIT: the head's K-nope (+ rope) and V halves go to two programs (grid axis 1 is
    2 x heads), halving the accumulators each holds.

    TMA (Hopper, with SPLIT): full tiles leave through tensor-memory-accelerator stores
    (k_desc / rope_desc / v_desc over the outputs viewed as [rows, heads x dim]): bulk
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
                              BLOCK_SIZE)
    k_scale = load_k_scale(k_scale_ptr, HAS_K_SCALE)
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
                k_desc.store([row0, col], cast_out(acc, k_out_ptr.dtype.element_ty))
                rope_desc.store([row0, col + NOPE], cast_out(pe, k_out_ptr.dtype.element_ty))
            else:
                ko_base = (k_out_ptr + r.to(tl.int64)[:, None] * stride_ko_row
                           + head * stride_ko_head)
                store_cols(ko_base + NOPE, pe, tmask, PE, BPE)
                store_cols(ko_base, acc, tmask, NOPE, BNOPE)
        else:
            acc = project_part(k_buffer_ptr, rows, tmask, k_scale, w_ptr, ws_ptr,
                               head * (NOPE + V) + NOPE, V, ld_w, ld_ws, KV_C, BV, BM, BK, FMT,
                               DOT_BF16)
            if full:
                v_desc.store([row0, head * V], cast_out(acc, v_out_ptr.dtype.element_ty))
            else:
                vo_base = (v_out_ptr + r.to(tl.int64)[:, None] * stride_vo_row
                           + head * stride_vo_head)
                store_cols(vo_base, acc, tmask, V, BV)
    elif not SPLIT:
        project_rows(k_buffer_ptr, rows, tmask, r.to(tl.int64), k_scale,
                     w_ptr, ws_ptr, head, ld_w, ld_ws, k_out_ptr, v_out_ptr,
                     stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
                     KV_C, PE, NOPE, V, BPE, BNOPE, BV, BM, BK, FMT, DOT_BF16)
    elif part == 0:
        project_rows(k_buffer_ptr, rows, tmask, r.to(tl.int64), k_scale,
                     w_ptr, ws_ptr, head, ld_w, ld_ws, k_out_ptr, v_out_ptr,
                     stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
                     KV_C, PE, NOPE, V, BPE, BNOPE, BV, BM, BK, FMT, DOT_BF16,
                     DO_K=True, DO_V=False)
    else:
        project_rows(k_buffer_ptr, rows, tmask, r.to(tl.int64), k_scale,
                     w_ptr, ws_ptr, head, ld_w, ld_ws, k_out_ptr, v_out_ptr,
                     stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
                     KV_C, PE, NOPE, V, BPE, BNOPE, BV, BM, BK, FMT, DOT_BF16,
                     DO_K=False, DO_V=True)
