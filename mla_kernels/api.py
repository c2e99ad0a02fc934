"""The public entry point: gather_kv_b_proj."""

from __future__ import annotations

import torch

from .designs import DesignConfig, resolve
from .devices import INTERPRETER, device_spec
from .problem import GatherArgs, check_arguments, interpreting


def gather_kv_b_proj(
    k_buffer: torch.Tensor,
    k_scale: torch.Tensor | None,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_prefix_sum_context_lens: torch.Tensor,
    kv_proj_weight: torch.Tensor,
    kv_proj_scale: torch.Tensor | None,
    k_prefix: torch.Tensor,
    v_prefix: torch.Tensor,
    *,
    variant: str = "auto",
    max_context_len: int | None = None,
    config: DesignConfig | dict | None = None,
) -> None:
    """Expand the paged latent cache into per-head K and V, writing k_prefix and v_prefix.

    The contract (arguments, formats, what is checked when, tolerances) is docs/contract.md.
    ``variant`` names the design (``mla_kernels.variant_names()``); ``max_context_len``, a
    host int bounding every sequence's length, may shrink the grid; ``config`` overrides
    the design's launch parameters (its config dataclass, or a mapping of its fields).
    Every argument is checked before anything is launched, so a ValueError leaves the
    outputs untouched. The launch reads no tensor contents on the host.
    """
    args = GatherArgs(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                      kv_proj_weight, kv_proj_scale, k_prefix, v_prefix)
    prob = check_arguments(*args)
    if max_context_len is not None and (not isinstance(max_context_len, int)
                                        or max_context_len < 0):
        raise ValueError(f"max_context_len: expected a host int >= 0 or None, "
                         f"got {max_context_len!r}")
    device = INTERPRETER if interpreting() else device_spec(k_buffer.device)
    design, cfg = resolve(variant, prob, device, config)
    design.launch(prob, args, max_context_len, cfg, device)
