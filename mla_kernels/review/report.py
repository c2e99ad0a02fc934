"""The batch run: execute every notebook with papermill for one configuration.

    python -m mla_kernels.review.report [--config NAME] [--out DIR] [--archive PATH]

``configs/<NAME>.yaml`` holds the parameters (shared ones, then per notebook). Without
``--config`` the run picks ``h200`` on an H200 and ``cpu`` anywhere else. Everything lands in
``reports/<NAME>/``: executed notebooks, HTML exports, figures (PNG and SVG) and CSVs. The
notebooks write beside it first (``reports/<NAME>.incoming/``); a notebook's outputs replace
the report's only once it has run through. A notebook that fails does not stop the others,
and leaves the report's earlier outputs of it as they were (its own go to
``reports/<NAME>.failed/``); the run ends with a summary and exits non-zero, naming the
failed notebook and the cell that raised.

Everything the run is given is checked before it creates or writes anything: the
configuration file, its sections and keys, the notebooks selected, every parameter name
(declared by the notebooks, checked by ``mla_kernels.review.params``) and value, every
``-p``, the ``--out`` folder (one it can create and write) and ``--archive``'s, and a GPU
where a notebook is to measure. A bad one is a ValueError naming the argument or parameter,
what it expects and what it got: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from ..core.value_rules import int_in, optional
from ..lab.repo_files import REPO_ROOT, atomic_path, write_text_atomic

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
    data: str = ""  # the run a replot drew (its folder and commit); "" when it measured


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
# The measurement CSVs each notebook's replot reads from its data_dir (its
# ``measure_or_replot(..., names=...)``): checked before the run creates anything.
REPLOT_DATA = {"02_context_sweep.ipynb": ("context_sweep",),
               "03_roofline.ipynb": ("roofline",),
               "04_formats.ipynb": ("formats", "perf_matrix")}


class _UniqueKeys(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base constructor says so
                break
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"found the key {key!r} twice in one mapping",
                    key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _yaml(text):
    return yaml.load(text, Loader=_UniqueKeys)  # noqa: S506  a SafeLoader


def _shown(path: Path) -> str:
    """A path as messages name it: from the repository root when it lies under it."""
    path = Path(path).absolute()
    return str(path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path)


def load_config(name: str, config_dir: Path = CONFIG_DIR) -> dict:
    """The configuration ``name`` (a file in configs/ without .yaml, or a path). Its name is
    its file's stem, ``file`` the file as messages name it (the path as given, or
    configs/<name>.yaml); a key it does not know is an error, named, as is YAML that is not
    a mapping of the known sections or an ``execution_timeout`` that is not seconds."""
    path = Path(name)
    if path.suffix not in (".yaml", ".yml"):
        path = config_dir / f"{name}.yaml"
        shown = _shown(path)
    else:
        shown = str(name)
    if not path.is_file():
        known = sorted(p.stem for p in config_dir.glob("*.yaml"))
        raise ValueError(f"--config: expected one of {known} or a .yaml file, got {name!r}")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = _yaml(f)
    except UnicodeDecodeError as e:
        raise ValueError(f"{shown}: expected UTF-8 YAML, got byte {e.object[e.start]:#x} at "
                         f"offset {e.start}") from None
    except (yaml.YAMLError, ValueError, RecursionError) as e:
        first = str(e).splitlines()
        detail = " ".join(x.strip() for x in first[:3] if x.strip())
        raise ValueError(f"{shown}: expected YAML with each key once, got: {detail}") from None
    cfg = {} if cfg is None else cfg
    if not isinstance(cfg, dict):
        raise ValueError(f"{shown}: expected a mapping of {sorted(CONFIG_KEYS)}, "
                         f"got a {type(cfg).__name__}")
    unknown = sorted(set(cfg) - CONFIG_KEYS)
    if unknown:
        raise ValueError(f"{shown}: expected only the keys {sorted(CONFIG_KEYS)}, got {unknown} "
                         "(a configuration is named by its file)")
    for key in ("parameters", "notebooks"):
        cfg[key] = cfg.get(key) or {}
        if not isinstance(cfg[key], dict):
            raise ValueError(f"{shown}: {key}: expected a mapping, got {cfg[key]!r}")
    for nb, own in cfg["notebooks"].items():
        if own is not None and not isinstance(own, dict):
            raise ValueError(f"{shown}: notebooks: {nb}: expected a mapping of its parameters, "
                             f"got {own!r}")
    try:
        cfg["execution_timeout"] = optional(int_in(1))("execution_timeout",
                                                       cfg.get("execution_timeout"))
    except ValueError as e:
        raise ValueError(f"{shown}: {e} (seconds per cell)") from None
    cfg["name"], cfg["file"] = path.stem, shown
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
        raise ValueError(f"{_config_file(cfg)}: {notebook.name} has no parameters "
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


def export_html(executed: Path, html_path: Path, title: str | None = None) -> Path:
    """The executed notebook as one self-contained HTML file, for reviewers without Jupyter:
    images embedded, no script or style loaded from a CDN (no MathJax, no require.js);
    titled ``title`` (a browser tab of several reports says which notebook and run)."""
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(executed), as_version=4)
    if title:
        nb.metadata["title"] = title
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
                 cell_progress: bool = True, run: str | None = None) -> NotebookResult:
    """Execute one notebook with papermill, write its executed copy and HTML export (titled
    by the notebook and ``run``, e.g. "configuration cpu, commit 0123abcd4567")."""
    import papermill as pm

    executed = out_dir / "notebooks" / notebook.name
    executed.parent.mkdir(parents=True, exist_ok=True)
    html = out_dir / "html" / f"{notebook.stem}.html"
    t0 = time.monotonic()
    error = None
    # A kernel that dies before it answers ran no cell (jupyter_client picks its ports
    # before binding them, so another process can take one meanwhile): started once more.
    for attempt in range(2):
        try:
            pm.execute_notebook(
                str(notebook), str(executed), parameters=params, cwd=str(notebook.parent),
                kernel_name="python3", execution_timeout=timeout,
                request_save_on_cell_execute=True,
                progress_bar={"desc": f"  {notebook.stem}", "position": 1, "leave": False}
                if cell_progress else False)
        except Exception as exc:  # report it, then run the next notebook
            error = _error_summary(exc)
            if attempt == 0 and "Kernel died before replying to kernel_info" in str(exc):
                error = None
                continue
        break
    seconds = time.monotonic() - t0
    html_out = None
    if executed.is_file():
        try:
            title = f"{notebook.stem}: {run}" if run else notebook.stem
            html_out = str(export_html(executed, html, title))
        except Exception as exc:  # an export failure must not hide the run's result
            error = error or f"HTML export: {_error_summary(exc)}"
    return NotebookResult(notebook.name, error is None, seconds, str(executed), html_out, error)


@contextlib.contextmanager
def child_environment() -> Iterator[dict[str, str]]:
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
    """The report folder as one .tar.gz (to bring it back from the GPU machine), with the
    outputs of the notebooks that failed, where there are any (``<folder>.failed``)."""
    path = Path(path)
    if not path.name.endswith((".tar.gz", ".tgz")):
        path = path.with_name(path.name + ".tar.gz")
    failed = staging_dirs(Path(folder))[1]
    with atomic_path(path) as tmp, tarfile.open(tmp, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
        if failed.is_dir():
            tar.add(failed, arcname=failed.name)
    return path


def _config_file(cfg: dict) -> str:
    return cfg.get("file") or f"configs/{cfg['name']}.yaml"


def check_shared_parameters(cfg: dict, paths: list[Path]) -> None:
    """A shared parameter no notebook declares is a typo: an error, named."""
    import papermill as pm

    declared = set()
    for nb in paths:
        declared |= set(pm.inspect_notebook(str(nb)))
    unknown = sorted(set(cfg["parameters"]) - declared)
    if unknown:
        raise ValueError(f"{_config_file(cfg)}: parameters {unknown} are declared by no "
                         f"notebook; the notebooks declare {sorted(declared)}")


def select_notebooks(notebook_dir: Path, notebooks: list[str] | None) -> list[Path]:
    """The notebooks of ``notebook_dir`` a run executes: all, or those named (a stem or its
    number prefix, with or without .ipynb: "03_roofline", "03", "3"); a name matching none is
    an error, named."""
    paths = sorted(Path(notebook_dir).glob("[0-9]*.ipynb"))
    if not notebooks:
        return paths

    def matches(p: Path, name: str) -> bool:
        number = p.stem.split("_", 1)[0]
        return name in (p.stem, number) or (name.isdigit() and number.isdigit()
                                            and int(name) == int(number))

    wanted = [n.removesuffix(".ipynb") for n in notebooks]
    unmatched = [n for n in wanted if not any(matches(p, n) for p in paths)]
    if unmatched:
        raise ValueError(f"--notebooks: expected names from {[p.stem for p in paths]} (a stem "
                         f"or its number), got {unmatched}")
    return [p for p in paths if any(matches(p, n) for n in wanted)]


def _check_values(values: dict, where: str) -> None:
    """Each name one of params.SPECS (the notebooks' vocabulary), each value one it takes;
    ``out_dir`` is --out's."""
    from . import params

    for name, value in values.items():
        if name == "out_dir":
            raise ValueError(f"{where}out_dir: expected --out to name the report folder, got "
                             f"{value!r} (the run sets out_dir itself)")
        if name not in params.SPECS:
            raise ValueError(f"{where}{name}: expected a parameter mla_kernels.review.params "
                             f"checks, one of {sorted(params.SPECS)}, got {value!r}")
        try:
            params.SPECS[name](name, value)
        except ValueError as e:
            raise ValueError(f"{where}{e}") from None


def check_out(out: Path) -> None:
    """``--out`` must be a folder the run can create and write (its parent too: the run
    writes beside it first): a ValueError naming it when it is a file, lies under
    one, or where this user cannot write."""
    out = Path(out).absolute()
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: expected a folder, got {str(out)!r} (a file)")
    top = out
    while not top.exists():
        top = top.parent
    if not top.is_dir():
        raise ValueError(f"--out: expected a folder it can create, got {str(out)!r} "
                         f"({top} is a file)")
    for folder in ([out, out.parent] if out.exists() else [top]):
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ValueError(f"--out: expected a folder this user can write, got "
                             f"{str(out)!r} ({folder} is not writable)")


def check_archive(path: Path) -> None:
    """``--archive``'s folder must exist and be writable: found out before the run, not
    after it."""
    folder = Path(path).absolute().parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"--archive: expected a file in a writable folder, got {str(path)!r} "
                         f"({folder} is {'not writable' if folder.is_dir() else 'no folder'})")


