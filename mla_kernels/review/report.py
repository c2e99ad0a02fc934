"""The batch run: execute every notebook with papermill for one configuration.

    python -m mla_kernels.report [--config NAME] [--out DIR] [--archive PATH]

``configs/<NAME>.yaml`` holds the parameters (shared ones, then per notebook). Without
``--config`` the run picks ``h200`` on an H200 and ``cpu`` anywhere else. Everything lands in
``reports/<NAME>/``: executed notebooks, HTML exports, figures (PNG and SVG) and CSVs. A
notebook that fails does not stop the others; the run ends with a summary and exits
non-zero, naming the failed notebook and the cell that raised.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from ..files import REPO_ROOT, atomic_path, write_text_atomic

CONFIG_DIR = REPO_ROOT / "configs"
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
REPORT_DIR = REPO_ROOT / "reports"


@dataclass
class NotebookResult:
    notebook: str
    ok: bool
    seconds: float
    output: str
    html: str | None = None
    error: str | None = None  # "cell 7 (In [5]): ValueError: ..." when it failed


# ------------------------------------------------------------------ configuration
def default_config() -> str:
    """``h200`` on an H200, ``cpu`` on anything else (a GPU of another kind included:
    the h200 sizes and ceilings would not fit it)."""
    try:
        import torch

        if torch.cuda.is_available() and "H200" in torch.cuda.get_device_name(0):
            return "h200"
    except Exception:  # a broken CUDA setup must still give a CPU report
        pass
    return "cpu"


CONFIG_KEYS = {"execution_timeout", "parameters", "notebooks"}


def load_config(name: str, config_dir: Path = CONFIG_DIR) -> dict:
    """The configuration ``name`` (a file in configs/ without .yaml, or a path). Its name is
    its file's stem; a key it does not know is an error, named, as is YAML that is not a
    mapping of the known sections."""
    path = Path(name)
    if path.suffix not in (".yaml", ".yml"):
        path = config_dir / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in config_dir.glob("*.yaml"))
        raise ValueError(f"--config: expected one of {known} or a .yaml path, got {name!r}")
    try:
        with open(path) as f:
            cfg = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: expected YAML, got a syntax error: "
                         f"{str(e).splitlines()[0]}") from None
    cfg = {} if cfg is None else cfg
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected a mapping of {sorted(CONFIG_KEYS)}, "
                         f"got a {type(cfg).__name__}")
    unknown = sorted(set(cfg) - CONFIG_KEYS)
    if unknown:
        raise ValueError(f"{path}: expected only the keys {sorted(CONFIG_KEYS)}, got {unknown} "
                         "(a configuration is named by its file)")
    for key in ("parameters", "notebooks"):
        cfg[key] = cfg.get(key) or {}
        if not isinstance(cfg[key], dict):
            raise ValueError(f"{path}: {key}: expected a mapping, got {cfg[key]!r}")
    cfg["name"] = path.stem
    return cfg


def notebook_parameters(cfg: dict, notebook: Path, out_dir: Path,
                        overrides: dict | None = None) -> dict:
    """What papermill injects into one notebook: the shared parameters it declares, then
    its own section, then command-line overrides it declares, then ``out_dir``.

    A name in the notebook's own section that its parameters cell lacks is an error (a
    typo would otherwise be ignored silently).
    """
    import papermill as pm

    declared = set(pm.inspect_notebook(str(notebook)))
    own = (cfg.get("notebooks") or {}).get(notebook.name) or {}
    unknown = sorted(set(own) - declared)
    if unknown:
        raise ValueError(f"configs/{cfg['name']}.yaml: {notebook.name} has no parameters "
                         f"{unknown}; its parameters cell declares {sorted(declared)}")
    params = {k: v for k, v in cfg["parameters"].items() if k in declared}
    params.update(own)
    params.update({k: v for k, v in (overrides or {}).items() if k in declared})
    if "out_dir" in declared:
        params["out_dir"] = str(out_dir)
    return params


# ------------------------------------------------------------------ running
def _error_summary(exc: BaseException) -> str:
    cell = getattr(exc, "cell_index", None)
    if cell is not None:
        return (f"cell {cell} (In [{exc.exec_count}]) of the executed notebook: "
                f"{exc.ename}: {str(exc.evalue).strip()[:300]}")
    return f"{type(exc).__name__}: {str(exc).strip()[:300]}"


def export_html(executed: Path, html_path: Path) -> Path:
    """The executed notebook as one self-contained HTML file, for reviewers without Jupyter:
    images embedded, no script or style loaded from a CDN (no MathJax, no require.js)."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(executed), as_version=4)
    exporter = HTMLExporter(template_name="classic", embed_images=True)
    exporter.mathjax_url = ""
    exporter.require_js_url = ""
    exporter.jquery_url = ""
    body, _ = exporter.from_notebook_node(nb)
    body = _strip_remote(body)
    write_text_atomic(html_path, body)
    return html_path


