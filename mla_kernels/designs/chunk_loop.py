"""The two designs of the public change, one home: serial (one program per (head,
sequence), a loop over chunks) and chunked (the chunk loop lifted onto the grid). Both call
``project_chunk`` with the same arguments, so their outputs are bit-identical; they differ
in grid and loop only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import triton
import triton.language as tl

from ..core.devices import DeviceSpec
from ..core.formats import WEIGHT_FORMATS
from ..core.problem import GatherArgs, Problem
from ..core.value_rules import one_of, optional
from .design import Design, DesignConfig
from .jit import INTERPRET, load_k_scale, load_out_inverse, project_chunk, sequence_bounds
from .launch import JitLauncher
from .portable_plan import check_grid, context_bound, default_block_k, no_launch, portable_plan


@dataclass(frozen=True)
class ChunkConfig(DesignConfig):
    """Launch parameters of serial and chunked. ``chunk``: tokens a program (or a loop step)
    projects, None for the public kernel's ChunkK (16 for a bf16 cache, 32 for fp8);
    ``block_k``: K per dot step, None for 128 with fp8 operands and 64 with bf16 ones."""

    chunk: int | None = None
    block_k: int | None = None
    num_warps: int = 4
    num_stages: int | None = None

    _rules = {"chunk": optional(one_of(16, 32, 64, 128)), "block_k": optional(one_of(32, 64, 128)),
              "num_warps": one_of(1, 2, 4, 8, 16), "num_stages": optional(one_of(1, 2, 3, 4, 5))}
    _legacy = {"chunk_tokens": "chunk", "block_k": "block_k", "num_warps": "num_warps",
               "num_stages": "num_stages"}

    def chunk_for(self, prob: Problem) -> int:
        return self.chunk or prob.chunk_tokens

    def block_k_for(self, prob: Problem) -> int:
        return self.block_k or default_block_k(prob)


# A head's weight stays resident in the serial loop only if it fits beside the latent tiles
# in a Hopper SM's 227 KB of shared memory: an fp8 head (128 KB) does, a bf16 one (256 KB)
# does not.
RESIDENT_WEIGHT_BYTES = 160 * 1024


def serial_weight_resident(prob: Problem) -> bool:
    """Whether the serial design keeps a head's weight resident across its chunk loop:
    only if the head, in the dot's operand dtype, fits beside the latent tiles."""
    per_elem = 1 if prob.dot_in_fp8 else 2
    return prob.kv_c_dim * (prob.nope_dim + prob.v_dim) * per_elem <= RESIDENT_WEIGHT_BYTES


@triton.jit
def serial_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, w_ptr, ws_ptr,
    k_out_ptr, v_out_ptr, ko_scale_ptr, vo_scale_ptr,
    stride_block, stride_slot, num_blocks, stride_ko_row, stride_ko_head, stride_vo_row,
    stride_vo_head, ld_w, ld_ws, max_chunks, no_hoist,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    BPE: tl.constexpr, BNOPE: tl.constexpr, BV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, CK: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
    DOT_BF16: tl.constexpr, HAS_K_SCALE: tl.constexpr, OUT_FP8: tl.constexpr,
    RESIDENT: tl.constexpr,
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
    k_inv = load_out_inverse(ko_scale_ptr, OUT_FP8)
    v_inv = load_out_inverse(vo_scale_ptr, OUT_FP8)
    if INTERPRET:
        # Triton 3.6's interpreter cannot bound a loop by a loaded value under numpy 2:
        # walk the shape-derived bound instead; chunks past the end mask every row off.
        n_chunks = max_chunks
    else:
        # The bound the grid of chunked has too: a hint below a sequence's length leaves
        # its later tokens unwritten by both designs, compiled or interpreted alike.
        n_chunks = tl.minimum(tl.cdiv(ctx, CK), max_chunks)
    for c in range(0, n_chunks):
        if RESIDENT:
            w_chunk_ptr = w_ptr
        else:
            w_chunk_ptr = w_ptr + (c & no_hoist)
        project_chunk(k_buffer_ptr, kv_indices_ptr + first_block, c * CK, ctx, row0,
                      k_scale, w_chunk_ptr, ws_ptr, head, ld_w, ld_ws,
                      k_out_ptr, v_out_ptr, k_inv, v_inv, stride_block, stride_slot,
                      num_blocks, stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
                      KV_C, PE, NOPE, V, BPE, BNOPE, BV, BLOCK_SIZE, CK, BK, FMT, DOT_BF16)


