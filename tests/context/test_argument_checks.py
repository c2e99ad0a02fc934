"""Bad input to the context path's entry points: a ValueError naming the argument, what it
expects and what it got, before anything is written (the caller's outputs keep their NaN)."""

import math
import re

import pytest
import torch

from mla_kernels.context import (
    absorb_weights,
    absorbed_peak_bytes,
    absorbed_prefix_attention,
    attention_reference,
    expand_and_attend,
    expanded_peak_bytes,
    merge_attention,
    plan_absorbed,
    plan_expanded,
    prefix_attention,
    prefix_reference,
)
from mla_kernels.context.attention import Blocking
from mla_kernels.core.shapes import MLAShape
from mla_kernels.lab.context_inputs import build_context_inputs

TWO = MLAShape("test-2h", num_heads=2)
FP8 = torch.float8_e4m3fn


@pytest.fixture(scope="module")
def ci():
    import os
    dev = "cpu" if os.environ.get("TRITON_INTERPRET", "0") == "1" else "cuda"
    return build_context_inputs(TWO, 40, 3, block_size=8, device=dev, seed=3)


def outs(ci):
    dev = ci.q.device
    return {"out": torch.full((3, 2, 128), math.nan, dtype=torch.bfloat16, device=dev),
            "lse": torch.full((3, 2), math.nan, device=dev)}


def untouched(bufs):
    return all(bool(t.isnan().all()) for t in bufs.values())


def replaced(args, i, value):
    return (*args[:i], value, *args[i + 1:])


PATH_CASES = [
    # (argument index or keyword, bad value, words the message must hold)
    (0, "q", lambda ci: ci.q.float(), "q: expected dtype bfloat16 or float16, got float32"),
    (0, "q", lambda ci: torch.cat((ci.q, ci.q[:, :1]), 1),
     "kv_proj_weight: expected H x (nope + v) rows with H = 3 (q's heads) and nope = 128"),
    (0, "q", lambda ci: ci.q.transpose(0, 1), "q: expected a contiguous tensor"),
    (1, "k_buffer", lambda ci: torch.zeros(8, 8, 500, dtype=ci.cache.k_buffer.dtype,
                                           device=ci.q.device),
     "k_buffer: expected rows of kv_c (512, the weight's) + pe values"),
    (1, "k_buffer", lambda ci: ci.cache.k_buffer.transpose(0, 1),
     "k_buffer: expected a contiguous tensor"),
    (3, "kv_indptr", lambda ci: ci.cache.kv_indptr.long(), "kv_indptr: expected dtype int32"),
    (3, "kv_indptr", lambda ci: torch.zeros(3, dtype=torch.int32, device=ci.q.device),
     "kv_indptr: expected shape [2]"),
    (5, "context_len", lambda ci: 0, "context_len: expected an int >= 1, got 0"),
    (5, "context_len", lambda ci: 40.0, "context_len: expected an int >= 1, got 40.0"),
]


@pytest.mark.parametrize("path", [expand_and_attend, absorbed_prefix_attention],
                         ids=["expanded", "absorbed"])
@pytest.mark.parametrize(("i", "name", "bad", "message"), PATH_CASES,
                         ids=[f"{c[1]}-{j}" for j, c in enumerate(PATH_CASES)])
def test_paths_name_the_bad_argument(ci, path, i, name, bad, message):
    bufs = outs(ci)
    with pytest.raises(ValueError, match=re.escape(message)):
        path(*replaced(ci.args(), i, bad(ci)), **bufs)
    assert untouched(bufs)


def test_page_table_contents_are_read_when_validating(ci):
    bufs = outs(ci)
    bad = ci.cache.kv_indices.clone()
    bad[2] = ci.cache.k_buffer.shape[0]  # a block id out of range
    for path in (expand_and_attend, absorbed_prefix_attention):
        with pytest.raises(ValueError, match=r"kv_indices\[2\]: expected a block id in"):
            path(*replaced(ci.args(), 4, bad), validate=True, **bufs)
        with pytest.raises(ValueError, match=r"kv_indptr: expected \[0, 7\] .* got \[0, 5\]"):
            path(*replaced(ci.args(), 5, 50), validate=True, **bufs)
    assert untouched(bufs)


