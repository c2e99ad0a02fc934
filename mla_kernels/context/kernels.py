"""The jit helpers the context path's attention kernels share (each kernel lives in its
home: ``attention.py`` over expanded K/V, ``absorbed.py`` over the paged latent, ``merge.py``
the merge): rows loaded with their columns padded, a split's start, one key tile of online
softmax, and its partial output and LSE.

Every attention program covers one split of the keys and writes a partial output,
normalised by its own softmax sum, and that sum's log-sum-exp; ``merge.merge_kernel``
weighs the splits (and an earlier partial, for a chunked context) into one output. Softmax
runs in base 2 (the scores pre-multiplied by log2(e)); the stored LSE is the natural one.
"""

from __future__ import annotations

import triton
import triton.language as tl

LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def load_rows(rows, rows_ok, C: tl.constexpr, BC: tl.constexpr, MASK_ROWS: tl.constexpr):
    """A [rows, BC] tile of the rows starting at ``rows`` (pointers [rows, 1]): columns past
    C (padding to a power of two) and, with MASK_ROWS, rows not ``rows_ok`` read as zeros. A
    tile of whole rows of a power-of-two width loads with no mask at all."""
    cols = tl.arange(0, BC)
    ptrs = rows + cols[None, :]
    if MASK_ROWS:
        if BC == C:
            tile = tl.load(ptrs, mask=rows_ok[:, None], other=0.0)
        else:
            tile = tl.load(ptrs, mask=rows_ok[:, None] & (cols[None, :] < C), other=0.0)
    else:
        if BC == C:
            tile = tl.load(ptrs)
        else:
            tile = tl.load(ptrs, mask=cols[None, :] < C, other=0.0)
    return tile


@triton.jit
def load_two_parts(base, rows_ok, A: tl.constexpr, BA: tl.constexpr, B: tl.constexpr,
                   BB: tl.constexpr, MASK_ROWS: tl.constexpr):
    """Rows at ``base`` (pointers [rows, 1]) as two column parts, [0, A) and [A, A + B), each
    by ``load_rows``."""
    return (load_rows(base, rows_ok, A, BA, MASK_ROWS),
            load_rows(base + A, rows_ok, B, BB, MASK_ROWS))


@triton.jit
def split_start(split, keys_per_split, n_keys, BM: tl.constexpr, BD: tl.constexpr):
    """A split's keys [k0, k1) and its empty online-softmax state: the running max, the
    sum and the [BM, BD] accumulator."""
    k0 = split * keys_per_split
    k1 = tl.minimum(k0 + keys_per_split, n_keys)
    return (k0, k1, tl.full([BM], float("-inf"), tl.float32), tl.zeros([BM], tl.float32),
            tl.zeros([BM, BD], tl.float32))


@triton.jit
def online_step(s, keys_ok, m_i, l_i, acc):
    """One key tile of online softmax: ``s`` [BM, BN] scores in base 2, masked keys to
    -inf; returns (the probabilities, the new max, the rescaled sum and accumulator)."""
    s = tl.where(keys_ok[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    return p, m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None]


@triton.jit
def store_partial(part_o_ptr, part_lse_ptr, out_rows, rmask, acc, m_i, l_i,
                  D: tl.constexpr, BD: tl.constexpr):
    """A split's output (divided by its own sum: 0 where it saw no key) and its LSE (-inf
    where it saw none) at flat rows ``out_rows``."""
    d = tl.arange(0, BD)
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(part_o_ptr + out_rows.to(tl.int64)[:, None] * D + d[None, :], o,
             mask=rmask[:, None] & (d[None, :] < D))
    safe = tl.where(l_i > 0, l_i, 1.0)  # no log of 0 (the interpreter warns): -inf below
    tl.store(part_lse_ptr + out_rows, tl.where(l_i > 0, (m_i + tl.log2(safe)) * LN2,
                                               float("-inf")), mask=rmask)
