"""FP8 outputs where serving engines make the call: the custom op eagerly and compiled (the
same bytes as the direct call), and the plan cache (FP8 and bf16 outputs of one shape each
get their own plan; the scales are read on every call, never baked into a plan or graph)."""

import pytest
import torch
from test_bad_input import _op  # the op on the call's arguments

import mla_kernels as mk
from mla_kernels import api
from mla_kernels.core.reference import e4m3_steps, quantize_e4m3
from mla_kernels.core.shapes import MLAShape
from mla_kernels.lab.checks import check_outputs

FP8 = torch.float8_e4m3fn
SMALL = MLAShape("test-2h", num_heads=2)


def build(device, seed, out_dtype=FP8, contexts=(21, 0, 6)):
    return mk.build_inputs(SMALL, list(contexts), block_size=16, cache_dtype="fp8",
                           weight_format="fp8_row", device=device, seed=seed,
                           out_dtype=out_dtype)


def _bytes(inp):
    return inp.k_prefix.view(torch.uint8).clone(), inp.v_prefix.view(torch.uint8).clone()


def _layer(variant):
    def layer(k_buffer, k_scale, indptr, indices, cs, w, ws, k_out, v_out, k_out_scale,
              v_out_scale):
        _op(k_buffer, k_scale, indptr, indices, cs, w, ws, k_out, v_out,
            k_out_scale=k_out_scale, v_out_scale=v_out_scale, variant=variant)
        return k_out.float().nan_to_num().sum(dim=-1)
    return layer


BACKENDS = ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)]


def _compiled(variant, backend):
    if backend == "inductor":
        pytest.importorskip("torch._inductor")
    torch._dynamo.reset()
    return torch.compile(_layer(variant), fullgraph=True, backend=backend)


@pytest.mark.parametrize("variant", ["chunked", "tiled"])
def test_the_op_eagerly_stores_the_call_s_bytes(variant, device, seed):
    inp = build(device, seed)
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant=variant)
    assert check_outputs(inp)["correct"]
    want = _bytes(inp)
    for how in ("positional", "keyword"):
        inp.poison_outputs()
        if how == "positional":
            _op(*inp.args(), variant=variant)
        else:
            _layer(variant)(*inp.args())
        got = _bytes(inp)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), how


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compiled_op_stores_the_call_s_bytes(backend, device, seed):
    inp = build(device, seed)
    inp.poison_outputs()
    mk.gather_kv_b_proj(*inp.args(), variant="tiled")
    want = _bytes(inp)
    eager = _layer("tiled")(*inp.args())
    run = _compiled("tiled", backend)
    for _ in range(2):  # traced, then the cached graph
        inp.poison_outputs()
        got = run(*inp.args())
        k, v = _bytes(inp)
        assert torch.equal(k, want[0]) and torch.equal(v, want[1])  # spare rows still NaN
        assert torch.equal(got, eager)


# ------------------------------------------------------------------ the plan cache
@pytest.mark.parametrize("first", [FP8, torch.bfloat16], ids=["fp8 first", "bf16 first"])
def test_fp8_and_bf16_outputs_of_one_shape_get_their_own_plans(first, device, seed):
    other = torch.bfloat16 if first == FP8 else FP8
    # One seed: the same cache, weight and indices; only the outputs (and scales) differ.
    inputs = [build(device, seed, first), build(device, seed, other)]
    assert torch.equal(inputs[0].k_buffer.view(torch.uint8), inputs[1].k_buffer.view(torch.uint8))
    assert inputs[0].k_prefix.shape == inputs[1].k_prefix.shape
    api.clear_plans()
    for rnd in range(2):
        for inp in inputs:
            inp.poison_outputs()
            mk.gather_kv_b_proj(*inp.args(), variant="tiled")
            res = check_outputs(inp)
            assert res["correct"], (rnd, inp.k_prefix.dtype, res)
            assert ("fp8_exact_share" in res) == (inp.k_prefix.dtype == FP8)
        assert len(api.PLANS) == 2, rnd
    # The bf16 call's values, rounded by the FP8 rule, are (nearly) the FP8 call's.
    fp8, bf16 = inputs if first == FP8 else inputs[::-1]
    t = fp8.total_tokens
    steps = e4m3_steps(fp8.k_prefix[:t], quantize_e4m3(bf16.k_prefix[:t], fp8.k_out_scale))
    assert int(steps.max()) <= 1


def test_the_scales_are_read_on_every_call(monkeypatch, device, seed):
    inp = build(device, seed)
    api.clear_plans()
    checked = []
    real = api.check_arguments
    monkeypatch.setattr(api, "check_arguments", lambda *a: checked.append(1) or real(*a))
    seen = []
    # In place (one tensor, new values), then other tensors of the same signature. Scales
    # only grow: no value passes 448 x scale.
    changes = [lambda: None,
               lambda: (inp.k_out_scale.mul_(2.0), inp.v_out_scale.mul_(4.0)),
               lambda: setattr(inp, "k_out_scale", inp.k_out_scale * 8),
               lambda: setattr(inp, "v_out_scale", inp.v_out_scale * 3)]
    for change in changes:
        change()
        inp.poison_outputs()
        mk.gather_kv_b_proj(*inp.args(), variant="chunked", validate=False)
        res = check_outputs(inp)  # by the scales as they now are
        assert res["correct"], res
        seen.append(_bytes(inp))
    assert checked == [1] and len(api.PLANS) == 1  # one signature, one plan
    for a, b in zip(seen[:-1], seen[1:], strict=True):
        assert not torch.equal(a[0], b[0]) or not torch.equal(a[1], b[1])
    # Doubling k_out_scale (exactly) halves every stored K value above e4m3's subnormals
    # and below saturation.
    t = inp.total_tokens
    k0 = seen[0][0].view(FP8)[:t].float()
    k1 = seen[1][0].view(FP8)[:t].float()
    normal = (k0.abs() >= 2.0**-5) & (k0.abs() < 448)
    assert torch.equal(k1[normal], k0[normal] / 2)


def test_a_compiled_graph_reads_the_scales_on_every_call(device, seed):
    inp = build(device, seed)
    run = _compiled("tiled", "aot_eager")
    for factor in (1.0, 4.0, 1.5):  # growing scales: no value passes 448 x scale
        inp.k_out_scale.mul_(factor)
        inp.v_out_scale.mul_(factor * 2)
        inp.poison_outputs()
        run(*inp.args())
        res = check_outputs(inp)
        assert res["correct"], (factor, res)
