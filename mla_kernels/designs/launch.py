"""Launching a plan's kernel: through Triton's own path once, then straight to the compiled
kernel (and, for Triton 3.6's launcher layout, to its C entry point) on every later call;
and the host TMA descriptors a plan caches per address."""

from __future__ import annotations

import contextvars
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import triton

from ..core.problem import GatherArgs, interpreting


def _fast_launch_supported() -> bool:
    """The compiled kernel is called as Triton's own JITFunction.run calls it after
    binding; that protocol (``run(grid, stream, function, packed metadata, launch metadata,
    hooks, *bound args)``) is the one of triton 3.5 to 3.9."""
    try:
        major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (3, 5) and (major, minor) <= (3, 9)


FAST_LAUNCH = _fast_launch_supported()
_INTERPRETING = interpreting()  # fixed per process, as Triton's own switch
_INTERPRETER_LOCK = threading.Lock()
try:
    from triton import knobs as TRITON_KNOBS
except ImportError:  # pragma: no cover - a triton without knobs (before 3.4)
    TRITON_KNOBS = None
# Set while a plan is prepared in debug mode: its kernels compile with debug=True, so their
# device-side asserts (a block id out of range) stop the kernel.
DEBUG: contextvars.ContextVar[bool] = contextvars.ContextVar("mla_kernels_debug", default=False)


class JitLauncher:
    """Launches one kernel on one grid with its constants fixed: a plan's launch.

    ``make(c)`` turns one call's arguments (a GatherArgs of tensors, or of their addresses
    as ints) into the kernel's positional arguments; shapes, strides and constants are fixed
    by the plan. ``launcher(c, aligned, device, addresses)``:

    - the first call on a device with ``aligned`` True (every pointer argument 16-byte
      aligned, the one specialisation of a plan's arguments that changes from call to call)
      goes through Triton, which binds the arguments, specialises, compiles and returns the
      compiled kernel;
    - later calls hand ``make(addresses)`` straight to that kernel in the order Triton's
      binder produces: pointers as ints, which Triton's launcher takes as they are (no
      ``data_ptr()`` call, no driver query per pointer). Where the compiled kernel's launcher
      has the layout ``DirectLaunch`` knows (Triton 3.6's), the call goes to its C entry point
      with each TMA descriptor encoded once per address; otherwise through the launcher's
      own Python wrapper, which encodes them on every launch.

    Triton's own path is taken under the interpreter, when ``aligned`` is not True, while a
    launch hook is set (a profiler), and for a first call while a CUDA graph is being
    captured (nothing is cached then).
    """

    def __init__(self, kernel, grid: tuple[int, ...], n_args: int, consts: Mapping[str, Any],
                 make: Callable[[GatherArgs], Sequence]):
        if DEBUG.get():
            consts = dict(consts, debug=True)
        self.kernel, self.grid, self.consts = kernel, tuple(grid) + (1,) * (3 - len(grid)), consts
        self.make, self.n_args = make, n_args
        params = getattr(kernel, "params", None)
        self.tail = None
        if params is not None:  # the values Triton binds after the positional ones
            self.tail = tuple(consts[p.name] if p.name in consts else p.default
                              for p in params[n_args:])
        self.fast = FAST_LAUNCH and self.tail is not None and not _INTERPRETING
        self.compiled: dict[int | None, Any] = {}
        self.direct: dict[int | None, DirectLaunch] = {}

    def _slow(self, args: Sequence):
        if _INTERPRETING:
            with _INTERPRETER_LOCK:  # Triton's interpreter keeps global state per launch
                return self.kernel[self.grid](*args, **self.consts)
        return self.kernel[self.grid](*args, **self.consts)

    def __call__(self, c: GatherArgs, aligned: bool | None = None, device: int | None = None,
                 addresses: GatherArgs | None = None):
        if not (self.fast and aligned) or hooks_set():
            return self._slow(self.make(c))
        direct = self.direct.get(device)
        if direct is not None:
            direct(self.make(c if addresses is None else addresses),
                   torch._C._cuda_getCurrentRawStream(device))
            return direct.compiled
        compiled = self.compiled.get(device)
        if compiled is None:
            compiled = self._slow(self.make(c))
            if (compiled is not None and hasattr(compiled, "packed_metadata")
                    and not torch.cuda.is_current_stream_capturing()):
                self.compiled[device] = compiled
                direct = DirectLaunch.of(compiled, self.grid, self.n_args, self.tail)
                if direct is not None:
                    self.direct[device] = direct
            return compiled
        g0, g1, g2 = self.grid
        compiled.run(g0, g1, g2, torch._C._cuda_getCurrentRawStream(device), compiled.function,
                     compiled.packed_metadata, None, None, None,
                     *self.make(c if addresses is None else addresses), *self.tail)
        return compiled


