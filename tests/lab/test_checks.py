"""The error measures: per column and per row against at least a fraction of the dot's
magnitude, and each column's gain; the mistakes they must catch."""

import pytest
import torch

import mla_kernels as mk
from mla_kernels.core.shapes import MLAShape
from mla_kernels.lab.checks import (
    MAGNITUDE_FLOOR,
    TOLERANCES,
    check_outputs,
    error_measures,
    expected,
    max_rel_err,
)


def test_cancelled_single_value_is_judged_against_magnitude():
    ref = torch.tensor([[1e-3, 1.0]])
    out = ref + torch.tensor([[1e-3, 0.0]])  # 100% off a value that cancelled to 1e-3
    mag = torch.tensor([[1.0, 1.0]])
    assert max_rel_err(out, ref) > 0.9
    assert abs(max_rel_err(out, ref, mag) - 1e-3 / MAGNITUDE_FLOOR) < 1e-9


def test_wrong_column_scale_still_fails():
    ref = torch.randn(50, 4)
    out = ref.clone()
    out[:, 2] *= 2
    mag = ref.abs() * 20  # |x| @ |w| is ~20x |x @ w| at K = 512
    assert max_rel_err(out, ref, mag) > 0.3


def test_nan_and_empty():
    assert max_rel_err(torch.empty(0, 3), torch.empty(0, 3)) == 0.0
    x = torch.ones(2, 2)
    x[1, 1] = float("nan")
    assert max_rel_err(x, torch.ones(2, 2)) != max_rel_err(x, torch.ones(2, 2))


# ------------------------------------------------ the mistakes a diluted measure missed
def _magnitude_like_k512(ref: torch.Tensor) -> torch.Tensor:
    # |latent| @ |W| of random data at K = 512: its column norm / 8 is ~1.8 x ||ref||, so
    # the floor, not ||ref||, is the column measure's denominator (the dilution).
    return ref.abs() * 14.4


def test_one_wrong_token_among_262144_fails(seed):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(262144, 48, generator=g)
    out = ref.clone()
    out[123457] = ref[99]  # one token read from another block
    m = error_measures(out, ref, _magnitude_like_k512(ref))
    assert m["column"] < 1e-2 < m["row"]  # the column norm dilutes it; the row does not
    assert max_rel_err(out, ref, _magnitude_like_k512(ref)) > 0.5


def test_a_systematic_1_5_percent_error_fails_the_fp8_tolerance(seed):
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(4096, 48, generator=g)
    out = ref * 1.015
    m = error_measures(out, ref, _magnitude_like_k512(ref))
    assert m["column"] < TOLERANCES["fp8_row"] < m["gain"]
    assert abs(m["gain"] - 0.015) < 1e-6  # float32 rounding of out


def test_rounding_noise_passes(seed):
    # bf16 output rounding (2^-9 relative) stays far under every tolerance, by every measure.
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(4096, 48, generator=g, dtype=torch.float64)
    out = ref.bfloat16().double()
    m = error_measures(out, ref, _magnitude_like_k512(ref))
    assert max(m.values()) < min(TOLERANCES.values()) / 2


@pytest.mark.parametrize("mistake", ["one token", "k_scale 1.5%"])
def test_the_kernel_check_catches_small_mistakes(mistake, device, seed):
    inp = mk.build_inputs(MLAShape("t2", num_heads=2), [700, 333], block_size=1,
                          device=device, seed=seed)
    ref = expected(inp)
    if mistake == "one token":
        inp.kv_indices[500] = inp.kv_indices[501]  # token 500 reads token 501's row
    else:
        inp.k_scale *= 1.015
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="tiled")
    res = check_outputs(inp, ref)
    assert not res["correct"], res
