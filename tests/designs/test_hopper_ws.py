"""The Gluon design (hopper_ws) on a Hopper GPU against the torch reference, and where it is
offered. Correctness runs need the GPU (it is compiled, never interpreted); the CPU checks
its availability rules and, in test_compile.py, that it compiles for sm_90.

Weights it runs over an fp8 cache: fp8 per-row (the original path), fp8 per 128x128 block,
bf16 with no scale, a per-row or a per-block scale (float32 or bf16 scales; the latent tile
widened to bf16 as it is gathered), and MXFP4 widened to e4m3 or, item by item where a
row's scales span too much, bf16 (once a call ahead of the kernel, or in it). Over a bf16
cache: every one of them, an fp8 or MXFP4 weight widened to a bf16 copy ahead of the kernel
(weight_widening)."""

import math
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import torch
import triton
from test_kernels import hopper, run_and_check
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import mla_kernels as mk
from mla_kernels.core.devices import DEVICES, INTERPRETER
from mla_kernels.designs import DESIGNS, resolve
from mla_kernels.designs.hopper_ws import HopperWSConfig, fp8_route, lockstep_granule, supports
from mla_kernels.designs.hopper_ws.conversions import (
    E4M3_PAIR_TO_BF16,
    E4M3_TO_BF16,
    halves,
    mx_codes,
    mx_offsets,
    widen_bf16,
    widen_e4m3,
)
from mla_kernels.designs.hopper_ws.plan import fp8_tile_smem, mx_routes
from mla_kernels.designs.jit import SCALE_CODES
from mla_kernels.lab.checks import check_outputs

