"""Gluon's names for the same operations under triton 3.6 and the releases after it."""

from __future__ import annotations

import types

from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, tma

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
