"""Gluon's names for the same operations and constructs under triton 3.6 and the releases after it."""

from __future__ import annotations

import types

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, tma
from triton.language.core import _aggregate, base_value

# Asynchronous copies under either release's names: triton 3.6 has async_copy_global_to_shared
# (TMA and cp.async) and async_copy_shared_to_global; newer releases async_load / async_store.
tma_io = types.ModuleType("tma_io")
tma_io.load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_io.store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
cp_async = types.ModuleType("cp_async")
cp_async.load = (getattr(async_copy, "async_load", None)
                 or async_copy.async_copy_global_to_shared)
# A shared buffer viewed as another dtype and shape: _reinterpret in 3.6, reinterpret later.
smem = types.ModuleType("smem")
smem.reinterpret = (getattr(gl.shared_memory_descriptor, "reinterpret", None)
                    or gl.shared_memory_descriptor._reinterpret)
# A barrier among one partition's warps: gl.thread_barrier in 3.6, gl.barrier later.
partition_sync = getattr(gl, "barrier", None) or gl.thread_barrier

# Field types of bundles: a shared buffer (or barrier array); a kernel argument that Triton
# may pass as a constant (an int equal to 1 is specialised to one); a TMA descriptor, or None
# where the weight is read by pointer.
Buffer = gl.shared_memory_descriptor
Scalar = gl.tensor | gl.constexpr
Descriptor = gl.base_value

# Gluon's aggregate (named fields passed to jit functions and partitions as one value):
# gluon.aggregate in newer releases, the same class builder in triton.language.core in 3.6.
aggregate = getattr(gluon, "aggregate", None) or _aggregate


def bundle(cls):
    """``cls`` as an aggregate built positionally from its annotated fields.

    Both releases call a constructor that is a constexpr function with its constexpr
    arguments unwrapped, so a field given a plain value (a constexpr, or an int argument
    Triton specialised to a constant) holds it as a constexpr again. A module that defines a
    bundle keeps its annotations evaluated (no ``from __future__ import annotations``):
    triton 3.6 checks each field against its annotation as given.
    """
    names = tuple(cls.__annotations__)

    def __init__(self, *values):
        assert len(values) == len(names), f"{cls.__name__}: expected {names}, got {values}"
        for name, value in zip(names, values, strict=True):
            setattr(self, name, value if isinstance(value, base_value) else gl.constexpr(value))

    cls.__init__ = gluon.constexpr_function(__init__)
    return aggregate(cls)


@gluon.jit
def replaced(t, i: gl.constexpr, v):
    """Tuple ``t`` with entry ``i`` replaced by ``v`` (registers carried in a tuple, one
    entry renewed at a time)."""
    out = ()
    for j in gl.static_range(len(t)):
        if j == i:
            out = out + (v,)
        else:
            out = out + (t[j],)
    return out
