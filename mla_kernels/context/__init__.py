"""The cached-prefix part of MLA prefill: n new queries over C cached tokens, by expanding
the latent into per-head K/V (``gather_kv_b_proj``) and attending, or by attending over the
latent itself with the up-projections absorbed. Its story: README.md beside this file; its
contract: docs/context-path.md."""

from .absorbed import (
    AbsorbedPlan,
    AbsorbedWeights,
    absorb_weights,
    absorbed_prefix_attention,
    plan_absorbed,
)
from .attention import prefix_attention, split_count
from .expanded import ExpandedPlan, expand_and_attend, plan_expanded
from .memory import absorbed_peak_bytes, expanded_peak_bytes
from .merge import merge_attention
from .reference import Attention, attention_reference, prefix_reference

__all__ = [
    "AbsorbedPlan",
    "AbsorbedWeights",
    "Attention",
    "ExpandedPlan",
    "absorb_weights",
    "absorbed_peak_bytes",
    "absorbed_prefix_attention",
    "attention_reference",
    "expand_and_attend",
    "expanded_peak_bytes",
    "merge_attention",
    "plan_absorbed",
    "plan_expanded",
    "prefix_attention",
    "prefix_reference",
    "split_count",
]