KIMI = "kimi-k3-tp8"


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
@pytest.mark.parametrize("batch", [2, 127, 128, 129, 300])
@pytest.mark.parametrize(("fmt", "cache", "config"), [
    ("fp8_row", "fp8", None),
    ("fp8_row", "fp8", HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True)),
    ("bf16", "fp8", None),  # the gather partition that widens the latent tile
    ("bf16", "fp8", HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True)),
    ("fp8_row", "bf16", None),  # a bf16 latent tile's gather
], ids=["fp8_row", "registers", "bf16_weight", "bf16_weight_registers", "bf16_cache"])
def test_many_sequences_either_side_of_the_search_in_registers(batch, fmt, cache, config,
                                                               device, seed):
    # Up to 128 sequences the gather partitions search a tile's sequences in registers
    # (cs and kv_indptr loaded once); past that, by dependent loads. Short sequences, some
    # empty, so that tiles straddle many of them.
    g = torch.Generator().manual_seed(seed)
    contexts = torch.randint(1, 24, (batch,), generator=g)
    contexts[torch.randperm(batch, generator=g)[: batch // 8]] = 0
    inp = mk.build_inputs(KIMI, contexts.tolist(), block_size=16, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=config)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("programs", [1, 5, 131])
@pytest.mark.parametrize("stages", [2, 4])
def test_program_runs_and_ring_depth(programs, stages, device, seed):
    # Runs that start and end mid-tile and mid-head; a ring shallower than one item.
    inp = mk.build_inputs(KIMI, [900, 333], block_size=1, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=HopperWSConfig(ring_depth=stages, programs=programs))


# The gather paths whose first tile the guessed block ids serve: the fp8 tile's, the latent
# widener's (a bf16 weight over an fp8 cache), the bf16 tile's, and two groups'.
GUESS_PATHS = [("fp8_row", "fp8", HopperWSConfig()), ("bf16", "fp8", HopperWSConfig()),
               ("fp8_row", "bf16", HopperWSConfig()),
               ("fp8_row", "fp8", HopperWSConfig(mma_groups=2, ring_depth=6,
                                                 latent_in_registers=True))]


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("contexts", "block_size", "spare_indices"), [
    ([4096], 1, 0),  # every row's guess holds (a share of one tile a program)
    ([32000], 1, 0),  # every row's guess holds (runs over many tiles)
    ([1000, 0, 300, 7], 1, 0),  # several sequences, page 1: the guess holds
    ([100], 1, 0),  # one partial tile
    ([4096], 1, 3),  # a table a little longer than the batch: the guessed tiles are others
    ([4096], 1, 5000),  # a table more than twice the batch: guessed runs of other shapes
    ([37, 0, 300, 129, 1], 16, 0),  # part-filled pages: wrong from the second sequence
], ids=["one-4096", "one-32000", "several-page1", "partial", "longer-table", "long-table",
        "page16"])
@pytest.mark.parametrize(("fmt", "cache", "config"), GUESS_PATHS,
                         ids=["fp8", "widener", "bf16_cache", "registers"])
def test_early_block_ids_match_reference(contexts, block_size, spare_indices, fmt, cache, config,
                                         device, seed):
    # A guessed block id is kept only where its index proves right: where the guess is wrong
    # the entries it read are other tokens' block ids (in range), so keeping one would show.
    inp = mk.build_inputs(KIMI, contexts, block_size=block_size, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed,
                          spare_indices=spare_indices)
    run_and_check(inp, "hopper_ws", config=replace(config, early_block_ids=True))


@pytest.mark.gpu
@hopper
def test_early_block_ids_take_no_spare_entry_for_a_block_id(seed):
    # 100 tokens, a table of 128 entries: the guess reads the whole first tile's, the spare
    # ones holding no block id (-1, 10^7). A row past the tokens must not keep its guessed
    # entry, which device asserts (debug) would stop; the tokens' rows are right. In a child
    # process: an assert would end the CUDA context.
    code = textwrap.dedent(f"""
        import torch, mla_kernels as mk
        from mla_kernels.designs.hopper_ws import HopperWSConfig
        from mla_kernels.lab.checks import check_outputs
        inp = mk.build_inputs("{KIMI}", [100], block_size=1, device="cuda", seed={seed},
                              spare_indices=28)
        inp.kv_indices[100::2] = -1
        inp.kv_indices[101::2] = 10**7
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), variant="hopper_ws", debug=True,
                            config=HopperWSConfig(early_block_ids=True))
        torch.cuda.synchronize()
        res = check_outputs(inp)
        print("OK" if res["correct"] and res["spare_rows_untouched"] else f"WRONG {{res}}")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, TRITON_INTERPRET="0"))
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), (
        out.stdout + out.stderr[-2000:])


# The paths whose full tiles' rope the run may store at a tile's start: the fp8 tile's
# with two staging buffers, two groups with the latent in registers (one buffer, each
# group its half of the rows), per-block scales (two row halves), FP8 outputs (the rope
# over k_out_scale), a bf16 weight widened into two groups' registers, MXFP4 widened once.
ROPE_PATHS = [("fp8_row", None, HopperWSConfig()),
              ("fp8_row", None, HopperWSConfig(mma_groups=2, ring_depth=6,
                                               latent_in_registers=True)),
              ("fp8_block", None, HopperWSConfig()),
              ("fp8_row", torch.float8_e4m3fn, HopperWSConfig()),
              ("bf16", None, HopperWSConfig(mma_groups=2, ring_depth=6,
                                            latent_in_registers=True)),
              ("mxfp4", None, HopperWSConfig())]


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("shape", "contexts", "programs"), [
    (KIMI, [4096], None),  # programs share each tile: a run of 6 items, 3 heads' rope
    (KIMI, [32000], None),  # runs over several tiles, starting and ending mid-tile
    (KIMI, [1000, 0, 300, 7], 5),  # runs mid-tile and mid-head, the last tile shifted back
    (KIMI, [100], None),  # one partial tile: its rope stored with the items, as before
    ("deepseek-v3-tp1", [700], None),  # 128 heads a tile
], ids=["kimi-4096", "kimi-32000", "kimi-several-5-programs", "kimi-partial", "deepseek-tp1"])
@pytest.mark.parametrize(("fmt", "out", "config"), ROPE_PATHS,
                         ids=["fp8", "registers", "block", "fp8_out", "bf16_registers", "mxfp4"])
def test_rope_ahead_matches_reference(shape, contexts, programs, fmt, out, config, device,
                                      seed):
    # Poisoned outputs show a head whose rope no run stored; a rope stored into another
    # head's or tile's rows shows as a wrong value there.
    inp = mk.build_inputs(shape, contexts, block_size=1, cache_dtype="fp8", weight_format=fmt,
                          device=device, seed=seed, out_dtype=out or torch.bfloat16)
    run_and_check(inp, "hopper_ws", config=replace(config, rope_ahead=True, programs=programs))


def _lockstep_cases() -> dict[int, tuple[int, int]]:
    """For each run granule the kernel can choose for 256 items a tile (DeepSeek-V3 TP1),
    and for none, the smallest (tiles, programs) that choose it."""
    cases: dict[int, tuple[int, int]] = {}
    for programs in range(3, 40):
        for tiles in range(programs // 2 + 1, 3 * programs):
            cases.setdefault(lockstep_granule(256, tiles, programs), (tiles, programs))
    return cases


def test_lockstep_granule_rule():
    # Whole tiles for DeepSeek-V3 TP1 at 32000 tokens on 132 programs (250 tiles: 2 a
    # program at most against 1.89 on average, within 1/16), half tiles at 109440 (855
    # tiles: whole ones would cost 8%); never for Kimi-K3 TP8's 24 items a tile, nor where
    # the programs split tiles among themselves.
    assert lockstep_granule(256, 250, 132) == 256
    assert lockstep_granule(256, 855, 132) == 128
    assert lockstep_granule(24, 250, 132) == 0
    assert lockstep_granule(256, 60, 132) == 0
    cases = _lockstep_cases()
    assert set(cases) == {256, 128, 64, 32, 0}
    for g, (tiles, programs) in cases.items():
        if g:
            n_g = tiles * 256 // g
            assert 256 % g == 0 and -(-n_g // programs) * programs * 16 <= n_g * 17


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("granule", [256, 128, 64, 32, 0])
def test_lockstep_runs_cover_every_item(granule, device, seed):
    # A run of each granule (and equal runs), chosen through the program count; the last
    # tile shifted back, an empty sequence beside. Poisoned outputs show a missed item.
    tiles, programs = _lockstep_cases()[granule]
    inp = mk.build_inputs("deepseek-v3-tp1", [tiles * 128 - 37, 0], block_size=1,
                          cache_dtype="fp8", weight_format="fp8_row", device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=HopperWSConfig(programs=programs))


@pytest.mark.gpu
@hopper
def test_fp16_outputs(device, seed):
    inp = mk.build_inputs(KIMI, [600], cache_dtype="fp8", weight_format="fp8_row",
                          device=device, seed=seed, out_dtype=torch.float16,
                          weight_scale_range=(1e-3, 1e-1))  # within fp16 range
    run_and_check(inp, "hopper_ws")


# ------------------------------------------------ two MMA groups, rings 5-6 deep
# Two MMA warpgroups each take 64 of a tile's 128 rows of every item (fp8 per-row weight,
# fp8 cache); a ring of 5 or 6 weight chunks takes the second staging buffer's room; with
# latent_in_registers each group holds its rows of a tile's latent as wgmma's A operand in
# registers, and the tile's shared buffer is refilled at once.
TWO_GROUPS = HopperWSConfig(mma_groups=2, ring_depth=6)
LATENT_REGS = HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("shape", "contexts", "block_size"), [
    (KIMI, [4096], 1),
    (KIMI, [1000], 1),  # the last tile shifted back
    (KIMI, [100], 1),  # the one partial tile: each group's rows stored masked
    (KIMI, [37, 0, 300, 129, 1], 16),
    (KIMI, [513, 2048, 70], 64),
    ("deepseek-v3-tp1", [700], 1),  # lockstep runs
])
@pytest.mark.parametrize("config", [TWO_GROUPS, LATENT_REGS], ids=["shared", "registers"])
def test_two_mma_groups_match_reference(shape, contexts, block_size, config, device, seed):
    inp = mk.build_inputs(shape, contexts, block_size=block_size, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=config)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("programs", [1, 5, 131])
@pytest.mark.parametrize("stages", [2, 4, 6])
@pytest.mark.parametrize("regs", [False, True])
def test_two_mma_groups_program_runs_and_ring_depth(programs, stages, regs, device, seed):
    # One program runs every tile in turn: with the latent in registers, each tile's buffer
    # is refilled while the last tile's items still run on the registers.
    inp = mk.build_inputs(KIMI, [900, 333], block_size=1, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=HopperWSConfig(
        ring_depth=stages, programs=programs, mma_groups=2, latent_in_registers=regs))


# A bf16 weight over an fp8 cache with two groups and the latent in registers: the fp8
# tile as gathered, each group widening its 64 rows into bf16 registers once a tile, so its
# K loops run a bf16 tile's dots with the A operand in registers.
BF16_REGS = HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("out", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "fp8"])
@pytest.mark.parametrize(("contexts", "block_size"), [
    ([4096], 1),
    ([1000], 1),  # the last tile shifted back
    ([100], 1),  # the one partial tile: each group's rows stored masked
    ([37, 0, 300, 129, 1], 16),
    ([513, 2048, 70], 64),
])
def test_bf16_weight_latent_in_registers_is_the_bf16_tiles_result(contexts, block_size, out,
                                                                  device, seed):
    # The same dots in the same order as the bf16 tile's route (`auto`'s default), each
    # row's products on its own: the outputs agree bit for bit, and with the reference.
    inp = mk.build_inputs(KIMI, contexts, block_size=block_size, cache_dtype="fp8",
                          weight_format="bf16", device=device, seed=seed, out_dtype=out)
    run_and_check(inp, "hopper_ws", config=BF16_REGS)
    k, v = inp.k_prefix.clone(), inp.v_prefix.clone()
    run_and_check(inp, "hopper_ws", config=HopperWSConfig())
    assert torch.equal(k.view(torch.uint8), inp.k_prefix.view(torch.uint8)), f"seed {seed}"
    assert torch.equal(v.view(torch.uint8), inp.v_prefix.view(torch.uint8)), f"seed {seed}"


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("programs", [1, 5, 131])
@pytest.mark.parametrize("stages", [2, 4, 6])
def test_bf16_weight_latent_in_registers_program_runs_and_ring_depth(programs, stages,
                                                                     device, seed):
    # One program runs every tile in turn, each tile's buffer refilled while the last
    # tile's items still run on the widened registers.
    inp = mk.build_inputs(KIMI, [900, 333], block_size=1, cache_dtype="fp8",
                          weight_format="bf16", device=device, seed=seed,
                          out_dtype=torch.float8_e4m3fn)
    run_and_check(inp, "hopper_ws", config=replace(BF16_REGS, ring_depth=stages,
                                                   programs=programs))


@pytest.mark.parametrize(("cache", "scale"), [("fp8", "row"), ("fp8", "block"),
                                              ("bf16", None)])
def test_bf16_weight_latent_in_registers_refused_where_it_does_not_apply(cache, scale):
    # A scaled bf16 weight's scale vector does not fit beside the group's 128 registers of
    # latent (ptxas spills it), and over a bf16 cache there is nothing to widen: refused
    # when the launch is prepared, before anything is written.
    from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel
    from mla_kernels.lab.occupancy import problem_for

    inp = mk.build_inputs(KIMI, [300], cache_dtype=cache, weight_format="bf16")
    prob = problem_for(KIMI, [300], cache, "bf16", 1)
    if scale is not None:
        n, k = inp.kv_proj_weight.shape
        inp.kv_proj_scale = torch.ones((n,) if scale == "row" else (-(-n // 128), -(-k // 128)))
        prob = replace(prob, weight_scale=scale, scale_dtype=None)
    with pytest.raises(ValueError, match=r"config\.mma_groups: expected 1 here .*, got 2"):
        compile_main_kernel("hopper_ws", inp, prob, BF16_REGS, HOPPER, 90)


# ------------------------------------------------ the ping-pong schedule
# Two MMA groups take whole items of runs of whole heads, group 0 every K-nope item (and the
# rope), group 1 every V item, their K loops in turn; each reads only its items' weight
# chunks from the one ring and stages in its own buffer.
PINGPONG = HopperWSConfig(mma_groups=2, ring_depth=6, pingpong=True)
PINGPONG_R4 = HopperWSConfig(mma_groups=2, ring_depth=4, pingpong=True)
# Spare latent chunk slots: the run's tiles' chunks take the slots as a ring, so a tile's
# chunk kb sits in a different slot from the tile before's (and the phases of a slot's
# barriers no longer follow the tile count).
PINGPONG_SPARE = {1: HopperWSConfig(mma_groups=2, ring_depth=6, pingpong=True,
                                    spare_latent_chunks=1),
                  2: HopperWSConfig(mma_groups=2, ring_depth=5, pingpong=True,
                                    spare_latent_chunks=2),
                  3: HopperWSConfig(mma_groups=2, ring_depth=4, pingpong=True,
                                    spare_latent_chunks=3)}


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("shape", "contexts", "block_size"), [
    (KIMI, [4096], 1),  # two programs or more a tile: a tile's heads split between them
    (KIMI, [1000], 1),  # the last tile shifted back
    (KIMI, [100], 1),  # the one partial tile: both groups store masked, the rope by group 0
    (KIMI, [37, 0, 300, 129, 1], 16),
    (KIMI, [513, 2048, 70], 64),
    (KIMI, [40000], 1),  # runs that start and end inside tiles
    ("deepseek-v3-tp1", [700], 1),  # lockstep runs, in heads
])
@pytest.mark.parametrize(("fmt", "out"), [("fp8_row", "fp8"), ("fp8_block", "fp8"),
                                          ("fp8_row", "bf16"), ("fp8_block", "bf16")])
def test_pingpong_matches_reference(shape, contexts, block_size, fmt, out, device, seed):
    fp8 = out == "fp8"
    inp = mk.build_inputs(shape, contexts, block_size=block_size, cache_dtype="fp8",
                          weight_format=fmt, device=device, seed=seed,
                          out_dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
    # bf16 outputs stage twice the bytes: a ring of at most four beside both buffers.
    run_and_check(inp, "hopper_ws", config=PINGPONG if fp8 else PINGPONG_R4)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("shape", "contexts", "block_size"), [
    (KIMI, [1000], 1),  # eight tiles, the last shifted back: most runs cross a tile
    (KIMI, [100], 1),  # the one partial tile
    (KIMI, [37, 0, 300, 129, 1], 16),
    (KIMI, [40000], 1),  # runs that start and end inside tiles
    ("deepseek-v3-tp1", [700], 1),  # lockstep runs, in heads
])
@pytest.mark.parametrize("spare", [1, 2, 3])
@pytest.mark.parametrize("fmt", ["fp8_row", "fp8_block"])
def test_pingpong_spare_latent_chunks_match_reference(shape, contexts, block_size, spare, fmt,
                                                      device, seed):
    inp = mk.build_inputs(shape, contexts, block_size=block_size, cache_dtype="fp8",
                          weight_format=fmt, device=device, seed=seed,
                          out_dtype=torch.float8_e4m3fn)
    run_and_check(inp, "hopper_ws", config=PINGPONG_SPARE[spare])


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("programs", [1, 3])
@pytest.mark.parametrize("spare", [1, 3])
def test_pingpong_spare_latent_chunks_over_many_tiles(programs, spare, device, seed):
    # One or three programs: each run crosses tens of tiles, so every slot is used at many
    # phases, the ring's chunk count wrapping past a multiple of the tile's.
    inp = mk.build_inputs(KIMI, [3000, 1111], block_size=1, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed,
                          out_dtype=torch.float8_e4m3fn)
    run_and_check(inp, "hopper_ws", config=replace(PINGPONG_SPARE[spare], programs=programs))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("programs", [1, 5, 131])
@pytest.mark.parametrize("stages", [2, 3, 6])
def test_pingpong_program_runs_and_ring_depth(programs, stages, device, seed):
    # One program runs every tile in turn; a ring shallower than an item makes each group
    # wait for the other's chunks to be read before its own land.
    inp = mk.build_inputs(KIMI, [900, 333], block_size=1, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed,
                          out_dtype=torch.float8_e4m3fn)
    run_and_check(inp, "hopper_ws", config=HopperWSConfig(
        ring_depth=stages, programs=programs, mma_groups=2, pingpong=True))


@pytest.mark.parametrize(("fmt", "cache", "out", "config", "field"), [
    ("fp8_row", "fp8", "fp8", HopperWSConfig(pingpong=True), "pingpong"),
    ("fp8_row", "fp8", "fp8", HopperWSConfig(mma_groups=2, pingpong=True,
                                             latent_in_registers=True), "latent_in_registers"),
    ("bf16", "fp8", "fp8", HopperWSConfig(mma_groups=2, pingpong=True), "mma_groups"),
    ("mxfp4", "fp8", "fp8", HopperWSConfig(mma_groups=2, pingpong=True), "mma_groups"),
    ("fp8_row", "bf16", "fp8", HopperWSConfig(mma_groups=2, pingpong=True), "mma_groups"),
    ("fp8_row", "fp8", "bf16", HopperWSConfig(mma_groups=2, pingpong=True, ring_depth=5),
     "ring_depth"),
    ("fp8_row", "fp8", "fp8", HopperWSConfig(mma_groups=2, pingpong=True, ring_depth=6,
                                             spare_latent_chunks=2), "ring_depth"),
    ("fp8_row", "fp8", "bf16", HopperWSConfig(mma_groups=2, pingpong=True, ring_depth=4,
                                              spare_latent_chunks=1), "ring_depth"),
    ("fp8_row", "fp8", "fp8", HopperWSConfig(mma_groups=2, spare_latent_chunks=1),
     "spare_latent_chunks"),
    ("fp8_row", "fp8", "fp8", HopperWSConfig(spare_latent_chunks=1), "spare_latent_chunks"),
    # Prefetches come before the overlapped launch's wait: none without it.
    ("fp8_row", "fp8", "bf16", HopperWSConfig(overlap_launch=False, prefetch="latent"),
     "prefetch"),
    # The rope stored at a tile's start: not where the gather warps store it (a bf16 tile:
    # a bf16 weight, any weight over a bf16 cache), nor where one ping-pong group stages it.
    ("bf16", "fp8", "bf16", HopperWSConfig(rope_ahead=True), "rope_ahead"),
    ("fp8_row", "bf16", "bf16", HopperWSConfig(rope_ahead=True), "rope_ahead"),
    ("fp8_row", "fp8", "fp8", HopperWSConfig(mma_groups=2, pingpong=True, ring_depth=6,
                                             rope_ahead=True), "rope_ahead"),
])
def test_pingpong_refused_where_it_does_not_apply(fmt, cache, out, config, field):
    # Refused when the launch is prepared, before anything is written.
    from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel
    from mla_kernels.lab.occupancy import problem_for

    dtype = torch.float8_e4m3fn if out == "fp8" else torch.bfloat16
    inp = mk.build_inputs(KIMI, [300], cache_dtype=cache, weight_format=fmt, out_dtype=dtype)
    prob = problem_for(KIMI, [300], cache, fmt, 1, out_dtype=dtype)
    with pytest.raises(ValueError, match=rf"config\.{field}: expected .*, got"):
        compile_main_kernel("hopper_ws", inp, prob, config, HOPPER, 90)


def test_pingpong_shared_memory_rule():
    # The deepest ring beside two staging buffers: six with FP8 outputs, four with bf16 ones,
    # within an sm_90 program's shared memory and above what one more slot would ask.
    from mla_kernels.designs.hopper_ws.plan import max_pingpong_ring, pingpong_smem
    from mla_kernels.lab.occupancy import problem_for

    h200 = DEVICES["H200"]
    fp8 = problem_for(KIMI, [300], "fp8", "fp8_row", 1, out_dtype=torch.float8_e4m3fn)
    bf16 = problem_for(KIMI, [300], "fp8", "fp8_row", 1)
    assert max_pingpong_ring(fp8, h200) == 6
    assert max_pingpong_ring(bf16, h200) == 4
    assert pingpong_smem(bf16, 4) <= h200.smem_per_program < pingpong_smem(bf16, 5)
    # Each slot is one [128 x 128] fp8 chunk; bf16 staging doubles the staged bytes.
    assert pingpong_smem(fp8, 6) - pingpong_smem(fp8, 5) == 128 * 128 + 16
    assert pingpong_smem(bf16, 4) - pingpong_smem(fp8, 4) == (2 * 128 + 64) * 128
    # A spare latent slot is one more [128 x 128] fp8 chunk and its two barriers: six weight
    # slots beside one, five beside two, four beside three.
    assert pingpong_smem(fp8, 6, 1) - pingpong_smem(fp8, 6) == 128 * 128 + 16
    assert [max_pingpong_ring(fp8, h200, k) for k in (1, 2, 3)] == [6, 5, 4]
    assert max_pingpong_ring(bf16, h200, 1) == 3


@pytest.mark.parametrize(("tokens", "heads_shape"), [(32000, KIMI), (4096, KIMI), (700,
                                                     "deepseek-v3-tp1"), (300000, KIMI)])
def test_pingpong_work_model_counts_runs_of_whole_heads(tokens, heads_shape):
    # As Items.run with PAIRS: the same splits made in heads. A tile's 2 x heads items give
    # at most `heads` shares where programs outnumber tiles; runs in lockstep count granules
    # of heads.
    from mla_kernels.designs.hopper_ws import hopper_ws_work
    from mla_kernels.lab.occupancy import problem_for

    h200 = DEVICES["H200"]
    prob = problem_for(heads_shape, [tokens], "fp8", "fp8_row", 1,
                       out_dtype=torch.float8_e4m3fn)
    tiles = -(-tokens // 128)
    heads = prob.num_heads
    pp = hopper_ws_work(prob, [tokens], None, PINGPONG, h200)
    plain = hopper_ws_work(prob, [tokens], None, HopperWSConfig(), h200)
    if 2 * tiles <= h200.compute_units:
        assert pp == tiles * min(h200.compute_units // tiles, heads)
    else:
        g = lockstep_granule(2 * heads, tiles, h200.compute_units, 2)
        assert g % 2 == 0
        assert pp == min(h200.compute_units, tiles * 2 * heads // (g or 2))
    assert pp <= plain


def test_lockstep_granule_in_heads():
    # Granules counted in heads are whole heads: 128 heads a tile, halved up to three times.
    for tiles in (60, 250, 855, 1001):
        g = lockstep_granule(256, tiles, 132, 2)
        assert g in (0, 256, 128, 64, 32)
    assert lockstep_granule(256, 250, 132, 2) == lockstep_granule(256, 250, 132)
    assert lockstep_granule(24, 250, 132, 2) == 0


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("fmt", ["fp8_row", "fp8_block"])
@pytest.mark.parametrize("stages", [5, 6])
def test_deep_rings_over_an_fp8_cache(fmt, stages, device, seed):
    # One staging buffer: each item waits for the last one's stores before staging.
    inp = mk.build_inputs(KIMI, [900, 333, 100], block_size=1, cache_dtype="fp8",
                          weight_format=fmt, device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=HopperWSConfig(ring_depth=stages, programs=7))


@pytest.mark.parametrize(("fmt", "cache", "config", "field"), [
    ("fp8_block", "fp8", HopperWSConfig(mma_groups=2), "mma_groups"),
    ("bf16", "fp8", HopperWSConfig(mma_groups=2), "mma_groups"),
    ("mxfp4", "fp8", HopperWSConfig(mma_groups=2, mxfp4_widening="kernel"), "mma_groups"),
    ("mxfp4", "fp8", HopperWSConfig(mma_groups=2, latent_in_registers=True),
     "latent_in_registers"),
    ("fp8_row", "bf16", HopperWSConfig(mma_groups=2), "mma_groups"),
    ("bf16", "fp8", HopperWSConfig(ring_depth=5), "ring_depth"),
    ("fp8_row", "bf16", HopperWSConfig(ring_depth=6), "ring_depth"),
    ("fp8_row", "fp8", HopperWSConfig(latent_in_registers=True), "latent_in_registers"),
    ("fp8_block", "fp8", HopperWSConfig(latent_in_registers=True), "latent_in_registers"),
])
def test_two_mma_groups_and_deep_rings_refused_where_they_do_not_apply(fmt, cache, config,
                                                                        field):
    # Refused when the launch is prepared, before anything is written: two groups only for
    # fp8 per-row over an fp8 cache, rings past 4 only beside an fp8 latent tile.
    from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel
    from mla_kernels.lab.occupancy import problem_for

    inp = mk.build_inputs(KIMI, [300], cache_dtype=cache, weight_format=fmt)
    prob = problem_for(KIMI, [300], cache, fmt, 1)
    with pytest.raises(ValueError, match=rf"config\.{field}: expected .*, got"):
        compile_main_kernel("hopper_ws", inp, prob, config, HOPPER, 90)


@pytest.mark.parametrize(("fmt", "out", "config", "error"), [
    # FP8 staging leaves room for a seventh weight slot, bf16 staging does not.
    ("fp8_row", "fp8", HopperWSConfig(ring_depth=7), None),
    ("bf16", "fp8", HopperWSConfig(ring_depth=7, mma_groups=2, latent_in_registers=True,
                                   staging_buffers=1), None),
    # An eighth slot fits beside one FP8 staging buffer, not beside two.
    ("bf16", "fp8", HopperWSConfig(ring_depth=8, mma_groups=2, latent_in_registers=True,
                                   staging_buffers=1), None),
    ("bf16", "fp8", HopperWSConfig(ring_depth=8, mma_groups=2, latent_in_registers=True),
     "config.ring_depth: expected at most 7"),
    ("fp8_row", "fp8", HopperWSConfig(ring_depth=8), "config.ring_depth: expected at most 7"),
    ("fp8_row", "bf16", HopperWSConfig(ring_depth=7), "config.ring_depth: expected at most 6"),
    ("fp8_row", "bf16", HopperWSConfig(ring_depth=7, staging_buffers=1),
     "config.ring_depth: expected at most 6"),
    # MXFP4 widened once a call keeps an info entry a slot.
    ("mxfp4", "fp8", HopperWSConfig(ring_depth=7), "config.ring_depth: expected at most 6"),
    ("fp8_row", "bf16", HopperWSConfig(ring_depth=6, staging_buffers=2),
     "config.staging_buffers: expected 1 or None here"),
    ("fp8_row", "fp8", HopperWSConfig(mma_groups=2, pingpong=True, staging_buffers=1),
     "config.staging_buffers: expected None"),
    ("bf16", "fp8", HopperWSConfig(staging_buffers=1), "config.staging_buffers: expected None"),
])
def test_fp8_tile_shared_memory_rule(fmt, out, config, error):
    # Refused when the launch is prepared, before anything is written; accepted configs
    # compile within an sm_90 program's shared memory (the slow tier's compile checks).
    from mla_kernels.designs.hopper_ws.plan import prepare_hopper_ws
    from mla_kernels.lab.occupancy import problem_for

    dtype = torch.float8_e4m3fn if out == "fp8" else torch.bfloat16
    inp = mk.build_inputs(KIMI, [300], cache_dtype="fp8", weight_format=fmt, out_dtype=dtype)
    prob = problem_for(KIMI, [300], "fp8", fmt, 1, out_dtype=dtype)
    args = mk.GatherArgs(*inp.args())
    if error is None:
        assert fp8_tile_smem(prob, config.ring_depth, config.staging_buffers or 2) <= \
            DEVICES["H200"].smem_per_program
        prepare_hopper_ws(prob, args, None, config, DEVICES["H200"])
        return
    with pytest.raises(ValueError, match=error):
        prepare_hopper_ws(prob, args, None, config, DEVICES["H200"])


def test_config_fields_checked():
    for bad in (dict(mma_groups=3), dict(mma_groups=0), dict(ring_depth=9), dict(ring_depth=1),
                dict(latent_in_registers=1), dict(latent_in_registers="yes"), dict(pingpong=2),
                dict(spare_latent_chunks=4), dict(spare_latent_chunks=-1),
                dict(staging_buffers=0), dict(staging_buffers=3),
                dict(mxfp4_widening="once"), dict(mxfp4_widening=True),
                dict(early_block_ids=1), dict(early_block_ids="yes"),
                dict(rope_ahead=1), dict(rope_ahead="yes"), dict(tail_items=-1),
                dict(tail_items=65), dict(tail_items=True)):
        with pytest.raises(ValueError, match="config\\.(mma_groups|ring_depth|latent_in_registers"
                                             "|pingpong|spare_latent_chunks|mxfp4_widening"
                                             "|staging_buffers|early_block_ids|rope_ahead"
                                             "|tail_items)"
                                             ": expected"):
            HopperWSConfig(**bad)


# ------------------------------------------------ block-scaled fp8 and bf16 weights
# (weight format, scale kind, scale dtype): every path beside fp8_row with a float32 scale.
# A scale kind of None is the format's own (bf16: none, fp8_block: block).
NEW_PATHS = [
    ("fp8_block", None, torch.float32),
    ("fp8_block", None, torch.bfloat16),
    ("fp8_row", None, torch.bfloat16),  # the fp8_row kernel reading a bf16 row scale
    ("bf16", None, None),
    ("bf16", "row", torch.float32),
    ("bf16", "row_n1", torch.bfloat16),  # a [N, 1] per-row scale
    ("bf16", "block", torch.float32),
    ("bf16", "block", torch.bfloat16),
]


# Batch layouts every weight path runs: (contexts, page size).
LAYOUTS = [
    ([37, 0, 300, 129, 1], 16),  # ragged, an empty sequence, tiles across sequences
    ([1000], 1),  # the last tile shifted back to end at the last token
    ([100], 1),  # fewer tokens than a tile: the one partial tile (masked stores)
    ([513, 0, 2048, 70], 64),
    ([200, 0, 517, 128], 128),
]


def _path_id(path):
    fmt, kind, dtype = path
    return "-".join([fmt, kind or "own", str(dtype).replace("torch.", "")])


def _inputs(shape, contexts, block_size, path, device, seed, cache="fp8", **kw):
    """Inputs over an fp8 (or ``cache``) cache with the path's weight and scale. A bf16
    weight's scale is drawn log-uniform in [1e-3, 1e2] (as build_inputs draws fp8 weight
    scales), from the test's seed; a bf16 scale is rounded from it (the reference reads the
    rounded values)."""
    fmt, kind, dtype = path
    inp = mk.build_inputs(shape, contexts, block_size=block_size, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed, **kw)
    if fmt == "bf16" and kind is not None:
        n, k = inp.kv_proj_weight.shape
        size = {"row": (n,), "row_n1": (n, 1), "block": (-(-n // 128), -(-k // 128))}[kind]
        lo, hi = kw.get("weight_scale_range", (1e-3, 1e2))
        g = torch.Generator().manual_seed(seed + 1)
        u = torch.rand(size, generator=g, dtype=torch.float64)
        inp.kv_proj_scale = torch.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))).float()
    if inp.kv_proj_scale is not None and dtype is not None:
        inp.kv_proj_scale = inp.kv_proj_scale.to(device=device, dtype=dtype)
    return inp


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", NEW_PATHS, ids=_path_id)
@pytest.mark.parametrize(("contexts", "block_size"), LAYOUTS)
def test_new_paths_match_reference(path, contexts, block_size, device, seed):
    inp = _inputs(KIMI, contexts, block_size, path, device, seed)
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", [NEW_PATHS[0], NEW_PATHS[3], NEW_PATHS[7]], ids=_path_id)
@pytest.mark.parametrize(("shape", "contexts"), [
    ("deepseek-v3-tp8", [2000, 0, 77]),
    ("deepseek-v3-tp1", [700]),  # 256 items a tile
    (KIMI, [32000]),
])
def test_new_paths_at_model_shapes(path, shape, contexts, device, seed):
    inp = _inputs(shape, contexts, 1, path, device, seed)
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", [NEW_PATHS[1], NEW_PATHS[3], NEW_PATHS[4], NEW_PATHS[7]],
                         ids=_path_id)
@pytest.mark.parametrize("programs", [1, 5, 131])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_new_paths_program_runs_and_ring_depth(path, programs, stages, device, seed):
    # Runs that start and end mid-tile and mid-head; with a bf16 weight an item takes 8
    # ring slots, so even a 4-deep ring wraps within one item. Every depth: a pipelined
    # TMA-loaded bf16 weight beside a register-widened operand was seen wrong in some
    # configurations only (with tl.dot, on the H200).
    inp = _inputs(KIMI, [900, 333], 1, path, device, seed)
    run_and_check(inp, "hopper_ws", config=HopperWSConfig(ring_depth=stages, programs=programs))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", [NEW_PATHS[0], NEW_PATHS[5]], ids=_path_id)
def test_new_paths_fp16_outputs(path, device, seed):
    inp = _inputs(KIMI, [600], 1, path, device, seed, out_dtype=torch.float16,
                  weight_scale_range=(1e-3, 1e-1))  # within fp16 range
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
def test_block_scales_far_apart_along_k(device, seed):
    # Neighbouring K blocks of a row 1e5 apart, both ways round: the accumulator goes from
    # one block's scale to the next by their ratio (1e5 or 1e-5); applied upside down or at
    # the wrong K step, it is off by up to 1e10.
    inp = _inputs(KIMI, [300], 1, NEW_PATHS[0], device, seed)
    s = inp.kv_proj_scale
    s[:, 0::2], s[:, 1::2] = 1e2, 1e-3
    s[1::2] = s[1::2].flip(1)
    run_and_check(inp, "hopper_ws")


# ------------------------------------------------ a bf16 cache
# Every weight format over a bf16 cache: the bf16 latent tile is wgmma's A operand as it is;
# the weight TMA-loaded, bf16 as given or widened exactly into a bf16 copy ahead of the
# kernel (fp8 per row or per block with their own scales; MXFP4 with a power-of-two row
# scale); the rope stored from registers.
CACHE16_PATHS = [
    ("fp8_row", None, torch.float32),
    ("fp8_row", None, torch.bfloat16),
    ("fp8_block", None, torch.float32),
    ("fp8_block", None, torch.bfloat16),
    ("bf16", None, None),
    ("bf16", "row", torch.float32),
    ("bf16", "block", torch.float32),
    ("mxfp4", None, None),
]


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", CACHE16_PATHS, ids=_path_id)
@pytest.mark.parametrize(("contexts", "block_size"), LAYOUTS)
def test_bf16_cache_matches_reference(path, contexts, block_size, device, seed):
    inp = _inputs(KIMI, contexts, block_size, path, device, seed, cache="bf16")
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", [CACHE16_PATHS[0], CACHE16_PATHS[2], CACHE16_PATHS[4],
                                  CACHE16_PATHS[7]], ids=_path_id)
@pytest.mark.parametrize(("shape", "contexts"), [
    ("deepseek-v3-tp8", [2000, 0, 77]),
    ("deepseek-v3-tp1", [700]),  # 256 items a tile
    (KIMI, [32000]),
])
def test_bf16_cache_at_model_shapes(path, shape, contexts, device, seed):
    inp = _inputs(shape, contexts, 1, path, device, seed, cache="bf16")
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", [CACHE16_PATHS[0], CACHE16_PATHS[3], CACHE16_PATHS[5],
                                  CACHE16_PATHS[7]], ids=_path_id)
@pytest.mark.parametrize("programs", [1, 5, 131])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_bf16_cache_program_runs_and_ring_depth(path, programs, stages, device, seed):
    # Runs that start and end mid-tile and mid-head (each program stores the rope of its
    # own heads only); an item takes 8 ring slots, so every depth wraps within one item.
    inp = _inputs(KIMI, [900, 333], 1, path, device, seed, cache="bf16")
    run_and_check(inp, "hopper_ws", config=HopperWSConfig(ring_depth=stages, programs=programs))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", [CACHE16_PATHS[0], CACHE16_PATHS[5]], ids=_path_id)
def test_bf16_cache_fp16_outputs(path, device, seed):
    # The rope is rounded from bf16 to fp16 on its way from the cache.
    inp = _inputs(KIMI, [600, 0, 77], 1, path, device, seed, cache="bf16",
                  out_dtype=torch.float16, weight_scale_range=(1e-3, 1e-1))
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
def test_bf16_cache_block_scales_far_apart_along_k(device, seed):
    inp = _inputs(KIMI, [300], 1, CACHE16_PATHS[2], device, seed, cache="bf16")
    s = inp.kv_proj_scale
    s[:, 0::2], s[:, 1::2] = 1e2, 1e-3
    s[1::2] = s[1::2].flip(1)
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
def test_bf16_cache_ignores_k_scale(device, seed):
    # A bf16 cache has nothing to dequantise: k_scale None, or any value, changes nothing.
    inp = _inputs(KIMI, [300, 0, 129], 16, CACHE16_PATHS[0], device, seed, cache="bf16")
    inp.k_scale = None
    run_and_check(inp, "hopper_ws")
    inp.k_scale = torch.full((1,), 7.0, device=device)
    run_and_check(inp, "hopper_ws")


def test_widened_weights_run_the_bf16_weight_s_kernel():
    # Over a bf16 cache an fp8 or MXFP4 weight is widened into a bf16 copy ahead of the
    # kernel, which is then the bf16 weight's (its TMA ring takes two slots too); with an
    # fp8 weight the scale is its own, with MXFP4 a float32 row scale.
    from mla_kernels.designs.hopper_ws import HOPPER_WS
    from mla_kernels.designs.hopper_ws.widening import WidenedWeight

    for fmt in ("fp8_row", "fp8_block", "mxfp4"):
        inp = mk.build_inputs(KIMI, [10], cache_dtype="bf16", weight_format=fmt)
        launch = HOPPER_WS.prepare(_prob(fmt=fmt, cache="bf16"), inp.args(), None,
                                   HopperWSConfig(ring_depth=2), DEVICES["H200"])
        assert isinstance(launch, WidenedWeight), fmt
        consts = launch.main.consts
        assert consts["LAT16"] and not consts["CACHE_FP8"] and consts["WK"] == 64, fmt
        want = {"fp8_row": "row", "fp8_block": "block", "mxfp4": "row"}[fmt]
        assert consts["SCALE"] == SCALE_CODES[want] and consts["STAGES"] == 2, fmt
        assert launch.shape == (inp.kv_proj_weight.shape[0], 512)
        assert launch.factor_shape == ((inp.kv_proj_weight.shape[0],) if fmt == "mxfp4"
                                       else None)
    # A bf16 weight over either cache is launched as it is, over a bf16 latent tile.
    for cache in ("bf16", "fp8"):
        inp = mk.build_inputs(KIMI, [10], cache_dtype=cache, weight_format="bf16")
        launch = HOPPER_WS.prepare(_prob(fmt="bf16", cache=cache), inp.args(), None,
                                   HopperWSConfig(), DEVICES["H200"])
        assert not isinstance(launch, WidenedWeight)
        assert launch.consts["LAT16"] and launch.consts["CACHE_FP8"] == (cache == "fp8")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("fmt", "cache"), [("fp8_row", "bf16"), ("mxfp4", "bf16"),
                                          ("mxfp4", "fp8")])
def test_widened_weight_in_a_cuda_graph_reads_the_weight_at_replay(fmt, cache, device, seed):
    # The copy is made by every call, inside the graph too: a weight changed in place
    # between replays is the one the replay multiplies (over an fp8 cache, MXFP4's copy of
    # e4m3 or bf16 items: the second weight draws every item too wide for e4m3).
    inp = mk.build_inputs(KIMI, [700, 0, 129], block_size=16, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed)
    mk.gather_kv_b_proj(*inp.args(), variant="hopper_ws")  # warm up: compile, cache the plan
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mk.gather_kv_b_proj(*inp.args(), variant="hopper_ws")
    for round_ in range(2):
        if round_:
            wide = dict(e8m0_range=(-8, 4), e8m0_full_span=True) if cache == "fp8" else {}
            other = mk.build_inputs(KIMI, [1], cache_dtype=cache, weight_format=fmt,
                                    device=device, seed=seed + 1, **wide)
            inp.kv_proj_weight.copy_(other.kv_proj_weight)
            inp.kv_proj_scale.copy_(other.kv_proj_scale)
        inp.poison_outputs()
        graph.replay()
        torch.cuda.synchronize()
        res = check_outputs(inp)
        assert res["correct"], (round_, res["max_rel_err"], f"seed {seed}")


# ------------------------------------------------ MXFP4 over an fp8 cache
# Widened once a call (the default: a copy of each item as e4m3, two e4m3 parts or bf16,
# loaded by TMA) or in the kernel (a packed loader and a widener partition; no split route).
# Weight draws: every row within 12 binades (all items on the e4m3 route), every row holding
# 13 (all on the split route widened once a call), every row holding 25 (all on the bf16
# route), and items of the three routes mixed.
MX_DRAWS = ("e4m3", "split", "bf16", "mixed")
MX_DRAW_RANGES = {"e4m3": (-7, 4), "split": (-8, 4), "bf16": (-20, 4), "mixed": (-7, 4)}


def _mx_inputs(shape, contexts, block_size, draw, device, seed, **kw):
    inp = mk.build_inputs(shape, contexts, block_size=block_size, cache_dtype="fp8",
                          weight_format="mxfp4", device=device, seed=seed,
                          e8m0_range=MX_DRAW_RANGES[draw], e8m0_full_span=draw != "mixed", **kw)
    if draw == "mixed":
        # Row 5 of every third item spans -8 to 4 (13 binades: split), row 9 of the next
        # -20 to 4 (25: bf16).
        items = inp.kv_proj_scale.view(-1, 128, inp.kv_proj_scale.shape[1])
        items[1::3, 5, 2], items[1::3, 5, 3] = 127 - 8, 127 + 4
        items[2::3, 9, 0], items[2::3, 9, 1] = 127 - 20, 127 + 4
    routes = set(mx_routes(inp.kv_proj_scale).tolist())
    assert routes == {"e4m3": {0}, "split": {2}, "bf16": {1}, "mixed": {0, 1, 2}}[draw], routes
    return inp


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("draw", MX_DRAWS)
@pytest.mark.parametrize(("shape", "contexts", "block_size"), [
    (KIMI, [37, 0, 300, 129, 1], 16),  # ragged, an empty sequence, tiles across sequences
    (KIMI, [1000], 1),
    (KIMI, [100], 1),  # the one partial tile
    (KIMI, [513, 0, 2048, 70], 64),
    (KIMI, [4096], 1),
    ("deepseek-v3-tp1", [700], 1),  # 256 items a tile
])
def test_mxfp4_matches_reference(draw, shape, contexts, block_size, device, seed):
    inp = _mx_inputs(shape, contexts, block_size, draw, device, seed)
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("programs", [1, 5, 131])
@pytest.mark.parametrize(("widening", "stages", "groups"), [
    ("call", 2, 1), ("call", 4, 1), ("call", 6, 1), ("call", 2, 2), ("call", 6, 2),
    ("kernel", 3, 1), ("kernel", 4, 1)])
def test_mxfp4_program_runs_and_ring_depth(programs, widening, stages, groups, device, seed):
    # Routes change item by item (4 or 8 chunks an item) within runs that start and end
    # mid-tile; the info ring of stages + 1 entries wraps.
    inp = _mx_inputs(KIMI, [900, 333], 1, "mixed", device, seed)
    run_and_check(inp, "hopper_ws", config=HopperWSConfig(
        ring_depth=stages, programs=programs, mxfp4_widening=widening, mma_groups=groups))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("draw", MX_DRAWS)
@pytest.mark.parametrize("shape", [KIMI, "glm-5-style"])
def test_mxfp4_widened_once_a_call_or_in_the_kernel_bit_for_bit(draw, shape, device, seed):
    # The same e4m3 or bf16 chunks reach the same K loops either way (the draws hold no value
    # below 2^-126 x the row's factor, where the copy's zeros and the kernel's may differ),
    # and two MMA groups run each row's K loop as one does, so the outputs agree bit for bit;
    # the split route (widened once a call only) agrees across the configs that take it.
    inp = _mx_inputs(shape, [700, 129], 1, draw, device, seed)
    outs = []
    for config in (HopperWSConfig(), HopperWSConfig(mma_groups=2, ring_depth=6),
                   HopperWSConfig(mma_groups=2, ring_depth=3, programs=7),
                   HopperWSConfig(mxfp4_widening="kernel")):
        inp.poison_outputs()
        run_and_check(inp, "hopper_ws", config=config)
        outs.append((config, inp.k_prefix.clone(), inp.v_prefix.clone()))
    split = bool((mx_routes(inp.kv_proj_scale) == 2).any())
    for config, k, v in outs[1:len(outs) - split]:
        for a, b, name in ((k, outs[0][1], "k_prefix"), (v, outs[0][2], "v_prefix")):
            assert torch.equal(a.view(torch.int16), b.view(torch.int16)), \
                (name, config, f"seed {seed}")


def test_mxfp4_widened_in_the_kernel_refuses_two_slots_and_deep_rings():
    # Chunks go over in pairs, the first held while the second's slot frees: two slots
    # would deadlock. Refused when the plan is made, before anything is launched.
    from mla_kernels.designs.hopper_ws import HOPPER_WS

    inp = mk.build_inputs(KIMI, [10], cache_dtype="fp8", weight_format="mxfp4")
    kernel = dict(mxfp4_widening="kernel")
    with pytest.raises(ValueError, match="config.ring_depth: expected 3 or more"):
        HOPPER_WS.prepare(_prob(fmt="mxfp4"), inp.args(), None,
                          HopperWSConfig(ring_depth=2, **kernel), DEVICES["H200"])
    # Its packed chunks take the room of the fifth and sixth slots.
    for depth in (5, 6):
        with pytest.raises(ValueError, match="config.ring_depth: expected 4 or less for an "
                                             "MXFP4 weight widened in the kernel"):
            HOPPER_WS.prepare(_prob(fmt="mxfp4"), inp.args(), None,
                              HopperWSConfig(ring_depth=depth, **kernel), DEVICES["H200"])
    # Widened once a call, the kernel loads chunks as for an fp8 weight: every depth.
    for depth in (2, 5, 6):
        launch = HOPPER_WS.prepare(_prob(fmt="mxfp4"), inp.args(), None,
                                   HopperWSConfig(ring_depth=depth), DEVICES["H200"])
        assert type(launch).__name__ == "WidenedItems"
        assert launch.main.consts["STAGES"] == depth and launch.main.consts["MX_WIDENED"]


@pytest.mark.gpu
@hopper
def test_mxfp4_fp16_outputs(device, seed):
    inp = _mx_inputs(KIMI, [600], 1, "mixed", device, seed, out_dtype=torch.float16)
    run_and_check(inp, "hopper_ws")


@pytest.mark.gpu
@hopper
@pytest.mark.skipif(not hasattr(torch, "float4_e2m1fn_x2"), reason="torch without fp4 dtypes")
def test_mxfp4_as_torch_fp4_and_e8m0_dtypes(device, seed):
    inp = _mx_inputs(KIMI, [300, 0, 129], 16, "mixed", device, seed)
    inp.kv_proj_weight = inp.kv_proj_weight.view(torch.float4_e2m1fn_x2)
    inp.kv_proj_scale = inp.kv_proj_scale.view(torch.float8_e8m0fnu)
    run_and_check(inp, "hopper_ws")


@gluon.jit
def _widen_probe(w_ptr, ws_ptr, e4m3_ptr, bf16_ptr, top_ptr, fits_ptr, KV_C: gl.constexpr,
                 WS_LD: gl.constexpr, CODES: gl.constexpr):
    """One program per 128-row item: hopper_ws's widening helpers' outputs, to global memory:
    every K chunk widened both ways (whatever the item's route), the rows' largest codes
    and the item's route. The codes and packed words are read from global memory here, in
    the layouts the widener reads them from shared memory in (a row a thread)."""
    w_row = gl.program_id(0) * 128
    w32_ptr = w_ptr.to(gl.pointer_type(gl.int32), bitcast=True)
    lc: gl.constexpr = gl.BlockedLayout([1, CODES], [32, 1], [4, 1], [1, 0])
    lp: gl.constexpr = gl.BlockedLayout([1, 16], [32, 1], [4, 1], [1, 0])
    lw: gl.constexpr = gl.BlockedLayout([1, 32], [32, 1], [4, 1], [1, 0])
    lb: gl.constexpr = gl.BlockedLayout([1, 64], [32, 1], [4, 1], [1, 0])
    rc = w_row + gl.arange(0, 128, layout=gl.SliceLayout(1, lc))
    cc = gl.arange(0, CODES, layout=gl.SliceLayout(0, lc))
    code = gl.load(ws_ptr + rc[:, None] * WS_LD + cc[None, :],
                   mask=(cc < KV_C // 32)[None, :], other=0).to(gl.int32)
    packed, top, fits = mx_codes(code, KV_C)
    rp = w_row + gl.arange(0, 128, layout=gl.SliceLayout(1, lp))
    cp = gl.arange(0, 16, layout=gl.SliceLayout(0, lp))
    rw = w_row + gl.arange(0, 128, layout=gl.SliceLayout(1, lw))
    cw = gl.arange(0, 32, layout=gl.SliceLayout(0, lw))
    rb = w_row + gl.arange(0, 128, layout=gl.SliceLayout(1, lb))
    cb = gl.arange(0, 64, layout=gl.SliceLayout(0, lb))
    gl.store(top_ptr + rw, gl.convert_layout(top, gl.SliceLayout(1, lw)))
    gl.store(fits_ptr + gl.program_id(0), fits.to(gl.int32))
    for kb in gl.static_range(KV_C // 128):
        chunk = gl.load(w32_ptr + rp[:, None] * (KV_C // 8) + kb * 16 + cp[None, :])
        d = mx_offsets(packed, top, kb, lp)
        e4m3 = gl.convert_layout(widen_e4m3(chunk, d), lw)
        gl.store(e4m3_ptr + rw[:, None] * (KV_C // 4) + kb * 32 + cw[None, :], e4m3)
        w_lo, d_lo, w_hi, d_hi = halves(chunk, d)
        lo = gl.convert_layout(widen_bf16(w_lo, d_lo), lb)
        hi = gl.convert_layout(widen_bf16(w_hi, d_hi), lb)
        gl.store(bf16_ptr + rb[:, None] * KV_C + kb * 128 + cb[None, :], lo)
        gl.store(bf16_ptr + rb[:, None] * KV_C + kb * 128 + 64 + cb[None, :], hi)


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("kv_c", [512, 384, 128])
def test_mxfp4_widening_is_exact(kv_c, seed):
    # Each row's codes within 12 binades of a base anywhere in [-110, 100], and every code
    # of e2m1 (both zeros included); items of rows 13 binades wide besides. On the e4m3
    # route the widened value times 2^F (F = the row's largest code - 133) is the
    # dequantised weight, bit for bit; on the bf16 route too.
    from mla_kernels.core.formats import dequantize_mxfp4

    g = torch.Generator().manual_seed(seed)
    n = 512
    packed = torch.randint(0, 256, (n, kv_c // 2), generator=g, dtype=torch.uint8)
    base = torch.randint(127 - 110, 127 + 100, (n, 1), generator=g)
    codes = base + torch.randint(0, 12, (n, kv_c // 32), generator=g)
    codes[256:384, 0] = base[256:384, 0] + 12  # the third item: 13 binades, bf16 only
    codes = codes.to(torch.uint8)
    w, ws = packed.cuda(), codes.cuda()
    e4m3 = torch.empty(n, kv_c, dtype=torch.uint8, device="cuda")
    bf16 = torch.empty(n, kv_c, dtype=torch.bfloat16, device="cuda")
    top = torch.empty(n, dtype=torch.int32, device="cuda")
    fits = torch.empty(n // 128, dtype=torch.int32, device="cuda")
    _widen_probe[(n // 128,)](w, ws, e4m3.view(torch.int32), bf16, top, fits, KV_C=kv_c,
                              WS_LD=kv_c // 32, CODES=4 * triton.next_power_of_2(kv_c // 128),
                              num_warps=4)
    deq = dequantize_mxfp4(packed, codes).double()
    assert torch.equal(top.cpu(), codes.int().amax(1))
    assert fits.cpu().bool().tolist() == fp8_route(codes).tolist() == [True, True, False, True]
    factor = torch.exp2(codes.double().amax(1, keepdim=True) - 133)
    on_e4m3 = fp8_route(codes).repeat_interleave(128)
    widened8 = e4m3.cpu().view(torch.float8_e4m3fn)[on_e4m3].double()
    assert torch.equal(widened8 * factor[on_e4m3], deq[on_e4m3]), f"seed {seed}"
    assert torch.equal(bf16.cpu().double() * factor, deq), f"seed {seed}"
    # Bit for bit, negative zeros included.
    assert torch.equal(e4m3.cpu()[on_e4m3],
                       (deq[on_e4m3] / factor[on_e4m3]).float().to(torch.float8_e4m3fn)
                       .view(torch.uint8))
    assert torch.equal(bf16.cpu().view(torch.int16),
                       (deq / factor).float().to(torch.bfloat16).view(torch.int16))


@gluon.jit
def _e4m3_probe(src_ptr, dst_ptr):
    """The bf16-weight path's latent widening (E4M3_TO_BF16) of 64 words of 4 e4m3 codes."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [2], [0])
    i = gl.arange(0, 64, layout=lay)
    lo, hi = gl.inline_asm_elementwise(E4M3_TO_BF16, "=r,=r,r", [gl.load(src_ptr + i)],
                                       dtype=(gl.int32, gl.int32), is_pure=True, pack=1)
    gl.store(dst_ptr + 2 * i, lo)
    gl.store(dst_ptr + 2 * i + 1, hi)


@gluon.jit
def _e4m3_pair_probe(src_ptr, dst_ptr):
    """The MMA warps' widening of the latent held in registers (E4M3_PAIR_TO_BF16) of 128
    pairs of e4m3 codes, each in the low half of a word."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    i = gl.arange(0, 128, layout=lay)
    w = gl.inline_asm_elementwise(E4M3_PAIR_TO_BF16, "=r,r", [gl.load(src_ptr + i)],
                                  dtype=gl.int32, is_pure=True, pack=1)
    gl.store(dst_ptr + i, w)


@pytest.mark.gpu
@hopper
def test_bf16_path_latent_widening_is_exact():
    # Every e4m3 code, bit for bit against torch's conversion (negative zero and the
    # subnormals included); the NaN codes come out as +-480 (the contract leaves a NaN in a
    # row a token reads to the caller).
    codes = torch.arange(256, dtype=torch.uint8, device="cuda")
    out = torch.empty(128, dtype=torch.int32, device="cuda")
    _e4m3_probe[(1,)](codes.view(torch.int32), out, num_warps=2)
    got = out.view(torch.bfloat16).cpu()
    want = codes.cpu().view(torch.float8_e4m3fn).to(torch.bfloat16)
    nan = torch.isnan(want)
    assert nan.sum() == 2
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))
    assert got[nan].tolist() == [480.0, -480.0]
    # The pairs' widening: the same bits, the high half of each word ignored.
    pairs = codes.view(torch.int16).to(torch.int32) | (0x5A5A << 16)
    _e4m3_pair_probe[(1,)](pairs, out, num_warps=4)
    assert torch.equal(out.view(torch.bfloat16).cpu().view(torch.int16), got.view(torch.int16))


def _run_ptx(asm: str, args: list[torch.Tensor], n_out: int) -> list[torch.Tensor]:
    """The widening's inline PTX run on the CPU, word by word (int64 tensors of 32-bit
    values): ``$i`` are the operands (the first ``n_out`` the outputs), the instructions
    those the widenings use, each as the PTX ISA defines it; any other is an error."""
    mask = 0xFFFFFFFF
    regs = {f"${i}": a.to(torch.int64) & mask for i, a in enumerate(args, start=n_out)}

    def val(x):
        x = x.strip()
        if x in regs:
            return regs[x]
        return torch.full_like(next(iter(regs.values())), int(x, 0) & mask)

    def bf16x2_mul(a, b):
        def halves(w):
            return [((w >> sh) & 0xFFFF).to(torch.int16) for sh in (0, 16)]
        out = [(x.view(torch.bfloat16).float() * y.view(torch.bfloat16).float())
               .to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF
               for x, y in zip(halves(a), halves(b), strict=True)]
        return out[0] | (out[1] << 16)

    def prmt(a, b, sel):
        byte = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF
                                                            for i in range(4)]
        out = torch.zeros_like(a)
        for i in range(4):
            nib = (sel >> (4 * i)) & 0xF
            assert bool((nib == nib[0]).all()), "a selector that varies by word"
            nib = int(nib[0])
            v = byte[nib & 7]
            if nib & 8:  # sign-replicate mode
                v = torch.where(v & 0x80 != 0, 0xFF, 0)
            out |= v << (8 * i)
        return out

    for line in asm.replace("{", "\n").replace("}", "\n").splitlines():
        line = line.strip().rstrip(";")
        if not line or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        d, *src = [x.strip() for x in rest.split(",")]
        v = [val(x) for x in src]
        if op in ("mov.b32",):
            r = v[0]
        elif op == "and.b32":
            r = v[0] & v[1]
        elif op == "or.b32":
            r = v[0] | v[1]
        elif op == "shl.b32":
            r = v[0] << v[1]
        elif op == "mul.lo.u32":
            r = v[0] * v[1]
        elif op == "mad.lo.u32":
            r = v[0] * v[1] + v[2]
        elif op == "prmt.b32":
            r = prmt(*v)
        elif op == "mul.rn.bf16x2":
            r = bf16x2_mul(*v)
        else:
            raise AssertionError(f"an instruction the interpreter does not know: {op}")
        regs[d] = r & mask
    return [regs[f"${i}"] for i in range(n_out)]


def test_latent_widening_ptx_on_every_code():
    # The widenings' PTX text itself, run on the CPU: every e4m3 code bit for bit against
    # torch's conversion (negative zero and the subnormals included), the NaN codes as
    # +-480, in order within a word (GPU: test_bf16_path_latent_widening_is_exact).
    codes = torch.arange(256, dtype=torch.uint8)
    words = codes.view(torch.int32).to(torch.int64)
    lo, hi = _run_ptx(E4M3_TO_BF16.value, [words], 2)
    got = torch.stack([lo, hi], 1).reshape(-1).to(torch.int32).view(torch.bfloat16)
    want = codes.view(torch.float8_e4m3fn).to(torch.bfloat16)
    nan = torch.isnan(want)
    assert nan.sum() == 2
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))
    assert got[nan].tolist() == [480.0, -480.0]
    # The pairs' widening: the same bits, the high half of each word ignored.
    pairs = codes.view(torch.int16).to(torch.int64) & 0xFFFF | (0x5A5A << 16)
    (w,) = _run_ptx(E4M3_PAIR_TO_BF16.value, [pairs], 1)
    assert torch.equal(w.to(torch.int32).view(torch.bfloat16).view(torch.int16),
                       got.view(torch.int16))


def test_fp8_route_rule():
    codes = torch.full((512, 16), 120, dtype=torch.uint8)
    codes[5, 3] = 120 + 11  # 12 binades: still e4m3
    codes[200, 0] = 120 - 12  # 13 binades: the second item takes the split route
    codes[300, 1], codes[301, 2] = 120 - 11, 120 + 11  # 23 across two rows: each within 12
    codes[400, 0], codes[400, 1] = 120 - 12, 120 + 12  # 25 binades in one row: bf16
    assert fp8_route(codes).tolist() == [True, False, True, False]
    assert fp8_route(codes.view(torch.float8_e8m0fnu)).tolist() == [True, False, True, False]
    assert mx_routes(codes).tolist() == [0, 2, 0, 1]
    codes[450, 0], codes[450, 1] = 120 - 11, 120 + 12  # 24 binades: split
    codes[400, 1] = 120 + 11
    assert mx_routes(codes).tolist() == [0, 2, 0, 2]
    # Widened in the kernel: no split route.
    assert mx_routes(codes, widening="kernel").tolist() == [0, 1, 0, 1]
    # Over a bf16 cache none: the weight is widened to a bf16 copy ahead of the kernel.
    assert fp8_route(codes, cache_is_fp8=False).tolist() == [False] * 4
    assert mx_routes(codes, cache_is_fp8=False).tolist() == [1] * 4


def _prob(shape=KIMI, fmt="fp8_row", cache="fp8", out_dtype=torch.bfloat16, **kw):
    from mla_kernels.lab.occupancy import problem_for

    return replace(problem_for(shape, [10], cache, fmt, 1), out_dtype=out_dtype, **kw)


def test_supported_problems():
    assert supports(_prob())
    assert supports(_prob(shape="deepseek-v3-tp1", out_dtype=torch.float16))
    assert supports(_prob(fmt="mxfp4"))
    for fmt in ("fp8_row", "fp8_block", "bf16", "mxfp4"):  # a bf16 cache, every weight
        assert supports(_prob(fmt=fmt, cache="bf16")), fmt
        assert supports(_prob(fmt=fmt, cache="bf16", out_dtype=torch.float16)), fmt
    for kw in (dict(out_dtype=torch.float32), dict(fmt="bf16", out_dtype=torch.float32),
               dict(cache="bf16", out_dtype=torch.float32)):
        assert not supports(_prob(**kw)), kw
    assert not supports(replace(_prob(), pe_dim=32))
    assert not supports(replace(_prob(), v_dim=32))  # not a multiple of 64


def test_supported_weights_and_scales():
    for kv_c in (128, 256, 384):
        assert supports(replace(_prob(), kv_c_dim=kv_c))
    for fmt, kind in (("fp8_block", "block"), ("bf16", "none"), ("bf16", "row"),
                      ("bf16", "block")):
        for dtype in ((None,) if kind == "none" else (None, torch.bfloat16)):
            prob = _prob(fmt=fmt, weight_scale=kind, scale_dtype=dtype)
            assert supports(prob), (fmt, kind, dtype)
            assert supports(replace(prob, out_dtype=torch.float16)), (fmt, kind, dtype)
            assert supports(_prob(shape="deepseek-v3-tp1", fmt=fmt, weight_scale=kind,
                                  scale_dtype=dtype))
            assert DESIGNS["hopper_ws"].runs(prob, DEVICES["H200"])
            for dev in (INTERPRETER, DEVICES["MI355X"]):
                assert not DESIGNS["hopper_ws"].runs(prob, dev)
    assert supports(_prob(scale_dtype=torch.bfloat16))  # fp8_row with a bf16 row scale


def test_refused_weights_and_shapes():
    refused = [
        _prob(fmt="bf16", weight_scale="row", cache="fp8_fnuz"),
        replace(_prob(fmt="fp8_row", cache="bf16"), kv_c_dim=640),  # 160 KB of latent
        replace(_prob(fmt="bf16", cache="bf16"), aligned16=False),
        _prob(fmt="fp8_block", scale_dtype=torch.float16),  # not a scale dtype the call takes
        _prob(fmt="fp8_block", weight_scale="row"),  # a format/scale pair that cannot occur
        _prob(fmt="bf16", weight_scale="e8m0"),
        _prob(fmt="fp8_block", weight_dtype=torch.float8_e4m3fnuz),
        replace(_prob(fmt="bf16", weight_scale="block"), kv_c_dim=320),  # K blocks of 128
        replace(_prob(), kv_c_dim=640),  # the latent tile and a 4-deep ring overflow smem
        replace(_prob(fmt="fp8_block"), kv_c_dim=1024),
        replace(_prob(fmt="fp8_block"), nope_dim=192, v_dim=224),  # 224: not a multiple of 64
        replace(_prob(fmt="bf16"), pe_dim=32),
        replace(_prob(fmt="bf16"), aligned16=False),  # TMA needs 16-byte aligned bases
        replace(_prob(fmt="fp8_block"), aligned16=False),
    ]
    for prob in refused:
        assert not supports(prob), prob


def test_offered_on_sm90_only():
    assert DESIGNS["hopper_ws"].runs(_prob(), DEVICES["H200"])
    for dev in (INTERPRETER, DEVICES["MI355X"]):
        assert not DESIGNS["hopper_ws"].runs(_prob(), dev)
        with pytest.raises(ValueError, match="variant: expected one of"):
            resolve("hopper_ws", _prob(), dev)


def test_new_formats_resolve_on_h200():
    # By name on the H200 model, over either cache; off sm_90 refused.
    for fmt in ("fp8_block", "bf16"):
        for cache in ("fp8", "bf16"):
            design, _ = resolve("hopper_ws", _prob(fmt=fmt, cache=cache), DEVICES["H200"])
            assert design.name == "hopper_ws"
            with pytest.raises(ValueError, match="variant: expected one of"):
                resolve("hopper_ws", _prob(fmt=fmt, cache=cache), DEVICES["MI355X"])


def test_auto_falls_back_when_the_tuned_design_cannot_run_it():
    from mla_kernels.core import tuning

    design, cfg = resolve("auto", _prob(), INTERPRETER)
    assert design.name == tuning.FALLBACK[0]
    assert cfg == design.config(tuning.FALLBACK[1])
    # The table names hopper_ws for fp8 per-row on an fp8 cache; float32 outputs it cannot
    # store: the portable fallback.
    design, _ = resolve("auto", _prob(out_dtype=torch.float32), DEVICES["H200"])
    assert design.name == tuning.FALLBACK[0]


# FP8 outputs (e4m3fn codes of value / the caller's scale): every weight path over both
# caches, the deep-ring and two-group configs, and the batch layouts of the other paths.
FP8_OUT_PATHS = [
    ("fp8_row", "fp8", None),
    ("fp8_row", "fp8", HopperWSConfig(ring_depth=6)),
    ("fp8_row", "fp8", HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True)),
    ("fp8_row", "fp8", HopperWSConfig(mma_groups=2, ring_depth=6, pingpong=True)),
    ("fp8_block", "fp8", None),
    ("fp8_block", "fp8", HopperWSConfig(mma_groups=2, ring_depth=6, pingpong=True)),
    ("bf16", "fp8", None),  # a bf16 latent tile widened by the gatherer, two staging buffers
    ("bf16", "fp8", HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True)),
    # A 7-deep ring beside FP8 staging, with two staging buffers or one; an 8-deep one
    # beside one.
    ("bf16", "fp8", HopperWSConfig(mma_groups=2, ring_depth=7, latent_in_registers=True)),
    ("bf16", "fp8", HopperWSConfig(mma_groups=2, ring_depth=7, latent_in_registers=True,
                                   staging_buffers=1)),
    ("bf16", "fp8", HopperWSConfig(mma_groups=2, ring_depth=8, latent_in_registers=True,
                                   staging_buffers=1)),
    ("fp8_row", "fp8", HopperWSConfig(ring_depth=7)),
    ("mxfp4", "fp8", None),
    ("mxfp4", "fp8", HopperWSConfig(staging_buffers=1)),  # auto's, where two would fit
    ("fp8_row", "bf16", None),
    ("fp8_block", "bf16", None),
    ("bf16", "bf16", None),
    ("mxfp4", "bf16", None),
]


def _fp8_out_id(path):
    fmt, cache, config = path
    return f"{fmt}-{cache}" + ("" if config is None else
                               f"-r{config.ring_depth}g{config.mma_groups}"
                               + ("pp" if config.pingpong else
                                  "L" if config.latent_in_registers else "")
                               + (f"s{config.staging_buffers}" if config.staging_buffers
                                  else ""))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("path", FP8_OUT_PATHS, ids=_fp8_out_id)
@pytest.mark.parametrize(("contexts", "block_size"), LAYOUTS[:3])
def test_fp8_outputs_match_the_rule(path, contexts, block_size, device, seed):
    fmt, cache, config = path
    inp = mk.build_inputs(KIMI, contexts, block_size=block_size, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed,
                          out_dtype=torch.float8_e4m3fn)
    res = run_and_check(inp, "hopper_ws", config=config)
    # Most values are the rule applied to the float reference exactly; the others differ
    # by the dot's rounding (fp8 tensor cores accumulate in reduced precision).
    assert res["fp8_exact_share"] >= 0.9, res


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("fmt", ["fp8_row", "bf16"])
def test_fp8_outputs_saturate(fmt, device, seed):
    """Scales 1000x too small: many values pass 448 and are stored as +-448, as the rule
    says (the rope's with K's scale)."""
    inp = mk.build_inputs(KIMI, [300], cache_dtype="fp8", weight_format=fmt, device=device,
                          seed=seed, out_dtype=torch.float8_e4m3fn)
    inp.k_out_scale = inp.k_out_scale / 1000
    inp.v_out_scale = inp.v_out_scale / 1000
    res = run_and_check(inp, "hopper_ws")
    t = inp.total_tokens
    saturated = inp.k_prefix[:t].float().abs() == 448
    assert saturated.float().mean() > 0.2, res


@pytest.mark.gpu
@hopper
def test_fp8_outputs_take_the_scale_at_each_call(device, seed):
    """The scales are read on the device at every call: a cached plan, a new scale value."""
    inp = mk.build_inputs(KIMI, [600], cache_dtype="fp8", weight_format="fp8_row",
                          device=device, seed=seed, out_dtype=torch.float8_e4m3fn)
    run_and_check(inp, "hopper_ws")
    inp.k_out_scale.mul_(2)
    inp.v_out_scale.mul_(0.5)
    run_and_check(inp, "hopper_ws")


# ------------------------------------------------ the dynamic tail
# Long contexts' runs end short of the last items, which the programs' gatherers then claim
# tail_items at a time from a counter per device and stream (tail.py). An item's dots are the
# same whichever program runs it, so the outputs are the static runs' bit for bit.
TAIL_PATHS = [
    ("fp8_row", HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True,
                               tail_items=3)),
    ("fp8_row", HopperWSConfig(tail_items=1)),
    ("fp8_block", HopperWSConfig(tail_items=2, rope_ahead=True)),
    ("bf16", HopperWSConfig(mma_groups=2, ring_depth=6, latent_in_registers=True,
                            tail_items=4)),
]
TAIL_IDS = ["fp8_row-registers", "fp8_row-one-group", "fp8_block-rope-ahead",
            "bf16-registers"]


def _bits(inp):
    return (inp.k_prefix.view(torch.uint8).clone(), inp.v_prefix.view(torch.uint8).clone())


def _same_bits(inp, static) -> bool:
    """Whether the outputs hold ``static``'s bits (``_bits`` of an earlier call)."""
    return all(torch.equal(a, b) for a, b in zip(_bits(inp), static, strict=True))


