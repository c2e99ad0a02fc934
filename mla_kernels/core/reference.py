"""Torch reference of gather_kv_b_proj: dequantize everything, gather, multiply in high precision."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .formats import FP8_DTYPES, FP8_MAX, dequantize_weight, detect_weight_format

E4M3_MAX = FP8_MAX[torch.float8_e4m3fn]  # the largest finite e4m3fn value, 448


def token_rows(kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
               kv_prefix_sum_context_lens: torch.Tensor, block_size: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(physical block id, slot) of every cached token, in output-row order."""
    cs = kv_prefix_sum_context_lens.long()
    ctx = cs[1:] - cs[:-1]
    seq = torch.repeat_interleave(torch.arange(ctx.numel(), device=cs.device), ctx)
    t = torch.arange(int(cs[-1]), device=cs.device) - cs[:-1][seq]
    blocks = kv_indices.long()[kv_indptr.long()[seq] + t // block_size]
    return blocks, t % block_size


def gather_kv_b_proj_reference(args: Sequence[torch.Tensor | None], *, num_heads: int, v_head_dim: int = 128,
                               compute_dtype: torch.dtype | None = None, absolute: bool = False
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (k [T, H, nope + pe], v [T, H, v]) for the T = cs[-1] cached tokens of a
    call with ``args``, the call's arguments in order (a ``problem.GatherArgs``; the
    outputs are not read).

    Products are taken in float64 on the CPU and float32 (no TF32) on a GPU unless
    ``compute_dtype`` says otherwise. ``absolute`` computes |latent| @ |W|^T instead: the
    scale against which a dot product's rounding error is measured.
    """
    k_buffer, k_scale, kv_indptr, kv_indices, cs, kv_proj_weight, kv_proj_scale = args[:7]
    if compute_dtype is None:
        compute_dtype = torch.float64 if k_buffer.device.type == "cpu" else torch.float32
    fmt = detect_weight_format(kv_proj_weight, kv_proj_scale)
    w = dequantize_weight(kv_proj_weight, kv_proj_scale, fmt).to(compute_dtype)
    n, kv_c = w.shape
    nope = n // num_heads - v_head_dim

    blocks, slots = token_rows(kv_indptr, kv_indices, cs, k_buffer.shape[1])
    latent = k_buffer[blocks, slots].to(compute_dtype)
    if k_scale is not None and k_buffer.dtype in FP8_DTYPES:
        # The cache's dequant scale; a bf16 cache has nothing to dequantise (docs/contract.md).
        latent = latent * k_scale.to(compute_dtype)
    if absolute:
        latent, w = latent.abs(), w.abs()
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        kv = (latent[:, :kv_c] @ w.T).view(-1, num_heads, nope + v_head_dim)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    rope = latent[:, kv_c:]
    k = torch.cat((kv[..., :nope], rope[:, None, :].expand(-1, num_heads, -1)), dim=-1)
    return k.float(), kv[..., nope:].float()


def quantize_e4m3(value: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """An FP8 output's rule (docs/contract.md): the float32 ``value / scale`` rounded to the
    nearest e4m3fn value (ties to even), magnitudes past 448 (infinities too) saturated to
    448 of their sign, NaN kept NaN."""
    q = value.float() / scale.float()
    return q.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)  # clamp keeps NaN


def e4m3_steps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many e4m3fn values lie between ``a`` and ``b`` (e4m3fn tensors), element by
    element, as int32: 0 where they are equal (+0 and -0 alike), 1 for neighbours. The codes
    are ordered by value first (sign and magnitude to a signed integer); NaN codes read as
    magnitudes past 448."""
    def ordered(x: torch.Tensor) -> torch.Tensor:
        c = x.view(torch.uint8).to(torch.int32)
        mag = c & 0x7F
        return torch.where(c >= 0x80, -mag, mag)
    return (ordered(a) - ordered(b)).abs()
