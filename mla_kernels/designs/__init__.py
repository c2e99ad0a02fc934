"""The registry of designs and the one rule for what a variant name runs.

Each design lives in one home under this package (kernel, config, grid, launch, work model,
the predicate "serves this problem on this device"); ``HOMES`` lists them. ``resolve`` is
the single answer to "what does ``variant`` run for this problem on this device", ``auto``
included: the public call, the occupancy model, the compile checks and the harness all ask
it. It takes a registry device, so a model of the H200 drawn on a CPU shows what the H200
would run.
"""

from __future__ import annotations

from ..core import tuning
from ..core.devices import DeviceSpec
from ..core.problem import Problem
from . import chunk_loop, tiled
from .design import Design, DesignConfig, parse_config

HOMES = [chunk_loop, tiled]
try:  # Gluon's Hopper API (triton >= 3.4); without it the sm_90 design is not offered
    from . import hopper_ws
except ImportError:  # pragma: no cover - a triton without Gluon's Hopper module
    hopper_ws = None
else:
    HOMES.append(hopper_ws)

DESIGNS: dict[str, Design] = {d.name: d for home in HOMES for d in home.DESIGNS}


def register(design: Design) -> Design:
    """Add a design to the registry (a new home's one registry entry, or a test's)."""
    if design.name in DESIGNS or design.name == "auto":
        raise ValueError(f"design: expected a new name, got {design.name!r} (taken)")
    DESIGNS[design.name] = design
    return design


def unregister(name: str) -> None:
    DESIGNS.pop(name, None)


def variant_names() -> list[str]:
    return ["auto", *DESIGNS]


def _auto(prob: Problem, device: DeviceSpec) -> tuple[Design, dict]:
    """auto's choice: the tuning table's entry for this device (or, for a GPU the table does
    not name, its architecture's: ``tuning.table_device``) and problem class, or the portable
    fallback where the entry's design cannot run the problem."""
    name, fields = tuning.lookup(tuning.table_device(device.name, device.arch),
                                 prob.weight_format, prob.cache_name, prob.block_size,
                                 prob.out_rows, prob.out_is_fp8, (prob.nope_dim, prob.v_dim),
                                 prob.scale)
    design = DESIGNS.get(name)
    if design is None or not design.runs(prob, device):
        name, fields = tuning.FALLBACK
        design = DESIGNS[name]
    return design, fields


def resolve(variant: str, prob: Problem, device: DeviceSpec,
            config: DesignConfig | dict | None = None) -> tuple[Design, DesignConfig]:
    """The design and launch config ``variant`` runs for ``prob`` on ``device``, or a
    ValueError naming ``variant`` (the names valid here) or ``config``.

    ``config`` (None, the design's config dataclass, or a mapping of its fields) overrides
    the design's default, or auto's tuned config.
    """
    if not isinstance(variant, str):
        raise ValueError(f"variant: expected a design name (str), one of {variant_names()}, "
                         f"got {variant!r}")
    if variant == "auto":
        design, tuned = _auto(prob, device)
        return design, design.config(config if config is not None else tuned)
    design = DESIGNS.get(variant)
    if design is None:
        raise ValueError(f"variant: expected one of {variant_names()}, got {variant!r}")
    if not design.runs(prob, device):
        valid = ["auto"] + [d.name for d in DESIGNS.values() if d.runs(prob, device)]
        raise ValueError(f"variant: expected one of {valid} for a {prob.weight_format} weight, "
                         f"{prob.cache_name} cache on {device.name}, got {variant!r}")
    return design, design.config(config)


__all__ = ["DESIGNS", "Design", "DesignConfig", "parse_config", "register", "resolve",
           "unregister", "variant_names"]
