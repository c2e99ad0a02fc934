"""What every design home provides, and the host-side pieces the homes share.

A design home (one module under ``mla_kernels/designs/``) holds its kernel(s), a typed
launch configuration, its grid, its launch, its work model (programs that touch a token)
and the predicate "serves this problem on this device". ``Design`` bundles them; the
registry in ``designs/__init__.py`` lists the homes.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import triton

from ..devices import DeviceSpec
from ..formats import as_uint8
from ..problem import GatherArgs, Problem
from .jit import FORMAT_CODES

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
LaunchFn = Callable[[Problem, GatherArgs, "int | None", Any, DeviceSpec], Any]
WorkFn = Callable[[Problem, Sequence[int], "int | None", Any, DeviceSpec], int]


def _serves_all(prob: Problem, device: DeviceSpec) -> bool:
    return True


@dataclass(frozen=True, eq=False)
class Design:
    """One design: what the registry, the public call, the occupancy model, the compile
    checks and the harness know of it.

    ``grid`` is the launch grid the launcher uses; ``launch`` checks the grid and launches
    (returning Triton's compiled kernel, None under the interpreter or when nothing runs);
    ``work`` counts the programs that touch at least one token of ``contexts``;
    ``serves`` is the design's own rule beyond the weight formats and GPU families it lists.
    """

    name: str
    description: str
    formats: tuple[str, ...]
    config_type: type[DesignConfig]
    grid: GridFn
    launch: LaunchFn
    work: WorkFn
    kernels: tuple = ()
    vendors: tuple[str, ...] = PORTABLE
    serves: Callable[[Problem, DeviceSpec], bool] = _serves_all
    default_config: DesignConfig | None = None

    def config(self, given=None) -> DesignConfig:
        """The launch config for ``given`` (None: the design's default)."""
        if given is None:
            return self.default_config or self.config_type()
        return coerce_config(self.config_type, given)

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
    """What bounds every sequence's length: the hint, or else the output row count."""
    return prob.out_rows if max_context_len is None else max_context_len


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


def portable_args(prob: Problem, t: GatherArgs, block_k: int) -> tuple[list, dict]:
    """Arguments every portable Triton design takes, in kernel order, and their constants
    (``jit.py``'s bodies read them by these names)."""
    w = as_uint8(t.kv_proj_weight)
    ws = as_uint8(t.kv_proj_scale) if t.kv_proj_scale is not None else w  # unused pointer
    k_buffer, k_out, v_out = t.k_buffer, t.k_prefix, t.v_prefix
    args = [k_buffer, t.k_scale if t.k_scale is not None else k_buffer, t.kv_indptr,
            t.kv_indices, t.kv_prefix_sum_context_lens, w, ws, k_out, v_out,
            k_buffer.stride(0), k_buffer.stride(1), k_out.stride(0), k_out.stride(1),
            v_out.stride(0), v_out.stride(1), w.shape[1], ws.shape[1] if ws.dim() == 2 else 1]
    consts = dict(
        KV_C=prob.kv_c_dim, PE=prob.pe_dim, NOPE=prob.nope_dim, V=prob.v_dim,
        BPE=pow2(prob.pe_dim, 1), BNOPE=pow2(prob.nope_dim), BV=pow2(prob.v_dim),
        BLOCK_SIZE=prob.block_size, BK=block_k, FMT=FORMAT_CODES[prob.weight_format],
        DOT_BF16=not prob.dot_in_fp8, HAS_K_SCALE=t.k_scale is not None)
    return args, consts


def run_kernel(kernel, grid: tuple[int, ...], args: Sequence, consts: Mapping[str, Any]):
    """Launch a Triton (or Gluon) kernel; returns what Triton returns (the compiled kernel
    on a GPU)."""
    return kernel[grid](*args, **consts)
