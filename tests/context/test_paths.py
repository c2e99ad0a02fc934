"""Both paths of the cached prefix against the float32 reference (each chunk of the latent
expanded by the call's reference, attended with online softmax), and against each other:
expand-then-attend chunk by chunk (bf16 and FP8 K/V), absorbed over bf16 and fp8 caches
with fp8 per-row, fp8 per-block and bf16 weights. Real kv_c / pe / nope / v with two heads
keep the interpreter fast; outputs are poisoned with NaN before a path writes them."""

import os

import pytest
import torch

from mla_kernels.context import (
    absorb_weights,
    absorbed_peak_bytes,
    attention_reference,
    expanded_peak_bytes,
    plan_absorbed,
    plan_expanded,
)
from mla_kernels.context.attention import Blocking
from mla_kernels.core.formats import FP8_BLOCK, dequantize_weight, quantize_weight
from mla_kernels.core.shapes import MLAShape
from mla_kernels.lab.context_checks import attention_errors, judge
from mla_kernels.lab.context_inputs import build_context_inputs

TWO = MLAShape("test-2h", num_heads=2)


def _interp():
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def poisoned(ci, dtype=torch.bfloat16):
    n, h = ci.q.shape[:2]
    dev = ci.q.device
    return {"out": torch.full((n, h, 128), float("nan"), dtype=dtype, device=dev),
            "lse": torch.full((n, h), float("nan"), device=dev)}


@pytest.fixture(scope="module")
def prefix():
    """One prefix (fp8 cache, fp8 per-row weight, page 16) and its reference, shared by the
    expanded path's cases."""
    ci = build_context_inputs(TWO, 200, 6, block_size=16, cache_dtype="fp8",
                              weight_format="fp8_row", device="cpu" if _interp() else "cuda",
                              seed=11)
    return ci, ci.reference(chunk=48)