def _strip_remote(html: str) -> str:
    """Drop what a template still loads from the network: <script>/<link> tags with a remote
    or empty source, and inline module scripts that import from a URL (mermaid)."""
    import re

    html = re.sub(r'<script[^>]*\bsrc="(https?://[^"]*)?"[^>]*>\s*</script>', "", html)
    html = re.sub(r'<script[^>]*>(?:(?!</script>).)*?\bfrom\s+[\'"]https?://'
                  r'(?:(?!</script>).)*</script>', "", html, flags=re.S)
    return re.sub(r'<link[^>]*\bhref="https?://[^"]*"[^>]*>', "", html)


def run_notebook(notebook: Path, params: dict, out_dir: Path, *, timeout: int | None = None,
                 cell_progress: bool = True) -> NotebookResult:
    """Execute one notebook with papermill, write its executed copy and HTML export."""
    import papermill as pm

    executed = out_dir / "notebooks" / notebook.name
    executed.parent.mkdir(parents=True, exist_ok=True)
    html = out_dir / "html" / f"{notebook.stem}.html"
    t0 = time.monotonic()
    error = None
    try:
        pm.execute_notebook(
            str(notebook), str(executed), parameters=params, cwd=str(notebook.parent),
            kernel_name="python3", execution_timeout=timeout, request_save_on_cell_execute=True,
            progress_bar={"desc": f"  {notebook.stem}", "position": 1, "leave": False}
            if cell_progress else False)
    except Exception as exc:  # report it, then run the next notebook
        error = _error_summary(exc)
    seconds = time.monotonic() - t0
    html_out = None
    if executed.is_file():
        try:
            html_out = str(export_html(executed, html))
        except Exception as exc:  # an export failure must not hide the run's result
            error = error or f"HTML export: {_error_summary(exc)}"
    return NotebookResult(notebook.name, error is None, seconds, str(executed), html_out, error)


@contextlib.contextmanager
def child_environment(commit: str | None = None) -> Iterator[dict[str, str]]:
    """Environment the papermill kernels inherit, set before any of them starts (the
    interpreter switch is read once, when the kernel imports mla_kernels) and restored
    afterwards, so a caller's process is left as it was."""
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    changes = {}
    if not has_gpu:
        changes["TRITON_INTERPRET"] = "1"
    if commit:
        changes["MLA_COMMIT"] = commit
    elif "MLA_COMMIT" not in os.environ:
        from ..lab.provenance import git_commit

        # One commit for every notebook of the run, even if the tree moves meanwhile.
        changes["MLA_COMMIT"] = git_commit()
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield changes
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def archive(folder: Path, path: Path) -> Path:
    """The report folder as one .tar.gz (to bring it back from the GPU machine)."""
    path = Path(path)
    if not path.name.endswith((".tar.gz", ".tgz")):
        path = path.with_name(path.name + ".tar.gz")
    with atomic_path(path) as tmp, tarfile.open(tmp, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return path


def check_shared_parameters(cfg: dict, paths: list[Path]) -> None:
    """A shared parameter no notebook declares is a typo: an error, named."""
    import papermill as pm

    declared = set()
    for nb in paths:
        declared |= set(pm.inspect_notebook(str(nb)))
    unknown = sorted(set(cfg["parameters"]) - declared)
    if unknown:
        raise ValueError(f"configs/{cfg['name']}.yaml: parameters {unknown} are declared by no "
                         f"notebook; the notebooks declare {sorted(declared)}")


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _move(src_root: Path, dst_root: Path, rels: list[str]) -> None:
    for rel in rels:
        dst = dst_root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src_root / rel, dst)


