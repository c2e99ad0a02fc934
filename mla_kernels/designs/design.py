"""The design record: what every design home provides, as the registry, the public call, the
occupancy model, the compile checks and the harness know it; and the launch configurations'
base, with the reader of the ``config`` column of measurement CSVs.

A design home (one module or folder under ``mla_kernels/designs/``) holds its kernel(s), a
typed launch configuration, its grid, its launch, its work model (programs that touch a
token) and the predicate "serves this problem on this device". ``Design`` bundles them; the
registry in ``designs/__init__.py`` lists the homes. The lab reaches a design's details only
through this record.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.devices import DeviceSpec
from ..core.problem import GatherArgs, Problem
from ..core.value_rules import Rule

# Families a design can run on: the two GPU vendors and the Triton interpreter ("cpu").
PORTABLE = ("amd", "nvidia", "cpu")


# ------------------------------------------------------------------ launch configurations
@dataclass(frozen=True)
class DesignConfig:
    """Base of every design's launch configuration. Subclasses are frozen dataclasses whose
    fields are checked on construction against ``_rules`` (a ValueError naming the field);
    ``_legacy`` maps fields of the single LaunchConfig of earlier versions to theirs."""

    _rules: ClassVar[dict[str, Rule]] = {}
    _legacy: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        for name, rule in self._rules.items():
            rule(f"config.{name}", getattr(self, name))

    def triton_options(self) -> dict[str, int]:
        """num_warps / num_stages for a Triton launch, where the config has them."""
        out = {}
        for key in ("num_warps", "num_stages"):
            value = getattr(self, key, None)
            if value is not None:
                out[key] = value
        return out


CONFIG_TEXT_LIMIT = 2000  # characters of a config's repr: every design's fits in a tenth
_SHOWN = 80  # characters of a bad text, and names of unknown fields, a message repeats
_SHOWN_FIELDS = 5


def _shown(text: str) -> str:
    """``text``'s repr, cut to a bounded length (a message must not repeat a huge input)."""
    return repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN]!r}... ({len(text)} characters)"


def parse_config(config_type: type[DesignConfig], text: str) -> DesignConfig:
    """A config from its repr, as the ``config`` column of measurement CSVs holds it.

    Reads this version's reprs (``TiledConfig(block_m=128, split=True)``) and the single
    ``LaunchConfig(...)`` of earlier versions, whose fields are mapped through the
    design's ``_legacy`` table; a legacy field the design does not take is dropped when it
    held its old default (None, or the old defaults num_warps=4 and stages=4) and is an
    error otherwise. Values are read as literals; nothing is evaluated. A text longer than
    CONFIG_TEXT_LIMIT characters, or naming a field twice, is refused, as is anything but
    keyword arguments.
    """
    if not isinstance(text, str):
        raise ValueError(f"config: expected a config's repr (a str), got {type(text).__name__}")
    if len(text) > CONFIG_TEXT_LIMIT:
        # Before parsing: a deep nesting costs the parser its stack or its memory.
        raise ValueError(f"config: expected a repr of at most {CONFIG_TEXT_LIMIT} characters, "
                         f"got {_shown(text)}")
    try:
        call = ast.parse(text.strip(), mode="eval").body
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.args:
            raise SyntaxError("not a call with keyword arguments")
        fields = {}
        for kw in call.keywords:
            if kw.arg is None:
                raise SyntaxError("** is not a keyword argument")
            if kw.arg in fields:  # Python refuses a repeated keyword; ast.parse does not
                raise SyntaxError(f"keyword argument repeated: {kw.arg}")
            fields[kw.arg] = ast.literal_eval(kw.value)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as e:
        raise ValueError(f"config: expected 'Name(field=value, ...)', got {_shown(text)} "
                         f"({type(e).__name__}: {str(e)[:_SHOWN]})") from None
    if call.func.id == "LaunchConfig":
        old_defaults = {"num_warps": 4, "stages": 4, "split_parts": False}
        mapped = {}
        for old, value in fields.items():
            new = config_type._legacy.get(old)
            if new is not None:
                mapped[new] = value
            elif value is not None and old_defaults.get(old, None) != value:
                raise ValueError(f"config: {old}={_shown(repr(value))} of {_shown(text)} has "
                                 f"no meaning for {config_type.__name__}")
        fields = mapped
    elif call.func.id != config_type.__name__:
        raise ValueError(f"config: expected a {config_type.__name__} or a LaunchConfig repr, "
                         f"got {_shown(text)}")
    return coerce_config(config_type, fields)


def coerce_config(config_type: type[DesignConfig], given) -> DesignConfig:
    """``given`` as the design's config: an instance passes (its rules checked again: a
    frozen dataclass can still be changed through ``object.__setattr__``), a mapping of its
    field names is converted, anything else is a ValueError naming ``config``."""
    if isinstance(given, config_type):
        given.__post_init__()
        return given
    if isinstance(given, Mapping):
        names = {f.name for f in dataclasses.fields(config_type)}
        unknown = [k for k in given if k not in names]
        if unknown:
            first = sorted(unknown[:1000], key=repr)[:_SHOWN_FIELDS]  # keys of any type
            shown = ", ".join(_shown(k) if isinstance(k, str) else _shown(repr(k))
                              for k in first)
            more = f" and {len(unknown) - len(first)} more" if len(unknown) > len(first) else ""
            raise ValueError(f"config: expected fields of {config_type.__name__} "
                             f"{sorted(names)}, got {len(unknown)} unknown: {shown}{more}")
        return config_type(**given)
    raise ValueError(f"config: expected None, a {config_type.__name__} or a mapping of its "
                     f"fields, got {_shown(repr(given))}")


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


def _no_extras(prob: Problem, args: GatherArgs, config=None) -> dict[str, float]:
    return {}


@dataclass(frozen=True, eq=False)
class Design:
    """One design: what the registry, the public call, the occupancy model, the compile
    checks and the harness know of it.

    ``grid`` is the launch grid; ``prepare`` checks the grid and fixes what the problem
    determines, returning the launch of one call (which returns Triton's compiled kernel,
    or None under the interpreter or when nothing runs); ``work`` counts the programs that
    touch at least one token of ``contexts``; ``serves`` is the design's own rule beyond
    the weight formats and GPU families it lists; ``row_extras`` gives the measurement
    columns the design reports for one input set beyond the common ones (a MXFP4 weight's
    share of items on the e4m3 route, say), by column name, under the config it ran.
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
    row_extras: Callable[..., dict[str, float]] = _no_extras  # (problem, args, config)

    def config(self, given=None) -> DesignConfig:
        """The launch config for ``given``: None for the design's default, its config
        dataclass, a mapping of fields that override the default, or a config's repr."""
        default = self.default_config or self.config_type()
        if given is None:
            return default
        if isinstance(given, str):  # a repr, as the custom op and measurement CSVs carry it
            return parse_config(self.config_type, given)
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


