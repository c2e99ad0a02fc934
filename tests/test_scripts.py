"""The scripts under scripts/ keep working.

- Every patch under scripts/diag/ names, in its first lines, the commit it applies to
  (``# applies to: <40-hex commit>``) and, if it stacks on another, that patch
  (``# after: <name>``); each still applies there. The check extracts the files the patches
  touch from that commit (``git archive``), applies the patches it stacks on in order, then
  ``git apply --check``. With no git, or in a shallow clone (whose history may lack the
  commits), those tests skip and say why; in a full clone a commit that is missing fails.
- The Python scripts answer ``--help`` (their arguments parse before any GPU work), and the
  diagnostics with a CPU mode run it: ``launch_shape.py --check`` compiles its kernels for
  sm_90, ``gather_write_bound.py --check`` checks every grid under the interpreter.
- The shell scripts parse, and the round scripts, run with stand-ins for ``python3`` and
  ``nvidia-smi``, write to the folder they are given, or to ``reports/diag/`` with none.
"""

from __future__ import annotations

import io
import os
import re
import runpy
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
DIAG = SCRIPTS / "diag"
PATCHES = sorted(DIAG.glob("*.patch"))
PY_SCRIPTS = [p for p in sorted(SCRIPTS.glob("*.py")) + sorted(DIAG.glob("*.py"))
              if not p.name.startswith("_")]  # _args.py: a module the diagnostics import
SH_SCRIPTS = sorted(SCRIPTS.glob("*.sh")) + sorted(DIAG.glob("*.sh"))
SHA = re.compile(r"[0-9a-f]{40}")


def header(patch: Path) -> dict[str, str]:
    """The ``# key: value`` lines before the patch's first ``diff --git``."""
    fields = {}
    for line in patch.read_text().splitlines():
        if line.startswith("diff --git "):
            break
        m = re.match(r"# ([a-z ]+): (.*)", line)
        if m:
            fields[m.group(1)] = m.group(2).strip()
    return fields


def chain(patch: Path) -> list[Path]:
    """The patches ``patch`` stacks on, in the order they are applied, then ``patch``."""
    out = [patch]
    while "after" in header(out[0]):
        out.insert(0, DIAG / header(out[0])["after"])
        assert len(out) <= len(PATCHES), f"{patch.name}: its '# after:' lines form a loop"
    return out


def touched(patch: Path) -> set[str]:
    return {line.split()[2].removeprefix("a/") for line in patch.read_text().splitlines()
            if line.startswith("diff --git ")}


def git(*args: str, cwd: Path = ROOT, check: bool = False) -> subprocess.CompletedProcess:
    # Never let git find a repository above a temporary tree (it would apply there).
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(Path(cwd).parent))
    if cwd == ROOT:
        env.pop("GIT_CEILING_DIRECTORIES")
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, env=env, check=check)


@pytest.fixture(scope="module")
def history() -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the patches' commits cannot be read")
    r = git("rev-parse", "--is-shallow-repository")
    if r.returncode != 0:
        pytest.skip(f"not a git checkout ({r.stderr.decode().strip()})")
    if r.stdout.decode().strip() == "true":
        pytest.skip("a shallow clone: the commits the patches apply to may not be in it")


def test_every_patch_names_its_commit():
    assert PATCHES, "no patch under scripts/diag/"
    for patch in PATCHES:
        h = header(patch)
        assert SHA.fullmatch(h.get("applies to", "")), (
            f"{patch.name}: expected a first line '# applies to: <40-hex commit>', got {h}")
        if "after" in h:
            assert (DIAG / h["after"]).is_file(), f"{patch.name}: '# after: {h['after']}' is not there"


@pytest.mark.parametrize("patch", PATCHES, ids=[p.name for p in PATCHES])
def test_patch_applies_to_its_commit(patch: Path, history, tmp_path: Path):
    sha = header(patch)["applies to"]
    found = git("cat-file", "-e", f"{sha}^{{commit}}")
    assert found.returncode == 0, (
        f"{patch.name} applies to {sha}, which this clone does not have")
    paths = sorted(set().union(*(touched(p) for p in chain(patch))))
    paths = [p for p in paths if git("cat-file", "-e", f"{sha}:{p}").returncode == 0]
    archive = git("archive", "--format=tar", sha, "--", *paths, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp_path, filter="data")
        else:  # Python before 3.10.12 / 3.11.4
            tar.extractall(tmp_path)
    for base in chain(patch)[:-1]:
        r = git("apply", str(base), cwd=tmp_path)
        assert r.returncode == 0, f"{base.name} at {sha}: {r.stderr.decode()}"
    r = git("apply", "--check", str(patch), cwd=tmp_path)
    assert r.returncode == 0, f"{patch.name} at {sha}: {r.stderr.decode()}"


@pytest.mark.parametrize("script", PY_SCRIPTS, ids=[p.name for p in PY_SCRIPTS])
def test_python_script_help(script: Path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(script.parent))  # as `python3 <script>` puts it first
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(script), run_name="__main__")
    assert stop.value.code in (0, None)
    assert "usage:" in capsys.readouterr().out


def test_perf_matrix_lists_points(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["perf_matrix.py", "--list", "--points", "kimi/fp8_row/fp8/p1/*"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(SCRIPTS / "perf_matrix.py"), run_name="__main__")
    assert stop.value.code == 0
    assert "kimi/fp8_row/fp8/p1/32000" in capsys.readouterr().out


def _run(args: list[str], interpret: bool, timeout: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get(
        "PYTHONPATH")])), TRITON_INTERPRET="1" if interpret else "0")
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_launch_shape_compiles_for_sm90():
    r = _run([str(DIAG / "launch_shape.py"), "--check"], interpret=False, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if "shared" in line]
    assert len(lines) == 5, r.stdout
    assert "shared  221184" in lines[2], lines  # "+ smem": the 221 KB hopper_ws holds