def run_report(config: str | None = None, out: Path | None = None,
               notebooks: list[str] | None = None, overrides: dict | None = None,
               commit: str | None = None, cell_progress: bool = True,
               notebook_dir: Path = NOTEBOOK_DIR) -> tuple[Path, list[NotebookResult]]:
    """Run the batch; returns the report folder and one result per notebook (the CLI
    turns them into a summary and an exit code).

    The report folder's earlier files are set aside first (in a hidden folder beside it)
    and the run writes in place; at the end every earlier file the run did not write again
    (the outputs of a notebook that failed this time) is put back. ``summary.json`` lists
    what this run wrote and what was kept from earlier; an interrupted run leaves the
    earlier files in the hidden folder, not lost.
    """
    from tqdm import tqdm

    name = config or default_config()
    cfg = load_config(name)
    out_dir = (Path(out) if out else REPORT_DIR / cfg["name"]).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = sorted(Path(notebook_dir).glob("[0-9]*.ipynb"))
    if notebooks:
        wanted = {n.removesuffix(".ipynb") for n in notebooks}
        paths = [p for p in paths if p.stem in wanted or p.stem.split("_", 1)[0] in wanted]
        if not paths:
            raise ValueError(f"--notebooks: expected names from "
                             f"{sorted(p.stem for p in Path(notebook_dir).glob('[0-9]*.ipynb'))}"
                             f", got {sorted(wanted)}")
    else:
        check_shared_parameters(cfg, paths)
    earlier = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.earlier.", dir=out_dir.parent))
    _move(out_dir, earlier, [f for f in _files(out_dir) if f != "summary.json"])
    print(f"report: configuration {cfg['name']!r}, {len(paths)} notebooks -> {out_dir}",
          flush=True)
    results = []
    try:
        with child_environment(commit) as env:
            bar = tqdm(paths, desc="notebooks", unit="nb", position=0)
            for nb in bar:
                bar.set_postfix_str(nb.stem)
                try:
                    params = notebook_parameters(cfg, nb, out_dir, overrides)
                except Exception as exc:
                    results.append(NotebookResult(nb.name, False, 0.0, "", None,
                                                  _error_summary(exc)))
                    continue
                results.append(run_notebook(nb, params, out_dir,
                                            timeout=cfg.get("execution_timeout"),
                                            cell_progress=cell_progress))
            bar.close()
            commit_used = env.get("MLA_COMMIT", os.environ.get("MLA_COMMIT"))
    finally:
        written = [f for f in _files(out_dir) if f != "summary.json"]
        kept = [f for f in _files(earlier) if f not in set(written)]
        _move(earlier, out_dir, kept)
        shutil.rmtree(earlier, ignore_errors=True)
    summary = {"config": cfg["name"], "commit": commit_used,
               "notebooks": [asdict(r) for r in results], "written": written,
               "kept_from_earlier": kept}
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=1))
    return out_dir, results


def _parse_override(text: str) -> tuple[str, object]:
    key, sep, val = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"-p: expected KEY=VALUE, got {text!r}")
    return key.strip(), yaml.safe_load(val)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mla_kernels.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="configs/<NAME>.yaml (default: h200 on an H200, else cpu)")
    ap.add_argument("--out", type=Path, help="report folder (default: reports/<config>/)")
    ap.add_argument("--archive", type=Path, help="also write the report folder as a .tar.gz")
    ap.add_argument("--notebooks", nargs="+", help="run only these (stem or number prefix)")
    ap.add_argument("-p", "--param", action="append", type=_parse_override, default=[],
                    metavar="KEY=VALUE", help="override a parameter (YAML value) everywhere "
                    "it is declared")
    ap.add_argument("--commit", help="commit to record as provenance ($MLA_COMMIT); the device "
                    "copy of the tree has no .git")
    ap.add_argument("--no-cell-progress", action="store_true",
                    help="only the per-notebook progress bar")
    ap.add_argument("--notebook-dir", type=Path, default=NOTEBOOK_DIR, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        out_dir, results = run_report(args.config, args.out, args.notebooks, dict(args.param),
                                      args.commit, cell_progress=not args.no_cell_progress,
                                      notebook_dir=args.notebook_dir)
    except ValueError as e:  # a bad configuration or argument: said in one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\nsummary:")
    for r in results:
        status = "ok    " if r.ok else "FAILED"
        print(f"  {status} {r.notebook:28s} {r.seconds:6.1f} s" + (f"  {r.error}" if r.error
                                                                   else ""))
    print(f"\nreport in {out_dir}:")
    for sub in ("notebooks", "html", "figures", "data"):
        if (out_dir / sub).is_dir():
            n = sum(1 for p in (out_dir / sub).iterdir() if not p.name.startswith("."))
            print(f"  {sub + '/':11s} {n} files")
    if args.archive:
        print(f"archive: {archive(out_dir, args.archive)}")
    failed = [r for r in results if not r.ok]
    if failed:
        names = ", ".join(f"{r.notebook} ({r.error})" for r in failed)
        print(f"\nfailed: {names}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
