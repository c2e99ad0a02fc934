"""The bytes and FLOPs of one call, and the floor they imply on a device.

Minimum bytes: every used latent row read once, the weight (with its scales) once, the
outputs written once. Block tables, k_scale and prefix sums are left out (under 0.1%).
"""

from __future__ import annotations

from ..core.formats import FP8_BLOCK, MX_BLOCK
from ..core.shapes import MLAShape, get_shape

CACHE_BYTES = {"bf16": 2, "fp8": 1, "fp8_fnuz": 1}


def weight_bytes(shape: str | MLAShape, weight_format: str) -> int:
    s = get_shape(shape)
    n, k = s.weight_rows, s.kv_c_dim
    if weight_format == "bf16":
        return n * k * 2
    if weight_format == "fp8_row":
        return n * k + n * 4
    if weight_format == "fp8_block":
        return n * k + (-(-n // FP8_BLOCK)) * (-(-k // FP8_BLOCK)) * 4
    if weight_format == "mxfp4":
        return n * k // 2 + n * (k // MX_BLOCK)
    raise ValueError(f"weight_format: expected bf16, fp8_row, fp8_block or mxfp4, got {weight_format!r}")


def output_bytes(shape: str | MLAShape, tokens: int, out_bytes: int = 2) -> int:
    s = get_shape(shape)
    return tokens * s.num_heads * (s.k_head_dim + s.v_head_dim) * out_bytes


def min_bytes(shape: str | MLAShape, tokens: int, cache_dtype: str, weight_format: str,
              out_bytes: int = 2) -> int:
    """Latent rows read once + weight once + outputs written once."""
    s = get_shape(shape)
    latent = tokens * s.latent_dim * CACHE_BYTES[cache_dtype]
    return latent + weight_bytes(s, weight_format) + output_bytes(s, tokens, out_bytes)


def flops(shape: str | MLAShape, tokens: int) -> int:
    """2 x tokens x heads x (nope + v) x kv_c: the two products per head."""
    s = get_shape(shape)
    return 2 * tokens * s.num_heads * s.head_cols * s.kv_c_dim


def dot_dtype(cache_dtype: str, weight_format: str) -> str:
    """The dtype the designs' dot runs in: fp8 when both operands are fp8, else bf16
    (an MXFP4 dot is bf16 x e2m1, emulated in bf16 on Hopper)."""
    if cache_dtype.startswith("fp8") and weight_format in ("fp8_row", "fp8_block"):
        return "fp8"
    return "bf16"


def route_dot(dot: str, fp8_route_share: float, split_route_share: float = float("nan")
              ) -> str:
    """The dot that ran: ``dot`` (the format's), unless a design reports the shares of its
    work that took the e4m3 route and the split route (MXFP4 on ``hopper_ws``): then the
    routes that ran, joined by "+", of "fp8" (one fp8 dot), "fp8x2" (the split route: two
    fp8 dots over the same product) and "bf16" (the rest)."""
    s = fp8_route_share
    if s != s:  # NaN: no such route, the format's dot ran
        return dot
    s2 = 0.0 if split_route_share != split_route_share else split_route_share
    ran = [name for name, share in (("fp8", s), ("fp8x2", s2), ("bf16", 1.0 - s - s2))
           if share > 1e-12]
    return "+".join(ran) or "bf16"


def route_rate(fp8_route_share: float, fp8_rate: float, bf16_rate: float,
               split_route_share: float = 0.0, fp8x2_rate: float | None = None) -> float:
    """The rate (FLOP per time of the product computed) of a dot split by route,
    time-weighted: the work ``s`` at the fp8 rate, the split route's ``s2`` as two fp8 dots
    a product (twice the FLOPs at ``fp8x2_rate``, that of one fp8 product of twice the K;
    the fp8 rate where None) and the rest at the bf16 rate take ``s / fp8 + 2 s2 / fp8x2 +
    (1 - s - s2) / bf16`` per FLOP."""
    s = fp8_route_share
    s2 = 0.0 if split_route_share != split_route_share else split_route_share
    x2 = fp8_rate if fp8x2_rate is None else fp8x2_rate
    return 1.0 / (s / fp8_rate + 2.0 * s2 / x2 + (1.0 - s - s2) / bf16_rate)


def floors(nbytes: float, nflops: float, copy_tbps: float, mm_tflops: float) -> dict[str, float]:
    """Byte floor, matrix floor and their max, in microseconds."""
    byte_us = nbytes / (copy_tbps * 1e12) * 1e6
    matrix_us = nflops / (mm_tflops * 1e12) * 1e6
    return {"byte_floor_us": byte_us, "matrix_floor_us": matrix_us,
            "floor_us": max(byte_us, matrix_us)}


def arithmetic_intensity(shape: str | MLAShape, tokens: int, cache_dtype: str,
                         weight_format: str) -> float:
    """FLOP per byte of minimum traffic."""
    return flops(shape, tokens) / min_bytes(shape, tokens, cache_dtype, weight_format)
