"""The error measure: per column, against at least a fraction of the dot's magnitude."""

import torch

from mla_kernels.checks import MAGNITUDE_FLOOR, max_rel_err


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