@pytest.mark.parametrize(("kw", "message"), [
    ({"chunk_tokens": 12}, "chunk_tokens: expected a multiple of the page size 8"),
    ({"kv_dtype": torch.float32}, "kv_dtype: expected torch.bfloat16"),
    ({"kv_dtype": FP8}, "k_out_scale: expected a float32 [1] tensor"),
    ({"k_out_scale": torch.ones(1)}, "k_out_scale: expected None (FP8 K/V only)"),
    ({"sm_scale": -1.0}, "sm_scale: expected None or a finite float > 0, got -1.0"),
    ({"num_splits": 0}, "num_splits: expected an int >= 1, got 0"),
    ({"num_splits": 65}, "num_splits: expected None or an int in [1, 64], got 65"),
    ({"variant": 3}, "variant: expected a design's name"),
    ({"validate": "yes"}, "validate: expected None, True or False"),
])
def test_expanded_options(ci, kw, message):
    bufs = outs(ci)
    if "k_out_scale" in kw:
        kw = {"k_out_scale": kw["k_out_scale"].to(ci.q.device)}
    with pytest.raises(ValueError, match=re.escape(message)):
        expand_and_attend(*ci.args(), **kw, **bufs)
    assert untouched(bufs)


def test_expanded_refuses_a_variant_the_call_refuses(ci):
    bufs = outs(ci)
    with pytest.raises(ValueError, match="variant"):
        expand_and_attend(*ci.args(), variant="no_such_design", **bufs)
    assert untouched(bufs)


def test_outputs_checked(ci):
    bad_out = {"out": torch.full((3, 2, 64), math.nan, dtype=torch.bfloat16, device=ci.q.device),
               "lse": outs(ci)["lse"]}
    for path in (expand_and_attend, absorbed_prefix_attention):
        with pytest.raises(ValueError, match=r"out: expected shape \[3, 2, 128\], got \[3, 2, 64\]"):
            path(*ci.args(), **bad_out)
    assert untouched(bad_out)
    alias = {"out": outs(ci)["out"],
             "lse": ci.q.view(-1).view(torch.float32)[:6].view(3, 2)}  # over the queries
    with pytest.raises(ValueError, match="lse: expected memory apart from q"):
        absorbed_prefix_attention(*ci.args(), **alias)


def test_absorbed_weights(ci):
    w = ci.cache.kv_proj_weight
    ws = ci.cache.kv_proj_scale
    with pytest.raises(ValueError, match="kv_proj_scale: expected a scale for an fp8 weight"):
        absorbed_prefix_attention(*replaced(ci.args(), 7, None), **outs(ci))
    with pytest.raises(ValueError, match=r"kv_proj_scale: expected shape \[512\], \[512, 1\]"):
        absorbed_prefix_attention(*replaced(ci.args(), 7, ws[:7]), **outs(ci))
    good = absorb_weights(w, ws, num_heads=2, nope=128)
    bad = good._replace(w_uk=good.w_uk[:, :64])
    with pytest.raises(ValueError, match="weights: expected absorb_weights' result"):
        absorbed_prefix_attention(*ci.args(), weights=bad, **outs(ci))
    out, _ = absorbed_prefix_attention(*ci.args(), weights=good)
    ref, _ = absorbed_prefix_attention(*ci.args())
    assert torch.equal(out, ref)


