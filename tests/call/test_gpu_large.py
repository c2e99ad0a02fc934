"""GPU only: a cache of more than 2^31 elements, with block ids whose offsets overflow 32 bits,
for every design the GPU runs; and debug mode stopping an out-of-range block id."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import mla_kernels as mk
from mla_kernels.core.devices import device_spec
from mla_kernels.core.problem import check_arguments
from mla_kernels.designs import DESIGNS
from mla_kernels.lab.checks import check_outputs
from mla_kernels.lab.inputs import random_weight


def _big_cache_inputs(seed, cache="fp8"):
    inp = mk.build_inputs("kimi-k3-tp8", [300, 77], block_size=16, cache_dtype=cache,
                          weight_format="fp8_row", device="cuda", seed=seed)
    width = inp.k_buffer.shape[2]
    num_blocks = (2**31) // (16 * width) + 4096  # about 2.4e9 elements, 2.4 GB in fp8
    big = torch.empty(num_blocks, 16, width, dtype=inp.k_buffer.dtype, device="cuda")
    used = inp.kv_indices[: int(inp.kv_indptr[-1])].long()
    # Move every used block past the 2^31-element mark.
    new_ids = num_blocks - 1 - torch.arange(used.numel(), device="cuda")
    assert int(new_ids.min()) * 16 * width > 2**31
    big[new_ids] = inp.k_buffer[used]
    inp.kv_indices[: used.numel()] = new_ids.to(torch.int32)
    inp.k_buffer = big
    assert big.numel() > 2**31
    return inp


@pytest.fixture(scope="module", params=["fp8", "bf16"])
def big_inputs(request):
    # One cache at a time (a bf16 one takes 4.8 GB): pytest groups the tests by it.
    return _big_cache_inputs(12345, request.param)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp8_row", "fp8_block", "bf16", "mxfp4"])
@pytest.mark.parametrize("variant", list(DESIGNS))
def test_offsets_past_2_31(variant, fmt, big_inputs):
    inp = big_inputs
    shape = inp.shape
    w, ws = random_weight(torch.Generator().manual_seed(7), shape.weight_rows, shape.kv_c_dim,
                          fmt)
    inp.kv_proj_weight, inp.kv_proj_scale = w.cuda(), None if ws is None else ws.cuda()
    inp.weight_format = fmt
    if not DESIGNS[variant].runs(check_arguments(*inp.args()), device_spec(inp.k_buffer.device)):
        pytest.skip(f"{variant} does not run {fmt} here")
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant=variant)
    res = check_outputs(inp)
    assert res["correct"], res


@pytest.mark.gpu
@pytest.mark.smoke
@pytest.mark.parametrize("variant", ["chunked", "tiled", "hopper_ws"])
def test_debug_mode_stops_an_out_of_range_block_id(variant):
    # A device-side assert ends the CUDA context: run it in a child process.
    code = textwrap.dedent(f"""
        import torch, mla_kernels as mk
        from mla_kernels.designs import DESIGNS
        from mla_kernels.core.devices import device_spec
        from mla_kernels.core.problem import check_arguments
        inp = mk.build_inputs("kimi-k3-tp8", [300, 77], block_size=16, device="cuda")
        if not DESIGNS["{variant}"].runs(check_arguments(*inp.args()), device_spec(inp.k_buffer.device)):
            print("SKIP"); raise SystemExit(0)
        inp.kv_indices[3] = 10**7
        mk.gather_kv_b_proj(*inp.args(), variant="{variant}", debug=True)
        torch.cuda.synchronize()
        print("NO ASSERT")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, TRITON_INTERPRET="0"))
    if "SKIP" in out.stdout:
        pytest.skip(f"{variant} does not run here")
    assert out.returncode != 0 and "NO ASSERT" not in out.stdout, out.stdout + out.stderr[-2000:]
    assert "block id out of range" in out.stderr or "device-side assert" in out.stderr, (
        out.stderr[-2000:])
