"""The context path compiled on the GPU at the map's shape: both ways over a cached context
of tens of thousands of tokens, chunked, FP8 K/V, against the float32 reference in chunks;
a CUDA graph's replay equal to the eager run; the memory torch's allocator saw within the
count. Skipped without a GPU (``TRITON_INTERPRET=0 pytest tests/context``)."""

import pytest
import torch

from mla_kernels.context import absorbed_peak_bytes, expanded_peak_bytes, plan_absorbed, plan_expanded
from mla_kernels.context.attention import Blocking, fewest_waves, split_by_waves, split_count
from mla_kernels.core.devices import device_spec
from mla_kernels.lab.context_checks import attention_errors, judge
from mla_kernels.lab.context_inputs import build_context_inputs

pytestmark = pytest.mark.gpu


def replays_the_eager_run(plan, out, lse) -> bool:
    """Whether a CUDA graph of ``plan.run()``, its output poisoned first, replays the eager
    run's ``out`` and ``lse`` bit for bit."""
    eager = out.clone(), lse.clone()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run()
    plan.out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    return torch.equal(plan.out, eager[0]) and torch.equal(plan.lse, eager[1])


@pytest.mark.parametrize(("c", "n"), [(32000, 16), (20000, 600)])
@pytest.mark.parametrize("fmt", ["fp8_row", "bf16"])
def test_both_ways_at_scale(c, n, fmt, seed):
    ci = build_context_inputs("kimi-k3-tp8", c, n, cache_dtype="fp8", weight_format=fmt,
                              device="cuda", seed=seed)
    ref = ci.reference()
    for kv in ("bf16", "fp8"):
        extra = ci.fp8_scales() if kv == "fp8" else {}
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        plan = plan_expanded(*ci.args(), chunk_tokens=8192, **extra)
        plan.out.fill_(float("nan"))
        out, lse = plan.run()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        errs = attention_errors(out, lse, ref)
        assert judge(errs, kv), (kv, errs)
        model = expanded_peak_bytes("kimi-k3-tp8", n, c, chunk_tokens=8192,
                                    splits=max(plan.splits), kv_dtype=plan.k_chunk.dtype)
        assert peak <= model * 1.05 + 2**22, (peak, model)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    plan = plan_absorbed(*ci.args())
    plan.out.fill_(float("nan"))
    out, lse = plan.run()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    errs = attention_errors(out, lse, ref)
    assert judge(errs, "bf16"), errs
    # The count holds what torch's allocator saw, as the expanded path's does.
    model = absorbed_peak_bytes("kimi-k3-tp8", n, c, splits=plan.splits)
    assert peak <= model * 1.05 + 2**22, (peak, model)


def test_graph_replay_equals_the_eager_run(seed):
    ci = build_context_inputs("kimi-k3-tp8", 9000, 40, device="cuda", seed=seed)
    for plan in (plan_expanded(*ci.args(), chunk_tokens=4096), plan_absorbed(*ci.args())):
        eager = [t.clone() for t in plan.run()]
        torch.cuda.synchronize()
        plan.out.fill_(float("nan"))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            plan.run()
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(plan.out, eager[0]) and torch.equal(plan.lse, eager[1])


@pytest.mark.parametrize("blocking", [Blocking(64, 128, 8, 1), Blocking(64, 64, 8, 2),
                                      Blocking(64, 32, 8, 2), Blocking(16, 32, 8, 2)], ids=str)
@pytest.mark.parametrize("cache", ["fp8", "bf16"])
def test_absorbed_tilings_at_scale(blocking, cache, seed):
    # absorbed_blocking's tiles for both latents, the tiling before them and the small-row
    # one, over a long context with a partial last key tile and split, against the
    # reference; outputs poisoned first.
    ci = build_context_inputs("kimi-k3-tp8", 20011, 40, cache_dtype=cache, device="cuda",
                              seed=seed)
    plan = plan_absorbed(*ci.args(), blocking=blocking)
    plan.out.fill_(float("nan"))
    out, lse = plan.run()
    errs = attention_errors(out, lse, ci.reference())
    assert judge(errs, "bf16"), errs


@pytest.mark.parametrize("blocking", [Blocking(128, 64, 8, 2), Blocking(128, 32, 8, 3),
                                      Blocking(64, 64, 4, 3)], ids=str)
def test_expanded_tilings_at_scale(blocking, seed):
    # The expanded attention on the tiles scripts/prefix_tiles.py times, over a long
    # context with a partial last key tile and split and a partial query tile (130 queries
    # on 128-row tiles), against the reference; outputs poisoned first.
    ci = build_context_inputs("kimi-k3-tp8", 20011, 130, cache_dtype="fp8", device="cuda",
                              seed=seed)
    plan = plan_expanded(*ci.args(), blocking=blocking)
    plan.out.fill_(float("nan"))
    out, lse = plan.run()
    errs = attention_errors(out, lse, ci.reference())
    assert judge(errs, "bf16"), f"seed {seed}: {errs}"


