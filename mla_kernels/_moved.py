"""Module paths of 0.2.0 that moved in 0.3.0, kept importable for one release.

``import mla_kernels.bench`` (or ``from mla_kernels import bench``) still works: the finder
below hands back the module at its new path, with a DeprecationWarning naming it, so both
names are one module object (monkeypatching either patches both).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {f"mla_kernels.{name}": f"mla_kernels.{layer}.{name}"
         for layer, names in (("lab", ("bench", "checks", "compile_check", "matrix",
                                       "measurements", "occupancy", "provenance", "roofline")),
                              ("review", ("analysis", "params", "plotting", "report")))
         for name in names}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {self.new} in 0.3.0; the old path goes in 0.4.0",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module) -> None:  # the module at its new path is already run
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
