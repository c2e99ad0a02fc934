"""The host's draws of an input set, kept for a later set of the same arguments (the matrix's
FP8-output points and their bf16-output twins): the same values, drawn once (no GPU)."""

import pytest
import torch

from mla_kernels.lab import bench, inputs, matrix
from mla_kernels.lab.inputs import HostDraws, build_inputs


@pytest.fixture
def meta_device(monkeypatch):
    # The cache is for GPU sets (a CPU set's tensors would share the kept ones): the meta
    # device stands in for a GPU here.
    monkeypatch.setitem(inputs._BUILD_RULES, "device", lambda name, v: torch.device(v))
    return "meta"


def test_a_kept_draw_is_the_draw_itself_and_serves_the_fp8_output_twin(meta_device):
    draws = HostDraws(2**30)
    args = dict(spare_indices=0, spare_rows=0, spare_blocks=0, seed=3)
    build_inputs("kimi-k3-tp8", [300], device=meta_device, draws=draws, **args)
    fp8 = build_inputs("kimi-k3-tp8", [300], device=meta_device, draws=draws,
                       out_dtype=torch.float8_e4m3fn, **args)
    assert draws.hits == 1 and fp8.k_prefix.dtype == torch.float8_e4m3fn
    (kept,) = draws._kept.values()
    cpu = build_inputs("kimi-k3-tp8", [300], device="cpu", out_dtype=torch.float8_e4m3fn,
                       **args)
    fresh = (cpu.kv_indptr, cpu.kv_indices, cpu.kv_prefix_sum_context_lens, cpu.k_buffer,
             cpu.k_scale, cpu.kv_proj_weight, cpu.kv_proj_scale)
    for a, b in zip(kept, fresh, strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    # Any other argument is another draw.
    build_inputs("kimi-k3-tp8", [300], device=meta_device, draws=draws,
                 **{**args, "seed": 4})
    build_inputs("kimi-k3-tp8", [300], device=meta_device, draws=draws,
                 weight_format="fp8_block", **args)
    assert draws.hits == 1 and len(draws._kept) == 3
    # A CPU set never shares them.
    build_inputs("kimi-k3-tp8", [300], device="cpu", draws=draws, **args)
    assert draws.hits == 1


def test_draws_past_the_budget_are_not_kept(meta_device):
    draws = HostDraws(1)
    for _ in range(2):
        build_inputs("kimi-k3-tp8", [64], device=meta_device, draws=draws)
    assert draws.hits == 0 and draws.bytes == 0


def test_every_fp8_output_point_of_the_matrix_finds_its_twin_s_draws(meta_device, monkeypatch):
    # The matrix's order and budget (scripts/perf_matrix.py's): each point builds its
    # base set and its rotation's as _time_point does; an FP8-output point draws nothing.
    drawn = []
    real = inputs._draw

    def shaped(gen, shp, contexts, block_size, *a):  # the real sizes, no values
        out = real(gen, shp, [1], 1, *a)
        blocks = -(-sum(contexts) // block_size)
        # Its bytes as counted (numel), one row in memory.
        cache = out[3][:1, :1].expand(blocks, block_size, shp.latent_dim)
        drawn.append(contexts)
        return (*out[:3], cache, *out[4:])
    monkeypatch.setattr(inputs, "_draw", shaped)
    draws = HostDraws(bench.MATRIX_DRAW_BYTES)
    for name, pt in matrix.points().items():
        before = len(drawn)
        for seed in range(bench.rotation_sets(pt)):
            build_inputs(pt.shape, pt.contexts, block_size=pt.block_size,
                         cache_dtype=pt.cache_dtype, weight_format=pt.weight_format,
                         device=meta_device, seed=seed, spare_indices=0, spare_rows=0,
                         spare_blocks=0, out_dtype=pt.out_torch_dtype, draws=draws,
                         **bench.WEIGHT_DRAWS[pt.weight_draw])
        if name.endswith(matrix.FP8_OUT_SUFFIX):  # only the sets its twin did not rotate
            twin = matrix.points()[name.removesuffix(matrix.FP8_OUT_SUFFIX)]
            extra = max(0, bench.rotation_sets(pt) - bench.rotation_sets(twin))
            assert len(drawn) - before == extra, name
    fp8 = [p for n, p in matrix.points().items() if n.endswith(matrix.FP8_OUT_SUFFIX)]
    assert len(fp8) == 24 and draws.hits >= len(fp8)