def test_expanded_chunks_on_different_tiles(seed):
    # 130 queries over 20011 keys in chunks of 16384: the first chunk's attention takes
    # 128-row tiles, the last (3627 keys) 64-row ones, each with its own split count.
    ci = build_context_inputs("kimi-k3-tp8", 20011, 130, cache_dtype="fp8", device="cuda",
                              seed=seed)
    plan = plan_expanded(*ci.args(), chunk_tokens=16384, kernel="portable")
    plan.out.fill_(float("nan"))
    out, lse = plan.run()
    errs = attention_errors(out, lse, ci.reference())
    assert judge(errs, "bf16"), f"seed {seed}: {errs}"


@pytest.mark.parametrize("fmt", ["fp8_row", "fp8_block"])
def test_absorbed_plan_and_run_within_the_count_at_few_tokens(fmt, seed):
    # The map's first point: with 16 new tokens the run holds less than the weight's whole
    # float32 dequantisation would, so a plan that prepared it at once peaked above the
    # count (12 MiB against 6.96 MB); head by head, the plan and its run stay within it.
    ci = build_context_inputs("kimi-k3-tp8", 4096, 16, cache_dtype="fp8", weight_format=fmt,
                              device="cuda", seed=seed)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    plan = plan_absorbed(*ci.args())
    plan.run()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    model = absorbed_peak_bytes("kimi-k3-tp8", 16, 4096, splits=plan.splits, prepare=True)
    assert peak <= model + 2**20, (peak, model)


@pytest.mark.parametrize(("c", "n"), [(20011, 40), (4096, 128), (777, 3), (33, 7)])
@pytest.mark.parametrize("cache", ["fp8", "bf16"])
@pytest.mark.parametrize("block_size", [1, 16])
def test_absorbed_hopper_kernel_against_the_reference(c, n, cache, block_size, seed):
    # The Gluon kernel for sm_90 over both latents and two page sizes: a partial last key
    # tile and split, a partial last row tile (40 x 12 and 3 x 12 rows), a context shorter
    # than one split's tiles, fewer keys than one tile; outputs poisoned first, compared
    # with the reference; replayed from a CUDA graph, the same bits.
    from mla_kernels.context import absorbed_hopper

    ci = build_context_inputs("kimi-k3-tp8", c, n, cache_dtype=cache, block_size=block_size,
                              device="cuda", seed=seed)
    why = absorbed_hopper.supports(ci.q, ci.cache.k_buffer)
    if why is not None:
        pytest.skip(f"the hopper kernel needs {why}")
    plan = plan_absorbed(*ci.args(), kernel="hopper")
    plan.out.fill_(float("nan"))
    plan.lse.fill_(float("nan"))
    out, lse = plan.run()
    ref = ci.reference()
    errs = attention_errors(out, lse, ref)
    assert judge(errs, "bf16"), (errs, f"seed {seed}")
    assert replays_the_eager_run(plan, out, lse), f"seed {seed}"


@pytest.mark.parametrize(("c", "n", "chunk", "splits"),
                         [(20011, 130, 8192, None), (4096, 128, None, None), (777, 3, None, 5),
                          (33, 7, None, None), (1000, 70, 512, 40), (5000, 600, 4096, None)])
