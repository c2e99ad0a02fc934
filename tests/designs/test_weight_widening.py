"""The bf16 copy of an fp8 or MXFP4 weight that hopper_ws multiplies over a bf16 cache
(mla_kernels/designs/hopper_ws/widening.py), bit for bit. A portable Triton kernel: it runs
under the interpreter here and on the GPU in the GPU job."""

import pytest
import torch

from mla_kernels.core.formats import e2m1_to_float, unpack_e2m1
from mla_kernels.designs.hopper_ws.widening import widen_weight


@pytest.mark.parametrize("kv_c", [128, 384, 512])
def test_fp8_weight_widens_to_its_own_values(kv_c, device, seed):
    # Every e4m3 code but the NaNs (the contract's validation refuses them), on 100 rows:
    # not a multiple of the rows a program widens, so the last program's rows are masked.
    g = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 256, (100, kv_c), generator=g, dtype=torch.uint8)
    codes.view(-1)[:256] = torch.arange(256, dtype=torch.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0x7E
    w = codes.view(torch.float8_e4m3fn).to(device)
    out, factor = widen_weight(w, None, "fp8_row")
    assert factor is None and out.dtype == torch.bfloat16 and out.shape == (100, kv_c)
    want = w.cpu().to(torch.bfloat16)
    assert torch.equal(out.cpu().view(torch.int16), want.view(torch.int16)), f"seed {seed}"


def _mx_reference(packed: torch.Tensor, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """value / 2^F in float64, F = max(the row's largest code - 133, -126), magnitudes below
    2^-126 as zeros of their sign, as bf16 (exact: two significant bits); and 2^F."""
    values = e2m1_to_float(unpack_e2m1(packed)).double()
    f = (codes.double().amax(dim=1, keepdim=True) - 133).clamp(min=-126)
    v = values * torch.exp2(codes.double().repeat_interleave(32, dim=1) - 127 - f)
    v = torch.where(v.abs() < 2.0**-126, values * 0.0, v)
    return v.to(torch.bfloat16), torch.exp2(f).float()[:, 0]


@pytest.mark.parametrize("kv_c", [128, 512])
def test_mxfp4_weight_widens_exactly_with_a_power_of_two_per_row(kv_c, device, seed):
    # Rows 0-15: every e2m1 code (both zeros) at spans of 0-12 binades; rows 16-31: codes
    # over the whole e8m0 range (0 and 254 in one row: values below 2^-126 x the factor
    # become zeros); rows 32-35 codes below 7 only (the factor held at 2^-126); the rest
    # random bases and spans up to 40 binades. 90 rows: the last program masked.
    g = torch.Generator().manual_seed(seed)
    n = 90
    packed = torch.randint(0, 256, (n, kv_c // 2), generator=g, dtype=torch.uint8)
    packed[:16, :8] = torch.arange(256, dtype=torch.uint8)[:128].view(16, 8)
    base = torch.randint(20, 200, (n, 1), generator=g)
    codes = base + torch.randint(0, 41, (n, kv_c // 32), generator=g)
    codes[:16] = base[:16] + torch.randint(0, 13, (16, kv_c // 32), generator=g)
    codes[16:32] = torch.randint(0, 255, (16, kv_c // 32), generator=g)
    codes[16:32, 0], codes[16:32, 1] = 0, 254
    codes[32:36] = torch.randint(0, 7, (4, kv_c // 32), generator=g)
    codes = codes.clamp(0, 254).to(torch.uint8)
    out, factor = widen_weight(packed.to(device), codes.to(device), "mxfp4")
    want, want_factor = _mx_reference(packed, codes)
    assert torch.equal(factor.cpu(), want_factor), f"seed {seed}"
    assert torch.equal(out.cpu().view(torch.int16), want.view(torch.int16)), f"seed {seed}"
    # Where no value falls below bf16's normal range, the copy times the factor is the
    # dequantised weight itself.
    normal = slice(36, n)
    exact = e2m1_to_float(unpack_e2m1(packed)).double() \
        * torch.exp2(codes.double() - 127).repeat_interleave(32, dim=1)
    assert torch.equal(out.cpu()[normal].double() * factor.cpu()[normal, None].double(),
                       exact[normal]), f"seed {seed}"


@pytest.mark.skipif(not hasattr(torch, "float4_e2m1fn_x2"), reason="torch without fp4 dtypes")
def test_mxfp4_weight_as_torch_fp4_and_e8m0_dtypes(device, seed):
    g = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (20, 64), generator=g, dtype=torch.uint8)
    codes = torch.randint(100, 140, (20, 4), generator=g, dtype=torch.uint8)
    out, factor = widen_weight(packed.to(device).view(torch.float4_e2m1fn_x2),
                               codes.to(device).view(torch.float8_e8m0fnu), "mxfp4")
    want, want_factor = _mx_reference(packed, codes)
    assert torch.equal(out.cpu().view(torch.int16), want.view(torch.int16))
    assert torch.equal(factor.cpu(), want_factor)


# ------------------------------------------- MXFP4 over an fp8 cache, widened once a call
@pytest.mark.parametrize("kv_c", [128, 512])
def test_mxfp4_items_widen_by_route(kv_c, device, seed):
    # Four items of 128 rows: every row's codes within 12 binades (the e4m3 route), at the
    # full span in rows 0-15; the same but one row spanning 13 and one 24 (the split route);
    # codes over the whole e8m0 range (bf16, values below 2^-126 x 2^F zeros of their sign);
    # a narrow item again. Every e2m1 code, both zeros included, in each item's first rows.
    from mla_kernels.designs.hopper_ws.config import MX_SPLIT_SHIFT
    from mla_kernels.designs.hopper_ws.plan import mx_routes
    from mla_kernels.designs.hopper_ws.widening import widen_mx_items

    g = torch.Generator().manual_seed(seed)
    n, groups = 512, kv_c // 32
    packed = torch.randint(0, 256, (n, kv_c // 2), generator=g, dtype=torch.uint8)
    for item in range(4):
        packed[item * 128:item * 128 + 16, :8] = torch.arange(256, dtype=torch.uint8)[:128].view(16, 8)
    base = torch.randint(20, 200, (n, 1), generator=g)
    codes = base + torch.randint(0, 12, (n, groups), generator=g)
    codes[:16, 0], codes[:16, -1] = base[:16, 0], base[:16, 0] + 11
    codes[128 + 77, 0], codes[128 + 77, -1] = base[128 + 77, 0], base[128 + 77, 0] + 12
    codes[128 + 78, 0], codes[128 + 78, -1] = base[128 + 78, 0] + 23, base[128 + 78, 0]
    codes[128:144, :8] = torch.arange(8)[None, :].mul(-2).add(base[128:144] + 23)[:, :groups]
    codes[256:384] = torch.randint(0, 255, (128, groups), generator=g)
    codes[256:272, 0], codes[256:272, 1] = 0, 254
    codes = codes.clamp(0, 254).to(torch.uint8)
    out, info = widen_mx_items(packed.to(device), codes.to(device))
    out, info = out.cpu(), info.cpu()
    routes = mx_routes(codes)
    assert routes.tolist() == [0, 2, 1, 0], f"seed {seed}"  # e4m3, split, bf16, e4m3
    top = codes.to(torch.int32).amax(dim=1)
    shift = torch.where(routes == 2, MX_SPLIT_SHIFT.value, 0).repeat_interleave(128)
    assert torch.equal(info, ((top - 133 - shift) * 4 + routes.repeat_interleave(128))
                       .to(torch.int32)), f"seed {seed}"
    # Each value x 2^(133 - top): e2m1 x 2^d, d = its group's code - the row's largest + 6.
    values = e2m1_to_float(unpack_e2m1(packed)).double()
    d = codes.double().repeat_interleave(32, dim=1) - top.double()[:, None] + 6
    want = values * torch.exp2(d)
    for item in range(4):
        rows = slice(item * 128, item * 128 + 128)
        if routes[item] == 0:
            got = out[rows, :kv_c].view(torch.float8_e4m3fn)
            bits = want[rows].to(torch.float8_e4m3fn).view(torch.uint8)
            assert torch.equal(got.double(), want[rows]), (item, f"seed {seed}")
            assert torch.equal(got.view(torch.uint8), bits), (item, f"seed {seed}")  # -0 too
        elif routes[item] == 2:
            # Groups of d >= -5 in the first half, the others x 2^12 in the second; each
            # value exact, +0 where the other half holds it; the two together the value.
            low = d[rows] < -5
            assert low.any() and (d[rows] >= -17).all(), (item, f"seed {seed}")
            hi, lo = (out[rows, h * kv_c:(h + 1) * kv_c] for h in range(2))
            for got, part, held in ((hi, want[rows], ~low),
                                    (lo, want[rows] * 2.0**MX_SPLIT_SHIFT.value, low)):
                bits = part.to(torch.float8_e4m3fn).view(torch.uint8)
                assert torch.equal(got, torch.where(held, bits, 0)), (item, f"seed {seed}")
                assert torch.equal(got.view(torch.float8_e4m3fn).double()[held], part[held]), \
                    (item, f"seed {seed}")
            whole = (hi.view(torch.float8_e4m3fn).double()
                     + lo.view(torch.float8_e4m3fn).double() * 2.0**-MX_SPLIT_SHIFT.value)
            assert torch.equal(whole, want[rows]), (item, f"seed {seed}")
        else:
            flushed = torch.where(want[rows].abs() < 2.0**-126, values[rows] * 0.0, want[rows])
            got = out[rows].view(torch.bfloat16)
            assert torch.equal(got.view(torch.int16), flushed.to(torch.bfloat16).view(torch.int16)), \
                (item, f"seed {seed}")