def parse_overrides(texts: list[str]) -> dict:
    """``-p KEY=VALUE`` arguments as {KEY: VALUE read as YAML}; a ValueError naming a
    malformed one."""
    out = {}
    for text in texts:
        key, sep, val = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"-p: expected KEY=VALUE, got {text!r}")
        shown = repr(val) if len(val) <= 200 else f"{val[:200]!r}... ({len(val)} characters)"
        try:
            out[key] = _yaml(val)
        except (yaml.YAMLError, ValueError, RecursionError) as e:  # ValueError: int digits
            detail = " ".join(x.strip() for x in str(e).splitlines()[:3] if x.strip())[:200]
            raise ValueError(f"-p {key}: expected a YAML value, got {shown} ({detail})") from None
    return out


@dataclass
class Plan:
    """A checked run: its configuration, report folder and, per notebook, what papermill
    injects."""

    cfg: dict
    out_dir: Path
    jobs: list[tuple[Path, dict]]
    sources: dict[str, str]  # per replotting notebook, the run it draws


def plan_report(config: str | None = None, out: Path | None = None,
                notebooks: list[str] | None = None, overrides: dict | None = None,
                notebook_dir: Path = NOTEBOOK_DIR) -> Plan:
    """Check everything a run is given, creating and writing nothing; a ValueError names the
    first bad argument, section or parameter (see the module's docstring)."""
    import papermill as pm

    from . import analysis, params

    cfg = load_config(config or default_config())
    file = cfg["file"]
    every = sorted(Path(notebook_dir).glob("[0-9]*.ipynb"))
    paths = select_notebooks(notebook_dir, notebooks)
    declared = {p.name: set(pm.inspect_notebook(str(p))) for p in every}
    # The configuration against every notebook (it serves any selection); -p keys against
    # the notebooks this run executes (anywhere else they would change nothing).
    unknown = sorted(set(cfg["notebooks"]) - set(declared))
    if unknown:
        raise ValueError(f"{file}: notebooks: expected sections named after notebooks, one of "
                         f"{sorted(declared)}, got {unknown}")
    check_shared_parameters(cfg, every)
    _check_values(cfg["parameters"], f"{file}: parameters: ")
    for nb, own in cfg["notebooks"].items():
        unknown = sorted(set(own or {}) - declared[nb])
        if unknown:
            raise ValueError(f"{file}: notebooks: {nb}: expected parameters its parameters "
                             f"cell declares, {sorted(declared[nb])}, got {unknown}")
        _check_values(own or {}, f"{file}: notebooks: {nb}: ")
    overrides = dict(overrides or {})
    run_declared = set().union(*(declared[p.name] for p in paths)) - {"out_dir"}
    for key, value in overrides.items():
        if key != "out_dir" and key not in run_declared:
            raise ValueError(f"-p {key}: expected a parameter of the notebooks run, one of "
                             f"{sorted(run_declared)}, got {value!r}")
    _check_values(overrides, "-p ")
    out_dir = (Path(out) if out else REPORT_DIR / cfg["name"]).resolve()
    jobs = [(p, notebook_parameters(cfg, p, out_dir, overrides)) for p in paths]
    measuring = [p.name for p, v in jobs if v.get("mode") == "measure"]
    if measuring:
        by = " with -p mode=measure" if overrides.get("mode") == "measure" else ""
        params.check_measurable("measure", f" ({', '.join(measuring)} in {file}{by})")
    sources = {}
    for p, v in jobs:  # what each replot reads, before any output exists
        if v.get("mode") == "replot" and p.name in REPLOT_DATA and "data_dir" in v:
            data_dir = v["data_dir"] if Path(v["data_dir"]).is_absolute() else (
                REPO_ROOT / v["data_dir"])
            try:
                analysis.check_data_dir(data_dir, REPLOT_DATA[p.name])
            except ValueError as e:
                raise ValueError(f"{p.name}: {e}") from None
            sources[p.name] = analysis.replot_source(data_dir, REPLOT_DATA[p.name])
    check_out(out_dir)
    return Plan(cfg, out_dir, jobs, sources)


