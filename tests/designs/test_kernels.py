"""Every design x weight format x cache dtype against the torch reference.

Runs under the Triton interpreter on the CPU (CI) and compiled on a GPU
(TRITON_INTERPRET=0). Inputs are fresh random draws; outputs are poisoned with NaN.
"""

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mla_kernels as mk
from mla_kernels.core.formats import WEIGHT_FORMATS
from mla_kernels.core.shapes import MLAShape
from mla_kernels.lab.checks import TOLERANCES, check_outputs, expected

# Real kv_c / pe / nope / v dims with few heads keep the interpreter fast.
SMALL = MLAShape("test-3h", num_heads=3)
ONE_HEAD = MLAShape("test-1h", num_heads=1)
CACHES = ("bf16", "fp8")
VARIANTS = ("serial", "chunked")
ALL_VARIANTS = ("serial", "chunked", "tiled", "tiled_tma")

# The tests of Hopper-only kernels (hopper_ws, the overlapped launch) run on an sm_90 GPU.
hopper = pytest.mark.skipif(not (torch.cuda.is_available() and not torch.version.hip
                                 and torch.cuda.get_device_capability()[0] == 9),
                            reason="needs an sm_90 GPU")


def run_and_check(inp, variant, **kw):
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant=variant, **kw)
    res = check_outputs(inp)
    assert res["spare_rows_untouched"], "a row past cs[-1] was written"
    assert res["correct"], f"max_rel_err {res['max_rel_err']:.3g} > {TOLERANCES[inp.weight_format]}"
    return res


@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
# The serial design under the interpreter takes seconds a case; chunked runs its jit body
# (bit-identical, test_serial_chunked_bit_identical) in the fast tier.
@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.slow) if v == "serial" else v
                                     for v in ALL_VARIANTS])
def test_matches_reference(variant, fmt, cache, device, seed):
    # Ragged: a length-0 sequence, lengths not a multiple of the chunk or the block.
    inp = mk.build_inputs(SMALL, [37, 0, 70], block_size=16, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed)
    run_and_check(inp, variant)


@pytest.mark.parametrize("block_size", [1, 64])
@pytest.mark.parametrize(("fmt", "cache"), [("fp8_row", "fp8"), ("bf16", "bf16"),
                                            ("fp8_block", "bf16")])
def test_block_sizes(block_size, fmt, cache, device, seed):
    inp = mk.build_inputs(SMALL, [5, 65, 0, 33], block_size=block_size, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed,
                          spare_indices=40)
    run_and_check(inp, "chunked")
    run_and_check(inp, "tiled")


@pytest.mark.parametrize("fmt", ["fp8_row", "mxfp4"])
def test_auto_and_hint(fmt, device, seed):
    inp = mk.build_inputs(SMALL, [70, 9], block_size=16, cache_dtype="fp8", weight_format=fmt,
                          device=device, seed=seed)
    run_and_check(inp, "auto")
    run_and_check(inp, "chunked", max_context_len=70)


@pytest.mark.parametrize(("shape", "contexts", "block_size", "cache", "fmt"), [
    ("kimi-k3-tp8", [45], 1, "fp8", "fp8_row"),
    (ONE_HEAD, [31, 0, 17, 64], 16, "bf16", "bf16"),
    (SMALL, [100, 1], 64, "fp8", "fp8_block"),
    (SMALL, [33, 32], 16, "bf16", "mxfp4"),
    ("deepseek-v3-tp8", [20, 3], 16, "fp8", "bf16"),
])
def test_serial_chunked_bit_identical(shape, contexts, block_size, cache, fmt, device, seed):
    inp = mk.build_inputs(shape, contexts, block_size=block_size, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed)
    outs = []
    for variant in VARIANTS:
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), variant=variant)
        outs.append((inp.k_prefix.clone(), inp.v_prefix.clone()))
    t = inp.total_tokens
    for a, b in zip(outs[0], outs[1], strict=True):
        assert not torch.isnan(a[:t]).any()
        assert torch.equal(a[:t], b[:t]), f"max |a-b| = {(a[:t].float() - b[:t].float()).abs().max()}"
        assert torch.isnan(a[t:]).all() and torch.isnan(b[t:]).all()


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
def test_other_output_dtypes(out_dtype, device, seed):
    inp = mk.build_inputs(SMALL, [19, 40], block_size=16, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, out_dtype=out_dtype,
                          weight_scale_range=(1e-3, 1e-1), seed=seed)
    run_and_check(inp, "chunked")