@pytest.mark.parametrize("chunk", [None, 64, 80])
def test_expanded_in_chunks(prefix, chunk):
    # 200 tokens in one chunk, in chunks of 64 (the last 8 tokens) and 80 (not a power of two).
    ci, ref = prefix
    bufs = poisoned(ci)
    plan = plan_expanded(*ci.args(), chunk_tokens=chunk, num_splits=2, **bufs)
    assert plan.chunks == (1 if chunk is None else -(-200 // chunk))
    plan.run()
    errs = attention_errors(bufs["out"], bufs["lse"], ref)
    assert judge(errs, "bf16"), errs
    # Its memory: the plan's own tensors, as the analytic count says, set by the chunk.
    held = sum(t.numel() * t.element_size() for t in plan.workspace().values())
    assert held == expanded_peak_bytes(TWO, 6, 200, chunk_tokens=chunk, splits=2)


@pytest.mark.parametrize("blocking", [Blocking(128, 64, 8, 2), Blocking(16, 32, 4, 3),
                                      Blocking(32, 128, 4, 1), Blocking(32, 64, 4, 2, tma=True)],
                         ids=str)
def test_expanded_tilings(prefix, blocking, monkeypatch):
    # The attention on a caller's tiles (query rows past the 6 here, keys past a split's
    # 100, a partial last key tile) against the reference, the outputs poisoned first; the
    # launch takes those tiles (K and V through descriptors where asked: the expanded
    # chunk's bf16 workspace allows them).
    from mla_kernels.context import attention

    kernel, launched = attention.prefix_attention_kernel, []

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                launched.append((kw["BM"], kw["BN"], kw["num_warps"], kw.get("num_stages"),
                                 kw["TMA"]))
                return kernel[grid](*args, **kw)
            return launch

    monkeypatch.setattr(attention, "prefix_attention_kernel", Recorder())
    ci, ref = prefix
    bufs = poisoned(ci)
    plan = plan_expanded(*ci.args(), blocking=blocking, **bufs)
    plan.run()
    assert launched == [tuple(vars(blocking).values())], launched
    errs = attention_errors(bufs["out"], bufs["lse"], ref)
    assert judge(errs, "bf16"), errs


@pytest.mark.parametrize(("n", "chunk", "wide", "splits"), [
    (511, None, False, [4]),     # 1000 keys: 4 splits of 64-key tiles fill the waves best
    (512, None, True, [2]),      # 2 of 128-key ones (at least 4 tiles a split)
    (600, 512, True, [1, 1]),    # chunks of 512 and 488 keys: one split each (2 at 64 keys)
])
def test_expanded_plan_picks_the_hopper_schedule_by_the_queries(n, chunk, wide, splits,
                                                                  monkeypatch, seed):
    # The plan on the Gluon kernel (planned, not run: the kernel runs on sm_90 alone) over
    # an H100's 132 SMs: the default schedule below 512 queries, 128-key tiles with K and V
    # apart from 512 up, its splits cut for the chosen tiles; a schedule given is kept and
    # its own tiles cut the splits.
    from mla_kernels.context import attention_hopper as ah
    from mla_kernels.context import expanded
    from mla_kernels.core.devices import DEVICES

    monkeypatch.setattr(ah, "supports", lambda *args: None)
    monkeypatch.setattr(expanded, "device_spec", lambda dev: DEVICES["H100 SXM"])
    ci = build_context_inputs(TWO, 1000, n, block_size=8, cache_dtype="fp8",
                              weight_format="fp8_row", device="cpu" if _interp() else "cuda",
                              seed=seed)
    plan = plan_expanded(*ci.args(), chunk_tokens=chunk)
    assert plan.kernel == "hopper"
    assert plan.schedule == (ah.WIDE_SCHEDULE if wide else ah.DEFAULT_SCHEDULE)
    assert plan.splits == splits, plan.splits
    for given in (ah.DEFAULT_SCHEDULE, ah.WIDE_SCHEDULE, ah.Schedule(4, False, 64)):
        plan = plan_expanded(*ci.args(), chunk_tokens=chunk, schedule=given)
        assert plan.schedule is given
        assert plan.splits == [ah.splits(n, 2, ln, 132, given.block_n)
                               for ln in plan.chunk_tokens], (given, plan.splits)
    # The other way round from the plan's own choice: the split counts change with the tiles.
    other = ah.DEFAULT_SCHEDULE if wide else ah.WIDE_SCHEDULE
    assert plan_expanded(*ci.args(), chunk_tokens=chunk, schedule=other).splits != splits


@pytest.mark.parametrize("blocking", [Blocking(32, 64, 4, 2, tma=True), None], ids=str)
def test_expanded_sources_built_once_per_chunk_length(prefix, blocking):
    # The attention's K/V arguments (descriptors where the tiles read through them) are
    # built at a chunk length's first launch and reused: chunks of 128 and 72 keys, two
    # runs, the same objects; the second run's output the first's.
    ci, ref = prefix
    bufs = poisoned(ci)
    plan = plan_expanded(*ci.args(), chunk_tokens=128, blocking=blocking, **bufs)
    plan.run()
    first = dict(plan.sources)
    got = bufs["out"].clone()
    assert sorted(first) == [72, 128]
    tma = blocking is not None
    assert all(isinstance(src[0], torch.Tensor) != tma for src in first.values()), first
    bufs["out"].fill_(float("nan"))
    plan.run()
    assert all(plan.sources[n] is first[n] for n in first)
    assert torch.equal(bufs["out"], got)
    errs = attention_errors(bufs["out"], bufs["lse"], ref)
    assert judge(errs, "bf16"), errs


def test_expanded_fp8_kv(prefix):
    ci, ref = prefix
    bufs = poisoned(ci, torch.float32)
    plan = plan_expanded(*ci.args(), chunk_tokens=128, **ci.fp8_scales(), **bufs)
    plan.run()
    assert plan.k_chunk.dtype == torch.float8_e4m3fn
    errs = attention_errors(bufs["out"], bufs["lse"], ref)
    assert judge(errs, "fp8"), errs
    # The last chunk's FP8 K/V (tokens 128..199, a page table of their own) attended
    # alone match the reference of those codes times their scales as closely as bf16 ones.
    q, kb, ks, ptr, idx, _, w, ws = ci.args()
    tail = plan_expanded(q, kb, ks, torch.tensor([0, 72 // 16 + 1], dtype=torch.int32,
                                                 device=q.device), idx[128 // 16:], 72, w, ws,
                         **ci.fp8_scales())
    o, lse = tail.run()
    own = attention_reference(q, tail.k_chunk, tail.v_chunk, n_keys=72, k_scale=ci.k_out_scale,
                              v_scale=ci.v_out_scale)
    errs = attention_errors(o, lse, own)
    assert judge(errs, "bf16"), errs


@pytest.mark.parametrize(("cache", "fmt"), [("fp8", "fp8_row"), ("bf16", "bf16"),
                                            ("fp8", "fp8_block"), ("bf16", "fp8_row")])
def test_absorbed(cache, fmt, device, seed):
    ci = build_context_inputs(TWO, 150, 9, block_size=4, cache_dtype=cache, weight_format=fmt,
                              device=device, seed=seed)
    ref = ci.reference(chunk=64)
    bufs = poisoned(ci)
    plan = plan_absorbed(*ci.args(), num_splits=3, **bufs)
    plan.run()
    errs = attention_errors(bufs["out"], bufs["lse"], ref)
    assert judge(errs, "bf16"), errs
    held = sum(t.numel() * t.element_size() for t in plan.workspace().values())
    weights = sum(t.numel() * t.element_size() for t in plan.weights)
    lat = 9 * 2 * 512 * 2  # the fold's product, freed once copied
    assert held + weights + lat == absorbed_peak_bytes(TWO, 9, 150, splits=3)


@pytest.mark.parametrize("cache", ["fp8", "bf16"])
@pytest.mark.parametrize("blocking", [Blocking(16, 32, 4, 2), Blocking(64, 128, 8, 1),
                                      Blocking(32, 16, 4, 3)], ids=str)
def test_absorbed_tilings(cache, blocking, device, seed):
    # A plan's own tiles (rows past the 18 here, keys past a split's 50, a partial last
    # key tile) against the reference, the outputs poisoned first; its memory as counted.
    ci = build_context_inputs(TWO, 150, 9, block_size=4, cache_dtype=cache,
                              weight_format="fp8_row", device=device, seed=seed)
    ref = ci.reference(chunk=64)
    bufs = poisoned(ci)
    plan = plan_absorbed(*ci.args(), num_splits=3, blocking=blocking, **bufs)
    plan.run()
    errs = attention_errors(bufs["out"], bufs["lse"], ref)
    assert judge(errs, "bf16"), errs
    held = sum(t.numel() * t.element_size() for t in plan.workspace().values())
    held += sum(t.numel() * t.element_size() for t in plan.weights) + 9 * 2 * 512 * 2
    assert held == absorbed_peak_bytes(TWO, 9, 150, splits=3)


def test_both_paths_agree(device, seed):
    # Kimi-K3 TP8's twelve heads, page 1, a few new tokens: the same attention both ways,
    # each within the bf16 tolerance of the reference and of the other.
    ci = build_context_inputs("kimi-k3-tp8", 96, 4, block_size=1, device=device, seed=seed)
    ref = ci.reference()
    ex = plan_expanded(*ci.args(), chunk_tokens=64).run()
    ab = plan_absorbed(*ci.args()).run()
    for out, lse in (ex, ab):
        errs = attention_errors(out, lse, ref)
        assert judge(errs, "bf16"), errs
    other = ref._replace(out=ex[0].float(), lse=ex[1])
    errs = attention_errors(ab[0], ab[1], other)
    assert judge(errs, "bf16"), errs


@pytest.mark.parametrize("cache", ["bf16", "fp8"])
def test_fp16_queries(cache, device, seed):
    # fp16 queries (the entry points take them beside bf16): the expanded K/V, the absorbed
    # queries, the latent's widening and the outputs in fp16, each path within bf16's bounds.
    ci = build_context_inputs(TWO, 100, 5, block_size=4, cache_dtype=cache,
                              weight_format="fp8_row", device=device, seed=seed)
    ref = ci.reference(chunk=48)
    args = (ci.q.half(), *ci.args()[1:])
    for name, plan in (("expanded", lambda b: plan_expanded(*args, chunk_tokens=48,
                                                            kv_dtype=torch.float16, **b)),
                       ("absorbed", lambda b: plan_absorbed(*args, **b))):
        bufs = poisoned(ci, torch.float16)
        plan(bufs).run()
        errs = attention_errors(bufs["out"], bufs["lse"], ref)
        assert judge(errs, "bf16"), (name, errs)


@pytest.mark.parametrize(("fmt", "scale", "per_head", "nope"), [
    ("fp8_row", "row", 256, 128), ("fp8_row", "row [N, 1]", 256, 128),
    ("fp8_block", "block", 256, 128),
    ("fp8_block", "block", 192, 128),  # heads that start and end inside 128-row blocks
    ("bf16", None, 256, 128), ("bf16", "row", 192, 100), ("bf16", "block", 320, 192)])
def test_absorbed_weights_are_the_whole_weight_dequantised(fmt, scale, per_head, nope, device,
                                                          seed):
    # Prepared head by head, the weights are bit for bit those of the whole weight
    # dequantised at once (as the reference does), then split and rounded.
    g = torch.Generator().manual_seed(seed)
    h, k = 3, 512
    w = torch.randn(h * per_head, k, generator=g)
    if fmt == "bf16":
        weight = w.to(torch.bfloat16)
        shapes = {"row": (h * per_head,), "block": (-(-h * per_head // FP8_BLOCK), k // FP8_BLOCK)}
        ws = None if scale is None else torch.rand(shapes[scale], generator=g) + 0.5
    else:
        weight, ws = quantize_weight(w, fmt)
        if scale == "row [N, 1]":
            ws = ws.reshape(-1, 1)
    got = absorb_weights(weight.to(device), None if ws is None else ws.to(device), num_heads=h,
                         nope=nope)
    whole = dequantize_weight(weight, ws, fmt).view(h, per_head, k)
    assert torch.equal(got.w_uk.cpu(), whole[:, :nope].to(torch.bfloat16))
    assert torch.equal(got.w_uv_t.cpu(), whole[:, nope:].transpose(1, 2).to(torch.bfloat16))


def test_absorbed_count_with_the_weights_preparation(device, seed):
    # A plan that prepares its weights first holds them and one head's rows of the weight
    # in float32 twice (the copy, its scaled product) with the head's scale: at few new
    # tokens more than its run, at many less.
    ci = build_context_inputs(TWO, 150, 9, block_size=4, device=device, seed=seed)
    plan = plan_absorbed(*ci.args(), num_splits=3)
    weights = sum(t.numel() * t.element_size() for t in plan.weights)
    per_head = 256
    head = 2 * per_head * 512 * 4 + per_head * 4
    run = absorbed_peak_bytes(TWO, 9, 150, splits=3)
    assert absorbed_peak_bytes(TWO, 9, 150, splits=3, prepare=True) == weights + head > run
    many = absorbed_peak_bytes(TWO, 4096, 150, splits=3)
    assert many > weights + head
    assert absorbed_peak_bytes(TWO, 4096, 150, splits=3, prepare=True) == many
