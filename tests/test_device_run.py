"""``scripts/device_run.sh``'s command line, with stand-ins for ``python3``: the usage on no
arguments, ``-h`` or ``--help`` (exit 2, nothing created or installed), ``--plan`` from the
latest committed run's ``steps.csv``, each step timed into ``steps.csv``, and the two-GPU
tests' command (``TESTS_K=second_gpu`` with ``tests-all``) selecting exactly those tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")



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


def _stub_python(tmp_path: Path, cases: str = "") -> None:
    """The python3 stub: it logs its arguments, prints the commit for the provenance stamp,
    and does ``cases`` (more shell case branches) besides."""
    (tmp_path / "bin" / "python3").write_text(
        f'#!/bin/sh\necho "python3 $*" >> "{tmp_path}/calls.log"\n'
        f'case "$*" in *provenance*) echo abc1234 ;; {cases} esac\n')


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
    _stub_python(tmp_path, "*host_cost*) exit 3 ;;")
    out = tmp_path / "out"
    r = subprocess.run(["bash", "scripts/device_run.sh", "--out", str(out), "abc1234"],
                       cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr  # the host step failed
    rows = [ln.split(",") for ln in (out / "steps.csv").read_text().splitlines()]
    assert rows[0] == ["step", "seconds", "status"]
    assert [s for s, _, _ in rows[1:]] == ["install", "precompile", "mma", "matrix", "budget",
                                          "report", "host", "run"]
    assert all(float(t) >= 0 for _, t, _ in rows[1:])
    assert {s: st for s, _, st in rows[1:]}["host"] != "0"
    assert rows[-1][2] == "1" and rows[1][2] == "0"
    calls = (tmp_path / "calls.log").read_text()
    assert "mla_kernels.lab.precompile" in calls and "--full-timing" in calls


@needs_bash
def test_device_run_ab_takes_the_points_asked(tmp_path: Path):
    # python3 stubbed: ab times the two trees at AB_POINTS' matrix points, passed as given
    # (globs unexpanded), and at its own points without it.
    work, env = _stubbed(tmp_path)
    _stub_python(tmp_path)
    for points, expect in (("kimi/*/*/p1/4096 kimi/fp8_row/fp8/p1/8192",
                            "--points kimi/*/*/p1/4096 kimi/fp8_row/fp8/p1/8192"), (None, None)):
        env_ab = dict(env, AB_OLD="old=.ab/old", **({"AB_POINTS": points} if points else {}))
        r = subprocess.run(["bash", "scripts/device_run.sh", "--out", str(tmp_path / "out"),
                            "abc1234", "ab"], cwd=work, env=env_ab, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        call = [ln for ln in (tmp_path / "calls.log").read_text().splitlines()
                if "ab_timing.py" in ln][-1]
        assert "--tree old=.ab/old --tree abc1234=." in call, call
        assert (expect in call) if expect else ("--points" not in call), call


@needs_bash
def test_device_run_splits_the_quick_tier_into_shards_covering_each_test_once(tmp_path: Path):
    # python3 stubbed: collection prints eleven node ids (one with spaces, as parametrized
    # ids have); each shard's pytest logs the ids it got, one a line; shard 2 fails.
    work, env = _stubbed(tmp_path)
    ids = [f"tests/t.py::test_{i}[{{'a': [{i}, 2]}}]" for i in range(11)]
    (tmp_path / "ids").write_text("\n".join(ids) + "\n")
    (tmp_path / "bin" / "python3").write_text(
        f'#!/bin/bash\ncase "$*" in\n  *provenance*) echo abc1234 ;;\n'
        f'  *--co*) echo "collected"; cat "{tmp_path}/ids" ;;\n'
        f'  *pytest*) shift 5; for a in "$@"; do echo "ran $a"; done\n'
        f'    [[ "$*" == *test_5* ]] && {{ echo "1 failed"; exit 1; }}; echo "2 passed" ;;\n'
        f'esac\nexit 0\n')
    out = tmp_path / "out"
    r = subprocess.run(["bash", "scripts/device_run.sh", "--out", str(out), "abc1234", "tests"],
                       cwd=work, env=dict(env, TESTS_SHARDS="4"), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr  # the worst shard's status
    log = (out / "pytest_gpu.log").read_text()
    ran = [ln[4:] for ln in log.splitlines() if ln.startswith("ran ")]
    # Every test once, its id whole, dealt out in turn: shard k runs tests k, k + 4, ...
    assert ran == [ids[i] for k in range(4) for i in range(k, 11, 4)]
    assert log.count("==== shard") == 4 and "1 failed" in log
    assert sorted(p.name for p in out.iterdir()) == ["pytest_gpu.log", "steps.csv"]
    assert (out / "steps.csv").read_text().splitlines()[-1].startswith("tests,")


@needs_bash
def test_a_copy_with_its_manifest_is_stamped_from_it_not_from_a_git_beside_it(tmp_path: Path):
    # A .git older than the files (a newer tree copied over an old checkout) must not decide
    # the stamp: every step runs with git out of reach, so provenance reads the manifest.
    work, env = _stubbed(tmp_path)
    (work / "provenance-manifest.json").write_text("{}")
    (tmp_path / "bin" / "python3").write_text(
        f'#!/bin/bash\necho "GIT_DIR=$GIT_DIR $*" >> "{tmp_path}/calls.log"\n'
        f'[[ "$*" == *provenance* ]] && echo abc1234\nexit 0\n')
    r = subprocess.run(["bash", "scripts/device_run.sh", "--out", str(tmp_path / "out"),
                        "abc1234", "budget"], cwd=work, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert any("provenance" in c for c in calls) and any("perf_matrix" in c for c in calls)
    assert all(c.startswith("GIT_DIR=/nonexistent/.git ") for c in calls if "pip" not in c)


@needs_bash
def test_device_run_tests_all_with_tests_k_second_gpu_runs_the_two_gpu_tests_alone(
        tmp_path: Path):
    # The two-GPU machine's command, `TESTS_K=second_gpu bash scripts/device_run.sh <commit>
    # tests-all`: python3 stubbed, its pytest call is read back, and then collected for real
    # here: exactly the tests of tests/call/test_second_gpu.py, every one of them.
    work, env = _stubbed(tmp_path)
    _stub_python(tmp_path, '*pytest*) echo "48 passed" ;;')
    out = tmp_path / "out"
    r = subprocess.run(["bash", "scripts/device_run.sh", "--out", str(out), "abc1234",
                        "tests-all"], cwd=work, env=dict(env, TESTS_K="second_gpu"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "48 passed" in (out / "pytest_gpu_all.log").read_text()
    assert (out / "steps.csv").read_text().splitlines()[-1].startswith("tests-all,")
    (call,) = [c.split() for c in (tmp_path / "calls.log").read_text().splitlines()
               if " -m pytest " in c]
    assert call[call.index("-k") + 1] == "second_gpu"
    paths = [w for w in call if w.startswith("tests")]

    def collected(*args: str) -> list[str]:
        res = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p",
                              "no:cacheprovider", *args], cwd=ROOT, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        return [ln for ln in res.stdout.splitlines() if "::" in ln]

    chosen = collected("-k", "second_gpu", *paths)
    assert chosen and chosen == collected("tests/call/test_second_gpu.py")


@needs_bash
@pytest.mark.parametrize("fails", [None, "mla_kernels.lab.context_map", "pytest",
                                   "mla_kernels.lab.diagnostics.expanded_bounds"])
def test_device_run_context_makes_the_map_and_runs_the_context_tests(fails, tmp_path: Path):
    # python3 stubbed: the map writes into the output folder, the tests and the bounds into
    # their logs; the step fails when any does, and all run all the same.
    work, env = _stubbed(tmp_path)
    # (Patterns on the module names: pytest's temporary folders hold "pytest" too.)
    fail = f'*"-m {fails}"*) echo failing; exit 4 ;;' if fails else ""
    _stub_python(tmp_path, f'{fail} *"-m mla_kernels.lab.context_map"*) echo "108 rows" ;; '
                           '*"-m pytest"*) echo "56 passed" ;; '
                           '*"-m mla_kernels.lab.diagnostics.expanded_bounds"*) echo "bounds" ;;')
    out = tmp_path / "out"
    r = subprocess.run(["bash", "scripts/device_run.sh", "--out", str(out), "abc1234",
                        "context"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == (1 if fails else 0), r.stdout + r.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    (cmap,) = [c for c in calls if "mla_kernels.lab.context_map" in c]
    assert f"--out {out}" in cmap
    (tests,) = [c for c in calls if " -m pytest " in c]
    assert "tests/context/test_gpu_context.py" in tests and "tests/context/test_attention.py" in tests
    (bounds,) = [c for c in calls if "expanded_bounds" in c]
    assert f"--out {out}" in bounds and "hopper,2,n128,apart" in bounds
    logs = {"context_map_log.txt": "108 rows", "pytest_gpu_context.log": "56 passed",
            "expanded_bounds_log.txt": "bounds"}
    failed_log = {None: None, "pytest": "pytest_gpu_context.log",
                  "mla_kernels.lab.diagnostics.expanded_bounds": "expanded_bounds_log.txt"}.get(
        fails, "context_map_log.txt")
    for name, text in logs.items():
        assert (out / name).read_text().strip() == ("failing" if name == failed_log else text)
    step = (out / "steps.csv").read_text().splitlines()[-1].split(",")
    assert step[0] == "context" and step[2] == ("4" if fails else "0")
