"""The command lines keep working. Every command is a module of the package, run as
``python -m mla_kernels.<layer>.<module>``, except the H200 run's driver and its steps under
``scripts/`` (README, "Commands").

- Every module with a ``__main__`` block answers ``--help`` (its arguments parse before any
  GPU work), and the README's table of commands names each one.
- The diagnostics with a CPU mode run it: ``launch_shape --check``, ``l2_stream --check``,
  ``sequence_gaps --check`` and ``absorbed_bounds --check`` compile their kernels for sm_90,
  ``gather_write_bound --check`` checks every grid under the interpreter.
- The scripts under ``scripts/`` answer ``--help``, the shell scripts parse, and the run's
  driver refuses an unknown step before anything runs.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
PY_SCRIPTS = sorted(SCRIPTS.glob("*.py"))
SH_SCRIPTS = sorted(SCRIPTS.glob("*.sh"))


def command_modules() -> list[str]:
    """The package's modules that run as a command (a ``__main__`` block)."""
    out = []
    for p in sorted((ROOT / "mla_kernels").rglob("*.py")):
        if re.search(r'^if __name__ == "__main__":', p.read_text(), re.M):
            out.append(".".join(p.relative_to(ROOT).with_suffix("").parts))
    return out


COMMANDS = command_modules()


def test_commands_are_found_and_the_readme_lists_them():
    assert "mla_kernels.review.report" in COMMANDS and "mla_kernels.lab.compile_check" in COMMANDS
    readme = (ROOT / "README.md").read_text()
    assert [m for m in COMMANDS if f"python -m {m}" not in readme] == []
    assert [p.name for p in PY_SCRIPTS + SH_SCRIPTS if f"scripts/{p.name}" not in readme] == []


# Run in this process, a module other tests imported is run again as __main__: runpy warns
# of it, which a command started on its own never meets.
@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")
@pytest.mark.parametrize("module", COMMANDS)
def test_command_help(module: str, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module(module, run_name="__main__")
    assert stop.value.code in (0, None)
    assert "usage:" in capsys.readouterr().out


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


@pytest.mark.slow
def test_launch_shape_compiles_for_sm90():
    r = _run(["-m", "mla_kernels.lab.diagnostics.launch_shape", "--check"], interpret=False,
             timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if "shared" in line]
    assert len(lines) == 5, r.stdout
    assert "shared  221184" in lines[2], lines  # "+ smem": the 221 KB hopper_ws holds


def test_sequence_gaps_gap_kernel_compiles_for_sm90():
    r = _run(["-m", "mla_kernels.lab.diagnostics.sequence_gaps", "--check"], interpret=False,
             timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "compiles for sm_90 (2 timer reads)" in r.stdout, r.stdout
    bad = _run(["-m", "mla_kernels.lab.diagnostics.sequence_gaps", "--gaps", "-5", "--check"],
               interpret=False, timeout=300)
    assert bad.returncode == 2 and "--gaps: expected" in bad.stderr, bad.stderr[-2000:]
    bad = _run(["-m", "mla_kernels.lab.diagnostics.sequence_gaps", "--config", "[6]", "--check"],
               interpret=False, timeout=300)
    assert bad.returncode == 2 and "--config: expected" in bad.stderr, bad.stderr[-2000:]


def _check_rows(diagnostic: str) -> list[dict]:
    """The JSON rows ``diagnostic --check`` prints (its launches compiled for sm_90)."""
    r = _run(["-m", f"mla_kernels.lab.diagnostics.{diagnostic}", "--check"], interpret=False,
             timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def _refuses_without_a_gpu(diagnostic: str) -> None:
    off = _run(["-m", f"mla_kernels.lab.diagnostics.{diagnostic}"], interpret=False,
               timeout=300)
    assert off.returncode != 0 and "expected an sm_90 GPU" in off.stderr + off.stdout, off


@pytest.mark.slow
def test_absorbed_bounds_compiles_each_side_for_sm90():
    rows = _check_rows("absorbed_bounds")
    assert [(x["cache"], x["parts"]) for x in rows] == [
        *(("fp8", p) for p in ("all", "dots", "gather", "unwidened")),
        *(("bf16", p) for p in ("all", "dots", "gather"))], rows
    # The dots' side and the unwidened kernel run every wgmma of the kernel (a key tile's
    # scores, 9 chunks x 4 steps, and each warpgroup's P V, 4 steps of N = 256), the
    # gather's none; nothing spills.
    every = 9 * 4 + 2 * 4
    assert {x["parts"]: x["wgmma"] for x in rows if x["cache"] == "fp8"} == {
        "all": every, "dots": every, "gather": 0, "unwidened": every}, rows
    assert all(x["spill_bytes"] == 0 for x in rows), rows
    _refuses_without_a_gpu("absorbed_bounds")


@pytest.mark.slow
def test_expanded_bounds_compiles_each_side_for_sm90():
    rows = _check_rows("expanded_bounds")
    # The dots' side runs every wgmma of the kernel, the loads' side none; nothing spills.
    wgmma = {x["parts"]: x["wgmma"] for x in rows}
    assert list(wgmma) == ["all", "dots", "loads"], rows
    assert wgmma["dots"] == wgmma["all"] > 0 and wgmma["loads"] == 0, rows
    assert all(x["spill_bytes"] == 0 for x in rows), rows
    bad = _run(["-m", "mla_kernels.lab.diagnostics.expanded_bounds", "--splits", "0"],
               interpret=False, timeout=300)
    assert bad.returncode == 2 and "--splits: expected a split count" in bad.stderr, bad.stderr
    _refuses_without_a_gpu("expanded_bounds")


@pytest.mark.slow
def test_l2_stream_compiles_for_sm90_one_program_an_sm():
    from mla_kernels.lab.compile_check import HOPPER_SMEM

    r = _run(["-m", "mla_kernels.lab.diagnostics.l2_stream", "--check"], interpret=False,
             timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    shared = [int(m) for m in re.findall(r"shared\s+(\d+)", r.stdout)]
    assert len(shared) == 10 and "tma loads 0" not in r.stdout, r.stdout
    # Each ring slot adds 16 KB (and its barriers); every depth fits an SM and leaves no
    # room for a second program, so each SM streams for one.
    steps = [b - a for a, b in zip(shared[:4], shared[1:5], strict=True)]
    assert all(16384 <= d <= 16384 + 32 for d in steps), shared
    assert all(HOPPER_SMEM // 2 < b <= HOPPER_SMEM for b in shared), (shared, HOPPER_SMEM)


@pytest.mark.slow
def test_gather_write_bound_cpu_check():
    r = _run(["-m", "mla_kernels.lab.diagnostics.gather_write_bound", "--check"], interpret=True,
             timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "WRONG" not in r.stdout and r.stdout.count(": ok") >= 20, r.stdout[-2000:]


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")


@needs_bash
@pytest.mark.parametrize("script", SH_SCRIPTS, ids=[p.name for p in SH_SCRIPTS])
def test_shell_script_parses(script: Path):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@needs_bash
def test_device_run_refuses_an_unknown_step_before_anything_runs(tmp_path: Path):
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPTS / "device_run.sh"), "--out", str(out), "abc1234",
                        "nonsense"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown step nonsense" in r.stdout
    assert not out.exists()


def test_write_bound_refuses_a_negative_sequence_before_gpu_work(capsys):
    from mla_kernels.lab.diagnostics import write_bound

    with pytest.raises(SystemExit) as stop:
        write_bound.main(["--sequence", "-1", "4096"])
    assert stop.value.code == 2
    assert "--sequence: expected N >= 0, got -1" in capsys.readouterr().err
