"""The floors of the context path's two ways, from their minimum bytes and FLOPs and the
device's rates: for each, max(minimum bytes / copy rate, FLOPs / the matrix rate of the dot
it runs). The expanded path runs two kernels one after the other, each with its floor: the
expansion's (``roofline``: the latent read, the weight, K and V written) and the
attention's (K and V read back, the queries, the output); its floor is their sum. The
absorbed path's minimum bytes are the latent read once, the weight, the queries and the
output; its FLOPs the fold, the attention over the latent (kv_c + pe wide scores, kv_c wide
values, every head) and the projection.

The attention kernels run their dots in bf16 (FP8 K/V and an fp8 latent are widened to bf16
as they are loaded), so their matrix floor is at the bf16 rate; the expansion's dot is its
format's (``roofline.dot_dtype``).

Rates are measured on the GPU (``Rates.measured``: the copy and cuBLAS rates the map
records) or, with no GPU, the device's datasheet figures (``Rates.datasheet``), named so in
every row and figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.devices import DeviceSpec, get_device
from ..core.shapes import MLAShape, get_shape
from .roofline import CACHE_BYTES, dot_dtype, floors, min_bytes, weight_bytes
from .roofline import flops as expansion_flops

Q_BYTES = 2  # bf16 queries and outputs
KV_BYTES = {"bf16": 2, "fp8": 1}  # expanded K/V


@dataclass(frozen=True)
class Rates:
    """Copy rate (TB/s, read + write) and matrix rates (TFLOP/s): the expansion's dot by
    dtype, and the attention's bf16 dot; ``source`` says where they come from."""

    copy_tbps: float
    expand_tflops: dict
    attend_tflops: float
    source: str

    @staticmethod
    def measured(ceilings: dict, attend_tflops: float) -> Rates:
        """From ``bench.measure_ceilings``' dict and cuBLAS's bf16 rate at an attention's
        shape."""
        return Rates(ceilings["copy_tbps"], {"bf16": ceilings["mm_tflops_bf16"],
                                             "fp8": ceilings["mm_tflops_fp8"]},
                     attend_tflops, "measured")

    @staticmethod
    def datasheet(device: DeviceSpec | str) -> Rates:
        d = get_device(device) if isinstance(device, str) else device
        return Rates(d.peak_tbps, {"bf16": d.peak("bf16"), "fp8": d.peak("fp8")},
                     d.peak("bf16"), f"datasheet {d.name}")


def attention_counts(shape: str | MLAShape, context_len: int, new_tokens: int,
                     kv_dtype: str = "bf16") -> tuple[int, int]:
    """(bytes, FLOPs) of attention over expanded K/V: K and V read once, the queries read
    and the outputs written once; 2 x n x H x C x (nope + pe + v)."""
    s = get_shape(shape)
    n, h, c = new_tokens, s.num_heads, context_len
    nbytes = (c * h * (s.k_head_dim + s.v_head_dim) * KV_BYTES[kv_dtype]
              + n * h * (s.k_head_dim + s.v_head_dim) * Q_BYTES)
    return nbytes, 2 * n * h * c * (s.k_head_dim + s.v_head_dim)


def absorbed_counts(shape: str | MLAShape, context_len: int, new_tokens: int,
                    cache_dtype: str, weight_format: str) -> tuple[int, int]:
    """(bytes, FLOPs) of the absorbed path: the latent rows read once, the weight, the
    queries and the outputs; the fold (2 n H nope kv_c), the attention over the latent
    (2 n H C (kv_c + pe + kv_c)) and the projection (2 n H kv_c v)."""
    s = get_shape(shape)
    n, h, c = new_tokens, s.num_heads, context_len
    nbytes = (c * s.latent_dim * CACHE_BYTES[cache_dtype] + weight_bytes(s, weight_format)
              + n * h * (s.k_head_dim + s.v_head_dim) * Q_BYTES)
    fl = 2 * n * h * (s.qk_nope_dim * s.kv_c_dim + c * (s.latent_dim + s.kv_c_dim)
                      + s.kv_c_dim * s.v_head_dim)
    return nbytes, fl


def expanded_floor(shape: str | MLAShape, context_len: int, new_tokens: int, cache_dtype: str,
                   weight_format: str, rates: Rates, kv_dtype: str = "bf16") -> dict[str, float]:
    """The expanded path's floor in µs: ``expand_floor_us`` + ``attend_floor_us``, each the
    max of its byte and matrix floors; ``floor_us`` their sum."""
    e_bytes = min_bytes(shape, context_len, cache_dtype, weight_format, KV_BYTES[kv_dtype])
    e_flops = expansion_flops(shape, context_len)
    dot = dot_dtype(cache_dtype, weight_format)
    e = floors(e_bytes, e_flops, rates.copy_tbps, rates.expand_tflops[dot])
    a_bytes, a_flops = attention_counts(shape, context_len, new_tokens, kv_dtype)
    a = floors(a_bytes, a_flops, rates.copy_tbps, rates.attend_tflops)
    return {"expand_floor_us": e["floor_us"], "attend_floor_us": a["floor_us"],
            "floor_us": e["floor_us"] + a["floor_us"], "min_bytes": e_bytes + a_bytes,
            "flops": e_flops + a_flops}


def absorbed_floor(shape: str | MLAShape, context_len: int, new_tokens: int, cache_dtype: str,
                   weight_format: str, rates: Rates) -> dict[str, float]:
    nbytes, fl = absorbed_counts(shape, context_len, new_tokens, cache_dtype, weight_format)
    f = floors(nbytes, fl, rates.copy_tbps, rates.attend_tflops)
    return {**f, "min_bytes": nbytes, "flops": fl}


def flop_crossover(shape: str | MLAShape) -> float:
    """The new-token count above which expanding takes fewer FLOPs than absorbing (the fold
    and projection aside): H x (nope + v) x kv_c = n x H x ((kv_c + pe + kv_c) - (nope + pe + v))."""
    s = get_shape(shape)
    return s.head_cols * s.kv_c_dim / ((s.latent_dim + s.kv_c_dim) - (s.k_head_dim + s.v_head_dim))