# 60 examples under the interpreter (about a minute); on a GPU each new shape compiles, so a
# device run may ask for fewer (MLA_PROPERTY_EXAMPLES).
@pytest.mark.slow
@settings(max_examples=int(os.environ.get("MLA_PROPERTY_EXAMPLES", 60)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(
    heads=st.integers(1, 3),
    contexts=st.lists(st.integers(0, 64), min_size=1, max_size=3),
    block_size=st.sampled_from([1, 16, 64]),
    cache=st.sampled_from(CACHES),
    fmt=st.sampled_from(WEIGHT_FORMATS),
    variant=st.sampled_from(ALL_VARIANTS),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_any_shape(heads, contexts, block_size, cache, fmt, variant, seed):
    from conftest import DEVICE

    inp = mk.build_inputs(MLAShape(f"h{heads}", num_heads=heads), contexts,
                          block_size=block_size, cache_dtype=cache, weight_format=fmt,
                          device=DEVICE, seed=seed)
    run_and_check(inp, variant)


# ------------------------------------------------ the tolerance catches real mistakes
def _kernel_error(inp, mutate):
    """max_rel_err of the kernel run on mutated inputs, against the unmutated reference."""
    ref = expected(inp)
    mutate(inp)
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="chunked")
    return check_outputs(inp, ref)


def _scale_one_row(inp):
    inp.kv_proj_scale[5] *= 2


def _scale_one_block(inp):
    # The block that dominates its rows, so the mistake is visible in every draw.
    inp.kv_proj_scale[1, inp.kv_proj_scale[1].argmax()] *= 2


def _scale_k(inp):
    inp.k_scale *= 1.25


def _swap_nibbles(inp):
    w = inp.kv_proj_weight
    inp.kv_proj_weight = ((w & 0xF) << 4) | (w >> 4)


def _bump_e8m0(inp):
    inp.kv_proj_scale[7, inp.kv_proj_scale[7].argmax()] += 1


@pytest.mark.parametrize(("fmt", "mutate"), [
    ("fp8_row", _scale_one_row), ("fp8_block", _scale_one_block), ("fp8_row", _scale_k),
    ("mxfp4", _swap_nibbles), ("mxfp4", _bump_e8m0),
])
def test_wrong_scale_or_nibble_fails_tolerance(fmt, mutate, device, seed):
    inp = mk.build_inputs(SMALL, [40], block_size=16, cache_dtype="fp8", weight_format=fmt,
                          device=device, seed=seed)
    assert check_outputs(inp, None)["correct"] is False  # poisoned outputs never pass
    res = _kernel_error(inp, mutate)
    assert not res["correct"], f"a deliberate mistake passed: {res}"
    assert res["max_rel_err"] > 10 * TOLERANCES[fmt]


@pytest.mark.parametrize("fmt", ["fp8_row", "mxfp4"])
def test_tiled_split_parts(fmt, device, seed):
    inp = mk.build_inputs(SMALL, [50, 0, 90], block_size=16, cache_dtype="fp8",
                          weight_format=fmt, device=device, seed=seed)
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="tiled",
                        config={"block_m": 64, "split": True})
    res = check_outputs(inp)
    assert res["correct"], res


@pytest.mark.parametrize("variant", ["tiled", "tiled_tma"])
def test_tiled_full_and_partial_tiles(variant, device, seed):
    # 64-row tiles: two full tiles (the TMA store path) and a partial one (masked stores).
    inp = mk.build_inputs(SMALL, [100, 0, 60], block_size=16, cache_dtype="fp8",
                          weight_format="fp8_row", device=device, seed=seed)
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant=variant, config={"block_m": 64})
    res = check_outputs(inp)
    assert res["correct"], res
