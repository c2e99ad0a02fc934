"""The public entry point: gather_kv_b_proj.

A call is checked once per argument signature (dtype, shape, strides and device of every
tensor, the variant, the hint, the config, the flags, and whether the weight and outputs
are 16-byte aligned): the checks, the design ``auto`` picks and everything the launch derives
from shapes are kept as a plan. A call whose signature has a plan only compares the
arguments' byte ranges (aliasing), gathers pointers and launches; a call with the signature
of the latest cached call (a forward pass's next layer) finds its plan by torch's tensor
guard, without building the key. A tensor changed in place
(``resize_``, ``as_strided_``, ``set_``) has another signature and is checked afresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from .core.devices import INTERPRETER, DeviceSpec, device_spec
from .core.problem import (
    GatherArgs,
    Problem,
    aliasing_pairs,
    check_aliasing,
    check_arguments,
    check_hint,
    check_indices,
    interpreting,
    validate_inputs,
)
from .core.value_rules import flag
from .designs import DesignConfig, resolve
from .designs.launch import DEBUG

_INTERPRETING = interpreting()  # fixed per process, as Triton's own switch
_FLAG = flag()
PLANS: dict[tuple, _Plan] = {}
_PLAN_LIMIT = 512  # signatures kept; past it the cache starts afresh
_LOCK = threading.Lock()


def target_device(device: torch.device) -> DeviceSpec:
    """The registry device a call on tensors of ``device`` runs for: the interpreter's under
    TRITON_INTERPRET=1, else that GPU's."""
    return INTERPRETER if interpreting() else device_spec(device)


def _capturing(device: torch.device) -> bool:
    """Whether the launch's stream, the current one of the tensors' GPU, is being captured
    into a CUDA graph: that GPU need not be the current device (a capture on ``cuda:1``'s
    stream with ``cuda:0`` current at the call)."""
    if device.type != "cuda":
        return False
    with torch.cuda.device(device):
        return torch.cuda.is_current_stream_capturing()


class _Recent:
    """A cached plan's signature as the next call is first compared with it: a forward pass
    calls with one signature layer after layer, so the latest cached call's plan is tried
    before the full key is built and hashed. Tensors are compared by torch's own guard (in
    C: Python type, dispatch keys, which hold the device type and the negative bit, dtype,
    device index, sizes, strides and requires_grad), the other arguments by value."""

    __slots__ = ("plan", "variant", "hint", "hint_type", "config", "validate", "debug",
                 "aligned", "absent", "guard")

    def __init__(self, plan: _Plan, args: GatherArgs, variant, hint, config, validate, debug,
                 aligned):
        tensors = [_NONE[_OPTIONAL.index(i)] if t is None else t for i, t in enumerate(args)]
        self.guard = _TensorGuards(*tensors,
                                   dynamic_dims_sizes=[list(t.shape) for t in tensors],
                                   dynamic_dims_strides=[list(t.stride()) for t in tensors])
        self.plan, self.variant, self.hint, self.hint_type = plan, variant, hint, type(hint)
        self.config, self.validate, self.debug, self.aligned = config, validate, debug, aligned
        self.absent = tuple(args[i] is None for i in _OPTIONAL)

    def matches(self, a: GatherArgs, variant, hint, config, validate, debug,
                aligned) -> bool:
        absent = (a[1] is None, a[6] is None, a[9] is None, a[10] is None)
        return (aligned == self.aligned and type(hint) is self.hint_type and hint == self.hint
                and variant == self.variant and validate == self.validate
                and debug == self.debug and (config is self.config or config == self.config)
                and absent == self.absent
                and self.guard.check(a[0], _NONE[0] if absent[0] else a[1], a[2], a[3], a[4],
                                     a[5], _NONE[1] if absent[1] else a[6], a[7], a[8],
                                     _NONE[2] if absent[2] else a[9],
                                     _NONE[3] if absent[3] else a[10]))


# Stand in for the optional tensors (the scales) left out (None), where the guard wants a
# tensor: a call reaches the guard only when it leaves out the same ones as the plan's. One
# each, as the guard fails a tensor given twice (a call giving one tensor in two places,
# one scale for K and V, finds its plan by the full key).
_OPTIONAL = (1, 6, 9, 10)
_NONE = tuple(torch.empty(0) for _ in _OPTIONAL)
try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # a torch without it: every call builds the full key
    _TensorGuards = None
_RECENT: _Recent | None = None


def _remember(plan: _Plan, args: GatherArgs, *signature) -> None:
    """Make a cached ``plan`` the one the next call is first compared with (its comparison
    built once a plan; none where this torch's guard cannot be built)."""
    global _RECENT
    if plan.recent is None and _TensorGuards is not None:
        try:
            plan.recent = _Recent(plan, args, *signature)
        except (TypeError, RuntimeError, SystemError):  # another torch's constructor
            plan.recent = False
    if plan.recent:
        _RECENT = plan.recent


def _addresses(ptrs: tuple) -> GatherArgs:
    return tuple.__new__(GatherArgs, ptrs)  # the named tuple without its Python-level __new__