def test_prefix_attention_and_merge_checks(device):
    q = torch.randn(3, 2, 192, device=device).bfloat16()
    k = torch.randn(10, 2, 192, device=device).bfloat16()
    v = torch.randn(10, 2, 128, device=device).bfloat16()
    cases = [
        (dict(k=k.float()), "k: expected dtype bfloat16 or float8_e4m3fn, got float32"),
        (dict(v=v[:, :1]), r"v: expected shape \[10, 2, \*\]"),
        (dict(n_keys=11), r"n_keys: expected None or an int in \[1, 10\]"),
        (dict(k=k.to(FP8), v=v.to(FP8)), r"k_scale: expected a float32 \[1\] tensor"),
        (dict(k_scale=torch.ones(1, device=device)), r"k_scale: expected None \(FP8 K only\)"),
        (dict(num_splits=65), r"num_splits: expected None or an int in \[1, 64\], got 65"),
    ]
    for kw, message in cases:
        args = {"k": k, "v": v, **kw}
        out = torch.full((3, 2, 128), math.nan, dtype=torch.bfloat16, device=device)
        with pytest.raises(ValueError, match=message):
            prefix_attention(q, args.pop("k"), args.pop("v"), out=out, **args)
        assert bool(out.isnan().all())
    o = torch.randn(3, 2, 128, device=device)
    lse = torch.randn(3, 2, device=device)
    with pytest.raises(ValueError, match=r"lse_b: expected 2 dimensions, got 1"):
        merge_attention(o, lse, o.clone(), lse[:, 0].contiguous())
    with pytest.raises(ValueError, match="out: expected memory apart from o_b"):
        o_b = o.clone()
        merge_attention(o, lse, o_b, lse.clone(), out=o_b)