@pytest.mark.slow
def test_gather_write_bound_cpu_check():
    r = _run([str(DIAG / "gather_write_bound.py"), "--check"], interpret=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "WRONG" not in r.stdout and r.stdout.count(": ok") >= 20, r.stdout[-2000:]


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@needs_bash
@pytest.mark.parametrize("script", SH_SCRIPTS, ids=[p.name for p in SH_SCRIPTS])
def test_shell_script_parses(script: Path):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _stubbed(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working folder whose scripts/ is the repository's, and a PATH whose python3 and
    nvidia-smi only log their arguments (to calls.log)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "scripts").symlink_to(SCRIPTS)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("python3", "nvidia-smi"):
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{tmp_path}/calls.log"\n')
        stub.chmod(0o755)
    return work, dict(os.environ, PATH=f"{stubs}{os.pathsep}{os.environ['PATH']}", SHA="abc1234")


@needs_bash
@pytest.mark.parametrize("name", ["bounds.sh", "rounds_ij.sh", "rounds_k.sh"])
@pytest.mark.parametrize("given", [True, False], ids=["folder given", "default folder"])
def test_round_script_writes_to_its_folder(name: str, given: bool, tmp_path: Path):
    work, env = _stubbed(tmp_path)
    out = tmp_path / "rows" if given else work / "reports" / "diag"
    args = ["bash", f"scripts/diag/{name}"] + ([str(out)] if given else [])
    r = subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.is_dir()
    calls = (tmp_path / "calls.log").read_text().splitlines()
    matrix = [c for c in calls if "scripts/perf_matrix.py" in c and "--empty" not in c]
    assert matrix and all(c.split()[2].startswith(f"{out if given else 'reports/diag'}/")
                          for c in matrix), calls
    bound = [c for c in calls if "write_bound.py" in c]
    assert all(f"--out {out if given else 'reports/diag'}" in c for c in bound), bound


@needs_bash
def test_device_run_refuses_an_unknown_step_before_anything_runs(tmp_path: Path):
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPTS / "device_run.sh"), "--out", str(out), "abc1234",
                        "nonsense"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown step nonsense" in r.stdout
    assert not out.exists()


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@needs_bash
@pytest.mark.parametrize("args", [[], ["-h"], ["--help"], ["--out", "x"], ["--out", "x", "--help"]],
                         ids=["no arguments", "-h", "--help", "--out alone", "--out then --help"])
def test_device_run_usage_exits_2_and_leaves_the_tree_as_it_was(args: list[str], tmp_path: Path):
    work, env = _stubbed(tmp_path)
    before = _tree(work)
    r = subprocess.run(["bash", "scripts/device_run.sh", *args], cwd=work, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage: bash scripts/device_run.sh" in r.stderr, r
    assert _tree(work) == before  # no reports/ folder, nothing installed
    assert not (tmp_path / "calls.log").exists()  # neither pip nor anything else was run


@needs_bash
def test_device_run_plan_reads_the_latest_committed_steps(tmp_path: Path):
    work, env = _stubbed(tmp_path)
    for run, secs in (("2026-01-01-aaaaaaaaaaaa", 999), ("2026-01-02-bbbbbbbbbbbb", 41.6)):
        (work / "data" / "h200" / run).mkdir(parents=True)
        (work / "data" / "h200" / run / "steps.csv").write_text(
            f"step,seconds,status\ninstall,12.2,0\nmatrix,{secs},0\nreport,50,1\n")
    before = _tree(work)
    r = subprocess.run(["bash", "scripts/device_run.sh", "--plan", "matrix", "report", "host"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines()[1:]}
    assert "42 s" in lines["matrix"] and "measured" in lines["matrix"]  # the latest run's
    assert "12 s" in lines["install"]
    # A step that failed there, or one it did not run, is planned at its limit.
    assert "limit" in lines["report"] and "240 s" in lines["report"]
    assert "limit" in lines["host"] and "150 s" in lines["host"]
    assert lines["total"].split()[1] == str(12 + 42 + 240 + 150)
    assert _tree(work) == before and not (tmp_path / "calls.log").exists()
    r = subprocess.run(["bash", "scripts/device_run.sh", "--plan", "nonsense"], cwd=work,
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown step nonsense" in r.stdout


@needs_bash
def test_device_run_times_each_step_into_steps_csv(tmp_path: Path):
    # python3 stubbed: the install, the provenance stamp (printed as the commit) and every
    # step "run"; each step's seconds and exit status are recorded, and run's total.
    work, env = _stubbed(tmp_path)
    (tmp_path / "bin" / "python3").write_text(
        f'#!/bin/sh\necho "python3 $*" >> "{tmp_path}/calls.log"\n'
        'case "$*" in *provenance*) echo abc1234 ;; *host_cost*) exit 3 ;; esac\n')
    out = tmp_path / "out"
    r = subprocess.run(["bash", "scripts/device_run.sh", "--out", str(out), "abc1234"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr  # the host step failed
    rows = [ln.split(",") for ln in (out / "steps.csv").read_text().splitlines()]
    assert rows[0] == ["step", "seconds", "status"]
    assert [s for s, _, _ in rows[1:]] == ["install", "precompile", "matrix", "budget",
                                          "report", "host", "run"]
    assert all(float(t) >= 0 for _, t, _ in rows[1:])
    assert {s: st for s, _, st in rows[1:]}["host"] != "0"
    assert rows[-1][2] == "1" and rows[1][2] == "0"
    calls = (tmp_path / "calls.log").read_text()
    assert "mla_kernels.lab.precompile" in calls and "--full-timing" in calls