def _counter_value(device) -> int:
    from mla_kernels.designs.hopper_ws.tail import stream_counter

    torch.cuda.synchronize()
    got = stream_counter(torch.device(device).index or torch.cuda.current_device())
    assert got is not None
    return int(got[0].item())


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize(("contexts", "block_size", "programs"), [
    ([32000], 1, None),
    ([900, 333], 1, 5),  # a few programs: many claims each, across tiles and sequences
    ([37, 0, 300, 129, 1], 16, 3),  # ragged, an empty sequence, a partial last tile
    ([1000], 1, 1),  # one program makes every claim
    ([513, 0, 2048, 70], 64, None),  # two programs a tile or more: no tail
])
@pytest.mark.parametrize(("fmt", "config"), TAIL_PATHS, ids=TAIL_IDS)
def test_dynamic_tail_is_the_static_runs_result(fmt, config, contexts, block_size, programs,
                                                device, seed):
    inp = mk.build_inputs(KIMI, contexts, block_size=block_size, cache_dtype="fp8",
                          weight_format=fmt, device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=replace(config, tail_items=0, programs=programs))
    static = _bits(inp)
    for _ in range(3):  # each call sets the counter back to zero for the next
        run_and_check(inp, "hopper_ws", config=replace(config, programs=programs))
        assert _same_bits(inp, static)
        assert _counter_value(device) == 0