@triton.jit
def chunked_kernel(
    k_buffer_ptr, k_scale_ptr, kv_indptr_ptr, kv_indices_ptr, cs_ptr, w_ptr, ws_ptr,
    k_out_ptr, v_out_ptr, ko_scale_ptr, vo_scale_ptr,
    stride_block, stride_slot, num_blocks, stride_ko_row, stride_ko_head, stride_vo_row,
    stride_vo_head, ld_w, ld_ws, max_chunks,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    BPE: tl.constexpr, BNOPE: tl.constexpr, BV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, CK: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
    DOT_BF16: tl.constexpr, HAS_K_SCALE: tl.constexpr, OUT_FP8: tl.constexpr,
):
    """One program per (chunk, head, sequence); chunks past the sequence's end return."""
    chunk = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    first_block, row0, ctx = sequence_bounds(kv_indptr_ptr, cs_ptr, seq)
    if chunk * CK >= ctx:
        return
    k_scale = load_k_scale(k_scale_ptr, HAS_K_SCALE)
    k_inv = load_out_inverse(ko_scale_ptr, OUT_FP8)
    v_inv = load_out_inverse(vo_scale_ptr, OUT_FP8)
    project_chunk(k_buffer_ptr, kv_indices_ptr + first_block, chunk * CK, ctx, row0,
                  k_scale, w_ptr, ws_ptr, head, ld_w, ld_ws,
                  k_out_ptr, v_out_ptr, k_inv, v_inv, stride_block, stride_slot, num_blocks,
                  stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head, KV_C, PE, NOPE, V,
                  BPE, BNOPE, BV, BLOCK_SIZE, CK, BK, FMT, DOT_BF16)


# ------------------------------------------------------------------ grids and launches
def serial_grid(prob: Problem, max_context_len: int | None, config: ChunkConfig,
                device: DeviceSpec) -> tuple[int, ...]:
    return (prob.num_heads, prob.batch)


def chunked_grid(prob: Problem, max_context_len: int | None, config: ChunkConfig,
                 device: DeviceSpec) -> tuple[int, ...]:
    ck = config.chunk_for(prob)
    return (triton.cdiv(context_bound(prob, max_context_len), ck), prob.num_heads, prob.batch)


def _max_chunks(prob: Problem, max_context_len: int | None, config: ChunkConfig) -> int:
    return triton.cdiv(context_bound(prob, max_context_len), config.chunk_for(prob))


def _prepare(kernel, grid: tuple[int, ...], prob: Problem, t: GatherArgs,
             max_context_len: int | None, config: ChunkConfig, **extra):
    check_grid(grid)
    if 0 in grid:
        return no_launch
    make_args, consts = portable_plan(prob, t, config.block_k_for(prob))
    tail = [_max_chunks(prob, max_context_len, config), *extra.pop("ints", ())]
    return JitLauncher(kernel, grid, len(make_args(t)) + len(tail),
                       dict(consts, CK=config.chunk_for(prob), **extra, **config.triton_options()),
                       lambda c: [*make_args(c), *tail])


def prepare_serial(prob: Problem, t: GatherArgs, max_context_len: int | None,
                   config: ChunkConfig, device: DeviceSpec):
    # no_hoist: 0 at run time, unknown to the compiler (see serial_kernel)
    return _prepare(serial_kernel, serial_grid(prob, max_context_len, config, device), prob, t,
                    max_context_len, config, ints=(0,), RESIDENT=serial_weight_resident(prob))


def prepare_chunked(prob: Problem, t: GatherArgs, max_context_len: int | None,
                    config: ChunkConfig, device: DeviceSpec):
    return _prepare(chunked_kernel, chunked_grid(prob, max_context_len, config, device), prob,
                    t, max_context_len, config)


# ------------------------------------------------------------------ work models
def serial_work(prob: Problem, contexts: Sequence[int], max_context_len: int | None,
                config: ChunkConfig, device: DeviceSpec) -> int:
    # A (sequence, head) program of an empty sequence loads its weight and leaves.
    return prob.num_heads * sum(1 for c in contexts if c > 0)


def chunked_work(prob: Problem, contexts: Sequence[int], max_context_len: int | None,
                 config: ChunkConfig, device: DeviceSpec) -> int:
    # Axis 0 holds the chunk index; a program past its own sequence's last chunk returns
    # at once, so only ceil(ctx / chunk) programs per (sequence, head) do work.
    ck = config.chunk_for(prob)
    axis = chunked_grid(prob, max_context_len, config, device)[0]
    return prob.num_heads * sum(min(-(-c // ck), axis) for c in contexts)


SERIAL = Design("serial", "one program per (sequence, head), a loop over chunks (the 'before')",
                WEIGHT_FORMATS, ChunkConfig, serial_grid, prepare_serial, serial_work,
                kernels=(serial_kernel,))
CHUNKED = Design("chunked", "one program per (sequence, head, chunk) (the 'after')",
                 WEIGHT_FORMATS, ChunkConfig, chunked_grid, prepare_chunked, chunked_work,
                 kernels=(chunked_kernel,))
DESIGNS = (SERIAL, CHUNKED)
