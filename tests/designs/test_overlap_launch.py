"""hopper_ws launched overlapped (programmatic dependent launch): with a kernel before it
that lets it launch at once and writes this call's inputs late, the call reads the inputs
as that kernel left them (docs/contract.md, "Where the call works"), eagerly and replayed
from a CUDA graph. The writer spins before its stores, so a kernel that read anything
before its wait would read the old values. Needs an sm_90 GPU; the CPU checks the option's
compile in tests/lab/test_compile.py."""

import pytest
import torch
import triton
import triton.language as tl
from test_kernels import hopper
from triton.language.extra.cuda import gdc_launch_dependents

import mla_kernels as mk
from mla_kernels.designs.hopper_ws import HopperWSConfig
from mla_kernels.lab.checks import check_outputs, expected
from mla_kernels.lab.diagnostics.spin import wait_ns

KIMI = "kimi-k3-tp8"
SPIN_NS = 200_000  # the writer's wait before its stores: far past the call's launch


@triton.jit
def _late_copy(src, dst, n, SPIN: tl.constexpr, BLOCK: tl.constexpr):
    gdc_launch_dependents()  # the next kernel may launch now
    wait_ns(SPIN)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask), mask=mask)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8).view(-1)


def _late_write(src: torch.Tensor, dst: torch.Tensor) -> None:
    s, d = _bytes(src), _bytes(dst)
    _late_copy[(triton.cdiv(s.numel(), 1024),)](s, d, s.numel(), SPIN=SPIN_NS, BLOCK=1024)


INPUTS = ("k_buffer", "k_scale", "kv_indices", "kv_proj_weight", "kv_proj_scale")


def _write_inputs(dst, src, last: str) -> None:
    """``src``'s inputs into ``dst``'s tensors, ``last`` by the late writer, the others first
    (ordered before it on the stream)."""
    for name in INPUTS:
        if name != last and getattr(dst, name) is not None:
            getattr(dst, name).copy_(getattr(src, name))
    _late_write(getattr(src, last), getattr(dst, last))


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("last", ["k_buffer", "kv_indices", "kv_proj_weight"])
@pytest.mark.parametrize(("fmt", "cache"), [("fp8_row", "fp8"), ("bf16", "fp8"),
                                          ("mxfp4", "fp8"), ("fp8_row", "bf16")])
@pytest.mark.parametrize("variant", ["hopper_ws", "prefetch", "auto"])
def test_overlapped_launch_reads_what_the_kernel_before_wrote(fmt, cache, last, variant,
                                                              device, seed):
    # hopper_ws asked for the option (and with its prefetches before the wait), and auto
    # with its defaults (overlapped too). 2000 tokens: programs with no items, which
    # prefetch while the writer spins.
    cfg = {"hopper_ws": HopperWSConfig(overlap_launch=True),
           "prefetch": HopperWSConfig(prefetch="inputs")}.get(variant)
    variant = "auto" if variant == "auto" else "hopper_ws"
    contexts = [700, 0, 1300]
    call = mk.build_inputs(KIMI, contexts, block_size=16, cache_dtype=cache,
                           weight_format=fmt, device=device, seed=seed)
    new = mk.build_inputs(KIMI, contexts, block_size=16, cache_dtype=cache,
                          weight_format=fmt, device=device, seed=seed + 1)
    old = {n: getattr(call, n).clone() for n in INPUTS if getattr(call, n) is not None}
    assert not torch.equal(_bytes(old[last]), _bytes(getattr(new, last))), f"seed {seed}"
    ref = expected(new)
    mk.gather_kv_b_proj(*call.args(), variant=variant, config=cfg)  # compile, plan
    torch.cuda.synchronize()

    # Eagerly: the writer, then the call, on one stream.
    call.poison_outputs()
    _write_inputs(call, new, last)
    mk.gather_kv_b_proj(*call.args(), variant=variant, config=cfg)
    torch.cuda.synchronize()
    res = check_outputs(call, ref)
    assert res["correct"], ("eager", res["max_rel_err"], f"seed {seed}")

    # Replayed from a CUDA graph that holds both, the inputs reset to the old ones first.
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        _write_inputs(call, new, last)
        mk.gather_kv_b_proj(*call.args(), variant=variant, config=cfg)
    for name, t in old.items():
        getattr(call, name).copy_(t)
    call.poison_outputs()
    graph.replay()
    torch.cuda.synchronize()
    res = check_outputs(call, ref)
    assert res["correct"], ("graph", res["max_rel_err"], f"seed {seed}")


GARBAGE = {"max": lambda n, g: torch.full((n,), 2 ** 31 - 1, dtype=torch.int32),
           "min": lambda n, g: torch.full((n,), -2 ** 31, dtype=torch.int32),
           "random": lambda n, g: torch.randint(-2 ** 31, 2 ** 31 - 1, (n,), generator=g,
                                                dtype=torch.int32)}


@pytest.mark.gpu
@hopper
@pytest.mark.parametrize("garbage", sorted(GARBAGE))
@pytest.mark.parametrize("lengths", ["kept", "garbage"])
@pytest.mark.parametrize("prefetch", ["inputs", "table+weight"])
def test_prefetch_before_the_wait_survives_a_page_table_being_written(garbage, lengths, prefetch,
                                                                      device, seed):
    # The page table (kv_indptr, kv_indices) and, with "garbage" lengths, the context
    # lengths' prefix sums hold extreme or random values while the kernel before writes
    # the real ones late: the prefetches read them before the wait, clamp them into the
    # tensors' bounds and use them for addresses alone, so the call neither faults nor
    # hangs and reads what was written. "kept" leaves the sums true, so the short-context
    # schedule with prefetching programs is the one taken.
    # Both ways the page table is read early: row by row (the latent's prefetch) and as
    # one range (the block ids').
    cfg = HopperWSConfig(prefetch=prefetch)
    call = mk.build_inputs(KIMI, [700, 0, 1300], block_size=16, cache_dtype="fp8",
                           weight_format="fp8_row", device=device, seed=seed)
    ref = expected(call)
    mk.gather_kv_b_proj(*call.args(), variant="hopper_ws", config=cfg)  # compile, plan
    torch.cuda.synchronize()
    names = ["kv_indptr", "kv_indices"] + (["kv_prefix_sum_context_lens"]
                                           if lengths == "garbage" else [])
    # The tensors as views of one buffer, so that one late write (after one spin) leaves
    # every one of them garbage while the call prefetches.
    parts = [getattr(call, n) for n in names]
    assert all(t.dtype == torch.int32 and t.is_contiguous() for t in parts)
    buf = torch.cat([t.view(-1) for t in parts])
    true = buf.clone()
    at = 0
    for n, t in zip(names, parts, strict=True):
        setattr(call, n, buf[at:at + t.numel()].view(t.shape))
        at += t.numel()
    buf.copy_(GARBAGE[garbage](buf.numel(), torch.Generator().manual_seed(seed)).to(device))
    call.poison_outputs()
    _late_write(true, buf)
    mk.gather_kv_b_proj(*call.args(), variant="hopper_ws", config=cfg)
    torch.cuda.synchronize()
    res = check_outputs(call, ref)
    assert res["correct"], (garbage, lengths, res["max_rel_err"], f"seed {seed}")