@pytest.mark.gpu
@hopper
def test_dynamic_tail_on_another_stream_and_in_a_cuda_graph(device, seed):
    fmt, config = TAIL_PATHS[0]
    inp = mk.build_inputs(KIMI, [20000], block_size=1, cache_dtype="fp8", weight_format=fmt,
                          device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=replace(config, tail_items=0))
    static = _bits(inp)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # a stream's own counter
        run_and_check(inp, "hopper_ws", config=config)
        assert _counter_value(device) == 0
    side.synchronize()
    assert _same_bits(inp, static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mk.gather_kv_b_proj(*inp.args(), variant="hopper_ws", config=config)
    for _ in range(3):
        inp.poison_outputs()
        graph.replay()
        torch.cuda.synchronize()
        assert _same_bits(inp, static)


@pytest.mark.gpu
@hopper
def test_dynamic_tail_captured_before_any_counter_runs_static(device, seed, monkeypatch):
    # A first call while a graph is captured makes no counters (their zeroing would be
    # captured, not run): that launch runs without its tail, with the same result.
    from mla_kernels.designs.hopper_ws import tail

    fmt, config = TAIL_PATHS[0]
    inp = mk.build_inputs(KIMI, [20000], block_size=1, cache_dtype="fp8", weight_format=fmt,
                          device=device, seed=seed)
    run_and_check(inp, "hopper_ws", config=replace(config, tail_items=0))
    static = _bits(inp)
    monkeypatch.setattr(tail, "_blocks", {})
    monkeypatch.setattr(tail, "_counters", {})
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mk.gather_kv_b_proj(*inp.args(), variant="hopper_ws", config=config)
    assert tail._blocks == {} and tail._counters == {}
    inp.poison_outputs()
    graph.replay()
    torch.cuda.synchronize()
    assert _same_bits(inp, static)


@pytest.mark.parametrize(("shape", "fmt", "cache", "config", "why"), [
    (KIMI, "fp8_row", "fp8", HopperWSConfig(mma_groups=2, pingpong=True, ring_depth=4,
                                            tail_items=2), "ping-pong"),
    (KIMI, "mxfp4", "fp8", HopperWSConfig(tail_items=2), "MXFP4"),
    (KIMI, "bf16", "fp8", HopperWSConfig(tail_items=2), "fp8 latent tile"),
    (KIMI, "fp8_row", "bf16", HopperWSConfig(tail_items=2), "fp8 latent tile"),
    ("deepseek-v3-tp1", "fp8_row", "fp8", HopperWSConfig(tail_items=2), "lockstep"),
])
def test_dynamic_tail_refused_where_it_does_not_apply(shape, fmt, cache, config, why):
    # Refused when the launch is prepared, before anything is written.
    from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel
    from mla_kernels.lab.occupancy import problem_for

    inp = mk.build_inputs(shape, [300], cache_dtype=cache, weight_format=fmt)
    prob = problem_for(shape, [300], cache, fmt, 1)
    with pytest.raises(ValueError, match=rf"config\.tail_items: expected 0 here \(.*{why}.*\), "
                                         r"got 2"):
        compile_main_kernel("hopper_ws", inp, prob, config, HOPPER, 90)
