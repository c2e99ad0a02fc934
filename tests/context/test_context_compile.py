"""Compile-only checks for a Hopper target, with no GPU: every kernel of the context path
(the split attention over expanded bf16 and FP8 K/V, the absorbed attention over an fp8 and
a bf16 latent cache, the merge) compiles for sm_90 within an SM's shared memory, and its
dots of 64-row tiles are native wgmma. Runs in a child process with the interpreter off,
since this process may have decorated the kernels for the interpreter."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mla_kernels.lab.compile_check import HOPPER_SMEM

pytestmark = pytest.mark.slow

CHILD = textwrap.dedent("""
    import json
    import torch
    from mla_kernels.context import absorbed_hopper, attention_hopper
    from mla_kernels.context.absorbed import AbsorbedPlan, absorb_weights
    from mla_kernels.context.attention import Blocking, launch_prefix
    from mla_kernels.context.merge import merge_parts
    from mla_kernels.lab.compile_check import HOPPER, compile_calls, kernel_report
    from mla_kernels.lab.inputs import build_inputs

    n, h, c = 128, 12, 4096
    q = torch.randn(n, h, 192).bfloat16()
    parts = torch.empty(4, n, h, 128), torch.empty(4, n, h)
    for kv in (torch.bfloat16, torch.float8_e4m3fn):
        k = torch.empty(c, h, 192, dtype=kv)
        v = torch.empty(c, h, 128, dtype=kv)
        s = torch.ones(1)
        for (kern,) in [compile_calls(lambda: launch_prefix(q, k, v, s, s, c, 0.07, 4, *parts),
                                      HOPPER, 90)]:
            print(json.dumps({"case": f"prefix_{kv}", **kernel_report(kern)}))
    # K and V through tensor descriptors, and the Gluon kernel for sm_90.
    k = torch.empty(c, h, 192).bfloat16()
    v = torch.empty(c, h, 128).bfloat16()
    (kern,) = compile_calls(lambda: launch_prefix(q, k, v, None, None, c, 0.07, 4, *parts,
                                                  Blocking(128, 32, 4, 3, tma=True)), HOPPER, 90)
    print(json.dumps({"case": "prefix_tma", **kernel_report(kern)}))
    (kern,) = compile_calls(lambda: attention_hopper.launch(q, k, v, c, 0.07, 4, *parts),
                            HOPPER, 90)
    print(json.dumps({"case": "prefix_hopper", **kernel_report(kern), "ptx": kern.asm["ptx"]}))
    # Its other schedules: four key stages, each consumer's softmax under its own output
    # dot or not, tiles of 128 keys.
    for sched in (attention_hopper.Schedule(3, False), attention_hopper.Schedule(4, False),
                  attention_hopper.Schedule(attention_hopper.max_stages(64), True),
                  attention_hopper.Schedule(2, False, 128),
                  attention_hopper.Schedule(2, True, 128),
                  attention_hopper.Schedule(3, True, 64, pingpong=True),
                  attention_hopper.Schedule(3, True, 64, apart=True),
                  attention_hopper.Schedule(2, True, 128, pingpong=True, apart=True)):
        (kern,) = compile_calls(lambda: attention_hopper.launch(q, k, v, c, 0.07, 4, *parts,
                                                                schedule=sched), HOPPER, 90)
        bn = "" if sched.block_n == 64 else f"_{sched.block_n}"
        pp = "_pingpong" * sched.pingpong + "_apart" * sched.apart
        print(json.dumps({"case": f"prefix_hopper_{sched.stages}_{sched.overlap}{bn}{pp}",
                          **kernel_report(kern), "ptx": kern.asm["ptx"]}))
    out, lse = torch.empty(n, h, 128).bfloat16(), torch.empty(n, h)
    (kern,) = compile_calls(lambda: merge_parts(*parts, 4, out, lse), HOPPER, 90)
    print(json.dumps({"case": "merge", **kernel_report(kern)}))
    for cache in ("fp8", "bf16"):
        inp = build_inputs("kimi-k3-tp8", [300], cache_dtype=cache, weight_format="fp8_row")
        # The plan made by hand: the entry point refuses CPU tensors off the interpreter.
        w = absorb_weights(inp.kv_proj_weight, inp.kv_proj_scale, num_heads=h, nope=128)
        plan = AbsorbedPlan(q, inp.k_buffer, inp.k_scale, inp.kv_indices, 300, w, 0.07, 2,
                            torch.empty(n, h, 576).bfloat16(), torch.empty(2, n, h, 512),
                            torch.empty(2, n, h), torch.empty(n, h, 512).bfloat16(),
                            torch.empty(n, h, 128).bfloat16(), torch.empty(n, h))
        (kern, merge) = compile_calls(plan.attend, HOPPER, 90)
        print(json.dumps({"case": f"latent_{cache}", **kernel_report(kern)}))
        plan.kernel = "hopper"  # the Gluon kernel for sm_90, same plan
        (kern, merge) = compile_calls(plan.attend, HOPPER, 90)
        print(json.dumps({"case": f"latent_hopper_{cache}", **kernel_report(kern)}))
        # Each side alone (lab.diagnostics.absorbed_bounds's launches).
        for side in ("dots", "gather", "unwidened")[:3 if cache == "fp8" else 2]:
            (kern,) = compile_calls(lambda: absorbed_hopper.launch(
                plan.q_absorbed, plan.k_buffer, plan.k_scale if cache == "fp8" else None,
                plan.block_ids, plan.part_o, plan.part_lse, 300, 2, 0.1, parts=side), HOPPER, 90)
            print(json.dumps({"case": f"latent_hopper_{cache}_{side}", **kernel_report(kern)}))