class _Plan:
    """Everything one argument signature fixes: the problem, the design and config it runs,
    the launch, and the byte sizes the aliasing check compares."""

    __slots__ = ("prob", "design", "config", "launch", "pairs", "device_index", "validate",
                 "hint", "clear", "host_bounds", "recent")

    def __init__(self, args: GatherArgs, variant, max_context_len, config, validate: bool,
                 debug: bool = False):
        _FLAG("validate", validate)
        _FLAG("debug", debug)
        check_hint(max_context_len)
        prob = check_arguments(*args)
        device = target_device(args.k_buffer.device)
        self.design, self.config = resolve(variant, prob, device, config)
        self.prob: Problem = prob
        self.hint = max_context_len
        self.validate = validate
        # The interpreter compiles nothing, so debug's device asserts cannot stop a block id
        # out of range there: debug checks the indices on the host instead.
        self.host_bounds = bool(debug) and _INTERPRETING and not validate
        token = DEBUG.set(bool(debug))
        try:
            self.launch: Callable[..., object] = self.design.prepare(
                prob, args, max_context_len, self.config, device)
        finally:
            DEBUG.reset(token)
        self.pairs = aliasing_pairs(args)  # compared on every new set of addresses
        self.clear: set[tuple] = set()  # address sets already found free of overlaps
        self.device_index = (args.k_buffer.device.index if args.k_buffer.device.type == "cuda"
                             else None)
        self.recent: _Recent | bool | None = None  # built when first remembered (_remember)

    def __call__(self, args: GatherArgs, ptrs: GatherArgs, aligned: bool) -> None:
        if ptrs not in self.clear:  # a new set of addresses: compare the byte ranges
            check_aliasing(args, self.pairs, ptrs)
            if len(self.clear) >= 256:  # a model's layers, each with its own outputs, fit
                self.clear.clear()
            self.clear.add(ptrs)
        if self.validate:
            validate_inputs(*args, max_context_len=self.hint)
        elif self.host_bounds:
            check_indices(args, self.prob, self.hint)
        index = self.device_index
        if index is not None and index != torch._C._cuda_getDevice():
            with torch.cuda.device(index):  # launch on the tensors' device and its stream
                self.launch(args, aligned, index, ptrs)
        else:
            self.launch(args, aligned, index, ptrs)


