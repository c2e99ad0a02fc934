"""The call where serving engines make it: cached plans, several threads, torch.compile
through the custom op, CUDA-graph capture, a tensor's own device."""

import threading

import pytest
import torch

import mla_kernels as mk
from mla_kernels import api
from mla_kernels.checks import check_outputs
from mla_kernels.designs import base
from mla_kernels.shapes import MLAShape

SMALL = MLAShape("test-2h", num_heads=2)


def test_a_repeated_call_is_checked_once(monkeypatch, device, seed):
    inp = mk.build_inputs(SMALL, [40, 7], block_size=16, device=device, seed=seed)
    api.clear_plans()
    checked = []
    real = api.check_arguments
    monkeypatch.setattr(api, "check_arguments", lambda *a: checked.append(1) or real(*a))
    for _ in range(3):
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), variant="tiled", validate=False)
        assert check_outputs(inp)["correct"]
    assert checked == [1]
    # Other outputs of the same signature: the same plan, the new pointers.
    inp.k_prefix = torch.full_like(inp.k_prefix, float("nan"))
    inp.v_prefix = torch.full_like(inp.v_prefix, float("nan"))
    mk.gather_kv_b_proj(*inp.args(), variant="tiled", validate=False)
    assert checked == [1] and check_outputs(inp)["correct"]


def test_calls_from_several_threads(device, seed):
    api.clear_plans()
    inputs = [mk.build_inputs(SMALL, [9 + 5 * i, 3], block_size=16, device=device,
                              seed=seed + i) for i in range(4)]
    errors = []

    def work(inp):
        try:
            for _ in range(3):
                inp.poison_outputs()
                mk.gather_kv_b_proj(*inp.args(), variant="chunked")
                assert check_outputs(inp)["correct"]
        except Exception as e:  # reported below, with the thread's input
            errors.append((inp.contexts, e))

    threads = [threading.Thread(target=work, args=(i,)) for i in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_torch_compile_fullgraph_traces_the_custom_op(device, seed):
    from mla_kernels import ops  # noqa: F401  registers torch.ops.mla_kernels

    inp = mk.build_inputs(SMALL, [33, 0, 5], block_size=16, device=device, seed=seed)
    t = inp.total_tokens

    def layer(k_buffer, k_scale, indptr, indices, cs, w, ws, k_out, v_out):
        torch.ops.mla_kernels.gather_kv_b_proj(k_buffer, k_scale, indptr, indices, cs, w, ws,
                                               k_out, v_out, "chunked", None)
        return k_out[:t].float().sum(dim=-1) + v_out[:t].float().sum(dim=-1)

    inp.poison_outputs()
    eager = layer(*inp.args())
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    inp.poison_outputs()
    got = compiled(*inp.args())
    assert check_outputs(inp)["correct"]
    assert torch.equal(got, eager)


@pytest.mark.gpu
def test_cuda_graph_capture_after_warm_up(seed):
    inp = mk.build_inputs(SMALL, [300, 44], block_size=16, device="cuda", seed=seed)
    for variant in ("tiled", "auto"):
        mk.gather_kv_b_proj(*inp.args(), variant=variant)  # warm up: compile, cache the plan
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            mk.gather_kv_b_proj(*inp.args(), variant=variant)
        inp.poison_outputs()
        graph.replay()
        torch.cuda.synchronize()
        assert check_outputs(inp)["correct"], variant


@pytest.mark.gpu
def test_fast_launch_matches_triton_s_own_and_follows_alignment(seed):
    if not base.FAST_LAUNCH:
        pytest.skip("this triton takes Triton's own launch path")
    inp = mk.build_inputs("kimi-k3-tp8", [700, 1], block_size=1, device="cuda", seed=seed)
    api.clear_plans()
    outs = []
    for _ in range(3):  # Triton's path, then the cached kernel twice
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), variant="tiled")
        outs.append((inp.k_prefix.clone(), inp.v_prefix.clone()))
    t = inp.total_tokens
    for k, v in outs[1:]:
        assert torch.equal(k[:t], outs[0][0][:t]) and torch.equal(v[:t], outs[0][1][:t])
    # Outputs 8 bytes off a 16-byte boundary: another specialisation, compiled and correct.
    store = torch.empty(inp.k_prefix.numel() * 2 + 8, dtype=torch.uint8, device="cuda")
    inp.k_prefix = store[8:].view(torch.bfloat16).view(inp.k_prefix.shape)
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="tiled")
    assert check_outputs(inp)["correct"]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_the_second_gpu(seed):
    inp = mk.build_inputs("kimi-k3-tp8", [500, 3], block_size=16, device="cuda:1", seed=seed)
    with torch.cuda.device(0):
        for variant in ("chunked", "tiled", "auto"):
            for _ in range(2):  # checked, then cached
                inp.poison_outputs()
                mk.gather_kv_b_proj(*inp.args(), variant=variant)
                torch.cuda.synchronize(1)
                assert check_outputs(inp)["correct"], variant
