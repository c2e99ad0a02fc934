"""The merge of partial attentions by their log-sum-exp: the splits of one launch, the chunks
of a long context, and the cached prefix with the new tokens' own causal attention.

Two attentions of the same queries over disjoint key sets, each normalised by its own
softmax sum, merge exactly: with weights exp(lse_a - m) and exp(lse_b - m) (m the larger
LSE), out = (w_a o_a + w_b o_b) / (w_a + w_b) and lse = m + log(w_a + w_b).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..designs.jit import cast_out
from . import checks

MERGE_ROWS = 32  # the most rows a merge program covers
# Programs a merge aims for: each walks every part of its rows in turn, so with few rows
# (n x H = 1536 at n = 128) tiles of 32 rows left most SMs idle and the merge waited on
# memory one part at a time.
MERGE_PROGRAMS = 512
# Parts a merge program loads a step, unrolled: a step's loads are issued together, where a
# loop of one part a step waited on each load in turn. At most MERGE_UNROLL, and at most
# MERGE_STEP_VALUES values in flight (128 a thread of its 4 warps).
MERGE_UNROLL = 16
MERGE_STEP_VALUES = 16384
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def merge_rows(rows: int) -> int:
    """Rows a merge program covers: a power of two from 2 to MERGE_ROWS, the most that
    still gives MERGE_PROGRAMS programs."""
    per = triton.next_power_of_2(max(1, -(-rows // MERGE_PROGRAMS)))
    return max(2, min(MERGE_ROWS, per))


def merge_step(n_parts: int, block_rows: int, block_d: int) -> int:
    """Parts a merge program of ``block_rows`` x ``block_d`` loads a step: all ``n_parts``
    within MERGE_UNROLL and MERGE_STEP_VALUES, a power of two (few compiled variants)."""
    fit = max(1, MERGE_STEP_VALUES // (block_rows * block_d))
    top = min(MERGE_UNROLL, triton.next_power_of_2(fit + 1) // 2)
    return min(triton.next_power_of_2(max(1, n_parts)), top)


@triton.jit
def merge_kernel(
    part_o_ptr, part_lse_ptr, prev_o_ptr, prev_lse_ptr, out_o_ptr, out_lse_ptr,
    n_rows, n_parts, stride_part_o, stride_part_lse,
    D: tl.constexpr, BD: tl.constexpr, BR: tl.constexpr, BP: tl.constexpr,
    HAS_PREV: tl.constexpr,
):
    """Grid (row tile): the weighted sum of ``n_parts`` partial outputs [rows, D] (and of
    ``prev``, an earlier partial, with HAS_PREV), each weighed by exp(its LSE - the largest),
    and the LSE of the whole, in one pass of BP parts a step: the largest LSE so far kept,
    the sums rescaled as it grows. Rows no part saw (every LSE -inf) get 0 and -inf. ``out``
    may be ``prev`` itself: each row is read before it is written."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    rmask = rows < n_rows
    d = tl.arange(0, BD)
    omask = rmask[:, None] & (d[None, :] < D)
    offs = rows.to(tl.int64)[:, None] * D + d[None, :]
    m = tl.full([BR], float("-inf"), tl.float32)
    total = tl.zeros([BR], tl.float32)
    acc = tl.zeros([BR, BD], tl.float32)
    if HAS_PREV:
        m = tl.load(prev_lse_ptr + rows, mask=rmask, other=float("-inf"))
        total = tl.where(m == float("-inf"), 0.0, 1.0)
        acc = total[:, None] * tl.load(prev_o_ptr + offs, mask=omask, other=0.0).to(tl.float32)
    for s0 in range(0, n_parts, BP):
        for i in tl.static_range(BP):
            s = s0 + i
            # The part's bound as a row vector: the interpreter refuses a scalar mask.
            live = rmask & ((rows * 0 + s) < n_parts)
            lse = tl.load(part_lse_ptr + s * stride_part_lse + rows, mask=live,
                          other=float("-inf"))
            o = tl.load(part_o_ptr + s.to(tl.int64) * stride_part_o + offs,
                        mask=live[:, None] & omask, other=0.0).to(tl.float32)
            m_new = tl.maximum(m, lse)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            grow = tl.exp(m - m_safe)  # 0 while no part has seen the row
            w = tl.exp(lse - m_safe)
            total = total * grow + w
            acc = acc * grow[:, None] + w[:, None] * o
            m = m_new
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    safe = tl.where(total > 0, total, 1.0)
    tl.store(out_o_ptr + offs, cast_out(acc / safe[:, None], out_o_ptr.dtype.element_ty),
             mask=omask)
    tl.store(out_lse_ptr + rows, tl.where(total > 0, m_safe + tl.log(safe), float("-inf")),
             mask=rmask)


