"""The notebooks' parameters: one table of what each may hold, checked where a notebook starts.

Papermill passes ``-p name value`` as a string, an int or a float, and ``-y`` YAML as typed
values; a notebook run by hand has its parameters cell's defaults. ``checked`` turns any of
these into the value the notebook uses (a list parameter given one value or a string holding
a list becomes a list; a relative path is taken from the repository root, wherever the
kernel runs) or raises a ValueError naming the parameter, what it expects and what it got.

``checked_notebook`` is what a notebook calls first, on its globals: ``checked``, plus the two things a
value alone does not tell. A name papermill injected that the notebook's parameters cell does
not assign (a typo, or a parameter of another notebook) would be ignored: it is an error.
``mode="measure"`` with no GPU would measure nothing: an error naming ``mode``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.formats import CACHE_DTYPES, WEIGHT_FORMATS
from ..core.value_rules import choice, flag, int_in, ints, names, optional, path, positive_float
from ..lab.repo_files import REPO_ROOT


def _shapes() -> list[str]:
    from ..core.shapes import SHAPES

    return sorted(SHAPES)


def _variants() -> list[str]:
    from ..designs import variant_names

    return variant_names()


def _devices() -> list[str]:
    from ..core.devices import DEVICES

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
    "torch_paths": _bool,
    "design_graphs": _bool,
    "graph8": _bool,
    "ctx": _positive_int,
    "new_tokens": ints(1, nonempty=True),
    "chunk_tokens": optional(_positive_int, text=True),
    "kv_dtype": choice(("bf16", "fp8")),
    "peak_tbps": optional(positive_float(text=True), text=True),
    "copy_tbps": optional(positive_float(text=True), text=True),
    "mm_tflops": optional(positive_float(text=True), text=True),
    "data_dir": path(REPO_ROOT),
    "out_dir": path(REPO_ROOT),
    "reference_csv": path(REPO_ROOT),
    "merged_csv": path(REPO_ROOT),
    "mma_rate_csv": optional(path(REPO_ROOT)),
}


def checked(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter of SPECS present in ``namespace`` (a notebook's globals), checked and
    converted; raises ValueError naming the first bad one."""
    return {name: check(name, namespace[name]) for name, check in SPECS.items()
            if name in namespace}


# Papermill's Python translator opens the cell it injects (tagged "injected-parameters", right
# after the cell tagged "parameters") with this comment. The names it adds itself when asked
# to (``--inject-paths``) are no notebook's parameters.
INJECTED_HEADER = "# Parameters"
PAPERMILL_NAMES = ("PAPERMILL_INPUT_PATH", "PAPERMILL_OUTPUT_PATH")


def assigned(source: str) -> list[str]:
    """The names a cell's top-level assignments bind, in order (none if it does not parse)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    out = []
    for node in body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for t in targets:
            out += [n.id for n in ast.walk(t) if isinstance(n, ast.Name) and n.id not in out]
    return out


def injected(history: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(declared, given)`` from a kernel's input history (IPython's ``In``: the source of
    every cell run, in order): ``given``, the names papermill's cell assigned (the last cell
    opening with INJECTED_HEADER); ``declared``, those the cells run before it assigned. In
    a papermill run that is exactly the parameters cell, the one cell run before papermill's.
    Both are empty where nothing was injected (a notebook run by hand)."""
    cells = [str(c) for c in history]
    last = max((i for i, c in enumerate(cells) if c.lstrip().startswith(INJECTED_HEADER)),
               default=None)
    if last is None:
        return [], []
    declared = {n for c in cells[:last] for n in assigned(c)}
    return sorted(declared), assigned(cells[last])


def check_measurable(mode: str, where: str = "") -> None:
    """``mode="measure"`` times kernels on a GPU: a ValueError naming ``mode`` where there is
    none (``where`` says which run asked for it)."""
    from ..core import devices

    if mode == "measure" and devices.live_device() is None:
        raise ValueError("mode: expected 'replot' on a machine with no GPU ('measure' times "
                         f"the kernels on one), got 'measure'{where}")


def checked_notebook(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """A notebook's parameters as it uses them, from its globals (the cell right after the
    parameters cell calls it): every injected name one the parameters cell declares, every
    value ``checked``, and ``mode="measure"`` only with a GPU; else a ValueError naming the
    parameter, what it expects and what it got."""
    declared, given = injected(namespace.get("In") or ())
    for name in given:
        if name not in declared and name not in PAPERMILL_NAMES:
            raise ValueError(f"{name}: expected a parameter of this notebook, one of "
                             f"{declared}, got {namespace.get(name)!r}")
    values = checked(namespace)
    check_measurable(values.get("mode", "replot"))
    return values
