"""Compile-only checks for the MI355X (gfx950, wave64), with no GPU: what the portable
designs take of a CDNA4 CU (VGPRs, SGPRs, LDS, the compiler's occupancy, MFMA), and the
resident programs per CU worked out from those numbers against the compiler's own
``; Occupancy:`` line. Runs the compile in a child process with the interpreter off, since
this process may have decorated the kernels for the interpreter."""

import json
import os
import subprocess
import sys

import pytest

from mla_kernels.core.devices import DEVICES
from mla_kernels.designs import resolve
from mla_kernels.lab.compile_check import (
    AMD_MAX_WAVES_PER_SIMD,
    amd_backend_missing,
    amd_resident_programs,
    parse_amdgcn,
)
from mla_kernels.lab.occupancy import problem_for

MI355X = DEVICES["MI355X"]
PORTABLE = ("serial", "chunked", "tiled")


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="0")
    return subprocess.run([sys.executable, "-m", "mla_kernels.lab.compile_check", "--device",
                           "MI355X", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def _rows(out: subprocess.CompletedProcess) -> list[dict]:
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def reports():
    """fp8 (OCP e4m3fn) cache, fp8_row weight, compiled for gfx950."""
    pytest.importorskip("triton.backends.amd.compiler",
                        reason="this triton has no AMD backend (triton.backends.amd)")
    missing = amd_backend_missing()
    if missing:
        pytest.skip(missing)
    out = _run_cli("--variant", *PORTABLE, "--weight-format", "fp8_row")
    assert out.returncode == 0, out.stderr[-3000:]
    return {r["variant"]: r for r in _rows(out)}


@pytest.mark.slow
@pytest.mark.parametrize("variant", PORTABLE)
def test_compiles_for_gfx950(reports, variant):
    r = reports[variant]
    assert (r["design"], r["arch"], r["cache_dtype"]) == (variant, "gfx950", "fp8")
    assert r["warp_size"] == 64 and r["num_warps"] > 0
    assert r["vgprs"] > 0 and r["sgprs"] > 0 and r["agprs"] >= 0
    assert isinstance(r["occupancy_waves_per_simd"], int)
    assert 0 < r["occupancy_waves_per_simd"] <= AMD_MAX_WAVES_PER_SIMD
    # The portable designs keep everything in registers and LDS at this shape: no scratch.
    assert r["scratch_bytes"] == 0 and r["vgpr_spill_count"] == 0 and r["sgpr_spill_count"] == 0
    assert isinstance(r["lds_bytes"], int) and r["lds_bytes"] > 0


@pytest.mark.slow
def test_tiled_dot_is_mfma(reports):
    # gfx950 has a native fp8 MFMA (v_mfma_*_f8f6f4): the fp8 dot is not upcast.
    r = reports["tiled"]
    assert r["mfma"] > 0
    assert any("f8" in k for k in r["mfma_kinds"]), r["mfma_kinds"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", [
    pytest.param("serial", marks=pytest.mark.xfail(strict=True, reason=(
        "found by this check: triton 3.9's AMD stream pipeliner (num_stages=2 by default) "
        "double-buffers each of the serial loop's 8 dot operand pairs in LDS, 331648 B "
        "(8 x (8 KiB + 32 KiB) + 3968 B) for the fp8 head, over the CU's 160 KiB; "
        "config num_stages=1 compiles to 16 KiB"))),
    "chunked", "tiled"])
def test_lds_fits_an_mi355x_cu(reports, variant):
    r = reports[variant]
    assert r["lds_bytes"] <= MI355X.smem_per_program, r["lds_bytes"]
    assert r["resident"]["lds_fits"] and r["resident"]["programs_per_cu"] >= 1


@pytest.mark.slow
@pytest.mark.parametrize("variant", PORTABLE)
def test_resident_programs_agree_with_the_compiler(reports, variant):
    r = reports[variant]
    res = amd_resident_programs(r, MI355X)
    assert res == r["resident"]  # the row's figure is this function's
    # The arithmetic by hand: 512 VGPRs per SIMD lane, granules of 8, at most 8 waves.
    vgprs = r["vgprs_for_occupancy"]
    by_hand = min(AMD_MAX_WAVES_PER_SIMD, 512 // (-(-vgprs // 8) * 8))
    if r["sgprs_for_occupancy"] > 100:
        by_hand = min(by_hand, 7)
    assert res["waves_per_simd_by_registers"] == by_hand == r["occupancy_waves_per_simd"]
    assert res["agrees_with_compiler"] is True
    # A program of num_warps waves over 4 SIMDs: never more programs than the registers allow.
    assert res["programs_per_cu"] <= 4 * by_hand // r["num_warps"]
    assert res["waves_per_cu"] == res["programs_per_cu"] * r["num_warps"]


@pytest.mark.parametrize("variant", ["hopper_ws", "tiled_tma"])
def test_sm90_only_designs_are_refused_for_the_mi355x(variant):
    prob = problem_for("kimi-k3-tp8", [300], "fp8", "fp8_row")
    with pytest.raises(ValueError, match=variant):
        resolve(variant, prob, MI355X)


@pytest.mark.slow
def test_cli_reports_refusals(reports):
    out = _run_cli("--variant", "hopper_ws", "tiled_tma")
    assert out.returncode == 1
    rows = _rows(out)
    assert [r["variant"] for r in rows] == ["hopper_ws", "tiled_tma"]
    assert all("MI355X" in r["error"] for r in rows)


# ------------------------------------------------------------ no compiler needed below
_ASM = """\
; Kernel info:
; TotalNumSgprs: 46
; NumVgprs: 156
; NumAgprs: 0
; TotalNumVgprs: 156
; ScratchSize: 0
; NumSGPRsForWavesPerEU: 46
; NumVGPRsForWavesPerEU: 156
; Occupancy: 3
\tv_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15]
\tv_mfma_f32_32x32x64_f8f6f4 v[0:15], v[16:23], v[24:31], v[0:15]
"""


def test_parse_amdgcn_reads_what_is_stated_and_nothing_else():
    p = parse_amdgcn(_ASM)
    assert (p["sgprs"], p["vgprs"], p["agprs"], p["occupancy_waves_per_simd"]) == (46, 156, 0, 3)
    assert p["mfma"] == 2 and p["mfma_kinds"] == {"v_mfma_f32_32x32x64_f8f6f4": 2}
    assert p["lds_static_bytes"] is None and p["accum_offset"] is None  # not in the text
    empty = parse_amdgcn("")
    assert all(v is None for k, v in empty.items() if k not in ("mfma", "mfma_kinds"))


def test_resident_programs_arithmetic():
    base = {"num_warps": 4, "vgprs_for_occupancy": 156, "sgprs_for_occupancy": 46,
            "lds_bytes": 16384, "occupancy_waves_per_simd": 3}
    res = amd_resident_programs(base, MI355X)  # 156 -> 160 VGPRs: 3 waves per SIMD
    assert (res["programs_per_cu"], res["limited_by"], res["agrees_with_compiler"]) == (
        3, "vgprs", True)
    # LDS over the CU's 160 KiB: nothing resident; 48 KiB on an MI300X's 64 KiB: one.
    assert amd_resident_programs({**base, "lds_bytes": 331648}, MI355X)["programs_per_cu"] == 0
    res = amd_resident_programs({**base, "lds_bytes": 48 * 1024}, DEVICES["MI300X"])
    assert (res["programs_per_cu"], res["limited_by"]) == (1, "lds")
    # Few VGPRs: the 8-wave cap, 8 programs of 4 waves; 8 waves per program halve it.
    few = {**base, "vgprs_for_occupancy": 40, "occupancy_waves_per_simd": 8}
    assert amd_resident_programs(few, MI355X)["programs_per_cu"] == 8
    assert amd_resident_programs({**few, "num_warps": 8}, MI355X)["programs_per_cu"] == 4
    # More than 100 SGPRs allow 7 waves per SIMD on GFX9.
    assert amd_resident_programs({**few, "sgprs_for_occupancy": 104},
                                 MI355X)["waves_per_simd_by_registers"] == 7
    with pytest.raises(ValueError):
        amd_resident_programs(base, DEVICES["H200"])


@pytest.mark.parametrize(("stdout", "status"), [("", 1), ('{"variant": "serial"}\n', 1)])
def test_a_compile_that_crashes_is_an_error_naming_the_crash(stdout, status, monkeypatch):
    # A child that answers for fewer variants than asked crashed: its error is raised, not
    # read as "no AMD backend here" (the one-program-per-CU fallback).
    from mla_kernels.lab import compile_check

    def crashed(cmd, **kw):
        assert cmd[1:3] == ["-m", compile_check.MODULE]
        return subprocess.CompletedProcess(cmd, status, stdout, "Traceback ...\nAttributeError: boom")

    monkeypatch.setattr(compile_check.subprocess, "run", crashed)
    with pytest.raises(RuntimeError, match=r"(?s)MI355X.*exit status 1.*AttributeError: boom"):
        compile_check.compiled_resources(["serial", "tiled"], "MI355X")
