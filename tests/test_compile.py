"""Compile-only checks for a Hopper target, with no GPU: the designs fit an SM's shared
memory, the serial design keeps an fp8 head's weight resident (not a bf16 one), and the
tiled design's fp8 dot is a native wgmma. Runs in a child process with the interpreter
off, since this process may have decorated the kernels for the interpreter."""

import json
import os
import subprocess
import sys

import pytest

from mla_kernels.compile_check import HOPPER_SMEM
from mla_kernels.designs.chunk_loop import RESIDENT_WEIGHT_BYTES


@pytest.fixture(scope="module")
def reports():
    pytest.importorskip("triton.backends.nvidia.compiler")
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run([sys.executable, "-m", "mla_kernels.compile_check", "--variant", "serial",
                          "tiled", "--weight-format", "fp8_row", "bf16"],
                         capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {(r["variant"], r["weight_format"]): r for r in rows}


def test_every_compiled_design_fits_hopper_shared_memory(reports):
    assert len(reports) == 4
    for key, r in reports.items():
        assert r["shared_bytes"] <= HOPPER_SMEM, (key, r)


def test_serial_weight_residency(reports):
    # fp8 head (128 KB) hoisted and held; bf16 head (256 KB) re-read per chunk instead.
    assert reports[("serial", "fp8_row")]["shared_bytes"] >= 128 * 1024
    assert reports[("serial", "bf16")]["shared_bytes"] < RESIDENT_WEIGHT_BYTES


def test_tiled_fp8_dot_is_wgmma(reports):
    assert reports[("tiled", "fp8_row")]["wgmma"] > 0
    assert reports[("tiled", "fp8_row")]["mma_sync"] == 0


def test_hopper_ws_compiles_for_sm90():
    # The Gluon design: three warp groups, within an SM's shared memory and registers,
    # fp8 wgmma only, no spills (its accumulator lives in the 256-register default group).
    pytest.importorskip("triton.experimental.gluon")
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run([sys.executable, "-m", "mla_kernels.compile_check", "--variant",
                          "hopper_ws"], capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    (r,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert r["shared_bytes"] <= HOPPER_SMEM
    assert r["num_warps"] == 12
    assert r["wgmma"] > 0 and r["mma_sync"] == 0
    assert r["spill_bytes"] == 0