def gather_kv_b_proj(
    k_buffer: torch.Tensor,
    k_scale: torch.Tensor | None,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    kv_prefix_sum_context_lens: torch.Tensor,
    kv_proj_weight: torch.Tensor,
    kv_proj_scale: torch.Tensor | None,
    k_prefix: torch.Tensor,
    v_prefix: torch.Tensor,
    k_out_scale: torch.Tensor | None = None,
    v_out_scale: torch.Tensor | None = None,
    *,
    variant: str = "auto",
    max_context_len: int | None = None,
    config: DesignConfig | dict | str | None = None,
    validate: bool | None = None,
    debug: bool = False,
) -> None:
    """Expand the paged latent cache into per-head K and V, writing k_prefix and v_prefix.

    The contract (arguments, formats, what is checked when, tolerances) is docs/contract.md.
    FP8 outputs (``torch.float8_e4m3fn``) take their scales by keyword: ``k_out_scale`` and
    ``v_out_scale``, float32 [1] tensors on the outputs' device; each stored value is the
    e4m3 value nearest value / scale (ties to even), saturated to +-448.
    ``variant`` names the design (``mla_kernels.variant_names()``); ``max_context_len``, a
    host int bounding every sequence's length, may shrink the grid; ``config`` overrides
    the design's launch parameters (its config dataclass, a mapping of its fields, or its
    repr as ``designs.parse_config`` reads it).
    ``validate`` reads the index tensors and scales first (it synchronises): on by default
    under the Triton interpreter, off on a GPU, where contents are the caller's promise.
    Every argument check is a ValueError before anything is launched, the outputs
    untouched. Without validation the launch reads no tensor contents on the host.
    ``debug`` compiles the kernels with device-side asserts: a block id out of range stops
    the kernel (a device-side error) instead of reading out of bounds; under the interpreter,
    which runs no device asserts, the indices are checked on the host instead (a ValueError).
    """
    args = tuple.__new__(GatherArgs, (k_buffer, k_scale, kv_indptr, kv_indices,
                                      kv_prefix_sum_context_lens, kv_proj_weight,
                                      kv_proj_scale, k_prefix, v_prefix, k_out_scale,
                                      v_out_scale))
    if validate is None:
        validate = _INTERPRETING
    try:
        # The call's addresses: compared for aliasing, and what the compiled kernel is
        # launched with (Triton's launcher takes an int pointer as it is).
        ptrs = _addresses((k_buffer.data_ptr(), 0 if k_scale is None else k_scale.data_ptr(),
                           kv_indptr.data_ptr(), kv_indices.data_ptr(),
                           kv_prefix_sum_context_lens.data_ptr(), kv_proj_weight.data_ptr(),
                           0 if kv_proj_scale is None else kv_proj_scale.data_ptr(),
                           k_prefix.data_ptr(), v_prefix.data_ptr(),
                           0 if k_out_scale is None else k_out_scale.data_ptr(),
                           0 if v_out_scale is None else v_out_scale.data_ptr()))
        aligned = not (ptrs[0] | ptrs[1] | ptrs[2] | ptrs[3] | ptrs[4] | ptrs[5] | ptrs[6]
                       | ptrs[7] | ptrs[8] | ptrs[9] | ptrs[10]) & 15
    except (AttributeError, TypeError, RuntimeError):  # not tensors (or no storage): the
        ptrs = None  # checked path says which argument
    recent = _RECENT
    if ptrs is not None and recent is not None:  # most often the signature of the call before
        try:
            hit = recent.matches(args, variant, max_context_len, config, validate, debug,
                                 aligned)
        except Exception:  # an argument that compares oddly: the checked path judges it
            hit = False
        if hit:
            recent.plan(args, ptrs, aligned)
            return
    key = plan = None
    if ptrs is not None:
        try:
            # A negative view reads as its memory, not its values: such a call is refused, so it
            # must not find the plan of an ordinary tensor.
            neg = (k_buffer.is_neg() or kv_proj_weight.is_neg() or k_prefix.is_neg()
                   or v_prefix.is_neg() or kv_indptr.is_neg() or kv_indices.is_neg()
                   or kv_prefix_sum_context_lens.is_neg()
                   or (k_scale is not None and k_scale.is_neg())
                   or (kv_proj_scale is not None and kv_proj_scale.is_neg())
                   or (k_out_scale is not None and k_out_scale.is_neg())
                   or (v_out_scale is not None and v_out_scale.is_neg()))
            # type(): a bool hint (True == 1) must not find the plan of an int one.
            key = (variant, max_context_len, type(max_context_len), config, validate, debug,
                   aligned, neg,
                   k_buffer.dtype, k_buffer.shape, k_buffer.stride(), k_buffer.device,
                   kv_indptr.dtype, kv_indptr.shape, kv_indptr.stride(), kv_indptr.device,
                   kv_indices.dtype, kv_indices.shape, kv_indices.stride(), kv_indices.device,
                   kv_prefix_sum_context_lens.dtype, kv_prefix_sum_context_lens.shape,
                   kv_prefix_sum_context_lens.stride(), kv_prefix_sum_context_lens.device,
                   kv_proj_weight.dtype, kv_proj_weight.shape, kv_proj_weight.stride(),
                   kv_proj_weight.device,
                   k_prefix.dtype, k_prefix.shape, k_prefix.stride(), k_prefix.device,
                   v_prefix.dtype, v_prefix.shape, v_prefix.stride(), v_prefix.device,
                   None if k_scale is None else (k_scale.dtype, k_scale.shape, k_scale.stride(),
                                                 k_scale.device),
                   None if kv_proj_scale is None else (kv_proj_scale.dtype, kv_proj_scale.shape,
                                                       kv_proj_scale.stride(),
                                                       kv_proj_scale.device),
                   None if k_out_scale is None else (k_out_scale.dtype, k_out_scale.shape,
                                                     k_out_scale.stride(), k_out_scale.device),
                   None if v_out_scale is None else (v_out_scale.dtype, v_out_scale.shape,
                                                     v_out_scale.stride(), v_out_scale.device))
            plan = PLANS.get(key)
        except (AttributeError, TypeError, RuntimeError):  # an unhashable variant or
            key = plan = None  # config: the checked path says which argument
    if plan is not None:
        _remember(plan, args, variant, max_context_len, config, validate, debug, aligned)
    else:
        plan = _Plan(args, variant, max_context_len, config, validate, debug)
        if key is not None and not _capturing(k_buffer.device):
            with _LOCK:  # no cache fill while a graph is captured; warm up outside it
                if len(PLANS) >= _PLAN_LIMIT:
                    PLANS.clear()
                PLANS[key] = plan
            _remember(plan, args, variant, max_context_len, config, validate, debug, aligned)
        ptrs = _addresses(tuple(t.data_ptr() if isinstance(t, torch.Tensor) else 0
                                for t in args))
        aligned = not any(p & 15 for p in ptrs)
    plan(args, ptrs, aligned)


def resolved(k_buffer, k_scale, kv_indptr, kv_indices, kv_prefix_sum_context_lens,
             kv_proj_weight, kv_proj_scale, k_prefix, v_prefix, k_out_scale=None,
             v_out_scale=None, *, variant: str = "auto", max_context_len: int | None = None,
             config=None):
    """(design, config) a call with these arguments would run, without launching."""
    plan = _Plan(GatherArgs(k_buffer, k_scale, kv_indptr, kv_indices,
                            kv_prefix_sum_context_lens, kv_proj_weight, kv_proj_scale,
                            k_prefix, v_prefix, k_out_scale, v_out_scale), variant,
                 max_context_len, config, False)
    return plan.design, plan.config


def clear_plans() -> None:
    """Forget every cached plan (tests; after redefining a design)."""
    global _RECENT
    with _LOCK:
        PLANS.clear()
        _RECENT = None
