"""What every design home provides, and the host-side pieces the homes share.

A design home (one module under ``mla_kernels/designs/``) holds its kernel(s), a typed
launch configuration, its grid, its launch, its work model (programs that touch a token)
and the predicate "serves this problem on this device". ``Design`` bundles them; the
registry in ``designs/__init__.py`` lists the homes.
"""

from __future__ import annotations

import ast
import contextvars
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import triton

from ..devices import DeviceSpec
from ..formats import as_uint8
from ..problem import GatherArgs, Problem, interpreting
from .jit import SCALE_CODES

# Families a design can run on: the two GPU vendors and the Triton interpreter ("cpu").
PORTABLE = ("amd", "nvidia", "cpu")
GRID_YZ_LIMIT = 65535  # CUDA's limit on a grid's second and third axes


# ------------------------------------------------------------------ launch configurations
def one_of(*allowed) -> tuple[Callable[[Any], bool], str]:
    """A config field rule: an int (not a bool) among ``allowed``."""
    return (lambda v: type(v) is int and v in allowed,
            "one of " + ", ".join(str(a) for a in allowed))


def optional(rule: tuple[Callable[[Any], bool], str]) -> tuple[Callable[[Any], bool], str]:
    ok, text = rule
    return (lambda v: v is None or ok(v), f"None or {text}")


def positive_int(limit: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: type(v) is int and 1 <= v <= limit, f"an int in [1, {limit}]")


FLAG = (lambda v: type(v) is bool, "True or False")


@dataclass(frozen=True)
class DesignConfig:
    """Base of every design's launch configuration. Subclasses are frozen dataclasses whose
    fields are checked on construction against ``_rules`` (a ValueError naming the field);
    ``_legacy`` maps fields of the single LaunchConfig of earlier versions to theirs."""

    _rules: ClassVar[dict[str, tuple[Callable[[Any], bool], str]]] = {}
    _legacy: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        for name, (ok, expected) in self._rules.items():
            value = getattr(self, name)
            if not ok(value):
                raise ValueError(f"config.{name}: expected {expected}, got {value!r}")

    def triton_options(self) -> dict[str, int]:
        """num_warps / num_stages for a Triton launch, where the config has them."""
        out = {}
        for key in ("num_warps", "num_stages"):
            value = getattr(self, key, None)
            if value is not None:
                out[key] = value
        return out


def parse_config(config_type: type[DesignConfig], text: str) -> DesignConfig:
    """A config from its repr, as the ``config`` column of measurement CSVs holds it.

    Reads this version's reprs (``TiledConfig(block_m=128, split=True)``) and the single
    ``LaunchConfig(...)`` of earlier versions, whose fields are mapped through the
    design's ``_legacy`` table; a legacy field the design does not take is dropped when it
    held its old default (None, or the old defaults num_warps=4 and stages=4) and is an
    error otherwise. Values are read as literals; nothing is evaluated.
    """
    try:
        call = ast.parse(text.strip(), mode="eval").body
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
            raise SyntaxError("not a call with keyword arguments")
        fields = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
    except (SyntaxError, ValueError) as e:
        raise ValueError(f"config: expected 'Name(field=value, ...)', got {text!r} ({e})") from None
    if call.func.id == "LaunchConfig":
        old_defaults = {"num_warps": 4, "stages": 4, "split_parts": False}
        mapped = {}
        for old, value in fields.items():
            new = config_type._legacy.get(old)
            if new is not None:
                mapped[new] = value
            elif value is not None and old_defaults.get(old, None) != value:
                raise ValueError(f"config: {old}={value!r} of {text!r} has no meaning for "
                                 f"{config_type.__name__}")
        fields = mapped
    elif call.func.id != config_type.__name__:
        raise ValueError(f"config: expected a {config_type.__name__} or a LaunchConfig repr, "
                         f"got {text!r}")
    return coerce_config(config_type, fields)


def coerce_config(config_type: type[DesignConfig], given) -> DesignConfig:
    """``given`` as the design's config: an instance passes, a mapping of its field names is
    converted, anything else is a ValueError naming ``config``."""
    if isinstance(given, config_type):
        return given
    if isinstance(given, Mapping):
        names = {f.name for f in dataclasses.fields(config_type)}
        unknown = sorted(set(given) - names)
        if unknown:
            raise ValueError(f"config: expected fields of {config_type.__name__} "
                             f"{sorted(names)}, got {unknown}")
        return config_type(**given)
    raise ValueError(f"config: expected None, a {config_type.__name__} or a mapping of its "
                     f"fields, got {given!r}")


