"""hopper_ws with heads whose K-nope or V is not a whole number of 128-column items
(GLM-5-style: 192 and 256 columns, 32 heads). Items are then the heads' weight rows 128 at a
time, each stored as two 64-column pieces, some K-nope and some V, of one head or of two;
the rope goes with the piece where a head's K-nope begins. Correctness runs need an sm_90
GPU; the CPU checks what is offered, the work model, auto's choice and the refusals."""

from dataclasses import replace

import pytest
import torch
from test_hopper_ws import (
    CACHE16_PATHS,
    LAYOUTS,
    NEW_PATHS,
    _inputs,
    _mx_inputs,
    _path_id,
    _prob,
    hopper,
)
from test_kernels import run_and_check

import mla_kernels as mk
from mla_kernels.core.devices import DEVICES
from mla_kernels.designs import resolve
from mla_kernels.designs.hopper_ws import HOPPER_WS, HopperWSConfig, hopper_ws_work, supports
from mla_kernels.designs.hopper_ws.config import whole_items
from mla_kernels.designs.hopper_ws.plan import items_per_tile

GLM = "glm-5-style"
# Each weight and scale kind, over an fp8 cache (fp8 per row, per block, bf16 with no, a
# per-row and a per-block scale) and over a bf16 cache.
FP8_CACHE_PATHS = [("fp8_row", None, torch.float32), *NEW_PATHS[1:4], NEW_PATHS[5],
                   NEW_PATHS[7]]
BF16_CACHE_PATHS = [CACHE16_PATHS[0], CACHE16_PATHS[3], CACHE16_PATHS[4], CACHE16_PATHS[7]]


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", FP8_CACHE_PATHS, ids=_path_id)
@pytest.mark.parametrize(("contexts", "block_size"), LAYOUTS)
def test_fp8_cache_matches_reference(path, contexts, block_size, device, seed):
    inp = _inputs(GLM, contexts, block_size, path, device, seed)
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", BF16_CACHE_PATHS, ids=_path_id)
@pytest.mark.parametrize(("contexts", "block_size"), LAYOUTS)
def test_bf16_cache_matches_reference(path, contexts, block_size, device, seed):
    inp = _inputs(GLM, contexts, block_size, path, device, seed, cache="bf16")
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("draw", ["e4m3", "bf16", "mixed"])
@pytest.mark.parametrize(("contexts", "block_size"), LAYOUTS[:3])
def test_mxfp4_matches_reference(draw, contexts, block_size, device, seed):
    inp = _mx_inputs(GLM, contexts, block_size, draw, device, seed)
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("config", [
    HopperWSConfig(ring_depth=2), HopperWSConfig(ring_depth=6),
    HopperWSConfig(mma_groups=2, ring_depth=6),
    HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True),
], ids=["r2", "r6", "g2r6", "g2r6L"])
@pytest.mark.parametrize("programs", [1, 5, 131])
def test_program_runs_and_configs(config, programs, device, seed):
    # Runs that start and end mid-tile, mid-head and between the two heads of one item.
    inp = mk.build_inputs(GLM, [900, 333], block_size=1, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=replace(config, programs=programs))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("fmt", "config"), [
    ("fp8_block", HopperWSConfig()), ("bf16", HopperWSConfig()), ("mxfp4", HopperWSConfig()),
    # A bf16 weight's latent widened into two groups' registers.
    ("bf16", HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True)),
], ids=["fp8_block", "bf16", "mxfp4", "bf16-g2r6L"])
@pytest.mark.parametrize("programs", [5, 131])
def test_program_runs_of_other_weights(fmt, config, programs, device, seed):
    inp = mk.build_inputs(GLM, [900, 333], block_size=16, cache_dtype="fp8",
                          weight_format=fmt, device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=replace(config, programs=programs))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("fmt", "cache", "config"), [
    ("fp8_row", "fp8", None),
    ("fp8_row", "fp8", HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True)),
    ("fp8_block", "fp8", None),
    ("bf16", "fp8", None),
    ("bf16", "fp8", HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True)),
    ("mxfp4", "fp8", None),
    ("fp8_row", "bf16", None),
    ("bf16", "bf16", None),
    ("mxfp4", "bf16", None),
], ids=["fp8_row", "fp8_row-g2L", "fp8_block", "bf16", "bf16-g2L", "mxfp4",
        "fp8_row-bf16cache", "bf16-bf16cache", "mxfp4-bf16cache"])