def _lse_over(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A copy of ``t`` at the start of a larger buffer, and an LSE [3, 2] over its bytes."""
    words = max(8, t.numel() * t.element_size() // 4 + 8)
    buf = torch.zeros(words, dtype=torch.float32, device=t.device)
    copy = buf.view(t.dtype)[:t.numel()].view(t.shape)
    copy.copy_(t)
    return copy, buf[:6].view(3, 2)


# (argument index, name) of every tensor input an output could lie over but the queries.
INPUTS = [(2, "k_scale"), (3, "kv_indptr"), (4, "kv_indices"), (7, "kv_proj_scale")]


@pytest.mark.parametrize("path", [expand_and_attend, absorbed_prefix_attention],
                         ids=["expanded", "absorbed"])
@pytest.mark.parametrize(("i", "name"), INPUTS, ids=[c[1] for c in INPUTS])
def test_outputs_apart_from_every_input(ci, path, i, name):
    # An LSE over a scale or the page table would rewrite what the next chunk (or the
    # caller's next call) reads: refused before anything is written, the input unchanged.
    copy, lse = _lse_over(ci.args()[i])
    before = copy.clone()
    out = outs(ci)["out"]
    with pytest.raises(ValueError, match=f"lse: expected memory apart from {name}"):
        path(*replaced(ci.args(), i, copy), out=out, lse=lse)
    assert torch.equal(copy, before) and bool(out.isnan().all())


@pytest.mark.parametrize("name", ["k_out_scale", "v_out_scale"])
def test_expanded_outputs_apart_from_the_fp8_scales(ci, name):
    dev = ci.q.device
    scales = {"k_out_scale": torch.full((1,), 0.02, device=dev),
              "v_out_scale": torch.full((1,), 0.03, device=dev)}
    scales[name], lse = _lse_over(scales[name])
    out = outs(ci)["out"]
    with pytest.raises(ValueError, match=f"lse: expected memory apart from {name}"):
        expand_and_attend(*ci.args(), kv_dtype=FP8, **scales, out=out, lse=lse)
    assert bool(out.isnan().all())


def test_absorbed_outputs_apart_from_the_prepared_weights(ci):
    w = absorb_weights(ci.cache.kv_proj_weight, ci.cache.kv_proj_scale, num_heads=2, nope=128)
    before = w.w_uv_t.clone()
    out = w.w_uv_t.view(-1)[:3 * 2 * 128].view(3, 2, 128)
    with pytest.raises(ValueError, match="out: expected memory apart from weights.w_uv_t"):
        absorbed_prefix_attention(*ci.args(), weights=w, out=out, lse=outs(ci)["lse"])
    assert torch.equal(w.w_uv_t, before)


def test_merge_in_place_means_the_first_partial_itself(device):
    # An output shifted from o_a, or of another dtype over its bytes, would be written where
    # another program still reads o_a: refused, o_a unchanged. o_a itself is allowed.
    g = torch.Generator().manual_seed(5)
    buf = torch.randn(70, 3, 128, generator=g).to(device)
    o_a, lse_a = buf[:69], torch.randn(69, 3, generator=g).to(device)
    o_b, lse_b = torch.randn(69, 3, 128, generator=g).to(device), torch.randn(69, 3).to(device)
    before = buf.clone()
    with pytest.raises(ValueError, match="out: expected memory apart from o_a"):
        merge_attention(o_a, lse_a, o_b, lse_b, out=buf[1:])
    half = buf.view(-1).view(torch.bfloat16)[:69 * 3 * 128].view(69, 3, 128)
    with pytest.raises(ValueError, match="out: expected memory apart from o_a"):
        merge_attention(o_a, lse_a, o_b, lse_b, out=half)
    lse_buf = torch.randn(70, 3).to(device)
    with pytest.raises(ValueError, match="out_lse: expected memory apart from lse_a"):
        merge_attention(o_a, lse_buf[:69], o_b, lse_b, out_lse=lse_buf[1:])
    assert torch.equal(buf, before)
    expect, expect_lse = merge_attention(o_a, lse_a, o_b, lse_b)
    got, got_lse = merge_attention(o_a, lse_a, o_b, lse_b, out=o_a, out_lse=lse_a)
    assert got is o_a and torch.equal(got, expect) and torch.equal(got_lse, expect_lse)


@pytest.mark.parametrize(("kw", "message"), [
    ({"num_heads": 3}, "num_heads: expected a divisor of the weight's 512 rows, got 3"),
    ({"num_heads": 0}, "num_heads: expected an int >= 1, got 0"),
    ({"nope": 256}, "nope: expected an int in [1, 256)"),
    ({"nope": 128.0}, "nope: expected an int in [1, 256)"),
    ({"dtype": torch.float32}, "dtype: expected torch.bfloat16 or torch.float16"),
    ({"weight": "w"}, "kv_proj_weight: expected a torch.Tensor, got str"),
    ({"weight": "1d"}, "kv_proj_weight: expected 2 dimensions, got 1"),
])
def test_absorb_weights_names_the_bad_argument(ci, kw, message):
    w = ci.cache.kv_proj_weight
    args = {"num_heads": 2, "nope": 128, **kw}
    weight = {"w": "w", "1d": w[0]}.get(args.pop("weight", None), w)
    with pytest.raises(ValueError, match=re.escape(message)):
        absorb_weights(weight, ci.cache.kv_proj_scale, **args)


@pytest.mark.parametrize(("fn", "kw", "message"), [
    (expanded_peak_bytes, {"new_tokens": -1}, "new_tokens: expected an int >= 0, got -1"),
    (expanded_peak_bytes, {"context_len": 0}, "context_len: expected an int >= 1, got 0"),
    (expanded_peak_bytes, {"chunk_tokens": 0}, "chunk_tokens: expected None or an int >= 1, got 0"),
    (expanded_peak_bytes, {"splits": 1.5}, "splits: expected an int >= 1, got 1.5"),
    (expanded_peak_bytes, {"kv_dtype": "bf16"}, "kv_dtype: expected a torch.dtype, got 'bf16'"),
    (absorbed_peak_bytes, {"new_tokens": 2.0}, "new_tokens: expected an int >= 0, got 2.0"),
    (absorbed_peak_bytes, {"q_dtype": None}, "q_dtype: expected a torch.dtype, got None"),
    (absorbed_peak_bytes, {"shape": "no-such-model"}, "shape: expected one of"),
    (absorbed_peak_bytes, {"prepare": 1}, "prepare: expected a bool, got 1"),
])
def test_memory_counts_name_the_bad_argument(fn, kw, message):
    args = {"shape": "kimi-k3-tp8", "new_tokens": 16, "context_len": 4096, **kw}
    with pytest.raises(ValueError, match=re.escape(message)):
        fn(args.pop("shape"), args.pop("new_tokens"), args.pop("context_len"), **args)


def test_the_reference_names_a_bad_argument(ci, device):
    # The reference is what every test is judged by: a bad argument is a ValueError, never
    # an attention over fewer keys than asked.
    q = torch.randn(3, 2, 192, device=device).bfloat16()
    k = torch.randn(10, 2, 192, device=device).bfloat16()
    v = torch.randn(10, 2, 128, device=device).bfloat16()
    cases = [
        (dict(n_keys=11), r"n_keys: expected None or an int in \[1, 10\] \(k's rows\), got 11"),
        (dict(n_keys=0), r"n_keys: expected None or an int in \[1, 10\]"),
        (dict(chunk=0), r"chunk: expected None or an int >= 1, got 0"),
        (dict(sm_scale=-1.0), r"sm_scale: expected None or a finite float > 0, got -1.0"),
        (dict(k=k[:, :1]), r"k: expected shape \[\*, 2, 192\]"),
        (dict(v=v[:9]), r"v: expected shape \[10, 2, \*\]"),
        (dict(k=k.to(FP8), v=v.to(FP8)), r"k_scale: expected a \[1\] tensor for FP8 K"),
    ]
    for kw, message in cases:
        args = {"k": k, "v": v, **kw}
        with pytest.raises(ValueError, match=message):
            attention_reference(q, args.pop("k"), args.pop("v"), **args)
    with pytest.raises(ValueError, match=r"context_len: expected an int >= 1, got 0"):
        prefix_reference(*replaced(ci.args(), 5, 0))
    with pytest.raises(ValueError, match=r"chunk: expected None or an int >= 1, got -4"):
        prefix_reference(*ci.args(), chunk=-4)


@pytest.mark.parametrize(("blocking", "message"), [
    ((64, 64, 8, 1), "blocking: expected a context.attention.Blocking, got tuple"),
    (Blocking(48, 64, 8, 1), r"blocking.block_m: expected one of \(16, 32, 64, 128\), got 48"),
    (Blocking(64, 256, 8, 1), r"blocking.block_n: expected one of \(16, 32, 64, 128\), got 256"),
    (Blocking(64, 64, 2, 1), r"blocking.num_warps: expected one of \(4, 8\), got 2"),
    (Blocking(64, 64, 8, None), r"blocking.num_stages: expected one of \(1, 2, 3, 4\), got None"),
    (Blocking(64, 64, 8, True), r"blocking.num_stages: expected one of \(1, 2, 3, 4\), got True"),
    (Blocking(64, 64, 8, 2, tma=1), r"blocking.tma: expected a bool, got 1"),
])
@pytest.mark.parametrize("path", [absorbed_prefix_attention, expand_and_attend],
                         ids=["absorbed", "expanded"])
def test_blocking_names_the_bad_field(ci, blocking, message, path):
    bufs = outs(ci)
    with pytest.raises(ValueError, match=message):
        path(*ci.args(), blocking=blocking, **bufs)
    assert untouched(bufs)


@pytest.mark.parametrize(("kw", "message"), [
    ({"kernel": "flash"},
     r"kernel: expected one of \('auto', 'portable', 'hopper'\), got 'flash'"),
    ({"kernel": None}, r"kernel: expected one of \('auto', 'portable', 'hopper'\), got None"),
    ({"kernel": "hopper", "blocking": Blocking(64, 64, 8, 2)},
     r"blocking: expected None with kernel='hopper' \(its tiles are fixed\), got Blocking"),
])
@pytest.mark.parametrize("path", [absorbed_prefix_attention, expand_and_attend],
                         ids=["absorbed", "expanded"])
def test_kernel_names_the_bad_argument(ci, kw, message, path):
    bufs = outs(ci)
    with pytest.raises(ValueError, match=message):
        path(*ci.args(), **kw, **bufs)
    assert untouched(bufs)


@pytest.mark.parametrize(("kw", "message"), [
    ({"schedule": "hopper,2,n128,apart"},
     r"schedule: expected None or a context.attention_hopper.Schedule, got str"),
    ({"schedule": "default", "kernel": "portable"},
     r"schedule: expected None with kernel='portable' or a blocking \(a schedule is the "
     r"hopper kernel's\), got Schedule\("),
    ({"schedule": "default", "blocking": Blocking(64, 64, 8, 2)},
     r"schedule: expected None with kernel='portable' or a blocking"),
])
def test_expanded_schedule_names_the_bad_argument(ci, kw, message):
    # A schedule is the Gluon kernel's pipeline: refused by name beside the portable kernel.
    from mla_kernels.context import attention_hopper

    if kw["schedule"] == "default":
        kw = {**kw, "schedule": attention_hopper.DEFAULT_SCHEDULE}
    bufs = outs(ci)
    with pytest.raises(ValueError, match=message):
        expand_and_attend(*ci.args(), **kw, **bufs)
    assert untouched(bufs)


def test_absorbed_refuses_descriptor_tiles(ci):
    # The absorbed kernels read the paged cache by pointers: tma=True is refused by name.
    bufs = outs(ci)
    with pytest.raises(ValueError, match=r"blocking.tma: expected False \(the absorbed kernels "
                                         r"read the cache by pointers\), got True"):
        absorbed_prefix_attention(*ci.args(), blocking=Blocking(64, 64, 8, 2, tma=True), **bufs)
    assert untouched(bufs)


def test_absorbed_auto_kernel_picks_what_runs_here(ci):
    # "auto" (the default) plans the Gluon kernel where it runs and the portable one
    # elsewhere; a blocking given is the portable kernel's, so it plans that one anywhere.
    from mla_kernels.context import absorbed_hopper

    here = "portable" if absorbed_hopper.supports(ci.q, ci.cache.k_buffer) else "hopper"
    assert plan_absorbed(*ci.args()).kernel == here
    tiles = Blocking(64, 64, 8, 2)
    plan = plan_absorbed(*ci.args(), blocking=tiles)
    assert plan.kernel == "portable" and plan.blocking == tiles


@pytest.mark.parametrize("parts", ["both", "", None, "ALL"])
def test_absorbed_hopper_launch_refuses_a_side_it_does_not_have(ci, parts):
    # The kernel's launch runs the whole kernel or one side (the bounds diagnostic's); any
    # other name is refused by name before a kernel is compiled or an output written.
    from mla_kernels.context import absorbed_hopper

    part_o = torch.full((2, 5, 12, 512), float("nan"))
    part_lse = torch.full((2, 5, 12), float("nan"))
    with pytest.raises(ValueError, match=r"parts: expected one of \('all', 'dots', "
                                         r"'gather', 'unwidened'\), got " + re.escape(repr(parts))):
        absorbed_hopper.launch(ci.q, ci.cache.k_buffer, ci.cache.k_scale, ci.cache.kv_indices,
                               part_o, part_lse, ci.context_len, 2, 0.1, parts=parts)
    assert part_o.isnan().all() and part_lse.isnan().all()


def test_expanded_auto_kernel_picks_what_runs_here(ci):
    # "auto" plans the Gluon kernel where it runs and the portable one elsewhere; a blocking
    # given is the portable kernel's, so it plans that one anywhere; the default is "auto".
    from mla_kernels.context import attention_hopper

    here = "portable" if attention_hopper.supports(ci.q, ci.q.dtype, 128) else "hopper"
    assert plan_expanded(*ci.args(), kernel="auto").kernel == here
    assert plan_expanded(*ci.args()).kernel == here
    assert plan_expanded(*ci.args(), kernel="portable").kernel == "portable"
    tiles = Blocking(64, 32, 4, 3)
    plan = plan_expanded(*ci.args(), kernel="auto", blocking=tiles)
    assert plan.kernel == "portable" and plan.blocking == tiles


def hopper_reason(path, ci):
    """Why ``path``'s Gluon kernel cannot run ``ci`` here (None: it can)."""
    from mla_kernels.context import absorbed_hopper, attention_hopper

    if path is absorbed_prefix_attention:
        return absorbed_hopper.supports(ci.q, ci.cache.k_buffer)
    return attention_hopper.supports(ci.q, ci.q.dtype, 128)


@pytest.mark.parametrize("path", [absorbed_prefix_attention, expand_and_attend],
                         ids=["absorbed", "expanded"])
def test_hopper_kernel_refused_where_it_cannot_run(ci, path):
    # Each Gluon kernel needs an sm_90 GPU: on any other device the plan names the kernel
    # and why, before anything is written.
    why = hopper_reason(path, ci)
    assert why is not None or ci.q.device.type == "cuda", why
    if why is None:
        pytest.skip("this device runs the hopper kernel")
    bufs = outs(ci)
    with pytest.raises(ValueError, match=r"kernel: expected 'portable' here \(the hopper kernel "
                                         r"needs .*\), got 'hopper'"):
        path(*ci.args(), kernel="hopper", **bufs)
    assert untouched(bufs)


def test_expanded_hopper_kernel_names_what_it_needs(ci):
    # What the kernel refuses, by name: K/V not in the queries' dtype (FP8), other head
    # dims, queries whose heads are not packed in their rows.
    from mla_kernels.context import attention_hopper

    q = torch.empty(4, 12, 192, dtype=torch.bfloat16, device=ci.q.device)
    if attention_hopper.device_reason(q.device) is not None:
        assert attention_hopper.supports(q, q.dtype, 128) == attention_hopper.device_reason(
            q.device)
        pytest.skip("no sm_90 GPU: the device is refused first")
    assert attention_hopper.supports(q, q.dtype, 128) is None
    assert "K/V of their dtype" in attention_hopper.supports(q, torch.float8_e4m3fn, 128)
    assert "got 192 and 64" in attention_hopper.supports(q, q.dtype, 64)
    assert "got 128 and 128" in attention_hopper.supports(q[:, :, :128], q.dtype, 128)
    spread = torch.empty(4, 12, 200, dtype=torch.bfloat16, device=q.device)[:, :, :192]
    assert "strides" in attention_hopper.supports(spread, q.dtype, 128)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"stages": 1}, r"stages: expected an int in \[2, 4\] .*, got 1"),
    ({"stages": 5}, r"stages: expected an int in \[2, 4\] .*, got 5"),
    ({"stages": 3.0}, r"stages: expected an int in \[2, 4\] .*, got 3.0"),
    ({"overlap": 1}, r"overlap: expected a bool, got 1"),
    ({"block_n": 32}, r"block_n: expected one of \(64, 128\), got 32"),
    ({"block_n": 128, "stages": 3}, r"stages: expected an int in \[2, 2\] \(key tiles of 81920 B"),
    ({"pingpong": 1}, r"pingpong: expected a bool, got 1"),
    ({"apart": "yes"}, r"apart: expected a bool, got 'yes'"),
    ({"overlap": False, "pingpong": True}, r"pingpong: expected False without overlap"),
])
def test_hopper_schedule_refuses_what_does_not_fit(kwargs, message):
    # Five 40 KB key stages and the 48 KB query tile pass an SM's shared memory, as do
    # three of 80 KB.
    from mla_kernels.context.attention_hopper import Schedule

    with pytest.raises(ValueError, match=message):
        Schedule(**kwargs)


