"""gather_kv_b_proj as a PyTorch custom op, for models compiled with ``torch.compile``.

``torch.ops.mla_kernels.gather_kv_b_proj`` takes the nine arguments and the public call's
keywords ``variant``, ``max_context_len``, ``config`` (a config's repr, as
``designs.parse_config`` reads it: a schema cannot carry a dataclass) and ``validate``;
it mutates ``k_prefix`` and ``v_prefix`` and returns nothing. Its fake implementation runs
the argument checks and the aliasing rule on the traced tensors, so a bad call fails while
the graph is traced, before anything runs: a traced graph may hand the op copies of its
arguments, and an overlap of the caller's tensors shows only there. Eager callers should
call ``mla_kernels.gather_kv_b_proj`` itself: the op's dispatch adds host time per call.
"""

from __future__ import annotations

import torch

from .api import gather_kv_b_proj as _gather
from .api import target_device
from .core.problem import GatherArgs, check_aliasing_traced, check_arguments, check_hint
from .designs import resolve


@torch.library.custom_op("mla_kernels::gather_kv_b_proj", mutates_args=("k_prefix", "v_prefix"))
def gather_kv_b_proj(k_buffer: torch.Tensor, k_scale: torch.Tensor | None,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                     kv_prefix_sum_context_lens: torch.Tensor, kv_proj_weight: torch.Tensor,
                     kv_proj_scale: torch.Tensor | None, k_prefix: torch.Tensor,
                     v_prefix: torch.Tensor, variant: str = "auto",
                     max_context_len: int | None = None, config: str | None = None,
                     validate: bool | None = None) -> None:
    _gather(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
            kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, variant=variant,
            max_context_len=max_context_len, config=config, validate=validate)


@gather_kv_b_proj.register_fake
def _fake(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens, kv_proj_weight,
          kv_proj_scale, k_prefix, v_prefix, variant="auto", max_context_len=None, config=None,
          validate=None) -> None:
    args = GatherArgs(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                      kv_proj_weight, kv_proj_scale, k_prefix, v_prefix)
    check_hint(max_context_len)
    prob = check_arguments(*args)
    check_aliasing_traced(args)
    resolve(variant, prob, target_device(k_buffer.device), config)
    return None