@pytest.mark.parametrize(("contexts", "block_size"), LAYOUTS[:3])
def test_fp8_outputs_match_the_rule(fmt, cache, config, contexts, block_size, device, seed):
    # An item's two pieces may be K's and V's: each divided by its own output's scale.
    inp = mk.build_inputs(GLM, contexts, block_size=block_size, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed,
                          out_dtype=torch.float8_e4m3fn)
    inp.v_out_scale = inp.v_out_scale * 3.0  # K's and V's scales apart
    res = run_and_check(inp, "hopper_ws", config=config)
    assert res["fp8_exact_share"] >= 0.9, res


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("out_fp8", [False, True])
def test_auto_runs_hopper_ws(out_fp8, device, seed):
    out = torch.float8_e4m3fn if out_fp8 else torch.bfloat16
    inp = mk.build_inputs(GLM, [2000, 0, 77], block_size=1, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed, out_dtype=out)
    run_and_check(inp, "auto")


# ------------------------------------------------------------------ on the CPU
def test_supported_heads():
    assert not whole_items(192, 256) and whole_items(128, 128)
    for fmt in ("fp8_row", "fp8_block", "bf16", "mxfp4"):
        for cache in ("fp8", "bf16"):
            assert supports(_prob(shape=GLM, fmt=fmt, cache=cache)), (fmt, cache)
            assert supports(_prob(shape=GLM, fmt=fmt, cache=cache,
                                  out_dtype=torch.float8_e4m3fn)), (fmt, cache)
    # Other widths of 64-column multiples whose heads fill whole items.
    assert supports(replace(_prob(), v_dim=64))  # 12 heads x 192 rows
    assert supports(replace(_prob(shape=GLM), num_heads=2))
    # Refused: a width not a multiple of 64; heads whose weight rows end mid-item
    # (3 x 448 = 10.5 items).
    assert not supports(replace(_prob(), v_dim=32))
    assert not supports(replace(_prob(shape=GLM), num_heads=3))


def test_items_and_work_model():
    from mla_kernels.lab.occupancy import problem_for

    assert items_per_tile(_prob(shape=GLM)) == 32 * 448 // 128 == 112
    assert items_per_tile(_prob()) == 24  # Kimi-K3 TP8: two a head

    def work(tokens):
        prob = problem_for(GLM, [tokens], "fp8", "fp8_row", 1)
        return hopper_ws_work(prob, [tokens], None, HopperWSConfig(), DEVICES["H200"])
    # 32000 tokens: 250 tiles of 112 items over 132 programs, equal runs (under the 128
    # items a tile from which runs go in lockstep).
    assert work(32000) == 132
    # Two tiles: each of 132 programs takes a share of one tile's items; one tile: 112
    # programs launched, an item each.
    assert work(256) == 132
    assert work(1) == 112


def test_pingpong_refused():
    inp = mk.build_inputs(GLM, [10], cache_dtype="fp8", weight_format="fp8_row",
                          out_dtype=torch.float8_e4m3fn)
    prob = _prob(shape=GLM, out_dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="config.pingpong: expected False for heads of 192"):
        HOPPER_WS.prepare(prob, inp.args(), None,
                          HopperWSConfig(mma_groups=2, ring_depth=6, pingpong=True),
                          DEVICES["H200"])


def test_rope_ahead_refused():
    # These heads' rope leaves with the item piece where a head's K-nope begins.
    inp = mk.build_inputs(GLM, [10], cache_dtype="fp8", weight_format="fp8_row")
    with pytest.raises(ValueError, match=r"config\.rope_ahead: expected False here \(heads of "
                                         r"192 K-nope and 256 V columns .*\), got True"):
        HOPPER_WS.prepare(_prob(shape=GLM), inp.args(), None, HopperWSConfig(rope_ahead=True),
                          DEVICES["H200"])


@pytest.mark.parametrize("out", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("fmt", ["fp8_row", "fp8_block", "bf16", "mxfp4"])
@pytest.mark.parametrize("cache", ["fp8", "bf16"])
def test_auto_takes_the_heads_own_entries(out, fmt, cache):
    # Never the ping-pong schedule (Kimi-K3's FP8-output entry for fp8 weights), which
    # these heads' items cannot take; the config prepares without error.
    prob = _prob(shape=GLM, fmt=fmt, cache=cache, out_dtype=out)
    design, cfg = resolve("auto", prob, DEVICES["H200"])
    assert design.name == "hopper_ws" and not cfg.pingpong, cfg
    inp = mk.build_inputs(GLM, [10], cache_dtype=cache, weight_format=fmt, out_dtype=out)
    design.prepare(prob, inp.args(), None, cfg, DEVICES["H200"])
    # Heads with no table of their own run the portable fallback.
    odd = replace(prob, v_dim=64)
    assert resolve("auto", odd, DEVICES["H200"])[0].name == "tiled"
