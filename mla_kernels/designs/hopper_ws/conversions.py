"""The conversion tables and widening helpers: e4m3 -> bf16 for a bf16 weight's latent tile,
and MXFP4 (packed e2m1, e8m0 codes) -> e4m3 or bf16 for MXFP4's widener partition."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .compat import smem
from .config import BK, BN, MX_SPAN, WIDEN_WARPS

# e4m3 -> bf16 for a bf16 weight's latent (_latent_widener) and the absorbed attention's fp8
# keys, a word of 4 values into two of 2: each byte s.eeee.mmm placed as the bf16 bits
# s.0000eeee.mmm0000 (its value 2^-120 times the e4m3 value, subnormals included), then
# multiplied by 2^120 (exact). The byte b in a half becomes b * 16 (the sign lands on bit 11)
# plus (b & 0x80) * 240 (which moves it to bit 15); integer and bf16x2 arithmetic, 2.5
# instructions a value, instead of the conversion units' two conversions a value
# (e4m3x2 -> f16x2 -> bf16), which set the gather warps' pace. e4m3fn's NaN code
# comes out as 480: a NaN in a cache row a token reads is outside the contract.
# One output word: input bytes picked by a prmt selector into the low bytes of two halves.
_E4M3_PAIR = """prmt.b32 t, ${src}, z, {sel};
and.b32 a, t, 0x00800080;
mul.lo.u32 a, a, 240;
mad.lo.u32 a, t, 16, a;
mul.rn.bf16x2 ${out}, a, k;
"""
# Its registers: z a zero word, k the 2^120 factor twice.
_E4M3_REGS = "{\n.reg .b32 z, k, t, a, b;\nmov.b32 z, 0;\nmov.b32 k, 0x7B807B80;\n"
E4M3_TO_BF16 = gl.constexpr(
    _E4M3_REGS
    + _E4M3_PAIR.format(src=2, sel="0x4140", out=0)  # values 0 and 1 of the word
    + _E4M3_PAIR.format(src=2, sel="0x4342", out=1)  # values 2 and 3
    + "}")
# The same for two e4m3 values in the low half of a word (a K pair of wgmma's bf16 A
# operand, widened by the MMA warps once a tile: mma._take_latent_chunk).
E4M3_PAIR_TO_BF16 = gl.constexpr(
    _E4M3_REGS + _E4M3_PAIR.format(src=1, sel="0x4140", out=0) + "}")

# prmt lookup table: the e4m3 bytes of the e2m1 magnitudes 0, 0.5, 1, 1.5 (first word) and
# 2, 3, 4, 6 (second word) at d = 0; adding d << 3 to a non-zero byte scales it by 2^d. The
# sign is the nibble's top bit, moved to the byte's top bit by prmt's sign-replicate mode
# over bytes of 0x80 (0x80 -> bit 0 clear, 0xFF -> set) and a shift.
_E2M1_TO_E4M3 = gl.constexpr("""{
.reg .b32 l0, l1, t, m, s, k;
mad.lo.s32 l0, $3, 0x08080800, 0x3C383000;
mad.lo.s32 l1, $3, 0x08080808, 0x4C484440;
mov.b32 k, 0x80808080;
and.b32 t, $2, 0x7777;
prmt.b32 m, l0, l1, t;
prmt.b32 s, k, k, $2;
shl.b32 s, s, 7;
and.b32 s, s, 0x80808080;
or.b32 $0, m, s;
shr.u32 t, $2, 16;
prmt.b32 s, k, k, t;
and.b32 t, t, 0x7777;
prmt.b32 m, l0, l1, t;
shl.b32 s, s, 7;
and.b32 s, s, 0x80808080;
or.b32 $1, m, s;
}""")


@gluon.jit
def as_words(slot):
    """A slot of 128 rows of 128 bytes ([128 x 128] e4m3: a ring slot or a latent chunk;
    [128 x 64] bf16: a slice of a bf16 latent tile) as [128 x 32] int32 words (the 128-byte swizzle places
    the same bytes either way)."""
    return smem.reinterpret(slot, gl.int32, [BN, BK // 4], gl.NVMMASharedLayout(
        swizzle_byte_width=128, element_bitwidth=32, rank=2))


@gluon.jit
def widen_words(w):
    """[rows x n] int32 words of 4 e4m3 values as [rows x 2n] words of 2 bf16 values, in
    order, exactly (E4M3_TO_BF16)."""
    lo, hi = gl.inline_asm_elementwise(E4M3_TO_BF16, "=r,=r,r", [w],
                                       dtype=(gl.int32, gl.int32), is_pure=True, pack=1)
    return gl.join(lo, hi).reshape([w.shape[0], 2 * w.shape[1]])


@gluon.jit
def as_pairs(slot):
    """A slot of 128 rows of 128 bytes as [128 x 64] int16 pairs of e4m3 values (the
    128-byte swizzle places the same bytes either way)."""
    return smem.reinterpret(slot, gl.int16, [BN, BK // 2], gl.NVMMASharedLayout(
        swizzle_byte_width=128, element_bitwidth=16, rank=2))


@gluon.jit
def widen_pairs(p):
    """int16 pairs of e4m3 values as int32 words of the two as bf16 (low half first),
    exactly (E4M3_PAIR_TO_BF16)."""
    return gl.inline_asm_elementwise(E4M3_PAIR_TO_BF16, "=r,r", [p.to(gl.int32)],
                                     dtype=gl.int32, is_pure=True, pack=1)


@gluon.jit
def ring_as_bf16(ring):
    """The e4m3 ring as [STAGES, 128, 64] bf16 chunks (the same 16 KB a slot)."""
    return smem.reinterpret(ring, gl.bfloat16, [ring.shape[0], BN, BK // 2],
                            gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16,
                                                 rank=2))


@gluon.jit
def packed_words(slot):
    """A packed slot ([128 x 64] bytes of e2m1 pairs, 64-byte swizzled: a K chunk of 128
    rows) as [128 x 16] int32 words of 8 values each, low nibble first."""
    return smem.reinterpret(slot, gl.int32, [BN, BK // 8], gl.NVMMASharedLayout(
        swizzle_byte_width=64, element_bitwidth=32, rank=2))


@gluon.jit
def mx_codes(code, KV_C: gl.constexpr):
    """An item's e8m0 codes, [128 x CODES] int32 (a row a thread; CODES = 4 x the K chunks
    rounded up to a power of two, the columns past kv_c / 32 padding): the codes of each K
    chunk packed four to a word ([128 x chunks], one a byte), each row's largest code, and
    whether the item takes the e4m3 route (no row's codes span more than MX_SPAN)."""
    NKP: gl.constexpr = code.shape[1] // 4
    l3: gl.constexpr = gl.BlockedLayout([1, NKP, 4], [32, 1, 1], [WIDEN_WARPS, 1, 1],
                                        [2, 1, 0])
    c3 = gl.convert_layout(code.reshape([BN, NKP, 4]), l3)
    kc = gl.arange(0, NKP, layout=gl.SliceLayout(0, gl.SliceLayout(2, l3)))
    g = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(1, l3)))
    kmask = (kc < KV_C // BK)[None, :, None]
    top = gl.max(gl.max(c3, axis=2), axis=1)
    low = gl.min(gl.min(gl.where(kmask, c3, 255), axis=2), axis=1)
    fits = gl.max(top - low, axis=0) <= MX_SPAN
    packed = gl.sum(c3 << (8 * g)[None, None, :], axis=2)
    return packed, top, fits


@gluon.jit
def mx_offsets(packed, top, kb: gl.constexpr, layout: gl.constexpr):
    """K chunk ``kb``'s exponent offset d = code - top + 6 for each of its [128 x 16] words
    (``mx_codes``' packed codes and row maxima; picked out of registers: kb is a constant),
    in ``layout``."""
    k = gl.arange(0, packed.shape[1], layout=gl.SliceLayout(0, packed.type.layout))
    w = gl.arange(0, BK // 8, layout=gl.SliceLayout(0, layout))
    codes = gl.sum(gl.where((k == kb)[None, :], packed, 0), axis=1)
    codes = gl.convert_layout(codes, gl.SliceLayout(1, layout))
    top = gl.convert_layout(top, gl.SliceLayout(1, layout))
    return ((codes[:, None] >> (8 * (w // 4))[None, :]) & 0xFF) - top[:, None] + 6


@gluon.jit
def widen_e4m3(words, d):
    """A chunk's words (``packed_words``; offsets ``mx_offsets``) as e4m3, each value its
    e2m1 value times 2^d (exact on the e4m3 route): [128 x 32] int32 words of 4 values in K
    order, a row a thread; two words out of each packed one (_E2M1_TO_E4M3)."""
    lo, hi = gl.inline_asm_elementwise(_E2M1_TO_E4M3, "=r,=r,r,r", [words, d],
                                       dtype=(gl.int32, gl.int32), is_pure=True, pack=1)
    return gl.join(lo, hi).reshape([BN, BK // 4])


@gluon.jit
def halves(words, d):
    """A chunk (words and offsets) as its two 64-value halves: ([128 x 8] words, [128 x 8]
    exponent offsets) each (register renaming only)."""
    w0, w1 = gl.split(words.reshape([BN, 2, BK // 16]).permute((0, 2, 1)))
    d0, d1 = gl.split(d.reshape([BN, 2, BK // 16]).permute((0, 2, 1)))
    return w0, d0, w1, d1


@gluon.jit
def widen_bf16(words, d):
    """A half-chunk (``halves``) as bf16, each value its e2m1 value times 2^d: [128 x 64],
    a row a thread. Exact, but for values below float32's normal range, which are flushed
    to zero."""
    lay: gl.constexpr = gl.BlockedLayout([1, 8, 8], [32, 1, 1], [WIDEN_WARPS, 1, 1], [2, 1, 0])
    wl: gl.constexpr = gl.SliceLayout(2, lay)
    j = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, lay)))
    p = (gl.maximum(gl.convert_layout(d, wl) + 127 + 14, 0) << 23).to(gl.float32, bitcast=True)
    n = (gl.convert_layout(words, wl)[:, :, None] >> (4 * j)[None, None, :]) & 15
    # The nibble's sign, exponent and mantissa bits placed in a float16's sign, low exponent
    # and top mantissa bits: its value is the e2m1 value x 2^-14 (0.5 a subnormal); times
    # 2^(14 + d).
    bits = ((n & 8) << 12) | ((n & 7) << 9)
    v = bits.to(gl.int16).to(gl.float16, bitcast=True).to(gl.float32) * p[:, :, None]
    return v.to(gl.bfloat16).reshape([BN, BK // 2])


@gluon.jit
def pow2(f):
    """2^f as float32 for integer f in [-252, 254] (two normal factors, an exact product)."""
    a = f >> 1
    return (((a + 127) << 23).to(gl.float32, bitcast=True)
            * (((f - a) + 127) << 23).to(gl.float32, bitcast=True))
