"""The run's precompile step plans its jobs from the matrix, a report configuration and the
host-cost script (no GPU: the plan, not the compiles)."""

from dataclasses import replace
from pathlib import Path

import pytest

from mla_kernels.lab import matrix, precompile
from mla_kernels.lab.bench import Point

ROOT = Path(__file__).resolve().parents[2]


def test_every_matrix_point_and_design_is_one_harness_job():
    jobs = precompile.matrix_jobs()
    want = {(name, v) for name, pt in matrix.points().items() for v in pt.variants
            if v != "auto" or not precompile.auto_is_another(pt)}
    assert len(jobs) == len(want)
    assert all(j.harness and len(j.point.variants) == 1 for j in jobs)
    assert {(j.point.shape, j.point.contexts, j.point.variants[0]) for j in jobs} \
        == {(p.shape, p.contexts, v) for p in matrix.points().values() for v in p.variants
            if v != "auto" or not precompile.auto_is_another(p)}
    graph8 = {(j.point.shape, j.point.contexts, j.point.weight_format) for j in jobs
              if j.point.graph8}
    assert graph8 == {(p.shape, p.contexts, p.weight_format)
                      for k, p in matrix.points().items() if k in matrix.GRAPH8_POINTS}
    wide = [j.point for j in jobs if j.point.weight_draw == "wide"]
    assert wide and all(p.weight_format == "mxfp4" for p in wide)


