"""Compile-only checks for a Hopper target, with no GPU: the designs fit an SM's shared
memory, the serial design keeps an fp8 head's weight resident (not a bf16 one), and the
tiled design's fp8 dot is a native wgmma. Runs in a child process with the interpreter
off, since this process may have decorated the kernels for the interpreter."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import triton

from mla_kernels.designs.chunk_loop import RESIDENT_WEIGHT_BYTES
from mla_kernels.lab.compile_check import HOPPER_SMEM

# Every test here compiles for sm_90 (most in a child process): the slow tier.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reports():
    pytest.importorskip("triton.backends.nvidia.compiler")
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run([sys.executable, "-m", "mla_kernels.lab.compile_check", "--variant", "serial",
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
    out = subprocess.run([sys.executable, "-m", "mla_kernels.lab.compile_check", "--variant",
                          "hopper_ws"], capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    (r,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert r["shared_bytes"] <= HOPPER_SMEM
    assert r["num_warps"] == 12
    assert r["wgmma"] > 0 and r["mma_sync"] == 0
    assert r["spill_bytes"] == 0


def test_hopper_ws_lockstep_runs_compile_for_sm90():
    # 128 heads (256 items a tile): the run-granule choice of _item_range is compiled in,
    # and costs no registers (no spills).
    pytest.importorskip("triton.experimental.gluon")
    env = dict(os.environ, TRITON_INTERPRET="0")
    code = ("import json; from mla_kernels.lab.compile_check import compile_design; "
            "print(json.dumps(compile_design('hopper_ws', 'deepseek-v3-tp1')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    (r,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert r["shared_bytes"] <= HOPPER_SMEM and r["spill_bytes"] == 0 and r["wgmma"] == 32


# The hopper_ws paths beside fp8_row over an fp8 cache: (weight format, scale kind, scale
# dtype, ring depth, cache). compile_check's command line draws each format's own scale; a
# bf16 weight's row or block scale and bf16 scales are set here, on the inputs and the
# Problem, before compiling.
HOPPER_WS_PATHS = [
    ("fp8_block", "block", "float32", 4, "fp8"),
    ("fp8_block", "block", "bfloat16", 2, "fp8"),
    ("bf16", "none", None, 4, "fp8"),
    ("bf16", "row", "float32", 4, "fp8"),
    ("bf16", "row", "bfloat16", 2, "fp8"),
    ("bf16", "block", "float32", 4, "fp8"),
    ("bf16", "block", "bfloat16", 3, "fp8"),
    ("mxfp4", "e8m0", None, 4, "fp8"),  # widened once a call
    ("mxfp4", "e8m0", None, 3, "fp8", 1, False, False, 0, "bfloat16", "kernel"),
    ("mxfp4", "e8m0", None, 4, "fp8", 1, False, False, 0, "bfloat16", "kernel"),
    # A bf16 cache: a 128 KB bf16 latent tile, bf16 x bf16 wgmma for every weight (fp8 and
    # MXFP4 weights widened to a bf16 copy first, so their kernel is the bf16 weight's with
    # their scale: the last kernel launched is the one compiled here).
    ("fp8_row", "row", "float32", 4, "bf16"),
    ("fp8_row", "row", "bfloat16", 3, "bf16"),
    ("fp8_block", "block", "float32", 4, "bf16"),
    ("bf16", "none", None, 4, "bf16"),
    ("bf16", "row", "float32", 2, "bf16"),
    ("bf16", "block", "bfloat16", 4, "bf16"),
    ("mxfp4", "e8m0", None, 4, "bf16"),
]

_COMPILE_PATHS = textwrap.dedent(r"""
    import json, re, sys
    from dataclasses import replace
    import torch
    from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel, ptxas_report
    from mla_kernels.designs.hopper_ws import HopperWSConfig
    from mla_kernels.lab.inputs import build_inputs
    from mla_kernels.lab.occupancy import problem_for

    shape = sys.argv[2]
    for fmt, kind, dtype, depth, cache, *groups in json.loads(sys.argv[1]):
        # groups: [MMA groups[, latent in registers[, pingpong, spare latent chunks, out[,
        # MXFP4's widening[, staging buffers]]]]]
        out = getattr(torch, groups[4]) if len(groups) > 4 else torch.bfloat16
        inp = build_inputs(shape, [300], cache_dtype=cache, weight_format=fmt, out_dtype=out)
        prob = problem_for(shape, [300], cache, fmt, 1, out_dtype=out)
        n, k = inp.kv_proj_weight.shape
        if fmt == "bf16" and kind != "none":
            inp.kv_proj_scale = torch.ones((n,) if kind == "row" else (-(-n // 128), -(-k // 128)))
        if dtype is not None:
            inp.kv_proj_scale = inp.kv_proj_scale.to(getattr(torch, dtype))
        prob = replace(prob, weight_scale=kind,
                       scale_dtype=None if dtype in (None, "float32") else getattr(torch, dtype))
        cfg = HopperWSConfig(ring_depth=depth, mma_groups=groups[0] if groups else 1,
                             latent_in_registers=len(groups) > 1 and groups[1],
                             pingpong=len(groups) > 2 and groups[2],
                             spare_latent_chunks=groups[3] if len(groups) > 3 else 0,
                             mxfp4_widening=groups[5] if len(groups) > 5 else "call",
                             staging_buffers=groups[6] if len(groups) > 6 else None)
        _, kernel = compile_main_kernel("hopper_ws", inp, prob, cfg, HOPPER, 90)
        ptx = kernel.asm["ptx"]
        print(json.dumps({"path": [fmt, kind, dtype, depth, cache, *groups],
                          "shared_bytes": int(kernel.metadata.shared),
                          "num_warps": int(kernel.metadata.num_warps),
                          "wgmma": re.findall(r"wgmma\.mma_async\S*", ptx),
                          "mma_sync": len(re.findall(r"\bmma\.sync", ptx)),
                          **ptxas_report(ptx, 90)}))
""")

TRITON_VERSION = tuple(int(x) for x in triton.__version__.split(".")[:2])


def _child_rows(script: str, *args: str) -> list[dict]:
    """The JSON lines ``script`` prints, run in a fresh process with the interpreter off."""
    pytest.importorskip("triton.experimental.gluon")
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                         text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _compile_paths(paths: list[tuple], shape: str = "kimi-k3-tp8") -> list[dict]:
    """_COMPILE_PATHS's report of each path (for heads of ``shape``), compiled for sm_90 in a
    fresh process."""
    rows = _child_rows(_COMPILE_PATHS, json.dumps(paths), shape)
    assert [tuple(r["path"]) for r in rows] == paths
    return rows


def _mx_wgmma(r):
    """MXFP4 over an fp8 cache: the e4m3 route's 32 wgmma and the bf16 route's 64, and widened
    once a call also the split route's two e4m3 K loops (64)."""
    return 32 + 64 + (0 if r["path"][-1] == "kernel" else 64)


def _mx_spills(r):
    """The local-memory bytes allowed MXFP4 over an fp8 cache (why: test_hopper_ws_new_paths'
    comment). Widened once a call, under triton 3.7 and newer ptxas also keeps some of the
    split route's values there (140 to 244 bytes under 3.9, by ptxas's report; 3.6's, the
    H200's, spills no more than before the split route: 20 to 24 bytes)."""
    if TRITON_VERSION >= (3, 7) and r["path"][-1] != "kernel":
        return 256
    return 64


def test_hopper_ws_new_paths_compile_for_sm90():
    # Block-scaled fp8, bf16 and MXFP4 weights: the same three warp groups within an SM's
    # shared memory, native wgmma of the right operand type only (fp8 x fp8; bf16 x bf16
    # over a bf16 latent tile, widened by the gather warps over an fp8 cache; MXFP4 either,
    # by item), no spills (the gather warps hold a whole tile's words in registers, the
    # block path's renormalisation lives beside the accumulator; the exceptions below).
    for r in _compile_paths(HOPPER_WS_PATHS):
        fmt, cache = r["path"][0], r["path"][4]
        assert r["shared_bytes"] <= HOPPER_SMEM, r
        # MXFP4 widened in the kernel over an fp8 cache: a fourth warpgroup for its packed
        # loader's one warp (widened once a call, the TMA loader's).
        in_kernel = fmt == "mxfp4" and cache == "fp8" and r["path"][-1] == "kernel"
        assert r["num_warps"] == (16 if in_kernel else 12), r
        kinds = set(r["wgmma"])
        # An item's K = 512: 4 chunks of 4 x k32 fp8 steps, or 8 of 4 x k16 bf16 steps, each
        # as two m64 instructions.
        if fmt == "bf16" or cache == "bf16":  # over a bf16 cache every weight runs bf16
            assert kinds == {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"}, r
            assert len(r["wgmma"]) == 64, r
        elif fmt == "mxfp4":  # its routes, chosen item by item
            assert kinds == {"wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3",
                             "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"}, r
            assert len(r["wgmma"]) == _mx_wgmma(r), r
        else:
            assert kinds == {"wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"}, r
            assert len(r["wgmma"]) == 32, r
        assert r["mma_sync"] == 0, r
        # MXFP4: ptxas keeps a few values in local memory: under triton 3.6 one pointer and
        # one int every partition derives from the arguments (cs_ptr + batch), across the
        # partitions' register reallocation, loaded once a partition (16 bytes); newer
        # ptxas also some of the widener's per-item values (up to 56 bytes, a few loads an
        # item of ~1,500 instructions). Read from the SASS (MXFP4 on hopper_ws:
        # docs/log/2026-11-30-mxfp4-fast-path.md). Elsewhere none under 3.9 and newer. Under
        # 3.6 (the H200's) ptxas also spills on the bf16-tile paths (a bf16 weight or a
        # bf16 cache) with a block scale or a ring shallower than 4 (up to 328 bytes: the
        # MMA warps' ring indices and scale vector, the gather warps' per-tile row offsets;
        # read from the SASS); at 8ad2c70
        # a bf16 cache's row-scaled path spilled 144 bytes at depth 3 already. The
        # unscaled and row-scaled paths at auto's depth of 4, which the matrix times, do not.
        allowed = _mx_spills(r) if fmt == "mxfp4" and cache == "fp8" else 0
        kind, depth = r["path"][1], r["path"][3]
        if (TRITON_VERSION < (3, 7) and (fmt == "bf16" or cache == "bf16")
                and (kind == "block" or depth < 4)):
            allowed = 400
        assert r["spill_bytes"] <= allowed, r


# Two MMA groups (fp8 per-row over an fp8 cache, the latent in registers or not) and rings
# of 5-6 chunks over an fp8 latent tile (fp8 weights, and MXFP4 widened once a call; widened
# in the kernel, its packed chunks take that room):
# (weight format, scale kind, scale dtype, ring depth,
# cache, MMA groups[, latent in registers]).
HOPPER_WS_OPTIONS = [
    ("fp8_row", "row", "float32", 6, "fp8", 2, True),
    ("fp8_row", "row", "bfloat16", 4, "fp8", 2, True),
    ("fp8_row", "row", "float32", 6, "fp8", 2),
    ("fp8_row", "row", "bfloat16", 2, "fp8", 2),
    ("fp8_row", "row", "float32", 6, "fp8", 1),
    ("fp8_block", "block", "float32", 5, "fp8", 1),
    ("mxfp4", "e8m0", None, 6, "fp8", 1),  # widened once a call
    # A bf16 weight: each group's rows of the fp8 tile widened into registers.
    ("bf16", "none", None, 6, "fp8", 2, True),
    ("bf16", "none", None, 4, "fp8", 2, True, False, 0, "float8_e4m3fn"),
    # A 7-deep ring beside two FP8 staging buffers, an 8-deep one beside one.
    ("bf16", "none", None, 7, "fp8", 2, True, False, 0, "float8_e4m3fn"),
    ("bf16", "none", None, 8, "fp8", 2, True, False, 0, "float8_e4m3fn", "call", 1),
    ("fp8_row", "row", "float32", 7, "fp8", 1, False, False, 0, "float8_e4m3fn"),
]


def test_hopper_ws_two_mma_groups_and_deep_rings_compile_for_sm90():
    # Two groups: four warpgroups (16 warps), each MMA group's 64 rows as 16 m64 wgmma an
    # item (32 in the kernel, as one group's 128 rows), no spills at 200 registers a group.
    # Rings of 5-6 chunks fit the SM's shared memory with one staging buffer.
    import torch

    from mla_kernels.designs.hopper_ws.plan import fp8_tile_smem
    from mla_kernels.lab.occupancy import problem_for

    for r in _compile_paths(HOPPER_WS_OPTIONS):
        groups = r["path"][5]
        assert r["shared_bytes"] <= HOPPER_SMEM, r
        # The plan's rule of the fp8 tile's shared memory, which refuses rings that do not
        # fit, counts the kernel's allocations and some room for their alignment: never
        # under what the kernel asks, and within that room of it.
        fmt, depth, cache = r["path"][0], r["path"][3], r["path"][4]
        out = getattr(torch, r["path"][9]) if len(r["path"]) > 9 else torch.bfloat16
        prob = problem_for("kimi-k3-tp8", [300], cache, fmt, 1, out_dtype=out)
        nbuf = r["path"][11] if len(r["path"]) > 11 else (
            2 if depth <= 4 or out == torch.float8_e4m3fn else 1)
        rule = fp8_tile_smem(prob, depth, nbuf, fmt == "mxfp4")
        assert r["shared_bytes"] <= rule <= r["shared_bytes"] + 2048, (r["path"], rule,
                                                                        r["shared_bytes"])
        assert r["num_warps"] == (16 if groups == 2 else 12), r
        assert r["mma_sync"] == 0, r
        if r["path"][0] == "bf16":  # 8 K slices of 4 k16 steps, 64 rows a group
            assert set(r["wgmma"]) == {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"}
            assert len(r["wgmma"]) == 64, r
        else:
            assert len(r["wgmma"]) == (_mx_wgmma(r) if r["path"][0] == "mxfp4" else 32), r
        # Short of registers, ptxas would wait for each wgmma before issuing the next.
        assert not r["wgmma_serialized"], r
        # Under triton 3.6 a ring past 4 keeps one pointer in local memory, stored at the
        # kernel's start and loaded once a partition (8 bytes; read from the SASS).
        # At depth 7, 16 bytes (ptxas's report).
        allowed = (8 if r["path"][3] <= 6 else 16) if TRITON_VERSION < (3, 7) else 0
        if r["path"][0] == "mxfp4":  # as on MXFP4's other paths (HOPPER_WS_PATHS)
            allowed = _mx_spills(r)
        if r["path"][0] == "bf16":
            # The widened latent takes 128 of a group's 224 registers, which leaves the
            # gatherer 40: under 3.6 it keeps 16 bytes of a tile's row offsets in local
            # memory, and with bf16 outputs each group's epilogue two values an item (read
            # from the SASS); under 3.9 also some of the groups' scalars an item (340-416
            # bytes by ptxas's report).
            allowed = 64 if TRITON_VERSION < (3, 7) else 448
        elif r["path"][6:] == [True]:
            # The latent in registers: 64 of a group's 200 registers. Under 3.6 (the H200's
            # triton, where it was timed) 8 bytes at depth 6 and none at 4; under 3.9 a few
            # of the partition's scalars (44 bytes), some beside the last chunk's wgmma (SASS).
            allowed = 8 if TRITON_VERSION < (3, 7) else 64
        assert r["spill_bytes"] <= allowed, r


# The ping-pong schedule with FP8 outputs (spare latent chunk slots or none) and with bf16
# ones: (weight format, scale kind, scale dtype, ring depth, cache, 2, False, True, spare
# latent chunks, output dtype).
HOPPER_WS_PINGPONG = [
    ("fp8_row", "row", "float32", 6, "fp8", 2, False, True, 0, "float8_e4m3fn"),
    ("fp8_row", "row", "float32", 6, "fp8", 2, False, True, 1, "float8_e4m3fn"),
    ("fp8_row", "row", "float32", 4, "fp8", 2, False, True, 3, "float8_e4m3fn"),
    ("fp8_block", "block", "float32", 5, "fp8", 2, False, True, 2, "float8_e4m3fn"),
    ("fp8_row", "row", "float32", 4, "fp8", 2, False, True, 0, "bfloat16"),
]


def test_hopper_ws_pingpong_compiles_for_sm90():
    # Four warpgroups; each MMA group runs whole 128-row items (32 m64 wgmma an item, 64 in
    # the kernel's two groups), within the SM's shared memory with up to three spare latent
    # slots beside the ring depths the rule allows.
    for r in _compile_paths(HOPPER_WS_PINGPONG):
        assert r["shared_bytes"] <= HOPPER_SMEM, r
        assert r["num_warps"] == 16, r
        assert r["mma_sync"] == 0, r
        assert set(r["wgmma"]) == {"wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"}, r
        assert len(r["wgmma"]) == 64, r
        # Without spare slots a per-row item's epilogue keeps a few values in local memory
        # under triton 3.6 (the H200's; up to 32 bytes, none in the K loop: read from the
        # SASS), and with bf16 outputs, whose staging takes twice the registers, under both
        # (up to 44 bytes; `auto` does not take the schedule for them); none with spare
        # slots.
        if r["path"][9] == "bfloat16":
            allowed = 48
        else:
            allowed = 32 if TRITON_VERSION < (3, 7) and r["path"][8] == 0 else 0
        assert r["spill_bytes"] <= allowed, r


def test_the_mma_rate_kernel_compiles_to_its_wgmma_chains_for_sm90():
    # The kernel the tensor-core floor is measured with: every case compiles for sm_90 with
    # no GPU, fits an SM's shared memory, and issues wgmma (K = 512 in m64 steps per group).
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json
        from mla_kernels.lab.diagnostics import mma_rate
        print(json.dumps(mma_rate.check()))
        """)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {(r["dot_dtype"], r["num_warps"]): r for r in json.loads(out.stdout.splitlines()[-1])}
    assert set(rows) == {("fp8", 4), ("fp8", 8), ("bf16", 4), ("bf16", 8)}
    for (dot, warps), r in rows.items():
        assert 0 < r["shared_bytes"] <= HOPPER_SMEM
        k_steps = 512 // (32 if dot == "fp8" else 16)  # one wgmma takes 32 fp8 / 16 bf16 K
        assert r["wgmma"] == k_steps * (2 if warps == 4 else 1)  # 128 rows: 2 m64 a group


# GLM-5-style heads (192 K-nope and 256 V columns): items of two 64-column pieces. Each
# weight over an fp8 cache, two groups with the latent in registers, FP8 outputs (a factor
# a column), a bf16 cache: (as HOPPER_WS_PATHS[, MMA groups, latent in registers, pingpong,
# spare latent chunks, output dtype]).
HOPPER_WS_GLM5 = [
    ("fp8_row", "row", "float32", 4, "fp8"),
    ("fp8_block", "block", "float32", 4, "fp8", 1, False, False, 0, "float8_e4m3fn"),
    ("bf16", "none", None, 4, "fp8"),
    ("mxfp4", "e8m0", None, 4, "fp8", 1, False, False, 0, "float8_e4m3fn"),
    ("mxfp4", "e8m0", None, 4, "fp8", 1, False, False, 0, "bfloat16", "kernel"),
    ("fp8_row", "row", "float32", 6, "fp8", 2, True),
    ("fp8_row", "row", "float32", 4, "bf16", 1, False, False, 0, "float8_e4m3fn"),
]


def test_hopper_ws_glm5_heads_compile_for_sm90():
    # The kernels of Kimi-K3's heads with the stores split in pieces: the same warps, wgmma
    # kinds and counts, within the SM's shared memory; spills no more than Kimi-K3's paths
    # allow (MXFP4's few values; two groups' latent in registers under newer ptxas).
    for r in _compile_paths(HOPPER_WS_GLM5, "glm-5-style"):
        fmt, cache = r["path"][0], r["path"][4]
        groups = r["path"][5] if len(r["path"]) > 5 else 1
        assert r["shared_bytes"] <= HOPPER_SMEM, r
        four = groups == 2 or (fmt == "mxfp4" and cache == "fp8" and r["path"][-1] == "kernel")
        assert r["num_warps"] == (16 if four else 12), r
        assert r["mma_sync"] == 0, r
        bf16 = fmt == "bf16" or cache == "bf16"
        assert len(r["wgmma"]) == (_mx_wgmma(r) if fmt == "mxfp4" and not bf16
                                   else 64 if bf16 else 32), r
        allowed = (_mx_spills(r) if fmt == "mxfp4" and not bf16
                   else 64 if fmt == "mxfp4" or r["path"][6:7] == [True] else 0)
        assert r["spill_bytes"] <= allowed, r


_OVERLAP = textwrap.dedent(r"""
    import json, re
    from mla_kernels.designs.hopper_ws import HopperWSConfig
    from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel, ptxas_report
    from mla_kernels.lab.inputs import build_inputs
    from mla_kernels.lab.occupancy import problem_for

    for fmt, cache, overlap, prefetch in (
            ("fp8_row", "fp8", True, "none"), ("fp8_row", "fp8", False, "none"),
            ("mxfp4", "fp8", True, "none"), ("bf16", "bf16", True, "none"),
            ("fp8_row", "fp8", None, None), ("fp8_row", "fp8", True, "latent"),
            ("fp8_row", "fp8", True, "weight"), ("fp8_row", "fp8", True, "inputs"),
            ("bf16", "bf16", True, "inputs"), ("fp8_row", "fp8", True, "table"),
            ("fp8_row", "fp8", True, "table+weight")):
        inp = build_inputs("kimi-k3-tp8", [300], cache_dtype=cache, weight_format=fmt)
        prob = problem_for("kimi-k3-tp8", [300], cache, fmt, 1)
        cfg = (HopperWSConfig() if overlap is None
               else HopperWSConfig(overlap_launch=overlap, prefetch=prefetch))
        _, kernel = compile_main_kernel("hopper_ws", inp, prob, cfg, HOPPER, 90)
        ptx, ttgir = kernel.asm["ptx"], kernel.asm["ttgir"]
        # What runs before the wait, read in the TTGIR: its control flow is structured and the
        # partitions sit in one region after it (in the PTX, blocks follow no program order).
        wait = ttgir.find("griddepcontrol.wait")
        before = ttgir[:wait] if wait >= 0 else ""
        loads = re.findall(r"tt\.load [^\n]*", before)
        print(json.dumps({"path": [fmt, cache, overlap, prefetch], "on": cfg.overlap_launch,
                          "prefetch": cfg.prefetch,
                          "launch_pdl": bool(kernel.metadata.launch_pdl),
                          "wait": len(re.findall(r"griddepcontrol\.wait", ptx)),
                          "release": len(re.findall(r"griddepcontrol\.launch_dependents", ptx)),
                          # Memory operations before the wait, by op (tt.gather is one of
                          # registers); loads by cache modifier (as triton 3.6 and 3.9 print
                          # it); bulk prefetches (inline assembly) by instruction.
                          "before": sorted(
                              set(re.findall(r"(?:tt|ttg|ttng)\.\w*(?:load|store|atomic|copy|"
                                             r"tma)\w*", before))
                              - {"tt.load"}
                              | {"tt.load cg" if re.search(r"cache_?[mM]odifier = cg", x) else "tt.load"
                                 for x in loads}
                              | set(re.findall(r"cp\.async\.bulk\.prefetch\.L2", before))),
                          "prefetches": len(re.findall(r"cp\.async\.bulk\.prefetch\.L2", ptx)),
                          **ptxas_report(ptx, 90)}))
""")


def test_hopper_ws_overlapped_launch_compiles_for_sm90():
    # overlap_launch: the launch attribute in the kernel's metadata and one wait and one
    # release in its code, no access to memory before the wait (read in the TTGIR); off,
    # neither (the plain launch's code). The default config launches overlapped. With
    # prefetch, the one access before the wait is L2-only loads (the page table's entries,
    # for addresses) and bulk prefetches into L2: of the block ids, the latent rows, the
    # weight (a prefetch instruction for each).
    rows = _child_rows(_OVERLAP)
    assert len(rows) == 11
    assert [r["on"] for r in rows if r["path"][2] is None] == [True]
    for r in rows:
        on = r["on"]
        assert r["launch_pdl"] == on, r
        assert (r["wait"], r["release"]) == ((1, 1) if on else (0, 0)), r
        kinds = {"none": 0, "table": 1, "latent": 1, "weight": 1, "table+weight": 2,
                 "inputs": 2}
        assert r["prefetches"] == kinds[r["prefetch"]], r
        if on:
            allowed = [] if r["prefetch"] == "none" else [
                "cp.async.bulk.prefetch.L2", "tt.load cg"]
            assert r["before"] == allowed, r


_GUESS = textwrap.dedent(r"""
    import json, re
    from mla_kernels.designs.hopper_ws import HopperWSConfig
    from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel, ptxas_report
    from mla_kernels.lab.inputs import build_inputs
    from mla_kernels.lab.occupancy import problem_for

    for fmt, cache in (("fp8_row", "fp8"), ("bf16", "fp8"), ("fp8_row", "bf16")):
        for on in (False, True):
            inp = build_inputs("kimi-k3-tp8", [300], cache_dtype=cache, weight_format=fmt)
            prob = problem_for("kimi-k3-tp8", [300], cache, fmt, 1)
            _, kernel = compile_main_kernel("hopper_ws", inp, prob,
                                            HopperWSConfig(early_block_ids=on), HOPPER, 90)
            print(json.dumps({"path": [fmt, cache], "on": on,
                              "loads": len(re.findall(r"= tt\.load ", kernel.asm["ttgir"])),
                              **ptxas_report(kernel.asm["ptx"], 90)}), flush=True)
""")


def test_hopper_ws_early_block_ids_compile_for_sm90():
    # On each gather path (the fp8 tile's, the latent widener's, the bf16 tile's) the first
    # tile's block ids read at guessed indices are one load more (the guess; the first
    # tile's read becomes that of the rows it missed), at no cost in spills.
    rows = _child_rows(_GUESS)
    assert len(rows) == 6
    for off, on in zip(rows[::2], rows[1::2], strict=True):
        assert (off["path"], off["on"], on["on"]) == (on["path"], False, True)
        assert on["loads"] == off["loads"] + 1, (off, on)
        assert on["spill_bytes"] == off["spill_bytes"] == 0, (off, on)


_ROPE = textwrap.dedent(r"""
    import json, re
    import torch
    from mla_kernels.designs.hopper_ws import HopperWSConfig
    from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel, ptxas_report
    from mla_kernels.lab.inputs import build_inputs
    from mla_kernels.lab.occupancy import problem_for

    two = dict(mma_groups=2, ring_depth=6, latent_in_registers=True)
    for fmt, out, kw in (("fp8_row", "bf16", {}), ("fp8_block", "bf16", {}),
                         ("fp8_row", "fp8", {}), ("fp8_row", "bf16", two)):
        dtype = torch.float8_e4m3fn if out == "fp8" else torch.bfloat16
        for on in (False, True):
            inp = build_inputs("kimi-k3-tp8", [300], weight_format=fmt, out_dtype=dtype)
            prob = problem_for("kimi-k3-tp8", [300], "fp8", fmt, 1, out_dtype=dtype)
            _, kernel = compile_main_kernel("hopper_ws", inp, prob,
                                            HopperWSConfig(rope_ahead=on, **kw), HOPPER, 90)
            # Each rope store's enclosing region: the op that opens the nearest line above
            # it indented less.
            lines = kernel.asm["ttgir"].splitlines()
            parents = []
            for i, line in enumerate(lines):
                if "async_tma_copy_local_to_global %pe_desc" in line:
                    depth = len(line) - len(line.lstrip())
                    up = next(u for u in reversed(lines[:i])
                              if u.strip() and len(u) - len(u.lstrip()) < depth)
                    parents.append(re.search(r"\b[a-z_]+\.[a-z_.]+", up).group())
            print(json.dumps({"path": [fmt, out, bool(kw)], "on": on, "parents": parents,
                              **ptxas_report(kernel.asm["ptx"], 90)}), flush=True)
""")


def test_hopper_ws_rope_ahead_compiles_for_sm90():
    # The rope stored at a tile's start (the fp8 tile's paths: per-row and per-block scales,
    # FP8 outputs, two groups with the latent in registers) costs no spills, and the rope's
    # store moves from a K-nope item's branch into a loop over heads.
    rows = _child_rows(_ROPE)
    assert len(rows) == 8
    for off, on in zip(rows[::2], rows[1::2], strict=True):
        assert (off["path"], off["on"], on["on"]) == (on["path"], False, True)
        assert on["spill_bytes"] <= off["spill_bytes"], (off, on)
        if not off["path"][2]:
            assert on["spill_bytes"] == 0, on
        assert off["parents"] and set(off["parents"]) == {"scf.if"}, off
        assert len(on["parents"]) == len(off["parents"]) and set(on["parents"]) == {"scf.for"}, on



_TAIL = textwrap.dedent(r"""
    import json, re
    from mla_kernels.designs.hopper_ws import HopperWSConfig
    from mla_kernels.lab.compile_check import HOPPER, compile_main_kernel, ptxas_report
    from mla_kernels.lab.inputs import build_inputs
    from mla_kernels.lab.occupancy import problem_for

    two = dict(mma_groups=2, ring_depth=6, latent_in_registers=True)
    for fmt, kw in (("fp8_row", two), ("fp8_row", {}), ("bf16", two)):
        for tail in (0, 3):
            inp = build_inputs("kimi-k3-tp8", [300], weight_format=fmt)
            prob = problem_for("kimi-k3-tp8", [300], "fp8", fmt, 1)
            _, kernel = compile_main_kernel("hopper_ws", inp, prob,
                                            HopperWSConfig(tail_items=tail, **kw), HOPPER, 90)
            ptx = kernel.asm["ptx"]
            print(json.dumps({"path": [fmt, bool(kw)], "tail": tail,
                              "adds": len(re.findall(r"atom\.global\.gpu\.acq_rel\.add", ptx)),
                              "exchanges": len(re.findall(r"atom\.global\.gpu\.acq_rel\.exch", ptx)),
                              "atomics": len(re.findall(r"\batom\.", ptx)),
                              **ptxas_report(ptx, 90)}), flush=True)
""")


def test_hopper_ws_dynamic_tail_compiles_for_sm90():
    # The tail's claims are the gatherer's: two inlined claims (the first, and the loop's),
    # each an atomic add and, for the call's last claim, an exchange back to zero; without a
    # tail no atomic at all. Two groups with the latent in registers (the tail's candidate)
    # spill no more than without it; the other paths at most 64 bytes more (under triton 3.6
    # a bf16 weight's two groups, whose gatherer has 40 registers a thread).
    rows = _child_rows(_TAIL)
    assert len(rows) == 6
    for off, on in zip(rows[::2], rows[1::2], strict=True):
        assert (off["path"], off["tail"], on["tail"]) == (on["path"], 0, 3)
        assert off["atomics"] == 0, off
        assert (on["adds"], on["exchanges"], on["atomics"]) == (2, 2, 4), on
        assert on["spill_bytes"] <= off["spill_bytes"] + 64, (off, on)
        if on["path"] == ["fp8_row", True]:
            assert on["spill_bytes"] <= off["spill_bytes"], (off, on)
