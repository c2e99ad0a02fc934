"""Every repository path the README, docs/, data/ and the package's READMEs name exists.

What counts as a named path: a markdown link's target that is not a URL or an anchor
(resolved against the naming file's folder), and an inline code span with no spaces that
contains a '/' or ends in a known file extension (resolved against the repository root,
then the naming file's folder). A span that starts with one of the repository's top-level
folders must resolve from the root or the file's folder; an elided one (`.../x/y.csv`) or a
relative one (`lab/checks.py`, `hopper_ws/`) must be the tail of some path in the tree; a
bare file name (`bench.py`) must name some file in the tree, or occur in its code (a name
the report writes, `formats.csv`). A path at a commit, `0aef7ec:scripts/diag/x.patch` (what
the log names of files since removed), is checked with git where the clone has that commit.
Placeholders and globs
(`<sha>`, `*`), paths under ignored build outputs (`reports/`, `.venv/`) and fenced code
blocks are skipped. Dotted module names (`mla_kernels.lab.bench`, `mla_kernels.review.report
--config`) are checked as files: the longest dotted prefix must be a module or package of
the tree, and a remaining attribute must occur in that module's source (no import, so no
GPU stack is needed).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
EXTENSIONS = (".py", ".md", ".csv", ".json", ".yaml", ".yml", ".ipynb", ".sh", ".patch",
              ".png", ".svg", ".log", ".toml", ".txt", ".ncu-rep", ".cfg", ".ini")
PLACEHOLDER = re.compile(r"[<>*?{}\[\]$|=,;()'\"]")
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
MODULE = re.compile(r"(?<![\w.])mla_kernels(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
POINT = re.compile(r"[\w.-]+/(bf16|fp8_row|fp8_block|mxfp4)/(bf16|fp8)/p\d+/")
AT_COMMIT = re.compile(r"([0-9a-f]{7,40}):([\w./-]+)")
FENCE = re.compile(r"^\s*(```|~~~)")


def documents(root: Path = ROOT) -> list[Path]:
    """The files whose paths are checked: README.md, every markdown file under docs/,
    data/README.md, then every other README.md under data/ (each run's notes) and
    mla_kernels/ (a design family's)."""
    docs = sorted((root / "docs").rglob("*.md"))
    index = root / "data" / "README.md"
    more = [p for top in ("data", "mla_kernels") for p in sorted((root / top).rglob("README.md"))
            if p != index]
    return [root / "README.md", *docs, index, *more]


def _ignored_roots(root: Path) -> set[str]:
    # The top-level build outputs that .gitignore names plainly (reports/, .venv/, ...): a
    # document may name them, a clone does not hold them.
    out = set()
    gi = root / ".gitignore"
    for line in gi.read_text().splitlines() if gi.is_file() else ():
        name = line.strip().strip("/")
        if name and not line.startswith("#") and not PLACEHOLDER.search(name) and "/" not in name:
            out.add(name)
    return out


class Tree:
    """The repository's files and folders, walked once (not git: a copy with no .git
    works too)."""

    def __init__(self, root: Path):
        self.root = root
        self.ignored = _ignored_roots(root) | {".git"}
        self.paths: set[str] = set()
        self.names: set[str] = set()
        for d, dirs, files in os.walk(root):
            rel = Path(d).relative_to(root)
            dirs[:] = [x for x in dirs if not (rel == Path(".") and x in self.ignored)
                       and x != "__pycache__"]
            for x in dirs + files:
                self.paths.add((rel / x).as_posix())
            self.names.update(files)
        self.top = {p for p in self.paths if "/" not in p}
        self._code: str | None = None

    def in_code(self, name: str) -> bool:
        if self._code is None:
            self._code = "\n".join(
                (self.root / p).read_text(errors="replace") for p in sorted(self.paths)
                if p.startswith(("mla_kernels/", "notebooks/", "scripts/"))
                and p.endswith((".py", ".ipynb", ".sh")) and (self.root / p).is_file())
        return name in self._code

    def has_tail(self, tail: str) -> bool:
        tail = tail.strip("/")
        return any(p == tail or p.endswith("/" + tail) for p in self.paths)


def _strip_fences(text: str) -> list[str]:
    lines, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            lines.append("")
        else:
            lines.append("" if inside else line)
    return lines


def _module_ok(tree: Tree, dotted: str) -> bool:
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = tree.root.joinpath(*parts[:n])
        src = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if src.is_file():
            rest = parts[n:]
            return not rest or re.search(rf"\b{re.escape(rest[0])}\b", src.read_text()) is not None
    return False


def _path_ok(tree: Tree, doc: Path, path: str, link: bool) -> bool:
    path = path.split("#", 1)[0].split("?", 1)[0]
    if not path:
        return True
    here = doc.parent
    if link:
        return (here / path).exists()
    if path.startswith(".../"):
        return tree.has_tail(path[4:])
    if (tree.root / path).exists() or (here / path).exists():
        return True
    first = path.strip("/").split("/", 1)[0]
    if first in tree.top or first in (".", ".."):
        return False  # named from the root (or the file's folder) and not there
    if "/" in path.strip("/"):
        return tree.has_tail(path)
    return path in tree.names or tree.has_tail(path) or tree.in_code(path)


def _git(root: Path, *args: str) -> int:
    try:
        return subprocess.run(["git", *args], cwd=root, capture_output=True).returncode
    except OSError:
        return 1


def _has_commit(root: Path, rev: str) -> bool:
    return _git(root, "cat-file", "-e", f"{rev}^{{commit}}") == 0


def _at_commit_ok(root: Path, rev: str, path: str) -> bool:
    if not _has_commit(root, rev):
        return True  # not a git clone, or a shallow one without that commit: unchecked
    return _git(root, "cat-file", "-e", f"{rev}:{path}") == 0


def named_paths(doc: Path, tree: Tree) -> list[tuple[int, str, str]]:
    """(line, kind, text) of every path ``doc`` names; kind is 'link', 'code' or 'module'."""
    out = []
    for no, line in enumerate(_strip_fences(doc.read_text()), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (http:, mailto:) or an anchor in the same page
            out.append((no, "link", target))
        for m in CODE.finditer(line):
            span = m.group(1).strip()
            for mod in MODULE.findall(span):
                out.append((no, "module", mod))
            if AT_COMMIT.fullmatch(span):
                out.append((no, "at commit", span))
                continue
            if " " in span or PLACEHOLDER.search(span) or "://" in span or span.startswith("-"):
                continue
            if MODULE.fullmatch(span):
                continue
            if "/" not in span and not span.endswith(EXTENSIONS):
                continue
            if POINT.match(span):
                continue  # a matrix point's name (kimi/fp8_row/fp8/p1/32000), not a path
            if re.sub(r"^(\./)+", "", span).split("/", 1)[0] in tree.ignored:
                continue
            out.append((no, "code", span))
    return out


def missing_paths(root: Path = ROOT) -> list[str]:
    """'file:line: path (kind)' for every named path that is not in the tree."""
    tree = Tree(root)
    bad = []
    for doc in documents(root):
        for no, kind, text in named_paths(doc, tree):
            if kind == "module":
                ok = _module_ok(tree, text)
            elif kind == "at commit":
                ok = _at_commit_ok(root, *text.split(":", 1))
            else:
                ok = _path_ok(tree, doc, text, kind == "link")
            if not ok:
                bad.append(f"{doc.relative_to(root).as_posix()}:{no}: {text} ({kind})")
    return bad


def test_every_named_path_exists():
    bad = missing_paths()
    assert not bad, (f"{len(bad)} path(s) named in README.md, docs/ or a README under data/ or "
                     "mla_kernels/ are not in the tree (fix the path, or the document):\n"
                     + "\n".join(bad))


def test_the_documents_name_paths_at_all():
    # A parser that found nothing would pass the test above on any tree.
    tree = Tree(ROOT)
    kinds = {k for doc in documents() for _, k, _ in named_paths(doc, tree)}
    assert kinds == {"link", "code", "module", "at commit"}, kinds


@pytest.mark.parametrize("wrong", [
    "`mla_kernels/checks.py`",                     # from the root, not there
    "`.../2026-12-01-nowhere/bounds.csv`",          # an elided path with no such tail
    "[the notes](../docs/no-such-notes.md)",        # a relative link
    "`mla_kernels.lab.no_such_module`",            # a dotted module
    "`mla_kernels.lab.matrix.NO_SUCH_NAME`",       # a module's attribute
    "`no_such_file.csv`",                          # a bare file name
])
def test_a_wrong_path_is_reported_with_its_file_and_line(wrong, tmp_path):
    # A copy of the tree's documents, one of them naming a wrong path on its third line.
    (tmp_path / "docs").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "mla_kernels" / "lab").mkdir(parents=True)
    (tmp_path / "mla_kernels" / "__init__.py").write_text("")
    (tmp_path / "mla_kernels" / "lab" / "__init__.py").write_text("")
    (tmp_path / "mla_kernels" / "lab" / "matrix.py").write_text("GRAPH8_POINTS = ()\n")
    (tmp_path / "data" / "README.md").write_text("`mla_kernels/lab/matrix.py`\n")
    (tmp_path / "docs" / "a.md").write_text("# a\n\n`mla_kernels.lab.matrix.GRAPH8_POINTS`\n")
    (tmp_path / "README.md").write_text(f"# r\n\n{wrong} and [a](docs/a.md)\n")
    assert missing_paths(tmp_path) == [f"README.md:3: {_named(wrong)}"]


def _named(wrong: str) -> str:
    if wrong.startswith("["):
        return wrong[wrong.index("(") + 1:-1] + " (link)"
    text = wrong.strip("`")
    return f"{text} ({'module' if text.startswith('mla_kernels.') else 'code'})"


def test_a_path_at_a_commit_is_checked_with_git():
    if not _has_commit(ROOT, "0aef7ec"):
        pytest.skip("no git history with 0aef7ec here")
    assert _at_commit_ok(ROOT, "0aef7ec", "scripts/diag/hopper_ws_ring6.patch")
    assert not _at_commit_ok(ROOT, "0aef7ec", "scripts/diag/no_such.patch")
