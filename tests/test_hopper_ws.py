"""The Gluon design (hopper_ws) on a Hopper GPU against the torch reference, and where it is
offered. Correctness runs need the GPU (it is compiled, never interpreted); the CPU checks
its availability rules and, in test_compile.py, that it compiles for sm_90."""

from dataclasses import replace

import pytest
import torch
from test_kernels import run_and_check

import mla_kernels as mk
from mla_kernels.designs import DESIGNS, resolve
from mla_kernels.designs.hopper_ws import HopperWSConfig, supports
from mla_kernels.devices import DEVICES, INTERPRETER

KIMI = "kimi-k3-tp8"


def _hopper() -> bool:
    return (torch.cuda.is_available() and not torch.version.hip
            and torch.cuda.get_device_capability()[0] == 9)


hopper = pytest.mark.skipif(not _hopper(), reason="needs an sm_90 GPU")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("shape", "contexts", "block_size"), [
    (KIMI, [4096], 1),  # whole tiles only
    (KIMI, [1000], 1),  # the last tile shifted back to end at the last token
    (KIMI, [100], 1),  # fewer tokens than a tile: the one partial tile (masked stores)
    (KIMI, [5, 0, 60], 16),
    (KIMI, [37, 0, 300, 129, 1], 16),  # ragged, an empty sequence, tiles across sequences
    (KIMI, [513, 2048, 70], 64),
    (KIMI, [32000], 1),
    ("deepseek-v3-tp8", [2000, 77], 1),
    ("deepseek-v3-tp1", [700], 1),  # 256 items a tile
])
def test_matches_reference(shape, contexts, block_size, device, seed):
    inp = mk.build_inputs(shape, contexts, block_size=block_size, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed)
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("programs", [1, 5, 131])
@pytest.mark.parametrize("stages", [2, 4])
def test_program_runs_and_ring_depth(programs, stages, device, seed):
    # Runs that start and end mid-tile and mid-head; a ring shallower than one item.
    inp = mk.build_inputs(KIMI, [900, 333], block_size=1, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=HopperWSConfig(ring_depth=stages, programs=programs))


@pytest.mark.gpu
@hopper
def test_fp16_outputs(device, seed):
    inp = mk.build_inputs(KIMI, [600], cache_dtype="fp8", weight_format="fp8_row",
                          device=device, seed=seed, out_dtype=torch.float16,
                          weight_scale_range=(1e-3, 1e-1))  # within fp16 range
    run_and_check(inp, "hopper_ws")


def _prob(shape=KIMI, fmt="fp8_row", cache="fp8", out_dtype=torch.bfloat16):
    from mla_kernels.occupancy import problem_for

    return replace(problem_for(shape, [10], cache, fmt, 1), out_dtype=out_dtype)


def test_supported_problems():
    assert supports(_prob())
    assert supports(_prob(shape="deepseek-v3-tp1", out_dtype=torch.float16))
    for kw in (dict(fmt="bf16"), dict(fmt="fp8_block"), dict(fmt="mxfp4"), dict(cache="bf16"),
               dict(out_dtype=torch.float32)):
        assert not supports(_prob(**kw)), kw
    assert not supports(replace(_prob(), pe_dim=32))
    assert not supports(replace(_prob(), v_dim=64))


def test_offered_on_sm90_only():
    assert DESIGNS["hopper_ws"].runs(_prob(), DEVICES["H200"])
    for dev in (INTERPRETER, DEVICES["MI355X"]):
        assert not DESIGNS["hopper_ws"].runs(_prob(), dev)
        with pytest.raises(ValueError, match="variant: expected one of"):
            resolve("hopper_ws", _prob(), dev)


def test_auto_falls_back_when_the_tuned_design_cannot_run_it():
    from mla_kernels import tuning

    design, cfg = resolve("auto", _prob(), INTERPRETER)
    assert design.name == tuning.FALLBACK[0]
    assert cfg == design.config(tuning.FALLBACK[1])
    design, _ = resolve("auto", _prob(cache="bf16"), DEVICES["H200"])
    assert design.name == tuning.FALLBACK[0]
