"""The notebooks' parameters: one table of what each may hold, checked where a notebook starts.

Papermill passes ``-p name value`` as a string, an int or a float, and ``-y`` YAML as typed
values; a notebook run by hand has its parameters cell's defaults. ``checked`` turns any of
these into the value the notebook uses (a list parameter given one value or a string holding
a list becomes a list; a relative path is taken from the repository root, wherever the
kernel runs) or raises a ValueError naming the parameter, what it expects and what it got.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from .formats import CACHE_DTYPES, WEIGHT_FORMATS

REPO = Path(__file__).resolve().parents[1]


def _fail(name: str, expected: str, got: Any) -> ValueError:
    return ValueError(f"{name}: expected {expected}, got {got!r}")


def _choice(options: Callable[[], list[str]] | tuple[str, ...]):
    def check(name, v):
        opts = list(options() if callable(options) else options)
        if not isinstance(v, str) or v not in opts:
            raise _fail(name, f"one of {opts}", v)
        return v
    return check


def _as_list(name: str, v) -> list:
    if isinstance(v, str):
        try:
            parsed = yaml.safe_load(v)
        except yaml.YAMLError:
            parsed = v
        v = parsed if isinstance(parsed, list) else [parsed] if parsed is not None else []
    elif isinstance(v, (tuple, set)):
        v = list(v)
    elif not isinstance(v, list):
        v = [v]
    return v


def _int(name: str, v, lo: int | None) -> int:
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if type(v) is not int or (lo is not None and v < lo):
        raise _fail(name, f"an int >= {lo}" if lo is not None else "an int", v)
    return v


def _ints(lo: int, nonempty: bool):
    def check(name, v):
        items = _as_list(name, v)
        if nonempty and not items:
            raise _fail(name, "a non-empty list of ints", v)
        out = []
        for x in items:
            try:
                out.append(_int(name, x, lo))
            except ValueError:
                raise _fail(name, f"a list of ints >= {lo}", v) from None
        return out
    return check


def _names(options: Callable[[], list[str]]):
    def check(name, v):
        items = _as_list(name, v)
        opts = options()
        bad = [x for x in items if not isinstance(x, str) or x not in opts]
        if bad or not items:
            raise _fail(name, f"a non-empty list of names from {opts}", v)
        return items
    return check


def _bool(name: str, v):
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    if type(v) is not bool:
        raise _fail(name, "True or False", v)
    return v


def _positive_int(name: str, v):
    return _int(name, v, 1)


def _optional(check):
    def opt(name, v):
        return None if v is None or (isinstance(v, str) and v.lower() in ("none", "null")) \
            else check(name, v)
    return opt


def _positive_float(name: str, v):
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise _fail(name, "a number > 0", v) from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
        raise _fail(name, "a number > 0", v)
    return float(v)


def _path(name: str, v):
    if not isinstance(v, (str, Path)) or not str(v):
        raise _fail(name, "a path (relative ones from the repository root)", v)
    p = Path(v)
    return str(p if p.is_absolute() else (REPO / p).resolve())


def _shapes() -> list[str]:
    from .shapes import SHAPES

    return sorted(SHAPES)


def _variants() -> list[str]:
    from .designs import variant_names

    return variant_names()


def _devices() -> list[str]:
    from .devices import DEVICES

    return sorted(DEVICES)


def _any_device() -> list[str]:
    return ["auto", *_devices()]


SPECS: dict[str, Callable[[str, Any], Any]] = {
    "shape": _choice(_shapes),
    "cache_dtype": _choice(CACHE_DTYPES),
    "caches": _names(lambda: list(CACHE_DTYPES)),
    "weight_format": _choice(WEIGHT_FORMATS),
    "weight_formats": _names(lambda: list(WEIGHT_FORMATS)),
    "block_size": _positive_int,
    "contexts": _ints(1, nonempty=True),
    "ragged_contexts": _ints(0, nonempty=False),
    "check_contexts": _ints(1, nonempty=False),
    "check_ragged": _ints(0, nonempty=False),
    "batch": _choice(("single", "ragged")),
    "variants": _names(_variants),
    "before": _choice(_variants),
    "after": _choice(_variants),
    "device": _choice(_any_device),
    "reference_devices": _names(_devices),
    "compute_units": _optional(_positive_int),
    "mode": _choice(("measure", "replot")),
    "timing": _choice(("graph", "flushed", "graph8")),
    "torch_paths": _bool,
    "design_graphs": _bool,
    "graph8": _bool,
    "ctx": _positive_int,
    "peak_tbps": _optional(_positive_float),
    "copy_tbps": _optional(_positive_float),
    "mm_tflops": _optional(_positive_float),
    "data_dir": _path,
    "out_dir": _path,
    "reference_csv": _path,
    "merged_csv": _path,
}


def checked(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter of SPECS present in ``namespace`` (a notebook's globals), checked and
    converted; raises ValueError naming the first bad one."""
    return {name: check(name, namespace[name]) for name, check in SPECS.items()
            if name in namespace}