class DirectLaunch:
    """A compiled kernel's C launch entry called as Triton 3.6's launcher calls it, with the
    tensor-descriptor expansion (a CUtensorMap encoded by the driver, then its shape and
    strides) kept per descriptor object: a plan's descriptors are cached per address and
    never change, so a repeated address costs a dictionary lookup instead of an encoding.

    ``of`` recognises that launcher by its layout (the C entry taking 13 leading arguments,
    a wrapper closing over ``launcher``, ``tensordesc_indices`` and ``tensordesc_meta``, no
    scratch buffers) and returns None for any other, whose own wrapper is then used.
    """

    __slots__ = ("raw", "head", "descs", "encode", "cache", "tail", "compiled")
    LIMIT = 1024  # encoded descriptors kept per kernel and device; past it, start afresh

    def __init__(self, compiled, raw, head: tuple, descs: tuple, encode, tail: tuple):
        self.compiled, self.raw, self.head, self.descs = compiled, raw, head, descs
        self.encode, self.tail = encode, tail
        self.cache: dict[tuple[int, int], tuple[Any, list]] = {}

    @staticmethod
    def of(compiled, grid: tuple[int, int, int], n_args: int, tail: tuple) -> DirectLaunch | None:
        import inspect
        import sys

        try:
            run = compiled.run
            module = sys.modules.get(type(run).__module__)
            encode = getattr(module, "make_tensordesc_arg", None)
            if (getattr(module, "_BASE_ARGS_FORMAT_LEN", None) != 13 or encode is None
                    or len(inspect.signature(encode).parameters) != 2
                    or hasattr(run, "arg_annotations")
                    or run.global_scratch_size or run.profile_scratch_size):
                return None
            wrapper = run.launch
            code = getattr(wrapper, "__code__", None)
            if code is None:  # not a Python function: the C entry itself (no descriptors)
                raw, descs = wrapper, ()
            else:
                cells = dict(zip(code.co_freevars,
                                 (c.cell_contents for c in wrapper.__closure__ or ()),
                                 strict=False))
                if not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= set(cells):
                    return None
                raw = cells["launcher"]
                positions = sorted(cells["tensordesc_indices"])
                meta = cells["tensordesc_meta"] or [None] * len(positions)
                if len(meta) != len(positions) or any(p >= n_args for p in positions):
                    return None
                # Replaced from the last, so earlier positions stay where they are.
                descs = tuple(reversed(list(zip(positions, meta, strict=True))))
            head = (*grid, None, compiled.function, run.launch_cooperative_grid, run.launch_pdl,
                    None, None, compiled.packed_metadata, None, None, None)
        except (AttributeError, TypeError, ValueError):
            return None
        return DirectLaunch(compiled, raw, head, descs, encode, tail)

    def __call__(self, args: Sequence, stream: int) -> None:
        if self.descs:
            args = list(args)
            cache = self.cache
            for pos, meta in self.descs:
                desc = args[pos]
                hit = cache.get((pos, id(desc)))
                if hit is None or hit[0] is not desc:
                    if len(cache) >= self.LIMIT:
                        cache.clear()
                    # The entry holds the descriptor, so its id is not reused while cached.
                    hit = cache[(pos, id(desc))] = (desc, self.encode(desc, meta))
                args[pos:pos + 1] = hit[1]
        h = self.head
        self.raw(h[0], h[1], h[2], stream, *h[4:], *args, *self.tail)


def _hook_set(hook) -> bool:
    # Triton 3.6 and later keep a chain of hooks, empty when none is set (never None); a
    # hook assigned in its place, or an older Triton's, is a callable or None.
    return hook is not None and bool(getattr(hook, "calls", True))


def hooks_set() -> bool:
    return TRITON_KNOBS is not None and (_hook_set(TRITON_KNOBS.runtime.launch_enter_hook)
                                   or _hook_set(TRITON_KNOBS.runtime.launch_exit_hook))


class _Pointer:
    """What Triton reads of a host tensor descriptor's base (its address and dtype), without
    a reference to the tensor: a cached descriptor keeps no tensor alive."""

    __slots__ = ("_ptr", "dtype")

    def __init__(self, ptr: int, dtype: torch.dtype):
        self._ptr, self.dtype = ptr, dtype

    def data_ptr(self) -> int:
        return self._ptr


class DescriptorCache:
    """Host TMA descriptors over one plan's tensors (shape, strides and dtype fixed by the
    plan), cached by address (a tensor or its address as an int), oldest first out: a
    repeated call (the same weight, the same outputs) builds none, and ``size`` holds a
    model's layers (61) each writing its own outputs. ``make(base, shape, strides)`` builds
    one; under the interpreter (which reads the tensor itself) every call builds one over
    the tensor."""

    def __init__(self, make, shape: Sequence[int], strides: Sequence[int], dtype: torch.dtype,
                 size: int = 128):
        self.make, self.shape, self.strides, self.dtype = make, list(shape), list(strides), dtype
        self.cache: OrderedDict[int, Any] = OrderedDict()
        self.size = size

    def __call__(self, x: torch.Tensor | int):
        if _INTERPRETING:
            return self.make(x, self.shape, self.strides)
        ptr = x if type(x) is int else x.data_ptr()
        desc = self.cache.get(ptr)
        if desc is None:
            desc = self.cache[ptr] = self.make(_Pointer(ptr, self.dtype), self.shape,
                                               self.strides)
            if len(self.cache) > self.size:
                self.cache.popitem(last=False)
        return desc
