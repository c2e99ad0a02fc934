"""Every module the repository names as text exists: ``python -m mla_kernels.<...>`` in the
package, scripts, tests, notebooks, configs and docs, and every quoted ``"mla_kernels.<...>"``
(an ``importlib`` string, a ``-m`` argument list, a setuptools ``attr``), which must be a
module or an attribute of one. The records (``data/``, ``docs/log/``) and the changelog,
which name paths as they were, are not read, nor this file (its own check names paths that
do not exist)."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("mla_kernels", "scripts", "tests", "notebooks", "configs", "docs")
FILES = ("README.md", "Makefile", "pyproject.toml", "environment.yml")
SUFFIXES = {".py", ".sh", ".md", ".ipynb", ".yaml", ".yml", ".toml", ".patch", ""}
RUN = re.compile(r"-m\s+(mla_kernels(?:\.\w+)*)")
QUOTED = re.compile(r"[\"'](mla_kernels(?:\.\w+)+)[\"']")
# ``from mla_kernels.x import y, z`` on one line: in code, in code held in strings (a child
# process's ``-c``), in notebooks and docs.
FROM = re.compile(r"from (mla_kernels(?:\.\w+)*) import ((?:\w+(?: as \w+)?(?:, )?)+)")


def text_files() -> list[Path]:
    out = [ROOT / f for f in FILES if (ROOT / f).is_file()]
    for folder in SOURCES:
        for p in sorted((ROOT / folder).rglob("*")):
            rel = p.relative_to(ROOT).parts
            if (p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in rel
                    and rel[:2] != ("docs", "log") and p != Path(__file__).resolve()):
                out.append(p)
    return out


def named(pattern: re.Pattern) -> dict[str, list[str]]:
    """Every name ``pattern`` finds, with the files that name it."""
    out: dict[str, list[str]] = {}
    for p in text_files():
        for m in pattern.finditer(p.read_text(encoding="utf-8", errors="replace")):
            out.setdefault(m.group(1), []).append(str(p.relative_to(ROOT)))
    return out


def is_module(name: str) -> bool:
    """A module with a source file of its own (an alias that hands back another is not one:
    ``python -m`` cannot run it)."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return False
    return spec is not None and spec.origin is not None and Path(spec.origin).is_file()


def is_module_or_attribute(name: str) -> bool:
    parent, _, attr = name.rpartition(".")
    return is_module(name) or (is_module(parent)
                               and hasattr(importlib.import_module(parent), attr))


def test_every_module_run_with_dash_m_exists():
    runs = named(RUN)
    assert "mla_kernels.review.report" in runs  # the reader finds what make report runs
    missing = {name: files for name, files in runs.items() if not is_module(name)}
    assert missing == {}


def test_every_quoted_module_path_exists():
    quoted = named(QUOTED)
    assert "mla_kernels.lab.compile_check" in quoted  # the occupancy model's child process
    missing = {name: files for name, files in quoted.items() if not is_module_or_attribute(name)}
    assert missing == {}


def test_every_name_imported_from_the_package_exists():
    missing = {}
    for p in text_files():
        for m in FROM.finditer(p.read_text(encoding="utf-8", errors="replace")):
            for name in (n.split(" as ")[0].strip() for n in m.group(2).split(",")):
                if name and not is_module_or_attribute(f"{m.group(1)}.{name}"):
                    missing.setdefault(f"{m.group(1)}.{name}", []).append(str(p.relative_to(ROOT)))
    assert missing == {}


def test_the_readers_bite():
    assert RUN.findall("python3 -m mla_kernels.compile_check --device MI355X") == [
        "mla_kernels.compile_check"]
    assert not is_module("mla_kernels.compile_check")
    assert QUOTED.findall('[sys.executable, "-m", "mla_kernels.report"]') == ["mla_kernels.report"]
    assert not is_module_or_attribute("mla_kernels.report")
    assert is_module_or_attribute("mla_kernels.__version__")
    assert FROM.findall("    from mla_kernels.lab import mma_rate, bench as b\\n") == [
        ("mla_kernels.lab", "mma_rate, bench as b")]
    assert not is_module_or_attribute("mla_kernels.lab.mma_rate")
