"""Weights widened once a call, ahead of the kernel: to bf16 for a bf16 cache, and MXFP4 item
by item to e4m3 or bf16 for an fp8 cache (``widen_mx_items_kernel``, below).

Over a bf16 cache every dot runs bf16 x bf16, so an fp8 or MXFP4 weight has to be widened.
Widening it inside the matrix kernel, item by item, costs every program the same work again
for each token tile it visits (2 x heads items a tile), and on ``hopper_ws`` that widening
set the pace (README.md). Widened once per call instead, by a small kernel that reads the
weight once (1.5 MB of fp8 for Kimi-K3 TP8, 16.8 MB for DeepSeek-V3 TP1) and writes a bf16
copy the matrix kernel then loads by TMA, the widening is a small fixed cost per call. The
copy lives for the call only (a buffer of the caching allocator, stream-ordered), so
nothing of the weight outlives it in another format.

Exactness (docs/contract.md: mixed dtypes are lossless):

- fp8 e4m3fn: every value is a bf16 value; the scale (per row or per block) stays as it is
  and the matrix kernel applies it as for a scaled bf16 weight.
- MXFP4: each row r gets one power-of-two factor 2^F[r], F = max(the row's largest e8m0
  code - 133, -126), and the copy holds value / 2^F (magnitudes up to 384), exactly for
  every value of at least 2^-126 x 2^F; smaller ones (only in a row whose codes span more
  than about 125 binades) become zeros of their sign. The factors go to a float32 [N] row
  scale (2^-126 to 2^121, exact powers of two) that the matrix kernel applies as a row
  scale.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ...core.formats import as_uint8
from ...core.problem import Problem
from ..launch import JitLauncher
from .config import (  # F = a row's largest e8m0 code - MX_BIAS
    MX_BIAS,
    MX_ROUTE_BF16,
    MX_ROUTE_E4M3,
    MX_ROUTE_SPLIT,
    MX_SPAN,
    MX_SPLIT_SHIFT,
    MX_SPLIT_SPAN,
    TILE,
)

ROWS = 16  # weight rows a program widens
BK = 128  # K per step (kv_c is a multiple of 128 where this is used)


@triton.jit
def _e2m1_as_e4m3(n, d):
    """e4m3 bits of e2m1 code ``n`` times 2^d, d in [-5, 6] (exact and normal: biased
    exponents 1 to 15), as int32."""
    m = n & 7  # the magnitude's code: 0, 0.5, 1, 1.5, 2, 3, 4, 6
    e = tl.where(m >= 2, (m >> 1) - 1, -1) + d  # the value's binary exponent
    mag = tl.where(m > 0, ((e + 7) << 3) | (tl.where(m >= 2, m & 1, 0) << 2), 0)
    return mag | ((n & 8) << 4)


@triton.jit
def _e2m1_as_bf16(n, d):
    """bf16 bits of e2m1 code ``n`` times 2^d, as int32: exact, but a value below 2^-126 is a
    zero of its sign."""
    m = n & 7
    # m's value (0.5 to 6) is (1 + (m & 1) / 2) x 2^((m >> 1) - 1) from m = 2; 0.5 is 2^-1.
    e = tl.where(m >= 2, (m >> 1) - 1, -1) + d
    mag = tl.where((m > 0) & (e >= -126), ((e + 127) << 7) | (tl.where(m >= 2, m & 1, 0) << 6), 0)
    return mag | ((n & 8) << 12)


@triton.jit
def _widened(byte, d, BF16: tl.constexpr, ROWS: tl.constexpr, BK: tl.constexpr):
    """The [ROWS, BK] values of [ROWS, BK / 2] packed e2m1 bytes (low nibble first), each
    times 2^d (d a byte's), as bf16 or e4m3 bits."""
    if BF16:
        lo, hi = _e2m1_as_bf16(byte & 15, d), _e2m1_as_bf16(byte >> 4, d)
    else:
        lo, hi = _e2m1_as_e4m3(byte & 15, d), _e2m1_as_e4m3(byte >> 4, d)
    return tl.reshape(tl.join(lo, hi), [ROWS, BK])


@triton.jit
def widen_weight_kernel(w_ptr, ws_ptr, out_ptr, factor_ptr, n_rows, ws_ld,
                        K: tl.constexpr, MX: tl.constexpr, ROWS: tl.constexpr,
                        BK: tl.constexpr):
    """Rows [pid * ROWS, +ROWS) of the weight [n_rows, K] widened into ``out`` (bf16): fp8
    values as they are; MXFP4 (packed [n_rows, K / 2], codes [n_rows, ws_ld]) as value / 2^F
    per row, with 2^F stored to ``factor`` (float32 [n_rows]). MXFP4 is widened in integer
    arithmetic, bf16 bits from the nibble and the exponent, so no float rounding or
    flushing mode (the interpreter's or a GPU's) can change a bit."""
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = (r < n_rows)[:, None]
    r64 = r.to(tl.int64)[:, None]
    if MX:
        NG: tl.constexpr = K // 32
        g = tl.arange(0, triton.next_power_of_2(NG))
        codes = tl.load(ws_ptr + r64 * ws_ld + g[None, :], mask=rmask & (g < NG)[None, :],
                        other=0).to(tl.int32)
        # F kept in float32's normal range: a row whose codes are all below 7 gets F = -126.
        f = tl.maximum(tl.max(codes, axis=1) - MX_BIAS, -126)
        tl.store(factor_ptr + r, ((f + 127) << 23).to(tl.float32, bitcast=True), mask=r < n_rows)
    for k0 in tl.static_range(0, K, BK):
        k = k0 + tl.arange(0, BK)
        if MX:
            byte = tl.load(w_ptr + r64 * (K // 2) + (k // 2)[None, :], mask=rmask,
                           other=0).to(tl.int32)
            nib = (byte >> ((k % 2) * 4)[None, :]) & 15
            code = tl.load(ws_ptr + r64 * ws_ld + (k // 32)[None, :], mask=rmask,
                           other=0).to(tl.int32)
            # Each value times 2^(code - 127 - F): at most 384, below 2^-126 a signed zero.
            v = _e2m1_as_bf16(nib, code - 127 - f[:, None]).to(tl.int16).to(tl.bfloat16,
                                                                             bitcast=True)
        else:
            v = tl.load(w_ptr + r64 * K + k[None, :], mask=rmask).to(tl.bfloat16)
        tl.store(out_ptr + r64 * K + k[None, :], v, mask=rmask)


# MXFP4 over an fp8 cache, widened once a call for the kernel's TMA loader: an item (ITEM
# weight rows) goes as e4m3 when every row's codes span at most MX_SPAN binades (the rule of
# the in-kernel widener, conversions.py, and of plan.mx_routes), as two e4m3 parts when they
# span at most MX_SPLIT_SPAN (config.py: the split route), else as bf16.
ITEM = TILE
MX_ROWS = 32  # weight rows a program widens (a quarter item: enough programs to fill the GPU)


@triton.jit
def widen_mx_items_kernel(w_ptr, ws_ptr, out8_ptr, out16_ptr, info_ptr, ws_ld,
                          K: tl.constexpr, ITEM: tl.constexpr, ROWS: tl.constexpr,
                          BK: tl.constexpr):
    """K chunk ``program_id(1)`` of weight rows [program_id(0) x ROWS, + ROWS) of an MXFP4
    weight (packed [N, K / 2], codes [N, ws_ld]) written into its copy, 2 K bytes a row
    (``out8`` as bytes, ``out16`` the same memory as int16). Each value is its e2m1 value
    times 2^d, d = its group's code - the row's largest code + 6, by the route of the rows'
    item (the widest span of codes among its ITEM rows):

    - e4m3 (every row within MX_SPAN: every value then exact and normal), in the row's first
      K bytes;
    - split (within MX_SPLIT_SPAN): the groups of d >= -5 as e4m3 in the first K bytes, the
      others times 2^MX_SPLIT_SHIFT as e4m3 in the last K bytes (zeros where the other part
      holds the group), both exact;
    - bf16 over the whole row.

    A K chunk's programs write each row's info: 4 (F - shift) + route, F = the row's largest
    code - MX_BIAS, shift MX_SPLIT_SHIFT on the split route (else 0), as hopper_ws's
    epilogue reads it. Integer arithmetic only, so the bits are the same under the
    interpreter and on a GPU, and the same as the in-kernel widener writes wherever a value
    is at least 2^-126 (it has no split route)."""
    r0 = tl.program_id(0) * ROWS
    kb = tl.program_id(1)
    NG: tl.constexpr = K // 32
    G: tl.constexpr = BK // 32  # scale groups a K chunk
    g = tl.arange(0, triton.next_power_of_2(NG))
    gmask = (g < NG)[None, :]
    # The route: every row of the item (its codes, 4 bytes a 128-value chunk, are few).
    ri = ((r0 // ITEM) * ITEM + tl.arange(0, ITEM)).to(tl.int64)[:, None]
    icodes = tl.load(ws_ptr + ri * ws_ld + g[None, :], mask=gmask, other=0).to(tl.int32)
    span = tl.max(tl.max(icodes, axis=1) - tl.min(tl.where(gmask, icodes, 255), axis=1),
                  axis=0)
    route = tl.where(span <= MX_SPAN, MX_ROUTE_E4M3,
                     tl.where(span <= MX_SPLIT_SPAN, MX_ROUTE_SPLIT, MX_ROUTE_BF16))
    r = r0 + tl.arange(0, ROWS)
    r64 = r.to(tl.int64)[:, None]
    top = tl.max(tl.load(ws_ptr + r64 * ws_ld + g[None, :], mask=gmask, other=0).to(tl.int32),
                 axis=1)
    if kb == 0:
        shift = tl.where(route == MX_ROUTE_SPLIT, MX_SPLIT_SHIFT, 0)
        tl.store(info_ptr + r, (top - MX_BIAS - shift) * 4 + route)
    # Each packed byte's d (16 bytes a scale group), its two values low nibble first.
    code = tl.load(ws_ptr + r64 * ws_ld + (kb * G + tl.arange(0, G))[None, :]).to(tl.int32)
    d = tl.reshape(tl.broadcast_to((code - top[:, None] + 6)[:, :, None], [ROWS, G, 16]),
                   [ROWS, BK // 2])
    j = kb * (BK // 2) + tl.arange(0, BK // 2)
    byte = tl.load(w_ptr + r64 * (K // 2) + j[None, :]).to(tl.int32)
    k = kb * BK + tl.arange(0, BK)
    if route == MX_ROUTE_BF16:
        v = _widened(byte, d, True, ROWS, BK)
        tl.store(out16_ptr + r64 * K + k[None, :], v.to(tl.int16))
    else:
        # Each value's group below e4m3's range (on the e4m3 route none is).
        low = d < -5
        low2 = tl.reshape(tl.join(low, low), [ROWS, BK])
        v = _widened(byte, d, False, ROWS, BK)
        tl.store(out8_ptr + r64 * (2 * K) + k[None, :], tl.where(low2, 0, v).to(tl.uint8))
        if route == MX_ROUTE_SPLIT:
            v = _widened(byte, d + MX_SPLIT_SHIFT, False, ROWS, BK)
            tl.store(out8_ptr + r64 * (2 * K) + K + k[None, :],
                     tl.where(low2, v, 0).to(tl.uint8))


def widened_problem(prob: Problem) -> Problem:
    """The problem the matrix kernel runs once the weight is widened: a bf16 weight with the
    fp8 weight's own scale, or MXFP4's row factors as a float32 row scale."""
    if prob.weight_format == "mxfp4":
        return dataclasses.replace(prob, weight_format="bf16", weight_dtype=torch.bfloat16,
                                   weight_scale="row", scale_dtype=None)
    return dataclasses.replace(prob, weight_format="bf16", weight_dtype=torch.bfloat16,
                               weight_scale=prob.scale)


def widened_shapes(prob: Problem, n_rows: int) -> tuple[tuple[int, int], tuple[int] | None]:
    """Shapes of the bf16 copy and of the row factors (None: the weight keeps its scale)."""
    return (n_rows, prob.kv_c_dim), ((n_rows,) if prob.weight_format == "mxfp4" else None)


def _widen_launch(mx: bool, weight: torch.Tensor, scale: torch.Tensor | None, kv_c: int
                  ) -> JitLauncher:
    """The launch of ``widen_weight_kernel`` over a weight of this shape and format, called
    with (weight, its scale, the copy, the factors) as tensors or addresses."""
    n_rows = weight.shape[0]
    # A float4 / e8m0 dtype is read as uint8 (Triton 3.6 takes neither).
    views = mx and (as_uint8(weight) is not weight or as_uint8(scale) is not scale)
    ws_ld = scale.stride(0) if mx else 0

    def make(x) -> list:
        w, ws, out, factor = x
        if views and type(w) is not int:
            w, ws = as_uint8(w), as_uint8(ws)
        # Without MXFP4 the scale and factors are never read: stand-in pointers.
        return [w, ws if mx else w, out, factor if mx else out, n_rows, ws_ld]

    return JitLauncher(widen_weight_kernel, (triton.cdiv(n_rows, ROWS),), 6,
                       dict(K=kv_c, MX=mx, ROWS=ROWS, BK=BK, num_warps=4), make)


class _WidenedLaunch:
    """The call protocol of a launch that widens the weight first (a JitLauncher's): per
    call, allocate the copy and any scale of its own (``_buffers``) on the call's stream,
    widen into them (``widen``, given (weight, its scale, the copy, the copy's scale)), then
    launch ``main`` with them in the weight's and its scale's places (a copy with no scale
    of its own keeps the weight's). The buffers live in the caching allocator for the call
    (inside a CUDA graph's capture, in its pool: each replay widens the weight as it is)."""

    main: JitLauncher
    widen: JitLauncher

    def _buffers(self, dev: torch.device
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(the copy as ``widen`` writes it, as ``main`` reads it, its scale or None)."""
        raise NotImplementedError

    def __call__(self, c, aligned: bool | None = None, device: int | None = None,
                 addresses=None):
        out, weight, scale = self._buffers(c.kv_proj_weight.device)
        widened = c._replace(kv_proj_weight=weight,
                             kv_proj_scale=c.kv_proj_scale if scale is None else scale)
        src = (c.kv_proj_weight, c.kv_proj_scale, out, scale)
        if addresses is None:
            self.widen(src, aligned, device)
            return self.main(widened, aligned, device)
        out_p = out.data_ptr()
        scale_p = addresses.kv_proj_scale if scale is None else scale.data_ptr()
        self.widen(src, aligned, device,
                   (addresses.kv_proj_weight, addresses.kv_proj_scale, out_p, scale_p))
        return self.main(widened, aligned, device,
                         addresses._replace(kv_proj_weight=out_p, kv_proj_scale=scale_p))


class WidenedWeight(_WidenedLaunch):
    """A plan's launch for an fp8 or MXFP4 weight run by a bf16 kernel: the bf16 copy (and
    MXFP4's row factors), then ``main``, the bf16 weight's launch (from ``widened_problem``)."""

    def __init__(self, prob: Problem, weight: torch.Tensor, scale: torch.Tensor | None, main):
        self.mx = prob.weight_format == "mxfp4"
        self.shape, self.factor_shape = widened_shapes(prob, weight.shape[0])
        self.main = main
        self.widen = _widen_launch(self.mx, weight, scale, prob.kv_c_dim)

    def _buffers(self, dev):
        out = torch.empty(self.shape, dtype=torch.bfloat16, device=dev)
        factor = (torch.empty(self.factor_shape, dtype=torch.float32, device=dev)
                  if self.mx else None)
        return out, out, factor


def widened_items_shapes(n_rows: int, kv_c: int) -> tuple[tuple[int, int], tuple[int]]:
    """Shapes of MXFP4's copy over an fp8 cache (2 kv_c bytes a row: an e4m3 row in the first
    kv_c, a split one's two parts in both halves, a bf16 one over all) and of its rows'
    info."""
    return (n_rows, 2 * kv_c), (n_rows,)


def _mx_items_launch(weight: torch.Tensor, scale: torch.Tensor, kv_c: int) -> JitLauncher:
    """The launch of ``widen_mx_items_kernel`` over an MXFP4 weight of this shape, called
    with (weight, its codes, the copy as bytes, the info) as tensors or addresses."""
    views = as_uint8(weight) is not weight or as_uint8(scale) is not scale

    def make(x) -> list:
        w, ws, out, info = x
        if type(w) is not int:
            out16 = out.view(torch.int16)
            if views:
                w, ws = as_uint8(w), as_uint8(ws)
        else:
            out16 = out  # an address: the same memory
        return [w, ws, out, out16, info, scale.stride(0)]

    return JitLauncher(widen_mx_items_kernel, (weight.shape[0] // MX_ROWS, kv_c // BK), 6,
                       dict(K=kv_c, ITEM=ITEM, ROWS=MX_ROWS, BK=BK, num_warps=4), make)


class WidenedItems(_WidenedLaunch):
    """A plan's launch for an MXFP4 weight over an fp8 cache widened once a call: the copy
    (each item's rows as e4m3, two e4m3 parts or bf16: ``widened_items_shapes``) and the
    rows' info (int32), then ``main``, the MXFP4 launch that loads the copy by TMA."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, kv_c: int, main):
        self.shape, self.info_shape = widened_items_shapes(weight.shape[0], kv_c)
        self.main = main
        self.widen = _mx_items_launch(weight, scale, kv_c)

    def _buffers(self, dev):
        out = torch.empty(self.shape, dtype=torch.uint8, device=dev)
        return out, out.view(torch.float8_e4m3fn), torch.empty(self.info_shape,
                                                               dtype=torch.int32, device=dev)


def widen_mx_items(weight: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The copy (uint8 [N, 2 kv_c]) and the rows' info (int32 [N]) ``WidenedItems`` makes of
    an MXFP4 weight, on the weight's device (the Triton interpreter on a CPU)."""
    kv_c = weight.shape[1] * 2
    shape, info_shape = widened_items_shapes(weight.shape[0], kv_c)
    out = torch.empty(shape, dtype=torch.uint8, device=weight.device)
    info = torch.empty(info_shape, dtype=torch.int32, device=weight.device)
    _mx_items_launch(weight, scale, kv_c)((weight, scale, out, info))
    return out, info


def widen_weight(weight: torch.Tensor, scale: torch.Tensor | None, weight_format: str
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The bf16 copy of an fp8 (``fp8_row``, ``fp8_block``) or MXFP4 weight and, for MXFP4,
    its float32 row factors (copy x factor[:, None] is the weight): what ``WidenedWeight``
    launches, on the weight's device (the Triton interpreter on a CPU)."""
    mx = weight_format == "mxfp4"
    n_rows, k = weight.shape[0], weight.shape[1] * (2 if mx else 1)
    out = torch.empty((n_rows, k), dtype=torch.bfloat16, device=weight.device)
    factor = torch.empty(n_rows, dtype=torch.float32, device=weight.device) if mx else None
    _widen_launch(mx, weight, scale, k)((weight, scale, out, factor))
    return out, factor
