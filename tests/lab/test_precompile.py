"""The run's precompile step plans its jobs from the matrix, a report configuration and the
host-cost script (no GPU: the plan, not the compiles)."""

from dataclasses import replace
from pathlib import Path

from mla_kernels.lab import matrix, precompile
from mla_kernels.lab.bench import Point

ROOT = Path(__file__).resolve().parents[2]


def test_every_matrix_point_and_design_is_one_harness_job():
    jobs = precompile.matrix_jobs()
    want = {(name, v) for name, pt in matrix.points().items() for v in pt.variants}
    assert len(jobs) == len(want)
    assert all(j.harness and len(j.point.variants) == 1 for j in jobs)
    assert {(j.point.shape, j.point.contexts, j.point.variants[0]) for j in jobs} \
        == {(p.shape, p.contexts, v) for p in matrix.points().values() for v in p.variants}
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