def test_expanded_hopper_kernel_against_the_reference(c, n, chunk, splits, seed):
    # The Gluon kernel for sm_90: a partial last key tile and split, a partial last query
    # tile (130 = 128 + 2, 70, 3 and 600 queries), chunks of their own split counts, fewer
    # keys than one tile, splits that see no key (40 splits of 512 keys), the plan's own
    # schedule from 512 queries up (128-key tiles, K and V apart); outputs poisoned first,
    # compared with the reference; replayed from a CUDA graph, the same bits.
    from mla_kernels.context import attention_hopper

    ci = build_context_inputs("kimi-k3-tp8", c, n, device="cuda", seed=seed)
    why = attention_hopper.supports(ci.q, ci.q.dtype, 128)
    if why is not None:
        pytest.skip(f"the hopper kernel needs {why}")
    plan = plan_expanded(*ci.args(), chunk_tokens=chunk, num_splits=splits, kernel="hopper")
    assert plan.kernel == "hopper"
    assert plan.schedule == attention_hopper.schedule_for(n)
    if splits is None:  # one program an SM: split by whole waves of them
        programs = -(-n // attention_hopper.QUERIES.value) * 12
        units = device_spec(ci.q.device).compute_units
        bn = plan.schedule.block_n
        assert plan.splits == [split_by_waves(programs, ln, bn, units,
                                              attention_hopper.OVERHEAD_KEYS // bn)
                               for ln in plan.chunk_tokens], plan.splits
    matches_the_reference_and_replays(plan, ci, seed)


def matches_the_reference_and_replays(plan, ci, seed, kv="bf16"):
    """The plan's run, outputs poisoned first, against the reference (K/V of ``kv``); its
    CUDA graph's replay the same bits."""
    plan.out.fill_(float("nan"))
    plan.lse.fill_(float("nan"))
    out, lse = plan.run()
    errs = attention_errors(out, lse, ci.reference())
    assert judge(errs, kv), (errs, f"seed {seed}")
    assert replays_the_eager_run(plan, out, lse), f"seed {seed}"


@pytest.mark.parametrize(("stages", "overlap", "block_n", "pingpong", "apart"),
                         [(3, False, 64, False, False), (4, False, 64, False, False),
                          (4, True, 64, False, False), (2, False, 128, False, False),
                          (2, True, 128, False, False), (3, True, 64, True, False),
                          (2, True, 128, True, False), (3, True, 64, False, True),
                          (2, False, 128, False, True), (2, True, 128, False, True),
                          (2, True, 128, True, True)])
@pytest.mark.parametrize(("c", "n", "chunk", "splits"),
                         [(20011, 130, 8192, None), (33, 7, None, None), (1000, 70, 512, 40)])
def test_expanded_hopper_schedules_against_the_reference(c, n, chunk, splits, stages, overlap,
                                                         block_n, pingpong, apart, seed):
    # The Gluon kernel's other schedules (four key stages; each consumer's softmax after its
    # output dot, not under it as in the default; tiles of 128 keys; the consumers' dots in
    # turn; K and V freed apart): a partial last tile
    # and split, a single tile, splits that see no key; outputs poisoned first, compared
    # with the reference, replayed from a CUDA graph.
    from mla_kernels.context import attention_hopper

    ci = build_context_inputs("kimi-k3-tp8", c, n, device="cuda", seed=seed)
    why = attention_hopper.supports(ci.q, ci.q.dtype, 128)
    if why is not None:
        pytest.skip(f"the hopper kernel needs {why}")
    plan = plan_expanded(*ci.args(), chunk_tokens=chunk, num_splits=splits, kernel="hopper",
                         schedule=attention_hopper.Schedule(stages, overlap, block_n, pingpong,
                                                            apart))
    matches_the_reference_and_replays(plan, ci, seed)


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_expanded_default_plans_the_hopper_kernel_where_it_runs(kv, seed):
    # The default ("auto"): Gluon's kernel over bf16 K/V on sm_90, the portable one over FP8
    # K/V (which Gluon's does not read) and wherever tiles are given; each matches the
    # reference, outputs poisoned first, and replays from a CUDA graph.
    from mla_kernels.context import attention_hopper

    ci = build_context_inputs("kimi-k3-tp8", 5000, 200, cache_dtype="fp8", device="cuda",
                              seed=seed)
    extra = ci.fp8_scales() if kv == "fp8" else {}
    runs = attention_hopper.supports(ci.q, ci.q.dtype, 128) is None and kv == "bf16"
    plan = plan_expanded(*ci.args(), **extra)
    assert plan.kernel == ("hopper" if runs else "portable"), plan.kernel
    assert plan_expanded(*ci.args(), blocking=Blocking(64, 32, 4, 3), **extra).kernel == "portable"
    matches_the_reference_and_replays(plan, ci, seed, kv)


def test_absorbed_default_plans_the_hopper_kernel_in_whole_waves(seed):
    # Where the Gluon kernel runs the default ("auto") plans it, its splits cut so that its
    # one program an SM fill whole waves (12 row tiles x 16 splits would leave a second wave
    # under half full at 4096 tokens); the result matches the reference, outputs poisoned.
    from mla_kernels.context import absorbed_hopper

    ci = build_context_inputs("kimi-k3-tp8", 4096, 64, cache_dtype="fp8", device="cuda",
                              seed=seed)
    why = absorbed_hopper.supports(ci.q, ci.cache.k_buffer)
    if why is not None:
        pytest.skip(f"the hopper kernel needs {why}")
    plan = plan_absorbed(*ci.args())
    units = device_spec(ci.q.device).compute_units
    tiles = -(-64 * 12 // absorbed_hopper.BLOCKING.block_m)
    assert plan.kernel == "hopper"
    keys = absorbed_hopper.BLOCKING.block_n
    assert plan.splits == fewest_waves(tiles, split_count(tiles, 4096, keys, units), units)
    plan.out.fill_(float("nan"))
    plan.lse.fill_(float("nan"))
    out, lse = plan.run()
    errs = attention_errors(out, lse, ci.reference())
    assert judge(errs, "bf16"), (errs, f"seed {seed}")


def test_expanded_hopper_kernel_sides_alone_run_to_their_end(seed):
    # The expanded bounds diagnostic's launches: the loads' side writes no partial, the
    # dots' side writes its LSE (of stale tiles), and the kernel and merge after them, in
    # more splits than stages of tiles, still match the reference.
    from mla_kernels.context import attention_hopper
    from mla_kernels.lab.diagnostics.expanded_bounds import LAUNCHES, launches, measure_point

    ci = build_context_inputs("kimi-k3-tp8", 4096, 40, cache_dtype="fp8",
                              weight_format="fp8_row", device="cuda", seed=seed)
    why = attention_hopper.supports(ci.q, torch.bfloat16, 128)
    if why is not None:
        pytest.skip(f"the hopper kernel needs {why}")
    plan = plan_expanded(*ci.args(), kernel="hopper", chunk_tokens=4096)
    plan.expand()
    n, h, _ = ci.q.shape
    part_o = torch.full((3, n, h, 128), float("nan"), device="cuda")
    part_lse = torch.full((3, n, h), float("nan"), device="cuda")
    fns = launches(plan, part_o, part_lse)
    fns["loads"]()
    torch.cuda.synchronize()
    assert part_lse.isnan().all() and part_o.isnan().all(), f"seed {seed}"
    fns["dots"]()
    torch.cuda.synchronize()
    assert torch.isfinite(part_lse).all(), f"seed {seed}"
    plan.out.fill_(float("nan"))
    plan.lse.fill_(float("nan"))
    fns["attend"]()
    errs = attention_errors(plan.out, plan.lse, ci.reference())
    assert judge(errs, "bf16"), (errs, f"seed {seed}")
    rows = measure_point(4096, 40, {}, splits=[3], budget=(1, 5), seed=seed)
    # Each launch timed after a flush that writes and after one that reads.
    assert [(r["parts"], r["flush"]) for r in rows] == [
        (p, f) for p in LAUNCHES for f in ("write", "read")], rows
    assert all(r["median_us"] > 0 and r["splits"] == 3 for r in rows), rows
    assert rows[0]["tiles_per_program"] == 22, rows  # 1366 keys a split, in tiles of 64


@pytest.mark.parametrize("cache", ["fp8", "bf16"])
def test_absorbed_hopper_kernel_sides_alone_run_to_their_end(cache, seed):
    # The bounds diagnostic's launches (each side with the other's stand-in, and the
    # unwidened kernel) finish, leave the outputs they do not write as they were, and the
    # whole kernel after them still matches the reference.
    from mla_kernels.context import absorbed_hopper
    from mla_kernels.lab.diagnostics.absorbed_bounds import measure_point

    ci = build_context_inputs("kimi-k3-tp8", 4096, 40, cache_dtype=cache, device="cuda",
                              seed=seed)
    why = absorbed_hopper.supports(ci.q, ci.cache.k_buffer)
    if why is not None:
        pytest.skip(f"the hopper kernel needs {why}")
    plan = plan_absorbed(*ci.args(), kernel="hopper")
    plan.fold()
    fp8 = cache == "fp8"
    for side in ("dots", "gather", "unwidened")[:3 if fp8 else 2]:
        plan.part_lse.fill_(float("nan"))
        absorbed_hopper.launch(plan.q_absorbed, plan.k_buffer, plan.k_scale if fp8 else None,
                               plan.block_ids, plan.part_o, plan.part_lse, plan.context_len,
                               plan.splits, 0.1, parts=side)
        torch.cuda.synchronize()
        # The dots' side writes its LSE (of zero keys), the unwidened kernel its own (of the
        # tiles' raw bytes); the gather's writes nothing.
        assert plan.part_lse.isnan().all() == (side == "gather"), (side, f"seed {seed}")
    plan.out.fill_(float("nan"))
    out, lse = plan.run()
    assert judge(attention_errors(out, lse, ci.reference()), "bf16"), f"seed {seed}"
    rows = measure_point(4096, 40, cache, {}, budget=(1, 5), seed=seed)
    assert [r["parts"] for r in rows] == ["all", "dots", "gather", *(["unwidened"] * fp8)]
    assert all(r["median_us"] > 0 and r["tiles_per_program"] >= 1 for r in rows), rows