@pytest.mark.parametrize(("spec", "want"), [
    ("hopper", (3, True, 64, False, False)),
    ("hopper,4,serial", (4, False, 64, False, False)),
    ("hopper,2,n128", (2, True, 128, False, False)),
    ("hopper,pingpong", (3, True, 64, True, False)),
    ("hopper,overlap,pingpong,2,n128", (2, True, 128, True, False)),
    ("hopper,2,n128,apart,pingpong", (2, True, 128, True, True)),
    ("hopper,serial,apart", (3, False, 64, False, True)),
])
def test_hopper_schedule_read_from_a_spec(spec, want):
    from mla_kernels.context.attention_hopper import Schedule

    s = Schedule.parse(spec)
    assert (s.stages, s.overlap, s.block_n, s.pingpong, s.apart) == want


@pytest.mark.parametrize(("spec", "message"), [
    ("hoper,3", r"schedule: expected hopper\[,STAGES\].*got 'hoper,3'"),
    ("hopper,3,4", r"got 'hopper,3,4'"),
    ("hopper,serial,overlap", r"got 'hopper,serial,overlap'"),
    ("hopper,fast", r"got 'hopper,fast'"),
    ("hopper,apart,apart", r"got 'hopper,apart,apart'"),
    ("hopper,serial,pingpong", r"pingpong: expected False without overlap"),
    ("hopper,n96", r"block_n: expected one of \(64, 128\), got 96"),
])
def test_hopper_schedule_spec_refused_by_name(spec, message):
    from mla_kernels.context.attention_hopper import Schedule

    with pytest.raises(ValueError, match=message):
        Schedule.parse(spec)
