"""Sequence timing: N back-to-back calls, each on its own input set, as a forward pass's
layers make them (graph<N> in one CUDA graph, eager<N> called eagerly), at the matrix's
sequence points; the figures leave those rows out unless asked."""

import math

import pandas as pd
import pytest
import torch

from mla_kernels.lab import bench, matrix
from mla_kernels.lab.measurements import sequence_length
from mla_kernels.lab.timing import Timing
from mla_kernels.review import analysis


def test_the_sequence_points_time_61_calls_for_the_targets():
    points = matrix.points()
    assert "kimi/fp8_row/fp8/p1/8192" in points
    for name, pt in points.items():
        if name in matrix.SEQUENCE_POINTS:
            assert pt.sequence == 61, name
            assert set(pt.sequence_variants) == {"hopper_ws", "auto"} <= set(pt.variants), name
            assert (pt.shape, pt.weight_format, pt.cache_dtype, pt.block_size) == (
                "kimi-k3-tp8", "fp8_row", "fp8", 1), name
        else:
            assert pt.sequence == 0 and pt.sequence_variants == (), name
    assert sorted(points[n].contexts[0] for n in matrix.SEQUENCE_POINTS) == [4096, 8192, 32000]


@pytest.mark.parametrize("timing, n", [("graph61", 61), ("eager61", 61), ("eager2", 2),
                                       ("graph8", 0), ("graph", 0), ("flushed", 0),
                                       ("graphs", 0), ("eager", 0)])
def test_sequence_length_reads_the_timing(timing, n):
    assert sequence_length(timing) == n


def test_time_sequence_calls_each_set_once_in_order_and_scales(monkeypatch):
    # The work measured is one pass over the sets, call i on set i; in a graph it is
    # captured once (the capture wraps the pass), eagerly it is the pass itself.
    log, wrapped = [], []

    def fake_measure(fn, budget):
        log.clear()
        fn()
        return Timing(610.0, 7, 600.0, 620.0)

    def fake_graphed(fn):
        wrapped.append(fn)
        return fn

    monkeypatch.setattr(bench, "measure", fake_measure)
    monkeypatch.setattr(bench, "graphed", fake_graphed)
    sets = [f"set{i}" for i in range(61)]

    def make(inp):
        return lambda: log.append(inp)

    for graph in (True, False):
        wrapped.clear()
        t = bench.time_sequence(sets, make, graph)
        assert log == sets
        assert len(wrapped) == (1 if graph else 0)
        assert (t.median_us, t.reps, t.q1_us, t.q3_us) == pytest.approx((10.0, 7, 600 / 61,
                                                                         620 / 61))


def _rows(timings):
    return pd.DataFrame({"model": "kimi-k3-tp8", "timing": list(timings),
                         "variant": "auto", "median_us": 1.0, "config": "",
                         "weight_draw": "", "out_dtype": "bfloat16"})


def test_figures_leave_the_sequence_rows_out_unless_asked():
    rows = _rows(["flushed", "graph", "graph8", "graph61", "eager61"])
    assert list(analysis.select(rows, timing=None).timing) == ["flushed", "graph", "graph8"]
    assert list(analysis.select(rows, timing=None, sequences=True).timing) == list(rows.timing)
    assert list(analysis.select(rows, timing="eager61").timing) == ["eager61"]
    assert math.isclose(analysis.select(rows, timing="graph61").median_us.iloc[0], 1.0)


@pytest.mark.gpu
def test_run_points_times_a_sequence_on_distinct_sets(seed):
    # On the GPU: a short point with a sequence of 3 gives hopper_ws's graph3 and eager3 rows
    # beside its others, each correct, a time per call, and auto (not asked) none; the sets
    # are distinct draws (a call on one set writes the outputs of none of the others).
    from dataclasses import replace

    import torch

    pt = replace(matrix.point("kimi-k3-tp8", (1024,), "fp8_row", "fp8", 1,
                              ("hopper_ws", "auto")), sequence=3,
                 sequence_variants=("hopper_ws",))
    ceilings = {"copy_tbps": 4.0, "write_tbps": 4.0, "mm_tflops_bf16": 600.0,
                "mm_tflops_fp8": 1000.0}
    rows = bench.run_points([pt], ceilings=ceilings, torch_paths=False, progress=False,
                            seed=seed, budget=lambda _: (1, 5), sm_clock=False)
    got = {(r.variant, r.timing) for r in rows}
    assert {("hopper_ws", "graph3"), ("hopper_ws", "eager3")} <= got, (got, f"seed {seed}")
    assert not any(r.variant == "auto" and sequence_length(r.timing) for r in rows), got
    for r in rows:
        assert r.correct and r.median_us > 0 and r.reps > 0, (r, f"seed {seed}")
    sets = bench.input_sets(pt, 3, seed)
    caches = [s.k_buffer.view(torch.uint8) for s in sets]
    assert not torch.equal(caches[0], caches[1]) and not torch.equal(caches[1], caches[2])


def _bytes(t):
    return None if t is None else t.contiguous().view(-1).view(torch.uint8)


def test_input_sets_draw_on_threads_the_sets_drawn_one_by_one(monkeypatch):
    # A sequence point draws tens of sets, each on the host: they are drawn on several
    # threads, each from its own seed, so every set, and their order, is what one-by-one
    # drawing gives; the sets already drawn come first, untouched.
    import threading

    pt = matrix.point("kimi-k3-tp8", (48,), "fp8_row", "fp8", 1, ("hopper_ws",))
    first = bench.input_sets(pt, 1, 5, device="cpu")
    threads = set()
    build = bench.build_inputs

    def spy(*a, **k):
        threads.add(threading.get_ident())
        return build(*a, **k)

    monkeypatch.setattr(bench, "BUILD_THREADS", 4)
    monkeypatch.setattr(bench, "build_inputs", spy)
    got = bench.input_sets(pt, 9, 5, first, device="cpu")
    assert len(threads) > 1 and threading.get_ident() not in threads
    assert got[0] is first[0] and len(got) == 9
    assert [s.meta["seed"] for s in got] == list(range(5, 14))
    monkeypatch.setattr(bench, "BUILD_THREADS", 1)
    one_by_one = bench.input_sets(pt, 9, 5, device="cpu")
    for a, b in zip(got, one_by_one, strict=True):
        for x, y in zip(a.args(), b.args(), strict=True):
            assert (x is None and y is None) or torch.equal(_bytes(x), _bytes(y))