def staging_dirs(out_dir: Path) -> tuple[Path, Path]:
    """The folders beside the report folder: where a run writes (``<out>.incoming``) before
    its notebooks' outputs replace the report's, and where the outputs of notebooks that
    failed are left (``<out>.failed``)."""
    return (out_dir.with_name(out_dir.name + ".incoming"),
            out_dir.with_name(out_dir.name + ".failed"))


def _create_out(out_dir: Path) -> Path:
    """Create the report folder and, empty, the one beside it the run writes into; the OS
    refusing (a read-only mount) is a ValueError naming --out, nothing left made."""
    made = not out_dir.exists()
    incoming, _ = staging_dirs(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(incoming, ignore_errors=True)  # an interrupted run's
        incoming.mkdir()
        return incoming
    except OSError as e:
        if made and out_dir.is_dir():
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise ValueError(f"--out: expected a folder this run can create and write, got "
                         f"{str(out_dir)!r} ({e.strerror or e})") from None


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _move(src_root: Path, dst_root: Path, rels: list[str]) -> None:
    for rel in rels:
        dst = dst_root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src_root / rel, dst)


# Notebooks that, re-plotting (any mode but "measure"), launch nothing on a GPU and read no
# other notebook's outputs: a run starts them at once, each in its own process, beside the
# others, which run one at a time in order (a GPU's timings see no other launch). The
# context sweep re-plotting still checks kernels on the device, and the occupancy notebook
# reads compiled kernels: neither is here.
BESIDE = frozenset({"04_formats.ipynb", "05_context_path.ipynb"})


