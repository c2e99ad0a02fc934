"""Jit helpers shared by the designs: the row gather, the row-to-sequence search, the weight
tiles, the dot, and the body that projects one chunk of tokens for one head.

The serial and chunked designs both call ``project_chunk`` with the same arguments; only
who calls it (a loop or the grid) differs, which is why their outputs are bit-identical.
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

# Fixed at import, like Triton's own switch: the interpreter multiplies the raw bits of
# bf16 dot operands, so under it (and only there) bf16 operands are widened to fp32 first.
INTERPRET = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")

# How the weight's scale applies, as the kernels' FMT constant (Problem.scale): none (a bf16
# weight), per output row in the epilogue, per 128x128 block at each K step, e8m0 per 32
# values of an e2m1 weight in a scaled dot.
SCALE_NONE = tl.constexpr(0)
SCALE_ROW = tl.constexpr(1)
SCALE_BLOCK = tl.constexpr(2)
SCALE_E8M0 = tl.constexpr(3)
SCALE_CODES = {"none": 0, "row": 1, "block": 2, "e8m0": 3}

BLOCK_SCALE_SIZE = tl.constexpr(128)  # per-block scale granularity (rows and K)
MX_GROUP = tl.constexpr(32)  # e2m1 values per e8m0 scale


@triton.jit
def dot_acc(a, b, acc):
    """acc + a @ b, with the interpreter's bf16 defect avoided off the GPU path."""
    if INTERPRET:
        if a.dtype.is_bf16() or b.dtype.is_bf16():
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def e4m3_codes(x):
    """float32 -> e4m3fn codes (uint8) by the FP8 outputs' rule: nearest, ties to even,
    magnitudes past 448 saturated, NaN kept (code 0x7F). What sm_89+ hardware does in one
    instruction (cvt.rn.satfinite); the interpreter's own narrowing neither rounds to even
    nor saturates, so there the codes are built from the bits."""
    bits = x.to(tl.uint32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag = bits & 0x7FFFFFFF
    a = mag.to(tl.float32, bitcast=True)
    # Normal codes: the float32 mantissa rounded to 3 bits on the bits (a carry moves the
    # exponent up), the exponent rebiased from 127 to 7.
    normal = ((mag + 0x7FFFF + ((mag >> 20) & 1)) >> 20) - (120 << 3)
    # Below 2^-6 the codes count steps of 2^-9: a * 2^9 rounded to an integer, ties to even
    # (adding and taking away 2^23 rounds a float32 under 2^23 so).
    sub = ((a * 512.0 + 8388608.0) - 8388608.0).to(tl.uint32)
    code = tl.where(a < 0.015625, sub, normal)
    code = tl.where(a >= 448.0, 0x7E, code)
    code = tl.where(a != a, 0x7F, code)
    return (code | sign).to(tl.uint8)


@triton.jit
def cast_out(x, dtype: tl.constexpr):
    """float32 -> output dtype, rounding to nearest even (an FP8 output: saturated to
    +-448, NaN kept; ``x`` already divided by its scale). The interpreter truncates when it
    narrows to bf16 and neither rounds nor saturates to e4m3, so there (only) the rounding
    is done on the bits."""
    if INTERPRET:
        if dtype == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            x = bits.to(tl.float32, bitcast=True)
        elif dtype == tl.float8e4nv:
            return e4m3_codes(x).to(tl.float8e4nv, bitcast=True)
    elif dtype == tl.float8e4nv:
        # Saturated before narrowing: NVIDIA's conversion saturates itself, but not every
        # target's does (NaN passes through the clamp).
        x = tl.clamp(x, -448.0, 448.0, propagate_nan=tl.PropagateNan.ALL)
    return x.to(dtype)


@triton.jit
def load_out_inverse(scale_ptr, OUT_FP8: tl.constexpr):
    """What an output's values are multiplied by before they are stored: an FP8 output's
    1 / scale (its scale's float32 reciprocal), else 1 (nothing to scale)."""
    if OUT_FP8:
        inv = 1.0 / tl.load(scale_ptr)
    else:
        inv = 1.0
    return inv


@triton.jit
def gather_row_offsets(block_ids_ptr, t, tmask, stride_block, stride_slot, num_blocks,
                       BLOCK_SIZE: tl.constexpr):
    """Element offset of each token's latent row: its block id widened to 64 bits first,
    since block id x stride overflows 32 bits on large caches. In debug mode (kernels
    compiled with debug=True) an id outside [0, num_blocks) stops the kernel."""
    blk = tl.load(block_ids_ptr + t // BLOCK_SIZE, mask=tmask, other=0)
    tl.device_assert((blk >= 0) & (blk < num_blocks), "kv_indices: block id out of range")
    return blk.to(tl.int64) * stride_block + (t % BLOCK_SIZE).to(tl.int64) * stride_slot


@triton.jit
def load_weight_tile(w_ptr, row0, n_valid, ld, k0, k_valid,
                     BK: tl.constexpr, BN: tl.constexpr):
    """Weight rows [row0, row0 + BN) x columns [k0, k0 + BK) of a row-major [N, ld] weight,
    returned transposed as [BK, BN] (the dot's B operand); out-of-range entries are 0."""
    n = tl.arange(0, BN)
    k = k0 + tl.arange(0, BK)
    ptrs = w_ptr + (row0 + n).to(tl.int64)[None, :] * ld + k[:, None]
    return tl.load(ptrs, mask=(n < n_valid)[None, :] & (k < k_valid)[:, None], other=0.0)


@triton.jit
def mma_step(x, acc, w_ptr, ws_ptr, r0, n_valid, ld_w, ld_ws, k0,
             KV_C: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr,
             FMT: tl.constexpr, DOT_BF16: tl.constexpr):
    """acc + x @ W[r0 : r0 + BN, k0 : k0 + BK]^T for one K block, in the weight's format.

    The weight is read one K block at a time: a whole head (512 x 256) held as one dot
    operand does not fit in shared memory on a Hopper part, in bf16 or staged as f16.
    """
    n = tl.arange(0, BN)
    if FMT == SCALE_E8M0:
        # bf16 x e2m1 scaled dot; an fp8 latent widens to bf16 exactly.
        w = load_weight_tile(w_ptr, r0, n_valid, ld_w, k0 // 2, KV_C // 2, BK // 2, BN)
        g = k0 // MX_GROUP + tl.arange(0, BK // MX_GROUP)
        s = tl.load(ws_ptr + (r0 + n).to(tl.int64)[:, None] * ld_ws + g[None, :],
                    mask=(n < n_valid)[:, None] & (g < KV_C // MX_GROUP)[None, :], other=127)
        acc = tl.dot_scaled(x.to(tl.bfloat16), None, "bf16", w, s, "e2m1", acc)
    else:
        w = load_weight_tile(w_ptr, r0, n_valid, ld_w, k0, KV_C, BK, BN)
        if DOT_BF16:
            x = x.to(tl.bfloat16)
            w = w.to(tl.bfloat16)
        if FMT == SCALE_BLOCK:
            # The scale changes along K: each block's product is scaled before it is summed.
            s = tl.load(ws_ptr + ((r0 + n) // BLOCK_SCALE_SIZE).to(tl.int64) * ld_ws
                        + k0 // BLOCK_SCALE_SIZE, mask=n < n_valid, other=0.0)
            acc += dot_acc(x, w, tl.zeros(acc.shape, dtype=tl.float32)) * s[None, :]
        else:
            acc = dot_acc(x, w, acc)
    return acc


@triton.jit
def finish_part(acc, ws_ptr, r0, n_valid, k_scale, BN: tl.constexpr, FMT: tl.constexpr):
    """Apply what is left of the dequantisation: k_scale, and the per-row weight scale."""
    if FMT == SCALE_ROW:
        n = tl.arange(0, BN)
        s = tl.load(ws_ptr + r0 + n, mask=n < n_valid, other=0.0)
        acc = acc * (s * k_scale)[None, :]
    else:
        acc = acc * k_scale
    return acc


@triton.jit
def project_part(k_buffer_ptr, rows, tmask, k_scale, w_ptr, ws_ptr, r0, n_valid, ld_w, ld_ws,
                 KV_C: tl.constexpr, BN: tl.constexpr, BM: tl.constexpr, BK: tl.constexpr,
                 FMT: tl.constexpr, DOT_BF16: tl.constexpr):
    """float32 [BM, BN]: the gathered latent rows times weight rows [r0, r0 + BN), fully
    dequantised. The K loop is unrolled so the loads of later blocks can be issued early."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kb in tl.static_range(0, (KV_C + BK - 1) // BK):
        k = kb * BK + tl.arange(0, BK)
        x = tl.load(k_buffer_ptr + rows[:, None] + k[None, :],
                    mask=tmask[:, None] & (k < KV_C)[None, :], other=0.0)
        acc = mma_step(x, acc, w_ptr, ws_ptr, r0, n_valid, ld_w, ld_ws, kb * BK,
                       KV_C, BK, BN, FMT, DOT_BF16)
    return finish_part(acc, ws_ptr, r0, n_valid, k_scale, BN, FMT)


@triton.jit
def load_rope(k_buffer_ptr, rows, tmask, k_scale, KV_C: tl.constexpr, PE: tl.constexpr,
              BPE: tl.constexpr):
    """The rope columns of the gathered rows, dequantised (float32 [BM, BPE])."""
    p = tl.arange(0, BPE)
    pe = tl.load(k_buffer_ptr + rows[:, None] + KV_C + p[None, :],
                 mask=tmask[:, None] & (p < PE)[None, :], other=0.0)
    return pe.to(tl.float32) * k_scale


@triton.jit
def store_cols(base, val, tmask, inv, N: tl.constexpr, BN: tl.constexpr):
    """Store val [BM, BN] x ``inv`` (load_out_inverse) at base[:, :N] (rows where tmask),
    cast to the output dtype."""
    n = tl.arange(0, BN)
    tl.store(base + n[None, :], cast_out(val * inv, base.dtype.element_ty),
             mask=tmask[:, None] & (n < N)[None, :])


@triton.jit
def project_rows(
    k_buffer_ptr, rows, tmask, out_rows, k_scale,
    w_ptr, ws_ptr, head, ld_w, ld_ws, k_out_ptr, v_out_ptr, k_inv, v_inv,
    stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    BPE: tl.constexpr, BNOPE: tl.constexpr, BV: tl.constexpr, BM: tl.constexpr,
    BK: tl.constexpr, FMT: tl.constexpr, DOT_BF16: tl.constexpr,
    DO_K: tl.constexpr = True, DO_V: tl.constexpr = True,
):
    """BM gathered latent rows (element offsets ``rows``, valid where ``tmask``), one head:
    the K-nope projection and the rope copy if DO_K, the V projection if DO_V, stored (times
    ``k_inv`` / ``v_inv``: load_out_inverse). A design may split the two over programs to
    halve the accumulator registers."""
    rk = head * (NOPE + V)
    if DO_K:
        ko_base = k_out_ptr + out_rows[:, None] * stride_ko_row + head * stride_ko_head
        store_cols(ko_base + NOPE, load_rope(k_buffer_ptr, rows, tmask, k_scale, KV_C, PE, BPE),
                   tmask, k_inv, PE, BPE)
        acc_k = project_part(k_buffer_ptr, rows, tmask, k_scale, w_ptr, ws_ptr, rk, NOPE,
                             ld_w, ld_ws, KV_C, BNOPE, BM, BK, FMT, DOT_BF16)
        store_cols(ko_base, acc_k, tmask, k_inv, NOPE, BNOPE)
    if DO_V:
        vo_base = v_out_ptr + out_rows[:, None] * stride_vo_row + head * stride_vo_head
        acc_v = project_part(k_buffer_ptr, rows, tmask, k_scale, w_ptr, ws_ptr, rk + NOPE, V,
                             ld_w, ld_ws, KV_C, BV, BM, BK, FMT, DOT_BF16)
        store_cols(vo_base, acc_v, tmask, v_inv, V, BV)


@triton.jit
def project_chunk(
    k_buffer_ptr, block_ids_ptr, t0, ctx, out_row0, k_scale,
    w_ptr, ws_ptr, head, ld_w, ld_ws, k_out_ptr, v_out_ptr, k_inv, v_inv,
    stride_block, stride_slot, num_blocks, stride_ko_row, stride_ko_head, stride_vo_row,
    stride_vo_head,
    KV_C: tl.constexpr, PE: tl.constexpr, NOPE: tl.constexpr, V: tl.constexpr,
    BPE: tl.constexpr, BNOPE: tl.constexpr, BV: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, CK: tl.constexpr, BK: tl.constexpr, FMT: tl.constexpr,
    DOT_BF16: tl.constexpr,
):
    """Tokens [t0, t0 + CK) of one sequence, one head: the loop body of the serial design
    and the whole of a chunked program."""
    t = t0 + tl.arange(0, CK)
    tmask = t < ctx
    rows = gather_row_offsets(block_ids_ptr, t, tmask, stride_block, stride_slot, num_blocks,
                              BLOCK_SIZE)
    project_rows(k_buffer_ptr, rows, tmask, (out_row0 + t).to(tl.int64), k_scale,
                 w_ptr, ws_ptr, head, ld_w, ld_ws, k_out_ptr, v_out_ptr, k_inv, v_inv,
                 stride_ko_row, stride_ko_head, stride_vo_row, stride_vo_head,
                 KV_C, PE, NOPE, V, BPE, BNOPE, BV, CK, BK, FMT, DOT_BF16)


@triton.jit
def sequence_bounds(kv_indptr_ptr, cs_ptr, seq):
    """(first kv_indices entry, first output row, context length) of sequence ``seq``."""
    first_block = tl.load(kv_indptr_ptr + seq)
    row0 = tl.load(cs_ptr + seq)
    ctx = tl.load(cs_ptr + seq + 1) - row0
    return first_block, row0, ctx


@triton.jit
def load_k_scale(k_scale_ptr, HAS_K_SCALE: tl.constexpr):
    if HAS_K_SCALE:
        s = tl.load(k_scale_ptr)
    else:
        s = 1.0
    return s


def search_steps(batch: int) -> int:
    """``find_sequence``'s SEARCH_STEPS for a batch: ceil(log2(batch)), each step at least
    halving [0, batch); none for one sequence."""
    return (batch - 1).bit_length()


@triton.jit
def find_sequence(cs_ptr, r, batch, SEARCH_STEPS: tl.constexpr, cs_regs=None):
    """For each row r, the sequence b with cs[b] <= r < cs[b + 1] (binary search; empty
    sequences, whose cs entries repeat, are skipped because the last b with cs[b] <= r wins).
    Plain loads, arithmetic and selects: Gluon kernels trace it too, the layouts following
    from the row vector passed in. With ``cs_regs`` (cs[0 ...] already in registers, a
    vector as long as r, covering the batch) each step gathers from it instead of loading:
    no dependent round trip to memory a step."""
    lo = r - r  # zeros like r; Gluon's zeros_like would need a layout
    hi = lo + batch - 1
    for _ in tl.static_range(SEARCH_STEPS):
        mid = (lo + hi + 1) // 2
        if cs_regs is None:
            go_right = tl.load(cs_ptr + mid) <= r
        else:
            go_right = tl.gather(cs_regs, mid, 0) <= r
        lo = tl.where(go_right, mid, lo)
        hi = tl.where(go_right, hi, mid - 1)
    return lo
