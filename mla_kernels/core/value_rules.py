"""The one vocabulary for checking a named value: design configs' fields and the notebooks'
parameters both say what they accept with these rules.

A rule is called as ``rule(name, value)`` and returns the value as it is used, or raises
a ValueError ``"<name>: expected <what the rule takes>, got <value>"``. Rules are strict
about types (a bool is not an int); ``text=True`` lets a rule also read the string forms
that papermill's ``-p`` and a YAML file hand over (``"12"``, ``"true"``, ``"[1, 2]"``,
``"none"``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Options = Callable[[], Iterable[str]] | tuple[str, ...]


class Reject(Exception):
    """Raised by a rule's ``accept`` for a value it does not take."""


@dataclass(frozen=True)
class Rule:
    """``accept(value)`` returns the value as used or raises Reject; ``expected`` (a string,
    or a function giving one, for options known only at call time) says what it takes."""

    expected: str | Callable[[], str]
    accept: Callable[[Any], Any]

    def describe(self) -> str:
        return self.expected() if callable(self.expected) else self.expected

    def __call__(self, name: str, value: Any) -> Any:
        try:
            return self.accept(value)
        except (Reject, ValueError, TypeError, OverflowError):  # a converter's own error too
            raise ValueError(f"{name}: expected {self.describe()}, got {_shown(value)}") from None

    def ok(self, value: Any) -> bool:
        try:
            self.accept(value)
        except (Reject, ValueError, TypeError, OverflowError):
            return False
        return True


def _shown(value: Any) -> str:
    """A value's repr as a message repeats it: cut to a bounded length."""
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:200]}... ({len(text)} characters)"


def _is_int(v: Any) -> bool:
    return type(v) is int


def _int_text(v: Any, text: bool) -> Any:
    # ASCII digits only: str.isdigit() takes "²", and a sign may come once ("--5" is no int);
    # the length keeps int() below its digit limit.
    if text and isinstance(v, str) and re.fullmatch(r"[+-]?[0-9]{1,100}", v.strip()):
        return int(v)
    return v


def one_of(*allowed: int) -> Rule:
    """An int (not a bool) among ``allowed``."""
    def accept(v):
        if not (_is_int(v) and v in allowed):
            raise Reject
        return v
    return Rule("one of " + ", ".join(str(a) for a in allowed), accept)


def int_in(lo: int, hi: int | None = None, *, text: bool = False) -> Rule:
    """An int (not a bool) in [lo, hi], or >= lo with no ``hi``."""
    def accept(v):
        v = _int_text(v, text)
        if not _is_int(v) or v < lo or (hi is not None and v > hi):
            raise Reject
        return v
    return Rule(f"an int in [{lo}, {hi}]" if hi is not None else f"an int >= {lo}", accept)


def flag(*, text: bool = False) -> Rule:
    """True or False (with ``text``, also "true"/"false" in any case)."""
    def accept(v):
        if text and isinstance(v, str) and v.lower() in ("true", "false"):
            return v.lower() == "true"
        if type(v) is not bool:
            raise Reject
        return v
    return Rule("True or False", accept)


def optional(rule: Rule, *, text: bool = False) -> Rule:
    """None, or what ``rule`` takes (with ``text``, "none"/"null" read as None)."""
    def accept(v):
        if v is None or (text and isinstance(v, str) and v.lower() in ("none", "null")):
            return None
        return rule.accept(v)
    if text:
        return Rule(lambda: rule.describe(), accept)
    return Rule(lambda: f"None or {rule.describe()}", accept)


def _listed(options: Options) -> list[str]:
    return list(options() if callable(options) else options)


def choice(options: Options) -> Rule:
    """A string among ``options`` (a tuple, or a function listing them at call time)."""
    def accept(v):
        if not isinstance(v, str) or v not in _listed(options):
            raise Reject
        return v
    return Rule(lambda: f"one of {_listed(options)}", accept)


def _as_list(v: Any) -> list:
    """A list from a list, tuple or set, from a YAML string holding one, or one value."""
    import yaml

    if isinstance(v, str):
        try:
            parsed = yaml.safe_load(v)
        except yaml.YAMLError:
            parsed = v
        return parsed if isinstance(parsed, list) else [parsed] if parsed is not None else []
    if isinstance(v, (tuple, set)):
        return list(v)
    return v if isinstance(v, list) else [v]


def names(options: Options) -> Rule:
    """A non-empty list of strings among ``options`` (one string is a list of one)."""
    def accept(v):
        items = _as_list(v)
        opts = _listed(options)
        if not items or any(not isinstance(x, str) or x not in opts for x in items):
            raise Reject
        return items
    return Rule(lambda: f"a non-empty list of names from {_listed(options)}", accept)


def ints(lo: int, *, nonempty: bool) -> Rule:
    """A list of ints >= lo (non-empty if asked); one int, or a string of a list, is read as
    a list."""
    one = int_in(lo, text=True)

    def accept(v):
        items = _as_list(v)
        if nonempty and not items:
            raise Reject
        return [one.accept(x) for x in items]
    return Rule(f"a non-empty list of ints >= {lo}" if nonempty else f"a list of ints >= {lo}",
                accept)


def positive_float(*, text: bool = False) -> Rule:
    """A finite number > 0, as a float."""
    def accept(v):
        if text and isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                raise Reject from None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
            raise Reject
        return float(v)
    return Rule("a number > 0", accept)


def path(root: Path) -> Rule:
    """A non-empty path, as an absolute string: a relative one is taken from ``root``."""
    def accept(v):
        if not isinstance(v, (str, Path)) or not str(v):
            raise Reject
        p = Path(v)
        return str(p if p.is_absolute() else (root / p).resolve())
    return Rule("a path (relative ones from the repository root)", accept)