def runs_beside(notebook: Path, params: dict, beside=BESIDE) -> bool:
    """Whether the run starts ``notebook`` beside the others (``BESIDE``, not measuring)."""
    return notebook.name in beside and params.get("mode") != "measure"


def _run_beside(notebook: Path, params: dict, out_dir: Path, timeout, run) -> NotebookResult:
    """``run_notebook`` in a worker process; whatever it raises is the notebook's error."""
    try:
        return run_notebook(notebook, params, out_dir, timeout=timeout, cell_progress=False,
                            run=run)
    except Exception as exc:  # noqa: BLE001  reported as the notebook's failure
        return NotebookResult(notebook.name, False, 0.0, str(out_dir / "notebooks" /
                                                             notebook.name),
                              error=_error_summary(exc))


def run_report(config: str | None = None, out: Path | None = None,
               notebooks: list[str] | None = None, overrides: dict | None = None,
               cell_progress: bool = True,
               notebook_dir: Path = NOTEBOOK_DIR,
               beside=BESIDE) -> tuple[Path, list[NotebookResult]]:
    """Run the batch; returns the report folder and one result per notebook, in notebook
    order (the CLI turns them into a summary and an exit code).

    The notebooks of ``beside`` that do not measure (``runs_beside``) start at once, each in
    a process of its own; the others run one after another in order. Each notebook writes
    into a folder of its own beside the report folder (under ``staging_dirs``'
    ``<out>.incoming``). At the end the files of every notebook that ran through replace
    their earlier versions in the report folder (in notebook order: a later notebook's
    file of the same name wins); those of a notebook that failed go to ``<out>.failed``
    instead, so the report keeps that notebook's earlier outputs as they were (a run whose
    notebooks all fail changes only ``summary.json``). ``summary.json`` lists what this run
    wrote, what was kept from earlier, and what failed. Nothing is created before
    ``plan_report`` has checked what the run is given (its ValueError reaches the caller).
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    plan = plan_report(config, out, notebooks, overrides, notebook_dir)
    cfg, out_dir = plan.cfg, plan.out_dir
    incoming = _create_out(out_dir)
    _, failed_dir = staging_dirs(out_dir)
    print(f"report: configuration {cfg['name']!r}, {len(plan.jobs)} notebooks -> {out_dir}",
          flush=True)
    results: list[NotebookResult | None] = [None] * len(plan.jobs)
    staged = [incoming / nb.stem for nb, _ in plan.jobs]  # each notebook's own folder
    try:
        from ..lab.provenance import git_commit

        # Each notebook derives the commit of the tree it imports; the summary says the
        # runner's (the same unless the tree changed during the run, which +dirty shows).
        commit_used = git_commit()
        with child_environment():
            calls = []
            for i, (nb, params) in enumerate(plan.jobs):
                staged[i].mkdir()
                if "out_dir" in params:
                    params = {**params, "out_dir": str(staged[i])}
                data = plan.sources.get(nb.name, "")
                run = (f"configuration {cfg['name']}, code at commit {commit_used}"
                       + (f", data of {data}" if data else ""))
                calls.append((i, nb, params, data, run))
            together = [c for c in calls if runs_beside(c[1], c[2], beside)]
            in_order = [c for c in calls if c not in together]
            pool = (ProcessPoolExecutor(len(together), mp_context=mp.get_context("spawn"))
                    if together else None)
            try:
                pending = {i: (pool.submit(_run_beside, nb, params, staged[i],
                                           cfg.get("execution_timeout"), run), data)
                           for i, nb, params, data, run in together}
                if together:
                    print("  beside the others: "
                          + ", ".join(nb.stem for _, nb, *_ in together), flush=True)
                bar = tqdm(in_order, desc="notebooks", unit="nb", position=0)
                for i, nb, params, data, run in bar:
                    bar.set_postfix_str(nb.stem)
                    results[i] = run_notebook(nb, params, staged[i],
                                              timeout=cfg.get("execution_timeout"),
                                              cell_progress=cell_progress, run=run)
                    results[i].data = data
                bar.close()
                for i, (future, data) in pending.items():
                    results[i] = future.result()
                    results[i].data = data
            finally:
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
    finally:
        done = [(r, staged[i]) for i, r in enumerate(results) if r is not None]
        ok_files = {rel for r, home in done if r.ok for rel in _files(home)}
        written = sorted(ok_files - {"summary.json"})
        failed_files = sorted({rel for r, home in done if not r.ok for rel in _files(home)})
        shutil.rmtree(failed_dir, ignore_errors=True)
        for r, home in done:  # in notebook order: a later notebook's file replaces it
            _move(home, out_dir if r.ok else failed_dir, _files(home))
        shutil.rmtree(incoming, ignore_errors=True)
    results = [r for r, _ in done]
    kept = [f for f in _files(out_dir) if f not in set(written) and f != "summary.json"]
    for r, home in done:  # the paths it reports: where the files now are
        dest = out_dir if r.ok else failed_dir
        r.output = str(dest / Path(r.output).relative_to(home))
        if r.html:
            r.html = str(dest / Path(r.html).relative_to(home))
    summary = {"config": cfg["name"], "commit": commit_used,
               "notebooks": [asdict(r) for r in results], "written": written,
               "kept_from_earlier": kept,
               "failed_outputs": ({"folder": str(failed_dir), "files": failed_files}
                                  if failed_files else None)}
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=1))
    return out_dir, results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mla_kernels.review.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="NAME of configs/<NAME>.yaml, or a .yaml path (default: "
                    "h200 on an H200, else cpu)")
    ap.add_argument("--out", type=Path, help="report folder (default: reports/<config>/)")
    ap.add_argument("--archive", type=Path, help="also write the report folder as a .tar.gz")
    ap.add_argument("--notebooks", nargs="+", help="run only these (stem or number prefix)")
    ap.add_argument("-p", "--param", action="append", default=[],
                    metavar="KEY=VALUE", help="override a parameter (YAML value) everywhere "
                    "it is declared")
    ap.add_argument("--no-cell-progress", action="store_true",
                    help="only the per-notebook progress bar")
    ap.add_argument("--notebook-dir", type=Path, default=NOTEBOOK_DIR, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        overrides = parse_overrides(args.param)
        if args.archive:
            check_archive(args.archive)
        out_dir, results = run_report(args.config, args.out, args.notebooks, overrides,
                                      cell_progress=not args.no_cell_progress,
                                      notebook_dir=args.notebook_dir)
    except ValueError as e:  # a bad configuration or argument: said in one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\nsummary:")
    for r in results:
        status = "ok    " if r.ok else "FAILED"
        print(f"  {status} {r.notebook:28s} {r.seconds:6.1f} s" + (f"  {r.error}" if r.error
                                                                   else "")
              + (f"\n         re-plotted {r.data}" if r.data else ""))
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
        print(f"\nfailed: {names}; their outputs are in {staging_dirs(out_dir)[1]}, the "
              "report keeps their earlier ones", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
