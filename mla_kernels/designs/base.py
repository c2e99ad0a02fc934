"""Deprecated: the names of ``designs.base`` before 0.3.0, re-exported for one release.

The design record and config base are in ``designs.record``, the launcher and descriptor
cache in ``designs.launch``, the shared host helpers in ``designs.host``, and the config
field rules in ``mla_kernels.rules``.
"""

from __future__ import annotations

import warnings

from ..rules import flag, int_in, one_of, optional
from .host import GRID_YZ_LIMIT, check_grid, context_bound, default_block_k, no_launch, portable_plan, pow2
from .launch import DEBUG, FAST_LAUNCH, DescriptorCache, JitLauncher
from .record import PORTABLE, Design, DesignConfig, coerce_config, parse_config

FLAG = flag()


def positive_int(limit: int):
    return int_in(1, limit)


warnings.warn("mla_kernels.designs.base is deprecated: import from designs.record, "
              "designs.launch, designs.host or mla_kernels.rules", DeprecationWarning,
              stacklevel=2)

__all__ = ["DEBUG", "FAST_LAUNCH", "FLAG", "GRID_YZ_LIMIT", "PORTABLE", "Design",
           "DescriptorCache", "DesignConfig", "JitLauncher", "check_grid", "coerce_config",
           "context_bound", "default_block_k", "no_launch", "one_of", "optional",
           "parse_config", "portable_plan", "positive_int", "pow2"]