def test_report_jobs_are_the_measuring_notebooks_points(tmp_path: Path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("""
parameters: {shape: kimi-k3-tp8, cache_dtype: fp8, weight_format: fp8_row, block_size: 1,
             batch: single, ragged_contexts: [5, 7], variants: [serial, tiled], mode: measure}
notebooks:
  01_occupancy.ipynb: {contexts: [99]}
  02_context_sweep.ipynb: {contexts: [64, 128], check_contexts: [1], check_ragged: [3, 4]}
  03_roofline.ipynb: {contexts: [128]}
  04_formats.ipynb: {mode: replot, contexts: [4096]}
""")
    jobs = precompile.report_jobs(cfg)
    got = {(j.point.contexts, j.harness) for j in jobs}
    assert got == {((256,), False),  # 01's resource reads
                   ((64,), True), ((128,), True), ((5, 7), True),  # 02's sweep and ragged
                   ((64,), False), ((128,), False), ((1,), False), ((3, 4), False),  # checks
                   }
    assert all(j.point.variants == ("serial", "tiled") for j in jobs)
    assert not any(j.point.contexts == (4096,) for j in jobs)  # 04 replots: nothing to compile
    assert precompile.report_jobs(ROOT / "configs" / "h200.yaml")  # the run's own


def test_schedule_drops_duplicates_and_leaves_auto_to_the_rest():
    def job(ctx, v):
        return precompile.Job(Point("kimi-k3-tp8", (ctx,), "fp8_row", "fp8", 1, (v,)))
    a, b, h, auto = job(64, "tiled"), job(128, "tiled"), job(64, "hopper_ws"), job(64, "auto")
    first, rest = precompile.schedule([a, b, a, auto, h, b])
    assert first == [h, a]  # one job a group, the Gluon design's first
    assert rest == [b, auto]  # the same group again; auto once the rest is compiled


def test_list_prints_the_plan_and_compiles_nothing(capsys):
    assert precompile.main(["--list", "--points", "kimi/fp8_row/fp8/p1/32000", "--host"]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].endswith("jobs") and "hopper_ws" in out


def test_jobs_out_of_gpu_memory_run_again_and_only_they():
    a, b, c = (precompile.Job(matrix.point("kimi-k3-tp8", (n,), "fp8_row", "fp8", 1, ["auto"]))
               for n in (4096, 32000, 109440))
    done = [(a, 1.0, ""), (b, 2.0, "auto: OutOfMemoryError: CUDA out of memory."),
            (c, 3.0, "auto: RuntimeError: Triton Error [CUDA]: out of memory")]
    asked = []

    def again(jobs):
        asked.extend(jobs)
        return [(j, 9.0, "") for j in jobs]
    out, n = precompile.retry_out_of_memory(done, again)
    assert n == 2 and asked == [b, c]
    assert sorted((j.point.contexts, e) for j, _, e in out) == [((4096,), ""), ((32000,), ""),
                                                                  ((109440,), "")]
    assert precompile.retry_out_of_memory([(a, 1.0, "auto: ValueError: x")], again)[1] == 0


def test_jobs_start_while_their_memory_fits_beside_those_in_flight():
    def job(n, graph8=False):
        return precompile.Job(replace(matrix.point("kimi-k3-tp8", (n,), "fp8_row", "fp8", 1,
                                                   ["auto"]), graph8=graph8))
    small, large, huge = job(4096), job(109440), job(262144, graph8=True)
    assert precompile.memory_gib(small) < precompile.memory_gib(large) \
        < precompile.memory_gib(huge)
    g = precompile.memory_gib
    # Slots bound the count; memory the sum: the huge job waits, smaller ones go past it.
    assert precompile.admit([small] * 5, [], 3, 1e9) == [small] * 3
    assert precompile.admit([huge, small], [g(large)], 4, g(large) + g(small) + 0.1) == [small]
    # Nothing in flight: the first starts whatever its estimate.
    assert precompile.admit([huge], [], 2, 1.0) == [huge]
    assert precompile.admit([huge], [g(small)], 2, 1.0) == []


def _job(ctx, v, fmt="fp8_row"):
    return precompile.Job(Point("kimi-k3-tp8", (ctx,), fmt, "fp8", 1, (v,)))


def test_a_group_s_later_jobs_wait_for_its_first_only():
    a1, a2 = _job(64, "tiled"), _job(128, "tiled")
    b1, b2 = _job(64, "hopper_ws"), _job(128, "hopper_ws")
    auto = _job(64, "auto")
    first, rest = [b1, a1], [b2, a2, auto]
    firsts = set(first)
    both = {a1.group(), b1.group()}
    assert precompile.ready(first + rest, firsts, both) == [b1, a1]
    # tiled's first is done, hopper_ws's still compiling: tiled's second may start.
    assert precompile.ready([b1, *rest], firsts, {b1.group()}) == [b1, a2]
    assert precompile.ready(rest, firsts, set()) == rest  # auto once every first is done


def test_jobs_start_as_their_group_s_first_finishes_not_every_group_s(monkeypatch):
    # hopper_ws's first job finishes only after tiled's second has run: behind a barrier
    # after every group's first job, it would wait for ever (here: fail after 20 s).
    import threading
    from concurrent.futures import ThreadPoolExecutor

    a1, a2, b1 = _job(64, "tiled"), _job(128, "tiled"), _job(64, "hopper_ws")
    auto = _job(64, "auto")
    a2_ran, order = threading.Event(), []

    def fake_warm(job):
        if job == b1 and not a2_ran.wait(20):
            raise AssertionError("tiled's second job waited for hopper_ws's first")
        if job == a2:
            a2_ran.set()
        order.append(job)
        return job, 0.0, ""
    monkeypatch.setattr(precompile, "warm", fake_warm)
    first, rest = precompile.schedule([a1, b1, a2, auto])
    with ThreadPoolExecutor(3) as pool:
        done = precompile._run_jobs(pool, first, rest, 3, 1e9, lambda *a, **k: None, 0.0)
    assert {j for j, _, _ in done} == {a1, a2, b1, auto}
    assert order.index(a2) < order.index(b1) < order.index(auto)


def test_the_quantize_job_calls_the_compiled_quantize_as_the_torch_path_does(monkeypatch):
    # The torch path's FP8 outputs: its compiled quantize is called once per matrix point
    # with FP8 outputs, in the matrix's order; the warm-up's arguments carry what torch's
    # guards compare (dtype, shape, strides, offset, view or not), as the torch path's do.
    import torch

    from mla_kernels.core.shapes import get_shape
    from mla_kernels.lab import bench
    from mla_kernels.lab.inputs import build_inputs

    (job,) = precompile.quantize_job()
    fp8 = [(n, p) for n, p in matrix.points().items() if p.out_dtype != "bfloat16"]
    assert job.point.out_dtype != "bfloat16" and job.point.contexts == fp8[0][1].contexts
    want = [(sum(p.contexts), get_shape(p.shape).num_heads, get_shape(p.shape).k_head_dim,
             get_shape(p.shape).v_head_dim) for _, p in fp8]
    assert list(job.quantize) == want and len(set(want)) > 2
    assert precompile.quantize_job(["kimi/fp8_row/fp8/p1/32000"]) == []
    assert job in precompile.schedule(precompile.matrix_jobs() + [job])[0][:1]  # first of all

    seen = []

    def recorder(*args):
        seen.append(tuple((a.dtype, tuple(a.shape), a.stride(), a.storage_offset(),
                           a._base is not None) for a in args))
    monkeypatch.setattr(bench, "quantize_outputs", lambda: recorder)
    inp = build_inputs("kimi-k3-tp8", [40], device="cpu", spare_indices=0, spare_rows=0,
                       spare_blocks=0, out_dtype=torch.float8_e4m3fn)
    bench.torch_path(inp, "bf16")()
    s = get_shape("kimi-k3-tp8")
    precompile.warm_quantize([(40, s.num_heads, s.k_head_dim, s.v_head_dim)], device="cpu")
    assert len(seen) == 2 and seen[0] == seen[1]


def test_the_precompile_plans_the_quantize_job_with_the_matrix():
    jobs = precompile.schedule(precompile.matrix_jobs() + precompile.quantize_job())[0]
    assert jobs[0].quantize
    assert precompile.memory_gib(jobs[0]) < 4.0


SEQUENCE_KEYS = r"""
import json
from mla_kernels.core.devices import DEVICES
from mla_kernels.designs import resolve
from mla_kernels.lab import bench, compile_check, matrix
from mla_kernels.lab.occupancy import problem_for

dev = DEVICES["H200"]
for name in matrix.SEQUENCE_POINTS:
    pt = matrix.points()[name]
    prob = problem_for(pt.shape, pt.contexts, pt.cache_dtype, pt.weight_format, pt.block_size)
    sets = bench.input_sets(pt, 3, 0, device="cpu")  # the base set, then two layers'
    for v in pt.sequence_variants:
        design, cfg = resolve(v, prob, dev, None)
        keys = [compile_check.launch_keys(
            lambda i=i: design.launch(prob, i.args(), None, cfg, dev), dev) for i in sets]
        print(json.dumps({"point": name, "variant": v, "keys": keys}))
"""


@pytest.mark.slow
def test_a_sequence_s_sets_launch_the_kernels_of_the_point_s_own():
    # The precompile leaves a sequence's 61 input sets out (``warm``): sound only while a
    # call on any of them launches the kernels, with the specialisations, of the point's
    # base set, which the precompile's harness job compiles. Keys bound as a launch binds
    # them, for sm_90 with no GPU, in a child process with the interpreter off.
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("triton.backends.nvidia.compiler")
    env = dict(os.environ, TRITON_INTERPRET="0")
    out = subprocess.run([sys.executable, "-c", SEQUENCE_KEYS], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert {(r["point"], r["variant"]) for r in rows} == {
        (n, v) for n in matrix.SEQUENCE_POINTS for v in matrix.points()[n].sequence_variants}
    for r in rows:
        base, *layers = r["keys"]
        assert base and all(k == base for k in layers), (r["point"], r["variant"])


def test_each_matrix_launch_has_the_precompile_job_of_its_own_point():
    # The whole point (format, cache, page, weight draw, outputs, graph8) and design, not
    # its shape and contexts alone: a job of another point compiles other specialisations.
    jobs = {(j.point, j.point.variants, j.point.graph8) for j in precompile.matrix_jobs()}
    for name, pt in matrix.points().items():
        for v in pt.variants:
            if v == "auto" and precompile.auto_is_another(pt):
                continue  # the design it resolves to has the job (below)
            want = replace(pt, variants=(v,))
            assert (want, (v,), pt.graph8) in jobs, (name, v)


def test_auto_s_job_is_left_out_only_where_another_variant_launches_the_same():
    from mla_kernels.core.devices import DEVICES
    from mla_kernels.designs import resolve
    from mla_kernels.lab.occupancy import problem_for

    dev = DEVICES["H200"]
    left_out = 0
    for name, pt in matrix.points().items():
        prob = problem_for(pt.shape, pt.contexts, pt.cache_dtype, pt.weight_format,
                           pt.block_size, pt.out_torch_dtype)
        auto = resolve("auto", prob, dev, None)
        same = [v for v in pt.variants if v != "auto" and resolve(v, prob, dev, None) == auto]
        assert precompile.auto_is_another(pt, dev) == bool(same), name
        left_out += bool(same)
    assert 0 < left_out < len(matrix.points())  # some points' auto runs a tuned config
    # A config of auto's own is not the design's default: its job stays.
    pt = matrix.points()["kimi/mxfp4/fp8/p1/4096"]
    assert precompile.auto_is_another(pt, dev)
    cfg = resolve("auto", problem_for(pt.shape, pt.contexts, pt.cache_dtype,
                                      pt.weight_format, pt.block_size), dev, None)[1]
    other = replace(pt, configs={"auto": replace(cfg, ring_depth=cfg.ring_depth - 1)}) \
        if hasattr(cfg, "ring_depth") else None
    if other is not None:
        assert not precompile.auto_is_another(other, dev)
    # FP8 outputs: the torch path's quantize too, at every such point's shape.
    (q,) = precompile.quantize_job()
    assert len(q.quantize) == sum(p.out_dtype != "bfloat16" for p in matrix.points().values())
