"""The context path's jit functions: attention of query rows over a range of keys (expanded
per-head K/V, or the paged latent shared by every head), and the merge of partial
attentions by their log-sum-exp.

Every attention program covers one split of the keys and writes a partial output,
normalised by its own softmax sum, and that sum's log-sum-exp; ``merge_kernel`` weighs the
splits (and an earlier partial, for a chunked context) into one output. Softmax runs in
base 2 (the scores pre-multiplied by log2(e)); the stored LSE is the natural one.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..designs.jit import cast_out, dot_acc

LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _online_step(s, keys_ok, m_i, l_i, acc):
    """One key tile of online softmax: ``s`` [BM, BN] scores in base 2, masked keys to
    -inf; returns (the probabilities, the new max, the rescaled sum and accumulator)."""
    s = tl.where(keys_ok[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    return p, m_new, l_i * alpha + tl.sum(p, 1), acc * alpha[:, None]


@triton.jit
def _store_partial(part_o_ptr, part_lse_ptr, out_rows, rmask, acc, m_i, l_i,
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


@triton.jit
def prefix_attention_kernel(
    q_ptr, k_ptr, v_ptr, k_scale_ptr, v_scale_ptr, part_o_ptr, part_lse_ptr,
    n_rows, n_keys, keys_per_split, num_heads, qk_scale,
    stride_q_row, stride_k_row, stride_v_row, stride_part_o, stride_part_lse,
    DA: tl.constexpr, DB: tl.constexpr, DV: tl.constexpr,
    BDA: tl.constexpr, BDB: tl.constexpr, BDV: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, KV_FP8: tl.constexpr,
):
    """Grid (query tile, head, split): BM queries of one head over the split's keys of
    expanded K [keys, H, DA + DB] and V [keys, H, DV]. A head dim that is no power of two
    (192) is loaded as two parts, DA then DB (128 + 64).

    FP8 K/V are widened to the queries' dtype as they are loaded (exact), so the dots run
    there; the per-tensor scales are applied to the scores and to the output."""
    tile = tl.program_id(0)
    head = tl.program_id(1)
    split = tl.program_id(2)
    rows = tile * BM + tl.arange(0, BM)
    rmask = rows < n_rows
    da = tl.arange(0, BDA)
    db = tl.arange(0, BDB)
    dv = tl.arange(0, BDV)
    q_base = q_ptr + rows.to(tl.int64)[:, None] * stride_q_row + head * (DA + DB)
    q_a = tl.load(q_base + da[None, :], mask=rmask[:, None] & (da[None, :] < DA), other=0.0)
    q_b = tl.load(q_base + DA + db[None, :], mask=rmask[:, None] & (db[None, :] < DB),
                  other=0.0)
    dt = q_ptr.dtype.element_ty
    scale = qk_scale
    if KV_FP8:
        scale = scale * tl.load(k_scale_ptr)
    k0 = split * keys_per_split
    k1 = tl.minimum(k0 + keys_per_split, n_keys)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, BDV], tl.float32)
    # The loop's bound is an argument, not a loaded or program-derived value (the
    # interpreter refuses those as bounds); tiles past the split's end are skipped.
    for j in range(0, keys_per_split, BN):
        if k0 + j < k1:
            keys = k0 + j + tl.arange(0, BN)
            kok = keys < k1
            k_base = k_ptr + keys.to(tl.int64)[None, :] * stride_k_row + head * (DA + DB)
            kt_a = tl.load(k_base + da[:, None], mask=kok[None, :] & (da[:, None] < DA), other=0.0)
            kt_b = tl.load(k_base + DA + db[:, None], mask=kok[None, :] & (db[:, None] < DB),
                           other=0.0)
            s = dot_acc(q_a, kt_a.to(dt), tl.zeros([BM, BN], tl.float32))
            s = dot_acc(q_b, kt_b.to(dt), s)
            p, m_i, l_i, acc = _online_step(s * scale, kok, m_i, l_i, acc)
            v = tl.load(v_ptr + keys.to(tl.int64)[:, None] * stride_v_row + head * DV
                        + dv[None, :], mask=kok[:, None] & (dv[None, :] < DV), other=0.0)
            acc = dot_acc(p.to(dt), v.to(dt), acc)
    if KV_FP8:
        acc = acc * tl.load(v_scale_ptr)
    _store_partial(part_o_ptr + split * stride_part_o, part_lse_ptr + split * stride_part_lse,
                   rows * num_heads + head, rmask, acc, m_i, l_i, DV, BDV)


@triton.jit
def latent_attention_kernel(
    q_ptr, cache_ptr, k_scale_ptr, block_ids_ptr, part_o_ptr, part_lse_ptr,
    n_rows, n_keys, keys_per_split, qk_scale,
    stride_block, stride_slot, stride_part_o, stride_part_lse,
    KV_C: tl.constexpr, PE: tl.constexpr, BKV: tl.constexpr, BPE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, HAS_K_SCALE: tl.constexpr,
):
    """Grid (row tile, split): BM rows of absorbed queries [rows, KV_C + PE] (one row per
    query and head: every head reads the same keys) over the split's tokens of the paged
    latent cache. Each key tile is gathered once and serves as the key (latent and rope)
    and, its first KV_C columns, as the value.

    An fp8 cache is widened to the queries' dtype as it is loaded (exact); its scale is
    applied to the scores and to the output."""
    tile = tl.program_id(0)
    split = tl.program_id(1)
    rows = tile * BM + tl.arange(0, BM)
    rmask = rows < n_rows
    dc = tl.arange(0, BKV)
    dp = tl.arange(0, BPE)
    q_base = q_ptr + rows.to(tl.int64)[:, None] * (KV_C + PE)
    q_c = tl.load(q_base + dc[None, :], mask=rmask[:, None] & (dc[None, :] < KV_C), other=0.0)
    q_pe = tl.load(q_base + KV_C + dp[None, :], mask=rmask[:, None] & (dp[None, :] < PE),
                   other=0.0)
    dt = q_ptr.dtype.element_ty
    scale = qk_scale
    if HAS_K_SCALE:
        k_scale = tl.load(k_scale_ptr)
        scale = scale * k_scale
    k0 = split * keys_per_split
    k1 = tl.minimum(k0 + keys_per_split, n_keys)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, BKV], tl.float32)
    for j in range(0, keys_per_split, BN):
        if k0 + j < k1:
            keys = k0 + j + tl.arange(0, BN)
            kok = keys < k1
            blocks = tl.load(block_ids_ptr + keys // BLOCK_SIZE, mask=kok, other=0)
            # Widened before the multiply: block id x stride passes 32 bits on large caches.
            row = blocks.to(tl.int64) * stride_block + (keys % BLOCK_SIZE) * stride_slot
            ct = tl.load(cache_ptr + row[None, :] + dc[:, None],
                         mask=kok[None, :] & (dc[:, None] < KV_C), other=0.0).to(dt)
            pet = tl.load(cache_ptr + row[None, :] + KV_C + dp[:, None],
                          mask=kok[None, :] & (dp[:, None] < PE), other=0.0).to(dt)
            s = dot_acc(q_c, ct, tl.zeros([BM, BN], tl.float32))
            s = dot_acc(q_pe, pet, s)
            p, m_i, l_i, acc = _online_step(s * scale, kok, m_i, l_i, acc)
            acc = dot_acc(p.to(dt), tl.trans(ct), acc)
    if HAS_K_SCALE:
        acc = acc * k_scale
    _store_partial(part_o_ptr + split * stride_part_o, part_lse_ptr + split * stride_part_lse,
                   rows, rmask, acc, m_i, l_i, KV_C, BKV)


@triton.jit
def merge_kernel(
    part_o_ptr, part_lse_ptr, prev_o_ptr, prev_lse_ptr, out_o_ptr, out_lse_ptr,
    n_rows, n_parts, stride_part_o, stride_part_lse,
    D: tl.constexpr, BD: tl.constexpr, BR: tl.constexpr, HAS_PREV: tl.constexpr,
):
    """Grid (row tile): the weighted sum of ``n_parts`` partial outputs [rows, D] (and of
    ``prev``, an earlier partial, with HAS_PREV), each weighed by exp(its LSE - the largest),
    and the LSE of the whole. Rows no part saw (every LSE -inf) get 0 and -inf. ``out`` may
    be ``prev`` itself: each row is read before it is written."""
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    rmask = rows < n_rows
    d = tl.arange(0, BD)
    omask = rmask[:, None] & (d[None, :] < D)
    offs = rows.to(tl.int64)[:, None] * D + d[None, :]
    m = tl.full([BR], float("-inf"), tl.float32)
    if HAS_PREV:
        lse_prev = tl.load(prev_lse_ptr + rows, mask=rmask, other=float("-inf"))
        m = tl.maximum(m, lse_prev)
    for s in range(0, n_parts):
        m = tl.maximum(m, tl.load(part_lse_ptr + s * stride_part_lse + rows, mask=rmask,
                                  other=float("-inf")))
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    total = tl.zeros([BR], tl.float32)
    acc = tl.zeros([BR, BD], tl.float32)
    if HAS_PREV:
        w = tl.exp(lse_prev - m_safe)
        total += w
        acc += w[:, None] * tl.load(prev_o_ptr + offs, mask=omask, other=0.0).to(tl.float32)
    for s in range(0, n_parts):
        w = tl.exp(tl.load(part_lse_ptr + s * stride_part_lse + rows, mask=rmask,
                           other=float("-inf")) - m_safe)
        total += w
        acc += w[:, None] * tl.load(part_o_ptr + s * stride_part_o + offs, mask=omask,
                                    other=0.0).to(tl.float32)
    safe = tl.where(total > 0, total, 1.0)
    tl.store(out_o_ptr + offs, cast_out(acc / safe[:, None], out_o_ptr.dtype.element_ty),
             mask=omask)
    tl.store(out_lse_ptr + rows, tl.where(total > 0, m_safe + tl.log(safe), float("-inf")),
             mask=rmask)

