"""The package's layers, read from the sources: each imports only the layers below it (README,
"Layout"), with function-level imports and the modules named in strings (``importlib``, a
``python -m`` child) counted as imports; no import cycle; nothing imports the package's face
(``mla_kernels/__init__.py``, which re-exports the public names)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Bottom to top, as the README lists them; the face sits above every layer.
LAYERS = ("core", "designs", "call", "context", "lab", "review", "face")
CALL = {"mla_kernels.api", "mla_kernels.ops"}
NAMED = re.compile(r"mla_kernels(?:\.\w+)+")


def layer(module: str) -> str:
    """The layer of a module of the package."""
    if module == "mla_kernels":
        return "face"
    if module in CALL:
        return "call"
    folder = module.split(".")[1]
    if folder not in LAYERS:
        raise ValueError(f"module: expected one in a layer's folder or {sorted(CALL)}, got {module!r}")
    return folder


def module_path(module: str) -> Path | None:
    p = ROOT.joinpath(*module.split("."))
    for cand in (p.with_suffix(".py"), p / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def imports(path: Path, module: str) -> set[str]:
    """The package's modules ``path`` imports: import statements at any depth, and string
    constants that name a module (``importlib.import_module("...")``, ``-m ...``)."""
    pkg = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("mla_kernels")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("mla_kernels"):
                continue
            for a in node.names:  # `from . import x` may name a submodule
                sub = f"{target}.{a.name}"
                out.add(sub if module_path(sub) else target)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out |= {m for m in NAMED.findall(node.value) if module_path(m)}
    out.discard(module)
    return out


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for path in (ROOT / "mla_kernels").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        graph[".".join(parts)] = imports(path, ".".join(parts))
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a layer imports one above it, or anything imports
    the face."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    return sorted((m, n) for m, targets in graph.items() for n in targets
                  if rank[layer(n)] > rank[layer(m)] or (n == "mla_kernels" and m != n))


def test_every_module_is_in_a_layer():
    graph = import_graph()
    assert {layer(m) for m in graph} == set(LAYERS)
    # The folder tree is the layers: one folder each, the call at the package's root.
    folders = {p.name for p in (ROOT / "mla_kernels").iterdir()
               if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(LAYERS) - {"call", "face"}
    assert {p.name for p in (ROOT / "mla_kernels").glob("*.py")} == {
        "__init__.py", *(m.split(".")[1] + ".py" for m in CALL)}
    # The tests follow the layers: one folder each, the checks of the whole house at the top.
    tests = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert tests == set(LAYERS) - {"face"}


def test_layers_import_only_downward():
    # core < designs < the call < lab < review: an engineer porting the call takes core/,
    # designs/, api.py and ops.py alone; the lab never needs the review layer.
    assert upward(import_graph()) == []


def test_no_import_cycle():
    graph = import_graph()
    assert graph["mla_kernels.core.tuning"] == set(), "the tuning table is data: no imports"
    assert find_cycle(graph) is None, "import cycle: " + " -> ".join(find_cycle(graph))


def test_the_readers_bite(tmp_path):
    # Edges are read from the sources, function-level imports and module names in strings
    # included; an upward edge and a cycle through them are found.
    assert "mla_kernels.designs" in imports(ROOT / "mla_kernels" / "api.py", "mla_kernels.api")
    assert "mla_kernels.designs.chunk_loop" in imports(
        ROOT / "mla_kernels" / "designs" / "__init__.py", "mla_kernels.designs")
    assert "mla_kernels.lab.cases" in imports(ROOT / "mla_kernels" / "lab" / "occupancy.py",
                                              "mla_kernels.lab.occupancy")  # inside a function
    source = tmp_path / "problem.py"
    source.write_text('import importlib\nimportlib.import_module("mla_kernels.review.report")\n'
                      'cmd = ["python", "-m", "mla_kernels.lab.compile_check"]\n')
    named = imports(source, "mla_kernels.core.problem")
    assert named == {"mla_kernels.review.report", "mla_kernels.lab.compile_check"}
    assert upward({"mla_kernels.core.problem": named}) == [
        ("mla_kernels.core.problem", "mla_kernels.lab.compile_check"),
        ("mla_kernels.core.problem", "mla_kernels.review.report")]
    assert upward({"mla_kernels.lab.checks": {"mla_kernels"}}) == [
        ("mla_kernels.lab.checks", "mla_kernels")]
    old = {"mla_kernels.designs": {"mla_kernels.core.tuning"},
           "mla_kernels.core.tuning": {"mla_kernels.designs"}}
    assert find_cycle(old) == ["mla_kernels.core.tuning", "mla_kernels.designs",
                               "mla_kernels.core.tuning"]
    assert upward(old) == [("mla_kernels.core.tuning", "mla_kernels.designs")]
