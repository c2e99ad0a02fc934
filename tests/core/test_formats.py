"""Quantizers and their inverses: exact round trips and the formats' stated error."""

import pytest
import torch

from mla_kernels.core import formats as F
from mla_kernels.lab.inputs import random_weight


@pytest.fixture
def gen(seed):
    return torch.Generator().manual_seed(seed)


def quantizer_output(gen, fmt, n=256, k=512):
    """(codes, scale) as a quantizer emits them: random weights through the quantizer.

    For fp8 with float32 scales only such pairs round-trip: an arbitrary (codes, scale)
    pair whose group maximum is below the format's maximum is rescaled by re-quantizing.
    """
    w = torch.randn(n, k, generator=gen) * torch.exp(torch.randn(n, 1, generator=gen) * 3)
    return F.quantize_weight(w, fmt)


@pytest.mark.parametrize("fmt", ["fp8_row", "fp8_block"])
def test_fp8_round_trip_exact(fmt, gen):
    for _ in range(5):
        codes, scale = quantizer_output(gen, fmt)
        x = F.dequantize_weight(codes, scale, fmt)
        x2 = F.dequantize_weight(*F.quantize_weight(x, fmt), fmt)
        assert torch.equal(x, x2)


def test_mxfp4_round_trip_exact_on_random_codes_and_scales(gen):
    for _ in range(5):
        packed, scale = random_weight(gen, 64, 512, "mxfp4")
        x = F.dequantize_mxfp4(packed, scale)
        p2, s2 = F.quantize_mxfp4(x)
        assert torch.equal(F.dequantize_mxfp4(p2, s2), x)
        # Codes differ only where a group's largest value allowed a smaller exponent.
        same_exp = s2 == scale
        assert same_exp.any()
        codes, codes2 = F.unpack_e2m1(packed), F.unpack_e2m1(p2)
        grp = same_exp.repeat_interleave(F.MX_BLOCK, dim=1)
        nonzero = F.e2m1_to_float(codes) != 0
        assert torch.equal(codes[grp & nonzero], codes2[grp & nonzero])


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
@pytest.mark.parametrize("fmt", ["fp8_row", "fp8_block"])
def test_fp8_error_bound(fmt, dtype, gen):
    w = torch.randn(300, 200, generator=gen) * 5
    codes, scale = F.quantize_weight(w, fmt, fp8_dtype=dtype)
    assert codes.dtype == dtype
    err = (F.dequantize_weight(codes, scale, fmt) - w).abs()
    s = scale.reshape(-1, 1) if fmt == "fp8_row" else F.expand_blocks(scale, 300, 200)
    # Half an ulp of a 3-bit mantissa, or half the subnormal step near zero.
    bound = torch.maximum(w.abs() * 2.0**-4, s * F.FP8_MIN_STEP[dtype] / 2)
    assert bool((err <= bound * (1 + 1e-6)).all())


@pytest.mark.parametrize(("dtype", "fmax"), [(torch.float8_e4m3fn, 448.0),
                                             (torch.float8_e4m3fnuz, 240.0)])
def test_fp8_rounding_saturates(dtype, fmax):
    # torch's cast saturates to e4m3fn but gives NaN past e4m3fnuz's 240: the quantizers
    # clamp first (without the clamp the fnuz case fails).
    x = torch.tensor([fmax * 1.2, -1e9, fmax, 3.0])
    got = F.fp8_round(x, dtype).float()
    assert got.tolist() == [fmax, -fmax, fmax, 3.0]
    w = torch.tensor([[1.0, -2.0, 1e30]])
    codes, scale = F.quantize_fp8_per_row(w, dtype)
    assert not torch.isnan(codes.float()).any() and float(codes.float().abs().max()) == fmax


def test_mxfp4_error_bound_and_layout(gen):
    w = torch.randn(64, 256, generator=gen) * torch.exp(torch.randn(64, 1, generator=gen))
    packed, scale = F.quantize_mxfp4(w)
    assert packed.shape == (64, 128) and scale.shape == (64, 8) and packed.dtype == torch.uint8
    deq = F.dequantize_mxfp4(packed, scale)
    amax = w.reshape(64, 8, 32).abs().amax(-1).repeat_interleave(32, dim=1)
    # Spacing is at most 2^(exp+1) with amax in [2^(exp+2), 2^(exp+3)): |err| <= amax / 4.
    assert bool(((deq - w).abs() <= amax / 4).all())
    # Shared exponent: floor(log2(amax)) - 2.
    exp = torch.floor(torch.log2(w.reshape(64, 8, 32).abs().amax(-1))) - 2
    assert torch.equal(scale.long() - 127, exp.long())


def test_e2m1_rounding_ties_to_even_and_nibble_order():
    x = torch.tensor([[0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.25, -5.0, 6.0, 0.0,
                       0.1, 0.3, 1.1, 2.9] * 2])
    packed, scale = F.quantize_mxfp4(x)
    assert int(scale[0, 0]) == 127  # amax 7 -> exponent 0
    codes = F.unpack_e2m1(packed)[0, :16]
    got = F.e2m1_to_float(codes)
    want = torch.tensor([0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.0, -4.0, 6.0, 0.0,
                         0.0, 0.5, 1.0, 3.0])
    assert torch.equal(got, want)
    # Low nibble first: element 0 is packed[0] & 0xF, element 1 is packed[0] >> 4.
    assert int(packed[0, 0]) == int(codes[0]) | (int(codes[1]) << 4)


def test_e8m0_nan_and_torch_dtype_views():
    e = torch.tensor([[0, 127, 254, 255]], dtype=torch.uint8)
    v = F.e8m0_to_float(e)
    assert v[0, 1] == 1.0 and v[0, 2] == 2.0**127 and torch.isnan(v[0, 3])
    if hasattr(torch, "float8_e8m0fnu"):
        assert torch.equal(F.as_uint8(e.view(torch.float8_e8m0fnu)), e)
    if hasattr(torch, "float4_e2m1fn_x2"):
        p = torch.randint(0, 256, (4, 8), dtype=torch.uint8)
        assert torch.equal(F.unpack_e2m1(p.view(torch.float4_e2m1fn_x2)), F.unpack_e2m1(p))


def test_detect_weight_format_and_scale_kind(gen):
    kinds = {"bf16": "none", "fp8_row": "row", "fp8_block": "block", "mxfp4": "e8m0"}
    for fmt in F.WEIGHT_FORMATS:
        w, s = random_weight(gen, 256, 512, fmt)
        assert F.detect_weight_format(w, s) == fmt and F.scale_kind(w, s) == kinds[fmt]
    w = random_weight(gen, 256, 512, "bf16")[0]
    for scale, kind in ((torch.ones(256), "row"), (torch.ones(256, 1), "row"),
                        (torch.ones(2, 4), "block")):
        assert F.detect_weight_format(w, scale) == "bf16" and F.scale_kind(w, scale) == kind


def test_dequantize_a_scaled_bf16_weight(gen):
    w = random_weight(gen, 256, 512, "bf16")[0]
    row = torch.rand(256, generator=gen) + 0.5
    block = torch.rand(2, 4, generator=gen) + 0.5
    assert torch.equal(F.dequantize_weight(w, row, "bf16"), w.float() * row[:, None])
    want = w.float() * block.repeat_interleave(128, 0).repeat_interleave(128, 1)
    assert torch.equal(F.dequantize_weight(w, block.bfloat16(), "bf16"),
                       w.float() * block.bfloat16().float().repeat_interleave(128, 0)
                       .repeat_interleave(128, 1))
    assert torch.equal(F.dequantize_weight(w, block, "bf16"), want)
