"""gather_kv_b_proj as a PyTorch custom op, for models compiled with ``torch.compile``.

``torch.ops.mla_kernels.gather_kv_b_proj`` takes the nine arguments, ``variant`` and
``max_context_len``, mutates ``k_prefix`` and ``v_prefix`` and returns nothing; its fake
(meta) implementation does nothing, so a traced graph holds one opaque call and
``torch.compile(fullgraph=True)`` traces a model that calls it. Eager callers should call
``mla_kernels.gather_kv_b_proj`` itself: the op's dispatch adds host time per call.
"""

from __future__ import annotations

import torch

from .api import gather_kv_b_proj as _gather


@torch.library.custom_op("mla_kernels::gather_kv_b_proj", mutates_args=("k_prefix", "v_prefix"))
def gather_kv_b_proj(k_buffer: torch.Tensor, k_scale: torch.Tensor | None,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                     kv_prefix_sum_context_lens: torch.Tensor, kv_proj_weight: torch.Tensor,
                     kv_proj_scale: torch.Tensor | None, k_prefix: torch.Tensor,
                     v_prefix: torch.Tensor, variant: str = "auto",
                     max_context_len: int | None = None) -> None:
    _gather(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
            kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, variant=variant,
            max_context_len=max_context_len)


@gather_kv_b_proj.register_fake
def _fake(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens, kv_proj_weight,
          kv_proj_scale, k_prefix, v_prefix, variant="auto", max_context_len=None) -> None:
    return None
