"""gather_kv_b_proj as a PyTorch custom op, for models compiled with ``torch.compile``.

``torch.ops.mla_kernels.gather_kv_b_proj`` takes the nine arguments and the public call's
keywords ``variant``, ``max_context_len``, ``config`` (a config's repr, as
``designs.parse_config`` reads it: a schema cannot carry a dataclass) and ``validate``;
and last the FP8 outputs' scales ``k_out_scale`` and ``v_out_scale`` (None for other
outputs; last, so a caller passing ``variant`` by position keeps working); it mutates
``k_prefix`` and ``v_prefix`` and returns nothing.

It is two ops in turn. ``check_gather_args`` reads nothing but the arguments' addresses,
byte sizes and negation bits and mutates nothing, so a compiled graph hands it the caller's
own tensors on every call: the aliasing rule (by address ranges, whatever storage object
holds them) and the negative-view rule are checked there, before anything is written.
``_gather_kv_b_proj`` then launches; functionalization (``aot_eager``) may hand it copies of
the outputs, written back after it returns, where no overlap with the caller's memory shows.
Its fake implementation runs the argument checks on the traced tensors, so a call with bad
shapes fails while the graph is traced. Eager callers should call
``mla_kernels.gather_kv_b_proj`` itself: the ops' dispatch adds host time per call.
"""

from __future__ import annotations

import torch

from .api import gather_kv_b_proj as _gather
from .api import target_device
from .core.problem import (
    GatherArgs,
    check_aliasing,
    check_aliasing_traced,
    check_arguments,
    check_hint,
    check_negation,
)
from .designs import resolve


@torch.library.custom_op("mla_kernels::check_gather_args", mutates_args=())
def check_gather_args(k_buffer: torch.Tensor, k_scale: torch.Tensor | None,
                      kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
                      kv_prefix_sum_context_lens: torch.Tensor, kv_proj_weight: torch.Tensor,
                      kv_proj_scale: torch.Tensor | None, k_prefix: torch.Tensor,
                      v_prefix: torch.Tensor, k_out_scale: torch.Tensor | None = None,
                      v_out_scale: torch.Tensor | None = None) -> None:
    args = GatherArgs(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                      kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, k_out_scale,
                      v_out_scale)
    check_negation(args)
    if k_prefix.is_contiguous() and v_prefix.is_contiguous():
        # Byte extents are data_ptr + nbytes only for contiguous tensors; a strided one is
        # refused by the argument checks that follow.
        check_aliasing(args)


@check_gather_args.register_fake
def _check_fake(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, k_out_scale=None,
                v_out_scale=None) -> None:
    return None


# It returns nothing and mutates nothing: without this a compiled graph would drop it.
torch.fx.node.has_side_effect(torch.ops.mla_kernels.check_gather_args.default)


@torch.library.custom_op("mla_kernels::_gather_kv_b_proj",
                         mutates_args=("k_prefix", "v_prefix"))
def _gather_op(k_buffer: torch.Tensor, k_scale: torch.Tensor | None,
               kv_indptr: torch.Tensor, kv_indices: torch.Tensor,
               kv_prefix_sum_context_lens: torch.Tensor, kv_proj_weight: torch.Tensor,
               kv_proj_scale: torch.Tensor | None, k_prefix: torch.Tensor,
               v_prefix: torch.Tensor, variant: str = "auto",
               max_context_len: int | None = None, config: str | None = None,
               validate: bool | None = None, k_out_scale: torch.Tensor | None = None,
               v_out_scale: torch.Tensor | None = None) -> None:
    _gather(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
            kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, k_out_scale, v_out_scale,
            variant=variant, max_context_len=max_context_len, config=config,
            validate=validate)


@_gather_op.register_fake
def _fake(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens, kv_proj_weight,
          kv_proj_scale, k_prefix, v_prefix, variant="auto", max_context_len=None, config=None,
          validate=None, k_out_scale=None, v_out_scale=None) -> None:
    args = GatherArgs(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                      kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, k_out_scale,
                      v_out_scale)
    check_hint(max_context_len)
    prob = check_arguments(*args)
    check_aliasing_traced(args)
    resolve(variant, prob, target_device(k_buffer.device), config)
    return None


_LIB = torch.library.Library("mla_kernels", "FRAGMENT")  # kept for the process
_LIB.define(
    "gather_kv_b_proj(Tensor k_buffer, Tensor? k_scale, Tensor kv_indptr, Tensor kv_indices, "
    "Tensor kv_prefix_sum_context_lens, Tensor kv_proj_weight, Tensor? kv_proj_scale, "
    "Tensor(a!) k_prefix, Tensor(b!) v_prefix, str variant=\"auto\", "
    "SymInt? max_context_len=None, str? config=None, bool? validate=None, "
    "Tensor? k_out_scale=None, Tensor? v_out_scale=None) -> ()")


def gather_kv_b_proj(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
                     kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, variant="auto",
                     max_context_len=None, config=None, validate=None, k_out_scale=None,
                     v_out_scale=None) -> None:
    # Composite: a traced graph records the check and the launch as two nodes, the check
    # on the caller's tensors.
    torch.ops.mla_kernels.check_gather_args(
        k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens, kv_proj_weight,
        kv_proj_scale, k_prefix, v_prefix, k_out_scale, v_out_scale)
    torch.ops.mla_kernels._gather_kv_b_proj(
        k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens, kv_proj_weight,
        kv_proj_scale, k_prefix, v_prefix, variant=variant, max_context_len=max_context_len,
        config=config, validate=validate, k_out_scale=k_out_scale, v_out_scale=v_out_scale)


_LIB.impl("gather_kv_b_proj", gather_kv_b_proj, "CompositeImplicitAutograd")


def _check_negative(*args) -> None:
    # torch's fallback for a negative view would hand the op a negated copy (and fail on an
    # op that returns nothing): the view reaches this kernel as it is, and is refused.
    check_negation(GatherArgs(*args))
    check_gather_args(*(t.resolve_neg() if isinstance(t, torch.Tensor) else t for t in args))


_LIB.impl("check_gather_args", _check_negative, "Negative")