""")


@pytest.fixture(scope="module")
def reports():
    pytest.importorskip("triton.backends.nvidia.compiler")
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return {r["case"]: r for r in (json.loads(x) for x in out.stdout.splitlines()
                                    if x.startswith("{"))}


def test_every_kernel_compiles_within_shared_memory(reports):
    assert set(reports) == {"prefix_torch.bfloat16", "prefix_torch.float8_e4m3fn", "merge",
                            "prefix_tma", "prefix_hopper", "prefix_hopper_3_False",
                            "prefix_hopper_4_False", "prefix_hopper_4_True",
                            "prefix_hopper_2_False_128", "prefix_hopper_2_True_128",
                            "prefix_hopper_3_True_pingpong", "prefix_hopper_3_True_apart",
                            "prefix_hopper_2_True_128_pingpong_apart",
                            "latent_fp8", "latent_bf16", "latent_hopper_fp8",
                            "latent_hopper_bf16", *(f"latent_hopper_{c}_{side}"
                                                    for c in ("fp8", "bf16")
                                                    for side in ("dots", "gather")),
                            "latent_hopper_fp8_unwidened"}
    for case, r in reports.items():
        assert 0 <= r["shared_bytes"] <= HOPPER_SMEM, (case, r)


def test_attention_dots_are_wgmma(reports):
    for case in ("prefix_torch.bfloat16", "prefix_torch.float8_e4m3fn", "prefix_tma",
                 "latent_fp8", "latent_bf16"):
        assert reports[case]["wgmma"] > 0 and reports[case]["mma_sync"] == 0, reports[case]


HOPPER_WGMMA = 9 * 4 + 2 * 4


def test_hopper_absorbed_kernel_fits_its_partitions(reports):
    # Three partitions of four warps (left and right warpgroups, the loader); a key tile's
    # wgmma: the scores' 9 chunks of K = 64 at N = 64 and each warpgroup's P V at N = 256,
    # 4 bf16 instructions of K = 16 each (HOPPER_WGMMA); no spills at the partitions'
    # register counts (absorbed_hopper.WORKER_REGS); the query tile, two key tiles and P
    # within the shared memory.
    for cache in ("fp8", "bf16"):
        r = reports[f"latent_hopper_{cache}"]
        assert r["kernel"] == "absorbed_hopper_kernel", r
        assert r["num_warps"] == 12 and r["spill_bytes"] == 0, r
        assert r["wgmma"] == HOPPER_WGMMA and r["mma_sync"] == 0, r
        assert 9 * 8192 + 2 * 9 * 8192 + 8192 <= r["shared_bytes"] <= HOPPER_SMEM, r


def test_hopper_absorbed_kernel_sides_alone(reports):
    # The diagnostic's launches: the warpgroups' dots with the loader's stand-in (every
    # wgmma of the kernel), the loader's gather with the warpgroups' stand-ins (none), and
    # (fp8) the whole kernel with its tiles unwidened (every wgmma); no spills at the same
    # register counts.
    unwidened = reports["latent_hopper_fp8_unwidened"]
    for cache in ("fp8", "bf16"):
        dots, gather = (reports[f"latent_hopper_{cache}_{side}"] for side in ("dots", "gather"))
        assert dots["wgmma"] == HOPPER_WGMMA and gather["wgmma"] == 0, (dots, gather)
        assert unwidened["wgmma"] == HOPPER_WGMMA, unwidened
        for r in (dots, gather, unwidened):
            assert r["num_warps"] == 12 and r["spill_bytes"] == 0, r
            assert r["shared_bytes"] <= HOPPER_SMEM, r


def test_hopper_expanded_kernel_fits_its_partitions(reports):
    # Two consumer warpgroups and a loader warp (launched as 12 warps); a key tile's wgmma
    # in each consumer: the scores' K = 128 + 64 and P V's K = 64, 16 bf16 instructions of
    # K = 16 each, in the loop alone without the overlap; no spills; the query tile and
    # three key tiles within the shared memory.
    r = reports["prefix_hopper_3_False"]
    assert r["kernel"] == "prefix_attention_hopper_kernel", r
    assert r["num_warps"] == 12 and r["spill_bytes"] == 0, r
    assert r["wgmma"] == 2 * (192 + 64) // 16 and r["mma_sync"] == 0, r
    assert 128 * 192 * 2 + 3 * 64 * 320 * 2 <= r["shared_bytes"] <= HOPPER_SMEM, r
    assert reports["prefix_tma"]["spill_bytes"] == 0, reports["prefix_tma"]


def test_hopper_expanded_kernel_schedules(reports):
    # Four stages: one key tile more in shared memory, the same dots. The overlapped
    # consumer: its first tile's scores and last tile's P V peeled out of the loop (twice
    # the wgmma in the code), and in the loop a wait that leaves one group (P V) in flight
    # while the softmax runs, once a consumer; no spills at the same registers.
    from mla_kernels.context.attention_hopper import DEFAULT_SCHEDULE

    base = reports["prefix_hopper_3_False"]
    default = (DEFAULT_SCHEDULE.stages, DEFAULT_SCHEDULE.overlap)
    for stages, overlap in ((4, False), (4, True), default):
        r = reports["prefix_hopper" if (stages, overlap) == default
                    else f"prefix_hopper_{stages}_{overlap}"]
        assert r["num_warps"] == 12 and r["spill_bytes"] == 0, r["spill_bytes"]
        assert (r["shared_bytes"] - base["shared_bytes"] == (stages - 3) * 64 * 320 * 2
                and r["shared_bytes"] <= HOPPER_SMEM), r["shared_bytes"]
        assert r["wgmma"] == base["wgmma"] * (2 if overlap else 1), r["wgmma"]
        assert r["ptx"].count("wgmma.wait_group.sync.aligned 1;") == (2 if overlap else 0)


def test_hopper_expanded_kernel_tiles_of_128_keys(reports):
    # Tiles of 128 keys: two stages of 80 KB beside the query tile; every wgmma 128 wide
    # (the scores' too), P V's K = 128 (8 instructions); the worker consumer's registers
    # raised so that neither schedule spills.
    for overlap in (False, True):
        r = reports[f"prefix_hopper_2_{overlap}_128"]
        assert r["num_warps"] == 12 and r["spill_bytes"] == 0, r["spill_bytes"]
        assert 128 * 192 * 2 + 2 * 128 * 320 * 2 <= r["shared_bytes"] <= HOPPER_SMEM, r
        assert r["wgmma"] == 2 * (192 + 128) // 16 * (2 if overlap else 1), r["wgmma"]
        assert r["ptx"].count("m64n128k16") == r["wgmma"], "every wgmma 128 wide"


def test_hopper_expanded_kernel_consumers_in_turn(reports):
    # Pingpong: each consumer waits for its turn before a tile's dots and passes it after,
    # at the first tile and in the loop: two waits and two arrivals more a consumer than the
    # default, the same dots and registers, no spills; the two turn barriers in shared
    # memory.
    base, pp = reports["prefix_hopper"], reports["prefix_hopper_3_True_pingpong"]

    def count(r, what):
        return r["ptx"].count(what)

    assert pp["spill_bytes"] == 0 and pp["num_warps"] == 12, pp["spill_bytes"]
    assert pp["wgmma"] == base["wgmma"], (pp["wgmma"], base["wgmma"])
    assert 16 <= pp["shared_bytes"] - base["shared_bytes"] <= 64, pp["shared_bytes"]
    arrive = "mbarrier.arrive.shared::cta.b64"
    assert count(pp, arrive) == count(base, arrive) + 4, (count(pp, arrive), count(base, arrive))
    assert count(pp, "try_wait") == count(base, "try_wait") + 4


def test_hopper_expanded_kernel_k_and_v_freed_apart(reports):
    # K and V freed apart: each stage's V lands and is freed on barriers of its own, so
    # more waits and arrivals, one more expected byte count (V's apart from K's); the same
    # dots, no spills, the V barriers within the shared memory.
    arrive = "mbarrier.arrive.shared::cta.b64"
    for case, base in (("prefix_hopper_3_True_apart", "prefix_hopper"),
                       ("prefix_hopper_2_True_128_pingpong_apart", "prefix_hopper_2_True_128")):
        r, b = reports[case], reports[base]
        assert r["spill_bytes"] == 0 and r["num_warps"] == 12, (case, r["spill_bytes"])
        assert r["wgmma"] == b["wgmma"], (case, r["wgmma"], b["wgmma"])
        assert 0 < r["shared_bytes"] - b["shared_bytes"] <= 128, (case, r["shared_bytes"])
        assert r["shared_bytes"] <= HOPPER_SMEM, case
        assert r["ptx"].count(arrive) > b["ptx"].count(arrive), case
        assert r["ptx"].count("expect_tx") == b["ptx"].count("expect_tx") + 1, case
