"""GPU only: a cache of more than 2^31 elements, with block ids whose offsets overflow 32 bits."""

import pytest
import torch

import mla_kernels as mk
from mla_kernels.checks import check_outputs


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["serial", "chunked"])
def test_offsets_past_2_31(variant, seed):
    inp = mk.build_inputs("kimi-k3-tp8", [300, 77], block_size=16, cache_dtype="fp8",
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
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant=variant)
    res = check_outputs(inp)
    assert res["correct"], res