# ------------------------------------------------------------------ the design record
GridFn = Callable[[Problem, "int | None", Any, DeviceSpec], tuple[int, ...]]
# prepare(prob, args, max_context_len, config, device) -> launch(args, aligned, device,
# addresses): everything derived from the problem and the arguments' shapes and strides is
# done once; the launch only gathers one call's pointers (``addresses``: the call's
# data_ptr()s, taken by the caller) and launches. A JitLauncher is such a launch.
PrepareFn = Callable[[Problem, GatherArgs, "int | None", Any, DeviceSpec],
                     Callable[..., Any]]
WorkFn = Callable[[Problem, Sequence[int], "int | None", Any, DeviceSpec], int]


def _serves_all(prob: Problem, device: DeviceSpec) -> bool:
    return True


@dataclass(frozen=True, eq=False)
class Design:
    """One design: what the registry, the public call, the occupancy model, the compile
    checks and the harness know of it.

    ``grid`` is the launch grid; ``prepare`` checks the grid and fixes what the problem
    determines, returning the launch of one call (which returns Triton's compiled kernel,
    or None under the interpreter or when nothing runs); ``work`` counts the programs that
    touch at least one token of ``contexts``; ``serves`` is the design's own rule beyond
    the weight formats and GPU families it lists.
    """

    name: str
    description: str
    formats: tuple[str, ...]
    config_type: type[DesignConfig]
    grid: GridFn
    prepare: PrepareFn
    work: WorkFn
    kernels: tuple = ()
    vendors: tuple[str, ...] = PORTABLE
    serves: Callable[[Problem, DeviceSpec], bool] = _serves_all
    default_config: DesignConfig | None = None

    def config(self, given=None) -> DesignConfig:
        """The launch config for ``given``: None for the design's default, its config
        dataclass, or a mapping of fields that override the default."""
        default = self.default_config or self.config_type()
        if given is None:
            return default
        if isinstance(given, Mapping) and not isinstance(given, self.config_type):
            coerce_config(self.config_type, given)  # names an unknown or bad field
            return dataclasses.replace(default, **given)
        return coerce_config(self.config_type, given)

    def launch(self, prob: Problem, args: GatherArgs, max_context_len: int | None,
               config: DesignConfig, device: DeviceSpec):
        """Prepare and launch one call (what the public call's cached plan does in two
        steps)."""
        return self.prepare(prob, args, max_context_len, config, device)(args)

    def runs(self, prob: Problem, device: DeviceSpec) -> bool:
        """Whether this design serves the problem's weight format, the device's family and
        the design's own conditions (dims, architecture)."""
        return (prob.weight_format in self.formats and device.vendor in self.vendors
                and self.serves(prob, device))

    def programs(self, prob: Problem, device: DeviceSpec, max_context_len: int | None = None,
                 config: DesignConfig | None = None) -> int:
        n = 1
        for d in self.grid(prob, max_context_len, self.config(config), device):
            n *= d
        return n


# ------------------------------------------------------------------ shared host helpers
def pow2(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(n))


def context_bound(prob: Problem, max_context_len: int | None) -> int:
    """What bounds every sequence's length: the output row count, or the hint where it is
    smaller (no sequence can be longer than the rows it writes)."""
    return prob.out_rows if max_context_len is None else min(max_context_len, prob.out_rows)


def check_grid(grid: tuple[int, ...]) -> None:
    """Reject a problem whose grid the device cannot launch, before anything is written."""
    for axis, n in enumerate(grid[1:], start=1):
        if n > GRID_YZ_LIMIT:
            raise ValueError(f"kv_indptr: expected a batch and head count that give at most "
                             f"{GRID_YZ_LIMIT} programs on grid axis {axis}, got {n}")


def default_block_k(prob: Problem) -> int:
    """K per dot step of the portable designs: 128 for fp8 operands, 64 for bf16 ones, so
    the weight tiles (and their pipelined copies) fit in a Hopper SM's shared memory."""
    return 128 if prob.dot_in_fp8 else 64


def no_launch(args: GatherArgs, aligned: bool | None = None, device: int | None = None,
              addresses: GatherArgs | None = None) -> None:
    """The launch of a problem with nothing to run (an empty grid)."""
    return None


