"""Random input sets for the context path: one sequence's paged latent cache and kv_b_proj
weight (``inputs.build_inputs``), and the new tokens' queries, drawn so the scores spread
as a trained model's do (a softmax neither flat nor one-hot).

The queries' K-nope and rope parts are scaled apart, each to ``score_std`` against the
keys it meets (their spread measured on the first tokens), so both parts weigh in the
scores; the weight's row scales span a narrower range than the call's tests draw, since a
few rows 1e5 times the others would make every score theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..context.reference import Attention, prefix_reference
from ..core.reference import gather_kv_b_proj_reference
from ..core.shapes import MLAShape, get_shape
from .inputs import OUT_SCALE_SAMPLE, GatherInputs, build_inputs, sampled_out_scales

FP8 = torch.float8_e4m3fn


@dataclass
class ContextInputs:
    """The cached prefix of one sequence (``cache``: its outputs left empty; the paths
    allocate their own) and the new tokens' queries ``q`` [n, H, nope + pe]; the FP8 K/V
    scales a serving engine would set (``k_out_scale``, ``v_out_scale``: the amax of the
    first tokens' K and V over 448)."""

    cache: GatherInputs
    q: torch.Tensor
    context_len: int
    k_out_scale: torch.Tensor
    v_out_scale: torch.Tensor

    @property
    def new_tokens(self) -> int:
        return self.q.shape[0]

    def args(self) -> tuple:
        """The positional arguments both paths take, in order."""
        c = self.cache
        return (self.q, c.k_buffer, c.k_scale, c.kv_indptr, c.kv_indices, self.context_len,
                c.kv_proj_weight, c.kv_proj_scale)

    def fp8_scales(self) -> dict:
        """The FP8 K/V options of the expanded path."""
        return {"kv_dtype": FP8, "k_out_scale": self.k_out_scale,
                "v_out_scale": self.v_out_scale}

    def reference(self, chunk: int | None = None) -> Attention:
        return prefix_reference(*self.args(), chunk=chunk)


def build_context_inputs(shape: str | MLAShape, context_len: int, new_tokens: int, *, block_size: int = 1,
                         cache_dtype: str = "fp8", weight_format: str = "fp8_row",
                         device: str | torch.device = "cpu", seed: int = 0,
                         score_std: float = 2.0,
                         weight_scale_range: tuple[float, float] = (0.5, 2.0)) -> ContextInputs:
    """A cached prefix of ``context_len`` tokens and ``new_tokens`` queries on ``device``
    (bf16), scores of spread about ``score_std`` at the softmax scale 1 / sqrt(nope + pe)."""
    if type(new_tokens) is not int or new_tokens < 1:
        raise ValueError(f"new_tokens: expected an int >= 1, got {new_tokens!r}")
    if type(score_std) not in (int, float) or not 0 < score_std < float("inf"):  # no bool
        raise ValueError(f"score_std: expected a finite float > 0, got {score_std!r}")
    shp = get_shape(shape)
    inp = build_inputs(shp, [context_len], block_size=block_size, cache_dtype=cache_dtype,
                       weight_format=weight_format, device=device, seed=seed, spare_rows=0,
                       weight_scale_range=weight_scale_range)
    k_scale_out, v_scale_out = sampled_out_scales(
        shp, inp.k_buffer, inp.k_scale, inp.kv_indptr, inp.kv_indices,
        inp.kv_prefix_sum_context_lens, inp.kv_proj_weight, inp.kv_proj_scale, weight_format,
        block_size)
    # The outputs build_inputs made are the whole context's: the paths hold their own.
    inp.k_prefix, inp.v_prefix = inp.k_prefix[:0], inp.v_prefix[:0]
    # The keys' spread, per part, on the first tokens (whole pages).
    sample = min(context_len, max(block_size, OUT_SCALE_SAMPLE // block_size * block_size))
    dev = inp.k_buffer.device
    ptr = torch.tensor([0, -(-sample // block_size)], dtype=torch.int32, device=dev)
    cs = torch.tensor([0, sample], dtype=torch.int32, device=dev)
    k, _ = gather_kv_b_proj_reference(
        (inp.k_buffer, inp.k_scale, ptr, inp.kv_indices, cs, inp.kv_proj_weight,
         inp.kv_proj_scale), num_heads=shp.num_heads, v_head_dim=shp.v_head_dim,
        compute_dtype=torch.float32)
    nope = shp.qk_nope_dim
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(new_tokens, shp.num_heads, shp.k_head_dim, generator=gen)
    # score = q . k / sqrt(d): a part of width w with key spread s_k contributes a spread of
    # about s_q s_k sqrt(w / d); the two parts share the variance.
    d = shp.k_head_dim
    for part, width in ((slice(0, nope), nope), (slice(nope, d), d - nope)):
        s_k = float(k[..., part].float().std()) or 1.0
        q[..., part] *= score_std / (2 ** 0.5 * s_k * (width / d) ** 0.5)
    return ContextInputs(inp, q.to(torch.bfloat16).to(dev), context_len, k_scale_out.to(dev),
                         v_scale_out.to(dev))
