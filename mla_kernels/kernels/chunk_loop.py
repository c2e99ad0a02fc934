"""The two designs of the public change: serial (a loop over chunks per (sequence, head))
and chunked (the chunk loop lifted onto the grid). Both call ``project_chunk``."""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    INTERPRET,
    load_k_scale,
    project_chunk,
    sequence_bounds,
)


@triton.jit
def serial_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, w_ptr, ws_ptr,
    k_out_ptr, v_out_ptr,
    stride_block, stride_slot, stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
    ld_w, ld_ws, max_chunks, no_hoist,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    BPE: tl.constexpr, BNOPE: tl.constexpr, BV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, CK: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
    DOT_BF16: tl.constexpr, HAS_K_SCALE: tl.constexpr, RESIDENT: tl.constexpr,
):
    """One program per (head, sequence) walks the sequence's context in chunks of CK.

    The weight loads do not depend on the chunk, so the compiler hoists them out of the
    loop and keeps the head's weight resident, as the public kernel meant. When the launcher
    finds a head too large for that (RESIDENT False: a bf16 head is 256 KB, over a Hopper
    SM's 227 KB), ``no_hoist`` (always 0 at run time, unknown at compile time) ties the
    weight's address to the chunk so it is re-read from L2 each chunk instead.
    """
    head = tl.program_id(0)
    seq = tl.program_id(1)
    first_block, row0, ctx = sequence_bounds(kv_indptr_ptr, cs_ptr, seq)
    k_scale = load_k_scale(k_scale_ptr, HAS_K_SCALE)
    if INTERPRET:
        # Triton 3.6's interpreter cannot bound a loop by a loaded value under numpy 2:
        # walk the shape-derived bound instead; chunks past the end mask every row off.
        n_chunks = max_chunks
    else:
        n_chunks = tl.cdiv(ctx, CK)
    for c in range(0, n_chunks):
        if RESIDENT:
            w_chunk_ptr = w_ptr
        else:
            w_chunk_ptr = w_ptr + (c & no_hoist)
        project_chunk(k_buffer_ptr, kv_indices_ptr + first_block, c * CK, ctx, row0,
                      k_scale, w_chunk_ptr, ws_ptr, head, ld_w, ld_ws,
                      k_out_ptr, v_out_ptr, stride_block, stride_slot, stride_ko_row,
                      stride_ko_head, stride_vo_row, stride_vo_head, KV_C, PE, NOPE, V,
                      BPE, BNOPE, BV, BLOCK_SIZE, CK, BK, FMT, DOT_BF16)


@triton.jit
def chunked_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, w_ptr, ws_ptr,
    k_out_ptr, v_out_ptr,
    stride_block, stride_slot, stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
    ld_w, ld_ws, max_chunks,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    BPE: tl.constexpr, BNOPE: tl.constexpr, BV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, CK: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
    DOT_BF16: tl.constexpr, HAS_K_SCALE: tl.constexpr,
):
    """One program per (chunk, head, sequence); chunks past the sequence's end return."""
    chunk = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    first_block, row0, ctx = sequence_bounds(kv_indptr_ptr, cs_ptr, seq)
    if chunk * CK >= ctx:
        return
    k_scale = load_k_scale(k_scale_ptr, HAS_K_SCALE)
    project_chunk(k_buffer_ptr, kv_indices_ptr + first_block, chunk * CK, ctx, row0,
                  k_scale, w_ptr, ws_ptr, head, ld_w, ld_ws,
                  k_out_ptr, v_out_ptr, stride_block, stride_slot, stride_ko_row,
                  stride_ko_head, stride_vo_row, stride_vo_head, KV_C, PE, NOPE, V,
                  BPE, BNOPE, BV, BLOCK_SIZE, CK, BK, FMT, DOT_BF16)
