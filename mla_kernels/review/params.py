"""The notebooks' parameters: one table of what each may hold, checked where a notebook starts.

Papermill passes ``-p name value`` as a string, an int or a float, and ``-y`` YAML as typed
values; a notebook run by hand has its parameters cell's defaults. ``checked`` turns any of
these into the value the notebook uses (a list parameter given one value or a string holding
a list becomes a list; a relative path is taken from the repository root, wherever the
kernel runs) or raises a ValueError naming the parameter, what it expects and what it got.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..files import REPO_ROOT
from ..formats import CACHE_DTYPES, WEIGHT_FORMATS
from ..rules import choice, flag, int_in, ints, names, optional, path, positive_float


def _shapes() -> list[str]:
    from ..shapes import SHAPES

    return sorted(SHAPES)


def _variants() -> list[str]:
    from ..designs import variant_names

    return variant_names()


def _devices() -> list[str]:
    from ..devices import DEVICES

    return sorted(DEVICES)


def _any_device() -> list[str]:
    return ["auto", *_devices()]


_positive_int = int_in(1, text=True)
_bool = flag(text=True)

SPECS: dict[str, Callable[[str, Any], Any]] = {
    "shape": choice(_shapes),
    "cache_dtype": choice(CACHE_DTYPES),
    "caches": names(CACHE_DTYPES),
    "weight_format": choice(WEIGHT_FORMATS),
    "weight_formats": names(WEIGHT_FORMATS),
    "block_size": _positive_int,
    "contexts": ints(1, nonempty=True),
    "ragged_contexts": ints(0, nonempty=False),
    "check_contexts": ints(1, nonempty=False),
    "check_ragged": ints(0, nonempty=False),
    "batch": choice(("single", "ragged")),
    "variants": names(_variants),
    "before": choice(_variants),
    "after": choice(_variants),
    "device": choice(_any_device),
    "reference_devices": names(_devices),
    "compute_units": optional(_positive_int, text=True),
    "mode": choice(("measure", "replot")),
    "timing": choice(("graph", "flushed", "graph8")),
    "torch_paths": _bool,
    "design_graphs": _bool,
    "graph8": _bool,
    "ctx": _positive_int,
    "peak_tbps": optional(positive_float(text=True), text=True),
    "copy_tbps": optional(positive_float(text=True), text=True),
    "mm_tflops": optional(positive_float(text=True), text=True),
    "data_dir": path(REPO_ROOT),
    "out_dir": path(REPO_ROOT),
    "reference_csv": path(REPO_ROOT),
    "merged_csv": path(REPO_ROOT),
}


def checked(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter of SPECS present in ``namespace`` (a notebook's globals), checked and
    converted; raises ValueError naming the first bad one."""
    return {name: check(name, namespace[name]) for name, check in SPECS.items()
            if name in namespace}
