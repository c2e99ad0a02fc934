"""Host-side pieces the design homes share: grid limits, block sizes, and the argument list
every portable Triton design takes."""

from __future__ import annotations

from collections.abc import Callable

import triton

from ..core.formats import as_uint8
from ..core.problem import GatherArgs, Problem
from .jit import SCALE_CODES

GRID_YZ_LIMIT = 65535  # CUDA's limit on a grid's second and third axes


def pow2(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(n))


def context_bound(prob: Problem, max_context_len: int | None) -> int:
    """What bounds every sequence's length: the output row count, or the hint where it is
    smaller (no sequence can be longer than the rows it writes)."""
    return prob.out_rows if max_context_len is None else min(max_context_len, prob.out_rows)


def check_grid(grid: tuple[int, ...]) -> None:
    """Reject a problem whose grid the device cannot launch, before anything is written."""
    for axis, n in enumerate(grid[1:], start=1):
        if n > GRID_YZ_LIMIT:
            raise ValueError(f"kv_indptr: expected a batch and head count that give at most "
                             f"{GRID_YZ_LIMIT} programs on grid axis {axis}, got {n}")


def default_block_k(prob: Problem) -> int:
    """K per dot step of the portable designs: 128 for fp8 operands, 64 for bf16 ones, so
    the weight tiles (and their pipelined copies) fit in a Hopper SM's shared memory."""
    return 128 if prob.dot_in_fp8 else 64


def no_launch(args: GatherArgs, aligned: bool | None = None, device: int | None = None,
              addresses: GatherArgs | None = None) -> None:
    """The launch of a problem with nothing to run (an empty grid)."""
    return None


def portable_plan(prob: Problem, t: GatherArgs, block_k: int
                  ) -> tuple[Callable[[GatherArgs], list], dict]:
    """The argument list every portable Triton design takes, as a function of one call's
    tensors or their addresses (the shape-derived ints fixed now), and the constants
    ``jit.py``'s bodies read. ``t`` is the call the plan is made for: only its shapes and
    strides are read."""
    w = as_uint8(t.kv_proj_weight)
    ws = as_uint8(t.kv_proj_scale) if t.kv_proj_scale is not None else w
    k_buffer, k_out, v_out = t.k_buffer, t.k_prefix, t.v_prefix
    ints = (k_buffer.stride(0), k_buffer.stride(1), k_buffer.shape[0], k_out.stride(0),
            k_out.stride(1),
            v_out.stride(0), v_out.stride(1), w.shape[1], ws.shape[1] if ws.dim() == 2 else 1)
    fp8 = prob.cache_is_fp8
    has_scale = t.kv_proj_scale is not None
    # Whether the weight or its scale arrive as float4 / e8m0 dtypes Triton does not take:
    # fixed by the plan's dtypes, so a call of the plan pays for no test. A call given as
    # addresses (ints) needs no view.
    views = w is not t.kv_proj_weight or (has_scale and ws is not t.kv_proj_scale)

    out_fp8 = prob.out_is_fp8

    def make_args(c: GatherArgs) -> list:
        # Outputs of another dtype have no scales: stand-in pointers, never read.
        ko_s, vo_s = (c.k_out_scale, c.v_out_scale) if out_fp8 else (c.k_buffer, c.k_buffer)
        if views and type(c.kv_proj_weight) is not int:
            w = as_uint8(c.kv_proj_weight)
            return [c.k_buffer, c.k_scale if fp8 else c.k_buffer, c.kv_indptr, c.kv_indices,
                    c.kv_prefix_sum_context_lens, w,
                    as_uint8(c.kv_proj_scale) if has_scale else w, c.k_prefix, c.v_prefix,
                    ko_s, vo_s, *ints]
        return [c.k_buffer, c.k_scale if fp8 else c.k_buffer, c.kv_indptr, c.kv_indices,
                c.kv_prefix_sum_context_lens, c.kv_proj_weight,
                c.kv_proj_scale if has_scale else c.kv_proj_weight, c.k_prefix, c.v_prefix,
                ko_s, vo_s, *ints]

    consts = dict(
        KV_C=prob.kv_c_dim, PE=prob.pe_dim, NOPE=prob.nope_dim, V=prob.v_dim,
        BPE=pow2(prob.pe_dim, 1), BNOPE=pow2(prob.nope_dim), BV=pow2(prob.v_dim),
        BLOCK_SIZE=prob.block_size, BK=block_k, FMT=SCALE_CODES[prob.scale],
        DOT_BF16=not prob.dot_in_fp8, HAS_K_SCALE=fp8, OUT_FP8=out_fp8)
    return make_args, consts