def merge_parts(part_o: torch.Tensor, part_lse: torch.Tensor, n_parts: int, out: torch.Tensor,
                out_lse: torch.Tensor, prev_o: torch.Tensor | None = None,
                prev_lse: torch.Tensor | None = None) -> None:
    """Launch the merge of ``n_parts`` partials (part_o [>= n_parts, rows..., D], part_lse
    [>= n_parts, rows...], contiguous) and ``prev`` (or none) into ``out`` / ``out_lse``
    (which may be ``prev``). No checks: the entry points' own launch path."""
    d = out.shape[-1]
    rows = out_lse.numel()
    if rows == 0:
        return
    has_prev = prev_o is not None
    br = merge_rows(rows)
    bd = triton.next_power_of_2(d)
    merge_kernel[(triton.cdiv(rows, br),)](
        part_o, part_lse, prev_o if has_prev else out, prev_lse if has_prev else out_lse,
        out, out_lse, rows, n_parts, part_o[0].numel() if n_parts else 0,
        part_lse[0].numel() if n_parts else 0,
        D=d, BD=bd, BR=br, BP=merge_step(n_parts, br, bd),
        HAS_PREV=has_prev, num_warps=4)


def merge_attention(o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor,
                    lse_b: torch.Tensor, *, out: torch.Tensor | None = None,
                    out_lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attentions of the same queries over disjoint keys.

    o_a, o_b:  [n, H, D] bf16, fp16 or float32 (each normalised by its own softmax sum)
    lse_a, lse_b: [n, H] float32, natural log-sum-exp of each one's scaled scores (-inf: no key)
    out: [n, H, D] (default: o_a's dtype), out_lse: [n, H] float32; ``out`` may be ``o_a``
    (and ``out_lse`` ``lse_a``), merged in place.
    Returns (out, out_lse).
    """
    dev = checks.device_of(o_a, "o_a")
    checks.tensor(o_a, "o_a", dims=3, dtypes=OUT_DTYPES, device=dev)
    n, h, d = o_a.shape
    checks.tensor(o_b, "o_b", dims=3, dtypes=OUT_DTYPES, device=dev, shape=(n, h, d))
    checks.tensor(lse_a, "lse_a", dims=2, dtypes=(torch.float32,), device=dev, shape=(n, h))
    checks.tensor(lse_b, "lse_b", dims=2, dtypes=(torch.float32,), device=dev, shape=(n, h))
    checks.out_buffer(out, "out", dev, (n, h, d), OUT_DTYPES)
    checks.out_buffer(out_lse, "out_lse", dev, (n, h), (torch.float32,))
    named = {"o_a": o_a, "lse_a": lse_a, "o_b": o_b, "lse_b": lse_b}
    # In place over the first partial is allowed: each row is read before it is written, by
    # the program that writes it. Only the partial itself, though: an output shifted from it
    # or of another dtype over its bytes puts a row where another program still reads.
    for name, t, first in (("out", out, o_a), ("out_lse", out_lse, lse_a)):
        if t is not None:
            same = t.data_ptr() == first.data_ptr() and t.dtype == first.dtype
            others = {k: x for k, x in named.items() if not (same and x is first)}
            other_out = {"out_lse": out_lse} if name == "out" else {"out": out}
            checks.no_overlap({name: t, **others, **other_out}, [name])
    if out is None:
        out = torch.empty_like(o_a)
    if out_lse is None:
        out_lse = torch.empty_like(lse_a)
    merge_parts(o_b.unsqueeze(0), lse_b.unsqueeze(0), 1, out, out_lse, o_a, lse_a)
    return out, out_lse