def portable_plan(prob: Problem, t: GatherArgs, block_k: int
                  ) -> tuple[Callable[[GatherArgs], list], dict]:
    """The argument list every portable Triton design takes, as a function of one call's
    tensors or their addresses (the shape-derived ints fixed now), and the constants
    ``jit.py``'s bodies read. ``t`` is the call the plan is made for: only its shapes and
    strides are read."""
    w = as_uint8(t.kv_proj_weight)
    ws = as_uint8(t.kv_proj_scale) if t.kv_proj_scale is not None else w
    k_buffer, k_out, v_out = t.k_buffer, t.k_prefix, t.v_prefix
    ints = (k_buffer.stride(0), k_buffer.stride(1), k_buffer.shape[0], k_out.stride(0),
            k_out.stride(1),
            v_out.stride(0), v_out.stride(1), w.shape[1], ws.shape[1] if ws.dim() == 2 else 1)
    fp8 = prob.cache_is_fp8
    has_scale = t.kv_proj_scale is not None
    # Whether the weight or its scale arrive as float4 / e8m0 dtypes Triton does not take:
    # fixed by the plan's dtypes, so a call of the plan pays for no test. A call given as
    # addresses (ints) needs no view.
    views = w is not t.kv_proj_weight or (has_scale and ws is not t.kv_proj_scale)

    def make_args(c: GatherArgs) -> list:
        if views and type(c.kv_proj_weight) is not int:
            w = as_uint8(c.kv_proj_weight)
            return [c.k_buffer, c.k_scale if fp8 else c.k_buffer, c.kv_indptr, c.kv_indices,
                    c.kv_prefix_sum_context_lens, w,
                    as_uint8(c.kv_proj_scale) if has_scale else w, c.k_prefix, c.v_prefix, *ints]
        return [c.k_buffer, c.k_scale if fp8 else c.k_buffer, c.kv_indptr, c.kv_indices,
                c.kv_prefix_sum_context_lens, c.kv_proj_weight,
                c.kv_proj_scale if has_scale else c.kv_proj_weight, c.k_prefix, c.v_prefix,
                *ints]

    consts = dict(
        KV_C=prob.kv_c_dim, PE=prob.pe_dim, NOPE=prob.nope_dim, V=prob.v_dim,
        BPE=pow2(prob.pe_dim, 1), BNOPE=pow2(prob.nope_dim), BV=pow2(prob.v_dim),
        BLOCK_SIZE=prob.block_size, BK=block_k, FMT=SCALE_CODES[prob.scale],
        DOT_BF16=not prob.dot_in_fp8, HAS_K_SCALE=fp8)
    return make_args, consts


# ------------------------------------------------------------------ launching a kernel
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
    from triton import knobs as _KNOBS
except ImportError:  # pragma: no cover - a triton without knobs (before 3.4)
    _KNOBS = None
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
      has the layout ``_Direct`` knows (Triton 3.6's), the call goes to its C entry point
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
        self.direct: dict[int | None, _Direct] = {}

    def _slow(self, args: Sequence):
        if _INTERPRETING:
            with _INTERPRETER_LOCK:  # Triton's interpreter keeps global state per launch
                return self.kernel[self.grid](*args, **self.consts)
        return self.kernel[self.grid](*args, **self.consts)

    def __call__(self, c: GatherArgs, aligned: bool | None = None, device: int | None = None,
                 addresses: GatherArgs | None = None):
        if not (self.fast and aligned) or _hooks_set():
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
                direct = _Direct.of(compiled, self.grid, self.n_args, self.tail)
                if direct is not None:
                    self.direct[device] = direct
            return compiled
        g0, g1, g2 = self.grid
        compiled.run(g0, g1, g2, torch._C._cuda_getCurrentRawStream(device), compiled.function,
                     compiled.packed_metadata, None, None, None,
                     *self.make(c if addresses is None else addresses), *self.tail)
        return compiled


class _Direct:
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
    def of(compiled, grid: tuple[int, int, int], n_args: int, tail: tuple) -> _Direct | None:
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
        return _Direct(compiled, raw, head, descs, encode, tail)

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


def _hooks_set() -> bool:
    return _KNOBS is not None and (_hook_set(_KNOBS.runtime.launch_enter_hook)
                                   or _hook_set(_KNOBS.runtime.launch_exit_hook))


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
